//! The embedded Kubernetes-compatible API server: the engine under `mcm dev`, every integration test and every
//! benchmark. It knows nothing of machines: it serves built-in kinds and whatever CRDs are applied to it.
//!
//! Start one with [`ApiServer::start`]; it hands back its URL, a kubeconfig and a `kube::Client`. Many can run in
//! one process. What it does not do (compared with kube-apiserver) is listed in `docs/apiserver.md`.

pub(crate) mod admission;
mod auth;
pub(crate) mod context;
mod convert;
mod discovery;
pub mod error;
pub mod faults;
pub(crate) mod field_validation;
mod handlers;
pub(crate) mod managed;
pub mod object;
pub mod openapi;
pub(crate) mod patch;
pub mod persist;
pub mod printing;
mod protobuf;
pub(crate) mod request;
pub mod resources;
mod response;
pub mod schema;
pub mod selectors;
mod server;
mod state;
pub mod store;
pub mod stored;
pub mod strategic_merge;
mod subresources;
pub mod tls;
mod watch;
mod webhook;

pub use auth::{BearerToken, TokenError};
pub use server::{ApiServer, ClientError, StartError, write_private_file};
pub use state::{ServerConfig, Shared};
pub use tls::{CertificateAuthority, TlsError};
