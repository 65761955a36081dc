//! The kube-runtime controllers of MCM's machine side: the machine controller (create, health, node sync), the
//! termination controller (deletion), the MachineClass controller, the Secret controller and the safety controller
//! (orphan VMs, the API-server freeze); and of its machine-controller-manager side ([`sets`]): the MachineSet and
//! MachineDeployment controllers and the overshoot freeze.
//!
//! Design:
//! - One watch per kind ([`informer`]), shared: a reflector store every reconcile reads from, and notices fanned out
//!   to the controllers that care (deletions included).
//! - Two kube-runtime `Controller`s over the same Machine store: machines not being deleted go to the machine
//!   controller, deleting machines to the termination controller. Each has its own bounded concurrency
//!   (`concurrent_syncs`), so terminations (drains can take hours) never starve creations (MCM #943).
//! - Reconciles are thin (`observe -> lifecycle decides -> act`); retries back off per machine (`RetryBook`).
//! - The safety controller ([`safety`]) is two tasks over the same stores: orphan VM collection, and the probe
//!   whose freeze flag every machine reconcile checks first.
//! - Mapping a Node or class change to its machines scans the Machine store; Node heartbeats are filtered out
//!   first, so this stays cheap for thousands of machines (an index by node name would be the next step).
//!
//! Imports `api`, `lifecycle`, `providers` and `drain`; nothing imports it but `dev` and `cli`.

mod capi;
mod context;
mod driver_request;
mod error;
mod events;
mod freeze;
mod in_place;
mod informer;
mod infra;
mod machine;
mod machine_class;
mod preservation;
mod replicas;
mod requeue;
mod safety;
mod sets;
mod superseded;
mod tasks;
mod termination;
mod triggers;
mod vm;
mod workload;
mod writes;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::runtime::Controller;
use kube::runtime::controller::Config as ControllerConfig;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;

pub use crate::metrics::ReconcileMetrics;
pub use capi::{UPSTREAM_CORE_FINALIZERS, held_by_upstream_core};
pub use error::Error;
pub use infra::{InfraControllers, InfraOptions};
pub use safety::FROZEN_METRIC;
pub use sets::SetOptions;

use self::context::{Context, InFlight, Permits, RetryBook};
use self::freeze::FreezeFlag;
use self::informer::{Informer, Notice, prune_node};
use self::safety::Safety;
use self::tasks::{Tasks, controller, on_stop};
use self::triggers::{class_triggers, machine_triggers, scoped, secret_triggers};
use crate::api::mcm::MachineClass;
use crate::lifecycle::MachineConfig;
use crate::lifecycle::safety::SafetyConfig;
use crate::providers::DriverRegistry;
use events::Recorder;

/// The clusters the controllers talk to.
#[derive(Clone)]
pub struct Clusters {
    /// Machines, classes, Secrets and events live here.
    pub control: Client,
    /// Nodes, bootstrap tokens and VolumeAttachments live here; `None` runs without a target cluster (MCM's
    /// `--target-kubeconfig none`: machines go to Available with the driver's addresses, no drain).
    pub target: Option<Client>,
    /// A client for the target cluster without kube-rs's automatic 429 retries, for drains: evictions must see a
    /// PodDisruptionBudget's refusal at once (see [`crate::drain::client_for_drain`]). `None` uses `target`.
    pub drain: Option<Client>,
    /// Clients for the safety controller's API-server probe, without kube-rs's automatic retries of 429/503/504
    /// (`default_retry = false`), which would hide an outage for seconds per probe. `None` probes with `control`
    /// and `target`. Unused without a target cluster (there is no freeze then, as in MCM).
    pub probe: Option<ProbeClients>,
    /// Where mode "CAPI with MCM core" finds each Cluster's Nodes.
    pub capi_nodes: CapiNodes,
}

