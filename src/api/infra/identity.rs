//! MCMClusterIdentity: which namespaces may use a Secret outside their own (`docs/infrastructure-provider.md`,
//! "Multi-tenancy").
//!
//! An MCMMachine may name a Secret of another namespace (an inline class's `credentialsSecretRef`, a referenced
//! MachineClass's `secretRef` or `credentialsSecretRef`) only through the identity its `spec.identityRef` names:
//! the Secret must be that identity's `secretRef`, and the identity's `allowedNamespaces` must admit the
//! MCMMachine's namespace. The decision is [`crate::lifecycle::tenancy`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The kind an `identityRef` may name.
pub const IDENTITY_KIND: &str = "MCMClusterIdentity";

/// MCMClusterIdentity grants the namespaces it allows the use of one Secret of cloud credentials.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MCMClusterIdentity",
    plural = "mcmclusteridentities",
    shortname = "mcmci",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "MCMClusterIdentity grants the namespaces it allows the use of one Secret of cloud credentials.",
    printcolumn(
        name = "SecretNamespace",
        type_ = "string",
        json_path = ".spec.secretRef.namespace",
        description = "The namespace of the Secret"
    ),
    printcolumn(name = "Secret", type_ = "string", json_path = ".spec.secretRef.name", description = "The Secret"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MCMClusterIdentitySpec {
    /// The Secret with the cloud credentials this identity grants.
    pub secret_ref: IdentitySecretReference,
    /// The namespaces whose MCMMachines may use this identity: those in `list` and those whose labels match
    /// `selector`. Unset: no namespace. `{}` (neither `list` nor `selector`): every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<AllowedNamespaces>,
}

/// A Secret by namespace and name (both required).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentitySecretReference {
    /// The Secret's name.
    pub name: String,
    /// The Secret's namespace.
    pub namespace: String,
}

/// The namespaces allowed to use an identity: a namespace is allowed when it is in `list` or its labels match
/// `selector`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowedNamespaces {
    /// Namespaces by name. Empty or unset allows none by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<Vec<String>>,
    /// Namespaces by their labels. An empty selector selects no namespace (not every one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// A reference to the cluster-scoped identity whose Secret an object uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityReference {
    /// `MCMClusterIdentity`.
    pub kind: String,
    /// The identity's name.
    pub name: String,
}
