//! One reconcile of a MachineDeployment, in MCM's order (`docs/machine-lifecycle.md`), as a plan of writes.
//!
//! 1. Being deleted: delete every MachineSet, then drop the finalizer once none is left (valid spec or not).
//! 2. Validate (an invalid deployment is not touched; the reasons are returned).
//! 3. Add the finalizer; pause bookkeeping on `Progressing`; the autoscaler's annotation and machine marks.
//! 4. Bring the new set (if one exists) up to date: revision, copied annotations, in-place fields.
//! 5. Then one of: paused → scale and clean up history; `rollbackTo` → roll back; a scaling event → scale;
//!    otherwise the strategy's rollout step (Recreate, RollingUpdate, OnDelete or InPlaceUpdate).
//! 6. Status, written only when something in it changed.
//!
//! Everything is computed on working copies of the observed objects; the plan carries merge patches of what
//! differs, so an unchanged object is never written. The executor applies, in this order: the finalizer, the
//! deployment patch, machine marks, the new set, machine transfers, set patches, set deletions, the moved machines
//! labels, node changes, the status, events.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use super::autoscaler::{MachineMark, plan_autoscaler_marks};
use super::in_place::{NewSetStep, OldSetStep, candidates_to_label, reconcile_new, reconcile_old, sync_sets};
use super::nodes::{
    DeploymentMachine, NodeEffects, disable_scale_down, enable_scale_down, taint_old_nodes, untaint_nodes,
};
use super::revision::{
    Rollback, history_cleanup, max_revision, new_set_annotations, plan_rollback, sync_new_set_annotations,
};
use super::rollout::{
    ScaleTarget, is_in_place, is_on_delete, is_recreate, is_rolling_update, max_surge, new_set_replicas,
    old_sets_at_zero, on_delete_old_sets, reconcile_new_set, reconcile_old_sets, recreate_scale_down,
};
use super::scaling::{is_scaling_event, scale};
use super::status::{
    FOUND_NEW_MACHINE_SET, MACHINE_SET_CREATE_ERROR, NEW_MACHINE_SET_CREATED, calculate_status,
    check_paused_conditions, clear_invalid_spec, deployment_complete, get_condition, new_condition, progress_requeue,
    set_condition, status_update_required, sync_rollout_status,
};
use super::template::{deployment_hash, find_new_machine_set, machine_set_name, new_machine_set, sync_in_place};
use super::validation::{ValidationError, validate};
use super::{actual, set_name, spec_replicas};
use crate::api::mcm::names::{MACHINE_FINALIZER, PREFER_NO_SCHEDULE, REVISION, SCALE_UP_DISABLED};
use crate::api::mcm::{
    ConditionStatus, MachineDeployment, MachineDeploymentConditionType, MachineDeploymentStatus, MachineSet,
};
use crate::lifecycle::object_meta::{annotation, merge_patch_of, set_annotation};

/// CAPI's annotation telling a MachineSet not to create machines (set on OnDelete's old sets).
pub const DISABLE_MACHINE_CREATE: &str = "cluster.x-k8s.io/disable-machine-create";

/// Event: a set was scaled.
pub const SCALING_MACHINE_SET: &str = "ScalingMachineSet";
/// Event: machines updated in place moved to the new set.
pub const MACHINES_UPDATED_IN_PLACE: &str = "MachinesUpdatedInPlace";
/// Event: Nodes selected for their in-place update.
pub const SELECTED_FOR_UPDATE_EVENT: &str = "SelectedForInPlaceUpdate";
/// Event: rolled back.
pub const DEPLOYMENT_ROLLBACK: &str = "DeploymentRollback";
/// Warning: the rollback revision does not exist.
pub const ROLLBACK_REVISION_NOT_FOUND: &str = "DeploymentRollbackRevisionNotFound";
/// Warning: the rollback revision has the current template.
pub const ROLLBACK_TEMPLATE_UNCHANGED: &str = "DeploymentRollbackTemplateUnchanged";

/// Controller options that change decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeploymentOptions {
    /// `--autoscaler-scaledown-annotation-during-rollout` (default true): protect nodes from the autoscaler while
    /// a rollout runs.
    pub autoscaler_scale_down_annotation_during_rollout: bool,
}

impl Default for DeploymentOptions {
    fn default() -> Self {
        DeploymentOptions { autoscaler_scale_down_annotation_during_rollout: true }
    }
}

