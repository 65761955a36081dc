//! Carries out a MachineDeployment pass for either flavour: claim the sets, observe the machines and their Nodes,
//! let `lifecycle::machine_deployment::plan::plan_deployment` decide, and apply the plan in order — finalizer, the
//! deployment's own metadata and spec, the autoscaler's machine marks (then wait until the stores show them, so the
//! MachineSet's scale-down picks the marked machines), the new set, set patches and deletions, Node taints and
//! annotations, the status, events.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::Flavour;
use super::settle::Written;
use crate::api::mcm;
use crate::api::mcm::names::NODE_LABEL;
use crate::api::mcm::names::{
    CANDIDATE_FOR_UPDATE, CRITICAL_COMPONENTS_NOT_READY_TAINT, SELECTED_FOR_UPDATE, UPDATE_FAILED_REASON,
    UPDATE_RESULT, UPDATE_SUCCESSFUL,
};
use crate::api::mcm::names::{MARKED_FOR_DELETION_TIME, PRIORITY_ANNOTATION};
use crate::api::mcm::names::{PREFER_NO_SCHEDULE, SCALE_DOWN_DISABLED, SCALE_DOWN_DISABLED_BY_MCM};
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::{Error, is_conflict, is_not_found};
use crate::controllers::workload::Connection;
use crate::controllers::writes::{self, MANAGER, guarded};
use crate::lifecycle::claim::{Claim, Owner, adopt_patch, claim, controller_of, release_patch};
use crate::lifecycle::machine_deployment::nodes::{DeploymentMachine, NodeEffects};
use crate::lifecycle::machine_deployment::plan::{
    DeploymentDecision, DeploymentObservation, DeploymentPlan, EventType, FinalizerChange, plan_deployment,
};
use crate::lifecycle::machine_deployment::template::{CreateConflict, on_create_conflict};
use crate::lifecycle::status::EventSpec;

/// The writes of a pass, of the flavour's kinds.
pub(crate) type WrittenBy<F> = Written<<F as Flavour>::Machine, <F as Flavour>::Set, <F as Flavour>::Deployment>;

/// One pass over deployment `d` (whose hub view, defaults applied, is `hub`); returns when to look again
/// (`None`: on the next change only).
pub(crate) async fn run<F: Flavour>(
    f: &F,
    d: &F::Deployment,
    hub: &mcm::MachineDeployment,
    now: Timestamp,
    written: &mut WrittenBy<F>,
) -> Result<Option<Duration>, Error> {
    let sets = claim_sets(f, d, written).await?;
    let hub_sets: Vec<mcm::MachineSet> = sets.iter().map(|s| F::set_to_hub(s).into_owned()).collect();
    let uids: HashSet<String> = sets.iter().filter_map(|s| s.uid()).collect();
    let namespace = d.namespace();
    let owned: Vec<F::Machine> = f
        .machines()
        .state()
        .iter()
        .filter(|m| m.namespace() == namespace)
        .filter(|m| controller_of(m.meta()).is_some_and(|r| uids.contains(&r.uid)))
        .map(|m| (**m).clone())
        .collect();
    let workload = f.workload(d).await;
    let machines: Vec<DeploymentMachine> = owned
        .iter()
        .map(|m| {
            let hub_machine = f.machine_to_hub(m);
            let node = hub_machine.labels().get(NODE_LABEL).and_then(|n| workload.as_ref()?.node(n));
            DeploymentMachine::from_machine(&hub_machine, node.as_deref())
        })
        .collect();
    let observation = DeploymentObservation {
        deployment: hub,
        sets: &hub_sets,
        machines: &machines,
        now,
        options: f.deployment_options(),
    };
    let plan = match plan_deployment(&observation) {
        DeploymentDecision::Plan(plan) => *plan,
        DeploymentDecision::Invalid(errors) => {
            f.report_invalid(d, &errors, now).await?;
            return Ok(Some(f.config().resync));
        }
    };
    tracing::debug!(machine_deployment = %key_of(d), sets = ?hub_sets.iter().map(|s| (s.name_any(), s.spec.replicas)).collect::<Vec<_>>(), ?plan, "plan");
    let observed = Observed {
        deployment: d,
        hub,
        sets: &sets,
        hub_sets: &hub_sets,
        machines: &owned,
        workload: workload.as_deref(),
    };
    execute(f, &observed, plan, now, written).await
}

