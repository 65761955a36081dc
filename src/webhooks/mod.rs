//! The admission webhook server (`docs/infrastructure-provider.md#security`): AdmissionReview v1 over HTTPS on
//! controller-runtime's paths ([`review::HOOKS`]), validating MCMMachine, MCMMachineTemplate, MCMCluster and
//! MachineClass and defaulting MCMMachine and MCMMachineTemplate ([`crate::lifecycle::admission`]).
//!
//! `mcm run --webhook-port` serves it with the certificate cert-manager writes into `--webhook-cert-dir`
//! (`tls.crt`, `tls.key`), read again when the files change; `mcm dev` serves it with a throw-away certificate and
//! registers [`configurations`] pointing at it by URL.

pub mod review;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde_json::{Value, json};

pub use review::{HOOKS, Hook, HookKind};

/// The largest review accepted (kube-apiserver sends objects up to its own request limit of 3 MiB).
const MAX_BODY: usize = 6 * 1024 * 1024;

/// How often the certificate directory is read again.
const RELOAD_EVERY: Duration = Duration::from_secs(10);

/// Why the webhook server could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The certificate files could not be read.
    #[error("could not read the webhook serving certificate {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The certificate or key is not usable.
    #[error("the webhook serving certificate is not usable: {0}")]
    Certificate(String),
    /// The port could not be bound.
    #[error("could not listen on {addr} for webhooks: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum Certificates {
    /// `tls.crt` and `tls.key` in this directory (cert-manager's Secret mounted there), reloaded when they change.
    Dir(PathBuf),
    /// A chain and key in PEM (`mcm dev`'s throw-away certificate).
    Pem {
        /// The certificate chain.
        chain: String,
        /// The private key.
        key: String,
    },
}

