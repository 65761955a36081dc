//! MachineSet decisions (`docs/machine-lifecycle.md`: how many machines to create, which to delete, which
//! failed machines to auto-preserve; the status ([`status`]) and the in-place propagation of the template's
//! node template, configuration and class kind into the machines ([`propagation`]); the machines it creates and
//! the status of those it deletes ([`machines`]).
//!
//! The replica plan, in MCM's order:
//! - a MachineSet being deleted deletes all its machines, and drops its finalizer once none is left;
//! - auto-preservation first: failed machines are annotated `auto-preserved` (newest first) while the set has
//!   room, or un-annotated (oldest first) when `autoPreserveFailedMachineMax` was lowered;
//! - the diff counts machines that are not terminating against `spec.replicas`;
//! - **too few**: create `min(diff, 100)`, unless the set carries `freeze=True` or
//!   `node.machine.sapcloud.io/scale-up-disabled`; nothing is deleted in that pass (MCM returns there, so a
//!   failed machine stays until its replacement exists);
//! - **otherwise** delete the union of the surplus (by [`deletion_order`](super::deletion_order)), the
//!   priority-1 machines the autoscaler marked no later than the set's last scaler change (even when the count
//!   already matches, MCM #1078), and the failed machines that are not (being) preserved; deduplicated, at
//!   most 100.

pub mod machines;
pub mod propagation;
pub mod status;

use std::collections::BTreeSet;

use jiff::Timestamp;

use super::deletion_order::{AgeOrder, DeletionFacts, compare_in};

use super::object_meta::{annotation, label, parse_rfc3339};
use crate::api::mcm::names::{
    FREEZE_LABEL, FREEZE_VALUE, LAST_APPLIED_NODE_PRESERVE, LAST_REPLICA_CHANGE_BY_SCALER, PRESERVE, PRESERVE_AUTO,
    PRIORITY_ANNOTATION, SCALE_UP_DISABLED, UPDATE_RESULT, UPDATE_SUCCESSFUL,
};
use crate::api::mcm::{Machine, MachinePhase, MachineSet};

/// The most machines created or deleted in one pass (MCM `BurstReplicas`).
pub const BURST_REPLICAS: usize = 100;

/// Preserve annotation values that mean "preserve" (the preservation may not have been applied yet).
const PRESERVING_VALUES: [&str; 3] = ["now", "when-failed", PRESERVE_AUTO];
/// Every preserve value MCM acts on; a failed machine without one of these is a candidate for auto-preservation.
const KNOWN_PRESERVE_VALUES: [&str; 4] = ["now", "when-failed", "false", PRESERVE_AUTO];

/// Where a machine stands with respect to preservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preservation {
    /// Not preserved and not asked to be.
    None,
    /// Asked to be preserved (`now`, `when-failed`, `auto-preserved`) but the machine controller has not set an
    /// expiry yet.
    Requested,
    /// Preserved: the expiry is in the future.
    Active,
    /// The expiry has passed.
    Expired,
}

/// One machine of a MachineSet, as the replica plan sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct SetMachine {
    /// What the deletion order needs (also the name and creation time).
    pub order: DeletionFacts,
    /// The phase (absent while being created).
    pub phase: Option<MachinePhase>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The preserve annotation on the Machine itself (auto-preservation reads only this one, as MCM does).
    pub machine_preserve_value: Option<String>,
    /// Preservation state from the expiry and the effective preserve value (Node value wins).
    pub preservation: Preservation,
    /// The in-place strategy moved this machine here (`update-result=successful`); it is never a surplus victim.
    pub moved_in_place: bool,
    /// Whether `machinepriority` is `1` (the autoscaler path).
    pub priority_one: bool,
}

