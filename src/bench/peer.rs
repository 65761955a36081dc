//! `mcm bench machines --peer PATH`: the machines scenario ([`run`]) twice in one run, first with upstream MCM's
//! controllers (the program of hack/mcm-peer: MCM's controller manager and machine controller, two processes),
//! then with ours (`mcm run`, one process). Each side gets a fresh embedded API server with the in-memory cloud
//! and its kubelet in this process; the cloud is served to the controllers over the driver protocol
//! ([`crate::providers::grpc::DriverServe`]), so both reach it the same way and every call is counted on our side
//! of the socket.
//!
//! Both sides run with MCM's defaults but for the settings passed to both alike: the namespace, no leader
//! election, metrics on 127.0.0.1, and the client-side rate limit (`--kube-api-qps`, `--kube-api-burst`).
//! Peak memory is each controller process's `VmHWM` read from /proc at the end of the rolling update; the API
//! server, the cloud and the kubelet are not in it.

use std::path::{Path, PathBuf};

use super::BenchError;
use super::machines::{MachinesBench, PhaseFigures, RunFigures, mib, run};
use super::process::{ProcessConfig, Side, setup};
use super::report::{Align, table};

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

impl PeerBench {
    fn side(&self, side: Side) -> ProcessConfig {
        ProcessConfig {
            side,
            program: match side {
                Side::Upstream => self.peer.clone(),
                Side::Ours => self.ours.clone(),
            },
            kube_api_qps: self.kube_api_qps,
            kube_api_burst: self.kube_api_burst,
        }
    }
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
    let upstream =
        run(bench.sizes, Some(&bench.side(Side::Upstream)), &|step| progress(&format!("upstream: {step}"))).await?;
    progress("ours: mcm run");
    let ours = run(bench.sizes, Some(&bench.side(Side::Ours)), &|step| progress(&format!("ours: {step}"))).await?;
    Ok(report(&bench, &label, &upstream, &ours))
}

fn ratio(ours: f64, upstream: f64) -> String {
    if upstream > 0.0 { format!("{:.2}", ours / upstream) } else { "-".to_string() }
}

fn report(bench: &PeerBench, label: &str, upstream: &RunFigures, ours: &RunFigures) -> String {
    let n = bench.sizes.machines;
    // `--peer` always runs the rolling update (the CLI refuses `--no-rolling-update` with it).
    let not_run = PhaseFigures::default();
    let (upstream_roll, ours_roll) =
        (upstream.roll.as_ref().unwrap_or(&not_run), ours.roll.as_ref().unwrap_or(&not_run));
    let mut rows: Vec<[String; 4]> = Vec::new();
    let mut row = |what: &str, up: f64, us: f64, format: &dyn Fn(f64) -> String| {
        rows.push([what.to_string(), format(up), format(us), ratio(us, up)]);
    };
    let secs = |v: f64| format!("{v:.2} s");
    let count = |v: f64| format!("{v:.0}");
    let per = |v: f64| format!("{v:.1}");
    for (phase, up, us) in [("create", &upstream.create, &ours.create), ("rolling update", upstream_roll, ours_roll)] {
        row(&format!("{phase}: time to all Running"), up.elapsed.as_secs_f64(), us.elapsed.as_secs_f64(), &secs);
        row(
            &format!("{phase}: API requests per machine"),
            up.requests.controllers_per_machine(n),
            us.requests.controllers_per_machine(n),
            &per,
        );
        row(&format!("{phase}: cloud calls"), up.cloud_calls as f64, us.cloud_calls as f64, &count);
    }
    let memory = |v: f64| mib(v as u64);
    row(
        "peak memory of the controller processes",
        upstream_roll.peak_total().unwrap_or(0) as f64,
        ours_roll.peak_total().unwrap_or(0) as f64,
        &memory,
    );
    let header = ["", label, "ours", "ours / upstream"].map(String::from);
    let mut out = bench.sizes.header();
    out.push_str(&format!(
        "each side in its own processes against a fresh embedded API server; the in-memory cloud over the driver \
         protocol; --kube-api-qps={} --kube-api-burst={} on every controller process\n",
        bench.kube_api_qps, bench.kube_api_burst
    ));
    out.push_str(&table(&[vec![header], rows].concat(), Align::Right));
    // The peaks when the processes were stopped: at the end of the rolling update.
    let peaks = |roll: &PhaseFigures| {
        roll.memory
            .iter()
            .map(|m| format!("{} {}", m.process, m.peak_bytes.map_or("?".to_string(), mib)))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    out.push_str(&format!(
        "API requests exclude the kubelet simulator's Node writes; peak memory is VmHWM per process: upstream {}, \
         ours {}\nVMs created/deleted: upstream {}/{}, ours {}/{}\nbusiest requests, create: upstream {}; ours {}\n\
         busiest requests, rolling update: upstream {}; ours {}\n",
        peaks(upstream_roll),
        peaks(ours_roll),
        upstream.vms_created,
        upstream.vms_deleted,
        ours.vms_created,
        ours.vms_deleted,
        busiest(&upstream.create),
        busiest(&ours.create),
        busiest(upstream_roll),
        busiest(ours_roll),
    ));
    out
}

fn busiest(phase: &PhaseFigures) -> String {
    phase.requests.busiest_text(5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::bench::machines::RequestCounts;
    use crate::bench::process::ProcessMemory;

    fn figures(seconds: u64, requests: u64, calls: u64, peak: u64) -> RunFigures {
        let phase = PhaseFigures {
            elapsed: Duration::from_secs(seconds),
            requests: RequestCounts { total: requests, kubelet: 0, sets: 0, writes: 0, busiest: vec![] },
            cloud_calls: calls,
            memory: ["a", "b"]
                .map(|process| ProcessMemory { process, peak_bytes: Some(peak / 2), current_bytes: None })
                .to_vec(),
        };
        RunFigures {
            write_time: Duration::from_micros(100),
            create: phase.clone(),
            roll: Some(phase),
            rest: None,
            vms_created: 10,
            vms_deleted: 0,
            by_phase: Default::default(),
        }
    }

    #[test]
    fn the_table_shows_both_sides_and_the_ratio() {
        let bench = PeerBench {
            sizes: MachinesBench {
                machines: 10,
                deployments: 1,
                surge_percent: 10,
                timeout: Duration::ZERO,
                boot: Duration::ZERO,
                rest: Duration::ZERO,
                rolling_update: true,
            },
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
