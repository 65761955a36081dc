//! [`GrpcDriver`]: a [`Driver`] whose calls go to an out-of-tree driver process over the protocol.

use std::collections::BTreeMap;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use super::endpoint::DriverEndpoint;
use super::pb::driver_client::DriverClient;
use super::wire;
use crate::providers::{
    Code, CreateMachineResponse, DeleteMachineResponse, Driver, DriverError, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineRequest, MachineStatusResponse,
};

/// How long one call may take before it fails with `DeadlineExceeded` (sent to the driver as `grpc-timeout`, so
/// it can stop too). Cloud SDKs' own request timeouts are shorter; a create that waits for a VM fits.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The driver of `provider` served at an endpoint. The connection is made at the first call and again after it
/// breaks, so `mcm run` starts before its drivers do; until one answers, its calls fail with `Unavailable` and the
/// controllers retry as for a cloud outage.
#[derive(Clone)]
pub struct GrpcDriver {
    provider: String,
    endpoint: DriverEndpoint,
    shown: String,
    client: DriverClient<Channel>,
}

impl std::fmt::Debug for GrpcDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcDriver").field("provider", &self.provider).field("endpoint", &self.shown).finish()
    }
}

impl GrpcDriver {
    /// The driver for classes of `provider` at `endpoint` (no connection yet).
    pub fn new(provider: &str, endpoint: DriverEndpoint) -> Self {
        let channel = match &endpoint {
            DriverEndpoint::Tcp(addr) => Endpoint::from_shared(format!("http://{addr}"))
                .map(|e| e.connect_timeout(CONNECT_TIMEOUT).connect_lazy()),
            DriverEndpoint::Unix(path) => {
                let path = path.clone();
                // The URI is required by the HTTP/2 layer and unused: the connector opens the socket.
                Endpoint::from_shared("http://driver.invalid".to_string()).map(|e| {
                    e.connect_timeout(CONNECT_TIMEOUT).connect_with_connector_lazy(tower::service_fn(move |_| {
                        let path = path.clone();
                        async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
                    }))
                })
            }
        };
        // Both URIs are fixed and valid, so building them cannot fail; a lazy channel to nowhere is the fallback.
        let channel = channel.unwrap_or_else(|_| Endpoint::from_static("http://127.0.0.1:1").connect_lazy());
        GrpcDriver {
            provider: provider.to_string(),
            shown: endpoint.to_string(),
            endpoint,
            client: DriverClient::new(channel),
        }
    }

    /// Where the driver is served.
    pub fn endpoint(&self) -> &DriverEndpoint {
        &self.endpoint
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(CALL_TIMEOUT);
        request
    }

    async fn call<Q, A, F, Fut>(&self, message: Q, send: F) -> Result<A, DriverError>
    where
        F: FnOnce(DriverClient<Channel>, tonic::Request<Q>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<A>, tonic::Status>>,
    {
        let request = self.request(message);
        match tokio::time::timeout(CALL_TIMEOUT + CONNECT_TIMEOUT, send(self.client.clone(), request)).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(wire::error_of(&status, &self.shown)),
            Err(_) => Err(DriverError::new(
                Code::DeadlineExceeded,
                format!("driver at {}: no answer in {} s", self.shown, CALL_TIMEOUT.as_secs()),
            )),
        }
    }
}

#[async_trait::async_trait]
impl Driver for GrpcDriver {
    fn provider(&self) -> &str {
        &self.provider
    }

    async fn create_machine(&self, request: &MachineRequest) -> Result<CreateMachineResponse, DriverError> {
        let message = wire::machine_request(request);
        self.call(message, |mut c, r| async move { c.create_machine(r).await }).await.map(Into::into)
    }

    async fn initialize_machine(&self, request: &MachineRequest) -> Result<InitializeMachineResponse, DriverError> {
        let message = wire::machine_request(request);
        self.call(message, |mut c, r| async move { c.initialize_machine(r).await }).await.map(Into::into)
    }

    async fn delete_machine(&self, request: &MachineRequest) -> Result<DeleteMachineResponse, DriverError> {
        let message = wire::machine_request(request);
        self.call(message, |mut c, r| async move { c.delete_machine(r).await }).await.map(Into::into)
    }

    async fn get_machine_status(&self, request: &MachineRequest) -> Result<MachineStatusResponse, DriverError> {
        let message = wire::machine_request(request);
        self.call(message, |mut c, r| async move { c.get_machine_status(r).await }).await.map(Into::into)
    }

    async fn list_machines(&self, request: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError> {
        let message = wire::list_request(request);
        self.call(message, |mut c, r| async move { c.list_machines(r).await }).await.map(wire::machine_list)
    }

    async fn get_volume_ids(&self, request: &GetVolumeIdsRequest) -> Result<Vec<String>, DriverError> {
        let message = wire::volume_ids_request(request);
        self.call(message, |mut c, r| async move { c.get_volume_i_ds(r).await }).await.map(|r| r.volume_ids)
    }
}
