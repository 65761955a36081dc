//! A small HTTPS admission webhook for the webhook tests: a throw-away CA and a serving certificate for
//! `127.0.0.1` and `hooks.webhooks.svc`, and a few behaviours chosen by path.
//!
//! - `/mutate`: adds the label `webhook.test/mutated=<operation>` with a JSON patch;
//! - `/validate`: denies objects whose name starts with `forbidden` (403, reason Forbidden);
//! - `/cap`: caps a Scale's `spec.replicas` at 3;
//! - `/hold`: as `/mutate`, but the first review of an object labelled `hold=yes` waits until the test releases it
//!   (see [`HookServer::hold_next`]);
//! - `/garbage`: answers something that is not an AdmissionReview;
//! - `/hang`: never answers.
//!
//! Every review received is kept, with its path.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// The signals of a held review: the server says it holds one, the test releases it.
type Hold = (oneshot::Sender<()>, oneshot::Receiver<()>);

#[derive(Default)]
struct Shared {
    reviews: Mutex<Vec<(String, Value)>>,
    hold: Mutex<Option<Hold>>,
}

/// The running webhook.
pub struct HookServer {
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
    /// The CA that signed its certificate, PEM (a webhook's `caBundle`, base64-encoded).
    pub ca_pem: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn certificates() -> (String, String, String) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_params = CertificateParams::new(vec!["127.0.0.1".to_string(), "hooks.webhooks.svc".to_string()]).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &ca).unwrap();
    (ca.pem(), format!("{}{}", leaf.pem(), ca.pem()), leaf_key.serialize_pem())
}

impl HookServer {
    /// Starts the webhook on an ephemeral port.
    pub async fn start() -> HookServer {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let (ca_pem, chain_pem, key_pem) = certificates();
        let chain: Vec<rustls::pki_types::CertificateDer<'static>> =
            rustls::pki_types::pem::PemObject::pem_slice_iter(chain_pem.as_bytes()).collect::<Result<_, _>>().unwrap();
        let key = <rustls::pki_types::PrivateKeyDer<'static> as rustls::pki_types::pem::PemObject>::from_pem_slice(
            key_pem.as_bytes(),
        )
        .unwrap();
        let mut tls = rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(chain, key).unwrap();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let router = axum::Router::new().fallback(handle).with_state(shared.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (acceptor, router) = (acceptor.clone(), router.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else { return };
                    let service = hyper_util::service::TowerToHyperService::new(router);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        HookServer { addr, ca_pem, shared, task }
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The CA as a webhook's `caBundle` (base64 of the PEM).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// The reviews received on `path` so far.
    pub fn reviews(&self, path: &str) -> Vec<Value> {
        let reviews = self.shared.reviews.lock().unwrap();
        reviews.iter().filter(|(p, _)| p == path).map(|(_, r)| r.clone()).collect()
    }

    /// Makes `/hold` hold the next review of an object labelled `hold=yes`: the first receiver fires when it
    /// holds one, the review is answered once the sender fires (or is dropped).
    pub fn hold_next(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (holding_tx, holding_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        *self.shared.hold.lock().unwrap() = Some((holding_tx, release_rx));
        (holding_rx, release_tx)
    }
}

fn answer(review: &Value, response: Value) -> Response {
    let mut response = response;
    response["uid"] = review["request"]["uid"].clone();
    axum::Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
        .into_response()
}

fn json_patch(ops: Value) -> Value {
    let bytes = serde_json::to_vec(&ops).unwrap();
    json!({"allowed": true, "patchType": "JSONPatch", "patch": base64::engine::general_purpose::STANDARD.encode(bytes)})
}

fn label_patch(review: &Value) -> Value {
    let operation = review["request"]["operation"].clone();
    let object = &review["request"]["object"];
    if object.pointer("/metadata/labels").is_some_and(Value::is_object) {
        json_patch(json!([{"op": "add", "path": "/metadata/labels/webhook.test~1mutated", "value": operation}]))
    } else {
        json_patch(json!([{"op": "add", "path": "/metadata/labels", "value": {"webhook.test/mutated": operation}}]))
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request<Body>) -> Response {
    let path = request.uri().path().to_string();
    let bytes = axum::body::to_bytes(request.into_body(), 16 << 20).await.unwrap_or_default();
    let review: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    shared.reviews.lock().unwrap().push((path.clone(), review.clone()));
    let object = &review["request"]["object"];
    match path.as_str() {
        "/mutate" => answer(&review, label_patch(&review)),
        "/validate" => {
            let subject = if object.is_null() { &review["request"]["oldObject"] } else { object };
            let name = subject.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
            if name.starts_with("forbidden") {
                let status =
                    json!({"code": 403, "reason": "Forbidden", "message": format!("the name {name} is not allowed")});
                answer(&review, json!({"allowed": false, "status": status}))
            } else {
                answer(&review, json!({"allowed": true, "warnings": ["validated by the test webhook"]}))
            }
        }
        "/cap" => match object.pointer("/spec/replicas").and_then(Value::as_i64) {
            Some(n) if n > 3 => {
                answer(&review, json_patch(json!([{"op": "replace", "path": "/spec/replicas", "value": 3}])))
            }
            _ => answer(&review, json!({"allowed": true})),
        },
        "/hold" => {
            if object.pointer("/metadata/labels/hold").and_then(Value::as_str) == Some("yes") {
                let hold = shared.hold.lock().unwrap().take();
                if let Some((holding, release)) = hold {
                    let _ = holding.send(());
                    let _ = release.await;
                }
            }
            answer(&review, label_patch(&review))
        }
        "/garbage" => "this is not an AdmissionReview".into_response(),
        "/hang" => std::future::pending().await,
        _ => (axum::http::StatusCode::NOT_FOUND, "no such webhook").into_response(),
    }
}
