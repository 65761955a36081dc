//! Crashes and a misbehaving API server: controllers killed and restarted at random points while the cloud keeps
//! its VMs, injected 409/500 answers and dropped watches. No duplicate VM, no stuck machine.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::api::DeleteParams;
use mcm::api::mcm::MachinePhase;
use mcm::apiserver::faults::{Selector, Verb};
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::{Env, WAIT, fast_options, phase_of};
use crate::support::wait_until;

/// Every machine has exactly one live VM, the one its providerID names; no VM without a machine.
fn assert_one_vm_each(env: &Env, names: &[String], machines: &[mcm::api::mcm::Machine]) {
    let vms = env.dev.cloud.live_vms();
    let owners: Vec<&str> = vms.iter().map(|vm| vm.machine_name.as_str()).collect();
    let distinct: BTreeSet<&str> = owners.iter().copied().collect();
    assert_eq!(owners.len(), distinct.len(), "a machine has two VMs: {owners:?}");
    assert_eq!(distinct, names.iter().map(String::as_str).collect(), "VMs: {owners:?}");
    for m in machines {
        let id = m.spec.provider_id.as_deref().unwrap();
        assert!(vms.iter().any(|vm| vm.provider_id == id), "{id} is live");
    }
}

async fn all_running(env: &Env, names: &[String], timeout: Duration) -> Vec<mcm::api::mcm::Machine> {
    let api = env.machines();
    wait_until("every machine Running", timeout, || async {
        let mut out = Vec::new();
        for name in names {
            let m = api.get(name).await.ok()?;
            if phase_of(&m) != Some(MachinePhase::Running) {
                return None;
            }
            out.push(m);
        }
        Some(out)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_and_restarted_controllers_leave_no_duplicates_and_nothing_stuck() {
    let mut env = Env::start(fast_options()).await;
    env.class("small", json!({"bootSeconds": 0.3, "bootJitter": 0.5})).await;
    let names: Vec<String> = (0..6).map(|i| format!("crash-{i}")).collect();
    for name in &names {
        env.machine(name, "small").await;
    }
    let mut rng = rand::rngs::StdRng::from_os_rng();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..250))).await;
        env.dev.kill_controllers().await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..100))).await;
        env.dev.start_controllers();
    }
    let machines = all_running(&env, &names, WAIT).await;
    assert_one_vm_each(&env, &names, &machines);

    for name in &names {
        env.machines().delete(name, &DeleteParams::default()).await.unwrap();
    }
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..150))).await;
        env.dev.kill_controllers().await;
        env.dev.start_controllers();
    }
    for name in &names {
        env.wait_gone(name, WAIT).await;
    }
    assert!(env.dev.cloud.live_vms().is_empty(), "{:?}", env.dev.cloud.live_vms());
    for name in &names {
        assert!(env.nodes().get_opt(name).await.unwrap().is_none(), "node {name} is deleted");
    }
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_faults_and_dropped_watches() {
    needs_embedded_server!("fault injection and closing watches");
    let env = Env::start(fast_options()).await;
    env.class("small", json!({})).await;
    let faults = env.embedded().faults();
    // The controllers write with patches; the test itself only creates, reads and deletes.
    faults.fail_share(Selector::new(Some(Verb::Patch), Some("machines")), 0.3, 500);
    faults.fail_share(Selector::new(Some(Verb::Patch), Some("machines/status")), 0.3, 409);
    faults.fail_share(Selector::new(Some(Verb::Patch), Some("nodes")), 0.3, 500);
    faults.fail_share(Selector::new(Some(Verb::Create), Some("secrets")), 0.3, 500);
    let shared = env.embedded().shared().clone();
    let closer = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            shared.close_watches.send_modify(|n| *n += 1);
        }
    });
    let names: Vec<String> = (0..4).map(|i| format!("faulty-{i}")).collect();
    for name in &names {
        env.machine(name, "small").await;
    }
    let machines = all_running(&env, &names, WAIT).await;
    assert_one_vm_each(&env, &names, &machines);
    for name in &names {
        env.machines().delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in &names {
        env.wait_gone(name, WAIT).await;
    }
    assert!(env.dev.cloud.live_vms().is_empty());
    closer.abort();
    faults.clear();
    env.shutdown().await;
}
