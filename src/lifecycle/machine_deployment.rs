//! MachineDeployment decisions (`docs/machine-lifecycle.md`: which MachineSet is new, how far to scale each set
//! during a rolling update or a recreate, proportional scaling, revisions and rollback, history cleanup,
//! progress and status, the rollout's side effects on nodes, and the cluster-autoscaler contract.
//!
//! [`plan::plan_deployment`] runs one reconcile in MCM's order and returns every write as data; the pieces it is
//! made of are public so that each MCM edge case is one table row:
//! - [`validation`]: what MCM silently skipped, with a reason a user can act on;
//! - [`template`]: new-MachineSet identity (`equal_ignore_hash`), the template hash and name, in-place sync;
//! - [`rollout`]: fenceposts and the rolling-update and recreate steps;
//! - [`scaling`]: scaling events and `scale()` (scale-out to the new set only, proportional scale-in);
//! - [`revision`]: revision numbers, annotation copying, rollback, history cleanup;
//! - [`status`]: status, conditions and progress;
//! - [`nodes`]: the PreferNoSchedule taint and the autoscaler's scale-down-disabled annotations;
//! - [`autoscaler`]: `trigger-deletion-by-mcm`, machine marks, `rollout_finished`.

pub mod autoscaler;
pub mod nodes;
pub mod plan;
pub mod revision;
pub mod rollout;
pub mod scaling;
pub mod status;
pub mod template;
pub mod validation;

use std::cmp::Ordering;

use crate::api::mcm::MachineSet;

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
/// `kubectl apply`'s annotation, never copied to MachineSets.
pub const LAST_APPLIED_CONFIGURATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Label and selector key distinguishing the MachineSets of one deployment.
pub const TEMPLATE_HASH_LABEL: &str = "machine-template-hash";
/// Machine label naming the machine's Node.
pub const NODE_LABEL: &str = "node";
/// Node annotation telling the cluster-autoscaler not to scale the node down.
pub const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// Node annotation marking that MCM (not a user) set [`SCALE_DOWN_DISABLED`].
pub const SCALE_DOWN_DISABLED_BY_MCM: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm";

/// `spec.replicas` of a set.
pub(crate) fn spec_replicas(set: &MachineSet) -> i32 {
    set.spec.replicas
}

/// `status.availableReplicas` of a set.
pub(crate) fn available(set: &MachineSet) -> i32 {
    set.status.as_ref().map_or(0, |s| s.available_replicas)
}

/// `status.replicas` of a set.
pub(crate) fn actual(set: &MachineSet) -> i32 {
    set.status.as_ref().map_or(0, |s| s.replicas)
}

/// The name of a set.
pub(crate) fn set_name(set: &MachineSet) -> &str {
    set.metadata.name.as_deref().unwrap_or_default()
}

/// Oldest first; the name breaks ties (MCM's `MachineSetsByCreationTimestamp`).
pub(crate) fn by_creation(a: &MachineSet, b: &MachineSet) -> Ordering {
    let created = |s: &MachineSet| s.metadata.creation_timestamp.as_ref().map(|t| t.0);
    created(a).cmp(&created(b)).then_with(|| set_name(a).cmp(set_name(b)))
}

/// Sums a per-set number, saturating.
pub(crate) fn sum(sets: &[&MachineSet], f: impl Fn(&MachineSet) -> i32) -> i32 {
    sets.iter().fold(0i32, |acc, s| acc.saturating_add(f(s)))
}

#[cfg(test)]
pub(crate) mod test_support;
