//! `mcm bench machines`: every controller against the embedded API server and the in-memory cloud, in this one
//! process, as `mcm dev` runs them. MachineDeployments totalling N machines of a class with zero boot latency:
//! the time until every machine is Running, the API requests per machine and the process's peak resident
//! memory; then a rolling update of all N machines (`maxSurge` P%, `maxUnavailable` 0), measured the same way.
//! With `--peer`, [`super::peer`] runs the same [`Scenario`] with upstream MCM's controllers and with ours, each
//! in its own processes.
//!
//! The benchmark watches Machines with one kube-runtime reflector (one list and one watch request, made before
//! the counters are reset), so its own reads do not count.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

use super::BenchError;
use crate::api::mcm::{Machine, MachineDeployment, MachinePhase};
use crate::apiserver::Shared;
use crate::apiserver::faults::Faults;
use crate::dev::{DevEnvironment, DevOptions, apply_manifest};

/// The namespace the benchmark's objects live in.
pub(super) const NAMESPACE: &str = "bench";

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
}

impl MachinesBench {
    /// The line that opens every report of this scenario.
    pub(super) fn header(&self) -> String {
        format!(
            "machines: {} in {} MachineDeployments (bootSeconds 0), rolling update with maxSurge {}%\n",
            self.machines,
            self.deployments.max(1),
            self.surge_percent
        )
    }

    fn per_deployment(&self) -> Vec<usize> {
        let deployments = self.deployments.max(1);
        (0..deployments).map(|i| self.machines / deployments + usize::from(i < self.machines % deployments)).collect()
    }
}

/// Peak resident memory of this process so far (`VmHWM`), in bytes.
fn peak_rss_bytes() -> Option<u64> {
    peak_rss_of("self")
}

/// Peak resident memory (`VmHWM`) of process `pid` (`self` for this one), in bytes.
pub(super) fn peak_rss_of(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

pub(super) fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn manifest(surge_percent: u32, per_deployment: &[usize]) -> String {
    let mut out = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: instant\n  namespace: {NAMESPACE}\ntype: Opaque\n\
         stringData:\n  userData: \"#!/bin/sh\"\n---\n\
         apiVersion: machine.sapcloud.io/v1alpha1\nkind: MachineClass\nmetadata:\n  name: instant\n  namespace: {NAMESPACE}\n\
         provider: InMemory\nproviderSpec:\n  bootSeconds: 0\n  tags:\n    kubernetes.io/cluster/bench: \"1\"\n    kubernetes.io/role/node: \"1\"\n\
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
    /// The busiest `(verb, resource)` pairs, busiest first.
    pub busiest: Vec<(String, String, u64)>,
}

impl RequestCounts {
    fn of(faults: &Faults) -> RequestCounts {
        let counts = faults.request_counts();
        let total = counts.values().sum();
        let kubelet = counts
            .iter()
            .filter(|((verb, resource), _)| {
                (verb == "create" && resource == "nodes") || (verb == "patch" && resource == "nodes/status")
            })
            .map(|(_, n)| *n)
            .sum();
        let sets = counts
            .iter()
            .filter(|((verb, resource), _)| {
                resource.starts_with("machinesets")
                    || resource.starts_with("machinedeployments")
                    || (resource == "machines" && (verb == "create" || verb == "delete"))
            })
            .map(|(_, n)| *n)
            .sum();
        let mut busiest: Vec<(String, String, u64)> = counts.into_iter().map(|((v, r), n)| (v, r, n)).collect();
        busiest.sort_by_key(|entry| std::cmp::Reverse(entry.2));
        busiest.truncate(8);
        RequestCounts { total, kubelet, sets, busiest }
    }

    /// Requests per machine, without the kubelet simulator's Node writes.
    pub(super) fn controllers_per_machine(&self, machines: usize) -> f64 {
        (self.total - self.kubelet) as f64 / machines.max(1) as f64
    }

    fn line(&self, machines: usize) -> String {
        let per = |n: u64| n as f64 / machines.max(1) as f64;
        let top: Vec<String> = self.busiest.iter().map(|(v, r, n)| format!("{v} {r} {n}")).collect();
        format!(
            "{} requests = {:.1} per machine ({:.1} without the kubelet simulator's Node writes; {:.1} on \
             MachineSets, MachineDeployments and Machine creations and deletions); busiest: {}",
            self.total,
            per(self.total),
            self.controllers_per_machine(machines),
            per(self.sets),
            top.join(", ")
        )
    }
}

/// One measured phase of the scenario.
#[derive(Clone, Debug)]
pub(super) struct PhaseFigures {
    /// From the first write until every machine was Running (and current).
    pub elapsed: Duration,
    /// The API server's counts over the phase.
    pub requests: RequestCounts,
}

/// The scenario against a running environment: a namespace watched by the benchmark's own reflector, then
/// [`Scenario::create`] and [`Scenario::roll`].
pub(super) struct Scenario {
    sizes: MachinesBench,
    client: kube::Client,
    shared: std::sync::Arc<Shared>,
    store: Store<Machine>,
    watch: tokio::task::JoinHandle<()>,
}

impl Scenario {
    /// Creates the namespace and starts the benchmark's reflector; nothing is counted yet.
    pub(super) async fn prepare(env: &DevEnvironment, sizes: MachinesBench) -> Result<Scenario, BenchError> {
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
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))
                .map_err(|e| BenchError::Setup(e.to_string()))?;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
        namespaces.create(&PostParams::default(), &ns).await?;
        store.wait_until_ready().await.map_err(|e| BenchError::Setup(e.to_string()))?;
        Ok(Scenario { sizes, client: env.client.clone(), shared, store, watch })
    }

    /// The API server's request counter, for waiting until newly started controllers are quiet.
    pub(super) fn total_requests(&self) -> u64 {
        self.shared.faults.total_requests()
    }

    /// From nothing to N Running machines.
    pub(super) async fn create(&self) -> Result<PhaseFigures, BenchError> {
        self.shared.faults.reset_counts();
        let started = Instant::now();
        apply_manifest(&self.client, &manifest(self.sizes.surge_percent, &self.sizes.per_deployment())).await?;
        wait_all_running(&self.store, self.sizes.machines, self.sizes.timeout, "every machine Running", |_| true)
            .await?;
        Ok(PhaseFigures { elapsed: started.elapsed(), requests: RequestCounts::of(&self.shared.faults) })
    }

    /// A rolling update of every machine (a new template label).
    pub(super) async fn roll(&self) -> Result<PhaseFigures, BenchError> {
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
        Ok(PhaseFigures { elapsed: started.elapsed(), requests: RequestCounts::of(&self.shared.faults) })
    }

    /// Machines by phase, as the benchmark's reflector sees them.
    pub(super) fn by_phase(&self) -> BTreeMap<String, usize> {
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
    }
}

