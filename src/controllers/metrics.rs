//! Per-controller reconcile metrics: how long each reconcile took and how many failed, by controller name.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use kube::runtime::controller::Action;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tracing::Instrument;

/// The controller a sample belongs to.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// `machine`, `machine-termination`, `machineclass`, `secret`, `machineset`, `machinedeployment`.
    pub controller: String,
}

fn histogram() -> Histogram {
    // 1 ms .. ~33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The families; clones share them. Register them once with [`ReconcileMetrics::register`].
#[derive(Clone)]
pub struct ReconcileMetrics {
    /// `mcm_controller_reconcile_duration_seconds{controller}`.
    pub duration: Family<ControllerLabel, Histogram, fn() -> Histogram>,
    /// `mcm_controller_reconcile_errors_total{controller}`.
    pub errors: Family<ControllerLabel, Counter>,
    /// `mcm_machine_drain_duration_seconds{namespace}`: drains that finished (MCM's name).
    pub drain: crate::telemetry::HistogramFamily<Vec<(String, String)>>,
}

impl Default for ReconcileMetrics {
    fn default() -> Self {
        ReconcileMetrics {
            duration: Family::new_with_constructor(histogram),
            errors: Family::default(),
            drain: Family::new_with_constructor(histogram),
        }
    }
}

impl std::fmt::Debug for ReconcileMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconcileMetrics").finish_non_exhaustive()
    }
}

/// Metrics handles are not settings: any two compare equal, so options stay comparable.
impl PartialEq for ReconcileMetrics {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl ReconcileMetrics {
    /// Adds the families to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "mcm_controller_reconcile_duration_seconds",
            "Duration of reconciles by controller",
            self.duration.clone(),
        );
        registry.register("mcm_controller_reconcile_errors", "Failed reconciles by controller", self.errors.clone());
        registry.register("mcm_machine_drain_duration_seconds", "Duration of finished drains", self.drain.clone());
    }

    /// Records a finished drain of a machine in `namespace`.
    pub(crate) fn drained(&self, namespace: &str, took: std::time::Duration) {
        self.drain.get_or_create(&vec![("namespace".to_string(), namespace.to_string())]).observe(took.as_secs_f64());
    }

    fn observe(&self, controller: &'static str, started: Instant, failed: bool) {
        let label = ControllerLabel { controller: controller.to_string() };
        self.duration.get_or_create(&label).observe(started.elapsed().as_secs_f64());
        if failed {
            self.errors.get_or_create(&label).inc();
        }
    }
}

/// `reconcile`, timed and counted under `controller`, inside a `reconcile` span carrying the controller and the
/// object key (`namespace/name`), so every log line of the reconcile names its object.
pub(crate) fn timed<K, C, E, F, Fut>(
    metrics: &ReconcileMetrics,
    controller: &'static str,
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<C>) -> BoxFuture<'static, Result<Action, E>> + use<K, C, E, F, Fut>
where
    K: kube::Resource,
    F: Fn(Arc<K>, Arc<C>) -> Fut,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let metrics = metrics.clone();
    move |object, ctx| {
        let metrics = metrics.clone();
        let meta = object.meta();
        let key = match &meta.namespace {
            Some(ns) => format!("{ns}/{}", meta.name.as_deref().unwrap_or_default()),
            None => meta.name.clone().unwrap_or_default(),
        };
        let span = tracing::info_span!("reconcile", controller, object = %key);
        let run = reconcile(object, ctx);
        Box::pin(
            async move {
                let started = Instant::now();
                let result = run.await;
                metrics.observe(controller, started, result.is_err());
                result
            }
            .instrument(span),
        )
    }
}
