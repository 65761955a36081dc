//! Per-controller reconcile metrics: ours (`mcm_controller_*`: how long each reconcile took, how many failed, how
//! many run) and the closest equivalents of MCM's workqueue families (`mcm_workqueue_*{name}`, `name` = our
//! controller's name); and the machine lifecycle families ([`MachineMetrics`]) the controllers fill.
//!
//! kube-runtime keeps its queue to itself: an item's wait and the queue's depth cannot be seen, so MCM's
//! `mcm_workqueue_depth` and `mcm_workqueue_queue_duration_seconds` are not shown. What is shown: adds = reconciles
//! started (kube-runtime merges triggers of a queued object, as client-go does), work duration = reconcile
//! duration, retries = failed reconciles (each is requeued with back-off), unfinished work and longest running
//! processor = computed at scrape time from the reconciles running.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::BoxFuture;
use kube::runtime::controller::Action;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tracing::Instrument;

use super::machines::MachineMetrics;

/// The controller a sample belongs to.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// `machine`, `machine-termination`, `machineclass`, `secret`, `machineset`, `machinedeployment`;
    /// `mcmmachine`, `mcmcluster`, `mcmmachinetemplate`; `capi-machine`, `capi-machineset`,
    /// `capi-machinedeployment`.
    pub controller: String,
}

/// The queue a workqueue sample belongs to (MCM's label `name`; our controller's name).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// The controller.
    pub name: String,
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
    /// `mcm_controller_reconciles_in_flight{controller}`: reconciles running now (at most `--concurrent-syncs`).
    pub in_flight: Family<ControllerLabel, Gauge>,
    /// MCM's `mcm_workqueue_adds_total{name}`: reconciles started.
    pub adds: Family<QueueLabel, Counter>,
    /// MCM's `mcm_workqueue_work_duration_seconds{name}`: reconcile durations.
    pub work: Family<QueueLabel, Histogram, fn() -> Histogram>,
    /// MCM's `mcm_workqueue_retries_total{name}`: failed reconciles, requeued with back-off.
    pub retries: Family<QueueLabel, Counter>,
    /// The reconciles running, for MCM's `mcm_workqueue_unfinished_work_seconds` and
    /// `mcm_workqueue_longest_running_processor_seconds`.
    pub running: Running,
    /// MCM's machine lifecycle families.
    pub machines: MachineMetrics,
}

impl Default for ReconcileMetrics {
    fn default() -> Self {
        ReconcileMetrics {
            duration: Family::new_with_constructor(histogram),
            errors: Family::default(),
            in_flight: Family::default(),
            adds: Family::default(),
            work: Family::new_with_constructor(work_histogram),
            retries: Family::default(),
            running: Running::default(),
            machines: MachineMetrics::default(),
        }
    }
}

/// client-go's work duration buckets: 10 ns .. 100 s by tens.
fn work_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 10))
}

/// The start of every running reconcile, by controller; a scrape-time collector of MCM's two in-progress gauges.
#[derive(Clone, Debug, Default)]
pub struct Running {
    started: Arc<Mutex<BTreeMap<&'static str, BTreeMap<u64, Instant>>>>,
    next: Arc<AtomicU64>,
}

/// A controller, the seconds its running reconciles have run, and the longest one's.
type InProgress = (&'static str, f64, f64);

/// Takes a running reconcile off [`Running`] (and the in-flight gauge down) when dropped.
struct RunningGuard {
    running: Running,
    controller: &'static str,
    id: u64,
    in_flight: Gauge,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.in_flight.dec();
        if let Ok(mut started) = self.running.started.lock()
            && let Some(each) = started.get_mut(self.controller)
        {
            each.remove(&self.id);
        }
    }
}

impl Running {
    fn start(&self, controller: &'static str, in_flight: Gauge) -> RunningGuard {
        in_flight.inc();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut started) = self.started.lock() {
            started.entry(controller).or_default().insert(id, Instant::now());
        }
        RunningGuard { running: self.clone(), controller, id, in_flight }
    }

    /// Per controller seen: the seconds all running reconciles have run, and the longest one's.
    fn in_progress(&self) -> Vec<InProgress> {
        let Ok(started) = self.started.lock() else { return Vec::new() };
        let now = Instant::now();
        started
            .iter()
            .map(|(controller, each)| {
                let ages = each.values().map(|at| now.duration_since(*at).as_secs_f64());
                let (sum, max) = ages.fold((0.0, 0.0), |(sum, max): (f64, f64), age| (sum + age, max.max(age)));
                (*controller, sum, max)
            })
            .collect()
    }
}

