//! One chaos run's world (the API server, the faulty cloud, the controller processes, a watcher of the
//! deployment's bounds) and what a trial does in it: the plan's timeline, then convergence and the verdicts.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::cloud::{CloudFaultRates, FaultyCloud};
use super::invariants::{self, Bounds, MachineView, NodeView, Owner, Snapshot, VmView};
use super::plan::{Fault, Step, TrialPlan};
use super::processes::{Pair, ProcessConfig};
use super::report::TrialReport;
use super::{ChaosError, ChaosOptions};
use crate::api::mcm::names::{FREEZE_LABEL, FREEZE_VALUE, NODE_LABEL};
use crate::api::mcm::{Machine, MachineDeployment, MachinePhase, MachineSet};
use crate::apiserver::ApiServer;
use crate::apiserver::faults::{Selector, Verb};
use crate::dev::{DevEnvironment, DevOptions, apply_manifest};
use crate::providers::grpc::{DriverEndpoint, DriverServe};
use crate::providers::inmemory::InMemoryDriver;

/// The namespace of the run's objects (and of the controllers' Lease).
const NAMESPACE: &str = "chaos";
/// The deployment driven.
const DEPLOYMENT: &str = "workers";
/// The template label a rolling update changes.
const REVISION: &str = "chaos-rev";
/// Our cluster's tag key (what the class tags VMs with and the orphan collection lists by).
const CLUSTER_TAG: &str = "kubernetes.io/cluster/chaos";
const ROLE_TAG: &str = "kubernetes.io/role/node";
/// `maxSurge` of the deployment, in percent, and the controllers' default safety margins.
const SURGE_PERCENT: u32 = 10;
const SAFETY_UP: u32 = 2;
const SAFETY_DOWN: u32 = 1;
/// How long after a VM's deletion the simulated cloud-controller-manager deletes its Node.
const NODE_REMOVAL: Duration = Duration::from_secs(5);

fn manifest(boot: Duration) -> String {
    let boot = boot.as_secs_f64();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: chaos\n  namespace: {NAMESPACE}\ntype: Opaque\n\
         stringData:\n  userData: \"#!/bin/sh\"\n---\n\
         apiVersion: machine.sapcloud.io/v1alpha1\nkind: MachineClass\nmetadata:\n  name: chaos\n  namespace: {NAMESPACE}\n\
         provider: InMemory\nproviderSpec:\n  bootSeconds: {boot}\n  tags:\n    {CLUSTER_TAG}: \"1\"\n    {ROLE_TAG}: \"1\"\n\
         secretRef:\n  name: chaos\n  namespace: {NAMESPACE}\n---\n\
         apiVersion: machine.sapcloud.io/v1alpha1\nkind: MachineDeployment\nmetadata:\n  name: {DEPLOYMENT}\n  namespace: {NAMESPACE}\n\
         spec:\n  replicas: 0\n  selector:\n    matchLabels:\n      name: {DEPLOYMENT}\n  strategy:\n    type: RollingUpdate\n\
         \x20   rollingUpdate:\n      maxSurge: \"{SURGE_PERCENT}%\"\n      maxUnavailable: 0\n  template:\n    metadata:\n      labels:\n        name: {DEPLOYMENT}\n        {REVISION}: \"0\"\n\
         \x20   spec:\n      class:\n        kind: MachineClass\n        name: chaos\n"
    )
}

/// Machines not being deleted, and how many of them are Running.
fn count(store: &Store<Machine>) -> (u32, u32) {
    let machines = store.state();
    let live = machines.iter().filter(|m| m.metadata.deletion_timestamp.is_none());
    let (mut all, mut running) = (0, 0);
    for m in live {
        all += 1;
        if m.status.as_ref().and_then(|s| s.current_status.as_ref()).and_then(|c| c.phase.as_ref())
            == Some(&MachinePhase::Running)
        {
            running += 1;
        }
    }
    (all, running)
}

