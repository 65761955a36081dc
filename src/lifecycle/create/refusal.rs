//! A class the cloud refuses: one back-off for the class instead of one per machine.
//!
//! `InvalidArgument` from `create_machine` says the request itself is wrong (the class's provider spec, its
//! credentials), so every machine of that class would fail the same way. MCM retries each machine every 3 minutes
//! in CrashLoopBackOff until its creation timeout, then the MachineSet replaces it and the next one starts over.
//! Here the first refusal marks the class (a Warning event on it); while the mark's back-off runs, no machine of
//! the class asks the cloud to create: each waits in CrashLoopBackOff with the class's error, until the creation
//! timeout as in MCM. The back-off doubles per refusal; a changed class or changed credentials make a new
//! fingerprint, tried at once.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use jiff::Timestamp;

use super::failure_phase;
use crate::api::mcm::{Machine, MachineOperationType, MachineState};
use crate::lifecycle::clock;
use crate::lifecycle::config::Effective;
use crate::lifecycle::names::text;
use crate::lifecycle::requeue::until_past;
use crate::lifecycle::retry::Backoff;
use crate::lifecycle::status::{self, EventSpec, StatusPatch};
use crate::providers::contract::{ClassInfo, Code, DriverError, SecretData};

/// What a class's creates depend on: its namespace and name, provider, provider spec and node template, and the
/// credentials (the per-machine `userData` left out). Kept in memory only; a hash, so no secret is held twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint(u64);

/// The fingerprint of `class` in `namespace` with `secret`.
pub fn fingerprint(namespace: &str, class: &ClassInfo, secret: &SecretData) -> Fingerprint {
    let mut h = DefaultHasher::new();
    namespace.hash(&mut h);
    class.name.hash(&mut h);
    class.provider.hash(&mut h);
    class.provider_spec.to_string().hash(&mut h);
    serde_json::to_string(&class.node_template).unwrap_or_default().hash(&mut h);
    for (key, value) in secret.0.iter().filter(|(k, _)| k.as_str() != "userData") {
        key.hash(&mut h);
        value.hash(&mut h);
    }
    Fingerprint(h.finish())
}

/// Whether `error` from `create_machine` refuses the class rather than this one machine.
pub fn refuses_class(error: &DriverError) -> bool {
    error.code == Code::InvalidArgument
}

/// A class the cloud refused: the last refusal, how many in a row, and until when no machine of it tries again.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The cloud's answer.
    pub error: DriverError,
    /// Refusals in a row (1 for the first).
    pub count: u32,
    /// No create of the class before then.
    pub until: Timestamp,
}

impl Refusal {
    /// The mark after the cloud refused the class again at `now` (`previous`: the mark so far), backing off by
    /// `backoff`.
    pub fn after(previous: Option<&Refusal>, error: &DriverError, now: Timestamp, backoff: &Backoff) -> Refusal {
        let count = previous.map_or(0, |p| p.count).saturating_add(1);
        Refusal { error: error.clone(), count, until: clock::plus(now, backoff.delay(count - 1)) }
    }

    /// How long the mark still holds creates back at `now` (`None`: the class may be tried).
    pub fn holds(&self, now: Timestamp) -> Option<Duration> {
        (now < self.until).then(|| until_past(now, self.until))
    }
}

/// The status of a machine held back by its class's mark: the class's error in MCM's "Cloud provider message"
/// form and why no call was made, CrashLoopBackOff until the creation timeout, then Failed.
pub fn held_status(
    machine: &Machine,
    refusal: &Refusal,
    class: &str,
    now: Timestamp,
    effective: &Effective,
) -> StatusPatch {
    let description = format!(
        "{}{} (class {class} was refused {} time(s); not tried again before {})",
        text::CLOUD_PROVIDER_MESSAGE,
        refusal.error.machine_codes(),
        refusal.count,
        refusal.until,
    );
    let op = status::operation(
        MachineOperationType::Create,
        MachineState::Failed,
        description,
        Some(refusal.error.code.as_str()),
        now,
    );
    StatusPatch::phase(failure_phase(machine, now, effective), op, now)
}

