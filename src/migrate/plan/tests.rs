use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::*;
use crate::migrate::reverse::{CapiInventory, reverse};
use crate::migrate::{STEP_ANNOTATION, WAS_PAUSED_ANNOTATION};

const NS: &str = "ns";

fn target() -> Target {
    Target { namespace: NS.into(), cluster_name: "prod".into() }
}

fn class() -> MachineClass {
    serde_json::from_value(json!({
        "metadata": {"name": "small", "namespace": NS},
        "provider": "InMemory",
        "providerSpec": {"bootSeconds": 0.2},
        "secretRef": {"name": "small", "namespace": NS},
    }))
    .unwrap()
}

fn owner(kind: &str, name: &str) -> serde_json::Value {
    json!([{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": kind, "name": name, "uid": format!("uid-{name}"), "controller": true}])
}

fn template(hash: Option<&str>) -> serde_json::Value {
    let mut labels = json!({"name": "pool"});
    if let Some(h) = hash {
        labels["machine-template-hash"] = json!(h);
    }
    json!({
        "metadata": {"labels": labels, "annotations": {"team": "a"}},
        "spec": {
            "class": {"kind": "MachineClass", "name": "small"},
            "drainTimeout": "90s",
            "healthTimeout": "10m",
            "nodeTemplate": {"metadata": {"labels": {"role": "worker"}}},
        },
    })
}

fn deployment(replicas: i32) -> mcm::MachineDeployment {
    serde_json::from_value(json!({
        "metadata": {"name": "pool", "namespace": NS, "generation": 2, "uid": "uid-pool",
            "labels": {"team": "a"},
            "annotations": {"autoscaler.gardener.cloud/scale-down-unneeded-time": "5m"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"name": "pool"}},
            "minReadySeconds": 30,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": template(None),
        },
        "status": {"observedGeneration": 2, "replicas": replicas, "updatedReplicas": replicas},
    }))
    .unwrap()
}

fn set(name: &str, replicas: i32) -> mcm::MachineSet {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
            "labels": {"name": "pool", "machine-template-hash": "abc"},
            "annotations": {"deployment.kubernetes.io/revision": "1"},
            "ownerReferences": owner("MachineDeployment", "pool")},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"name": "pool", "machine-template-hash": "abc"}},
            "template": template(Some("abc")),
        },
    }))
    .unwrap()
}

fn machine(name: &str, set: &str, phase: &str) -> mcm::Machine {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
            "labels": {"name": "pool", "machine-template-hash": "abc", "node": format!("node-{name}")},
            "annotations": {"machinepriority.machine.sapcloud.io": "3"},
            "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
            "ownerReferences": owner("MachineSet", set)},
        "spec": {
            "class": {"kind": "MachineClass", "name": "small"},
            "providerID": format!("inmemory:///local-a/i-{name}"),
            "drainTimeout": "90s",
            "healthTimeout": "10m",
            "nodeTemplate": {"metadata": {"labels": {"role": "worker"}}},
        },
        "status": {"currentStatus": {"phase": phase}, "lastOperation": {"type": "Create", "state": "Successful"}},
    }))
    .unwrap()
}

fn healthy(replicas: i32) -> Inventory {
    Inventory {
        deployments: vec![deployment(replicas)],
        sets: vec![set("pool-abc", replicas)],
        machines: (0..replicas).map(|i| machine(&format!("pool-abc-{i}"), "pool-abc", "Running")).collect(),
        classes: vec![class()],
        ..Default::default()
    }
}

