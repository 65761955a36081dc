//! `mcm bench machines`: every controller against the embedded API server and the in-memory cloud.
//! MachineDeployments totalling N machines of a class that boots in `--boot` (0 by default): the time until every
//! machine is Running, the API requests per machine and resident memory; then a rolling update of all N machines
//! (`maxSurge` P%, `maxUnavailable` 0), measured the same way; then, with `--rest`, a quiet spell in which every
//! API write and cloud call counts. [`run`] is the one runner: the controllers in this process, as `mcm dev` runs
//! them, or in their own processes ([`super::process`]) for `--controllers-process` and `--peer`.
//!
//! The benchmark watches Machines with one kube-runtime reflector (one list and one watch request, made before
//! the counters are reset), so its own reads do not count.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::PartialObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::BenchError;
use super::process::{Controllers, ProcessConfig, ProcessMemory, Side, served_calls, setup, wait_until_quiet};
use super::report::MachinesReport;
use crate::api::mcm::names::SCALE_DOWN_DISABLED_BY_MCM;
use crate::api::mcm::{Machine, MachineDeployment, MachinePhase};
use crate::apiserver::Shared;
use crate::apiserver::faults::Faults;
use crate::dev::{DevEnvironment, DevOptions, apply_manifest};
use crate::metrics::{CloudMetrics, MeteredDriver};
use crate::providers::grpc::{DriverEndpoint, DriverServe};
use crate::providers::inmemory::{InMemoryCloud, InMemoryDriver};

/// The namespace the benchmark's objects live in.
pub(super) const NAMESPACE: &str = "bench";

/// Where the write-time probe's scratch Machines live: a namespace of their own, deleted before any controller
/// starts, so no controller ever sees them.
const SCRATCH_NAMESPACE: &str = "bench-scratch";

/// Writes the probe makes, and how many clients make them at once (as controllers' workers do).
pub(super) const PROBE_WRITES: usize = 2_000;
pub(super) const PROBE_WRITERS: usize = 8;

/// Sizes of the machines benchmark.
#[derive(Clone, Copy, Debug)]
pub struct MachinesBench {
    /// Machines in total.
    pub machines: usize,
    /// MachineDeployments they are spread over.
    pub deployments: usize,
    /// `maxSurge` of the rolling update, in percent.
    pub surge_percent: u32,
    /// How long to wait for each phase before giving up.
    pub timeout: Duration,
    /// The in-memory cloud's boot time for the benchmark's class (`bootSeconds`).
    pub boot: Duration,
    /// After the rolling update, how long to stay idle and count writes and cloud calls (zero: no rest phase).
    pub rest: Duration,
    /// Whether to run the rolling update (not for runs that only measure creation, such as 10,000 machines).
    pub rolling_update: bool,
}

impl MachinesBench {
    /// The line that opens every report of this scenario.
    pub(super) fn header(&self) -> String {
        format!(
            "machines: {} in {} MachineDeployments (bootSeconds {}), {}\n",
            self.machines,
            self.deployments.max(1),
            self.boot.as_secs_f64(),
            match self.rolling_update {
                true => format!("rolling update with maxSurge {}%", self.surge_percent),
                false => "no rolling update".to_string(),
            }
        )
    }

    pub(super) fn per_deployment(&self) -> Vec<usize> {
        let deployments = self.deployments.max(1);
        (0..deployments).map(|i| self.machines / deployments + usize::from(i < self.machines % deployments)).collect()
    }
}

/// `mcm bench machines --controllers-process`: our controllers in their own `mcm run`.
#[derive(Clone, Debug)]
pub struct OwnProcess {
    /// Our binary.
    pub ours: PathBuf,
    /// Its `--kube-api-qps` (0: no limit, as the in-process controllers have none).
    pub kube_api_qps: f64,
    /// Its `--kube-api-burst`.
    pub kube_api_burst: u32,
}

