//! `mcm dev`: a local control plane in one process — the embedded API server, our CRDs, the in-memory cloud with
//! its kubelet simulator, and the controllers — with a kubeconfig for kubectl. The same environment can run against
//! a cluster someone else runs ([`ControlPlane::External`]): the integration suite does so with a real kube-apiserver.

mod control_plane;

pub use control_plane::{ControlPlane, ExternalCluster, Identity};

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::api::crds;
use crate::apiserver::{ApiServer, BearerToken, CertificateAuthority, ServerConfig};
use crate::controllers::{
    CapiNodes, Clusters, ControllerOptions, Controllers, InfraControllers, InfraOptions, ProbeClients,
};
use crate::providers::DriverRegistry;
use crate::providers::inmemory::{InMemoryCloud, InMemoryDriver, Kubelet, KubeletConfig, NodeAgent, NodeAgentConfig};

/// What `mcm dev` runs.
#[derive(Clone, Debug)]
pub struct DevOptions {
    /// Where to listen; `None` means 127.0.0.1:6443, or the next free port.
    pub listen: Option<SocketAddr>,
    /// Where to write the kubeconfig.
    pub kubeconfig_out: PathBuf,
    /// Keep the API server's state here across restarts.
    pub data_dir: Option<PathBuf>,
    /// Serve plain HTTP instead of TLS (the bearer token is still required); refused unless `listen` is loopback.
    pub insecure_http: bool,
    /// Run only the API server (no CRDs, no controllers, no sample).
    pub apiserver_only: bool,
    /// Run the controllers (`--no-controllers` leaves them to an `mcm run` process sharing the in-memory cloud).
    pub run_controllers: bool,
    /// Apply the sample objects ([`SAMPLE`] and [`CAPI_SAMPLE`]).
    pub sample: bool,
    /// How the machine controllers run; `mcm dev` sets `capi_core` (mode "CAPI with MCM core": no upstream CAPI
    /// core runs here).
    pub controllers: ControllerOptions,
    /// How the CAPI infrastructure controllers (MCMMachine, MCMCluster, MCMMachineTemplate) run.
    pub infra: InfraOptions,
    /// Run against this cluster instead of starting the embedded API server (`listen` and `data_dir` are then
    /// unused).
    pub external: Option<ExternalCluster>,
    /// Serve the admission webhooks in-process with a throw-away certificate and register them (by URL on
    /// 127.0.0.1) before the sample is applied; `mcm dev` does unless `--no-webhooks`. Off, configurations left
    /// by an earlier run in the data directory are removed.
    pub webhooks: bool,
    /// Where mode "CAPI with MCM core" finds a Cluster's Nodes: by default this server, where the in-memory cloud
    /// registers them ([`CapiNodes::Target`]); [`CapiNodes::PerCluster`] reads each Cluster's kubeconfig Secret
    /// as `mcm run` does.
    pub capi_nodes: CapiNodes,
    /// How the in-memory cloud's kubelet behaves (heartbeats, retries, whether it removes the Nodes of deleted VMs).
    pub kubelet: KubeletConfig,
    /// The simulated Gardener node agent answering in-place updates (`None`: not run, so in-place rollouts wait
    /// for someone else to answer). On by default.
    pub node_agent: Option<NodeAgentConfig>,
}

impl Default for DevOptions {
    fn default() -> Self {
        DevOptions {
            listen: None,
            kubeconfig_out: PathBuf::from(".mcm/kubeconfig"),
            data_dir: None,
            insecure_http: false,
            apiserver_only: false,
            run_controllers: true,
            sample: true,
            controllers: ControllerOptions { capi_core: true, ..ControllerOptions::default() },
            infra: InfraOptions::default(),
            external: None,
            webhooks: false,
            capi_nodes: CapiNodes::Target,
            kubelet: KubeletConfig::default(),
            node_agent: Some(NodeAgentConfig::default()),
        }
    }
}

/// The MCM sample `mcm dev` applies (namespace `mcm-sample`).
pub const SAMPLE: &str = include_str!("../../config/samples/inmemory-machinedeployment.yaml");

/// The Cluster API sample `mcm dev` applies (namespace `capi-sample`).
pub const CAPI_SAMPLE: &str = include_str!("../../config/samples/capi-inmemory.yaml");

