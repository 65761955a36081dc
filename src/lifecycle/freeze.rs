//! The overshoot freeze (`docs/machine-lifecycle.md` (c)): when a MachineSet owns far more machines than it should,
//! stop it from creating more until the count falls back.
//!
//! - The count: machines whose labels include the set's template labels and that have an owner reference named
//!   after the set; terminating machines count too.
//! - Thresholds: `upper = 2 × replicas + safetyUp` for a set without a deployment; with one,
//!   `upper = deployment.replicas + maxSurge + safetyUp` (a normal rolling update must never freeze), `maxSurge`
//!   rounded up against the deployment's replicas. `lower = upper − safetyDown`. Defaults: up 2, down 1.
//! - `count ≥ upper` and not labelled `freeze=True`: freeze (label `freeze=True`, condition `Frozen=True` reason
//!   `OverShootingReplicaCount`, event `FrozeMachineSet`) and freeze the deployment with the same reason.
//! - `count ≤ lower` and frozen (label or condition): unfreeze (label, condition and the unfreeze annotation go;
//!   event `UnfrozeMachineSet`).
//! - The annotation `safety.machine.sapcloud.io/unfreeze` on a set or on its deployment unfreezes at once.
//! - A deployment is frozen iff one of its sets is (otherwise reason `MachineDeploymentStateSync`).
//! - A freeze only blocks machine creation in the set (see [`crate::lifecycle::machine_set`]).
//!
//! Deviations from MCM:
//! - MCM returns after the first freeze or unfreeze of a sweep, so each set waits its turn (one per minute by
//!   default); we decide every set in one sweep and derive each deployment's state from the outcome, one action
//!   per object.
//! - For a deployment with neither `rollingUpdate` nor `inPlaceUpdate` (Recreate), MCM fails to read `maxSurge`
//!   and aborts the whole sweep; we take `maxSurge = 0` (Recreate never surges).
//! - MCM propagates a deployment's unfreeze annotation to its sets and unfreezes them on the same sweep; we
//!   unfreeze them directly.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::mcm::names::{FREEZE_LABEL, FREEZE_VALUE, UNFREEZE};
use crate::api::mcm::{
    ConditionStatus, Machine, MachineDeployment, MachineDeploymentCondition, MachineDeploymentConditionType,
    MachineSet, MachineSetCondition, MachineSetConditionType,
};
use crate::lifecycle::machine_deployment::rollout::{parse_int_or_percent, scaled_value};
use crate::lifecycle::object_meta::{annotation, label, labels_match};

/// Condition reason of a freeze for too many machines.
pub const OVERSHOOTING_REPLICA_COUNT: &str = "OverShootingReplicaCount";
/// Reason when a deployment's freeze state is brought in line with its sets.
pub const MACHINE_DEPLOYMENT_STATE_SYNC: &str = "MachineDeploymentStateSync";
/// Reason of an unfreeze because the count fell back.
pub const UNDERSHOOTING_REPLICA_COUNT: &str = "UnderShootingReplicaCount";
/// Reason of an unfreeze asked for by the [`UNFREEZE`] annotation.
pub const UNFREEZE_ANNOTATION: &str = "UnfreezeAnnotation";
/// Event on a MachineSet that was frozen.
pub const FROZE_MACHINE_SET: &str = "FrozeMachineSet";
/// Event on a MachineSet that was unfrozen.
pub const UNFROZE_MACHINE_SET: &str = "UnfrozeMachineSet";

/// `--safety-up` and `--safety-down`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreezeOptions {
    /// Machines tolerated above the expected maximum before freezing (default 2).
    pub safety_up: i32,
    /// How far below the freeze threshold the count must fall to unfreeze (default 1).
    pub safety_down: i32,
}

impl Default for FreezeOptions {
    fn default() -> Self {
        FreezeOptions { safety_up: 2, safety_down: 1 }
    }
}

/// Freeze and unfreeze thresholds of one set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Freeze at this count or above.
    pub upper: i32,
    /// Unfreeze at this count or below.
    pub lower: i32,
}

