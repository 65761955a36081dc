//! The in-memory cloud shared between processes: [`serve`] puts an [`InMemoryCloud`] behind a small JSON API on
//! loopback (`mcm dev` does, so `mcm run` processes can share its VMs and its kubelet), and [`RemoteDriver`] is the
//! `InMemory` driver of another process, calling that API.
//!
//! The API: `POST /v1/<operation>` with the request as JSON answers `{"ok": response}` or
//! `{"error": {"code": "NotFound", "message": "..."}}`; `GET /v1/stats` answers the cloud's call counters. Secret
//! data never crosses it (the in-memory cloud needs none). Meant for loopback only: it has no authentication.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::{CloudStats, InMemoryCloud, InMemoryDriver, PROVIDER};
use crate::providers::{
    Code, CreateMachineResponse, DeleteMachineResponse, Driver, DriverError, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineRequest, MachineStatusResponse,
};

/// The counters as `GET /v1/stats` shows them.
pub fn stats_json(stats: &CloudStats) -> Value {
    json!({
        "creates": stats.creates,
        "createErrors": stats.create_errors,
        "initializes": stats.initializes,
        "deletes": stats.deletes,
        "statusGets": stats.status_gets,
        "lists": stats.lists,
        "volumeIdGets": stats.volume_id_gets,
        "vmsCreated": stats.vms_created,
        "vmsDeleted": stats.vms_deleted,
        "kills": stats.kills,
        "inPlaceUpdates": stats.in_place_updates,
    })
}

fn answer<T: Serialize>(result: Result<T, DriverError>) -> Json<Value> {
    Json(match result {
        Ok(response) => json!({ "ok": response }),
        Err(e) => json!({ "error": { "code": e.code.as_str(), "message": e.message } }),
    })
}

fn parse<T: DeserializeOwned>(body: Value) -> Result<T, DriverError> {
    serde_json::from_value(body).map_err(|e| DriverError::new(Code::InvalidArgument, format!("bad request: {e}")))
}

async fn operation(
    State(driver): State<InMemoryDriver>,
    Path(op): Path<String>,
    Json(body): Json<Value>,
) -> Json<Value> {
    match op.as_str() {
        "create_machine" => match parse::<MachineRequest>(body) {
            Ok(r) => answer(driver.create_machine(&r).await),
            Err(e) => answer::<()>(Err(e)),
        },
        "initialize_machine" => match parse::<MachineRequest>(body) {
            Ok(r) => answer(driver.initialize_machine(&r).await),
            Err(e) => answer::<()>(Err(e)),
        },
        "delete_machine" => match parse::<MachineRequest>(body) {
            Ok(r) => answer(driver.delete_machine(&r).await),
            Err(e) => answer::<()>(Err(e)),
        },
        "get_machine_status" => match parse::<MachineRequest>(body) {
            Ok(r) => answer(driver.get_machine_status(&r).await),
            Err(e) => answer::<()>(Err(e)),
        },
        "list_machines" => match parse::<ListMachinesRequest>(body) {
            Ok(r) => answer(driver.list_machines(&r).await),
            Err(e) => answer::<()>(Err(e)),
        },
        "get_volume_ids" => match parse::<GetVolumeIdsRequest>(body) {
            Ok(r) => answer(driver.get_volume_ids(&r).await),
            Err(e) => answer::<()>(Err(e)),
        },
        other => answer::<()>(Err(DriverError::new(Code::Unimplemented, format!("no operation {other:?}")))),
    }
}

async fn stats(State(driver): State<InMemoryDriver>) -> Json<Value> {
    Json(stats_json(&driver.cloud().stats()))
}

/// Serves `cloud` on `addr` (use a loopback address; port 0 picks one); returns the bound address and the task.
pub async fn serve(cloud: InMemoryCloud, addr: SocketAddr) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let router = Router::new()
        .route("/v1/stats", get(stats))
        .route("/v1/{operation}", post(operation))
        .with_state(InMemoryDriver::new(cloud));
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "in-memory cloud API stopped");
        }
    });
    Ok((bound, task))
}

/// The `InMemory` driver of a cloud served by another process ([`serve`]).
#[derive(Clone)]
pub struct RemoteDriver {
    base: String,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for RemoteDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteDriver").field("base", &self.base).finish_non_exhaustive()
    }
}

