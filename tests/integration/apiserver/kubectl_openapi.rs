//! The real kubectl against the embedded server: `apply` with its default strict validation (which reads the
//! OpenAPI v3 documents and leaves validation to the server), `explain`, `create`, and server-side field
//! validation as kubectl reports it (and, over plain HTTP, each directive's codes, messages and `Warning` headers).
//! kubectl must be on PATH (CI installs it): a missing kubectl fails.

use std::path::{Path, PathBuf};

use mcm::apiserver::ApiServer;
use serde_json::Value;

use crate::support::{Kubectl, install_crds, start};

/// A started server with our CRDs, and kubectl for it.
struct Env {
    _server: ApiServer,
    kubectl: Kubectl,
}

/// What a kubectl run printed.
struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Env {
    async fn start() -> Env {
        let (server, client) = start().await;
        install_crds(&client).await;
        let kubectl = Kubectl::new(&server);
        Env { _server: server, kubectl }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        self.kubectl.file(name, text)
    }

    async fn run(&self, args: &[&str]) -> Output {
        let (ok, stdout, stderr) = self.kubectl.try_run(args).await;
        Output { ok, stdout, stderr }
    }

    async fn ok(&self, args: &[&str]) -> String {
        self.kubectl.run(args).await
    }
}

const MANIFEST: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: default
data:
  mode: fast
---
apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineDeployment
metadata:
  name: workers
  namespace: default
spec:
  replicas: 2
  selector:
    matchLabels:
      pool: workers
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      labels:
        pool: workers
    spec:
      class:
        kind: MachineClass
        name: small
