//! The Cluster decisions of mode "CAPI with MCM core" (what upstream core's Cluster controller does for workers,
//! `docs/infrastructure-provider.md`: own the infrastructure cluster, mirror its `provisioned`, failure domains and
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

/// The merge patch making a MachineDeployment belong to its Cluster as core's MachineDeployment controller does: the
/// `cluster.x-k8s.io/cluster-name` label ([`cluster_label_patch`]) and an owner reference to the Cluster (not as
/// controller; one to an older Cluster of the same name is replaced), so that `clusterctl move` takes the
/// deployment along and deleting the Cluster deletes its workers. `None` when nothing is missing. Guarded by the
/// resourceVersion when the owner references change.
pub fn deployment_membership_patch(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    cluster_name: &str,
    cluster: Option<&Cluster>,
) -> Option<serde_json::Value> {
    let mut patch = cluster_label_patch(meta, cluster_name).unwrap_or_else(|| serde_json::json!({"metadata": {}}));
    if let Some(cluster) = cluster.filter(|c| c.metadata.name.as_deref() == Some(cluster_name)) {
        let uid = cluster.metadata.uid.clone().unwrap_or_default();
        let owners = meta.owner_references.clone().unwrap_or_default();
        let owned = owners.iter().any(|o| o.kind == "Cluster" && o.uid == uid);
        if !owned && !uid.is_empty() {
            let mut owners: Vec<OwnerReference> = owners
                .into_iter()
                .filter(|o| {
                    !(o.kind == "Cluster" && o.api_version.starts_with("cluster.x-k8s.io/") && o.name == cluster_name)
                })
                .collect();
            owners.push(OwnerReference {
                api_version: format!("{}/{}", capi::GROUP, capi::VERSION),
                kind: "Cluster".into(),
                name: cluster_name.to_string(),
                uid,
                controller: None,
                block_owner_deletion: None,
            });
            patch["metadata"]["ownerReferences"] = serde_json::json!(owners);
            patch["metadata"]["resourceVersion"] = serde_json::json!(meta.resource_version);
        }
    }
    (patch["metadata"].as_object().is_some_and(|m| !m.is_empty())).then_some(patch)
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

/// Why a MachineDeployment, MachineSet or Machine (`kind`) of Cluster `cluster` is paused, in core's words
/// (its `Paused` condition's message), or `None`: the Cluster's `spec.paused` (what `clusterctl move` sets) pauses
/// every object of the Cluster; the `cluster.x-k8s.io/paused` annotation pauses the object carrying it.
pub fn paused_message(
    cluster: Option<&Cluster>,
    kind: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<String> {
    let mut why = Vec::new();
    if cluster.is_some_and(|c| c.spec.paused == Some(true)) {
        why.push("Cluster spec.paused is set to true".to_string());
    }
    if meta.annotations.as_ref().is_some_and(|a| a.contains_key(capi::PAUSED_ANNOTATION)) {
        why.push(format!("{kind} has the {} annotation", capi::PAUSED_ANNOTATION));
    }
    (!why.is_empty()).then(|| why.join(", "))
}

/// Label marking a control-plane Machine (CAPI's).
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";

/// One replica summary as the Cluster's status carries it (`status.controlPlane`, `status.workers`): every
/// counter stays absent until something counts towards it, as core leaves its pointers nil.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counters {
    desired: Option<i32>,
    replicas: Option<i32>,
    ready: Option<i32>,
    available: Option<i32>,
    up_to_date: Option<i32>,
}

impl Counters {
    fn add(slot: &mut Option<i32>, n: Option<i32>) {
        if let Some(n) = n {
            *slot = Some(slot.unwrap_or(0) + n);
        }
    }

    /// Adds (desired, replicas, ready, available, up to date) as an owner of replicas reports them.
    fn add_counts(&mut self, [desired, replicas, ready, available, up_to_date]: [Option<i32>; 5]) {
        Self::add(&mut self.desired, desired);
        Self::add(&mut self.replicas, replicas);
        Self::add(&mut self.ready, ready);
        Self::add(&mut self.available, available);
        Self::add(&mut self.up_to_date, up_to_date);
    }

    fn add_machine(&mut self, m: &capi::Machine) {
        let count = |type_: &str| Some(i32::from(super::capi_replicas::is_true(m, type_)));
        self.add_counts([Some(1), Some(1), count("Ready"), count("Available"), count("UpToDate")]);
    }

    fn to_json(self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        for (key, value) in [
            ("desiredReplicas", self.desired),
            ("replicas", self.replicas),
            ("readyReplicas", self.ready),
            ("availableReplicas", self.available),
            ("upToDateReplicas", self.up_to_date),
        ] {
            if let Some(v) = value {
                map.insert(key.into(), v.into());
            }
        }
        serde_json::Value::Object(map)
    }
}

/// The Cluster's `status.controlPlane` and `status.workers`, counted as core counts them: without a
/// `controlPlaneRef` the control plane is its Machines labelled `cluster.x-k8s.io/control-plane` (one desired
/// replica per Machine); workers are its MachineDeployments' counters, its stand-alone MachineSets' counters and its
/// stand-alone Machines (no controller, or the Cluster). `deployments`, `sets` and `machines` are those of the
/// Cluster. With a `controlPlaneRef`, `controlPlane` is left out: it is the control plane provider's to report.
pub fn replica_counters(
    cluster: &Cluster,
    deployments: &[&capi::MachineDeployment],
    sets: &[&capi::MachineSet],
    machines: &[&capi::Machine],
) -> Vec<(&'static str, serde_json::Value)> {
    let is_control_plane =
        |m: &capi::Machine| m.metadata.labels.as_ref().is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL));
    let mut workers = Counters::default();
    for d in deployments {
        let s = d.status.as_ref();
        workers.add_counts([
            d.spec.replicas,
            s.and_then(|s| s.replicas),
            s.and_then(|s| s.ready_replicas),
            s.and_then(|s| s.available_replicas),
            s.and_then(|s| s.up_to_date_replicas),
        ]);
    }
    let alone = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        super::claim::controller_of(meta).is_none_or(|o| o.kind == "Cluster")
    };
    for set in sets.iter().filter(|s| alone(&s.metadata)) {
        let s = set.status.as_ref();
        workers.add_counts([
            set.spec.replicas,
            s.and_then(|s| s.replicas),
            s.and_then(|s| s.ready_replicas),
            s.and_then(|s| s.available_replicas),
            s.and_then(|s| s.up_to_date_replicas),
        ]);
    }
    let standalone = |m: &&&capi::Machine| !is_control_plane(m) && alone(&m.metadata);
    for m in machines.iter().filter(standalone) {
        workers.add_machine(m);
    }
    let mut out = vec![("workers", workers.to_json())];
    if cluster.spec.control_plane_ref.as_ref().is_none_or(|r| r.name.is_empty()) {
        let mut control_plane = Counters::default();
        for m in machines.iter().filter(|m| is_control_plane(m)) {
            control_plane.add_machine(m);
        }
        out.push(("controlPlane", control_plane.to_json()));
    }
    out
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
    if infrastructure_provisioned {
        status.initialization.get_or_insert_with(ClusterInitializationStatus::default).infrastructure_provisioned =
            Some(true);
    }
    // The schema refuses an empty `initialization` (at least one property): leave it out until there is one, as
    // core does.
    if status.initialization.as_ref().is_some_and(|i| *i == ClusterInitializationStatus::default()) {
        status.initialization = None;
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

pub mod deletion;

#[cfg(test)]
mod tests;
