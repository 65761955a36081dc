//! Machine: one VM and the Node it backs.

use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::shared::{ClassSpec, LastOperation, MachineConfiguration, NodeTemplateSpec, is_false};
use crate::api::string_enum::string_enum;

/// Machine is the representation of a physical or virtual machine.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "Machine is the representation of a physical or virtual machine.",
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "Machine",
    shortname = "mc",
    namespaced,
    status = "MachineStatus",
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.currentStatus.phase",
        description = "Current status of the machine."
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Node",
        type_ = "string",
        json_path = ".metadata.labels.node",
        description = "Node backing the machine object"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "ProviderID of the infra instance backing the machine object",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// Class contains the machineclass attributes of a machine.
    #[serde(default)]
    pub class: ClassSpec,
    /// ProviderID represents the provider's unique ID given to a machine.
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// NodeTemplateSpec describes the data a node should have when created from a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplateSpec>,
    /// Per-machine overrides of the controller's timeouts and health settings.
    #[serde(flatten)]
    pub configuration: MachineConfiguration,
}

string_enum!(
    /// `status.currentStatus.phase`. An empty or absent phase means "being created".
    MachinePhase {
        Pending = "Pending",
        Available = "Available",
        Running = "Running",
        Terminating = "Terminating",
        Unknown = "Unknown",
        Failed = "Failed",
        CrashLoopBackOff = "CrashLoopBackOff",
        InPlaceUpdating = "InPlaceUpdating",
        InPlaceUpdateSuccessful = "InPlaceUpdateSuccessful",
        InPlaceUpdateFailed = "InPlaceUpdateFailed",
    }
);

/// The phase of a machine and the clock of its health timeout.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrentStatus {
    /// The phase; absent while the machine is being created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachinePhase>,
    /// Set when entering Pending (kept for compatibility; MCM does not read it).
    #[serde(default, skip_serializing_if = "is_false")]
    pub timeout_active: bool,
    /// Last update time of the current status: the health timeout counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// Until when the machine is preserved (machine preservation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_expiry_time: Option<Time>,
}

/// The observed state of a Machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Conditions of the Node backing this machine, copied from the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<NodeCondition>>,
    /// The last operation performed on the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// The current status of the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_status: Option<CurrentStatus>,
    /// Opaque provider state, handed back to the driver on the next call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known_state: Option<String>,
    /// Addresses of the machine (only filled when there is no target cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<NodeAddress>>,
}
