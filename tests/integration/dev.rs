//! `mcm dev` as a user runs it: the binary, a kubeconfig, the real kubectl, Ctrl-C.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs kubectl against a kubeconfig with a private cache directory.
pub fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let cache = kubeconfig.with_extension("kubectl-cache");
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(&cache)
        .args(args)
        .output()
        .expect("kubectl is installed (.ci/run installs Debian's kubernetes-client)");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn mcm_dev_serves_kubectl_and_stops_on_ctrl_c() {
    let dir = std::env::temp_dir().join(format!("mcm-dev-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .args(["dev", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let line = lines.next().expect("mcm dev printed its ready line").unwrap();
        if line.starts_with("mcm dev ready:") {
            break line;
        }
        assert!(Instant::now() < deadline, "mcm dev did not get ready");
    };
    assert!(ready.contains(kubeconfig.file_name().unwrap().to_str().unwrap()), "{ready}");

    let (ok, stdout, stderr) = kubectl(&kubeconfig, &["get", "crds", "-o", "name"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("customresourcedefinition.apiextensions.k8s.io/machines.machine.sapcloud.io"), "{stdout}");
    let (ok, _, stderr) = kubectl(&kubeconfig, &["get", "nodes"]);
    assert!(ok, "{stderr}");

    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    assert_eq!(rest.last().map(String::as_str), Some("mcm dev: stopped"), "{rest:?}");
    std::fs::remove_dir_all(dir).unwrap();
}
