//! The Cluster controller on CAPI objects, as far as workers need it (`lifecycle::capi_cluster`): it owns the
//! MCMCluster named by `spec.infrastructureRef` and mirrors its `provisioned`, failure domains, `Ready` and control
//! plane endpoint onto the Cluster, so MCMMachines pass their Cluster gate. Its finalizer holds a deleted Cluster
//! until its workers and its MCMCluster are gone (`lifecycle::capi_cluster::deletion`). No control plane is managed.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::{DeleteParams, Patch};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::CapiContext;
use crate::api::capi::{Cluster, Machine, MachineDeployment, MachineSet};
use crate::api::infra::MCMCluster;
use crate::controllers::context::key_of;
use crate::controllers::error::{Error, is_not_found};
use crate::controllers::writes;
use crate::controllers::writes::patch_params as params;
use crate::lifecycle::capi_cluster::deletion::{
    CLUSTER_FINALIZER, Child, ClusterDeletionStep, Descendants, deleting_condition, deletion_step,
};
use crate::lifecycle::capi_cluster::{ClusterObservation, infra_name, paused, phase, plan_cluster, replica_counters};
use crate::lifecycle::capi_machine::{condition, merge_conditions};
use crate::lifecycle::status_patch;

/// The `Deleting` condition's type.
const DELETING: &str = "Deleting";

