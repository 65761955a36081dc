//! The deletion flow (`docs/machine-lifecycle.md` "Deletion flow"): Terminating -> find the VM -> drain -> (forced:
//! delete VolumeAttachments) -> delete the VM -> delete the Node -> remove the finalizer.
//!
//! The step is read from `lastOperation.description` by substring, in MCM's order and with MCM's texts, so a
//! machine an MCM left half-deleted continues where it stopped, and so does ours after a restart. Every outcome
//! writes the description naming the next step; `currentStatus` is left alone (MCM's design: its clock keeps
//! running).

mod flow;

pub use flow::{Advance, DeleteAction, DeleteAnswer, DeleteObservation, next};

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::clock;
use super::config::{Effective, MachineConfig};
use super::create::{node_label, provider_id};
use super::names::text;
use super::retry::RetryClass;
use super::status::{self, StatusPatch};
use crate::api::mcm::names::{FORCE_DELETION_LABEL, TERMINATING_CONDITION};
use crate::api::mcm::{Machine, MachineOperationType, MachinePhase, MachineState};
use crate::drain::DrainOptions;
use crate::providers::contract::{Code, DriverError};

/// A step of the deletion flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Set phase Terminating (also when the description names no step: "re-initiate termination").
    SetTerminating,
    /// Find the VM and the Node's name.
    FindVm,
    /// Cordon and drain the Node.
    Drain,
    /// Delete the Node's VolumeAttachments (after a forced drain).
    DeleteVolumeAttachments,
    /// Delete the VM.
    DeleteVm,
    /// Delete the Node (its MCM finalizer first).
    DeleteNode,
    /// Remove the Machine's finalizer.
    RemoveFinalizer,
}

/// The step a deleting machine is at, from its phase and `lastOperation.description`.
pub fn step(machine: &Machine) -> Step {
    if status::phase(machine) != Some(&MachinePhase::Terminating) {
        return Step::SetTerminating;
    }
    let d = status::description(machine);
    // MCM's order: a description embedding an error text still matches its own step first.
    let steps = [
        (text::GET_VM_STATUS, Step::FindVm),
        (text::INITIATE_DRAIN, Step::Drain),
        (text::DELETE_VOLUME_ATTACHMENTS, Step::DeleteVolumeAttachments),
        (text::INITIATE_VM_DELETION, Step::DeleteVm),
        (text::REMOVE_NODE_FINALIZERS, Step::DeleteNode),
        (text::INITIATE_NODE_DELETION, Step::DeleteNode),
        (text::INITIATE_FINALIZER_REMOVAL, Step::RemoveFinalizer),
    ];
    steps.iter().find(|(key, _)| d.contains(key)).map_or(Step::SetTerminating, |(_, s)| *s)
}

/// The first write: phase Terminating, "Set machine status to termination. Now, getting VM Status".
pub fn terminating(now: Timestamp) -> StatusPatch {
    let op = status::operation(MachineOperationType::Delete, MachineState::Processing, text::GET_VM_STATUS, None, now);
    StatusPatch::phase(MachinePhase::Terminating, op, now)
}

/// What a step did: the description naming the next step, and whether to wait before going on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The new `lastOperation.description`.
    pub description: String,
    /// `Processing` when the flow goes on, `Failed` when the step is retried.
    pub state: MachineState,
    /// `None`: go on at once; otherwise retry the step after the class's back-off.
    pub retry: Option<RetryClass>,
    /// The driver's `lastKnownState`, when it returned one.
    pub last_known_state: Option<String>,
}

impl Outcome {
    fn next(description: impl Into<String>) -> Self {
        Outcome {
            description: description.into(),
            state: MachineState::Processing,
            retry: None,
            last_known_state: None,
        }
    }

    fn retry(description: impl Into<String>, class: RetryClass) -> Self {
        Outcome {
            description: description.into(),
            state: MachineState::Failed,
            retry: Some(class),
            last_known_state: None,
        }
    }

