//! The safety controller end to end: orphan VMs made behind the controllers' back are collected, VMs that are
//! claimed — by a machine being created, by a Machine the cache has not seen yet, or by another cluster — never
//! are; Nodes without a Machine are marked; an unreachable API server freezes machine reconciles until it answers.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use mcm::api::mcm::{Machine, MachinePhase};
use mcm::apiserver::faults::{Selector, Verb};
use mcm::controllers::ControllerOptions;
use mcm::lifecycle::safety::{HEALTH_TIMEOUT_RESET, SafetyConfig};
use mcm::providers::inmemory::{self, InMemoryDriver};
use mcm::providers::{Driver, ListMachinesRequest, MachineInfo, MachineRequest, SecretData};
use serde_json::json;

use super::{Env, NS, WAIT, fast_options, phase_of};
use crate::support::wait_until;

/// Fast options with the safety controller collecting every 100 ms and probing every 100 ms (frozen after 500 ms of
/// failures).
fn safety_options() -> ControllerOptions {
    ControllerOptions {
        safety: SafetyConfig {
            orphan_vms_period: Duration::from_millis(100),
            apiserver_statuscheck_period: Duration::from_millis(100),
            apiserver_statuscheck_timeout: Duration::from_millis(500),
            unfreeze_requeue_delay: Duration::from_millis(100),
            orphan_trigger_cooldown: Duration::from_millis(20),
        },
        ..fast_options()
    }
}

/// A VM made through the driver directly (no Machine knows of it), in cluster `cluster`; it never boots, so the
/// kubelet registers no Node for it. Returns its providerID.
async fn vm_behind_the_back(env: &Env, name: &str, cluster: &str) -> String {
    let driver = InMemoryDriver::new(env.dev.cloud.clone());
    let request = MachineRequest {
        machine: MachineInfo { name: name.into(), namespace: NS.into(), ..Default::default() },
        class: inmemory::class("behind", cluster, json!({"bootSeconds": 3600})),
        secret: SecretData::default(),
        last_known_state: None,
    };
    driver.create_machine(&request).await.unwrap().provider_id
}

fn live(env: &Env, provider_id: &str) -> bool {
    env.dev.cloud.vm(provider_id).is_some_and(|vm| vm.exists())
}

/// Waits until the cloud has answered `more` further listings (each collection lists every class at least once).
async fn wait_listings(env: &Env, more: u64) {
    let start = env.dev.cloud.stats().lists;
    wait_until(&format!("{more} more VM listings"), WAIT, || async {
        (env.dev.cloud.stats().lists >= start + more).then_some(())
    })
    .await;
}

