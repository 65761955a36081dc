//! The one integration-test binary (every extra binary relinks every dependency): one module per area.

// Test helpers outside `#[test]` functions may panic: a panic is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod apiserver;
mod capi;
mod cli;
mod dev;
mod drain;
mod infra;
mod machines;
mod migrate;
mod packaging;
mod providers;
mod run;
mod scenarios;
mod sets;
mod support;
mod upstream;
