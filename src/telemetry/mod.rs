//! What an operator sees of a running `mcm run`: the metrics registry ([`Metrics`]), the metered driver wrapper
//! ([`MeteredDriver`]), the `/metrics`, `/healthz` and `/readyz` server ([`serve`]), structured logs
//! ([`logging`]), client-side rate limits ([`RateLimitLayer`]) and leader election on a Lease ([`leader`]).
//!
//! Imports `api`, `providers` and `controllers` (for the frozen gauge's name); nothing below `cli`/`run` imports it.

mod driver;
pub mod leader;
pub mod logging;
mod metrics;
mod objects;
mod ratelimit;
mod server;

pub use driver::{MeteredDriver, metered};
pub use metrics::{CloudMetrics, HistogramFamily, Metrics};
pub use objects::ObjectMetrics;
pub use ratelimit::{RateLimit, RateLimitLayer};
pub use server::{Health, ServeError, serve};