fn frozen_gauge(env: &Env) -> i64 {
    env.dev.controllers.as_ref().map_or(-1, |c| c.frozen_gauge().get())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_collected_and_claimed_or_foreign_vms_are_not() {
    let env = Env::start(safety_options()).await;
    env.class("small", json!({})).await;
    env.machine("kept", "small").await;
    let kept = env.wait_phase("kept", MachinePhase::Running, WAIT).await;
    let kept_id = kept.spec.provider_id.clone().unwrap();
    // A machine stuck before its create flow (its class does not exist): phase empty, so its VM is claimed.
    env.machine("creating", "missing").await;
    let creating_id = vm_behind_the_back(&env, "creating", "test").await;
    let foreign_id = vm_behind_the_back(&env, "foreign", "other").await;
    let orphan_id = vm_behind_the_back(&env, "orphan", "test").await;

    wait_until("the orphan VM to be deleted", WAIT, || async { (!live(&env, &orphan_id)).then_some(()) }).await;
    wait_listings(&env, 10).await;
    assert!(live(&env, &kept_id), "the VM of a running machine stays");
    assert!(live(&env, &creating_id), "the VM of a machine being created stays");
    assert!(live(&env, &foreign_id), "another cluster's VM stays");
    let m = env.machines().get("creating").await.unwrap();
    assert_eq!(phase_of(&m), None, "still being created");

    // Another cluster's VM is not even listed for this cluster's classes.
    let driver = InMemoryDriver::new(env.dev.cloud.clone());
    let listed = driver
        .list_machines(&ListMachinesRequest {
            class: inmemory::class("small", "test", json!({})),
            secret: SecretData::default(),
        })
        .await
        .unwrap();
    assert!(!listed.contains_key(&foreign_id) && listed.contains_key(&kept_id), "{listed:?}");

    let class_events = env.events_of("small").await;
    assert!(
        class_events.iter().any(|(t, r, note)| t == "Normal" && r == "DeletedOrphanVM" && note.contains(&orphan_id)),
        "{class_events:?}"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deletion_triggers_a_collection() {
    let mut options = safety_options();
    options.safety.orphan_vms_period = Duration::from_secs(3600);
    let env = Env::start(options).await;
    env.class("small", json!({})).await;
    env.machine("goes", "small").await;
    env.wait_phase("goes", MachinePhase::Running, WAIT).await;
    // The collection at start ran as the stores synced, long before; the next periodic one is an hour away.
    let orphan_id = vm_behind_the_back(&env, "orphan", "test").await;
    let lists = env.dev.cloud.stats().lists;
    env.machines().delete("goes", &DeleteParams::default()).await.unwrap();
    env.wait_gone("goes", WAIT).await;
    wait_until("the orphan VM to be deleted", WAIT, || async { (!live(&env, &orphan_id)).then_some(()) }).await;
    assert!(env.dev.cloud.stats().lists > lists, "a collection ran after the deletion");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_whose_machine_the_cache_has_not_seen_is_kept() {
    needs_embedded_server!("watch latency injection and request counters");
    let env = Env::start(safety_options()).await;
    env.class("small", json!({})).await;
    wait_listings(&env, 2).await;
    // Hold the controllers' Machine watch: closed, and its re-watch answered only after a minute.
    let server = env.embedded();
    server.faults().add_latency(Selector::new(Some(Verb::Watch), Some("machines")), Duration::from_secs(60));
    server.close_watches();

    // The Machine before its VM: a collection between the two would rightly take the VM for an orphan.
    // Without a phase it claims a VM of its name; then it records the providerID as a create would.
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": "hidden"},
        "spec": {"class": {"kind": "MachineClass", "name": "small"}},
    }))
    .unwrap();
    env.machines().create(&PostParams::default(), &machine).await.unwrap();
    let id = vm_behind_the_back(&env, "hidden", "test").await;
    let spec = json!({"spec": {"providerID": id}});
    env.machines().patch("hidden", &PatchParams::default(), &Patch::Merge(&spec)).await.unwrap();
    let status = json!({"status": {"currentStatus": {"phase": "Running"}}});
    env.machines().patch_status("hidden", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();

    let fresh_reads = server.faults().request_count(Verb::List, "machines");
    wait_listings(&env, 12).await;
    assert!(
        server.faults().request_count(Verb::List, "machines") > fresh_reads,
        "the cache lacked the machine, so the API server was asked"
    );
    assert!(live(&env, &id), "the VM of a machine the cache has not seen stays");
    server.faults().clear();
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_without_a_machine_are_marked_unmanaged() {
    let mut options = safety_options();
    // Nodes count as old after a second; no machine here runs a create flow the timeout could fail.
    options.machine.creation_timeout = Duration::from_secs(1);
    let env = Env::start(options).await;
    env.class("small", json!({})).await;
    let nodes = env.nodes();
    let node = |name: &str, annotated: bool| -> Node {
        let annotations =
            if annotated { json!({"node.machine.sapcloud.io/not-managed-by-mcm": "1"}) } else { json!({}) };
        serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "finalizers": ["node.machine.sapcloud.io/machine-controller"],
                "annotations": annotations,
            }
        }))
        .unwrap()
    };
    // A machine naming the Node by its `node` label (its class does not exist, so nothing else happens to it). It
    // exists before the Node: a Node older than the creation timeout without a Machine loses MCM's finalizer, which
    // a slow machine write would otherwise let happen first.
    env.create("adopter.yaml", &super::machine_yaml("adopter", "missing", "")).await;
    let label = json!({"metadata": {"labels": {"node": "adopted"}}});
    env.machines().patch("adopter", &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    nodes.create(&PostParams::default(), &node("stray", false)).await.unwrap();
    nodes.create(&PostParams::default(), &node("adopted", true)).await.unwrap();

    let stray = wait_until("node stray to be marked unmanaged", WAIT, || async {
        let n = nodes.get("stray").await.ok()?;
        let annotated = n.metadata.annotations.as_ref()?.get("node.machine.sapcloud.io/not-managed-by-mcm")? == "1";
        (annotated && n.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty())).then_some(n)
    })
    .await;
    assert_eq!(stray.metadata.name.as_deref(), Some("stray"));
    wait_until("node adopted to lose the annotation", WAIT, || async {
        let n = nodes.get("adopted").await.ok()?;
        let annotated = n
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("node.machine.sapcloud.io/not-managed-by-mcm"));
        (!annotated).then_some(())
    })
    .await;
    let adopted = nodes.get("adopted").await.unwrap();
    assert_eq!(
        adopted.metadata.finalizers.as_deref(),
        Some(&["node.machine.sapcloud.io/machine-controller".to_string()][..]),
        "a managed node keeps MCM's finalizer"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_freezes_machine_reconciles_until_it_answers() {
    needs_embedded_server!("fault injection");
    let env = Env::start(safety_options()).await;
    env.class("small", json!({})).await;
    env.machine("steady", "small").await;
    env.wait_phase("steady", MachinePhase::Running, WAIT).await;
    assert_eq!(frozen_gauge(&env), 0);

    // The target cluster's probe (a GET of a Node) fails; the probe client does not retry.
    let faults = env.embedded().faults();
    faults.fail_share(Selector::new(Some(Verb::Get), Some("nodes")), 1.0, 503);
    wait_until("the machine controller to freeze", WAIT, || async { (frozen_gauge(&env) == 1).then_some(()) }).await;
    assert!(env.dev.controllers.as_ref().unwrap().frozen());

    // Unknown since long before the health timeout: unfrozen without a reset, it would fail at once.
    let unknown = json!({"status": {
        "currentStatus": {"phase": "Unknown", "lastUpdateTime": "2020-01-01T00:00:00Z"},
        "lastOperation": {
            "type": "HealthCheck", "state": "Processing", "lastUpdateTime": "2020-01-01T00:00:00Z",
            "description": "Machine steady is unhealthy - changing MachinePhase to Unknown. Node conditions: []",
        },
    }});
    env.machines().patch_status("steady", &PatchParams::default(), &Patch::Merge(&unknown)).await.unwrap();
    env.machine("newcomer", "small").await;
    let orphan_id = vm_behind_the_back(&env, "orphan", "test").await;
    let (probes, lists) = (faults.request_count(Verb::Get, "nodes"), env.dev.cloud.stats().lists);
    wait_until("several probes while frozen", WAIT, || async {
        (faults.request_count(Verb::Get, "nodes") >= probes + 8).then_some(())
    })
    .await;
    assert!(env.vms_of("newcomer").is_empty(), "no VM is created while frozen");
    assert_eq!(phase_of(&env.machines().get("newcomer").await.unwrap()), None);
    assert_eq!(phase_of(&env.machines().get("steady").await.unwrap()), Some(MachinePhase::Unknown));
    assert_eq!(env.dev.cloud.stats().lists, lists, "no orphan collection while frozen");
    assert!(live(&env, &orphan_id));

    faults.clear();
    wait_until("the machine controller to unfreeze", WAIT, || async { (frozen_gauge(&env) == 0).then_some(()) }).await;
    let reset = env.wait_phase("steady", MachinePhase::Running, WAIT).await;
    let op = reset.status.unwrap().last_operation.unwrap();
    assert_eq!(op.description.as_deref(), Some(HEALTH_TIMEOUT_RESET));
    env.wait_phase("newcomer", MachinePhase::Running, WAIT).await;
    assert_eq!(env.vms_of("newcomer").len(), 1);
    wait_until("the orphan VM to be collected after the freeze", WAIT, || async {
        (!live(&env, &orphan_id)).then_some(())
    })
    .await;
    assert_eq!(phase_of(&env.machines().get("steady").await.unwrap()), Some(MachinePhase::Running), "not Failed");
    env.shutdown().await;
}
