//! The create flow's decisions (`docs/machine-lifecycle.md` `triggerCreationFlow`: whether a machine needs the
//! flow, what `get_machine_status` and `create_machine` answers lead to, the status of a failed attempt, and what
//! a created VM writes onto the Machine.
//!
//! The controller runs the flow in one reconcile: status first (so a restart never creates twice), then create or
//! initialize by the answer, then the Machine's labels and providerID, then the Pending (or Available) status.

mod flow;
pub mod refusal;

pub use flow::{CreateAction, CreateObservation, CreateProgress, Finish, Vm, next};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeAddress;
use serde_json::{Map, Value, json};

use super::clock;
use super::config::Effective;
use super::names::text;
use super::retry::RetryClass;
use super::status::{self, StatusPatch};
use crate::api::mcm::names::{DEFAULT_PRIORITY, NODE_LABEL, PRIORITY_ANNOTATION};
use crate::api::mcm::{Machine, MachineOperationType, MachinePhase, MachineState};
use crate::providers::contract::{Code, CreateMachineResponse, DriverError, MachineStatusResponse, identity};

/// The machine's providerID ("" counts as none).
pub fn provider_id(machine: &Machine) -> Option<&str> {
    machine.spec.provider_id.as_deref().filter(|id| !id.is_empty())
}

/// The machine's `node` label ("" counts as none).
pub fn node_label(machine: &Machine) -> Option<&str> {
    machine.metadata.labels.as_ref()?.get(NODE_LABEL).map(String::as_str).filter(|n| !n.is_empty())
}

/// Whether the create flow runs: no providerID yet, no phase yet, or CrashLoopBackOff — as MCM — but never for a
/// Failed machine (MCM keeps calling the cloud for Failed machines without a providerID until they are deleted;
/// a Failed machine is replaced by its MachineSet, so those calls only add load).
pub fn needs_creation(machine: &Machine) -> bool {
    match status::phase(machine) {
        Some(MachinePhase::Failed) => false,
        None | Some(MachinePhase::CrashLoopBackOff) => true,
        Some(_) => provider_id(machine).is_none(),
    }
}

/// When the creation timeout fires: `creationTimestamp + creationTimeout` (MCM #1009: never a later status time).
pub fn creation_deadline(machine: &Machine, effective: &Effective) -> Option<Timestamp> {
    machine.metadata.creation_timestamp.as_ref().map(|t| clock::plus(t.0, effective.creation_timeout))
}

/// The phase of a failed create attempt, whatever the error (MCM's `getCreateFailurePhase`): CrashLoopBackOff,
/// Failed once the creation timeout has passed. A refused class (`InvalidArgument`) is no exception: failing its
/// machines at once made the MachineSet replace them every few seconds ([`refusal`] backs off per class instead).
pub fn failure_phase(machine: &Machine, now: Timestamp, effective: &Effective) -> MachinePhase {
    let expired = creation_deadline(machine, effective).is_some_and(|d| now >= d);
    if expired { MachinePhase::Failed } else { MachinePhase::CrashLoopBackOff }
}

/// A CrashLoopBackOff machine whose creation timeout has passed becomes Failed at the deadline, keeping the last
/// error (description and errorCode) without another call to the cloud (MCM #790 waited for the next retry).
pub fn crash_loop_expired(machine: &Machine, now: Timestamp, effective: &Effective) -> Option<StatusPatch> {
    if status::phase(machine) != Some(&MachinePhase::CrashLoopBackOff) {
        return None;
    }
    if creation_deadline(machine, effective).is_none_or(|d| now < d) {
        return None;
    }
    let last = status::last_operation(machine);
    let op = status::operation(
        last.and_then(|o| o.type_.clone()).unwrap_or(MachineOperationType::Create),
        MachineState::Failed,
        last.and_then(|o| o.description.clone()).unwrap_or_else(|| text::CREATING.to_string()),
        last.and_then(|o| o.error_code.as_deref()),
        now,
    );
    Some(StatusPatch::phase(MachinePhase::Failed, op, now))
}

