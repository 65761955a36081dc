//! Each Cluster's Nodes come from its workload cluster, reached through the Cluster's `<cluster>-kubeconfig` Secret
//! as core reaches it (what `mcm run` does without `--target-kubeconfig`), on `mcm dev`'s sample with the real
//! infrastructure controllers and in-memory cloud. The in-memory kubelet registers Nodes in the dev server, so the
//! Secret points there. (`controllers::workload`'s unit test reads a second API server.)

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use mcm::api::capi::{Machine, MachineDeployment};
use mcm::controllers::CapiNodes;
use mcm::dev::DevOptions;
use serde_json::json;

use super::{WAIT, condition};
use crate::support::{TempDir, wait_until};

const NS: &str = "capi-sample";

fn node_of(m: &Machine) -> Option<String> {
    Some(m.status.as_ref()?.node_ref.as_ref()?.name.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_find_their_nodes_through_the_clusters_kubeconfig_secret() {
    let dir = TempDir::new("mcm-capi-workload-cluster");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        capi_nodes: CapiNodes::PerCluster,
        ..Default::default()
    };
    let (env, _kube) = crate::support::start_dev(options).await;
    let machines: Api<Machine> = Api::namespaced(env.client.clone(), NS);
    let nodes: Api<Node> = Api::all(env.client.clone());
    let cloud = env.cloud.clone();

    // No Secret `sample-kubeconfig`: the machines get their VMs and wait with core's ConnectionDown, no Node known.
    let waiting = wait_until("3 sample machines with VMs, waiting for the workload cluster", WAIT, || async {
        let list = machines.list(&ListParams::default()).await.ok()?.items;
        let down = list.iter().filter(|m| {
            condition(m, "NodeHealthy") == Some(("Unknown".into(), "ConnectionDown".into())) && node_of(m).is_none()
        });
        let names: Vec<String> = list.iter().map(|m| m.name_any()).collect();
        let vms = cloud.live_vms().iter().filter(|vm| names.contains(&vm.machine_name)).count();
        (down.count() == 3 && vms == 3).then_some(list)
    })
    .await;
    let message = waiting[0].status.as_ref().and_then(|s| s.conditions.as_ref()).unwrap();
    let message = &message.iter().find(|c| c.type_ == "NodeHealthy").unwrap().message;
    assert!(message.contains("capi-sample/sample-kubeconfig"), "{message}");

    let kubeconfig = std::fs::read(dir.0.join("kubeconfig")).unwrap();
    let mut secret: Secret = serde_json::from_value(json!({"metadata": {"name": "sample-kubeconfig"}})).unwrap();
    secret.data = Some([("value".to_string(), ByteString(kubeconfig))].into());
    Api::<Secret>::namespaced(env.client.clone(), NS).create(&PostParams::default(), &secret).await.unwrap();

    let uids = |list: &[Machine]| {
        let mut uids: Vec<String> = list.iter().filter_map(|m| m.metadata.uid.clone()).collect();
        uids.sort();
        uids
    };
    let running = wait_until("the same 3 machines Running with their Nodes", WAIT, || async {
        let list = machines.list(&ListParams::default()).await.ok()?.items;
        let all = list.len() == 3
            && list.iter().all(|m| {
                m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && node_of(m).is_some()
                    && condition(m, "NodeHealthy").is_some_and(|(s, _)| s == "True")
            });
        all.then_some(list)
    })
    .await;
    assert_eq!(uids(&running), uids(&waiting), "the waiting machines were kept, not replaced");

    // Scaling down drains and deletes the removed machine's Node through the connection.
    let deployments: Api<MachineDeployment> = Api::namespaced(env.client.clone(), NS);
    let patch = Patch::Merge(json!({"spec": {"replicas": 2}}));
    deployments.patch("workers", &PatchParams::default(), &patch).await.unwrap();
    let gone = wait_until("one machine and its Node gone", WAIT, || async {
        let left: Vec<String> =
            machines.list(&ListParams::default()).await.ok()?.items.iter().map(|m| m.name_any()).collect();
        let gone = running.iter().find(|m| !left.contains(&m.name_any()))?;
        let node = node_of(gone)?;
        (left.len() == 2 && nodes.get_opt(&node).await.ok()?.is_none()).then_some(node)
    })
    .await;
    assert!(!gone.is_empty());
}
