//! Shared helpers: a started API server with a client, CRD installation, and waiting on conditions.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use mcm::apiserver::{ApiServer, ServerConfig};

/// A server on an ephemeral port and a client for it.
pub async fn start() -> (ApiServer, kube::Client) {
    start_with(ServerConfig::default()).await
}

/// A server with a custom configuration and a client for it.
pub async fn start_with(config: ServerConfig) -> (ApiServer, kube::Client) {
    let server = ApiServer::start(config).await.expect("server starts");
    let client = server.client().await.expect("client");
    (server, client)
}

/// Installs every CRD this project ships (MCM, infrastructure and CAPI core).
pub async fn install_crds(client: &kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for file in mcm::api::crds::files().expect("crds") {
        let crd: CustomResourceDefinition = serde_yaml::from_str(&file.yaml).expect("crd yaml");
        api.create(&PostParams::default(), &crd).await.unwrap_or_else(|e| panic!("{}: {e}", file.file_name));
    }
}

/// Polls `check` until it returns `Some`, failing the test after `timeout`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
