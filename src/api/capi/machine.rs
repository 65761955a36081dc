//! Machine (`cluster.x-k8s.io/v1beta2`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::{ContractVersionedObjectReference, Extra, MachineAddress};

/// A CAPI Machine: one node of a workload cluster, backed by an infrastructure machine.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Machine",
    namespaced,
    status = "MachineStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// The name of the Cluster this object belongs to.
    pub cluster_name: String,
    /// Where the bootstrap data comes from.
    #[serde(default)]
    pub bootstrap: Bootstrap,
    /// The infrastructure machine (e.g. an MCMMachine).
    pub infrastructure_ref: ContractVersionedObjectReference,
    /// The Kubernetes version of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The provider's ID of the instance, copied from the infrastructure machine.
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The failure domain the machine should be placed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// Seconds a Ready node must stay Ready before the machine is Available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// Deletion timeouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeletionSpec>,
    /// readinessGates, taints, ...
    #[serde(flatten)]
    pub extra: Extra,
}

/// Bootstrap configuration of a Machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    /// The bootstrap provider's config object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_ref: Option<ContractVersionedObjectReference>,
    /// The Secret holding the bootstrap data (key `value`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_name: Option<String>,
}

/// Machine deletion timeouts, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeletionSpec {
    /// How long to drain the node before giving up; 0 or absent waits for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_drain_timeout_seconds: Option<i32>,
    /// How long to wait for volumes to detach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_volume_detach_timeout_seconds: Option<i32>,
    /// How long to retry deleting the Node object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_deletion_timeout_seconds: Option<i32>,
}

/// The Node a Machine is linked to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineNodeReference {
    /// The Node's name.
    pub name: String,
}

/// Machine initialization progress.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineInitializationStatus {
    /// True once the infrastructure machine reported itself provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
    /// True once the bootstrap data secret exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_data_secret_created: Option<bool>,
}

/// The observed state of a Machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// metav1 conditions (Ready, Available, UpToDate, Paused, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The Node backing this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<MachineNodeReference>,
    /// When the phase last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// Where the machine actually runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// Addresses copied from the infrastructure machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<MachineAddress>>,
    /// Pending, Provisioning, Provisioned, Running, Updating, Deleting, Deleted, Failed or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Initialization progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<MachineInitializationStatus>,
    /// nodeInfo, deletion, certificatesExpiryDate, deprecated, ...
    #[serde(flatten)]
    pub extra: Extra,
}
