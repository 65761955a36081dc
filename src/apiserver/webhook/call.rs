//! Reaching a webhook: where (a URL, or a Service resolved to a ready endpoint as kube-apiserver's endpoint
//! routing does), over TLS verified against the webhook's `caBundle`, one HTTP/1.1 POST of an `AdmissionReview`,
//! and what the answer means.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Uri, header};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use rustls::pki_types::{CertificateDer, ServerName};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The largest webhook answer read.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Why a webhook's client configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Neither `url` nor `service`.
    #[error("the webhook's clientConfig has neither url nor service")]
    NoTarget,
    /// The URL does not parse or is not https.
    #[error("webhook URL {0:?} is not a valid https URL")]
    BadUrl(String),
    /// `caBundle` holds no usable certificate.
    #[error("the webhook's caBundle holds no usable PEM certificate: {0}")]
    BadCaBundle(String),
    /// No `caBundle`: the embedded server has no system trust roots to fall back on.
    #[error("the webhook has no caBundle (the embedded API server does not use the system's trust roots)")]
    NoCaBundle,
}

/// Where a webhook is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `clientConfig.url`.
    Url {
        /// The URL as configured.
        url: String,
        /// `host:port` to connect to.
        authority: String,
        /// The host, for TLS verification and the `Host` header.
        host: String,
        /// Path and query.
        path_and_query: String,
    },
    /// `clientConfig.service`.
    Service {
        /// Namespace of the Service.
        namespace: String,
        /// Name of the Service.
        name: String,
        /// The Service port (default 443).
        port: i32,
        /// Path (default `/`).
        path: String,
    },
}

impl Target {
    /// The target of a client configuration.
    pub fn from_config(
        config: &k8s_openapi::api::admissionregistration::v1::WebhookClientConfig,
    ) -> Result<Self, ConfigError> {
        if let Some(url) = &config.url {
            let uri: Uri = url.parse().map_err(|_| ConfigError::BadUrl(url.clone()))?;
            let (Some("https"), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
                return Err(ConfigError::BadUrl(url.clone()));
            };
            let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_string();
            let port = authority.port_u16().unwrap_or(443);
            let authority = match host.parse::<IpAddr>() {
                Ok(ip) => SocketAddr::new(ip, port).to_string(),
                Err(_) => format!("{host}:{port}"),
            };
            let path_and_query = uri.path_and_query().map_or("/".to_string(), |p| p.as_str().to_string());
            return Ok(Target::Url { url: url.clone(), authority, host, path_and_query });
        }
        let Some(service) = &config.service else { return Err(ConfigError::NoTarget) };
        let path = service.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".to_string());
        Ok(Target::Service {
            namespace: service.namespace.clone(),
            name: service.name.clone(),
            port: service.port.unwrap_or(443),
            path,
        })
    }

    /// The URL kube-apiserver would name in its errors, with the `timeout` query it adds.
    pub fn display_url(&self, timeout: Duration) -> String {
        let url = match self {
            Target::Url { url, .. } => url.clone(),
            Target::Service { namespace, name, port, path } => format!("https://{name}.{namespace}.svc:{port}{path}"),
        };
        with_timeout(&url, timeout)
    }

    /// The path and query sent, with the `timeout` query kube-apiserver adds.
    pub fn path_and_query(&self, timeout: Duration) -> String {
        match self {
            Target::Url { path_and_query, .. } => with_timeout(path_and_query, timeout),
            Target::Service { path, .. } => with_timeout(path, timeout),
        }
    }

    /// The `Host` header: the URL's authority, or `<service>.<namespace>.svc:<port>`.
    pub fn host_header(&self) -> String {
        match self {
            Target::Url { url, host, .. } => url
                .parse::<Uri>()
                .ok()
                .and_then(|u| u.authority().map(|a| a.to_string()))
                .unwrap_or_else(|| host.clone()),
            Target::Service { namespace, name, port, .. } => format!("{name}.{namespace}.svc:{port}"),
        }
    }

    /// The name the serving certificate must carry: the URL's host, or `<service>.<namespace>.svc`.
    pub fn server_name(&self) -> String {
        match self {
            Target::Url { host, .. } => host.clone(),
            Target::Service { namespace, name, .. } => format!("{name}.{namespace}.svc"),
        }
    }
}

