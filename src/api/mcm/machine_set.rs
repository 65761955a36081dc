//! MachineSet: keeps a number of identical Machines.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::shared::{ClassSpec, ConditionStatus, LastOperation, MachineSummary, MachineTemplateSpec, is_zero_i32};
use crate::api::string_enum::string_enum;

/// MachineSet ensures that a specified number of machines replicas are running at any given time.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "MachineSet ensures that a specified number of machines replicas are running at any given time.",
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineSet",
    shortname = "mcs",
    namespaced,
    status = "MachineSetStatus",
    scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.replicas"),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Number of desired replicas."
    ),
    printcolumn(
        name = "Current",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "Number of actual replicas."
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Number of ready replicas for this machine set."
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    /// Number of desired machines.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub replicas: i32,
    /// Label query over machines that should match the replica count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Vestigial: only used as a metric label; `template.spec.class` is authoritative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_class: Option<ClassSpec>,
    /// Template of the machines to create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<MachineTemplateSpec>,
    /// Copied from the MachineDeployment; not used for availability (as in MCM).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub min_ready_seconds: i32,
    /// How many failed machines may be preserved automatically.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub auto_preserve_failed_machine_max: i32,
}

string_enum!(
    /// `status.machineSetCondition[].type`.
    MachineSetConditionType {
        ReplicaFailure = "ReplicaFailure",
        Frozen = "Frozen",
    }
);

/// A MachineSet condition (JSON name `machineSetCondition`, not `conditions`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetCondition {
    /// Type of the condition.
    #[serde(rename = "type")]
    pub type_: MachineSetConditionType,
    /// Status of the condition, one of True, False, Unknown.
    pub status: ConditionStatus,
    /// The last time the condition transitioned from one status to another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// The reason for the condition's last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human readable message indicating details about the transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The observed state of a MachineSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    /// Replicas is the number of actual replicas (terminating ones included).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub replicas: i32,
    /// The number of pods that have labels matching the labels of the pod template of the replicaset.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub fully_labeled_replicas: i32,
    /// The number of ready (Running) replicas.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub ready_replicas: i32,
    /// The number of available (Available or Running) replicas.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub available_replicas: i32,
    /// ObservedGeneration is the most recent generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Represents the latest available observations of a replica set's current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_set_condition: Option<Vec<MachineSetCondition>>,
    /// LastOperation performed (only `lastUpdateTime` is set, as in MCM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// FailedMachines has summary of machines on which lastOperation Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_machines: Option<Vec<MachineSummary>>,
    /// Number of failed machines currently preserved automatically.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub auto_preserve_failed_machine_count: i32,
    /// Number of preserved failed replicas.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub preserved_failed_replicas: i32,
}
