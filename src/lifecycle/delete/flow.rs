//! The deletion flow as a state machine: one observation in (the machine's hub view, its status as this pass wrote
//! it, and the answer to the last action), the next action out. The executor (`controllers::vm::delete`) carries
//! each action out and asks again, until the finalizer goes or a step has to be retried.
//!
//! Every step ends in an [`Advance`]: its status names the next step (MCM's texts), so a restart resumes where the
//! status says. A step that needs nothing outside (the Node's name already known, no drain without a target cluster,
//! no Node to delete) advances at once; the executor writes what advanced before the next call to the cloud or the
//! target cluster, and when the pass stops — not before removing the finalizer, since the object goes with it.

use jiff::Timestamp;

use super::{
    DrainPlan, FindVm, ForceReason, NodeDeletion, Outcome, Step, VolumeAttachments, after_drain, after_find_vm,
    after_node_delete, after_vm_delete, after_volume_attachments, drain_deadline, drain_plan, find_vm, force_reason,
    step, terminating,
};
use crate::api::mcm::Machine;
use crate::drain::DrainOptions;
use crate::lifecycle::config::{Effective, MachineConfig};
use crate::lifecycle::create::{node_label, provider_id};
use crate::lifecycle::requeue::Next;
use crate::lifecycle::status::{EventSpec, StatusPatch};
use crate::providers::contract::{Code, DriverError};

/// What one step of the deletion flow observes.
#[derive(Clone, Copy)]
pub struct DeleteObservation<'a> {
    /// The machine (its hub view), with the status this pass wrote so far.
    pub machine: &'a Machine,
    /// Now.
    pub now: Timestamp,
    /// The machine's effective settings (drain timeout, eviction retries).
    pub effective: &'a Effective,
    /// The controller's settings (forced drain timeout, volume timeouts).
    pub config: &'a MachineConfig,
    /// A target cluster with the machine's Node: drain, VolumeAttachments and the Node's deletion apply.
    pub target: bool,
    /// A Node carrying the machine-name label (MCM's way to the Node when the machine has no `node` label).
    pub node_of_machine: Option<&'a str>,
    /// The answer to the last action of this pass, for the step the status names.
    pub answer: Option<&'a DeleteAnswer>,
}

/// What an action of the deletion flow answered.
#[derive(Clone, Debug, PartialEq)]
pub enum DeleteAnswer {
    /// `get_machine_status`: the Node's name.
    VmStatus(Result<String, DriverError>),
    /// The cordon and drain (`Err`: why it failed).
    Drained {
        /// The drain was forced.
        forced: bool,
        /// Its result.
        result: Result<(), String>,
    },
    /// The Node's VolumeAttachments.
    VolumeAttachments(VolumeAttachments),
    /// `delete_machine`: the driver's `lastKnownState`.
    VmDeleted(Result<Option<String>, DriverError>),
    /// The Node's deletion.
    NodeDeleted(NodeDeletion),
}

/// The next step of the deletion flow.
#[derive(Clone, Debug, PartialEq)]
pub enum DeleteAction {
    /// A step is done or failed: record it and decide again (or stop).
    Advance(Box<Advance>),
    /// Ask the driver for the VM and its Node's name.
    FindVm,
    /// Set the Node's `Terminating` condition, cordon and drain it.
    Drain {
        /// How.
        options: DrainOptions,
        /// Why the drain is forced, if it is.
        force: Option<ForceReason>,
    },
    /// Look up the Node's VolumeAttachments.
    ListVolumeAttachments {
        /// The Node.
        node: String,
    },
    /// Delete these VolumeAttachments, then look again shortly whether they are gone.
    DeleteVolumeAttachments {
        /// By name.
        names: Vec<String>,
        /// When to look again.
        next: Next,
    },
    /// Delete the VM.
    DeleteVm,
    /// Delete the Node (MCM's node finalizer first).
    DeleteNode {
        /// The Node.
        node: String,
    },
    /// Remove the finalizer: the deletion is complete.
    RemoveFinalizer,
}

impl DeleteAction {
    /// Whether the status must name this action's step before it runs (so a restart resumes there). Every action
    /// that may take long or fail for a while does: the drain, the cloud calls, the VolumeAttachments. The Node's
    /// deletion does not: it is one quick request, and a restart that resumes at the step before it finds the VM
    /// already gone and comes back here (both steps are idempotent), so its record would only cost a write.
    pub fn records_first(&self) -> bool {
        !matches!(self, DeleteAction::DeleteNode { .. } | DeleteAction::Advance(_) | DeleteAction::RemoveFinalizer)
    }
}

/// A step's record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Advance {
    /// The status (naming the next step).
    pub patch: StatusPatch,
    /// The `node` label to write on the machine.
    pub label: Option<String>,
    /// The event of the step.
    pub event: Option<EventSpec>,
    /// `None`: go on; otherwise the pass stops here (the step is retried).
    pub stop: Option<Next>,
}

