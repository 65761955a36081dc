//! Records the git commit the binary is built from, for `mcm version`, and compiles the out-of-tree driver
//! protocol (proto/mcm/driver/v1/driver.proto) into its gRPC client and server.

use std::process::Command;

fn main() {
    if let Err(e) = driver_protocol() {
        println!("cargo:warning=proto/mcm/driver/v1/driver.proto: {e}");
        std::process::exit(1);
    }
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

/// The driver protocol's messages, client and server. The requests carrying secret data get their own `Debug`
/// (src/providers/grpc/wire.rs), which never prints it.
fn driver_protocol() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/mcm/driver/v1/driver.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_transport(false)
        .skip_debug([".mcm.driver.v1.MachineRequest", ".mcm.driver.v1.ListMachinesRequest"])
        .compile_fds(descriptors)?;
    Ok(())
}
