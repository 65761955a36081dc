//! MachineHealthCheck (`cluster.x-k8s.io/v1beta2`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::Extra;

/// A CAPI MachineHealthCheck: when machines count as unhealthy and how they are remediated.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineHealthCheck",
    namespaced,
    status = "MachineHealthCheckStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckSpec {
    /// The name of the Cluster this object belongs to.
    pub cluster_name: String,
    /// Label query over the machines checked.
    #[serde(default)]
    pub selector: LabelSelector,
    /// The health checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<MachineHealthCheckChecks>,
    /// remediation, ...
    #[serde(flatten)]
    pub extra: Extra,
}

/// When a machine counts as unhealthy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckChecks {
    /// How long a machine may take to get a Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_startup_timeout_seconds: Option<i32>,
    /// Node conditions that make a machine unhealthy after a timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_node_conditions: Option<Vec<UnhealthyCondition>>,
    /// Machine conditions that make a machine unhealthy after a timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_machine_conditions: Option<Vec<UnhealthyCondition>>,
}

/// A condition type and status that, held for `timeoutSeconds`, marks a machine unhealthy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyCondition {
    /// The condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// The condition status (True, False or Unknown).
    pub status: String,
    /// How long the condition must hold.
    pub timeout_seconds: i32,
}

/// The observed state of a MachineHealthCheck.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckStatus {
    /// metav1 conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Machines selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_machines: Option<i32>,
    /// Machines found healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_healthy: Option<i32>,
    /// Remediations still allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediations_allowed: Option<i32>,
    /// The generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The names of the machines selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<String>>,
    /// deprecated, ...
    #[serde(flatten)]
    pub extra: Extra,
}
