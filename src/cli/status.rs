//! `mcm status` (and `kubectl mcm status`): arguments, the cluster connection as kubectl users expect it, output
//! and `--watch`. The tree is [`crate::status`]'s.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::lifecycle::MachineConfig;
use crate::status::live::{self, Sources};
use crate::status::{self, Inventory, Options, Report, TextOptions, render};

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The tree, healthy siblings folded.
    Text,
    /// The whole tree as JSON (nothing folded; `docs/status.md` has the schema).
    Json,
    /// The whole tree as YAML.
    Yaml,
}

/// The flags of `mcm status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Only this MachineDeployment (of either flavour), with its MachineSets and Machines.
    #[arg(value_name = "MACHINEDEPLOYMENT")]
    machine_deployment: Option<String>,
    /// The namespace [default: the kubeconfig context's namespace, else "default"].
    #[arg(short = 'n', long, value_name = "NS")]
    namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    all_namespaces: bool,
    /// The kubeconfig [default: $KUBECONFIG (a list of files is merged), ~/.kube/config, or in-cluster].
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use [default: the current context].
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Read the Nodes from this cluster (where the machines' Nodes are, when it is not the cluster of the machine
    /// objects; the same context rules apply to it).
    #[arg(long, value_name = "PATH")]
    target_kubeconfig: Option<PathBuf>,
    /// Read the objects from this file (`-` for standard input) instead of a cluster: YAML or JSON, single objects
    /// or Lists, such as `kubectl get machinedeployments,machinesets,machines,nodes -o yaml` prints. Without -n, every
    /// namespace in the file.
    #[arg(short = 'f', long = "filename", value_name = "FILE", conflicts_with_all = ["watch", "kubeconfig", "context", "target_kubeconfig"])]
    filename: Option<PathBuf>,
    /// Show every machine and MachineSet on its own line, each machine with its VM and Node.
    #[arg(long)]
    show_all: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
    output: Format,
    /// Keep watching and print the tree again whenever it changes (Ctrl-C stops): redrawn in place on a terminal,
    /// each new rendering after a `---` line otherwise.
    #[arg(short = 'w', long)]
    watch: bool,
    /// The machine controller's creation timeout, for the countdowns (set it as the controller runs).
    #[arg(long, value_name = "DURATION", default_value = "20m")]
    machine_creation_timeout: crate::api::Duration,
    /// The machine controller's health timeout, for the countdowns.
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    machine_health_timeout: crate::api::Duration,
    /// The machine controller's drain timeout, for the countdowns.
    #[arg(long, value_name = "DURATION", default_value = "2h")]
    machine_drain_timeout: crate::api::Duration,
    /// Judge ages and deadlines at this time (RFC 3339) instead of the clock's: for reproducible output in tests.
    #[arg(long, value_name = "TIME", hide = true)]
    now: Option<jiff::Timestamp>,
}

