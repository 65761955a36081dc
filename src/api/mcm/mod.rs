//! `machine.sapcloud.io/v1alpha1`: Gardener MCM's API, shaped exactly as MCM's CRDs
//! (`third_party/machine-controller-manager/crds/`), so existing MCM objects load unchanged.
//!
//! Field-by-field semantics: `docs/machine-lifecycle.md`.

mod machine;
mod machine_class;
mod machine_deployment;
mod machine_set;
pub mod names;
mod shared;

pub use machine::*;
pub use machine_class::*;
pub use machine_deployment::*;
pub use machine_set::*;
pub use shared::*;

/// The API group.
pub const GROUP: &str = "machine.sapcloud.io";
/// The only served version.
pub const VERSION: &str = "v1alpha1";
