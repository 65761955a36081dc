//! What decisions write into `Machine.status`, in MCM's shapes, and the events that go with it.
//!
//! A [`StatusPatch`] names the fields a decision owns; [`StatusPatch::minimize`] drops those that would not change
//! (timestamps aside), so a reconcile that changes nothing writes nothing.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value, json};

use crate::api::mcm::{
    CurrentStatus, LastOperation, Machine, MachineOperationType, MachinePhase, MachineState, MachineStatus,
};

/// The phase of a machine (`None`: being created).
pub fn phase(machine: &Machine) -> Option<&MachinePhase> {
    machine.status.as_ref()?.current_status.as_ref()?.phase.as_ref()
}

/// The last operation of a machine.
pub fn last_operation(machine: &Machine) -> Option<&LastOperation> {
    machine.status.as_ref()?.last_operation.as_ref()
}

/// The description of the last operation ("" when none).
pub fn description(machine: &Machine) -> &str {
    last_operation(machine).and_then(|o| o.description.as_deref()).unwrap_or("")
}

/// The node conditions copied into the machine status.
pub fn conditions(machine: &Machine) -> &[NodeCondition] {
    machine.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or(&[])
}

/// A `lastOperation` as MCM writes it.
pub fn operation(
    type_: MachineOperationType,
    state: MachineState,
    description: impl Into<String>,
    error_code: Option<&str>,
    now: Timestamp,
) -> LastOperation {
    LastOperation {
        description: Some(description.into()),
        error_code: error_code.map(str::to_string),
        last_update_time: Some(Time(now)),
        state: Some(state),
        type_: Some(type_),
    }
}

/// A `currentStatus` entering `phase` now (`timeoutActive` is set only for Pending, as MCM does).
pub fn entering(phase: MachinePhase, now: Timestamp) -> CurrentStatus {
    CurrentStatus {
        timeout_active: phase == MachinePhase::Pending,
        phase: Some(phase),
        last_update_time: Some(Time(now)),
        preserve_expiry_time: None,
    }
}

/// The status fields a decision writes; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusPatch {
    /// `currentStatus` (phase, timeoutActive, lastUpdateTime; `preserveExpiryTime` is never touched).
    pub current_status: Option<CurrentStatus>,
    /// `lastOperation`, written whole.
    pub last_operation: Option<LastOperation>,
    /// `conditions`, copied from the Node.
    pub conditions: Option<Vec<NodeCondition>>,
    /// `lastKnownState`, from the driver.
    pub last_known_state: Option<String>,
    /// `addresses` (no target cluster only).
    pub addresses: Option<Vec<NodeAddress>>,
}

impl StatusPatch {
    /// A phase change with its operation.
    pub fn phase(phase: MachinePhase, op: LastOperation, now: Timestamp) -> Self {
        StatusPatch { current_status: Some(entering(phase, now)), last_operation: Some(op), ..Default::default() }
    }

    /// Only a new `lastOperation` (the deletion steps leave `currentStatus` alone, so its clock keeps running).
    pub fn operation(op: LastOperation) -> Self {
        StatusPatch { last_operation: Some(op), ..Default::default() }
    }

    /// Whether it writes nothing.
    pub fn is_empty(&self) -> bool {
        self.current_status.is_none()
            && self.last_operation.is_none()
            && self.conditions.is_none()
            && self.last_known_state.is_none()
            && self.addresses.is_none()
    }

    /// The phase it sets, if any.
    pub fn new_phase(&self) -> Option<&MachinePhase> {
        self.current_status.as_ref()?.phase.as_ref()
    }

    /// `other`'s fields on top of these.
    pub fn and(mut self, other: StatusPatch) -> Self {
        self.current_status = other.current_status.or(self.current_status);
        self.last_operation = other.last_operation.or(self.last_operation);
        self.conditions = other.conditions.or(self.conditions);
        self.last_known_state = other.last_known_state.or(self.last_known_state);
        self.addresses = other.addresses.or(self.addresses);
        self
    }

    /// Drops the fields `status` already has (timestamps are not compared): what is left is what changes.
    pub fn minimize(mut self, status: Option<&MachineStatus>) -> Self {
        let empty = MachineStatus::default();
        let status = status.unwrap_or(&empty);
        if let (Some(new), Some(old)) = (&self.current_status, &status.current_status)
            && new.phase == old.phase
            && new.timeout_active == old.timeout_active
        {
            self.current_status = None;
        }
        if let (Some(new), Some(old)) = (&self.last_operation, &status.last_operation)
            && same_operation(new, old)
        {
            self.last_operation = None;
        }
        if self.conditions.is_some() && self.conditions == status.conditions {
            self.conditions = None;
        }
        if self.last_known_state.is_some() && self.last_known_state == status.last_known_state {
            self.last_known_state = None;
        }
        if self.addresses.is_some() && self.addresses == status.addresses {
            self.addresses = None;
        }
        self
    }

