//! Machine preservation (`docs/machine-lifecycle.md` "Preservation"): the Node's or Machine's
//! `node.machine.sapcloud.io/preserve`, the marks it sets and removes, the MachineSet keeping a preserved Failed
//! machine until its expiry, auto-preservation, and objects as MCM leaves them.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, Patch, PatchParams};
use mcm::api::mcm::{Machine, MachinePhase};
use serde_json::{Value, json};

use super::{Env, WAIT, fast_options, phase_of};
use crate::sets::{apis, create, deployment, machines_of, rolling};
use crate::support::wait_until;

const PRESERVE: &str = "node.machine.sapcloud.io/preserve";
const LAST_APPLIED: &str = "node.machine.sapcloud.io/last-applied-node-preserve-value";
const CA: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
const CA_BY_MCM: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm";
const TAINT: &str = "node.machine.sapcloud.io/preserved";

fn expiry(m: &Machine) -> Option<jiff::Timestamp> {
    Some(m.status.as_ref()?.current_status.as_ref()?.preserve_expiry_time.as_ref()?.0)
}

fn annotation<'a>(meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, k: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(k).map(String::as_str)
}

/// The Node's Preserved condition: (status, reason, message).
fn preserved(n: &Node) -> Option<(String, String, String)> {
    let c = n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Preserved")?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

fn tainted(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| t.iter().any(|t| t.key == TAINT))
}

fn node_of(m: &Machine) -> String {
    m.metadata.labels.as_ref().and_then(|l| l.get("node")).cloned().expect("node label")
}