/// What one reconcile of a deployment looks at.
#[derive(Clone, Copy, Debug)]
pub struct DeploymentObservation<'a> {
    /// The deployment (read from the API server, as MCM does).
    pub deployment: &'a MachineDeployment,
    /// The MachineSets it controls.
    pub sets: &'a [MachineSet],
    /// The machines of those sets, with their Nodes.
    pub machines: &'a [DeploymentMachine],
    /// The current time.
    pub now: Timestamp,
    /// Controller options.
    pub options: DeploymentOptions,
}

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// An event to record on the deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// The reason (CamelCase).
    pub reason: &'static str,
    /// A sentence.
    pub note: String,
}

/// A merge patch (metadata and spec) for one MachineSet.
#[derive(Clone, Debug, PartialEq)]
pub struct SetUpdate {
    /// The MachineSet.
    pub name: String,
    /// The JSON merge patch.
    pub patch: Value,
}

/// A machine moving to another set of the deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineTransfer {
    /// The machine.
    pub machine: String,
    /// The set it leaves.
    pub from: String,
    /// The set it joins.
    pub to: String,
}

/// Adding or removing the deployment's finalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerChange {
    /// Add [`MACHINE_FINALIZER`].
    Add,
    /// Remove it: the deployment is being deleted and has no MachineSet left.
    Remove,
}

/// Every write of one reconcile.
#[derive(Clone, Debug, Default)]
pub struct DeploymentPlan {
    /// The finalizer change, if any.
    pub finalizer: Option<FinalizerChange>,
    /// Merge patch of the deployment's metadata and spec (annotations, rollback).
    pub deployment_patch: Option<Value>,
    /// Machines to annotate for the autoscaler path.
    pub machine_marks: Vec<MachineMark>,
    /// Machines updated in place that move to the new set (labels and owner; applied before the set patches,
    /// so neither set deletes nor creates a machine for them).
    pub transfers: Vec<MachineTransfer>,
    /// Machines whose `update-result` label goes (their new set counts them now); applied after the set patches.
    pub clear_moved: Vec<String>,
    /// The MachineSet to create.
    pub create_set: Option<MachineSet>,
    /// Patches of existing MachineSets (scale, annotations, in-place fields).
    pub update_sets: Vec<SetUpdate>,
    /// MachineSets to delete.
    pub delete_sets: Vec<String>,
    /// Node taints and annotations.
    pub nodes: NodeEffects,
    /// The status to write (`None`: unchanged).
    pub status: Option<MachineDeploymentStatus>,
    /// Events to record on the deployment.
    pub events: Vec<PlannedEvent>,
    /// Reconcile again after this long (the progress deadline), besides the periodic resync.
    pub requeue_after: Option<Duration>,
}

/// The outcome of one reconcile.
#[derive(Clone, Debug)]
pub enum DeploymentDecision {
    /// The deployment is invalid and is left alone; report the reasons.
    Invalid(Vec<ValidationError>),
    /// The writes to make.
    Plan(Box<DeploymentPlan>),
}

/// Decides one reconcile.
pub fn plan_deployment(obs: &DeploymentObservation<'_>) -> DeploymentDecision {
    let mut w = Work::new(obs);
    // Deletion needs no valid spec: an invalid deployment must not be stuck behind its finalizer (MCM validates
    // first and so never lets one go).
    if obs.deployment.metadata.deletion_timestamp.is_some() {
        w.teardown();
        return w.finish();
    }
    if let Err(errors) = validate(obs.deployment) {
        return DeploymentDecision::Invalid(errors);
    }
    if !has_finalizer(obs.deployment) {
        w.plan.finalizer = Some(FinalizerChange::Add);
    }
    let mut conditions = w.conditions();
    clear_invalid_spec(&mut conditions);
    check_paused_conditions(obs.deployment.spec.paused, &mut conditions, obs.now);
    w.set_conditions(conditions);

    let ca =
        plan_autoscaler_marks(&obs.deployment.metadata.annotations.clone().unwrap_or_default(), obs.machines, obs.now);
    for (k, v) in &ca.annotations {
        set_annotation(&mut w.d.metadata, k, v.as_deref());
    }
    w.plan.machine_marks = ca.marks;

    let new = w.sync_revision();
    if obs.deployment.spec.paused {
        w.sync(new, true);
    } else if let Some(rollback) = obs.deployment.spec.rollback_to.as_ref() {
        w.rollback(new, rollback.revision);
    } else if is_scaling_event(&w.d, new.map(|i| &w.sets[i]), &w.old_refs(new)) && !w.in_place_mid_rollout(new) {
        w.sync(new, false);
    } else if is_recreate(obs.deployment) {
        w.recreate(new);
    } else if is_rolling_update(obs.deployment) {
        w.rolling(new);
    } else if is_on_delete(obs.deployment) {
        w.on_delete(new);
    } else if is_in_place(obs.deployment) {
        w.in_place(new);
    }
    // CAPI's `rollout.after` still ahead: look again when it comes.
    if let Some(after) = crate::convert::capi_rollout_after(obs.deployment).filter(|a| *a > obs.now) {
        let wait = Duration::try_from(after.duration_since(obs.now)).unwrap_or(Duration::ZERO);
        w.plan.requeue_after = Some(w.plan.requeue_after.map_or(wait, |r| r.min(wait)));
    }
    w.finish()
}