/// A breach's context: the wall-clock instant (to find it in the controllers' logs) and, per MachineSet, its
/// machines not being deleted against its `spec.replicas`, with how many are Running.
fn by_set(machines: &Store<Machine>, sets: &Store<MachineSet>) -> String {
    let mut per_set: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for m in machines.state().iter().filter(|m| m.metadata.deletion_timestamp.is_none()) {
        let owner = m.owner_references().first().map(|o| o.name.clone()).unwrap_or_else(|| "(no owner)".into());
        let entry = per_set.entry(owner).or_default();
        entry.0 += 1;
        if m.status.as_ref().and_then(|s| s.current_status.as_ref()).and_then(|c| c.phase.as_ref())
            == Some(&MachinePhase::Running)
        {
            entry.1 += 1;
        }
    }
    let spec = |name: &str| {
        sets.state().iter().find(|s| s.name_any() == name).map_or("?".to_string(), |s| s.spec.replicas.to_string())
    };
    let sets: Vec<String> = per_set
        .iter()
        .map(|(name, (all, running))| format!("{name} {all}/{} ({running} Running)", spec(name)))
        .collect();
    format!(" [{}: {}]", jiff::Timestamp::now(), sets.join(", "))
}

/// The run's world.
pub(super) struct World {
    env: DevEnvironment,
    cloud: Arc<FaultyCloud>,
    serve: DriverServe,
    pair: Pair,
    watch: tokio::task::JoinHandle<()>,
    /// Keeps the MachineSet cache a breach's context reads.
    watch_sets: tokio::task::JoinHandle<()>,
    bounds: Arc<Mutex<(Instant, Bounds)>>,
    /// VMs the run planted, with whose they pretend to be.
    planted: BTreeMap<String, Owner>,
    dir: std::path::PathBuf,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The bounds are updated whole under the lock; a panicking holder leaves nothing half-written.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn setup(what: impl std::fmt::Display) -> ChaosError {
    ChaosError::Setup(what.to_string())
}

impl World {
    pub(super) async fn start(options: &ChaosOptions) -> Result<World, ChaosError> {
        let dir = std::env::temp_dir().join(format!("mcm-chaos-{}-{}", std::process::id(), options.seed));
        std::fs::create_dir_all(&dir).map_err(|e| setup(format!("{}: {e}", dir.display())))?;
        let dev = DevOptions {
            listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            kubeconfig_out: dir.join("kubeconfig"),
            sample: false,
            run_controllers: false,
            webhooks: false,
            // The cloud-controller-manager's part: a machine deleted before it learned its Node's name leaves the
            // Node to it, as in a real cluster.
            kubelet: crate::providers::inmemory::KubeletConfig {
                remove_nodes_of_deleted_vms: Some(NODE_REMOVAL),
                ..Default::default()
            },
            // No in-place rollouts here: without the node agent the trial's API requests are what they were.
            node_agent: None,
            ..DevOptions::default()
        };
        let env = DevEnvironment::start(&dev, |_| {}).await?;
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).map_err(|e| setup(e.to_string()))?;
        Api::<Namespace>::all(env.client.clone()).create(&PostParams::default(), &namespace).await?;
        apply_manifest(&env.client, &manifest(options.boot)).await?;

        let cloud = Arc::new(FaultyCloud::new(Arc::new(InMemoryDriver::new(env.cloud.clone())), options.seed));
        let socket = dir.join("driver.sock");
        let serve = DriverServe::start(cloud.clone(), &DriverEndpoint::Unix(socket.clone()))
            .await
            .map_err(|e| setup(format!("{}: {e}", socket.display())))?;

        let (store, writer) = reflector::store();
        let (sets, sets_writer) = reflector::store();
        let bounds = Arc::new(Mutex::new((Instant::now(), Bounds::new(SURGE_PERCENT, 0, SAFETY_UP, SAFETY_DOWN))));
        let watch_sets = {
            let api: Api<MachineSet> = Api::namespaced(env.client.clone(), NAMESPACE);
            tokio::spawn(
                reflector(sets_writer, watcher(api, watcher::Config::default()))
                    .default_backoff()
                    .for_each(|_| futures::future::ready(())),
            )
        };
        let watch = {
            let (store, sets, bounds) = (store.clone(), sets.clone(), bounds.clone());
            let api: Api<Machine> = Api::namespaced(env.client.clone(), NAMESPACE);
            tokio::spawn(reflector(writer, watcher(api, watcher::Config::default())).default_backoff().for_each(
                move |_| {
                    let (machines, running) = count(&store);
                    let mut guard = lock(&bounds);
                    let at = guard.0.elapsed();
                    let frozen = sets
                        .state()
                        .iter()
                        .any(|s| s.labels().get(FREEZE_LABEL).map(String::as_str) == Some(FREEZE_VALUE));
                    guard.1.observe(at, machines, running, frozen, || by_set(&store, &sets));
                    futures::future::ready(())
                },
            ))
        };
        store.wait_until_ready().await.map_err(|e| setup(e.to_string()))?;
        sets.wait_until_ready().await.map_err(|e| setup(e.to_string()))?;

