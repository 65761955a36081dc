//! Pure decisions on MCM's hub types: given what was observed (a Machine, its class, its
//! Node, a driver's answer), the time `now` and the configuration, what to write and when to look again. No client,
//! no clock, no randomness in here; the controllers in [`crate::controllers`] observe and act.
//!
//! - [`config`]: MCM's flags and per-machine overrides; [`retry`]: back-off per driver error code.
//! - [`create`]: the create flow, a state machine ([`create::next`]); [`health`]: join, health and the timeouts;
//!   [`replacement`]: meltdown protection; [`requeue`]: when a machine flow looks again; [`in_place`]: a
//!   machine's in-place update (Node condition, drain, hand-over to the node agent).
//! - [`delete`]: the deletion flow keyed on MCM's `lastOperation.description` steps.
//! - [`node_sync`]: the node template's three-way merge onto the Node.
//! - [`class`]: MachineClass and Secret finalizers, node template validation; [`admission`]: what the admission
//!   webhooks validate and default.
//! - [`userdata`]: secret merging, `userData` templating, bootstrap tokens.
//! - [`status`]: the status fields we write and the events that go with them; [`names`]: MCM's texts (its names are
//!   [`crate::api::mcm::names`]).
//! - [`machine_set`], [`machine_deployment`], [`deletion_order`], [`freeze`]: MachineSet and MachineDeployment
//!   decisions (replicas, rollouts, deletion order, overshoot freeze; see `docs/rollouts.md`); [`claim`]: which
//!   objects a set or deployment controls, adopts or releases.
//! - [`safety`]: orphan VMs, Nodes no Machine manages, and the API-server freeze.
//! - [`capi_machine`], [`capi_cluster`]: the Machine and Cluster decisions of mode "CAPI with MCM core".
//! - [`infra`]: what the CAPI infrastructure provider adds on top (gates, conditions, placement, templates);
//!   [`tenancy`]: whether an MCMMachine may use the Secrets its class names (MCMClusterIdentity).
//!
//! Imports only `api`, `providers::contract` (the driver contract's types and codes, never a cloud module) and
//! `drain` (its options type).

pub mod admission;
pub mod capi_bootstrap;
pub mod capi_cluster;
pub mod capi_health_check;
pub mod capi_machine;
pub mod capi_replicas;
pub mod claim;
pub mod class;
pub mod clock;
pub mod config;
pub mod create;
pub mod delete;
pub mod deletion_order;
pub mod freeze;
pub mod health;
pub mod in_place;
pub mod infra;
pub mod machine_deployment;
pub mod machine_set;
pub mod names;
pub mod node_sync;
mod object_meta;
pub mod preservation;
pub(crate) use object_meta::merge_patch_of;
pub mod replacement;
pub mod requeue;
pub mod retry;
pub mod safety;
pub mod status;
pub mod tenancy;
pub mod userdata;

pub use config::{Effective, MachineConfig};
pub use object_meta::status_patch;
pub use retry::{Backoff, RetryClass, RetryPolicy};
