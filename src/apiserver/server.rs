//! The HTTP side: listener (TLS, or plain HTTP on loopback when asked), the bearer-token check, routing to discovery, OpenAPI and the resource
//! handlers, saving state to disk, and what a started server hands back (its URL, a kubeconfig, a
//! `kube::Client`).
//!
//! The top of the module graph: it imports the request-serving modules, and none of them imports it (the state
//! they share is `state`'s).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::auth::{self, Caller};
use super::error::ApiError;
use super::faults::{Faults, RequestInfo, Verb};
use super::request::{Target, parse_path, parse_query};
use super::resources::GroupResource;
use super::response::json_response;
use super::state::{ServerConfig, Shared};
use super::store::Store;
use super::{discovery, handlers, openapi, tls};

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address could not be bound.
    #[error("could not listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The data directory could not be read.
    #[error(transparent)]
    Persist(#[from] super::persist::PersistError),
    /// Certificates could not be made.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// Plain HTTP was asked for on an address other hosts can reach.
    #[error(
        "refusing to serve plain HTTP on {addr}: the bearer token and every object (Secrets included) would cross the \
         network unencrypted; listen on a loopback address (127.0.0.1 or ::1) or drop --insecure-http"
    )]
    InsecureHttpNotLoopback {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The TLS configuration was refused.
    #[error("could not configure TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Why a client or kubeconfig could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig we wrote did not parse (a bug).
    #[error("the generated kubeconfig is invalid: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// kube rejected the configuration.
    #[error("could not build a client: {0}")]
    Client(#[from] kube::Error),
    /// Writing the kubeconfig file failed.
    #[error("could not write the kubeconfig to {path}: {source}")]
    Write {
        /// Where.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// A running embedded API server.
pub struct ApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    url: String,
    ca_pem: Option<String>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

fn seed_namespaces(store: &mut Store) {
    let gr = GroupResource::new("", "namespaces");
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        store.insert(
            &gr,
            json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": super::object::now(),
                             "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }),
        );
    }
}

impl ServerConfig {
    /// Refuses what must not be served: plain HTTP on an address other hosts can reach.
    pub fn validate(&self) -> Result<(), StartError> {
        if self.insecure_http && !self.listen.ip().is_loopback() {
            return Err(StartError::InsecureHttpNotLoopback { addr: self.listen });
        }
        Ok(())
    }
}

impl ApiServer {
    /// Starts a server with the default namespaces (`default`, `kube-system`, `kube-public`, `kube-node-lease`),
    /// or with the state saved in `config.data_dir`.
    pub async fn start(config: ServerConfig) -> Result<Self, StartError> {
        let store = match &config.data_dir {
            Some(dir) => super::persist::load(dir, config.history_limit)?,
            None => Store::new(config.history_limit),
        };
        Self::start_with(config, store).await
    }

    /// Starts a server over an existing store (restored from disk, for example).
    pub async fn start_with(config: ServerConfig, mut store: Store) -> Result<Self, StartError> {
        config.validate()?;
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        store.set_history_limit(config.history_limit);
        if store.count(&GroupResource::new("", "namespaces")) == 0 {
            seed_namespaces(&mut store);
        }
        let tls = if config.insecure_http {
            None
        } else {
            let ca = match &config.ca {
                Some(ca) => ca.clone(),
                None => tls::CertificateAuthority::generate()?,
            };
            Some((tls_acceptor(&ca, config.listen)?, ca))
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| StartError::Bind { addr: config.listen, source })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: config.listen, source })?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}", client_address(addr));
        let (tls_acceptor, ca_pem) = tls.map(|(acceptor, ca)| (acceptor, ca.cert_pem().to_string())).unzip();
        let shared = Arc::new(Shared::new(config, store, addr.to_string()));
        let router = axum::Router::new().fallback(handle).with_state(shared.clone());
        let (shutdown, shutdown_rx) = watch::channel(false);
        let saver =
            shared.config.data_dir.clone().map(|dir| tokio::spawn(save_loop(shared.clone(), dir, shutdown_rx.clone())));
        let serving = tokio::spawn(serve(listener, router, tls_acceptor, shutdown_rx));
        let task = tokio::spawn(async move {
            let _ = serving.await;
            if let Some(saver) = saver {
                let _ = saver.await;
            }
        });
        Ok(ApiServer { shared, addr, url, ca_pem, shutdown, task })
    }

    /// The base URL, e.g. `https://127.0.0.1:40123`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shared state (store, configuration), for tests and tools in the same process.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Request counters and fault injection.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Ends every open watch (clients reconnect, as after a dropped connection).
    pub fn close_watches(&self) {
        self.shared.close_watches.send_modify(|n| *n += 1);
    }

    /// A kubeconfig (YAML) for this server, with context `mcm-dev`: the server's URL, the CA that signed its
    /// certificate and the bearer token. Credentials: never log it.
    pub fn kubeconfig_yaml(&self) -> String {
        let ca = self.ca_pem.as_ref().map(|pem| {
            format!("    certificate-authority-data: {}\n", base64::engine::general_purpose::STANDARD.encode(pem))
        });
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: mcm-dev\n  cluster:\n    server: {}\n{}contexts:\n- name: mcm-dev\n  context:\n    cluster: mcm-dev\n    user: mcm-dev\n    namespace: default\ncurrent-context: mcm-dev\nusers:\n- name: mcm-dev\n  user:\n    token: \"{}\"\npreferences: {{}}\n",
            self.url,
            ca.unwrap_or_default(),
            self.shared.config.token.expose(),
        )
    }

    /// The CA certificate (PEM) clients trust; `None` when serving plain HTTP.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Writes the kubeconfig to `path` (creating parent directories), readable by the owner only.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), ClientError> {
        write_private_file(path, &self.kubeconfig_yaml())
    }

    /// The kube client configuration for this server (what the kubeconfig carries), to adjust before building a
    /// client — e.g. `default_retry = false`, since kube-rs otherwise retries 429s (PDB-blocked evictions) for minutes.
    pub async fn kube_config(&self) -> Result<kube::Config, ClientError> {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml())?;
        Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?)
    }

    /// A kube client for this server (the same configuration the kubeconfig carries).
    pub async fn client(&self) -> Result<kube::Client, ClientError> {
        Ok(kube::Client::try_from(self.kube_config().await?)?)
    }

    /// Stops accepting connections, ends watches and waits for the listener to close.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        self.close_watches();
        let _ = self.task.await;
    }
}

