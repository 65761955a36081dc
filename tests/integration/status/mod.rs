//! `mcm status` (issue #28) as a user runs it: golden renderings of fixed object sets of both flavours (healthy,
//! frozen, stuck drain, failed class, rolling update), read from files (`-f`) and from the embedded API server, one
//! `--watch`, and the binary as a kubectl plugin found by the real `kubectl plugin list`.
//!
//! The fixtures (`fixtures/*.yaml`) are judged at [`NOW`] (`--now`, a hidden flag for tests), so every age and
//! deadline in the goldens (`golden/*`) is fixed. `MCM_UPDATE_GOLDEN=1 cargo test --test integration status::`
//! rewrites the goldens from the current output (review the diff before committing it).

mod golden;
mod live;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The time every fixture is judged at.
pub const NOW: &str = "2025-06-01T12:00:00Z";

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration/status")
}

/// The path of fixture `name` (without `.yaml`).
pub fn fixture(name: &str) -> PathBuf {
    dir().join("fixtures").join(format!("{name}.yaml"))
}

/// Compares `actual` with golden file `name`, or writes it under `MCM_UPDATE_GOLDEN`.
pub fn check_golden(name: &str, actual: &str) {
    let path = dir().join("golden").join(name);
    if std::env::var_os("MCM_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (MCM_UPDATE_GOLDEN=1 writes it)", path.display()));
    pretty_assertions::assert_eq!(expected, actual, "golden {name} (MCM_UPDATE_GOLDEN=1 rewrites it)");
}

/// The golden file `name` as it is on disk.
pub fn golden(name: &str) -> String {
    std::fs::read_to_string(dir().join("golden").join(name)).unwrap()
}

/// Runs `mcm status ARGS`: success, standard output, standard error.
pub fn mcm_status(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .arg("status")
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run mcm");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// [`mcm_status`] for async tests (the embedded API server runs on the test's runtime, so nothing may block it).
pub async fn mcm_status_async(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcm"))
        .arg("status")
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run mcm");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}