impl SetMachine {
    /// Extracts the facts from a Machine at `now`. `node_preserve` is the Node's `node.machine.sapcloud.io/preserve`
    /// annotation when the Node has one: it wins over the Machine's, as in MCM.
    pub fn from_machine(machine: &Machine, node_preserve: Option<&str>, now: Timestamp) -> Self {
        let meta = &machine.metadata;
        let current = machine.status.as_ref().and_then(|s| s.current_status.as_ref());
        let machine_preserve_value = annotation(meta, PRESERVE).map(str::to_string);
        let effective = match node_preserve {
            Some(v) => Some(v),
            // The Node's value was applied before and has since been removed from the Node: "no preservation".
            None if annotation(meta, LAST_APPLIED_NODE_PRESERVE).is_some() => None,
            None => machine_preserve_value.as_deref(),
        };
        let preservation = match current.and_then(|c| c.preserve_expiry_time.as_ref()) {
            Some(t) if t.0 > now => Preservation::Active,
            Some(_) => Preservation::Expired,
            None if effective.is_some_and(|v| PRESERVING_VALUES.contains(&v)) => Preservation::Requested,
            None => Preservation::None,
        };
        SetMachine {
            order: DeletionFacts::from_machine(machine, now),
            phase: current.and_then(|c| c.phase.clone()),
            deleting: meta.deletion_timestamp.is_some(),
            machine_preserve_value,
            preservation,
            moved_in_place: label(meta, UPDATE_RESULT) == Some(UPDATE_SUCCESSFUL),
            // MCM compares the text: only exactly "1" takes the autoscaler path.
            priority_one: annotation(meta, PRIORITY_ANNOTATION) == Some("1"),
        }
    }

    /// The machine name.
    pub fn name(&self) -> &str {
        &self.order.name
    }

    /// Terminating: phase `Terminating`, or a deletion timestamp (the machine controller has not flipped the
    /// phase yet; counting it as live would pick a second victim for the same surplus).
    pub fn terminating(&self) -> bool {
        self.deleting || self.phase == Some(MachinePhase::Terminating)
    }

    /// Phase `Failed`.
    pub fn failed(&self) -> bool {
        self.phase == Some(MachinePhase::Failed)
    }

    /// A failed machine MCM would terminate: not preserved, not about to be (`shouldFailedMachineBeTerminated`).
    pub fn failed_and_disposable(&self) -> bool {
        self.failed() && matches!(self.preservation, Preservation::None | Preservation::Expired)
    }
}

/// Everything the replica plan of one MachineSet looks at.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaFacts {
    /// `spec.replicas`.
    pub replicas: i32,
    /// Label `freeze=True`.
    pub frozen: bool,
    /// Label `node.machine.sapcloud.io/scale-up-disabled` (any value).
    pub scale_up_disabled: bool,
    /// The MachineSet has a deletion timestamp.
    pub deleting: bool,
    /// Annotation `machine.sapcloud.io/last-deployment-replica-change-by-scaler-time`, parsed.
    pub last_replica_change_by_scaler: Option<Timestamp>,
    /// `spec.autoPreserveFailedMachineMax`.
    pub auto_preserve_max: i32,
    /// `status.autoPreserveFailedMachineCount`.
    pub auto_preserve_count: i32,
    /// The machines the set owns (claimed), terminating ones included.
    pub machines: Vec<SetMachine>,
    /// Which of two otherwise alike machines goes first (CAPI's `deletion.order`; MCM's is the oldest).
    pub age_order: AgeOrder,
}

impl ReplicaFacts {
    /// Reads the set's side of the facts from a MachineSet.
    pub fn from_machine_set(set: &MachineSet, machines: Vec<SetMachine>) -> Self {
        let meta = &set.metadata;
        ReplicaFacts {
            replicas: set.spec.replicas,
            frozen: label(meta, FREEZE_LABEL) == Some(FREEZE_VALUE),
            // MCM's label, or CAPI's annotation (OnDelete's old sets carry it).
            scale_up_disabled: label(meta, SCALE_UP_DISABLED).is_some()
                || annotation(meta, super::machine_deployment::plan::DISABLE_MACHINE_CREATE) == Some("true"),
            deleting: meta.deletion_timestamp.is_some(),
            last_replica_change_by_scaler: annotation(meta, LAST_REPLICA_CHANGE_BY_SCALER).and_then(parse_rfc3339),
            auto_preserve_max: set.spec.auto_preserve_failed_machine_max,
            auto_preserve_count: set.status.as_ref().map_or(0, |s| s.auto_preserve_failed_machine_count),
            machines,
            age_order: AgeOrder::of_capi(crate::convert::capi_deletion_order(set).as_deref()),
        }
    }
}

/// Why a machine is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletionReason {
    /// More machines than `spec.replicas`.
    Surplus,
    /// Priority 1 and marked by the cluster-autoscaler no later than the set's last scaler change.
    MarkedByAutoscaler,
    /// Phase Failed and not preserved: it is replaced through the diff once it is terminating.
    Failed,
    /// The MachineSet is being deleted.
    SetDeleted,
}

