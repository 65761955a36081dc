//! `mcm run`: the controllers against a real cluster — clients from a kubeconfig or the pod's service account
//! (rate-limited), leader election on a Lease, `/metrics`, `/healthz` and `/readyz`, and a graceful stop.
//!
//! The leader runs what `--controllers` selects: the MCM flavour's [`Controllers`] (with the CAPI core-mode ones
//! when `capi` is named) and the CAPI infrastructure provider's [`InfraControllers`] (`infrastructure`); a standby
//! watches only what its metrics need (nothing in an infrastructure-only install). Losing the lease stops the
//! controllers (letting running reconciles finish up to the shutdown grace); SIGTERM stops them, then releases the
//! lease, so the next leader never overlaps with this one.

pub mod config;
pub mod selection;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::watch;

use crate::controllers::{
    CONTROLLER_NAMES, CapiNodes, Clusters, ControllerOptions, Controllers, InfraControllers, InfraOptions, ProbeClients,
};
use crate::metrics::{self, Metrics};
use crate::providers::DriverRegistry;
use crate::providers::grpc::GrpcDriver;
use crate::telemetry::leader::{self, LeaderConfig, Leadership};
use crate::telemetry::{self, Health, RateLimit, RateLimitLayer};

/// Which target cluster Nodes live in.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// The control cluster.
    Control,
    /// No target cluster (`--target-kubeconfig none`).
    None,
    /// The cluster of this kubeconfig.
    Kubeconfig(PathBuf),
}

impl Target {
    /// Where mode "CAPI with MCM core" reads a Cluster's Nodes: from its kubeconfig Secret, as core does, unless a
    /// target cluster was named (or refused) explicitly.
    fn capi_nodes(&self) -> CapiNodes {
        match self {
            Target::Control => CapiNodes::PerCluster,
            Target::None | Target::Kubeconfig(_) => CapiNodes::Target,
        }
    }
}

/// What `mcm run` does.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The control cluster's kubeconfig; `None` infers it (in-cluster, then `KUBECONFIG`, then `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// The target cluster.
    pub target: Target,
    /// Client-side rate limit of each cluster's client.
    pub rate_limit: RateLimit,
    /// Leader election, or `None` to lead at once.
    pub leader: Option<LeaderConfig>,
    /// Where `/metrics` is served (`None`: nowhere).
    pub metrics_addr: Option<SocketAddr>,
    /// Where `/healthz` and `/readyz` are served (`None`: nowhere).
    pub health_addr: Option<SocketAddr>,
    /// Where the admission webhooks are served over HTTPS (`None`: nowhere; `--webhook-port 0`).
    pub webhook_addr: Option<SocketAddr>,
    /// The directory holding the webhooks' serving certificate (`tls.crt`, `tls.key`).
    pub webhook_cert_dir: PathBuf,
    /// The served in-memory cloud to use for `InMemory` classes (see `mcm dev`), if any.
    pub inmemory_cloud_url: Option<String>,
    /// Providers served by out-of-tree drivers (`--driver PROVIDER=ENDPOINT`), each replacing an in-tree driver
    /// of that name.
    pub drivers: Vec<crate::providers::grpc::DriverRoute>,
    /// Driver calls per second per provider (0: no limit) and their burst.
    pub cloud_rate_limit: RateLimit,
    /// The controllers' settings (namespace and disabled controllers included).
    pub controllers: ControllerOptions,
    /// The CAPI infrastructure controllers' settings, when they run (`--controllers=infrastructure`).
    pub infrastructure: Option<InfraOptions>,
}

impl RunOptions {
    /// Whether any controller of the MCM flavour (on `machine.sapcloud.io`) runs.
    fn mcm_flavour(&self) -> bool {
        CONTROLLER_NAMES.iter().any(|name| !self.controllers.disabled.contains(*name))
    }
}

/// What runs while this process leads.
struct Running {
    controllers: Option<Controllers>,
    infrastructure: Option<InfraControllers>,
    /// Whether their caches have their first lists.
    synced: bool,
}

