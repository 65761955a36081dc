//! `Cluster.spec.paused` (what `clusterctl move` sets) holds every object of the Cluster, as upstream core does:
//! the `Paused` condition says why, nothing scales, and unpausing resumes.

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use mcm::api::capi::{Cluster, MachineSet};
use serde_json::json;

use super::{NS, WAIT, create_deployment, deployment, env, patch_deployment, rolling, wait_running};
use crate::support::wait_until;

fn paused_message(
    conditions: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
) -> Option<String> {
    let c = conditions?.iter().find(|c| c.type_ == "Paused")?;
    (c.status == "True").then(|| c.message.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_holds_its_deployments_sets_and_machines() {
    let (env, capi, _provider) = env().await;
    let clusters: Api<Cluster> = Api::namespaced(env.client(), NS);
    create_deployment(&capi, deployment("held", 1, "small", rolling(1, 0))).await;
    let machine = wait_running(&capi, "held", 1).await.remove(0);

    // The Cluster comes paused (as `clusterctl move` leaves it on the target). Its MCMCluster never comes, so the
    // real MCMMachine controller of this environment keeps waiting and the provider stand-in answers the
    // MCMMachines, as in every test here.
    let infra = json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMCluster", "name": "absent"});
    let cluster = json!({"metadata": {"name": "dev"}, "spec": {"paused": true, "infrastructureRef": infra}});
    let cluster: Cluster = serde_json::from_value(cluster).unwrap();
    clusters.create(&PostParams::default(), &cluster).await.unwrap();
    let pause = |paused: bool| json!({"spec": {"paused": paused}});
    patch_deployment(&capi, "held", json!({"spec": {"replicas": 2}})).await;
    let why = "Cluster spec.paused is set to true";
    wait_until("Paused on the deployment, its set and its machine", WAIT, || async {
        let d = capi.deployments.get("held").await.ok()?;
        let m = capi.machines.get(&kube::ResourceExt::name_any(&machine)).await.ok()?;
        let sets = capi.sets.list(&Default::default()).await.ok()?.items;
        let all = [
            paused_message(d.status.as_ref()?.conditions.as_ref()),
            paused_message(m.status.as_ref()?.conditions.as_ref()),
            paused_message(sets.first()?.status.as_ref()?.conditions.as_ref()),
        ];
        all.iter().all(|m| m.as_deref() == Some(why)).then_some(())
    })
    .await;
    // The deployment saw replicas 2 while paused (its Paused condition came after the change): nothing scaled.
    let sets: Vec<MachineSet> = capi.sets.list(&Default::default()).await.unwrap().items;
    assert_eq!(sets.iter().map(|s| s.spec.replicas.unwrap_or(-1)).collect::<Vec<_>>(), vec![1]);
    assert_eq!(capi.machines_of("held").await.len(), 1);

    clusters.patch("dev", &PatchParams::default(), &Patch::Merge(pause(false))).await.unwrap();
    // Unpaused, the deployment scales (Running needs the Cluster's infrastructure, which never comes here).
    wait_until("the set scaled to 2 and the deployment no longer paused", WAIT, || async {
        let d = capi.deployments.get("held").await.ok()?;
        let sets = capi.sets.list(&Default::default()).await.ok()?.items;
        let scaled = sets.len() == 1 && sets[0].spec.replicas == Some(2);
        (scaled && paused_message(d.status.as_ref()?.conditions.as_ref()).is_none()).then_some(())
    })
    .await;
    env.shutdown().await;
}
