//! The `lastOperation.description` texts the deletion flow is keyed on, and the pause check. MCM's names
//! (finalizers, labels, annotations, taints) are API: [`crate::api::mcm::names`].

use crate::api::mcm::names::PAUSED_ANNOTATION;

/// Whether `meta` carries [`PAUSED_ANNOTATION`].
pub fn paused(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations.as_ref().is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
}

/// The `lastOperation.description` texts MCM's deletion flow is keyed on (substring match), plus the texts of the
/// create flow that other tools read.
pub mod text {
    /// First deletion step (phase set to Terminating); next: find the VM.
    pub const GET_VM_STATUS: &str = "Set machine status to termination. Now, getting VM Status";
    /// Next: drain the node.
    pub const INITIATE_DRAIN: &str = "Initiate node drain";
    /// Next: delete the node's VolumeAttachments (after a forced drain).
    pub const DELETE_VOLUME_ATTACHMENTS: &str = "Delete Volume Attachments";
    /// Next: delete the VM.
    pub const INITIATE_VM_DELETION: &str = "Initiate VM deletion";
    /// Next: remove the node's finalizers (a step of some MCM versions; handled as node deletion).
    pub const REMOVE_NODE_FINALIZERS: &str = "Remove node finalizers";
    /// Next: delete the Node.
    pub const INITIATE_NODE_DELETION: &str = "Initiate node object deletion";
    /// Next: remove the Machine's finalizer.
    pub const INITIATE_FINALIZER_REMOVAL: &str = "Initiate machine object finalizer removal";
    /// Create flow: the VM exists, waiting for its Node.
    pub const CREATING: &str = "Creating machine on cloud provider";
    /// Create flow without a target cluster: done.
    pub const CREATED: &str = "Created machine on cloud provider";
    /// Suffix of initialization failures.
    pub const INITIALIZE_VM: &str = "Initialize VM Instance";
    /// Prefix of create failures.
    pub const CLOUD_PROVIDER_MESSAGE: &str = "Cloud provider message - ";
    /// The stale-node guard's description.
    pub const STALE_NODE: &str = "VM using old node obj";
    /// Prefix of a failed drain's description (the drain's error follows).
    pub const DRAIN_FAILED: &str = "Drain failed due to - ";
}
