//! The `mcm` command line: argument parsing and the small commands that need no controllers.
//!
//! `main.rs` only calls [`run`]. Each subcommand exists once it works.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::api;

mod driver;
mod flags;
mod mcm_flags;
mod migrate;
pub mod progress;
mod run_args;
pub mod status;

pub use flags::{InfraControllerFlags, MachineControllerFlags, MachineControllerManagerFlags};
pub use run_args::{RunArgs, RunArgsError};

/// Version information compiled into the binary.
pub mod version {
    /// The crate version.
    pub const VERSION: &str = env!("CARGO_PKG_VERSION");
    /// The git commit the binary was built from (`unknown` outside a git checkout, `-dirty` with local changes).
    pub const GIT_COMMIT: &str = env!("MCM_GIT_COMMIT");
}

/// Gardener's Machine Controller Manager semantics as a Cluster API infrastructure provider.
#[derive(Debug, Parser)]
// A flag given twice takes its last value: `mcm run --config FILE` puts the file's settings first.
#[command(name = "mcm", version = version::VERSION, about, long_about = None, args_override_self = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controllers against a cluster: leader election, /metrics, /healthz, /readyz (docs/operations.md).
    Run(Box<RunArgs>),
    /// Run a local control plane: the embedded API server with our CRDs, writing a kubeconfig for kubectl.
    Dev(Box<DevArgs>),
    /// Measure speed and memory (see docs/benchmarks.md).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// A seeded soak under faults: two `mcm run` processes with leader election drive a MachineDeployment
    /// through scale-ups, scale-downs and rolling updates while leaders are killed, writes fail, watches close,
    /// the API server stops answering and the cloud fails; every trial's invariants are checked (exit 1 if one
    /// broke). See docs/reliability.md.
    Chaos(Box<ChaosArgs>),
    /// Print every CRD this project ships as YAML (ours and CAPI core's).
    Crds(CrdsArgs),
    /// Move MCM MachineDeployments to Cluster API objects and back, keeping every VM (docs/migration.md).
    #[command(subcommand)]
    Migrate(migrate::MigrateCommand),
    /// Out-of-tree drivers: serve one of this binary's drivers over the driver protocol (docs/adding-a-provider.md).
    #[command(subcommand)]
    Driver(driver::DriverCommand),
    /// The machine tree at a glance: MachineDeployments, MachineSets, Machines, VMs and Nodes of both API groups,
    /// each with what explains its state (docs/status.md). Also `kubectl mcm status` (a `kubectl-mcm` link).
    Status(Box<status::StatusArgs>),
    /// Print the version, git commit and supported Cluster API contract.
    Version,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// The embedded API server: create throughput, list latency, watch fan-out latency, memory per object.
    Apiserver {
        /// Objects to create and list.
        #[arg(long, default_value_t = 10_000)]
        objects: usize,
        /// Watchers for the fan-out measurement.
        #[arg(long, default_value_t = 50)]
        watchers: usize,
        /// Parallel clients creating objects.
        #[arg(long, default_value_t = 8)]
        parallel: usize,
    },
    /// Every controller: MachineDeployments up to N Running machines, a rolling update of all of them, then
    /// optionally a rest; time, API requests per machine, memory and cloud calls, with issue #25's targets beside.
    #[command(group(clap::ArgGroup::new("processes").args(["peer", "controllers_process"])))]
    Machines {
        /// Machines in total.
        #[arg(long, default_value_t = 1_000)]
        machines: usize,
        /// MachineDeployments they are spread over.
        #[arg(long, default_value_t = 10)]
        deployments: usize,
        /// `maxSurge` of the rolling update, in percent (`maxUnavailable` is 0).
        #[arg(long, default_value_t = 10)]
        surge_percent: u32,
        /// Give up on a phase after this long.
        #[arg(long, value_name = "DURATION", default_value = "10m")]
        timeout: crate::api::Duration,
        /// The in-memory cloud's boot time for the benchmark's MachineClass (its `bootSeconds`).
        #[arg(long, value_name = "DURATION", default_value = "0s")]
        boot: crate::api::Duration,
        /// After the rolling update, stay idle this long and count every API write and cloud call.
        #[arg(long, value_name = "DURATION", default_value = "0s", conflicts_with = "peer")]
        rest: crate::api::Duration,
        /// Run our controllers in their own `mcm run` process (the cloud served over the driver protocol), so the
        /// memory figures are `mcm run`'s alone.
        #[arg(long)]
        controllers_process: bool,
        /// No rolling update: the run measures the creation (and `--rest` after it). For the runs that measure
        /// creation and memory at scale (10,000 machines), where the update would take most of the time.
        #[arg(long, conflicts_with = "peer")]
        no_rolling_update: bool,
        /// Print the report as one JSON document (figures, targets, verdicts) instead of text.
        #[arg(long, conflicts_with = "peer")]
        json: bool,
        /// Run the scenario first with upstream MCM's controllers (this mcm-peer program; `make mcm-peer` builds
        /// target/adapters/bin/mcm-peer), then with ours in an `mcm run` process, and print both side by side.
        #[arg(long, value_name = "PATH")]
        peer: Option<PathBuf>,
        /// With --peer or --controllers-process: the client-side rate limit of every controller process
        /// [default: 20 with --peer (MCM's default and ours); 0, no limit, with --controllers-process, as in-process]
        #[arg(long, value_name = "QPS", requires = "processes")]
        kube_api_qps: Option<f64>,
        /// With --peer or --controllers-process: the client-side burst of every controller process.
        #[arg(long, value_name = "N", default_value_t = 30, requires = "processes")]
        kube_api_burst: u32,
    },
}