/// Applies a multi-document YAML manifest with server-side apply (field manager `mcm-dev`); returns what was
/// applied, as `Kind namespace/name`.
pub async fn apply_manifest(client: &kube::Client, manifest: &str) -> Result<Vec<String>, DevError> {
    use serde::Deserialize;
    let mut applied = Vec::new();
    for document in serde_yaml::Deserializer::from_str(manifest) {
        let fail = |object: String, e: Box<dyn std::error::Error + Send + Sync>| DevError::Sample { object, source: e };
        let value =
            serde_json::Value::deserialize(document).map_err(|e| fail("(unparsable document)".into(), Box::new(e)))?;
        if value.is_null() {
            continue;
        }
        let object: kube::api::DynamicObject =
            serde_json::from_value(value).map_err(|e| fail("(malformed object)".into(), Box::new(e)))?;
        let types = object.types.clone().unwrap_or_default();
        let name = object.metadata.name.clone().unwrap_or_default();
        let namespace = object.metadata.namespace.clone();
        let label = format!("{} {}{name}", types.kind, namespace.as_ref().map(|n| format!("{n}/")).unwrap_or_default());
        let gvk = kube::core::GroupVersionKind::try_from(&types).map_err(|e| fail(label.clone(), Box::new(e)))?;
        let (resource, capabilities) =
            kube::discovery::pinned_kind(client, &gvk).await.map_err(|e| fail(label.clone(), Box::new(e)))?;
        let api: Api<kube::api::DynamicObject> = match (capabilities.scope, &namespace) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
            (kube::discovery::Scope::Namespaced, None) => Api::default_namespaced_with(client.clone(), &resource),
            (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
        };
        api.patch(&name, &PatchParams::apply("mcm-dev").force(), &Patch::Apply(&object))
            .await
            .map_err(|e| fail(label.clone(), Box::new(e)))?;
        applied.push(label);
    }
    Ok(applied)
}

