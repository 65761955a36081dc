//! Records the git commit the binary is built from, for `mcm version`.

use std::process::Command;

fn main() {
    let commit = std::env::var("MCM_GIT_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| {
        let out = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    });
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .map(|o| o.status.success() && !o.stdout.is_empty())
        .unwrap_or(false);
    let commit = match commit {
        Some(c) if dirty => format!("{c}-dirty"),
        Some(c) => c,
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=MCM_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-env-changed=MCM_GIT_COMMIT");
    // A new commit moves HEAD's ref; checking out a branch rewrites HEAD itself.
    for path in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
