//! MachineDeployment status, conditions and progress (`docs/machine-lifecycle.md` "Progress and status", "Pause").
//!
//! - Counts sum the sets: `replicas` (existing machines), `updatedReplicas` (the new set's), `readyReplicas`,
//!   `availableReplicas`, `preservedFailedReplicas`; `unavailableReplicas = max(Σspec − Σavailable, 0)`;
//!   `failedMachines` concatenates the sets' lists.
//! - `Available` is True when `available ≥ max(replicas − maxUnavailable − preservedFailed, 0)`.
//! - `Progressing` during a rollout: True/`NewMachineSetAvailable` once complete; True/`MachineSetUpdated` whenever
//!   a count moved the right way (refreshing `lastUpdateTime`); False/`ProgressDeadlineExceeded` once
//!   `lastUpdateTime + progressDeadlineSeconds` has passed. Pausing sets Unknown/`DeploymentPaused`, resuming
//!   Unknown/`DeploymentResumed`, neither overwrites `ProgressDeadlineExceeded`.
//! - `ReplicaFailure` is copied from the new set, else from any set, and removed when no set has one.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::rollout::max_unavailable;
use super::validation::ValidationError;
use super::{actual, available, set_name, spec_replicas, sum};
use crate::api::mcm::{
    ConditionStatus, MachineDeployment, MachineDeploymentCondition, MachineDeploymentConditionType,
    MachineDeploymentStatus, MachineSet, MachineSetConditionType,
};

/// Progressing: the new set is complete.
pub const NEW_MACHINE_SET_AVAILABLE: &str = "NewMachineSetAvailable";
/// Progressing: a set was scaled or machines became ready/available.
pub const MACHINE_SET_UPDATED: &str = "MachineSetUpdated";
/// Progressing: no progress within `progressDeadlineSeconds`.
pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
/// Progressing: the deployment is paused.
pub const DEPLOYMENT_PAUSED: &str = "DeploymentPaused";
/// Progressing: the deployment was resumed.
pub const DEPLOYMENT_RESUMED: &str = "DeploymentResumed";
/// Progressing: a new set was created.
pub const NEW_MACHINE_SET_CREATED: &str = "NewMachineSetCreated";
/// Progressing: an existing set was found for the template.
pub const FOUND_NEW_MACHINE_SET: &str = "FoundNewMachineSet";
/// Progressing: creating the new set failed.
pub const MACHINE_SET_CREATE_ERROR: &str = "MachineSetCreateError";
/// Progressing: the spec is invalid and the deployment is not reconciled (our addition; MCM skips silently).
pub const INVALID_SPEC: &str = "InvalidSpec";
/// Progressing: the selector is empty (MCM's event reason, used for the condition too).
pub const SELECTING_ALL: &str = "SelectingAll";
/// Available: enough machines are available.
pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
/// Available: too few machines are available.
pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

/// A condition stamped `now` (both times).
pub fn new_condition(
    type_: MachineDeploymentConditionType,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
    now: Timestamp,
) -> MachineDeploymentCondition {
    MachineDeploymentCondition {
        type_,
        status,
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
        reason: Some(reason.to_string()),
        message: Some(message.into()),
    }
}

/// The condition of a type.
pub fn get_condition(
    conditions: &[MachineDeploymentCondition],
    type_: MachineDeploymentConditionType,
) -> Option<&MachineDeploymentCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Sets a condition as MCM does: nothing happens if one of the type has the same status and reason; otherwise
/// it replaces it (moved to the end), keeping `lastTransitionTime` when the status did not change.
pub fn set_condition(conditions: &mut Vec<MachineDeploymentCondition>, mut condition: MachineDeploymentCondition) {
    if let Some(current) = get_condition(conditions, condition.type_.clone()) {
        if current.status == condition.status && current.reason == condition.reason {
            return;
        }
        if current.status == condition.status {
            condition.last_transition_time = current.last_transition_time.clone();
        }
    }
    remove_condition(conditions, condition.type_.clone());
    conditions.push(condition);
}

/// Removes the condition of a type.
pub fn remove_condition(conditions: &mut Vec<MachineDeploymentCondition>, type_: MachineDeploymentConditionType) {
    conditions.retain(|c| c.type_ != type_);
}

fn reason_is(c: Option<&MachineDeploymentCondition>, reason: &str) -> bool {
    c.and_then(|c| c.reason.as_deref()) == Some(reason)
}