/// Reconciles a CAPI Cluster.
pub(super) async fn reconcile(c: Arc<Cluster>, ctx: Arc<CapiContext>) -> Result<Action, Error> {
    ctx.ready().await;
    if super::left_to_upstream_core(&ctx, &*c, None, Some(CLUSTER_FINALIZER)).await? {
        return Ok(Action::await_change());
    }
    let namespace = c.namespace().unwrap_or_default();
    let api: Api<Cluster> = Api::namespaced(ctx.control.clone(), &namespace);
    let has_finalizer = c.finalizers().iter().any(|f| f == CLUSTER_FINALIZER);
    // A paused Cluster is left as it is, its deletion included (`clusterctl move` pauses, then deletes).
    if !paused(&c) {
        match (c.metadata.deletion_timestamp.is_some(), has_finalizer) {
            (true, true) => return delete(&c, &ctx, &api).await,
            (true, false) => return Ok(Action::await_change()),
            (false, false) => writes::add_finalizer(&api, &*c, CLUSTER_FINALIZER).await?,
            (false, true) => {}
        }
    }
    let infra = infra_name(&c).and_then(|name| ctx.infra_clusters.get(&ObjectRef::new(name).within(&namespace)));
    let mut plan = plan_cluster(&ClusterObservation { cluster: &c, infra: infra.as_deref(), now: Timestamp::now() });
    if !paused(&c) {
        let (deployments, sets, machines) = objects_of(&ctx, &c);
        let (deployments, sets, machines) = (refs(&deployments), refs(&sets), refs(&machines));
        plan.status.extra.extend(
            replica_counters(&c, &deployments, &sets, &machines)
                .into_iter()
                .map(|(key, value)| (key.to_string(), value)),
        );
    }
    if let Some(infra) = &infra
        && (plan.own_infra.is_some() || plan.label_infra.is_some())
    {
        let infra_api: Api<MCMCluster> = Api::namespaced(ctx.control.clone(), &namespace);
        let mut metadata = serde_json::Map::new();
        if let Some(owner) = &plan.own_infra {
            let mut owners = infra.owner_references().to_vec();
            owners.push(owner.clone());
            metadata.insert("ownerReferences".into(), json!(owners));
            // The resourceVersion makes a concurrent change fail (and retry) instead of losing an owner.
            metadata.insert("resourceVersion".into(), json!(infra.resource_version()));
        }
        if let Some(name) = &plan.label_infra {
            metadata.insert("labels".into(), json!({ crate::api::capi::CLUSTER_NAME_LABEL: name }));
        }
        writes::merge(&infra_api, &**infra, &json!({ "metadata": metadata }), "own and label").await?;
        tracing::info!(cluster = %key_of(&*c), "owns and labels its MCMCluster");
    }
    if let Some(endpoint) = &plan.control_plane_endpoint {
        writes::merge(&api, &*c, &json!({"spec": {"controlPlaneEndpoint": endpoint}}), "set the endpoint of").await?;
    }
    let old = c.status.clone().unwrap_or_default();
    if let Some(patch) = status_patch(&old, &plan.status) {
        api.patch_status(&c.name_any(), &params(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::kube("patch status of", format!("Cluster {}", key_of(&*c)), e))?;
        if plan.status.phase != old.phase {
            tracing::info!(cluster = %key_of(&*c), phase = ?plan.status.phase, "phase");
        }
    }
    Ok(Action::requeue(ctx.config.resync))
}

/// The Cluster's MachineDeployments, MachineSets and Machines (same namespace, `spec.clusterName` its name), from
/// the stores.
#[allow(clippy::type_complexity)] // three lists of one kind each, read together
fn objects_of(
    ctx: &CapiContext,
    c: &Cluster,
) -> (Vec<Arc<MachineDeployment>>, Vec<Arc<MachineSet>>, Vec<Arc<Machine>>) {
    let namespace = c.namespace();
    let name = c.name_any();
    let ours = |ns: Option<String>, cluster: &str| ns == namespace && cluster == name;
    (
        ctx.deployments.state().into_iter().filter(|d| ours(d.namespace(), &d.spec.cluster_name)).collect(),
        ctx.sets.state().into_iter().filter(|s| ours(s.namespace(), &s.spec.cluster_name)).collect(),
        ctx.machines.state().into_iter().filter(|m| ours(m.namespace(), &m.spec.cluster_name)).collect(),
    )
}

fn refs<T>(list: &[Arc<T>]) -> Vec<&T> {
    list.iter().map(|o| &**o).collect()
}

/// One step of a deleted Cluster (`lifecycle::capi_cluster::deletion`): its workers, then its MCMCluster, then the
/// finalizer; the `Deleting` condition says what it waits for.
async fn delete(c: &Cluster, ctx: &CapiContext, api: &Api<Cluster>) -> Result<Action, Error> {
    let namespace = c.namespace().unwrap_or_default();
    let (deployments, sets, machines) = objects_of(ctx, c);
    let (deployments, sets, machines) = (refs(&deployments), refs(&sets), refs(&machines));
    let infra_ref = infra_name(c);
    let infra = infra_ref.and_then(|n| ctx.infra_clusters.get(&ObjectRef::new(n).within(&namespace)));
    let step = deletion_step(
        &Descendants { deployments: &deployments, sets: &sets, machines: &machines },
        infra_ref,
        infra.as_deref(),
    );
    let gone = |r: Result<(), Error>| match r {
        Err(Error::Kube { source, .. }) if is_not_found(&source) => Ok(()),
        other => other,
    };
    match &step {
        ClusterDeletionStep::Workers { delete, .. } => {
            for child in delete {
                let params = DeleteParams::default();
                let (kind, child_name, result) = match child {
                    Child::Deployment(n) => {
                        let a: Api<MachineDeployment> = Api::namespaced(ctx.control.clone(), &namespace);
                        ("MachineDeployment", n, a.delete(n, &params).await.map(|_| ()))
                    }
                    Child::Set(n) => {
                        let a: Api<MachineSet> = Api::namespaced(ctx.control.clone(), &namespace);
                        ("MachineSet", n, a.delete(n, &params).await.map(|_| ()))
                    }
                    Child::Machine(n) => {
                        let a: Api<Machine> = Api::namespaced(ctx.control.clone(), &namespace);
                        ("Machine", n, a.delete(n, &params).await.map(|_| ()))
                    }
                };
                gone(result.map_err(|e| Error::kube("delete", format!("{kind} {namespace}/{child_name}"), e)))?;
                tracing::info!(cluster = %key_of(c), kind, name = %child_name, "deleting a child of the deleted Cluster");
            }
        }
        ClusterDeletionStep::DeleteInfrastructure(n) => {
            let a: Api<MCMCluster> = Api::namespaced(ctx.control.clone(), &namespace);
            let result = a.delete(n, &DeleteParams::default()).await.map(|_| ());
            gone(result.map_err(|e| Error::kube("delete", format!("MCMCluster {namespace}/{n}"), e)))?;
            tracing::info!(cluster = %key_of(c), mcm_cluster = %n, "deleting the MCMCluster of the deleted Cluster");
        }
        ClusterDeletionStep::WaitForInfrastructure | ClusterDeletionStep::RemoveFinalizer => {}
    }
    let (reason, message) = deleting_condition(&step);
    let old = c.status.clone().unwrap_or_default();
    let mut new = old.clone();
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let deleting = condition(&conditions, DELETING, true, reason, &message, Timestamp::now());
    merge_conditions(&mut conditions, vec![deleting]);
    new.conditions = Some(conditions);
    new.phase = Some(phase::DELETING.to_string());
    if let Some(patch) = status_patch(&old, &new) {
        api.patch_status(&c.name_any(), &params(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::kube("patch status of", format!("Cluster {}", key_of(c)), e))?;
    }
    if step == ClusterDeletionStep::RemoveFinalizer {
        writes::remove_finalizer(api, c, CLUSTER_FINALIZER).await?;
        tracing::info!(cluster = %key_of(c), "deleted");
        return Ok(Action::await_change());
    }
    // Its children's deletions are not watched from here: look again.
    Ok(Action::requeue(Duration::from_secs(2)))
}

/// After an API error: back off per Cluster.
pub(super) fn error_policy(c: Arc<Cluster>, error: &Error, ctx: Arc<CapiContext>) -> Action {
    let key = key_of(&*c);
    crate::controllers::error::log_reconcile_failure!(error, cluster = %key);
    Action::requeue(ctx.retries.fail(&format!("capi-cluster:{key}"), error.retry_class(), &ctx.config, None))
}
