//! The writes controllers make, each the smallest patch of the fields they own: merge patches for status and
//! labels, JSON patches with a `test` for finalizers (a concurrent change fails instead of being overwritten, as in
//! kube-runtime's finalizer helper).

use std::fmt::Debug;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, ReplaceOperation, TestOperation};
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::context::{Context, key_of};
use super::error::{Error, is_not_found};
use super::superseded;
use crate::api::mcm::Machine;
use crate::lifecycle::status::{self, StatusPatch};

/// The field manager of every write.
pub(crate) const MANAGER: &str = "mcm-machine-controller";

/// Patch parameters with our field manager.
pub(crate) fn patch_params() -> PatchParams {
    PatchParams { field_manager: Some(MANAGER.to_string()), ..Default::default() }
}

fn describe<K: Resource<DynamicType = ()>>(object: &K) -> String {
    let kind = K::kind(&());
    match object.meta().namespace.as_deref() {
        Some(ns) => format!("{kind} {ns}/{}", object.name_any()),
        None => format!("{kind} {}", object.name_any()),
    }
}

/// Writes `patch` to the Machine's status subresource (nothing when it is empty).
pub(crate) async fn status(api: &Api<Machine>, machine: &Machine, patch: &StatusPatch) -> Result<(), Error> {
    if patch.is_empty() {
        return Ok(());
    }
    let written = api
        .patch_status(&machine.name_any(), &patch_params(), &Patch::Merge(patch.to_merge_patch()))
        .await
        .map_err(|e| Error::kube("patch status of", describe(machine), e))?;
    superseded::note(machine, written.resource_version().as_deref());
    Ok(())
}

/// Writes the part of `patch` that changes `machine`'s status, with an event for a phase change.
pub(crate) async fn machine_status(
    ctx: &Context,
    api: &Api<Machine>,
    machine: &Machine,
    patch: StatusPatch,
) -> Result<(), Error> {
    let patch = patch.minimize(machine.status.as_ref());
    if patch.is_empty() {
        return Ok(());
    }
    self::status(api, machine, &patch).await?;
    if let Some(event) = status::phase_event(status::phase(machine), &patch) {
        tracing::info!(machine = %key_of(machine), phase = %event.reason, "{}", event.note);
        ctx.publish(machine, event).await;
    }
    Ok(())
}

/// A merge patch of the object's main resource.
pub(crate) async fn merge<K>(api: &Api<K>, object: &K, patch: &Value, action: &'static str) -> Result<K, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    tracing::debug!(object = %describe(object), "{action}");
    let written = api
        .patch(&object.name_any(), &patch_params(), &Patch::Merge(patch))
        .await
        .map_err(|e| Error::kube(action, describe(object), e))?;
    superseded::note(object, written.resource_version().as_deref());
    Ok(written)
}

/// A strategic merge patch of the object's main resource (built-in kinds only).
pub(crate) async fn strategic<K>(api: &Api<K>, object: &K, patch: &Value, action: &'static str) -> Result<K, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    tracing::debug!(object = %describe(object), "{action}");
    let written = api
        .patch(&object.name_any(), &patch_params(), &Patch::Strategic(patch))
        .await
        .map_err(|e| Error::kube(action, describe(object), e))?;
    superseded::note(object, written.resource_version().as_deref());
    Ok(written)
}

/// A merge patch of the object's status subresource.
pub(crate) async fn merge_status<K>(api: &Api<K>, object: &K, patch: &Value, action: &'static str) -> Result<K, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    tracing::debug!(object = %describe(object), "{action}");
    let written = api
        .patch_status(&object.name_any(), &patch_params(), &Patch::Merge(patch))
        .await
        .map_err(|e| Error::kube(action, describe(object), e))?;
    superseded::note(object, written.resource_version().as_deref());
    Ok(written)
}

/// Adds `finalizer` (no-op when present).
pub(crate) async fn add_finalizer<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let current = object.finalizers();
    if current.iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let list = PointerBuf::from_tokens(["metadata", "finalizers"]);
    let ops = if current.is_empty() {
        // An emptied list may be stored as `[]` rather than dropped (our embedded server keeps it): test for
        // exactly what the object has, or the test fails forever.
        let absent = if object.meta().finalizers.is_some() { json!([]) } else { Value::Null };
        vec![
            PatchOperation::Test(TestOperation { path: list.clone(), value: absent }),
            PatchOperation::Add(AddOperation { path: list, value: json!([finalizer]) }),
        ]
    } else {
        vec![
            PatchOperation::Test(TestOperation { path: list, value: json!(current) }),
            PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens(["metadata", "finalizers", "-"]),
                value: json!(finalizer),
            }),
        ]
    };
    json_patch(api, object, ops, "add a finalizer to").await
}

/// Removes `finalizer` (no-op when absent).
pub(crate) async fn remove_finalizer<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let current = object.finalizers();
    if !current.iter().any(|f| f == finalizer) {
        return Ok(());
    }
    // Every copy goes (an object may carry one twice); the test makes a concurrent change fail and retry.
    let kept: Vec<&String> = current.iter().filter(|f| *f != finalizer).collect();
    let path = PointerBuf::from_tokens(["metadata", "finalizers"]);
    let ops = vec![
        PatchOperation::Test(TestOperation { path: path.clone(), value: json!(current) }),
        PatchOperation::Replace(ReplaceOperation { path, value: json!(kept) }),
    ];
    json_patch(api, object, ops, "remove a finalizer from").await
}

async fn json_patch<K>(api: &Api<K>, object: &K, ops: Vec<PatchOperation>, action: &'static str) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    match api.patch(&object.name_any(), &patch_params(), &Patch::Json::<()>(json_patch::Patch(ops))).await {
        Ok(written) => {
            // An object whose last finalizer went may come back already gone.
            let gone = written.meta().deletion_timestamp.is_some() && written.finalizers().is_empty();
            superseded::note(object, written.resource_version().as_deref().filter(|_| !gone));
            Ok(())
        }
        // Deleted meanwhile: nothing left to hold or release.
        Err(e) if super::error::is_not_found(&e) => {
            superseded::note(object, None);
            Ok(())
        }
        Err(e) => Err(Error::kube(action, describe(object), e)),
    }
}

/// `patch` with `metadata.resourceVersion` set: a precondition on the write.
pub(crate) fn guarded(mut patch: Value, resource_version: Option<String>) -> Value {
    if let Some(map) = patch.as_object_mut() {
        let meta = map.entry("metadata").or_insert_with(|| serde_json::json!({}));
        meta["resourceVersion"] = serde_json::json!(resource_version);
    }
    patch
}

/// A condition on a Node's status, merged by type (the other conditions stay); a Node gone is no error.
pub async fn node_condition(target: &kube::Client, node: &str, condition: NodeCondition) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(target.clone());
    let object = format!("Node {node} ({})", condition.type_);
    let patch = json!({"status": {"conditions": [condition]}});
    match nodes.patch_status(node, &patch_params(), &Patch::Strategic(patch)).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::kube("set the condition of", object, e)),
    }
}