fn with_timeout(url: &str, timeout: Duration) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}timeout={}s", timeout.as_secs())
}

/// The TLS client configuration trusting exactly the PEM certificates of a `caBundle`.
pub fn tls_config(ca_bundle: Option<&[u8]>) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    let Some(pem) = ca_bundle.filter(|b| !b.is_empty()) else { return Err(ConfigError::NoCaBundle) };
    let mut roots = rustls::RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = rustls::pki_types::pem::PemObject::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| ConfigError::BadCaBundle(e.to_string()))?;
    for cert in certs {
        roots.add(cert).map_err(|e| ConfigError::BadCaBundle(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(ConfigError::BadCaBundle("no certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::BadCaBundle(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Resolves a Service reference to one ready endpoint, as kube-apiserver's endpoint routing does: the Service
/// port (by number) names the endpoint port (by name) in the Service's EndpointSlices, then in its legacy
/// Endpoints; without a port of that name a numeric `targetPort` is used. The first ready address wins.
pub fn resolve_service(
    name: &str,
    port: i32,
    service: Option<&Value>,
    slices: &[&Value],
    endpoints: Option<&Value>,
) -> Result<SocketAddr, String> {
    let Some(service) = service else { return Err(format!("service \"{name}\" not found")) };
    let kind = service.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP");
    if !matches!(kind, "ClusterIP" | "NodePort" | "LoadBalancer") {
        return Err(format!("unsupported service type \"{kind}\""));
    }
    let ports = service.pointer("/spec/ports").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let Some(service_port) = ports.iter().find(|p| p["port"].as_i64() == Some(i64::from(port))) else {
        return Err(format!("no service port {port} found for service \"{name}\""));
    };
    let port_name = service_port["name"].as_str().unwrap_or_default();
    let target_port = match &service_port["targetPort"] {
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Value::Null => u16::try_from(port).ok(),
        _ => None,
    };
    let named_port = |ports: Option<&Value>| -> Option<u16> {
        ports
            .and_then(Value::as_array)?
            .iter()
            .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
            .and_then(|p| p["port"].as_u64())
            .and_then(|n| u16::try_from(n).ok())
    };
    let ip = |v: &Value| v.as_str().and_then(|s| s.parse::<IpAddr>().ok());
    for slice in slices {
        let Some(port) = named_port(slice.get("ports")).or(target_port) else { continue };
        let endpoints = slice.get("endpoints").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for endpoint in endpoints {
            if endpoint.pointer("/conditions/ready").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let addresses = endpoint.get("addresses").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            if let Some(ip) = addresses.iter().find_map(ip) {
                return Ok(SocketAddr::new(ip, port));
            }
        }
    }
    let subsets = endpoints.and_then(|e| e.get("subsets")).and_then(Value::as_array).map(Vec::as_slice);
    for subset in subsets.unwrap_or_default() {
        let Some(port) = named_port(subset.get("ports")).or(target_port) else { continue };
        let addresses = subset.get("addresses").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        if let Some(ip) = addresses.iter().find_map(|a| ip(&a["ip"])) {
            return Ok(SocketAddr::new(ip, port));
        }
    }
    Err(format!("no endpoints available for service \"{name}\""))
}

/// One POST over a fresh TLS connection: the status code and the body. Errors are sentences for
/// `failed calling webhook` messages.
pub async fn post(
    connect: &str,
    server_name: &str,
    host_header: &str,
    path_and_query: &str,
    tls: Arc<rustls::ClientConfig>,
    body: Vec<u8>,
) -> Result<(u16, Bytes), String> {
    let tcp = tokio::net::TcpStream::connect(connect).await.map_err(|e| format!("dial tcp {connect}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| format!("invalid server name: {e}"))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: failed to verify certificate: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    let request = hyper::Request::post(path_and_query)
        .header(header::HOST, host_header)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("could not build the request: {e}"))?;
    let exchange = async move {
        let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the response: {e}"))?
            .to_bytes();
        Ok::<_, String>((status, bytes))
    };
    tokio::pin!(exchange);
    tokio::pin!(connection);
    let mut connection_done = false;
    loop {
        tokio::select! {
            result = &mut exchange => return result,
            // The connection future drives the exchange; once it ends, the exchange finishes or fails by itself.
            _ = &mut connection, if !connection_done => connection_done = true,
        }
    }
}

/// What a webhook answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Allowed, with a JSON patch (mutating webhooks only) and warnings.
    Allowed {
        /// RFC 6902 operations to apply, if any.
        patch: Option<json_patch::Patch>,
        /// `response.warnings`.
        warnings: Vec<String>,
    },
    /// Denied, with the `Status` the webhook gave (if any).
    Denied {
        /// `response.status`.
        status: Option<Map<String, Value>>,
        /// `response.warnings`.
        warnings: Vec<String>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: Option<String>,
    kind: Option<String>,
    response: Option<Response>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    allowed: bool,
    status: Option<Map<String, Value>>,
    patch: Option<String>,
    patch_type: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

/// Reads a webhook's HTTP answer to the review with `uid`. An `Err` is a failed call (subject to the failure
/// policy), worded as kube-apiserver words it.
pub fn interpret(uid: &str, mutating: bool, status: u16, body: &[u8]) -> Result<Answer, String> {
    if !(200..300).contains(&status) {
        return Err(format!("failed to call webhook: the server responded with the status code {status}"));
    }
    let review: Review =
        serde_json::from_slice(body).map_err(|e| format!("failed to call webhook: invalid response body: {e}"))?;
    let invalid = |why: String| format!("received invalid webhook response: {why}");
    let Some(response) = review.response else { return Err(invalid("webhook response was absent".into())) };
    if response.uid != uid {
        return Err(invalid(format!("expected response.uid=\"{uid}\", got \"{}\"", response.uid)));
    }
    let gvk = format!("{}, Kind={}", review.api_version.unwrap_or_default(), review.kind.unwrap_or_default());
    if gvk != "admission.k8s.io/v1, Kind=AdmissionReview" {
        return Err(invalid(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {gvk}"
        )));
    }
    let patch = response.patch.filter(|p| !p.is_empty());
    let patch_type = response.patch_type.filter(|p| !p.is_empty());
    match (mutating, &patch, &patch_type) {
        (true, Some(_), None) => {
            return Err(invalid("webhook returned response.patch but not response.patchType".into()));
        }
        (true, None, Some(_)) => {
            return Err(invalid("webhook returned response.patchType but not response.patch".into()));
        }
        (false, Some(_), _) => return Err(invalid("validating webhook may not return response.patch".into())),
        (false, None, Some(_)) => {
            return Err(invalid("validating webhook may not return response.patchType".into()));
        }
        _ => {}
    }
    if !response.allowed {
        return Ok(Answer::Denied { status: response.status, warnings: response.warnings });
    }
    let patch = match (patch, patch_type.as_deref()) {
        (Some(patch), Some("JSONPatch")) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(patch.as_bytes())
                .map_err(|e| invalid(format!("response.patch is not base64: {e}")))?;
            let ops: json_patch::Patch = serde_json::from_slice(&bytes)
                .map_err(|e| format!("failed to call webhook: the patch is not a JSON patch: {e}"))?;
            Some(ops)
        }
        (Some(_), Some(other)) => return Err(format!("unsupported patch type \"{other}\"")),
        _ => None,
    };
    Ok(Answer::Allowed { patch, warnings: response.warnings })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Name, Service, port, slices, Endpoints, expected address.
    type ResolveCase<'a> =
        (&'a str, Option<&'a Value>, i32, Vec<&'a Value>, Option<&'a Value>, Result<SocketAddr, String>);
    /// Name, mutating, HTTP status, body, expected answer.
    type AnswerCase<'a> = (&'a str, bool, u16, Vec<u8>, Result<Answer, String>);

    fn service(ports: Value, kind: Option<&str>) -> Value {
        let mut s = json!({"metadata": {"name": "hook", "namespace": "sys"}, "spec": {"ports": ports}});
        if let Some(kind) = kind {
            s["spec"]["type"] = json!(kind);
        }
        s
    }

    fn slice(ports: Value, endpoints: Value) -> Value {
        json!({"metadata": {"name": "hook-abc", "labels": {"kubernetes.io/service-name": "hook"}}, "ports": ports, "endpoints": endpoints})
    }

    #[test]
    fn services_resolve_to_a_ready_endpoint() {
        let named = service(json!([{"name": "https", "port": 443, "targetPort": 9443}]), None);
        let unnamed = service(json!([{"port": 443, "targetPort": "webhook"}]), None);
        let ready = slice(
            json!([{"name": "https", "port": 9443}]),
            json!([{"addresses": ["10.0.0.9"], "conditions": {"ready": false}}, {"addresses": ["10.0.0.7"]}]),
        );
        let unready = slice(
            json!([{"name": "https", "port": 9443}]),
            json!([{"addresses": ["10.0.0.9"], "conditions": {"ready": false}}]),
        );
        let unnamed_slice =
            slice(json!([{"port": 8443}]), json!([{"addresses": ["10.0.0.8"], "conditions": {"ready": true}}]));
        let legacy = json!({"subsets": [
            {"notReadyAddresses": [{"ip": "10.0.1.1"}], "ports": [{"name": "https", "port": 9443}]},
            {"addresses": [{"ip": "10.0.1.2"}], "ports": [{"name": "https", "port": 9443}]},
        ]});
        let external = service(json!([{"port": 443}]), Some("ExternalName"));
        let portless = slice(json!([]), json!([{"addresses": ["127.0.0.1"]}]));
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        let cases: Vec<ResolveCase<'_>> = vec![
            ("slice, named port", Some(&named), 443, vec![&ready], None, Ok(addr("10.0.0.7:9443"))),
            ("unnamed port in slice", Some(&unnamed), 443, vec![&unnamed_slice], None, Ok(addr("10.0.0.8:8443"))),
            ("slices first", Some(&named), 443, vec![&ready], Some(&legacy), Ok(addr("10.0.0.7:9443"))),
            ("legacy Endpoints", Some(&named), 443, vec![&unready], Some(&legacy), Ok(addr("10.0.1.2:9443"))),
            (
                "nothing ready",
                Some(&named),
                443,
                vec![&unready],
                None,
                Err("no endpoints available for service \"hook\"".into()),
            ),
            ("no service", None, 443, vec![&ready], None, Err("service \"hook\" not found".into())),
            (
                "wrong port",
                Some(&named),
                8443,
                vec![&ready],
                None,
                Err("no service port 8443 found for service \"hook\"".into()),
            ),
            (
                "ExternalName",
                Some(&external),
                443,
                vec![],
                None,
                Err("unsupported service type \"ExternalName\"".into()),
            ),
            (
                "numeric targetPort without a port of that name",
                Some(&named),
                443,
                vec![&portless],
                None,
                Ok(addr("127.0.0.1:9443")),
            ),
        ];
        for (name, svc, port, slices, endpoints, expected) in cases {
            assert_eq!(resolve_service("hook", port, svc, &slices, endpoints), expected, "{name}");
        }
    }

    #[test]
    fn targets_and_their_urls() {
        use k8s_openapi::api::admissionregistration::v1::{ServiceReference, WebhookClientConfig};
        let url = |u: &str| WebhookClientConfig { url: Some(u.into()), ..Default::default() };
        let t = Target::from_config(&url("https://127.0.0.1:9443/mutate?x=1")).unwrap();
        assert_eq!(
            t,
            Target::Url {
                url: "https://127.0.0.1:9443/mutate?x=1".into(),
                authority: "127.0.0.1:9443".into(),
                host: "127.0.0.1".into(),
                path_and_query: "/mutate?x=1".into()
            }
        );
        assert_eq!(t.display_url(Duration::from_secs(10)), "https://127.0.0.1:9443/mutate?x=1&timeout=10s");
        assert_eq!(t.server_name(), "127.0.0.1");
        let t = Target::from_config(&url("https://hooks.example.com")).unwrap();
        assert_eq!(t.server_name(), "hooks.example.com");
        assert_eq!(t.display_url(Duration::from_secs(5)), "https://hooks.example.com?timeout=5s");
        assert_eq!(t.path_and_query(Duration::from_secs(5)), "/?timeout=5s");
        assert_eq!(t.host_header(), "hooks.example.com");
        assert_eq!(
            Target::from_config(&url("http://127.0.0.1/x")),
            Err(ConfigError::BadUrl("http://127.0.0.1/x".into()))
        );
        assert_eq!(Target::from_config(&WebhookClientConfig::default()), Err(ConfigError::NoTarget));
        let svc = WebhookClientConfig {
            service: Some(ServiceReference { namespace: "sys".into(), name: "hook".into(), path: None, port: None }),
            ..Default::default()
        };
        let t = Target::from_config(&svc).unwrap();
        assert_eq!(t.server_name(), "hook.sys.svc");
        assert_eq!(t.display_url(Duration::from_secs(10)), "https://hook.sys.svc:443/?timeout=10s");
        assert_eq!(t.host_header(), "hook.sys.svc:443");
        assert_eq!(tls_config(None).unwrap_err(), ConfigError::NoCaBundle);
        assert!(matches!(tls_config(Some(b"not pem")), Err(ConfigError::BadCaBundle(_))));
    }

    fn review(response: Value) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
        )
        .unwrap()
    }

    #[test]
    fn answers_are_read_like_kube_apiserver() {
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]"#);
        let allowed = review(json!({"uid": "u1", "allowed": true}));
        let patched = review(json!({"uid": "u1", "allowed": true, "patch": patch, "patchType": "JSONPatch"}));
        let denied =
            review(json!({"uid": "u1", "allowed": false, "status": {"code": 403, "message": "no"}, "warnings": ["w"]}));
        let expected_patch: json_patch::Patch =
            serde_json::from_value(json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}])).unwrap();
        let cases: Vec<AnswerCase<'_>> = vec![
            ("allowed", true, 200, allowed.clone(), Ok(Answer::Allowed { patch: None, warnings: vec![] })),
            (
                "patched",
                true,
                200,
                patched.clone(),
                Ok(Answer::Allowed { patch: Some(expected_patch), warnings: vec![] }),
            ),
            (
                "denied",
                false,
                200,
                denied,
                Ok(Answer::Denied {
                    status: json!({"code": 403, "message": "no"}).as_object().cloned(),
                    warnings: vec!["w".into()],
                }),
            ),
            (
                "validating webhooks may not patch",
                false,
                200,
                patched,
                Err("received invalid webhook response: validating webhook may not return response.patch".into()),
            ),
            (
                "patch without type",
                true,
                200,
                review(json!({"uid": "u1", "allowed": true, "patch": patch})),
                Err("received invalid webhook response: webhook returned response.patch but not response.patchType".into()),
            ),
            (
                "other patch type",
                true,
                200,
                review(json!({"uid": "u1", "allowed": true, "patch": patch, "patchType": "MergePatch"})),
                Err("unsupported patch type \"MergePatch\"".into()),
            ),
            (
                "uid mismatch",
                true,
                200,
                review(json!({"uid": "u2", "allowed": true})),
                Err("received invalid webhook response: expected response.uid=\"u1\", got \"u2\"".into()),
            ),
            (
                "no response",
                true,
                200,
                br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#.to_vec(),
                Err("received invalid webhook response: webhook response was absent".into()),
            ),
            (
                "v1beta1 answer",
                true,
                200,
                serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "response": {"uid": "u1", "allowed": true}})).unwrap(),
                Err("received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got admission.k8s.io/v1beta1, Kind=AdmissionReview".into()),
            ),
            (
                "HTTP error",
                true,
                500,
                allowed.clone(),
                Err("failed to call webhook: the server responded with the status code 500".into()),
            ),
        ];
        for (name, mutating, code, body, expected) in cases {
            assert_eq!(interpret("u1", mutating, code, &body), expected, "{name}");
        }
        assert!(
            interpret("u1", true, 200, b"garbage")
                .unwrap_err()
                .starts_with("failed to call webhook: invalid response body")
        );
    }
}