/// Where mode "CAPI with MCM core" finds a Cluster's Nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CapiNodes {
    /// In the Cluster's workload cluster, through its `<cluster>-kubeconfig` Secret, as core does (`mcm run`
    /// without `--target-kubeconfig`).
    #[default]
    PerCluster,
    /// In [`Clusters::target`] for every Cluster (an explicit `--target-kubeconfig`; `mcm dev`, whose in-memory
    /// cloud registers every Node in its own server); none with no target.
    Target,
}

/// The clients of the API-server reachability probe.
#[derive(Clone)]
pub struct ProbeClients {
    /// The control cluster (a GET of a Machine).
    pub control: Client,
    /// The target cluster (a GET of a Node).
    pub target: Client,
}

/// The controllers [`Controllers::start`] runs, by the names `mcm run --controllers` takes: `machine` (the machine
/// and termination controllers), `machineclass` (the MachineClass and Secret controllers), `safety` (orphan VMs
/// and the API-server freeze), `machineset` (with the overshoot freeze), `machinedeployment`.
pub const CONTROLLER_NAMES: [&str; 5] = ["machine", "machineclass", "safety", "machineset", "machinedeployment"];

/// How the controllers run.
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerOptions {
    /// Where reconcile durations and errors are counted (`mcm run` registers it with its `/metrics`).
    pub metrics: ReconcileMetrics,
    /// Controllers of [`CONTROLLER_NAMES`] not to run (`mcm run --controllers=*,-foo`). The watches of the machine
    /// side (Machines, classes, Secrets, Nodes) start while any of them runs, the MachineSet and MachineDeployment
    /// watches while either of those two runs; with all five disabled, only `capi_core`'s watches start.
    pub disabled: std::collections::BTreeSet<String>,
    /// Machine lifecycle settings.
    pub machine: MachineConfig,
    /// Watch only this namespace of the control cluster (`None`: all).
    pub namespace: Option<String>,
    /// Reconciles at once per controller (`--concurrent-syncs`, MCM's provider default 50). The machine and the
    /// termination controller each get this many.
    pub concurrent_syncs: u16,
    /// How long [`Controllers::stop`] lets running reconciles finish before cancelling them.
    pub shutdown_grace: Duration,
    /// The safety controller: orphan VMs and the API-server freeze.
    pub safety: SafetyConfig,
    /// The MachineSet and MachineDeployment controllers and the overshoot freeze.
    pub sets: SetOptions,
    /// Mode "CAPI with MCM core": also run our MachineDeployment, MachineSet and Machine controllers on
    /// `cluster.x-k8s.io/v1beta2` objects (`docs/capi-mode.md`). The CAPI CRDs must be installed.
    pub capi_core: bool,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            disabled: Default::default(),
            metrics: ReconcileMetrics::default(),
            machine: MachineConfig::default(),
            namespace: None,
            concurrent_syncs: 50,
            shutdown_grace: Duration::from_secs(10),
            safety: SafetyConfig::default(),
            sets: SetOptions::default(),
            capi_core: false,
        }
    }
}

/// The running controllers. Dropping this cancels them; [`Controllers::stop`] lets them finish first.
pub struct Controllers {
    tasks: Tasks,
    freeze: Arc<FreezeFlag>,
    ready: Vec<watch::Receiver<bool>>,
}

