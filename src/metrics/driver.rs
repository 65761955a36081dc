//! [`MeteredDriver`]: wraps any driver and counts and times its calls, so no driver carries metrics code.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use super::{CallLabels, CloudMetrics, CodeLabels, FailedLabels, ServiceLabels};
use crate::providers::{
    CreateMachineResponse, DeleteMachineResponse, Driver, DriverError, DriverRegistry, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineRequest, MachineStatusResponse,
};

/// A driver whose calls are counted and timed: MCM's `mcm_cloud_api_*` families (a driver call stands for a
/// cloud request, its method for the service) and our `mcm_controller_driver_calls_total`.
pub struct MeteredDriver {
    inner: Arc<dyn Driver>,
    metrics: CloudMetrics,
}

impl MeteredDriver {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Driver>, metrics: CloudMetrics) -> Self {
        MeteredDriver { inner, metrics }
    }

    async fn timed<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, DriverError>>,
    ) -> Result<T, DriverError> {
        let started = std::time::Instant::now();
        let result = call.await;
        let seconds = started.elapsed().as_secs_f64();
        let provider = self.inner.provider().to_string();
        let code = match &result {
            Ok(_) => "OK".to_string(),
            Err(e) => e.code.as_str().to_string(),
        };
        let m = &self.metrics;
        let service = ServiceLabels { provider: provider.clone(), service: operation.to_string() };
        m.requests.get_or_create(&service).inc();
        m.calls
            .get_or_create(&CodeLabels {
                provider: provider.clone(),
                operation: operation.to_string(),
                code: code.clone(),
            })
            .inc();
        match &result {
            Ok(_) => {
                m.request_duration.get_or_create(&service).observe(seconds);
                m.driver_duration
                    .get_or_create(&CallLabels { provider, operation: operation.to_string() })
                    .observe(seconds);
            }
            Err(_) => {
                m.requests_failed.get_or_create(&service).inc();
                m.driver_failed
                    .get_or_create(&FailedLabels { provider, operation: operation.to_string(), error_code: code })
                    .inc();
            }
        }
        result
    }
}

#[async_trait::async_trait]
impl Driver for MeteredDriver {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    async fn create_machine(&self, request: &MachineRequest) -> Result<CreateMachineResponse, DriverError> {
        self.timed("create_machine", self.inner.create_machine(request)).await
    }

    async fn initialize_machine(&self, request: &MachineRequest) -> Result<InitializeMachineResponse, DriverError> {
        self.timed("initialize_machine", self.inner.initialize_machine(request)).await
    }

    async fn delete_machine(&self, request: &MachineRequest) -> Result<DeleteMachineResponse, DriverError> {
        self.timed("delete_machine", self.inner.delete_machine(request)).await
    }

    async fn get_machine_status(&self, request: &MachineRequest) -> Result<MachineStatusResponse, DriverError> {
        self.timed("get_machine_status", self.inner.get_machine_status(request)).await
    }

    async fn list_machines(&self, request: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError> {
        self.timed("list_machines", self.inner.list_machines(request)).await
    }

    async fn get_volume_ids(&self, request: &GetVolumeIdsRequest) -> Result<Vec<String>, DriverError> {
        self.timed("get_volume_ids", self.inner.get_volume_ids(request)).await
    }
}

/// The same drivers, each wrapped in a [`MeteredDriver`].
pub fn metered(drivers: &DriverRegistry, metrics: &CloudMetrics) -> DriverRegistry {
    let mut out = DriverRegistry::new();
    for provider in drivers.providers() {
        if let Ok(driver) = drivers.get(&provider) {
            out.register(Arc::new(MeteredDriver::new(driver, metrics.clone())));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::inmemory::{InMemoryCloud, InMemoryDriver, class};
    use crate::providers::{Code, MachineInfo};

    #[tokio::test]
    async fn calls_are_counted_by_operation_and_code() {
        let cloud = InMemoryCloud::with_seed(1);
        let mut drivers = DriverRegistry::new();
        drivers.register(Arc::new(InMemoryDriver::new(cloud.clone())));
        let metrics = crate::metrics::Metrics::new();
        let drivers = metered(&drivers, &metrics.cloud);
        let driver = drivers.get("InMemory").unwrap();
        let template: crate::api::mcm::NodeTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"topology.kubernetes.io/zone": "zone-a"}},
        }))
        .unwrap();
        let request = MachineRequest {
            machine: MachineInfo {
                name: "m1".into(),
                namespace: "default".into(),
                labels: [("name".to_string(), "workers".to_string())].into(),
                node_template: Some(template),
                ..Default::default()
            },
            class: class("c", "dev", serde_json::json!({})),
            ..Default::default()
        };
        driver.create_machine(&request).await.unwrap();
        let err = driver
            .get_machine_status(&MachineRequest {
                machine: MachineInfo { name: "absent".into(), namespace: "default".into(), ..Default::default() },
                ..request.clone()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code, Code::NotFound);
        let text = metrics.encode();
        for series in [
            r#"mcm_controller_driver_calls_total{provider="InMemory",operation="create_machine",code="OK"} 1"#,
            r#"mcm_cloud_api_requests_total{provider="InMemory",service="create_machine"} 1"#,
            r#"mcm_cloud_api_requests_failed_total{provider="InMemory",service="get_machine_status"} 1"#,
            r#"mcm_cloud_api_driver_requests_failed_total{provider="InMemory",operation="get_machine_status",error_code="NotFound"} 1"#,
            r#"mcm_cloud_api_driver_request_duration_seconds_count{provider="InMemory",operation="create_machine"} 1"#,
            r#"mcm_cloud_api_api_request_duration_seconds_count{provider="InMemory",service="create_machine"} 1"#,
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
        // MCM times successful calls only.
        assert!(!text.contains(r#"mcm_cloud_api_driver_request_duration_seconds_count{provider="InMemory",operation="get_machine_status"}"#), "{text}");
        assert_eq!(cloud.stats().creates, 1);
    }
}