    /// The status write: `lastOperation` (type Delete) only.
    pub fn patch(&self, now: Timestamp) -> StatusPatch {
        let op =
            status::operation(MachineOperationType::Delete, self.state.clone(), self.description.clone(), None, now);
        let mut patch = StatusPatch::operation(op);
        patch.last_known_state = self.last_known_state.clone().filter(|s| !s.is_empty());
        patch
    }
}

/// Where the Node's name comes from when finding the VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindVm {
    /// Known without asking the cloud (the `node` label, or a Node labelled with the machine's name): drain it.
    /// `label` is set when the machine's `node` label must be written.
    Known {
        /// The outcome.
        outcome: Outcome,
        /// The `node` label to write, if missing.
        label: Option<String>,
    },
    /// Ask the driver (`get_machine_status`).
    AskDriver,
}

/// The find-VM step before any driver call: `node_of_machine` is a Node carrying the machine-name label.
pub fn find_vm(machine: &Machine, node_of_machine: Option<&str>, target: bool) -> FindVm {
    if !target || node_label(machine).is_some() {
        return FindVm::Known { outcome: Outcome::next(text::INITIATE_DRAIN), label: None };
    }
    match node_of_machine {
        Some(node) => FindVm::Known { outcome: Outcome::next(text::INITIATE_DRAIN), label: Some(node.to_string()) },
        None => FindVm::AskDriver,
    }
}

/// The find-VM step after `get_machine_status`: found -> drain (label the machine with the node name); no VM,
/// not implemented, uninitialized -> drain anyway (the VM deletion still runs, to clean up disks and NICs, MCM
/// #850); transient errors and others -> retry.
///
/// `InvalidArgument` for a machine that never got a providerID also goes on: the driver refuses the class, so it
/// cannot have made a VM for it, and a machine with a broken class must stay deletable (MCM retries forever).
pub fn after_find_vm(machine: &Machine, result: Result<String, DriverError>) -> (Outcome, Option<String>) {
    match result {
        Ok(node_name) => {
            let label = (!node_name.is_empty()).then_some(node_name);
            (Outcome::next(text::INITIATE_DRAIN), label)
        }
        Err(e) if matches!(e.code, Code::NotFound | Code::Unimplemented | Code::Uninitialized) => {
            (Outcome::next(text::INITIATE_DRAIN), None)
        }
        Err(e) if e.code == Code::InvalidArgument && provider_id(machine).is_none() => {
            (Outcome::next(text::INITIATE_DRAIN), None)
        }
        Err(e) if RetryClass::of(e.code) == RetryClass::Transient => (
            Outcome::retry(
                format!(
                    "Error occurred with decoding machine error status while getting VM status, aborting with retry. {}",
                    text::GET_VM_STATUS
                ),
                RetryClass::Transient,
            ),
            None,
        ),
        Err(e) => (
            Outcome::retry(
                format!(
                    "Error occurred with decoding machine error status while getting VM status, aborting without \
                     retry. machine code: {} {}",
                    e.machine_codes(),
                    text::GET_VM_STATUS
                ),
                RetryClass::of(e.code),
            ),
            None,
        ),
    }
}

/// Why a drain is forced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForceReason {
    /// The machine carries `force-deletion: true`.
    Label,
    /// The drain timeout has passed since the deletion request.
    Timeout,
    /// The Node has not been Ready for longer than allowed (MCM: 5 minutes).
    NotReady,
    /// The Node's file system has been read-only for longer than allowed.
    ReadonlyFilesystem,
}

