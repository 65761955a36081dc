//! `mcm migrate plan|apply|rollback` (`docs/migration.md`): arguments, output and exit codes; the work is
//! [`crate::migrate`]'s.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::progress::Reporter;
use crate::migrate::{self, ApplyOptions, MigrateError, Plan, Progress, Target, exit};

/// The three actions.
#[derive(Debug, Subcommand)]
pub enum MigrateCommand {
    /// Print (and with --out write) the CAPI objects that would adopt the MCM machines, and a summary of what maps
    /// 1:1, what maps with loss and what blocks the migration. Exit code 3 when something blocks.
    Plan(MigrateArgs),
    /// Hand the MCM MachineDeployments over to CAPI objects, step by step, adopting every VM; re-run to resume.
    Apply(MigrateArgs),
    /// Hand them back to MCM objects, also without recreating a VM; re-run to resume.
    Rollback(MigrateArgs),
}

/// The flags every action takes.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The kubeconfig of the cluster holding the machine objects [default: $KUBECONFIG, ~/.kube/config or in-cluster].
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// The namespace of the MCM objects (the CAPI objects go there too).
    #[arg(long, value_name = "NS")]
    namespace: String,
    /// The CAPI Cluster the machines join (created with an MCMCluster when absent).
    #[arg(long, value_name = "NAME")]
    cluster_name: String,
    /// Also write the planned objects (one YAML file per MachineDeployment, plus cluster.yaml) and summary.txt here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Change nothing: print what would be done.
    #[arg(long)]
    dry_run: bool,
    /// How long apply and rollback wait for the machines to be Running under their new owners.
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    timeout: crate::api::Duration,
}

/// Why `mcm migrate` failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateCommandError {
    /// The hand-over failed or was refused.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    /// The plan found blockers (already printed).
    #[error("the plan has {0} blocker(s); see the summary above")]
    Blocked(usize),
    /// The cluster could not be reached.
    #[error(transparent)]
    Config(#[from] crate::run::RunError),
    /// A client could not be built.
    #[error("could not build a client for --kubeconfig: {0}")]
    Client(kube::Error),
    /// Output could not be written.
    #[error("could not write {what}: {source}")]
    Write {
        /// What.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

impl MigrateCommandError {
    /// The process exit code (`docs/migration.md`).
    pub fn exit_code(&self) -> u8 {
        match self {
            MigrateCommandError::Migrate(e) => e.exit_code(),
            MigrateCommandError::Blocked(_) => exit::BLOCKED,
            _ => exit::ERROR,
        }
    }
}

fn write_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> MigrateCommandError {
    let what = what.into();
    move |source| MigrateCommandError::Write { what, source }
}

fn yaml_documents(objects: &[serde_json::Value]) -> String {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(o).unwrap_or_default());
    }
    out
}

/// The summary as YAML comments, so the printed plan stays one valid YAML stream.
fn commented(summary: &str) -> String {
    summary.lines().map(|l| format!("# {l}\n")).collect()
}

fn write_plan(dir: &Path, plan: &Plan) -> Result<(), MigrateCommandError> {
    std::fs::create_dir_all(dir).map_err(write_err(dir.display().to_string()))?;
    let write = |name: String, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(write_err(path.display().to_string()))
    };
    let mut cluster = Vec::new();
    cluster.extend(plan.cluster.iter().filter_map(|c| serde_json::to_value(c).ok()));
    cluster.extend(plan.mcm_cluster.iter().filter_map(|c| serde_json::to_value(c).ok()));
    if !cluster.is_empty() {
        write("cluster.yaml".into(), yaml_documents(&cluster))?;
    }
    for d in &plan.deployments {
        let one = Plan { deployments: vec![d.clone()], ..Default::default() };
        write(format!("{}.yaml", d.name), yaml_documents(&one.objects()))?;
    }
    write("summary.txt".into(), plan.summary.render())
}

