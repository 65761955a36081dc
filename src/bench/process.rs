//! Controllers in their own processes, for `mcm bench machines --controllers-process` (ours, `mcm run`) and
//! `--peer` (upstream MCM's two, then ours): spawning them against the bench's API server and driver socket,
//! waiting until they are watching, reading their memory from /proc, and counting the driver calls they make
//! on our side of the socket.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::BenchError;
use super::machines::NAMESPACE;
use crate::metrics::{CloudMetrics, ServiceLabels};
use crate::providers::grpc::DriverEndpoint;

/// Which controllers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    /// Upstream MCM's controller manager and machine controller (the mcm-peer program).
    Upstream,
    /// Ours: one `mcm run`.
    Ours,
}

impl Side {
    /// A name for directories and log files.
    pub(super) fn slug(self) -> &'static str {
        match self {
            Side::Upstream => "upstream",
            Side::Ours => "ours",
        }
    }
}

/// How to start the controller processes.
#[derive(Clone, Debug)]
pub(super) struct ProcessConfig {
    /// Whose controllers.
    pub side: Side,
    /// The mcm-peer program for [`Side::Upstream`], our binary for [`Side::Ours`].
    pub program: PathBuf,
    /// `--kube-api-qps` of every controller process (0: no limit).
    pub kube_api_qps: f64,
    /// `--kube-api-burst` of every controller process.
    pub kube_api_burst: u32,
}

/// Resident memory of one process, from /proc/PID/status.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(super) struct ProcessMemory {
    /// The process, as the report names it.
    pub process: &'static str,
    /// `VmHWM`: the peak so far, in bytes.
    pub peak_bytes: Option<u64>,
    /// `VmRSS`: now, in bytes.
    pub current_bytes: Option<u64>,
}

impl ProcessMemory {
    /// Reads process `pid` (`self` for this one).
    pub(super) fn of(process: &'static str, pid: &str) -> ProcessMemory {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        ProcessMemory {
            process,
            peak_bytes: status_kib(&status, "VmHWM:"),
            current_bytes: status_kib(&status, "VmRSS:"),
        }
    }
}

/// A `Vm…:   123 kB` line of /proc/PID/status, in bytes.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The driver methods, as [`crate::metrics::MeteredDriver`] names them.
const OPERATIONS: [&str; 6] =
    ["create_machine", "initialize_machine", "delete_machine", "get_machine_status", "list_machines", "get_volume_ids"];

/// Driver calls served so far, every method and result.
pub(super) fn served_calls(metrics: &CloudMetrics) -> u64 {
    OPERATIONS
        .iter()
        .map(|operation| {
            metrics
                .requests
                .get_or_create(&ServiceLabels { provider: "InMemory".into(), service: (*operation).into() })
                .get()
        })
        .sum()
}

/// A controller process with its log file.
struct Process {
    name: &'static str,
    child: tokio::process::Child,
    log: PathBuf,
}

/// The controller processes of one run.
pub(super) struct Controllers {
    processes: Vec<Process>,
}