/// The thresholds of `set`, whose deployment is `parent` if it has one.
pub fn thresholds(set: &MachineSet, parent: Option<&MachineDeployment>, options: FreezeOptions) -> Thresholds {
    let upper = match parent {
        None => set.spec.replicas.saturating_mul(2).saturating_add(options.safety_up),
        Some(d) => {
            let strategy = d.spec.strategy.as_ref();
            let surge: Option<&IntOrString> = strategy
                .and_then(|s| s.rolling_update.as_ref())
                .map(|r| r.max_surge.as_ref())
                .or_else(|| strategy.and_then(|s| s.in_place_update.as_ref()).map(|i| i.update.max_surge.as_ref()))
                .flatten();
            let surge = surge.and_then(parse_int_or_percent).map_or(0, |v| scaled_value(v, d.spec.replicas, true));
            d.spec.replicas.saturating_add(surge).saturating_add(options.safety_up)
        }
    };
    Thresholds { upper, lower: upper.saturating_sub(options.safety_down) }
}

/// The machines counted against a set: labels include the template's and an owner reference has the set's name.
pub fn count_machines<'a>(set: &MachineSet, machines: impl IntoIterator<Item = &'a Machine>) -> i32 {
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let template_labels = set.spec.template.as_ref().and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.as_ref());
    let n = machines
        .into_iter()
        .filter(|m| labels_match(template_labels, m.metadata.labels.as_ref()))
        .filter(|m| m.metadata.owner_references.iter().flatten().any(|o| o.name == name))
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// One set as the sweep sees it.
#[derive(Clone, Copy, Debug)]
pub struct SetFreezeFacts<'a> {
    /// The MachineSet.
    pub set: &'a MachineSet,
    /// Its MachineDeployment, if any.
    pub parent: Option<&'a MachineDeployment>,
    /// [`count_machines`] for it.
    pub machine_count: i32,
}

/// A write of the sweep.
#[derive(Clone, Debug, PartialEq)]
pub enum FreezeAction {
    /// Label `freeze=True`, condition `Frozen=True` (reason `OverShootingReplicaCount`), event `FrozeMachineSet`.
    FreezeMachineSet {
        /// The set.
        set: String,
        /// The condition message.
        message: String,
    },
    /// Remove label `freeze`, condition `Frozen` and annotation `safety.machine.sapcloud.io/unfreeze`; event
    /// `UnfrozeMachineSet`.
    UnfreezeMachineSet {
        /// The set.
        set: String,
        /// Why (`UnderShootingReplicaCount` or `UnfreezeAnnotation`).
        reason: &'static str,
    },
    /// Label `freeze=True` and condition `Frozen=True` on the deployment.
    FreezeMachineDeployment {
        /// The deployment.
        deployment: String,
        /// The condition reason.
        reason: &'static str,
        /// The condition message.
        message: String,
    },
    /// Remove label `freeze`, condition `Frozen` and the unfreeze annotation from the deployment.
    UnfreezeMachineDeployment {
        /// The deployment.
        deployment: String,
        /// Why.
        reason: &'static str,
    },
}

fn set_frozen_condition(set: &MachineSet) -> Option<&MachineSetCondition> {
    set.status
        .as_ref()
        .and_then(|s| s.machine_set_condition.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == MachineSetConditionType::Frozen))
}

fn deployment_frozen_condition(d: &MachineDeployment) -> Option<&MachineDeploymentCondition> {
    d.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == MachineDeploymentConditionType::Frozen))
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// What the sweep did to one set.
struct Outcome {
    parent: Option<String>,
    frozen: bool,
    happened: Option<&'static str>,
    message: Option<String>,
}