impl Running {
    fn start(clusters: &Clusters, drivers: &DriverRegistry, options: &RunOptions, metrics: &Metrics) -> Running {
        let controllers = (options.mcm_flavour() || options.controllers.capi_core)
            .then(|| Controllers::start(clusters.clone(), drivers.clone(), options.controllers.clone()));
        if let Some(started) = &controllers {
            metrics.objects.set_frozen_gauge(Some(started.frozen_gauge()));
        }
        let infrastructure = options
            .infrastructure
            .clone()
            .map(|infra| InfraControllers::start(clusters.control.clone(), drivers.clone(), infra));
        Running { controllers, infrastructure, synced: false }
    }

    /// Resolves once every running controller's caches are synced.
    fn caches_synced(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let controllers = self.controllers.as_ref().map(Controllers::caches_synced);
        let infrastructure = self.infrastructure.as_ref().map(InfraControllers::caches_synced);
        async move {
            if let Some(synced) = controllers {
                synced.await;
            }
            if let Some(synced) = infrastructure {
                synced.await;
            }
        }
    }

    /// Cancels every reconcile at once, as a crash would, for a process that lost the lease: a reconcile let to
    /// finish could write after another process took over (MCM exits when it loses the lease). Every controller
    /// converges from wherever it was cut off.
    async fn kill(self, metrics: &Metrics) {
        self.end(metrics, true).await;
    }

    /// Lets running reconciles finish (up to the shutdown grace), then ends the watches.
    async fn stop(self, metrics: &Metrics) {
        self.end(metrics, false).await;
    }

    async fn end(self, metrics: &Metrics, cancel: bool) {
        let controllers = async {
            match (self.controllers, cancel) {
                (Some(running), true) => running.kill().await,
                (Some(running), false) => running.stop().await,
                (None, _) => {}
            }
        };
        let infrastructure = async {
            match (self.infrastructure, cancel) {
                (Some(running), true) => running.kill().await,
                (Some(running), false) => running.stop().await,
                (None, _) => {}
            }
        };
        futures::join!(controllers, infrastructure);
        metrics.objects.set_frozen_gauge(None);
    }
}

/// Why `mcm run` could not start or went wrong.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable kubeconfig or in-cluster configuration.
    #[error("could not load the {which} cluster's configuration: {reason}")]
    Config {
        /// `control` or `target`.
        which: &'static str,
        /// Why.
        reason: String,
    },
    /// A client could not be built.
    #[error("could not build a client for the {which} cluster: {source}")]
    Client {
        /// `control` or `target`.
        which: &'static str,
        /// The cause.
        source: kube::Error,
    },
    /// The endpoints could not be served.
    #[error(transparent)]
    Serve(#[from] telemetry::ServeError),
    /// The admission webhooks could not be served.
    #[error(transparent)]
    Webhooks(#[from] crate::webhooks::WebhookError),
}

pub(crate) async fn load_config(which: &'static str, path: Option<&PathBuf>) -> Result<kube::Config, RunError> {
    let fail = |reason: String| RunError::Config { which, reason };
    match path {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| fail(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| fail(format!("{}: {e}", path.display())))
        }
        None => kube::Config::infer().await.map_err(|e| fail(e.to_string())),
    }
}

fn client(which: &'static str, config: kube::Config, layer: &RateLimitLayer) -> Result<Client, RunError> {
    let builder = kube::client::ClientBuilder::try_from(config).map_err(|source| RunError::Client { which, source })?;
    Ok(builder.with_layer(layer).build())
}

/// The clients of one cluster: with kube-rs's retries, and without them (drains, probes).
struct ClusterClients {
    client: Client,
    no_retry: Client,
}

fn clients(which: &'static str, config: kube::Config, limit: RateLimit) -> Result<ClusterClients, RunError> {
    // One bucket per cluster, shared by its clients, as client-go's flags are per cluster.
    let layer = RateLimitLayer::new(limit);
    let mut no_retry = config.clone();
    no_retry.default_retry = false;
    Ok(ClusterClients { client: client(which, config, &layer)?, no_retry: client(which, no_retry, &layer)? })
}

