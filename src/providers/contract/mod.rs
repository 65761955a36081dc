//! The driver contract, mirroring MCM's provider contract (`docs/machine-lifecycle.md`): the [`Driver`] trait
//! (create, initialize, delete, status, list, volume IDs), what drivers are asked and answer (`types.rs`), and
//! [`DriverError`] carrying one of MCM's [`Code`]s (`error.rs`).
//!
//! Drivers know nothing of Kubernetes controllers: they get the machine, its class and the merged secret data,
//! and answer with results or a [`DriverError`] whose message is safe to show (never a credential). This module
//! names no cloud module, so `lifecycle` can depend on it without seeing a cloud; [`identity`] compares
//! providerIDs as strings, with no cloud SDK.

mod error;
pub mod identity;
mod types;

use std::collections::BTreeMap;

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

    /// What a node of a class with this providerSpec offers (scale from zero), from the instance type or size it
    /// names; `None` when the driver does not know. Pure: no cloud call.
    fn capacity_of(&self, provider_spec: &serde_json::Value) -> Option<NodeCapacity> {
        let _ = provider_spec;
        None
    }
}
