//! MCMCluster and MCMClusterTemplate: the cluster-level infrastructure object CAPI requires.
//!
//! MCM manages machines, not networks or load balancers, so an MCMCluster only publishes what the user
//! declares: the control-plane endpoint and the failure domains machines may be placed in.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::machine::InitializationStatus;
use crate::api::capi::{ApiEndpoint, FailureDomain, TemplateObjectMeta};
use crate::api::schema::condition_list;

/// MCMCluster is the infrastructure cluster of a Cluster API Cluster whose machines MCM manages.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MCMCluster",
    plural = "mcmclusters",
    shortname = "mcmc",
    category = "cluster-api",
    namespaced,
    status = "MCMClusterStatus",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "MCMCluster is the infrastructure cluster of a Cluster API Cluster whose machines MCM manages.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "Cluster to which this MCMCluster belongs"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned",
        description = "The infrastructure is ready"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "The Ready condition"
    ),
    printcolumn(
        name = "Paused",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Paused\")].status",
        description = "Reconciliation is paused",
        priority = 1
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        description = "The control plane endpoint",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MCMClusterSpec {
    /// Where the control plane is reachable, if this provider is the one to publish it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The failure domains (zones) machines of this cluster may be placed in; published in
    /// `status.failureDomains`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<Vec<FailureDomain>>,
}

/// The observed state of an MCMCluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MCMClusterStatus {
    /// Contract: `provisioned` turns true once the cluster infrastructure is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<InitializationStatus>,
    /// The failure domains machines may use (v1beta2 list form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<Vec<FailureDomain>>,
    /// metav1 conditions: Ready, Paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "condition_list")]
    pub conditions: Option<Vec<Condition>>,
}

/// MCMClusterTemplate is the template ClusterClass creates MCMClusters from.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MCMClusterTemplate",
    plural = "mcmclustertemplates",
    shortname = "mcmct",
    category = "cluster-api",
    namespaced,
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "MCMClusterTemplate is the template ClusterClass creates MCMClusters from.",
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MCMClusterTemplateSpec {
    /// The template.
    pub template: MCMClusterTemplateResource,
}

/// The metadata and spec of MCMClusters created from a template (CAPI's InfraClusterTemplate contract:
/// `spec.template.metadata` carries labels and annotations ClusterClass puts on the MCMCluster).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MCMClusterTemplateResource {
    /// Labels and annotations of the MCMClusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateObjectMeta>,
    /// The MCMCluster spec.
    pub spec: MCMClusterSpec,
}
