//! MachineClass and Secret finalizers follow references; a referenced class cannot be deleted; an invalid node
//! template keeps machines from being created and says why; a class's virtual capacity reaches its Nodes.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use mcm::api::mcm::names::{MACHINE_FINALIZER, SECRET_FINALIZER};
use mcm::api::mcm::{MachineClass, MachinePhase};
use serde_json::json;

use super::{Env, NS, WAIT, fast_options};
use crate::support::wait_until;

fn has(finalizers: &Option<Vec<String>>, name: &str) -> bool {
    finalizers.as_ref().is_some_and(|f| f.iter().any(|x| x == name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_follow_references_and_block_deletion() {
    let env = Env::start(fast_options()).await;
    let classes: Api<MachineClass> = Api::namespaced(env.client(), NS);
    let secrets: Api<Secret> = Api::namespaced(env.client(), NS);
    env.class("shared", json!({})).await;

    // Unused: no finalizer on the class; the Secret is referenced by the class, so it has one.
    wait_until("the secret finalizer", WAIT, || async {
        has(&secrets.get("shared").await.ok()?.metadata.finalizers, SECRET_FINALIZER).then_some(())
    })
    .await;
    assert!(!has(&env.get_class("shared").await.metadata.finalizers, MACHINE_FINALIZER));

    env.machine("user", "shared").await;
    wait_until("the class finalizer", WAIT, || async {
        has(&classes.get("shared").await.ok()?.metadata.finalizers, MACHINE_FINALIZER).then_some(())
    })
    .await;
    env.wait_phase("user", MachinePhase::Running, WAIT).await;

    // Deleting the class waits for the machine.
    env.kubectl.run(&["-n", NS, "delete", "mcc", "shared", "--wait=false"]).await;
    let deleting = env.get_class("shared").await;
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert!(has(&deleting.metadata.finalizers, MACHINE_FINALIZER), "the class stays while a machine uses it");
    // The machine can still be deleted with its class being deleted.
    env.machines().delete("user", &DeleteParams::default()).await.unwrap();
    env.wait_gone("user", WAIT).await;
    assert!(env.vms_of("user").is_empty());
    wait_until("the class to go", WAIT, || async { classes.get_opt("shared").await.unwrap().is_none().then_some(()) })
        .await;
    wait_until("the secret finalizer to go", WAIT, || async {
        (!has(&secrets.get("shared").await.ok()?.metadata.finalizers, SECRET_FINALIZER)).then_some(())
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_machine_gone_releases_the_class() {
    let env = Env::start(fast_options()).await;
    env.class("c", json!({})).await;
    env.machine("one", "c").await;
    env.machine("two", "c").await;
    env.wait_phase("one", MachinePhase::Running, WAIT).await;
    env.wait_phase("two", MachinePhase::Running, WAIT).await;
    assert!(has(&env.get_class("c").await.metadata.finalizers, MACHINE_FINALIZER));
    env.machines().delete("one", &DeleteParams::default()).await.unwrap();
    env.wait_gone("one", WAIT).await;
    assert!(has(&env.get_class("c").await.metadata.finalizers, MACHINE_FINALIZER), "still used by two");
    env.machines().delete("two", &DeleteParams::default()).await.unwrap();
    env.wait_gone("two", WAIT).await;
    wait_until("the class finalizer to go", WAIT, || async {
        (!has(&env.get_class("c").await.metadata.finalizers, MACHINE_FINALIZER)).then_some(())
    })
    .await;
    // A new machine takes the class again (its emptied finalizer list is stored as `[]`).
    env.machine("three", "c").await;
    env.wait_phase("three", MachinePhase::Running, WAIT).await;
    assert!(has(&env.get_class("c").await.metadata.finalizers, MACHINE_FINALIZER));
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_node_template_is_reported_and_blocks_creation() {
    let env = Env::start(fast_options()).await;
    let yaml = super::class_yaml("nogpu", json!({})).replace(r#""gpu":"0","#, "");
    env.create("nogpu.yaml", &yaml).await;
    env.machine("waits", "nogpu").await;
    let events: Api<Event> = Api::namespaced(env.client(), NS);
    let note = wait_until("a Warning on the class", WAIT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find_map(|e| {
            let on_class = e.regarding.as_ref()?.kind.as_deref() == Some("MachineClass");
            (on_class && e.reason.as_deref() == Some("InvalidNodeTemplate")).then(|| e.note.unwrap_or_default())
        })
    })
    .await;
    assert_eq!(note, "nodeTemplate.capacity must contain cpu, gpu and memory (missing: gpu)");
    wait_until("a Warning on the machine", WAIT, || async {
        env.events_of("waits")
            .await
            .into_iter()
            .any(|(_, r, n)| r == "ClassNotReady" && n.contains("missing: gpu"))
            .then_some(())
    })
    .await;
    assert!(env.dev.cloud.live_vms().is_empty());
    assert_eq!(super::phase_of(&env.machines().get("waits").await.unwrap()), None);
    env.shutdown().await;
}

/// The class's `nodeTemplate.virtualCapacity` reaches the Node's capacity and follows the class, as MCM does it:
/// a changed value is updated, a dropped key removed, the kubelet's own resources left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classs_virtual_capacity_reaches_its_nodes_capacity() {
    use kube::api::{Patch, PatchParams};
    use mcm::api::mcm::names::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION;

    let env = Env::start(fast_options()).await;
    let classes: Api<MachineClass> = Api::namespaced(env.client(), NS);
    env.class("virtual", json!({})).await;
    let patch = json!({"nodeTemplate": {"virtualCapacity": {"example.com/dongle": "4", "example.com/slot": "1"}}});
    classes.patch("virtual", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    env.machine("v-1", "virtual").await;
    env.wait_phase("v-1", MachinePhase::Running, WAIT).await;

    let capacity_of = |node: &k8s_openapi::api::core::v1::Node| {
        node.status.as_ref().and_then(|s| s.capacity.clone()).unwrap_or_default()
    };
    let node = wait_until("the virtual capacity on the Node", WAIT, || async {
        let node = env.nodes().get("v-1").await.ok()?;
        (capacity_of(&node).get("example.com/dongle").map(|q| q.0.as_str()) == Some("4")).then_some(node)
    })
    .await;
    let capacity = capacity_of(&node);
    assert_eq!(capacity["example.com/slot"].0, "1");
    assert!(capacity.contains_key("cpu") && capacity.contains_key("memory"), "the kubelet's own stay: {capacity:?}");
    let record = &node.metadata.annotations.as_ref().unwrap()[LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION];
    assert_eq!(record, r#"{"example.com/dongle":"4","example.com/slot":"1"}"#);

    // The class changes: the value follows, the dropped key goes.
    let patch = json!({"nodeTemplate": {"virtualCapacity": {"example.com/dongle": "8", "example.com/slot": null}}});
    classes.patch("virtual", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_until("the new virtual capacity on the Node", WAIT, || async {
        let capacity = capacity_of(&env.nodes().get("v-1").await.ok()?);
        let dongle = capacity.get("example.com/dongle").map(|q| q.0.clone());
        (dongle.as_deref() == Some("8") && !capacity.contains_key("example.com/slot")).then_some(())
    })
    .await;
    let capacity = capacity_of(&env.nodes().get("v-1").await.unwrap());
    assert!(capacity.contains_key("cpu") && capacity.contains_key("memory"), "{capacity:?}");
    env.shutdown().await;
}
