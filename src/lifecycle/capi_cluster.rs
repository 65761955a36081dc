//! The Cluster decisions of mode "CAPI with MCM core" (what upstream core's Cluster controller does for workers,
//! `capi-contract.md` §4 and §5.3): own the infrastructure cluster, mirror its `provisioned`, failure domains and
//! `Ready` condition onto the Cluster, copy the control plane endpoint, and keep the phase. No control plane is
//! managed: worker machines only need `Cluster.status.initialization.infrastructureProvisioned`.
//!
//! Imports `api` and sibling modules only.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;

use super::capi_machine::{condition, merge_conditions};
use crate::api::capi::{self, ApiEndpoint, Cluster, ClusterInitializationStatus, ClusterStatus};
use crate::api::infra::MCMCluster;

/// The infrastructure cluster kind this mode mirrors.
pub const INFRA_CLUSTER_KIND: &str = "MCMCluster";

/// Cluster phases (`api/core/v1beta2/cluster_phase_types.go`).
pub mod phase {
    /// No infrastructure cluster yet.
    pub const PENDING: &str = "Pending";
    /// The infrastructure cluster exists and is not provisioned yet.
    pub const PROVISIONING: &str = "Provisioning";
    /// The infrastructure cluster is provisioned.
    pub const PROVISIONED: &str = "Provisioned";
    /// The Cluster is being deleted.
    pub const DELETING: &str = "Deleting";
}

/// Condition types and reasons on the Cluster.
pub mod condition_type {
    /// Mirrors the infrastructure cluster's `Ready`.
    pub const INFRASTRUCTURE_READY: &str = "InfrastructureReady";
    /// Whether reconciliation is paused.
    pub const PAUSED: &str = "Paused";
}

/// Reasons of the Cluster's conditions (`docs/capi-mode.md`).
pub mod reason {
    /// `InfrastructureReady` without an `MCMCluster` to mirror (no `infrastructureRef`, or not found).
    pub const INFRASTRUCTURE_DOES_NOT_EXIST: &str = "InfrastructureDoesNotExist";
    /// `InfrastructureReady` while the MCMCluster has no `Ready` condition yet.
    pub const INFRASTRUCTURE_NOT_READY: &str = "InfrastructureNotReady";
    /// `Paused` true: `spec.paused` or the paused annotation.
    pub const PAUSED: &str = "Paused";
    /// `Paused` false.
    pub const NOT_PAUSED: &str = "NotPaused";
}

/// What a Cluster reconcile sees.
#[derive(Clone, Debug)]
pub struct ClusterObservation<'a> {
    /// The Cluster.
    pub cluster: &'a Cluster,
    /// The MCMCluster `spec.infrastructureRef` names, if it names one and it exists.
    pub infra: Option<&'a MCMCluster>,
    /// Now.
    pub now: Timestamp,
}

/// What to write.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterPlan {
    /// The owner reference to add to the MCMCluster (it has no controller yet).
    pub own_infra: Option<OwnerReference>,
    /// The `cluster.x-k8s.io/cluster-name` label to put on the MCMCluster (missing or different), as core does
    /// for the objects a Cluster references; `kubectl get mcmclusters` shows it.
    pub label_infra: Option<String>,
    /// `spec.controlPlaneEndpoint` to set (the Cluster has none; the MCMCluster has one).
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The status the Cluster should have.
    pub status: ClusterStatus,
}

/// The merge patch putting the `cluster.x-k8s.io/cluster-name` label on an object of Cluster `cluster_name`, as
/// core's defaulting webhooks do for MachineDeployments and MachineSets (`clusterctl describe` finds a Cluster's
/// MachineDeployments by it); `None` when it is there or no cluster is named.
pub fn cluster_label_patch(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    cluster_name: &str,
) -> Option<serde_json::Value> {
    let labelled = meta.labels.as_ref().and_then(|l| l.get(capi::CLUSTER_NAME_LABEL)).map(String::as_str);
    (!cluster_name.is_empty() && labelled != Some(cluster_name))
        .then(|| serde_json::json!({"metadata": {"labels": {capi::CLUSTER_NAME_LABEL: cluster_name}}}))
}

/// Whether the Cluster names an MCMCluster (`spec.infrastructureRef`), and which.
pub fn infra_name(cluster: &Cluster) -> Option<&str> {
    cluster
        .spec
        .infrastructure_ref
        .as_ref()
        .filter(|r| r.kind == INFRA_CLUSTER_KIND && r.api_group == crate::api::infra::GROUP)
        .map(|r| r.name.as_str())
        .filter(|n| !n.is_empty())
}

fn endpoint_set(e: Option<&ApiEndpoint>) -> bool {
    e.is_some_and(|e| e.host.as_deref().is_some_and(|h| !h.is_empty()) && e.port.is_some_and(|p| p != 0))
}

