//! `mcm bench`: measured numbers for the speed and memory targets (never asserted in tests).
//!
//! `mcm bench apiserver` drives the embedded API server through kube-rs, as controllers do: create throughput,
//! list latency at N objects, watch fan-out latency with W watchers, and resident memory per N objects.
//! `mcm bench machines` ([`machines`]) runs every controller: MachineDeployments up to N Running machines and a
//! rolling update of all of them, then optionally a rest; with `--controllers-process` ours in an `mcm run` of their
//! own ([`process`]); the report ([`report`]) puts issue #25's targets beside the figures. With `--peer` ([`peer`])
//! the same scenario with upstream MCM's controllers and then ours, each in its own processes, side by side.

mod machines;
mod peer;
mod process;
mod report;

pub use machines::{MachinesBench, OwnProcess, machines};
pub use peer::{PeerBench, side_by_side};
pub use report::MachinesReport;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use tokio::sync::Mutex;

use crate::api::mcm::Machine;
use crate::apiserver::{ApiServer, ServerConfig};

/// Sizes of the API server benchmark.
#[derive(Clone, Copy, Debug)]
pub struct ApiserverBench {
    /// Objects to create and list.
    pub objects: usize,
    /// Concurrent watchers for the fan-out measurement.
    pub watchers: usize,
    /// Parallel clients creating objects.
    pub parallel: usize,
}

