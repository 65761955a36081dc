//! The Cluster controller on CAPI objects, as far as workers need it (`lifecycle::capi_cluster`): it owns the
//! MCMCluster named by `spec.infrastructureRef` and mirrors its `provisioned`, failure domains, `Ready` and control
//! plane endpoint onto the Cluster, so MCMMachines pass their Cluster gate. No finalizer: the MCMCluster goes with
//! the Cluster by garbage collection, and no control plane is managed.

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::CapiContext;
use crate::api::capi::Cluster;
use crate::api::infra::MCMCluster;
use crate::controllers::context::key_of;
use crate::controllers::error::Error;
use crate::controllers::writes;
use crate::controllers::writes::patch_params as params;
use crate::lifecycle::capi_cluster::{ClusterObservation, infra_name, paused, plan_cluster, replica_counters};
use crate::lifecycle::status_patch;

/// Reconciles a CAPI Cluster.
pub(super) async fn reconcile(c: Arc<Cluster>, ctx: Arc<CapiContext>) -> Result<Action, Error> {
    ctx.ready().await;
    if super::left_to_upstream_core(&ctx, &*c, None, None).await? {
        return Ok(Action::await_change());
    }
    let namespace = c.namespace().unwrap_or_default();
    let infra = infra_name(&c).and_then(|name| ctx.infra_clusters.get(&ObjectRef::new(name).within(&namespace)));
    let mut plan = plan_cluster(&ClusterObservation { cluster: &c, infra: infra.as_deref(), now: Timestamp::now() });
    if !paused(&c) {
        let name = c.name_any();
        let of_cluster =
            |ns: Option<String>, cluster: &str| ns.as_deref() == Some(namespace.as_str()) && cluster == name;
        let deployments = ctx.deployments.state();
        let deployments: Vec<_> =
            deployments.iter().filter(|d| of_cluster(d.namespace(), &d.spec.cluster_name)).map(|d| &**d).collect();
        let sets = ctx.sets.state();
        let sets: Vec<_> =
            sets.iter().filter(|s| of_cluster(s.namespace(), &s.spec.cluster_name)).map(|s| &**s).collect();
        let machines = ctx.machines.state();
        let machines: Vec<_> =
            machines.iter().filter(|m| of_cluster(m.namespace(), &m.spec.cluster_name)).map(|m| &**m).collect();
        plan.status.extra.extend(
            replica_counters(&c, &deployments, &sets, &machines)
                .into_iter()
                .map(|(key, value)| (key.to_string(), value)),
        );
    }
    let api: Api<Cluster> = Api::namespaced(ctx.control.clone(), &namespace);
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

/// After an API error: back off per Cluster.
pub(super) fn error_policy(c: Arc<Cluster>, error: &Error, ctx: Arc<CapiContext>) -> Action {
    let key = key_of(&*c);
    crate::controllers::error::log_reconcile_failure!(error, cluster = %key);
    Action::requeue(ctx.retries.fail(&format!("capi-cluster:{key}"), error.retry_class(), &ctx.config, None))
}
