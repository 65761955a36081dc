//! The MachineDeployment controller (`docs/machine-lifecycle.md` `reconcileClusterMachineDeployment`: claim
//! the MachineSets, let `lifecycle::machine_deployment::plan::plan_deployment` decide the whole pass, and apply
//! its plan in order — finalizer, the deployment's own metadata and spec, the autoscaler's machine marks (and wait
//! until the stores show them, so the MachineSet picks the marked machines), the new set, set patches and
//! deletions, Node taints and annotations, the status, events.
//!
//! An invalid deployment is not reconciled; unlike MCM, which skips it silently, it gets `Progressing=False`
//! (reason `InvalidSpec`, or `SelectingAll` for an empty selector) and a Warning event saying what to fix.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{DeleteParams, Patch, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::SetsContext;
use super::machine_set::params;
use super::settle::Written;
use crate::api::mcm::{MachineDeployment, MachineDeploymentStatus, MachineSet};
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::{Error, is_conflict, is_not_found};
use crate::controllers::writes::{self, MANAGER};
use crate::lifecycle::claim::{Claim, Owner, adopt_patch, claim, controller_ref, release_patch};
use crate::lifecycle::deletion_order::{MACHINE_PRIORITY, MARKED_FOR_DELETION_TIME};
use crate::lifecycle::machine_deployment::nodes::{DeploymentMachine, NodeEffects};
use crate::lifecycle::machine_deployment::plan::{
    DeploymentDecision, DeploymentObservation, DeploymentPlan, EventType, FINALIZER, FinalizerChange, create_failed,
    plan_deployment,
};
use crate::lifecycle::machine_deployment::status::{invalid_spec_status, status_update_required};
use crate::lifecycle::machine_deployment::template::{CreateConflict, on_create_conflict};
use crate::lifecycle::machine_deployment::validation::{ValidationError, validate};
use crate::lifecycle::machine_deployment::{PREFER_NO_SCHEDULE, SCALE_DOWN_DISABLED, SCALE_DOWN_DISABLED_BY_MCM};
use crate::lifecycle::names::NODE_LABEL;
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::status_patch;

/// Reconciles a MachineDeployment.
pub(super) async fn reconcile(d: Arc<MachineDeployment>, ctx: Arc<SetsContext>) -> Result<Action, Error> {
    if crate::lifecycle::names::paused(&d.metadata) {
        return Ok(Action::await_change());
    }
    ctx.ready().await;
    let key = key_of(&*d);
    let now = Timestamp::now();
    let resync = ctx.base.config.resync;
    let deleting = d.metadata.deletion_timestamp.is_some();
    if deleting && !has_finalizer(&d) {
        return Ok(Action::await_change());
    }
    if !deleting && let Err(errors) = validate(&d) {
        report_invalid(&ctx, &d, &errors, now).await?;
        return Ok(Action::requeue(resync));
    }
    let mut written = Written::default();
    let result = observe_and_act(&ctx, &d, now, &mut written).await;
    // Settled also after an error, so the retry starts from what this pass did.
    written.settle(&ctx.base.machines, &ctx.sets, &ctx.deployments, &key).await;
    let next = result?;
    ctx.base.retries.reset(&format!("deployment:{key}"));
    Ok(match next {
        Some(after) => Action::requeue(after.min(resync)),
        None => Action::await_change(),
    })
}

/// Claims the sets, plans the pass and applies the plan; returns when to look again.
async fn observe_and_act(
    ctx: &SetsContext,
    d: &MachineDeployment,
    now: Timestamp,
    written: &mut Written,
) -> Result<Option<Duration>, Error> {
    let sets = claim_sets(ctx, d, written).await?;
    let uids: HashSet<String> = sets.iter().filter_map(|s| s.uid()).collect();
    let namespace = d.namespace();
    let machines: Vec<DeploymentMachine> = ctx
        .base
        .machines
        .state()
        .iter()
        .filter(|m| m.namespace() == namespace)
        .filter(|m| crate::lifecycle::claim::controller_of(&m.metadata).is_some_and(|r| uids.contains(&r.uid)))
        .map(|m| {
            let node = m.labels().get(NODE_LABEL).and_then(|n| ctx.base.node(n));
            DeploymentMachine::from_machine(m, node.as_deref())
        })
        .collect();
    let observation =
        DeploymentObservation { deployment: d, sets: &sets, machines: &machines, now, options: ctx.options.deployment };
    let plan = match plan_deployment(&observation) {
        DeploymentDecision::Plan(plan) => *plan,
        DeploymentDecision::Invalid(errors) => {
            report_invalid(ctx, d, &errors, now).await?;
            return Ok(Some(ctx.base.config.resync));
        }
    };
    tracing::debug!(machine_deployment = %key_of(d), sets = ?sets.iter().map(|s| (s.name_any(), s.spec.replicas)).collect::<Vec<_>>(), ?plan, "plan");
    execute(ctx, d, &sets, plan, now, written).await
}