/// Why `mcm status` failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusCommandError {
    /// No usable kubeconfig.
    #[error("could not load the kubeconfig: {0}")]
    Config(String),
    /// A client could not be built.
    #[error("could not build a client: {0}")]
    Client(#[source] kube::Error),
    /// The objects could not be read or watched.
    #[error(transparent)]
    Live(#[from] live::LiveError),
    /// The `-f` file could not be read.
    #[error("could not read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The `-f` file holds something else than objects.
    #[error("{path}: {source}")]
    Inventory {
        /// The file.
        path: String,
        /// The cause.
        source: status::InventoryError,
    },
    /// The named MachineDeployment is not there.
    #[error("no MachineDeployment {name:?} in {scope}")]
    NotFound {
        /// The name asked for.
        name: String,
        /// Where it was looked for.
        scope: String,
    },
    /// Writing the output failed.
    #[error("could not write the output: {0}")]
    Write(#[source] std::io::Error),
}

/// A kubeconfig as kubectl finds it: `--kubeconfig`, else `$KUBECONFIG` (a list of files, merged), else
/// `~/.kube/config`, else the pod's service account; `--context` picks the context (the current one otherwise),
/// whose namespace becomes the configuration's default namespace.
pub async fn kube_config(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<kube::Config, StatusCommandError> {
    let options = KubeConfigOptions { context: context.map(str::to_string), ..KubeConfigOptions::default() };
    let fail = |what: String| StatusCommandError::Config(what);
    match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|e| fail(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| fail(format!("{}: {e}", path.display())))
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await.map_err(|e| fail(e.to_string())),
        None => kube::Config::infer().await.map_err(|e| fail(e.to_string())),
    }
}

fn client(config: kube::Config) -> Result<kube::Client, StatusCommandError> {
    kube::Client::try_from(config).map_err(StatusCommandError::Client)
}

/// Whether `out` gets colours: a terminal, `NO_COLOR` unset or empty, and `TERM` not `dumb`.
pub fn colours_for(terminal: bool) -> bool {
    terminal
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

/// How one rendering is written.
struct Printer {
    format: Format,
    text: TextOptions,
    options: Options,
    /// Where the user looked (for "nothing found" and "not found").
    scope: String,
}

impl Printer {
    fn report(&self, inventory: &Inventory) -> Report {
        status::build(inventory, &self.options)
    }

    fn render(&self, report: &Report) -> String {
        match self.format {
            Format::Text if report.groups.is_empty() => {
                format!("No MachineDeployments, MachineSets or Machines in {}.\n", self.scope)
            }
            Format::Text => render::text(report, &self.text),
            Format::Json => render::json(report).unwrap_or_else(|e| format!("{{\"error\": {:?}}}\n", e.to_string())),
            Format::Yaml => render::yaml(report).unwrap_or_else(|e| format!("error: {e:?}\n")),
        }
    }

    /// Refuses a named MachineDeployment that does not exist.
    fn check_found(&self, report: &Report) -> Result<(), StatusCommandError> {
        match &self.options.deployment {
            Some(name) if report.groups.is_empty() => {
                Err(StatusCommandError::NotFound { name: name.clone(), scope: self.scope.clone() })
            }
            _ => Ok(()),
        }
    }
}

/// Runs `mcm status`; `out` gets the tree, `err` the notes (kinds left out, watch failures).
pub async fn run(
    args: StatusArgs,
    stop: impl std::future::Future<Output = ()>,
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
) -> Result<(), StatusCommandError> {
    let config = MachineConfig {
        creation_timeout: args.machine_creation_timeout.0,
        health_timeout: args.machine_health_timeout.0,
        drain_timeout: args.machine_drain_timeout.0,
        ..MachineConfig::default()
    };
    let terminal = std::io::stdout().is_terminal();
    let text = TextOptions { show_all: args.show_all, colour: colours_for(terminal) };
    let now = || args.now.unwrap_or_else(jiff::Timestamp::now);
    let write = |out: &mut (dyn Write + Send), s: &str| out.write_all(s.as_bytes()).and_then(|()| out.flush());

    if let Some(path) = &args.filename {
        let shown = path.display().to_string();
        let mut data = String::new();
        let read = match path.as_os_str() == "-" {
            true => std::io::stdin().read_to_string(&mut data).map(|_| ()),
            false => std::fs::read_to_string(path).map(|d| data = d),
        };
        read.map_err(|source| StatusCommandError::Read { path: shown.clone(), source })?;
        let inventory = Inventory::from_documents(&data)
            .map_err(|source| StatusCommandError::Inventory { path: shown.clone(), source })?;
        let scope = match &args.namespace {
            Some(ns) => format!("namespace {ns} of {shown}"),
            None => shown.clone(),
        };
        let options =
            Options { now: now(), config, namespace: args.namespace.clone(), deployment: args.machine_deployment };
        let printer = Printer { format: args.output, text, options, scope };
        let report = printer.report(&inventory);
        printer.check_found(&report)?;
        return write(out, &printer.render(&report)).map_err(StatusCommandError::Write);
    }

    let control = kube_config(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let namespace = match args.all_namespaces {
        true => None,
        false => Some(args.namespace.clone().unwrap_or_else(|| control.default_namespace.clone())),
    };
    let nodes = match &args.target_kubeconfig {
        Some(path) => client(kube_config(Some(path), None).await?)?,
        None => client(control.clone())?,
    };
    let sources = Sources { control: client(control)?, nodes, namespace: namespace.clone() };
    let scope = match &namespace {
        Some(ns) => format!("namespace {ns}"),
        None => "any namespace".to_string(),
    };
    let options = Options { now: now(), config, namespace: namespace.clone(), deployment: args.machine_deployment };
    let mut printer = Printer { format: args.output, text, options, scope };

    let listed = live::list(&sources).await?;
    for note in &listed.notes {
        write(err, &format!("mcm status: {note}\n")).map_err(StatusCommandError::Write)?;
    }
    if !args.watch {
        let report = printer.report(&listed.inventory);
        printer.check_found(&report)?;
        return write(out, &printer.render(&report)).map_err(StatusCommandError::Write);
    }

    // --watch: the first rendering once every watch has listed, then one per change. On a terminal the screen is
    // redrawn (and ages move on every few seconds); elsewhere each new rendering follows a `---` line.
    let tick = terminal.then_some(std::time::Duration::from_secs(5));
    let mut last: Option<String> = None;
    let served = listed.served.clone();
    let fixed_now = args.now;
    let result = live::watch(
        &sources,
        &served,
        tick,
        stop,
        // A warning that cannot be written is lost; the watch goes on.
        |warning| {
            let _ = write(err, &format!("mcm status: {warning}\n"));
        },
        |inventory| {
            printer.options.now = fixed_now.unwrap_or_else(jiff::Timestamp::now);
            let rendered = printer.render(&printer.report(inventory));
            if last.as_deref() == Some(rendered.as_str()) {
                return Ok(());
            }
            let framed = match (terminal, &last, printer.format) {
                (true, _, _) => format!("\x1b[H\x1b[2J{rendered}\nwatching (Ctrl-C stops)\n"),
                (false, _, Format::Yaml) => format!("---\n{rendered}"),
                (false, Some(_), Format::Text) => format!("---\n{rendered}"),
                (false, _, _) => rendered.clone(),
            };
            last = Some(rendered);
            write(out, &framed)
        },
    )
    .await;
    result.map_err(StatusCommandError::from)
}
