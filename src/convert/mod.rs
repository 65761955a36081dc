//! Conversion between the hub (MCM's `machine.sapcloud.io/v1alpha1` types) and Cluster API's
//! `cluster.x-k8s.io/v1beta2` types (`docs/conversion.md`, `docs/architecture.md`).
//!
//! Every function here is pure and total: it never fails and never reads a clock. What one side cannot express is
//! carried in one annotation of the other side, as CAPI's own conversions do:
//!
//! - on CAPI objects, MCM-only fields live in [`MCM_DATA`] (on MachineDeployments and MachineSets) and
//!   [`MCM_MACHINE_DATA`] (on machine templates, so it travels into the Machines);
//! - on hub objects, CAPI-only fields live in [`CAPI_DATA`] and [`CAPI_MACHINE_DATA`].
//!
//! Round trips (property-tested in `proptests`): MCM -> CAPI -> MCM and CAPI -> MCM -> CAPI return the object
//! they started from, for objects in canonical form, i.e. where an empty map, list or label selector is written
//! as absent (Kubernetes treats both alike) and none of the four annotations above is set by hand. The template's
//! `spec.class` of the hub is the CAPI `infrastructureRef` (`kind: MCMMachineTemplate` for CAPI objects, `kind:
//! MachineClass` for objects converted from MCM), so the rollout logic sees a new class when CAPI points a
//! MachineDeployment at a new template.
//!
//! This module imports `api` only (MCM's names are `api::mcm::names`): no client, no controller. MCMMachines (with
//! their owning CAPI Machine) convert in [`machine`].

mod data;
mod deployment;
pub mod machine;
mod machine_set;
pub(crate) use machine_set::condition_to_capi;
pub mod machine_view;
mod template;

#[cfg(test)]
mod proptests;

pub use data::{CAPI_DATA, CAPI_MACHINE_DATA, MCM_DATA, MCM_MACHINE_DATA, is_conversion_annotation};
pub use deployment::{
    apply_capi_deployment_defaults, capi_rollout_after, deployment_from_capi, deployment_status_from_capi,
    deployment_status_to_capi, deployment_to_capi,
};
pub use machine_set::{
    capi_deletion_order, machine_set_from_capi, machine_set_to_capi, set_status_from_capi, set_status_to_capi,
};
pub use template::{class_of_reference, reference_of_class, template_from_capi, template_to_capi};