/// Go's `strconv.ParseBool` truths.
fn parse_bool(text: &str) -> bool {
    matches!(text, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

fn stale_condition(conditions: &[NodeCondition], type_: &str, healthy: &str, now: Timestamp, after: Duration) -> bool {
    conditions.iter().any(|c| {
        c.type_ == type_
            && c.status != healthy
            && c.last_transition_time.as_ref().is_some_and(|t| clock::between(t.0, now) > after)
    })
}

/// Whether (and why) the drain is forced: the `force-deletion` label, the drain timeout counted from the deletion
/// request, or a Node NotReady or read-only for longer than `unhealthy_node_force_after`.
pub fn force_reason(
    machine: &Machine,
    now: Timestamp,
    effective: &Effective,
    config: &MachineConfig,
) -> Option<ForceReason> {
    let labelled =
        machine.metadata.labels.as_ref().and_then(|l| l.get(FORCE_DELETION_LABEL)).is_some_and(|v| parse_bool(v));
    if labelled {
        return Some(ForceReason::Label);
    }
    if drain_deadline(machine, effective).is_some_and(|d| now > d) {
        return Some(ForceReason::Timeout);
    }
    let conditions = status::conditions(machine);
    let after = config.unhealthy_node_force_after;
    if stale_condition(conditions, "Ready", "True", now, after) {
        return Some(ForceReason::NotReady);
    }
    if stale_condition(conditions, "ReadonlyFilesystem", "False", now, after) {
        return Some(ForceReason::ReadonlyFilesystem);
    }
    None
}

/// When the drain is forced: `deletionTimestamp + drainTimeout`.
pub fn drain_deadline(machine: &Machine, effective: &Effective) -> Option<Timestamp> {
    machine.metadata.deletion_timestamp.as_ref().map(|t| clock::plus(t.0, effective.drain_timeout))
}

/// What the drain step does.
#[derive(Clone, Debug)]
pub enum DrainPlan {
    /// No drain (no target cluster, no node name): go on.
    Skip(Outcome),
    /// Cordon and drain with these options.
    Drain(DrainOptions),
}

/// The drain step's plan. A normal drain gets the time left until the drain deadline (so retries never stretch it,
/// MCM #785); a forced one MCM's 1 minute and a single eviction attempt.
pub fn drain_plan(
    machine: &Machine,
    target: bool,
    force: Option<ForceReason>,
    now: Timestamp,
    effective: &Effective,
    config: &MachineConfig,
) -> DrainPlan {
    if !target {
        return DrainPlan::Skip(Outcome::next(format!(
            "Running without target cluster, skipping node drain and volume attachment deletion. {}",
            text::INITIATE_VM_DELETION
        )));
    }
    let Some(node) = node_label(machine) else {
        return DrainPlan::Skip(Outcome::next(format!(
            "Skipping drain as nodeName is not a valid one for machine. {}",
            text::INITIATE_VM_DELETION
        )));
    };
    let left = drain_deadline(machine, effective).map_or(effective.drain_timeout, |d| clock::until(now, d));
    DrainPlan::Drain(super::config::drain_options(node.to_string(), force.is_some(), left, effective, config))
}

/// The drain step's outcome: `Err` carries the failure's text (cordon, node condition or drain).
pub fn after_drain(result: Result<(), String>, forced: bool) -> Outcome {
    match (result, forced) {
        (Ok(()), false) => Outcome::next(format!("Drain successful. {}", text::INITIATE_VM_DELETION)),
        (Ok(()), true) => Outcome::next(format!("Force Drain successful. {}", text::DELETE_VOLUME_ATTACHMENTS)),
        (Err(e), true) => Outcome::next(format!(
            "{}{e}. However, since it's a force deletion shall continue deletion of VM. {}",
            text::DRAIN_FAILED,
            text::DELETE_VOLUME_ATTACHMENTS
        )),
        (Err(e), false) => Outcome::retry(
            format!("{}{e}. Will retry in next sync. {}", text::DRAIN_FAILED, text::INITIATE_DRAIN),
            RetryClass::Transient,
        ),
    }
}

/// The `Terminating` condition MCM puts on the Node before draining: reason `Unhealthy` for a Failed machine,
/// `ScaleDown` otherwise; a Terminating machine keeps the reason already on the Node.
pub fn terminating_condition(machine: &Machine, existing: Option<&NodeCondition>, now: Timestamp) -> NodeCondition {
    let phase = status::phase(machine);
    let (reason, message) = match (existing, phase) {
        (Some(c), Some(MachinePhase::Terminating)) => (c.reason.clone(), c.message.clone()),
        (_, Some(MachinePhase::Failed)) => {
            (Some("Unhealthy".to_string()), Some("Machine Controller is terminating failed machine".to_string()))
        }
        _ => (Some("ScaleDown".to_string()), Some("Machine Controller is scaling down machine".to_string())),
    };
    NodeCondition {
        type_: TERMINATING_CONDITION.to_string(),
        status: "True".to_string(),
        reason,
        message,
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// What the VolumeAttachment step found on the Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeAttachments {
    /// No Node (or no target cluster).
    NoNode,
    /// The Node lists no attached volumes.
    NoneAttached,
    /// Live VolumeAttachments of the Node (not being deleted), by name.
    Live(Vec<String>),
}

/// The VolumeAttachment step: `Ok` to go on, `Err(names)` to delete those and look again.
pub fn after_volume_attachments(node: &str, found: VolumeAttachments) -> Result<Outcome, Vec<String>> {
    match found {
        VolumeAttachments::NoNode => Ok(Outcome::next(format!(
            "Skipping deleteNodeVolAttachments due to - node {node:?} not found. Moving to VM Deletion. {}",
            text::INITIATE_VM_DELETION
        ))),
        VolumeAttachments::NoneAttached => Ok(Outcome::next(format!(
            "Node Volumes for node: {node} are already detached. Moving to VM Deletion. {}",
            text::INITIATE_VM_DELETION
        ))),
        VolumeAttachments::Live(names) if names.is_empty() => Ok(Outcome::next(format!(
            "No Live VolumeAttachments for node: {node}. Moving to VM Deletion. {}",
            text::INITIATE_VM_DELETION
        ))),
        VolumeAttachments::Live(names) => Err(names),
    }
}

/// The VM deletion step's outcome.
pub fn after_vm_delete(machine: &Machine, result: Result<Option<String>, DriverError>) -> Outcome {
    match result {
        Ok(last_known_state) => Outcome {
            last_known_state,
            ..Outcome::next(format!("VM deletion was successful. {}", text::INITIATE_NODE_DELETION))
        },
        Err(e) if e.code == Code::NotFound => {
            Outcome::next(format!("VM not found. Continuing deletion flow. {}", text::INITIATE_NODE_DELETION))
        }
        Err(e) if e.code == Code::InvalidArgument && provider_id(machine).is_none() => Outcome::next(format!(
            "No VM can exist for this machine (the driver refuses its class: {e}). Continuing deletion flow. {}",
            text::INITIATE_NODE_DELETION
        )),
        Err(e) if RetryClass::of(e.code) == RetryClass::Transient => Outcome::retry(
            format!(
                "VM deletion failed due to - {}. However, will re-try in the next resync. {}",
                e.machine_codes(),
                text::INITIATE_VM_DELETION
            ),
            RetryClass::Transient,
        ),
        Err(e) => Outcome::retry(
            format!(
                "VM deletion failed due to - {}. Aborting operation. {}",
                e.machine_codes(),
                text::INITIATE_VM_DELETION
            ),
            RetryClass::of(e.code),
        ),
    }
}

/// What deleting the Node did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeDeletion {
    /// There is no target cluster.
    NoTarget,
    /// The machine has no `node` label.
    NoLabel,
    /// Deleted.
    Deleted(String),
    /// It did not exist.
    NotFound(String),
    /// The API server refused.
    Failed(String, String),
}

/// The Node deletion step's outcome.
pub fn after_node_delete(machine_name: &str, result: NodeDeletion) -> Outcome {
    let next = text::INITIATE_FINALIZER_REMOVAL;
    match result {
        // Without a target cluster MCM never sets the `node` label, so it reports the missing label.
        NodeDeletion::NoTarget | NodeDeletion::NoLabel => Outcome::next(format!(
            "Label \"node\" not present on machine {machine_name:?}, continuing deletion flow. {next}"
        )),
        NodeDeletion::Deleted(node) => Outcome::next(format!("Deletion of Node Object {node:?} is successful. {next}")),
        NodeDeletion::NotFound(node) => {
            Outcome::next(format!("No node object found for {node:?}, continuing deletion flow. {next}"))
        }
        NodeDeletion::Failed(node, e) => Outcome::retry(
            format!("Deletion of Node Object {node:?} failed due to error: {e}. {}", text::INITIATE_NODE_DELETION),
            RetryClass::Api,
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::mcm::{LastOperation, MachineStatus};

    fn t(s: &str) -> Timestamp {
        format!("2025-01-01T{s}Z").parse().unwrap()
    }

    fn machine(phase: MachinePhase, description: &str) -> Machine {
        let mut m = Machine::new("m1", Default::default());
        m.metadata.deletion_timestamp = Some(Time(t("00:00:00")));
        m.metadata.labels = Some(BTreeMap::from([("node".to_string(), "n1".to_string())]));
        m.status = Some(MachineStatus {
            current_status: Some(status::entering(phase, t("00:00:00"))),
            last_operation: Some(LastOperation { description: Some(description.into()), ..Default::default() }),
            ..Default::default()
        });
        m
    }

    fn config() -> MachineConfig {
        MachineConfig::default()
    }

    fn effective() -> Effective {
        Effective::of(&Machine::new("x", Default::default()), &config())
    }

    #[test]
    fn steps_follow_mcm_descriptions() {
        use MachinePhase::{Running, Terminating};
        let cases = [
            ("not yet terminating", Running, "Machine m1 successfully joined the cluster in 3s", Step::SetTerminating),
            ("fresh", Terminating, text::GET_VM_STATUS, Step::FindVm),
            (
                "find VM failed",
                Terminating,
                "Error occurred with decoding machine error status while getting VM status, aborting with retry. \
                 Set machine status to termination. Now, getting VM Status",
                Step::FindVm,
            ),
            ("drain", Terminating, "Initiate node drain", Step::Drain),
            (
                "drain failed",
                Terminating,
                "Drain failed due to - x. Will retry in next sync. Initiate node drain",
                Step::Drain,
            ),
            ("forced", Terminating, "Force Drain successful. Delete Volume Attachments", Step::DeleteVolumeAttachments),
            ("vm", Terminating, "Drain successful. Initiate VM deletion", Step::DeleteVm),
            (
                "node finalizers (older MCM)",
                Terminating,
                "VM deletion was successful. Remove node finalizers",
                Step::DeleteNode,
            ),
            ("node", Terminating, "VM deletion was successful. Initiate node object deletion", Step::DeleteNode),
            (
                "finalizer",
                Terminating,
                "Deletion of Node Object \"n1\" is successful. Initiate machine object finalizer removal",
                Step::RemoveFinalizer,
            ),
            ("unknown text", Terminating, "something else", Step::SetTerminating),
            (
                "an error quoting a later step still retries its own",
                Terminating,
                "Drain failed due to - pod says Initiate VM deletion. Will retry in next sync. Initiate node drain",
                Step::Drain,
            ),
        ];
        for (name, phase, description, want) in cases {
            assert_eq!(step(&machine(phase, description)), want, "{name}");
        }
    }

    #[test]
    fn find_vm_answers() {
        let m = machine(MachinePhase::Terminating, text::GET_VM_STATUS);
        let mut unlabelled = m.clone();
        unlabelled.metadata.labels = None;
        assert_eq!(
            find_vm(&m, None, true),
            FindVm::Known { outcome: Outcome::next(text::INITIATE_DRAIN), label: None }
        );
        assert_eq!(
            find_vm(&unlabelled, Some("n9"), true),
            FindVm::Known { outcome: Outcome::next(text::INITIATE_DRAIN), label: Some("n9".into()) }
        );
        assert_eq!(find_vm(&unlabelled, None, true), FindVm::AskDriver);
        let err = |c| Err(DriverError::new(c, "x"));
        let cases = [
            ("found", Ok("n2".to_string()), None, Some("n2")),
            ("not found", err(Code::NotFound), None, None),
            ("uninitialized", err(Code::Uninitialized), None, None),
            ("invalid without providerID", err(Code::InvalidArgument), None, None),
            ("unavailable", err(Code::Unavailable), Some(RetryClass::Transient), None),
            ("internal", err(Code::Internal), Some(RetryClass::Other), None),
        ];
        for (name, result, retry, label) in cases {
            let (outcome, got_label) = after_find_vm(&unlabelled, result);
            assert_eq!((outcome.retry, got_label.as_deref()), (retry, label), "{name}");
            assert!(outcome.description.contains(if retry.is_some() {
                text::GET_VM_STATUS
            } else {
                text::INITIATE_DRAIN
            }));
        }
        let mut with_id = unlabelled.clone();
        with_id.spec.provider_id = Some("p".into());
        assert_eq!(after_find_vm(&with_id, err(Code::InvalidArgument)).0.retry, Some(RetryClass::Other));
    }

    #[test]
    fn force_rules() {
        let stale = |type_: &str, status: &str, since: &str| NodeCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: Some(Time(t(since))),
            ..Default::default()
        };
        let with = |labels: &[(&str, &str)], conditions: Vec<NodeCondition>| {
            let mut m = machine(MachinePhase::Terminating, text::INITIATE_DRAIN);
            for (k, v) in labels {
                m.metadata.labels.as_mut().unwrap().insert(k.to_string(), v.to_string());
            }
            m.status.as_mut().unwrap().conditions = Some(conditions);
            m
        };
        let cases = [
            ("healthy", with(&[], vec![stale("Ready", "True", "00:00:00")]), "00:10:00", None),
            ("label True", with(&[("force-deletion", "True")], vec![]), "00:00:01", Some(ForceReason::Label)),
            ("label 1", with(&[("force-deletion", "1")], vec![]), "00:00:01", Some(ForceReason::Label)),
            ("label no", with(&[("force-deletion", "no")], vec![]), "00:00:01", None),
            ("drain timeout", with(&[], vec![]), "02:00:01", Some(ForceReason::Timeout)),
            ("not ready 4m", with(&[], vec![stale("Ready", "Unknown", "00:06:00")]), "00:10:00", None),
            (
                "not ready 6m",
                with(&[], vec![stale("Ready", "Unknown", "00:04:00")]),
                "00:10:00",
                Some(ForceReason::NotReady),
            ),
            (
                "read-only 6m",
                with(&[], vec![stale("Ready", "True", "00:00:00"), stale("ReadonlyFilesystem", "True", "00:04:00")]),
                "00:10:00",
                Some(ForceReason::ReadonlyFilesystem),
            ),
        ];
        for (name, m, now, want) in cases {
            assert_eq!(force_reason(&m, t(now), &effective(), &config()), want, "{name}");
        }
    }

    #[test]
    fn drain_plans() {
        let m = machine(MachinePhase::Terminating, text::INITIATE_DRAIN);
        let e = effective();
        let plan = |target, force, now| drain_plan(&m, target, force, t(now), &e, &config());
        let DrainPlan::Drain(normal) = plan(true, None, "00:30:00") else { panic!() };
        assert_eq!(
            (normal.node.as_str(), normal.timeout, normal.max_evict_retries, normal.force),
            ("n1", Duration::from_secs(5400), 270, false)
        );
        let DrainPlan::Drain(early) = plan(true, None, "00:00:00") else { panic!() };
        assert_eq!((early.timeout, early.max_evict_retries), (Duration::from_secs(7200), 360));
        let DrainPlan::Drain(forced) = plan(true, Some(ForceReason::Label), "00:00:00") else { panic!() };
        assert_eq!((forced.timeout, forced.max_evict_retries, forced.force), (Duration::from_secs(60), 1, true));
        assert!(
            matches!(plan(false, None, "00:00:00"), DrainPlan::Skip(o) if o.description.ends_with(text::INITIATE_VM_DELETION))
        );
        let mut unlabelled = m.clone();
        unlabelled.metadata.labels = None;
        let DrainPlan::Skip(skip) = drain_plan(&unlabelled, true, None, t("00:00:00"), &e, &config()) else { panic!() };
        assert_eq!(
            skip,
            Outcome::next("Skipping drain as nodeName is not a valid one for machine. Initiate VM deletion")
        );
    }

    #[test]
    fn drain_outcomes() {
        let cases = [
            (Ok(()), false, "Drain successful. Initiate VM deletion", None),
            (Ok(()), true, "Force Drain successful. Delete Volume Attachments", None),
            (
                Err("pdb".to_string()),
                true,
                "Drain failed due to - pdb. However, since it's a force deletion shall continue deletion of VM. Delete Volume Attachments",
                None,
            ),
            (
                Err("pdb".to_string()),
                false,
                "Drain failed due to - pdb. Will retry in next sync. Initiate node drain",
                Some(RetryClass::Transient),
            ),
        ];
        for (result, forced, description, retry) in cases {
            let o = after_drain(result, forced);
            assert_eq!((o.description.as_str(), o.retry), (description, retry));
        }
    }

    #[test]
    fn volume_attachments() {
        assert!(
            after_volume_attachments("n1", VolumeAttachments::NoNode)
                .unwrap()
                .description
                .ends_with(text::INITIATE_VM_DELETION)
        );
        assert_eq!(
            after_volume_attachments("n1", VolumeAttachments::NoneAttached).unwrap().description,
            "Node Volumes for node: n1 are already detached. Moving to VM Deletion. Initiate VM deletion"
        );
        assert!(after_volume_attachments("n1", VolumeAttachments::Live(vec![])).is_ok());
        assert_eq!(after_volume_attachments("n1", VolumeAttachments::Live(vec!["va".into()])), Err(vec!["va".into()]));
    }

    #[test]
    fn vm_and_node_deletion() {
        let m = machine(MachinePhase::Terminating, text::INITIATE_VM_DELETION);
        let err = |c| Err(DriverError::new(c, "x"));
        let cases = [
            ("ok", Ok(Some("state".to_string())), None, "VM deletion was successful. Initiate node object deletion"),
            (
                "not found",
                err(Code::NotFound),
                None,
                "VM not found. Continuing deletion flow. Initiate node object deletion",
            ),
            (
                "unavailable",
                err(Code::Unavailable),
                Some(RetryClass::Transient),
                "VM deletion failed due to - machine codes error: code = [Unavailable] message = [x]. However, will re-try in the next resync. Initiate VM deletion",
            ),
            (
                "internal",
                err(Code::Internal),
                Some(RetryClass::Other),
                "VM deletion failed due to - machine codes error: code = [Internal] message = [x]. Aborting operation. Initiate VM deletion",
            ),
        ];
        for (name, result, retry, description) in cases {
            let o = after_vm_delete(&m, result);
            assert_eq!((o.retry, o.description.as_str()), (retry, description), "{name}");
        }
        assert_eq!(after_vm_delete(&m, Ok(Some("s".into()))).last_known_state.as_deref(), Some("s"));
        assert_eq!(after_vm_delete(&m, err(Code::InvalidArgument)).retry, None, "no providerID: nothing to leak");

        let cases = [
            (
                NodeDeletion::Deleted("n1".into()),
                None,
                "Deletion of Node Object \"n1\" is successful. Initiate machine object finalizer removal",
            ),
            (
                NodeDeletion::NotFound("n1".into()),
                None,
                "No node object found for \"n1\", continuing deletion flow. Initiate machine object finalizer removal",
            ),
            (
                NodeDeletion::Failed("n1".into(), "boom".into()),
                Some(RetryClass::Api),
                "Deletion of Node Object \"n1\" failed due to error: boom. Initiate node object deletion",
            ),
        ];
        for (result, retry, description) in cases {
            let o = after_node_delete("m1", result);
            assert_eq!((o.retry, o.description.as_str()), (retry, description));
        }
        assert!(
            after_node_delete("m1", NodeDeletion::NoLabel)
                .description
                .starts_with("Label \"node\" not present on machine \"m1\"")
        );
    }

    #[test]
    fn terminating_condition_reasons() {
        let failed = machine(MachinePhase::Failed, "");
        let terminating = machine(MachinePhase::Terminating, text::INITIATE_DRAIN);
        let existing =
            NodeCondition { type_: "Terminating".into(), reason: Some("Unhealthy".into()), ..Default::default() };
        let now = t("00:00:05");
        assert_eq!(terminating_condition(&failed, None, now).reason.as_deref(), Some("Unhealthy"));
        assert_eq!(terminating_condition(&terminating, None, now).reason.as_deref(), Some("ScaleDown"));
        assert_eq!(terminating_condition(&terminating, Some(&existing), now).reason.as_deref(), Some("Unhealthy"));
        assert_eq!(terminating_condition(&terminating, None, now).status, "True");
    }
}