/// Builds the clusters' clients as `options` say, and the leader election's own client of the control cluster.
///
/// The election's client has a rate limit bucket of its own and no automatic retries (as MCM gives the election a
/// client of its own): queued behind the controllers' requests, or retried for seconds, a renewal could miss the
/// renew deadline under load and the leader would step down for nothing.
async fn clusters(options: &RunOptions) -> Result<(Clusters, Client), RunError> {
    let control_config = load_config("control", options.kubeconfig.as_ref()).await?;
    let mut election_config = control_config.clone();
    election_config.default_retry = false;
    let election = client("control", election_config, &RateLimitLayer::new(options.rate_limit))?;
    let control = clients("control", control_config, options.rate_limit)?;
    let target = match &options.target {
        Target::None => None,
        Target::Control => Some(ClusterClients { client: control.client.clone(), no_retry: control.no_retry.clone() }),
        Target::Kubeconfig(path) => {
            Some(clients("target", load_config("target", Some(path)).await?, options.rate_limit)?)
        }
    };
    let clusters = Clusters {
        control: control.client.clone(),
        target: target.as_ref().map(|t| t.client.clone()),
        drain: target.as_ref().map(|t| t.no_retry.clone()),
        probe: target.as_ref().map(|t| ProbeClients { control: control.no_retry.clone(), target: t.no_retry.clone() }),
        capi_nodes: options.target.capi_nodes(),
    };
    Ok((clusters, election))
}

/// The drivers this binary has, each metered.
fn drivers(options: &RunOptions, metrics: &Metrics) -> DriverRegistry {
    let mut drivers = DriverRegistry::new();
    drivers.register_cloud_drivers();
    if let Some(url) = &options.inmemory_cloud_url {
        drivers.register(Arc::new(crate::providers::inmemory::remote::RemoteDriver::new(url)));
    }
    // After the in-tree drivers: a route replaces the driver of its provider.
    for route in &options.drivers {
        drivers.register(Arc::new(GrpcDriver::new(&route.provider, route.endpoint.clone())));
    }
    // Metered inside the limit: latencies are the cloud's, not the wait for a token.
    let metered = metrics::metered(&drivers, &metrics.cloud);
    let limit = options.cloud_rate_limit;
    crate::providers::limit::rate_limited(&metered, limit.qps, limit.burst)
}