/// The deployment's sets after adopting matching orphans and releasing sets that no longer match.
async fn claim_sets<F: Flavour>(f: &F, d: &F::Deployment, written: &mut WrittenBy<F>) -> Result<Vec<F::Set>, Error> {
    let namespace = d.namespace().unwrap_or_default();
    let api: Api<F::Set> = Api::namespaced(f.control().clone(), &namespace);
    let selector = F::deployment_selector(d);
    let uid = d.uid().unwrap_or_default();
    let owner = Owner { uid: &uid, selector: &selector, deleting: d.meta().deletion_timestamp.is_some() };
    let mut mine = Vec::new();
    let mut orphans = Vec::new();
    for s in f.sets().state().into_iter().filter(|s| s.namespace().as_deref() == Some(namespace.as_str())) {
        match claim(owner, s.meta()) {
            Claim::Owned => mine.push((*s).clone()),
            Claim::Adopt => orphans.push(s),
            Claim::Release => {
                tracing::info!(machine_deployment = %key_of(d), machine_set = %s.name_any(), "releasing a set that no longer matches");
                match writes::merge(&api, &*s, &release_patch(s.meta(), &uid), "release").await {
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
    // A deployment being deleted must not adopt: read it from the API server first (the store may be behind).
    let deployments: Api<F::Deployment> = Api::namespaced(f.control().clone(), &namespace);
    let fresh = deployments.get_opt(&d.name_any()).await.map_err(|e| Error::kube("get", describe(d), e))?;
    if fresh.is_none_or(|x| x.uid() != d.uid() || x.meta().deletion_timestamp.is_some()) {
        return Ok(mine);
    }
    let reference = F::controller_ref("MachineDeployment", d.meta());
    for s in orphans {
        match writes::merge(&api, &*s, &adopt_patch(s.meta(), &reference), "adopt").await {
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

fn describe<K: Resource<DynamicType = ()>>(object: &K) -> String {
    format!("{} {}", K::kind(&()), key_of(object))
}

/// What a pass observed of a deployment: the deployment and its hub view, its sets (and theirs), its machines.
struct Observed<'a, F: Flavour> {
    deployment: &'a F::Deployment,
    hub: &'a mcm::MachineDeployment,
    sets: &'a [F::Set],
    hub_sets: &'a [mcm::MachineSet],
    machines: &'a [F::Machine],
    /// Where their Nodes are.
    workload: Option<&'a Connection>,
}

/// Applies the plan; returns when to look again (`None`: on the next change only).
#[allow(clippy::too_many_lines)]
async fn execute<F: Flavour>(
    f: &F,
    observed: &Observed<'_, F>,
    plan: DeploymentPlan,
    now: Timestamp,
    written: &mut WrittenBy<F>,
) -> Result<Option<Duration>, Error> {
    let Observed { deployment: d, hub, sets, hub_sets, machines: owned, workload } = *observed;
    let namespace = d.namespace().unwrap_or_default();
    let api: Api<F::Deployment> = Api::namespaced(f.control().clone(), &namespace);
    let sets_api: Api<F::Set> = Api::namespaced(f.control().clone(), &namespace);
    let resync = f.config().resync;
    let mut current = d.clone();

    match plan.finalizer {
        Some(FinalizerChange::Add) => {
            let mut finalizers = current.finalizers().to_vec();
            finalizers.push(F::DEPLOYMENT_FINALIZER.to_string());
            let patch = guarded(json!({"metadata": {"finalizers": finalizers}}), current.resource_version());
            let updated = writes::merge(&api, &current, &patch, "add a finalizer to").await?;
            written.deployment_changed(&current, &updated);
            current = updated;
        }
        Some(FinalizerChange::Remove) => {
            tracing::info!(machine_deployment = %key_of(d), "no machine set left; removing the finalizer");
            writes::remove_finalizer(&api, &current, F::DEPLOYMENT_FINALIZER).await?;
            return Ok(None);
        }
        None => {}
    }

    if let Some(patch) = plan.deployment_patch
        && let Some(patch) = F::deployment_patch(hub, &patch)
    {
        // Guarded: the autoscaler rewrites `trigger-deletion-by-mcm` too, and its entries must not be lost.
        let patch = guarded(patch, current.resource_version());
        let updated = writes::merge(&api, &current, &patch, "update").await?;
        written.deployment_changed(&current, &updated);
        current = updated;
    }

    if !plan.machine_marks.is_empty() {
        let machines: Api<F::Machine> = Api::namespaced(f.control().clone(), &namespace);
        for mark in &plan.machine_marks {
            let mut annotations = serde_json::Map::new();
            if mark.priority_one {
                annotations.insert(PRIORITY_ANNOTATION.into(), json!("1"));
            }
            if let Some(t) = &mark.marked_for_deletion_time {
                annotations.insert(MARKED_FOR_DELETION_TIME.into(), json!(t));
            }
            let Some(machine) = f.machines().get(&ObjectRef::new(&mark.machine).within(&namespace)) else {
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
        written.settle_machines(f.machines(), &key_of(d)).await;
    }

    if let Some(hub_new) = plan.create_set {
        let new = F::new_set(&current, &hub_new);
        let name = new.name_any();
        let post = PostParams { field_manager: Some(MANAGER.to_string()), ..Default::default() };
        match sets_api.create(&post, &new).await {
            Ok(created) => {
                tracing::info!(machine_deployment = %key_of(d), machine_set = %name, replicas = hub_new.spec.replicas, "created the new machine set");
                written.set_created(&created);
            }
            Err(e) if is_conflict(&e) => {
                let existing = sets_api
                    .get(&name)
                    .await
                    .map_err(|e| Error::kube("get", format!("MachineSet {namespace}/{name}"), e))?;
                return match on_create_conflict(&F::deployment_to_hub(&current), &F::set_to_hub(&existing)) {
                    // Ours, not in the store yet: its notice brings us back.
                    CreateConflict::Adopt => Ok(Some(Duration::from_millis(200))),
                    CreateConflict::Collision { collision_count } => {
                        tracing::info!(machine_deployment = %key_of(d), machine_set = %name, collision_count, "template hash collision");
                        match f.record_collision(&current, &name, collision_count).await? {
                            Some(updated) => {
                                written.deployment_changed(&current, &updated);
                                Ok(Some(Duration::ZERO))
                            }
                            None => Ok(Some(resync)),
                        }
                    }
                };
            }
            Err(e) => {
                let error = Error::kube("create", format!("MachineSet {namespace}/{name}"), e);
                if let Some(updated) = f.record_create_failed(&current, &name, &error.to_string(), now).await? {
                    written.deployment_changed(&current, &updated);
                }
                return Err(error);
            }
        }
    }

    if !plan.transfers.is_empty() {
        let machines: Api<F::Machine> = Api::namespaced(f.control().clone(), &namespace);
        for t in &plan.transfers {
            let set = |name: &str| {
                let i = sets.iter().position(|s| s.meta().name.as_deref() == Some(name))?;
                Some((&sets[i], &hub_sets[i]))
            };
            let (Some(from), Some(to)) = (set(&t.from), set(&t.to)) else { continue };
            let Some(machine) = owned.iter().find(|m| m.meta().name.as_deref() == Some(t.machine.as_str())) else {
                continue;
            };
            tracing::info!(machine_deployment = %key_of(d), machine = %t.machine, from = %t.from, to = %t.to, "moving a machine updated in place");
            match writes::merge(&machines, machine, &transfer_patch::<F>(machine, from, to), "move").await {
                Ok(updated) => written.machine_changed(machine, &updated),
                // Changed or gone meanwhile: the next pass decides again, and no set size moves without it.
                Err(Error::Kube { source, .. }) if is_conflict(&source) || is_not_found(&source) => {
                    return Ok(Some(Duration::from_millis(200)));
                }
                Err(e) => return Err(e),
            }
        }
        // The sets' new sizes below must be seen together with their new members.
        written.settle_machines(f.machines(), &key_of(d)).await;
    }

    for update in &plan.update_sets {
        let Some(i) = sets.iter().position(|s| s.meta().name.as_deref() == Some(update.name.as_str())) else {
            continue;
        };
        let Some(patch) = F::set_patch(&sets[i], &hub_sets[i], &update.patch) else { continue };
        match writes::merge(&sets_api, &sets[i], &patch, "update").await {
            Ok(updated) => written.set_changed(&sets[i], &updated),
            Err(Error::Kube { source, .. }) if is_not_found(&source) => {}
            Err(e) => return Err(e),
        }
    }
    for name in &plan.delete_sets {
        let Some(set) = sets.iter().find(|s| s.meta().name.as_deref() == Some(name.as_str())) else { continue };
        tracing::info!(machine_deployment = %key_of(d), machine_set = %name, "deleting a machine set");
        match sets_api.delete(name, &DeleteParams::default()).await {
            Ok(_) => written.set_deleted(set),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Error::kube("delete", format!("MachineSet {namespace}/{name}"), e)),
        }
    }

    if !plan.clear_moved.is_empty() {
        let machines: Api<F::Machine> = Api::namespaced(f.control().clone(), &namespace);
        let patch = json!({"metadata": {"labels": {UPDATE_RESULT: null}}});
        for name in &plan.clear_moved {
            let Some(machine) = owned.iter().find(|m| m.meta().name.as_deref() == Some(name.as_str())) else {
                continue;
            };
            match writes::merge(&machines, machine, &patch, "count the moved").await {
                Ok(updated) => written.machine_changed(machine, &updated),
                Err(Error::Kube { source, .. }) if is_not_found(&source) => {}
                Err(e) => return Err(e),
            }
        }
    }

    if let Some(workload) = workload {
        apply_node_effects(workload, &plan.nodes).await;
    }

    if let Some(updated) = f.write_deployment_status(&current, hub, plan.status.as_ref(), owned).await? {
        written.deployment_changed(&current, &updated);
    }
    for e in plan.events {
        let event = match e.type_ {
            EventType::Normal => EventSpec::normal(e.reason, e.note),
            EventType::Warning => EventSpec::warning(e.reason, e.note),
        };
        publish_to(f.deployment_events(), d, event).await;
    }
    Ok(Some(plan.requeue_after.map_or(resync, |after| after.min(resync))))
}

/// The rollout's taints, labels and annotations on Nodes: one merge patch per Node. A Node that changed meanwhile
/// (or went) is skipped; its change brings the deployment back.
pub(crate) async fn apply_node_effects(workload: &Connection, effects: &NodeEffects) {
    if effects.is_empty() {
        return;
    }
    let api: Api<Node> = Api::all(workload.client.clone());
    let names: BTreeSet<&String> = effects
        .add_prefer_no_schedule
        .iter()
        .chain(&effects.remove_prefer_no_schedule)
        .chain(&effects.disable_scale_down)
        .chain(&effects.enable_scale_down)
        .chain(&effects.label_candidate)
        .chain(&effects.label_selected)
        .chain(&effects.in_place_done)
        .chain(&effects.unlabel_candidate)
        .collect();
    for name in names {
        let Some(node) = workload.node(name) else { continue };
        let patch = node_patch(&node, name, effects);
        if let Err(e) = writes::merge(&api, &*node, &patch, "update the rollout marks of").await {
            tracing::info!(node = %name, error = %e, "node not updated; next pass");
        }
    }
}

/// The merge patch of one Node for `effects`.
fn node_patch(node: &Node, name: &String, effects: &NodeEffects) -> serde_json::Value {
    let mut patch = json!({});
    let add = effects.add_prefer_no_schedule.contains(name);
    let done = effects.in_place_done.contains(name);
    if add || done || effects.remove_prefer_no_schedule.contains(name) {
        let mut taints: Vec<Taint> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key != PREFER_NO_SCHEDULE)
            .collect();
        if add && !done {
            taints.push(Taint {
                key: PREFER_NO_SCHEDULE.into(),
                value: Some("True".into()),
                effect: "PreferNoSchedule".into(),
                time_added: None,
            });
        }
        if done && !taints.iter().any(|t| t.key == CRITICAL_COMPONENTS_NOT_READY_TAINT) {
            // Gardener's resource manager removes it once the node's critical components run again.
            taints.push(Taint {
                key: CRITICAL_COMPONENTS_NOT_READY_TAINT.into(),
                value: None,
                effect: "NoSchedule".into(),
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
    let mut labels = serde_json::Map::new();
    if done {
        for key in [CANDIDATE_FOR_UPDATE, SELECTED_FOR_UPDATE, UPDATE_RESULT] {
            labels.insert(key.into(), serde_json::Value::Null);
        }
        patch["metadata"]["annotations"][UPDATE_FAILED_REASON] = serde_json::Value::Null;
        patch["spec"]["unschedulable"] = json!(false);
    } else {
        if effects.label_candidate.contains(name) {
            labels.insert(CANDIDATE_FOR_UPDATE.into(), json!("true"));
        } else if effects.unlabel_candidate.contains(name) {
            labels.insert(CANDIDATE_FOR_UPDATE.into(), serde_json::Value::Null);
        }
        if effects.label_selected.contains(name) {
            labels.insert(SELECTED_FOR_UPDATE.into(), json!("true"));
        }
    }
    if !labels.is_empty() {
        patch["metadata"]["labels"] = serde_json::Value::Object(labels);
    }
    patch
}

/// Moves a machine updated in place to another set of its deployment: the old set's selector and template labels
/// give way to the new set's (MCM moves only the selector's; the machine now is of the new template, so
/// `kubectl get -l` on a template label finds it), `update-result=successful` keeps the new set from taking it for
/// surplus until it counts it, and the new set becomes its controller. Guarded: the owner list is written whole.
fn transfer_patch<F: Flavour>(
    machine: &F::Machine,
    (from, hub_from): (&F::Set, &mcm::MachineSet),
    (to, hub_to): (&F::Set, &mcm::MachineSet),
) -> serde_json::Value {
    let template_labels = |s: &mcm::MachineSet| {
        s.spec.template.as_ref().and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default()
    };
    let mut to_labels = template_labels(hub_to);
    to_labels.extend(F::set_selector(to).match_labels.clone().unwrap_or_default());
    let mut labels = serde_json::Map::new();
    let old_keys = F::set_selector(from).match_labels.clone().unwrap_or_default().into_keys();
    for key in old_keys.chain(template_labels(hub_from).into_keys()) {
        if !to_labels.contains_key(&key) {
            labels.insert(key, serde_json::Value::Null);
        }
    }
    for (k, v) in to_labels {
        labels.insert(k, json!(v));
    }
    labels.insert(UPDATE_RESULT.into(), json!(UPDATE_SUCCESSFUL));
    let mut owners: Vec<_> =
        machine.meta().owner_references.iter().flatten().filter(|r| r.controller != Some(true)).cloned().collect();
    owners.push(F::controller_ref("MachineSet", to.meta()));
    let mut patch = json!({"metadata": {"labels": labels, "ownerReferences": owners}});
    F::complete_transfer(to, &mut patch);
    guarded(patch, machine.resource_version())
}
