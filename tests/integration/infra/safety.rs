//! Deletion edge cases and orphan VMs: a VM already gone, bad credentials, orphans of deleted MCMMachines, and no
//! collection for the classes of a paused Cluster (`clusterctl move`).

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
    vm_of_cluster(env, name, "test").await
}

/// A VM made through the driver directly, tagged for cluster `tag`; it never boots.
async fn vm_of_cluster(env: &Env, name: &str, tag: &str) -> String {
    let driver = InMemoryDriver::new(env.dev.cloud.clone());
    let request = MachineRequest {
        machine: MachineInfo { name: name.into(), namespace: NS.into(), ..Default::default() },
        class: inmemory::class("behind", tag, json!({"bootSeconds": 3600})),
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

/// What `clusterctl move` does to the source cluster: pause the Cluster, then delete its objects with their
/// finalizers removed. VMs whose MCMMachines are gone (or, on the target, not there yet) must stay while the
/// Cluster is paused; once it is unpaused, real orphans go again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_of_a_paused_clusters_classes_are_kept_until_it_is_unpaused() {
    let env = Env::start().await;
    env.cluster("c1", true).await;
    env.cluster("c2", true).await;
    // c1's machines use the inline class of tag `test`; c2's machine a class of tag `other`, listed on every
    // collection, so the cloud's list counter shows collections going on.
    let kept = env.provision_in("kept", "c1", inline_class(json!({}))).await;
    let moved = env.provision_in("moved", "c1", inline_class(json!({}))).await;
    let other_tags = json!({"tags": {"kubernetes.io/cluster/other": "1", "kubernetes.io/role/node": "1"}});
    let control = env.provision_in("control", "c2", inline_class(other_tags)).await;

    env.pause_cluster("c1", true).await;
    env.wait_condition("kept", "Paused", "True", reason::PAUSED).await;
    // clusterctl deletes the source objects of the paused Cluster, finalizers removed: the VM stays.
    let released = json!({"metadata": {"finalizers": null}});
    env.mcm_machines().patch("moved", &PatchParams::default(), &Patch::Merge(&released)).await.unwrap();
    env.mcm_machines().delete("moved", &DeleteParams::default()).await.unwrap();
    env.wait_gone("moved").await;
    let unclaimed = vm_of_cluster(&env, "never-had-a-machine", "test").await;

    // Collections go on (c2's orphan is collected, c2's class listed again and again); c1's class is left alone.
    let c2_orphan = vm_of_cluster(&env, "c2-orphan", "other").await;
    wait_until("c2's orphan VM to be deleted", WAIT, || async { (!env.live(&c2_orphan)).then_some(()) }).await;
    let lists = env.dev.cloud.stats().lists;
    wait_until("more collections", WAIT, || async { (env.dev.cloud.stats().lists >= lists + 10).then_some(()) }).await;
    let moved_id = moved.spec.provider_id.clone().unwrap();
    for (what, id) in [("the deleted MCMMachine's VM", &moved_id), ("the unclaimed VM", &unclaimed)] {
        assert!(env.live(id), "{what} is kept while Cluster c1 is paused");
    }

    // Unpaused: both are orphans now and go; the machines' own VMs stay.
    env.pause_cluster("c1", false).await;
    wait_until("c1's orphan VMs to be deleted", WAIT, || async {
        (!env.live(&moved_id) && !env.live(&unclaimed)).then_some(())
    })
    .await;
    for m in [&kept, &control] {
        assert!(env.live(m.spec.provider_id.as_deref().unwrap()), "{} keeps its VM", m.name_any());
    }
    env.shutdown().await;
}