    /// `machine` with this patch applied to its status.
    pub fn applied(&self, machine: &Machine) -> Machine {
        let mut next = machine.clone();
        self.apply_to(next.status.get_or_insert_with(Default::default));
        next
    }

    /// Writes the patch into `status` (to decide the next step without waiting for the watch).
    pub fn apply_to(&self, status: &mut MachineStatus) {
        if let Some(new) = &self.current_status {
            let keep = status.current_status.as_ref().and_then(|c| c.preserve_expiry_time.clone());
            status.current_status = Some(CurrentStatus { preserve_expiry_time: keep, ..new.clone() });
        }
        if let Some(op) = &self.last_operation {
            status.last_operation = Some(op.clone());
        }
        if let Some(c) = &self.conditions {
            status.conditions = Some(c.clone());
        }
        if let Some(s) = &self.last_known_state {
            status.last_known_state = Some(s.clone());
        }
        if let Some(a) = &self.addresses {
            status.addresses = Some(a.clone());
        }
    }

    /// The JSON merge patch for the status subresource. `currentStatus` and `lastOperation` are written whole
    /// (absent fields as `null`, so a stale `errorCode` or `timeoutActive` goes), except `preserveExpiryTime`.
    pub fn to_merge_patch(&self) -> Value {
        let mut status = Map::new();
        if let Some(c) = &self.current_status {
            status.insert(
                "currentStatus".into(),
                json!({
                    "phase": c.phase,
                    "timeoutActive": if c.timeout_active { Some(true) } else { None },
                    "lastUpdateTime": c.last_update_time,
                }),
            );
        }
        if let Some(op) = &self.last_operation {
            status.insert(
                "lastOperation".into(),
                json!({
                    "description": op.description,
                    "errorCode": op.error_code,
                    "lastUpdateTime": op.last_update_time,
                    "state": op.state,
                    "type": op.type_,
                }),
            );
        }
        if let Some(c) = &self.conditions {
            status.insert("conditions".into(), json!(c));
        }
        if let Some(s) = &self.last_known_state {
            status.insert("lastKnownState".into(), json!(s));
        }
        if let Some(a) = &self.addresses {
            status.insert("addresses".into(), json!(a));
        }
        json!({ "status": status })
    }
}

/// Whether two operations say the same (times aside).
pub fn same_operation(a: &LastOperation, b: &LastOperation) -> bool {
    a.description == b.description && a.error_code == b.error_code && a.state == b.state && a.type_ == b.type_
}

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Normal.
    Normal,
    /// Warning.
    Warning,
}

/// An event to record on the Machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// Normal or Warning.
    pub severity: Severity,
    /// CamelCase reason.
    pub reason: &'static str,
    /// A sentence for the user.
    pub note: String,
}

impl EventSpec {
    /// A Normal event.
    pub fn normal(reason: &'static str, note: impl Into<String>) -> Self {
        EventSpec { severity: Severity::Normal, reason, note: note.into() }
    }

    /// A Warning event.
    pub fn warning(reason: &'static str, note: impl Into<String>) -> Self {
        EventSpec { severity: Severity::Warning, reason, note: note.into() }
    }
}

