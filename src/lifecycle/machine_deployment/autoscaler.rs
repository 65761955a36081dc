//! The cluster-autoscaler contract of MCM (`docs/machine-lifecycle.md` item 5).
//!
//! The autoscaler scales a MachineDeployment down by choosing machines: in one update of the deployment it
//! lowers `spec.replicas`, appends `<machine>~<RFC3339 time>` to `node.machine.sapcloud.io/trigger-deletion-by-mcm`
//! and sets `machine.sapcloud.io/last-deployment-replica-change-by-scaler-time`. The deployment controller then
//! - upgrades legacy entries (a bare machine name) to `name~<that timestamp>`;
//! - gives each named machine `machinepriority.machine.sapcloud.io=1` and, if it has none, the entry's time as
//!   `machine.sapcloud.io/marked-for-deletion-time`;
//! - prunes entries whose machine is gone, Failed or being deleted, and malformed entries.
//!
//! The MachineSet then deletes priority-1 machines marked no later than its copy of the timestamp, even when its
//! replica count already matches (MCM #1078). The autoscaler refuses a scale-down while a rollout is in progress,
//! which is why the `Progressing` reasons are part of the contract ([`rollout_finished`]).
//!
//! MCM looks the named machines up in the whole namespace; we only honour machines of this deployment, so an
//! entry naming another deployment's machine cannot reorder that deployment's deletions.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::nodes::DeploymentMachine;
use super::status::{DEPLOYMENT_PAUSED, NEW_MACHINE_SET_AVAILABLE};
use crate::api::mcm::names::{LAST_REPLICA_CHANGE_BY_SCALER, TRIGGER_DELETION_BY_MCM};
use crate::api::mcm::{ConditionStatus, MachineDeploymentCondition, MachineDeploymentConditionType, MachinePhase};
use crate::lifecycle::object_meta::{format_rfc3339, parse_rfc3339};

/// One entry of [`TRIGGER_DELETION_BY_MCM`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerEntry {
    /// The machine name.
    pub machine: String,
    /// When the autoscaler chose it (RFC 3339, as written).
    pub time: String,
}

/// Parses the annotation value. Legacy entries without `~` get `legacy_time`; entries with more than one `~`
/// or an empty name are dropped.
pub fn parse_trigger_deletion(value: &str, legacy_time: &str) -> Vec<TriggerEntry> {
    value
        .split(',')
        .filter_map(|entry| {
            let mut parts = entry.split('~');
            let machine = parts.next()?.to_string();
            let time = parts.next().unwrap_or(legacy_time).to_string();
            (parts.next().is_none() && !machine.is_empty()).then_some(TriggerEntry { machine, time })
        })
        .collect()
}

/// Formats entries back into the annotation value.
pub fn format_trigger_deletion(entries: &[TriggerEntry]) -> String {
    entries.iter().map(|e| format!("{}~{}", e.machine, e.time)).collect::<Vec<_>>().join(",")
}

/// Annotations to write on one machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineMark {
    /// The machine.
    pub machine: String,
    /// Set `machinepriority.machine.sapcloud.io` to `1`.
    pub priority_one: bool,
    /// Set `machine.sapcloud.io/marked-for-deletion-time` to this (only when the machine has none).
    pub marked_for_deletion_time: Option<String>,
}

/// What the deployment controller does about the autoscaler's annotation in one pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AutoscalerPlan {
    /// Deployment annotations to set (`Some`) or remove (`None`).
    pub annotations: BTreeMap<String, Option<String>>,
    /// Machines to mark.
    pub marks: Vec<MachineMark>,
}

/// Plans the deployment's side of the contract from its annotations and its machines.
pub fn plan_autoscaler_marks(
    annotations: &BTreeMap<String, String>,
    machines: &[DeploymentMachine],
    now: Timestamp,
) -> AutoscalerPlan {
    let mut plan = AutoscalerPlan::default();
    let Some(value) = annotations.get(TRIGGER_DELETION_BY_MCM).filter(|v| !v.is_empty()) else {
        return plan;
    };
    let cut_off = match annotations.get(LAST_REPLICA_CHANGE_BY_SCALER).filter(|v| !v.is_empty()) {
        Some(t) => t.clone(),
        None => {
            // The autoscaler always sets it; if an old one did not, the legacy entries are dated now.
            let t = format_rfc3339(now);
            plan.annotations.insert(LAST_REPLICA_CHANGE_BY_SCALER.into(), Some(t.clone()));
            t
        }
    };
    let mut kept = Vec::new();
    for entry in parse_trigger_deletion(value, &cut_off) {
        if parse_rfc3339(&entry.time).is_none() {
            continue;
        }
        let Some(machine) = machines.iter().find(|m| m.name == entry.machine) else {
            continue;
        };
        if machine.deleting || matches!(machine.phase, Some(MachinePhase::Failed | MachinePhase::Terminating)) {
            continue;
        }
        let has_mark = machine.marked_for_deletion_time.as_deref().is_some_and(|t| !t.is_empty());
        if machine.priority.as_deref() != Some("1") || !has_mark {
            plan.marks.push(MachineMark {
                machine: machine.name.clone(),
                priority_one: machine.priority.as_deref() != Some("1"),
                marked_for_deletion_time: (!has_mark).then(|| entry.time.clone()),
            });
        }
        kept.push(entry);
    }
    let new_value = format_trigger_deletion(&kept);
    if &new_value != value {
        plan.annotations.insert(TRIGGER_DELETION_BY_MCM.into(), (!new_value.is_empty()).then_some(new_value));
    }
    plan
}