impl RemoteDriver {
    /// A driver calling the cloud at `url` (e.g. `http://127.0.0.1:40123`).
    pub fn new(url: &str) -> Self {
        RemoteDriver {
            base: url.trim_end_matches('/').to_string(),
            http: HttpClient::builder(TokioExecutor::new()).build_http(),
            timeout: Duration::from_secs(30),
        }
    }

    async fn send(&self, method: axum::http::Method, path: &str, body: Vec<u8>) -> Result<Value, DriverError> {
        let unavailable =
            |e: String| DriverError::new(Code::Unavailable, format!("in-memory cloud at {}: {e}", self.base));
        let request = axum::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(axum::http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| unavailable(e.to_string()))?;
        let call = async {
            let response = self.http.request(request).await.map_err(|e| unavailable(e.to_string()))?;
            let status = response.status();
            let bytes = response.into_body().collect().await.map_err(|e| unavailable(e.to_string()))?.to_bytes();
            if !status.is_success() {
                return Err(unavailable(format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes))));
            }
            serde_json::from_slice::<Value>(&bytes).map_err(|e| unavailable(e.to_string()))
        };
        tokio::time::timeout(self.timeout, call).await.map_err(|_| unavailable("timed out".into()))?
    }

    async fn call<Q: Serialize, A: DeserializeOwned>(&self, op: &str, request: &Q) -> Result<A, DriverError> {
        let body = serde_json::to_vec(request).map_err(|e| DriverError::new(Code::Internal, e.to_string()))?;
        let mut value = self.send(axum::http::Method::POST, &format!("/v1/{op}"), body).await?;
        if let Some(error) = value.get("error") {
            let code = error.get("code").and_then(Value::as_str).and_then(Code::from_name).unwrap_or(Code::Unknown);
            let message = error.get("message").and_then(Value::as_str).unwrap_or_default();
            return Err(DriverError::new(code, message));
        }
        let ok = value.get_mut("ok").map(Value::take).unwrap_or(Value::Null);
        serde_json::from_value(ok).map_err(|e| DriverError::new(Code::Internal, format!("bad answer to {op}: {e}")))
    }

    /// The remote cloud's call counters (`GET /v1/stats`).
    pub async fn stats(&self) -> Result<Value, DriverError> {
        self.send(axum::http::Method::GET, "/v1/stats", Vec::new()).await
    }
}

#[async_trait::async_trait]
impl Driver for RemoteDriver {
    fn provider(&self) -> &str {
        PROVIDER
    }

    async fn create_machine(&self, request: &MachineRequest) -> Result<CreateMachineResponse, DriverError> {
        self.call("create_machine", request).await
    }

    async fn initialize_machine(&self, request: &MachineRequest) -> Result<InitializeMachineResponse, DriverError> {
        self.call("initialize_machine", request).await
    }

    async fn delete_machine(&self, request: &MachineRequest) -> Result<DeleteMachineResponse, DriverError> {
        self.call("delete_machine", request).await
    }

    async fn get_machine_status(&self, request: &MachineRequest) -> Result<MachineStatusResponse, DriverError> {
        self.call("get_machine_status", request).await
    }

    async fn list_machines(&self, request: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError> {
        self.call("list_machines", request).await
    }

    async fn get_volume_ids(&self, request: &GetVolumeIdsRequest) -> Result<Vec<String>, DriverError> {
        self.call("get_volume_ids", request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::conformance;

    #[tokio::test]
    async fn the_remote_driver_passes_the_conformance_suite() {
        let cloud = InMemoryCloud::with_seed(7);
        let (addr, task) = serve(cloud.clone(), SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let driver = RemoteDriver::new(&format!("http://{addr}"));
        conformance::run(&driver, &super::super::conformance_fixture()).await.unwrap();
        let stats = driver.stats().await.unwrap();
        assert_eq!(stats["creates"].as_u64(), Some(cloud.stats().creates));
        assert!(cloud.stats().creates > 0);
        let unreachable = RemoteDriver::new("http://127.0.0.1:1");
        let err = unreachable.list_machines(&ListMachinesRequest::default()).await.unwrap_err();
        assert_eq!(err.code, Code::Unavailable);
        task.abort();
    }
}