/// The admission webhook server on `--webhook-port` with the certificate in `--webhook-cert-dir`. A directory
/// without `tls.crt` is not an error (the MCM flavour installs no webhooks): the server is left out with a
/// warning; an unusable certificate or a taken port is.
async fn serve_webhooks(
    options: &RunOptions,
    control: &kube::Client,
    progress: &impl Fn(&str),
) -> Result<Option<crate::webhooks::WebhookServer>, RunError> {
    use crate::webhooks::{Certificates, ClassValidation, WebhookError, WebhookServer};
    let Some(addr) = options.webhook_addr else { return Ok(None) };
    let dir = options.webhook_cert_dir.clone();
    let classes = ClassValidation::pending();
    match WebhookServer::start(addr, Certificates::Dir(dir.clone()), classes.clone()).await {
        Ok(mut server) => {
            server.abort_with(tokio::spawn(classes.follow_crd(control.clone())));
            progress(&format!("serving admission webhooks on https://{}", server.addr()));
            Ok(Some(server))
        }
        Err(WebhookError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            let line = format!(
                "admission webhooks not served: no tls.crt and tls.key in {} (--webhook-port=0 turns them off)",
                dir.display()
            );
            tracing::warn!("{line}");
            progress(&line);
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Runs `mcm run` until `shutdown` resolves; `progress` hears one line per milestone (the binary prints them).
pub async fn run(
    options: RunOptions,
    shutdown: impl std::future::Future<Output = ()>,
    progress: impl Fn(&str),
) -> Result<(), RunError> {
    let (clusters, election_client) = clusters(&options).await?;
    let metrics = Metrics::new();
    metrics.register_with(|registry| options.controllers.metrics.register(registry));
    let health = Health::default();
    let (metrics_at, health_at, servers) =
        telemetry::serve(options.metrics_addr, options.health_addr, metrics.clone(), health.clone()).await?;
    if let Some(addr) = metrics_at {
        progress(&format!("serving metrics on http://{addr}/metrics"));
    }
    if let Some(addr) = health_at {
        progress(&format!("serving health probes on http://{addr}/healthz and /readyz"));
    }
    // Every replica serves the webhooks, leading or not (as controller-runtime's managers do).
    let webhooks = serve_webhooks(&options, &clusters.control, &progress).await?;

    // The object gauges watch machine.sapcloud.io kinds, which an infrastructure-only install does not have.
    let (mut caches, watches) = if options.mcm_flavour() {
        metrics.objects.watch(&clusters.control, options.controllers.namespace.as_deref())
    } else {
        (watch::channel(true).1, Vec::new())
    };
    let drivers = drivers(&options, &metrics);
    for route in &options.drivers {
        progress(&format!("provider {} is served by the out-of-tree driver at {}", route.provider, route.endpoint));
    }

    let (stop_election, election_stopped) = watch::channel(false);
    let (leadership_tx, mut leadership) = watch::channel(Leadership::Unknown);
    let election = match &options.leader {
        Some(config) => {
            progress(&format!(
                "joining the leader election on Lease {}/{} as {}",
                config.namespace, config.lease_name, config.identity
            ));
            Some(tokio::spawn(leader::run(election_client.clone(), config.clone(), leadership_tx, election_stopped)))
        }
        None => {
            leadership_tx.send_replace(Leadership::Leading);
            None
        }
    };

    let mut running: Option<Running> = None;
    let mut objects_synced = false;
    let mut announced = Leadership::Unknown;
    let mut ready = false;
    tokio::pin!(shutdown);
    loop {
        let state = *leadership.borrow_and_update();
        health.set_leadership_known(state != Leadership::Unknown);
        metrics.leader.set(i64::from(state == Leadership::Leading));
        match (state, running.is_some()) {
            (Leadership::Leading, false) => {
                running = Some(Running::start(&clusters, &drivers, &options, &metrics));
                progress("leading: controllers started");
            }
            (Leadership::Following | Leadership::Unknown, true) => {
                if let Some(leader) = running.take() {
                    progress("not leading any more: stopping the controllers");
                    leader.kill(&metrics).await;
                    progress("controllers stopped");
                }
            }
            (Leadership::Following, false) if announced != Leadership::Following => {
                progress("standing by: another process leads")
            }
            _ => {}
        }
        announced = state;
        // Ready once the object gauges' caches and (while leading) the controllers' caches have their lists.
        let synced = objects_synced && running.as_ref().is_none_or(|r| r.synced);
        health.set_caches_synced(synced);
        if synced && !ready {
            progress("caches synced");
        }
        ready = synced;
        let controllers_synced = running.as_ref().map(Running::caches_synced);
        let waiting_for_controllers = running.as_ref().is_some_and(|r| !r.synced);
        tokio::select! {
            _ = &mut shutdown => break,
            changed = leadership.changed() => {
                if changed.is_err() {
                    // The election ended on its own (it only does when stopped); stop leading.
                    if let Some(leader) = running.take() {
                        leader.kill(&metrics).await;
                    }
                    break;
                }
            }
            _ = caches.wait_for(|r| *r), if !objects_synced => objects_synced = true,
            _ = async { if let Some(synced) = controllers_synced { synced.await } }, if waiting_for_controllers => {
                if let Some(leader) = running.as_mut() {
                    leader.synced = true;
                }
            }
        }
    }

    progress("shutting down");
    health.set_caches_synced(false);
    if let Some(leader) = running.take() {
        leader.stop(&metrics).await;
        progress("controllers stopped");
    }
    let _ = stop_election.send(true);
    if let Some(election) = election
        && tokio::time::timeout(Duration::from_secs(10), election).await.is_err()
    {
        tracing::warn!("the leader election did not end in 10s");
    }
    for task in watches.into_iter().chain(servers) {
        task.abort();
    }
    drop(webhooks);
    progress("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ListMachinesRequest;
    use std::collections::BTreeMap;

    #[test]
    fn capi_mode_reads_each_clusters_secret_unless_a_target_is_named() {
        assert_eq!(Target::Control.capi_nodes(), CapiNodes::PerCluster);
        assert_eq!(Target::Kubeconfig("/k".into()).capi_nodes(), CapiNodes::Target);
        assert_eq!(Target::None.capi_nodes(), CapiNodes::Target);
    }

    fn options(cloud_rate_limit: RateLimit) -> RunOptions {
        RunOptions {
            kubeconfig: None,
            target: Target::None,
            rate_limit: RateLimit { qps: 0.0, burst: 1 },
            leader: None,
            metrics_addr: None,
            health_addr: None,
            webhook_addr: None,
            webhook_cert_dir: PathBuf::new(),
            // Nothing listens on port 1: each call fails at once, after taking its token.
            inmemory_cloud_url: Some("http://127.0.0.1:1".to_string()),
            drivers: Vec::new(),
            cloud_rate_limit,
            controllers: ControllerOptions::default(),
            infrastructure: None,
        }
    }

    fn list_calls(metrics: &Metrics) -> u64 {
        metrics
            .encode()
            .lines()
            .filter(|l| {
                l.starts_with("mcm_controller_driver_calls_total{") && l.contains(r#"operation="list_machines""#)
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    #[tokio::test]
    async fn the_drivers_honour_the_cloud_rate_limit_and_are_metered() {
        let list = ListMachinesRequest {
            class: crate::providers::inmemory::class("c", "dev", serde_json::json!({})),
            ..Default::default()
        };
        let metrics = Metrics::new();
        let limited = drivers(&options(RateLimit { qps: 0.001, burst: 1 }), &metrics);
        let driver = limited.get("InMemory").unwrap();
        assert!(driver.list_machines(&list).await.is_err(), "nothing listens");
        let second = tokio::time::timeout(Duration::from_millis(200), driver.list_machines(&list)).await;
        assert!(second.is_err(), "the second call waits for a token (one per 1000 s)");
        assert_eq!(list_calls(&metrics), 1, "metered inside the limit: only the call that went is counted");

        let metrics = Metrics::new();
        let unlimited = drivers(&options(RateLimit { qps: 0.0, burst: 1 }), &metrics);
        let driver = unlimited.get("InMemory").unwrap();
        for _ in 0..3 {
            let call = tokio::time::timeout(Duration::from_secs(5), driver.list_machines(&list)).await;
            assert!(call.expect("no limit: no wait").is_err());
        }
        assert_eq!(list_calls(&metrics), 3);
    }

    #[tokio::test]
    async fn a_driver_route_replaces_the_in_tree_driver_inside_the_limit_and_the_meter() {
        use crate::providers::grpc::{DriverEndpoint, DriverRoute, DriverServe};
        let cloud = crate::providers::inmemory::InMemoryCloud::new();
        let served = Arc::new(crate::providers::inmemory::InMemoryDriver::new(cloud.clone()));
        let server = DriverServe::start(served, &DriverEndpoint::Tcp(([127, 0, 0, 1], 0).into())).await.unwrap();
        let list = ListMachinesRequest {
            class: crate::providers::inmemory::class("c", "dev", serde_json::json!({})),
            ..Default::default()
        };
        let mut routed = options(RateLimit { qps: 0.001, burst: 1 });
        routed.drivers = vec![DriverRoute { provider: "InMemory".into(), endpoint: server.endpoint.clone() }];
        let metrics = Metrics::new();
        let registry = drivers(&routed, &metrics);
        let driver = registry.get("InMemory").unwrap();
        // The remote cloud URL (port 1) would fail: the route's server answered.
        assert_eq!(driver.list_machines(&list).await.unwrap(), BTreeMap::new());
        assert_eq!(cloud.stats().lists, 1);
        let second = tokio::time::timeout(Duration::from_millis(200), driver.list_machines(&list)).await;
        assert!(second.is_err(), "the routed driver waits for a token like an in-tree one");
        assert_eq!(list_calls(&metrics), 1);
        server.stop().await.unwrap();
    }
}
