//! The MachineDeployment controller on CAPI objects: CAPI's defaults, the hub view of the deployment, its sets and
//! their machines, MCM's whole-pass decision (`lifecycle::machine_deployment::plan::plan_deployment`), and the plan
//! applied to CAPI objects: the hub patches of the deployment and its sets are turned into CAPI patches by
//! converting the object before and after the patch and writing the difference.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::Written;
use super::machine_set::{params, selector_string};
use super::{CapiContext, capi_controller_ref, capi_owner_refs};
use crate::api::capi::{CLUSTER_NAME_LABEL, Machine, MachineDeployment, MachineDeploymentStatus, MachineSet};
use crate::api::mcm;
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::{Error, is_conflict, is_not_found};
use crate::controllers::sets::machine_deployment::{apply_node_effects, guarded};
use crate::controllers::writes::{self, MANAGER};
use crate::convert::machine_view::machine_to_hub;
use crate::convert::{
    apply_capi_deployment_defaults, deployment_from_capi, deployment_status_to_capi, deployment_to_capi,
    machine_set_from_capi, machine_set_to_capi,
};
use crate::lifecycle::capi_cluster::deployment_membership_patch;
use crate::lifecycle::capi_machine::merge_conditions;
use crate::lifecycle::capi_replicas::{Availability, ReplicaObservation, machine_deployment_conditions};
use crate::lifecycle::claim::{Claim, Owner, adopt_patch, claim, controller_of, release_patch};
use crate::lifecycle::deletion_order::{MACHINE_PRIORITY, MARKED_FOR_DELETION_TIME};
use crate::lifecycle::machine_deployment::nodes::DeploymentMachine;
use crate::lifecycle::machine_deployment::plan::{
    DeploymentDecision, DeploymentObservation, DeploymentPlan, EventType, FinalizerChange, plan_deployment,
};
use crate::lifecycle::machine_deployment::rollout::max_unavailable;
use crate::lifecycle::machine_deployment::template::{CreateConflict, on_create_conflict};
use crate::lifecycle::machine_deployment::validation::validate;
use crate::lifecycle::merge_patch_of;
use crate::lifecycle::names::NODE_LABEL;
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::status_patch;

/// The finalizer our MachineDeployment controller holds on CAPI MachineDeployments.
pub const FINALIZER: &str = "capi.machine.sapcloud.io/machinedeployment";
/// The label naming a MachineSet's or Machine's MachineDeployment (CAPI's).
pub const DEPLOYMENT_NAME_LABEL: &str = crate::api::capi::DEPLOYMENT_NAME_LABEL;

/// Reconciles a CAPI MachineDeployment.
pub(super) async fn reconcile(d: Arc<MachineDeployment>, ctx: Arc<CapiContext>) -> Result<Action, Error> {
    ctx.ready().await;
    let conditions = d.status.as_ref().and_then(|s| s.conditions.as_ref());
    if super::hold_if_paused(&ctx, &*d, &d.spec.cluster_name, conditions).await?.is_some() {
        return Ok(Action::await_change());
    }
    if super::left_to_upstream_core(&ctx, &*d, Some(&ctx.deployment_events), Some(FINALIZER)).await? {
        return Ok(Action::await_change());
    }
    let key = key_of(&*d);
    let now = Timestamp::now();
    let resync = ctx.config.resync;
    let deleting = d.metadata.deletion_timestamp.is_some();
    if deleting && !d.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let mut defaulted = (*d).clone();
    apply_capi_deployment_defaults(&mut defaulted);
    let hub = deployment_from_capi(&defaulted);
    if !deleting && let Err(errors) = validate(&hub) {
        if ctx.first_report(&key, d.metadata.generation.unwrap_or(0)) {
            let note = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            tracing::warn!(machine_deployment = %key, "not reconciled: {note}");
            publish_to(&ctx.deployment_events, &*d, EventSpec::warning("InvalidSpec", note)).await;
        }
        return Ok(Action::requeue(resync));
    }
    let cluster = ctx.clusters.get(
        &kube::runtime::reflector::ObjectRef::new(&d.spec.cluster_name).within(&d.namespace().unwrap_or_default()),
    );
    if !deleting && let Some(patch) = deployment_membership_patch(&d.metadata, &d.spec.cluster_name, cluster.as_deref())
    {
        let api: Api<MachineDeployment> = Api::namespaced(ctx.control.clone(), &d.namespace().unwrap_or_default());
        writes::merge(&api, &*d, &patch, "label and own").await?;
        // The write's watch event brings the labelled object back; the guarded writes below would conflict now.
        return Ok(Action::await_change());
    }
    let mut written = Written::default();
    let result = observe_and_act(&ctx, &d, &hub, now, &mut written).await;
    written.settle(&ctx.machines, &ctx.sets, &ctx.deployments, &key).await;
    let next = result?;
    ctx.retries.reset(&format!("capi-deployment:{key}"));
    Ok(match next {
        Some(after) => Action::requeue(after.min(resync)),
        None => Action::await_change(),
    })
}

