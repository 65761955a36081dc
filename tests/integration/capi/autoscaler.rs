//! The cluster-autoscaler's targeted scale-down on a CAPI MachineDeployment: one update lowers the replicas and
//! names the machine in `node.machine.sapcloud.io/trigger-deletion-by-mcm`; exactly that machine goes, as in the
//! MCM flavour (the shared MachineDeployment executor waits until the stores show its marks before the MachineSet
//! scales down).

use std::collections::BTreeSet;
use std::time::Duration;

use kube::ResourceExt;
use mcm::api::mcm::names::LAST_REPLICA_CHANGE_BY_SCALER;
use mcm::api::mcm::names::TRIGGER_DELETION_BY_MCM;
use serde_json::json;

use super::{create_deployment, deployment, env, patch_deployment, rolling, wait_running};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_autoscaler_scale_down_removes_exactly_the_named_capi_machine() {
    needs_embedded_server!("lagging watches");
    let (env, capi, _provider) = env().await;
    create_deployment(&capi, deployment("ca", 4, "small", rolling(1, 0))).await;
    let mut names: Vec<String> = wait_running(&capi, "ca", 4).await.iter().map(|m| m.name_any()).collect();
    names.sort();
    // Not the one the deletion order would pick anyway.
    let victim = names[2].clone();
    // Machine notices arrive late, as from a busy server: the MachineSet must still not act before it sees the mark.
    env.embedded().faults().lag_watches("machines", Duration::from_millis(150));
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    patch_deployment(
        &capi,
        "ca",
        json!({
            "metadata": {"annotations": {
                TRIGGER_DELETION_BY_MCM: format!("{victim}~{now}"),
                LAST_REPLICA_CHANGE_BY_SCALER: now,
            }},
            "spec": {"replicas": 3},
        }),
    )
    .await;
    let left: BTreeSet<String> = wait_running(&capi, "ca", 3).await.iter().map(|m| m.name_any()).collect();
    let expected: BTreeSet<String> = names.iter().filter(|n| **n != victim).cloned().collect();
    assert_eq!(left, expected, "the autoscaler named {victim}");
    env.shutdown().await;
}
