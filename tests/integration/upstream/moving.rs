//! `clusterctl move` between two management clusters, each with upstream core and our manager, sharing one cloud:
//! every Machine is Running on the target, no VM was created or deleted by the move, and neither side's orphan
//! collection touched a moved VM.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::json;

use super::{Cloud, Management, NS, Tools, capi, control_plane_machine, list, machine_classes, running_workers, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_move_hands_running_machines_over_without_touching_a_vm() {
    let Some(tools) = Tools::find("upstream::moving") else { return };
    let mut source = Management::start(tools.clone(), "move-source").await;
    let mut target = Management::start(tools, "move-target").await;
    // The source's API server is also the workload cluster: the kubelet registers Nodes there, and the moved
    // `<cluster>-kubeconfig` Secret keeps pointing at it.
    let cloud = Cloud::start(&source.client).await;
    // Orphan collection every 2 s on both sides, so that it runs while objects are half moved.
    for m in [&mut source, &mut target] {
        m.infra_flags = vec!["--machine-safety-orphan-vms-period=2s".into()];
        // Referenced MachineClasses need MCM's CRD, which the components do not install (docs/clusterctl.md).
        m.create_machineclass_crd().await;
        m.init(&cloud.url).await;
    }

    // A cluster on the source; its control-plane machine's class is a MachineClass with a credentials Secret of
    // the cluster's namespace, which must move along.
    source.prepare_cluster("demo", &source.server).await;
    machine_class(&source, "demo-class").await;
    control_plane_machine(&source.client, "demo", Some("demo-class")).await;
    source.generate_and_apply("demo", 3).await;
    let before = running_workers(&source, &cloud, "demo-md-0", 3, 1).await;
    let ids: Vec<String> = before.iter().map(|m| text(m, "/spec/providerID").to_string()).collect();
    let stats = cloud.cloud.stats();

    let moved = source.clusterctl_ok(&["move", "-n", NS, "--to-kubeconfig", target.kubeconfig.to_str().unwrap()]).await;
    println!("{moved}");

    // Everything Running on the target with the same VMs; nothing left on the source.
    let after = running_workers(&target, &cloud, "demo-md-0", 3, 1).await;
    let mut moved_ids: Vec<String> = after.iter().map(|m| text(m, "/spec/providerID").to_string()).collect();
    let mut ids = ids;
    ids.sort();
    moved_ids.sort();
    assert_eq!(moved_ids, ids, "the same VMs back the moved Machines");
    assert!(list(&source.client, &capi("Machine", "machines"), "").await.is_empty(), "nothing left on the source");
    let classes = machine_classes();
    assert_eq!(list(&target.client, &classes, "").await.len(), 1, "the MachineClass moved");
    let secrets: Api<Secret> = Api::namespaced(target.client.clone(), NS);
    assert!(secrets.get_opt("demo-class-credentials").await.unwrap().is_some(), "its Secret moved");
    let cluster = list(&target.client, &capi("Cluster", "clusters"), "").await;
    assert_eq!(cluster.len(), 1);
    assert_ne!(cluster[0].pointer("/spec/paused"), Some(&json!(true)), "move unpauses the target's Cluster");

    // Let both orphan collectors run a few more rounds over the moved VMs, then count.
    let lists = cloud.cloud.stats().lists;
    target
        .wait("orphan collections on both sides after the move", || async {
            (cloud.cloud.stats().lists >= lists + 6).then_some(())
        })
        .await;
    let now = cloud.cloud.stats();
    assert_eq!(now.vms_created, stats.vms_created, "the move created no VM");
    assert_eq!(now.vms_deleted, stats.vms_deleted, "the move and the orphan collectors deleted no VM");
    assert_eq!(cloud.cloud.live_vms().len(), 4);
    cloud.stop().await;
}

/// An in-memory MachineClass of the cluster's namespace with its credentials Secret (labelled to move with the
/// cluster, as docs/clusterctl.md asks of a cluster's own Secrets).
async fn machine_class(m: &Management, name: &str) {
    let secrets: Api<Secret> = Api::namespaced(m.client.clone(), NS);
    let secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-credentials"), "labels": {"clusterctl.cluster.x-k8s.io/move": ""}},
        "stringData": {"userData": "#cloud-config\n"},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    let resource = machine_classes();
    let api: Api<DynamicObject> = Api::namespaced_with(m.client.clone(), NS, &resource);
    let class = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": name},
        "provider": "InMemory",
        "providerSpec": {"machineType": "m.small", "region": "local", "zone": "local-a", "bootSeconds": 0.5,
            "tags": {"kubernetes.io/cluster/demo": "1", "kubernetes.io/role/node": "1"}},
        "secretRef": {"name": format!("{name}-credentials"), "namespace": NS},
    }))
    .unwrap();
    api.create(&PostParams::default(), &class).await.unwrap();
}