#[derive(Debug, clap::Args)]
struct ChaosArgs {
    /// The run's seed: the same seed draws the same trials and faults.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Trials, one after the other on the same deployment.
    #[arg(long, default_value_t = 20)]
    trials: u32,
    /// The deployment's largest size.
    #[arg(long, default_value_t = 100)]
    machines: u32,
    /// How long faults fire in each trial.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    window: crate::api::Duration,
    /// The in-memory cloud's boot time.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    boot: crate::api::Duration,
    /// Leaders killed (SIGKILL) per trial.
    #[arg(long, default_value_t = 2)]
    kills: u32,
    /// How long the API server stops answering once per trial (0s: never).
    #[arg(long, value_name = "DURATION", default_value = "12s")]
    pause: crate::api::Duration,
    /// Share of API writes answered 409, 500 or 429.
    #[arg(long, value_name = "SHARE", default_value_t = 0.10)]
    api_write_failures: f64,
    /// Share of cloud creates that fail.
    #[arg(long, value_name = "SHARE", default_value_t = 0.20)]
    create_failures: f64,
    /// Share of all cloud calls throttled.
    #[arg(long, value_name = "SHARE", default_value_t = 0.05)]
    throttling: f64,
    /// The controllers' orphan VM period; leaks must be gone one period after convergence.
    #[arg(long, value_name = "DURATION", default_value = "20s")]
    orphan_period: crate::api::Duration,
    /// How long convergence may take after a trial's faults stop.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    converge_timeout: crate::api::Duration,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct DevArgs {
    /// Address to listen on [default: 127.0.0.1:6443, or the next free port]
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// Where to write the kubeconfig.
    #[arg(long, value_name = "PATH", default_value = ".mcm/kubeconfig")]
    kubeconfig_out: PathBuf,
    /// Keep the API server's objects in this directory across restarts (in memory otherwise), with its bearer token
    /// and CA, so the kubeconfig stays valid.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Serve plain HTTP instead of TLS (the bearer token is still required). Refused unless --listen is a loopback
    /// address.
    #[arg(long)]
    insecure_http: bool,
    /// Do not create the sample objects (the MCM sample in mcm-sample, the Cluster API sample in capi-sample).
    #[arg(long)]
    no_sample: bool,
    /// Run the API server alone: no CRDs, no controllers, no sample (for exploring with kubectl).
    #[arg(long)]
    apiserver_only: bool,
    /// Leave the controllers out (the API server, CRDs, in-memory cloud, kubelet and sample still run), so that an
    /// `mcm run --inmemory-cloud-url` process does the reconciling.
    #[arg(long, conflicts_with = "apiserver_only")]
    no_controllers: bool,
    /// Do not serve and register the admission webhooks (they validate MCMMachine, MCMMachineTemplate, MCMCluster
    /// and MachineClass, as `mcm run --webhook-port` does in a cluster).
    #[arg(long)]
    no_webhooks: bool,
    /// How long the simulated node agent takes to apply an in-place update before reporting its result.
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    in_place_update_duration: crate::api::Duration,
    /// Share of in-place updates the simulated node agent reports failed (0 to 1).
    #[arg(long, value_name = "SHARE", default_value_t = 0.0, value_parser = share)]
    in_place_update_failure_rate: f64,
    #[command(flatten)]
    controllers: MachineControllerFlags,
    #[command(flatten)]
    manager: MachineControllerManagerFlags,
    #[command(flatten)]
    infra: InfraControllerFlags,
}

