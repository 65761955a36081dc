//! The cluster-autoscaler's targeted scale-down: one MachineDeployment update lowers the replicas and names the
//! machine in `node.machine.sapcloud.io/trigger-deletion-by-mcm`; exactly that machine goes.

use mcm::api::mcm::names::LAST_REPLICA_CHANGE_BY_SCALER;
use mcm::api::mcm::names::PRIORITY_ANNOTATION;
use mcm::api::mcm::names::TRIGGER_DELETION_BY_MCM;
use serde_json::json;

use super::{WAIT, Watch, apis, create, deployment, env_with_class, machines_of, merge, rolling, wait_settled};
use crate::support::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_autoscaler_scale_down_removes_exactly_the_named_machine() {
    let env = env_with_class(0.1).await;
    let apis = apis(&env);
    create(&apis.deployments, deployment("ca", 4, rolling(json!(1), json!(0)))).await;
    wait_settled(&apis, "ca", 4).await;
    let mut names: Vec<String> = machines_of(&apis, "ca").await.into_iter().filter_map(|m| m.metadata.name).collect();
    names.sort();
    // Not the one the deletion order would pick anyway (all are Running; the oldest, then the name, goes first).
    let victim = names[2].clone();

    let chosen = victim.clone();
    let watch = Watch::start(&env, move |all| {
        all.iter().filter(|m| m.metadata.deletion_timestamp.is_some()).find_map(|m| {
            let name = m.metadata.name.clone().unwrap_or_default();
            let priority = m.metadata.annotations.as_ref().and_then(|a| a.get(PRIORITY_ANNOTATION)).cloned();
            (name != chosen || priority.as_deref() != Some("1"))
                .then(|| format!("{name} is being deleted with priority {priority:?}"))
        })
    });
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    merge(
        &apis.deployments,
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
    wait_settled(&apis, "ca", 3).await;
    let (violations, _) = watch.finish();
    assert!(violations.is_empty(), "{violations:?}");
    let left: Vec<String> = machines_of(&apis, "ca").await.into_iter().filter_map(|m| m.metadata.name).collect();
    assert!(!left.contains(&victim), "{left:?}");
    assert_eq!(left.len(), 3);
    // The entry of the deleted machine is pruned.
    wait_until("the trigger annotation to be pruned", WAIT, || async {
        let d = apis.deployments.get("ca").await.ok()?;
        d.metadata.annotations.is_none_or(|a| !a.contains_key(TRIGGER_DELETION_BY_MCM)).then_some(())
    })
    .await;
    env.shutdown().await;
}
