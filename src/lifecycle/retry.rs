//! How long to wait before trying again: MCM's per-code reactions (`docs/machine-lifecycle.md`), with capped exponential
//! back-off per machine instead of MCM's fixed 5 s / 3 m / 10 m periods.
//!
//! MCM retries a cloud that answers `Unavailable` every 5 s for as long as the outage lasts, and a quota error every
//! 10 minutes even when the quota frees up a second later. Here every class starts short and doubles up to a cap;
//! the attempt count is kept per machine by the controller and reset once a reconcile succeeds.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

use crate::providers::contract::Code;

/// How a failure is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetryClass {
    /// The cloud or API server is briefly unavailable (`Unknown`, `DeadlineExceeded`, `Aborted`, `Unavailable`;
    /// MCM: 5 s).
    Transient,
    /// Quota or capacity exhausted (`ResourceExhausted`; MCM: `--resource-exhausted-retry`, 10 m).
    Exhausted,
    /// Anything else (`Internal`, `InvalidArgument`, ...; MCM: 3 m on create, 10 m on delete).
    Other,
    /// A Kubernetes API call failed (conflict, server error, dropped connection).
    Api,
}

impl RetryClass {
    /// The class of a driver error code.
    pub fn of(code: Code) -> RetryClass {
        match code {
            Code::Unknown | Code::DeadlineExceeded | Code::Aborted | Code::Unavailable => RetryClass::Transient,
            Code::ResourceExhausted => RetryClass::Exhausted,
            _ => RetryClass::Other,
        }
    }
}

/// A capped exponential back-off: `first`, then doubling, never above `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub first: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Backoff {
    /// A back-off from `first` up to `max` (a `first` above `max` is lowered to it).
    pub const fn new(first: Duration, max: Duration) -> Self {
        Backoff { first, max }
    }

    /// The delay before retry number `attempt` (0 is the first retry).
    pub fn delay(&self, attempt: u32) -> Duration {
        let first = self.first.min(self.max);
        // No jitter: decisions stay reproducible, and the per-machine counters already spread machines apart.
        ExponentialBuilder::new()
            .with_min_delay(first)
            .with_max_delay(self.max)
            .with_factor(2.0)
            .without_max_times()
            .build()
            // Past 40 doublings every delay above a nanosecond has reached its cap; this bounds the iteration.
            .nth(attempt.min(40) as usize)
            .unwrap_or(self.max)
    }
}

/// The back-off of each [`RetryClass`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// [`RetryClass::Transient`]: 5 s doubling to 5 m.
    pub transient: Backoff,
    /// [`RetryClass::Exhausted`]: 1 m doubling to `--resource-exhausted-retry` (10 m).
    pub exhausted: Backoff,
    /// [`RetryClass::Other`]: 15 s doubling to 10 m.
    pub other: Backoff,
    /// [`RetryClass::Api`]: 200 ms (MCM's ConflictRetry) doubling to 1 m.
    pub api: Backoff,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            transient: Backoff::new(Duration::from_secs(5), Duration::from_secs(300)),
            exhausted: Backoff::new(Duration::from_secs(60), Duration::from_secs(600)),
            other: Backoff::new(Duration::from_secs(15), Duration::from_secs(600)),
            api: Backoff::new(Duration::from_millis(200), Duration::from_secs(60)),
        }
    }
}

impl RetryPolicy {
    /// Every class scaled to `first`..`max` (tests use millisecond back-offs).
    pub fn uniform(first: Duration, max: Duration) -> Self {
        let b = Backoff::new(first, max);
        RetryPolicy { transient: b, exhausted: b, other: b, api: b }
    }

    /// The back-off of `class`.
    pub fn backoff(&self, class: RetryClass) -> Backoff {
        match class {
            RetryClass::Transient => self.transient,
            RetryClass::Exhausted => self.exhausted,
            RetryClass::Other => self.other,
            RetryClass::Api => self.api,
        }
    }

    /// The delay before retry number `attempt` of a failure of `class`.
    pub fn delay(&self, class: RetryClass, attempt: u32) -> Duration {
        self.backoff(class).delay(attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn codes_map_to_mcm_classes() {
        let cases = [
            (Code::Unknown, RetryClass::Transient),
            (Code::DeadlineExceeded, RetryClass::Transient),
            (Code::Aborted, RetryClass::Transient),
            (Code::Unavailable, RetryClass::Transient),
            (Code::ResourceExhausted, RetryClass::Exhausted),
            (Code::InvalidArgument, RetryClass::Other),
            (Code::Internal, RetryClass::Other),
            (Code::NotFound, RetryClass::Other),
        ];
        for (code, class) in cases {
            assert_eq!(RetryClass::of(code), class, "{code}");
        }
    }

    #[test]
    fn delays_double_up_to_the_cap() {
        let policy = RetryPolicy::default();
        let cases = [
            ("transient first", RetryClass::Transient, 0, s(5)),
            ("transient second", RetryClass::Transient, 1, s(10)),
            ("transient fourth", RetryClass::Transient, 3, s(40)),
            ("transient capped", RetryClass::Transient, 20, s(300)),
            ("exhausted first", RetryClass::Exhausted, 0, s(60)),
            ("exhausted capped", RetryClass::Exhausted, 4, s(600)),
            ("other first", RetryClass::Other, 0, s(15)),
            ("other third", RetryClass::Other, 2, s(60)),
            ("api first", RetryClass::Api, 0, Duration::from_millis(200)),
            ("huge attempt", RetryClass::Api, u32::MAX, s(60)),
        ];
        for (name, class, attempt, want) in cases {
            assert_eq!(policy.delay(class, attempt), want, "{name}");
        }
    }

    #[test]
    fn first_above_max_is_lowered() {
        assert_eq!(Backoff::new(s(30), s(10)).delay(0), s(10));
        assert_eq!(Backoff::new(s(30), s(10)).delay(3), s(10));
    }
}
