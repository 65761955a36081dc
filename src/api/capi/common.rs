//! Types shared by several CAPI kinds (`api/core/v1beta2/common_types.go`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Fields we do not model, kept so that a read-modify-write loses nothing.
pub type Extra = BTreeMap<String, serde_json::Value>;

/// A reference to an object of a contract-versioned kind: the version comes from the CRD's contract label.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContractVersionedObjectReference {
    /// The group of the resource being referenced.
    pub api_group: String,
    /// The kind of the resource being referenced.
    pub kind: String,
    /// The name of the resource being referenced.
    pub name: String,
}

/// Labels and annotations of objects created from a template (CAPI's `ObjectMeta`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateObjectMeta {
    /// Labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// An address of a machine (`MachineAddress`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineAddress {
    /// One of Hostname, ExternalIP, InternalIP, ExternalDNS or InternalDNS.
    #[serde(rename = "type")]
    #[schemars(extend("enum" = ["Hostname", "ExternalIP", "InternalIP", "ExternalDNS", "InternalDNS"]))]
    pub type_: String,
    /// The address.
    pub address: String,
}

/// The host and port the control plane is reachable on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// The hostname or IP on which the API server is serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The port on which the API server is serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// A failure domain (v1beta2 list form).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    /// The name of the failure domain.
    pub name: String,
    /// Whether the failure domain is suitable for control plane machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    /// Free-form attributes of the failure domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, String>>,
}
