//! Custom resources: CRDs served at once, schemas enforced, status and scale subresources, generation, multiple
//! versions, deletion of a CRD, and a kube-runtime Controller reconciling a custom resource end to end.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use mcm::api::mcm::{MachineSet, MachineSetStatus};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support::{install_crds, start, wait_until};

fn machine_set(name: &str, replicas: i32) -> MachineSet {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"class": {"kind": "MachineClass", "name": "c"}}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn crds_are_established_and_served_at_once() {
    let (_server, client) = start().await;
    install_crds(&client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get("machinesets.machine.sapcloud.io").await.unwrap();
    let conditions = crd.status.unwrap().conditions.unwrap();
    assert!(conditions.iter().any(|c| c.type_ == "Established" && c.status == "True"));
    assert!(conditions.iter().any(|c| c.type_ == "NamesAccepted" && c.status == "True"));
    let sets: Api<MachineSet> = Api::namespaced(client, "default");
    assert!(sets.list(&Default::default()).await.unwrap().items.is_empty());
}

/// As kube-apiserver defaults them: a CRD written without `listKind` and `singular` has both in its spec (clusterctl
/// lists a provider's objects by `spec.names.listKind`).
#[tokio::test]
async fn a_crds_list_kind_and_singular_are_defaulted() {
    let (_server, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let crd = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"kind": "Widget", "plural": "widgets"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let names = crds.get("widgets.example.com").await.unwrap().spec.names;
    assert_eq!(names.list_kind.as_deref(), Some("WidgetList"));
    assert_eq!(names.singular.as_deref(), Some("widget"));
}

#[tokio::test]
async fn status_and_spec_are_written_separately_and_generation_counts_spec() {
    let (_server, client) = start().await;
    install_crds(&client).await;
    let sets: Api<MachineSet> = Api::namespaced(client, "default");
    let mut body = machine_set("s", 2);
    body.status = Some(MachineSetStatus { replicas: 9, ..Default::default() });
    let created = sets.create(&PostParams::default(), &body).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none(), "status is dropped on create");

    let status = sets
        .patch_status(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 2}, "spec": {"replicas": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().replicas, 2);
    assert_eq!(status.spec.replicas, 2, "the status endpoint ignores spec");
    assert_eq!(status.metadata.generation, Some(1), "status writes do not bump generation");

    let spec = sets
        .patch("s", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"replicas": 0}})))
        .await
        .unwrap();
    assert_eq!(spec.spec.replicas, 3);
    assert_eq!(spec.status.unwrap().replicas, 2, "the main endpoint ignores status");
    assert_eq!(spec.metadata.generation, Some(2));

    let labelled = sets
        .patch("s", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})))
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(2), "metadata changes do not bump generation");
}

#[tokio::test]
async fn the_scale_subresource_reads_and_writes_replicas() {
    let (_server, client) = start().await;
    install_crds(&client).await;
    let sets: Api<MachineSet> = Api::namespaced(client, "default");
    sets.create(&PostParams::default(), &machine_set("s", 2)).await.unwrap();
    let scale = sets.get_scale("s").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(2));
    let scaled =
        sets.patch_scale("s", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await.unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(5));
    assert_eq!(sets.get("s").await.unwrap().spec.replicas, 5);
}

#[tokio::test]
async fn custom_resources_are_served_in_every_version() {
    let (_server, client) = start().await;
    install_crds(&client).await;
    let v1beta2 =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"), "clusters");
    let v1beta1 =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"), "clusters");
    let new: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &v1beta2);
    let old: Api<DynamicObject> = Api::namespaced_with(client, "default", &v1beta1);
    let cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "demo"},
        "spec": {"paused": true}
    }))
    .unwrap();
    new.create(&PostParams::default(), &cluster).await.unwrap();
    let read = old.get("demo").await.unwrap();
    assert_eq!(read.types.unwrap().api_version, "cluster.x-k8s.io/v1beta1");
    assert_eq!(read.data["spec"]["paused"], true);
}

#[tokio::test]
async fn deleting_a_crd_removes_its_objects_and_stops_serving_it() {
    let (_server, client) = start().await;
    install_crds(&client).await;
    let sets: Api<MachineSet> = Api::namespaced(client.clone(), "default");
    sets.create(&PostParams::default(), &machine_set("s", 1)).await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("machinesets.machine.sapcloud.io", &DeleteParams::default()).await.unwrap();
    wait_until("the CRD is gone", Duration::from_secs(5), || async {
        crds.get_opt("machinesets.machine.sapcloud.io").await.unwrap().is_none().then_some(())
    })
    .await;
    let err = sets.list(&Default::default()).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 404), "{err}");
}

/// A tiny custom resource for the controller test.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "test.mcm.dev", version = "v1", kind = "Echo", namespaced, status = "EchoStatus")]
struct EchoSpec {
    message: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct EchoStatus {
    echoed: String,
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ReconcileError(#[from] kube::Error);

#[tokio::test]
async fn a_controller_reconciles_a_custom_resource_end_to_end() {
    let (_server, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Echo::crd()).await.unwrap();
    let echoes: Api<Echo> = Api::namespaced(client.clone(), "default");

    let reconcile = |echo: Arc<Echo>, api: Arc<Api<Echo>>| async move {
        let status = json!({"status": {"echoed": echo.spec.message}});
        api.patch_status(&echo.name_any(), &PatchParams::default(), &Patch::Merge(status)).await?;
        Ok::<_, ReconcileError>(Action::await_change())
    };
    let controller = Controller::new(echoes.clone(), watcher::Config::default())
        .run(reconcile, |_, _, _| Action::requeue(Duration::from_secs(1)), Arc::new(echoes.clone()))
        .for_each(|_| async {});
    let task = tokio::spawn(controller);

    echoes.create(&PostParams::default(), &Echo::new("hello", EchoSpec { message: "hi".into() })).await.unwrap();
    wait_until("the first echo", Duration::from_secs(10), || async {
        let e = echoes.get("hello").await.unwrap();
        (e.status.map(|s| s.echoed).as_deref() == Some("hi")).then_some(())
    })
    .await;
    echoes.patch("hello", &PatchParams::default(), &Patch::Merge(json!({"spec": {"message": "again"}}))).await.unwrap();
    wait_until("the changed echo", Duration::from_secs(10), || async {
        let e = echoes.get("hello").await.unwrap();
        (e.status.map(|s| s.echoed).as_deref() == Some("again")).then_some(())
    })
    .await;
    task.abort();
}