#[test]
fn a_settled_deployment_maps_to_capi_objects_of_the_same_names_and_provider_ids() {
    let plan = plan(&healthy(3), &target());
    assert_eq!(plan.summary.blockers, vec![]);
    assert_eq!(plan.deployments.len(), 1);
    let d = &plan.deployments[0];
    assert_eq!(d.name, "pool");
    assert_eq!(d.deployment.metadata.name.as_deref(), Some("pool"));
    assert_eq!(d.deployment.spec.cluster_name, "prod");
    assert_eq!(d.deployment.spec.replicas, Some(3));
    assert_eq!(d.deployment.spec.template.spec.infrastructure_ref.kind, "MCMMachineTemplate");
    assert_eq!(d.deployment.spec.template.spec.infrastructure_ref.name, "pool");
    assert_eq!(d.deployment.metadata.uid, None, "a new object");
    assert_eq!(d.deployment.spec.template.spec.deletion.as_ref().and_then(|x| x.node_drain_timeout_seconds), Some(90));
    let annotations = d.deployment.metadata.annotations.clone().unwrap();
    assert_eq!(
        annotations.get("cluster.x-k8s.io/autoscaling-options-scaledownunneededtime").map(String::as_str),
        Some("5m")
    );
    assert!(annotations.contains_key(MCM_DATA), "minReadySeconds kept");
    assert_eq!(d.template.spec.template.spec.class.as_ref().map(|c| c.name.as_str()), Some("small"));
    assert!(d.template.spec.template.spec.node_template.is_some());
    assert_eq!(d.set.metadata.name.as_deref(), Some("pool-abc"));
    assert_eq!(d.set.spec.replicas, Some(3));
    assert_eq!(d.set.metadata.owner_references, None, "set when created");
    assert_eq!(d.mcm_sets, vec!["pool-abc".to_string()]);
    assert_eq!(d.machines.len(), 3);
    for (i, pair) in d.machines.iter().enumerate() {
        let name = format!("pool-abc-{i}");
        let id = format!("inmemory:///local-a/i-{name}");
        assert_eq!(pair.machine.metadata.name.as_deref(), Some(name.as_str()));
        assert_eq!(pair.infra.metadata.name.as_deref(), Some(name.as_str()));
        assert_eq!(pair.machine.spec.provider_id.as_deref(), Some(id.as_str()));
        assert_eq!(pair.infra.spec.provider_id.as_deref(), Some(id.as_str()));
        assert_eq!(pair.provider_id, id);
        assert_eq!(pair.node, format!("node-{name}"));
        assert_eq!(pair.machine.spec.infrastructure_ref.name, name);
        assert_eq!(pair.infra.spec.class.as_ref().map(|c| c.name.as_str()), Some("small"));
        assert_eq!(pair.infra.status, None);
        let labels = pair.machine.metadata.labels.clone().unwrap();
        assert!(!labels.contains_key("node"), "CAPI links the Node by providerID");
        assert_eq!(labels.get(CLUSTER_NAME_LABEL).map(String::as_str), Some("prod"));
        assert_eq!(pair.machine.metadata.finalizers, None);
    }
    assert!(plan.cluster.is_some() && plan.mcm_cluster.is_some(), "absent, so created");
    assert!(plan.summary.one_to_one.iter().any(|l| l.contains("no VM created or deleted")));
    assert!(plan.summary.lossy.iter().any(|l| l.kept.contains(MCM_DATA)));
    assert!(plan.summary.left_alone.iter().any(|l| l.contains("MachineClass ns/small")));
    assert_eq!(plan.objects().len(), 2 + 1 + 3 * 2 + 1 + 1);
}

#[test]
fn an_existing_cluster_is_not_planned_again() {
    let mut inventory = healthy(1);
    inventory.cluster = Some(capi::Cluster::new("prod", Default::default()));
    inventory.mcm_cluster = Some(MCMCluster::new("prod", Default::default()));
    let plan = plan(&inventory, &target());
    assert!(plan.cluster.is_none() && plan.mcm_cluster.is_none());
}

