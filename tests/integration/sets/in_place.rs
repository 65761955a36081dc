//! In-place updates (MCM's InPlaceUpdate strategy) end to end: the in-memory cloud's node agent updates the
//! selected Nodes, the controllers drain, record and move the machines; the same VMs end in the new set.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use mcm::api::mcm::names::{
    CANDIDATE_FOR_UPDATE, CRITICAL_COMPONENTS_NOT_READY_TAINT, PREFER_NO_SCHEDULE, SCALE_UP_DISABLED,
    SELECTED_FOR_UPDATE, UPDATE_RESULT,
};
use mcm::api::mcm::{Machine, MachinePhase};
use serde_json::{Value, json};

use super::{
    Apis, WAIT, Watch, apis, available, create, deployment, env_with_class, machines_of, merge, per_set, rolling,
    set_of, wait_settled,
};
use crate::machines::{Env, phase_of};
use crate::support::wait_until;

/// `InPlaceUpdate` with the given fenceposts and orchestration.
fn in_place(max_surge: Value, max_unavailable: Value, orchestration: &str) -> Value {
    json!({"type": "InPlaceUpdate", "inPlaceUpdate": {
        "maxSurge": max_surge, "maxUnavailable": max_unavailable, "orchestrationType": orchestration}})
}

/// The providerIDs of deployment `name`'s machines.
async fn provider_ids(apis: &Apis, name: &str) -> BTreeSet<String> {
    machines_of(apis, name).await.into_iter().filter_map(|m| m.spec.provider_id).collect()
}

fn of(machines: &[Arc<Machine>], deployment: &str) -> Vec<Arc<Machine>> {
    machines
        .iter()
        .filter(|m| m.metadata.labels.as_ref().and_then(|l| l.get("name")).map(String::as_str) == Some(deployment))
        .cloned()
        .collect()
}

fn labels(node: &Node) -> std::collections::BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

