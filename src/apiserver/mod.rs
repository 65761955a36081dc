//! The embedded Kubernetes-compatible API server: the engine under `mcm dev`, every integration test and every
//! benchmark. It knows nothing of machines: it serves built-in kinds and whatever CRDs are applied to it.

pub mod schema;
pub mod selectors;
pub mod strategic_merge;
