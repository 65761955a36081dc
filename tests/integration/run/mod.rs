//! `mcm run` as an operator runs it: the built binary, spawned against the embedded API server, sharing the
//! in-memory cloud `mcm dev`'s building blocks serve on loopback (`--inmemory-cloud-url`), scraped over HTTP.

mod dev;
mod election;
mod infra;
mod mcm_command_lines;
mod metrics;
mod shutdown;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams};
use mcm::api::mcm::{Machine, MachineDeployment, MachinePhase};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use crate::machines::{Env, NS, fast_options, phase_of};
use crate::support::{TempDir, wait_until};

/// Long enough for anything these tests wait for.
pub const WAIT: Duration = Duration::from_secs(60);

/// An environment for `mcm run` processes: API server, CRDs, the test namespace, the in-memory cloud served on
/// loopback with its kubelet, a class `small` — and no controllers in this process.
pub struct RunEnv {
    /// The environment.
    pub env: Env,
    /// A kubeconfig for it.
    pub kubeconfig: PathBuf,
    /// The cloud's URL.
    pub cloud_url: String,
    dir: TempDir,
}

impl RunEnv {
    /// Starts it; VMs boot in `boot_seconds`.
    pub async fn start(boot_seconds: f64) -> RunEnv {
        let mut env = Env::start(fast_options()).await;
        env.dev.stop_controllers().await;
        env.class("small", json!({"bootSeconds": boot_seconds})).await;
        let dir = TempDir::new("mcm-run");
        let kubeconfig = dir.0.join("kubeconfig");
        env.dev.server.write_kubeconfig_for(mcm::dev::Identity::MachineControllers, &kubeconfig).unwrap();
        let cloud_url = env.dev.cloud_url.clone().expect("mcm dev serves its cloud");
        RunEnv { env, kubeconfig, cloud_url, dir }
    }

    /// Spawns `mcm run` against this environment with `extra` flags.
    pub fn spawn(&self, name: &str, extra: &[&str]) -> McmRun {
        self.spawn_with_env(name, extra, &[])
    }

    /// Spawns `mcm run` against this environment with `extra` flags and `env` set.
    pub fn spawn_with_env(&self, name: &str, extra: &[&str], env: &[(&str, &str)]) -> McmRun {
        McmRun::spawn_with_env(NS, name, &self.kubeconfig, &self.cloud_url, &self.dir.0, extra, env)
    }

    /// Creates MachineDeployment `name` of class `small` with `replicas`.
    pub async fn deployment(&self, name: &str, replicas: i32) {
        let yaml = serde_json::to_string(&crate::sets::deployment(
            name,
            replicas,
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}),
        ))
        .unwrap();
        self.env.create(&format!("deployment-{name}.yaml"), &yaml).await;
    }

    /// Sets `spec.replicas` of deployment `name`.
    pub async fn scale(&self, name: &str, replicas: i32) {
        let api: Api<MachineDeployment> = Api::namespaced(self.env.client(), NS);
        api.patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": replicas}}))).await.unwrap();
    }

    /// Waits until exactly `n` machines exist and all are Running; returns them.
    pub async fn wait_running(&self, n: usize, timeout: Duration) -> Vec<Machine> {
        let api = self.env.machines();
        wait_until(&format!("{n} Running machines"), timeout, || async {
            let list = api.list(&Default::default()).await.ok()?.items;
            (list.len() == n && list.iter().all(|m| phase_of(m) == Some(MachinePhase::Running))).then_some(list)
        })
        .await
    }

    /// Asserts that every machine has exactly one live VM and no VM is without a machine or was made twice.
    pub async fn assert_one_vm_per_machine(&self) {
        let machines = self.env.machines().list(&Default::default()).await.unwrap().items;
        let live = self.env.dev.cloud.live_vms();
        for m in &machines {
            let name = m.metadata.name.clone().unwrap();
            assert_eq!(self.env.vms_of(&name).len(), 1, "machine {name} has one VM: {live:?}");
        }
        assert_eq!(live.len(), machines.len(), "no VM without a machine: {live:?}");
    }
}

/// A running `mcm run` process; its stdout lines are collected, its stderr goes to a file shown on failure.
pub struct McmRun {
    /// A name for messages.
    pub name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// The task copying stdout into `lines`; `wait_exit` lets it reach the end of the pipe.
    reader: Option<tokio::task::JoinHandle<()>>,
    stderr: PathBuf,
}

impl McmRun {
    fn spawn(name: &str, kubeconfig: &Path, cloud_url: &str, dir: &Path, extra: &[&str]) -> McmRun {
        Self::spawn_in(NS, name, kubeconfig, cloud_url, dir, extra)
    }

