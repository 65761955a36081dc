//! The names MCM writes and reads: finalizers, labels, annotations, taints and the `lastOperation.description`
//! texts the deletion flow is keyed on. They are part of the contract with existing MCM objects, so they are
//! spelled exactly as MCM spells them (`docs/machine-lifecycle.md`, `machineutils/utils.go`).

/// Finalizer on Machines and MachineClasses.
pub const MACHINE_FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";
/// Finalizer on the Secrets a MachineClass references.
pub const SECRET_FINALIZER: &str = "machine.sapcloud.io/machine-controller";
/// Finalizer MCM's node controller puts on Nodes (we only remove it, before deleting a Node).
pub const NODE_FINALIZER: &str = "node.machine.sapcloud.io/machine-controller";

/// Machine label: the name of its Node.
pub const NODE_LABEL: &str = "node";
/// Machine label: the MachineDeployment it belongs to (Gardener sets it in the template).
pub const DEPLOYMENT_LABEL: &str = "name";
/// Machine label: `true` (any `strconv.ParseBool` truth) forces the drain and deletion.
pub const FORCE_DELETION_LABEL: &str = "force-deletion";
/// Node label: the name of its Machine.
pub const MACHINE_NAME_LABEL: &str = "node.gardener.cloud/machine-name";

/// Annotation on a Machine, MachineSet or MachineDeployment: our MCM-flavour controllers leave the object alone
/// (no create, delete, health check, drain or status write) while it is present, whatever its value. Not an MCM
/// annotation: a Go MCM ignores it and must be scaled to zero instead. `mcm migrate` sets it during a hand-over.
pub const PAUSED_ANNOTATION: &str = "machine.sapcloud.io/paused";

/// Whether `meta` carries [`PAUSED_ANNOTATION`].
pub fn paused(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations.as_ref().is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
}

/// Machine annotation: deletion priority (lower goes first); set to `3` at creation when absent.
pub const PRIORITY_ANNOTATION: &str = "machinepriority.machine.sapcloud.io";
/// The priority a new machine gets.
pub const DEFAULT_PRIORITY: &str = "3";
/// Machine annotation: overrides the creation timeout (inherited MachineDeployment -> MachineSet -> Machine).
pub const EFFECTIVE_CREATION_TIMEOUT_ANNOTATION: &str = "node.machine.sapcloud.io/effective-creation-timeout";
/// Machine annotation: how long the machine took to join, as a Go duration.
pub const JOIN_DURATION_ANNOTATION: &str = "node.machine.sapcloud.io/machine-join-duration";
/// Node annotation: JSON of the node template last applied (the base of the three-way merge).
pub const LAST_APPLIED_ANNOTATION: &str = "node.machine.sapcloud.io/last-applied-anno-labels-taints";
/// Node annotation: the node is not managed by MCM (its events are ignored).
pub const NOT_MANAGED_ANNOTATION: &str = "node.machine.sapcloud.io/not-managed-by-mcm";
/// Node annotation: the MachineDeployment controller protects the node during a rollout; health failures wait.
pub const SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm";

/// Node taint: Gardener's critical components are not ready yet; Pending machines wait for it to go.
pub const CRITICAL_COMPONENTS_NOT_READY_TAINT: &str = "node.gardener.cloud/critical-components-not-ready";

/// Node condition MCM sets before draining a node.
pub const TERMINATING_CONDITION: &str = "Terminating";

/// `spec.class.kind` of the classes this controller serves.
pub const MACHINE_CLASS_KIND: &str = "MachineClass";

/// The `userData` key of the class secret.
pub const USER_DATA_KEY: &str = "userData";
/// Placeholder in `userData` for the machine name.
pub const MACHINE_NAME_PLACEHOLDER: &str = "<<MACHINE_NAME>>";
/// Placeholder in `userData` for the bootstrap token.
pub const BOOTSTRAP_TOKEN_PLACEHOLDER: &str = "<<BOOTSTRAP_TOKEN>>";

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
}
