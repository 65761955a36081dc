//! Meltdown protection (`docs/machine-lifecycle.md` `canMarkMachineFailed`): an Unknown machine is marked Failed (and
//! so replaced by its MachineSet) only while fewer than `--max-replacements` machines of its MachineDeployment
//! (label `name`) are being replaced. "Being replaced" means any phase but Running and Unknown; Terminating
//! machines count twice (the MachineSet may not have created their replacement yet); preserved machines do not
//! count. Machines without the `name` label are not limited (MCM's effective behaviour: its selector `name=`
//! matches nothing).

use jiff::Timestamp;

use super::status;
use crate::api::mcm::names::DEPLOYMENT_LABEL;
use crate::api::mcm::{Machine, MachinePhase};

/// The MachineDeployment a machine belongs to (its `name` label), if any.
pub fn deployment(machine: &Machine) -> Option<&str> {
    machine.metadata.labels.as_ref()?.get(DEPLOYMENT_LABEL).map(String::as_str).filter(|n| !n.is_empty())
}

fn preserved(machine: &Machine, now: Timestamp) -> bool {
    machine
        .status
        .as_ref()
        .and_then(|s| s.current_status.as_ref())
        .and_then(|c| c.preserve_expiry_time.as_ref())
        .is_some_and(|t| t.0 > now)
}

/// How many of `machines` (those of one MachineDeployment) count as being replaced.
pub fn in_progress<'a>(machines: impl IntoIterator<Item = &'a Machine>, now: Timestamp) -> u32 {
    machines
        .into_iter()
        .filter(|m| !preserved(m, now))
        .map(|m| match status::phase(m) {
            Some(MachinePhase::Running | MachinePhase::Unknown) => 0,
            Some(MachinePhase::Terminating) => 2,
            _ => 1,
        })
        .sum()
}

/// Whether another machine may be marked Failed.
pub fn may_mark_failed(in_progress: u32, max_replacements: u32) -> bool {
    in_progress < max_replacements
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::mcm::MachineStatus;

    fn t(s: &str) -> Timestamp {
        format!("2025-01-01T{s}Z").parse().unwrap()
    }

    fn machine(phase: Option<MachinePhase>, preserved_until: Option<&str>) -> Machine {
        let mut m = Machine::new("m", Default::default());
        let mut current = phase.map(|p| status::entering(p, t("00:00:00"))).unwrap_or_default();
        current.preserve_expiry_time = preserved_until.map(|s| Time(t(s)));
        m.status = Some(MachineStatus { current_status: Some(current), ..Default::default() });
        m
    }

    #[test]
    fn counting() {
        use MachinePhase::*;
        let now = t("01:00:00");
        let cases = [
            ("all healthy", vec![machine(Some(Running), None), machine(Some(Unknown), None)], 0, true),
            ("one pending", vec![machine(Some(Running), None), machine(Some(Pending), None)], 1, false),
            ("terminating twice", vec![machine(Some(Terminating), None)], 2, false),
            ("new machine", vec![machine(None, None)], 1, false),
            ("failed but preserved", vec![machine(Some(Failed), Some("02:00:00"))], 0, true),
            ("failed, preservation over", vec![machine(Some(Failed), Some("00:30:00"))], 1, false),
        ];
        for (name, machines, count, allowed) in cases {
            let got = in_progress(&machines, now);
            assert_eq!((got, may_mark_failed(got, 1)), (count, allowed), "{name}");
        }
        assert!(may_mark_failed(2, 3));
    }
}