/// Why the benchmark stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The server did not start.
    #[error(transparent)]
    Start(#[from] crate::apiserver::StartError),
    /// No client.
    #[error(transparent)]
    Client(#[from] crate::apiserver::ClientError),
    /// A request failed.
    #[error("a request failed: {0}")]
    Kube(#[from] kube::Error),
    /// CRDs could not be installed.
    #[error(transparent)]
    Dev(#[from] crate::dev::DevError),
    /// A watcher saw nothing in time.
    #[error("a watcher did not see the change within 30 s")]
    WatchTimeout,
    /// The controllers did not get there in time.
    #[error("{what} was not done after {after:?}; try fewer machines or a longer --timeout")]
    NotDone {
        /// What was awaited.
        what: &'static str,
        /// How long it waited.
        after: Duration,
    },
    /// Preparing the benchmark failed.
    #[error("could not prepare the benchmark: {0}")]
    Setup(String),
}

fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn machine(i: usize) -> Machine {
    use crate::api::mcm::{ClassSpec, MachineConfiguration, MachineSpec, NodeTemplateSpec};
    let minutes = |m: u64| Some(crate::api::Duration::from_secs(m * 60));
    let mut m = Machine::new(
        &format!("bench-{i:06}"),
        MachineSpec {
            class: ClassSpec { api_group: None, kind: "MachineClass".into(), name: "bench".into() },
            provider_id: Some(format!("inmemory:///local-a/vm-{i:06}")),
            node_template: Some(NodeTemplateSpec {
                metadata: Some(kube::core::ObjectMeta {
                    labels: Some([("pool".to_string(), "bench".to_string())].into()),
                    ..Default::default()
                }),
                spec: None,
            }),
            configuration: MachineConfiguration {
                creation_timeout: minutes(20),
                health_timeout: minutes(10),
                drain_timeout: minutes(120),
                ..Default::default()
            },
        },
    );
    m.metadata.labels =
        Some([("name".to_string(), "bench".to_string()), ("node".to_string(), format!("node-{i}"))].into());
    m
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Runs the API server benchmark and returns the report as text.
pub async fn apiserver(sizes: ApiserverBench) -> Result<String, BenchError> {
    let server =
        ApiServer::start(ServerConfig { history_limit: sizes.objects.max(1000), ..Default::default() }).await?;
    let client = server.client().await?;
    crate::dev::install_crds(&client).await?;
    let api: Api<Machine> = Api::namespaced(client.clone(), "default");
    let mut report = String::new();
    let rss_before = rss_bytes();

    // 1. Create throughput, `parallel` clients at a time.
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..sizes.parallel.max(1) {
        let api = api.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= sizes.objects {
                    return Ok::<(), kube::Error>(());
                }
                api.create(&PostParams::default(), &machine(i)).await?;
            }
        }));
    }
    for task in tasks {
        if let Ok(result) = task.await {
            result?;
        }
    }
    let elapsed = started.elapsed();
    report.push_str(&format!(
        "create: {} Machines in {:.2} s = {:.0} objects/s ({} parallel clients)\n",
        sizes.objects,
        elapsed.as_secs_f64(),
        sizes.objects as f64 / elapsed.as_secs_f64(),
        sizes.parallel
    ));

    // 2. Memory: resident set growth for the stored objects (the client keeps nothing).
    if let (Some(before), Some(after)) = (rss_before, rss_bytes()) {
        let grown = after.saturating_sub(before);
        report.push_str(&format!(
            "memory: +{:.1} MiB resident for {} Machines = {:.0} bytes per object\n",
            grown as f64 / (1024.0 * 1024.0),
            sizes.objects,
            grown as f64 / sizes.objects as f64
        ));
    }

    // 3. List latency at `objects` objects: one unpaginated list, and the 500-item pages a watcher uses.
    let mut full = Vec::new();
    let mut paged = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let list = api.list(&ListParams::default()).await?;
        full.push(t.elapsed());
        debug_assert_eq!(list.items.len(), sizes.objects);
        let t = Instant::now();
        let mut params = ListParams::default().limit(500);
        loop {
            let page = api.list(&params).await?;
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => break,
            }
        }
        paged.push(t.elapsed());
    }
    full.sort();
    paged.sort();
    report.push_str(&format!(
        "list: {} Machines in one list: median {}, in pages of 500: median {}\n",
        sizes.objects,
        ms(percentile(&full, 0.5)),
        ms(percentile(&paged, 0.5))
    ));

    // 4. Watch fan-out: W watchers; the time from sending a write to each watcher receiving it.
    let rv = api.list(&ListParams::default().limit(1)).await?.metadata.resource_version.unwrap_or_default();
    let received: Arc<Mutex<Vec<(String, Instant)>>> = Arc::new(Mutex::new(Vec::new()));
    let mut watchers = Vec::new();
    for _ in 0..sizes.watchers {
        let stream = api.watch(&WatchParams::default().timeout(120), &rv).await?.boxed();
        let received = received.clone();
        watchers.push(tokio::spawn(async move {
            let mut stream = stream;
            while let Ok(Some(event)) = stream.try_next().await {
                if let WatchEvent::Modified(m) = event {
                    let marker = m.metadata.annotations.and_then(|a| a.get("bench").cloned()).unwrap_or_default();
                    received.lock().await.push((marker, Instant::now()));
                }
            }
        }));
    }
    let rounds = 20;
    let mut sent = Vec::new();
    for round in 0..rounds {
        let marker = format!("r{round}");
        let patch = json!({"metadata": {"annotations": {"bench": marker}}});
        sent.push((marker, Instant::now()));
        api.patch("bench-000000", &PatchParams::default(), &Patch::Merge(patch)).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while received.lock().await.len() < rounds * sizes.watchers {
        if Instant::now() > deadline {
            return Err(BenchError::WatchTimeout);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut latencies: Vec<Duration> = received
        .lock()
        .await
        .iter()
        .filter_map(|(marker, at)| {
            sent.iter().find(|(m, _)| m == marker).map(|(_, sent_at)| at.saturating_duration_since(*sent_at))
        })
        .collect();
    latencies.sort();
    report.push_str(&format!(
        "watch fan-out: {} watchers x {} updates: latency p50 {}, p99 {}, max {}\n",
        sizes.watchers,
        rounds,
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default())
    ));
    for w in watchers {
        w.abort();
    }
    server.shutdown().await;
    Ok(report)
}
