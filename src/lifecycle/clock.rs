//! Small, saturating time arithmetic on `jiff::Timestamp` (what `metav1.Time` holds) and std durations.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// `until - since`, zero when `until` is not later.
pub fn between(since: Timestamp, until: Timestamp) -> Duration {
    let d: SignedDuration = until.duration_since(since);
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}

/// `at + d`, saturating at the end of jiff's range.
pub fn plus(at: Timestamp, d: Duration) -> Timestamp {
    at.checked_add(d).unwrap_or(Timestamp::MAX)
}

/// How long from `now` until `deadline` (zero once it has passed).
pub fn until(now: Timestamp, deadline: Timestamp) -> Duration {
    between(now, deadline)
}

/// The earliest of two optional deadlines.
pub fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// A Go-style duration text (`3m20s`), as MCM prints durations in descriptions and annotations.
pub fn go(d: Duration) -> String {
    crate::api::Duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn arithmetic_saturates() {
        let (a, b) = (t("2025-01-01T00:00:00Z"), t("2025-01-01T00:01:30Z"));
        assert_eq!(between(a, b), Duration::from_secs(90));
        assert_eq!(between(b, a), Duration::ZERO);
        assert_eq!(plus(a, Duration::from_secs(90)), b);
        assert_eq!(plus(a, Duration::from_secs(u64::MAX)), Timestamp::MAX);
        assert_eq!(until(b, a), Duration::ZERO);
        assert_eq!(earliest(Some(a), Some(b)), Some(a));
        assert_eq!(earliest(None, Some(b)), Some(b));
        assert_eq!(earliest(None, None), None);
        assert_eq!(go(Duration::from_millis(200_500)), "3m20.5s");
    }
}