async fn annotate_node(env: &Env, node: &str, value: Value) {
    let patch = json!({"metadata": {"annotations": {PRESERVE: value}}});
    env.nodes().patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

/// Every preservation mark is gone from the machine and its Node (the condition says it stopped).
fn unmarked(m: &Machine, n: &Node) -> bool {
    expiry(m).is_none()
        && annotation(&m.metadata, PRESERVE).is_none()
        && annotation(&m.metadata, LAST_APPLIED).is_none()
        && annotation(&n.metadata, CA).is_none()
        && annotation(&n.metadata, CA_BY_MCM).is_none()
        && !tainted(n)
        && preserved(n).is_some_and(|(s, r, _)| s == "False" && r == "Preservation stopped.")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preserve_now_on_a_running_machines_node_marks_it_until_the_annotation_goes() {
    let env = Env::start(fast_options()).await;
    env.class("small", json!({})).await;
    env.machine("keep", "small").await;
    let running = env.wait_phase("keep", MachinePhase::Running, WAIT).await;
    let node = node_of(&running);
    let started = jiff::Timestamp::now();
    annotate_node(&env, &node, json!("now")).await;

    let (m, n) = wait_until("the machine preserved", WAIT, || async {
        let m = env.machines().get("keep").await.ok()?;
        let n = env.nodes().get(&node).await.ok()?;
        (expiry(&m).is_some()
            && preserved(&n).is_some_and(|(s, _, _)| s == "True")
            && annotation(&m.metadata, LAST_APPLIED).is_some())
        .then_some((m, n))
    })
    .await;
    // The default timeout, 96h.
    let until = expiry(&m).unwrap();
    let hours = until.duration_since(started).as_secs_f64() / 3600.0;
    assert!((95.9..96.1).contains(&hours), "preserved for {hours}h");
    assert_eq!(annotation(&n.metadata, CA), Some("true"));
    assert_eq!(annotation(&n.metadata, CA_BY_MCM), Some("true"));
    let (_, reason, message) = preserved(&n).unwrap();
    assert_eq!(reason, "Preserved by user.");
    assert!(message.starts_with("Machine preserved until"), "{message}");
    assert!(!tainted(&n), "a Running machine's Node is not tainted (MCM)");
    assert_eq!(annotation(&m.metadata, LAST_APPLIED), Some("now"));
    assert_eq!(phase_of(&m), Some(MachinePhase::Running));
    assert!(env.events_of("keep").await.iter().any(|(_, r, _)| r == "Preserved"));

    // The annotation removed: every mark goes.
    env.nodes()
        .patch(&node, &PatchParams::default(), &Patch::Json::<()>(json_patch::Patch(vec![remove_preserve()])))
        .await
        .unwrap();
    wait_until("every preservation mark removed", WAIT, || async {
        let m = env.machines().get("keep").await.ok()?;
        let n = env.nodes().get(&node).await.ok()?;
        unmarked(&m, &n).then_some(())
    })
    .await;
    assert_eq!(phase_of(&env.machines().get("keep").await.unwrap()), Some(MachinePhase::Running));
    env.shutdown().await;
}

fn remove_preserve() -> json_patch::PatchOperation {
    json_patch::PatchOperation::Remove(json_patch::RemoveOperation {
        path: json_patch::jsonptr::PointerBuf::parse("/metadata/annotations/node.machine.sapcloud.io~1preserve")
            .unwrap(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_machine_preserved_when_failed_is_kept_and_drained_until_its_expiry_then_replaced() {
    let mut options = crate::sets::options();
    options.machine.health_timeout = Duration::from_secs(1);
    options.machine.preserve_timeout = Duration::from_secs(8);
    let env = Env::start(options).await;
    env.class("small", json!({"bootSeconds": 0.2})).await;
    let apis = apis(&env);
    create(&apis.deployments, deployment("pool", 1, rolling(json!(1), json!(0)))).await;
    let first = wait_until("one running machine", WAIT, || async {
        let ms = machines_of(&apis, "pool").await;
        (ms.len() == 1 && phase_of(&ms[0]) == Some(MachinePhase::Running)).then(|| ms[0].clone())
    })
    .await;
    let name = first.metadata.name.clone().unwrap();
    let node = node_of(&first);
    annotate_node(&env, &node, json!("when-failed")).await;
    // Running: asked only on failure, so nothing yet.
    wait_until("the node value applied to the machine", WAIT, || async {
        let m = apis.machines.get(&name).await.ok()?;
        (annotation(&m.metadata, LAST_APPLIED) == Some("when-failed")).then_some(())
    })
    .await;
    assert!(expiry(&apis.machines.get(&name).await.unwrap()).is_none());

    env.dev.cloud.kill(first.spec.provider_id.as_deref().unwrap());
    let (m, n) = wait_until("the failed machine preserved and its node drained", WAIT, || async {
        let m = apis.machines.get(&name).await.ok()?;
        let n = env.nodes().get(&node).await.ok()?;
        let drained = preserved(&n).is_some_and(|(s, _, msg)| s == "True" && msg.starts_with("Preserved node drained"));
        (phase_of(&m) == Some(MachinePhase::Failed) && expiry(&m).is_some() && drained).then_some((m, n))
    })
    .await;
    let failed_at = Instant::now();
    assert!(tainted(&n), "the failed machine's node carries the preserved taint");
    assert_eq!(annotation(&n.metadata, CA), Some("true"));
    let until = expiry(&m).unwrap();
    // Kept, not replaced, until the expiry.
    while jiff::Timestamp::now() < until - jiff::SignedDuration::from_secs(1) {
        let ms = machines_of(&apis, "pool").await;
        assert_eq!(
            ms.len(),
            1,
            "not replaced while preserved: {:?}",
            ms.iter().map(|m| m.metadata.name.clone()).collect::<Vec<_>>()
        );
        assert!(ms[0].metadata.deletion_timestamp.is_none(), "not deleted while preserved");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Then deleted and replaced.
    env.wait_gone(&name, WAIT).await;
    assert!(failed_at.elapsed() >= Duration::from_secs(5), "gone {:?} after preservation", failed_at.elapsed());
    wait_until("a replacement running", WAIT, || async {
        let ms = machines_of(&apis, "pool").await;
        (ms.len() == 1
            && ms[0].metadata.name.as_deref() != Some(name.as_str())
            && phase_of(&ms[0]) == Some(MachinePhase::Running))
        .then_some(())
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_preserve_max_one_preserves_exactly_one_of_two_failures() {
    let mut options = crate::sets::options();
    options.machine.health_timeout = Duration::from_secs(1);
    options.machine.max_replacements = 2;
    let env = Env::start(options).await;
    env.class("small", json!({"bootSeconds": 0.2})).await;
    let apis = apis(&env);
    let mut d = deployment("auto", 2, rolling(json!(1), json!(0)));
    d["spec"]["autoPreserveFailedMachineMax"] = json!(1);
    create(&apis.deployments, d).await;
    let first = wait_until("two running machines", WAIT, || async {
        let ms = machines_of(&apis, "auto").await;
        (ms.len() == 2 && ms.iter().all(|m| phase_of(m) == Some(MachinePhase::Running))).then_some(ms)
    })
    .await;
    for m in &first {
        env.dev.cloud.kill(m.spec.provider_id.as_deref().unwrap());
    }
    let names: Vec<String> = first.iter().filter_map(|m| m.metadata.name.clone()).collect();
    let kept = wait_until("one failed machine auto-preserved, the other replaced", WAIT, || async {
        let ms = machines_of(&apis, "auto").await;
        let old: Vec<&Machine> = ms.iter().filter(|m| names.contains(m.metadata.name.as_ref().unwrap())).collect();
        let preserved: Vec<&Machine> = old.iter().copied().filter(|m| expiry(m).is_some()).collect();
        (old.len() == 1 && preserved.len() == 1 && phase_of(preserved[0]) == Some(MachinePhase::Failed))
            .then(|| preserved[0].clone())
    })
    .await;
    assert_eq!(annotation(&kept.metadata, PRESERVE), Some("auto-preserved"));
    let n = env.nodes().get(&node_of(&kept)).await.unwrap();
    let (status, reason, _) = preserved(&n).unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Preserved by MCM."));
    assert!(tainted(&n));
    // The set's count says one.
    wait_until("autoPreserveFailedMachineCount 1", WAIT, || async {
        let sets = apis.sets.list(&ListParams::default()).await.ok()?;
        sets.items
            .iter()
            .any(|s| s.status.as_ref().is_some_and(|s| s.auto_preserve_failed_machine_count == 1))
            .then_some(())
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_preserved_by_mcm_stay_preserved_until_their_expiry_then_lose_every_mark() {
    let mut env = Env::start(fast_options()).await;
    env.class("small", json!({})).await;
    env.machine("inherited", "small").await;
    let running = env.wait_phase("inherited", MachinePhase::Running, WAIT).await;
    let node = node_of(&running);
    env.dev.stop_controllers().await;

    // As MCM master leaves a Running machine preserved through its Node.
    let until = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(8);
    let node_patch = json!({"metadata": {"annotations": {PRESERVE: "now", CA: "true", CA_BY_MCM: "true"}}});
    env.nodes().patch(&node, &PatchParams::default(), &Patch::Merge(&node_patch)).await.unwrap();
    let condition = json!({"status": {"conditions": [{
        "type": "Preserved", "status": "True", "reason": "Preserved by user.",
        "message": "Machine preserved until 2030-01-01 00:00:00 +0000 UTC.",
        "lastTransitionTime": jiff::Timestamp::now().to_string(),
    }]}});
    env.nodes().patch_status(&node, &PatchParams::default(), &Patch::Strategic(&condition)).await.unwrap();
    let machine_patch = json!({"metadata": {"annotations": {LAST_APPLIED: "now"}}});
    env.machines().patch("inherited", &PatchParams::default(), &Patch::Merge(&machine_patch)).await.unwrap();
    let status = json!({"status": {"currentStatus": {"preserveExpiryTime": until.to_string()}}});
    env.machines().patch_status("inherited", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let before = env.nodes().get(&node).await.unwrap();
    env.dev.start_controllers();

    // Preserved until the expiry: every mark stays.
    while jiff::Timestamp::now() < until - jiff::SignedDuration::from_secs(1) {
        let m = env.machines().get("inherited").await.unwrap();
        let n = env.nodes().get(&node).await.unwrap();
        assert_eq!(expiry(&m).map(|t| t.as_second()), Some(until.as_second()), "the expiry stays");
        assert_eq!(annotation(&m.metadata, LAST_APPLIED), Some("now"));
        assert_eq!(annotation(&n.metadata, PRESERVE), Some("now"));
        assert_eq!((annotation(&n.metadata, CA), annotation(&n.metadata, CA_BY_MCM)), (Some("true"), Some("true")));
        assert_eq!(preserved(&n), preserved(&before));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Then un-preserved, every mark removed, the annotation too (so it is not preserved again).
    wait_until("every mark removed at the expiry", WAIT, || async {
        let m = env.machines().get("inherited").await.ok()?;
        let n = env.nodes().get(&node).await.ok()?;
        (unmarked(&m, &n) && annotation(&n.metadata, PRESERVE).is_none()).then_some(())
    })
    .await;
    assert!(jiff::Timestamp::now() >= until);
    assert_eq!(phase_of(&env.machines().get("inherited").await.unwrap()), Some(MachinePhase::Running));
    env.shutdown().await;
}