/// The status and event to record when creating the new MachineSet failed (`MachineSetCreateError`).
pub fn create_failed(
    d: &MachineDeployment,
    set: &str,
    error: &str,
    now: Timestamp,
) -> (MachineDeploymentStatus, PlannedEvent) {
    let note = format!("Failed to create new machine set {set:?}: {error}");
    let mut status = d.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.take().unwrap_or_default();
    set_condition(
        &mut conditions,
        new_condition(
            MachineDeploymentConditionType::Progressing,
            ConditionStatus::False,
            MACHINE_SET_CREATE_ERROR,
            note.clone(),
            now,
        ),
    );
    status.conditions = Some(conditions);
    (status, PlannedEvent { type_: EventType::Warning, reason: MACHINE_SET_CREATE_ERROR, note })
}

fn has_finalizer(d: &MachineDeployment) -> bool {
    d.metadata.finalizers.iter().flatten().any(|f| f == MACHINE_FINALIZER)
}

/// Working copies and the plan being built.
struct Work<'a> {
    obs: &'a DeploymentObservation<'a>,
    /// The deployment as it will be after this reconcile (status: conditions and collision count only).
    d: MachineDeployment,
    /// The observed sets, then the created one (if any).
    sets: Vec<MachineSet>,
    plan: DeploymentPlan,
}

impl<'a> Work<'a> {
    fn new(obs: &'a DeploymentObservation<'a>) -> Self {
        Work { obs, d: obs.deployment.clone(), sets: obs.sets.to_vec(), plan: DeploymentPlan::default() }
    }

    fn conditions(&self) -> Vec<crate::api::mcm::MachineDeploymentCondition> {
        self.d.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default()
    }

    fn set_conditions(&mut self, conditions: Vec<crate::api::mcm::MachineDeploymentCondition>) {
        self.d.status.get_or_insert_with(Default::default).conditions = Some(conditions);
    }

    fn event(&mut self, type_: EventType, reason: &'static str, note: String) {
        self.plan.events.push(PlannedEvent { type_, reason, note });
    }

    fn name(&self) -> String {
        self.d.metadata.name.clone().unwrap_or_default()
    }

    fn old_indices(&self, new: Option<usize>) -> Vec<usize> {
        (0..self.sets.len()).filter(|i| Some(*i) != new).collect()
    }

    fn old_refs(&self, new: Option<usize>) -> Vec<&MachineSet> {
        self.old_indices(new).into_iter().map(|i| &self.sets[i]).collect()
    }

    fn all_refs(&self) -> Vec<&MachineSet> {
        self.sets.iter().collect()
    }

    fn names(&self, indices: &[usize]) -> Vec<String> {
        indices.iter().map(|&i| set_name(&self.sets[i]).to_string()).collect()
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.sets.iter().position(|s| set_name(s) == name)
    }

    /// The oldest set with the deployment's template.
    fn find_new(&self) -> Option<usize> {
        let after = crate::convert::capi_rollout_after(&self.d).filter(|a| *a <= self.obs.now);
        let name = set_name(find_new_machine_set(&self.d, &self.sets, after)?).to_string();
        self.index_of(&name)
    }

