//! The in-memory driver: the conformance suite, and VMs that become Nodes of an embedded API server.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use mcm::providers::inmemory::{self, InMemoryCloud, InMemoryDriver, Kubelet, KubeletConfig};
use mcm::providers::{Driver, MachineInfo, MachineRequest, conformance};
use serde_json::json;

use crate::support::{start, wait_until};

/// The Ready condition's status of Node `name` and its providerID, once the Node exists.
async fn ready(nodes: &Api<Node>, name: &str) -> Option<(String, String)> {
    let node = nodes.get_opt(name).await.ok()??;
    let provider_id = node.spec.as_ref()?.provider_id.clone()?;
    let ready = inmemory::node::ready_condition(&node)?.status.clone();
    Some((ready, provider_id))
}

#[tokio::test]
async fn the_in_memory_driver_passes_the_conformance_suite() {
    let driver = InMemoryDriver::new(InMemoryCloud::new());
    conformance::run(&driver, &inmemory::conformance_fixture()).await.unwrap();
    assert!(driver.cloud().live_vms().is_empty(), "the suite deletes what it creates");
    let stats = driver.cloud().stats();
    assert!(stats.creates > 0 && stats.deletes > 0 && stats.lists > 0 && stats.status_gets > 0, "{stats:?}");
}

#[tokio::test]
async fn a_vm_becomes_a_ready_node_and_goes_unknown_when_killed() {
    let (_server, client) = start().await;
    let cloud = InMemoryCloud::new();
    let driver = InMemoryDriver::new(cloud.clone());
    let kubelet = Kubelet::spawn(cloud.clone(), client.clone(), KubeletConfig::default());
    let nodes: Api<Node> = Api::all(client);

    let request = MachineRequest {
        machine: MachineInfo { name: "worker-1".into(), namespace: "default".into(), ..Default::default() },
        class: inmemory::class("small", "dev", json!({"bootSeconds": 0.2, "bootJitter": 0.5})),
        ..Default::default()
    };
    let created = driver.create_machine(&request).await.unwrap();
    assert_eq!(created.node_name, "worker-1");

    let (status, provider_id) = wait_until("a Ready node worker-1", Duration::from_secs(10), || async {
        ready(&nodes, "worker-1").await.filter(|(status, _)| status == "True")
    })
    .await;
    assert_eq!((status.as_str(), provider_id.as_str()), ("True", created.provider_id.as_str()));

    assert!(cloud.kill(&created.provider_id));
    wait_until("node worker-1 Unknown", Duration::from_secs(10), || async {
        ready(&nodes, "worker-1").await.filter(|(status, _)| status == "Unknown")
    })
    .await;
    // A dead VM is still there until the machine controller deletes it.
    assert_eq!(driver.get_machine_status(&request).await.unwrap().provider_id, created.provider_id);

    let written = kubelet.stop().await;
    assert_eq!((written.nodes_created, written.ready_posts, written.unknown_posts), (1, 1, 1), "{written:?}");
}
