//! The two `mcm run` processes of a chaos run: started with leader election on one Lease, the leader found from
//! the Lease's holder, killed with SIGKILL, and replaced by a fresh standby so that two always run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use super::ChaosError;

/// The Lease `mcm run` elects on (its default `--leader-elect-resource-name`).
const LEASE: &str = "machine-controller-manager";

/// How long a kill waits for a live process to hold the Lease (a few lease durations).
const LEADER_WAIT: Duration = Duration::from_secs(20);

/// How the processes are started.
#[derive(Clone, Debug)]
pub struct ProcessConfig {
    /// Our binary.
    pub program: PathBuf,
    /// The API server's kubeconfig.
    pub kubeconfig: PathBuf,
    /// The namespace watched (and the Lease's).
    pub namespace: String,
    /// `unix://…` where the faulty cloud is served.
    pub driver: String,
    /// Extra flags (timings of the leases and the safety controller).
    pub flags: Vec<String>,
    /// Where their logs go.
    pub dir: PathBuf,
}

struct Process {
    /// `chaos-N`: the `HOSTNAME` it runs with, so its Lease identity starts with it.
    name: String,
    child: tokio::process::Child,
}

/// Two controller processes.
pub struct Pair {
    config: ProcessConfig,
    processes: Vec<Process>,
    started: u32,
    /// Processes killed so far.
    pub kills: u32,
}

impl Pair {
    /// Starts two.
    pub fn start(config: ProcessConfig) -> Result<Pair, ChaosError> {
        let mut pair = Pair { config, processes: Vec::new(), started: 0, kills: 0 };
        pair.spawn()?;
        pair.spawn()?;
        Ok(pair)
    }

    fn spawn(&mut self) -> Result<(), ChaosError> {
        self.started += 1;
        let name = format!("chaos-{}", self.started);
        let log = self.config.dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).map_err(|e| io(&log, e))?;
        let err = file.try_clone().map_err(|e| io(&log, e))?;
        let mut args = vec![
            "run".to_string(),
            format!("--kubeconfig={}", self.config.kubeconfig.display()),
            format!("--namespace={}", self.config.namespace),
            "--leader-elect=true".to_string(),
            "--metrics-bind-address=0".to_string(),
            "--health-probe-bind-address=0".to_string(),
            "--webhook-port=0".to_string(),
            format!("--driver=InMemory={}", self.config.driver),
        ];
        args.extend(self.config.flags.iter().cloned());
        let child = tokio::process::Command::new(&self.config.program)
            .args(&args)
            .env("HOSTNAME", &name)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| io(&self.config.program, e))?;
        self.processes.push(Process { name, child });
        Ok(())
    }

    /// The first process that exited on its own, as an error naming its log.
    pub fn exited(&mut self) -> Result<(), ChaosError> {
        for p in &mut self.processes {
            if let Ok(Some(status)) = p.child.try_wait() {
                return Err(ChaosError::Setup(format!(
                    "{} exited ({status}); its log: {}",
                    p.name,
                    self.config.dir.join(format!("{}.log", p.name)).display()
                )));
            }
        }
        Ok(())
    }

    /// SIGKILLs the process holding the Lease and starts a new standby. Returns the killed one's name, or
    /// `None` when no live process of ours came to hold the Lease within [`LEADER_WAIT`] (nothing is killed).
    ///
    /// Right after a kill the Lease still names the dead process until a standby takes it over, so the holder is
    /// polled until it is a live process: a kill planned soon after another still kills a leader.
    pub async fn kill_leader(&mut self, client: &kube::Client) -> Result<Option<String>, ChaosError> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.config.namespace);
        let deadline = tokio::time::Instant::now() + LEADER_WAIT;
        let index = loop {
            // A read may fail while the API server fails on purpose; it is retried until the deadline.
            let holder = leases
                .get_opt(LEASE)
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity)
                .unwrap_or_default();
            if let Some(index) = self.processes.iter().position(|p| holder.starts_with(&format!("{}_", p.name))) {
                break index;
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let mut process = self.processes.remove(index);
        let _ = process.child.start_kill();
        let _ = process.child.wait().await;
        self.kills += 1;
        self.spawn()?;
        Ok(Some(process.name))
    }

    /// Kills every process.
    pub async fn stop(mut self) {
        for p in &mut self.processes {
            let _ = p.child.start_kill();
            let _ = p.child.wait().await;
        }
    }
}

fn io(path: &Path, e: std::io::Error) -> ChaosError {
    ChaosError::Setup(format!("{}: {e}", path.display()))
}