/// Whether the rollout is finished as the autoscaler judges it: `Progressing` is True/`NewMachineSetAvailable`
/// or Unknown/`DeploymentPaused`. The autoscaler refuses to scale a deployment down otherwise.
pub fn rollout_finished(conditions: &[MachineDeploymentCondition]) -> bool {
    conditions.iter().any(|c| {
        c.type_ == MachineDeploymentConditionType::Progressing
            && match (&c.status, c.reason.as_deref()) {
                (ConditionStatus::True, Some(r)) => r == NEW_MACHINE_SET_AVAILABLE,
                (ConditionStatus::Unknown, Some(r)) => r == DEPLOYMENT_PAUSED,
                _ => false,
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::machine_deployment::status::{MACHINE_SET_UPDATED, PROGRESS_DEADLINE_EXCEEDED};
    use crate::lifecycle::machine_deployment::test_support::{map, now};

    const T1: &str = "2026-03-01T11:00:00Z";
    const T2: &str = "2026-03-01T11:30:00Z";

    fn machine(name: &str) -> DeploymentMachine {
        DeploymentMachine {
            name: name.into(),
            set: Some("s".into()),
            phase: Some(MachinePhase::Running),
            priority: Some("3".into()),
            ..Default::default()
        }
    }

    #[test]
    fn parse_table() {
        let e = |m: &str, t: &str| TriggerEntry { machine: m.into(), time: t.into() };
        let cases: Vec<(&str, &str, Vec<TriggerEntry>)> = vec![
            ("empty", "", vec![]),
            ("one", "m1~T", vec![e("m1", "T")]),
            ("two", "m1~T,m2~U", vec![e("m1", "T"), e("m2", "U")]),
            ("legacy names get the cut-off", "m1,m2~U", vec![e("m1", "L"), e("m2", "U")]),
            ("malformed and empty entries are dropped", "m1~T~X,,~T,m2", vec![e("m2", "L")]),
        ];
        for (name, value, expected) in cases {
            assert_eq!(parse_trigger_deletion(value, "L"), expected, "{name}");
        }
        assert_eq!(format_trigger_deletion(&[e("a", "1"), e("b", "2")]), "a~1,b~2");
    }

    /// (name, annotations, machines, expected annotation changes, expected marks (machine, priority, time))
    type Row = (
        &'static str,
        Vec<(&'static str, &'static str)>,
        Vec<DeploymentMachine>,
        Vec<(&'static str, Option<String>)>,
        Vec<(&'static str, bool, Option<&'static str>)>,
    );

    #[test]
    fn marks_table() {
        let failed = DeploymentMachine { phase: Some(MachinePhase::Failed), ..machine("f") };
        let terminating = DeploymentMachine { phase: Some(MachinePhase::Terminating), ..machine("t") };
        let deleting = DeploymentMachine { deleting: true, ..machine("d") };
        let marked = DeploymentMachine {
            priority: Some("1".into()),
            marked_for_deletion_time: Some(T1.into()),
            ..machine("done")
        };
        let priority_only = DeploymentMachine { priority: Some("1".into()), ..machine("p1") };
        let time_only = DeploymentMachine { marked_for_deletion_time: Some(T1.into()), ..machine("t1") };
        let trigger = |v: &str| (TRIGGER_DELETION_BY_MCM, Some(v.to_string()));
        let cases: Vec<Row> = vec![
            ("no annotation: nothing", vec![], vec![machine("a")], vec![], vec![]),
            ("empty annotation: nothing", vec![(TRIGGER_DELETION_BY_MCM, "")], vec![machine("a")], vec![], vec![]),
            (
                "a named machine is marked with the entry's time",
                vec![(TRIGGER_DELETION_BY_MCM, "a~2026-03-01T11:00:00Z"), (LAST_REPLICA_CHANGE_BY_SCALER, T2)],
                vec![machine("a"), machine("b")],
                vec![],
                vec![("a", true, Some(T1))],
            ),
            (
                "already marked: nothing to write",
                vec![(TRIGGER_DELETION_BY_MCM, "done~2026-03-01T11:30:00Z"), (LAST_REPLICA_CHANGE_BY_SCALER, T2)],
                vec![marked.clone()],
                vec![],
                vec![],
            ),
            (
                "priority 1 without a time: the time is added",
                vec![(TRIGGER_DELETION_BY_MCM, "p1~2026-03-01T11:30:00Z"), (LAST_REPLICA_CHANGE_BY_SCALER, T2)],
                vec![priority_only],
                vec![],
                vec![("p1", false, Some(T2))],
            ),
            (
                "an existing time is kept, priority set",
                vec![(TRIGGER_DELETION_BY_MCM, "t1~2026-03-01T11:30:00Z"), (LAST_REPLICA_CHANGE_BY_SCALER, T2)],
                vec![time_only],
                vec![],
                vec![("t1", true, None)],
            ),
            (
                "legacy entries are upgraded with the cut-off",
                vec![(TRIGGER_DELETION_BY_MCM, "a"), (LAST_REPLICA_CHANGE_BY_SCALER, T1)],
                vec![machine("a")],
                vec![trigger("a~2026-03-01T11:00:00Z")],
                vec![("a", true, Some(T1))],
            ),
            (
                "legacy entries without a cut-off: the cut-off is set to now",
                vec![(TRIGGER_DELETION_BY_MCM, "a")],
                vec![machine("a")],
                vec![
                    (LAST_REPLICA_CHANGE_BY_SCALER, Some("2026-03-01T12:00:00Z".into())),
                    trigger("a~2026-03-01T12:00:00Z"),
                ],
                vec![("a", true, Some("2026-03-01T12:00:00Z"))],
            ),
            (
                "gone, failed, terminating and deleting machines are pruned",
                vec![
                    (
                        TRIGGER_DELETION_BY_MCM,
                        "gone~2026-03-01T11:00:00Z,f~2026-03-01T11:00:00Z,t~2026-03-01T11:00:00Z,d~2026-03-01T11:00:00Z,a~2026-03-01T11:00:00Z",
                    ),
                    (LAST_REPLICA_CHANGE_BY_SCALER, T2),
                ],
                vec![failed, terminating, deleting, machine("a")],
                vec![trigger("a~2026-03-01T11:00:00Z")],
                vec![("a", true, Some(T1))],
            ),
            (
                "an invalid time is pruned",
                vec![(TRIGGER_DELETION_BY_MCM, "a~yesterday"), (LAST_REPLICA_CHANGE_BY_SCALER, T2)],
                vec![machine("a")],
                vec![(TRIGGER_DELETION_BY_MCM, None)],
                vec![],
            ),
            (
                "everything pruned: the annotation goes",
                vec![(TRIGGER_DELETION_BY_MCM, "gone~2026-03-01T11:00:00Z"), (LAST_REPLICA_CHANGE_BY_SCALER, T2)],
                vec![machine("a")],
                vec![(TRIGGER_DELETION_BY_MCM, None)],
                vec![],
            ),
            (
                "a machine of another deployment is not honoured",
                vec![(TRIGGER_DELETION_BY_MCM, "elsewhere~2026-03-01T11:00:00Z"), (LAST_REPLICA_CHANGE_BY_SCALER, T2)],
                vec![machine("a")],
                vec![(TRIGGER_DELETION_BY_MCM, None)],
                vec![],
            ),
        ];
        for (name, annotations, machines, expected_annotations, expected_marks) in cases {
            let plan = plan_autoscaler_marks(&map(&annotations), &machines, now());
            let expected_annotations: BTreeMap<String, Option<String>> =
                expected_annotations.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            assert_eq!(plan.annotations, expected_annotations, "{name}");
            let marks: Vec<(&str, bool, Option<&str>)> = plan
                .marks
                .iter()
                .map(|m| (m.machine.as_str(), m.priority_one, m.marked_for_deletion_time.as_deref()))
                .collect();
            assert_eq!(marks, expected_marks, "{name}");
        }
    }

    #[test]
    fn rollout_finished_table() {
        let c = |status: ConditionStatus, reason: &str| MachineDeploymentCondition {
            type_: MachineDeploymentConditionType::Progressing,
            status,
            last_update_time: None,
            last_transition_time: None,
            reason: Some(reason.into()),
            message: None,
        };
        let cases = [
            ("no condition", vec![], false),
            ("complete", vec![c(ConditionStatus::True, NEW_MACHINE_SET_AVAILABLE)], true),
            ("paused", vec![c(ConditionStatus::Unknown, DEPLOYMENT_PAUSED)], true),
            ("progressing", vec![c(ConditionStatus::True, MACHINE_SET_UPDATED)], false),
            ("timed out", vec![c(ConditionStatus::False, PROGRESS_DEADLINE_EXCEEDED)], false),
            ("resumed", vec![c(ConditionStatus::Unknown, "DeploymentResumed")], false),
            (
                "the right reason with the wrong status",
                vec![c(ConditionStatus::False, NEW_MACHINE_SET_AVAILABLE)],
                false,
            ),
            (
                "another condition type does not count",
                vec![MachineDeploymentCondition {
                    type_: MachineDeploymentConditionType::Available,
                    ..c(ConditionStatus::True, NEW_MACHINE_SET_AVAILABLE)
                }],
                false,
            ),
        ];
        for (name, conditions, expected) in cases {
            assert_eq!(rollout_finished(&conditions), expected, "{name}");
        }
    }
}
