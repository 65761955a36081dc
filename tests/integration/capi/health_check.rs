//! MachineHealthCheck on `mcm dev`'s sample (real infrastructure controllers and in-memory cloud): a Machine failing
//! a checked condition past its timeout is marked (`HealthCheckSucceeded` False, `OwnerRemediated` False) and its
//! MachineSet deletes and replaces it; with more unhealthy Machines than `triggerIf` allows, core's short circuit
//! marks them but remediates none.

use std::collections::BTreeSet;

use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use mcm::api::capi::{Machine, MachineHealthCheck};
use mcm::dev::DevOptions;
use serde_json::json;

use super::{WAIT, condition};
use crate::support::{TempDir, wait_until};

const NS: &str = "capi-sample";

fn running(m: &Machine) -> bool {
    m.metadata.deletion_timestamp.is_none()
        && m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && condition(m, "Ready").is_some_and(|(s, _)| s == "True")
}

/// Seconds a failing `DiskHealthy` condition is tolerated. Long enough that two machines marked one after the other
/// (with the same transition time) are seen unhealthy together: with 1 s, the first one's time (truncated to the
/// second) could run out before the second was marked, and the check rightly remediated it alone.
const DISK_TIMEOUT_SECONDS: u64 = 5;

/// Now, as a condition's `lastTransitionTime`.
fn transition_time() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Marks machine `name` with a failing `DiskHealthy` condition (a condition nothing of ours writes) since `now`, as
/// a tool would: the list written whole, guarded by the version read, read again after a conflict.
async fn fail_disk(machines: &Api<Machine>, name: &str, now: &str) {
    for _ in 0..20 {
        let m = machines.get(name).await.unwrap();
        let version = m.resource_version();
        let mut conditions = m.status.and_then(|s| s.conditions).unwrap_or_default();
        conditions.push(
            serde_json::from_value(json!({
                "type": "DiskHealthy", "status": "False", "reason": "DiskFull", "message": "", "lastTransitionTime": now,
            }))
            .unwrap(),
        );
        let patch =
            Patch::Merge(json!({"metadata": {"resourceVersion": version}, "status": {"conditions": conditions}}));
        match machines.patch_status(name, &PatchParams::default(), &patch).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("marking {name}: {e}"),
        }
    }
    panic!("marking {name}: conflicts 20 times in a row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_machine_is_replaced_unless_too_many_are() {
    let dir = TempDir::new("mcm-capi-health-check");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        ..Default::default()
    };
    let (env, _kube) = crate::support::start_dev(options).await;
    let machines: Api<Machine> = Api::namespaced(env.client.clone(), NS);
    let checks: Api<MachineHealthCheck> = Api::namespaced(env.client.clone(), NS);
    let list = || async { machines.list(&ListParams::default()).await.unwrap().items };
    let first = wait_until("3 Running sample machines", WAIT, || async {
        let all = list().await;
        (all.len() == 3 && all.iter().all(running)).then_some(all)
    })
    .await;

    let mhc: MachineHealthCheck = serde_json::from_value(json!({
        "metadata": {"name": "workers"},
        "spec": {
            "clusterName": "sample",
            "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": "workers"}},
            "checks": {
                "nodeStartupTimeoutSeconds": 600,
                "unhealthyMachineConditions": [
                    {"type": "DiskHealthy", "status": "False", "timeoutSeconds": DISK_TIMEOUT_SECONDS},
                ],
            },
            "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": 1}},
        },
    }))
    .unwrap();
    checks.create(&PostParams::default(), &mhc).await.unwrap();
    wait_until("the health check counting 3 healthy machines", WAIT, || async {
        let s = checks.get("workers").await.ok()?.status?;
        (s.expected_machines == Some(3) && s.current_healthy == Some(3) && s.targets.as_ref()?.len() == 3).then_some(())
    })
    .await;

    // One unhealthy machine: marked, then deleted and replaced by its MachineSet.
    let victim = first[0].name_any();
    fail_disk(&machines, &victim, &transition_time()).await;
    let replaced = wait_until("the unhealthy machine replaced, 3 Running", WAIT, || async {
        let all = list().await;
        let names: BTreeSet<String> = all.iter().map(|m| m.name_any()).collect();
        (all.len() == 3 && all.iter().all(running) && !names.contains(&victim)).then_some(all)
    })
    .await;
    let vms: Vec<String> = env.cloud.live_vms().iter().map(|vm| vm.machine_name.clone()).collect();
    assert!(!vms.contains(&victim), "the unhealthy machine's VM was deleted");
    let marked = env.client.clone();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(marked, NS);
    let seen = events.list(&ListParams::default()).await.unwrap().items;
    assert!(
        seen.iter().any(|e| e.reason.as_deref() == Some("MachineMarkedUnhealthy")
            && e.involved_object.name.as_deref() == Some(victim.as_str())),
        "core's MachineMarkedUnhealthy event on {victim}"
    );

    // Two unhealthy machines while one is allowed: both marked, none remediated.
    let (a, b) = (replaced[0].name_any(), replaced[1].name_any());
    let since = transition_time();
    fail_disk(&machines, &a, &since).await;
    fail_disk(&machines, &b, &since).await;
    wait_until("remediation restricted, both machines marked", WAIT, || async {
        let mhc = checks.get("workers").await.ok()?;
        let restricted = mhc
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "RemediationAllowed" && c.status == "False" && c.reason == "TooManyUnhealthy");
        let all = list().await;
        let marked = all
            .iter()
            .filter(|m| [&a, &b].contains(&&m.name_any()))
            .filter(|m| condition(m, "HealthCheckSucceeded").is_some_and(|(s, _)| s == "False"))
            .count();
        (restricted && marked == 2).then_some(())
    })
    .await;
    let all = list().await;
    assert_eq!(all.len(), 3);
    for m in all.iter().filter(|m| [&a, &b].contains(&&m.name_any())) {
        assert!(m.metadata.deletion_timestamp.is_none(), "{} is not remediated", m.name_any());
        assert_ne!(condition(m, "OwnerRemediated").map(|c| c.0), Some("False".to_string()));
    }
}
