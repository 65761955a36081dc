//! The in-memory cloud's node agent in `mcm dev`'s environment, without controllers: a Node asked for its
//! in-place update gets the MachineDeployment's new spec on its VM and the result label; the override
//! annotation fails it with a reason.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use mcm::api::mcm::names::{
    IN_PLACE_CONDITION, UPDATE_FAILED, UPDATE_FAILED_REASON, UPDATE_RESULT, UPDATE_SUCCESSFUL, in_place_reason,
};
use mcm::api::mcm::{Machine, MachineClass, MachineDeployment, MachineSet};
use mcm::dev::DevOptions;
use mcm::providers::inmemory::node_agent::OVERRIDE_ANNOTATION;
use mcm::providers::inmemory::{NodeAgentConfig, class};
use mcm::providers::{MachineInfo, MachineRequest};
use serde_json::json;

const NS: &str = "node-agent";

fn tags() -> serde_json::Value {
    json!({"kubernetes.io/cluster/dev": "1", "kubernetes.io/role/node": "1"})
}

/// A controller owner reference to `owner`.
fn owned_by<K: Resource<DynamicType = ()>>(owner: &K) -> serde_json::Value {
    json!([{
        "apiVersion": K::api_version(&()), "kind": K::kind(&()), "name": owner.name_any(),
        "uid": owner.uid().unwrap(), "controller": true,
    }])
}

/// Asks for the update as MCM does: the `InPlaceUpdate` condition with reason `ReadyForUpdate` (a strategic merge
/// patch, so the kubelet's conditions stay).
async fn ask_for_update(nodes: &Api<Node>, name: &str) {
    let status = json!({"status": {"conditions": [
        {"type": IN_PLACE_CONDITION, "status": "True", "reason": in_place_reason::READY, "message": "drained"},
    ]}});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Strategic(status)).await.unwrap();
}

async fn result(nodes: &Api<Node>, name: &str) -> Node {
    crate::support::wait_until(&format!("{name}'s update result"), Duration::from_secs(30), || async {
        let node = nodes.get_opt(name).await.unwrap()?;
        node.labels().contains_key(UPDATE_RESULT).then_some(node)
    })
    .await
}

#[tokio::test]
async fn the_node_agent_updates_the_vm_and_reports_the_result() {
    let dir = crate::support::TempDir::new("mcm-node-agent");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        run_controllers: false,
        sample: false,
        node_agent: Some(NodeAgentConfig { update_duration: Duration::from_millis(100), ..Default::default() }),
        ..Default::default()
    };
    let (env, _cluster) = crate::support::start_dev(options).await;
    let client = env.client.clone();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap())
        .await
        .unwrap();

    // The chain the agent follows: Machine -> MachineSet -> MachineDeployment -> its (new) class.
    let classes: Api<MachineClass> = Api::namespaced(client.clone(), NS);
    let new_spec = json!({"machineType": "m.large", "kubeletVersion": "v1.38.0", "tags": tags()});
    let new_class = json!({"metadata": {"name": "new"}, "provider": "InMemory", "providerSpec": new_spec});
    classes.create(&PostParams::default(), &serde_json::from_value(new_class).unwrap()).await.unwrap();
    let template = json!({"metadata": {"labels": {"name": "workers"}}, "spec": {"class": {"kind": "MachineClass", "name": "new"}}});
    let deployment = json!({"metadata": {"name": "workers"}, "spec": {
        "replicas": 1, "selector": {"matchLabels": {"name": "workers"}}, "template": template,
    }});
    let deployments: Api<MachineDeployment> = Api::namespaced(client.clone(), NS);
    let deployment =
        deployments.create(&PostParams::default(), &serde_json::from_value(deployment).unwrap()).await.unwrap();
    let set = json!({"metadata": {"name": "workers-old", "ownerReferences": owned_by(&deployment)}, "spec": {
        "replicas": 1, "selector": {"matchLabels": {"name": "workers"}},
        "template": {"metadata": {"labels": {"name": "workers"}}, "spec": {"class": {"kind": "MachineClass", "name": "old"}}},
    }});
    let sets: Api<MachineSet> = Api::namespaced(client.clone(), NS);
    let set = sets.create(&PostParams::default(), &serde_json::from_value(set).unwrap()).await.unwrap();
    let machine = json!({"metadata": {"name": "m1", "ownerReferences": owned_by(&set), "labels": {"name": "workers"}},
                         "spec": {"class": {"kind": "MachineClass", "name": "old"}}});
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    machines.create(&PostParams::default(), &serde_json::from_value(machine).unwrap()).await.unwrap();

    // VMs of the old class: m1 (the machine above) and m2 (no machine: nothing to resolve).
    let driver = env.drivers.get("InMemory").unwrap();
    let old = class("old", "dev", json!({"machineType": "m.small", "bootSeconds": 0}));
    let mut created = Vec::new();
    for name in ["m1", "m2"] {
        let request = MachineRequest {
            machine: MachineInfo { name: name.into(), namespace: NS.into(), ..Default::default() },
            class: old.clone(),
            ..Default::default()
        };
        created.push(driver.create_machine(&request).await.unwrap());
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for vm in &created {
        crate::support::wait_until("the Node to register", Duration::from_secs(30), || async {
            let node = nodes.get_opt(&vm.node_name).await.unwrap()?;
            node.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
                .then_some(())
        })
        .await;
    }

    ask_for_update(&nodes, "m1").await;
    let m1 = result(&nodes, "m1").await;
    assert_eq!(m1.labels()[UPDATE_RESULT], UPDATE_SUCCESSFUL);
    assert!(!m1.annotations().contains_key(UPDATE_FAILED_REASON));
    let conditions = m1.status.as_ref().unwrap().conditions.as_ref().unwrap();
    let in_place = conditions.iter().find(|c| c.type_ == IN_PLACE_CONDITION).unwrap();
    assert_eq!(in_place.reason.as_deref(), Some(in_place_reason::READY), "the agent leaves the condition to MCM");
    // Same VM, new template: the kubelet reports it.
    let updated = crate::support::wait_until("m1's new kubelet version", Duration::from_secs(30), || async {
        let node = nodes.get("m1").await.unwrap();
        (node.status.as_ref()?.node_info.as_ref()?.kubelet_version == "v1.38.0").then_some(node)
    })
    .await;
    assert_eq!(updated.labels()["node.kubernetes.io/instance-type"], "m.large");
    assert_eq!(updated.spec.unwrap().provider_id.as_deref(), Some(created[0].provider_id.as_str()));
    assert_eq!(env.cloud.live_vms().len(), 2, "no VM was replaced");

    let annotate = json!({"metadata": {"annotations": {OVERRIDE_ANNOTATION: "fail:boom"}}});
    nodes.patch("m2", &PatchParams::default(), &Patch::Merge(annotate)).await.unwrap();
    ask_for_update(&nodes, "m2").await;
    let m2 = result(&nodes, "m2").await;
    assert_eq!(m2.labels()[UPDATE_RESULT], UPDATE_FAILED);
    assert_eq!(m2.annotations()[UPDATE_FAILED_REASON], "boom");
    let vm2 = env.cloud.vm(&created[1].provider_id).unwrap();
    assert_eq!((vm2.machine_type.as_str(), vm2.revision), ("m.small", 0), "a failed update changes nothing");

    let stats = env.node_agent.as_ref().unwrap().stats();
    assert_eq!((stats.succeeded, stats.failed, stats.vms_updated), (1, 1, 1), "{stats:?}");
    env.shutdown().await;
}