/// The Warning event on the class when the cloud first refuses it: the cloud's message names the field.
pub fn class_event(refusal: &Refusal, kind: &str, machine: &str) -> EventSpec {
    EventSpec::warning(
        "InvalidClass",
        format!(
            "the cloud refused {kind} {machine} of this class: {}; its machines wait (CrashLoopBackOff) \
             and are tried again after a back-off or once the class or its credentials change",
            refusal.error
        ),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::mcm::MachinePhase;

    fn t(s: &str) -> Timestamp {
        format!("2025-01-01T{s}Z").parse().unwrap()
    }

    fn class(spec: serde_json::Value) -> ClassInfo {
        ClassInfo { name: "small".into(), provider: "AWS".into(), provider_spec: spec, node_template: None }
    }

    fn secret(pairs: &[(&str, &str)]) -> SecretData {
        SecretData(pairs.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect())
    }

    #[test]
    fn a_fingerprint_changes_with_the_class_and_its_credentials_but_not_the_user_data() {
        let base = fingerprint("ns", &class(json!({"ami": "a"})), &secret(&[("key", "1"), ("userData", "x")]));
        let cases = [
            (
                "other user data",
                fingerprint("ns", &class(json!({"ami": "a"})), &secret(&[("key", "1"), ("userData", "y")])),
                true,
            ),
            (
                "other spec",
                fingerprint("ns", &class(json!({"ami": "b"})), &secret(&[("key", "1"), ("userData", "x")])),
                false,
            ),
            (
                "other credentials",
                fingerprint("ns", &class(json!({"ami": "a"})), &secret(&[("key", "2"), ("userData", "x")])),
                false,
            ),
            (
                "other namespace",
                fingerprint("other", &class(json!({"ami": "a"})), &secret(&[("key", "1"), ("userData", "x")])),
                false,
            ),
        ];
        for (name, fp, same) in cases {
            assert_eq!(fp == base, same, "{name}");
        }
    }

    #[test]
    fn only_invalid_argument_refuses_the_class() {
        let cases = [
            (Code::InvalidArgument, true),
            (Code::ResourceExhausted, false),
            (Code::Unavailable, false),
            (Code::Internal, false),
            (Code::PermissionDenied, false),
        ];
        for (code, want) in cases {
            assert_eq!(refuses_class(&DriverError::new(code, "x")), want, "{code:?}");
        }
    }

    #[test]
    fn refusals_back_off_doubling_to_the_cap() {
        let backoff = Backoff::new(Duration::from_secs(15), Duration::from_secs(60));
        let error = DriverError::new(Code::InvalidArgument, "providerSpec.ami: not found");
        let first = Refusal::after(None, &error, t("00:00:00"), &backoff);
        assert_eq!((first.count, first.until), (1, t("00:00:15")));
        let second = Refusal::after(Some(&first), &error, t("00:00:15"), &backoff);
        assert_eq!((second.count, second.until), (2, t("00:00:45")));
        let third = Refusal::after(Some(&second), &error, t("00:00:45"), &backoff);
        assert_eq!((third.count, third.until), (3, t("00:01:45")));
        let fourth = Refusal::after(Some(&third), &error, t("00:01:45"), &backoff);
        assert_eq!(fourth.until, t("00:02:45"), "capped at a minute");
        assert!(first.holds(t("00:00:10")).is_some_and(|d| d >= Duration::from_secs(5)));
        assert_eq!(first.holds(t("00:00:15")), None);
    }

    #[test]
    fn a_held_machine_waits_in_crash_loop_until_its_creation_timeout() {
        let effective =
            Effective::of(&Machine::new("x", Default::default()), &crate::lifecycle::MachineConfig::default());
        let refusal = Refusal {
            error: DriverError::new(Code::InvalidArgument, "providerSpec.ami: not found"),
            count: 2,
            until: t("00:01:00"),
        };
        let mut machine = Machine::new("m1", Default::default());
        machine.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t("00:00:00")));
        let early = held_status(&machine, &refusal, "small", t("00:00:30"), &effective);
        assert_eq!(early.new_phase(), Some(&MachinePhase::CrashLoopBackOff));
        let op = early.last_operation.as_ref().unwrap();
        let description = op.description.as_deref().unwrap();
        assert!(description.starts_with("Cloud provider message - "), "{description}");
        assert!(description.contains("providerSpec.ami"), "{description}");
        assert_eq!(op.error_code.as_deref(), Some("InvalidArgument"));
        let late = held_status(
            &machine,
            &refusal,
            "small",
            clock::plus(t("00:00:00"), effective.creation_timeout),
            &effective,
        );
        assert_eq!(late.new_phase(), Some(&MachinePhase::Failed));
    }
}
