//! Serves any [`Driver`] over the protocol: `mcm driver serve` puts the in-memory cloud behind it, and tests put
//! in-tree drivers behind it to run the conformance suite over gRPC.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};

use super::endpoint::DriverEndpoint;
use super::pb;
use super::pb::driver_server::DriverServer;
use super::wire;
use crate::providers::{Driver, DriverError};

struct Service {
    driver: Arc<dyn Driver>,
}

type Answer<T> = Result<tonic::Response<T>, tonic::Status>;

fn answer<A, T: From<A>>(result: Result<A, DriverError>) -> Answer<T> {
    result.map(|a| tonic::Response::new(T::from(a))).map_err(|e| wire::status_of(&e))
}

#[tonic::async_trait]
impl pb::driver_server::Driver for Service {
    async fn create_machine(&self, request: tonic::Request<pb::MachineRequest>) -> Answer<pb::CreateMachineResponse> {
        let request = wire::from_machine_request(request.into_inner()).map_err(|e| wire::status_of(&e))?;
        answer(self.driver.create_machine(&request).await)
    }

    async fn initialize_machine(
        &self,
        request: tonic::Request<pb::MachineRequest>,
    ) -> Answer<pb::InitializeMachineResponse> {
        let request = wire::from_machine_request(request.into_inner()).map_err(|e| wire::status_of(&e))?;
        answer(self.driver.initialize_machine(&request).await)
    }

    async fn delete_machine(&self, request: tonic::Request<pb::MachineRequest>) -> Answer<pb::DeleteMachineResponse> {
        let request = wire::from_machine_request(request.into_inner()).map_err(|e| wire::status_of(&e))?;
        answer(self.driver.delete_machine(&request).await)
    }

    async fn get_machine_status(
        &self,
        request: tonic::Request<pb::MachineRequest>,
    ) -> Answer<pb::GetMachineStatusResponse> {
        let request = wire::from_machine_request(request.into_inner()).map_err(|e| wire::status_of(&e))?;
        answer(self.driver.get_machine_status(&request).await)
    }

    async fn list_machines(
        &self,
        request: tonic::Request<pb::ListMachinesRequest>,
    ) -> Answer<pb::ListMachinesResponse> {
        let request = wire::from_list_request(request.into_inner()).map_err(|e| wire::status_of(&e))?;
        let listed = self.driver.list_machines(&request).await;
        answer(listed.map(|machines| pb::ListMachinesResponse { machines: machines.into_iter().collect() }))
    }

    async fn get_volume_i_ds(
        &self,
        request: tonic::Request<pb::GetVolumeIDsRequest>,
    ) -> Answer<pb::GetVolumeIDsResponse> {
        let request = wire::from_volume_ids_request(request.into_inner()).map_err(|e| wire::status_of(&e))?;
        answer(self.driver.get_volume_ids(&request).await.map(|volume_ids| pb::GetVolumeIDsResponse { volume_ids }))
    }
}

/// A running driver server.
#[derive(Debug)]
pub struct DriverServe {
    /// Where it listens (with the port a `:0` endpoint was given).
    pub endpoint: DriverEndpoint,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl DriverServe {
    /// Serves `driver` at `endpoint`. A Unix socket file left by an earlier server is replaced; any other file
    /// at the path is an error.
    pub async fn start(driver: Arc<dyn Driver>, endpoint: &DriverEndpoint) -> std::io::Result<DriverServe> {
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let router = tonic::transport::Server::builder().add_service(DriverServer::new(Service { driver }));
        let stopped = async move {
            let _ = stop.await;
        };
        let (bound, task) = match endpoint {
            DriverEndpoint::Tcp(addr) => {
                let listener = tokio::net::TcpListener::bind(addr).await?;
                let bound = DriverEndpoint::Tcp(listener.local_addr()?);
                let incoming = TcpListenerStream::new(listener);
                (bound, tokio::spawn(router.serve_with_incoming_shutdown(incoming, stopped)))
            }
            DriverEndpoint::Unix(path) => {
                remove_stale_socket(path)?;
                let listener = tokio::net::UnixListener::bind(path)?;
                let incoming = UnixListenerStream::new(listener);
                (endpoint.clone(), tokio::spawn(router.serve_with_incoming_shutdown(incoming, stopped)))
            }
        };
        Ok(DriverServe { endpoint: bound, task, shutdown: Some(shutdown) })
    }

    /// Stops accepting calls, lets the running ones finish and waits for the server to end.
    pub async fn stop(mut self) -> Result<(), tonic::transport::Error> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let result = (&mut self.task).await.unwrap_or(Ok(()));
        if let DriverEndpoint::Unix(path) = &self.endpoint {
            let _ = std::fs::remove_file(path);
        }
        result
    }

    /// Waits until the server ends (it only ends on an error or [`DriverServe::stop`]).
    pub async fn wait(&mut self) -> Result<(), tonic::transport::Error> {
        (&mut self.task).await.unwrap_or(Ok(()))
    }
}

impl Drop for DriverServe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn remove_stale_socket(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::grpc::GrpcDriver;
    use crate::providers::inmemory::{InMemoryCloud, InMemoryDriver, conformance_fixture};
    use crate::providers::{Code, ListMachinesRequest, conformance};

    #[tokio::test]
    async fn the_in_memory_driver_passes_the_conformance_suite_over_grpc() {
        let cloud = InMemoryCloud::with_seed(11);
        for endpoint in [
            DriverEndpoint::Tcp(([127, 0, 0, 1], 0).into()),
            DriverEndpoint::Unix(std::env::temp_dir().join(format!("mcm-driver-{}.sock", uuid::Uuid::new_v4()))),
        ] {
            let server = DriverServe::start(Arc::new(InMemoryDriver::new(cloud.clone())), &endpoint).await.unwrap();
            let driver = GrpcDriver::new("InMemory", server.endpoint.clone());
            conformance::run(&driver, &conformance_fixture()).await.unwrap();
            server.stop().await.unwrap();
            if let DriverEndpoint::Unix(path) = &endpoint {
                assert!(!path.exists(), "the socket is removed on stop");
            }
        }
        assert!(cloud.stats().creates > 0);
    }

    #[tokio::test]
    async fn no_server_is_unavailable_and_names_the_endpoint() {
        let path = std::env::temp_dir().join(format!("mcm-absent-{}.sock", uuid::Uuid::new_v4()));
        let driver = GrpcDriver::new("Remote", DriverEndpoint::Unix(path.clone()));
        let err = driver.list_machines(&ListMachinesRequest::default()).await.unwrap_err();
        assert_eq!(err.code, Code::Unavailable, "{err}");
        assert!(err.message.contains(&path.display().to_string()), "{err}");
    }

    #[tokio::test]
    async fn a_regular_file_is_not_replaced_by_the_socket() {
        let path = std::env::temp_dir().join(format!("mcm-file-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, "keep").unwrap();
        let driver: Arc<dyn Driver> = Arc::new(InMemoryDriver::new(InMemoryCloud::new()));
        let err = DriverServe::start(driver, &DriverEndpoint::Unix(path.clone())).await.unwrap_err();
        assert!(err.to_string().contains("not a socket"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep");
        std::fs::remove_file(path).unwrap();
    }
}
