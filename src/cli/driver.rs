//! `mcm driver serve PROVIDER --listen ENDPOINT`: one of this binary's drivers behind the out-of-tree protocol
//! (docs/adding-a-provider.md#out-of-tree-any-language), for trying `mcm run --driver` and for tests that compare
//! drivers over one path.

use std::path::PathBuf;
use std::sync::Arc;

use crate::providers::Driver;
use crate::providers::grpc::{DriverEndpoint, DriverServe};
use crate::providers::inmemory::{InMemoryCloud, InMemoryDriver, Kubelet, KubeletConfig};

/// `mcm driver …`.
#[derive(Debug, clap::Subcommand)]
pub enum DriverCommand {
    /// Serve one of this binary's drivers over the out-of-tree driver protocol until Ctrl-C or SIGTERM.
    Serve(ServeArgs),
}

/// `mcm driver serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The driver to serve.
    #[arg(value_enum)]
    provider: Served,
    /// Where to listen: unix:///path or http://127.0.0.1:PORT (port 0 picks one; the line printed at start says
    /// which).
    #[arg(long, value_name = "ENDPOINT")]
    listen: DriverEndpoint,
    /// inmemory only: play the kubelet in the cluster of this kubeconfig (a Ready Node per booted VM).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
}

/// The drivers `mcm driver serve` can serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Served {
    /// The in-memory cloud (provider `InMemory`).
    Inmemory,
    /// The AWS driver (provider `AWS`).
    #[cfg(feature = "aws")]
    Aws,
    /// The Azure driver (provider `Azure`).
    #[cfg(feature = "azure")]
    Azure,
    /// The GCP driver (provider `GCP`).
    #[cfg(feature = "gcp")]
    Gcp,
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum DriverCommandError {
    /// The endpoint could not be listened on.
    #[error("could not listen on {endpoint}: {source}")]
    Listen {
        /// The endpoint.
        endpoint: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The kubelet's cluster could not be reached.
    #[error(transparent)]
    Kubeconfig(#[from] crate::run::RunError),
    /// The kubelet's client could not be built.
    #[error("could not build a client for the kubelet's cluster: {0}")]
    Client(kube::Error),
    /// The server stopped with an error.
    #[error("the driver server stopped: {0}")]
    Serve(tonic::transport::Error),
}

/// Serves until `shutdown` resolves; `progress` gets the lines a user sees.
pub async fn run(
    command: DriverCommand,
    shutdown: impl std::future::Future<Output = ()>,
    progress: impl Fn(&str),
) -> Result<(), DriverCommandError> {
    let DriverCommand::Serve(args) = command;
    let mut kubelet = None;
    let driver: Arc<dyn Driver> = match args.provider {
        Served::Inmemory => {
            let cloud = InMemoryCloud::new();
            if let Some(path) = &args.kubeconfig {
                let config = crate::run::load_config("kubelet", Some(path)).await?;
                let client = kube::Client::try_from(config).map_err(DriverCommandError::Client)?;
                kubelet = Some(Kubelet::spawn(cloud.clone(), client, KubeletConfig::default()));
            }
            Arc::new(InMemoryDriver::new(cloud))
        }
        #[cfg(feature = "aws")]
        Served::Aws => Arc::new(crate::providers::aws::AwsDriver::new()),
        #[cfg(feature = "azure")]
        Served::Azure => Arc::new(crate::providers::azure::AzureDriver::new()),
        #[cfg(feature = "gcp")]
        Served::Gcp => Arc::new(crate::providers::gcp::GcpDriver::new()),
    };
    let provider = driver.provider().to_string();
    let mut server = DriverServe::start(driver, &args.listen)
        .await
        .map_err(|source| DriverCommandError::Listen { endpoint: args.listen.to_string(), source })?;
    progress(&format!("serving the {provider} driver on {}", server.endpoint));
    if kubelet.is_some() {
        progress("playing the kubelet: booted VMs register Nodes");
    }
    let result = tokio::select! {
        _ = shutdown => server.stop().await,
        ended = server.wait() => ended,
    };
    if let Some(kubelet) = kubelet {
        kubelet.stop().await;
    }
    result.map_err(DriverCommandError::Serve)
}
