//! The create flow as a state machine: one observation in (the machine's hub view and what the driver answered so
//! far in this pass), the next action out. The executor (`controllers::vm::create`) carries each action out, feeds
//! its answer back into [`CreateProgress`] and asks again, until the flow ends with [`CreateAction::Finish`] (a
//! status write, an event, when to look again) or [`CreateAction::Provisioned`].
//!
//! The order is MCM's `triggerCreationFlow`: the status lookup first (so a restart never creates twice), then create
//! or initialize by its answer, the VM's identity recorded on the object before its status, a new VM initialized
//! after it is recorded.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeAddress;

use super::refusal::{Refusal, held_status, refuses_class};
use super::{
    AfterCreate, AfterStatus, after_create, after_status, crash_loop_expired, create_failure, created,
    creation_deadline, initialize_failure, needs_creation, node_label, provider_id, stale_node,
};
use crate::api::mcm::{Machine, MachinePhase};
use crate::lifecycle::config::Effective;
use crate::lifecycle::requeue::{Next, sleep_until};
use crate::lifecycle::retry::RetryClass;
use crate::lifecycle::status::{EventSpec, StatusPatch};
use crate::providers::contract::{
    Code, CreateMachineResponse, DriverError, InitializeMachineResponse, MachineStatusResponse,
};

/// What one pass of the create flow observes.
pub struct CreateObservation<'a> {
    /// The machine (its hub view), as this pass recorded it so far.
    pub machine: &'a Machine,
    /// How the object is called in event notes (`machine`, `MCMMachine`).
    pub kind: &'a str,
    /// Now.
    pub now: Timestamp,
    /// The machine's effective settings (timeouts).
    pub effective: &'a Effective,
    /// A target cluster whose Node the machine waits for: a VM must name its Node, and the machine goes Pending
    /// (without one it goes Available with the VM's addresses).
    pub target: bool,
    /// The back-off of an earlier failed attempt has not run out (how long it still runs).
    pub backing_off: Option<Duration>,
    /// The store shows the object being deleted (or gone) now: nothing may be created.
    pub deleting: bool,
    /// Whether a Node of this name exists (the stale-node guard; never, where Nodes are not watched).
    pub node_exists: &'a (dyn Fn(&str) -> bool + Sync),
    /// What the driver answered so far in this pass.
    pub progress: &'a CreateProgress,
}

/// The answers of one pass, in the order the flow asks for them.
#[derive(Clone, Debug, Default)]
pub struct CreateProgress {
    /// The driver request was prepared (`Err`: the class's driver or credentials cannot be had).
    pub prepared: Option<Result<(), DriverError>>,
    /// `get_machine_status`.
    pub status: Option<Result<MachineStatusResponse, DriverError>>,
    /// `initialize_machine` of a VM the lookup found uninitialized.
    pub initialized_found: Option<Result<InitializeMachineResponse, DriverError>>,
    /// `create_machine`.
    pub created: Option<Result<CreateMachineResponse, DriverError>>,
    /// The new VM of a stale Node was deleted (or its deletion was tried).
    pub stale_deleted: bool,
    /// The VM's identity is recorded on the object.
    pub recorded: bool,
    /// `initialize_machine` of the new VM.
    pub initialized: Option<Result<(), DriverError>>,
    /// The class's mark while it holds creates back (`create::refusal`), and for how long: looked up once the request
    /// is prepared, and set by a refused create of this pass.
    pub class_refused: Option<(Refusal, Duration)>,
}

/// The VM the flow found or made.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Vm {
    /// Its providerID.
    pub provider_id: String,
    /// Its Node's name (`""`: not known).
    pub node_name: String,
    /// Its addresses.
    pub addresses: Vec<NodeAddress>,
    /// Made in this pass: initialize it once recorded.
    pub new: bool,
    /// Not found by the driver, but named by the machine: trusted (MCM never gives a machine a second VM).
    pub trusted: bool,
    /// The driver's `lastKnownState`.
    pub last_known_state: Option<String>,
}

impl Vm {
    fn found(found: MachineStatusResponse) -> Self {
        Vm { provider_id: found.provider_id, node_name: found.node_name, addresses: found.addresses, ..Vm::default() }
    }

    fn initialized(done: &InitializeMachineResponse) -> Self {
        Vm {
            provider_id: done.provider_id.clone(),
            node_name: done.node_name.clone(),
            addresses: done.addresses.clone(),
            ..Vm::default()
        }
    }