/// After an API error: back off per deployment.
pub(super) fn error_policy(d: Arc<MachineDeployment>, error: &Error, ctx: Arc<SetsContext>) -> Action {
    let key = key_of(&*d);
    crate::controllers::error::log_reconcile_failure!(error, machine_deployment = %key);
    Action::requeue(ctx.base.retries.fail(&format!("deployment:{key}"), error.retry_class(), &ctx.base.config, None))
}

fn has_finalizer(d: &MachineDeployment) -> bool {
    d.finalizers().iter().any(|f| f == FINALIZER)
}

fn describe(d: &MachineDeployment) -> String {
    format!("MachineDeployment {}", key_of(d))
}

/// An invalid spec: the `Progressing` condition and, when it changes, a Warning event.
async fn report_invalid(
    ctx: &SetsContext,
    d: &MachineDeployment,
    errors: &[ValidationError],
    now: Timestamp,
) -> Result<(), Error> {
    let old = d.status.clone().unwrap_or_default();
    let status = invalid_spec_status(d, errors, now);
    if !status_update_required(&old, &status) {
        return Ok(());
    }
    write_status(ctx, d, &old, &status).await?;
    let note = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    let reason = if errors.contains(&ValidationError::EmptySelector) { "SelectingAll" } else { "InvalidSpec" };
    tracing::warn!(machine_deployment = %key_of(d), "not reconciled: {note}");
    publish_to(&ctx.deployment_events, d, EventSpec::warning(reason, note)).await;
    Ok(())
}

/// Writes what changed from `old` to `new` to the status; when the conditions change, guarded by `d`'s
/// resourceVersion (the freeze writes conditions too, and the list is written whole).
async fn write_status(
    ctx: &SetsContext,
    d: &MachineDeployment,
    old: &MachineDeploymentStatus,
    new: &MachineDeploymentStatus,
) -> Result<Option<MachineDeployment>, Error> {
    let Some(mut patch) = status_patch(old, new) else { return Ok(None) };
    if patch["status"].get("conditions").is_some() {
        patch["metadata"] = json!({"resourceVersion": d.resource_version()});
    }
    let api: Api<MachineDeployment> = Api::namespaced(ctx.base.control.clone(), &d.namespace().unwrap_or_default());
    api.patch_status(&d.name_any(), &params(), &Patch::Merge(&patch))
        .await
        .map(Some)
        .map_err(|e| Error::kube("patch status of", describe(d), e))
}

/// The deployment's sets after adopting matching orphans and releasing sets that no longer match.
async fn claim_sets(ctx: &SetsContext, d: &MachineDeployment, written: &mut Written) -> Result<Vec<MachineSet>, Error> {
    let namespace = d.namespace().unwrap_or_default();
    let api: Api<MachineSet> = Api::namespaced(ctx.base.control.clone(), &namespace);
    let selector = d.spec.selector.clone().unwrap_or_default();
    let uid = d.uid().unwrap_or_default();
    let owner = Owner { uid: &uid, selector: &selector, deleting: d.metadata.deletion_timestamp.is_some() };
    let mut mine = Vec::new();
    let mut orphans = Vec::new();
    for s in ctx.sets.state().into_iter().filter(|s| s.namespace().as_deref() == Some(namespace.as_str())) {
        match claim(owner, &s.metadata) {
            Claim::Owned => mine.push((*s).clone()),
            Claim::Adopt => orphans.push(s),
            Claim::Release => {
                tracing::info!(machine_deployment = %key_of(d), machine_set = %s.name_any(), "releasing a set that no longer matches");
                match writes::merge(&api, &*s, &release_patch(&s.metadata, &uid), "release").await {
                    Ok(updated) => written.set_changed(&s, &updated),
                    Err(e) => tracing::info!(machine_set = %key_of(&*s), error = %e, "release failed; next pass"),
                }
            }
            Claim::Ignore => {}
        }
    }
    if orphans.is_empty() {
        return Ok(mine);
    }
    let deployments: Api<MachineDeployment> = Api::namespaced(ctx.base.control.clone(), &namespace);
    let fresh = deployments.get_opt(&d.name_any()).await.map_err(|e| Error::kube("get", describe(d), e))?;
    if fresh.is_none_or(|f| f.uid() != d.uid() || f.metadata.deletion_timestamp.is_some()) {
        return Ok(mine);
    }
    let reference = controller_ref("MachineDeployment", &d.metadata);
    for s in orphans {
        match writes::merge(&api, &*s, &adopt_patch(&s.metadata, &reference), "adopt").await {
            Ok(updated) => {
                tracing::info!(machine_deployment = %key_of(d), machine_set = %s.name_any(), "adopted a set");
                written.set_changed(&s, &updated);
                mine.push(updated);
            }
            Err(e) => tracing::info!(machine_set = %key_of(&*s), error = %e, "adoption failed; next pass"),
        }
    }
    Ok(mine)
}