/// The event for a phase change (reason: the new phase; Warning for Unknown, Failed and CrashLoopBackOff), or
/// `None` when the phase does not change. Pending and Terminating have none: the same pass always publishes a
/// more telling event (the created or adopted VM; the drain, the VM's deletion or why either failed), and an
/// event costs a request per machine.
pub fn phase_event(old: Option<&MachinePhase>, patch: &StatusPatch) -> Option<EventSpec> {
    let new = patch.new_phase()?;
    if old == Some(new) || matches!(new, MachinePhase::Pending | MachinePhase::Terminating) {
        return None;
    }
    let note = patch
        .last_operation
        .as_ref()
        .and_then(|op| op.description.clone())
        .unwrap_or_else(|| format!("Phase changed to {new}"));
    let reason = match new {
        MachinePhase::Pending => "Pending",
        MachinePhase::Available => "Available",
        MachinePhase::Running => "Running",
        MachinePhase::Terminating => "Terminating",
        MachinePhase::Unknown => "Unknown",
        MachinePhase::Failed => "Failed",
        MachinePhase::CrashLoopBackOff => "CrashLoopBackOff",
        _ => "PhaseChanged",
    };
    let warning = matches!(new, MachinePhase::Unknown | MachinePhase::Failed | MachinePhase::CrashLoopBackOff);
    Some(if warning { EventSpec::warning(reason, note) } else { EventSpec::normal(reason, note) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2025-01-01T00:00:00Z".parse().unwrap()
    }

    fn op(description: &str, code: Option<&str>) -> LastOperation {
        operation(MachineOperationType::Create, MachineState::Failed, description, code, now())
    }

    fn status(phase: MachinePhase, op: LastOperation) -> MachineStatus {
        MachineStatus { current_status: Some(entering(phase, now())), last_operation: Some(op), ..Default::default() }
    }

    #[test]
    fn minimize_keeps_only_changes() {
        let later: Timestamp = "2025-01-01T00:05:00Z".parse().unwrap();
        let current = status(MachinePhase::CrashLoopBackOff, op("Cloud provider message - x", Some("Internal")));
        let cases = [
            (
                "same phase and operation, later times",
                StatusPatch::phase(
                    MachinePhase::CrashLoopBackOff,
                    op("Cloud provider message - x", Some("Internal")),
                    later,
                ),
                StatusPatch::default(),
            ),
            (
                "new description",
                StatusPatch::phase(
                    MachinePhase::CrashLoopBackOff,
                    op("Cloud provider message - y", Some("Internal")),
                    later,
                ),
                StatusPatch::operation(op("Cloud provider message - y", Some("Internal"))),
            ),
            (
                "new phase",
                StatusPatch::phase(MachinePhase::Failed, op("Cloud provider message - x", Some("Internal")), later),
                StatusPatch { current_status: Some(entering(MachinePhase::Failed, later)), ..Default::default() },
            ),
        ];
        for (name, patch, want) in cases {
            let mut got = patch.minimize(Some(&current));
            // Times of kept fields are the patch's own.
            if let Some(op) = got.last_operation.as_mut() {
                op.last_update_time = Some(Time(now()));
            }
            assert_eq!(got, want, "{name}");
        }
        let fresh = StatusPatch::phase(MachinePhase::Pending, op("a", None), now());
        assert_eq!(fresh.clone().minimize(None), fresh);
    }

    #[test]
    fn merge_patch_writes_whole_objects_with_nulls() {
        let patch = StatusPatch::phase(
            MachinePhase::Running,
            operation(MachineOperationType::Create, MachineState::Successful, "joined", None, now()),
            now(),
        );
        assert_eq!(
            patch.to_merge_patch(),
            json!({"status": {
                "currentStatus": {"phase": "Running", "timeoutActive": null, "lastUpdateTime": "2025-01-01T00:00:00Z"},
                "lastOperation": {
                    "description": "joined", "errorCode": null, "lastUpdateTime": "2025-01-01T00:00:00Z",
                    "state": "Successful", "type": "Create"
                }
            }})
        );
        let pending = StatusPatch::phase(MachinePhase::Pending, op("c", None), now()).to_merge_patch();
        assert_eq!(pending["status"]["currentStatus"]["timeoutActive"], json!(true));
        assert_eq!(StatusPatch::default().to_merge_patch(), json!({"status": {}}));
    }

    #[test]
    fn apply_to_keeps_preserve_expiry() {
        let mut s = status(MachinePhase::Running, op("a", None));
        s.current_status.as_mut().unwrap().preserve_expiry_time = Some(Time(now()));
        StatusPatch::phase(MachinePhase::Terminating, op("b", None), now()).apply_to(&mut s);
        let c = s.current_status.unwrap();
        assert_eq!(c.phase, Some(MachinePhase::Terminating));
        assert!(c.preserve_expiry_time.is_some());
        assert_eq!(s.last_operation.unwrap().description.as_deref(), Some("b"));
    }

    #[test]
    fn phase_events() {
        let patch = |p| StatusPatch::phase(p, op("why", None), now());
        let cases = [
            (None, patch(MachinePhase::Pending), None),
            (Some(MachinePhase::Running), patch(MachinePhase::Terminating), None),
            (Some(MachinePhase::Pending), patch(MachinePhase::Running), Some((Severity::Normal, "Running"))),
            (Some(MachinePhase::Running), patch(MachinePhase::Unknown), Some((Severity::Warning, "Unknown"))),
            (Some(MachinePhase::Unknown), patch(MachinePhase::Failed), Some((Severity::Warning, "Failed"))),
            (Some(MachinePhase::Failed), patch(MachinePhase::Failed), None),
            (Some(MachinePhase::Running), StatusPatch::operation(op("x", None)), None),
        ];
        for (old, patch, want) in cases {
            let got = phase_event(old.as_ref(), &patch).map(|e| (e.severity, e.reason));
            assert_eq!(got, want, "{old:?} -> {:?}", patch.new_phase());
        }
        assert_eq!(phase_event(None, &patch(MachinePhase::Running)).unwrap().note, "why");
    }
}