    fn created(created: CreateMachineResponse) -> Self {
        Vm {
            provider_id: created.provider_id,
            node_name: created.node_name,
            addresses: created.addresses,
            new: true,
            trusted: false,
            last_known_state: created.last_known_state,
        }
    }

    fn trusted(machine: &Machine) -> Self {
        Vm {
            provider_id: provider_id(machine).unwrap_or_default().to_string(),
            node_name: node_label(machine).unwrap_or_default().to_string(),
            trusted: true,
            ..Vm::default()
        }
    }
}

/// The next step of the create flow.
#[derive(Clone, Debug, PartialEq)]
pub enum CreateAction {
    /// The machine has its VM (or failed for good): nothing to create.
    Provisioned,
    /// Prepare the driver request: the class's driver, credentials and user data.
    Prepare,
    /// Ask the driver whether the VM exists (`get_machine_status`).
    GetStatus,
    /// Initialize the VM the lookup found uninitialized.
    InitializeFound,
    /// Create the VM.
    Create,
    /// The new VM would take the Node of an old one: delete it (MCM's stale-node guard).
    DeleteStaleVm {
        /// The new VM.
        provider_id: String,
    },
    /// Record the VM's identity on the object (before its status, so a restart adopts it).
    Record {
        /// The VM.
        vm: Vm,
        /// The event of a new VM.
        event: Option<EventSpec>,
    },
    /// Initialize the new VM.
    Initialize {
        /// The new VM.
        provider_id: String,
    },
    /// The pass ends.
    Finish(Box<Finish>),
}

/// How a pass of the create flow ends.
#[derive(Clone, Debug, PartialEq)]
pub struct Finish {
    /// The status to write (empty: none).
    pub patch: StatusPatch,
    /// The event to record first.
    pub event: Option<EventSpec>,
    /// When to look again.
    pub next: Next,
    /// The VM exists and is recorded: the status is the provisioned one.
    pub provisioned: bool,
}

impl Finish {
    fn wait(next: Next) -> CreateAction {
        CreateAction::Finish(Box::new(Finish { patch: StatusPatch::default(), event: None, next, provisioned: false }))
    }
}

