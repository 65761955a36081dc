//! The status of a MachineSet, computed from the machines it owns (`docs/machine-lifecycle.md`.
//!
//! - `replicas` counts every owned machine, terminating ones included;
//! - `fullyLabeledReplicas` those whose labels include the template's;
//! - `readyReplicas` phase Running; `availableReplicas` phase Available or Running (`minReadySeconds` plays no
//!   part, as in MCM);
//! - `failedMachines` summarises machines whose last operation failed, except preserved failed machines, which
//!   are counted in `preservedFailedReplicas` instead (they lower the MachineDeployment's availability bar);
//! - `autoPreserveFailedMachineCount` counts machines annotated `auto-preserved`;
//! - condition `ReplicaFailure` appears when creating or deleting machines failed and goes when a pass succeeds.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::mcm::names::{PRESERVE, PRESERVE_AUTO};
use crate::api::mcm::{
    ConditionStatus, LastOperation, Machine, MachinePhase, MachineSet, MachineSetCondition, MachineSetConditionType,
    MachineSetStatus, MachineState, MachineSummary,
};
use crate::lifecycle::object_meta::{annotation, labels_match};

/// Which kind of machine operation of the replica plan failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedOperation {
    /// Creating machines failed (reason `FailedCreate`).
    Create,
    /// Deleting machines failed (reason `FailedDelete`).
    Delete,
}

impl FailedOperation {
    /// The condition reason.
    pub fn reason(self) -> &'static str {
        match self {
            FailedOperation::Create => "FailedCreate",
            FailedOperation::Delete => "FailedDelete",
        }
    }
}

/// A failure of the last replica plan, reported in condition `ReplicaFailure`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaFailure {
    /// What failed.
    pub operation: FailedOperation,
    /// The error, as a sentence.
    pub message: String,
}

/// Computes the status of `set` from the machines it owns. `failure` is the outcome of this pass's replica plan.
pub fn machine_set_status(
    set: &MachineSet,
    machines: &[Machine],
    failure: Option<&ReplicaFailure>,
    now: Timestamp,
) -> MachineSetStatus {
    let old = set.status.clone().unwrap_or_default();
    let template_labels = set.spec.template.as_ref().and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.as_ref());
    let mut status = MachineSetStatus { observed_generation: set.metadata.generation, ..old.clone() };
    let (mut fully_labeled, mut ready, mut available, mut preserved_failed, mut auto_preserved) = (0, 0, 0, 0, 0);
    let mut failed = Vec::new();
    for m in machines {
        let current = m.status.as_ref().and_then(|s| s.current_status.as_ref());
        let phase = current.and_then(|c| c.phase.as_ref());
        if labels_match(template_labels, m.metadata.labels.as_ref()) {
            fully_labeled += 1;
        }
        if matches!(phase, Some(MachinePhase::Available | MachinePhase::Running)) {
            available += 1;
        }
        if phase == Some(&MachinePhase::Running) {
            ready += 1;
        }
        let preserved = current.and_then(|c| c.preserve_expiry_time.as_ref()).is_some_and(|t| t.0 > now);
        let last_op = m.status.as_ref().and_then(|s| s.last_operation.as_ref());
        if phase == Some(&MachinePhase::Failed) && preserved {
            preserved_failed += 1;
        } else if last_op.and_then(|o| o.state.as_ref()) == Some(&MachineState::Failed) {
            failed.push(MachineSummary {
                name: m.metadata.name.clone(),
                provider_id: m.spec.provider_id.clone(),
                last_operation: last_op.cloned(),
                owner_ref: m
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|o| o.controller == Some(true))
                    .map(|o| o.name.clone()),
            });
        }
        if annotation(&m.metadata, PRESERVE) == Some(PRESERVE_AUTO) {
            auto_preserved += 1;
        }
    }
    status.replicas = i32::try_from(machines.len()).unwrap_or(i32::MAX);
    status.fully_labeled_replicas = fully_labeled;
    status.ready_replicas = ready;
    status.available_replicas = available;
    status.preserved_failed_replicas = preserved_failed;
    status.auto_preserve_failed_machine_count = auto_preserved;
    status.failed_machines = (!failed.is_empty()).then_some(failed);
    status.last_operation =
        Some(LastOperation { last_update_time: Some(Time(now)), ..old.last_operation.clone().unwrap_or_default() });

    let mut conditions = old.machine_set_condition.clone().unwrap_or_default();
    let has_failure = conditions.iter().any(|c| c.type_ == MachineSetConditionType::ReplicaFailure);
    match failure {
        // As MCM: an existing ReplicaFailure condition is kept as it is while failures go on.
        Some(f) if !has_failure => conditions.push(MachineSetCondition {
            type_: MachineSetConditionType::ReplicaFailure,
            status: ConditionStatus::True,
            last_transition_time: Some(Time(now)),
            reason: Some(f.operation.reason().to_string()),
            message: Some(f.message.clone()),
        }),
        None if has_failure => conditions.retain(|c| c.type_ != MachineSetConditionType::ReplicaFailure),
        _ => {}
    }
    status.machine_set_condition = (!conditions.is_empty()).then_some(conditions);
    status
}

