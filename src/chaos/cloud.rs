//! The cloud's faults in a chaos run: a [`Driver`] in front of the in-memory one that fails a share of creates
//! (some after the VM was made, as when the answer is lost), throttles a share of every call, and counts what
//! it did. Seeded, so a run's draws repeat.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::providers::{
    Code, CreateMachineResponse, DeleteMachineResponse, Driver, DriverError, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineRequest, MachineStatusResponse, NodeCapacity,
};

/// How often the cloud misbehaves (each 0.0–1.0).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CloudFaultRates {
    /// Creates that fail: a third with a quota error, a third with an internal error before anything was
    /// made, a third with `Unavailable` after the VM was made.
    pub create_failures: f64,
    /// Any call answered `ResourceExhausted` as a throttled API answers.
    pub throttling: f64,
}

/// What the faulty cloud did, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CloudFaultCounts {
    /// Creates failed with a quota error.
    pub quota: u64,
    /// Creates failed before the VM was made.
    pub failed_creates: u64,
    /// Creates that made the VM and answered an error.
    pub lost_answers: u64,
    /// Calls throttled.
    pub throttled: u64,
}

impl CloudFaultCounts {
    /// What was done since `before`.
    pub fn minus(&self, before: &CloudFaultCounts) -> CloudFaultCounts {
        CloudFaultCounts {
            quota: self.quota - before.quota,
            failed_creates: self.failed_creates - before.failed_creates,
            lost_answers: self.lost_answers - before.lost_answers,
            throttled: self.throttled - before.throttled,
        }
    }

    /// Every fault.
    pub fn total(&self) -> u64 {
        self.quota + self.failed_creates + self.lost_answers + self.throttled
    }
}

#[derive(Default)]
struct Counters {
    quota: AtomicU64,
    failed_creates: AtomicU64,
    lost_answers: AtomicU64,
    throttled: AtomicU64,
}

/// The in-memory driver with faults in front.
pub struct FaultyCloud {
    inner: Arc<dyn Driver>,
    rates: Mutex<CloudFaultRates>,
    rng: Mutex<StdRng>,
    counters: Counters,
}

/// What one create draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CreateFault {
    Quota,
    Failed,
    LostAnswer,
}

impl FaultyCloud {
    /// `inner` with no faults yet; draws follow `seed`.
    pub fn new(inner: Arc<dyn Driver>, seed: u64) -> Self {
        FaultyCloud {
            inner,
            rates: Mutex::new(CloudFaultRates::default()),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            counters: Counters::default(),
        }
    }

    /// Sets the rates (zero ends the faults).
    pub fn set_rates(&self, rates: CloudFaultRates) {
        *lock(&self.rates) = rates;
    }

    /// Reseeds the draws (at the start of a trial).
    pub fn seed(&self, seed: u64) {
        *lock(&self.rng) = StdRng::seed_from_u64(seed);
    }

    /// What it did so far.
    pub fn counts(&self) -> CloudFaultCounts {
        let c = &self.counters;
        CloudFaultCounts {
            quota: c.quota.load(Ordering::Relaxed),
            failed_creates: c.failed_creates.load(Ordering::Relaxed),
            lost_answers: c.lost_answers.load(Ordering::Relaxed),
            throttled: c.throttled.load(Ordering::Relaxed),
        }
    }

    fn throttled(&self) -> Result<(), DriverError> {
        let share = lock(&self.rates).throttling;
        if share > 0.0 && lock(&self.rng).random::<f64>() < share {
            self.counters.throttled.fetch_add(1, Ordering::Relaxed);
            return Err(DriverError::new(Code::ResourceExhausted, "Throttling: rate exceeded (injected by mcm chaos)"));
        }
        Ok(())
    }