    /// Step 4: the existing new set's revision, annotations and in-place fields; the deployment's revision and
    /// `FoundNewMachineSet`. MCM updates the deployment only on the pass after the set; we do both at once.
    fn sync_revision(&mut self) -> Option<usize> {
        let i = self.find_new()?;
        let new_revision = max_revision(&self.old_refs(Some(i))) + 1;
        let d = self.d.clone();
        sync_new_set_annotations(&d, &mut self.sets[i], new_revision);
        sync_in_place(&d, &mut self.sets[i]);
        let revision = annotation(&self.sets[i].metadata, REVISION).map(str::to_string);
        if let Some(revision) = revision {
            set_annotation(&mut self.d.metadata, REVISION, Some(&revision));
        }
        let mut conditions = self.conditions();
        if get_condition(&conditions, MachineDeploymentConditionType::Progressing).is_none() {
            let message = format!("Found new machine set {:?}", set_name(&self.sets[i]));
            conditions.push(new_condition(
                MachineDeploymentConditionType::Progressing,
                ConditionStatus::True,
                FOUND_NEW_MACHINE_SET,
                message,
                self.obs.now,
            ));
            self.set_conditions(conditions);
        }
        Some(i)
    }

    /// Creates the new set if there is none. `None` on a name collision (the collision count goes up and the
    /// next reconcile tries another name).
    fn ensure_new_set(&mut self, new: Option<usize>) -> Option<usize> {
        if new.is_some() {
            return new;
        }
        let collision_count = self.d.status.as_ref().and_then(|s| s.collision_count);
        let name = machine_set_name(&self.name(), deployment_hash(&self.d));
        if self.index_of(&name).is_some() {
            let status = self.d.status.get_or_insert_with(Default::default);
            status.collision_count = Some(collision_count.unwrap_or(0).saturating_add(1));
            self.plan.requeue_after = Some(Duration::ZERO);
            return None;
        }
        let revision = max_revision(&self.all_refs()) + 1;
        let replicas_annotation = self.d.spec.replicas;
        let max = replicas_annotation.saturating_add(max_surge(&self.d));
        let mut set = new_machine_set(&self.d, 0, new_set_annotations(&self.d, revision, replicas_annotation, max));
        let replicas = {
            let mut all = self.all_refs();
            all.push(&set);
            new_set_replicas(&self.d, &all, &set)
        };
        set.spec.replicas = replicas;
        let name = set_name(&set).to_string();
        if replicas > 0 {
            self.event(EventType::Normal, SCALING_MACHINE_SET, format!("Scaled up machine set {name} to {replicas}"));
        }
        set_annotation(&mut self.d.metadata, REVISION, Some(&revision.to_string()));
        let mut conditions = self.conditions();
        set_condition(
            &mut conditions,
            new_condition(
                MachineDeploymentConditionType::Progressing,
                ConditionStatus::True,
                NEW_MACHINE_SET_CREATED,
                format!("Created new machine set {name:?}"),
                self.obs.now,
            ),
        );
        self.set_conditions(conditions);
        self.sets.push(set);
        Some(self.sets.len() - 1)
    }

    /// Scales one set. With `refresh` the replica annotations are rewritten even when the size stays
    /// (`scaleMachineSet`); without, an unchanged size is left alone (`scaleMachineSetAndRecordEvent`).
    /// Returns whether the size changed.
    fn scale_set(&mut self, target: &ScaleTarget, refresh: bool) -> bool {
        let Some(i) = self.index_of(&target.name) else {
            return false;
        };
        let current = spec_replicas(&self.sets[i]);
        if !refresh && current == target.replicas {
            return false;
        }
        let desired = self.d.spec.replicas;
        let max = desired.saturating_add(max_surge(&self.d));
        let set = &mut self.sets[i];
        super::revision::set_replicas_annotations(set, desired, max);
        if current == target.replicas {
            return false;
        }
        set.spec.replicas = target.replicas;
        let direction = if target.replicas > current { "up" } else { "down" };
        self.event(
            EventType::Normal,
            SCALING_MACHINE_SET,
            format!("Scaled {direction} machine set {} to {}", target.name, target.replicas),
        );
        true
    }