        let pause = options.statuscheck_timeout();
        let flags = vec![
            "--leader-elect-lease-duration=3s".to_string(),
            "--leader-elect-renew-deadline=2s".to_string(),
            "--leader-elect-retry-period=500ms".to_string(),
            format!("--machine-safety-orphan-vms-period={}s", options.orphan_period.as_secs().max(1)),
            format!("--machine-safety-apiserver-statuscheck-timeout={}s", pause.as_secs().max(1)),
            format!("--machine-safety-apiserver-statuscheck-period={}s", (pause.as_secs() / 2).max(1)),
        ];
        let pair = Pair::start(ProcessConfig {
            program: options.program.clone(),
            kubeconfig: dev.kubeconfig_out.clone(),
            namespace: NAMESPACE.to_string(),
            driver: serve.endpoint.to_string(),
            flags,
            dir: dir.clone(),
        })?;
        Ok(World { env, cloud, serve, pair, watch, watch_sets, bounds, planted: BTreeMap::new(), dir })
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Tells the bounds' watcher what the deployment now wants.
    fn wish(&self, replicas: u32) {
        let mut bounds = lock(&self.bounds);
        let at = bounds.0.elapsed();
        bounds.1.wish(at, replicas);
    }

    fn server(&self) -> Result<&ApiServer, ChaosError> {
        self.env.server.embedded().ok_or_else(|| setup("the chaos run needs the embedded API server"))
    }