/// One progress event: a step's start and end, or an object of the step.
fn show<W: Write>(reporter: &mut Reporter<W>, p: Progress) -> std::io::Result<()> {
    match &p {
        Progress::StepStarted { .. } => reporter.start(&p.to_string()),
        Progress::Object { .. } => reporter.item(&p.to_string()),
        Progress::StepDone { .. } => reporter.finish(&p.to_string()),
    }
}

/// Runs `mcm migrate …`; `out` gets the plan and the progress: on a `terminal` one line per step with its count of
/// objects, otherwise every step and object on a line of its own.
pub async fn run(
    command: MigrateCommand,
    out: &mut (dyn Write + Send),
    terminal: bool,
) -> Result<(), MigrateCommandError> {
    let (action, args) = match command {
        MigrateCommand::Plan(a) => ("plan", a),
        MigrateCommand::Apply(a) => ("apply", a),
        MigrateCommand::Rollback(a) => ("rollback", a),
    };
    let config = crate::run::load_config("--kubeconfig", args.kubeconfig.as_ref()).await?;
    let client = kube::Client::try_from(config).map_err(MigrateCommandError::Client)?;
    let target = Target { namespace: args.namespace.clone(), cluster_name: args.cluster_name.clone() };
    let options =
        ApplyOptions { target: target.clone(), timeout: args.timeout.0, poll: std::time::Duration::from_millis(500) };
    let stdout = write_err("standard output");
    match action {
        "plan" => {
            let inventory = migrate::client_inventory(&client, &target).await?;
            let plan = migrate::plan(&inventory, &target);
            if let Some(dir) = &args.out {
                write_plan(dir, &plan)?;
            }
            let text = format!("{}{}", yaml_documents(&plan.objects()), commented(&plan.summary.render()));
            out.write_all(text.as_bytes()).map_err(stdout)?;
            match plan.summary.blockers.len() {
                0 => Ok(()),
                n => Err(MigrateCommandError::Blocked(n)),
            }
        }
        "apply" if args.dry_run => {
            let inventory = migrate::client_inventory(&client, &target).await?;
            let plan = migrate::plan(&inventory, &target);
            let mut text = commented(&plan.summary.render());
            for d in &plan.deployments {
                for step in migrate::ApplyStep::ALL {
                    text.push_str(&format!("dry run: {}: step {}: would {}\n", d.name, step.name(), step.describe()));
                }
            }
            out.write_all(text.as_bytes()).map_err(stdout)?;
            match plan.summary.blockers.len() {
                0 => Ok(()),
                n => Err(MigrateCommandError::Blocked(n)),
            }
        }
        "rollback" if args.dry_run => {
            let names = migrate::rollback_candidates(&client, &target.namespace).await?;
            let mut text = String::new();
            for name in names {
                for step in migrate::RollbackStep::ALL {
                    text.push_str(&format!("dry run: {name}: step {}: would {}\n", step.name(), step.describe()));
                }
            }
            out.write_all(text.as_bytes()).map_err(stdout)?;
            Ok(())
        }
        _ => {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Progress>();
            let report = move |p: Progress| {
                let _ = tx.send(p);
            };
            let work = async {
                if action == "apply" {
                    migrate::apply(&client, &options, &report).await.map(|_| ())
                } else {
                    migrate::rollback(&client, &options, &report).await.map(|_| ())
                }
            };
            tokio::pin!(work);
            // Progress as it comes (a long wait shows which machines are done; on a terminal the step's line
            // counts them and its time moves on).
            let mut reporter = Reporter::new(&mut *out, terminal, "objects");
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            let result = loop {
                tokio::select! {
                    result = &mut work => break result,
                    Some(p) = rx.recv() => show(&mut reporter, p).map_err(write_err("standard output"))?,
                    _ = tick.tick() => reporter.tick().map_err(write_err("standard output"))?,
                }
            };
            while let Ok(p) = rx.try_recv() {
                show(&mut reporter, p).map_err(write_err("standard output"))?;
            }
            reporter.close().map_err(write_err("standard output"))?;
            drop(reporter);
            result?;
            out.write_all(format!("mcm migrate {action}: done\n").as_bytes()).map_err(write_err("standard output"))?;
            Ok(())
        }
    }
}