#[test]
fn the_migrations_own_pause_does_not_change_the_plan() {
    let before = plan(&healthy(2), &target());
    let mut paused = healthy(2);
    let d = &mut paused.deployments[0];
    d.spec.paused = true;
    d.metadata.generation = Some(3);
    let a = d.metadata.annotations.get_or_insert_with(Default::default);
    a.insert(WAS_PAUSED_ANNOTATION.into(), "false".into());
    a.insert(STEP_ANNOTATION.into(), "paused".into());
    a.insert(crate::api::mcm::names::PAUSED_ANNOTATION.into(), "mcm migrate".into());
    for s in &mut paused.sets {
        s.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(crate::api::mcm::names::PAUSED_ANNOTATION.into(), "x".into());
    }
    for m in &mut paused.machines {
        m.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(crate::api::mcm::names::PAUSED_ANNOTATION.into(), "x".into());
    }
    let after = plan(&paused, &target());
    assert_eq!(after.objects(), before.objects());
    assert_eq!(after.summary, before.summary);
}

fn blockers(inventory: &Inventory) -> Vec<String> {
    plan(inventory, &target()).summary.blockers.iter().map(ToString::to_string).collect()
}

#[test]
fn blockers_are_reported_and_nothing_is_planned() {
    type Edit = fn(&mut Inventory);
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "rollout: two active sets",
            |i| {
                i.sets[0].spec.replicas = 2;
                let mut old = set("pool-old", 1);
                old.spec.template.as_mut().unwrap().spec.as_mut().unwrap().class.name = "other".into();
                i.sets.push(old);
                i.machines.pop();
                i.machines.push(machine("pool-old-0", "pool-old", "Running"));
            },
            "rollout in progress: MachineSets",
        ),
        (
            "rollout: template changed, no new set yet",
            |i| {
                i.deployments[0].spec.template.spec.as_mut().unwrap().class.name = "other".into();
            },
            "no MachineSet has the deployment's current template",
        ),
        (
            "rollout: generation not observed",
            |i| {
                i.deployments[0].metadata.generation = Some(3);
            },
            "generation 3 not yet observed",
        ),
        (
            "machine not running",
            |i| {
                i.machines[1] = machine("pool-abc-1", "pool-abc", "Pending");
            },
            "Machine ns/pool-abc-1: is Pending, not Running",
        ),
        (
            "machine updating in place",
            |i| {
                i.machines[1] = machine("pool-abc-1", "pool-abc", "InPlaceUpdating");
            },
            "Machine ns/pool-abc-1: in-place update in progress (InPlaceUpdating), not Running",
        ),
        (
            "machine updated in place, not rejoined",
            |i| {
                i.machines[1] = machine("pool-abc-1", "pool-abc", "InPlaceUpdateSuccessful");
            },
            "Machine ns/pool-abc-1: in-place update in progress (InPlaceUpdateSuccessful)",
        ),
        (
            "machine whose in-place update failed",
            |i| {
                i.machines[1] = machine("pool-abc-1", "pool-abc", "InPlaceUpdateFailed");
            },
            "Machine ns/pool-abc-1: in-place update in progress (InPlaceUpdateFailed)",
        ),
        (
            "machine just moved to the new set",
            |i| {
                i.machines[0].metadata.labels.as_mut().unwrap().insert(UPDATE_RESULT.into(), "successful".into());
            },
            "Machine ns/pool-abc-0: in-place update in progress: label node.machine.sapcloud.io/update-result=successful",
        ),
        (
            "node selected for update",
            |i| {
                i.node_labels.insert("node-pool-abc-2".into(), [(SELECTED_FOR_UPDATE.into(), "true".into())].into());
            },
            "Node node-pool-abc-2: in-place update in progress: label node.machine.sapcloud.io/selected-for-update=true",
        ),
        (
            "node with an update result",
            |i| {
                i.node_labels.insert("node-pool-abc-2".into(), [(UPDATE_RESULT.into(), "failed".into())].into());
            },
            "Node node-pool-abc-2: in-place update in progress: label node.machine.sapcloud.io/update-result=failed",
        ),
        (
            "machine without node",
            |i| {
                i.machines[0].metadata.labels.as_mut().unwrap().remove("node");
            },
            "has no Node",
        ),
        (
            "scaling",
            |i| {
                i.deployments[0].spec.replicas = 4;
            },
            "scaling in progress",
        ),
        (
            "frozen set",
            |i| {
                i.sets[0].metadata.labels.as_mut().unwrap().insert("freeze".into(), "True".into());
            },
            "is frozen",
        ),
        (
            "autoscaler scale-down",
            |i| {
                i.deployments[0]
                    .metadata
                    .annotations
                    .as_mut()
                    .unwrap()
                    .insert(TRIGGER_DELETION_BY_MCM.into(), "pool-abc-0~2026-01-01T00:00:00Z".into());
            },
            "cluster-autoscaler scale-down",
        ),
        (
            "missing class",
            |i| {
                i.classes.clear();
            },
            "MachineClass small does not exist",
        ),
        (
            "name taken by a CAPI deployment",
            |i| {
                i.capi_deployments.push(capi::MachineDeployment::new("pool", Default::default()));
            },
            "was not made by mcm migrate",
        ),
        (
            "unfinished rollback",
            |i| {
                i.deployments[0]
                    .metadata
                    .annotations
                    .as_mut()
                    .unwrap()
                    .insert(STEP_ANNOTATION.into(), "rollback-restored".into());
            },
            "run `mcm migrate rollback` again",
        ),
    ];
    for (name, edit, expected) in cases {
        let mut inventory = healthy(3);
        edit(&mut inventory);
        let found = blockers(&inventory);
        assert!(found.iter().any(|b| b.contains(expected)), "{name}: expected {expected:?} in {found:?}");
        assert!(plan(&inventory, &target()).deployments.is_empty(), "{name}: nothing planned");
    }
}

