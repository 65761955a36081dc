//! The HTTP endpoints of `mcm run`: `/metrics` (Prometheus text), `/healthz` (200 while the process runs) and
//! `/readyz` (503 until the caches have synced and leadership is known, then 200).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;

/// What `/readyz` answers from. Clones share the flags.
#[derive(Clone, Debug, Default)]
pub struct Health {
    caches_synced: Arc<AtomicBool>,
    leadership_known: Arc<AtomicBool>,
}

impl Health {
    /// Records whether the caches have their first lists.
    pub fn set_caches_synced(&self, synced: bool) {
        self.caches_synced.store(synced, Ordering::Release);
    }

    /// Records that this process knows whether it leads (it won the lease, or saw another holder).
    pub fn set_leadership_known(&self, known: bool) {
        self.leadership_known.store(known, Ordering::Release);
    }

    /// Whether `/readyz` answers 200, and if not, why.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if !self.caches_synced.load(Ordering::Acquire) {
            Err("caches not synced")
        } else if !self.leadership_known.load(Ordering::Acquire) {
            Err("leadership not known")
        } else {
            Ok(())
        }
    }
}

/// The endpoints could not be served.
#[derive(Debug, thiserror::Error)]
#[error("could not listen on {addr} for {what}: {source}")]
pub struct ServeError {
    /// The address.
    pub addr: SocketAddr,
    /// `metrics` or `health probes`.
    pub what: &'static str,
    /// The cause.
    pub source: std::io::Error,
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    health: Health,
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.metrics.encode())
}

async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    match state.health.readiness() {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    }
}

/// Serves `/metrics` on `metrics_addr` and `/healthz` + `/readyz` on `health_addr` (one listener when they are
/// equal; `None` leaves that endpoint off). Returns the bound addresses (port 0 picks one) and the server tasks.
pub async fn serve(
    metrics_addr: Option<SocketAddr>,
    health_addr: Option<SocketAddr>,
    metrics_: Metrics,
    health: Health,
) -> Result<(Option<SocketAddr>, Option<SocketAddr>, Vec<JoinHandle<()>>), ServeError> {
    let state = AppState { metrics: metrics_, health };
    let metrics_routes = Router::new().route("/metrics", get(metrics));
    let health_routes = Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz));
    let mut tasks = Vec::new();
    let bind = |addr: SocketAddr, what: &'static str| async move {
        tokio::net::TcpListener::bind(addr).await.map_err(|source| ServeError { addr, what, source })
    };
    let spawn = |listener: tokio::net::TcpListener, router: Router<AppState>, state: AppState| {
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router.with_state(state)).await {
                tracing::error!(error = %e, "metrics/health server stopped");
            }
        })
    };
    match (metrics_addr, health_addr) {
        (Some(m), Some(h)) if m == h => {
            let listener = bind(m, "metrics and health probes").await?;
            let bound = listener.local_addr().ok();
            tasks.push(spawn(listener, metrics_routes.merge(health_routes), state));
            Ok((bound, bound, tasks))
        }
        (m, h) => {
            let mut bound_m = None;
            let mut bound_h = None;
            if let Some(m) = m {
                let listener = bind(m, "metrics").await?;
                bound_m = listener.local_addr().ok();
                tasks.push(spawn(listener, metrics_routes, state.clone()));
            }
            if let Some(h) = h {
                let listener = bind(h, "health probes").await?;
                bound_h = listener.local_addr().ok();
                tasks.push(spawn(listener, health_routes, state));
            }
            Ok((bound_m, bound_h, tasks))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_needs_caches_and_leadership() {
        let health = Health::default();
        assert_eq!(health.readiness(), Err("caches not synced"));
        health.set_caches_synced(true);
        assert_eq!(health.readiness(), Err("leadership not known"));
        health.set_leadership_known(true);
        assert_eq!(health.readiness(), Ok(()));
    }
}
