//! The classes the cloud refused (`lifecycle::create::refusal`), kept by the machine controllers: one mark per
//! class fingerprint, shared by every machine of the class, so a broken class costs one create call per back-off,
//! not one per machine.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use jiff::Timestamp;

use crate::lifecycle::create::refusal::{Fingerprint, Refusal};
use crate::lifecycle::requeue::until_past;
use crate::lifecycle::{Backoff, clock};
use crate::providers::DriverError;

/// Marks older than this past their back-off are forgotten (a class edited again and again leaves no trail).
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// When a mark's back-off runs out, one machine asks the cloud again; the others wait this long for its answer.
const PROBE_LEASE: Duration = Duration::from_secs(60);

/// A refused class's mark, and until when one machine's create is asking the cloud again.
struct Mark {
    refusal: Refusal,
    probing_until: Option<Timestamp>,
}

/// The marks of refused classes.
#[derive(Default)]
pub(crate) struct ClassRefusals {
    marks: Mutex<HashMap<Fingerprint, Mark>>,
}

impl ClassRefusals {
    /// The marks (a panic elsewhere while they were held leaves them usable: each update is one insert or remove).
    fn marks(&self) -> MutexGuard<'_, HashMap<Fingerprint, Mark>> {
        self.marks.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The mark of `class` if it holds this machine's create back at `now`, and for how long. Once the back-off
    /// has run out, the first machine to ask may try (it probes for the class); the others wait for its answer.
    pub(crate) fn holding(&self, class: Fingerprint, now: Timestamp) -> Option<(Refusal, Duration)> {
        let mut marks = self.marks();
        let mark = marks.get_mut(&class)?;
        if let Some(wait) = mark.refusal.holds(now) {
            return Some((mark.refusal.clone(), wait));
        }
        match mark.probing_until {
            Some(until) if now < until => Some((mark.refusal.clone(), until_past(now, until))),
            _ => {
                mark.probing_until = Some(clock::plus(now, PROBE_LEASE));
                None
            }
        }
    }

    /// The cloud refused `class` at `now`: the mark, its back-off, and whether the class was not marked before
    /// (the moment to tell the class's owner). Refusals of creates already under way while the mark holds do not
    /// lengthen the back-off.
    pub(crate) fn refused(
        &self,
        class: Fingerprint,
        error: &DriverError,
        now: Timestamp,
        backoff: &Backoff,
    ) -> (Refusal, Duration, bool) {
        let mut marks = self.marks();
        marks.retain(|_, m| clock::plus(m.refusal.until, FORGET_AFTER) > now);
        let previous = marks.get(&class).map(|m| &m.refusal);
        let first = previous.is_none();
        let refusal = match previous {
            Some(p) if p.holds(now).is_some() => p.clone(),
            _ => Refusal::after(previous, error, now, backoff),
        };
        marks.insert(class, Mark { refusal: refusal.clone(), probing_until: None });
        let wait = refusal.holds(now).unwrap_or_default();
        (refusal, wait, first)
    }

    /// The cloud accepted a create of `class`: the mark goes.
    pub(crate) fn accepted(&self, class: Fingerprint) {
        self.marks().remove(&class);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::create::refusal::fingerprint;
    use crate::providers::contract::{ClassInfo, Code, SecretData};

    fn t(s: &str) -> Timestamp {
        format!("2025-01-01T{s}Z").parse().unwrap()
    }

    fn class(name: &str) -> Fingerprint {
        let info = ClassInfo { name: name.into(), ..ClassInfo::default() };
        fingerprint("ns", &info, &SecretData::default())
    }

    #[test]
    fn a_mark_holds_every_machine_of_the_class_until_its_back_off_runs_out() {
        let book = ClassRefusals::default();
        let backoff = Backoff::new(Duration::from_secs(15), Duration::from_secs(600));
        let error = DriverError::new(Code::InvalidArgument, "providerSpec.ami: not found");
        assert!(book.holding(class("a"), t("00:00:00")).is_none());
        let (_, wait, first) = book.refused(class("a"), &error, t("00:00:00"), &backoff);
        assert!(first && wait >= Duration::from_secs(15));
        assert!(book.holding(class("a"), t("00:00:10")).is_some());
        assert!(book.holding(class("b"), t("00:00:10")).is_none(), "another class is not held");
        let (_, again, _) = book.refused(class("a"), &error, t("00:00:05"), &backoff);
        assert!(again < Duration::from_secs(12), "a create under way when the class was marked does not lengthen it");
        assert!(book.holding(class("a"), t("00:00:16")).is_none(), "the back-off ran out: one machine tries");
        let (_, wait) = book.holding(class("a"), t("00:00:17")).expect("the others wait for its answer");
        assert!(wait >= Duration::from_secs(59), "{wait:?}");
        let (mark, _, first) = book.refused(class("a"), &error, t("00:00:18"), &backoff);
        assert!(!first, "told once");
        assert_eq!(mark.count, 2);
        book.accepted(class("a"));
        let (mark, _, first) = book.refused(class("a"), &error, t("00:01:00"), &backoff);
        assert!(first && mark.count == 1, "accepted in between: a new mark");
    }

    #[test]
    fn old_marks_are_forgotten() {
        let book = ClassRefusals::default();
        let backoff = Backoff::new(Duration::from_secs(15), Duration::from_secs(600));
        let error = DriverError::new(Code::InvalidArgument, "x");
        book.refused(class("a"), &error, t("00:00:00"), &backoff);
        book.refused(class("b"), &error, t("02:00:00"), &backoff);
        assert_eq!(book.marks().len(), 1);
    }
}
