//! The flags of `mcm run` (docs/architecture.md; MCM's names where MCM has them, `docs/machine-lifecycle.md`). The
//! controller flags are the ones `mcm dev` shares ([`MachineControllerFlags`], [`MachineControllerManagerFlags`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use super::mcm_flags::{LockTypeError, McmFlags};
use super::{InfraControllerFlags, MachineControllerFlags, MachineControllerManagerFlags};
use crate::api::Duration;
use crate::run::{RunOptions, Target, selection};
use crate::telemetry::RateLimit;
use crate::telemetry::leader::{LeaderConfig, default_identity};
use crate::telemetry::logging::LogFormat;

/// `mcm run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// A YAML file whose keys are these flags' names (`kube-api-qps: 50`); flags given here override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The control cluster (Machines, classes, Secrets, Leases); default: in-cluster, else $KUBECONFIG, else
    /// ~/.kube/config. MCM's `--control-kubeconfig` is accepted too, with its `inClusterConfig` value.
    #[arg(long, value_name = "PATH", visible_alias = "control-kubeconfig")]
    pub kubeconfig: Option<PathBuf>,
    /// The target cluster (Nodes): a kubeconfig, or `none` to run without one; default: the control cluster.
    #[arg(long, value_name = "PATH|none")]
    pub target_kubeconfig: Option<String>,
    /// Watch only this namespace of the control cluster (default: all namespaces).
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Controllers to run: `*` for those on by default (the MCM flavour's: machine, machineclass, safety,
    /// machineset, machinedeployment), `foo` to enable, `-foo` to disable; the CAPI side's groups run only when
    /// named: `infrastructure` (MCMMachine, MCMCluster, MCMMachineTemplate) and `capi` (MachineDeployment,
    /// MachineSet and Machine on cluster.x-k8s.io).
    #[arg(long, value_name = "LIST", default_value = "*")]
    pub controllers: String,
    /// Elect a leader on a Lease so that only one of several replicas reconciles.
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// How long a leader's lease lasts without renewal; a standby takes over at most this long after the leader
    /// dies.
    #[arg(long, value_name = "DURATION", default_value = "15s")]
    pub leader_elect_lease_duration: Duration,
    /// The leader renews its lease when this much of the lease duration has passed since the last renewal
    /// (whole seconds).
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub leader_elect_renew_deadline: Duration,
    /// How long to wait before trying again after a failed election step.
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub leader_elect_retry_period: Duration,
    /// The Lease's name.
    #[arg(long, value_name = "NAME", default_value = "machine-controller-manager")]
    pub leader_elect_resource_name: String,
    /// The Lease's namespace (default: --namespace, else $POD_NAMESPACE, else `default`).
    #[arg(long, value_name = "NS")]
    pub leader_elect_resource_namespace: Option<String>,
    /// Where `/metrics` is served (`0` turns it off); default `0.0.0.0:10258`, or MCM's `--address` and `--port`.
    #[arg(long, value_name = "ADDR")]
    pub metrics_bind_address: Option<String>,
    /// Where `/healthz` and `/readyz` are served (`0` turns them off; the same address as the metrics shares
    /// one listener); default `0.0.0.0:10258`, or MCM's `--address` and `--port`.
    #[arg(long, value_name = "ADDR")]
    pub health_probe_bind_address: Option<String>,
    /// The port the admission webhooks are served on over HTTPS, on every interface (`0` turns them off).
    #[arg(long, value_name = "PORT", default_value_t = 9443)]
    pub webhook_port: u16,
    /// The directory with the webhooks' serving certificate, `tls.crt` and `tls.key` (cert-manager's Secret mounted
    /// there); changed files are read again. Without the files the webhooks are not served (a warning says so).
    #[arg(long, value_name = "DIR", default_value = "/tmp/k8s-webhook-server/serving-certs")]
    pub webhook_cert_dir: PathBuf,
    /// Requests per second each cluster's client may send on average (0 turns the limit off).
    #[arg(long, value_name = "QPS", default_value_t = 20.0)]
    pub kube_api_qps: f64,
    /// Requests each cluster's client may send at once after a quiet spell.
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub kube_api_burst: u32,
    /// Driver (cloud API) calls per second per provider, on average (0, the default, turns the limit off).
    #[arg(long, value_name = "QPS", default_value_t = 0.0)]
    pub cloud_api_qps: f64,
    /// Driver calls per provider that may go at once after a quiet spell.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub cloud_api_burst: u32,
    /// Log lines as `text` or `json`.
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    pub log_format: LogFormat,
    /// What to log: a level (`info`, the default; or MCM's `--v`) or a tracing filter
    /// (`info,mcm::controllers=debug`); RUST_LOG wins.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Use the in-memory cloud that `mcm dev` serves at this URL for `InMemory` machine classes.
    #[arg(long, value_name = "URL")]
    pub inmemory_cloud_url: Option<String>,
    /// Send the calls for classes whose `provider` is PROVIDER to the out-of-tree driver at ENDPOINT
    /// (unix:///path or http://127.0.0.1:PORT); repeatable, and it wins over an in-tree driver of that name.
    #[arg(long = "driver", value_name = "PROVIDER=ENDPOINT", value_delimiter = ',')]
    pub drivers: Vec<crate::providers::grpc::DriverRoute>,
    #[command(flatten)]
    controller_flags: MachineControllerFlags,
    #[command(flatten)]
    manager_flags: MachineControllerManagerFlags,
    #[command(flatten)]
    infra_flags: InfraControllerFlags,
    #[command(flatten)]
    mcm_flags: McmFlags,
}