/// The status of an invalid deployment: `Progressing=False` with reason `SelectingAll` (empty selector) or
/// `InvalidSpec` and every reason in the message, and the generation observed. Counts and other conditions stay.
pub fn invalid_spec_status(
    d: &MachineDeployment,
    errors: &[ValidationError],
    now: Timestamp,
) -> MachineDeploymentStatus {
    let mut status = d.status.clone().unwrap_or_default();
    status.observed_generation = d.metadata.generation;
    let reason = if errors.contains(&ValidationError::EmptySelector) { SELECTING_ALL } else { INVALID_SPEC };
    let message = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    let mut conditions = status.conditions.take().unwrap_or_default();
    let current = get_condition(&conditions, MachineDeploymentConditionType::Progressing);
    // `set_condition` keeps a condition with the same reason; a new message (another mistake) must still show.
    if current.is_some_and(|c| c.message.as_deref() != Some(message.as_str())) {
        remove_condition(&mut conditions, MachineDeploymentConditionType::Progressing);
    }
    set_condition(
        &mut conditions,
        new_condition(MachineDeploymentConditionType::Progressing, ConditionStatus::False, reason, message, now),
    );
    status.conditions = Some(conditions);
    status
}

/// Drops a `Progressing` condition left by an invalid spec, once the spec is valid again; returns whether it did.
pub fn clear_invalid_spec(conditions: &mut Vec<MachineDeploymentCondition>) -> bool {
    let current = get_condition(conditions, MachineDeploymentConditionType::Progressing);
    if reason_is(current, INVALID_SPEC) || reason_is(current, SELECTING_ALL) {
        remove_condition(conditions, MachineDeploymentConditionType::Progressing);
        return true;
    }
    false
}

/// Pause bookkeeping (`checkPausedConditions`): Progressing becomes Unknown/`DeploymentPaused` when paused and
/// Unknown/`DeploymentResumed` when resumed, so time spent paused never counts against the progress deadline.
/// A `ProgressDeadlineExceeded` condition is kept. Returns whether the conditions changed.
pub fn check_paused_conditions(paused: bool, conditions: &mut Vec<MachineDeploymentCondition>, now: Timestamp) -> bool {
    let current = get_condition(conditions, MachineDeploymentConditionType::Progressing);
    if reason_is(current, PROGRESS_DEADLINE_EXCEEDED) {
        return false;
    }
    let paused_condition = reason_is(current, DEPLOYMENT_PAUSED);
    let (reason, message) = match (paused, paused_condition) {
        (true, false) => (DEPLOYMENT_PAUSED, "Deployment is paused"),
        (false, true) => (DEPLOYMENT_RESUMED, "Deployment is resumed"),
        _ => return false,
    };
    set_condition(
        conditions,
        new_condition(MachineDeploymentConditionType::Progressing, ConditionStatus::Unknown, reason, message, now),
    );
    true
}

/// The status from the sets (`calculateDeploymentStatus`): counts, failed machines, the `Available` condition.
/// Other conditions come from `d.status` (the caller's working copy).
pub fn calculate_status(
    d: &MachineDeployment,
    all: &[&MachineSet],
    new: Option<&MachineSet>,
    now: Timestamp,
) -> MachineDeploymentStatus {
    let old = d.status.clone().unwrap_or_default();
    let available_total = sum(all, available);
    let preserved = sum(all, |s| s.status.as_ref().map_or(0, |st| st.preserved_failed_replicas));
    let failed: Vec<_> = all
        .iter()
        .flat_map(|s| s.status.as_ref().and_then(|st| st.failed_machines.clone()).unwrap_or_default())
        .collect();
    let mut status = MachineDeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: sum(all, actual),
        updated_replicas: new.map_or(0, actual),
        ready_replicas: sum(all, |s| s.status.as_ref().map_or(0, |st| st.ready_replicas)),
        available_replicas: available_total,
        unavailable_replicas: (sum(all, spec_replicas) - available_total).max(0),
        conditions: None,
        collision_count: old.collision_count,
        failed_machines: (!failed.is_empty()).then_some(failed),
        preserved_failed_replicas: preserved,
    };
    let mut conditions = old.conditions.unwrap_or_default();
    let min_required = (d.spec.replicas - max_unavailable(d) - preserved).max(0);
    let condition = if available_total >= min_required {
        new_condition(
            MachineDeploymentConditionType::Available,
            ConditionStatus::True,
            MINIMUM_REPLICAS_AVAILABLE,
            "Deployment has minimum availability.",
            now,
        )
    } else {
        new_condition(
            MachineDeploymentConditionType::Available,
            ConditionStatus::False,
            MINIMUM_REPLICAS_UNAVAILABLE,
            "Deployment does not have minimum availability.",
            now,
        )
    };
    set_condition(&mut conditions, condition);
    status.conditions = Some(conditions);
    status
}

