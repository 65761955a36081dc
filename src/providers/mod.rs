//! Cloud drivers behind one [`Driver`] trait, mirroring MCM's provider contract
//! (`docs/machine-lifecycle.md`): create, initialize, delete, status, list, volume IDs.
//!
//! Drivers know nothing of Kubernetes controllers: they get the machine, its class and the merged secret data,
//! and answer with results or an [`DriverError`] carrying one of MCM's [`Code`]s, whose message is safe to show
//! (never a credential). The [`DriverRegistry`] picks a driver by `MachineClass.provider`.

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "azure")]
pub mod azure;
pub mod conformance;
mod error;
#[cfg(any(feature = "aws", feature = "azure", feature = "gcp"))]
#[allow(dead_code)] // each cloud driver reads a part of it
mod fields;
#[cfg(feature = "gcp")]
pub mod gcp;
pub mod identity;
pub mod inmemory;
pub mod limit;
#[cfg(any(feature = "aws", feature = "azure", feature = "gcp"))]
pub mod secrets;
mod types;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use error::{Code, DriverError};
pub use types::*;

/// A cloud driver. Every method is idempotent; see `docs/adding-a-provider.md`.
#[async_trait::async_trait]
pub trait Driver: Send + Sync {
    /// The `MachineClass.provider` value this driver serves (e.g. `AWS`, `InMemory`).
    fn provider(&self) -> &str;

    /// Creates the VM for a machine, or returns the existing one if it was created before.
    async fn create_machine(&self, request: &MachineRequest) -> Result<CreateMachineResponse, DriverError>;

    /// Finishes setting up a created VM; `Unimplemented` when there is nothing to do.
    async fn initialize_machine(&self, request: &MachineRequest) -> Result<InitializeMachineResponse, DriverError>;

    /// Deletes the VM (and what belongs to it); an absent VM counts as deleted.
    async fn delete_machine(&self, request: &MachineRequest) -> Result<DeleteMachineResponse, DriverError>;

    /// The VM's state: `NotFound` when there is none, `Uninitialized` when it awaits initialization,
    /// `OutOfRange` when several VMs claim the machine.
    async fn get_machine_status(&self, request: &MachineRequest) -> Result<MachineStatusResponse, DriverError>;

    /// The VMs this class's cluster and role own: providerID -> machine name.
    async fn list_machines(&self, request: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError>;

    /// The cloud volume IDs behind persistent volumes this driver understands (others are skipped).
    async fn get_volume_ids(&self, request: &GetVolumeIdsRequest) -> Result<Vec<String>, DriverError>;
}

/// Drivers by provider name.
#[derive(Clone, Default)]
pub struct DriverRegistry {
    drivers: BTreeMap<String, Arc<dyn Driver>>,
}

impl DriverRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a driver under its provider name.
    pub fn register(&mut self, driver: Arc<dyn Driver>) {
        self.drivers.insert(driver.provider().to_string(), driver);
    }

    /// Adds every cloud driver compiled into this binary (the cargo features `aws`, `azure`, `gcp`), each with its
    /// endpoints from the environment or the class secret. `mcm run` and `mcm dev` share this list.
    pub fn register_cloud_drivers(&mut self) {
        #[cfg(feature = "aws")]
        self.register(Arc::new(aws::AwsDriver::new()));
        #[cfg(feature = "azure")]
        self.register(Arc::new(azure::AzureDriver::new()));
        #[cfg(feature = "gcp")]
        self.register(Arc::new(gcp::GcpDriver::new()));
    }

    /// The driver for `provider`, or `InvalidArgument` naming the providers that exist.
    pub fn get(&self, provider: &str) -> Result<Arc<dyn Driver>, DriverError> {
        self.drivers.get(provider).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.drivers.keys().map(String::as_str).collect();
            DriverError::new(
                Code::InvalidArgument,
                format!("no driver for provider {provider:?} (this binary has: {})", known.join(", ")),
            )
        })
    }

    /// The provider names served.
    pub fn providers(&self) -> Vec<String> {
        self.drivers.keys().cloned().collect()
    }
}

/// The log targets of every cloud SDK compiled into this binary (each driver's `QUIET_SDK_TARGETS`, behind its
/// cargo feature) that print credentials, tokens or user data below `info`. A new driver adds its list here, next
/// to [`DriverRegistry::register_cloud_drivers`].
pub fn quiet_sdk_targets() -> Vec<&'static str> {
    let per_sdk: &[&[&str]] = &[
        #[cfg(feature = "aws")]
        aws::QUIET_SDK_TARGETS,
        #[cfg(feature = "azure")]
        azure::QUIET_SDK_TARGETS,
        #[cfg(feature = "gcp")]
        gcp::QUIET_SDK_TARGETS,
    ];
    per_sdk.concat()
}

/// `target=info` for each of [`quiet_sdk_targets`] that `filter` (the log filter in use, `RUST_LOG` or
/// `--log-level`) does not mention: added to that filter, they hold the SDKs at `info` however broad it is, while
/// naming a target (`RUST_LOG=debug,aws_smithy_runtime=debug`) still shows its output.
pub fn quiet_sdk_directives(filter: &str) -> Vec<tracing_subscriber::filter::Directive> {
    quiet_directives(&quiet_sdk_targets(), filter).collect()
}

/// `target=info` for each of `targets` that `filter` does not mention.
fn quiet_directives<'a>(
    targets: &'a [&'a str],
    filter: &'a str,
) -> impl Iterator<Item = tracing_subscriber::filter::Directive> + 'a {
    targets
        .iter()
        .filter(move |target| !filter.contains(**target))
        .filter_map(|target| format!("{target}=info").parse().ok())
}

#[cfg(test)]
mod tests {
    use super::{DriverRegistry, quiet_sdk_directives, quiet_sdk_targets};

    #[test]
    fn the_cloud_drivers_of_the_build_are_registered() {
        let mut registry = DriverRegistry::new();
        registry.register_cloud_drivers();
        let compiled =
            [(cfg!(feature = "aws"), "AWS"), (cfg!(feature = "azure"), "Azure"), (cfg!(feature = "gcp"), "GCP")];
        for (on, provider) in compiled {
            assert_eq!(registry.get(provider).is_ok(), on, "{provider}");
        }
        assert!(registry.get("InMemory").is_err(), "the in-memory cloud is registered by whoever owns one");
    }

    #[test]
    fn every_compiled_sdk_is_held_at_info_unless_named() {
        let targets = quiet_sdk_targets();
        let expected: Vec<String> = targets.iter().map(|t| format!("{t}=info")).collect();
        let all: Vec<String> = quiet_sdk_directives("trace").iter().map(ToString::to_string).collect();
        assert_eq!(all, expected, "every target parses as a directive");
        for (on, target) in [
            (cfg!(feature = "aws"), "aws_smithy_runtime"),
            (cfg!(feature = "aws"), "aws_sigv4"),
            (cfg!(feature = "azure"), "azure_core"),
            (cfg!(feature = "gcp"), "google_cloud_compute_v1"),
        ] {
            assert_eq!(targets.contains(&target), on, "{target}");
            if on {
                let named: Vec<String> =
                    quiet_sdk_directives(&format!("info,{target}=trace")).iter().map(ToString::to_string).collect();
                assert!(!named.contains(&format!("{target}=info")), "{target} named: {named:?}");
                assert_eq!(named.len(), expected.len() - 1, "only {target} is let through: {named:?}");
            }
        }
    }
}
