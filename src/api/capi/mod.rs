//! `cluster.x-k8s.io/v1beta2`: the fields of CAPI core's objects that we read and write.
//!
//! CAPI core owns these CRDs (`third_party/cluster-api/crds/`). Our types model what our controllers
//! use and carry everything else in `extra` maps, so reading and writing back never drops a field; still,
//! write with patches, never by replacing an object we do not own.

mod cluster;
mod common;
mod machine;
mod machine_deployment;
mod machine_health_check;
mod machine_set;

pub use cluster::*;
pub use common::*;
pub use machine::*;
pub use machine_deployment::*;
pub use machine_health_check::*;
pub use machine_set::*;

/// The API group.
pub const GROUP: &str = "cluster.x-k8s.io";
/// The version we read and write (the storage version of CAPI v1.11+).
pub const VERSION: &str = "v1beta2";

/// Label carrying the owning Cluster's name on Machines and infrastructure objects.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Annotation that pauses reconciliation of one object.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// Annotation marking a Machine to be deleted first on scale-down.
pub const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";
/// Annotation marking infrastructure managed by something other than its provider.
pub const MANAGED_BY_ANNOTATION: &str = "cluster.x-k8s.io/managed-by";
/// Label on MachineSets (and their Machines): the MachineDeployment they belong to.
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// Label on Machines: the MachineSet they belong to.
pub const SET_NAME_LABEL: &str = "cluster.x-k8s.io/set-name";
/// Annotation on an infrastructure machine: the name of the template it was cloned from.
pub const CLONED_FROM_NAME_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-name";
/// Annotation on an infrastructure machine: `Kind.group` of the template it was cloned from.
pub const CLONED_FROM_GROUPKIND_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-groupkind";