pub(super) fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn manifest(surge_percent: u32, per_deployment: &[usize], boot: Duration) -> String {
    let boot = boot.as_secs_f64();
    let mut out = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: instant\n  namespace: {NAMESPACE}\ntype: Opaque\n\
         stringData:\n  userData: \"#!/bin/sh\"\n---\n\
         apiVersion: machine.sapcloud.io/v1alpha1\nkind: MachineClass\nmetadata:\n  name: instant\n  namespace: {NAMESPACE}\n\
         provider: InMemory\nproviderSpec:\n  bootSeconds: {boot}\n  tags:\n    kubernetes.io/cluster/bench: \"1\"\n    kubernetes.io/role/node: \"1\"\n\
         secretRef:\n  name: instant\n  namespace: {NAMESPACE}\n"
    );
    for (i, replicas) in per_deployment.iter().enumerate() {
        out.push_str(&format!(
            "---\napiVersion: machine.sapcloud.io/v1alpha1\nkind: MachineDeployment\nmetadata:\n  name: pool-{i}\n  namespace: {NAMESPACE}\n\
             spec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      name: pool-{i}\n  strategy:\n    type: RollingUpdate\n\
             \x20   rollingUpdate:\n      maxSurge: \"{surge_percent}%\"\n      maxUnavailable: 0\n  template:\n    metadata:\n      labels:\n        name: pool-{i}\n\
             \x20   spec:\n      class:\n        kind: MachineClass\n        name: instant\n"
        ));
    }
    out
}