    /// One trial: the plan's timeline under faults, then convergence, one orphan period and the verdicts.
    pub(super) async fn trial(
        &mut self,
        options: &ChaosOptions,
        plan: &TrialPlan,
        replicas_before: u32,
        revision_before: u32,
        progress: &dyn Fn(&str),
    ) -> Result<TrialReport, ChaosError> {
        let started = Instant::now();
        let created_before = self.env.cloud.stats().vms_created;
        let deleted_before = self.env.cloud.stats().vms_deleted;
        let kills_before = self.pair.kills;
        let faults_before = self.cloud.counts();
        let api_failures_before = self.server()?.faults().injected_failures();
        {
            let mut guard = lock(&self.bounds);
            guard.1.breaches.clear();
            guard.1.frozen = 0;
            guard.1.peak = 0;
            guard.1.lowest_running = None;
        }
        self.faults_on(options, plan.seed)?;

        // The timeline: steps and faults at their offsets.
        let mut events: Vec<(Duration, Event)> = plan.steps.iter().map(|(t, s)| (*t, Event::Step(*s))).collect();
        events.extend(plan.faults.iter().map(|(t, f)| (*t, Event::Fault(*f))));
        events.sort_by_key(|(t, _)| *t);
        let (mut replicas, mut revision) = (replicas_before, revision_before);
        let mut counts = EventCounts::default();
        let window_start = tokio::time::Instant::now();
        for (offset, event) in events {
            tokio::time::sleep_until(window_start + offset).await;
            self.pair.exited()?;
            match event {
                Event::Step(Step::Scale(n)) => {
                    replicas = n;
                    self.wish(n);
                    self.patch_deployment(json!({"spec": {"replicas": n}})).await?;
                }
                Event::Step(Step::RollingUpdate(rev)) => {
                    revision = rev;
                    self.wish(replicas);
                    let labels = json!({"name": DEPLOYMENT, REVISION: rev.to_string()});
                    self.patch_deployment(json!({"spec": {"template": {"metadata": {"labels": labels}}}})).await?;
                }
                Event::Fault(Fault::KillLeader) => {
                    if let Some(name) = self.pair.kill_leader(&self.env.client).await? {
                        progress(&format!("killed the leader {name} (SIGKILL); a new standby started"));
                    }
                }
                Event::Fault(Fault::CloseWatches) => {
                    self.server()?.close_watches();
                    counts.watch_closes += 1;
                }
                Event::Fault(Fault::PauseApiServer(length)) => {
                    progress(&format!("the API server stops answering for {length:?}"));
                    self.server()?.faults().pause(length);
                    self.server()?.close_watches();
                    counts.pauses += 1;
                }
                Event::Fault(fault @ (Fault::ForeignVm | Fault::UntaggedVm | Fault::OrphanVm)) => {
                    let n = self.planted.len();
                    let (name, tags, owner) = match fault {
                        Fault::ForeignVm => (
                            format!("foreign-{n}"),
                            [("kubernetes.io/cluster/other".to_string(), "1".to_string())]
                                .into_iter()
                                .chain([(ROLE_TAG.to_string(), "1".to_string())])
                                .collect(),
                            Owner::Foreign,
                        ),
                        Fault::UntaggedVm => (format!("untagged-{n}"), BTreeMap::new(), Owner::Foreign),
                        _ => (
                            format!("orphan-{n}"),
                            [(CLUSTER_TAG.to_string(), "1".to_string()), (ROLE_TAG.to_string(), "1".to_string())]
                                .into_iter()
                                .collect(),
                            Owner::PlantedOrphan,
                        ),
                    };
                    let vm = self.env.cloud.plant(&name, tags);
                    self.planted.insert(vm.provider_id, owner);
                    counts.planted += 1;
                }
            }
        }
        tokio::time::sleep_until(window_start + options.window).await;
        let api_failures = self.faults_off()? - api_failures_before;
        progress("faults stopped; waiting for convergence");

        // Convergence: the wanted machines, all Running on the wanted template, nothing being deleted.
        let revision = revision.to_string();
        let converge_started = Instant::now();
        let converged =
            self.wait(options.converge_timeout, |s| invariants::check(s)[0].held, replicas, &revision).await?;
        let converge = converge_started.elapsed();
        // One orphan period (and a margin for the collection itself) for leaks to be collected.
        progress(match converged {
            Some(_) => "converged; waiting one orphan period for leaks to be collected",
            None => "not converged within the timeout",
        });
        let leaks_deadline = options.orphan_period + options.orphan_period / 2 + Duration::from_secs(10);
        let snapshot = match converged {
            Some(_) => {
                let all_held = |s: &Snapshot| invariants::check(s).iter().all(|v| v.held);
                self.wait(leaks_deadline, all_held, replicas, &revision).await?
            }
            None => None,
        };
        let snapshot = match snapshot {
            Some(s) => s,
            None => self.snapshot(replicas, &revision).await?,
        };
        let mut verdicts = invariants::check(&snapshot);
        let (peak, lowest_running, frozen) = {
            let guard = lock(&self.bounds);
            verdicts.push(guard.1.verdict());
            (guard.1.peak, guard.1.lowest_running, guard.1.frozen)
        };
        let cloud = self.cloud.counts();
        let stats = self.env.cloud.stats();
        Ok(TrialReport {
            trial: plan.trial,
            seed: plan.seed,
            steps: plan.steps.iter().map(|(_, s)| *s).collect(),
            replicas,
            kills: self.pair.kills - kills_before,
            watch_closes: counts.watch_closes,
            pauses: counts.pauses,
            planted: counts.planted,
            api_failures,
            cloud_faults: cloud.minus(&faults_before),
            vms_created: stats.vms_created - created_before,
            vms_deleted: stats.vms_deleted - deleted_before,
            peak_machines: peak,
            lowest_running,
            frozen,
            converge: converged.map(|_| converge),
            elapsed: started.elapsed(),
            verdicts,
        })
    }

    /// Writes fail, creates fail, calls are throttled: from now until [`World::faults_off`].
    fn faults_on(&self, options: &ChaosOptions, seed: u64) -> Result<(), ChaosError> {
        let faults = self.server()?.faults();
        faults.seed(seed);
        let share = options.api_write_failures / 3.0;
        for verb in [Verb::Create, Verb::Update, Verb::Patch, Verb::Delete] {
            for code in [409, 500, 429] {
                faults.fail_share(Selector::new(Some(verb), None), share, code);
            }
        }
        self.cloud.seed(seed);
        self.cloud
            .set_rates(CloudFaultRates { create_failures: options.create_failures, throttling: options.throttling });
        Ok(())
    }

    /// Ends every fault; returns how many API requests were failed on purpose during the trial.
    fn faults_off(&self) -> Result<u64, ChaosError> {
        let faults = self.server()?.faults();
        faults.clear();
        self.cloud.set_rates(CloudFaultRates::default());
        Ok(faults.injected_failures())
    }