impl Controllers {
    /// Starts the processes against `kubeconfig` and the cloud at `driver`; their logs go to `dir`.
    pub(super) fn spawn(
        config: &ProcessConfig,
        kubeconfig: &Path,
        driver: &DriverEndpoint,
        dir: &Path,
    ) -> Result<Controllers, BenchError> {
        let kubeconfig = kubeconfig.display();
        let rate =
            [format!("--kube-api-qps={}", config.kube_api_qps), format!("--kube-api-burst={}", config.kube_api_burst)];
        let mut commands: Vec<(&'static str, Vec<String>)> = Vec::new();
        match config.side {
            Side::Upstream => {
                let common = |port: u16| {
                    let mut args = vec![
                        format!("--control-kubeconfig={kubeconfig}"),
                        format!("--target-kubeconfig={kubeconfig}"),
                        format!("--namespace={NAMESPACE}"),
                        "--leader-elect=false".to_string(),
                        "--address=127.0.0.1".to_string(),
                        format!("--port={port}"),
                    ];
                    args.extend(rate.iter().cloned());
                    args
                };
                let mut manager = vec!["controller-manager".to_string()];
                manager.extend(common(free_port()?));
                let mut machine = vec!["machine-controller".to_string(), format!("--driver-endpoint={driver}")];
                machine.extend(common(free_port()?));
                // MCM's defaults, spelled out: its machine controller refuses to start without the safety ones.
                machine.extend(
                    [
                        "--machine-creation-timeout=20m",
                        "--machine-health-timeout=10m",
                        "--machine-safety-apiserver-statuscheck-timeout=30s",
                        "--machine-safety-apiserver-statuscheck-period=1m",
                    ]
                    .map(String::from),
                );
                commands.push(("controller-manager", manager));
                commands.push(("machine-controller", machine));
            }
            Side::Ours => {
                let mut args = vec![
                    "run".to_string(),
                    format!("--kubeconfig={kubeconfig}"),
                    format!("--namespace={NAMESPACE}"),
                    "--leader-elect=false".to_string(),
                    format!("--metrics-bind-address=127.0.0.1:{}", free_port()?),
                    "--webhook-port=0".to_string(),
                    format!("--driver=InMemory={driver}"),
                ];
                args.extend(rate.iter().cloned());
                commands.push(("mcm run", args));
            }
        }
        let mut processes = Vec::new();
        for (name, args) in commands {
            let log = dir.join(format!("{}-{}.log", config.side.slug(), name.replace(' ', "-")));
            let file = std::fs::File::create(&log).map_err(|e| setup(&log, e))?;
            let err = file.try_clone().map_err(|e| setup(&log, e))?;
            let child = tokio::process::Command::new(&config.program)
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::from(file))
                .stderr(Stdio::from(err))
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| setup(&config.program, e))?;
            processes.push(Process { name, child, log });
        }
        Ok(Controllers { processes })
    }

    /// The first process that has exited, as an error naming its log.
    pub(super) fn exited(&mut self) -> Result<(), BenchError> {
        for process in &mut self.processes {
            if let Ok(Some(status)) = process.child.try_wait() {
                return Err(BenchError::Setup(format!(
                    "{} exited ({status}); its log: {}",
                    process.name,
                    process.log.display()
                )));
            }
        }
        Ok(())
    }

    /// Each process's resident memory now.
    pub(super) fn memory(&self) -> Vec<ProcessMemory> {
        self.processes
            .iter()
            .map(|p| match p.child.id() {
                Some(pid) => ProcessMemory::of(p.name, &pid.to_string()),
                None => ProcessMemory { process: p.name, peak_bytes: None, current_bytes: None },
            })
            .collect()
    }

    /// Kills every process and reaps it.
    pub(super) async fn stop(mut self) {
        for process in &mut self.processes {
            let _ = process.child.start_kill();
            let _ = process.child.wait().await;
        }
    }
}

/// A setup step on `path` failed.
pub(super) fn setup(path: &Path, e: std::io::Error) -> BenchError {
    BenchError::Setup(format!("{}: {e}", path.display()))
}

/// A port for a program started with an explicit port. The kernel may hand out a closed port-0 socket's port
/// again (in a test, 200 such calls gave 194 distinct ports), so a port is never handed out twice per run:
/// otherwise MCM's two controllers could be given the same metrics port and one would not start.
fn free_port() -> Result<u16, BenchError> {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..100 {
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .map_err(|e| BenchError::Setup(format!("no free port on 127.0.0.1: {e}")))?;
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err(BenchError::Setup("no port on 127.0.0.1 that was not handed out already".into()))
}

/// Waits until newly started controllers have listed and are watching: no request for `QUIET` in a row, after
/// at least one (their first lists). `alive` fails when a controller process has exited.
pub(super) async fn wait_until_quiet(
    total_requests: impl Fn() -> u64,
    mut alive: impl FnMut() -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    const QUIET: Duration = Duration::from_secs(2);
    const AT_MOST: Duration = Duration::from_secs(120);
    let started = Instant::now();
    let before = total_requests();
    let mut last = before;
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        alive()?;
        let now = total_requests();
        if now != last {
            last = now;
            since = Instant::now();
        } else if now > before && since.elapsed() >= QUIET {
            return Ok(());
        }
        if started.elapsed() > AT_MOST {
            return Err(BenchError::NotDone { what: "the controllers' start", after: AT_MOST });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_lines_are_read_in_bytes() {
        let status = "Name:\tmcm\nVmPeak:\t  900 kB\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(status_kib(status, "VmHWM:"), Some(2 << 20));
        assert_eq!(status_kib(status, "VmRSS:"), Some(1 << 20));
        assert_eq!(status_kib(status, "VmSwap:"), None);
        let me = ProcessMemory::of("bench", "self");
        assert!(me.peak_bytes.unwrap() >= me.current_bytes.unwrap(), "{me:?}");
    }

    #[test]
    fn no_port_is_handed_out_twice() {
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let unique: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), ports.len());
    }
}
