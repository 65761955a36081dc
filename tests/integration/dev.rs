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

#[tokio::test]
async fn dev_building_blocks_apply_the_sample_and_turn_vms_into_ready_nodes() {
    use k8s_openapi::api::core::v1::Node;
    use kube::Api;
    use mcm::api::mcm::{MachineClass, MachineDeployment};
    use mcm::dev::{DevEnvironment, DevOptions};
    use mcm::providers::{ClassInfo, MachineInfo, MachineRequest};

    let dir = crate::support::TempDir::new("mcm-dev-env");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        data_dir: None,
        apiserver_only: false,
        sample: true,
        ..Default::default()
    };
    let env = DevEnvironment::start(&options, |_| {}).await.unwrap();
    let client = env.client.clone();
    Api::<MachineDeployment>::namespaced(client.clone(), "mcm-sample").get("workers").await.unwrap();
    let class = Api::<MachineClass>::namespaced(client.clone(), "mcm-sample").get("inmemory-small").await.unwrap();

    let request = MachineRequest {
        machine: MachineInfo { name: "probe-vm".into(), namespace: "mcm-sample".into(), ..Default::default() },
        class: ClassInfo {
            name: "inmemory-small".into(),
            provider: class.spec.provider.clone().unwrap(),
            provider_spec: class.spec.provider_spec.clone(),
            node_template: class.spec.node_template.clone(),
        },
        ..Default::default()
    };
    let driver = env.drivers.get("InMemory").unwrap();
    let created = driver.create_machine(&request).await.unwrap();
    let nodes: Api<Node> = Api::all(client);
    let node = crate::support::wait_until("the VM's Node to be Ready", Duration::from_secs(30), || async {
        let node = nodes.get_opt(&created.node_name).await.unwrap()?;
        let ready = node.status.as_ref()?.conditions.as_ref()?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(node)
    })
    .await;
    assert_eq!(node.spec.unwrap().provider_id.as_deref(), Some(created.provider_id.as_str()));
    assert_eq!(node.metadata.labels.unwrap()["node.kubernetes.io/instance-type"], "m.small");
    env.shutdown().await;
}