/// A machine to delete and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Victim {
    /// The machine name.
    pub name: String,
    /// Why.
    pub reason: DeletionReason,
}

/// Why machines that are missing are not created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleUpBlocked {
    /// Label `freeze=True` (the overshoot freeze).
    Frozen,
    /// Label `node.machine.sapcloud.io/scale-up-disabled`.
    ScaleUpDisabled,
}

/// What the MachineSet controller does to its machines in one pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaPlan {
    /// How many machines to create (at most [`BURST_REPLICAS`]); create them in [`slow_start_batches`].
    pub create: usize,
    /// Machines to delete, in the order they were chosen.
    pub delete: Vec<Victim>,
    /// Set when machines are missing but may not be created.
    pub blocked: Option<ScaleUpBlocked>,
    /// Failed machines to annotate `node.machine.sapcloud.io/preserve=auto-preserved`.
    pub auto_preserve: Vec<String>,
    /// Machines whose `auto-preserved` annotation is to be removed (the maximum was lowered).
    pub stop_auto_preserve: Vec<String>,
    /// The set is being deleted and has no machine left: remove its finalizer.
    pub remove_finalizer: bool,
}

/// Decides the creations and deletions of one MachineSet.
pub fn plan_replicas(facts: &ReplicaFacts) -> ReplicaPlan {
    if facts.deleting {
        return ReplicaPlan {
            delete: facts
                .machines
                .iter()
                .filter(|m| !m.deleting)
                .map(|m| Victim { name: m.name().to_string(), reason: DeletionReason::SetDeleted })
                .collect(),
            remove_finalizer: facts.machines.is_empty(),
            ..ReplicaPlan::default()
        };
    }

    let (auto_preserve, stop_auto_preserve) = plan_auto_preservation(facts);
    let mut plan = ReplicaPlan { auto_preserve, stop_auto_preserve, ..ReplicaPlan::default() };
    let newly_preserved: BTreeSet<&str> = plan.auto_preserve.iter().map(String::as_str).collect();

    let live: Vec<&SetMachine> = facts.machines.iter().filter(|m| !m.terminating()).collect();
    let wanted = usize::try_from(facts.replicas.max(0)).unwrap_or(0);
    if live.len() < wanted {
        plan.blocked = if facts.frozen {
            Some(ScaleUpBlocked::Frozen)
        } else if facts.scale_up_disabled {
            Some(ScaleUpBlocked::ScaleUpDisabled)
        } else {
            None
        };
        if plan.blocked.is_none() {
            plan.create = (wanted - live.len()).min(BURST_REPLICAS);
        }
        return plan;
    }

    // Machines moved here by an in-place update may arrive before the set's replicas are raised: they are
    // never counted as surplus (MCM's in-place special case).
    let candidates: Vec<&SetMachine> = live.iter().copied().filter(|m| !m.moved_in_place).collect();
    let mut victims: Vec<Victim> = Vec::new();
    let surplus = candidates.len().saturating_sub(wanted).min(BURST_REPLICAS);
    if surplus > 0 {
        let mut sorted = candidates.clone();
        sorted.sort_by(|a, b| compare_in(facts.age_order, &a.order, &b.order));
        victims.extend(
            sorted
                .into_iter()
                .take(surplus)
                .map(|m| Victim { name: m.name().to_string(), reason: DeletionReason::Surplus }),
        );
    }
    if let Some(cut_off) = facts.last_replica_change_by_scaler {
        victims.extend(
            candidates
                .iter()
                .filter(|m| m.priority_one && m.order.marked_for_deletion.is_some_and(|t| t <= cut_off))
                .map(|m| Victim { name: m.name().to_string(), reason: DeletionReason::MarkedByAutoscaler }),
        );
    }
    victims.extend(
        candidates
            .iter()
            .filter(|m| m.failed_and_disposable() && !newly_preserved.contains(m.name()))
            .map(|m| Victim { name: m.name().to_string(), reason: DeletionReason::Failed }),
    );

    let mut seen = BTreeSet::new();
    victims.retain(|v| seen.insert(v.name.clone()));
    victims.truncate(BURST_REPLICAS);
    plan.delete = victims;
    plan
}

