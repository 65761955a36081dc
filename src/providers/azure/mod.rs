//! The Azure driver (provider `Azure`, cargo feature `azure`), compatible with Gardener's Azure MachineClasses
//! (machine-controller-manager-provider-azure); reference in `docs/providers/azure.md`.
//!
//! - [`spec`]: the providerSpec, parsed strictly (every error names its field).
//! - [`credentials`]: what the class secret holds (service principal, subscription, `userData`, endpoint
//!   overrides), redacted in `Debug`.
//! - [`request`]: pure translations (resource names and IDs, providerIDs, NIC and VM bodies in ARM's JSON shape,
//!   ownership, machine names from listed resources, volume IDs).
//! - [`errors`]: ARM answers to MCM codes.
//! - [`sizes`]: vCPU, memory, GPU and architecture per VM size, for scale from zero.
//! - [`AzureDriver`]: the I/O, over the legacy Azure SDK (azure_mgmt_compute / azure_mgmt_network 0.21), with its
//!   own bounded polling of long-running operations.

pub mod credentials;
mod driver;
pub mod errors;
pub mod request;
pub mod sizes;
pub mod spec;

pub use driver::{AzureDriver, AzureSettings, PROVIDER};
pub use request::CSI_DRIVER;
pub use spec::ProviderSpec;

/// Log targets capped at `info` unless the log filter names them: at trace level azure_core 0.21 prints each request
/// with its headers, and its header redaction is inverted (it shows `Authorization`, the bearer token, and hides
/// the rest).
pub const QUIET_SDK_TARGETS: &[&str] = &["azure_core", "azure_identity", "azure_mgmt_compute", "azure_mgmt_network"];

/// `filter` with [`QUIET_SDK_TARGETS`] capped at `info`, except those `rust_log` (the filter text) mentions.
pub fn quiet_sdk_logs(filter: tracing_subscriber::EnvFilter, rust_log: &str) -> tracing_subscriber::EnvFilter {
    super::quiet_directives(QUIET_SDK_TARGETS, rust_log).fold(filter, tracing_subscriber::EnvFilter::add_directive)
}
