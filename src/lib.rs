//! cluster-api-provider-mcm: Gardener's Machine Controller Manager as a Cluster API infrastructure provider.
//!
//! Layers (see `docs/architecture.md`): [`cli`] parses the command line; [`api`] holds the types of every API
//! group we touch and the CRDs generated from them; [`apiserver`] is the embedded Kubernetes-compatible API server.

pub mod api;
pub mod apiserver;
pub mod bench;
pub mod chaos;
pub mod cli;
pub mod controllers;
pub mod convert;
pub mod dev;
pub mod drain;
#[doc(hidden)]
pub mod fuzzing;
pub mod lifecycle;
pub mod metrics;
pub mod migrate;
pub mod providers;
pub mod run;
pub mod status;
pub mod telemetry;
pub mod webhooks;
