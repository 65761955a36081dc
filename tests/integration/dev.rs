//! `mcm dev` as a user runs it: the binary, a kubeconfig, the real kubectl, Ctrl-C.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::Kubectl;

#[tokio::test]
async fn mcm_dev_serves_kubectl_and_stops_on_ctrl_c() {
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

    let kubectl = Kubectl::for_kubeconfig(&kubeconfig);
    let crds = kubectl.run(&["get", "crds", "-o", "name"]).await;
    assert!(crds.contains("customresourcedefinition.apiextensions.k8s.io/machines.machine.sapcloud.io"), "{crds}");
    kubectl.run(&["get", "nodes"]).await;
    let sample = kubectl.run(&["-n", "mcm-sample", "get", "mcd,mcc", "-o", "name"]).await;
    assert_eq!(
        sample.lines().collect::<Vec<_>>(),
        ["machinedeployment.machine.sapcloud.io/workers", "machineclass.machine.sapcloud.io/inmemory-small"],
        "the sample is applied"
    );

    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    assert_eq!(rest.last().map(String::as_str), Some("mcm dev: stopped"), "{rest:?}");
    std::fs::remove_dir_all(dir).unwrap();
}
