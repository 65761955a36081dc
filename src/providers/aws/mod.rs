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
pub use instance_types::{InstanceCapacity, capacity};
pub use request::CSI_DRIVER;
pub use spec::ProviderSpec;