/// `patch` with `metadata.resourceVersion` set: a precondition on the write.
pub(crate) fn guarded(mut patch: Value, resource_version: Option<String>) -> Value {
    if let Some(map) = patch.as_object_mut() {
        let meta = map.entry("metadata").or_insert_with(|| json!({}));
        meta["resourceVersion"] = json!(resource_version);
    }
    patch
}

/// Applies the plan; returns when to look again (`None`: on the next change only).
async fn execute(
    ctx: &SetsContext,
    d: &MachineDeployment,
    sets: &[MachineSet],
    plan: DeploymentPlan,
    now: Timestamp,
    written: &mut Written,
) -> Result<Option<Duration>, Error> {
    let namespace = d.namespace().unwrap_or_default();
    let api: Api<MachineDeployment> = Api::namespaced(ctx.base.control.clone(), &namespace);
    let sets_api: Api<MachineSet> = Api::namespaced(ctx.base.control.clone(), &namespace);
    let resync = ctx.base.config.resync;
    let mut current = d.clone();

    match plan.finalizer {
        Some(FinalizerChange::Add) => {
            let mut finalizers = current.finalizers().to_vec();
            finalizers.push(FINALIZER.to_string());
            let patch = guarded(json!({"metadata": {"finalizers": finalizers}}), current.resource_version());
            let updated = writes::merge(&api, &current, &patch, "add a finalizer to").await?;
            written.deployment_changed(&current, &updated);
            current = updated;
        }
        Some(FinalizerChange::Remove) => {
            tracing::info!(machine_deployment = %key_of(d), "no machine set left; removing the finalizer");
            writes::remove_finalizer(&api, &current, FINALIZER).await?;
            return Ok(None);
        }
        None => {}
    }

    if let Some(patch) = plan.deployment_patch {
        // Guarded: the autoscaler rewrites `trigger-deletion-by-mcm` too, and its entries must not be lost.
        let patch = guarded(patch, current.resource_version());
        let updated = writes::merge(&api, &current, &patch, "update").await?;
        written.deployment_changed(&current, &updated);
        current = updated;
    }

    if !plan.machine_marks.is_empty() {
        let machines: Api<crate::api::mcm::Machine> = Api::namespaced(ctx.base.control.clone(), &namespace);
        for mark in &plan.machine_marks {
            let mut annotations = serde_json::Map::new();
            if mark.priority_one {
                annotations.insert(MACHINE_PRIORITY.into(), json!("1"));
            }
            if let Some(t) = &mark.marked_for_deletion_time {
                annotations.insert(MARKED_FOR_DELETION_TIME.into(), json!(t));
            }
            let Some(machine) =
                ctx.base.machines.get(&kube::runtime::reflector::ObjectRef::new(&mark.machine).within(&namespace))
            else {
                continue;
            };
            tracing::info!(machine_deployment = %key_of(d), machine = %mark.machine, "marked for deletion by the cluster-autoscaler");
            let patch = json!({"metadata": {"annotations": annotations}});
            match writes::merge(&machines, &*machine, &patch, "mark").await {
                Ok(updated) => written.machine_changed(&machine, &updated),
                Err(Error::Kube { source, .. }) if is_not_found(&source) => {}
                Err(e) => return Err(e),
            }
        }
        // The set's scale-down below must find the marks, or it would pick another victim.
        written.settle_machines(&ctx.base.machines, &key_of(d)).await;
    }

    if let Some(new_set) = plan.create_set {
        let name = new_set.name_any();
        let post = PostParams { field_manager: Some(MANAGER.to_string()), ..Default::default() };
        match sets_api.create(&post, &new_set).await {
            Ok(created) => {
                tracing::info!(machine_deployment = %key_of(d), machine_set = %name, replicas = created.spec.replicas, "created the new machine set");
                written.set_created(&created);
            }
            Err(e) if is_conflict(&e) => {
                let existing = sets_api
                    .get(&name)
                    .await
                    .map_err(|e| Error::kube("get", format!("MachineSet {namespace}/{name}"), e))?;
                return match on_create_conflict(&current, &existing) {
                    // Ours, not in the store yet: its notice brings us back.
                    CreateConflict::Adopt => Ok(Some(Duration::from_millis(200))),
                    CreateConflict::Collision { collision_count } => {
                        tracing::info!(machine_deployment = %key_of(d), machine_set = %name, collision_count, "template hash collision");
                        let old = current.status.clone().unwrap_or_default();
                        let new = MachineDeploymentStatus { collision_count: Some(collision_count), ..old.clone() };
                        if let Some(updated) = write_status(ctx, &current, &old, &new).await? {
                            written.deployment_changed(&current, &updated);
                        }
                        Ok(Some(Duration::ZERO))
                    }
                };
            }
            Err(e) => {
                let error = Error::kube("create", format!("MachineSet {namespace}/{name}"), e);
                let (status, event) = create_failed(&current, &name, &error.to_string(), now);
                let old = current.status.clone().unwrap_or_default();
                if status_update_required(&old, &status)
                    && let Some(updated) = write_status(ctx, &current, &old, &status).await?
                {
                    written.deployment_changed(&current, &updated);
                }
                publish_to(&ctx.deployment_events, d, EventSpec::warning(event.reason, event.note)).await;
                return Err(error);
            }
        }
    }

    for update in &plan.update_sets {
        let Some(before) = sets.iter().find(|s| s.metadata.name.as_deref() == Some(update.name.as_str())) else {
            continue;
        };
        match writes::merge(&sets_api, before, &update.patch, "update").await {
            Ok(updated) => written.set_changed(before, &updated),
            Err(Error::Kube { source, .. }) if is_not_found(&source) => {}
            Err(e) => return Err(e),
        }
    }
    for name in &plan.delete_sets {
        let Some(set) = sets.iter().find(|s| s.metadata.name.as_deref() == Some(name.as_str())) else { continue };
        tracing::info!(machine_deployment = %key_of(d), machine_set = %name, "deleting a machine set");
        match sets_api.delete(name, &DeleteParams::default()).await {
            Ok(_) => written.set_deleted(set),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Error::kube("delete", format!("MachineSet {namespace}/{name}"), e)),
        }
    }

    apply_node_effects(ctx.base.target.as_ref(), &|n| ctx.base.node(n), &plan.nodes).await;

    if let Some(status) = &plan.status {
        let old = current.status.clone().unwrap_or_default();
        if let Some(updated) = write_status(ctx, &current, &old, status).await? {
            written.deployment_changed(&current, &updated);
        }
    }
    for e in plan.events {
        let event = match e.type_ {
            EventType::Normal => EventSpec::normal(e.reason, e.note),
            EventType::Warning => EventSpec::warning(e.reason, e.note),
        };
        publish_to(&ctx.deployment_events, d, event).await;
    }
    Ok(Some(plan.requeue_after.map_or(resync, |after| after.min(resync))))
}

