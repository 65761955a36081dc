//! Our admission webhooks as a user meets them: `mcm dev` (the binary) serves and registers them, the real kubectl
//! applies objects, the embedded API server calls the webhooks (docs/infrastructure-provider.md#security).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::Kubectl;

const TEMPLATE: &str = r#"apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: MCMMachineTemplate
metadata:
  name: NAME
  namespace: capi-sample
spec:
  template:
    spec:
      EXTRA
      class:
        name: CLASS
"#;

const CLASS: &str = r#"apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineClass
metadata:
  name: NAME
  namespace: capi-sample
provider: PROVIDER
providerSpec:
  SPEC
"#;

/// `mcm dev` with its sample, until its ready line; the child and its kubeconfig.
fn start_dev(dir: &std::path::Path) -> (std::process::Child, std::path::PathBuf) {
    let kubeconfig = dir.join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .args(["dev", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        let line = lines.next().expect("mcm dev printed its ready line").unwrap();
        if line.starts_with("mcm dev ready:") {
            break;
        }
        seen.push(line);
        assert!(Instant::now() < deadline, "mcm dev did not get ready: {seen:?}");
    }
    assert!(seen.iter().any(|l| l.contains("serving the admission webhooks on https://127.0.0.1:")), "{seen:?}");
    // Keep reading stdout so that mcm dev never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    (child, kubeconfig)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_against_mcm_dev_goes_through_our_webhooks() {
    let dir = std::env::temp_dir().join(format!("mcm-webhooks-test-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut child, kubeconfig) = start_dev(&dir);
    let kubectl = Kubectl::for_kubeconfig(&kubeconfig);
    let apply = |name: &str, text: String| {
        let file = kubectl.file(&format!("{name}.yaml"), &text);
        let path = file.to_str().unwrap().to_string();
        let kubectl = &kubectl;
        async move { kubectl.try_run(&["apply", "-f", &path]).await }
    };
    let template = |name: &str, class: &str, extra: &str| {
        TEMPLATE.replace("NAME", name).replace("CLASS", class).replace("EXTRA", extra)
    };

    // (a) A template naming a VM: every Machine cloned from it would claim that VM.
    let (ok, _, stderr) = apply("adopt", template("adopt", "small", "providerID: inmemory:///vm-1")).await;
    assert!(!ok, "a template with a providerID is refused");
    assert!(
        // kubectl prints a 422 Invalid answer with its causes (as for controller-runtime's webhooks).
        stderr.contains(
            "The MCMMachineTemplate \"adopt\" is invalid: spec.template.spec.providerID: Forbidden: cannot be set in \
             a template: every Machine cloned from it would claim the same VM"
        ),
        "{stderr}"
    );

    // (d) A valid template is admitted and defaulted: its class reference names MachineClass of machine.sapcloud.io.
    let (ok, stdout, stderr) = apply("workers", template("workers", "small", "failureDomain: local-a")).await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains("mcmmachinetemplate.infrastructure.cluster.x-k8s.io/workers created"), "{stdout}");
    let got: Value = serde_json::from_str(
        &kubectl.run(&["-n", "capi-sample", "get", "mcmmachinetemplates", "workers", "-o", "json"]).await,
    )
    .unwrap();
    assert_eq!(
        got["spec"]["template"]["spec"]["class"],
        serde_json::json!({"apiGroup": "machine.sapcloud.io", "kind": "MachineClass", "name": "small"})
    );

    // (b) Its spec cannot change; a rollout takes a new template.
    let (ok, _, stderr) = apply("workers-2", template("workers", "bigger", "failureDomain: local-a")).await;
    assert!(!ok, "a changed template spec is refused");
    assert!(
        stderr.contains(
            "The MCMMachineTemplate \"workers\" is invalid: spec.template.spec: Forbidden: MCMMachineTemplate spec is \
             immutable"
        ),
        "{stderr}"
    );
    let (ok, _, stderr) = apply("labelled", {
        let mut text = template("workers", "small", "failureDomain: local-a");
        text = text.replace("  namespace: capi-sample\n", "  namespace: capi-sample\n  labels: {tier: workers}\n");
        text
    })
    .await;
    assert!(ok, "metadata may change: {stderr}");

    // (c) A MachineClass whose providerSpec the driver's parser refuses: the parser's message, at apply time.
    let class = |name: &str, provider: &str, spec: &str| {
        CLASS.replace("NAME", name).replace("PROVIDER", provider).replace("SPEC", spec)
    };
    let (ok, _, stderr) = apply("typo", class("typo", "InMemory", "machinType: m.small")).await;
    assert!(!ok, "an unknown providerSpec field is refused");
    assert!(
        stderr.contains(
            "The MachineClass \"typo\" is invalid: providerSpec: Invalid value: providerSpec: unknown field \"machinType\""
        ),
        "{stderr}"
    );
    if cfg!(feature = "aws") {
        let spec = "ami: ami-1\n  region: eu-west-1\n  machineType: 5\n  iam: {name: nodes}\n  tags: {kubernetes.io/cluster/c: \"1\", kubernetes.io/role/node: \"1\"}";
        let (ok, _, stderr) = apply("aws", class("aws", "AWS", spec)).await;
        assert!(!ok, "AWS machineType as a number is refused");
        assert!(stderr.contains("machineType") && stderr.contains("must be a string"), "{stderr}");
    }
    let (ok, stdout, stderr) = apply(
        "good",
        class(
            "good",
            "InMemory",
            "machineType: m.small\n  tags: {kubernetes.io/cluster/c: \"1\", kubernetes.io/role/node: \"1\"}",
        ),
    )
    .await;
    assert!(ok, "a valid class is admitted: {stderr}");
    assert!(stdout.contains("machineclass.machine.sapcloud.io/good created"), "{stdout}");

    // The controllers work under the webhooks: the sample's machines get their providerID (set once) and the
    // MachineClass its finalizer.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ids = kubectl
            .run(&["-n", "capi-sample", "get", "mcmmachines", "-o", "jsonpath={.items[*].spec.providerID}"])
            .await;
        if ids.split_whitespace().filter(|id| id.starts_with("inmemory://")).count() == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "the sample's MCMMachines were not provisioned: {ids:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(dir);
}