    /// Spawns it for the objects of `namespace`.
    pub(crate) fn spawn_in(
        namespace: &str,
        name: &str,
        kubeconfig: &Path,
        cloud_url: &str,
        dir: &Path,
        extra: &[&str],
    ) -> McmRun {
        Self::spawn_with_env(namespace, name, kubeconfig, cloud_url, dir, extra, &[])
    }

    /// Spawns it for the objects of `namespace`, with `env` set (e.g. `RUST_LOG`, otherwise removed).
    pub(crate) fn spawn_with_env(
        namespace: &str,
        name: &str,
        kubeconfig: &Path,
        cloud_url: &str,
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> McmRun {
        let stderr = dir.join(format!("{name}.stderr"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcm"));
        command
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--inmemory-cloud-url", cloud_url])
            .args(["--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0"])
            .args(["--namespace", namespace, "--leader-elect-resource-name", "mcm-run-test"])
            .args(extra)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = lines.clone();
        let reader = tokio::spawn(async move {
            let mut reader = BufReader::new(out).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        McmRun { name: name.to_string(), child, lines, reader: Some(reader), stderr }
    }

    /// The stdout lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Whether a line containing `text` was printed.
    pub fn printed(&self, text: &str) -> bool {
        self.lines().iter().any(|l| l.contains(text))
    }

    /// Its standard error so far.
    pub(crate) fn logs(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for a line containing `text`; returns it.
    pub async fn wait_line(&self, text: &str, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(line) = self.lines().into_iter().find(|l| l.contains(text)) {
                return line;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "{} did not print {text:?} within {timeout:?}; stdout: {:#?}\nstderr:\n{}",
                    self.name,
                    self.lines(),
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The metrics URL it printed.
    pub async fn metrics_url(&self) -> String {
        let line = self.wait_line("serving metrics on ", WAIT).await;
        line.split("serving metrics on ").nth(1).unwrap().trim().to_string()
    }

    /// The `/readyz` URL it printed.
    pub async fn readyz_url(&self) -> String {
        let line = self.wait_line("serving health probes on ", WAIT).await;
        let healthz = line.split("serving health probes on ").nth(1).unwrap().split(' ').next().unwrap();
        healthz.replace("/healthz", "/readyz")
    }

    /// Scrapes its `/metrics`.
    pub async fn scrape(&self) -> Metrics {
        Metrics::parse(&self.scrape_text().await)
    }

    /// Scrapes its `/metrics` as text.
    pub async fn scrape_text(&self) -> String {
        let (status, body) = http_get(&self.metrics_url().await).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Sends a signal (`TERM`, `KILL`).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("still running").to_string();
        assert!(std::process::Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap().success());
    }

    /// Waits for it to exit; returns whether it exited successfully.
    pub async fn wait_exit(&mut self, timeout: Duration) -> bool {
        let success = match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.unwrap().success(),
            Err(_) => panic!("{} did not exit within {timeout:?}; stderr:\n{}", self.name, self.logs()),
        };
        // Its last lines may still be in the pipe: read to the end before anyone looks at them.
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(timeout, reader).await;
        }
        success
    }
}

/// A plain HTTP/1.1 GET on loopback: (status, body).
pub async fn http_get(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// Parsed Prometheus text: `name{labels}` -> value.
#[derive(Debug)]
pub struct Metrics(pub BTreeMap<String, f64>);

impl Metrics {
    /// Parses the text exposition.
    pub fn parse(text: &str) -> Metrics {
        Metrics(
            text.lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
                .filter_map(|l| {
                    let (series, value) = l.rsplit_once(' ')?;
                    Some((series.to_string(), value.parse().ok()?))
                })
                .collect(),
        )
    }

    /// The value of the series named exactly `series` (0 when absent).
    pub fn get(&self, series: &str) -> f64 {
        self.0.get(series).copied().unwrap_or(0.0)
    }

    /// The sum over every series of `name` whose labels contain each of `labels` (`key="value"`).
    pub fn sum(&self, name: &str, labels: &[&str]) -> f64 {
        self.0
            .iter()
            .filter(|(series, _)| {
                let (n, rest) = series.split_once('{').unwrap_or((series.as_str(), ""));
                n == name && labels.iter().all(|l| rest.contains(l))
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// How many series of `name` have labels containing each of `labels`.
    pub fn series(&self, name: &str, labels: &[&str]) -> usize {
        self.0
            .keys()
            .filter(|series| {
                let (n, rest) = series.split_once('{').unwrap_or((series.as_str(), ""));
                n == name && labels.iter().all(|l| rest.contains(l))
            })
            .count()
    }

    /// Machines in `phase`.
    pub fn phase(&self, phase: &str) -> f64 {
        self.get(&format!("mcm_controller_machines_by_phase{{phase=\"{phase}\"}}"))
    }
}
