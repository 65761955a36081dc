//! SIGTERM during a rolling update: the process stops its controllers, releases its lease and exits 0; nothing is
//! left half-written, so the next process converges the rollout with one VM per machine.

use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams};
use mcm::api::mcm::{MachineDeployment, MachineSet};
use serde_json::json;

use super::{RunEnv, WAIT};
use crate::machines::NS;
use crate::support::wait_until;

#[tokio::test]
async fn sigterm_mid_rollout_releases_the_lease_and_a_restart_converges() {
    let env = RunEnv::start(1.0).await;
    env.env.class("small2", json!({"bootSeconds": 1.0})).await;
    // A long lease: the successor can only lead quickly if the lease was released.
    let lease = ["--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=40s"];
    let mut first = env.spawn("first", &lease);
    first.wait_line("leading: controllers started", WAIT).await;
    env.deployment("workers", 3).await;
    env.wait_running(3, WAIT).await;

    let deployments: Api<MachineDeployment> = Api::namespaced(env.env.client(), NS);
    let patch = json!({"spec": {"template": {"spec": {"class": {"name": "small2"}}}}});
    deployments.patch("workers", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    let sets: Api<MachineSet> = Api::namespaced(env.env.client(), NS);
    wait_until("the rollout to create a second MachineSet", WAIT, || async {
        (sets.list(&Default::default()).await.ok()?.items.len() == 2).then_some(())
    })
    .await;
    first.signal("TERM");
    assert!(first.wait_exit(WAIT).await, "exits 0 on SIGTERM");
    let lines = first.lines();
    assert!(lines.iter().any(|l| l.contains("controllers stopped")), "{lines:?}");
    assert_eq!(lines.last().map(String::as_str), Some("mcm run: stopped"), "{lines:?}");

    let second = env.spawn("second", &lease);
    second.wait_line("leading: controllers started", Duration::from_secs(20)).await;
    let machines = wait_until("the rollout to finish", WAIT, || async {
        let d = deployments.get("workers").await.ok()?;
        let status = d.status.clone()?;
        let done = status.updated_replicas == 3 && status.available_replicas == 3 && status.replicas == 3;
        let machines = env.env.machines().list(&Default::default()).await.ok()?.items;
        let all_new = machines.len() == 3
            && machines.iter().all(|m| {
                m.spec.class.name == "small2"
                    && crate::machines::phase_of(m) == Some(mcm::api::mcm::MachinePhase::Running)
            });
        (done && all_new).then_some(machines)
    })
    .await;
    assert_eq!(machines.len(), 3);
    env.assert_one_vm_per_machine().await;
    let stats = env.env.dev.cloud.stats();
    assert_eq!(stats.vms_created - stats.vms_deleted, 3, "{stats:?}");
    env.env.shutdown().await;
}
