//! The few API calls `apply` and `rollback` make, each idempotent: create unless present, merge-patch, release
//! every finalizer and delete (orphaning dependents), and the reads of a namespace's objects.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::MigrateError;
use super::plan::{Inventory, Target};
use super::reverse::CapiInventory;
use crate::api::{capi, infra, mcm};

/// The field manager of every write.
const MANAGER: &str = "mcm-migrate";

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// A namespaced API.
pub fn api<K>(client: &Client, namespace: &str) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    Api::namespaced(client.clone(), namespace)
}

fn describe<K: Resource<DynamicType = ()>>(name: &str) -> String {
    format!("{} {name}", K::kind(&()))
}

/// The object `name`, if it exists.
pub async fn get<K>(api: &Api<K>, name: &str) -> Result<Option<K>, MigrateError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    api.get_opt(name).await.map_err(|e| MigrateError::kube("read", describe::<K>(name), e))
}

/// Every object of the namespace.
pub async fn list<K>(api: &Api<K>) -> Result<Vec<K>, MigrateError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| MigrateError::kube("list", format!("{}s", K::kind(&())), e))
}

/// Creates `object` unless an object of its name exists; returns the object as stored and whether it was created.
pub async fn create_if_absent<K>(api: &Api<K>, object: &K) -> Result<(K, bool), MigrateError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    if let Some(existing) = get(api, &name).await? {
        return Ok((existing, false));
    }
    let params = PostParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    match api.create(&params, object).await {
        Ok(created) => Ok((created, true)),
        Err(e) if is_status(&e, 409) => match get(api, &name).await? {
            Some(existing) => Ok((existing, false)),
            None => Err(MigrateError::kube("create", describe::<K>(&name), e)),
        },
        Err(e) => Err(MigrateError::kube("create", describe::<K>(&name), e)),
    }
}

/// A JSON merge patch of object `name`.
pub async fn merge<K>(api: &Api<K>, name: &str, patch: &Value) -> Result<K, MigrateError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let params = PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    api.patch(name, &params, &Patch::Merge(patch))
        .await
        .map_err(|e| MigrateError::kube("patch", describe::<K>(name), e))
}

/// Merges `patch` into object `name` unless it is gone or going (`false` then). A deleted object may linger while
/// a garbage collector works through its `orphan` finalizer, and vanish between a read and a write.
pub async fn merge_if_present<K>(api: &Api<K>, name: &str, patch: &Value) -> Result<bool, MigrateError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    match get(api, name).await? {
        Some(object) if object.meta().deletion_timestamp.is_none() => {}
        _ => return Ok(false),
    }
    let params = PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    match api.patch(name, &params, &Patch::Merge(patch)).await {
        Ok(_) => Ok(true),
        Err(e) if is_status(&e, 404) => Ok(false),
        Err(e) => Err(MigrateError::kube("patch", describe::<K>(name), e)),
    }
}

/// Sets annotation `key` (to `value`, or removes it with `None`) on object `name`.
pub async fn annotate<K>(api: &Api<K>, name: &str, key: &str, value: Option<&str>) -> Result<K, MigrateError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    merge(api, name, &json!({"metadata": {"annotations": {key: value}}})).await
}

/// The finalizer the API server sets on an object deleted with `propagationPolicy: Orphan`; the garbage collector
/// removes the object's dependents' references to it, then the finalizer.
const ORPHAN_FINALIZER: &str = "orphan";

/// Releases every finalizer of object `name` and deletes it, orphaning its dependents, so no controller runs a
/// deletion flow (no VM, no Node goes with it). An object already gone counts as deleted.
pub async fn release_and_delete<K>(api: &Api<K>, name: &str) -> Result<bool, MigrateError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let Some(object) = get(api, name).await? else {
        return Ok(false);
    };
    // The garbage collector's `orphan` finalizer is what keeps the dependents: removing it would let a real
    // cluster's collector delete them (and their VMs) after all. Every other finalizer (MCM's) is released.
    let finalizers = object.meta().finalizers.clone().unwrap_or_default();
    let kept: Vec<&String> = finalizers.iter().filter(|f| f.as_str() == ORPHAN_FINALIZER).collect();
    if kept.len() != finalizers.len() {
        let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": object.meta().resource_version}});
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => return Ok(false),
            Err(e) => return Err(MigrateError::kube("release the finalizers of", describe::<K>(name), e)),
        }
    }
    if object.meta().deletion_timestamp.is_some() && !kept.is_empty() {
        // Deleted with orphaning already (a resumed run): the collector finishes it.
        return Ok(true);
    }
    let params = DeleteParams { propagation_policy: Some(PropagationPolicy::Orphan), ..Default::default() };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(e) if is_status(&e, 404) => Ok(false),
        Err(e) => Err(MigrateError::kube("delete", describe::<K>(name), e)),
    }
}

/// The MCM and CAPI objects the plan reads, and the providerIDs and labels of the Nodes.
pub async fn inventory(client: &Client, target: &Target) -> Result<Inventory, MigrateError> {
    let ns = &target.namespace;
    let nodes = list(&Api::<Node>::all(client.clone())).await?;
    Ok(Inventory {
        deployments: list(&api::<mcm::MachineDeployment>(client, ns)).await?,
        sets: list(&api::<mcm::MachineSet>(client, ns)).await?,
        machines: list(&api::<mcm::Machine>(client, ns)).await?,
        classes: list(&api::<mcm::MachineClass>(client, ns)).await?,
        cluster: get(&api::<capi::Cluster>(client, ns), &target.cluster_name).await?,
        mcm_cluster: get(&api::<infra::MCMCluster>(client, ns), &target.cluster_name).await?,
        capi_deployments: list(&api::<capi::MachineDeployment>(client, ns)).await?,
        node_labels: nodes
            .iter()
            .filter_map(|n| Some((n.metadata.name.clone()?, n.metadata.labels.clone().filter(|l| !l.is_empty())?)))
            .collect(),
        node_provider_ids: nodes
            .into_iter()
            .filter_map(|n| Some((n.metadata.name?, n.spec?.provider_id.filter(|p| !p.is_empty())?)))
            .collect(),
    })
}

/// The CAPI objects a rollback reads.
pub async fn capi_inventory(client: &Client, namespace: &str) -> Result<CapiInventory, MigrateError> {
    Ok(CapiInventory {
        sets: list(&api::<capi::MachineSet>(client, namespace)).await?,
        machines: list(&api::<capi::Machine>(client, namespace)).await?,
        infra: list(&api::<infra::MCMMachine>(client, namespace)).await?,
        templates: list(&api::<infra::MCMMachineTemplate>(client, namespace)).await?,
    })
}
