//! The AWS EC2 driver (provider `AWS`, cargo feature `aws`), compatible with Gardener's AWS MachineClasses
//! (machine-controller-manager-provider-aws); reference in `docs/providers/aws.md`.
//!
//! - [`spec`]: the providerSpec, parsed strictly (every error names its field).
//! - [`credentials`]: what the class secret holds (keys, workload identity, `userData`, `endpoint`), redacted in
//!   `Debug`.
//! - [`request`]: pure translations to and from EC2's types (RunInstances parts, providerIDs, tags, addresses,
//!   volume IDs).
//! - [`errors`]: EC2 error codes to MCM codes.
//! - [`instance_types`]: vCPU, memory, GPU and architecture per instance type, for node templates.
//! - [`AwsDriver`]: the I/O, one EC2 client per region, endpoint and credentials.

pub mod credentials;
mod driver;
pub mod errors;
pub mod instance_types;
pub mod request;
pub mod spec;

pub use driver::{AwsDriver, AwsSettings, PROVIDER};
pub use instance_types::{InstanceCapacity, capacity, capacity_of};
pub use request::CSI_DRIVER;
pub use spec::ProviderSpec;

/// Log targets capped at `info` unless the log filter names them: at debug level the SDK's orchestrator prints the
/// request identity, access key ID included; at trace level aws-sigv4 prints the signing parameters and the
/// canonical request, whose `x-amz-security-token` header is the session token of temporary credentials.
pub const QUIET_SDK_TARGETS: &[&str] =
    &["aws_smithy_runtime", "aws_smithy_runtime_api", "aws_config", "aws_sigv4", "aws_runtime"];

/// `filter` with [`QUIET_SDK_TARGETS`] capped at `info`, except those `rust_log` (the filter text) mentions,
/// so asking for the SDK's debug output explicitly still works.
pub fn quiet_sdk_logs(filter: tracing_subscriber::EnvFilter, rust_log: &str) -> tracing_subscriber::EnvFilter {
    super::quiet_directives(QUIET_SDK_TARGETS, rust_log).fold(filter, tracing_subscriber::EnvFilter::add_directive)
}
