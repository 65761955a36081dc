//! A client-side rate limit for the kube client (`--kube-api-qps`, `--kube-api-burst`): a token bucket
//! (governor's GCRA) as a tower layer, so every request of a client waits for a token before it is sent.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;

use governor::DefaultDirectRateLimiter;

/// Queries per second and burst, as client-go takes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Sustained requests per second; 0 or less disables the limit.
    pub qps: f64,
    /// Requests that may go at once after a quiet spell (at least 1).
    pub burst: u32,
}

/// The tower layer; clones share one bucket.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
}

impl RateLimitLayer {
    /// A layer enforcing `limit` (or nothing when `qps` is not positive).
    pub fn new(limit: RateLimit) -> Self {
        RateLimitLayer { limiter: crate::providers::limit::token_bucket(limit.qps, limit.burst).map(Arc::new) }
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RateLimited { inner, limiter: self.limiter.clone(), waiting: None, permitted: false }
    }
}

/// A service that is ready only once a token is taken (kube's client drives it through a buffer, so requests wait
/// in line for tokens).
pub struct RateLimited<S> {
    inner: S,
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
    waiting: Option<BoxFuture<'static, ()>>,
    permitted: bool,
}

impl<S> std::fmt::Debug for RateLimited<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimited").field("permitted", &self.permitted).finish_non_exhaustive()
    }
}

impl<S, R> tower::Service<R> for RateLimited<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.permitted {
            if let Some(limiter) = &self.limiter {
                let waiting = self.waiting.get_or_insert_with(|| {
                    let limiter = limiter.clone();
                    Box::pin(async move { limiter.until_ready().await })
                });
                if waiting.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.waiting = None;
            }
            self.permitted = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.permitted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tower::{Service, ServiceExt};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_goes_at_once_then_qps() {
        let layer = RateLimitLayer::new(RateLimit { qps: 10.0, burst: 3 });
        let mut service = tower::Layer::layer(&layer, tower::service_fn(|()| async { Ok::<_, ()>(()) }));
        let start = tokio::time::Instant::now();
        for _ in 0..3 {
            service.ready().await.unwrap().call(()).await.unwrap();
        }
        // governor keeps its own clock, so paused tokio time cannot measure it; the bucket is the oracle.
        assert!(layer.limiter.as_ref().unwrap().check().is_err(), "the burst is spent");
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[test]
    fn zero_qps_disables() {
        assert!(RateLimitLayer::new(RateLimit { qps: 0.0, burst: 5 }).limiter.is_none());
        assert!(RateLimitLayer::new(RateLimit { qps: f64::NAN, burst: 5 }).limiter.is_none());
        assert!(RateLimitLayer::new(RateLimit { qps: 20.0, burst: 0 }).limiter.is_some());
    }
}
