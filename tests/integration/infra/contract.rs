//! Contract tests: each step CAPI core takes, and every field core reads after it.

use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use mcm::api::infra::{MCMMachine, MCMMachineTemplate};
use mcm::lifecycle::infra::{MACHINE_FINALIZER, reason};
use serde_json::json;

use super::{Env, NS, WAIT, condition, inline_class};
use crate::support::wait_until;

fn ready_reason(m: &MCMMachine) -> Option<String> {
    condition(m.status.as_ref()?.conditions.as_deref(), "Ready").map(|c| c.reason.clone())
}

fn provisioned(m: &MCMMachine) -> Option<bool> {
    m.status.as_ref()?.initialization.as_ref()?.provisioned
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcmmachine_follows_capi_core_through_its_life() {
    let env = Env::start().await;

    // The Cluster and its MCMCluster, as the user and core's Cluster controller make them.
    env.cluster("c1", false).await;
    env.create(
        "mcmcluster.json",
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMCluster",
            "metadata": {"name": "c1", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "spec": {
                "controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443},
                "failureDomains": [{"name": "zone-a", "controlPlane": true}, {"name": "zone-b"}],
            },
        }),
    )
    .await;
    let mcm_clusters = env.mcm_clusters();
    wait_until("the MCMCluster to wait for its owner", WAIT, || async {
        let c = mcm_clusters.get("c1").await.ok()?;
        let ready = condition(c.status.as_ref()?.conditions.as_deref(), "Ready")?;
        (ready.reason == reason::WAITING_FOR_OWNER).then_some(())
    })
    .await;
    let cluster = env.clusters().get("c1").await.unwrap();
    let owner = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1",
        "uid": cluster.metadata.uid, "controller": true, "blockOwnerDeletion": true,
    }]}});
    mcm_clusters.patch("c1", &PatchParams::default(), &Patch::Merge(&owner)).await.unwrap();
    // What core reads of an InfraCluster: provisioned, failure domains (list form), endpoint, Ready.
    let infra_cluster = wait_until("the MCMCluster to be provisioned", WAIT, || async {
        let c = mcm_clusters.get("c1").await.ok()?;
        (c.status.as_ref()?.initialization.as_ref()?.provisioned == Some(true)).then_some(c)
    })
    .await;
    let status = infra_cluster.status.clone().unwrap();
    let names: Vec<String> = status.failure_domains.unwrap().into_iter().map(|f| f.name).collect();
    assert_eq!(names, ["zone-a", "zone-b"]);
    assert_eq!(infra_cluster.spec.control_plane_endpoint.unwrap().port, Some(6443));
    let conditions = status.conditions.unwrap();
    assert_eq!(condition(Some(&conditions), "Ready").unwrap().status, "True");
    assert_eq!(condition(Some(&conditions), "Paused").unwrap().status, "False");
    env.set_cluster_provisioned("c1").await;

    // The MCMMachine before core's Machine controller owns it: it waits, and makes no VM.
    env.mcm_machine("m1", "c1", inline_class(json!({}))).await;
    env.wait_condition("m1", "Ready", "False", reason::WAITING_FOR_OWNER).await;
    // The Machine without bootstrap data yet, placed in zone-b, and the ownerRef.
    env.capi_machine("m1", "c1", None, Some("zone-b")).await;
    env.adopt("m1").await;
    let waiting = env.wait_condition("m1", "Ready", "False", reason::WAITING_FOR_BOOTSTRAP_DATA).await;
    assert_eq!(provisioned(&waiting), None);
    assert_eq!(waiting.spec.provider_id, None);
    assert!(waiting.finalizers().iter().any(|f| f == MACHINE_FINALIZER), "finalizer once owner and Cluster exist");
    assert!(env.dev.cloud.live_vms().iter().all(|vm| vm.machine_name != "m1"), "no VM before bootstrap data");

    // The bootstrap provider writes its Secret; core sets dataSecretName: the VM is made.
    env.bootstrap_secret("m1-bootstrap").await;
    let patch = json!({"spec": {"bootstrap": {"dataSecretName": "m1-bootstrap"}}});
    env.machines().patch("m1", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let m = env.wait_provisioned("m1").await;
    // Every field core reads of an InfraMachine.
    let provider_id = m.spec.provider_id.clone().unwrap();
    assert!(provider_id.starts_with("inmemory:///zone-b/"), "{provider_id}: placed in the Machine's failure domain");
    let status = m.status.clone().unwrap();
    assert_eq!(status.failure_domain.as_deref(), Some("zone-b"));
    assert_eq!(m.spec.failure_domain.as_deref(), Some("zone-b"), "identity in spec survives clusterctl move");
    let addresses = status.addresses.clone().unwrap();
    assert!(addresses.iter().any(|a| a.type_ == "InternalIP"), "{addresses:?}");
    assert!(addresses.iter().any(|a| a.type_ == "Hostname" && a.address == "m1"), "{addresses:?}");
    let ready = condition(status.conditions.as_deref(), "Ready").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", reason::PROVISIONED));
    assert_eq!(ready.observed_generation, m.metadata.generation);
    assert_eq!(condition(status.conditions.as_deref(), "Paused").unwrap().status, "False");
    assert!(env.live(&provider_id));
    let vm = env.dev.cloud.vm(&provider_id).unwrap();
    assert_eq!((vm.machine_name.as_str(), vm.zone.as_str()), ("m1", "zone-b"));
    // The kubelet simulator registers a Node with exactly that providerID (core matches it).
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(env.client());
    wait_until("the Node with the providerID", WAIT, || async {
        let list = nodes.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id.as_str()))
            .then_some(())
    })
    .await;

    // Pause: the condition says so, and a deletion waits (clusterctl move pauses, then deletes the source).
    env.pause_cluster("c1", true).await;
    env.wait_condition("m1", "Paused", "True", reason::PAUSED).await;
    env.mcm_machines().delete("m1", &DeleteParams::default()).await.unwrap();
    // A spec change after the deletion: once the Paused condition reports its generation, the controller has
    // seen the deleting object, paused.
    let patch = json!({"spec": {"nodeTemplate": {"metadata": {"labels": {"touched": "yes"}}}}});
    let touched = env.mcm_machines().patch("m1", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let generation = touched.metadata.generation;
    let api = env.mcm_machines();
    wait_until("the paused controller to see the deleting machine", WAIT, || async {
        let m = api.get("m1").await.ok()?;
        let paused = condition(m.status.as_ref()?.conditions.as_deref(), "Paused")?;
        (paused.observed_generation == generation && paused.status == "True").then_some(())
    })
    .await;
    assert!(env.live(&provider_id), "no VM is deleted while paused");
    assert!(api.get("m1").await.unwrap().finalizers().iter().any(|f| f == MACHINE_FINALIZER));

    // Unpause: the VM goes, then the MCMMachine.
    env.pause_cluster("c1", false).await;
    env.wait_gone("m1").await;
    assert!(!env.live(&provider_id));
    let events = env.events_of("m1").await;
    assert!(events.iter().any(|(_, r, _)| r == "SuccessfulCreate"), "{events:?}");
    assert!(events.iter().any(|(_, r, _)| r == "SuccessfulDelete"), "{events:?}");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_referenced_machine_class_a_template_and_a_restart() {
    let mut env = Env::start().await;
    env.cluster("c1", true).await;
    env.create(
        "class.json",
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": "small"},
            "provider": "InMemory",
            "providerSpec": {"bootSeconds": 0.2, "tags": {"kubernetes.io/cluster/test": "1", "kubernetes.io/role/node": "1"}},
            "nodeTemplate": {
                "capacity": {"cpu": "2", "memory": "4Gi"},
                "instanceType": "m.medium", "region": "local", "zone": "local-a", "architecture": "arm64",
            },
        }),
    )
    .await;
    let class_ref = json!({"class": {"kind": "MachineClass", "name": "small"}});

    // The template publishes what a node of its class offers (autoscaling from zero).
    env.create(
        "template.json",
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachineTemplate",
            "metadata": {"name": "small"},
            "spec": {"template": {"spec": class_ref}},
        }),
    )
    .await;
    let templates: kube::Api<MCMMachineTemplate> = kube::Api::namespaced(env.client(), NS);
    let t = wait_until("the template's capacity", WAIT, || async {
        let t = templates.get("small").await.ok()?;
        t.status.as_ref()?.capacity.as_ref()?;
        Some(t)
    })
    .await;
    let status = t.status.unwrap();
    assert_eq!(status.capacity.unwrap()["cpu"].0, "2");
    let info = status.node_info.unwrap();
    assert_eq!((info.architecture.as_deref(), info.operating_system.as_deref()), (Some("arm64"), Some("linux")));

    // A machine of the referenced class; then the controllers die and restart: nothing is made twice.
    let m = env.provision("m1", class_ref.clone()).await;
    let provider_id = m.spec.provider_id.clone().unwrap();
    env.dev.kill_controllers().await;
    // clusterctl move drops status: the controller rebuilds it from spec and the cloud.
    let api = env.mcm_machines();
    let cleared = json!({"status": null});
    let moved = api.patch_status("m1", &PatchParams::default(), &Patch::Merge(&cleared)).await.unwrap();
    assert!(moved.status.is_none_or(|s| s.initialization.is_none()), "status dropped as by a move");
    env.dev.start_controllers();
    let again = env.wait_provisioned("m1").await;
    assert_eq!(again.spec.provider_id.as_deref(), Some(provider_id.as_str()));
    assert_eq!(env.dev.cloud.vms().iter().filter(|vm| vm.machine_name == "m1").count(), 1, "one VM, adopted");

    // A Machine with both class kinds set is refused with a condition.
    env.bootstrap_secret("bad-bootstrap").await;
    env.capi_machine("bad", "c1", Some("bad-bootstrap"), None).await;
    let mut both = inline_class(json!({}));
    both["class"] = json!({"kind": "MachineClass", "name": "small"});
    env.mcm_machine("bad", "c1", both).await;
    env.adopt("bad").await;
    let bad = env.wait_condition("bad", "Ready", "False", reason::INVALID_CLASS).await;
    assert_eq!(provisioned(&bad), None);
    env.mcm_machines().delete("bad", &DeleteParams::default()).await.unwrap();
    env.wait_gone("bad").await;
    assert_eq!(ready_reason(&again).as_deref(), Some(reason::PROVISIONED));
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_useful_columns() {
    let env = Env::start().await;
    env.cluster("c1", true).await;
    env.provision("m1", inline_class(json!({}))).await;
    let out = env.kubectl.run(&["-n", NS, "get", "mcmmachines"]).await;
    let header = out.lines().next().unwrap_or_default().to_string();
    for column in ["NAME", "CLUSTER", "MACHINE", "PROVIDERID", "PROVISIONED", "READY", "AGE"] {
        assert!(header.contains(column), "{column} missing in:\n{out}");
    }
    assert!(out.contains("inmemory:///") && out.contains("true"), "{out}");
    let wide = env.kubectl.run(&["-n", NS, "get", "mcmmachines", "-o", "wide"]).await;
    assert!(wide.contains("REASON") && wide.contains("Provisioned") && wide.contains("Available"), "{wide}");
    let mut template = inline_class(json!({}));
    template["inlineClass"]["nodeTemplate"] = json!({
        "capacity": {"cpu": "4", "memory": "8Gi"}, "instanceType": "m.large", "region": "local", "zone": "local-a",
    });
    env.create(
        "template.json",
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachineTemplate",
            "metadata": {"name": "large"},
            "spec": {"template": {"spec": template}},
        }),
    )
    .await;
    env.create(
        "mcmcluster.json",
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMCluster",
            "metadata": {"name": "c1", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "spec": {"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}},
        }),
    )
    .await;
    let templates = wait_until("the template's columns", WAIT, || async {
        let out = env.kubectl.run(&["-n", NS, "get", "mcmmachinetemplates"]).await;
        out.contains("8Gi").then_some(out)
    })
    .await;
    for column in ["NAME", "CLASS", "PROVIDER", "CPU", "MEMORY", "AGE"] {
        assert!(templates.contains(column), "{column} missing in:\n{templates}");
    }
    assert!(templates.contains("InMemory") && templates.contains(" 4 "), "{templates}");
    let clusters = env.kubectl.run(&["-n", NS, "get", "mcmclusters", "-o", "wide"]).await;
    for column in ["NAME", "CLUSTER", "PROVISIONED", "READY", "ENDPOINT", "PAUSED", "AGE"] {
        assert!(clusters.contains(column), "{column} missing in:\n{clusters}");
    }
    assert!(clusters.contains("10.0.0.1"), "{clusters}");
    let all = env.kubectl.run(&["-n", NS, "get", "cluster-api"]).await;
    assert!(all.contains("mcmmachinetemplate.infrastructure.cluster.x-k8s.io/large"), "{all}");
    assert!(all.contains("mcmcluster.infrastructure.cluster.x-k8s.io/c1"), "{all}");
    assert!(all.contains("mcmmachine.infrastructure.cluster.x-k8s.io/m1"), "{all}");
    env.shutdown().await;
}
