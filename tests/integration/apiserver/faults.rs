//! Request counters, fault injection and persistence: the test-only powers of the embedded server.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use mcm::apiserver::faults::{Selector, Verb};
use mcm::apiserver::{ApiServer, ServerConfig};
use serde_json::json;

use crate::support::{install_crds, start};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

#[tokio::test]
async fn requests_are_counted_by_verb_and_resource_and_exported() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"))).await.unwrap();
    }
    api.list(&ListParams::default()).await.unwrap();
    api.get("c0").await.unwrap();
    let _ = api.get("missing").await;
    let faults = server.faults();
    assert_eq!(faults.request_count(Verb::Create, "configmaps"), 3);
    assert_eq!(faults.request_count(Verb::List, "configmaps"), 1);
    assert_eq!(faults.request_count(Verb::Get, "configmaps"), 2);
    let body = reqwest_text(&client, "/metrics").await;
    assert!(
        body.contains(
            r#"apiserver_request_total{verb="create",group="",resource="configmaps",subresource="",code="201"} 3"#
        ),
        "{body}"
    );
    assert!(body.contains(r#"code="404"} 1"#), "{body}");
}

async fn reqwest_text(client: &kube::Client, path: &str) -> String {
    let request = http::Request::builder().uri(path).body(kube::client::Body::empty()).unwrap();
    let response = client.send(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn injected_failures_latency_and_retries() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let faults = server.faults();

    faults.fail_next(Selector::new(Some(Verb::Create), Some("configmaps")), 1, 500);
    let err = api.create(&PostParams::default(), &cm("a")).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 500 && s.message.contains("injected")), "{err}");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();

    faults.fail_next(Selector::new(Some(Verb::Update), Some("configmaps")), 1, 409);
    let current = api.get("a").await.unwrap();
    let err = api.replace("a", &PostParams::default(), &current).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 409), "{err}");

    // kube-rs retries 503 on its own: two injected failures, then success, three requests served.
    faults.reset_counts();
    faults.fail_next(Selector::new(Some(Verb::Get), Some("configmaps")), 2, 503);
    api.get("a").await.unwrap();
    assert_eq!(faults.request_count(Verb::Get, "configmaps"), 3);

    faults.fail_share(Selector::new(Some(Verb::List), None), 1.0, 500);
    assert!(api.list(&ListParams::default()).await.is_err());
    faults.clear();
    assert!(api.list(&ListParams::default()).await.is_ok());

    faults.add_latency(Selector::new(Some(Verb::List), Some("configmaps")), Duration::from_millis(300));
    let started = Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300), "the injected latency applies");
}

#[tokio::test]
async fn a_restarted_server_keeps_its_objects() {
    let dir = std::env::temp_dir().join(format!("mcm-data-{}", uuid::Uuid::new_v4()));
    let config = ServerConfig { data_dir: Some(dir.clone()), ..Default::default() };
    let server = ApiServer::start(config.clone()).await.unwrap();
    let client = server.client().await.unwrap();
    install_crds(&client).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let kept = api.create(&PostParams::default(), &cm("kept")).await.unwrap();
    server.shutdown().await;

    let server = ApiServer::start(config).await.unwrap();
    let client = server.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let again = api.get("kept").await.unwrap();
    assert_eq!(again.metadata.uid, kept.metadata.uid);
    assert_eq!(again.metadata.resource_version, kept.metadata.resource_version);
    let newer = api.create(&PostParams::default(), &cm("newer")).await.unwrap();
    let rv = |c: &ConfigMap| c.metadata.resource_version.as_ref().unwrap().parse::<u64>().unwrap();
    assert!(rv(&newer) > rv(&kept), "resource versions keep increasing after a restart");
    let sets: Api<mcm::api::mcm::MachineSet> = Api::namespaced(client, "default");
    assert!(sets.list(&ListParams::default()).await.is_ok(), "CRDs are served again");
    server.shutdown().await;
    std::fs::remove_dir_all(dir).unwrap();
}