/// Runs the machines benchmark and returns the report as text.
pub async fn machines(sizes: MachinesBench) -> Result<String, BenchError> {
    let dir = std::env::temp_dir().join(format!("mcm-bench-{}", std::process::id()));
    let options = DevOptions {
        listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        kubeconfig_out: dir.join("kubeconfig"),
        sample: false,
        ..DevOptions::default()
    };
    let env = DevEnvironment::start(&options, |_| {}).await?;
    let mut report = sizes.header();
    let scenario = Scenario::prepare(&env, sizes).await?;

    // 1. From nothing to N Running machines.
    let create = scenario.create().await?;
    report.push_str(&format!(
        "create: {} machines Running after {:.2} s ({:.0} machines/s)\n  {}\n",
        sizes.machines,
        create.elapsed.as_secs_f64(),
        sizes.machines as f64 / create.elapsed.as_secs_f64(),
        create.requests.line(sizes.machines)
    ));
    if let Some(peak) = peak_rss_bytes() {
        report.push_str(&format!("  peak resident memory so far: {} (the whole process)\n", mib(peak)));
    }

    // 2. A rolling update of every machine.
    let roll = scenario.roll().await?;
    report.push_str(&format!(
        "rolling update: {} machines replaced in {:.2} s\n  {}\n",
        sizes.machines,
        roll.elapsed.as_secs_f64(),
        roll.requests.line(sizes.machines)
    ));
    if let Some(peak) = peak_rss_bytes() {
        report.push_str(&format!("peak resident memory: {} (API server, controllers, cloud and kubelet)\n", mib(peak)));
    }
    let cloud = env.cloud.stats();
    report.push_str(&format!(
        "cloud: {} VMs created, {} deleted; machines by phase at the end: {:?}\n",
        cloud.vms_created,
        cloud.vms_deleted,
        scenario.by_phase()
    ));
    drop(scenario);
    env.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_parses_into_the_objects() {
        let text = manifest(10, &[4, 3, 3]);
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
        let sizes = MachinesBench { machines: 10, deployments: 3, surge_percent: 10, timeout: Duration::ZERO };
        assert_eq!(sizes.per_deployment(), vec![4, 3, 3]);
        let none = MachinesBench { deployments: 0, ..sizes };
        assert_eq!(none.per_deployment(), vec![10]);
    }
}
