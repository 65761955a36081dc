//! `templates/cluster-template-inmemory.yaml`, its variables substituted as clusterctl would, applied with the real
//! kubectl to `mcm dev`: the CAPI core mode and the infrastructure controllers bring its workers to Running.

use std::collections::BTreeMap;

use mcm::dev::DevOptions;

use super::sample::wait_running_from;
use crate::packaging::{root, substitute};
use crate::support::{Kubectl, TempDir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inmemory_cluster_template_gets_running_machines_in_mcm_dev() {
    let dir = TempDir::new("mcm-dev-template");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        sample: false,
        ..Default::default()
    };
    let (env, _kube) = crate::support::start_dev(options).await;
    let kubectl = Kubectl::new(&env.server);

    let template = std::fs::read_to_string(root().join("templates/cluster-template-inmemory.yaml")).unwrap();
    let values: BTreeMap<&str, &str> = [
        ("CLUSTER_NAME", "demo"),
        ("NAMESPACE", "demo-ns"),
        ("KUBERNETES_VERSION", "v1.34.1"),
        ("WORKER_MACHINE_COUNT", "2"),
        ("INMEMORY_BOOT_SECONDS", "0.2"),
    ]
    .into();
    // The namespace first, as a user would create it (clusterctl does not).
    let namespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo-ns\n---\n";
    let manifest = kubectl.file("demo.yaml", &format!("{namespace}{}", substitute(&template, &values)));
    kubectl.run(&["apply", "-f", manifest.to_str().unwrap()]).await;

    let machines = wait_running_from(&kubectl, "demo-ns", 2, "demo-md-0").await;
    assert_eq!(machines.len(), 2);
    let cluster = kubectl
        .run(&["-n", "demo-ns", "get", "clusters.cluster.x-k8s.io", "demo", "-o", "jsonpath={.status.phase}"])
        .await;
    assert_eq!(cluster, "Provisioned");
    env.shutdown().await;
}
