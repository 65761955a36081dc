//! What an operator sees of a running `mcm run` besides the metrics ([`crate::metrics`]): the `/metrics`,
//! `/healthz` and `/readyz` server ([`serve`]), structured logs ([`logging`]), client-side rate limits
//! ([`RateLimitLayer`]) and leader election on a Lease ([`leader`]).
//!
//! Imports `api`, `providers` and `metrics`; nothing below `cli`/`run` imports it.

pub mod leader;
pub mod logging;
mod ratelimit;
mod server;

pub use ratelimit::{RateLimit, RateLimitLayer};
pub use server::{Health, ServeError, serve};