/// After an API error: back off per deployment.
pub(super) fn error_policy(d: Arc<MachineDeployment>, error: &Error, ctx: Arc<CapiContext>) -> Action {
    let key = key_of(&*d);
    crate::controllers::error::log_reconcile_failure!(error, machine_deployment = %key);
    Action::requeue(ctx.retries.fail(&format!("capi-deployment:{key}"), error.retry_class(), &ctx.config, None))
}

async fn observe_and_act(
    ctx: &CapiContext,
    d: &MachineDeployment,
    hub: &mcm::MachineDeployment,
    now: Timestamp,
    written: &mut Written,
) -> Result<Option<Duration>, Error> {
    let sets = claim_sets(ctx, d, written).await?;
    let hub_sets: Vec<mcm::MachineSet> = sets.iter().map(machine_set_from_capi).collect();
    let uids: HashSet<String> = sets.iter().filter_map(|s| s.uid()).collect();
    let owned: Vec<Machine> = ctx
        .machines
        .state()
        .iter()
        .filter(|m| m.namespace() == d.namespace())
        .filter(|m| controller_of(&m.metadata).is_some_and(|r| uids.contains(&r.uid)))
        .map(|m| (**m).clone())
        .collect();
    let machines: Vec<DeploymentMachine> = owned
        .iter()
        .map(|m| {
            let hub_machine = machine_to_hub(m, ctx.infra_of(m).as_deref());
            let node = hub_machine.labels().get(NODE_LABEL).and_then(|n| ctx.node(n));
            DeploymentMachine::from_machine(&hub_machine, node.as_deref())
        })
        .collect();
    let observation = DeploymentObservation {
        deployment: hub,
        sets: &hub_sets,
        machines: &machines,
        now,
        options: ctx.options.deployment,
    };
    let plan = match plan_deployment(&observation) {
        DeploymentDecision::Plan(plan) => *plan,
        DeploymentDecision::Invalid(errors) => {
            let note = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            if ctx.first_report(&key_of(d), d.metadata.generation.unwrap_or(0)) {
                publish_to(&ctx.deployment_events, d, EventSpec::warning("InvalidSpec", note)).await;
            }
            return Ok(Some(ctx.config.resync));
        }
    };
    tracing::debug!(machine_deployment = %key_of(d), ?plan, "plan");
    execute(ctx, d, hub, (&sets, &hub_sets), &owned, plan, written).await
}

/// The CAPI patch for a hub patch: the hub object patched, both converted, the difference (status left out).
fn capi_patch<H, C>(hub: &H, patch: &Value, convert: fn(&H) -> C, read: fn(Value) -> Option<H>) -> Option<Value>
where
    H: Serialize,
    C: Serialize,
{
    let mut value = serde_json::to_value(hub).ok()?;
    json_patch::merge(&mut value, patch);
    let after = read(value)?;
    let strip = |c: &C| {
        let mut v = serde_json::to_value(c).ok()?;
        if let Some(map) = v.as_object_mut() {
            map.remove("status");
        }
        Some(v)
    };
    merge_patch_of(&strip(&convert(hub))?, &strip(&convert(&after))?)
}

fn read<T: DeserializeOwned>(v: Value) -> Option<T> {
    serde_json::from_value(v).ok()
}