/// Complete: every desired machine is updated, exists and is available, and the latest generation is observed.
pub fn deployment_complete(d: &MachineDeployment, status: &MachineDeploymentStatus) -> bool {
    let replicas = d.spec.replicas;
    status.updated_replicas == replicas
        && status.replicas == replicas
        && status.available_replicas == replicas
        && status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// Progress since `old`: more updated, fewer old, more ready or more available machines.
pub fn deployment_progressing(old: &MachineDeploymentStatus, new: &MachineDeploymentStatus) -> bool {
    let old_old = old.replicas - old.updated_replicas;
    let new_old = new.replicas - new.updated_replicas;
    new.updated_replicas > old.updated_replicas
        || new_old < old_old
        || new.ready_replicas > old.ready_replicas
        || new.available_replicas > old.available_replicas
}

/// Whether the progress deadline has passed: the Progressing condition's `lastUpdateTime` plus
/// `progressDeadlineSeconds` is before `now`. Never with no deadline, no condition, or a completed rollout; always
/// once timed out.
pub fn deployment_timed_out(d: &MachineDeployment, status: &MachineDeploymentStatus, now: Timestamp) -> bool {
    if d.spec.progress_deadline_seconds.is_none() {
        return false;
    }
    let condition =
        get_condition(status.conditions.as_deref().unwrap_or_default(), MachineDeploymentConditionType::Progressing);
    if reason_is(condition, PROGRESS_DEADLINE_EXCEEDED) {
        return true;
    }
    progress_deadline(d, status).is_some_and(|end| end < now)
}

/// When a rollout in progress runs out of time: the Progressing condition's `lastUpdateTime` plus
/// `progressDeadlineSeconds`. `None` with no deadline, no condition or no time on it, and for a completed or an
/// already timed-out rollout.
pub fn progress_deadline(d: &MachineDeployment, status: &MachineDeploymentStatus) -> Option<Timestamp> {
    let seconds = d.spec.progress_deadline_seconds?;
    let condition =
        get_condition(status.conditions.as_deref().unwrap_or_default(), MachineDeploymentConditionType::Progressing)?;
    if reason_is(Some(condition), NEW_MACHINE_SET_AVAILABLE) || reason_is(Some(condition), PROGRESS_DEADLINE_EXCEEDED) {
        return None;
    }
    let from = condition.last_update_time.as_ref()?.0;
    from.checked_add(SignedDuration::from_secs(i64::from(seconds))).ok()
}

fn progress_message(d: &MachineDeployment, new: Option<&MachineSet>, what: &str) -> String {
    match new {
        Some(set) => format!("MachineSet {:?} {what}.", set_name(set)),
        None => format!("Machine Deployment {:?} {what}.", d.metadata.name.as_deref().unwrap_or_default()),
    }
}

/// The status after a rollout step (`syncRolloutStatus`): [`calculate_status`] plus progress estimation and the
/// `ReplicaFailure` condition. `d` is the working copy (its status carries this pass's condition changes; its
/// counts are the last written ones, against which progress is measured).
pub fn sync_rollout_status(
    d: &MachineDeployment,
    all: &[&MachineSet],
    new: Option<&MachineSet>,
    now: Timestamp,
) -> MachineDeploymentStatus {
    let mut status = calculate_status(d, all, new, now);
    let old = d.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.take().unwrap_or_default();
    let current =
        get_condition(old.conditions.as_deref().unwrap_or_default(), MachineDeploymentConditionType::Progressing)
            .cloned();
    let already_complete =
        status.replicas == status.updated_replicas && reason_is(current.as_ref(), NEW_MACHINE_SET_AVAILABLE);
    if !already_complete {
        if deployment_complete(d, &status) {
            set_condition(
                &mut conditions,
                new_condition(
                    MachineDeploymentConditionType::Progressing,
                    ConditionStatus::True,
                    NEW_MACHINE_SET_AVAILABLE,
                    progress_message(d, new, "has successfully progressed"),
                    now,
                ),
            );
        } else if deployment_progressing(&old, &status) {
            // Always refresh lastUpdateTime on progress (even with the same reason): it is the deadline's clock.
            let mut condition = new_condition(
                MachineDeploymentConditionType::Progressing,
                ConditionStatus::True,
                MACHINE_SET_UPDATED,
                progress_message(d, new, "is progressing"),
                now,
            );
            if let Some(current) = current.as_ref().filter(|c| c.status == ConditionStatus::True) {
                condition.last_transition_time = current.last_transition_time.clone();
            }
            remove_condition(&mut conditions, MachineDeploymentConditionType::Progressing);
            conditions.push(condition);
        } else if deployment_timed_out(
            d,
            &MachineDeploymentStatus { conditions: Some(conditions.clone()), ..status.clone() },
            now,
        ) {
            set_condition(
                &mut conditions,
                new_condition(
                    MachineDeploymentConditionType::Progressing,
                    ConditionStatus::False,
                    PROGRESS_DEADLINE_EXCEEDED,
                    progress_message(d, new, "has timed out progressing"),
                    now,
                ),
            );
        }
    }
    match replica_failure(all, new) {
        Some(c) => set_condition(&mut conditions, c),
        None => remove_condition(&mut conditions, MachineDeploymentConditionType::ReplicaFailure),
    }
    status.conditions = Some(conditions);
    status
}

/// The sets' `ReplicaFailure` as a deployment condition: the new set's first, else the first of any set.
fn replica_failure(all: &[&MachineSet], new: Option<&MachineSet>) -> Option<MachineDeploymentCondition> {
    let from = |s: &MachineSet| {
        s.status.as_ref().and_then(|st| st.machine_set_condition.as_ref()).and_then(|cs| {
            cs.iter().find(|c| c.type_ == MachineSetConditionType::ReplicaFailure).map(|c| MachineDeploymentCondition {
                type_: MachineDeploymentConditionType::ReplicaFailure,
                status: c.status.clone(),
                last_update_time: c.last_transition_time.clone(),
                last_transition_time: c.last_transition_time.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
        })
    };
    new.and_then(from).or_else(|| all.iter().find_map(|s| from(s)))
}

/// When to look again for the progress deadline, from the status about to be written: `None` without a
/// deadline, without a Progressing condition, or once complete or timed out; otherwise the time left plus a
/// second (zero when under a second is left). MCM measures from the condition before this pass, so after
/// progress it wakes up once too early; the outcome is the same.
pub fn progress_requeue(d: &MachineDeployment, status: &MachineDeploymentStatus, now: Timestamp) -> Option<Duration> {
    let deadline = d.spec.progress_deadline_seconds?;
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let current = get_condition(conditions, MachineDeploymentConditionType::Progressing)?;
    if deployment_complete(d, status) || reason_is(Some(current), PROGRESS_DEADLINE_EXCEEDED) {
        return None;
    }
    let from = current.last_update_time.as_ref()?.0;
    let end = from.checked_add(SignedDuration::from_secs(i64::from(deadline))).ok()?;
    let left = end.duration_since(now);
    if left < SignedDuration::from_secs(1) {
        return Some(Duration::ZERO);
    }
    Some(Duration::try_from(left).ok()? + Duration::from_secs(1))
}

/// Whether `new` must be written over `old` (`statusUpdateRequired`): a count, the collision count, the observed
/// generation or a condition changed, or a failed machine is new or has a new description. MCM ignores
/// `preservedFailedReplicas` here; we compare it too, or a change in it alone would never be written.
pub fn status_update_required(old: &MachineDeploymentStatus, new: &MachineDeploymentStatus) -> bool {
    let same = old.available_replicas == new.available_replicas
        && old.collision_count == new.collision_count
        && old.failed_machines.as_ref().map_or(0, Vec::len) == new.failed_machines.as_ref().map_or(0, Vec::len)
        && old.observed_generation == new.observed_generation
        && old.ready_replicas == new.ready_replicas
        && old.replicas == new.replicas
        && old.updated_replicas == new.updated_replicas
        && old.unavailable_replicas == new.unavailable_replicas
        && old.preserved_failed_replicas == new.preserved_failed_replicas
        && old.conditions.clone().unwrap_or_default() == new.conditions.clone().unwrap_or_default();
    if !same {
        return true;
    }
    let description =
        |m: &crate::api::mcm::MachineSummary| m.last_operation.as_ref().and_then(|o| o.description.clone());
    new.failed_machines
        .iter()
        .flatten()
        .any(|n| !old.failed_machines.iter().flatten().any(|o| o.name == n.name && description(o) == description(n)))
}

#[cfg(test)]
mod tests;
