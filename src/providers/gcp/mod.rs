//! The GCP Compute Engine driver (provider `GCP`, cargo feature `gcp`), compatible with Gardener's GCP
//! MachineClasses (machine-controller-manager-provider-gcp); reference in `docs/providers/gcp.md`.
//!
//! - [`spec`]: the providerSpec, parsed strictly (every error names its field).
//! - [`credentials`]: what the class secret holds (service-account key or workload-identity config, project,
//!   `userData`, `endpoint`), redacted in `Debug`.
//! - [`request`]: pure translations to and from Compute's JSON (the instance body, providerIDs, ownership by
//!   network tags, addresses, volume IDs).
//! - [`errors`]: HTTP and operation errors to MCM codes.
//! - [`machine_types`]: vCPU, memory, GPU and architecture per machine type, for scale from zero.
//! - [`GcpDriver`]: the I/O, one Compute client per endpoint and credentials.

pub mod credentials;
mod driver;
pub mod errors;
pub mod machine_types;
pub mod request;
pub mod spec;

pub use driver::{GcpDriver, GcpSettings, PROVIDER};
pub use request::CSI_DRIVER;
pub use spec::ProviderSpec;

/// Log targets capped at `info` unless the log filter names them. google-cloud-auth logs nothing; with
/// `GOOGLE_CLOUD_RUST_LOGGING=true` the Compute client wraps every call in a debug-level span holding the request
/// (an instance insert carries the user data, the node's bootstrap token) and logs the response at debug level.
pub const QUIET_SDK_TARGETS: &[&str] = &[
    "google_cloud_compute_v1",
    "google_cloud_gax",
    "google_cloud_gax_internal",
    "google_cloud_auth",
    "google_cloud_lro",
];
