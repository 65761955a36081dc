//! Deleting a Cluster on `mcm dev` (its sample, the real infrastructure controllers and in-memory cloud): the
//! Cluster's finalizer holds it, phase `Deleting` and core's `Deleting` condition listing what is left, until its
//! MachineDeployment, MachineSet and Machines are gone and their VMs deleted, then its MCMCluster; then it goes.

use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use mcm::api::capi::{Cluster, Machine, MachineDeployment};
use mcm::api::infra::MCMCluster;
use mcm::dev::DevOptions;
use serde_json::json;

use super::WAIT;
use crate::support::{TempDir, wait_until};

const NS: &str = "capi-sample";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_cluster_waits_for_its_workers_and_their_vms_then_goes() {
    let dir = TempDir::new("mcm-capi-cluster-deletion");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        ..Default::default()
    };
    let (env, _kube) = crate::support::start_dev(options).await;
    let clusters: Api<Cluster> = Api::namespaced(env.client.clone(), NS);
    let machines: Api<Machine> = Api::namespaced(env.client.clone(), NS);
    let deployments: Api<MachineDeployment> = Api::namespaced(env.client.clone(), NS);
    let infra: Api<MCMCluster> = Api::namespaced(env.client.clone(), NS);
    let cloud = env.cloud.clone();
    let vms_of = move |names: &[String]| cloud.live_vms().iter().filter(|v| names.contains(&v.machine_name)).count();

    let names = wait_until("3 sample machines with VMs and the Cluster's finalizer", WAIT, || async {
        let list = machines.list(&Default::default()).await.ok()?.items;
        let names: Vec<String> = list.iter().map(|m| m.name_any()).collect();
        let c = clusters.get("sample").await.ok()?;
        let held = c.finalizers().iter().any(|f| f == "capi.machine.sapcloud.io/cluster");
        (names.len() == 3 && vms_of(&names) == 3 && held).then_some(names)
    })
    .await;
    // Each of our finalizers is on the deployment once (a hub view without it had it added on every pass).
    let d = deployments.get("workers").await.unwrap();
    assert_eq!(d.finalizers(), ["capi.machine.sapcloud.io/machinedeployment"]);
    // A pre-drain hook holds one machine's deletion, so that the Cluster's wait can be seen.
    let hook = "pre-drain.delete.hook.machine.cluster.x-k8s.io/test";
    let pp = PatchParams::default();
    machines.patch(&names[0], &pp, &Patch::Merge(json!({"metadata": {"annotations": {hook: ""}}}))).await.unwrap();

    clusters.delete("sample", &DeleteParams::default()).await.unwrap();
    let message = wait_until("the Cluster waiting for its held worker", WAIT, || async {
        let c = clusters.get("sample").await.ok()?;
        let status = c.status?;
        let deleting = status.conditions?.into_iter().find(|c| c.type_ == "Deleting")?;
        let only_held = machines.list(&Default::default()).await.ok()?.items.len() == 1;
        (status.phase.as_deref() == Some("Deleting")
            && deleting.reason == "WaitingForWorkersDeletion"
            && deleting.message.contains(&names[0])
            && only_held)
            .then_some(deleting.message)
    })
    .await;
    assert!(message.contains("* Worker Machines: "), "{message}");
    assert_eq!(vms_of(&names), 1, "the other machines' VMs are deleted; the held one keeps its VM");
    assert!(deployments.get_opt("workers").await.unwrap().is_none_or(|d| d.metadata.deletion_timestamp.is_some()));
    assert!(
        infra.get_opt("sample").await.unwrap().is_some_and(|i| i.metadata.deletion_timestamp.is_none()),
        "the MCMCluster waits for the workers"
    );

    let release = json!({"metadata": {"annotations": {hook: null}}});
    machines.patch(&names[0], &pp, &Patch::Merge(release)).await.unwrap();
    wait_until("the Cluster, its workers, their VMs and its MCMCluster gone", WAIT, || async {
        let left = machines.list(&Default::default()).await.ok()?.items.len()
            + deployments.list(&Default::default()).await.ok()?.items.len();
        let gone = clusters.get_opt("sample").await.ok()?.is_none() && infra.get_opt("sample").await.ok()?.is_none();
        (gone && left == 0 && vms_of(&names) == 0).then_some(())
    })
    .await;
}
