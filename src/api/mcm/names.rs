//! The names MCM writes and reads on objects: finalizers, labels, annotations, taints, condition types, and the
//! kind and keys of its classes. They are part of the contract with existing MCM objects (and with Gardener and
//! the cluster-autoscaler, which read and write some of them), so they are spelled exactly as MCM spells them
//! (`docs/machine-lifecycle.md`, `machineutils/utils.go`).
//!
//! The `lastOperation.description` texts are behaviour, not names; they live in `lifecycle::names::text`.

// Finalizers.

/// Finalizer MCM puts on its objects: Machines, MachineSets, MachineDeployments and MachineClasses.
pub const MACHINE_FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";
/// Finalizer on the Secrets a MachineClass references.
pub const SECRET_FINALIZER: &str = "machine.sapcloud.io/machine-controller";
/// Finalizer MCM's node controller puts on Nodes (we only remove it, before deleting a Node).
pub const NODE_FINALIZER: &str = "node.machine.sapcloud.io/machine-controller";

// Labels on Machines and Nodes.

/// Machine label: the name of its Node.
pub const NODE_LABEL: &str = "node";
/// Machine label: the MachineDeployment it belongs to (Gardener sets it in the template).
pub const DEPLOYMENT_LABEL: &str = "name";
/// Machine label: `true` (any `strconv.ParseBool` truth) forces the drain and deletion.
pub const FORCE_DELETION_LABEL: &str = "force-deletion";
/// The result of an in-place update: a Node label set by the node agent ([`UPDATE_SUCCESSFUL`] or
/// [`UPDATE_FAILED`]), and a Machine label the in-place strategy sets on machines moved to the new set
/// ([`UPDATE_SUCCESSFUL`], removed on the next pass).
pub const UPDATE_RESULT: &str = "node.machine.sapcloud.io/update-result";
/// The value of [`UPDATE_RESULT`] for a machine updated in place.
pub const UPDATE_SUCCESSFUL: &str = "successful";
/// The value of [`UPDATE_RESULT`] for an in-place update that failed.
pub const UPDATE_FAILED: &str = "failed";
/// Node label: the Node's machine belongs to an old MachineSet of an in-place rollout (value `true`).
pub const CANDIDATE_FOR_UPDATE: &str = "node.machine.sapcloud.io/candidate-for-update";
/// Node label: the Node is chosen for its in-place update (value `true`), by MCM (Auto) or the user (Manual).
pub const SELECTED_FOR_UPDATE: &str = "node.machine.sapcloud.io/selected-for-update";
/// Node annotation the node agent sets with [`UPDATE_FAILED`]: why the update failed.
pub const UPDATE_FAILED_REASON: &str = "node.machine.sapcloud.io/update-failed-reason";
/// Node label: the name of its Machine.
pub const MACHINE_NAME_LABEL: &str = "node.gardener.cloud/machine-name";

// Labels on MachineSets and MachineDeployments.

/// Label and selector key distinguishing the MachineSets of one deployment.
pub const TEMPLATE_HASH_LABEL: &str = "machine-template-hash";
/// Label that freezes a MachineSet or MachineDeployment (value [`FREEZE_VALUE`]); set by the overshoot freeze.
pub const FREEZE_LABEL: &str = "freeze";
/// The value of [`FREEZE_LABEL`] that freezes.
pub const FREEZE_VALUE: &str = "True";
/// Label that stops a MachineSet from creating machines (any value; the in-place strategy sets it on old sets).
pub const SCALE_UP_DISABLED: &str = "node.machine.sapcloud.io/scale-up-disabled";

// Annotations on Machines.

/// Machine annotation: deletion priority (lower is deleted first). MCM writes [`DEFAULT_PRIORITY`] at creation
/// when absent; the cluster-autoscaler path writes `1`.
pub const PRIORITY_ANNOTATION: &str = "machinepriority.machine.sapcloud.io";
/// The priority a new machine gets.
pub const DEFAULT_PRIORITY: &str = "3";
/// Machine annotation: overrides the creation timeout (inherited MachineDeployment -> MachineSet -> Machine).
pub const EFFECTIVE_CREATION_TIMEOUT_ANNOTATION: &str = "node.machine.sapcloud.io/effective-creation-timeout";
/// Machine annotation: how long the machine took to join, as a Go duration.
pub const JOIN_DURATION_ANNOTATION: &str = "node.machine.sapcloud.io/machine-join-duration";
/// Annotation with the RFC 3339 time at which the cluster-autoscaler chose a machine for deletion.
pub const MARKED_FOR_DELETION_TIME: &str = "machine.sapcloud.io/marked-for-deletion-time";
/// Annotation (on a Machine or its Node) asking to preserve a machine.
pub const PRESERVE: &str = "node.machine.sapcloud.io/preserve";
/// The value of [`PRESERVE`] written by the MachineSet controller for auto-preservation.
pub const PRESERVE_AUTO: &str = "auto-preserved";
/// Machine annotation recording that the preserve value came from the Node.
pub const LAST_APPLIED_NODE_PRESERVE: &str = "node.machine.sapcloud.io/last-applied-node-preserve-value";
/// The NoSchedule taint on the Node of a preserved Failed machine (instead of a cordon, which stays the user's).
pub const PRESERVED_TAINT: &str = "node.machine.sapcloud.io/preserved";
/// The Node condition type that reports preservation.
pub const PRESERVED_CONDITION: &str = "Preserved";