impl Collector for Running {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let rows = self.in_progress();
        let unfinished: Vec<(&str, f64)> = rows.iter().map(|r| (r.0, r.1)).collect();
        let longest: Vec<(&str, f64)> = rows.iter().map(|r| (r.0, r.2)).collect();
        let families = [
            (
                "mcm_workqueue_unfinished_work_seconds",
                "Seconds the running reconciles have been running, summed",
                unfinished,
            ),
            (
                "mcm_workqueue_longest_running_processor_seconds",
                "Seconds the longest running reconcile has run",
                longest,
            ),
        ];
        for (name, help, values) in families {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (controller, value) in values {
                let labels = [("name", controller)];
                let family = metric.encode_family(&labels)?;
                prometheus_client::metrics::gauge::ConstGauge::new(value).encode(family)?;
            }
        }
        Ok(())
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
        registry.register("mcm_workqueue_adds", "Reconciles started, by controller", self.adds.clone());
        registry.register(
            "mcm_workqueue_work_duration_seconds",
            "Seconds a reconcile took, by controller",
            self.work.clone(),
        );
        registry.register("mcm_workqueue_retries", "Failed reconciles requeued with back-off", self.retries.clone());
        registry.register_collector(Box::new(self.running.clone()));
        self.machines.register(registry);
    }

    /// Records a finished drain of `machine`'s Node.
    pub fn drained(&self, machine: &crate::api::mcm::Machine, took: std::time::Duration) {
        self.machines.drained(machine, took);
    }

    fn observe(&self, controller: &'static str, started: Instant, failed: bool) {
        let seconds = started.elapsed().as_secs_f64();
        let label = ControllerLabel { controller: controller.to_string() };
        self.duration.get_or_create(&label).observe(seconds);
        let queue = QueueLabel { name: controller.to_string() };
        self.work.get_or_create(&queue).observe(seconds);
        if failed {
            self.errors.get_or_create(&label).inc();
            self.retries.get_or_create(&queue).inc();
        }
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
    // Like client-go's work queues, a controller's retry and error series exist (at 0) from its start, so a
    // scrape shows every family whether or not a reconcile has failed yet.
    let _ = metrics.retries.get_or_create(&QueueLabel { name: controller.to_string() });
    let _ = metrics.errors.get_or_create(&ControllerLabel { controller: controller.to_string() });
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
                metrics.adds.get_or_create(&QueueLabel { name: controller.to_string() }).inc();
                // Taken off on drop too: a reconcile cancelled at shutdown is no longer running.
                let _running = metrics.running.start(controller, in_flight);
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

    #[tokio::test]
    async fn reconciles_fill_the_workqueue_equivalents() {
        let metrics = ReconcileMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let obj = Arc::new(k8s_openapi::api::core::v1::ConfigMap::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let held = Arc::new(Mutex::new(Some((started_tx, rx))));
        let mut run =
            timed(&metrics, "machine", move |_: Arc<k8s_openapi::api::core::v1::ConfigMap>, fail: Arc<bool>| {
                let held = held.lock().ok().and_then(|mut r| r.take());
                async move {
                    if let Some((started, rx)) = held {
                        let _ = started.send(());
                        let _ = rx.await;
                    }
                    if *fail { Err(()) } else { Ok(Action::await_change()) }
                }
            });
        let slow = tokio::spawn(run(obj.clone(), Arc::new(false)));
        started_rx.await.unwrap();
        let encode = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
            text
        };
        // The held reconcile shows as running.
        let text = encode(&registry);
        assert!(text.contains(r#"mcm_workqueue_longest_running_processor_seconds{name="machine"}"#), "{text}");
        assert!(text.contains(r#"mcm_controller_reconciles_in_flight{controller="machine"} 1"#), "{text}");
        tx.send(()).unwrap();
        slow.await.unwrap().unwrap();
        run(obj, Arc::new(true)).await.unwrap_err();
        let text = encode(&registry);
        for series in [
            r#"mcm_workqueue_adds_total{name="machine"} 2"#,
            r#"mcm_workqueue_retries_total{name="machine"} 1"#,
            r#"mcm_workqueue_work_duration_seconds_count{name="machine"} 2"#,
            r#"mcm_workqueue_unfinished_work_seconds{name="machine"} 0.0"#,
            r#"mcm_controller_reconciles_in_flight{controller="machine"} 0"#,
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
    }

    #[test]
    fn a_controllers_retry_series_exists_before_any_failure() {
        let metrics = ReconcileMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let _run = timed(&metrics, "machineset", |_: Arc<k8s_openapi::api::core::v1::ConfigMap>, _: Arc<()>| async {
            Ok::<_, std::convert::Infallible>(Action::await_change())
        });
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains(r#"mcm_workqueue_retries_total{name="machineset"} 0"#), "{text}");
        assert!(text.contains(r#"mcm_controller_reconcile_errors_total{controller="machineset"} 0"#), "{text}");
    }
}
