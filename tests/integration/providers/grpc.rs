//! Out-of-tree drivers over the driver protocol, through MCM's own Go types: `mcm-driver-relay` (the Go adapter
//! of adapters/mcm-go serving an MCM `driver.Driver` that forwards to another protocol server) between our gRPC
//! client and a driver of ours. What MCM's types cannot carry would be lost on the way, and the suite would fail.
//!
//! The relay is built by `make adapters` (`make test` does); without it these tests are skipped loudly, and in CI
//! (`CI=true`) they fail.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcm::providers::grpc::{DriverEndpoint, DriverServe, GrpcDriver};
use mcm::providers::inmemory::{InMemoryCloud, InMemoryDriver, conformance_fixture};
use mcm::providers::{
    Code, CreateMachineResponse, DeleteMachineResponse, Driver, DriverError, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineRequest, MachineStatusResponse, conformance,
};

use crate::support::{TempDir, wait_until};

/// The relay binary, or `None` (saying so loudly) when `make adapters` has not built it.
pub(crate) fn relay_binary(test: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/adapters/bin/mcm-driver-relay");
    if path.is_file() {
        return Some(path);
    }
    let message = format!("{} missing: run `make adapters` (needs go; docs/testing.md)", path.display());
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{test}: {message}");
    eprintln!("\n*** SKIPPED {test}: {message} ***\n");
    None
}

/// A running `mcm-driver-relay` in front of `upstream`, listening on a socket of its own.
pub(crate) struct Relay {
    /// Where it listens.
    pub endpoint: DriverEndpoint,
    child: tokio::process::Child,
    _dir: TempDir,
}

impl Relay {
    /// Starts the relay and waits until it answers (a list of provider `provider` that reaches `upstream`).
    pub(crate) async fn start(binary: &Path, upstream: &DriverEndpoint) -> Relay {
        let dir = TempDir::new("mcm-relay");
        let endpoint = DriverEndpoint::Unix(dir.0.join("relay.sock"));
        let child = tokio::process::Command::new(binary)
            .arg("--listen")
            .arg(endpoint.to_string())
            .arg("--upstream")
            .arg(upstream.to_string())
            .kill_on_drop(true)
            .spawn()
            .expect("the relay starts");
        let probe = GrpcDriver::new("probe", endpoint.clone());
        wait_until("the relay to answer", Duration::from_secs(30), || async {
            // Any answer from the upstream driver (even an error about the empty class) means the chain is up.
            match probe.list_machines(&ListMachinesRequest::default()).await {
                Err(e) if e.code == Code::Unavailable => None,
                _ => Some(()),
            }
        })
        .await;
        Relay { endpoint, child, _dir: dir }
    }

    /// Stops it (SIGKILL; it holds no state).
    pub(crate) async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Calls a [`Counted`] driver answered, by operation.
#[cfg_attr(not(feature = "aws"), allow(dead_code))] // the AWS scenario counts its calls
#[derive(Clone, Debug, Default)]
pub(crate) struct Calls {
    pub create_machine: u32,
    pub initialize_machine: u32,
    pub delete_machine: u32,
    pub get_machine_status: u32,
    pub list_machines: u32,
    pub get_volume_ids: u32,
}

/// A driver counting the calls that reach it (behind a server, so a test knows the calls went that way).
#[cfg_attr(not(feature = "aws"), allow(dead_code))]
#[derive(Clone)]
pub(crate) struct Counted {
    inner: Arc<dyn Driver>,
    calls: Arc<Mutex<Calls>>,
}

#[cfg_attr(not(feature = "aws"), allow(dead_code))]
impl Counted {
    pub(crate) fn new(inner: Arc<dyn Driver>) -> Self {
        Counted { inner, calls: Arc::default() }
    }

    pub(crate) fn calls(&self) -> Calls {
        self.calls.lock().unwrap().clone()
    }

    fn count(&self, which: impl FnOnce(&mut Calls) -> &mut u32) {
        *which(&mut self.calls.lock().unwrap()) += 1;
    }
}

#[async_trait::async_trait]
impl Driver for Counted {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    async fn create_machine(&self, request: &MachineRequest) -> Result<CreateMachineResponse, DriverError> {
        self.count(|c| &mut c.create_machine);
        self.inner.create_machine(request).await
    }

    async fn initialize_machine(&self, request: &MachineRequest) -> Result<InitializeMachineResponse, DriverError> {
        self.count(|c| &mut c.initialize_machine);
        self.inner.initialize_machine(request).await
    }

    async fn delete_machine(&self, request: &MachineRequest) -> Result<DeleteMachineResponse, DriverError> {
        self.count(|c| &mut c.delete_machine);
        self.inner.delete_machine(request).await
    }

    async fn get_machine_status(&self, request: &MachineRequest) -> Result<MachineStatusResponse, DriverError> {
        self.count(|c| &mut c.get_machine_status);
        self.inner.get_machine_status(request).await
    }

    async fn list_machines(&self, request: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError> {
        self.count(|c| &mut c.list_machines);
        self.inner.list_machines(request).await
    }

    async fn get_volume_ids(&self, request: &GetVolumeIdsRequest) -> Result<Vec<String>, DriverError> {
        self.count(|c| &mut c.get_volume_ids);
        self.inner.get_volume_ids(request).await
    }
}

#[tokio::test]
async fn the_conformance_suite_passes_through_mcms_go_types() {
    let Some(relay_bin) = relay_binary("the_conformance_suite_passes_through_mcms_go_types") else { return };
    let dir = TempDir::new("mcm-grpc");
    let cloud = InMemoryCloud::with_seed(5);
    let served: Arc<dyn Driver> = Arc::new(InMemoryDriver::new(cloud.clone()));
    let server = DriverServe::start(served, &DriverEndpoint::Unix(dir.0.join("inmemory.sock"))).await.unwrap();
    let relay = Relay::start(&relay_bin, &server.endpoint).await;

    let driver = GrpcDriver::new("InMemory", relay.endpoint.clone());
    conformance::run(&driver, &conformance_fixture()).await.unwrap();
    // The calls reached the cloud behind the relay.
    let stats = cloud.stats();
    assert!(stats.creates > 0 && stats.deletes > 0 && stats.lists > 0, "{stats:?}");
    relay.stop().await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_driver_that_went_away_is_unavailable_through_the_relay() {
    let Some(relay_bin) = relay_binary("a_driver_that_went_away_is_unavailable_through_the_relay") else { return };
    let dir = TempDir::new("mcm-grpc");
    let served: Arc<dyn Driver> = Arc::new(InMemoryDriver::new(InMemoryCloud::new()));
    let server = DriverServe::start(served, &DriverEndpoint::Unix(dir.0.join("inmemory.sock"))).await.unwrap();
    let relay = Relay::start(&relay_bin, &server.endpoint).await;
    server.stop().await.unwrap();
    let driver = GrpcDriver::new("InMemory", relay.endpoint.clone());
    let request = conformance_fixture().request("gone", &conformance_fixture().class, None);
    let err = driver.create_machine(&request).await.unwrap_err();
    // The controllers retry on Unavailable, as for a cloud outage.
    assert_eq!(err.code, Code::Unavailable, "{err}");
    relay.stop().await;
}