/// Decides one sweep over all sets and deployments (of one namespace).
pub fn plan_freeze_sweep(
    sets: &[SetFreezeFacts<'_>],
    deployments: &[&MachineDeployment],
    options: FreezeOptions,
) -> Vec<FreezeAction> {
    let mut actions = Vec::new();
    let mut outcomes = Vec::new();
    for facts in sets {
        let set = facts.set;
        let name = name_of(&set.metadata);
        let labelled = label(&set.metadata, FREEZE_LABEL) == Some(FREEZE_VALUE);
        let frozen = labelled || set_frozen_condition(set).is_some();
        let own_annotation = annotation(&set.metadata, UNFREEZE).is_some();
        let unfreeze_asked =
            own_annotation || facts.parent.is_some_and(|d| annotation(&d.metadata, UNFREEZE).is_some());
        let t = thresholds(set, facts.parent, options);
        let mut outcome =
            Outcome { parent: facts.parent.map(|d| name_of(&d.metadata)), frozen, happened: None, message: None };
        if unfreeze_asked {
            if frozen || own_annotation {
                actions.push(FreezeAction::UnfreezeMachineSet { set: name, reason: UNFREEZE_ANNOTATION });
            }
            outcome.frozen = false;
            outcome.happened = Some(UNFREEZE_ANNOTATION);
        } else if !labelled && facts.machine_count >= t.upper {
            let message = format!(
                "The number of machines backing MachineSet: {name} is {} >= {} which is the Max-ScaleUp-Limit",
                facts.machine_count, t.upper
            );
            actions.push(FreezeAction::FreezeMachineSet { set: name, message: message.clone() });
            outcome.frozen = true;
            outcome.happened = Some(OVERSHOOTING_REPLICA_COUNT);
            outcome.message = Some(message);
        } else if frozen && facts.machine_count <= t.lower {
            actions.push(FreezeAction::UnfreezeMachineSet { set: name, reason: UNDERSHOOTING_REPLICA_COUNT });
            outcome.frozen = false;
            outcome.happened = Some(UNDERSHOOTING_REPLICA_COUNT);
        }
        outcomes.push(outcome);
    }

    for d in deployments {
        let name = name_of(&d.metadata);
        let mine: Vec<&Outcome> = outcomes.iter().filter(|o| o.parent.as_deref() == Some(name.as_str())).collect();
        let labelled = label(&d.metadata, FREEZE_LABEL) == Some(FREEZE_VALUE);
        let condition = deployment_frozen_condition(d);
        let consistent = labelled && condition.is_some_and(|c| c.status == ConditionStatus::True);
        let froze_now = mine.iter().find(|o| o.happened == Some(OVERSHOOTING_REPLICA_COUNT));
        if annotation(&d.metadata, UNFREEZE).is_some() {
            actions.push(FreezeAction::UnfreezeMachineDeployment { deployment: name, reason: UNFREEZE_ANNOTATION });
        } else if let Some(froze) = froze_now {
            let same_reason = condition.and_then(|c| c.reason.as_deref()) == Some(OVERSHOOTING_REPLICA_COUNT);
            if !(consistent && same_reason) {
                actions.push(FreezeAction::FreezeMachineDeployment {
                    deployment: name,
                    reason: OVERSHOOTING_REPLICA_COUNT,
                    message: froze.message.clone().unwrap_or_default(),
                });
            }
        } else if mine.iter().any(|o| o.frozen) {
            if !consistent {
                actions.push(FreezeAction::FreezeMachineDeployment {
                    deployment: name,
                    reason: MACHINE_DEPLOYMENT_STATE_SYNC,
                    message:
                        "MachineDeployment State was inconsistent, hence safety controller has fixed this and frozen it"
                            .into(),
                });
            }
        } else if labelled || condition.is_some() {
            let undershoot = mine.iter().any(|o| o.happened == Some(UNDERSHOOTING_REPLICA_COUNT));
            let reason = if undershoot { UNDERSHOOTING_REPLICA_COUNT } else { MACHINE_DEPLOYMENT_STATE_SYNC };
            actions.push(FreezeAction::UnfreezeMachineDeployment { deployment: name, reason });
        }
    }
    actions
}

/// A condition list with `frozen` in place of its `Frozen` condition (`None`: without one), for either flavour's
/// condition type; `None` when that changes nothing: no `Frozen` to remove, or a current one `unchanged` by the new.
pub fn replace_frozen<C: Clone>(
    old: &[C],
    frozen: Option<C>,
    is_frozen: impl Fn(&C) -> bool,
    unchanged: impl Fn(&C, &C) -> bool,
) -> Option<Vec<C>> {
    let current = old.iter().find(|c| is_frozen(c));
    let mut kept: Vec<C> = old.iter().filter(|c| !is_frozen(c)).cloned().collect();
    match (current, frozen) {
        (Some(current), Some(new)) if unchanged(current, &new) => None,
        (_, Some(new)) => {
            kept.push(new);
            Some(kept)
        }
        (None, None) => None,
        (Some(_), None) => Some(kept),
    }
}

/// The `Frozen` condition a freeze writes on a MachineSet.
pub fn frozen_set_condition(message: &str, now: Timestamp) -> MachineSetCondition {
    MachineSetCondition {
        type_: MachineSetConditionType::Frozen,
        status: ConditionStatus::True,
        last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now)),
        reason: Some(OVERSHOOTING_REPLICA_COUNT.into()),
        message: Some(message.into()),
    }
}

#[cfg(test)]
mod tests;
