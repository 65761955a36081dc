//! Cluster (`cluster.x-k8s.io/v1beta2`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::{ApiEndpoint, ContractVersionedObjectReference, Extra, FailureDomain};

/// A CAPI Cluster: the root of a workload cluster's objects.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Cluster",
    namespaced,
    status = "ClusterStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Whether reconciliation of this cluster and its objects is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Where the control plane is reachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The control plane provider's object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_ref: Option<ContractVersionedObjectReference>,
    /// The infrastructure provider's cluster object (e.g. an MCMCluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractVersionedObjectReference>,
    /// clusterNetwork, topology, availabilityGates, ...
    #[serde(flatten)]
    pub extra: Extra,
}

/// Cluster initialization progress.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInitializationStatus {
    /// True once the infrastructure provider reported its cluster provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
    /// True once the control plane is initialized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
}

/// The observed state of a Cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// metav1 conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Initialization progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ClusterInitializationStatus>,
    /// Failure domains copied from the infrastructure cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<Vec<FailureDomain>>,
    /// Pending, Provisioning, Provisioned, Deleting, Failed or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// controlPlane, workers, deprecated, ...
    #[serde(flatten)]
    pub extra: Extra,
}
