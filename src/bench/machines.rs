//! `mcm bench machines`: every controller against the embedded API server and the in-memory cloud, in this one
//! process, as `mcm dev` runs them. MachineDeployments totalling N machines of a class with zero boot latency:
//! the time until every machine is Running, the API requests per machine and the process's peak resident
//! memory; then a rolling update of all N machines (`maxSurge` P%, `maxUnavailable` 0), measured the same way.
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
use crate::apiserver::faults::Faults;
use crate::dev::{DevEnvironment, DevOptions, apply_manifest};

const NAMESPACE: &str = "bench";

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

/// Peak resident memory of this process so far (`VmHWM`), in bytes.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn manifest(surge_percent: u32, deployments: usize, per_deployment: &[usize]) -> String {
    let mut out = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata:\n  name: instant\n  namespace: {NAMESPACE}\ntype: Opaque\n\
         stringData:\n  userData: \"#!/bin/sh\"\n---\n\
         apiVersion: machine.sapcloud.io/v1alpha1\nkind: MachineClass\nmetadata:\n  name: instant\n  namespace: {NAMESPACE}\n\
         provider: InMemory\nproviderSpec:\n  bootSeconds: 0\n  tags:\n    kubernetes.io/cluster/bench: \"1\"\n    kubernetes.io/role/node: \"1\"\n\
         secretRef:\n  name: instant\n  namespace: {NAMESPACE}\n"
    );
    for (i, replicas) in per_deployment.iter().enumerate().take(deployments) {
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

/// What the API server counted since the last reset: total, and the busiest `(verb, resource)` pairs.
fn requests(faults: &Faults, machines: usize) -> String {
    let counts = faults.request_counts();
    let total: u64 = counts.values().sum();
    // The kubelet simulator plays the nodes: its Node creations and status posts are not the controllers'.
    let kubelet: u64 = counts
        .iter()
        .filter(|((verb, resource), _)| {
            (verb == "create" && resource == "nodes") || (verb == "patch" && resource == "nodes/status")
        })
        .map(|(_, n)| *n)
        .sum();
    let mut busiest: Vec<(&(String, String), &u64)> = counts.iter().collect();
    busiest.sort_by(|a, b| b.1.cmp(a.1));
    let top: Vec<String> = busiest.iter().take(8).map(|((v, r), n)| format!("{v} {r} {n}")).collect();
    // What the set and deployment controllers write to their own objects and to Machines (create, delete).
    let sets: u64 = counts
        .iter()
        .filter(|((verb, resource), _)| {
            resource.starts_with("machinesets")
                || resource.starts_with("machinedeployments")
                || (resource == "machines" && (verb == "create" || verb == "delete"))
        })
        .map(|(_, n)| *n)
        .sum();
    let per = |n: u64| n as f64 / machines.max(1) as f64;
    format!(
        "{total} requests = {:.1} per machine ({:.1} without the kubelet simulator's Node writes; {:.1} on \
         MachineSets, MachineDeployments and Machine creations and deletions); busiest: {}",
        per(total),
        per(total - kubelet),
        per(sets),
        top.join(", ")
    )
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
    // The request counts come from the embedded server, which the options above always start.
    let shared = env
        .server
        .embedded()
        .map(|server| server.shared().clone())
        .ok_or_else(|| BenchError::Setup("the benchmark needs the embedded API server".into()))?;
    let faults = &shared.faults;
    let deployments = sizes.deployments.max(1);
    let per_deployment: Vec<usize> = (0..deployments)
        .map(|i| sizes.machines / deployments + usize::from(i < sizes.machines % deployments))
        .collect();
    let mut report = format!(
        "machines: {} in {deployments} MachineDeployments (bootSeconds 0), rolling update with maxSurge {}%\n",
        sizes.machines, sizes.surge_percent
    );

    // The benchmark's own eyes: one reflector over the namespace's Machines.
    let api: Api<Machine> = Api::namespaced(env.client.clone(), NAMESPACE);
    let (store, writer) = reflector::store();
    let watch = tokio::spawn(
        reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .for_each(|_| futures::future::ready(())),
    );
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    namespaces.create(&PostParams::default(), &ns).await?;
    store.wait_until_ready().await.map_err(|e| BenchError::Setup(e.to_string()))?;

    // 1. From nothing to N Running machines.
    faults.reset_counts();
    let started = Instant::now();
    apply_manifest(&env.client, &manifest(sizes.surge_percent, deployments, &per_deployment)).await?;
    wait_all_running(&store, sizes.machines, sizes.timeout, "every machine Running", |_| true).await?;
    let elapsed = started.elapsed();
    report.push_str(&format!(
        "create: {} machines Running after {:.2} s ({:.0} machines/s)\n  {}\n",
        sizes.machines,
        elapsed.as_secs_f64(),
        sizes.machines as f64 / elapsed.as_secs_f64(),
        requests(faults, sizes.machines)
    ));
    if let Some(peak) = peak_rss_bytes() {
        report.push_str(&format!("  peak resident memory so far: {} (the whole process)\n", mib(peak)));
    }

    // 2. A rolling update of every machine.
    faults.reset_counts();
    let deployments_api: Api<MachineDeployment> = Api::namespaced(env.client.clone(), NAMESPACE);
    let started = Instant::now();
    for i in 0..deployments {
        let patch = json!({"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}});
        deployments_api.patch(&format!("pool-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    let rolled = |m: &Machine| m.metadata.labels.as_ref().and_then(|l| l.get("rev")).map(String::as_str) == Some("2");
    wait_all_running(&store, sizes.machines, sizes.timeout, "the rolling update", rolled).await?;
    let elapsed = started.elapsed();
    report.push_str(&format!(
        "rolling update: {} machines replaced in {:.2} s\n  {}\n",
        sizes.machines,
        elapsed.as_secs_f64(),
        requests(faults, sizes.machines)
    ));
    if let Some(peak) = peak_rss_bytes() {
        report.push_str(&format!("peak resident memory: {} (API server, controllers, cloud and kubelet)\n", mib(peak)));
    }
    let cloud = env.cloud.stats();
    let by_phase: BTreeMap<String, usize> = store.state().iter().fold(BTreeMap::new(), |mut acc, m| {
        let phase = m.status.as_ref().and_then(|s| s.current_status.as_ref()).and_then(|c| c.phase.clone());
        *acc.entry(phase.map_or("none".to_string(), |p| p.to_string())).or_default() += 1;
        acc
    });
    report.push_str(&format!(
        "cloud: {} VMs created, {} deleted; machines by phase at the end: {by_phase:?}\n",
        cloud.vms_created, cloud.vms_deleted
    ));
    watch.abort();
    env.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_parses_into_the_objects() {
        let text = manifest(10, 3, &[4, 3, 3]);
        let docs: Vec<serde_json::Value> =
            serde_yaml::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect();
        assert_eq!(docs.len(), 6);
        let d: MachineDeployment = serde_json::from_value(docs[3].clone()).unwrap();
        assert_eq!(d.spec.replicas, 4);
        let surge = d.spec.strategy.unwrap().rolling_update.unwrap().max_surge.unwrap();
        assert_eq!(surge, k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("10%".into()));
    }
}