impl Controllers {
    /// Starts the machine, termination, MachineClass, Secret and safety controllers with `drivers`, and the
    /// MachineSet and MachineDeployment controllers with the overshoot freeze.
    pub fn start(clusters: Clusters, drivers: DriverRegistry, options: ControllerOptions) -> Controllers {
        let control = clusters.control.clone();
        let ns = options.namespace.clone();
        let mut machines = Informer::new(scoped(&control, ns.as_deref()), watcher::Config::default());
        let mut classes: Informer<MachineClass> =
            Informer::new(scoped(&control, ns.as_deref()), watcher::Config::default());
        let mut secrets: Informer<Secret> = Informer::new(scoped(&control, ns.as_deref()), watcher::Config::default());
        let mut nodes: Option<Informer<Node>> =
            clusters.target.clone().map(|t| Informer::new(Api::all(t), watcher::Config::default()).pruned(prune_node));

        let freeze = Arc::new(FreezeFlag::default());
        // Subscribed before the informer runs, so the safety controller sees every deletion.
        let safety_notices = machines.subscribe();
        let ctx = Arc::new(Context {
            control: control.clone(),
            target: clusters.target.clone(),
            drain: clusters.drain.clone().or_else(|| clusters.target.clone()),
            drivers,
            config: options.machine.clone(),
            machines: machines.store(),
            classes: classes.store(),
            secrets: secrets.store(),
            nodes: nodes.as_ref().map(Informer::store),
            ready: [
                Some(machines.ready()),
                Some(classes.ready()),
                Some(secrets.ready()),
                nodes.as_ref().map(Informer::ready),
            ]
            .into_iter()
            .flatten()
            .collect(),
            recorder: Recorder::new(control.clone(), "machine-controller"),
            retries: RetryBook::default(),
            creating: InFlight::default(),
            permits: Permits::default(),
            refusals: Default::default(),
            superseded: Default::default(),
            freeze: freeze.clone(),
            metrics: options.metrics.clone(),
        });

        let (stop, stopped) = watch::channel(false);
        let shutdown = || on_stop(&stopped);
        let config = ControllerConfig::default().concurrency(options.concurrent_syncs);

        // Machine controller: machines not being deleted; their Nodes; their classes; the safety controller's
        // requeues after a freeze.
        let creating = machine_triggers(&mut machines, nodes.as_mut(), &mut classes, ctx.machines.clone());
        let (requeue, requeued) = mpsc::unbounded_channel();
        let machine_controller =
            Controller::for_stream(stream::empty::<Result<_, watcher::Error>>(), ctx.machines.clone())
                .reconcile_on(creating)
                .reconcile_on(UnboundedReceiverStream::new(requeued))
                .with_config(config.clone())
                .graceful_shutdown_on(shutdown())
                .run(
                    crate::metrics::timed(&options.metrics, "machine", machine::reconcile),
                    machine::error_policy,
                    ctx.clone(),
                )
                .for_each(|_| futures::future::ready(()));

        // Termination controller: machines being deleted, its own queue and concurrency.
        let deleting = UnboundedReceiverStream::new(machines.subscribe()).filter_map(|n| {
            futures::future::ready(match n {
                Notice::Applied(m) if m.metadata.deletion_timestamp.is_some() => Some(ObjectRef::from_obj(&*m)),
                _ => None,
            })
        });
        let termination_controller = controller(
            ctx.machines.clone(),
            deleting,
            config.clone(),
            shutdown(),
            crate::metrics::timed(&options.metrics, "machine-termination", termination::reconcile),
            termination::error_policy,
            ctx.clone(),
        );

        // MachineClass controller: classes, and machines starting or ceasing to use one.
        let class_triggers = class_triggers(&mut classes, &mut machines);
        let class_controller = controller(
            ctx.classes.clone(),
            class_triggers,
            config.clone(),
            shutdown(),
            crate::metrics::timed(&options.metrics, "machineclass", machine_class::reconcile),
            machine_class::error_policy,
            ctx.clone(),
        );

        // Secret controller: secrets, and the secrets classes reference (before and after a change).
        let secret_triggers = secret_triggers(&mut secrets, &mut classes);
        let secret_controller = controller(
            ctx.secrets.clone(),
            secret_triggers,
            config,
            shutdown(),
            crate::metrics::timed(&options.metrics, "secret", machine_class::reconcile_secret),
            machine_class::error_policy,
            ctx.clone(),
        );

        let started = sets::start(ctx.clone(), &mut machines, nodes.as_mut(), &options, stop.subscribe());
        let capi_started = options.capi_core.then(|| {
            let target = match (clusters.target.clone(), nodes.as_mut()) {
                (Some(client), Some(nodes)) => Some((client.clone(), clusters.drain.clone().unwrap_or(client), nodes)),
                _ => None,
            };
            capi::start(control.clone(), target, clusters.capi_nodes, &options, stop.subscribe())
        });

        // Only the watches a running controller reads start: the CAPI-only and infrastructure-only installs lack
        // the machine.sapcloud.io CRDs (and the RBAC) these would list.
        let enabled = |name: &str| !options.disabled.contains(name);
        let machine_side = CONTROLLER_NAMES.iter().any(|name| enabled(name));
        let sets_side = enabled("machineset") || enabled("machinedeployment");
        let mut informers = Vec::new();
        if machine_side {
            informers.extend([tokio::spawn(machines.run()), tokio::spawn(classes.run()), tokio::spawn(secrets.run())]);
        }
        if sets_side {
            informers.extend(started.informers.into_iter().map(tokio::spawn));
        }
        let mut capi_controllers = Vec::new();
        if let Some(capi) = capi_started {
            informers.extend(capi.informers);
            capi_controllers = capi.controllers;
        }
        let capi_reads_target = options.capi_core && clusters.capi_nodes == CapiNodes::Target;
        if let Some(nodes) = nodes.filter(|_| machine_side || capi_reads_target) {
            informers.push(tokio::spawn(nodes.run()));
        }
        // Safety controller: orphan VMs, and (with a target cluster) the API-server freeze.
        let probes = clusters.target.as_ref().map(|target| {
            clusters.probe.clone().unwrap_or_else(|| ProbeClients { control: control.clone(), target: target.clone() })
        });
        let safety = Arc::new(Safety {
            ctx: ctx.clone(),
            config: options.safety.clone(),
            machines: scoped(&control, ns.as_deref()),
            infra_machines: scoped(&control, ns.as_deref()),
            probe_namespace: options.namespace.clone().unwrap_or_else(|| "default".to_string()),
            probes,
            requeue,
            stop: stop.subscribe(),
        });

        let named: Vec<(&str, BoxFuture<'static, ()>)> = vec![
            ("machine", machine_controller.boxed()),
            ("machine", termination_controller.boxed()),
            ("machineclass", class_controller.boxed()),
            ("machineclass", secret_controller.boxed()),
            ("safety", safety.clone().run_orphans(safety::triggers(safety_notices)).boxed()),
            ("safety", safety.run_freeze().boxed()),
        ]
        .into_iter()
        .chain(["machineset", "machinedeployment", "machineset"].into_iter().zip(started.controllers))
        .collect();
        // A disabled controller is never spawned (its triggers' subscriptions close when it is dropped).
        let controllers: Vec<JoinHandle<()>> = named
            .into_iter()
            .filter(|(name, _)| enabled(name))
            .map(|(_, controller)| tokio::spawn(controller))
            .chain(capi_controllers)
            .collect();
        let ready = if machine_side { ctx.ready.clone() } else { Vec::new() };
        tracing::info!(namespace = ?options.namespace, target = clusters.target.is_some(), "machine controllers started");
        let overran = "reconciles still running after the shutdown grace; cancelling them";
        let tasks = Tasks { stop, controllers, informers, grace: options.shutdown_grace, overran };
        Controllers { tasks, freeze, ready }
    }

    /// Resolves once the machine side's caches (Machines, classes, Secrets, Nodes) have their first lists.
    pub async fn wait_ready(&self) {
        self.caches_synced().await;
    }

    /// [`Controllers::wait_ready`] as a future that owns what it waits on.
    pub fn caches_synced(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        informer::wait_all(self.ready.clone())
    }

    /// Whether machine reconciles are frozen because an API server did not answer for the status-check timeout.
    pub fn frozen(&self) -> bool {
        self.freeze.frozen()
    }

    /// The gauge [`FROZEN_METRIC`]: 1 while frozen, else 0. Clones share the value; register one with a metrics
    /// registry.
    pub fn frozen_gauge(&self) -> Gauge {
        self.freeze.gauge()
    }

    /// Stops taking new work, lets running reconciles finish (up to the shutdown grace), then ends the watches.
    pub async fn stop(self) {
        self.tasks.stop().await;
    }

    /// Cancels everything at once, mid-reconcile (as a crash would; tests use it).
    pub async fn kill(self) {
        self.tasks.kill().await;
    }
}