    /// Paused deployments and scaling events (`sync`): scale, clean up history when paused, plain status.
    fn sync(&mut self, new: Option<usize>, paused: bool) {
        let targets = scale(&self.d, new.map(|i| &self.sets[i]), &self.old_refs(new));
        for t in &targets {
            self.scale_set(t, true);
        }
        if paused && self.d.spec.rollback_to.is_none() {
            self.plan.delete_sets = history_cleanup(&self.d, &self.old_refs(new));
        }
        let status = calculate_status(&self.d, &self.all_refs(), new.map(|i| &self.sets[i]), self.obs.now);
        self.write_status(status, false);
    }

    fn rollback(&mut self, new: Option<usize>, to_revision: i64) {
        let d_name = self.name();
        let decision = plan_rollback(&self.d, &self.all_refs(), to_revision, new.is_some());
        let untaint = |w: &mut Self, set: &str| {
            if let Some(i) = w.index_of(set) {
                untaint_nodes(&mut w.plan.nodes, &[set], w.obs.machines);
                set_annotation(&mut w.sets[i].metadata, PREFER_NO_SCHEDULE, None);
            }
        };
        match decision {
            Rollback::RevisionNotFound { message } => {
                self.event(EventType::Warning, ROLLBACK_REVISION_NOT_FOUND, message)
            }
            Rollback::TemplateUnchanged { set } => {
                untaint(self, &set);
                self.event(
                    EventType::Warning,
                    ROLLBACK_TEMPLATE_UNCHANGED,
                    format!("The rollback revision contains the same template as current deployment {d_name:?}"),
                );
            }
            Rollback::RollBack { revision, set, template, annotations } => {
                untaint(self, &set);
                self.d.spec.template = *template;
                self.d.metadata.annotations = Some(annotations);
                self.event(
                    EventType::Normal,
                    DEPLOYMENT_ROLLBACK,
                    format!("Rolled back deployment {d_name:?} to revision {revision}"),
                );
            }
        }
        self.d.spec.rollback_to = None;
        // No status step: the spec change starts the next reconcile. Condition changes of this pass still go out.
        let mut status = self.obs.deployment.status.clone().unwrap_or_default();
        status.conditions = self.d.status.as_ref().and_then(|s| s.conditions.clone());
        status.collision_count = self.d.status.as_ref().and_then(|s| s.collision_count);
        self.write_status(status, false);
    }

    /// A deployment no longer OnDelete lets every set create machines again (core writes `false` then).
    fn allow_machine_creation(&mut self) {
        for set in &mut self.sets {
            if annotation(&set.metadata, DISABLE_MACHINE_CREATE).is_some_and(|v| v != "false") {
                set_annotation(&mut set.metadata, DISABLE_MACHINE_CREATE, Some("false"));
            }
        }
    }

    fn rolling(&mut self, new: Option<usize>) {
        self.allow_machine_creation();
        let Some(new) = self.ensure_new_set(new) else {
            return self.rollout_status(None);
        };
        self.leave_in_place(Some(new));
        let old = self.old_indices(Some(new));
        let old_names = self.names(&old);
        let old_name_refs: Vec<&str> = old_names.iter().map(String::as_str).collect();
        taint_old_nodes(&mut self.plan.nodes, &old_name_refs, self.obs.machines);
        for &i in &old {
            set_annotation(&mut self.sets[i].metadata, PREFER_NO_SCHEDULE, Some("True"));
        }
        self.protect_during_rollout(&old);

        let target = {
            let all = self.all_refs();
            reconcile_new_set(&self.d, &all, &self.sets[new])
        };
        if let Some(replicas) = target {
            let name = set_name(&self.sets[new]).to_string();
            if self.scale_set(&ScaleTarget { name, replicas }, false) {
                return self.rollout_status(Some(new));
            }
        }
        let targets = {
            let all = self.all_refs();
            reconcile_old_sets(&self.d, &all, &self.sets[new])
        };
        let mut scaled_down = false;
        for t in &targets {
            scaled_down |= self.scale_set(t, false);
        }
        if scaled_down {
            return self.rollout_status(Some(new));
        }
        if self.observed_complete() {
            self.release_after_rollout();
            let new_name = set_name(&self.sets[new]).to_string();
            untaint_nodes(&mut self.plan.nodes, &[new_name.as_str()], self.obs.machines);
            set_annotation(&mut self.sets[new].metadata, PREFER_NO_SCHEDULE, None);
            self.plan.delete_sets = history_cleanup(&self.d, &self.old_refs(Some(new)));
        }
        self.rollout_status(Some(new))
    }

