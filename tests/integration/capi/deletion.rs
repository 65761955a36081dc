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
