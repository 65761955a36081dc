//! A MachineDeployment belongs to its Cluster as core makes it: the cluster-name label and an owner reference, so
//! that `clusterctl move` takes it along and deleting the Cluster deletes its workers.

use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use mcm::api::capi::Cluster;
use serde_json::json;

use super::{NS, WAIT, create_deployment, deployment, env, rolling};
use crate::support::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_is_owned_by_its_cluster_and_goes_with_it() {
    let (env, capi, _provider) = env().await;
    let clusters: Api<Cluster> = Api::namespaced(env.client(), NS);
    // Its MCMCluster never comes: the real MCMMachine controller of this environment keeps waiting.
    let infra = json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMCluster", "name": "absent"});
    let cluster: Cluster =
        serde_json::from_value(json!({"metadata": {"name": "dev"}, "spec": {"infrastructureRef": infra}})).unwrap();
    let cluster = clusters.create(&PostParams::default(), &cluster).await.unwrap();
    create_deployment(&capi, deployment("owned", 1, "small", rolling(1, 0))).await;
    wait_until("the deployment labelled and owned by the Cluster", WAIT, || async {
        let d = capi.deployments.get("owned").await.ok()?;
        let labelled = d.labels().get("cluster.x-k8s.io/cluster-name").map(String::as_str) == Some("dev");
        let owned = d.owner_references().iter().any(|o| o.kind == "Cluster" && Some(&o.uid) == cluster.uid().as_ref());
        (labelled && owned).then_some(())
    })
    .await;

    clusters.delete("dev", &DeleteParams::default()).await.unwrap();
    wait_until("the deployment deleted with its Cluster", WAIT, || async {
        let d = capi.deployments.get_opt("owned").await.ok()?;
        d.is_none_or(|d| d.metadata.deletion_timestamp.is_some()).then_some(())
    })
    .await;
    env.shutdown().await;
}
