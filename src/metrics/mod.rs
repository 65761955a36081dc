//! Every metric we export, in one place: the registry of `mcm run` ([`Metrics`]), the cloud call families the
//! [`MeteredDriver`] fills, the object gauges ([`ObjectMetrics`]) and the families the controllers fill
//! ([`ReconcileMetrics`]: machine lifecycle durations, workqueue equivalents, reconciles).
//!
//! Every family upstream MCM exports is listed in `mcm_families.txt` (name, type, labels); the ones we can fill
//! carry MCM's name, type, labels and meaning. Ours beyond MCM's are named `mcm_controller_*` and
//! `mcm_leader_election_master_status`.
//!
//! Imports `api` and the driver contract of `providers`; `controllers`, `telemetry` and the programs import it.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

mod driver;
#[cfg(test)]
mod families;
mod machines;
mod objects;
mod reconcile;

pub use driver::{MeteredDriver, metered};
pub use machines::{MachineMetrics, Step, since, stale};
pub use objects::ObjectMetrics;
pub use reconcile::{ReconcileMetrics, timed};

/// The gauge that is 1 while machine reconciles are frozen (MCM's safety controller).
pub const FROZEN_METRIC: &str = "mcm_machine_controller_frozen";

/// Labels of a driver call (MCM's `mcm_cloud_api_driver_request_duration_seconds`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `MachineClass.provider`.
    pub provider: String,
    /// The driver method (`create_machine`, ...).
    pub operation: String,
}

/// Labels of a finished driver call (our `mcm_controller_driver_calls_total`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    /// `MachineClass.provider`.
    pub provider: String,
    /// The driver method.
    pub operation: String,
    /// `OK`, or MCM's error code (`ResourceExhausted`, ...).
    pub code: String,
}

/// Labels of a failed driver call (MCM's `mcm_cloud_api_driver_requests_failed_total`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailedLabels {
    /// `MachineClass.provider`.
    pub provider: String,
    /// The driver method.
    pub operation: String,
    /// MCM's error code.
    pub error_code: String,
}

/// Labels of MCM's cloud request families (`mcm_cloud_api_requests_total`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    /// `MachineClass.provider`.
    pub provider: String,
    /// The cloud service; we count driver calls, so this is the driver method.
    pub service: String,
}

/// Labels of MCM's `mcm_misc_scrape_failure_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScrapeLabels {
    /// MCM's program name (`machine-controller-manager-provider` for the machine families,
    /// `machine-controller-manager` for the MachineSet and MachineDeployment ones).
    pub binary: String,
    /// What could not be listed (`Machine-count`, `Machineset-count`, `Machinedeployment-count`).
    pub kind: String,
}

/// Labels of MCM's machine lifecycle families (`mcm_machine_create_duration_seconds`, ...).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LifecycleLabels {
    /// The Machine's namespace.
    pub namespace: String,
    /// The Machine's label `name` (the MachineDeployment, as Gardener sets it).
    pub machine_deployment: String,
    /// The class's `nodeTemplate.instanceType`, or empty.
    pub instance_type: String,
    /// The label `topology.kubernetes.io/zone` of the Machine's nodeTemplate, or empty.
    pub zone: String,
}

fn latency_histogram() -> Histogram {
    // 5 ms .. ~82 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// A family of histograms whose buckets come from a plain constructor function.
pub type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// A gauge of seconds (MCM's durations are gauges set to the last value).
pub type SecondsGauge = Gauge<f64, AtomicU64>;

/// Shows a metric with the OpenMetrics type `unknown`: for MCM's counters whose name has no `_total`
/// (`mcm_machine_num_failed_join`), which an OpenMetrics counter cannot carry; the series keeps MCM's name.
#[derive(Clone, Debug, Default)]
pub struct Untyped<M>(pub M);

impl<M: EncodeMetric> EncodeMetric for Untyped<M> {
    fn encode(&self, encoder: prometheus_client::encoding::MetricEncoder) -> std::fmt::Result {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

/// The cloud call families.
#[derive(Clone, Debug)]
pub struct CloudMetrics {
    /// Ours: `mcm_controller_driver_calls_total{provider,operation,code}`, every driver call by result.
    pub calls: Family<CodeLabels, Counter>,
    /// MCM's `mcm_cloud_api_requests_total{provider,service}`: one per driver call.
    pub requests: Family<ServiceLabels, Counter>,
    /// MCM's `mcm_cloud_api_requests_failed_total{provider,service}`: one per failed driver call.
    pub requests_failed: Family<ServiceLabels, Counter>,
    /// MCM's `mcm_cloud_api_api_request_duration_seconds{provider,service}`: successful driver calls.
    pub request_duration: HistogramFamily<ServiceLabels>,
    /// MCM's `mcm_cloud_api_driver_request_duration_seconds{provider,operation}`: successful driver calls.
    pub driver_duration: HistogramFamily<CallLabels>,
    /// MCM's `mcm_cloud_api_driver_requests_failed_total{provider,operation,error_code}`.
    pub driver_failed: Family<FailedLabels, Counter>,
}

impl Default for CloudMetrics {
    fn default() -> Self {
        CloudMetrics {
            calls: Family::default(),
            requests: Family::default(),
            requests_failed: Family::default(),
            request_duration: Family::new_with_constructor(latency_histogram),
            driver_duration: Family::new_with_constructor(latency_histogram),
            driver_failed: Family::default(),
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
    /// MCM's `mcm_misc_scrape_failure_total{binary,kind}`: our gauges read reflector stores, which cannot fail, so
    /// it stays without series unless a scrape cannot read a store.
    pub scrape_failures: Family<ScrapeLabels, Counter>,
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
            "mcm_controller_driver_calls",
            "Driver calls by provider, operation and result code (OK or MCM's error code)",
            cloud.calls.clone(),
        );
        registry.register(
            "mcm_cloud_api_requests",
            "Cloud requests (driver calls) by provider and service",
            cloud.requests.clone(),
        );
        registry.register(
            "mcm_cloud_api_requests_failed",
            "Failed cloud requests (driver calls) by provider and service",
            cloud.requests_failed.clone(),
        );
        registry.register(
            "mcm_cloud_api_api_request_duration_seconds",
            "Duration of successful cloud requests (driver calls) by provider and service",
            cloud.request_duration.clone(),
        );
        registry.register(
            "mcm_cloud_api_driver_request_duration_seconds",
            "Duration of successful driver calls by provider and operation",
            cloud.driver_duration.clone(),
        );
        registry.register(
            "mcm_cloud_api_driver_requests_failed",
            "Failed driver calls by provider, operation and MCM error code",
            cloud.driver_failed.clone(),
        );
        let scrape_failures = Family::<ScrapeLabels, Counter>::default();
        registry.register(
            "mcm_misc_scrape_failure",
            "Scrapes that could not list their objects, by kind",
            scrape_failures.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "mcm_leader_election_master_status",
            "1 while this process holds the leader lease (or runs without leader election), else 0",
            leader.clone(),
        );
        let objects = ObjectMetrics::default();
        registry.register_collector(Box::new(objects.clone()));
        Metrics { registry: Arc::new(Mutex::new(registry)), cloud, objects, leader, scrape_failures }
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