/// Waits until every Node of deployment `name` is back to normal: no in-place label, schedulable, without the
/// rollout's taint and the critical-components taint (the node agent plays Gardener's resource manager).
async fn wait_nodes_clean(env: &Env, apis: &Apis, name: &str) {
    let nodes = env.nodes();
    wait_until(&format!("{name}'s Nodes without in-place marks"), WAIT, || async {
        for m in machines_of(apis, name).await {
            let node = nodes.get(m.metadata.name.as_deref()?).await.ok()?;
            let l = labels(&node);
            let spec = node.spec.clone().unwrap_or_default();
            let taints = spec.taints.unwrap_or_default();
            if [CANDIDATE_FOR_UPDATE, SELECTED_FOR_UPDATE, UPDATE_RESULT].iter().any(|k| l.contains_key(*k))
                || spec.unschedulable == Some(true)
                || taints.iter().any(|t| t.key == PREFER_NO_SCHEDULE || t.key == CRITICAL_COMPONENTS_NOT_READY_TAINT)
            {
                return None;
            }
        }
        Some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_in_place_rollout_of_10_keeps_every_vm_and_its_bounds() {
    let env = env_with_class(0.1).await;
    let apis = apis(&env);
    create(&apis.deployments, deployment("ip", 10, in_place(json!(0), json!(2), "Auto"))).await;
    let old_set = wait_settled(&apis, "ip", 10).await;
    let before = provider_ids(&apis, "ip").await;
    let creates = env.dev.cloud.stats().creates;
    let deletes = env.dev.cloud.stats().deletes;

    let watch = Watch::start(&env, |all| {
        let machines = of(all, "ip");
        let up = machines.iter().filter(|m| available(m)).count();
        (machines.len() > 10 || up < 8)
            .then(|| format!("{} machines, {up} available: {:?}", machines.len(), per_set(&machines)))
    });
    merge(&apis.deployments, "ip", json!({"spec": {"template": {"metadata": {"labels": {"os": "v2"}}}}})).await;
    let new_set = wait_settled(&apis, "ip", 10).await;
    let (violations, events) = watch.finish();
    assert_ne!(new_set, old_set);
    assert!(violations.is_empty(), "{} violations in {events} events: {violations:?}", violations.len());
    assert_eq!(provider_ids(&apis, "ip").await, before, "the same VMs, now in the new set");
    assert_eq!(env.dev.cloud.stats().creates, creates, "no VM created");
    assert_eq!(env.dev.cloud.stats().deletes, deletes, "no VM deleted");
    for m in machines_of(&apis, "ip").await {
        assert_eq!(m.metadata.labels.as_ref().and_then(|l| l.get("os")).map(String::as_str), Some("v2"));
        assert!(!m.metadata.labels.as_ref().unwrap().contains_key(UPDATE_RESULT), "counted, label gone");
    }
    let old = apis.sets.get(&old_set).await.unwrap();
    assert_eq!(old.spec.replicas, 0);
    assert!(old.metadata.labels.unwrap().contains_key(SCALE_UP_DISABLED), "old sets stay marked, as in MCM");
    wait_nodes_clean(&env, &apis, "ip").await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_in_place_rollout_waits_for_the_user_to_select_nodes() {
    let env = env_with_class(0.1).await;
    let apis = apis(&env);
    create(&apis.deployments, deployment("man", 3, in_place(json!(0), json!(1), "Manual"))).await;
    let old_set = wait_settled(&apis, "man", 3).await;
    let before = provider_ids(&apis, "man").await;
    let names: Vec<String> = machines_of(&apis, "man").await.into_iter().filter_map(|m| m.metadata.name).collect();
    merge(&apis.deployments, "man", json!({"spec": {"template": {"metadata": {"labels": {"os": "v2"}}}}})).await;

    // Every Node becomes a candidate; none is selected by the controllers and nothing drains.
    let nodes = env.nodes();
    wait_until("every Node a candidate", WAIT, || async {
        for name in &names {
            labels(&nodes.get(name).await.ok()?).contains_key(CANDIDATE_FOR_UPDATE).then_some(())?;
        }
        Some(())
    })
    .await;
    let new_set = wait_until("the new set at 0", WAIT, || async {
        let sets = apis.sets.list(&Default::default()).await.ok()?.items;
        sets.into_iter().find(|s| s.metadata.name.as_deref() != Some(old_set.as_str())).filter(|s| s.spec.replicas == 0)
    })
    .await
    .metadata
    .name
    .unwrap();
    for name in &names {
        let node = nodes.get(name).await.unwrap();
        assert!(!labels(&node).contains_key(SELECTED_FOR_UPDATE), "Manual: the controllers select nothing");
        assert_ne!(node.spec.unwrap_or_default().unschedulable, Some(true), "nothing drains");
    }

    // The user selects one Node: exactly that machine updates and moves.
    merge(&nodes, &names[0], json!({"metadata": {"labels": {SELECTED_FOR_UPDATE: "true"}}})).await;
    wait_until("the selected machine in the new set, Running", WAIT, || async {
        let m = apis.machines.get(&names[0]).await.ok()?;
        (set_of(&m).as_deref() == Some(new_set.as_str()) && phase_of(&m) == Some(MachinePhase::Running)).then_some(())
    })
    .await;
    let counts = wait_until("old 2, new 1", WAIT, || async {
        let old = apis.sets.get(&old_set).await.ok()?.spec.replicas;
        let new = apis.sets.get(&new_set).await.ok()?.spec.replicas;
        (old == 2 && new == 1).then_some((old, new))
    })
    .await;
    assert_eq!(counts, (2, 1));
    for name in &names[1..] {
        let m = apis.machines.get(name).await.unwrap();
        assert_eq!(set_of(&m).as_deref(), Some(old_set.as_str()), "{name} not selected, not moved");
    }

    // The rest: the rollout completes with the same VMs.
    for name in &names[1..] {
        merge(&nodes, name, json!({"metadata": {"labels": {SELECTED_FOR_UPDATE: "true"}}})).await;
    }
    assert_eq!(wait_settled(&apis, "man", 3).await, new_set);
    assert_eq!(provider_ids(&apis, "man").await, before, "no VM created or deleted");
    wait_nodes_clean(&env, &apis, "man").await;
    env.shutdown().await;
}

/// A deployment of 2 whose first Node (by name) the node agent fails (`behaviour`), with `configuration` on
/// the machines; returns the name of that machine and the deployment's providerIDs before the update.
async fn failing_rollout(env: &Env, apis: &Apis, name: &str, behaviour: &str, configuration: Value) -> String {
    let mut d = deployment(name, 2, in_place(json!(0), json!(1), "Auto"));
    for (k, v) in configuration.as_object().unwrap() {
        d["spec"]["template"]["spec"][k] = v.clone();
    }
    create(&apis.deployments, d).await;
    wait_settled(apis, name, 2).await;
    let mut names: Vec<String> = machines_of(apis, name).await.into_iter().filter_map(|m| m.metadata.name).collect();
    names.sort();
    let first = names[0].clone();
    merge(
        &env.nodes(),
        &first,
        json!({"metadata": {"annotations": {mcm::providers::inmemory::node_agent::OVERRIDE_ANNOTATION: behaviour}}}),
    )
    .await;
    merge(&apis.deployments, name, json!({"spec": {"template": {"metadata": {"labels": {"os": "v2"}}}}})).await;
    first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_timed_out_updates_are_replaced_by_fresh_vms() {
    let env = env_with_class(0.1).await;
    let apis = apis(&env);
    let failed = failing_rollout(&env, &apis, "fail", "fail:OS image not found", json!({"healthTimeout": "4s"})).await;
    let hung =
        failing_rollout(&env, &apis, "hang", "hang", json!({"healthTimeout": "4s", "inPlaceUpdateTimeout": "3s"}))
            .await;
    let creates = env.dev.cloud.stats().creates;

    for (machine, text) in [
        (&failed, "failed to update dependencies: OS image not found".to_string()),
        (&hung, "failed to in-place update in 3s minutes.".to_string()),
    ] {
        wait_until(&format!("{machine} InPlaceUpdateFailed"), WAIT, || async {
            let m = apis.machines.get(machine).await.ok()?;
            let description = m.status.clone()?.last_operation?.description?;
            (phase_of(&m) == Some(MachinePhase::InPlaceUpdateFailed) && description.contains(&text)).then_some(())
        })
        .await;
    }
    // After the health timeout each is marked Failed, deleted, and its place taken by a fresh VM in the new set;
    // the other machine of each deployment is updated in place.
    for name in ["fail", "hang"] {
        wait_settled(&apis, name, 2).await;
        let machines: Vec<String> =
            machines_of(&apis, name).await.into_iter().filter_map(|m| m.metadata.name).collect();
        assert!(!machines.contains(&failed) && !machines.contains(&hung), "{machines:?}");
    }
    assert_eq!(env.dev.cloud.stats().creates, creates + 2, "exactly one fresh VM per failed update");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_switches_between_rolling_and_in_place_updates() {
    let env = env_with_class(0.1).await;
    let apis = apis(&env);
    create(&apis.deployments, deployment("sw", 3, rolling(json!(1), json!(0)))).await;
    wait_settled(&apis, "sw", 3).await;
    let before = provider_ids(&apis, "sw").await;

    // RollingUpdate -> InPlaceUpdate with a new template: no VM replaced.
    merge(
        &apis.deployments,
        "sw",
        json!({"spec": {"strategy": in_place(json!(0), json!(1), "Auto"),
                        "template": {"metadata": {"labels": {"os": "v2"}}}}}),
    )
    .await;
    let in_place_set = wait_settled(&apis, "sw", 3).await;
    assert_eq!(provider_ids(&apis, "sw").await, before, "updated in place");
    wait_nodes_clean(&env, &apis, "sw").await;

    // InPlaceUpdate -> RollingUpdate, back to the first template: the first set, marked `scale-up-disabled` by the
    // in-place rollout, is new again and must create machines (new VMs); no machine keeps `update-result`.
    let first_set = {
        let sets = apis.sets.list(&Default::default()).await.unwrap().items;
        let first = sets.into_iter().find(|s| s.metadata.name.as_deref() != Some(in_place_set.as_str())).unwrap();
        assert!(first.metadata.labels.clone().unwrap_or_default().contains_key(SCALE_UP_DISABLED));
        first.metadata.name.unwrap()
    };
    merge(
        &apis.deployments,
        "sw",
        json!({"spec": {"strategy": rolling(json!(1), json!(0)), "template": {"metadata": {"labels": {"os": null}}}}}),
    )
    .await;
    assert_eq!(wait_settled(&apis, "sw", 3).await, first_set, "the first set is new again");
    assert!(provider_ids(&apis, "sw").await.is_disjoint(&before), "rolled: every VM replaced");
    let set = apis.sets.get(&first_set).await.unwrap();
    assert!(!set.metadata.labels.unwrap_or_default().contains_key(SCALE_UP_DISABLED), "it may create again");
    for m in machines_of(&apis, "sw").await {
        assert!(!m.metadata.labels.unwrap_or_default().contains_key(UPDATE_RESULT));
    }
    env.shutdown().await;
}