/// Waits until the store shows exactly `n` machines, all Running and all satisfying `current`.
async fn wait_all_running(
    store: &Store<Machine>,
    n: usize,
    timeout: Duration,
    what: &'static str,
    current: impl Fn(&Machine) -> bool,
) -> Result<Duration, BenchError> {
    let started = Instant::now();
    loop {
        let machines = store.state();
        let running = machines
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none() && current(m))
            .filter(|m| {
                m.status.as_ref().and_then(|s| s.current_status.as_ref()).and_then(|c| c.phase.as_ref())
                    == Some(&MachinePhase::Running)
            })
            .count();
        if machines.len() == n && running == n {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            return Err(BenchError::NotDone { what, after: timeout });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What the API server counted in one phase.
#[derive(Clone, Debug, Default)]
pub(super) struct RequestCounts {
    /// Every request.
    pub total: u64,
    /// The kubelet simulator's Node creations and status posts (the nodes', not the controllers').
    pub kubelet: u64,
    /// What the set and deployment controllers write to their own objects and to Machines (create, delete).
    pub sets: u64,
    /// Every request but a get, list or watch, whoever made it.
    pub writes: u64,
    /// The busiest `(verb, resource)` pairs, busiest first.
    pub busiest: Vec<(String, String, u64)>,
}

impl RequestCounts {
    pub(super) fn of(counts: BTreeMap<(String, String), u64>) -> RequestCounts {
        let sum = |keep: &dyn Fn(&str, &str) -> bool| -> u64 {
            counts.iter().filter(|((verb, resource), _)| keep(verb, resource)).map(|(_, n)| *n).sum()
        };
        let total = sum(&|_, _| true);
        let kubelet = sum(&|verb, resource| {
            (verb == "create" && resource == "nodes") || (verb == "patch" && resource == "nodes/status")
        });
        let sets = sum(&|verb, resource| {
            resource.starts_with("machinesets")
                || resource.starts_with("machinedeployments")
                || (resource == "machines" && (verb == "create" || verb == "delete"))
        });
        let writes = sum(&|verb, _| !matches!(verb, "get" | "list" | "watch"));
        let mut busiest: Vec<(String, String, u64)> = counts.into_iter().map(|((v, r), n)| (v, r, n)).collect();
        busiest.sort_by_key(|entry| std::cmp::Reverse(entry.2));
        busiest.truncate(8);
        RequestCounts { total, kubelet, sets, writes, busiest }
    }

    fn from_server(faults: &Faults) -> RequestCounts {
        RequestCounts::of(faults.request_counts())
    }

    /// Requests per machine, without the kubelet simulator's Node writes.
    pub(super) fn controllers_per_machine(&self, machines: usize) -> f64 {
        (self.total - self.kubelet) as f64 / machines.max(1) as f64
    }

    pub(super) fn line(&self, machines: usize) -> String {
        let per = |n: u64| n as f64 / machines.max(1) as f64;
        format!(
            "{} requests = {:.1} per machine ({:.1} without the kubelet simulator's Node writes; {:.1} on \
             MachineSets, MachineDeployments and Machine creations and deletions); busiest: {}",
            self.total,
            per(self.total),
            self.controllers_per_machine(machines),
            per(self.sets),
            self.busiest_text(8)
        )
    }

    /// The `take` busiest requests as `verb resource count, …`.
    pub(super) fn busiest_text(&self, take: usize) -> String {
        self.busiest.iter().take(take).map(|(v, r, n)| format!("{v} {r} {n}")).collect::<Vec<_>>().join(", ")
    }
}

/// One measured phase of the scenario.
#[derive(Clone, Debug, Default)]
pub(super) struct PhaseFigures {
    /// From the first write until every machine was Running (and current); the rest phase's length.
    pub elapsed: Duration,
    /// The API server's counts over the phase.
    pub requests: RequestCounts,
    /// Driver calls over the phase.
    pub cloud_calls: u64,
    /// Resident memory at the end of the phase: the controller processes', or this whole process's.
    pub memory: Vec<ProcessMemory>,
}

impl PhaseFigures {
    /// The sum of the processes' peaks (`None` if one is unknown).
    pub(super) fn peak_total(&self) -> Option<u64> {
        self.memory.iter().map(|m| m.peak_bytes).sum()
    }
}

/// Everything one run measured.
#[derive(Clone, Debug)]
pub(super) struct RunFigures {
    /// The server's time per write, from the probe before the scenario.
    pub write_time: Duration,
    pub create: PhaseFigures,
    /// Unless `--no-rolling-update`.
    pub roll: Option<PhaseFigures>,
    /// With `rest` > 0.
    pub rest: Option<PhaseFigures>,
    pub vms_created: u64,
    pub vms_deleted: u64,
    /// Machines by phase at the end, as the benchmark's reflector sees them.
    pub by_phase: BTreeMap<String, usize>,
}

/// The scenario against a running environment: a namespace watched by the benchmark's own reflector, then
/// [`Scenario::create`], [`Scenario::roll`] and [`Scenario::rest`].
struct Scenario {
    sizes: MachinesBench,
    client: kube::Client,
    shared: std::sync::Arc<Shared>,
    store: Store<Machine>,
    watch: tokio::task::JoinHandle<()>,
    nodes: Store<PartialObjectMeta<Node>>,
    node_watch: tokio::task::JoinHandle<()>,
}

impl Scenario {
    /// Creates the namespace and starts the benchmark's reflector; nothing is counted yet.
    async fn prepare(env: &DevEnvironment, sizes: MachinesBench) -> Result<Scenario, BenchError> {
        // The request counts come from the embedded server, which the benchmarks always start.
        let shared = env
            .server
            .embedded()
            .map(|server| server.shared().clone())
            .ok_or_else(|| BenchError::Setup("the benchmark needs the embedded API server".into()))?;
        let api: Api<Machine> = Api::namespaced(env.client.clone(), NAMESPACE);
        let (store, writer) = reflector::store();
        let watch = tokio::spawn(
            reflector(writer, watcher(api, watcher::Config::default()))
                .default_backoff()
                .for_each(|_| futures::future::ready(())),
        );
        // The Nodes' metadata only: what tells the end of a rollout (its marks lifted).
        let (nodes, node_writer) = reflector::store();
        let node_watch = tokio::spawn(
            reflector(
                node_writer,
                watcher(Api::<PartialObjectMeta<Node>>::all(env.client.clone()), watcher::Config::default()),
            )
            .default_backoff()
            .for_each(|_| futures::future::ready(())),
        );
        create_namespace(&env.client, NAMESPACE).await?;
        store.wait_until_ready().await.map_err(|e| BenchError::Setup(e.to_string()))?;
        nodes.wait_until_ready().await.map_err(|e| BenchError::Setup(e.to_string()))?;
        Ok(Scenario { sizes, client: env.client.clone(), shared, store, watch, nodes, node_watch })
    }

    /// The API server's request counter, for waiting until newly started controllers are quiet.
    fn total_requests(&self) -> u64 {
        self.shared.faults.total_requests()
    }

    /// From nothing to N Running machines.
    async fn create(&self) -> Result<(Duration, RequestCounts), BenchError> {
        self.shared.faults.reset_counts();
        let started = Instant::now();
        let manifest = manifest(self.sizes.surge_percent, &self.sizes.per_deployment(), self.sizes.boot);
        apply_manifest(&self.client, &manifest).await?;
        wait_all_running(&self.store, self.sizes.machines, self.sizes.timeout, "every machine Running", |_| true)
            .await?;
        Ok((started.elapsed(), RequestCounts::from_server(&self.shared.faults)))
    }

    /// A rolling update of every machine (a new template label).
    async fn roll(&self) -> Result<(Duration, RequestCounts), BenchError> {
        self.shared.faults.reset_counts();
        let deployments: Api<MachineDeployment> = Api::namespaced(self.client.clone(), NAMESPACE);
        let started = Instant::now();
        for i in 0..self.sizes.per_deployment().len() {
            let patch = json!({"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}});
            deployments.patch(&format!("pool-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        let rolled =
            |m: &Machine| m.metadata.labels.as_ref().and_then(|l| l.get("rev")).map(String::as_str) == Some("2");
        wait_all_running(&self.store, self.sizes.machines, self.sizes.timeout, "the rolling update", rolled).await?;
        // The rollout ends with its marks lifted from the new Nodes (MCM's scale-down protection): part of it,
        // not of the rest that follows.
        let marked = || self.nodes.state().iter().any(|n| n.annotations().contains_key(SCALE_DOWN_DISABLED_BY_MCM));
        while marked() {
            if started.elapsed() > self.sizes.timeout {
                return Err(BenchError::NotDone {
                    what: "the rollout's marks lifted from the Nodes",
                    after: self.sizes.timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok((started.elapsed(), RequestCounts::from_server(&self.shared.faults)))
    }

    /// Nothing to do for `rest`: whatever is requested meanwhile counts.
    async fn rest(&self) -> Result<(Duration, RequestCounts), BenchError> {
        self.shared.faults.reset_counts();
        let started = Instant::now();
        tokio::time::sleep(self.sizes.rest).await;
        Ok((started.elapsed(), RequestCounts::from_server(&self.shared.faults)))
    }

    /// Machines by phase, as the benchmark's reflector sees them.
    fn by_phase(&self) -> BTreeMap<String, usize> {
        self.store.state().iter().fold(BTreeMap::new(), |mut acc, m| {
            let phase = m.status.as_ref().and_then(|s| s.current_status.as_ref()).and_then(|c| c.phase.clone());
            *acc.entry(phase.map_or("none".to_string(), |p| p.to_string())).or_default() += 1;
            acc
        })
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        self.watch.abort();
        self.node_watch.abort();
    }
}

async fn create_namespace(client: &kube::Client, name: &str) -> Result<(), BenchError> {
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).map_err(|e| BenchError::Setup(e.to_string()))?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &ns).await?;
    Ok(())
}

/// The server's time per write in this run: [`PROBE_WRITES`] Machine status patches from [`PROBE_WRITERS`]
/// clients at once, each on a scratch Machine of its own, divided into the time they took. Status patches of
/// Machines are most of what a machine's minimal writes are, so this is what one of them costs the server (schema
/// validation, store, watch fan-out) at the concurrency controllers write with. Before any controller starts.
async fn measure_write_time(client: &kube::Client) -> Result<Duration, BenchError> {
    create_namespace(client, SCRATCH_NAMESPACE).await?;
    let api: Api<Machine> = Api::namespaced(client.clone(), SCRATCH_NAMESPACE);
    for writer in 0..PROBE_WRITERS {
        api.create(&PostParams::default(), &super::machine(writer)).await?;
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for writer in 0..PROBE_WRITERS {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let name = super::machine(writer).metadata.name.unwrap_or_default();
            for i in (writer..PROBE_WRITES).step_by(PROBE_WRITERS) {
                // A new description each time, so that every patch changes the object.
                let patch = json!({"status": {"lastOperation": {"description": format!("probe {i}")}}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
            Ok::<(), kube::Error>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| BenchError::Setup(format!("the write probe failed: {e}")))??;
    }
    let elapsed = started.elapsed();
    for writer in 0..PROBE_WRITERS {
        let name = super::machine(writer).metadata.name.unwrap_or_default();
        api.delete(&name, &DeleteParams::default()).await?;
    }
    Ok(elapsed / PROBE_WRITES as u32)
}

/// The controllers of one run, started.
enum Running {
    /// In this process; the cloud counts the calls it gets.
    InProcess { cloud: InMemoryCloud },
    /// In their own processes; calls are counted where the driver protocol is served.
    Processes { controllers: Controllers, serve: DriverServe, metrics: CloudMetrics },
}

impl Running {
    fn cloud_calls(&self) -> u64 {
        match self {
            Running::InProcess { cloud } => {
                let s = cloud.stats();
                s.creates + s.initializes + s.deletes + s.status_gets + s.lists + s.volume_id_gets
            }
            Running::Processes { metrics, .. } => served_calls(metrics),
        }
    }

    fn memory(&self) -> Vec<ProcessMemory> {
        match self {
            Running::InProcess { .. } => vec![ProcessMemory::of("mcm bench (whole process)", "self")],
            Running::Processes { controllers, .. } => controllers.memory(),
        }
    }

    fn alive(&mut self) -> Result<(), BenchError> {
        match self {
            Running::InProcess { .. } => Ok(()),
            Running::Processes { controllers, .. } => controllers.exited(),
        }
    }

    async fn stop(self) {
        if let Running::Processes { controllers, serve, .. } = self {
            controllers.stop().await;
            let _ = serve.stop().await;
        }
    }
}

/// One phase, with the cloud calls it caused and the memory at its end.
async fn measured(
    running: &mut Running,
    phase: impl std::future::Future<Output = Result<(Duration, RequestCounts), BenchError>>,
) -> Result<PhaseFigures, BenchError> {
    let calls = running.cloud_calls();
    let (elapsed, requests) = phase.await?;
    let cloud_calls = running.cloud_calls() - calls;
    running.alive()?;
    Ok(PhaseFigures { elapsed, requests, cloud_calls, memory: running.memory() })
}

/// The one runner: a fresh environment, the write probe, the controllers (here, or in their own processes as
/// `processes` says), then the phases. `progress` gets a line per step.
pub(super) async fn run(
    sizes: MachinesBench,
    processes: Option<&ProcessConfig>,
    progress: &dyn Fn(&str),
) -> Result<RunFigures, BenchError> {
    let slug = processes.map_or("in-process", |p| p.side.slug());
    let dir = std::env::temp_dir().join(format!("mcm-bench-{}-{slug}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| setup(&dir, e))?;
    let options = DevOptions {
        listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        kubeconfig_out: dir.join("kubeconfig"),
        sample: false,
        // Started below, after the write probe.
        run_controllers: false,
        webhooks: false,
        // No in-place rollouts to answer, and its Node watch would count among the measured requests.
        node_agent: None,
        ..DevOptions::default()
    };
    let mut env = DevEnvironment::start(&options, |_| {}).await?;
    let scenario = Scenario::prepare(&env, sizes).await?;
    let result = async {
        progress("measuring the server's write time");
        let write_time = measure_write_time(&env.client).await?;
        let mut running = match processes {
            None => {
                env.start_controllers();
                Running::InProcess { cloud: env.cloud.clone() }
            }
            Some(config) => {
                let metrics = CloudMetrics::default();
                let driver =
                    Arc::new(MeteredDriver::new(Arc::new(InMemoryDriver::new(env.cloud.clone())), metrics.clone()));
                let socket = dir.join("driver.sock");
                let serve = DriverServe::start(driver, &DriverEndpoint::Unix(socket.clone()))
                    .await
                    .map_err(|e| setup(&socket, e))?;
                let controllers = Controllers::spawn(config, &options.kubeconfig_out, &serve.endpoint, &dir)?;
                Running::Processes { controllers, serve, metrics }
            }
        };
        let phases = async {
            wait_until_quiet(|| scenario.total_requests(), || running.alive()).await?;
            progress("creating");
            let create = measured(&mut running, scenario.create()).await?;
            let roll = if sizes.rolling_update {
                progress("rolling update");
                Some(measured(&mut running, scenario.roll()).await?)
            } else {
                None
            };
            let rest = if sizes.rest.is_zero() {
                None
            } else {
                progress(&format!("at rest for {:?}", sizes.rest));
                Some(measured(&mut running, scenario.rest()).await?)
            };
            Ok::<_, BenchError>((create, roll, rest))
        }
        .await;
        running.stop().await;
        let (create, roll, rest) = phases?;
        Ok::<_, BenchError>((write_time, create, roll, rest))
    }
    .await;
    let stats = env.cloud.stats();
    let by_phase = scenario.by_phase();
    drop(scenario);
    env.shutdown().await;
    let (write_time, create, roll, rest) = match result {
        Ok(figures) => figures,
        // The logs stay for a look at what went wrong.
        Err(e) if processes.is_some() => {
            return Err(BenchError::Setup(format!("{e} (the controllers' logs are in {})", dir.display())));
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    Ok(RunFigures {
        write_time,
        create,
        roll,
        rest,
        vms_created: stats.vms_created,
        vms_deleted: stats.vms_deleted,
        by_phase,
    })
}

/// Runs the machines benchmark: the controllers in this process, or ours in an `mcm run` of its own.
pub async fn machines(
    sizes: MachinesBench,
    own_process: Option<OwnProcess>,
    progress: impl Fn(&str),
) -> Result<MachinesReport, BenchError> {
    let config = own_process.map(|own| ProcessConfig {
        side: Side::Ours,
        program: own.ours,
        kube_api_qps: own.kube_api_qps,
        kube_api_burst: own.kube_api_burst,
    });
    let figures = run(sizes, config.as_ref(), &progress).await?;
    Ok(MachinesReport { sizes, own_process: config, figures })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_parses_into_the_objects() {
        let text = manifest(10, &[4, 3, 3], Duration::ZERO);
        let docs: Vec<serde_json::Value> =
            serde_yaml::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect();
        assert_eq!(docs.len(), 5);
        let d: MachineDeployment = serde_json::from_value(docs[2].clone()).unwrap();
        assert_eq!(d.spec.replicas, 4);
        let surge = d.spec.strategy.unwrap().rolling_update.unwrap().max_surge.unwrap();
        assert_eq!(surge, k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("10%".into()));
    }

    #[test]
    fn machines_are_spread_evenly_over_the_deployments() {
        let sizes = MachinesBench {
            machines: 10,
            deployments: 3,
            surge_percent: 10,
            timeout: Duration::ZERO,
            boot: Duration::ZERO,
            rest: Duration::ZERO,
            rolling_update: true,
        };
        assert_eq!(sizes.per_deployment(), vec![4, 3, 3]);
        let none = MachinesBench { deployments: 0, ..sizes };
        assert_eq!(none.per_deployment(), vec![10]);
    }

    #[test]
    fn the_class_boots_in_the_benchmark_s_boot_time() {
        for (boot, seconds) in [(Duration::ZERO, 0.0), (Duration::from_millis(2500), 2.5)] {
            let text = manifest(10, &[1], boot);
            let class: serde_json::Value = serde_yaml::Deserializer::from_str(&text)
                .map(|d| serde::Deserialize::deserialize(d).unwrap())
                .nth(1)
                .unwrap();
            assert_eq!(class["kind"], "MachineClass");
            let spec = crate::providers::inmemory::ProviderSpec::parse(&class["providerSpec"]).unwrap();
            assert_eq!(spec.boot_seconds, seconds, "{text}");
        }
    }

    #[test]
    fn writes_are_every_verb_but_get_list_and_watch() {
        let counts: BTreeMap<(String, String), u64> = [
            (("get", "machines"), 5),
            (("list", "nodes"), 1),
            (("watch", "nodes"), 1),
            (("patch", "nodes/status"), 7),
            (("create", "events"), 2),
            (("update", "leases"), 3),
            (("delete", "machines"), 1),
        ]
        .into_iter()
        .map(|((v, r), n)| ((v.to_string(), r.to_string()), n))
        .collect();
        let requests = RequestCounts::of(counts);
        assert_eq!((requests.total, requests.writes, requests.kubelet, requests.sets), (20, 13, 7, 1));
        assert_eq!(requests.busiest_text(2), "patch nodes/status 7, get machines 5");
    }
}
