//! MachineDeployment (`cluster.x-k8s.io/v1beta2`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::Extra;
use super::machine_set::{MachineSetDeletionSpec, MachineTemplateSpec};

/// A CAPI MachineDeployment: rolls MachineSets.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineDeployment",
    namespaced,
    status = "MachineDeploymentStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentSpec {
    /// The name of the Cluster this object belongs to.
    pub cluster_name: String,
    /// The number of desired machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Label query over machines.
    #[serde(default)]
    pub selector: LabelSelector,
    /// The machines to create.
    #[serde(default)]
    pub template: MachineTemplateSpec,
    /// How machines are replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<MachineDeploymentRollout>,
    /// Deletion order on scale-down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineSetDeletionSpec>,
    /// Whether the deployment is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// machineNaming, remediation, ...
    #[serde(flatten)]
    pub extra: Extra,
}

/// Rollout settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentRollout {
    /// Roll out all machines created before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MachineDeploymentRolloutStrategy>,
    /// Fields we do not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `RollingUpdate` or `OnDelete`, with the rolling update's parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentRolloutStrategy {
    /// RollingUpdate or OnDelete.
    #[serde(rename = "type")]
    pub type_: String,
    /// Rolling update parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdate>,
}

/// maxSurge and maxUnavailable.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdate {
    /// Machines that may be unavailable during the update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Machines that may be created above the desired number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
}

/// The observed state of a MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStatus {
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
    /// ScalingUp, ScalingDown, Running, Failed or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// versions, deprecated, ...
    #[serde(flatten)]
    pub extra: Extra,
}