/// Writes `text` (a kubeconfig: credentials) to `path`, creating parent directories, readable by the owner only.
pub fn write_private_file(path: &Path, text: &str) -> Result<(), ClientError> {
    super::persist::write_private(path, text.as_bytes())
        .map_err(|source| ClientError::Write { path: path.display().to_string(), source })
}

/// Where a client of this process reaches a server bound to `addr`: the address itself, or loopback when it is
/// unspecified (`0.0.0.0`, `::`), which is no address to connect to nor a name in the certificate.
fn client_address(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::from((Ipv4Addr::LOCALHOST, addr.port())),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::from((Ipv6Addr::LOCALHOST, addr.port())),
        _ => addr,
    }
}

/// The TLS side of the listener: a serving certificate from `ca` for the listen address.
fn tls_acceptor(ca: &tls::CertificateAuthority, listen: SocketAddr) -> Result<tokio_rustls::TlsAcceptor, StartError> {
    let cert = ca.serving_certificate(listen.ip())?;
    let chain: Vec<rustls::pki_types::CertificateDer<'static>> =
        rustls::pki_types::pem::PemObject::pem_slice_iter(cert.chain_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| rustls::Error::General(format!("certificate PEM: {e}")))?;
    let key = <rustls::pki_types::PrivateKeyDer<'static> as rustls::pki_types::pem::PemObject>::from_pem_slice(
        cert.key_pem.as_bytes(),
    )
    .map_err(|e| rustls::Error::General(format!("key PEM: {e}")))?;
    let mut server_config = rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(chain, key)?;
    server_config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(server_config)))
}

/// Saves the store when it changed, at most every half second, and once more at shutdown.
async fn save_loop(shared: Arc<Shared>, dir: std::path::PathBuf, mut shutdown: watch::Receiver<bool>) {
    let mut saved = shared.lock().rv();
    loop {
        let stopping = tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => false,
            _ = shutdown.changed() => true,
        };
        let (rv, objects) = {
            let store = shared.lock();
            if store.rv() == saved && !stopping {
                continue;
            }
            super::persist::capture(&store)
        };
        let dir = dir.clone();
        match tokio::task::spawn_blocking(move || super::persist::save(&dir, rv, &objects)).await {
            Ok(Ok(())) => saved = rv,
            Ok(Err(e)) => tracing::error!(error = %e, "could not save the API server state"),
            Err(e) => tracing::error!(error = %e, "the state saver failed"),
        }
        if stopping {
            return;
        }
    }
}

