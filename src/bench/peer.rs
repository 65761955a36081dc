//! `mcm bench machines --peer PATH`: the machines [`Scenario`] twice in one run, first with upstream MCM's
//! controllers (the program of hack/mcm-peer: MCM's controller manager and machine controller, two processes),
//! then with ours (`mcm run`, one process). Each side gets a fresh embedded API server with the in-memory cloud
//! and its kubelet in this process; the cloud is served to the controllers over the driver protocol
//! ([`DriverServe`]), so both reach it the same way and every call is counted on our side of the socket.
//!
//! Both sides run with MCM's defaults but for the settings passed to both alike: the namespace, no leader
//! election, metrics on 127.0.0.1, and the client-side rate limit (`--kube-api-qps`, `--kube-api-burst`).
//! Peak memory is each controller process's `VmHWM` read from /proc just before it is stopped; the API server,
//! the cloud and the kubelet are not in it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::BenchError;
use super::machines::{MachinesBench, NAMESPACE, PhaseFigures, Scenario, mib, peak_rss_of};
use crate::dev::{DevEnvironment, DevOptions};
use crate::metrics::{CloudMetrics, MeteredDriver, ServiceLabels};
use crate::providers::grpc::{DriverEndpoint, DriverServe};
use crate::providers::inmemory::InMemoryDriver;

/// The side-by-side benchmark.
#[derive(Clone, Debug)]
pub struct PeerBench {
    /// The scenario's sizes.
    pub sizes: MachinesBench,
    /// The mcm-peer program (`make mcm-peer` builds target/adapters/bin/mcm-peer).
    pub peer: PathBuf,
    /// Our binary (`mcm run`); the running one unless a test says otherwise.
    pub ours: PathBuf,
    /// `--kube-api-qps` of every controller process.
    pub kube_api_qps: f64,
    /// `--kube-api-burst` of every controller process.
    pub kube_api_burst: u32,
}

/// Which controllers a side runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Upstream,
    Ours,
}

impl Side {
    fn slug(self) -> &'static str {
        match self {
            Side::Upstream => "upstream",
            Side::Ours => "ours",
        }
    }
}

/// The driver methods, as [`MeteredDriver`] names them.
const OPERATIONS: [&str; 6] =
    ["create_machine", "initialize_machine", "delete_machine", "get_machine_status", "list_machines", "get_volume_ids"];

/// Driver calls so far, every method and result.
fn cloud_calls(metrics: &CloudMetrics) -> u64 {
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

/// What one side measured.
#[derive(Clone, Debug)]
struct SideFigures {
    create: PhaseFigures,
    create_cloud_calls: u64,
    roll: PhaseFigures,
    roll_cloud_calls: u64,
    /// Each controller process's peak resident memory.
    peaks: Vec<(&'static str, Option<u64>)>,
    vms_created: u64,
    vms_deleted: u64,
}

impl SideFigures {
    fn peak_total(&self) -> Option<u64> {
        self.peaks.iter().map(|(_, peak)| *peak).sum()
    }
}

/// A controller process with its log file.
struct Process {
    name: &'static str,
    child: tokio::process::Child,
    log: PathBuf,
}

/// The controller processes of one side.
struct Controllers {
    processes: Vec<Process>,
}

impl Controllers {
    fn spawn(
        side: Side,
        bench: &PeerBench,
        kubeconfig: &Path,
        driver: &DriverEndpoint,
        dir: &Path,
    ) -> Result<Controllers, BenchError> {
        let kubeconfig = kubeconfig.display();
        let rate =
            [format!("--kube-api-qps={}", bench.kube_api_qps), format!("--kube-api-burst={}", bench.kube_api_burst)];
        let mut commands: Vec<(&'static str, PathBuf, Vec<String>)> = Vec::new();
        match side {
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
                commands.push(("controller-manager", bench.peer.clone(), manager));
                commands.push(("machine-controller", bench.peer.clone(), machine));
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
                commands.push(("mcm run", bench.ours.clone(), args));
            }
        }
        let mut processes = Vec::new();
        for (name, program, args) in commands {
            let log = dir.join(format!("{}-{}.log", side.slug(), name.replace(' ', "-")));
            let file = std::fs::File::create(&log).map_err(|e| setup(&log, e))?;
            let err = file.try_clone().map_err(|e| setup(&log, e))?;
            let child = tokio::process::Command::new(&program)
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::from(file))
                .stderr(Stdio::from(err))
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| setup(&program, e))?;
            processes.push(Process { name, child, log });
        }
        Ok(Controllers { processes })
    }

    /// The first process that has exited, as an error naming its log.
    fn exited(&mut self) -> Result<(), BenchError> {
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

    fn peaks(&self) -> Vec<(&'static str, Option<u64>)> {
        self.processes.iter().map(|p| (p.name, p.child.id().and_then(|pid| peak_rss_of(&pid.to_string())))).collect()
    }

    async fn stop(mut self) {
        for process in &mut self.processes {
            let _ = process.child.start_kill();
            let _ = process.child.wait().await;
        }
    }
}

fn setup(path: &Path, e: std::io::Error) -> BenchError {
    BenchError::Setup(format!("{}: {e}", path.display()))
}

fn free_port() -> Result<u16, BenchError> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| BenchError::Setup(format!("no free port on 127.0.0.1: {e}")))
}

