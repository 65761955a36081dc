//! The executors of the machine flows, shared by the MCM flavour's Machine controllers (the machine and the
//! termination controller) and the MCMMachine controller: [`create::run`] carries out `lifecycle::create::next`,
//! [`delete::run`] carries out `lifecycle::delete::next`, one action at a time, feeding each answer back.
//!
//! What differs between a `machine.sapcloud.io` Machine and an MCMMachine is behind [`VmFlavour`]: how the driver
//! request is made (class, credentials, user data), how the VM's identity and the status are written, and what the
//! target cluster offers (Nodes, drain, VolumeAttachments: only the MCM flavour has one). A fix to how a flow is
//! carried out is made here once.

pub(crate) mod create;
pub(crate) mod delete;
pub(crate) mod machine;
pub(crate) mod refusals;

use std::future::Future;
use std::sync::Arc;

use jiff::Timestamp;
use kube::Resource;

use super::error::Error;
use crate::api::mcm::Machine;
use crate::drain::DrainOptions;
use crate::lifecycle::MachineConfig;
use crate::lifecycle::create::Vm;
use crate::lifecycle::delete::{ForceReason, NodeDeletion, VolumeAttachments};
use crate::lifecycle::requeue::Next;
use crate::lifecycle::status::{EventSpec, StatusPatch};
use crate::providers::{Driver, DriverError, MachineRequest};

/// A driver and the request to ask it with.
#[derive(Clone)]
pub(crate) struct Cloud {
    /// The class's driver.
    pub driver: Arc<dyn Driver>,
    /// The machine, its class and credentials.
    pub request: MachineRequest,
}

/// Why the create flow cannot ask the driver.
pub(crate) enum NotPrepared {
    /// The class's driver or credentials cannot be had: the create fails with this error.
    Driver(DriverError),
    /// Something else is missing (the user data): record this event and look again then.
    Wait(EventSpec, Next),
    /// An API call failed.
    Api(Error),
}

/// Which status a flow writes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stage<'a> {
    /// The create flow, before the VM is recorded.
    Creating,
    /// The create flow's last write: the VM exists and is recorded.
    Provisioned,
    /// The deletion flow; the last driver error of the pass, if any.
    Deleting(Option<&'a DriverError>),
}

/// The seam between the machine-flow executors and the object holding the VM.
pub(crate) trait VmFlavour: Sync {
    /// The object (a Machine, an MCMMachine).
    type Object: Resource<DynamicType = ()> + Clone + Send + Sync;
    /// How event notes name the object.
    const KIND: &'static str;

    /// The machine controller's settings.
    fn config(&self) -> &MachineConfig;
    /// Records `event` on the object (best effort).
    fn publish(&self, obj: &Self::Object, event: EventSpec) -> impl Future<Output = ()> + Send;
    /// A target cluster with the machine's Node: the VM must name its Node; drain, VolumeAttachments and the
    /// Node's deletion apply.
    fn target(&self) -> bool;

    /// The driver and request of the object's class, for the deletion flow.
    fn cloud(&self, obj: &Self::Object, hub: &Machine) -> impl Future<Output = Result<Cloud, DriverError>> + Send;
    /// The driver and request for the create flow (with user data).
    fn prepare(&self, obj: &Self::Object, hub: &Machine) -> impl Future<Output = Result<Cloud, NotPrepared>> + Send;
    /// Whether the store shows the object being deleted (or gone) now.
    fn deleting_now(&self, obj: &Self::Object) -> bool;
    /// Whether a Node of this name exists (the stale-node guard).
    fn node_exists(&self, name: &str) -> bool;
    /// Records the VM's identity on the object; returns the object as written (`None`: nothing to write).
    fn record(
        &self,
        obj: &Self::Object,
        hub: &Machine,
        vm: &Vm,
    ) -> impl Future<Output = Result<Option<Self::Object>, Error>> + Send;
    /// Writes what `patch` changes of `hub`'s status (the hub as last written; `obj` carries what the pass recorded),
    /// for `stage`; returns the object as written (`None`: nothing to write).
    fn write_status(
        &self,
        obj: &Self::Object,
        hub: &Machine,
        patch: StatusPatch,
        stage: Stage<'_>,
    ) -> impl Future<Output = Result<Option<Self::Object>, Error>> + Send;

    // The target cluster's part: a flavour without one (an MCMMachine) keeps these defaults, which the flows never
    // reach without a target cluster anyway.

    /// A Node carrying the machine-name label (the deletion's way to a Node the machine has no label for).
    fn node_of_machine(&self, _hub: &Machine) -> Option<String> {
        None
    }
    /// Writes the `node` label; returns the object as written.
    fn label(&self, obj: &Self::Object, _node: &str) -> impl Future<Output = Result<Self::Object, Error>> + Send {
        let obj = obj.clone();
        async move { Ok(obj) }
    }
    /// Sets the Node's `Terminating` condition, cordons and drains it (`Err`: why it failed).
    fn drain(
        &self,
        _obj: &Self::Object,
        _hub: &Machine,
        _options: &DrainOptions,
        _force: Option<ForceReason>,
        _now: Timestamp,
    ) -> impl Future<Output = Result<(), String>> + Send {
        async { Ok(()) }
    }
    /// The Node's VolumeAttachments.
    fn volume_attachments(&self, _node: &str) -> impl Future<Output = Result<VolumeAttachments, Error>> + Send {
        async { Ok(VolumeAttachments::NoNode) }
    }
    /// Deletes these VolumeAttachments.
    fn delete_volume_attachments(&self, _names: &[String]) -> impl Future<Output = Result<(), Error>> + Send {
        async { Ok(()) }
    }
    /// Deletes the Node (MCM's node finalizer first).
    fn delete_node(&self, _node: &str) -> impl Future<Output = NodeDeletion> + Send {
        async { NodeDeletion::NoTarget }
    }
    /// The marks of the classes the cloud refused (`lifecycle::create::refusal`).
    fn refusals(&self) -> &refusals::ClassRefusals;
    /// Records `event` on the object's class, where it has one to record on (best effort).
    fn publish_class(&self, _obj: &Self::Object, _event: EventSpec) -> impl Future<Output = ()> + Send {
        async {}
    }
    /// Where MCM's machine lifecycle durations go (the MCM flavour's; MCMMachines have none).
    fn machine_metrics(&self) -> Option<&crate::metrics::MachineMetrics> {
        None
    }
    /// Removes the flow's finalizer: the deletion is complete.
    fn remove_finalizer(&self, obj: &Self::Object) -> impl Future<Output = Result<(), Error>> + Send;
}