/// The rollout's taints and annotations on Nodes: one merge patch per Node. A Node that changed meanwhile (or
/// went) is skipped; its change brings the deployment back.
pub(crate) async fn apply_node_effects(
    target: Option<&kube::Client>,
    node: &(dyn Fn(&str) -> Option<Arc<Node>> + Sync),
    effects: &NodeEffects,
) {
    let Some(target) = target else { return };
    if effects.is_empty() {
        return;
    }
    let api: Api<Node> = Api::all(target.clone());
    let names: BTreeSet<&String> = effects
        .add_prefer_no_schedule
        .iter()
        .chain(&effects.remove_prefer_no_schedule)
        .chain(&effects.disable_scale_down)
        .chain(&effects.enable_scale_down)
        .collect();
    for name in names {
        let Some(node) = node(name) else { continue };
        let mut patch = json!({});
        let add = effects.add_prefer_no_schedule.contains(name);
        if add || effects.remove_prefer_no_schedule.contains(name) {
            let mut taints: Vec<Taint> = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t.key != PREFER_NO_SCHEDULE)
                .collect();
            if add {
                taints.push(Taint {
                    key: PREFER_NO_SCHEDULE.into(),
                    value: Some("True".into()),
                    effect: "PreferNoSchedule".into(),
                    time_added: None,
                });
            }
            // The taint list is written whole: guard it with the Node's version.
            patch = guarded(json!({"spec": {"taints": taints}}), node.resource_version());
        }
        if effects.disable_scale_down.contains(name) {
            patch["metadata"]["annotations"] = json!({SCALE_DOWN_DISABLED: "true", SCALE_DOWN_DISABLED_BY_MCM: "true"});
        } else if effects.enable_scale_down.contains(name) {
            patch["metadata"]["annotations"] = json!({SCALE_DOWN_DISABLED: null, SCALE_DOWN_DISABLED_BY_MCM: null});
        }
        if let Err(e) = writes::merge(&api, &*node, &patch, "update the rollout marks of").await {
            tracing::info!(node = %name, error = %e, "node not updated; next pass");
        }
    }
}
