//! Deletion: hooks hold a Machine's deletion. (The delete-machine annotation's part in the deletion order is in
//! the shared tables, `capi::shared`.)

use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::{WAIT, create_deployment, deployment, env, rolling, wait_running};
use crate::support::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_hold_the_deletion_until_removed() {
    let (env, capi, _provider) = env().await;
    create_deployment(&capi, deployment("hooks", 1, "small", rolling(1, 0))).await;
    let m = wait_running(&capi, "hooks", 1).await.remove(0);
    let name = m.name_any();
    let hook = "pre-drain.delete.hook.machine.cluster.x-k8s.io/test";
    capi.machines
        .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {hook: "tester"}}})))
        .await
        .unwrap();
    capi.machines.delete(&name, &DeleteParams::default()).await.unwrap();
    let held = wait_until("the Deleting condition naming the hook", WAIT, || async {
        let m = capi.machines.get(&name).await.ok()?;
        let c = m.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Deleting")?.clone();
        (c.reason == "WaitingForPreDrainHook").then_some(m)
    })
    .await;
    assert_eq!(held.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Deleting"));
    assert!(capi.infra.get_opt(&name).await.unwrap().is_some(), "the MCMMachine stays while the hook holds");

    capi.machines
        .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {hook: null}}})))
        .await
        .unwrap();
    wait_until("the Machine, its MCMMachine and its Node gone", WAIT, || async {
        let machine = capi.machines.get_opt(&name).await.ok()?;
        let infra = capi.infra.get_opt(&name).await.ok()?;
        let node = capi.nodes.get_opt(&format!("node-{name}")).await.ok()?;
        (machine.is_none() && infra.is_none() && node.is_none()).then_some(())
    })
    .await;
    env.shutdown().await;
}

/// Waits until the clock is past `m`'s creation second, so that the next Machine is younger (timestamps are whole
/// seconds).
async fn after_creation_of(m: &mcm::api::capi::Machine) {
    let created = m.metadata.creation_timestamp.as_ref().unwrap().0;
    wait_until("a new second", WAIT, || async {
        (jiff::Timestamp::now().as_second() > created.as_second()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_follows_capis_deletion_order() {
    let (env, capi, _provider) = env().await;
    let mut d = deployment("ordered", 1, "small", rolling(1, 0));
    d["spec"]["deletion"] = json!({"order": "Newest"});
    create_deployment(&capi, d).await;
    // Three Machines of three different ages: one at a time.
    let mut by_age = Vec::new();
    for n in 1..=3 {
        if n > 1 {
            super::patch_deployment(&capi, "ordered", json!({"spec": {"replicas": n}})).await;
        }
        let machines = wait_running(&capi, "ordered", n as usize).await;
        let newest = machines.iter().find(|m| !by_age.contains(&m.name_any())).unwrap().clone();
        by_age.push(newest.name_any());
        after_creation_of(&newest).await;
    }
    let set = capi.sets.list(&Default::default()).await.unwrap().items;
    let set =
        set.iter().find(|s| s.labels().get("cluster.x-k8s.io/deployment-name").map(String::as_str) == Some("ordered"));
    assert_eq!(set.unwrap().spec.deletion.as_ref().and_then(|d| d.order.as_deref()), Some("Newest"));

    // Newest: the youngest goes.
    super::patch_deployment(&capi, "ordered", json!({"spec": {"replicas": 2}})).await;
    let left: Vec<String> = wait_running(&capi, "ordered", 2).await.iter().map(|m| m.name_any()).collect();
    assert!(!left.contains(&by_age[2]), "Newest deletes {} first: {left:?}", by_age[2]);

    // The order changes in place (no rollout); Oldest: the oldest goes.
    super::patch_deployment(&capi, "ordered", json!({"spec": {"deletion": {"order": "Oldest"}}})).await;
    wait_until("the order propagated to the MachineSet", WAIT, || async {
        let sets = capi.sets.list(&Default::default()).await.ok()?.items;
        let ordered: Vec<_> = sets
            .iter()
            .filter(|s| s.labels().get("cluster.x-k8s.io/deployment-name").map(String::as_str) == Some("ordered"))
            .collect();
        (ordered.len() == 1 && ordered[0].spec.deletion.as_ref()?.order.as_deref() == Some("Oldest")).then_some(())
    })
    .await;
    super::patch_deployment(&capi, "ordered", json!({"spec": {"replicas": 1}})).await;
    let left: Vec<String> = wait_running(&capi, "ordered", 1).await.iter().map(|m| m.name_any()).collect();
    assert_eq!(left, [by_age[1].clone()], "Oldest deletes {} first", by_age[0]);
    env.shutdown().await;
}