/// The next step of the create flow for `o`.
pub fn next(o: &CreateObservation<'_>) -> CreateAction {
    let m = o.machine;
    let p = o.progress;
    let deadline = creation_deadline(m, o.effective);
    let Some(prepared) = &p.prepared else {
        if !needs_creation(m) {
            return CreateAction::Provisioned;
        }
        if let Some(patch) = crash_loop_expired(m, o.now, o.effective) {
            return CreateAction::Finish(Box::new(Finish {
                patch,
                event: None,
                next: Next::Wake(None),
                provisioned: false,
            }));
        }
        if let Some(wait) = o.backing_off {
            // Woken before the back-off ran out (often by our own status write): keep waiting.
            return Finish::wait(sleep_until(o.now, wait, deadline));
        }
        return CreateAction::Prepare;
    };
    if let Err(e) = prepared {
        return failed(o, Failure::Create(e, None), deadline);
    }
    // The class is marked refused: a machine that names no VM waits with the class's error, asking the cloud
    // nothing (it would only create, and be refused).
    if p.status.is_none()
        && provider_id(m).is_none()
        && node_label(m).is_none()
        && let Some((refusal, wait)) = &p.class_refused
    {
        return CreateAction::Finish(Box::new(Finish {
            patch: held_status(m, refusal, &m.spec.class.name, o.now, o.effective),
            event: None,
            next: sleep_until(o.now, *wait, deadline),
            provisioned: false,
        }));
    }
    let Some(status) = &p.status else { return CreateAction::GetStatus };
    // A VM made in this pass is the one, also once the machine names it (recorded).
    let looked_up = if p.created.is_some() { AfterStatus::Create } else { after_status(status.clone(), m) };
    let vm = match looked_up {
        AfterStatus::Adopt(found) => Vm::found(found),
        AfterStatus::TrustExisting => Vm::trusted(m),
        AfterStatus::Initialize => match &p.initialized_found {
            None => return CreateAction::InitializeFound,
            Some(Ok(done)) => Vm::initialized(done),
            Some(Err(e)) => return failed(o, Failure::Initialize(e), deadline),
        },
        AfterStatus::Create => match &p.created {
            // Deleted since the pass began: create nothing (the deletion would find no VM to delete).
            None if o.deleting => return Finish::wait(Next::Done),
            None => return CreateAction::Create,
            Some(answer) => {
                let name = m.metadata.name.as_deref().unwrap_or_default();
                match after_create(answer.clone(), name, o.node_exists) {
                    AfterCreate::Created(created) => Vm::created(created),
                    AfterCreate::StaleNode(created) if !p.stale_deleted => {
                        return CreateAction::DeleteStaleVm { provider_id: created.provider_id };
                    }
                    AfterCreate::StaleNode(created) => {
                        let note = format!(
                            "VM {} would use the existing Node {} of an old VM; deleted it",
                            created.provider_id, created.node_name
                        );
                        return CreateAction::Finish(Box::new(Finish {
                            patch: stale_node(o.now),
                            event: Some(EventSpec::warning("StaleNode", note)),
                            next: Next::Retry { class: RetryClass::Transient, deadline },
                            provisioned: false,
                        }));
                    }
                    AfterCreate::Failed(e) => return failed(o, Failure::Create(&e, None), deadline),
                }
            }
        },
        AfterStatus::Failed(e) => return failed(o, Failure::Create(&e, None), deadline),
    };
    let missing = if vm.provider_id.is_empty() {
        Some("no providerID")
    } else if o.target && vm.node_name.is_empty() && !vm.trusted {
        Some("no node name")
    } else {
        None
    };
    if let Some(missing) = missing {
        let e = DriverError::new(Code::Internal, format!("the driver returned {missing} for the VM"));
        return failed(o, Failure::Create(&e, vm.last_known_state.clone()), deadline);
    }
    if !p.recorded {
        let name = m.metadata.name.as_deref().unwrap_or_default();
        let event = vm.new.then(|| {
            EventSpec::normal("SuccessfulCreate", format!("Created VM {} for {} {name}", vm.provider_id, o.kind))
        });
        return CreateAction::Record { vm, event };
    }
    if vm.new {
        match &p.initialized {
            None => return CreateAction::Initialize { provider_id: vm.provider_id },
            Some(Err(e)) if e.code != Code::Unimplemented => return failed(o, Failure::Initialize(e), deadline),
            Some(_) => {}
        }
    }
    let mut patch = created(m, o.target, &vm.node_name, &vm.addresses, o.now).unwrap_or_default();
    patch.last_known_state = vm.last_known_state.filter(|s| !s.is_empty());
    CreateAction::Finish(Box::new(Finish {
        patch,
        event: None,
        next: Next::Wake(deadline.filter(|_| o.target)),
        provisioned: true,
    }))
}

/// A failed step.
enum Failure<'e> {
    /// The status lookup or the creation (with the driver's `lastKnownState`).
    Create(&'e DriverError, Option<String>),
    /// An initialization.
    Initialize(&'e DriverError),
}

/// A failed step ends the pass: CrashLoopBackOff (retried after the error's back-off, never past the creation
/// deadline) or Failed (looked at again only on change), with a Warning event.
fn failed(o: &CreateObservation<'_>, failure: Failure<'_>, deadline: Option<Timestamp>) -> CreateAction {
    let class_wait = match (&failure, &o.progress.class_refused) {
        (Failure::Create(e, _), Some((_, wait))) if refuses_class(e) => Some(*wait),
        _ => None,
    };
    let (patch, class, reason) = match failure {
        Failure::Create(e, last_known_state) => {
            let (patch, class) = create_failure(o.machine, e, last_known_state, o.now, o.effective);
            (patch, class, "FailedCreate")
        }
        Failure::Initialize(e) => {
            let (patch, class) = initialize_failure(o.machine, e, o.now, o.effective);
            (patch, class, "FailedInitialize")
        }
    };
    let description = patch.last_operation.as_ref().and_then(|op| op.description.clone()).unwrap_or_default();
    let next = if patch.new_phase() == Some(&MachinePhase::Failed) {
        Next::Wake(None)
    } else if let Some(wait) = class_wait {
        // The class's back-off, not the machine's: it runs for every machine of the class alike.
        sleep_until(o.now, wait, deadline)
    } else {
        Next::Retry { class, deadline }
    };
    CreateAction::Finish(Box::new(Finish {
        patch,
        event: Some(EventSpec::warning(reason, description)),
        next,
        provisioned: false,
    }))
}

#[cfg(test)]
mod tests;