fn certified_key(chain: &[u8], key: &[u8]) -> Result<CertifiedKey, WebhookError> {
    let bad = |what: &str, e: &dyn std::fmt::Display| WebhookError::Certificate(format!("{what}: {e}"));
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(chain).collect::<Result<_, _>>().map_err(|e| bad("tls.crt", &e))?;
    if chain.is_empty() {
        return Err(WebhookError::Certificate("tls.crt holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| bad("tls.key", &e))?;
    let signer = rustls::crypto::aws_lc_rs::sign::any_supported_type(&key).map_err(|e| bad("tls.key", &e))?;
    Ok(CertifiedKey::new(chain, signer))
}

fn read(path: &Path) -> Result<Vec<u8>, WebhookError> {
    std::fs::read(path).map_err(|source| WebhookError::Read { path: path.display().to_string(), source })
}

fn read_dir(dir: &Path) -> Result<(Vec<u8>, Vec<u8>), WebhookError> {
    Ok((read(&dir.join("tls.crt"))?, read(&dir.join("tls.key"))?))
}

/// The certificate in use, swapped when the files change.
#[derive(Debug)]
struct Resolver(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().ok().map(|k| k.clone())
    }
}

/// Whether the MachineClass webhook judges classes ([`crate::lifecycle::admission::validates_classes`]): `mcm run`
/// keeps it in step with the MachineClass CRD ([`ClassValidation::follow_crd`]); `mcm dev` always judges.
#[derive(Clone, Debug)]
pub struct ClassValidation(Arc<AtomicBool>);

impl ClassValidation {
    /// Judged from the start, for good.
    pub fn always() -> Self {
        ClassValidation(Arc::new(AtomicBool::new(true)))
    }

    /// Not judged until [`ClassValidation::follow_crd`] has read the CRD once (admitting a class unjudged is
    /// safe: the controllers report a bad class; refusing another MCM's class is not).
    pub fn pending() -> Self {
        ClassValidation(Arc::new(AtomicBool::new(false)))
    }

    /// Whether classes are judged now.
    pub fn on(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Reads the `machineclasses.machine.sapcloud.io` CRD now and every [`CRD_READ_EVERY`], judging classes only
    /// while it is ours (or absent). A failed read keeps the last answer.
    pub async fn follow_crd(self, client: kube::Client) {
        let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client);
        let mut first = true;
        loop {
            match crds.get_opt(CLASS_CRD).await {
                Ok(crd) => {
                    let on = crate::lifecycle::admission::validates_classes(crd.as_ref().map(|c| c.labels()));
                    if self.0.swap(on, Ordering::Relaxed) != on || std::mem::take(&mut first) {
                        let verdict = if on { "judged" } else { "admitted unjudged (the CRD is another MCM's)" };
                        tracing::info!("MachineClass webhook: classes {verdict}");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "MachineClass webhook: could not read the {CLASS_CRD} CRD"),
            }
            tokio::time::sleep(CRD_READ_EVERY).await;
        }
    }
}

/// The MachineClass CRD's name.
const CLASS_CRD: &str = "machineclasses.machine.sapcloud.io";

/// How often [`ClassValidation::follow_crd`] reads the CRD.
const CRD_READ_EVERY: Duration = Duration::from_secs(30);

/// A running webhook server.
pub struct WebhookServer {
    addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl WebhookServer {
    /// Listens on `addr` and serves the webhooks with `certificates`; providerSpecs are checked by
    /// [`crate::providers::check_provider_spec`].
    /// `classes` says whether MachineClasses are judged (see [`ClassValidation`]).
    pub async fn start(
        addr: SocketAddr,
        certificates: Certificates,
        classes: ClassValidation,
    ) -> Result<Self, WebhookError> {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let (chain, key, dir) = match certificates {
            Certificates::Dir(dir) => {
                let (chain, key) = read_dir(&dir)?;
                (chain, key, Some(dir))
            }
            Certificates::Pem { chain, key } => (chain.into_bytes(), key.into_bytes(), None),
        };
        let resolver = Arc::new(Resolver(RwLock::new(Arc::new(certified_key(&chain, &key)?))));
        let mut tls = rustls::ServerConfig::builder().with_no_client_auth().with_cert_resolver(resolver.clone());
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(|source| WebhookError::Bind { addr, source })?;
        let addr = listener.local_addr().map_err(|source| WebhookError::Bind { addr, source })?;
        let router = axum::Router::new().fallback(move |request: Request| handle(request, classes.clone()));
        let mut tasks = vec![tokio::spawn(serve(listener, acceptor, router))];
        if let Some(dir) = dir {
            tasks.push(tokio::spawn(reload(dir, (chain, key), resolver)));
        }
        Ok(WebhookServer { addr, tasks })
    }

    /// Stops `task` with the server (a helper serving it, such as [`ClassValidation::follow_crd`]).
    pub fn abort_with(&mut self, task: tokio::task::JoinHandle<()>) {
        self.tasks.push(task);
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

async fn serve(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor, router: axum::Router) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "webhook server: accept failed");
                continue;
            }
        };
        let (acceptor, router) = (acceptor.clone(), router.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(stream).await else { return };
            let service = hyper_util::service::TowerToHyperService::new(router);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Reads the directory every [`RELOAD_EVERY`] and swaps in a changed certificate (cert-manager renews it in the
/// Secret, the kubelet updates the mounted files). A half-written or broken pair keeps the old one.
async fn reload(dir: PathBuf, mut current: (Vec<u8>, Vec<u8>), resolver: Arc<Resolver>) {
    loop {
        tokio::time::sleep(RELOAD_EVERY).await;
        let Ok(files) = read_dir(&dir) else { continue };
        if files == current {
            continue;
        }
        match certified_key(&files.0, &files.1) {
            Ok(key) => {
                if let Ok(mut slot) = resolver.0.write() {
                    *slot = Arc::new(key);
                }
                tracing::info!(dir = %dir.display(), "webhook server: serving certificate reloaded");
                current = files;
            }
            Err(e) => tracing::warn!(error = %e, "webhook server: keeping the previous certificate"),
        }
    }
}

async fn handle(request: Request, classes: ClassValidation) -> Response {
    let path = request.uri().path().to_string();
    if request.method() != axum::http::Method::POST {
        return (axum::http::StatusCode::METHOD_NOT_ALLOWED, "POST an AdmissionReview").into_response();
    }
    let body = match axum::body::to_bytes(request.into_body(), MAX_BODY).await {
        Ok(body) => body,
        Err(e) => return (axum::http::StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let review: Value = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(e) => {
            return (axum::http::StatusCode::BAD_REQUEST, format!("not an AdmissionReview: {e}")).into_response();
        }
    };
    let answer = review::answer(&path, &review, &crate::providers::check_provider_spec, classes.on());
    Response::builder()
        .header(axum::http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(answer.to_string()))
        .unwrap_or_else(|_| axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The MutatingWebhookConfiguration and ValidatingWebhookConfiguration (named `name`) that register [`HOOKS`] at
/// `base_url` (`https://127.0.0.1:PORT`), trusting `ca_pem`: what `mcm dev` applies. `config/webhook/` registers
/// the same webhooks through a Service.
pub fn configurations(name: &str, base_url: &str, ca_pem: &str) -> [Value; 2] {
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes());
    let entries = |kind: HookKind| -> Vec<Value> {
        HOOKS
            .iter()
            .filter(|h| h.kind == kind)
            .map(|h| {
                json!({
                    "name": h.name(),
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {"url": format!("{base_url}{}", h.path()), "caBundle": bundle},
                    "failurePolicy": h.failure_policy,
                    "matchPolicy": "Equivalent",
                    "sideEffects": "None",
                    "timeoutSeconds": 10,
                    "rules": [{
                        "apiGroups": [h.group],
                        "apiVersions": [h.version],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [h.resource],
                    }],
                })
            })
            .collect()
    };
    [
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name}, "webhooks": entries(HookKind::Mutate),
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name}, "webhooks": entries(HookKind::Validate),
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `config/webhook/manifests.yaml` registers exactly the served webhooks, each on its path and rule.
    #[test]
    fn the_shipped_configurations_name_every_served_webhook() {
        let text = include_str!("../../config/webhook/manifests.yaml");
        let mut shipped = Vec::new();
        for document in serde_yaml::Deserializer::from_str(text) {
            let value: Value = serde::Deserialize::deserialize(document).unwrap();
            if value.is_null() {
                continue;
            }
            let kind = match value["kind"].as_str().unwrap() {
                "MutatingWebhookConfiguration" => HookKind::Mutate,
                "ValidatingWebhookConfiguration" => HookKind::Validate,
                other => panic!("unexpected {other}"),
            };
            for webhook in value["webhooks"].as_array().unwrap() {
                let rule = &webhook["rules"][0];
                shipped.push((
                    kind,
                    webhook["name"].as_str().unwrap().to_string(),
                    webhook["clientConfig"]["service"]["path"].as_str().unwrap().to_string(),
                    rule["resources"][0].as_str().unwrap().to_string(),
                    rule["apiGroups"][0].as_str().unwrap().to_string(),
                    webhook["failurePolicy"].as_str().unwrap().to_string(),
                ));
                assert_eq!(webhook["sideEffects"], "None");
                assert_eq!(rule["operations"], json!(["CREATE", "UPDATE"]));
            }
        }
        let served: Vec<_> = HOOKS
            .iter()
            .map(|h| {
                (h.kind, h.name(), h.path(), h.resource.to_string(), h.group.to_string(), h.failure_policy.to_string())
            })
            .collect();
        assert_eq!(shipped, served);
        let ignored: Vec<_> = HOOKS.iter().filter(|h| h.failure_policy != "Fail").map(|h| h.kind_name).collect();
        assert_eq!(ignored, ["MachineClass"], "only MachineClass writes go on without us");
    }

    #[test]
    fn dev_configurations_point_at_the_url() {
        let [mutating, validating] = configurations("mcm-dev", "https://127.0.0.1:1", "CA");
        assert_eq!(mutating["webhooks"].as_array().unwrap().len(), 2);
        assert_eq!(validating["webhooks"].as_array().unwrap().len(), 4);
        assert_eq!(
            validating["webhooks"][3]["clientConfig"]["url"],
            "https://127.0.0.1:1/validate-machine-sapcloud-io-v1alpha1-machineclass"
        );
        assert_eq!(validating["webhooks"][3]["clientConfig"]["caBundle"], "Q0E=");
    }

    #[tokio::test]
    async fn a_changed_certificate_directory_is_read_again() {
        let dir = std::env::temp_dir().join(format!("mcm-webhook-certs-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = crate::apiserver::tls::CertificateAuthority::generate()
            .and_then(|ca| ca.serving_certificate(std::net::Ipv4Addr::LOCALHOST.into()))
            .unwrap();
        std::fs::write(dir.join("tls.crt"), &first.chain_pem).unwrap();
        std::fs::write(dir.join("tls.key"), &first.key_pem).unwrap();
        let files = read_dir(&dir).unwrap();
        let resolver = Arc::new(Resolver(RwLock::new(Arc::new(certified_key(&files.0, &files.1).unwrap()))));
        let serial = |r: &Resolver| r.0.read().unwrap().cert[0].clone();
        let before = serial(&resolver);
        tokio::time::pause();
        let task = tokio::spawn(reload(dir.clone(), files, resolver.clone()));
        let second = crate::apiserver::tls::CertificateAuthority::generate()
            .and_then(|ca| ca.serving_certificate(std::net::Ipv4Addr::LOCALHOST.into()))
            .unwrap();
        std::fs::write(dir.join("tls.crt"), &second.chain_pem).unwrap();
        std::fs::write(dir.join("tls.key"), &second.key_pem).unwrap();
        // Time is paused: each round lets the reload task run, then moves the clock past its period.
        for _ in 0..5 {
            for _ in 0..20 {
                tokio::task::yield_now().await;
            }
            if serial(&resolver) != before {
                break;
            }
            tokio::time::advance(RELOAD_EVERY + Duration::from_secs(1)).await;
        }
        assert_ne!(serial(&resolver), before, "the new certificate is served");
        std::fs::write(dir.join("tls.key"), "garbage").unwrap();
        let after = serial(&resolver);
        for _ in 0..3 {
            tokio::time::advance(RELOAD_EVERY + Duration::from_secs(1)).await;
            for _ in 0..20 {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(serial(&resolver), after, "a broken pair keeps the current certificate");
        task.abort();
        let _ = std::fs::remove_dir_all(dir);
    }
}
