//! When a machine flow looks at its object again: the outcome of a pass of the create or the deletion flow
//! (`lifecycle::create::next`, `lifecycle::delete::next`), turned into a kube-runtime requeue by
//! `controllers::requeue`.

use std::time::Duration;

use jiff::Timestamp;

use super::clock;
use super::retry::RetryClass;

/// A little past a deadline, so the reconcile at it sees the deadline passed (status times have second precision).
pub const DEADLINE_SLACK: Duration = Duration::from_millis(50);

/// When to look at the object again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// All done for now; at this deadline (or the resync period).
    Wake(Option<Timestamp>),
    /// A step failed; retry it after the back-off of `class`, but no later than `deadline`.
    Retry {
        /// The failure's class.
        class: RetryClass,
        /// A deadline the retry must not pass (a timeout that decides instead).
        deadline: Option<Timestamp>,
    },
    /// Still backing off from an earlier failure: look again after this long (the retry count stays).
    Sleep(Duration),
    /// Waiting for something else (the class, a replacement budget): look again after the back-off of `class`,
    /// counted apart from the flow's own failures, so the flow runs at once when the wait is over.
    Poll(RetryClass),
    /// The object is gone or going; nothing to requeue.
    Done,
}

/// How long from `now` until just past `deadline`.
pub fn until_past(now: Timestamp, deadline: Timestamp) -> Duration {
    clock::until(now, deadline) + DEADLINE_SLACK
}

/// A back-off of `wait` that does not run past `deadline` (a timeout that decides instead).
pub fn sleep_until(now: Timestamp, wait: Duration, deadline: Option<Timestamp>) -> Next {
    Next::Sleep(deadline.map_or(wait, |d| until_past(now, d).min(wait)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        format!("2025-01-01T{s}Z").parse().unwrap()
    }

    #[test]
    fn a_back_off_stops_at_the_deadline() {
        let cases = [
            ("no deadline", None, Duration::from_secs(30)),
            ("deadline later", Some(t("00:10:00")), Duration::from_secs(30)),
            ("deadline sooner", Some(t("00:00:05")), Duration::from_millis(5050)),
        ];
        for (name, deadline, want) in cases {
            assert_eq!(sleep_until(t("00:00:00"), Duration::from_secs(30), deadline), Next::Sleep(want), "{name}");
        }
    }
}
