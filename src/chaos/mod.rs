//! `mcm chaos`: a seeded soak of every controller under faults. The chaos process serves what
//! `mcm dev --no-controllers` serves (the embedded API server, the in-memory cloud and its kubelet), puts the
//! cloud behind faults ([`cloud`]) served over the driver protocol, and runs two `mcm run` processes electing a
//! leader ([`processes`]). Each trial ([`plan`]) drives a MachineDeployment through a scale-up, a rolling update
//! and scale-downs while the leader is killed, writes fail, watches close, the API server stops answering and
//! VMs appear behind the controllers' back; then the faults stop, the run waits for convergence and one orphan
//! period, and [`invariants`] judges. The report ([`report`]) is a table per trial; any broken invariant fails
//! the run.

pub mod cloud;
pub mod invariants;
pub mod plan;
mod processes;
pub mod report;
mod trial;

use std::path::PathBuf;
use std::time::Duration;

pub use report::{ChaosReport, TrialReport};

/// What to run.
#[derive(Clone, Debug)]
pub struct ChaosOptions {
    /// The run's seed: every trial's plan and draws follow from it.
    pub seed: u64,
    /// Trials, run one after the other on the same deployment.
    pub trials: u32,
    /// The deployment's largest size.
    pub machines: u32,
    /// How long faults fire in each trial.
    pub window: Duration,
    /// The in-memory cloud's boot time.
    pub boot: Duration,
    /// Leader kills per trial.
    pub kills: u32,
    /// How long the API server stops answering once per trial (0: never); longer than the safety
    /// status-check timeout given to the controllers.
    pub pause: Duration,
    /// Longest gap between closing every watch.
    pub watch_close_every: Duration,
    /// Share of API writes answered 409, 500 or 429 (a third each).
    pub api_write_failures: f64,
    /// Share of cloud creates that fail.
    pub create_failures: f64,
    /// Share of every cloud call throttled.
    pub throttling: f64,
    /// How long convergence may take after the faults stop.
    pub converge_timeout: Duration,
    /// The controllers' orphan VM period (`--machine-safety-orphan-vms-period`).
    pub orphan_period: Duration,
    /// Our binary, run as `mcm run`.
    pub program: PathBuf,
}

impl ChaosOptions {
    /// The documented defaults: 100 machines, a minute of faults, two kills and one 12 s pause per trial.
    pub fn new(program: PathBuf) -> Self {
        ChaosOptions {
            seed: 1,
            trials: 20,
            machines: 100,
            window: Duration::from_secs(60),
            boot: Duration::from_secs(1),
            kills: 2,
            pause: Duration::from_secs(12),
            watch_close_every: Duration::from_secs(6),
            api_write_failures: 0.10,
            create_failures: 0.20,
            throttling: 0.05,
            converge_timeout: Duration::from_secs(300),
            orphan_period: Duration::from_secs(20),
            program,
        }
    }

    fn intensity(&self) -> plan::Intensity {
        plan::Intensity {
            machines: self.machines,
            window: self.window,
            kills: self.kills,
            watch_close_every: self.watch_close_every,
            pause: self.pause,
        }
    }

    /// The safety controller's status-check timeout given to `mcm run`: shorter than the pause, so that a
    /// pause freezes the controllers.
    fn statuscheck_timeout(&self) -> Duration {
        (self.pause / 2).clamp(Duration::from_secs(2), Duration::from_secs(30))
    }
}

/// Why a chaos run could not run (broken invariants are in the report, not here).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// The server did not start.
    #[error(transparent)]
    Dev(#[from] crate::dev::DevError),
    /// A request of the chaos process failed for longer than it retries.
    #[error("a request of the chaos run failed: {0}")]
    Kube(#[from] kube::Error),
    /// Preparing the run failed (files, sockets, processes).
    #[error("could not prepare the chaos run: {0}")]
    Setup(String),
}

/// Runs every trial; `progress` gets a line per step.
pub async fn run(options: ChaosOptions, progress: impl Fn(&str)) -> Result<ChaosReport, ChaosError> {
    let started = std::time::Instant::now();
    let mut world = trial::World::start(&options).await?;
    let mut trials = Vec::new();
    let mut revision = 0;
    let mut replicas = 0;
    let outcome = async {
        for number in 1..=options.trials.max(1) {
            let plan = plan::plan(options.seed, number, revision, &options.intensity());
            progress(&format!("trial {number}/{}: seed {}", options.trials.max(1), plan.seed));
            let report = world.trial(&options, &plan, replicas, revision, &progress).await?;
            replicas = plan.final_replicas(replicas);
            revision = plan.final_revision(revision);
            let held = report.held();
            progress(&report.summary());
            trials.push(report);
            if !held {
                progress(&format!("trial {number}: an invariant broke; stopping (logs in {})", world.dir().display()));
                break;
            }
        }
        Ok::<_, ChaosError>(())
    }
    .await;
    let keep_logs = outcome.is_err() || trials.iter().any(|t| !t.held());
    let dir = world.dir().to_path_buf();
    world.stop(!keep_logs).await;
    outcome?;
    Ok(ChaosReport {
        seed: options.seed,
        machines: options.machines,
        window: options.window,
        elapsed: started.elapsed(),
        logs: keep_logs.then_some(dir),
        trials,
    })
}
