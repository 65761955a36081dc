//! What goes wrong: a cloud that cannot boot the VM, a broken providerSpec, a VM that dies, several dying at once.

use std::time::{Duration, Instant};

use kube::api::DeleteParams;
use mcm::api::mcm::{MachineOperationType, MachinePhase, MachineState};
use serde_json::json;

use super::{Env, WAIT, fast_options, machine_yaml, phase_of};
use crate::support::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_failure_crash_loops_then_fails_at_the_creation_timeout() {
    let mut options = fast_options();
    options.machine.creation_timeout = Duration::from_secs(4);
    let env = Env::start(options).await;
    env.class("full", json!({"failCreate": "ResourceExhausted"})).await;
    let started = Instant::now();
    env.machine("no-room", "full").await;

    let looping = env.wait_phase("no-room", MachinePhase::CrashLoopBackOff, WAIT).await;
    let op = looping.status.unwrap().last_operation.unwrap();
    assert_eq!(op.error_code.as_deref(), Some("ResourceExhausted"));
    assert_eq!((op.type_, op.state), (Some(MachineOperationType::Create), Some(MachineState::Failed)));
    assert_eq!(
        op.description.as_deref(),
        Some(
            "Cloud provider message - machine codes error: code = [ResourceExhausted] message = [injected failure (providerSpec.failCreate)]"
        )
    );

    let failed = env.wait_phase("no-room", MachinePhase::Failed, WAIT).await;
    let took = started.elapsed();
    // At the creation timeout (measured from creationTimestamp, second precision), not a retry period later.
    assert!(took >= Duration::from_secs(3) && took < Duration::from_secs(10), "failed after {took:?}");
    let op = failed.status.unwrap().last_operation.unwrap();
    assert_eq!(op.error_code.as_deref(), Some("ResourceExhausted"), "cluster-autoscaler still sees the code");
    assert!(env.vms_of("no-room").is_empty());
    // Events are posted after the status write that they report, so they may trail it a little.
    wait_until("FailedCreate, CrashLoopBackOff and Failed warnings", WAIT, || async {
        let events = env.events_of("no-room").await;
        ["FailedCreate", "CrashLoopBackOff", "Failed"]
            .iter()
            .all(|reason| events.iter().any(|(t, r, _)| r == reason && t == "Warning"))
            .then_some(())
    })
    .await;

    // A Failed machine is not created again (its MachineSet replaces it); it can be deleted.
    let creates = env.dev.cloud.stats().creates;
    env.machines().delete("no-room", &DeleteParams::default()).await.unwrap();
    env.wait_gone("no-room", WAIT).await;
    assert_eq!(env.dev.cloud.stats().creates, creates);
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaky_cloud_eventually_creates_one_vm() {
    let env = Env::start(fast_options()).await;
    env.class("flaky", json!({"failCreateRate": 0.6})).await;
    for i in 0..4 {
        env.machine(&format!("flaky-{i}"), "flaky").await;
    }
    for i in 0..4 {
        env.wait_phase(&format!("flaky-{i}"), MachinePhase::Running, WAIT).await;
        assert_eq!(env.vms_of(&format!("flaky-{i}")).len(), 1);
    }
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_provider_spec_crash_loops_without_a_vm() {
    let env = Env::start(fast_options()).await;
    env.class("broken", json!({"bootJitter": 7})).await;
    env.machine("bad", "broken").await;
    // As MCM: CrashLoopBackOff until the creation timeout, whatever the error (see `sets::refused_class`).
    let failed = env.wait_phase("bad", MachinePhase::CrashLoopBackOff, WAIT).await;
    let op = failed.status.unwrap().last_operation.unwrap();
    let description = op.description.unwrap();
    assert!(
        description.starts_with(
            "Cloud provider message - machine codes error: code = [InvalidArgument] message = [providerSpec.bootJitter"
        ),
        "{description}"
    );
    assert_eq!(op.error_code.as_deref(), Some("InvalidArgument"));
    assert!(env.dev.cloud.live_vms().is_empty(), "no VM");
    assert_eq!(env.dev.cloud.stats().vms_created, 0);
    let events = env.events_of("bad").await;
    assert!(
        events.iter().any(|(t, r, note)| t == "Warning" && r == "FailedCreate" && note.contains("bootJitter")),
        "{events:?}"
    );
    // And it can be deleted although the driver refuses its class.
    env.kubectl.run(&["-n", super::NS, "delete", "mc", "bad", "--timeout=60s"]).await;
    env.wait_gone("bad", WAIT).await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_vm_goes_unknown_then_failed_at_the_health_timeout() {
    let mut options = fast_options();
    options.machine.health_timeout = Duration::from_secs(3);
    let env = Env::start(options).await;
    env.class("small", json!({})).await;
    env.machine("dies", "small").await;
    let running = env.wait_phase("dies", MachinePhase::Running, WAIT).await;
    assert!(env.dev.cloud.kill(running.spec.provider_id.as_deref().unwrap()));
    let unknown = env.wait_phase("dies", MachinePhase::Unknown, WAIT).await;
    let started = Instant::now();
    let op = unknown.status.unwrap().last_operation.unwrap();
    assert_eq!(op.type_, Some(MachineOperationType::HealthCheck));
    assert!(op.description.unwrap().starts_with("Machine dies is unhealthy - changing MachinePhase to Unknown"));
    let failed = env.wait_phase("dies", MachinePhase::Failed, WAIT).await;
    assert!(started.elapsed() < Duration::from_secs(9), "failed {:?} after turning Unknown", started.elapsed());
    let description = failed.status.unwrap().last_operation.unwrap().description.unwrap();
    assert!(
        description
            .starts_with("Machine dies health checks failing since last 3s minutes. Updating machine phase to Failed."),
        "{description}"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_machine_of_a_deployment_is_replaced_at_a_time() {
    let mut options = fast_options();
    options.machine.health_timeout = Duration::from_secs(1);
    let env = Env::start(options).await;
    env.class("small", json!({})).await;
    let labelled = "  nodeTemplate: {}\n";
    for name in ["pool-a", "pool-b"] {
        let yaml =
            machine_yaml(name, "small", labelled).replace("metadata:\n", "metadata:\n  labels:\n    name: pool\n");
        env.create(&format!("{name}.yaml"), &yaml).await;
    }
    for name in ["pool-a", "pool-b"] {
        let m = env.wait_phase(name, MachinePhase::Running, WAIT).await;
        env.dev.cloud.kill(m.spec.provider_id.as_deref().unwrap());
    }
    let api = env.machines();
    let (first, second) = wait_until("one machine Failed, the other Unknown", WAIT, || async {
        let a = phase_of(&api.get("pool-a").await.ok()?)?;
        let b = phase_of(&api.get("pool-b").await.ok()?)?;
        match (a, b) {
            (MachinePhase::Failed, MachinePhase::Unknown) => Some(("pool-a", "pool-b")),
            (MachinePhase::Unknown, MachinePhase::Failed) => Some(("pool-b", "pool-a")),
            _ => None,
        }
    })
    .await;
    // Well past the health timeout, the second waits while the first is being replaced.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(phase_of(&api.get(second).await.unwrap()), Some(MachinePhase::Unknown));
    // The first one is replaced (here: deleted); then the second may fail.
    api.delete(first, &DeleteParams::default()).await.unwrap();
    env.wait_gone(first, WAIT).await;
    env.wait_phase(second, MachinePhase::Failed, WAIT).await;
    env.shutdown().await;
}
