//! The overshoot freeze: machines created behind the controllers' back freeze the set and its deployment (no
//! creation while frozen), the count falling back unfreezes them, and the unfreeze annotation lifts a freeze.

use mcm::api::mcm::names::UNFREEZE;
use mcm::api::mcm::{Machine, MachineDeploymentConditionType, MachineSet, MachineSetConditionType};
use serde_json::json;

use super::{
    Apis, WAIT, apis, create, deployment, env_with_class, event_count, events_of, machines_of, merge, rolling,
    wait_settled,
};
use crate::machines::NS;
use crate::support::wait_until;

const HOLD: &str = "test.mcm/hold";

/// Creates `n` machines owned by `set` behind the controllers' back; a finalizer of ours keeps them while they
/// terminate, so the count stays high until [`release`].
async fn sneak_in(apis: &Apis, set: &MachineSet, prefix: &str, n: usize) -> Vec<String> {
    let labels = set.spec.template.as_ref().unwrap().metadata.as_ref().unwrap().labels.clone().unwrap();
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let m = json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {
                "name": name, "namespace": NS, "labels": labels, "finalizers": [HOLD],
                "ownerReferences": [{
                    "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
                    "name": set.metadata.name, "uid": set.metadata.uid, "controller": true,
                }],
            },
            "spec": {"class": {"kind": "MachineClass", "name": "small"}},
        });
        create::<Machine>(&apis.machines, m).await;
        names.push(name);
    }
    names
}

/// Removes our finalizer from the machines.
async fn release(apis: &Apis, names: &[String]) {
    for name in names {
        // The termination controller removes its own finalizer meanwhile: retry on a stale list.
        wait_until(&format!("{name} released"), WAIT, || async {
            let m = apis.machines.get(name).await.ok()?;
            let rv = m.metadata.resource_version.clone();
            let kept: Vec<String> =
                m.metadata.finalizers.unwrap_or_default().into_iter().filter(|f| f != HOLD).collect();
            let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": rv}});
            let params = kube::api::PatchParams::default();
            apis.machines.patch(name, &params, &kube::api::Patch::Merge(&patch)).await.ok().map(|_| ())
        })
        .await;
    }
}

fn set_frozen(s: &MachineSet) -> bool {
    let labelled = s.metadata.labels.as_ref().and_then(|l| l.get("freeze")).map(String::as_str) == Some("True");
    let condition = s.status.as_ref().and_then(|st| st.machine_set_condition.as_ref()).is_some_and(|cs| {
        cs.iter().any(|c| {
            c.type_ == MachineSetConditionType::Frozen && c.reason.as_deref() == Some("OverShootingReplicaCount")
        })
    });
    labelled && condition
}

async fn wait_frozen(apis: &Apis, set: &str, deployment: &str, frozen: bool) {
    wait_until(&format!("set {set} and deployment {deployment} frozen: {frozen}"), WAIT, || async {
        let s = apis.sets.get(set).await.ok()?;
        let d = apis.deployments.get(deployment).await.ok()?;
        let d_labelled = d.metadata.labels.as_ref().and_then(|l| l.get("freeze")).map(String::as_str) == Some("True");
        let d_condition = d
            .status
            .and_then(|st| st.conditions)
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == MachineDeploymentConditionType::Frozen));
        let s_clear = !set_frozen(&s)
            && s.metadata.labels.as_ref().is_none_or(|l| !l.contains_key("freeze"))
            && s.status.as_ref().and_then(|st| st.machine_set_condition.as_ref()).is_none_or(|cs| cs.is_empty());
        let done =
            if frozen { set_frozen(&s) && d_labelled && d_condition } else { s_clear && !d_labelled && !d_condition };
        done.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_created_behind_the_controllers_back_freeze_and_unfreeze() {
    let env = env_with_class(0.1).await;
    let apis = apis(&env);
    // Freeze at 2 + maxSurge 1 + safetyUp 2 = 5 machines, unfreeze at 4.
    create(&apis.deployments, deployment("frz", 2, rolling(json!(1), json!(0)))).await;
    let set_name = wait_settled(&apis, "frz", 2).await;
    let set = apis.sets.get(&set_name).await.unwrap();

    let extra = sneak_in(&apis, &set, "extra", 4).await;
    wait_frozen(&apis, &set_name, "frz", true).await;
    let events = events_of(&env, "MachineSet", &set_name).await;
    assert!(
        events.iter().any(|(r, n)| r == "FrozeMachineSet" && n.contains(">= 5 which is the Max-ScaleUp-Limit")),
        "{events:?}"
    );

    // Frozen, the set creates nothing: scaled to 3 it stays at its 2 live machines.
    merge(&apis.deployments, "frz", json!({"spec": {"replicas": 3}})).await;
    wait_until("the set to observe 3 replicas", WAIT, || async {
        let s = apis.sets.get(&set_name).await.ok()?;
        (s.spec.replicas == 3 && s.status?.observed_generation == s.metadata.generation).then_some(())
    })
    .await;
    let live = |ms: Vec<Machine>| ms.into_iter().filter(|m| m.metadata.deletion_timestamp.is_none()).count();
    assert_eq!(live(machines_of(&apis, "frz").await), 2, "no machine is created while frozen");

    // The extra machines go: the count falls back, the freeze lifts, the third machine comes.
    release(&apis, &extra).await;
    wait_frozen(&apis, &set_name, "frz", false).await;
    wait_settled(&apis, "frz", 3).await;
    let events = events_of(&env, "MachineSet", &set_name).await;
    assert!(
        events.iter().any(|(r, n)| r == "UnfrozeMachineSet" && n.contains("UnderShootingReplicaCount")),
        "{events:?}"
    );

    // Frozen again, the unfreeze annotation on the deployment lifts the freeze at once (and goes).
    let set = apis.sets.get(&set_name).await.unwrap();
    let extra = sneak_in(&apis, &set, "more", 4).await;
    wait_frozen(&apis, &set_name, "frz", true).await;
    merge(&apis.deployments, "frz", json!({"metadata": {"annotations": {UNFREEZE: "true"}}})).await;
    wait_until("the annotation's unfreeze", WAIT, || async {
        let unfrozen = event_count(&env, "MachineSet", &set_name, "UnfrozeMachineSet").await;
        let d = apis.deployments.get("frz").await.ok()?;
        let annotated = d.metadata.annotations.is_some_and(|a| a.contains_key(UNFREEZE));
        // Still overshooting, the next sweep freezes the set again: an unfreeze lifts one freeze, as in MCM.
        (!annotated && unfrozen >= 2).then_some(())
    })
    .await;
    release(&apis, &extra).await;
    wait_frozen(&apis, &set_name, "frz", false).await;
    wait_settled(&apis, "frz", 3).await;
    env.shutdown().await;
}
