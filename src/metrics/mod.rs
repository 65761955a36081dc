//! Every metric we export, in one place: the registry of `mcm run` ([`Metrics`]), the cloud call families the
//! [`MeteredDriver`] fills, the object gauges ([`ObjectMetrics`]: MCM's `mcm_*` names) and the reconcile and drain
//! families the controllers fill ([`ReconcileMetrics`]).
//!
//! Imports `api` and the driver contract of `providers`; `controllers`, `telemetry` and the programs import it.

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

mod driver;
mod objects;
mod reconcile;

pub use driver::{MeteredDriver, metered};
pub use objects::ObjectMetrics;
pub use reconcile::{ReconcileMetrics, timed};

/// The gauge that is 1 while machine reconciles are frozen (MCM's safety controller).
pub const FROZEN_METRIC: &str = "mcm_machine_controller_frozen";

/// Labels of a driver call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `MachineClass.provider`.
    pub provider: String,
    /// The driver method (`create_machine`, ...).
    pub operation: String,
}

/// Labels of a finished driver call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    /// `MachineClass.provider`.
    pub provider: String,
    /// The driver method.
    pub operation: String,
    /// `OK`, or MCM's error code (`ResourceExhausted`, ...).
    pub code: String,
}

/// Labels of a failed driver call (MCM's `error_code` label name).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailedLabels {
    /// `MachineClass.provider`.
    pub provider: String,
    /// The driver method.
    pub operation: String,
    /// MCM's error code.
    pub error_code: String,
}

/// Labels of MCM's machine lifecycle durations (`mcm_machine_create_duration_seconds`, ...): MCM's four, plus the
/// provider.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LifecycleLabels {
    /// The Machine's namespace.
    pub namespace: String,
    /// The Machine's label `name` (the MachineDeployment, as Gardener sets it), or empty.
    pub machine_deployment: String,
    /// The class's `nodeTemplate.instanceType`, or empty.
    pub instance_type: String,
    /// The label `topology.kubernetes.io/zone` of the Machine's nodeTemplate, or empty.
    pub zone: String,
    /// `MachineClass.provider`.
    pub provider: String,
}

fn latency_histogram() -> Histogram {
    // 5 ms .. ~82 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// A family of histograms whose buckets come from a plain constructor function.
pub type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The cloud call families.
#[derive(Clone, Debug)]
pub struct CloudMetrics {
    /// `mcm_cloud_api_requests_total{provider,operation,code}`.
    pub requests: Family<CodeLabels, Counter>,
    /// `mcm_cloud_driver_requests_failed_total{provider,operation,error_code}` (MCM's name).
    pub failed: Family<FailedLabels, Counter>,
    /// `mcm_cloud_driver_request_duration_seconds{provider,operation}` (MCM's name).
    pub duration: Family<CallLabels, Histogram, fn() -> Histogram>,
    /// `mcm_machine_create_duration_seconds{namespace,machine_deployment,instance_type,zone,provider}` (MCM's
    /// name): successful `create_machine` calls.
    pub create_duration: Family<LifecycleLabels, Histogram, fn() -> Histogram>,
    /// `mcm_machine_delete_duration_seconds{...}` (MCM's name, same labels): successful `delete_machine` calls.
    pub delete_duration: Family<LifecycleLabels, Histogram, fn() -> Histogram>,
}

impl Default for CloudMetrics {
    fn default() -> Self {
        CloudMetrics {
            requests: Family::default(),
            failed: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            create_duration: Family::new_with_constructor(latency_histogram),
            delete_duration: Family::new_with_constructor(latency_histogram),
        }
    }
}

/// Everything `/metrics` shows. Clones share the registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    /// The cloud call families.
    pub cloud: CloudMetrics,
    /// The machine, MachineSet and MachineDeployment gauges (computed at scrape time).
    pub objects: ObjectMetrics,
    /// `mcm_leader_election_master_status`: 1 while this process leads (or runs without leader election).
    pub leader: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every family registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let cloud = CloudMetrics::default();
        registry.register(
            "mcm_cloud_api_requests",
            "Driver calls by provider, operation and result code (OK or MCM's error code)",
            cloud.requests.clone(),
        );
        registry.register(
            "mcm_cloud_driver_requests_failed",
            "Failed driver calls by provider, operation and MCM error code",
            cloud.failed.clone(),
        );
        registry.register(
            "mcm_cloud_driver_request_duration_seconds",
            "Duration of driver calls by provider and operation",
            cloud.duration.clone(),
        );
        registry.register(
            "mcm_machine_create_duration_seconds",
            "Duration of successful create_machine calls",
            cloud.create_duration.clone(),
        );
        registry.register(
            "mcm_machine_delete_duration_seconds",
            "Duration of successful delete_machine calls",
            cloud.delete_duration.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "mcm_leader_election_master_status",
            "1 while this process holds the leader lease (or runs without leader election), else 0",
            leader.clone(),
        );
        let objects = ObjectMetrics::default();
        registry.register_collector(Box::new(objects.clone()));
        Metrics { registry: Arc::new(Mutex::new(registry)), cloud, objects, leader }
    }

    /// Registers another metric (e.g. a controller's own gauge).
    pub fn register(&self, name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
        if let Ok(mut registry) = self.registry.lock() {
            registry.register(name, help, metric);
        }
    }

    /// Lets `register` add families to the registry (e.g. the controllers' reconcile metrics).
    pub fn register_with(&self, register: impl FnOnce(&mut Registry)) {
        if let Ok(mut registry) = self.registry.lock() {
            register(&mut registry);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Ok(registry) = self.registry.lock() {
            // Writing into a String cannot fail.
            let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        }
        out
    }
}