/// Auto-preservation: while the set has room, failed machines without a known preserve value get
/// `auto-preserved`, newest first; when the maximum was lowered, the oldest auto-preserved lose it.
fn plan_auto_preservation(facts: &ReplicaFacts) -> (Vec<String>, Vec<String>) {
    let room = i64::from(facts.auto_preserve_max) - i64::from(facts.auto_preserve_count);
    let take = |n: i64| usize::try_from(n).unwrap_or(0);
    if room > 0 {
        let mut candidates: Vec<&SetMachine> = facts
            .machines
            .iter()
            .filter(|m| {
                m.failed() && !m.machine_preserve_value.as_deref().is_some_and(|v| KNOWN_PRESERVE_VALUES.contains(&v))
            })
            .collect();
        // Newest first: the latest failure is the freshest evidence.
        candidates.sort_by(|a, b| b.order.created.cmp(&a.order.created).then_with(|| a.name().cmp(b.name())));
        let chosen = candidates.into_iter().take(take(room)).map(|m| m.name().to_string()).collect();
        (chosen, Vec::new())
    } else if room < 0 {
        let mut preserved: Vec<&SetMachine> =
            facts.machines.iter().filter(|m| m.machine_preserve_value.as_deref() == Some(PRESERVE_AUTO)).collect();
        preserved.sort_by(|a, b| a.order.created.cmp(&b.order.created).then_with(|| a.name().cmp(b.name())));
        let chosen = preserved.into_iter().take(take(-room)).map(|m| m.name().to_string()).collect();
        (Vec::new(), chosen)
    } else {
        (Vec::new(), Vec::new())
    }
}

/// Why a MachineSet is not reconciled (MCM logs and skips it; nil selectors crash its validator).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SetValidationError {
    /// `spec.replicas` is negative.
    #[error("spec.replicas is {0}; it must be 0 or more")]
    NegativeReplicas(i32),
    /// The selector is missing or empty.
    #[error("spec.selector is empty and would select every machine; set matchLabels to labels of the template")]
    EmptySelector,
    /// The selector does not select the template's labels.
    #[error(
        "spec.selector does not match spec.template.metadata.labels; machines created from the template would not be selected"
    )]
    SelectorDoesNotMatchTemplate,
    /// `spec.template.spec.class.kind` or `.name` is empty.
    #[error("spec.template.spec.class.{0} is empty; name the MachineClass the machines use")]
    MissingClass(&'static str),
}

impl SetValidationError {
    /// A short stable label for metrics and events.
    pub fn label(&self) -> &'static str {
        match self {
            SetValidationError::NegativeReplicas(_) => "negative_replicas",
            SetValidationError::EmptySelector => "empty_selector",
            SetValidationError::SelectorDoesNotMatchTemplate => "selector_does_not_match_template",
            SetValidationError::MissingClass(_) => "missing_class",
        }
    }
}

/// Validates a MachineSet; every problem is reported.
pub fn validate_machine_set(set: &MachineSet) -> Result<(), Vec<SetValidationError>> {
    let mut errors = Vec::new();
    if set.spec.replicas < 0 {
        errors.push(SetValidationError::NegativeReplicas(set.spec.replicas));
    }
    let template = set.spec.template.as_ref();
    let labels = template.and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default();
    match set.spec.selector.as_ref() {
        Some(s)
            if s.match_labels.as_ref().is_some_and(|l| !l.is_empty())
                || s.match_expressions.as_ref().is_some_and(|e| !e.is_empty()) =>
        {
            if !super::machine_deployment::validation::selector_matches(s, &labels) {
                errors.push(SetValidationError::SelectorDoesNotMatchTemplate);
            }
        }
        _ => errors.push(SetValidationError::EmptySelector),
    }
    let class = template.and_then(|t| t.spec.as_ref()).map(|s| &s.class);
    if class.is_none_or(|c| c.kind.is_empty()) {
        errors.push(SetValidationError::MissingClass("kind"));
    }
    if class.is_none_or(|c| c.name.is_empty()) {
        errors.push(SetValidationError::MissingClass("name"));
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// The batch sizes in which `n` machines are created: 1, 2, 4, … until `n` is reached. The executor stops at the
/// first batch with a failure, so a quota error costs one request rather than a hundred.
pub fn slow_start_batches(n: usize) -> Vec<usize> {
    let mut batches = Vec::new();
    let mut remaining = n;
    let mut size = 1usize;
    while remaining > 0 {
        let batch = size.min(remaining);
        batches.push(batch);
        remaining -= batch;
        size = size.saturating_mul(2);
    }
    batches
}

#[cfg(test)]
mod tests;