    fn recreate(&mut self, new: Option<usize>) {
        self.allow_machine_creation();
        self.leave_in_place(new);
        let old = self.old_indices(new);
        self.protect_during_rollout(&old);
        let targets = recreate_scale_down(&self.old_refs(new));
        let mut scaled_down = false;
        for t in &targets {
            scaled_down |= self.scale_set(t, false);
        }
        if scaled_down {
            return self.rollout_status(new);
        }
        // Wait until every old machine is gone, as seen by the sets and by the machines themselves.
        let new_name = new.map(|i| set_name(&self.sets[i]).to_string());
        let old_machines = self.old_refs(new).iter().any(|s| actual(s) > 0)
            || self.obs.machines.iter().any(|m| m.set.is_none() || m.set != new_name);
        if old_machines {
            return self.rollout_status(new);
        }
        let Some(new) = self.ensure_new_set(new) else {
            return self.rollout_status(None);
        };
        let name = set_name(&self.sets[new]).to_string();
        self.scale_set(&ScaleTarget { name, replicas: self.d.spec.replicas }, false);
        if self.observed_complete() {
            self.release_after_rollout();
            self.plan.delete_sets = history_cleanup(&self.d, &self.old_refs(Some(new)));
        }
        self.rollout_status(Some(new))
    }

    /// CAPI's OnDelete: the new set grows only into the room deleted old machines leave; old sets follow their
    /// deletions and never make new machines (core's `disable-machine-create` annotation on them).
    fn on_delete(&mut self, new: Option<usize>) {
        let Some(new) = self.ensure_new_set(new) else {
            return self.rollout_status(None);
        };
        self.leave_in_place(Some(new));
        let old = self.old_indices(Some(new));
        for &i in &old {
            set_annotation(&mut self.sets[i].metadata, DISABLE_MACHINE_CREATE, Some("true"));
        }
        set_annotation(&mut self.sets[new].metadata, DISABLE_MACHINE_CREATE, Some("false"));
        let new_target = {
            let all = self.all_refs();
            reconcile_new_set(&self.d, &all, &self.sets[new])
        };
        let new_replicas = new_target.unwrap_or(self.sets[new].spec.replicas);
        let targets = on_delete_old_sets(&self.d, &self.old_refs(Some(new)), new_replicas);
        for t in &targets {
            self.scale_set(t, false);
        }
        if let Some(replicas) = new_target {
            let name = set_name(&self.sets[new]).to_string();
            self.scale_set(&ScaleTarget { name, replicas }, false);
        }
        if self.observed_complete() {
            self.plan.delete_sets = history_cleanup(&self.d, &self.old_refs(Some(new)));
        }
        self.rollout_status(Some(new))
    }

    /// The new set may create machines again: an in-place rollout marks old sets `scale-up-disabled`, and a
    /// revert makes such a set new (MCM never removes the label, and the set could never replace a machine).
    fn enable_scale_up(&mut self, new: usize) {
        if let Some(labels) = self.sets[new].metadata.labels.as_mut() {
            labels.remove(SCALE_UP_DISABLED);
        }
    }

    /// Left over from an in-place rollout when the strategy changed: the new set's scale-up block and its machines'
    /// `update-result` labels (which shield them from scale-down), and `candidate-for-update` on Nodes not being
    /// updated. Nodes mid-update finish it (the machine controller follows their labels) or are replaced.
    fn leave_in_place(&mut self, new: Option<usize>) {
        if let Some(new) = new {
            self.enable_scale_up(new);
        }
        let new_name = new.map(|i| set_name(&self.sets[i]).to_string());
        for m in self.obs.machines {
            if m.moved_in_place && m.set.is_some() && m.set == new_name {
                super::nodes::push_unique(&mut self.plan.clear_moved, &m.name);
            }
            if let Some(node) = m.node.as_ref().filter(|n| n.in_place.candidate && !n.in_place.selected) {
                super::nodes::push_unique(&mut self.plan.nodes.unlabel_candidate, &node.name);
            }
        }
    }