    fn create_fault(&self) -> Option<CreateFault> {
        let share = lock(&self.rates).create_failures;
        let mut rng = lock(&self.rng);
        if share <= 0.0 || rng.random::<f64>() >= share {
            return None;
        }
        Some(match rng.random_range(0..3) {
            0 => CreateFault::Quota,
            1 => CreateFault::Failed,
            _ => CreateFault::LostAnswer,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every guarded value is written whole, so a panic elsewhere cannot leave it half-written.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[async_trait::async_trait]
impl Driver for FaultyCloud {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    async fn create_machine(&self, request: &MachineRequest) -> Result<CreateMachineResponse, DriverError> {
        self.throttled()?;
        match self.create_fault() {
            None => self.inner.create_machine(request).await,
            Some(CreateFault::Quota) => {
                self.counters.quota.fetch_add(1, Ordering::Relaxed);
                Err(DriverError::new(
                    Code::ResourceExhausted,
                    "QuotaExceeded: the region's instance quota is used up (injected by mcm chaos)",
                ))
            }
            Some(CreateFault::Failed) => {
                self.counters.failed_creates.fetch_add(1, Ordering::Relaxed);
                Err(DriverError::new(Code::Internal, "InternalError: the create failed (injected by mcm chaos)"))
            }
            Some(CreateFault::LostAnswer) => {
                self.counters.lost_answers.fetch_add(1, Ordering::Relaxed);
                self.inner.create_machine(request).await?;
                Err(DriverError::new(
                    Code::Unavailable,
                    "the connection closed before the answer (injected by mcm chaos; the VM was made)",
                ))
            }
        }
    }

    async fn initialize_machine(&self, request: &MachineRequest) -> Result<InitializeMachineResponse, DriverError> {
        self.throttled()?;
        self.inner.initialize_machine(request).await
    }

    async fn delete_machine(&self, request: &MachineRequest) -> Result<DeleteMachineResponse, DriverError> {
        self.throttled()?;
        self.inner.delete_machine(request).await
    }

    async fn get_machine_status(&self, request: &MachineRequest) -> Result<MachineStatusResponse, DriverError> {
        self.throttled()?;
        self.inner.get_machine_status(request).await
    }

    async fn list_machines(&self, request: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError> {
        self.throttled()?;
        self.inner.list_machines(request).await
    }

    async fn get_volume_ids(&self, request: &GetVolumeIdsRequest) -> Result<Vec<String>, DriverError> {
        self.throttled()?;
        self.inner.get_volume_ids(request).await
    }

    fn capacity_of(&self, provider_spec: &serde_json::Value) -> Option<NodeCapacity> {
        self.inner.capacity_of(provider_spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::inmemory::{self, InMemoryCloud, InMemoryDriver};
    use crate::providers::{MachineInfo, SecretData};

    fn request(name: &str) -> MachineRequest {
        MachineRequest {
            machine: MachineInfo { name: name.into(), namespace: "chaos".into(), ..Default::default() },
            class: inmemory::class("c", "chaos", serde_json::json!({"bootSeconds": 0})),
            secret: SecretData::default(),
            last_known_state: None,
        }
    }

    #[tokio::test]
    async fn creates_fail_about_as_often_as_asked_and_lost_answers_leave_the_vm() {
        let cloud = InMemoryCloud::with_seed(1);
        let faulty = FaultyCloud::new(Arc::new(InMemoryDriver::new(cloud.clone())), 9);
        faulty.set_rates(CloudFaultRates { create_failures: 0.5, throttling: 0.0 });
        let mut failed = 0;
        for i in 0..300 {
            if faulty.create_machine(&request(&format!("m-{i}"))).await.is_err() {
                failed += 1;
            }
        }
        let counts = faulty.counts();
        assert!((100..200).contains(&failed), "{failed}");
        assert_eq!(counts.quota + counts.failed_creates + counts.lost_answers, failed);
        assert!(counts.quota > 0 && counts.failed_creates > 0 && counts.lost_answers > 0, "{counts:?}");
        // Every successful create and every lost answer made a VM; the others made none.
        assert_eq!(cloud.live_vms().len() as u64, 300 - counts.quota - counts.failed_creates);
    }

    #[tokio::test]
    async fn throttling_answers_resource_exhausted_and_zero_rates_end_the_faults() {
        let cloud = InMemoryCloud::with_seed(1);
        let faulty = FaultyCloud::new(Arc::new(InMemoryDriver::new(cloud)), 3);
        faulty.set_rates(CloudFaultRates { create_failures: 0.0, throttling: 1.0 });
        let e = faulty.get_machine_status(&request("m")).await.unwrap_err();
        assert_eq!(e.code, Code::ResourceExhausted);
        faulty.set_rates(CloudFaultRates::default());
        assert_eq!(faulty.get_machine_status(&request("m")).await.unwrap_err().code, Code::NotFound);
        assert_eq!(faulty.counts().throttled, 1);
    }

    #[tokio::test]
    async fn the_same_seed_fails_the_same_calls() {
        let run = |seed| async move {
            let faulty = FaultyCloud::new(Arc::new(InMemoryDriver::new(InMemoryCloud::with_seed(1))), seed);
            faulty.set_rates(CloudFaultRates { create_failures: 0.3, throttling: 0.1 });
            let mut out = Vec::new();
            for i in 0..50 {
                out.push(faulty.create_machine(&request(&format!("m-{i}"))).await.is_ok());
            }
            out
        };
        assert_eq!(run(5).await, run(5).await);
    }
}
