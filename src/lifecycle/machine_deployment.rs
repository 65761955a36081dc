//! MachineDeployment decisions (`docs/machine-lifecycle.md`: which MachineSet is new, how far to scale each set
//! during a rolling update or a recreate, proportional scaling, revisions and rollback, history cleanup,
//! progress and status, the rollout's side effects on nodes, and the cluster-autoscaler contract.
//!
//! [`plan::plan_deployment`] runs one reconcile in MCM's order and returns every write as data; the pieces it is
//! made of are public so that each MCM edge case is one table row:
//! - [`validation`]: what MCM silently skipped, with a reason a user can act on;
//! - [`template`]: new-MachineSet identity (`equal_ignore_hash`), the template hash and name, in-place sync;
//! - [`rollout`]: fenceposts and the rolling-update and recreate steps;
//! - [`in_place`]: the InPlaceUpdate strategy's steps (moves, selection);
//! - [`scaling`]: scaling events and `scale()` (scale-out to the new set only, proportional scale-in);
//! - [`revision`]: revision numbers, annotation copying, rollback, history cleanup;
//! - [`status`]: status, conditions and progress;
//! - [`nodes`]: the PreferNoSchedule taint and the autoscaler's scale-down-disabled annotations;
//! - [`autoscaler`]: `trigger-deletion-by-mcm`, machine marks, `rollout_finished`.

pub mod autoscaler;
pub mod in_place;
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
