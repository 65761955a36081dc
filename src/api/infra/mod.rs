//! `infrastructure.cluster.x-k8s.io/v1alpha1`: our own API, implementing CAPI's infrastructure contract v1beta2
//! (`docs/infrastructure-provider.md`).
//!
//! Every CRD carries the label `cluster.x-k8s.io/v1beta2: v1alpha1` (how CAPI core finds our version) and the
//! category `cluster-api`.

mod cluster;
mod identity;
mod machine;

pub use cluster::*;
pub use identity::*;
pub use machine::*;

/// The API group.
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// Our version of it.
pub const VERSION: &str = "v1alpha1";
/// The CAPI contract we implement, as `clusterctl` and `mcm version` name it.
pub const CONTRACT: &str = "v1beta2";
/// The CRD label by which CAPI core maps the contract to our API version.
pub const CONTRACT_LABEL: (&str, &str) = ("cluster.x-k8s.io/v1beta2", "v1alpha1");