    /// A merge patch of the deployment, retried while the API server fails on purpose.
    async fn patch_deployment(&self, patch: serde_json::Value) -> Result<(), ChaosError> {
        let api: Api<MachineDeployment> = Api::namespaced(self.env.client.clone(), NAMESPACE);
        let attempt = || async { api.patch(DEPLOYMENT, &PatchParams::default(), &Patch::Merge(&patch)).await };
        attempt.retry(ExponentialBuilder::default().with_max_delay(Duration::from_secs(2)).with_max_times(60)).await?;
        Ok(())
    }

    /// Waits until `done` holds of a snapshot (returned), or `timeout` passes (`None`).
    async fn wait(
        &mut self,
        timeout: Duration,
        done: impl Fn(&Snapshot) -> bool,
        replicas: u32,
        revision: &str,
    ) -> Result<Option<Snapshot>, ChaosError> {
        let deadline = Instant::now() + timeout;
        loop {
            self.pair.exited()?;
            let snapshot = self.snapshot(replicas, revision).await?;
            if done(&snapshot) {
                return Ok(Some(snapshot));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The API server's and the cloud's state now.
    async fn snapshot(&self, replicas: u32, revision: &str) -> Result<Snapshot, ChaosError> {
        let client = &self.env.client;
        let machines = Api::<Machine>::namespaced(client.clone(), NAMESPACE).list(&ListParams::default()).await?;
        let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?;
        let sets = Api::<MachineSet>::namespaced(client.clone(), NAMESPACE).list(&ListParams::default()).await?;
        let deployments =
            Api::<MachineDeployment>::namespaced(client.clone(), NAMESPACE).list(&ListParams::default()).await?;
        let mut deleting_owners: Vec<String> = sets
            .items
            .iter()
            .filter(|s| s.metadata.deletion_timestamp.is_some())
            .map(|s| format!("MachineSet/{}", s.name_any()))
            .collect();
        deleting_owners.extend(
            deployments
                .items
                .iter()
                .filter(|d| d.metadata.deletion_timestamp.is_some())
                .map(|d| format!("MachineDeployment/{}", d.name_any())),
        );
        let vms = self
            .env
            .cloud
            .vms()
            .into_iter()
            .map(|vm| VmView {
                owner: match self.planted.get(&vm.provider_id) {
                    Some(owner) => *owner,
                    None if vm.has_tag(CLUSTER_TAG) => Owner::Ours,
                    None => Owner::Foreign,
                },
                exists: vm.exists(),
                provider_id: vm.provider_id,
                machine_name: vm.machine_name,
            })
            .collect();
        Ok(Snapshot {
            machines: machines
                .items
                .iter()
                .map(|m| MachineView {
                    name: m.name_any(),
                    provider_id: m.spec.provider_id.clone(),
                    phase: m
                        .status
                        .as_ref()
                        .and_then(|s| s.current_status.as_ref())
                        .and_then(|c| c.phase.as_ref())
                        .map(|p| p.to_string()),
                    node: m.labels().get(NODE_LABEL).cloned().filter(|n| !n.is_empty()),
                    revision: m.labels().get(REVISION).cloned(),
                    deleting: m.metadata.deletion_timestamp.is_some(),
                })
                .collect(),
            nodes: nodes
                .items
                .iter()
                .map(|n| NodeView {
                    name: n.name_any(),
                    provider_id: n.spec.as_ref().and_then(|s| s.provider_id.clone()),
                    deleting: n.metadata.deletion_timestamp.is_some(),
                })
                .collect(),
            vms,
            deleting_owners,
            replicas,
            revision: revision.to_string(),
        })
    }

    /// Stops the processes and the server; `clean` removes the logs.
    pub(super) async fn stop(self, clean: bool) {
        self.pair.stop().await;
        let _ = self.serve.stop().await;
        self.watch.abort();
        self.watch_sets.abort();
        self.env.shutdown().await;
        if clean {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One entry of a trial's timeline.
#[derive(Clone, Copy, Debug)]
enum Event {
    Step(Step),
    Fault(Fault),
}

#[derive(Default)]
struct EventCounts {
    watch_closes: u32,
    pauses: u32,
    planted: u32,
}
