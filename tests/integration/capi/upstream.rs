//! Objects upstream CAPI core takes over after our controllers started: left alone, our finalizer released.

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use mcm::lifecycle::capi_machine::MACHINE_FINALIZER;
use serde_json::json;

use super::{WAIT, create_deployment, deployment, env, rolling, wait_running};
use crate::sets::events_of;
use crate::support::wait_until;

const REASON: &str = "ManagedByUpstreamCore";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_upstream_core_takes_over_later_are_left_alone() {
    let (env, capi, _provider) = env().await;
    create_deployment(&capi, deployment("mine", 1, "small", rolling(1, 0))).await;
    let machine = wait_running(&capi, "mine", 1).await.remove(0).name_any();

    // Upstream core's Machine finalizer appears next to ours: we step back and release ours, so a deletion is
    // upstream core's alone.
    let both = json!({"metadata": {"finalizers": [MACHINE_FINALIZER, "machine.cluster.x-k8s.io"]}});
    capi.machines.patch(&machine, &PatchParams::default(), &Patch::Merge(&both)).await.unwrap();
    wait_until("our finalizer released and the event recorded", WAIT, || async {
        let m = capi.machines.get(&machine).await.ok()?;
        let released = m.finalizers() == ["machine.cluster.x-k8s.io"];
        let told = events_of(&env, "Machine", &machine).await.iter().any(|(r, _)| r == REASON);
        (released && told).then_some(())
    })
    .await;

    // A MachineDeployment upstream core holds from the start gets nothing from us: no finalizer, no MachineSet.
    let mut theirs = deployment("theirs", 2, "small", rolling(1, 0));
    theirs["metadata"]["finalizers"] = json!(["cluster.x-k8s.io/machinedeployment"]);
    create_deployment(&capi, theirs).await;
    wait_until("the event on the deployment", WAIT, || async {
        events_of(&env, "MachineDeployment", "theirs").await.iter().any(|(r, _)| r == REASON).then_some(())
    })
    .await;
    let d = capi.deployments.get("theirs").await.unwrap();
    assert_eq!(d.finalizers(), ["cluster.x-k8s.io/machinedeployment"]);
    assert!(d.status.is_none(), "no status written: {:?}", d.status);
    let sets = capi.sets.list(&Default::default()).await.unwrap().items;
    assert!(sets.iter().all(|s| !s.name_any().starts_with("theirs")), "no MachineSet for it: {sets:?}");
    env.shutdown().await;
}
