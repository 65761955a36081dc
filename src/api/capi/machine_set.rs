//! MachineSet (`cluster.x-k8s.io/v1beta2`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::{Extra, TemplateObjectMeta};
use super::machine::MachineSpec;

/// A CAPI MachineSet: keeps a number of identical Machines.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineSet",
    namespaced,
    status = "MachineSetStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    /// The name of the Cluster this object belongs to.
    pub cluster_name: String,
    /// The number of desired machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Label query over machines that should match the replica count.
    #[serde(default)]
    pub selector: LabelSelector,
    /// The machines to create.
    #[serde(default)]
    pub template: MachineTemplateSpec,
    /// Deletion order on scale-down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineSetDeletionSpec>,
    /// machineNaming, ...
    #[serde(flatten)]
    pub extra: Extra,
}

/// Metadata and spec of the Machines a set creates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplateSpec {
    /// Labels and annotations of the Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateObjectMeta>,
    /// The Machine spec.
    #[serde(default)]
    pub spec: MachineSpec,
}

/// How a set picks machines to delete.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetDeletionSpec {
    /// Random, Newest or Oldest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
}

/// The observed state of a MachineSet (also used by MachineDeployment).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    /// metav1 conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The selector in string form, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The number of machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Machines with Ready condition true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Machines with Available condition true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Machines with UpToDate condition true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    /// The generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// versions, deprecated, ...
    #[serde(flatten)]
    pub extra: Extra,
}