"#;

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test]
async fn apply_creates_then_reports_unchanged() {
    let k = Env::start().await;
    let manifest = k.file("manifest.yaml", MANIFEST);
    let first = k.ok(&["apply", "-f", path(&manifest)]).await;
    assert!(first.contains("configmap/settings created"), "{first}");
    assert!(first.contains("machinedeployment.machine.sapcloud.io/workers created"), "{first}");
    let second = k.ok(&["apply", "-f", path(&manifest)]).await;
    assert!(second.contains("configmap/settings unchanged"), "{second}");
    assert!(second.contains("machinedeployment.machine.sapcloud.io/workers unchanged"), "{second}");

    // A change goes through the patch path (strategic merge for the ConfigMap, merge patch for the CR).
    let changed =
        k.file("changed.yaml", &MANIFEST.replace("mode: fast", "mode: slow").replace("replicas: 2", "replicas: 3"));
    let third = k.ok(&["apply", "-f", path(&changed)]).await;
    assert!(third.contains("configmap/settings configured"), "{third}");
    assert!(third.contains("machinedeployment.machine.sapcloud.io/workers configured"), "{third}");
    let json = k.ok(&["get", "machinedeployments.machine.sapcloud.io", "workers", "-o", "json"]).await;
    let md: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(md["spec"]["replicas"], 3);
    assert_eq!(md["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 1);
}

#[tokio::test]
async fn apply_with_an_unknown_field_fails_naming_it() {
    let k = Env::start().await;
    let bad_cr = k.file("bad-cr.yaml", &MANIFEST.replace("  replicas: 2\n", "  replicas: 2\n  replicaz: 5\n"));
    let out = k.run(&["apply", "-f", path(&bad_cr)]).await;
    assert!(!out.ok, "{}", out.stdout);
    assert!(out.stderr.contains(r#"strict decoding error: unknown field "spec.replicaz""#), "{}", out.stderr);

    let bad_cm = k.file("bad-cm.yaml", &MANIFEST.replace("\ndata:\n", "\ndatta:\n  x: y\ndata:\n"));
    let out = k.run(&["apply", "-f", path(&bad_cm)]).await;
    assert!(!out.ok, "{}", out.stdout);
    assert!(out.stderr.contains(r#"strict decoding error: unknown field "datta""#), "{}", out.stderr);

    // On the patch path too, once the objects exist.
    let good = k.file("good.yaml", MANIFEST);
    k.ok(&["apply", "-f", path(&good)]).await;
    let out = k.run(&["apply", "-f", path(&bad_cr)]).await;
    assert!(!out.ok, "{}", out.stdout);
    assert!(out.stderr.contains(r#"unknown field "spec.replicaz""#), "{}", out.stderr);
    let out = k.run(&["apply", "-f", path(&bad_cm)]).await;
    assert!(!out.ok, "{}", out.stdout);
    assert!(out.stderr.contains(r#"strict decoding error: unknown field "datta""#), "{}", out.stderr);

    // Warn: accepted, the field dropped and reported.
    let out = k.run(&["apply", "--validate=warn", "-f", path(&bad_cm)]).await;
    assert!(out.ok, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains(r#"Warning: unknown field "datta""#), "{}", out.stderr);
    let cm: Value = serde_json::from_str(&k.ok(&["get", "configmap", "settings", "-o", "json"]).await).unwrap();
    assert!(cm.get("datta").is_none(), "{cm}");

    // Ignore (--validate=false): accepted silently.
    let out = k.run(&["apply", "--validate=false", "-f", path(&bad_cr)]).await;
    assert!(out.ok, "{}\n{}", out.stdout, out.stderr);
    assert!(!out.stderr.contains("unknown field"), "{}", out.stderr);
}

#[tokio::test]
async fn explain_prints_field_docs_of_custom_and_builtin_kinds() {
    let k = Env::start().await;
    let strategy = k.ok(&["explain", "machinedeployments.machine.sapcloud.io.spec.strategy"]).await;
    assert!(strategy.contains("GROUP:      machine.sapcloud.io"), "{strategy}");
    assert!(strategy.contains("KIND:       MachineDeployment"), "{strategy}");
    assert!(strategy.contains("VERSION:    v1alpha1"), "{strategy}");
    assert!(strategy.contains("FIELD: strategy <Object>"), "{strategy}");
    assert!(strategy.contains("rollingUpdate\t<Object>"), "{strategy}");
    assert!(strategy.contains("The deployment strategy to use"), "{strategy}");

    let containers = k.ok(&["explain", "pods.spec.containers"]).await;
    assert!(containers.contains("KIND:       Pod"), "{containers}");
    assert!(containers.contains("FIELD: containers <[]Container>"), "{containers}");
    assert!(containers.contains("image\t<string>"), "{containers}");
    assert!(containers.contains("name\t<string> -required-"), "{containers}");

    let top = k.ok(&["explain", "configmaps"]).await;
    assert!(top.contains("metadata\t<ObjectMeta>"), "{top}");
}

#[tokio::test]
async fn create_works_and_refuses_unknown_fields() {
    let k = Env::start().await;
    let manifest = k.file("manifest.yaml", MANIFEST);
    let out = k.ok(&["create", "-f", path(&manifest)]).await;
    assert!(out.contains("configmap/settings created"), "{out}");
    assert!(out.contains("machinedeployment.machine.sapcloud.io/workers created"), "{out}");
    let again = k.run(&["create", "-f", path(&manifest)]).await;
    assert!(!again.ok);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);

    let bad = k.file("bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n  bogus: 1\ndata: {}\n");
    let out = k.run(&["create", "-f", path(&bad)]).await;
    assert!(!out.ok);
    assert!(out.stderr.contains(r#"unknown field "metadata.bogus""#), "{}", out.stderr);
}

/// A raw request: status, `Warning` headers and the body as JSON.
async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<String>, Value) {
    let mut request = http::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(body.as_bytes().to_vec()).unwrap();
    let response = client.send(request.map(kube::client::Body::from)).await.unwrap();
    let status = response.status().as_u16();
    let warnings =
        response.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_string()).collect::<Vec<_>>();
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    (status, warnings, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn field_validation_directives_over_http() {
    let (_server, client) = start().await;
    install_crds(&client).await;
    let json = [("content-type", "application/json")];
    let cms = "/api/v1/namespaces/default/configmaps";
    let body =
        r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "1", "k": "2"}, "x": 1}"#;

    let (code, _, status) = send(&client, "POST", &format!("{cms}?fieldValidation=Strict"), &json, body).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: duplicate field "data.k", unknown field "x""#
    );

    // The default is Warn: stored without the unknown field, one header per problem.
    let (code, warnings, created) = send(&client, "POST", cms, &json, body).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(warnings, vec![r#"299 - "duplicate field \"data.k\"""#, r#"299 - "unknown field \"x\"""#]);
    assert!(created.get("x").is_none());
    assert_eq!(created["data"]["k"], "2");

    let body_b = body.replace("\"a\"", "\"b\"");
    let (code, warnings, created) =
        send(&client, "POST", &format!("{cms}?fieldValidation=Ignore"), &json, &body_b).await;
    assert_eq!((code, warnings.len()), (201, 0));
    assert!(created.get("x").is_none());

    // YAML bodies and patches: duplicates are found there too; a strict patch is a 422 about `patch`.
    let yaml = [("content-type", "application/yaml")];
    let doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  name: c\n";
    let (code, _, status) = send(&client, "POST", &format!("{cms}?fieldValidation=Strict"), &yaml, doc).await;
    assert_eq!(code, 400, "{status}");
    assert!(status["message"].as_str().unwrap().ends_with(r#"duplicate field "metadata.name""#), "{status}");
    let merge = [("content-type", "application/merge-patch+json")];
    let (code, _, status) =
        send(&client, "PATCH", &format!("{cms}/a?fieldValidation=Strict"), &merge, r#"{"spec": {"y": 1}}"#).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["details"]["causes"][0]["field"], "patch");
    assert!(
        status["message"].as_str().unwrap().ends_with(r#"strict decoding error: unknown field "spec""#),
        "{status}"
    );
    let (code, _, status) = send(&client, "POST", &format!("{cms}?fieldValidation=strict"), &json, "{}").await;
    assert_eq!(code, 400, "{status}");

    // Custom resources: what pruning removes is unknown.
    let mds = "/apis/machine.sapcloud.io/v1alpha1/namespaces/default/machinedeployments";
    let md = r#"{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment", "metadata": {"name": "m"},
                 "spec": {"replicaz": 1, "template": {"spec": {"class": {"name": "c"}}}}}"#;
    let (code, _, status) = send(&client, "POST", &format!("{mds}?fieldValidation=Strict"), &json, md).await;
    assert_eq!(code, 400, "{status}");
    assert!(status["message"].as_str().unwrap().ends_with(r#"unknown field "spec.replicaz""#), "{status}");
    let (code, warnings, created) = send(&client, "POST", mds, &json, md).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(warnings, vec![r#"299 - "unknown field \"spec.replicaz\"""#]);
    assert!(created["spec"].get("replicaz").is_none());

    // OpenAPI: JSON is served, protobuf-only gets 406.
    let (code, _, index) = send(&client, "GET", "/openapi/v3", &[("accept", "application/json")], "").await;
    assert_eq!(code, 200);
    assert!(index["paths"]["apis/machine.sapcloud.io/v1alpha1"]["serverRelativeURL"].is_string());
    let protobuf = [("accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")];
    let (code, _, status) = send(&client, "GET", "/openapi/v2", &protobuf, "").await;
    assert_eq!((code, status["reason"].as_str()), (406, Some("NotAcceptable")));
    let (code, _, v2) = send(&client, "GET", "/openapi/v2", &[("accept", "application/json")], "").await;
    assert_eq!(code, 200);
    assert_eq!(v2["swagger"], "2.0");
}
