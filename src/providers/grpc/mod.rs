//! Out-of-tree drivers: the gRPC protocol of `proto/mcm/driver/v1/driver.proto` (MCM's six driver calls and its
//! machine codes), the [`GrpcDriver`] client that `mcm run --driver PROVIDER=ENDPOINT` registers for a provider,
//! and [`DriverServe`], which serves any [`Driver`](crate::providers::Driver) (`mcm driver serve`).
//!
//! Secret data crosses the protocol on each call, so endpoints are Unix sockets or loopback TCP only
//! ([`DriverEndpoint`]) and the generated requests print no secret values (`wire.rs`).

mod client;
mod endpoint;
mod server;
pub(crate) mod wire;

/// The protocol's generated messages, client and server.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("mcm.driver.v1");
}

pub use client::{CALL_TIMEOUT, GrpcDriver};
pub use endpoint::{DriverEndpoint, DriverRoute, EndpointError};
pub use server::DriverServe;
pub use wire::MACHINE_CODE_TRAILER;
