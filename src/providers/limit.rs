//! [`RateLimitedDriver`]: a per-cloud call rate limit (`mcm run --cloud-api-qps/--cloud-api-burst`) around any
//! driver, so a controller storm cannot exhaust a cloud account's API quota. Calls wait for a token; none fails.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use super::{
    CreateMachineResponse, DeleteMachineResponse, Driver, DriverError, DriverRegistry, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineRequest, MachineStatusResponse,
};

/// A driver whose calls wait for a token of one bucket (per wrapped driver, i.e. per provider).
pub struct RateLimitedDriver {
    inner: Arc<dyn Driver>,
    limiter: DefaultDirectRateLimiter,
}

/// A token bucket of `qps` tokens per second on average and `burst` at once (at least 1), as client-go's flags
/// describe one; `None` when `qps` is not positive (no limit). The kube clients' limit uses it too.
pub fn token_bucket(qps: f64, burst: u32) -> Option<DefaultDirectRateLimiter> {
    if !(qps.is_finite() && qps > 0.0) {
        return None;
    }
    let period = Duration::from_secs_f64(1.0 / qps).max(Duration::from_nanos(1));
    let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
    Some(RateLimiter::direct(Quota::with_period(period)?.allow_burst(burst)))
}

impl RateLimitedDriver {
    /// Wraps `inner` with `qps` calls per second on average and `burst` at once; `None` when `qps` is not
    /// positive (no limit).
    pub fn new(inner: Arc<dyn Driver>, qps: f64, burst: u32) -> Option<Self> {
        token_bucket(qps, burst).map(|limiter| RateLimitedDriver { inner, limiter })
    }
}

#[async_trait::async_trait]
impl Driver for RateLimitedDriver {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    async fn create_machine(&self, request: &MachineRequest) -> Result<CreateMachineResponse, DriverError> {
        self.limiter.until_ready().await;
        self.inner.create_machine(request).await
    }

    async fn initialize_machine(&self, request: &MachineRequest) -> Result<InitializeMachineResponse, DriverError> {
        self.limiter.until_ready().await;
        self.inner.initialize_machine(request).await
    }

    async fn delete_machine(&self, request: &MachineRequest) -> Result<DeleteMachineResponse, DriverError> {
        self.limiter.until_ready().await;
        self.inner.delete_machine(request).await
    }

    async fn get_machine_status(&self, request: &MachineRequest) -> Result<MachineStatusResponse, DriverError> {
        self.limiter.until_ready().await;
        self.inner.get_machine_status(request).await
    }

    async fn list_machines(&self, request: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError> {
        self.limiter.until_ready().await;
        self.inner.list_machines(request).await
    }

    async fn get_volume_ids(&self, request: &GetVolumeIdsRequest) -> Result<Vec<String>, DriverError> {
        self.limiter.until_ready().await;
        self.inner.get_volume_ids(request).await
    }
}

/// The same drivers, each behind its own bucket (unchanged when `qps` is not positive).
pub fn rate_limited(drivers: &DriverRegistry, qps: f64, burst: u32) -> DriverRegistry {
    let mut out = DriverRegistry::new();
    for provider in drivers.providers() {
        if let Ok(driver) = drivers.get(&provider) {
            match RateLimitedDriver::new(driver.clone(), qps, burst) {
                Some(limited) => out.register(Arc::new(limited)),
                None => out.register(driver),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::inmemory::{InMemoryCloud, InMemoryDriver};

    #[tokio::test]
    async fn calls_past_the_burst_wait_for_a_token() {
        let cloud = InMemoryCloud::with_seed(3);
        let driver = RateLimitedDriver::new(Arc::new(InMemoryDriver::new(cloud.clone())), 0.001, 2).unwrap();
        let list = ListMachinesRequest {
            class: crate::providers::inmemory::class("c", "dev", serde_json::json!({})),
            ..Default::default()
        };
        driver.list_machines(&list).await.unwrap();
        driver.list_machines(&list).await.unwrap();
        let third = tokio::time::timeout(Duration::from_millis(100), driver.list_machines(&list)).await;
        assert!(third.is_err(), "the third call waits (one token per 1000 s)");
        assert_eq!(cloud.stats().lists, 2);
        assert!(RateLimitedDriver::new(Arc::new(InMemoryDriver::new(cloud)), 0.0, 2).is_none());
    }

    #[tokio::test]
    async fn tokens_come_back_at_the_rate() {
        // 20 per second, burst 1: the second call waits about 50 ms, not longer than a second.
        let cloud = InMemoryCloud::with_seed(4);
        let driver = RateLimitedDriver::new(Arc::new(InMemoryDriver::new(cloud.clone())), 20.0, 1).unwrap();
        let list = ListMachinesRequest {
            class: crate::providers::inmemory::class("c", "dev", serde_json::json!({})),
            ..Default::default()
        };
        let started = std::time::Instant::now();
        driver.list_machines(&list).await.unwrap();
        tokio::time::timeout(Duration::from_secs(1), driver.list_machines(&list)).await.unwrap().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(40), "waited {:?}", started.elapsed());
        assert_eq!(cloud.stats().lists, 2);
    }

    #[test]
    fn only_positive_rates_make_a_bucket() {
        for (qps, burst, limited) in [(0.0, 10, false), (-1.0, 10, false), (f64::NAN, 1, false), (5.0, 0, true)] {
            assert_eq!(token_bucket(qps, burst).is_some(), limited, "{qps} {burst}");
        }
    }
}
