//! Deleting a machine drains its Node: pods are evicted, a PodDisruptionBudget holds the drain back until the drain
//! timeout, after which the drain is forced; then the VM, the Node and the finalizer go.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use mcm::api::mcm::MachinePhase;
use serde_json::json;

use super::{Env, NS, WAIT, fast_options, machine_yaml};
use crate::support::wait_until;

/// Running, Ready pods on `node`, labelled `app=web` and owned by a ReplicaSet (so a drain may evict them).
async fn pods_on(env: &Env, node: &str, names: &[&str]) {
    // A real owner: the garbage collector deletes Pods whose owner does not exist.
    let replica_sets: Api<ReplicaSet> = Api::namespaced(env.client(), NS);
    let owner = json!({"metadata": {"name": "rs"}, "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
    let owner = replica_sets.create(&PostParams::default(), &serde_json::from_value(owner).unwrap()).await.unwrap();
    let uid = owner.metadata.uid.unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client(), NS);
    for name in names {
        let pod = json!({"metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "name": "rs", "uid": uid, "controller": true}]},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": "x"}]}});
        pods.create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
        let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(ready)).await.unwrap();
    }
}

async fn pod_count(env: &Env) -> usize {
    Api::<Pod>::namespaced(env.client(), NS).list(&ListParams::default()).await.unwrap().items.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_evicts_the_pods_then_removes_vm_node_and_machine() {
    let env = Env::start(fast_options()).await;
    env.class("small", json!({})).await;
    env.machine("drained", "small").await;
    env.wait_phase("drained", MachinePhase::Running, WAIT).await;
    pods_on(&env, "drained", &["a", "b"]).await;

    env.machines().delete("drained", &DeleteParams::default()).await.unwrap();
    env.wait_gone("drained", WAIT).await;
    assert_eq!(pod_count(&env).await, 0, "the pods were evicted");
    assert!(env.vms_of("drained").is_empty());
    assert!(env.nodes().get_opt("drained").await.unwrap().is_none());
    let events = env.events_of("drained").await;
    assert!(
        events.iter().any(|(_, reason, note)| reason == "Drained" && note.contains("2 pods evicted")),
        "{events:?}"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_holds_the_drain_until_the_drain_timeout_forces_it() {
    let env = Env::start(fast_options()).await;
    env.class("small", json!({})).await;
    env.create("m.yaml", &machine_yaml("held", "small", "  drainTimeout: 4s\n")).await;
    env.wait_phase("held", MachinePhase::Running, WAIT).await;
    pods_on(&env, "held", &["a", "b"]).await;
    let pdb =
        json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}});
    Api::<PodDisruptionBudget>::namespaced(env.client(), NS)
        .create(&PostParams::default(), &serde_json::from_value(pdb).unwrap())
        .await
        .unwrap();

    let started = tokio::time::Instant::now();
    env.machines().delete("held", &DeleteParams::default()).await.unwrap();
    // The budget refuses evictions: the machine stays Terminating with its pods, and says why.
    wait_until("a failed drain to be reported", WAIT, || async {
        let events = env.events_of("held").await;
        events.iter().any(|(kind, reason, _)| kind == "Warning" && reason == "FailedDrain").then_some(())
    })
    .await;
    assert_eq!(pod_count(&env).await, 2, "the budget kept both pods");
    assert_eq!(super::phase_of(&env.machines().get("held").await.unwrap()), Some(MachinePhase::Terminating));
    // After the drain timeout the drain is forced: pods deleted, then VM, Node and machine.
    env.wait_gone("held", WAIT).await;
    assert!(started.elapsed() >= Duration::from_secs(3), "not forced before the drain timeout");
    assert_eq!(pod_count(&env).await, 0, "the forced drain deleted the pods");
    assert!(env.vms_of("held").is_empty());
    assert!(env.nodes().get_opt("held").await.unwrap().is_none());
    env.shutdown().await;
}

/// `kubectl delete node` (MCM's node finalizer holds the Node): the Machine is deleted, its deletion flow drains the
/// still-present Node, deletes the VM, and only then releases and deletes the Node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_node_with_kubectl_drains_it_through_its_machines_deletion() {
    use mcm::api::mcm::names::NODE_FINALIZER;
    let env = Env::start(fast_options()).await;
    env.class("small", json!({})).await;
    env.machine("doomed", "small").await;
    env.wait_phase("doomed", MachinePhase::Running, WAIT).await;
    wait_until("the node to carry MCM's finalizer", WAIT, || async {
        let node = env.nodes().get_opt("doomed").await.unwrap()?;
        node.metadata.finalizers.unwrap_or_default().iter().any(|f| f == NODE_FINALIZER).then_some(())
    })
    .await;
    pods_on(&env, "doomed", &["a", "b"]).await;

    env.kubectl.run(&["delete", "node", "doomed", "--wait=false"]).await;
    env.wait_gone("doomed", WAIT).await;
    assert_eq!(pod_count(&env).await, 0, "the pods were evicted");
    let events = env.events_of("doomed").await;
    assert!(
        events.iter().any(|(_, reason, note)| reason == "Drained" && note.contains("2 pods evicted")),
        "{events:?}"
    );
    assert!(env.vms_of("doomed").is_empty(), "the VM was deleted");
    wait_until("the node to go", WAIT, || async {
        env.nodes().get_opt("doomed").await.unwrap().is_none().then_some(())
    })
    .await;
    env.shutdown().await;
}