async fn claim_sets(ctx: &CapiContext, d: &MachineDeployment, written: &mut Written) -> Result<Vec<MachineSet>, Error> {
    let api: Api<MachineSet> = Api::namespaced(ctx.control.clone(), &d.namespace().unwrap_or_default());
    let uid = d.uid().unwrap_or_default();
    let owner = Owner { uid: &uid, selector: &d.spec.selector, deleting: d.metadata.deletion_timestamp.is_some() };
    let mut mine = Vec::new();
    for s in ctx.sets.state().into_iter().filter(|s| s.namespace() == d.namespace()) {
        match claim(owner, &s.metadata) {
            Claim::Owned => mine.push((*s).clone()),
            Claim::Adopt => {
                let reference = capi_controller_ref("MachineDeployment", &d.metadata);
                match writes::merge(&api, &*s, &adopt_patch(&s.metadata, &reference), "adopt").await {
                    Ok(updated) => {
                        written.set_changed(&s, &updated);
                        mine.push(updated);
                    }
                    Err(e) => tracing::info!(machine_set = %key_of(&*s), error = %e, "adoption failed; next pass"),
                }
            }
            Claim::Release => match writes::merge(&api, &*s, &release_patch(&s.metadata, &uid), "release").await {
                Ok(updated) => written.set_changed(&s, &updated),
                Err(e) => tracing::info!(machine_set = %key_of(&*s), error = %e, "release failed; next pass"),
            },
            Claim::Ignore => {}
        }
    }
    Ok(mine)
}

/// The CAPI MachineSet for a new hub set of `d`.
fn new_set(d: &MachineDeployment, hub_set: &mcm::MachineSet) -> MachineSet {
    let mut s = machine_set_to_capi(hub_set);
    s.status = None;
    s.spec.cluster_name = d.spec.cluster_name.clone();
    if s.spec.template.spec.cluster_name.is_empty() {
        s.spec.template.spec.cluster_name = d.spec.cluster_name.clone();
    }
    capi_owner_refs(&mut s.metadata);
    let labels = s.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(CLUSTER_NAME_LABEL.to_string(), d.spec.cluster_name.clone());
    labels.insert(DEPLOYMENT_NAME_LABEL.to_string(), d.name_any());
    s
}

/// The CAPI status from the hub's: counts and MCM's conditions, CAPI's own conditions kept, the phase.
fn capi_status(
    old: &MachineDeploymentStatus,
    d: &MachineDeployment,
    hub: &mcm::MachineDeploymentStatus,
) -> MachineDeploymentStatus {
    let mut new = deployment_status_to_capi(hub);
    let mut conditions: Vec<_> = old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !matches!(c.type_.as_str(), "Available" | "Progressing" | "ReplicaFailure" | "Frozen"))
        .cloned()
        .collect();
    merge_conditions(&mut conditions, new.conditions.take().unwrap_or_default());
    new.conditions = (!conditions.is_empty()).then_some(conditions);
    new.selector = Some(selector_string(&d.spec.selector));
    let desired = d.spec.replicas.unwrap_or(1);
    let replicas = new.replicas.unwrap_or(0);
    new.phase = Some(
        match replicas.cmp(&desired) {
            std::cmp::Ordering::Less => "ScalingUp",
            std::cmp::Ordering::Greater => "ScalingDown",
            std::cmp::Ordering::Equal => "Running",
        }
        .to_string(),
    );
    new.extra = old.extra.clone();
    new
}

