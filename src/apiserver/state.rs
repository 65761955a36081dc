//! The server-wide state every request shares ([`Shared`]: the store behind its lock, open watches, request
//! counters and injected faults, the OpenAPI and webhook caches) and the configuration a server runs with
//! ([`ServerConfig`]).
//!
//! Below everything that serves requests (`handlers`, `subresources`, `watch`) and above what it holds (`store`,
//! `faults`, `openapi`, `webhook`): it must not import the request-serving modules nor `server`.

use std::net::SocketAddr;
use std::sync::MutexGuard;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use super::auth::BearerToken;
use super::faults::Faults;
use super::store::{SharedStore, Store};
use super::tls::CertificateAuthority;
use super::{openapi, webhook};

/// How a server is started.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Serve plain HTTP instead of HTTPS. Refused unless `listen` is a loopback address: the token would cross the
    /// network in the clear.
    pub insecure_http: bool,
    /// Every request must carry `Authorization: Bearer <token>` (401 otherwise), except anonymous reads of
    /// `/healthz`, `/livez`, `/readyz` and `/version`. A fresh one by default; the kubeconfig carries it.
    pub token: BearerToken,
    /// The CA that signs the serving certificate; `None` makes a fresh one at start.
    pub ca: Option<CertificateAuthority>,
    /// Events kept per type for watches that resume; older resourceVersions get 410 Gone.
    pub history_limit: usize,
    /// Largest accepted request body (413 above).
    pub max_body_bytes: usize,
    /// How often watches that asked for bookmarks get one.
    pub bookmark_interval: Duration,
    /// Watch duration when the client sets no `timeoutSeconds`.
    pub default_watch_timeout: Duration,
    /// Keep state in this directory: loaded at start, saved shortly after changes and at shutdown.
    pub data_dir: Option<std::path::PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            insecure_http: false,
            token: BearerToken::generate(),
            ca: None,
            history_limit: 1000,
            max_body_bytes: 3 * 1024 * 1024,
            bookmark_interval: Duration::from_secs(5),
            default_watch_timeout: Duration::from_secs(1800),
            data_dir: None,
        }
    }
}

/// State shared by every request.
pub struct Shared {
    store: SharedStore,
    /// The configuration the server runs with.
    pub config: ServerConfig,
    /// Bumped to end every open watch.
    pub close_watches: watch::Sender<u64>,
    open_watches: AtomicUsize,
    /// The address the server listens on (`host:port`), as discovery reports it.
    pub(crate) address: String,
    /// Request counters and injected faults.
    pub faults: Faults,
    /// OpenAPI documents of the latest registry generation.
    pub(crate) openapi: openapi::Cache,
    /// The admission webhook configurations, compiled.
    pub(crate) webhooks: webhook::Cache,
}

impl Shared {
    /// The state of a server about to listen on `address`, over `store`.
    pub(crate) fn new(config: ServerConfig, store: Store, address: String) -> Self {
        let (close_watches, _) = watch::channel(0);
        Shared {
            store: SharedStore::new(store),
            config,
            close_watches,
            open_watches: AtomicUsize::new(0),
            address,
            faults: Faults::default(),
            openapi: openapi::Cache::default(),
            webhooks: webhook::Cache::default(),
        }
    }

    /// The store, locked. A panic while holding the lock does not poison the server.
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock()
    }

    /// The store with its lock, for what needs no more of the server (webhook calls resolving Services).
    pub(crate) fn store(&self) -> &SharedStore {
        &self.store
    }

    pub(crate) fn watch_opened(&self) {
        self.open_watches.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn watch_closed(&self) {
        self.open_watches.fetch_sub(1, Ordering::Relaxed);
    }

    /// How many watches are open.
    pub fn open_watches(&self) -> usize {
        self.open_watches.load(Ordering::Relaxed)
    }
}
