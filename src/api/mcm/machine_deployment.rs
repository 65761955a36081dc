//! MachineDeployment: declarative updates of MachineSets (a fork of the Kubernetes 1.8 Deployment).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::shared::{ConditionStatus, MachineSummary, MachineTemplateSpec, is_false, is_zero_i32};
use crate::api::string_enum::string_enum;

/// MachineDeployment enables declarative updates for machines and MachineSets.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "MachineDeployment enables declarative updates for machines and MachineSets.",
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineDeployment",
    shortname = "mcd",
    namespaced,
    status = "MachineDeploymentStatus",
    scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.replicas"),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Total number of ready machines targeted by this machine deployment."
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Number of desired machines."
    ),
    printcolumn(
        name = "Up-to-date",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "Total number of non-terminated machines targeted by this machine deployment that have the desired template spec."
    ),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableReplicas",
        description = "Total number of available machines (ready for at least minReadySeconds) targeted by this machine deployment."
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentSpec {
    /// Number of desired machines (not a pointer in MCM: absent means 0).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub replicas: i32,
    /// Label selector for machines. Must be a subset of the template's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Template describes the machines that will be created.
    pub template: MachineTemplateSpec,
    /// The deployment strategy to use to replace existing machines with new ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MachineDeploymentStrategy>,
    /// Copied to MachineSets; otherwise unused (as in MCM).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub min_ready_seconds: i32,
    /// The number of old MachineSets to retain to allow rollback; absent keeps all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
    /// Indicates that the MachineDeployment is paused and will not be processed by the controller.
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
    /// DEPRECATED. The config this MachineDeployment is rolling back to. Cleared once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_to: Option<RollbackConfig>,
    /// Maximum time in seconds for a deployment to make progress before it is considered failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,
    /// Copied to MachineSets.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub auto_preserve_failed_machine_max: i32,
}

string_enum!(
    /// `spec.strategy.type`. MCM has no default: an empty type fails validation.
    MachineDeploymentStrategyType {
        Recreate = "Recreate",
        RollingUpdate = "RollingUpdate",
        InPlaceUpdate = "InPlaceUpdate",
    }
);

/// How machines are replaced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStrategy {
    /// Type of deployment. Can be "Recreate", "RollingUpdate" or "InPlaceUpdate".
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<MachineDeploymentStrategyType>,
    /// Rolling update config params. Present only if type = RollingUpdate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<UpdateConfiguration>,
    /// InPlaceUpdate update config params. Present only if type = InPlaceUpdate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update: Option<InPlaceUpdate>,
}

/// `maxSurge` and `maxUnavailable`, absolute numbers or percentages.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateConfiguration {
    /// The maximum number of machines that can be unavailable during the update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// The maximum number of machines that can be scheduled above the desired number of machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
}

string_enum!(
    /// `spec.strategy.inPlaceUpdate.orchestrationType`.
    OrchestrationType {
        Auto = "Auto",
        Manual = "Manual",
    }
);

/// In-place update parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdate {
    /// maxSurge and maxUnavailable.
    #[serde(flatten)]
    pub update: UpdateConfiguration,
    /// OrchestrationType specifies the orchestration type for the in-place update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestration_type: Option<OrchestrationType>,
}

/// The revision to roll back to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackConfig {
    /// The revision to rollback to. If set to 0, rollback to the last revision.
    #[serde(default)]
    pub revision: i64,
}

string_enum!(
    /// `status.conditions[].type`.
    MachineDeploymentConditionType {
        Available = "Available",
        Progressing = "Progressing",
        ReplicaFailure = "ReplicaFailure",
        Frozen = "Frozen",
    }
);

/// A MachineDeployment condition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentCondition {
    /// Type of MachineDeployment condition.
    #[serde(rename = "type")]
    pub type_: MachineDeploymentConditionType,
    /// Status of the condition, one of True, False, Unknown.
    pub status: ConditionStatus,
    /// The last time this condition was updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// Last time the condition transitioned from one status to another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// The reason for the condition's last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human readable message indicating details about the transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The observed state of a MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStatus {
    /// The generation observed by the MachineDeployment controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Total number of non-terminated machines targeted by this MachineDeployment (their labels match the selector).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub replicas: i32,
    /// Total number of non-terminated machines that have the desired template spec.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub updated_replicas: i32,
    /// Total number of ready machines.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub ready_replicas: i32,
    /// Total number of available machines.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub available_replicas: i32,
    /// Total number of unavailable machines.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub unavailable_replicas: i32,
    /// Represents the latest available observations of a MachineDeployment's current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<MachineDeploymentCondition>>,
    /// Count of hash collisions for the MachineDeployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// FailedMachines has summary of machines on which lastOperation Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_machines: Option<Vec<MachineSummary>>,
    /// Number of preserved failed replicas.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub preserved_failed_replicas: i32,
}
