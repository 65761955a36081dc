//! The one integration-test binary (every extra binary relinks every dependency): one module per area.

// Test helpers outside `#[test]` functions may panic: a panic is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// Skips the calling test under `MCM_TEST_APISERVER=kube` (saying so) when it needs what only the embedded API
/// server offers: fault injection, request counters, closing watches, its process-local state.
macro_rules! needs_embedded_server {
    ($why:literal) => {
        if crate::kube::enabled() {
            eprintln!("SKIPPED under MCM_TEST_APISERVER=kube: this test needs {}", $why);
            return;
        }
    };
}

mod apiserver;
mod capi;
mod chaos;
mod cli;
mod dev;
mod drain;
mod fuzz_corpora;
mod infra;
mod kube;
mod machines;
mod migrate;
mod node_agent;
mod packaging;
mod providers;
mod run;
mod scenarios;
mod sets;
mod status;
mod support;
mod upstream;
mod webhooks;
