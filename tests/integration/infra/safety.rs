//! Deletion edge cases and orphan VMs: a VM already gone, bad credentials, orphans of deleted MCMMachines.

use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use mcm::lifecycle::infra::reason;
use mcm::providers::inmemory::{self, InMemoryDriver};
use mcm::providers::{Driver, MachineInfo, MachineRequest, SecretData};
use serde_json::json;

use super::{Env, NS, WAIT, inline_class};
use crate::support::wait_until;

/// A VM made through the driver directly (no object knows of it) in cluster `test`; it never boots.
async fn vm_behind_the_back(env: &Env, name: &str) -> String {
    let driver = InMemoryDriver::new(env.dev.cloud.clone());
    let request = MachineRequest {
        machine: MachineInfo { name: name.into(), namespace: NS.into(), ..Default::default() },
        class: inmemory::class("behind", "test", json!({"bootSeconds": 3600})),
        secret: SecretData::default(),
        last_known_state: None,
    };
    driver.create_machine(&request).await.unwrap().provider_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_tolerates_a_vm_already_gone_and_reports_bad_credentials() {
    let env = Env::start().await;
    env.cluster("c1", true).await;

    // A VM deleted behind the controller's back: the MCMMachine still goes.
    let gone = env.provision("gone", inline_class(json!({}))).await;
    let gone_id = gone.spec.provider_id.clone().unwrap();
    let driver = InMemoryDriver::new(env.dev.cloud.clone());
    let request = MachineRequest {
        machine: MachineInfo { name: "gone".into(), provider_id: Some(gone_id.clone()), ..Default::default() },
        class: inmemory::class("x", "test", json!({})),
        secret: SecretData::default(),
        last_known_state: None,
    };
    driver.delete_machine(&request).await.unwrap();
    assert!(!env.live(&gone_id));
    env.mcm_machines().delete("gone", &DeleteParams::default()).await.unwrap();
    env.wait_gone("gone").await;

    // Bad credentials on deletion: a condition says so, the object and VM stay; fixed, the deletion completes.
    let locked = env.provision("locked", inline_class(json!({"failDelete": "Unauthenticated"}))).await;
    let locked_id = locked.spec.provider_id.clone().unwrap();
    env.mcm_machines().delete("locked", &DeleteParams::default()).await.unwrap();
    let m = env.wait_condition("locked", "Ready", "False", reason::INVALID_CREDENTIALS).await;
    assert!(m.metadata.deletion_timestamp.is_some());
    assert!(env.live(&locked_id));
    let events = env.events_of("locked").await;
    assert!(events.iter().any(|(t, r, _)| t == "Warning" && r == "FailedDelete"), "{events:?}");
    let fixed = json!({"spec": inline_class(json!({"failDelete": null}))});
    env.mcm_machines().patch("locked", &PatchParams::default(), &Patch::Merge(&fixed)).await.unwrap();
    env.wait_gone("locked").await;
    assert!(!env.live(&locked_id));

    // Bad credentials on creation: CrashLoopBackOff as MCM would, surfaced as InvalidCredentials.
    env.bootstrap_secret("denied-bootstrap").await;
    env.capi_machine("denied", "c1", Some("denied-bootstrap"), None).await;
    env.mcm_machine("denied", "c1", inline_class(json!({"failCreate": "Unauthenticated"}))).await;
    env.adopt("denied").await;
    let denied = env.wait_condition("denied", "Ready", "False", reason::INVALID_CREDENTIALS).await;
    let status = denied.status.unwrap();
    let op = status.last_operation.unwrap();
    assert_eq!(op.error_code.as_deref(), Some("Unauthenticated"));
    assert_eq!(status.current_status.unwrap().phase.map(|p| p.to_string()).as_deref(), Some("CrashLoopBackOff"));
    assert!(denied.spec.provider_id.is_none());
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_vms_of_deleted_mcmmachines_are_collected_live_ones_kept() {
    let env = Env::start().await;
    env.cluster("c1", true).await;
    // Only inline classes at first: no MachineClass exists, so the MCM safety controller lists nothing and the
    // infrastructure controllers' collection is the one at work.
    let inline = env.provision("inline", inline_class(json!({}))).await;
    let orphan = vm_behind_the_back(&env, "deleted-long-ago").await;
    wait_until("the orphan VM to be deleted", WAIT, || async { (!env.live(&orphan)).then_some(()) }).await;

    // Then an MCMMachine of a referenced MachineClass: the MCM safety controller lists that class too, and must
    // count the MCMMachine's VM as claimed.
    env.create(
        "class.json",
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": "small"},
            "provider": "InMemory",
            "providerSpec": {"bootSeconds": 0.2, "tags": {"kubernetes.io/cluster/test": "1", "kubernetes.io/role/node": "1"}},
        }),
    )
    .await;
    let referenced = env.provision("referenced", json!({"class": {"kind": "MachineClass", "name": "small"}})).await;
    let lists = env.dev.cloud.stats().lists;
    wait_until("more collections", WAIT, || async { (env.dev.cloud.stats().lists >= lists + 10).then_some(()) }).await;
    for m in [&inline, &referenced] {
        let id = m.spec.provider_id.clone().unwrap();
        assert!(env.live(&id), "{} keeps its VM", m.name_any());
    }
    env.shutdown().await;
}
