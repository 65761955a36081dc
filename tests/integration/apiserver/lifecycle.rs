//! Finalizers (through kube-runtime's helper), garbage collection policies, namespace deletion.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use kube::core::ObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};
use serde_json::json;

use crate::support::{start, wait_until};

fn owned(name: &str, owner: &ConfigMap, block: bool) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid,
            "blockOwnerDeletion": block
        }]},
        "data": {"k": "v"}
    }))
    .unwrap()
}

fn plain(name: &str) -> ConfigMap {
    ConfigMap { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() }
}

async fn exists(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.unwrap().is_some()
}

#[tokio::test]
async fn the_finalizer_helper_adds_and_removes_its_finalizer() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &plain("f")).await.unwrap();
    let reconcile = |api: Api<ConfigMap>| async move {
        let obj = Arc::new(api.get("f").await.unwrap());
        finalizer(&api, "example.com/cleanup", obj, |event| async move {
            match event {
                Event::Apply(_) => Ok::<_, std::convert::Infallible>(Action::await_change()),
                Event::Cleanup(_) => Ok(Action::await_change()),
            }
        })
        .await
    };
    reconcile(api.clone()).await.unwrap();
    // The first call adds the finalizer; the second applies.
    reconcile(api.clone()).await.unwrap();
    assert_eq!(api.get("f").await.unwrap().metadata.finalizers.unwrap(), ["example.com/cleanup"]);
    api.delete("f", &DeleteParams::default()).await.unwrap();
    let held = api.get("f").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some(), "the finalizer holds the object");
    reconcile(api.clone()).await.unwrap();
    assert!(!exists(&api, "f").await, "cleanup removed the finalizer and the object");
}

#[tokio::test]
async fn background_foreground_and_orphan_deletion() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");

    // Background: the owner goes at once, its dependents right after.
    let owner = api.create(&PostParams::default(), &plain("bg")).await.unwrap();
    api.create(&PostParams::default(), &owned("bg-child", &owner, false)).await.unwrap();
    api.delete("bg", &DeleteParams::background()).await.unwrap();
    wait_until("background dependents gone", Duration::from_secs(5), || async {
        (!exists(&api, "bg-child").await).then_some(())
    })
    .await;

    // Orphan: the dependent stays, without its owner reference.
    let owner = api.create(&PostParams::default(), &plain("or")).await.unwrap();
    api.create(&PostParams::default(), &owned("or-child", &owner, true)).await.unwrap();
    api.delete("or", &DeleteParams::orphan()).await.unwrap();
    wait_until("orphaned owner gone", Duration::from_secs(5), || async { (!exists(&api, "or").await).then_some(()) })
        .await;
    assert!(api.get("or-child").await.unwrap().metadata.owner_references.is_none_or(|r| r.is_empty()));

    // Foreground: the owner waits (foregroundDeletion finalizer) for a blocking dependent held by a finalizer.
    let owner = api.create(&PostParams::default(), &plain("fg")).await.unwrap();
    let mut child = owned("fg-child", &owner, true);
    child.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &child).await.unwrap();
    api.delete("fg", &DeleteParams { propagation_policy: Some(PropagationPolicy::Foreground), ..Default::default() })
        .await
        .unwrap();
    let waiting = api.get("fg").await.unwrap();
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert_eq!(waiting.metadata.finalizers.unwrap(), ["foregroundDeletion"]);
    assert!(api.get("fg-child").await.unwrap().metadata.deletion_timestamp.is_some());
    api.patch(
        "fg-child",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_until("foreground owner gone after its dependent", Duration::from_secs(5), || async {
        (!exists(&api, "fg").await && !exists(&api, "fg-child").await).then_some(())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_content() {
    let (_server, client) = start().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns =
        Namespace { metadata: ObjectMeta { name: Some("doomed".into()), ..Default::default() }, ..Default::default() };
    let created = namespaces.create(&PostParams::default(), &ns).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    api.create(&PostParams::default(), &plain("a")).await.unwrap();
    let mut held = plain("held");
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    namespaces.delete("doomed", &DeleteParams::default()).await.unwrap();
    let terminating = namespaces.get("doomed").await.unwrap();
    assert_eq!(terminating.status.unwrap().phase.as_deref(), Some("Terminating"));
    assert!(!exists(&api, "a").await);
    let err = api.create(&PostParams::default(), &plain("late")).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains("being terminated")), "{err}");
    api.patch(
        "held",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": []}})),
    )
    .await
    .unwrap();
    wait_until("namespace gone", Duration::from_secs(5), || async {
        namespaces.get_opt("doomed").await.unwrap().is_none().then_some(())
    })
    .await;
}