/// Whether `new` must be written: a count, a condition or the failed machines changed, or the generation has
/// not been observed yet. `lastOperation.lastUpdateTime` alone never causes a write.
pub fn status_update_required(set: &MachineSet, new: &MachineSetStatus) -> bool {
    let old = set.status.clone().unwrap_or_default();
    old.replicas != new.replicas
        || old.fully_labeled_replicas != new.fully_labeled_replicas
        || old.ready_replicas != new.ready_replicas
        || old.available_replicas != new.available_replicas
        || old.observed_generation != set.metadata.generation
        || old.machine_set_condition.unwrap_or_default() != new.machine_set_condition.clone().unwrap_or_default()
        || old.failed_machines.unwrap_or_default() != new.failed_machines.clone().unwrap_or_default()
        || old.auto_preserve_failed_machine_count != new.auto_preserve_failed_machine_count
        || old.preserved_failed_replicas != new.preserved_failed_replicas
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;
    use crate::api::mcm::{CurrentStatus, MachineSetSpec, MachineStatus, MachineTemplateSpec};

    const NOW: &str = "2026-03-01T12:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    fn set(replicas: i32, generation: i64) -> MachineSet {
        let mut s = MachineSet::new(
            "ms",
            MachineSetSpec {
                replicas,
                template: Some(MachineTemplateSpec {
                    metadata: Some(ObjectMeta { labels: labels(&[("name", "pool")]), ..Default::default() }),
                    spec: None,
                }),
                ..Default::default()
            },
        );
        s.metadata.generation = Some(generation);
        s
    }

    struct M {
        name: &'static str,
        phase: Option<MachinePhase>,
        labelled: bool,
        failed_op: bool,
        preserved: Option<&'static str>,
        auto: bool,
    }

    fn m(name: &'static str, phase: Option<MachinePhase>) -> M {
        M { name, phase, labelled: true, failed_op: false, preserved: None, auto: false }
    }

    impl M {
        fn unlabelled(mut self) -> Self {
            self.labelled = false;
            self
        }
        fn failed_op(mut self) -> Self {
            self.failed_op = true;
            self
        }
        fn preserved_until(mut self, t: &'static str) -> Self {
            self.preserved = Some(t);
            self
        }
        fn auto(mut self) -> Self {
            self.auto = true;
            self
        }
        fn build(&self) -> Machine {
            let mut machine = Machine::new(self.name, Default::default());
            machine.metadata.labels = if self.labelled { labels(&[("name", "pool")]) } else { labels(&[]) };
            if self.auto {
                machine.metadata.annotations = labels(&[(PRESERVE, PRESERVE_AUTO)]);
            }
            machine.metadata.owner_references =
                Some(vec![OwnerReference { name: "ms".into(), controller: Some(true), ..Default::default() }]);
            machine.spec.provider_id = Some(format!("cloud://{}", self.name));
            machine.status = Some(MachineStatus {
                current_status: Some(CurrentStatus {
                    phase: self.phase.clone(),
                    preserve_expiry_time: self.preserved.map(|t| Time(t.parse().unwrap())),
                    ..Default::default()
                }),
                last_operation: self.failed_op.then(|| LastOperation {
                    description: Some("boom".into()),
                    state: Some(MachineState::Failed),
                    ..Default::default()
                }),
                ..Default::default()
            });
            machine
        }
    }

    /// (replicas, fullyLabeled, ready, available, preservedFailed, autoPreserved, failed machine names)
    type Counts = (i32, i32, i32, i32, i32, i32, Vec<&'static str>);

    #[test]
    fn status_counts_table() {
        use MachinePhase::*;
        let future = "2026-03-02T00:00:00Z";
        let past = "2026-03-01T00:00:00Z";
        let cases: Vec<(&str, Vec<M>, Counts)> = vec![
            ("no machines", vec![], (0, 0, 0, 0, 0, 0, vec![])),
            (
                "running is ready and available, available only available",
                vec![m("a", Some(Running)), m("b", Some(Available)), m("c", Some(Pending))],
                (3, 3, 1, 2, 0, 0, vec![]),
            ),
            (
                "terminating machines count in replicas only",
                vec![m("a", Some(Running)), m("t", Some(Terminating))],
                (2, 2, 1, 1, 0, 0, vec![]),
            ),
            (
                "machines without the template labels are not fully labelled",
                vec![m("a", Some(Running)), m("b", Some(Running)).unlabelled()],
                (2, 1, 2, 2, 0, 0, vec![]),
            ),
            (
                "a failed last operation is summarised",
                vec![m("f", Some(Failed)).failed_op(), m("c", Some(CrashLoopBackOff)).failed_op()],
                (2, 2, 0, 0, 0, 0, vec!["f", "c"]),
            ),
            (
                "phase Failed with a successful last operation is not summarised",
                vec![m("f", Some(Failed))],
                (1, 1, 0, 0, 0, 0, vec![]),
            ),
            (
                "a preserved failed machine is counted, not summarised",
                vec![m("f", Some(Failed)).failed_op().preserved_until(future).auto()],
                (1, 1, 0, 0, 1, 1, vec![]),
            ),
            (
                "an expired preservation is no preservation",
                vec![m("f", Some(Failed)).failed_op().preserved_until(past)],
                (1, 1, 0, 0, 0, 0, vec!["f"]),
            ),
            (
                "a preserved running machine counts as running",
                vec![m("r", Some(Running)).preserved_until(future)],
                (1, 1, 1, 1, 0, 0, vec![]),
            ),
            (
                "the auto-preserved annotation counts even before preservation took effect",
                vec![m("f", Some(Failed)).failed_op().auto()],
                (1, 1, 0, 0, 0, 1, vec!["f"]),
            ),
        ];
        for (name, machines, expected) in cases {
            let machines: Vec<Machine> = machines.iter().map(M::build).collect();
            let s = machine_set_status(&set(3, 1), &machines, None, now());
            let failed: Vec<&str> =
                s.failed_machines.iter().flatten().map(|f| f.name.as_deref().unwrap_or_default()).collect();
            let got = (
                s.replicas,
                s.fully_labeled_replicas,
                s.ready_replicas,
                s.available_replicas,
                s.preserved_failed_replicas,
                s.auto_preserve_failed_machine_count,
                failed,
            );
            assert_eq!(got, expected, "{name}");
            assert_eq!(s.observed_generation, Some(1), "{name}");
        }
    }

    #[test]
    fn failed_machine_summary_fields() {
        let machines = [m("f", Some(MachinePhase::Failed)).failed_op().build()];
        let s = machine_set_status(&set(1, 1), &machines, None, now());
        let summary = &s.failed_machines.unwrap()[0];
        assert_eq!(summary.owner_ref.as_deref(), Some("ms"));
        assert_eq!(summary.provider_id.as_deref(), Some("cloud://f"));
        assert_eq!(summary.last_operation.as_ref().and_then(|o| o.description.as_deref()), Some("boom"));
    }

    fn condition(reason: &str, message: &str) -> MachineSetCondition {
        MachineSetCondition {
            type_: MachineSetConditionType::ReplicaFailure,
            status: ConditionStatus::True,
            last_transition_time: Some(Time("2026-03-01T11:00:00Z".parse().unwrap())),
            reason: Some(reason.into()),
            message: Some(message.into()),
        }
    }

    #[test]
    fn replica_failure_condition_table() {
        let create_failed = ReplicaFailure { operation: FailedOperation::Create, message: "quota".into() };
        let delete_failed = ReplicaFailure { operation: FailedOperation::Delete, message: "conflict".into() };
        type Row<'a> = (&'a str, Option<MachineSetCondition>, Option<&'a ReplicaFailure>, Option<(&'a str, &'a str)>);
        let cases: Vec<Row> = vec![
            ("no failure, no condition", None, None, None),
            ("a create failure adds FailedCreate", None, Some(&create_failed), Some(("FailedCreate", "quota"))),
            ("a delete failure adds FailedDelete", None, Some(&delete_failed), Some(("FailedDelete", "conflict"))),
            ("success removes the condition", Some(condition("FailedCreate", "quota")), None, None),
            (
                "an existing condition is kept while failures go on",
                Some(condition("FailedCreate", "quota")),
                Some(&delete_failed),
                Some(("FailedCreate", "quota")),
            ),
        ];
        for (name, existing, failure, expected) in cases {
            let mut s = set(1, 1);
            s.status =
                Some(MachineSetStatus { machine_set_condition: existing.map(|c| vec![c]), ..Default::default() });
            let status = machine_set_status(&s, &[], failure, now());
            let got = status.machine_set_condition.as_ref().and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == MachineSetConditionType::ReplicaFailure)
                    .map(|c| (c.reason.as_deref().unwrap_or_default(), c.message.as_deref().unwrap_or_default()))
            });
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn the_frozen_condition_is_left_alone() {
        let mut s = set(1, 1);
        let frozen = MachineSetCondition {
            type_: MachineSetConditionType::Frozen,
            status: ConditionStatus::True,
            last_transition_time: None,
            reason: Some("OverShootingReplicaCount".into()),
            message: None,
        };
        s.status = Some(MachineSetStatus { machine_set_condition: Some(vec![frozen.clone()]), ..Default::default() });
        let status = machine_set_status(&s, &[], None, now());
        assert_eq!(status.machine_set_condition, Some(vec![frozen]));
    }

    #[test]
    fn update_required_table() {
        let machines = [m("a", Some(MachinePhase::Running)).build()];
        let base = set(1, 2);
        let current = machine_set_status(&base, &machines, None, now());
        let mut observed = base.clone();
        observed.status = Some(current.clone());

        let later: Timestamp = "2026-03-01T13:00:00Z".parse().unwrap();
        let cases: Vec<(&str, MachineSet, Vec<Machine>, bool)> = vec![
            ("nothing changed, only the clock moved", observed.clone(), machines.to_vec(), false),
            ("a machine more", observed.clone(), vec![machines[0].clone(), m("b", None).build()], true),
            (
                "a new generation",
                {
                    let mut s = observed.clone();
                    s.metadata.generation = Some(3);
                    s
                },
                machines.to_vec(),
                true,
            ),
            ("never written", base.clone(), machines.to_vec(), true),
        ];
        for (name, s, ms, expected) in cases {
            let new = machine_set_status(&s, &ms, None, later);
            assert_eq!(status_update_required(&s, &new), expected, "{name}");
        }
    }
}