/// A flag value `mcm run` cannot use.
#[derive(Debug, thiserror::Error)]
pub enum RunArgsError {
    /// `--controllers`.
    #[error(transparent)]
    Controllers(#[from] selection::SelectionError),
    /// A bind address.
    #[error("{flag}: {value:?} is not an address (HOST:PORT, or 0 to turn it off)")]
    Address {
        /// The flag.
        flag: &'static str,
        /// The value.
        value: String,
    },
    /// An MCM flag's value MCM refuses too.
    #[error(transparent)]
    LockType(#[from] LockTypeError),
    /// Two `--driver` routes for one provider.
    #[error("--driver: provider {provider:?} is routed twice ({first} and {second})")]
    DriverRoutedTwice {
        /// The provider.
        provider: String,
        /// One endpoint.
        first: String,
        /// The other.
        second: String,
    },
    /// The leader election timings.
    #[error("--leader-elect-renew-deadline ({renew}) must be shorter than --leader-elect-lease-duration ({lease})")]
    Lease {
        /// The renew deadline.
        renew: String,
        /// The lease duration.
        lease: String,
    },
}

/// The `--driver` routes, refusing a provider routed to two endpoints (which one would win is not obvious).
fn driver_routes(
    routes: &[crate::providers::grpc::DriverRoute],
) -> Result<Vec<crate::providers::grpc::DriverRoute>, RunArgsError> {
    for (i, route) in routes.iter().enumerate() {
        if let Some(other) = routes[..i].iter().find(|r| r.provider == route.provider && r.endpoint != route.endpoint) {
            return Err(RunArgsError::DriverRoutedTwice {
                provider: route.provider.clone(),
                first: other.endpoint.to_string(),
                second: route.endpoint.to_string(),
            });
        }
    }
    Ok(routes.to_vec())
}

fn address(flag: &'static str, value: &str) -> Result<Option<SocketAddr>, RunArgsError> {
    if value == "0" || value.is_empty() {
        return Ok(None);
    }
    // Go style `:8080` means every interface.
    let full = if value.starts_with(':') { format!("0.0.0.0{value}") } else { value.to_string() };
    full.parse().map(Some).map_err(|_| RunArgsError::Address { flag, value: value.to_string() })
}

impl RunArgs {
    /// The log filter: `--log-level`, else MCM's `--v`, else `info`.
    pub fn log_level(&self) -> &str {
        self.log_level.as_deref().or(self.mcm_flags.log_level()).unwrap_or("info")
    }

    /// MCM's flags given that change nothing here, each with the reason: one warning each at start.
    pub fn without_effect(&self) -> Vec<(&'static str, &'static str)> {
        self.mcm_flags.without_effect()
    }

    /// What these flags ask for.
    pub fn options(&self) -> Result<RunOptions, RunArgsError> {
        self.mcm_flags.validate()?;
        let mcm_address = self.mcm_flags.bind_address();
        let metrics_bind_address = self.metrics_bind_address.as_deref().unwrap_or(&mcm_address);
        let health_probe_bind_address = self.health_probe_bind_address.as_deref().unwrap_or(&mcm_address);
        let mut controllers = self.controller_flags.options();
        self.manager_flags.apply(&mut controllers);
        controllers.namespace = self.namespace.clone().filter(|n| !n.is_empty());
        controllers.disabled = selection::disabled(&self.controllers, selection::KNOWN, selection::OFF_BY_DEFAULT)?;
        controllers.capi_core = !controllers.disabled.contains(selection::CAPI);
        let infrastructure =
            (!controllers.disabled.contains(selection::INFRASTRUCTURE)).then(|| self.infra_flags.options(&controllers));
        let target = match self.target_kubeconfig.as_deref() {
            None | Some("") => Target::Control,
            Some("none") => Target::None,
            Some(path) => Target::Kubeconfig(PathBuf::from(path)),
        };
        let leader = if self.leader_elect {
            if self.leader_elect_renew_deadline.0 >= self.leader_elect_lease_duration.0 {
                return Err(RunArgsError::Lease {
                    renew: format!("{:?}", self.leader_elect_renew_deadline.0),
                    lease: format!("{:?}", self.leader_elect_lease_duration.0),
                });
            }
            let namespace = self
                .leader_elect_resource_namespace
                .clone()
                .or_else(|| controllers.namespace.clone())
                .or_else(|| std::env::var("POD_NAMESPACE").ok())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".to_string());
            Some(LeaderConfig {
                lease_name: self.leader_elect_resource_name.clone(),
                namespace,
                identity: default_identity(),
                lease_duration: self.leader_elect_lease_duration.0,
                renew_deadline: self.leader_elect_renew_deadline.0,
                retry_period: self.leader_elect_retry_period.0,
            })
        } else {
            None
        };
        Ok(RunOptions {
            // MCM's word for "the pod's service account"; inference tries that first.
            kubeconfig: self
                .kubeconfig
                .clone()
                .filter(|p| p.as_os_str() != "inClusterConfig" && !p.as_os_str().is_empty()),
            target,
            rate_limit: RateLimit { qps: self.kube_api_qps, burst: self.kube_api_burst },
            cloud_rate_limit: RateLimit { qps: self.cloud_api_qps, burst: self.cloud_api_burst },
            leader,
            metrics_addr: address("--metrics-bind-address", metrics_bind_address)?,
            health_addr: address("--health-probe-bind-address", health_probe_bind_address)?,
            webhook_addr: (self.webhook_port != 0).then(|| SocketAddr::from(([0, 0, 0, 0], self.webhook_port))),
            webhook_cert_dir: self.webhook_cert_dir.clone(),
            inmemory_cloud_url: self.inmemory_cloud_url.clone(),
            drivers: driver_routes(&self.drivers)?,
            controllers,
            infrastructure,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    #[command(args_override_self = true)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn options(args: &[&str]) -> Result<RunOptions, RunArgsError> {
        Cli::try_parse_from(std::iter::once("mcm").chain(args.iter().copied())).unwrap().run.options()
    }

    #[test]
    fn defaults() {
        let o = options(&[]).unwrap();
        assert_eq!(o.target, Target::Control);
        assert_eq!(o.rate_limit, RateLimit { qps: 20.0, burst: 30 });
        assert_eq!(o.metrics_addr, Some("0.0.0.0:10258".parse().unwrap()));
        assert_eq!(o.health_addr, o.metrics_addr);
        assert_eq!(o.webhook_addr, Some("0.0.0.0:9443".parse().unwrap()), "controller-runtime's port");
        assert_eq!(o.webhook_cert_dir, PathBuf::from("/tmp/k8s-webhook-server/serving-certs"));
        assert_eq!(options(&["--webhook-port=0"]).unwrap().webhook_addr, None);
        assert_eq!(options(&["--webhook-port=9444"]).unwrap().webhook_addr, Some("0.0.0.0:9444".parse().unwrap()));
        let leader = o.leader.unwrap();
        assert_eq!(
            (leader.lease_name.as_str(), leader.seconds()),
            ("machine-controller-manager", (15, 13)),
            "renewed every retry period (2 s)"
        );
        for name in crate::controllers::CONTROLLER_NAMES {
            assert!(!o.controllers.disabled.contains(name), "{name} runs by default");
        }
        assert!(!o.controllers.capi_core && o.infrastructure.is_none(), "the MCM flavour alone by default");
        assert_eq!(o.controllers.namespace, None);
    }

    #[test]
    fn flags_set_options() {
        let o = options(&[
            "--target-kubeconfig=none",
            "--namespace=shoot",
            "--controllers=*,-safety",
            "--leader-elect=false",
            "--metrics-bind-address=:8080",
            "--health-probe-bind-address=0",
            "--kube-api-qps=5",
            "--kube-api-qps=50",
            "--machine-creation-timeout=1m",
            "--safety-up=4",
            "--cloud-api-qps=2.5",
        ])
        .unwrap();
        assert_eq!(o.target, Target::None);
        assert_eq!(o.controllers.namespace.as_deref(), Some("shoot"));
        assert!(o.controllers.disabled.contains("safety"));
        assert!(o.leader.is_none());
        assert_eq!(o.metrics_addr, Some("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(o.health_addr, None);
        assert_eq!(o.rate_limit.qps, 50.0, "the last occurrence wins (config file flags come first)");
        assert_eq!(o.controllers.machine.creation_timeout, std::time::Duration::from_secs(60));
        assert_eq!(o.controllers.sets.freeze.safety_up, 4);
        assert_eq!(o.cloud_rate_limit, RateLimit { qps: 2.5, burst: 10 });
        assert_eq!(options(&["--namespace=x"]).unwrap().leader.unwrap().namespace, "x");
        assert_eq!(options(&["--control-kubeconfig=/k"]).unwrap().kubeconfig, Some(PathBuf::from("/k")));
        assert_eq!(options(&["--control-kubeconfig=inClusterConfig"]).unwrap().kubeconfig, None);
    }

    #[test]
    fn capi_groups_are_selected_by_name() {
        let o = options(&["--controllers=infrastructure", "--namespace=capi", "--mcmmachine-concurrency=3"]).unwrap();
        let infra = o.infrastructure.expect("infrastructure runs");
        assert_eq!((infra.namespace.as_deref(), infra.machine_concurrency), (Some("capi"), 3));
        assert!(!o.controllers.capi_core);
        for name in crate::controllers::CONTROLLER_NAMES {
            assert!(o.controllers.disabled.contains(name), "{name} does not run");
        }
        let o = options(&["--controllers=*,capi,infrastructure"]).unwrap();
        assert!(o.controllers.capi_core && o.infrastructure.is_some() && !o.controllers.disabled.contains("machine"));
        let o = options(&["--controllers=capi,-capi,machine"]).unwrap();
        assert!(!o.controllers.capi_core && o.infrastructure.is_none());
    }

    #[test]
    fn every_flag_is_documented() {
        use clap::CommandFactory;
        let page = include_str!("../../docs/configuration.md");
        for arg in Cli::command().get_arguments() {
            if let Some(long) = arg.get_long() {
                assert!(page.contains(&format!("`--{long}")), "docs/configuration.md documents --{long}");
            }
        }
    }

    /// Every flag of MCM master's `machine-controller-manager` and `machine-controller` (their `options.go`, with
    /// klog's `--v`/`--vmodule`, `--log-flush-frequency` and the leader election flags), as MCM's docs write them.
    const MCM_FLAGS: &[&str] = &[
        "--port=10259",
        "--address=0.0.0.0",
        "--cloud-provider=aws",
        "--concurrent-syncs=50",
        "--min-resync-period=12h0m0s",
        "--profiling=false",
        "--contention-profiling=false",
        "--target-kubeconfig=none",
        "--control-kubeconfig=inClusterConfig",
        "--namespace=shoot--a--b",
        "--kube-api-content-type=application/vnd.kubernetes.protobuf",
        "--kube-api-qps=20",
        "--kube-api-burst=30",
        "--controller-start-interval=0s",
        "--machine-creation-timeout=20m",
        "--machine-health-timeout=10m",
        "--machine-drain-timeout=2h",
        "--machine-inplace-update-timeout=20m",
        "--machine-max-evict-retries=10",
        "--machine-pv-detach-timeout=2m",
        "--machine-pv-reattach-timeout=90s",
        "--machine-safety-apiserver-statuscheck-timeout=30s",
        "--machine-preserve-timeout=96h",
        "--machine-safety-orphan-vms-period=15m",
        "--machine-safety-apiserver-statuscheck-period=1m",
        "--node-conditions=KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable",
        "--bootstrap-token-auth-extra-groups=system:bootstrappers:gardener",
        "--resource-exhausted-retry=10m",
        "--safety-up=2",
        "--safety-down=1",
        "--machine-safety-overshooting-period=1m",
        "--autoscaler-scaledown-annotation-during-rollout=true",
        "--v=3",
        "--vmodule=machine=4",
        "--log-flush-frequency=5s",
        "--leader-elect=true",
        "--leader-elect-lease-duration=15s",
        "--leader-elect-renew-deadline=10s",
        "--leader-elect-retry-period=2s",
        "--leader-elect-resource-lock=leases",
    ];

    #[test]
    fn mcms_flags_are_accepted() {
        let o = options(MCM_FLAGS).unwrap();
        assert_eq!(o.target, Target::None);
        assert_eq!(o.kubeconfig, None, "inClusterConfig");
        assert_eq!(o.metrics_addr, Some("0.0.0.0:10259".parse().unwrap()), "--address and --port");
        assert_eq!(o.health_addr, o.metrics_addr);
        assert_eq!(o.controllers.concurrent_syncs, 50);
        assert_eq!(o.controllers.machine.in_place_update_timeout, std::time::Duration::from_secs(20 * 60));
        let cli = Cli::try_parse_from(std::iter::once("mcm").chain(MCM_FLAGS.iter().copied())).unwrap();
        assert_eq!(cli.run.log_level(), "info", "--v=3");
        let named: Vec<&str> = cli.run.without_effect().into_iter().map(|(f, _)| f).collect();
        assert_eq!(named.len(), 8, "{named:?}");
        // MCM's command lines set one flag in both binaries (`--namespace`, `--v`, the kubeconfigs): the last wins.
        let o = options(&["--v=2", "--namespace=a", "--v=5", "--namespace=b"]).unwrap();
        assert_eq!(o.controllers.namespace.as_deref(), Some("b"));
        // Ours win over MCM's.
        let o = options(&["--port=9", "--metrics-bind-address=127.0.0.1:8080"]).unwrap();
        assert_eq!(o.metrics_addr, Some("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(o.health_addr, Some("0.0.0.0:9".parse().unwrap()));
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(matches!(options(&["--controllers=*,-nope"]), Err(RunArgsError::Controllers(_))));
        assert!(matches!(options(&["--metrics-bind-address=here"]), Err(RunArgsError::Address { .. })));
        assert!(matches!(
            options(&["--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=5s"]),
            Err(RunArgsError::Lease { .. })
        ));
        assert!(Cli::try_parse_from(["mcm", "--log-format=xml"]).is_err());
        assert!(matches!(options(&["--leader-elect-resource-lock=endpoints"]), Err(RunArgsError::LockType(_))));
        // MCM's sample deployment writes `--machine-safety-overshooting-period=1`; MCM refuses it (Go's
        // time.ParseDuration wants a unit), and so do we.
        assert!(Cli::try_parse_from(["mcm", "--machine-safety-overshooting-period=1"]).is_err());
    }

    fn routes_of(args: &[&str]) -> Result<Vec<String>, RunArgsError> {
        Ok(options(args)?.drivers.iter().map(|r| format!("{}={}", r.provider, r.endpoint)).collect())
    }

    #[test]
    fn driver_routes_repeat_and_a_provider_routed_twice_is_refused() {
        assert_eq!(
            routes_of(&["--driver", "A=unix:///a.sock", "--driver", "B=unix:///b.sock"]).unwrap(),
            ["A=unix:///a.sock", "B=unix:///b.sock"]
        );
        assert_eq!(routes_of(&["--driver=A=unix:///a.sock,B=127.0.0.1:9"]).unwrap().len(), 2);
        let err = routes_of(&["--driver", "A=unix:///a.sock", "--driver", "A=unix:///b.sock"]).unwrap_err();
        assert!(err.to_string().contains("routed twice"), "{err}");
    }
}