async fn serve(
    listener: TcpListener,
    router: axum::Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let tls = tls.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = hyper_util::service::TowerToHyperService::new(router);
            let builder = hyper::server::conn::http1::Builder::new();
            match tls {
                Some(acceptor) => {
                    let Ok(stream) = acceptor.accept(stream).await else { return };
                    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    tokio::select! { _ = conn => {}, _ = conn_shutdown.changed() => {} }
                }
                None => {
                    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    tokio::select! { _ = conn => {}, _ = conn_shutdown.changed() => {} }
                }
            }
        });
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let allowed = match auth::authenticate(&shared.config.token, request.headers()) {
        Caller::Authenticated => true,
        Caller::Anonymous => request.method() == axum::http::Method::GET && auth::public_path(request.uri().path()),
        Caller::Rejected => false,
    };
    if !allowed {
        return ApiError::unauthorized().into_response();
    }
    let (parts, body) = request.into_parts();
    let result = route(shared, parts, body).await;
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn route(shared: Arc<Shared>, parts: axum::http::request::Parts, body: Body) -> Result<Response, ApiError> {
    let target = parse_path(parts.uri.path())?;
    let get_only = |response: Response| {
        if parts.method == axum::http::Method::GET {
            Ok(response)
        } else {
            Err(ApiError::method_not_allowed(parts.method.as_str(), parts.uri.path()))
        }
    };
    match target {
        Target::Root => get_only(json_response(StatusCode::OK, &discovery::root_paths(&shared.lock().registry))),
        Target::Version => get_only(json_response(StatusCode::OK, &discovery::version())),
        Target::Health => get_only((StatusCode::OK, "ok").into_response()),
        Target::Metrics => {
            shared.faults.set_open_watches(shared.open_watches());
            let text = shared.faults.metrics_text();
            get_only((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
        }
        Target::CoreVersions | Target::Groups if discovery::wants_aggregated(&parts.headers) => {
            let doc = discovery::aggregated(&shared.lock().registry, matches!(target, Target::CoreVersions));
            get_only(discovery::response(&doc, true))
        }
        Target::CoreVersions => get_only(discovery::response(&discovery::core_versions(&shared.address), false)),
        Target::Groups => {
            let doc = discovery::groups(&shared.lock().registry);
            get_only(discovery::response(&doc, false))
        }
        Target::Group(group) => {
            let doc = discovery::group(&shared.lock().registry, &group);
            match doc {
                Some(doc) => get_only(json_response(StatusCode::OK, &doc)),
                None => Err(ApiError::no_route(parts.uri.path())),
            }
        }
        Target::Resources { group, version } => {
            let doc = discovery::resources(&shared.lock().registry, &group, &version);
            match doc {
                Some(doc) => get_only(json_response(StatusCode::OK, &doc)),
                None => Err(ApiError::no_route(parts.uri.path())),
            }
        }
        Target::OpenApi(rest) => {
            let registry = shared.lock().registry.clone();
            get_only(openapi::respond(&shared.openapi, &registry, &rest, parts.uri.query(), &parts.headers)?)
        }
        Target::Resource(path) => {
            let query = parse_query(parts.uri.query())?;
            let Some(verb) = Verb::of(parts.method.as_str(), path.name.is_some(), query.watch) else {
                return Err(ApiError::method_not_allowed(parts.method.as_str(), parts.uri.path()));
            };
            let info = RequestInfo {
                verb,
                group: path.group.clone(),
                resource: path.resource.clone(),
                subresource: path.subresource.clone(),
            };
            let (delay, failure) = shared.faults.decide(&info);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if let Some(error) = failure {
                shared.faults.count(&info, error.code);
                return Err(error);
            }
            let faults = shared.clone();
            let result = handlers::resource(shared, parts.method, path, query, parts.headers, body).await;
            let code = match &result {
                Ok(response) => response.status().as_u16(),
                Err(error) => error.code,
            };
            faults.faults.count(&info, code);
            result
        }
    }
}