    /// An in-place rollout with several active sets: a change of replicas is the in-place steps' to follow (the new
    /// set grows into lost room, old sets go to 0 once it is complete). `scale()` shares replicas out only for a
    /// rolling update, so as a scaling event it would change nothing and come back on every pass.
    fn in_place_mid_rollout(&self, new: Option<usize>) -> bool {
        is_in_place(&self.d)
            && super::scaling::active_or_latest(new.map(|i| &self.sets[i]), &self.old_refs(new)).is_none()
    }

    /// MCM's InPlaceUpdate strategy (`in_place`): mark the old sets and their Nodes, count moved machines, then
    /// grow or move into the new set, then scale old sets to 0 or select the next Nodes.
    fn in_place(&mut self, new: Option<usize>) {
        self.allow_machine_creation();
        let Some(new) = self.ensure_new_set(new) else {
            return self.rollout_status(None);
        };
        self.enable_scale_up(new);
        let old = self.old_indices(Some(new));
        let old_names = self.names(&old);
        let old_name_refs: Vec<&str> = old_names.iter().map(String::as_str).collect();
        if !old_sets_at_zero(&self.old_refs(Some(new))) {
            for &i in &old {
                self.sets[i]
                    .metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert(SCALE_UP_DISABLED.into(), "true".into());
                set_annotation(&mut self.sets[i].metadata, PREFER_NO_SCHEDULE, Some("True"));
            }
            self.protect_during_rollout(&old);
            taint_old_nodes(&mut self.plan.nodes, &old_name_refs, self.obs.machines);
            self.plan.nodes.label_candidate = candidates_to_label(&old_name_refs, self.obs.machines);
        }

        let sync = {
            // As observed: an old set shrinks only once it was seen marked `scale-up-disabled`.
            let observed: Vec<&MachineSet> =
                self.obs.sets.iter().filter(|s| old_names.iter().any(|n| n == set_name(s))).collect();
            sync_sets(&self.sets[new], &observed, self.obs.machines)
        };
        let new_name = set_name(&self.sets[new]).to_string();
        if let Some(replicas) = sync.scale_new {
            self.scale_set(&ScaleTarget { name: new_name.clone(), replicas }, false);
        }
        self.plan.clear_moved = sync.clear_moved;
        self.plan.nodes.in_place_done = sync.done_nodes;
        self.plan.nodes.unlabel_candidate = sync.unlabel;
        for t in &sync.shrink_old {
            self.scale_set(t, false);
        }

        let step = {
            let old_refs = self.old_refs(Some(new));
            reconcile_new(&self.d, &self.sets[new], &old_refs, self.obs.machines)
        };
        match step {
            NewSetStep::Stay => {}
            NewSetStep::Scale(replicas) => {
                if self.scale_set(&ScaleTarget { name: new_name.clone(), replicas }, false) {
                    return self.rollout_status(Some(new));
                }
            }
            NewSetStep::Transfer(moves) => {
                for t in moves {
                    if let Some(i) = self.index_of(&t.from) {
                        self.sets[i].spec.replicas -= 1;
                    }
                    self.sets[new].spec.replicas += 1;
                    self.plan.transfers.push(MachineTransfer {
                        machine: t.machine,
                        from: t.from,
                        to: new_name.clone(),
                    });
                }
                let moved = self.plan.transfers.len();
                self.event(
                    EventType::Normal,
                    MACHINES_UPDATED_IN_PLACE,
                    format!("Moved {moved} machine(s) updated in place to machine set {new_name}"),
                );
                return self.rollout_status(Some(new));
            }
        }

        let step = {
            let old_refs = self.old_refs(Some(new));
            reconcile_old(&self.d, &self.sets[new], &old_refs, self.obs.machines)
        };
        match step {
            OldSetStep::Wait => {}
            OldSetStep::ScaleToZero => {
                let mut scaled = false;
                for name in &old_names {
                    scaled |= self.scale_set(&ScaleTarget { name: name.clone(), replicas: 0 }, false);
                }
                if scaled {
                    return self.rollout_status(Some(new));
                }
            }
            OldSetStep::Select(nodes) => {
                self.event(
                    EventType::Normal,
                    SELECTED_FOR_UPDATE_EVENT,
                    format!("Selected node(s) {} for in-place update", nodes.join(", ")),
                );
                self.plan.nodes.label_selected = nodes;
                return self.rollout_status(Some(new));
            }
        }
        if self.observed_complete() {
            self.release_after_rollout();
            untaint_nodes(&mut self.plan.nodes, &[new_name.as_str()], self.obs.machines);
            set_annotation(&mut self.sets[new].metadata, PREFER_NO_SCHEDULE, None);
            self.plan.delete_sets = history_cleanup(&self.d, &self.old_refs(Some(new)));
        }
        self.rollout_status(Some(new))
    }

