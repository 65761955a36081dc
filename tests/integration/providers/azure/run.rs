//! The built `mcm run` binary with `--log-level trace` (no `RUST_LOG`) creating a VM on the ARM fake: the SDK's
//! targets are held at info, so neither the bearer token the fake issued nor the client secret reaches stderr.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::fake::{ArmFake, CLIENT_SECRET, Kind, TOKEN};
use super::machines::azure_class;
use crate::run::{RunEnv, WAIT};
use crate::support::wait_until;

/// What azure_core 0.21 logs credentials under (at trace level).
const SDK_TARGETS: &[&str] = &["azure_core", "azure_identity", "azure_mgmt_compute", "azure_mgmt_network"];

/// `text` without ANSI colour sequences (`ESC [ ... m`), as the text format writes them.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The level word of a text-format line (`<timestamp> <LEVEL> ...`).
fn level(line: &str) -> Option<&str> {
    line.split_whitespace().nth(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcm_run_at_trace_level_never_logs_the_azure_token_or_secret() {
    let arm = ArmFake::start().await;
    let env = RunEnv::start(0.2).await;
    azure_class(&env.env, &arm).await;
    env.env.machine("traced", "azure").await;

    let mut run = env.spawn("trace", &["--log-level", "trace"]);
    wait_until("the fake to issue a token, VM traced to exist and the driver to say so", WAIT, || async {
        let token_served = arm.requests().iter().any(|r| r.path.ends_with("/oauth2/v2.0/token") && r.status == 200);
        let authorized = arm.requests().iter().any(|r| r.authorization.as_deref() == Some(&format!("Bearer {TOKEN}")));
        // The VM exists in the fake before the driver's long-running operation returns and logs it.
        let logged = run.logs().contains("create: VM created");
        (token_served && authorized && arm.get(Kind::Vm, "traced").is_some() && logged).then_some(())
    })
    .await;
    run.signal("TERM");
    assert!(run.wait_exit(WAIT).await, "exits 0 on SIGTERM");

    let stderr = strip_ansi(&run.logs());
    let lines: Vec<&str> = stderr.lines().collect();
    // Trace level is on, and our own crate's lines are there (the Azure driver created the VM).
    assert!(lines.iter().any(|l| level(l) == Some("TRACE")), "no TRACE line at --log-level trace:\n{stderr}");
    assert!(
        lines.iter().any(|l| l.contains("mcm::providers::azure") && l.contains("create: VM created")),
        "the driver's own lines are missing:\n{stderr}"
    );
    for (what, value) in [
        ("the bearer token", TOKEN.to_string()),
        ("the client secret", CLIENT_SECRET.to_string()),
        ("the client secret (base64)", BASE64.encode(CLIENT_SECRET)),
    ] {
        let shown: Vec<&&str> = lines.iter().filter(|l| l.contains(&value)).take(5).collect();
        assert!(shown.is_empty(), "{what} {value:?} shows in stderr: {shown:#?}");
    }
    // The SDK's targets say nothing below info.
    let sdk_debug: Vec<&&str> = lines
        .iter()
        .filter(|l| matches!(level(l), Some("DEBUG" | "TRACE")) && SDK_TARGETS.iter().any(|t| l.contains(t)))
        .collect();
    assert!(sdk_debug.is_empty(), "SDK lines below info: {:#?}", &sdk_debug[..sdk_debug.len().min(5)]);
    env.env.shutdown().await;
}