/// Waits until the newly started controllers have listed and are watching: no request for `QUIET` in a row.
async fn wait_until_quiet(scenario: &Scenario, controllers: &mut Controllers) -> Result<(), BenchError> {
    const QUIET: Duration = Duration::from_secs(2);
    const AT_MOST: Duration = Duration::from_secs(120);
    let started = Instant::now();
    let mut last = scenario.total_requests();
    let mut since = Instant::now();
    // Some request must have come: the controllers' first lists.
    let before = last;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        controllers.exited()?;
        let now = scenario.total_requests();
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

/// Runs the scenario on one side.
async fn run_side(bench: &PeerBench, side: Side, progress: &impl Fn(&str)) -> Result<SideFigures, BenchError> {
    let dir = std::env::temp_dir().join(format!("mcm-bench-{}-{}", std::process::id(), side.slug()));
    std::fs::create_dir_all(&dir).map_err(|e| setup(&dir, e))?;
    let options = DevOptions {
        listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        kubeconfig_out: dir.join("kubeconfig"),
        sample: false,
        run_controllers: false,
        webhooks: false,
        ..DevOptions::default()
    };
    let env = DevEnvironment::start(&options, |_| {}).await?;
    let metrics = CloudMetrics::default();
    let driver = Arc::new(MeteredDriver::new(Arc::new(InMemoryDriver::new(env.cloud.clone())), metrics.clone()));
    let endpoint = DriverEndpoint::Unix(dir.join("driver.sock"));
    let serve = DriverServe::start(driver, &endpoint).await.map_err(|e| setup(&dir.join("driver.sock"), e))?;
    let scenario = Scenario::prepare(&env, bench.sizes).await?;
    let mut controllers = Controllers::spawn(side, bench, &options.kubeconfig_out, &serve.endpoint, &dir)?;
    let measured = async {
        wait_until_quiet(&scenario, &mut controllers).await?;
        progress("creating");
        let calls = cloud_calls(&metrics);
        let create = scenario.create().await?;
        let create_cloud_calls = cloud_calls(&metrics) - calls;
        progress("rolling update");
        let calls = cloud_calls(&metrics);
        let roll = scenario.roll().await?;
        let roll_cloud_calls = cloud_calls(&metrics) - calls;
        controllers.exited()?;
        Ok::<_, BenchError>((create, create_cloud_calls, roll, roll_cloud_calls))
    }
    .await;
    let peaks = controllers.peaks();
    controllers.stop().await;
    let _ = serve.stop().await;
    let stats = env.cloud.stats();
    drop(scenario);
    env.shutdown().await;
    let (create, create_cloud_calls, roll, roll_cloud_calls) = match measured {
        Ok(figures) => figures,
        // The logs stay for a look at what went wrong.
        Err(e) => return Err(BenchError::Setup(format!("{e} (the controllers' logs are in {})", dir.display()))),
    };
    let _ = std::fs::remove_dir_all(&dir);
    Ok(SideFigures {
        create,
        create_cloud_calls,
        roll,
        roll_cloud_calls,
        peaks,
        vms_created: stats.vms_created as u64,
        vms_deleted: stats.vms_deleted as u64,
    })
}

/// The upstream column's name: the MCM version `PATH version` prints.
async fn upstream_label(peer: &Path) -> Result<String, BenchError> {
    let output = tokio::process::Command::new(peer).arg("version").output().await.map_err(|e| setup(peer, e))?;
    let version = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if !output.status.success() || version.is_empty() {
        return Err(BenchError::Setup(format!(
            "{} is not the mcm-peer program (`{} version` printed nothing); build it with `make mcm-peer`",
            peer.display(),
            peer.display()
        )));
    }
    Ok(format!("MCM {version}"))
}

/// Runs both sides and returns the side-by-side report; `progress` gets a line per step.
pub async fn side_by_side(bench: PeerBench, progress: impl Fn(&str)) -> Result<String, BenchError> {
    let label = upstream_label(&bench.peer).await?;
    progress(&format!("upstream: {label} ({})", bench.peer.display()));
    let upstream = run_side(&bench, Side::Upstream, &|step| progress(&format!("upstream: {step}"))).await?;
    progress("ours: mcm run");
    let ours = run_side(&bench, Side::Ours, &|step| progress(&format!("ours: {step}"))).await?;
    Ok(report(&bench, &label, &upstream, &ours))
}

fn ratio(ours: f64, upstream: f64) -> String {
    if upstream > 0.0 { format!("{:.2}", ours / upstream) } else { "-".to_string() }
}

fn report(bench: &PeerBench, label: &str, upstream: &SideFigures, ours: &SideFigures) -> String {
    let n = bench.sizes.machines;
    let mut rows: Vec<[String; 4]> = Vec::new();
    let mut row = |what: &str, up: f64, us: f64, format: &dyn Fn(f64) -> String| {
        rows.push([what.to_string(), format(up), format(us), ratio(us, up)]);
    };
    let secs = |v: f64| format!("{v:.2} s");
    let count = |v: f64| format!("{v:.0}");
    let per = |v: f64| format!("{v:.1}");
    for (phase, up, us, up_calls, us_calls) in [
        ("create", &upstream.create, &ours.create, upstream.create_cloud_calls, ours.create_cloud_calls),
        ("rolling update", &upstream.roll, &ours.roll, upstream.roll_cloud_calls, ours.roll_cloud_calls),
    ] {
        row(&format!("{phase}: time to all Running"), up.elapsed.as_secs_f64(), us.elapsed.as_secs_f64(), &secs);
        row(
            &format!("{phase}: API requests per machine"),
            up.requests.controllers_per_machine(n),
            us.requests.controllers_per_machine(n),
            &per,
        );
        row(&format!("{phase}: cloud calls"), up_calls as f64, us_calls as f64, &count);
    }
    let memory = |v: f64| mib(v as u64);
    row(
        "peak memory of the controller processes",
        upstream.peak_total().unwrap_or(0) as f64,
        ours.peak_total().unwrap_or(0) as f64,
        &memory,
    );
    let header = ["", label, "ours", "ours / upstream"].map(String::from);
    let widths: Vec<usize> =
        (0..4).map(|c| rows.iter().chain(std::iter::once(&header)).map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let line = |r: &[String; 4]| {
        format!(
            "{:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}\n",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        )
    };
    let mut out = bench.sizes.header();
    out.push_str(&format!(
        "each side in its own processes against a fresh embedded API server; the in-memory cloud over the driver \
         protocol; --kube-api-qps={} --kube-api-burst={} on every controller process\n",
        bench.kube_api_qps, bench.kube_api_burst
    ));
    out.push_str(&line(&header));
    for r in &rows {
        out.push_str(&line(r));
    }
    let peaks = |side: &SideFigures| {
        side.peaks
            .iter()
            .map(|(name, peak)| format!("{name} {}", peak.map_or("?".to_string(), mib)))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    out.push_str(&format!(
        "API requests exclude the kubelet simulator's Node writes; peak memory is VmHWM per process: upstream {}, \
         ours {}\nVMs created/deleted: upstream {}/{}, ours {}/{}\nbusiest requests, create: upstream {}; ours {}\n\
         busiest requests, rolling update: upstream {}; ours {}\n",
        peaks(upstream),
        peaks(ours),
        upstream.vms_created,
        upstream.vms_deleted,
        ours.vms_created,
        ours.vms_deleted,
        busiest(&upstream.create),
        busiest(&ours.create),
        busiest(&upstream.roll),
        busiest(&ours.roll),
    ));
    out
}

fn busiest(phase: &PhaseFigures) -> String {
    phase.requests.busiest.iter().take(5).map(|(v, r, n)| format!("{v} {r} {n}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::machines::RequestCounts;

    fn figures(seconds: u64, requests: u64, calls: u64, peak: u64) -> SideFigures {
        let phase = PhaseFigures {
            elapsed: Duration::from_secs(seconds),
            requests: RequestCounts { total: requests, kubelet: 0, sets: 0, busiest: vec![] },
        };
        SideFigures {
            create: phase.clone(),
            create_cloud_calls: calls,
            roll: phase,
            roll_cloud_calls: calls,
            peaks: vec![("a", Some(peak / 2)), ("b", Some(peak / 2))],
            vms_created: 10,
            vms_deleted: 0,
        }
    }

    #[test]
    fn the_table_shows_both_sides_and_the_ratio() {
        let bench = PeerBench {
            sizes: MachinesBench { machines: 10, deployments: 1, surge_percent: 10, timeout: Duration::ZERO },
            peer: "mcm-peer".into(),
            ours: "mcm".into(),
            kube_api_qps: 20.0,
            kube_api_burst: 30,
        };
        let text = report(&bench, "MCM v0.62.1", &figures(20, 400, 100, 200 << 20), &figures(5, 100, 50, 50 << 20));
        assert!(text.contains("MCM v0.62.1"), "{text}");
        let create = text.lines().find(|l| l.starts_with("create: time to all Running")).unwrap();
        assert!(create.contains("20.00 s") && create.contains("5.00 s") && create.ends_with("0.25"), "{create}");
        let requests = text.lines().find(|l| l.starts_with("create: API requests per machine")).unwrap();
        assert!(requests.contains("40.0") && requests.contains("10.0"), "{requests}");
        let memory = text.lines().find(|l| l.starts_with("peak memory")).unwrap();
        assert!(memory.contains("200 MiB") && memory.contains("50 MiB") && memory.ends_with("0.25"), "{memory}");
        assert!(text.contains("busiest requests, rolling update: upstream"), "{text}");
    }

    #[test]
    fn a_ratio_over_nothing_is_a_dash() {
        assert_eq!(ratio(3.0, 0.0), "-");
        assert_eq!(ratio(1.0, 4.0), "0.25");
    }
}