// Annotations on Nodes.

/// Node annotation: JSON of the node template last applied (the base of the three-way merge).
pub const LAST_APPLIED_ANNOTATION: &str = "node.machine.sapcloud.io/last-applied-anno-labels-taints";
/// Node annotation: JSON of the class's `nodeTemplate.virtualCapacity` last put into the Node's capacity (the base
/// for removing keys the class no longer lists).
pub const LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION: &str = "node.machine.sapcloud.io/last-applied-virtual-capacity";
/// Node annotation: the node is not managed by MCM (its events are ignored).
pub const NOT_MANAGED_ANNOTATION: &str = "node.machine.sapcloud.io/not-managed-by-mcm";
/// The value of [`NOT_MANAGED_ANNOTATION`].
pub const NOT_MANAGED_VALUE: &str = "1";

// The cluster-autoscaler's annotations MCM reads and writes.

/// Node annotation telling the cluster-autoscaler not to scale the node down.
pub const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// Node annotation marking that MCM (not a user) set [`SCALE_DOWN_DISABLED`]: the MachineDeployment controller
/// protects the node during a rollout, and health failures wait.
pub const SCALE_DOWN_DISABLED_BY_MCM: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm";
/// Deployment annotation through which the autoscaler names the machines to delete.
pub const TRIGGER_DELETION_BY_MCM: &str = "node.machine.sapcloud.io/trigger-deletion-by-mcm";
/// MachineSet annotation (copied from its MachineDeployment): the cut-off for autoscaler-marked deletions.
pub const LAST_REPLICA_CHANGE_BY_SCALER: &str = "machine.sapcloud.io/last-deployment-replica-change-by-scaler-time";

// Annotations on MachineSets and MachineDeployments.

/// MachineSet (and MachineDeployment) annotation: the revision the set serves.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// MachineSet annotation: earlier revisions this set served (comma-separated), kept across rollbacks.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// MachineSet annotation: the deployment's `spec.replicas` when the set was last scaled.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// MachineSet annotation: `replicas + maxSurge` when the set was last scaled (the base of proportional scaling).
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// MachineSet annotation (and node taint key): the set's nodes carry the PreferNoSchedule taint.
pub const PREFER_NO_SCHEDULE: &str = "deployment.machine.sapcloud.io/prefer-no-schedule";
/// Annotation (on a MachineSet or MachineDeployment) that forces an unfreeze.
pub const UNFREEZE: &str = "safety.machine.sapcloud.io/unfreeze";
/// `kubectl apply`'s annotation, never copied to MachineSets.
pub const LAST_APPLIED_CONFIGURATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Annotation on a Machine, MachineSet or MachineDeployment: our MCM-flavour controllers leave the object alone
/// (no create, delete, health check, drain or status write) while it is present, whatever its value. Not an MCM
/// annotation: a Go MCM ignores it and must be scaled to zero instead. `mcm migrate` sets it during a hand-over.
pub const PAUSED_ANNOTATION: &str = "machine.sapcloud.io/paused";

// Taints and conditions.

/// Node taint: Gardener's critical components are not ready yet; Pending machines wait for it to go.
pub const CRITICAL_COMPONENTS_NOT_READY_TAINT: &str = "node.gardener.cloud/critical-components-not-ready";
/// Node condition MCM sets before draining a node.
pub const TERMINATING_CONDITION: &str = "Terminating";
/// Node condition carrying the stage of an in-place update in its reason ([`in_place_reason`]).
pub const IN_PLACE_CONDITION: &str = "InPlaceUpdate";

/// The reasons of the [`IN_PLACE_CONDITION`] Node condition, in the order an update passes them.
pub mod in_place_reason {
    /// The Node's machine is in an old set of an in-place rollout.
    pub const CANDIDATE: &str = "CandidateForUpdate";
    /// The Node was selected; it is drained next.
    pub const SELECTED: &str = "SelectedForUpdate";
    /// The drain succeeded.
    pub const DRAIN_SUCCESSFUL: &str = "DrainSuccessful";
    /// The node agent may update now (its trigger).
    pub const READY: &str = "ReadyForUpdate";
    /// The node agent reported success.
    pub const SUCCESSFUL: &str = "UpdateSuccessful";
    /// The node agent reported failure.
    pub const FAILED: &str = "UpdateFailed";
}

// Classes and their secrets.

/// `spec.class.kind` of the classes this controller serves.
pub const MACHINE_CLASS_KIND: &str = "MachineClass";
/// The `userData` key of the class secret.
pub const USER_DATA_KEY: &str = "userData";
/// Placeholder in `userData` for the machine name.
pub const MACHINE_NAME_PLACEHOLDER: &str = "<<MACHINE_NAME>>";
/// Placeholder in `userData` for the bootstrap token.
pub const BOOTSTRAP_TOKEN_PLACEHOLDER: &str = "<<BOOTSTRAP_TOKEN>>";