fn controller_ref(cluster: &Cluster) -> OwnerReference {
    OwnerReference {
        api_version: format!("{}/{}", capi::GROUP, capi::VERSION),
        kind: "Cluster".to_string(),
        name: cluster.metadata.name.clone().unwrap_or_default(),
        uid: cluster.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether the Cluster is paused: `spec.paused` or the `cluster.x-k8s.io/paused` annotation.
pub fn paused(cluster: &Cluster) -> bool {
    super::infra::paused(Some(cluster), cluster.metadata.annotations.as_ref())
}

/// Decides what a Cluster reconcile writes. A paused Cluster only gets its `Paused` condition.
pub fn plan_cluster(obs: &ClusterObservation<'_>) -> ClusterPlan {
    let cluster = obs.cluster;
    let old = cluster.status.clone().unwrap_or_default();
    let old_conditions = old.conditions.clone().unwrap_or_default();
    let mut status = old.clone();
    let mut conditions = old_conditions.clone();
    let is_paused = paused(cluster);
    let paused_condition = if is_paused {
        condition(&old_conditions, condition_type::PAUSED, true, reason::PAUSED, "Reconciliation is paused", obs.now)
    } else {
        condition(&old_conditions, condition_type::PAUSED, false, reason::NOT_PAUSED, "", obs.now)
    };
    merge_conditions(&mut conditions, vec![paused_condition]);
    if is_paused {
        status.conditions = Some(conditions);
        return ClusterPlan { status, ..Default::default() };
    }

    let infra = obs.infra;
    let infra_status = infra.and_then(|i| i.status.as_ref());
    let provisioned = infra_status.and_then(|s| s.initialization.as_ref()).and_then(|i| i.provisioned).unwrap_or(false);
    // Once provisioned, always provisioned (as in upstream core: the flag records initialization).
    let was_provisioned = old.initialization.as_ref().and_then(|i| i.infrastructure_provisioned).unwrap_or(false);
    let infrastructure_provisioned = provisioned || was_provisioned;
    let init = status.initialization.get_or_insert_with(ClusterInitializationStatus::default);
    if infrastructure_provisioned {
        init.infrastructure_provisioned = Some(true);
    }
    if let Some(fds) = infra_status.and_then(|s| s.failure_domains.clone()) {
        status.failure_domains = Some(fds);
    }
    let ready = match infra {
        None => condition(
            &old_conditions,
            condition_type::INFRASTRUCTURE_READY,
            false,
            reason::INFRASTRUCTURE_DOES_NOT_EXIST,
            &format!("{INFRA_CLUSTER_KIND} {} does not exist", infra_name(cluster).unwrap_or("(none referenced)")),
            obs.now,
        ),
        Some(i) => match i
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == super::infra::condition::READY).cloned())
        {
            Some(r) => condition(
                &old_conditions,
                condition_type::INFRASTRUCTURE_READY,
                r.status == "True",
                &r.reason,
                &r.message,
                obs.now,
            ),
            None => condition(
                &old_conditions,
                condition_type::INFRASTRUCTURE_READY,
                false,
                reason::INFRASTRUCTURE_NOT_READY,
                &format!("{INFRA_CLUSTER_KIND} has not reported Ready yet"),
                obs.now,
            ),
        },
    };
    merge_conditions(&mut conditions, vec![ready]);
    status.conditions = Some(conditions);
    status.phase = Some(
        match () {
            _ if cluster.metadata.deletion_timestamp.is_some() => phase::DELETING,
            _ if infrastructure_provisioned => phase::PROVISIONED,
            _ if infra.is_some() => phase::PROVISIONING,
            _ => phase::PENDING,
        }
        .to_string(),
    );
    status.observed_generation = cluster.metadata.generation;

    let own_infra = infra
        .filter(|i| cluster.metadata.deletion_timestamp.is_none() && i.metadata.deletion_timestamp.is_none())
        .filter(|i| i.owner_references().iter().all(|r| r.controller != Some(true)))
        .map(|_| controller_ref(cluster));
    let control_plane_endpoint = infra
        .and_then(|i| i.spec.control_plane_endpoint.clone())
        .filter(|e| endpoint_set(Some(e)) && !endpoint_set(cluster.spec.control_plane_endpoint.as_ref()));
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let label_infra = infra
        .filter(|i| i.metadata.deletion_timestamp.is_none() && !name.is_empty())
        .filter(|i| i.labels().get(capi::CLUSTER_NAME_LABEL) != Some(&name))
        .map(|_| name);
    ClusterPlan { own_infra, label_infra, control_plane_endpoint, status }
}

#[cfg(test)]
mod tests;
