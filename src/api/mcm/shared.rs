//! Types used by several MCM kinds (`shared_types.go`, `machine_types.go`).

use k8s_openapi::api::core::v1::NodeSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::Duration;
use crate::api::schema::preserve_unknown_object;
use crate::api::string_enum::string_enum;

/// Which MachineClass a Machine uses (`spec.class`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassSpec {
    /// API group to which it belongs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// Kind for machine class (`MachineClass`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Name of machine class.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// What a Node backed by this machine should carry: labels, annotations and taints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplateSpec {
    /// Labels and annotations synced to the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub metadata: Option<ObjectMeta>,
    /// NodeSpec describes the attributes that a node is created with (taints are synced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<NodeSpec>,
}

/// Per-machine overrides of the machine controller's flags (inlined into `MachineSpec`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfiguration {
    /// MachineDraintimeout is the timeout after which machine is forcefully deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout: Option<Duration>,
    /// MachineHealthTimeout is the timeout after which machine is declared unhealthy/failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_timeout: Option<Duration>,
    /// MachineCreationTimeout is the timeout after which machine creation is declared failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timeout: Option<Duration>,
    /// MachineInPlaceUpdateTimeout is the timeout after which in-place update is declared failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_timeout: Option<Duration>,
    /// MachinePreserveTimeout is the timeout after which the machine preservation is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_preserve_timeout: Option<Duration>,
    /// DisableHealthTimeout if set to true, health timeout will be ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_health_timeout: Option<bool>,
    /// MaxEvictRetries is the number of retries that will be attempted while draining the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_evict_retries: Option<i32>,
    /// NodeConditions are the set of conditions (comma-separated) which, if true for the health timeout,
    /// declare the machine failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_conditions: Option<String>,
}

/// Metadata and spec of Machines created from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplateSpec {
    /// Standard object's metadata (labels and annotations of the Machines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub metadata: Option<ObjectMeta>,
    /// Specification of the desired behavior of the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<super::MachineSpec>,
}

string_enum!(
    /// `lastOperation.state`.
    MachineState {
        Processing = "Processing",
        Failed = "Failed",
        Successful = "Successful",
    }
);

string_enum!(
    /// `lastOperation.type`.
    MachineOperationType {
        Create = "Create",
        Update = "Update",
        InPlaceUpdate = "InPlaceUpdate",
        DrainNode = "DrainNode",
        HealthCheck = "HealthCheck",
        Delete = "Delete",
    }
);

/// The last operation performed on a machine, as MCM records it (cluster-autoscaler reads `errorCode`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// Description of the current operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// ErrorCode of the current operation if any (a driver code such as `ResourceExhausted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// Last update time of the current operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// State of operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<MachineState>,
    /// Type of operation.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<MachineOperationType>,
}

/// A short summary of a failed machine, kept in MachineSet and MachineDeployment status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSummary {
    /// Name of the machine object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// ProviderID represents the provider's unique ID given to a machine.
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// Last operation refers to the status of the last operation performed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// OwnerRef: name of the owning MachineSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_ref: Option<String>,
}

string_enum!(
    /// `True`, `False` or `Unknown`, as in every Kubernetes condition.
    ConditionStatus {
        True = "True",
        False = "False",
        Unknown = "Unknown",
    }
);

pub(crate) fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

pub(crate) fn is_false(v: &bool) -> bool {
    !*v
}