#[derive(Debug, clap::Args)]
struct CrdsArgs {
    /// Write one file per CRD into this directory (created if missing) instead of printing to stdout.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
}

/// Errors of the command line, each a sentence for the user.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The CRDs could not be produced.
    #[error(transparent)]
    Crds(#[from] api::crds::CrdError),
    /// A benchmark failed.
    #[error(transparent)]
    Bench(#[from] crate::bench::BenchError),
    /// A chaos run could not run.
    #[error(transparent)]
    Chaos(#[from] crate::chaos::ChaosError),
    /// A chaos run broke an invariant (the report says which).
    #[error("an invariant broke (see the report above)")]
    InvariantBroken,
    /// `mcm dev` failed.
    #[error(transparent)]
    Dev(#[from] crate::dev::DevError),
    /// `mcm run` failed.
    #[error(transparent)]
    Run(#[from] crate::run::RunError),
    /// A flag of `mcm run` has a value it cannot use.
    #[error(transparent)]
    RunArgs(#[from] RunArgsError),
    /// The `--config` file cannot be used.
    #[error(transparent)]
    Config(#[from] crate::run::config::ConfigError),
    /// `--log-level` or `RUST_LOG` is not a filter.
    #[error(transparent)]
    LogLevel(#[from] crate::telemetry::logging::LogLevelError),
    /// `mcm migrate` failed or was refused.
    #[error(transparent)]
    Migrate(#[from] migrate::MigrateCommandError),
    /// `mcm driver` failed.
    #[error(transparent)]
    Driver(#[from] driver::DriverCommandError),
    /// `mcm status` failed.
    #[error(transparent)]
    Status(#[from] status::StatusCommandError),
    /// The async runtime could not start.
    #[error("could not start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The path of this program is unknown (`mcm bench machines --peer` runs it as `mcm run`).
    #[error("could not find this program's own path: {0}")]
    CurrentExe(std::io::Error),
    /// Writing output failed.
    #[error("could not write {what}: {source}")]
    Write {
        /// What was being written.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Parses the arguments and runs the command; returns the process exit code.
pub fn run() -> ExitCode {
    let args = match crate::run::config::expand(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(err) => {
            eprintln!("mcm: {err}");
            return ExitCode::from(2);
        }
    };
    let cli = parse(args);
    match execute(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(
            err @ CliError::Dev(crate::dev::DevError::Start(crate::apiserver::StartError::InsecureHttpNotLoopback {
                ..
            })),
        ) => {
            // A flag combination refused, like a usage error.
            eprintln!("mcm: {err}");
            ExitCode::from(2)
        }
        Err(CliError::Migrate(err)) => {
            eprintln!("mcm migrate: {err}");
            ExitCode::from(err.exit_code())
        }
        Err(err) => {
            eprintln!("mcm: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The name kubectl runs this program by as a plugin (`kubectl mcm …`): an executable `kubectl-mcm` on `PATH`,
/// e.g. a link to `mcm`.
pub const PLUGIN_NAME: &str = "kubectl-mcm";

/// Whether the program was started as the kubectl plugin (its file name, from `argv[0]`, is [`PLUGIN_NAME`]).
pub fn invoked_as_plugin(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0).file_stem().is_some_and(|stem| stem == PLUGIN_NAME)
}

/// Parses the command line; as `kubectl-mcm` the same commands, with help and errors naming `kubectl mcm`.
fn parse(args: Vec<std::ffi::OsString>) -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    if !args.first().is_some_and(|argv0| invoked_as_plugin(argv0)) {
        return Cli::parse_from(args);
    }
    let mut command = Cli::command().name(PLUGIN_NAME).bin_name("kubectl mcm");
    let parsed = command.try_get_matches_from_mut(args).and_then(|matches| Cli::from_arg_matches(&matches));
    parsed.unwrap_or_else(|err| err.format(&mut command).exit())
}

fn execute(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Crds(args) => crds(args),
        Command::Run(args) => {
            crate::telemetry::logging::init(args.log_format, args.log_level())?;
            let options = args.options()?;
            for (flag, why) in args.without_effect() {
                tracing::warn!("{flag} is accepted for MCM's command lines and has no effect here: {why}");
            }
            let runtime =
                tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(CliError::Runtime)?;
            runtime.block_on(crate::run::run(options, ctrl_c(), |line| println!("mcm run: {line}")))?;
            Ok(())
        }
        Command::Chaos(args) => {
            // The in-process API server and kubelet meet the injected faults on purpose; their warnings would bury
            // the progress lines. The controllers' own logs go to files in the run's logs directory.
            crate::telemetry::logging::init(crate::telemetry::logging::LogFormat::Text, "mcm::chaos=warn")?;
            let runtime =
                tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(CliError::Runtime)?;
            let mut options = crate::chaos::ChaosOptions::new(std::env::current_exe().map_err(CliError::CurrentExe)?);
            options.seed = args.seed;
            options.trials = args.trials;
            options.machines = args.machines;
            options.window = args.window.0;
            options.boot = args.boot.0;
            options.kills = args.kills;
            options.pause = args.pause.0;
            options.api_write_failures = args.api_write_failures;
            options.create_failures = args.create_failures;
            options.throttling = args.throttling;
            options.orphan_period = args.orphan_period.0;
            options.converge_timeout = args.converge_timeout.0;
            let mut phases = progress::Shared::stderr(&runtime);
            let progress = |line: &str| phases.start(&format!("mcm chaos: {line}"));
            let report = runtime.block_on(crate::chaos::run(options, progress))?;
            phases.close();
            let text = match args.json {
                true => format!("{:#}\n", report.json()),
                false => report.text(),
            };
            write_out(&mut std::io::stdout().lock(), &text)?;
            match report.held() {
                true => Ok(()),
                false => Err(CliError::InvariantBroken),
            }
        }
        Command::Bench(BenchCommand::Apiserver { objects, watchers, parallel }) => {
            init_logging()?;
            let runtime =
                tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(CliError::Runtime)?;
            let sizes = crate::bench::ApiserverBench { objects, watchers, parallel };
            let report = runtime.block_on(crate::bench::apiserver(sizes))?;
            let mut out = std::io::stdout().lock();
            write_out(&mut out, &report)
        }
        Command::Bench(BenchCommand::Machines {
            machines,
            deployments,
            surge_percent,
            timeout,
            boot,
            rest,
            controllers_process,
            no_rolling_update,
            json,
            peer,
            kube_api_qps,
            kube_api_burst,
        }) => {
            init_logging()?;
            let runtime =
                tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(CliError::Runtime)?;
            let sizes = crate::bench::MachinesBench {
                machines,
                deployments,
                surge_percent,
                timeout: timeout.0,
                boot: boot.0,
                rest: rest.0,
                rolling_update: !no_rolling_update,
            };
            let mut phases = progress::Shared::stderr(&runtime);
            let progress = |line: &str| phases.start(&format!("mcm bench: {line}"));
            let report = match peer {
                Some(peer) => {
                    let ours = std::env::current_exe().map_err(CliError::CurrentExe)?;
                    let kube_api_qps = kube_api_qps.unwrap_or(20.0);
                    let bench = crate::bench::PeerBench { sizes, peer, ours, kube_api_qps, kube_api_burst };
                    runtime.block_on(crate::bench::side_by_side(bench, progress))?
                }
                None => {
                    let own_process = match controllers_process {
                        true => Some(crate::bench::OwnProcess {
                            ours: std::env::current_exe().map_err(CliError::CurrentExe)?,
                            kube_api_qps: kube_api_qps.unwrap_or(0.0),
                            kube_api_burst,
                        }),
                        false => None,
                    };
                    let report = runtime.block_on(crate::bench::machines(sizes, own_process, progress))?;
                    if json { report.json() } else { report.text() }
                }
            };
            phases.close();
            let mut out = std::io::stdout().lock();
            write_out(&mut out, &report)
        }
        Command::Dev(args) => {
            init_logging()?;
            let mut controllers = args.controllers.options();
            args.manager.apply(&mut controllers);
            // `mcm dev` is a cluster without upstream CAPI core: ours reconciles the cluster.x-k8s.io objects.
            controllers.capi_core = true;
            let infra = args.infra.options(&controllers);
            let options = crate::dev::DevOptions {
                listen: args.listen,
                kubeconfig_out: args.kubeconfig_out,
                data_dir: args.data_dir,
                insecure_http: args.insecure_http,
                apiserver_only: args.apiserver_only,
                run_controllers: !args.no_controllers,
                sample: !args.no_sample,
                controllers,
                infra,
                external: None,
                webhooks: !args.no_webhooks,
                capi_nodes: crate::controllers::CapiNodes::Target,
                kubelet: crate::providers::inmemory::KubeletConfig::default(),
                node_agent: Some(crate::providers::inmemory::NodeAgentConfig {
                    update_duration: args.in_place_update_duration.0,
                    failure_rate: args.in_place_update_failure_rate,
                    ..Default::default()
                }),
            };
            let runtime =
                tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(CliError::Runtime)?;
            runtime.block_on(crate::dev::run(options, ctrl_c()))?;
            Ok(())
        }
        Command::Migrate(command) => {
            init_logging()?;
            let runtime =
                tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(CliError::Runtime)?;
            let mut out = std::io::stdout();
            let terminal = std::io::IsTerminal::is_terminal(&out);
            runtime.block_on(migrate::run(command, &mut out, terminal))?;
            Ok(())
        }
        Command::Status(args) => {
            init_logging()?;
            let runtime =
                tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(CliError::Runtime)?;
            let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
            runtime.block_on(status::run(*args, ctrl_c(), &mut out, &mut err))?;
            Ok(())
        }
        Command::Driver(command) => {
            init_logging()?;
            let runtime =
                tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(CliError::Runtime)?;
            runtime.block_on(driver::run(command, ctrl_c(), |line| println!("mcm driver: {line}")))?;
            Ok(())
        }
        Command::Version => {
            let mut out = std::io::stdout().lock();
            write_out(&mut out, &version_text())
        }
    }
}

/// Logs as text to standard error for the commands without `--log-level`: `RUST_LOG` chooses what (default:
/// warnings), through the one initialiser `mcm run` uses.
/// A share: a number from 0 to 1 (clap's value parser for rates).
fn share(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(n) if (0.0..=1.0).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} is not between 0 and 1")),
        Err(e) => Err(format!("{value:?} is not a number: {e}")),
    }
}

fn init_logging() -> Result<(), CliError> {
    crate::telemetry::logging::init(crate::telemetry::logging::LogFormat::Text, "warn")?;
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn ctrl_c() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The text `mcm version` prints.
pub fn version_text() -> String {
    format!(
        "mcm {}\ngit commit: {}\ncluster api contract: {} (infrastructure.cluster.x-k8s.io/{})\n",
        version::VERSION,
        version::GIT_COMMIT,
        api::infra::CONTRACT,
        api::infra::VERSION,
    )
}

fn crds(args: CrdsArgs) -> Result<(), CliError> {
    let files = api::crds::files()?;
    match args.output_dir {
        None => {
            let mut out = std::io::stdout().lock();
            for file in files {
                write_out(&mut out, &file.yaml)?;
            }
            Ok(())
        }
        Some(dir) => {
            let io_err = |what: String| move |source| CliError::Write { what, source };
            std::fs::create_dir_all(&dir).map_err(io_err(dir.display().to_string()))?;
            for file in files {
                let path = dir.join(&file.file_name);
                std::fs::write(&path, &file.yaml).map_err(io_err(path.display().to_string()))?;
            }
            Ok(())
        }
    }
}

fn write_out(out: &mut impl Write, text: &str) -> Result<(), CliError> {
    out.write_all(text.as_bytes()).map_err(|source| CliError::Write { what: "standard output".into(), source })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn dev(args: &[&str]) -> Result<Box<DevArgs>, clap::Error> {
        let cli = Cli::try_parse_from(["mcm", "dev"].iter().chain(args))?;
        match cli.command {
            Command::Dev(args) => Ok(args),
            other => panic!("not dev: {other:?}"),
        }
    }

    #[test]
    fn dev_in_place_update_flags() {
        let defaults = dev(&[]).unwrap();
        assert_eq!(defaults.in_place_update_duration.0, std::time::Duration::from_secs(2));
        assert_eq!(defaults.in_place_update_failure_rate, 0.0);
        let set = dev(&["--in-place-update-duration=500ms", "--in-place-update-failure-rate=0.3"]).unwrap();
        assert_eq!(set.in_place_update_duration.0, std::time::Duration::from_millis(500));
        assert_eq!(set.in_place_update_failure_rate, 0.3);
        for bad in ["1.5", "-0.1", "often"] {
            assert!(dev(&[&format!("--in-place-update-failure-rate={bad}")]).is_err(), "{bad}");
        }
    }
}
