//! A bare Machine from `kubectl create -f` to Running and back: VM, Node, labels, bootstrap token, node template,
//! events; `kubectl delete machine` removes VM, Node and finalizer.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use mcm::api::mcm::names::{
    JOIN_DURATION_ANNOTATION, LAST_APPLIED_ANNOTATION, MACHINE_FINALIZER, MACHINE_NAME_LABEL, PRIORITY_ANNOTATION,
};
use mcm::api::mcm::{MachineOperationType, MachinePhase, MachineState};
use mcm::lifecycle::userdata::{token_id, token_secret_name};
use serde_json::json;

use super::{Env, NS, WAIT, fast_options, machine_yaml};
use crate::support::wait_until;

const TEMPLATE: &str = "  nodeTemplate:
    metadata:
      labels:
        pool: blue
      annotations:
        note: hello
    spec:
      taints:
      - key: dedicated
        value: blue
        effect: NoSchedule
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_machine_runs_and_is_deleted_with_kubectl() {
    let env = Env::start(fast_options()).await;
    env.class("small", json!({})).await;
    env.create("m.yaml", &machine_yaml("web-1", "small", TEMPLATE)).await;

    env.wait_phase("web-1", MachinePhase::Running, WAIT).await;
    // The join duration is annotated right after the status write.
    let m = wait_until("the join duration annotation", WAIT, || async {
        let m = env.machines().get("web-1").await.ok()?;
        m.metadata.annotations.as_ref()?.contains_key(JOIN_DURATION_ANNOTATION).then_some(m)
    })
    .await;
    let vms = env.vms_of("web-1");
    assert_eq!(vms.len(), 1, "one VM: {vms:?}");
    assert_eq!(m.spec.provider_id.as_deref(), Some(vms[0].provider_id.as_str()));
    let labels = m.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("node").map(String::as_str), Some("web-1"));
    let annotations = m.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get(PRIORITY_ANNOTATION).map(String::as_str), Some("3"));
    assert!(annotations.contains_key(JOIN_DURATION_ANNOTATION), "{annotations:?}");
    assert!(m.metadata.finalizers.as_ref().unwrap().contains(&MACHINE_FINALIZER.to_string()));
    let status = m.status.clone().unwrap();
    let op = status.last_operation.unwrap();
    assert_eq!((op.type_, op.state), (Some(MachineOperationType::Create), Some(MachineState::Successful)));
    assert!(op.description.unwrap().starts_with("Machine web-1 successfully joined the cluster in "));
    assert!(status.conditions.unwrap().iter().any(|c| c.type_ == "Ready" && c.status == "True"));

    // The bootstrap token is gone once the node joined.
    let tokens: Api<Secret> = Api::namespaced(env.client(), "kube-system");
    let token = token_secret_name(&token_id("web-1"));
    wait_until("the bootstrap token to go", WAIT, || async {
        tokens.get_opt(&token).await.unwrap().is_none().then_some(())
    })
    .await;

    // The node template is on the Node, with the machine's name.
    let node = wait_until("the node template on the Node", WAIT, || async {
        let node = env.nodes().get("web-1").await.ok()?;
        let labels = node.metadata.labels.clone()?;
        (labels.get(MACHINE_NAME_LABEL).map(String::as_str) == Some("web-1")).then_some(node)
    })
    .await;
    assert_eq!(node.metadata.labels.as_ref().unwrap()["pool"], "blue");
    let node_annotations = node.metadata.annotations.clone().unwrap();
    assert_eq!(node_annotations["note"], "hello");
    assert!(node_annotations.contains_key(LAST_APPLIED_ANNOTATION));
    let taints = node.spec.clone().unwrap().taints.unwrap();
    assert!(taints.iter().any(|t| t.key == "dedicated" && t.value.as_deref() == Some("blue")), "{taints:?}");

    // Changing the template moves the Node along (three-way merge: `pool` changes, `note` goes).
    let patch = json!({"spec": {"nodeTemplate": {"metadata": {"labels": {"pool": "green"}, "annotations": null}}}});
    env.machines().patch("web-1", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_until("the new template on the Node", WAIT, || async {
        let node = env.nodes().get("web-1").await.ok()?;
        let pool = node.metadata.labels.as_ref()?.get("pool").cloned();
        let note = node.metadata.annotations.as_ref()?.get("note").cloned();
        (pool.as_deref() == Some("green") && note.is_none()).then_some(())
    })
    .await;

    let events = env.events_of("web-1").await;
    for reason in ["SuccessfulCreate", "Running"] {
        assert!(events.iter().any(|(_, r, _)| r == reason), "event {reason}: {events:?}");
    }
    // Pending has no event of its own: SuccessfulCreate of the same pass says more.
    assert!(!events.iter().any(|(_, r, _)| r == "Pending"), "no Pending event: {events:?}");

    env.kubectl.run(&["-n", NS, "delete", "machines.machine.sapcloud.io", "web-1", "--timeout=60s"]).await;
    env.wait_gone("web-1", WAIT).await;
    assert!(env.vms_of("web-1").is_empty(), "the VM is deleted");
    assert!(env.nodes().get_opt("web-1").await.unwrap().is_none(), "the Node is deleted");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_node_deletes_its_machine() {
    let env = Env::start(fast_options()).await;
    env.class("small", json!({})).await;
    env.machine("gone-node", "small").await;
    env.wait_phase("gone-node", MachinePhase::Running, WAIT).await;
    env.kubectl.run(&["delete", "node", "gone-node"]).await;
    env.wait_gone("gone-node", WAIT).await;
    assert!(env.vms_of("gone-node").is_empty());
    let events = env.events_of("gone-node").await;
    assert!(events.iter().any(|(_, r, _)| r == "NodeDeleted"), "{events:?}");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_that_changes_nothing_writes_nothing() {
    needs_embedded_server!("its request counters");
    let mut options = fast_options();
    options.machine.resync = std::time::Duration::from_millis(200);
    let env = Env::start(options).await;
    env.class("small", json!({})).await;
    env.machine("quiet", "small").await;
    env.wait_phase("quiet", MachinePhase::Running, WAIT).await;
    // The join's known last effects first (the join annotation, the token gone, the Node synced), then a settle.
    wait_until("the join to finish", WAIT, || async {
        let m = env.machines().get("quiet").await.ok()?;
        m.metadata.annotations.as_ref()?.get(JOIN_DURATION_ANNOTATION)?;
        let tokens: Api<Secret> = Api::namespaced(env.client(), "kube-system");
        tokens.get_opt(&token_secret_name(&token_id("quiet"))).await.ok()?.is_none().then_some(())?;
        let node = env.nodes().get("quiet").await.ok()?;
        (node.metadata.labels.as_ref()?.get(MACHINE_NAME_LABEL).map(String::as_str) == Some("quiet")).then_some(())
    })
    .await;
    let faults = env.embedded().faults();
    let counted = ["machines", "machines/status", "machineclasses", "secrets", "nodes"];
    let writes = || {
        faults
            .request_counts()
            .iter()
            .filter(|((verb, resource), _)| {
                matches!(verb.as_str(), "patch" | "update" | "create" | "delete")
                    && counted.contains(&resource.as_str())
            })
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    // The join's last writes settle first: no write for a few resyncs in a row.
    let mut last = (writes(), std::time::Instant::now());
    wait_until("the writes of the join to settle", WAIT, || {
        let now = writes();
        if now != last.0 {
            last = (now, std::time::Instant::now());
        }
        let settled = last.1.elapsed() > std::time::Duration::from_millis(600);
        async move { settled.then_some(()) }
    })
    .await;
    let reads_before = faults.request_count(mcm::apiserver::faults::Verb::Get, "machines");
    let before = writes();
    // About five resyncs of the machine (every 200 ms); each reconciles from the stores and decides nothing.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let writes = writes() - before;
    assert_eq!(
        faults.request_count(mcm::apiserver::faults::Verb::Get, "machines"),
        reads_before,
        "reads come from stores"
    );
    assert_eq!(writes, 0, "{:?}", faults.request_counts());
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_target_cluster_machines_become_available() {
    use mcm::controllers::{Clusters, Controllers};
    let mut env = Env::start(fast_options()).await;
    env.dev.kill_controllers().await;
    let clusters =
        Clusters { control: env.client(), target: None, drain: None, probe: None, capi_nodes: Default::default() };
    let controllers = Controllers::start(clusters, env.dev.drivers.clone(), fast_options());
    env.class("small", json!({})).await;
    env.machine("solo", "small").await;
    let m = env.wait_phase("solo", MachinePhase::Available, WAIT).await;
    let status = m.status.unwrap();
    let addresses = status.addresses.unwrap();
    assert!(addresses.iter().any(|a| a.type_ == "Hostname" && a.address == "solo"), "{addresses:?}");
    assert!(addresses.iter().any(|a| a.type_ == "InternalIP"), "{addresses:?}");
    let op = status.last_operation.unwrap();
    assert_eq!(op.description.as_deref(), Some("Created machine on cloud provider"));
    assert_eq!(op.state, Some(MachineState::Successful));
    assert!(!m.metadata.labels.unwrap_or_default().contains_key("node"), "no node label without a target cluster");
    let tokens: Api<Secret> = Api::namespaced(env.client(), "kube-system");
    assert!(tokens.get_opt(&token_secret_name(&token_id("solo"))).await.unwrap().is_none(), "no bootstrap token");

    env.machines().delete("solo", &kube::api::DeleteParams::default()).await.unwrap();
    env.wait_gone("solo", WAIT).await;
    assert!(env.vms_of("solo").is_empty());
    controllers.stop().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_waits_for_critical_components() {
    let env = Env::start(fast_options()).await;
    env.class("small", json!({})).await;
    let tainted = "  nodeTemplate:
    spec:
      taints:
      - key: node.gardener.cloud/critical-components-not-ready
        effect: NoSchedule
";
    env.create("m.yaml", &machine_yaml("gated", "small", tainted)).await;
    // The Node is Ready, but carries the taint: the machine stays Pending.
    wait_until("a Ready Node with the taint", WAIT, || async {
        let m = env.machines().get("gated").await.ok()?;
        let ready = m.status.as_ref()?.conditions.as_ref()?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(())
    })
    .await;
    assert_eq!(super::phase_of(&env.machines().get("gated").await.unwrap()), Some(MachinePhase::Pending));
    // Gardener's components report ready: here, the template drops the taint, and the three-way merge removes it.
    let patch = json!({"spec": {"nodeTemplate": {"spec": {"taints": []}}}});
    env.machines().patch("gated", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    env.wait_phase("gated", MachinePhase::Running, WAIT).await;
    let node = env.nodes().get("gated").await.unwrap();
    let taints = node.spec.unwrap().taints.unwrap_or_default();
    assert!(taints.is_empty(), "{taints:?}");
    env.shutdown().await;
}

/// A Machine that names its VM (a providerID, no `node` label: adopted by hand, or AWS answering NotFound right
/// after a launch) is trusted when the driver cannot find that VM: it is never given a second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_naming_its_vm_is_never_given_a_second_one() {
    let env = Env::start(fast_options()).await;
    env.class("small", json!({})).await;
    let named = "inmemory:///local-a/i-00000000000000aa";
    env.create("m.yaml", &machine_yaml("adopted", "small", &format!("  providerID: {named}\n"))).await;
    let m = env.wait_phase("adopted", MachinePhase::Pending, WAIT).await;
    assert_eq!(m.spec.provider_id.as_deref(), Some(named), "the providerID it names is kept");
    assert!(env.vms_of("adopted").is_empty(), "no second VM: {:?}", env.vms_of("adopted"));
    env.shutdown().await;
}
