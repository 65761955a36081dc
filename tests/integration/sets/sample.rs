//! `mcm dev`'s sample MachineDeployment, through `DevEnvironment` as the binary starts it: 3 Running machines,
//! and a `kubectl patch` of the template rolls them.

use kube::Api;
use kube::api::ListParams;
use mcm::api::mcm::{Machine, MachineDeployment};
use mcm::dev::DevOptions;

use super::{WAIT, available, set_of};
use crate::support::{Kubectl, TempDir, wait_until};

async fn running_in_one_set(machines: &Api<Machine>, deployments: &Api<MachineDeployment>) -> Option<String> {
    let list = machines.list(&ListParams::default().labels("name=workers")).await.ok()?.items;
    let sets: std::collections::BTreeSet<Option<String>> = list.iter().map(set_of).collect();
    let d = deployments.get("workers").await.ok()?;
    let complete = d.status.is_some_and(|s| s.updated_replicas == 3 && s.available_replicas == 3 && s.replicas == 3);
    if list.len() == 3 && list.iter().all(available) && sets.len() == 1 && complete {
        sets.into_iter().next().flatten()
    } else {
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_sample_reaches_3_running_machines_and_a_template_patch_rolls() {
    let dir = TempDir::new("mcm-dev-sample");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        sample: true,
        ..Default::default()
    };
    let (env, _kube) = crate::support::start_dev(options).await;
    let machines: Api<Machine> = Api::namespaced(env.client.clone(), "mcm-sample");
    let deployments: Api<MachineDeployment> = Api::namespaced(env.client.clone(), "mcm-sample");
    let first = wait_until("3 Running sample machines", WAIT, || running_in_one_set(&machines, &deployments)).await;

    let kubectl = Kubectl::new(&env.server);
    let patch = r#"{"spec":{"template":{"metadata":{"labels":{"tier":"patched"}}}}}"#;
    kubectl.run(&["-n", "mcm-sample", "patch", "mcd", "workers", "--type", "merge", "-p", patch]).await;
    let second = wait_until("the sample to roll", WAIT, || async {
        running_in_one_set(&machines, &deployments).await.filter(|s| *s != first)
    })
    .await;
    let rolled = machines.list(&ListParams::default().labels("tier=patched")).await.unwrap().items;
    assert_eq!(rolled.len(), 3, "every machine is from the new template ({second})");
    env.shutdown().await;
}
