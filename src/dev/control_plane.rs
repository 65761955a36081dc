//! Where `mcm dev`'s objects live: its embedded API server, or a cluster someone else runs (the integration suite's
//! real etcd + kube-apiserver under `MCM_TEST_APISERVER=kube`, docs/testing.md). Everything above this seam (CRDs,
//! the in-memory cloud's kubelet, the controllers, the samples) is the same for both.

use std::path::Path;

use crate::apiserver::{ApiServer, ClientError};

/// Who a kubeconfig speaks for. On the embedded server all are the same user (the one bearer token); on a real cluster
/// each is a separate identity whose permissions are the roles this project ships, so a call those roles do not
/// allow fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The cluster's administrator: the person at kubectl, the tests, the kubelet simulator.
    Admin,
    /// The machine controllers of the MCM flavour (`config/rbac-mcm`: control and target cluster roles).
    MachineControllers,
    /// The CAPI infrastructure provider's controllers (`config/rbac`, what clusterctl installs).
    InfrastructureControllers,
}

/// A cluster run by someone else: a kubeconfig (YAML) per identity.
#[derive(Clone)]
pub struct ExternalCluster {
    /// The API server's URL (for messages).
    pub url: String,
    /// The administrator's kubeconfig.
    pub admin: String,
    /// The MCM-flavour controllers' kubeconfig; `None` uses the administrator's.
    pub machine_controllers: Option<String>,
    /// The infrastructure controllers' kubeconfig; `None` uses the administrator's.
    pub infrastructure_controllers: Option<String>,
}

// Kubeconfigs carry credentials: never print them.
impl std::fmt::Debug for ExternalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalCluster").field("url", &self.url).finish_non_exhaustive()
    }
}

/// The API server `mcm dev` talks to.
pub enum ControlPlane {
    /// Its own, in this process.
    Embedded(ApiServer),
    /// Someone else's.
    External(ExternalCluster),
}

impl ControlPlane {
    /// The API server's URL.
    pub fn url(&self) -> &str {
        match self {
            ControlPlane::Embedded(server) => server.url(),
            ControlPlane::External(cluster) => &cluster.url,
        }
    }

    /// The embedded server, for what only it can do (fault injection, request counters, closing watches).
    pub fn embedded(&self) -> Option<&ApiServer> {
        match self {
            ControlPlane::Embedded(server) => Some(server),
            ControlPlane::External(_) => None,
        }
    }

    /// A kubeconfig (YAML) for `identity`.
    pub fn kubeconfig_yaml(&self, identity: Identity) -> String {
        match self {
            ControlPlane::Embedded(server) => server.kubeconfig_yaml(),
            ControlPlane::External(cluster) => match identity {
                Identity::Admin => cluster.admin.clone(),
                Identity::MachineControllers => {
                    cluster.machine_controllers.clone().unwrap_or_else(|| cluster.admin.clone())
                }
                Identity::InfrastructureControllers => {
                    cluster.infrastructure_controllers.clone().unwrap_or_else(|| cluster.admin.clone())
                }
            },
        }
    }

    /// Writes the administrator's kubeconfig to `path`, readable by the owner only.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), ClientError> {
        self.write_kubeconfig_for(Identity::Admin, path)
    }

    /// Writes `identity`'s kubeconfig to `path` (creating parent directories), readable by the owner only.
    pub fn write_kubeconfig_for(&self, identity: Identity, path: &Path) -> Result<(), ClientError> {
        crate::apiserver::write_private_file(path, &self.kubeconfig_yaml(identity))
    }

    /// The kube client configuration for `identity`.
    pub async fn kube_config(&self, identity: Identity) -> Result<kube::Config, ClientError> {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml(identity))?;
        Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?)
    }

    /// A client for `identity`.
    pub async fn client(&self, identity: Identity) -> Result<kube::Client, ClientError> {
        Ok(kube::Client::try_from(self.kube_config(identity).await?)?)
    }

    /// Stops the embedded server (saving its state when it has a data directory); leaves an external one alone.
    pub async fn shutdown(self) {
        if let ControlPlane::Embedded(server) = self {
            server.shutdown().await;
        }
    }
}