/// A row: name, the MCM Machine's providerID, its Node's providerID, what the CAPI Machine and MCMMachine carry
/// (or the blocker).
type ProviderIdRow = (&'static str, &'static str, Option<&'static str>, Result<&'static str, &'static str>);

#[test]
fn the_provider_id_is_the_one_the_node_carries() {
    let cases: [ProviderIdRow; 6] = [
        ("no Node providerID: the Machine's", "aws:///eu-west-1/i-1", None, Ok("aws:///eu-west-1/i-1")),
        ("an empty Node providerID: the Machine's", "aws:///eu-west-1/i-1", Some(""), Ok("aws:///eu-west-1/i-1")),
        ("equal", "aws:///eu-west-1a/i-1", Some("aws:///eu-west-1a/i-1"), Ok("aws:///eu-west-1a/i-1")),
        (
            "MCM's AWS region form, the Node's zone form: the Node's",
            "aws:///eu-west-1/i-1",
            Some("aws:///eu-west-1a/i-1"),
            Ok("aws:///eu-west-1a/i-1"),
        ),
        (
            "GCE spellings: the Node's",
            "gce:///p/europe-west1-b/m1",
            Some("gce://p/europe-west1-b/m1"),
            Ok("gce://p/europe-west1-b/m1"),
        ),
        (
            "another VM on the Node: blocked",
            "aws:///eu-west-1/i-1",
            Some("aws:///eu-west-1a/i-2"),
            Err("name different VMs"),
        ),
    ];
    for (name, on_machine, on_node, want) in cases {
        let mut inventory = healthy(1);
        inventory.machines[0].spec.provider_id = Some(on_machine.to_string());
        if let Some(p) = on_node {
            inventory.node_provider_ids.insert("node-pool-abc-0".into(), p.to_string());
        }
        let plan = plan(&inventory, &target());
        match want {
            Ok(id) => {
                assert_eq!(plan.summary.blockers, vec![], "{name}");
                let pair = &plan.deployments[0].machines[0];
                assert_eq!(pair.provider_id, id, "{name}");
                assert_eq!(pair.machine.spec.provider_id.as_deref(), Some(id), "{name}");
                assert_eq!(pair.infra.spec.provider_id.as_deref(), Some(id), "{name}");
                let noted = plan.summary.one_to_one.iter().any(|l| l.contains(&format!("{on_machine} -> {id}")));
                assert_eq!(noted, id != on_machine, "{name}: {:?}", plan.summary.one_to_one);
            }
            Err(reason) => {
                let found = blockers(&inventory);
                assert!(found.iter().any(|b| b.contains(reason) && b.contains("pool-abc-0")), "{name}: {found:?}");
                assert!(plan.deployments.is_empty(), "{name}: nothing planned");
            }
        }
    }
}

#[test]
fn bare_machines_and_sets_are_left_alone() {
    let mut inventory = healthy(1);
    let mut bare = machine("bare", "none", "Running");
    bare.metadata.owner_references = None;
    inventory.machines.push(bare);
    let plan = plan(&inventory, &target());
    assert_eq!(plan.summary.blockers, vec![]);
    assert!(plan.summary.left_alone.iter().any(|l| l.contains("Machine ns/bare")), "{:?}", plan.summary.left_alone);
}

/// What the CAPI objects look like once created and Running: owner references, the Node linked.
fn as_created(d: &DeploymentPlan) -> (capi::MachineDeployment, CapiInventory) {
    let owner = |kind: &str, name: &str| {
        Some(vec![crate::migrate::objects::controller_ref(
            "cluster.x-k8s.io/v1beta2",
            kind,
            &ObjectMeta { name: Some(name.into()), uid: Some(format!("capi-{name}")), ..Default::default() },
        )])
    };
    let mut set = d.set.clone();
    set.metadata.owner_references = owner("MachineDeployment", &d.name);
    let machines = d
        .machines
        .iter()
        .map(|p| {
            let mut m = p.machine.clone();
            m.metadata.owner_references = owner("MachineSet", set.metadata.name.as_deref().unwrap());
            m.status = Some(capi::MachineStatus {
                phase: Some("Running".into()),
                node_ref: Some(capi::MachineNodeReference { name: p.node.clone() }),
                ..Default::default()
            });
            m
        })
        .collect();
    let inventory = CapiInventory {
        sets: vec![set],
        machines,
        infra: d.machines.iter().map(|p| p.infra.clone()).collect(),
        templates: vec![d.template.clone()],
    };
    (d.deployment.clone(), inventory)
}

#[test]
fn reverse_gives_back_the_mcm_objects() {
    let inventory = healthy(3);
    let plan = plan(&inventory, &target());
    let (d, capi) = as_created(&plan.deployments[0]);
    let restored = reverse(&d, &capi).unwrap();

    let original = source_deployment(&inventory.deployments[0]);
    assert_eq!(restored.deployment.spec, original.spec);
    assert_eq!(restored.deployment.metadata.labels, original.metadata.labels);
    assert_eq!(restored.deployment.metadata.annotations, original.metadata.annotations);
    let original_set = &inventory.sets[0];
    assert_eq!(restored.set.spec, original_set.spec);
    assert_eq!(restored.set.metadata.labels, original_set.metadata.labels);
    assert_eq!(restored.set.metadata.annotations, original_set.metadata.annotations);
    assert_eq!(restored.machines.len(), 3);
    for (got, want) in restored.machines.iter().zip(&inventory.machines) {
        assert_eq!(got.metadata.name, want.metadata.name);
        assert_eq!(got.spec, want.spec);
        assert_eq!(got.metadata.labels, want.metadata.labels, "node label back from nodeRef");
        assert_eq!(got.metadata.annotations, want.metadata.annotations);
        assert_eq!(got.status, None);
    }
    assert_eq!(restored.capi_sets, vec!["pool-abc".to_string()]);
    assert_eq!(restored.template, "pool");
}

#[test]
fn reverse_refuses_machines_that_are_not_running() {
    let plan = plan(&healthy(2), &target());
    let (d, mut capi) = as_created(&plan.deployments[0]);
    capi.machines[0].status.as_mut().unwrap().phase = Some("Provisioned".into());
    let blockers = reverse(&d, &capi).unwrap_err();
    assert!(blockers.iter().any(|b| b.reason.contains("is Provisioned, not Running")), "{blockers:?}");
}

#[test]
fn an_in_place_phase_is_one_blocker_not_two() {
    let mut inventory = healthy(1);
    inventory.machines[0] = machine("pool-abc-0", "pool-abc", "InPlaceUpdating");
    assert_eq!(
        blockers(&inventory),
        ["Machine ns/pool-abc-0: in-place update in progress (InPlaceUpdating), not Running"]
    );
}

/// What a finished in-place rollout leaves on the Nodes (MCM never removes them) does not block.
#[test]
fn settled_in_place_leftovers_are_left_alone() {
    let mut inventory = healthy(2);
    for i in 0..2 {
        inventory.node_labels.insert(
            format!("node-pool-abc-{i}"),
            [(CANDIDATE_FOR_UPDATE.into(), "true".into()), ("role".into(), "worker".into())].into(),
        );
    }
    // MCM copies the Node's conditions onto the Machine; the last stage stays after success.
    let condition = json!([{"type": "InPlaceUpdate", "status": "True", "reason": "UpdateSuccessful",
        "message": "Node in-place update successful"}]);
    for m in &mut inventory.machines {
        m.status.as_mut().unwrap().conditions = serde_json::from_value(condition.clone()).unwrap();
    }
    let plan = plan(&inventory, &target());
    assert_eq!(plan.summary.blockers, vec![]);
    assert_eq!(plan.deployments.len(), 1);
    let noted = plan.summary.left_alone.iter().filter(|l| l.contains(CANDIDATE_FOR_UPDATE)).count();
    assert_eq!(noted, 2, "{:?}", plan.summary.left_alone);
}

fn with_strategy(strategy: serde_json::Value) -> Inventory {
    let mut inventory = healthy(2);
    inventory.deployments[0].spec.strategy = Some(serde_json::from_value(strategy).unwrap());
    inventory
}

#[test]
fn the_strategy_line_says_who_honours_it() {
    let cases = [
        (json!({"type": "InPlaceUpdate", "inPlaceUpdate": {"orchestrationType": "Manual"}}), "updates in place"),
        (json!({"type": "Recreate"}), "deletes every old machine"),
    ];
    for (strategy, honoured) in cases {
        let plan = plan(&with_strategy(strategy.clone()), &target());
        let line = plan
            .summary
            .lossy
            .iter()
            .find(|l| l.what.ends_with(&format!("strategy {}", strategy["type"].as_str().unwrap())));
        let kept = &line.unwrap_or_else(|| panic!("{strategy}: {:?}", plan.summary.lossy)).kept;
        assert!(kept.contains(MCM_DATA), "{kept}");
        assert!(kept.contains(&format!("our CAPI core honours it ({honoured}")), "{kept}");
        assert!(kept.contains("upstream CAPI core ignores it, and the next template change replaces VMs"), "{kept}");
    }
}

/// InPlaceUpdate/Manual has no CAPI field: it travels in the annotation and a rollback brings it back whole.
#[test]
fn reverse_restores_an_in_place_strategy() {
    let inventory = with_strategy(json!({"type": "InPlaceUpdate",
        "inPlaceUpdate": {"orchestrationType": "Manual", "maxSurge": 1, "maxUnavailable": 0}}));
    let plan = plan(&inventory, &target());
    let (d, capi) = as_created(&plan.deployments[0]);
    assert_eq!(d.spec.rollout, None, "CAPI cannot express it");
    let restored = reverse(&d, &capi).unwrap();
    let original = source_deployment(&inventory.deployments[0]);
    assert_eq!(restored.deployment.spec.strategy, original.spec.strategy);
    let in_place = restored.deployment.spec.strategy.clone().and_then(|s| s.in_place_update).unwrap();
    assert_eq!(in_place.orchestration_type, Some(mcm::OrchestrationType::Manual));
    assert_eq!(in_place.update.max_surge, Some(IntOrString::Int(1)));
    assert_eq!(in_place.update.max_unavailable, Some(IntOrString::Int(0)));
    assert_eq!(restored.deployment.spec, original.spec);
}
