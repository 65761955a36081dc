//! Per-controller reconcile metrics: how long each reconcile took and how many failed, by controller name.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use kube::runtime::controller::Action;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tracing::Instrument;

/// The controller a sample belongs to.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// `machine`, `machine-termination`, `machineclass`, `secret`, `machineset`, `machinedeployment`;
    /// `mcmmachine`, `mcmcluster`, `mcmmachinetemplate`; `capi-machine`, `capi-machineset`,
    /// `capi-machinedeployment`.
    pub controller: String,
}

/// MCM's labels of a drain.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrainLabels {
    /// The Machine's namespace.
    pub namespace: String,
    /// The Machine's label `name` (its MachineDeployment, as Gardener sets it), or empty.
    pub machine_deployment: String,
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
    /// `mcm_controller_reconciles_in_flight{controller}`: reconciles running now. kube-runtime keeps its queue to
    /// itself, so this stands in for client-go's `workqueue_depth`: it sits at `--concurrent-syncs` while work
    /// waits.
    pub in_flight: Family<ControllerLabel, Gauge>,
    /// `mcm_machine_drain_duration_seconds{namespace,machine_deployment}`: drains that finished (MCM's name and
    /// labels).
    pub drain: Family<DrainLabels, Histogram, fn() -> Histogram>,
}

impl Default for ReconcileMetrics {
    fn default() -> Self {
        ReconcileMetrics {
            duration: Family::new_with_constructor(histogram),
            errors: Family::default(),
            in_flight: Family::default(),
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
        registry.register(
            "mcm_controller_reconciles_in_flight",
            "Reconciles running now by controller",
            self.in_flight.clone(),
        );
        registry.register("mcm_machine_drain_duration_seconds", "Duration of finished drains", self.drain.clone());
    }

    /// Records a finished drain of `machine`'s Node.
    pub fn drained(&self, machine: &crate::api::mcm::Machine, took: std::time::Duration) {
        let meta = &machine.metadata;
        let labels = DrainLabels {
            namespace: meta.namespace.clone().unwrap_or_default(),
            machine_deployment: meta.labels.as_ref().and_then(|l| l.get("name")).cloned().unwrap_or_default(),
        };
        self.drain.get_or_create(&labels).observe(took.as_secs_f64());
    }

    fn observe(&self, controller: &'static str, started: Instant, failed: bool) {
        let label = ControllerLabel { controller: controller.to_string() };
        self.duration.get_or_create(&label).observe(started.elapsed().as_secs_f64());
        if failed {
            self.errors.get_or_create(&label).inc();
        }
    }
}

/// Decrements `gauge` when dropped.
struct Running(Gauge);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// `reconcile`, timed and counted under `controller`, inside a `reconcile` span carrying the controller and the
/// object key (`namespace/name`), so every log line of the reconcile names its object.
pub fn timed<K, C, E, F, Fut>(
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
                // A clone, so the family's lock is not held across the reconcile.
                let in_flight =
                    metrics.in_flight.get_or_create(&ControllerLabel { controller: controller.to_string() }).clone();
                in_flight.inc();
                // Counted down on drop too: a reconcile cancelled at shutdown is no longer running.
                let _running = Running(in_flight);
                let started = Instant::now();
                let result = run.await;
                metrics.observe(controller, started, result.is_err());
                result
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_carry_mcms_labels() {
        let metrics = ReconcileMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let machine: crate::api::mcm::Machine = serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m1", "namespace": "shoot", "labels": {"name": "workers"}},
            "spec": {"class": {"kind": "MachineClass", "name": "c"}},
        }))
        .unwrap();
        metrics.drained(&machine, std::time::Duration::from_millis(1500));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let series = r#"mcm_machine_drain_duration_seconds_sum{namespace="shoot",machine_deployment="workers"} 1.5"#;
        assert!(text.contains(series), "{text}");
    }
}