/// The next step of the deletion flow for `o`.
pub fn next(o: &DeleteObservation<'_>) -> DeleteAction {
    let m = o.machine;
    let step = step(m);
    match (step, o.answer) {
        (Step::SetTerminating, _) => {
            DeleteAction::Advance(Box::new(Advance { patch: terminating(o.now), ..Advance::default() }))
        }
        (Step::FindVm, None) => match find_vm(m, o.node_of_machine, o.target) {
            FindVm::Known { outcome, label } => advance(o, step, outcome, label, None),
            FindVm::AskDriver => DeleteAction::FindVm,
        },
        (Step::FindVm, Some(DeleteAnswer::VmStatus(answer))) => {
            let event = answer
                .as_ref()
                .err()
                .map(|e| EventSpec::warning("FailedGetStatus", format!("Finding the VM failed: {e}")));
            let (outcome, label) = after_find_vm(m, answer.clone());
            advance(o, step, outcome, label.filter(|_| o.target), event)
        }
        (Step::Drain, None) => {
            let force = force_reason(m, o.now, o.effective, o.config);
            match drain_plan(m, o.target, force, o.now, o.effective, o.config) {
                DrainPlan::Skip(outcome) => advance(o, step, outcome, None, None),
                DrainPlan::Drain(options) => DeleteAction::Drain { options, force },
            }
        }
        (Step::Drain, Some(DeleteAnswer::Drained { forced, result })) => {
            advance(o, step, after_drain(result.clone(), *forced), None, None)
        }
        (Step::DeleteVolumeAttachments, None) => match node_label(m) {
            Some(node) if o.target => DeleteAction::ListVolumeAttachments { node: node.to_string() },
            node => volume_attachments(o, node.unwrap_or_default(), VolumeAttachments::NoNode),
        },
        (Step::DeleteVolumeAttachments, Some(DeleteAnswer::VolumeAttachments(found))) => {
            volume_attachments(o, node_label(m).unwrap_or_default(), found.clone())
        }
        (Step::DeleteVm, None) => DeleteAction::DeleteVm,
        (Step::DeleteVm, Some(DeleteAnswer::VmDeleted(result))) => {
            let event = match result {
                Ok(_) => {
                    let what = provider_id(m).map_or_else(|| "the VM".to_string(), |id| format!("VM {id}"));
                    Some(EventSpec::normal("SuccessfulDelete", format!("Deleted {what}")))
                }
                Err(e) if e.code == Code::NotFound => None,
                Err(e) => Some(EventSpec::warning("FailedDelete", format!("Deleting the VM failed: {e}"))),
            };
            advance(o, step, after_vm_delete(m, result.clone()), None, event)
        }
        (Step::DeleteNode, None) => {
            let name = m.metadata.name.as_deref().unwrap_or_default();
            match (o.target, node_label(m)) {
                (false, _) => advance(o, step, after_node_delete(name, NodeDeletion::NoTarget), None, None),
                (true, None) => advance(o, step, after_node_delete(name, NodeDeletion::NoLabel), None, None),
                (true, Some(node)) => DeleteAction::DeleteNode { node: node.to_string() },
            }
        }
        (Step::DeleteNode, Some(DeleteAnswer::NodeDeleted(result))) => {
            let name = m.metadata.name.as_deref().unwrap_or_default();
            advance(o, step, after_node_delete(name, result.clone()), None, None)
        }
        (Step::RemoveFinalizer, _) => DeleteAction::RemoveFinalizer,
        // An answer to another step's action (the status moved on meanwhile): decide the step afresh.
        (_, Some(_)) => next(&DeleteObservation { answer: None, ..*o }),
    }
}

/// The VolumeAttachment step on what was found: go on, or delete the live ones and look again.
fn volume_attachments(o: &DeleteObservation<'_>, node: &str, found: VolumeAttachments) -> DeleteAction {
    match after_volume_attachments(node, found) {
        Ok(outcome) => advance(o, Step::DeleteVolumeAttachments, outcome, None, None),
        Err(names) => {
            DeleteAction::DeleteVolumeAttachments { names, next: Next::Sleep(o.config.retry.transient.first) }
        }
    }
}

/// A step's record from its outcome: a failed step stops the pass (a failing drain is retried, but not past the
/// moment it will be forced).
fn advance(
    o: &DeleteObservation<'_>,
    step: Step,
    outcome: Outcome,
    label: Option<String>,
    event: Option<EventSpec>,
) -> DeleteAction {
    let stop = outcome.retry.map(|class| {
        let deadline = (step == Step::Drain).then(|| drain_deadline(o.machine, o.effective)).flatten();
        Next::Retry { class, deadline }
    });
    DeleteAction::Advance(Box::new(Advance { patch: outcome.patch(o.now), label, event, stop }))
}

#[cfg(test)]
mod tests;