/// What the `get_machine_status` answer leads to.
#[derive(Clone, Debug, PartialEq)]
pub enum AfterStatus {
    /// The VM exists and is initialized: adopt it.
    Adopt(MachineStatusResponse),
    /// No VM: create one.
    Create,
    /// No VM found, but the machine names one (its providerID or `node` label): trusted, never given a second VM
    /// (AWS answers NotFound for a while after a launch; a machine adopted by hand or moved names its VM).
    TrustExisting,
    /// The VM exists but awaits `initialize_machine`.
    Initialize,
    /// The lookup failed.
    Failed(DriverError),
}

/// Decides on a `get_machine_status` answer.
pub fn after_status(result: Result<MachineStatusResponse, DriverError>, machine: &Machine) -> AfterStatus {
    match result {
        Ok(found) => AfterStatus::Adopt(found),
        Err(e) if matches!(e.code, Code::NotFound | Code::Unimplemented) => {
            if node_label(machine).is_some() || provider_id(machine).is_some() {
                AfterStatus::TrustExisting
            } else {
                AfterStatus::Create
            }
        }
        Err(e) if e.code == Code::Uninitialized => AfterStatus::Initialize,
        Err(e) => AfterStatus::Failed(e),
    }
}

/// What the `create_machine` answer leads to.
#[derive(Clone, Debug, PartialEq)]
pub enum AfterCreate {
    /// Created (or found): record it, then initialize it.
    Created(CreateMachineResponse),
    /// Created, but a Node with the VM's node name already exists and is not named after the machine: it belongs
    /// to an old VM. Delete the new VM and mark the machine Failed (MCM's stale-node guard).
    StaleNode(CreateMachineResponse),
    /// The create failed.
    Failed(DriverError),
}

/// Decides on a `create_machine` answer; `node_exists` tells whether a Node of that name exists.
pub fn after_create(
    result: Result<CreateMachineResponse, DriverError>,
    machine_name: &str,
    node_exists: impl Fn(&str) -> bool,
) -> AfterCreate {
    match result {
        Err(e) => AfterCreate::Failed(e),
        Ok(created) if created.node_name != machine_name && node_exists(&created.node_name) => {
            AfterCreate::StaleNode(created)
        }
        Ok(created) => AfterCreate::Created(created),
    }
}

/// The status of a failed create (or status lookup): MCM's "Cloud provider message - <error>" with the error
/// code, and how to retry.
pub fn create_failure(
    machine: &Machine,
    error: &DriverError,
    last_known_state: Option<String>,
    now: Timestamp,
    effective: &Effective,
) -> (StatusPatch, RetryClass) {
    let description = format!("{}{}", text::CLOUD_PROVIDER_MESSAGE, error.machine_codes());
    failure(machine, error, description, last_known_state, now, effective)
}

/// The status of a failed initialization: "Provider error: <error>. Initialize VM Instance".
pub fn initialize_failure(
    machine: &Machine,
    error: &DriverError,
    now: Timestamp,
    effective: &Effective,
) -> (StatusPatch, RetryClass) {
    let description = format!("Provider error: {}. {}", error.machine_codes(), text::INITIALIZE_VM);
    failure(machine, error, description, None, now, effective)
}

fn failure(
    machine: &Machine,
    error: &DriverError,
    description: String,
    last_known_state: Option<String>,
    now: Timestamp,
    effective: &Effective,
) -> (StatusPatch, RetryClass) {
    let phase = failure_phase(machine, now, effective);
    let op = status::operation(
        MachineOperationType::Create,
        MachineState::Failed,
        description,
        Some(error.code.as_str()),
        now,
    );
    let mut patch = StatusPatch::phase(phase, op, now);
    patch.last_known_state = last_known_state.filter(|s| !s.is_empty());
    (patch, RetryClass::of(error.code))
}

/// The status after the stale-node guard deleted the new VM.
pub fn stale_node(now: Timestamp) -> StatusPatch {
    let op = status::operation(MachineOperationType::Create, MachineState::Failed, text::STALE_NODE, None, now);
    StatusPatch::phase(MachinePhase::Failed, op, now)
}