    /// While old sets still have machines, protect every node of the deployment from autoscaler scale-down.
    fn protect_during_rollout(&mut self, old: &[usize]) {
        if !self.obs.options.autoscaler_scale_down_annotation_during_rollout || old.is_empty() {
            return;
        }
        let old_refs: Vec<&MachineSet> = old.iter().map(|&i| &self.sets[i]).collect();
        if old_sets_at_zero(&old_refs) {
            return;
        }
        let all = self.names(&(0..self.sets.len()).collect::<Vec<_>>());
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        disable_scale_down(&mut self.plan.nodes, &all, self.obs.machines);
    }

    /// Once complete: lift the rollout's autoscaler protection.
    fn release_after_rollout(&mut self) {
        if !self.obs.options.autoscaler_scale_down_annotation_during_rollout {
            return;
        }
        let all = self.names(&(0..self.sets.len()).collect::<Vec<_>>());
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        enable_scale_down(&mut self.plan.nodes, &all, self.obs.machines);
    }

    /// Completion as MCM judges it before acting: on the status written by the last reconcile.
    fn observed_complete(&self) -> bool {
        let d = self.obs.deployment;
        deployment_complete(d, &d.status.clone().unwrap_or_default())
    }

    fn rollout_status(&mut self, new: Option<usize>) {
        let status = sync_rollout_status(&self.d, &self.all_refs(), new.map(|i| &self.sets[i]), self.obs.now);
        self.write_status(status, true);
    }

    fn write_status(&mut self, status: MachineDeploymentStatus, track_progress: bool) {
        if track_progress {
            let requeue = progress_requeue(&self.d, &status, self.obs.now);
            self.plan.requeue_after = self.plan.requeue_after.or(requeue);
        }
        let observed = self.obs.deployment.status.clone().unwrap_or_default();
        if status_update_required(&observed, &status) {
            self.plan.status = Some(status);
        }
    }

    /// Being deleted: delete every set not yet being deleted; drop the finalizer once none is left.
    fn teardown(&mut self) {
        if !has_finalizer(self.obs.deployment) {
            return;
        }
        if self.sets.is_empty() {
            self.plan.finalizer = Some(FinalizerChange::Remove);
            return;
        }
        self.plan.delete_sets = self
            .sets
            .iter()
            .filter(|s| s.metadata.deletion_timestamp.is_none())
            .map(|s| set_name(s).to_string())
            .collect();
        let new = self.find_new();
        let status = calculate_status(&self.d, &self.all_refs(), new.map(|i| &self.sets[i]), self.obs.now);
        self.write_status(status, false);
    }

    fn finish(mut self) -> DeploymentDecision {
        let observed = self.obs.sets.len();
        for (before, after) in self.obs.sets.iter().zip(&self.sets) {
            if let Some(patch) = spec_and_metadata_patch(before, after) {
                self.plan.update_sets.push(SetUpdate { name: set_name(after).to_string(), patch });
            }
        }
        self.plan.create_set = self.sets.get(observed).cloned();
        self.plan.deployment_patch = spec_and_metadata_patch(self.obs.deployment, &self.d);
        DeploymentDecision::Plan(Box::new(self.plan))
    }
}

/// The merge patch between two objects, without `status` (written through its own subresource).
fn spec_and_metadata_patch<T: serde::Serialize>(before: &T, after: &T) -> Option<Value> {
    let mut patch = merge_patch_of(before, after)?;
    let map = patch.as_object_mut()?;
    map.remove("status");
    if map.is_empty() {
        return None;
    }
    // Our types omit zero counts, which a diff renders as a removal; write the 0 explicitly instead.
    if let Some(spec) = map.get_mut("spec").and_then(Value::as_object_mut) {
        for key in ["replicas", "minReadySeconds", "autoPreserveFailedMachineMax"] {
            if let Some(v) = spec.get_mut(key).filter(|v| v.is_null()) {
                *v = Value::from(0);
            }
        }
    }
    Some(patch)
}

#[cfg(test)]
mod tests;