async fn execute(
    ctx: &CapiContext,
    d: &MachineDeployment,
    hub: &mcm::MachineDeployment,
    (sets, hub_sets): (&[MachineSet], &[mcm::MachineSet]),
    owned: &[Machine],
    plan: DeploymentPlan,
    written: &mut Written,
) -> Result<Option<Duration>, Error> {
    let namespace = d.namespace().unwrap_or_default();
    let api: Api<MachineDeployment> = Api::namespaced(ctx.control.clone(), &namespace);
    let sets_api: Api<MachineSet> = Api::namespaced(ctx.control.clone(), &namespace);
    let resync = ctx.config.resync;
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

    if let Some(patch) = plan.deployment_patch
        && let Some(patch) = capi_patch(hub, &patch, deployment_to_capi, read::<mcm::MachineDeployment>)
    {
        let patch = guarded(patch, current.resource_version());
        let updated = writes::merge(&api, &current, &patch, "update").await?;
        written.deployment_changed(&current, &updated);
        current = updated;
    }

    let machines: Api<Machine> = Api::namespaced(ctx.control.clone(), &namespace);
    for mark in &plan.machine_marks {
        let mut annotations = serde_json::Map::new();
        if mark.priority_one {
            annotations.insert(MACHINE_PRIORITY.into(), json!("1"));
        }
        if let Some(t) = &mark.marked_for_deletion_time {
            annotations.insert(MARKED_FOR_DELETION_TIME.into(), json!(t));
        }
        let Some(machine) =
            ctx.machines.get(&kube::runtime::reflector::ObjectRef::new(&mark.machine).within(&namespace))
        else {
            continue;
        };
        match writes::merge(&machines, &*machine, &json!({"metadata": {"annotations": annotations}}), "mark").await {
            Ok(updated) => written.machine_changed(&machine, &updated),
            Err(Error::Kube { source, .. }) if is_not_found(&source) => {}
            Err(e) => return Err(e),
        }
    }

    if let Some(hub_new) = plan.create_set {
        let new = new_set(d, &hub_new);
        let name = new.name_any();
        let post = PostParams { field_manager: Some(MANAGER.to_string()), ..Default::default() };
        match sets_api.create(&post, &new).await {
            Ok(created) => {
                tracing::info!(machine_deployment = %key_of(d), machine_set = %name, "created the new machine set");
                written.set_created(&created);
            }
            Err(e) if is_conflict(&e) => {
                let existing = sets_api
                    .get(&name)
                    .await
                    .map_err(|e| Error::kube("get", format!("MachineSet {namespace}/{name}"), e))?;
                let current_hub = deployment_from_capi(&current);
                return match on_create_conflict(&current_hub, &machine_set_from_capi(&existing)) {
                    CreateConflict::Adopt => Ok(Some(Duration::from_millis(200))),
                    CreateConflict::Collision { collision_count } => {
                        // CAPI's status has no collisionCount: the hash cannot move on (docs/capi-mode.md).
                        tracing::warn!(machine_deployment = %key_of(d), machine_set = %name, collision_count, "template hash collision with a foreign MachineSet");
                        let note = format!("MachineSet {name} exists with another template; rename or delete it");
                        publish_to(&ctx.deployment_events, d, EventSpec::warning("HashCollision", note)).await;
                        Ok(Some(resync))
                    }
                };
            }
            Err(e) => {
                let error = Error::kube("create", format!("MachineSet {namespace}/{name}"), e);
                publish_to(&ctx.deployment_events, d, EventSpec::warning("FailedCreate", error.to_string())).await;
                return Err(error);
            }
        }
    }

    for update in &plan.update_sets {
        let Some(i) = sets.iter().position(|s| s.metadata.name.as_deref() == Some(update.name.as_str())) else {
            continue;
        };
        let Some(patch) = capi_patch(&hub_sets[i], &update.patch, machine_set_to_capi, read::<mcm::MachineSet>) else {
            continue;
        };
        let patch = if update.patch["metadata"].get("resourceVersion").is_some() {
            guarded(patch, sets[i].resource_version())
        } else {
            patch
        };
        match writes::merge(&sets_api, &sets[i], &patch, "update").await {
            Ok(updated) => written.set_changed(&sets[i], &updated),
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

    apply_node_effects(ctx.target.as_ref(), &|n| ctx.node(n), &plan.nodes).await;

    // Core's conditions follow the Machines even when MCM's status did not move.
    if let Some(status) = plan.status.as_ref().or(hub.status.as_ref()) {
        let old = current.status.clone().unwrap_or_default();
        let mut new = capi_status(&old, &current, status);
        let deleting = current.metadata.deletion_timestamp.is_some();
        let observation = ReplicaObservation {
            desired: if deleting { 0 } else { current.spec.replicas.unwrap_or(1) },
            current: new.replicas.unwrap_or(0),
            machines: owned,
            deleting,
            now: Timestamp::now(),
        };
        let availability = Availability {
            replicas: current.spec.replicas.unwrap_or(1),
            available: new.available_replicas.unwrap_or(0),
            max_unavailable: max_unavailable(hub),
        };
        let core = machine_deployment_conditions(&observation, availability, old.conditions.as_deref().unwrap_or(&[]));
        let mut conditions = new.conditions.take().unwrap_or_default();
        merge_conditions(&mut conditions, core);
        new.conditions = Some(conditions);
        if let Some(mut patch) = status_patch(&old, &new) {
            if patch["status"].get("conditions").is_some() {
                patch["metadata"] = json!({"resourceVersion": current.resource_version()});
            }
            let updated = api
                .patch_status(&current.name_any(), &params(), &Patch::Merge(&patch))
                .await
                .map_err(|e| Error::kube("patch status of", format!("MachineDeployment {}", key_of(d)), e))?;
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
