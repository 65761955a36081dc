//! MCMMachine and MCMMachineTemplate: the VM behind one CAPI Machine, and the template CAPI clones them from.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::identity::IdentityReference;
use crate::api::capi::{MachineAddress, TemplateObjectMeta};
use crate::api::mcm::{ClassSpec, CurrentStatus, LastOperation, MachineConfiguration, NodeTemplate, NodeTemplateSpec};
use crate::api::schema::{condition_list, preserve_unknown_object, resource_list};

/// MCMMachine is the infrastructure machine backing one Cluster API Machine with a VM, using MCM semantics.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MCMMachine",
    plural = "mcmmachines",
    shortname = "mcmm",
    category = "cluster-api",
    namespaced,
    status = "MCMMachineStatus",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "MCMMachine is the infrastructure machine backing one Cluster API Machine with a VM, using MCM semantics.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "Cluster to which this MCMMachine belongs"
    ),
    printcolumn(
        name = "Machine",
        type_ = "string",
        json_path = ".metadata.ownerReferences[?(@.kind==\"Machine\")].name",
        description = "Machine object which owns this MCMMachine"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "Provider ID of the VM"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned",
        description = "The VM exists and the providerID is set"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "The Ready condition"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Why it is (not) ready",
        priority = 1
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.currentStatus.phase",
        description = "MCM's phase of the machine",
        priority = 1
    ),
    printcolumn(
        name = "FailureDomain",
        type_ = "string",
        json_path = ".status.failureDomain",
        description = "Where the VM runs",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MCMMachineSpec {
    /// The provider's ID of the VM (`<provider>://...`), exactly as the Node will carry it. Set by the controller
    /// once the VM exists; a preset value adopts an existing VM.
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The failure domain the VM runs in (copied from the owning Machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// A reference to an MCM MachineClass in this namespace (`kind: MachineClass`). Exactly one of `class` and
    /// `inlineClass` must be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassSpec>,
    /// A class written inline: provider, providerSpec and credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_class: Option<InlineMachineClass>,
    /// The MCMClusterIdentity that grants this machine a Secret outside its namespace. Every Secret the class
    /// names outside the machine's namespace must be this identity's, and the identity must allow the namespace.
    /// An inline class without `credentialsSecretRef` takes its credentials from the identity's Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<IdentityReference>,
    /// Labels, annotations and taints the Node gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplateSpec>,
    /// Per-machine timeouts and health settings, with MCM's names (`creationTimeout: 20m` ...).
    #[serde(flatten)]
    pub configuration: MachineConfiguration,
}

/// A MachineClass written inside the machine spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InlineMachineClass {
    /// The driver: AWS, Azure, GCP or InMemory.
    pub provider: String,
    /// The driver's configuration, shaped as the matching Gardener provider defines it.
    #[schemars(schema_with = "preserve_unknown_object")]
    pub provider_spec: serde_json::Value,
    /// The Secret with the cloud credentials: in the machine's namespace, or the Secret of the identity
    /// `spec.identityRef` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretReference>,
    /// What a Node of this class looks like before it exists (scale-from-zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplate>,
}

/// Whether the infrastructure is provisioned (contract field).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializationStatus {
    /// True once the infrastructure exists (for a machine: the VM exists and `spec.providerID` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// The observed state of an MCMMachine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MCMMachineStatus {
    /// Contract: `provisioned` turns true once the VM exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<InitializationStatus>,
    /// Addresses of the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<MachineAddress>>,
    /// Where the VM actually runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// metav1 conditions: Ready (mirrored by CAPI into the Machine's InfrastructureReady), Paused, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "condition_list")]
    pub conditions: Option<Vec<Condition>>,
    /// The last operation on the VM, as MCM records it (cluster-autoscaler reads `errorCode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// MCM's phase of the machine and the clock of its health timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_status: Option<CurrentStatus>,
    /// Opaque driver state, handed back to the driver on the next call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known_state: Option<String>,
}

/// MCMMachineTemplate is the template CAPI clones MCMMachines from.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MCMMachineTemplate",
    plural = "mcmmachinetemplates",
    shortname = "mcmmt",
    category = "cluster-api",
    namespaced,
    status = "MCMMachineTemplateStatus",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "MCMMachineTemplate is the template CAPI clones MCMMachines from.",
    printcolumn(
        name = "Class",
        type_ = "string",
        json_path = ".spec.template.spec.class.name",
        description = "The MachineClass the machines use"
    ),
    printcolumn(
        name = "Provider",
        type_ = "string",
        json_path = ".spec.template.spec.inlineClass.provider",
        description = "The provider of an inline class"
    ),
    printcolumn(
        name = "CPU",
        type_ = "string",
        json_path = ".status.capacity.cpu",
        description = "CPU of a node (scale from zero)"
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.capacity.memory",
        description = "Memory of a node (scale from zero)"
    ),
    printcolumn(
        name = "Arch",
        type_ = "string",
        json_path = ".status.nodeInfo.architecture",
        description = "Architecture of a node",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MCMMachineTemplateSpec {
    /// The template.
    pub template: MCMMachineTemplateResource,
}

/// The metadata and spec of MCMMachines created from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MCMMachineTemplateResource {
    /// Labels and annotations of the MCMMachines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateObjectMeta>,
    /// The MCMMachine spec.
    pub spec: MCMMachineSpec,
}

/// Architecture and operating system of the nodes a template creates (autoscaling from zero).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// amd64, arm64, s390x or ppc64le.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["amd64", "arm64", "s390x", "ppc64le"]))]
    pub architecture: Option<String>,
    /// The operating system, e.g. linux.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operating_system: Option<String>,
}

/// The observed state of an MCMMachineTemplate: what cluster-autoscaler needs to scale from zero.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MCMMachineTemplateStatus {
    /// The resources a node of this template offers (cpu, memory, gpu ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resource_list")]
    pub capacity: Option<BTreeMap<String, Quantity>>,
    /// Architecture and operating system of the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeInfo>,
    /// metav1 conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "condition_list")]
    pub conditions: Option<Vec<Condition>>,
}
