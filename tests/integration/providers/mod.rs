//! Cloud drivers through the `Driver` trait: the conformance suite, and each driver against its local fake.

#[cfg(feature = "aws")]
mod aws;
#[cfg(feature = "aws")]
mod aws_machines;
#[cfg(feature = "gcp")]
mod gcp;
#[cfg(feature = "gcp")]
mod gcp_fake;
#[cfg(feature = "gcp")]
mod gcp_machines;
mod inmemory;
