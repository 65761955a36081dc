//! Bad input gets a Kubernetes Status with the right code and a message naming the problem; the server keeps
//! serving and loses nothing. Also TLS with a bearer token.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use mcm::apiserver::ServerConfig;
use serde_json::{Value, json};

use crate::support::{install_crds, start, start_with};

/// A raw request against the server, returning the status code and the body as JSON.
async fn raw(client: &kube::Client, method: &str, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
    let request =
        http::Request::builder().method(method).uri(path).header("content-type", content_type).body(body).unwrap();
    let response = client.send(request.map(kube::client::Body::from)).await.unwrap();
    let status = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Method, path, content type, body, expected code, a phrase the message must contain.
type Case = (&'static str, &'static str, &'static str, Vec<u8>, u16, &'static str);

#[tokio::test]
async fn malformed_and_misdirected_requests_are_rejected_with_a_status() {
    let (server, client) = start_with(ServerConfig { max_body_bytes: 1024 * 1024, ..Default::default() }).await;
    install_crds(&client).await;
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            b"{not json".to_vec(),
            400,
            "not valid JSON",
        ),
        ("POST", "/api/v1/namespaces/default/configmaps", "application/yaml", b"a: [".to_vec(), 400, "not valid YAML"),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            b"[1,2]".to_vec(),
            400,
            "must be a JSON or YAML object",
        ),
        (
            "GET",
            "/apis/example.com/v1/namespaces/default/widgets",
            "",
            vec![],
            404,
            "could not find the requested resource",
        ),
        ("GET", "/api/v1/namespaces/default/nodes", "", vec![], 404, "not namespaced"),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            serde_json::to_vec(
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "other"}}),
            )
            .unwrap(),
            400,
            "does not match the namespace",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})).unwrap(),
            400,
            "does not match the expected kind",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}))
                .unwrap(),
            422,
            "metadata.name: Invalid value: \"Bad_Name\"",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            serde_json::to_vec(
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a b": "c"}}}),
            )
            .unwrap(),
            422,
            "metadata.labels: Invalid value",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(",
            "",
            vec![],
            400,
            "unable to parse labelSelector",
        ),
        ("GET", "/api/v1/namespaces/default/configmaps?limit=many", "", vec![], 400, "invalid limit"),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            vec![b' '; 1100 * 1024],
            413,
            "larger than the limit",
        ),
        ("PATCH", "/api/v1/namespaces/default/configmaps/none", "text/plain", b"{}".to_vec(), 415, "unknown format"),
        (
            "PATCH",
            "/apis/machine.sapcloud.io/v1alpha1/namespaces/default/machines/m",
            "application/strategic-merge-patch+json",
            b"{}".to_vec(),
            415,
            "strategic-merge-patch",
        ),
        ("PUT", "/api/v1/namespaces/default/configmaps", "application/json", b"{}".to_vec(), 405, "not supported"),
    ];
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "keep"}})).unwrap())
        .await
        .unwrap();
    for (method, path, content_type, body, code, needle) in cases {
        let (status, body) = raw(&client, method, path, content_type, body).await;
        assert_eq!(status, code, "{method} {path}: {body}");
        assert_eq!(body["kind"], "Status", "{method} {path}");
        assert_eq!(body["code"], code, "{method} {path}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{method} {path}: {message:?} lacks {needle:?}");
    }
    // Nothing was lost and the server still answers.
    assert!(api.get("keep").await.is_ok());
    drop(server);
}

#[tokio::test]
async fn custom_resources_are_validated_and_pruned_against_their_schema() {
    let (_server, client) = start().await;
    install_crds(&client).await;
    let path = "/apis/machine.sapcloud.io/v1alpha1/namespaces/default/machinesets";
    let bad = json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "metadata": {"name": "bad"},
                     "spec": {"replicas": "three", "minReadySeconds": 1.5}});
    let (status, body) = raw(&client, "POST", path, "application/json", serde_json::to_vec(&bad).unwrap()).await;
    assert_eq!(status, 422, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.starts_with("MachineSet.machine.sapcloud.io \"bad\" is invalid: ["), "{message}");
    assert!(
        message.contains("spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer"),
        "{message}"
    );
    let fields: Vec<&str> =
        body["details"]["causes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert!(fields.contains(&"spec.replicas") && fields.contains(&"spec.minReadySeconds"), "{fields:?}");

    let with_unknown = json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "metadata": {"name": "good"},
                              "spec": {"replicas": 1, "surprise": true}, "extra": 1});
    let (status, body) =
        raw(&client, "POST", path, "application/json", serde_json::to_vec(&with_unknown).unwrap()).await;
    assert_eq!(status, 201, "{body}");
    assert!(body["spec"].get("surprise").is_none() && body.get("extra").is_none(), "unknown fields pruned: {body}");
    assert_eq!(body["spec"]["replicas"], 1);
}

#[tokio::test]
async fn tls_and_a_bearer_token_by_default() {
    let (server, client) = start().await;
    assert!(server.url().starts_with("https://127.0.0.1:"), "{}", server.url());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "over-tls"}})).unwrap())
        .await
        .unwrap();
    let kubeconfig = server.kubeconfig_yaml();
    assert!(kubeconfig.contains("certificate-authority-data") && kubeconfig.contains("    token: "), "{kubeconfig}");

    // The same CA, no token: the public paths answer, everything else is kube-apiserver's 401.
    let mut config = server.kube_config().await.unwrap();
    config.auth_info.token = None;
    let anonymous = kube::Client::try_from(config.clone()).unwrap();
    let unauthorized = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": "Unauthorized", "reason": "Unauthorized", "code": 401});
    for path in
        ["/api/v1/namespaces/default/configmaps/over-tls", "/api/v1/secrets", "/apis", "/metrics", "/openapi/v2"]
    {
        assert_eq!(
            raw(&anonymous, "GET", path, "application/json", Vec::new()).await,
            (401, unauthorized.clone()),
            "{path}"
        );
    }
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        let request = http::Request::builder().uri(path).body(kube::client::Body::empty()).unwrap();
        assert_eq!(anonymous.send(request).await.unwrap().status(), 200, "{path}");
    }
    // A wrong token is refused everywhere, the public paths too (no fallback to anonymous).
    config.auth_info.token = Some(format!("{}x", server.shared().config.token.expose()).into());
    let wrong = kube::Client::try_from(config).unwrap();
    for path in ["/api/v1/namespaces/default/configmaps/over-tls", "/healthz"] {
        assert_eq!(
            raw(&wrong, "GET", path, "application/json", Vec::new()).await,
            (401, unauthorized.clone()),
            "{path}"
        );
    }
    let err = Api::<ConfigMap>::namespaced(wrong, "default").get("over-tls").await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 401), "{err}");
}