/// The merge patch recording an adopted VM on the Machine: the `node` label (with a target cluster), the priority
/// annotation if absent, and `spec.providerID` unless it already names that VM. `None` when all are in place.
pub fn adoption_patch(machine: &Machine, node_name: &str, provider_id: &str, target: bool) -> Option<Value> {
    let mut metadata = Map::new();
    if target && !node_name.is_empty() && node_label(machine) != Some(node_name) {
        metadata.insert("labels".into(), json!({ NODE_LABEL: node_name }));
    }
    let annotated = machine.metadata.annotations.as_ref().and_then(|a| a.get(PRIORITY_ANNOTATION));
    if annotated.is_none_or(|v| v.is_empty()) {
        metadata.insert("annotations".into(), json!({ PRIORITY_ANNOTATION: DEFAULT_PRIORITY }));
    }
    let mut patch = Map::new();
    if !metadata.is_empty() {
        patch.insert("metadata".into(), Value::Object(metadata));
    }
    // A providerID naming the same VM in another spelling (MCM's AWS region form, where the driver reports the
    // zone form) is kept: the MCM flavour matches Nodes by name, and the Machine stays as MCM wrote it.
    let recorded = machine.spec.provider_id.as_deref().is_some_and(|p| identity::same_vm(p, provider_id));
    if !provider_id.is_empty() && !recorded {
        patch.insert("spec".into(), json!({ "providerID": provider_id }));
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// The status once the VM exists: Pending ("Creating machine on cloud provider") with a target cluster, where the
/// Node's join decides the rest; Available with the VM's addresses without one. `None` unless the machine is new
/// or CrashLoopBackOff.
pub fn created(
    machine: &Machine,
    target: bool,
    node_name: &str,
    addresses: &[NodeAddress],
    now: Timestamp,
) -> Option<StatusPatch> {
    if !matches!(status::phase(machine), None | Some(MachinePhase::CrashLoopBackOff)) {
        return None;
    }
    if target {
        let op = status::operation(MachineOperationType::Create, MachineState::Processing, text::CREATING, None, now);
        return Some(StatusPatch::phase(MachinePhase::Pending, op, now));
    }
    let op = status::operation(MachineOperationType::Create, MachineState::Successful, text::CREATED, None, now);
    let mut patch = StatusPatch::phase(MachinePhase::Available, op, now);
    patch.addresses = Some(normalize_addresses(addresses, node_name));
    Some(patch)
}

/// Addresses as MCM stores them without a target cluster: the node name as `Hostname`, deduplicated and sorted.
pub fn normalize_addresses(addresses: &[NodeAddress], node_name: &str) -> Vec<NodeAddress> {
    let mut all: Vec<NodeAddress> = addresses.to_vec();
    if !node_name.is_empty() {
        all.push(NodeAddress { type_: "Hostname".into(), address: node_name.into() });
    }
    all.sort_by(|a, b| (&a.type_, &a.address).cmp(&(&b.type_, &b.address)));
    all.dedup();
    all
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::mcm::{LastOperation, MachineStatus};
    use crate::lifecycle::config::MachineConfig;

    fn t(s: &str) -> Timestamp {
        format!("2025-01-01T{s}Z").parse().unwrap()
    }

    fn machine(phase: Option<MachinePhase>, provider_id: Option<&str>, node: Option<&str>) -> Machine {
        let mut m = Machine::new("m1", Default::default());
        m.metadata.creation_timestamp = Some(Time(t("00:00:00")));
        m.spec.provider_id = provider_id.map(str::to_string);
        m.metadata.labels = node.map(|n| BTreeMap::from([(NODE_LABEL.to_string(), n.to_string())]));
        m.status = Some(MachineStatus {
            current_status: phase.map(|p| status::entering(p, t("00:00:01"))),
            last_operation: Some(LastOperation {
                type_: Some(MachineOperationType::Create),
                state: Some(MachineState::Failed),
                description: Some(
                    "Cloud provider message - machine codes error: code = [ResourceExhausted] message = [quota]".into(),
                ),
                error_code: Some("ResourceExhausted".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        m
    }

    fn effective() -> Effective {
        Effective::of(&Machine::new("x", Default::default()), &MachineConfig::default())
    }

    fn err(code: Code) -> DriverError {
        DriverError::new(code, "boom")
    }

    #[test]
    fn who_needs_the_create_flow() {
        let cases = [
            ("new", machine(None, None, None), true),
            ("crash loop", machine(Some(MachinePhase::CrashLoopBackOff), None, None), true),
            ("pending with VM", machine(Some(MachinePhase::Pending), Some("id"), Some("m1")), false),
            ("running without providerID", machine(Some(MachinePhase::Running), None, Some("m1")), true),
            ("failed", machine(Some(MachinePhase::Failed), None, None), false),
        ];
        for (name, m, want) in cases {
            assert_eq!(needs_creation(&m), want, "{name}");
        }
    }

    #[test]
    fn status_answers() {
        let found = MachineStatusResponse { provider_id: "p".into(), node_name: "m1".into(), addresses: vec![] };
        let fresh = machine(None, None, None);
        let labelled = machine(Some(MachinePhase::Pending), Some("p"), Some("m1"));
        let named = machine(None, Some("p"), None);
        let cases = [
            ("found", Ok(found.clone()), &fresh, AfterStatus::Adopt(found)),
            ("not found", Err(err(Code::NotFound)), &fresh, AfterStatus::Create),
            ("unimplemented", Err(err(Code::Unimplemented)), &fresh, AfterStatus::Create),
            ("not found but labelled", Err(err(Code::NotFound)), &labelled, AfterStatus::TrustExisting),
            ("not found, a providerID only", Err(err(Code::NotFound)), &named, AfterStatus::TrustExisting),
            ("uninitialized", Err(err(Code::Uninitialized)), &fresh, AfterStatus::Initialize),
            ("invalid", Err(err(Code::InvalidArgument)), &fresh, AfterStatus::Failed(err(Code::InvalidArgument))),
            ("unavailable", Err(err(Code::Unavailable)), &fresh, AfterStatus::Failed(err(Code::Unavailable))),
        ];
        for (name, result, m, want) in cases {
            assert_eq!(after_status(result, m), want, "{name}");
        }
    }

    #[test]
    fn stale_node_guard() {
        let resp = |node: &str| CreateMachineResponse {
            provider_id: "p".into(),
            node_name: node.into(),
            ..Default::default()
        };
        let exists = |name: &str| name == "ip-10-0-0-1" || name == "m1";
        let cases = [
            ("fresh node name", Ok(resp("ip-10-0-0-2")), AfterCreate::Created(resp("ip-10-0-0-2"))),
            ("node named after the machine exists", Ok(resp("m1")), AfterCreate::Created(resp("m1"))),
            ("another VM's node", Ok(resp("ip-10-0-0-1")), AfterCreate::StaleNode(resp("ip-10-0-0-1"))),
            ("error", Err(err(Code::Internal)), AfterCreate::Failed(err(Code::Internal))),
        ];
        for (name, result, want) in cases {
            assert_eq!(after_create(result, "m1", exists), want, "{name}");
        }
    }

    #[test]
    fn failures_crash_loop_until_the_deadline() {
        let e = effective();
        let m = machine(None, None, None);
        let cases = [
            (
                "resource exhausted early",
                Code::ResourceExhausted,
                "00:05:00",
                MachinePhase::CrashLoopBackOff,
                RetryClass::Exhausted,
            ),
            ("unavailable early", Code::Unavailable, "00:05:00", MachinePhase::CrashLoopBackOff, RetryClass::Transient),
            ("internal early", Code::Internal, "00:05:00", MachinePhase::CrashLoopBackOff, RetryClass::Other),
            ("internal at the deadline", Code::Internal, "00:20:00", MachinePhase::Failed, RetryClass::Other),
            (
                "invalid argument early",
                Code::InvalidArgument,
                "00:00:02",
                MachinePhase::CrashLoopBackOff,
                RetryClass::Other,
            ),
        ];
        for (name, code, now, phase, class) in cases {
            let (patch, retry) = create_failure(&m, &err(code), None, t(now), &e);
            assert_eq!((patch.new_phase(), retry), (Some(&phase), class), "{name}");
            let op = patch.last_operation.unwrap();
            let mcm = format!("Cloud provider message - machine codes error: code = [{code}] message = [boom]");
            assert_eq!(op.description.unwrap(), mcm, "{name}");
            assert_eq!(op.error_code.as_deref(), Some(code.as_str()), "{name}");
            assert_eq!(
                (op.type_, op.state),
                (Some(MachineOperationType::Create), Some(MachineState::Failed)),
                "{name}"
            );
        }
        let (init, _) = initialize_failure(&m, &err(Code::Internal), t("00:01:00"), &e);
        assert_eq!(
            init.last_operation.unwrap().description.as_deref(),
            Some("Provider error: machine codes error: code = [Internal] message = [boom]. Initialize VM Instance")
        );
    }

    #[test]
    fn crash_loop_fails_at_the_deadline_keeping_the_error() {
        let e = effective();
        let m = machine(Some(MachinePhase::CrashLoopBackOff), None, None);
        assert_eq!(crash_loop_expired(&m, t("00:19:59"), &e), None);
        let patch = crash_loop_expired(&m, t("00:20:00"), &e).unwrap();
        assert_eq!(patch.new_phase(), Some(&MachinePhase::Failed));
        let op = patch.last_operation.unwrap();
        assert_eq!(op.error_code.as_deref(), Some("ResourceExhausted"));
        assert_eq!(
            op.description.as_deref(),
            Some("Cloud provider message - machine codes error: code = [ResourceExhausted] message = [quota]")
        );
        assert_eq!(crash_loop_expired(&machine(Some(MachinePhase::Pending), None, None), t("01:00:00"), &e), None);
        assert_eq!(creation_deadline(&m, &e), Some(t("00:20:00")));
    }

    #[test]
    fn adoption_writes_only_what_is_missing() {
        let fresh = machine(None, None, None);
        let mut done = machine(Some(MachinePhase::Pending), Some("p"), Some("n1"));
        done.metadata.annotations = Some(BTreeMap::from([(PRIORITY_ANNOTATION.to_string(), "1".to_string())]));
        let cases = [
            (
                "fresh, target",
                &fresh,
                true,
                Some(
                    json!({"metadata": {"labels": {"node": "n1"}, "annotations": {PRIORITY_ANNOTATION: "3"}}, "spec": {"providerID": "p"}}),
                ),
            ),
            (
                "fresh, no target",
                &fresh,
                false,
                Some(json!({"metadata": {"annotations": {PRIORITY_ANNOTATION: "3"}}, "spec": {"providerID": "p"}})),
            ),
            ("all in place, priority kept", &done, true, None),
        ];
        for (name, m, target, want) in cases {
            assert_eq!(adoption_patch(m, "n1", "p", target), want, "{name}");
        }
        // The providerID on the Machine against the one the driver reports.
        let cases = [
            (
                "MCM's AWS region form, the zone form reported: kept",
                "aws:///eu-west-1/i-1",
                "aws:///eu-west-1a/i-1",
                None,
            ),
            (
                "another instance: replaced",
                "aws:///eu-west-1/i-1",
                "aws:///eu-west-1a/i-2",
                Some(json!({"spec": {"providerID": "aws:///eu-west-1a/i-2"}})),
            ),
            ("the same spelling", "aws:///eu-west-1a/i-1", "aws:///eu-west-1a/i-1", None),
        ];
        for (name, recorded, reported, want) in cases {
            let mut m = done.clone();
            m.spec.provider_id = Some(recorded.to_string());
            assert_eq!(adoption_patch(&m, "n1", reported, true), want, "{name}");
        }
    }

    #[test]
    fn created_status() {
        let m = machine(None, None, None);
        let pending = created(&m, true, "m1", &[], t("00:00:05")).unwrap();
        assert_eq!(pending.new_phase(), Some(&MachinePhase::Pending));
        assert!(pending.current_status.as_ref().unwrap().timeout_active);
        assert_eq!(pending.last_operation.unwrap().description.as_deref(), Some(text::CREATING));
        let addresses = vec![
            NodeAddress { type_: "InternalIP".into(), address: "10.0.0.1".into() },
            NodeAddress { type_: "Hostname".into(), address: "m1".into() },
            NodeAddress { type_: "InternalIP".into(), address: "10.0.0.1".into() },
        ];
        let available = created(&m, false, "m1", &addresses, t("00:00:05")).unwrap();
        assert_eq!(available.new_phase(), Some(&MachinePhase::Available));
        assert_eq!(
            available.addresses.unwrap(),
            vec![
                NodeAddress { type_: "Hostname".into(), address: "m1".into() },
                NodeAddress { type_: "InternalIP".into(), address: "10.0.0.1".into() },
            ]
        );
        assert_eq!(
            created(&machine(Some(MachinePhase::Pending), Some("p"), None), true, "m1", &[], t("00:00:05")),
            None
        );
    }
}
