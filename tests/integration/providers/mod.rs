//! Cloud drivers through the `Driver` trait: the conformance suite, and each driver against its local fake.

#[cfg(feature = "aws")]
mod aws;
#[cfg(feature = "aws")]
mod aws_machines;
#[cfg(feature = "azure")]
mod azure;
mod inmemory;
