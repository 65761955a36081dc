//! MCM's own extras on CAPI objects: the deletion priority annotation picks scale-down victims, and the overshoot
//! freeze freezes a MachineSet (label `freeze`, condition `Frozen`) owning far more Machines than it should.

use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use mcm::api::capi::{Machine, MachineDeployment, MachineSet};
use serde_json::json;

use super::{Capi, WAIT, create_deployment, deployment, env, patch_deployment, rolling, wait_running};
use crate::support::wait_until;

const HOLD: &str = "test.mcm/hold";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcms_deletion_priority_picks_the_scale_down_victim() {
    let (env, capi, _provider) = env().await;
    create_deployment(&capi, deployment("prio", 3, "small", rolling(1, 0))).await;
    let mut names: Vec<String> = wait_running(&capi, "prio", 3).await.iter().map(|m| m.name_any()).collect();
    names.sort();
    // The middle one by name: never the one a tie-break by name picks.
    let victim = names[1].clone();
    let patch = Patch::Merge(json!({"metadata": {"annotations": {"machinepriority.machine.sapcloud.io": "1"}}}));
    capi.machines.patch(&victim, &PatchParams::default(), &patch).await.unwrap();
    patch_deployment(&capi, "prio", json!({"spec": {"replicas": 2}})).await;
    let left: Vec<String> = wait_running(&capi, "prio", 2).await.iter().map(|m| m.name_any()).collect();
    assert!(!left.contains(&victim), "priority 1 goes first: {victim} still in {left:?}");
    env.shutdown().await;
}

fn frozen(conditions: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>) -> bool {
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Frozen" && c.status == "True"))
}

fn labelled(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.labels.as_ref().and_then(|l| l.get("freeze")).map(String::as_str) == Some("True")
}

async fn set_and_deployment(capi: &Capi, name: &str) -> Option<(MachineSet, MachineDeployment)> {
    let sets = capi.sets.list(&Default::default()).await.ok()?.items;
    let set = sets
        .into_iter()
        .find(|s| s.labels().get("cluster.x-k8s.io/deployment-name").map(String::as_str) == Some(name))?;
    Some((set, capi.deployments.get(name).await.ok()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_made_behind_our_back_freeze_a_capi_machine_set() {
    let (env, capi, _provider) = env().await;
    create_deployment(&capi, deployment("frz", 2, "small", rolling(1, 0))).await;
    wait_running(&capi, "frz", 2).await;
    let (set, _) = set_and_deployment(&capi, "frz").await.unwrap();
    // Four Machines of the set made by hand (held by a finalizer of ours while they terminate): 6 >= 2 + maxSurge
    // 1 + safety margin 2.
    let labels = set.spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    let mut extra = Vec::new();
    for i in 0..4 {
        let name = format!("extra-{i}");
        let m: Machine = serde_json::from_value(json!({
            "metadata": {
                "name": name, "labels": labels, "finalizers": [HOLD],
                "ownerReferences": [{
                    "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                    "name": set.name_any(), "uid": set.metadata.uid, "controller": true,
                }],
            },
            "spec": {
                "clusterName": "dev",
                "bootstrap": {"dataSecretName": "bootstrap"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachine", "name": name},
            },
        }))
        .unwrap();
        capi.machines.create(&PostParams::default(), &m).await.unwrap();
        extra.push(name);
    }
    wait_until("the CAPI set and deployment frozen", WAIT, || async {
        let (s, d) = set_and_deployment(&capi, "frz").await?;
        let s_frozen = labelled(&s.metadata) && frozen(s.status.as_ref()?.conditions.as_ref());
        let d_frozen = labelled(&d.metadata) && frozen(d.status.as_ref()?.conditions.as_ref());
        (s_frozen && d_frozen).then_some(())
    })
    .await;

    // The extra Machines go: the freeze lifts.
    for name in &extra {
        wait_until(&format!("{name} released"), WAIT, || async {
            let m = capi.machines.get(name).await.ok()?;
            let kept: Vec<String> = m.finalizers().iter().filter(|f| *f != HOLD).cloned().collect();
            let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": m.resource_version()}});
            capi.machines.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.ok().map(|_| ())
        })
        .await;
    }
    wait_until("the CAPI set and deployment unfrozen", WAIT, || async {
        let (s, d) = set_and_deployment(&capi, "frz").await?;
        let s_frozen = labelled(&s.metadata) || frozen(s.status.as_ref().and_then(|s| s.conditions.as_ref()));
        let d_frozen = labelled(&d.metadata) || frozen(d.status.as_ref().and_then(|s| s.conditions.as_ref()));
        (!s_frozen && !d_frozen).then_some(())
    })
    .await;
    wait_running(&capi, "frz", 2).await;
    env.shutdown().await;
}