/// Why `mcm dev` could not start.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// No port to listen on.
    #[error("no free port between 127.0.0.1:6443 and 127.0.0.1:6463; choose one with --listen")]
    NoFreePort,
    /// The API server did not start.
    #[error(transparent)]
    Start(#[from] crate::apiserver::StartError),
    /// The bearer token kept in the data directory could not be read or written.
    #[error(transparent)]
    Token(#[from] crate::apiserver::TokenError),
    /// The CA kept in the data directory could not be read or written.
    #[error(transparent)]
    Ca(#[from] crate::apiserver::TlsError),
    /// The kubeconfig or client could not be made.
    #[error(transparent)]
    Client(#[from] crate::apiserver::ClientError),
    /// Applying the sample failed.
    #[error("could not apply the sample object {object}: {source}")]
    Sample {
        /// The object, `Kind namespace/name`.
        object: String,
        /// The cause.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The in-memory cloud could not be served on loopback.
    #[error("could not serve the in-memory cloud: {0}")]
    CloudServer(std::io::Error),
    /// The admission webhooks could not be served or registered.
    #[error("could not serve the admission webhooks: {0}")]
    Webhooks(String),
    /// Installing the CRDs failed.
    #[error("could not install the CRD {name}: {source}")]
    InstallCrd {
        /// The CRD.
        name: String,
        /// The cause.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

const DEFAULT_PORT: u16 = 6443;

/// The listen address: the one asked for, or 6443, or the next free port up to 6463.
fn choose_listen(asked: Option<SocketAddr>) -> Result<SocketAddr, DevError> {
    if let Some(addr) = asked {
        return Ok(addr);
    }
    (DEFAULT_PORT..=DEFAULT_PORT + 20)
        .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
        .find(|addr| std::net::TcpListener::bind(addr).is_ok())
        .ok_or(DevError::NoFreePort)
}

/// With a data directory, the embedded server's token and CA are the ones kept there (`token`, `pki/ca.crt`,
/// `pki/ca.key`, owner-only; made on the first run), so that a restarted `mcm dev` still accepts the kubeconfigs it
/// wrote before (an `mcm run` started against it keeps working). Without one, every run has fresh ones.
fn keep_credentials(config: &mut ServerConfig) -> Result<(), DevError> {
    let Some(dir) = &config.data_dir else { return Ok(()) };
    config.token = BearerToken::load_or_create(&dir.join("token"))?;
    if !config.insecure_http {
        config.ca = Some(CertificateAuthority::load_or_create(&dir.join("pki"))?);
    }
    Ok(())
}

/// Installs (or updates) every CRD this project ships, with server-side apply.
pub async fn install_crds(client: &kube::Client) -> Result<usize, DevError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let files = crds::files().map_err(|e| DevError::InstallCrd { name: "all".into(), source: Box::new(e) })?;
    let count = files.len();
    for file in files {
        let crd: CustomResourceDefinition = serde_yaml::from_str(&file.yaml)
            .map_err(|e| DevError::InstallCrd { name: file.file_name.clone(), source: Box::new(e) })?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &PatchParams::apply("mcm-dev").force(), &Patch::Apply(&crd))
            .await
            .map_err(|e| DevError::InstallCrd { name: name.clone(), source: Box::new(e) })?;
    }
    Ok(count)
}

/// The name of the webhook configurations `mcm dev` registers.
pub const WEBHOOK_CONFIGURATION: &str = "mcm-dev-webhooks";

/// Serves the admission webhooks on loopback with a throw-away CA and registers them with that CA and their URL;
/// with `on` false, removes the configurations an earlier run left.
async fn webhooks(client: &kube::Client, on: bool) -> Result<Option<crate::webhooks::WebhookServer>, DevError> {
    use crate::webhooks::{Certificates, ClassValidation, WebhookServer, configurations};
    use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
    let fail = |e: &dyn std::fmt::Display| DevError::Webhooks(e.to_string());
    if !on {
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        for result in [
            mutating.delete(WEBHOOK_CONFIGURATION, &Default::default()).await.map(drop),
            validating.delete(WEBHOOK_CONFIGURATION, &Default::default()).await.map(drop),
        ] {
            match result {
                Ok(()) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(fail(&e)),
            }
        }
        return Ok(None);
    }
    // A CA of their own: the webhooks' CA bundle trusts nothing else.
    let ca = CertificateAuthority::generate().map_err(|e| fail(&e))?;
    let cert = ca.serving_certificate(Ipv4Addr::LOCALHOST.into()).map_err(|e| fail(&e))?;
    let certificates = Certificates::Pem { chain: cert.chain_pem, key: cert.key_pem };
    let server = WebhookServer::start(SocketAddr::from(([127, 0, 0, 1], 0)), certificates, ClassValidation::always())
        .await
        .map_err(|e| fail(&e))?;
    let manifest = configurations(WEBHOOK_CONFIGURATION, &format!("https://{}", server.addr()), ca.cert_pem())
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join("\n---\n");
    apply_manifest(client, &manifest).await?;
    Ok(Some(server))
}

/// The parts of a running `mcm dev`: the API server, the in-memory cloud, its kubelet, the drivers and a client.
/// Tests start these in-process; the binary wraps them with progress lines and Ctrl-C.
pub struct DevEnvironment {
    /// The API server (control and target cluster in one): the embedded one unless `external` was given.
    pub server: ControlPlane,
    /// The administrator's client (the samples, the kubelet simulator, tests).
    pub client: kube::Client,
    /// The MCM-flavour controllers' client.
    controllers_client: kube::Client,
    /// Theirs without kube-rs's automatic 429 retries, for drains.
    drain_client: kube::Client,
    /// The infrastructure controllers' client.
    infra_client: kube::Client,
    /// The in-memory cloud; VMs outlive controllers.
    pub cloud: InMemoryCloud,
    /// The drivers controllers use (`InMemory`).
    pub drivers: DriverRegistry,
    /// The kubelet simulator registering Nodes for booted VMs (absent with `--apiserver-only`).
    pub kubelet: Option<Kubelet>,
    /// The simulated node agent answering in-place updates (absent with `--apiserver-only` or when not asked for).
    pub node_agent: Option<NodeAgent>,
    /// The controllers (absent with `--apiserver-only`, or while stopped).
    pub controllers: Option<Controllers>,
    /// How the controllers run (kept to restart them).
    pub controller_options: ControllerOptions,
    /// Where mode "CAPI with MCM core" finds Nodes (see [`DevOptions::capi_nodes`]).
    pub capi_nodes: CapiNodes,
    /// The CAPI infrastructure controllers (absent with `--apiserver-only`, or while stopped).
    pub infra: Option<InfraControllers>,
    /// How they run (kept to restart them).
    pub infra_options: InfraOptions,
    /// What was applied from the sample.
    pub sample: Vec<String>,
    /// The URL the in-memory cloud is served on for `mcm run --inmemory-cloud-url` (absent with
    /// `--apiserver-only`); also written to `inmemory-cloud-url` next to the kubeconfig.
    pub cloud_url: Option<String>,
    cloud_server: Option<tokio::task::JoinHandle<()>>,
    /// The admission webhook server (with `webhooks`).
    pub webhooks: Option<crate::webhooks::WebhookServer>,
}

impl DevEnvironment {
    /// Starts the API server and, unless `apiserver_only`, installs the CRDs, starts the in-memory cloud's kubelet
    /// and applies the sample; `progress` hears what is happening.
    pub async fn start(options: &DevOptions, progress: impl Fn(&str)) -> Result<Self, DevError> {
        let server = match &options.external {
            Some(cluster) => {
                progress(&format!("using the API server at {}", cluster.url));
                ControlPlane::External(cluster.clone())
            }
            None => {
                let listen = choose_listen(options.listen)?;
                if options.insecure_http {
                    progress(&format!(
                        "starting the embedded API server on {listen} with plain HTTP (--insecure-http): the bearer \
                         token is still required, but nothing is encrypted"
                    ));
                } else {
                    progress(&format!("starting the embedded API server on {listen} (TLS, bearer token)"));
                }
                let mut config = ServerConfig {
                    listen,
                    data_dir: options.data_dir.clone(),
                    insecure_http: options.insecure_http,
                    ..ServerConfig::default()
                };
                // Refused before anything is written to the data directory.
                config.validate()?;
                keep_credentials(&mut config)?;
                ControlPlane::Embedded(ApiServer::start(config).await?)
            }
        };
        server.write_kubeconfig(&options.kubeconfig_out)?;
        if let Some(dir) = options.data_dir.as_ref().filter(|_| options.external.is_none()) {
            progress(&format!("state is kept in {}", dir.display()));
        }
        let client = server.client(Identity::Admin).await?;
        let controllers_client = server.client(Identity::MachineControllers).await?;
        let drain_client = crate::drain::client_for_drain(server.kube_config(Identity::MachineControllers).await?)
            .map_err(|e| DevError::Client(crate::apiserver::ClientError::Client(e)))?;
        let infra_client = server.client(Identity::InfrastructureControllers).await?;
        let cloud = InMemoryCloud::new();
        let mut drivers = DriverRegistry::new();
        drivers.register(Arc::new(InMemoryDriver::new(cloud.clone())));
        // The real clouds too, for classes whose secret points at a local fake (`endpoint: http://127.0.0.1:…`).
        drivers.register_cloud_drivers();
        let mut environment = DevEnvironment {
            server,
            client: client.clone(),
            controllers_client,
            drain_client,
            infra_client,
            cloud: cloud.clone(),
            drivers,
            kubelet: None,
            node_agent: None,
            controllers: None,
            controller_options: options.controllers.clone(),
            capi_nodes: options.capi_nodes,
            infra: None,
            infra_options: options.infra.clone(),
            sample: Vec::new(),
            cloud_url: None,
            cloud_server: None,
            webhooks: None,
        };
        if options.apiserver_only {
            return Ok(environment);
        }
        let count = install_crds(&client).await?;
        progress(&format!(
            "installed {count} CRDs (machine.sapcloud.io, infrastructure.cluster.x-k8s.io, cluster.x-k8s.io)"
        ));
        environment.webhooks = webhooks(&client, options.webhooks).await?;
        if let Some(server) = &environment.webhooks {
            progress(&format!(
                "serving the admission webhooks on https://{} (registered as {WEBHOOK_CONFIGURATION})",
                server.addr()
            ));
        }
        environment.kubelet = Some(Kubelet::spawn(cloud.clone(), client.clone(), options.kubelet.clone()));
        progress("started the in-memory cloud and its kubelet (booted VMs register Nodes)");
        if let Some(config) = &options.node_agent {
            environment.node_agent = Some(NodeAgent::spawn(cloud, client.clone(), config.clone()));
            progress(&format!(
                "started the node agent (in-place updates take {:?}, {:.0}% fail)",
                config.update_duration,
                config.failure_rate * 100.0
            ));
        }
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let (cloud_addr, cloud_server) = crate::providers::inmemory::remote::serve(environment.cloud.clone(), loopback)
            .await
            .map_err(DevError::CloudServer)?;
        let url = format!("http://{cloud_addr}");
        let url_file = options.kubeconfig_out.with_file_name("inmemory-cloud-url");
        std::fs::write(&url_file, format!("{url}\n")).map_err(DevError::CloudServer)?;
        progress(&format!("serving the in-memory cloud on {url} for mcm run --inmemory-cloud-url"));
        environment.cloud_url = Some(url);
        environment.cloud_server = Some(cloud_server);
        if options.run_controllers {
            environment.start_controllers();
            progress(
                "started the controllers (machine, termination, machine class, secret, safety, machine set, machine \
                 deployment, overshoot freeze) and the infrastructure controllers (MCMMachine, MCMCluster, MCMMachineTemplate)",
            );
            if options.controllers.capi_core {
                progress(
                    "started the CAPI core controllers (Cluster, MachineDeployment, MachineSet, Machine on \
                     cluster.x-k8s.io; they stand down if upstream Cluster API core holds the objects)",
                );
            }
        } else {
            progress(
                "controllers left out (--no-controllers): run them with mcm run --kubeconfig <this kubeconfig> --inmemory-cloud-url <the URL above>",
            );
        }
        if options.sample {
            environment.sample = apply_manifest(&client, SAMPLE).await?;
            progress(&format!("applied the MCM sample: {}", environment.sample.join(", ")));
            let capi = apply_manifest(&client, CAPI_SAMPLE).await?;
            progress(&format!("applied the Cluster API sample: {}", capi.join(", ")));
            environment.sample.extend(capi);
        }
        Ok(environment)
    }

    /// Starts the machine controllers (control and target cluster are the same server), unless running.
    pub fn start_controllers(&mut self) {
        if self.controllers.is_none() {
            let clusters = Clusters {
                control: self.controllers_client.clone(),
                target: Some(self.controllers_client.clone()),
                drain: Some(self.drain_client.clone()),
                // The drain client is this server without automatic retries, which the probe needs too.
                probe: Some(ProbeClients { control: self.drain_client.clone(), target: self.drain_client.clone() }),
                capi_nodes: self.capi_nodes,
            };
            self.controllers =
                Some(Controllers::start(clusters, self.drivers.clone(), self.controller_options.clone()));
        }
        if self.infra.is_none() {
            self.infra = Some(InfraControllers::start(
                self.infra_client.clone(),
                self.drivers.clone(),
                self.infra_options.clone(),
            ));
        }
    }

    /// Stops the machine controllers, letting running reconciles finish.
    pub async fn stop_controllers(&mut self) {
        if let Some(controllers) = self.controllers.take() {
            controllers.stop().await;
        }
        if let Some(infra) = self.infra.take() {
            infra.stop().await;
        }
    }

    /// Cancels the machine controllers mid-reconcile, as a crash would (the cloud and its VMs stay).
    pub async fn kill_controllers(&mut self) {
        if let Some(controllers) = self.controllers.take() {
            controllers.kill().await;
        }
        if let Some(infra) = self.infra.take() {
            infra.kill().await;
        }
    }

    /// Stops the controllers, the kubelet and the API server (saving state when a data directory is set).
    pub async fn shutdown(mut self) {
        self.stop_controllers().await;
        if let Some(agent) = self.node_agent {
            agent.stop().await;
        }
        if let Some(kubelet) = self.kubelet {
            kubelet.stop().await;
        }
        if let Some(server) = self.cloud_server {
            server.abort();
        }
        self.server.shutdown().await;
    }
}

/// Runs `mcm dev` until `shutdown` resolves (Ctrl-C in the binary).
pub async fn run(options: DevOptions, shutdown: impl std::future::Future<Output = ()>) -> Result<(), DevError> {
    let environment = DevEnvironment::start(&options, |line| println!("mcm dev: {line}")).await?;
    let kubeconfig = std::fs::canonicalize(&options.kubeconfig_out).unwrap_or_else(|_| options.kubeconfig_out.clone());
    println!("mcm dev ready: kubeconfig {} (API server {})", kubeconfig.display(), environment.server.url());
    println!("  the kubeconfig holds the API server's CA and bearer token (readable by you only): keep it private");
    let k = format!("kubectl --kubeconfig {}", kubeconfig.display());
    println!("  try: {k} get crds");
    if !options.apiserver_only {
        println!("       {k} get nodes");
        if options.sample {
            println!("       {k} -n mcm-sample get mcd,mcs,mc,mcc");
            println!("       {k} -n capi-sample get cluster-api");
        }
    }
    println!("       {k} api-resources");
    println!("  stop with Ctrl-C");
    shutdown.await;
    println!("mcm dev: shutting down");
    environment.shutdown().await;
    println!("mcm dev: stopped");
    Ok(())
}
