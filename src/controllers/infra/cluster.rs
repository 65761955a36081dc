//! The MCMCluster controller (`docs/infrastructure-provider.md`): MCM builds no networks or load balancers, so an MCMCluster
//! is provisioned as soon as it belongs to a Cluster; it publishes its spec's failure domains (list form) and
//! leaves `spec.controlPlaneEndpoint` as the user wrote it. Objects carrying `cluster.x-k8s.io/managed-by` are
//! someone else's and are never written.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};

use crate::api::capi;
use crate::api::infra::MCMCluster;
use crate::controllers::context::key_of;
use crate::controllers::error::Error;
use crate::lifecycle::infra::{self, condition, reason};

/// What the MCMCluster reconciles share.
pub(crate) struct ClusterContext {
    /// The management cluster.
    pub client: Client,
    /// `--watch-filter`.
    pub filter: Option<String>,
    /// CAPI Clusters.
    pub clusters: Store<capi::Cluster>,
    /// Store readiness.
    pub ready: Vec<tokio::sync::watch::Receiver<bool>>,
    /// The backstop resync.
    pub resync: Duration,
}

/// The owning Cluster's name: the controller ownerReference of kind Cluster (set by CAPI's Cluster controller).
fn owner_name(c: &MCMCluster) -> Option<String> {
    c.owner_references()
        .iter()
        .find(|r| r.kind == "Cluster" && r.api_version.starts_with(&format!("{}/", capi::GROUP)))
        .map(|r| r.name.clone())
}

/// Reconciles one MCMCluster.
pub(crate) async fn reconcile(obj: Arc<MCMCluster>, ctx: Arc<ClusterContext>) -> Result<Action, Error> {
    if !infra::passes_filter(ctx.filter.as_deref(), obj.metadata.labels.as_ref()) {
        return Ok(Action::await_change());
    }
    if obj.annotations().contains_key(capi::MANAGED_BY_ANNOTATION) {
        tracing::debug!(mcmcluster = %key_of(&*obj), "externally managed; not reconciled");
        return Ok(Action::await_change());
    }
    if obj.metadata.deletion_timestamp.is_some() {
        // Nothing to clean up: no finalizer is ours.
        return Ok(Action::await_change());
    }
    for ready in &ctx.ready {
        let _ = ready.clone().wait_for(|r| *r).await;
    }
    let now = Timestamp::now();
    let namespace = obj.namespace().unwrap_or_default();
    let owner = owner_name(&obj);
    let cluster_name = owner.clone().or_else(|| obj.labels().get(capi::CLUSTER_NAME_LABEL).cloned());
    let cluster = cluster_name.as_ref().and_then(|n| ctx.clusters.get(&ObjectRef::new(n).within(&namespace)));
    let paused = infra::paused(cluster.as_deref(), obj.metadata.annotations.as_ref());
    let current = obj.status.as_ref();
    let generation = obj.metadata.generation;
    let mut status = Map::new();
    let mut conditions = current.and_then(|s| s.conditions.clone());
    if let Some(c) =
        infra::set_condition(conditions.as_deref(), condition::PAUSED, infra::paused_condition(paused), generation, now)
    {
        conditions = Some(c);
    }
    let ready = match (&owner, paused) {
        (_, true) => None,
        (None, false) => Some((
            false,
            reason::WAITING_FOR_OWNER,
            "Waiting for the Cluster controller to set the owner reference".to_string(),
        )),
        (Some(_), false) => {
            let fds = infra::failure_domains(&obj.spec);
            if current.and_then(|s| s.failure_domains.as_ref()) != fds.as_ref() {
                status.insert("failureDomains".into(), json!(fds));
            }
            if current.and_then(|s| s.initialization.as_ref()).and_then(|i| i.provisioned) != Some(true) {
                status.insert("initialization".into(), json!({"provisioned": true}));
            }
            Some((true, reason::CLUSTER_PROVISIONED, String::new()))
        }
    };
    if let Some(ready) = ready
        && let Some(c) = infra::set_condition(conditions.as_deref(), condition::READY, ready, generation, now)
    {
        conditions = Some(c);
    }
    if conditions != current.and_then(|s| s.conditions.clone()) {
        status.insert("conditions".into(), json!(conditions));
    }
    if !status.is_empty() {
        let api: Api<MCMCluster> = Api::namespaced(ctx.client.clone(), &namespace);
        super::patch_status(&api, &*obj, Value::Object(status)).await?;
    }
    Ok(Action::requeue(ctx.resync))
}

/// After an API error: retry in a while.
pub(crate) fn error_policy(obj: Arc<MCMCluster>, error: &Error, _ctx: Arc<ClusterContext>) -> Action {
    crate::controllers::error::log_reconcile_failure!(error, mcmcluster = %key_of(&*obj));
    Action::requeue(Duration::from_secs(5))
}
