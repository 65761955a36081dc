//! API types of the three groups we serve or read, and the CRDs generated from them.
//!
//! - [`mcm`]: `machine.sapcloud.io/v1alpha1`, Gardener MCM's API, byte-compatible with MCM's CRDs.
//! - [`capi`]: the subset of `cluster.x-k8s.io/v1beta2` we read and patch (CAPI core owns those CRDs).
//! - [`infra`]: `infrastructure.cluster.x-k8s.io/v1alpha1`, our own API implementing CAPI contract v1beta2.
//!
//! This module knows nothing of controllers, drivers or the API server.

// `printcolumn(type_ = "string", ...)` repeated per column reads to clippy as a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

pub mod capi;
pub mod crds;
pub mod duration;
pub mod infra;
pub mod mcm;
mod schema;
mod string_enum;

pub use duration::Duration;

#[cfg(test)]
mod round_trip_tests;
