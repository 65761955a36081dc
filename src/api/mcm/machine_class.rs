//! MachineClass: a reusable provider configuration. Its fields sit at the top level (no `spec`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::schema::{preserve_unknown_object, resource_list};

/// MachineClass can be used to templatize and re-use provider configuration across multiple
/// Machines / MachineSets / MachineDeployments.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "MachineClass can be used to templatize and re-use provider configuration across multiple Machines / MachineSets / MachineDeployments.",
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineClass",
    plural = "machineclasses",
    shortname = "mcc",
    namespaced,
    // MachineClasses belong to no Cluster's owner chain; with this label `clusterctl move` takes them along.
    label("clusterctl.cluster.x-k8s.io/move", ""),
    // Says the CRD is this provider's, not Gardener's MCM's (the MachineClass webhook judges classes only then).
    label("app.kubernetes.io/part-of", "cluster-api-provider-mcm"),
    no_spec
)]
#[serde(rename_all = "camelCase")]
pub struct MachineClassFields {
    /// Provider-specific configuration to use during node creation.
    #[schemars(schema_with = "preserve_unknown_object")]
    pub provider_spec: serde_json::Value,
    /// Provider is the combination of name and location of cloud-specific drivers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// SecretRef stores the necessary secrets such as credentials or userdata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// CredentialsSecretRef can optionally store the credentials (in this case the SecretRef does not need to
    /// store them). Its data is merged over the SecretRef's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretReference>,
    /// NodeTemplate contains subfields to track all node resources and other node info required to scale
    /// nodegroup from zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplate>,
}

/// What a Node of this class looks like before it exists (cluster-autoscaler scale-from-zero).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct NodeTemplate {
    /// Capacity contains subfields to track all node resources required to scale nodegroup from zero.
    #[schemars(schema_with = "resource_list")]
    pub capacity: BTreeMap<String, Quantity>,
    /// VirtualCapacity represents the expected Node 'virtual' capacity ie comprising virtual extended resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resource_list")]
    pub virtual_capacity: Option<BTreeMap<String, Quantity>>,
    /// Instance type of the node belonging to nodeGroup.
    pub instance_type: String,
    /// Region of the expected node belonging to nodeGroup.
    pub region: String,
    /// Zone of the expected node belonging to nodeGroup.
    pub zone: String,
    /// CPU Architecture of the node belonging to nodeGroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}
