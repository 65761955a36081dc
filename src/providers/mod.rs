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

#[cfg(test)]
mod tests {
    use super::DriverRegistry;

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
}
