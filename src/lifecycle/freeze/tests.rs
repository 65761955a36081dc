//! Table tests of the overshoot freeze.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::*;
use crate::api::mcm::{MachineDeploymentStatus, MachineSetStatus};
use crate::lifecycle::machine_deployment::test_support::{deployment, map, ms, recreate, rolling};

fn set(name: &str, replicas: i32) -> MachineSet {
    ms(name, 0, replicas, replicas, replicas)
}

fn frozen_label<T: kube::Resource>(mut o: T) -> T {
    o.meta_mut().labels.get_or_insert_with(BTreeMap::new).insert(FREEZE_LABEL.into(), FREEZE_VALUE.into());
    o
}

fn unfreeze_annotation<T: kube::Resource>(mut o: T) -> T {
    o.meta_mut().annotations.get_or_insert_with(BTreeMap::new).insert(UNFREEZE.into(), "True".into());
    o
}

fn frozen_condition(mut s: MachineSet) -> MachineSet {
    s.status.get_or_insert_with(MachineSetStatus::default).machine_set_condition =
        Some(vec![frozen_set_condition("old", "2026-03-01T11:00:00Z".parse().unwrap())]);
    s
}

fn deployment_condition(mut d: MachineDeployment, reason: &str) -> MachineDeployment {
    d.status.get_or_insert_with(MachineDeploymentStatus::default).conditions = Some(vec![MachineDeploymentCondition {
        type_: MachineDeploymentConditionType::Frozen,
        status: ConditionStatus::True,
        last_update_time: None,
        last_transition_time: None,
        reason: Some(reason.into()),
        message: None,
    }]);
    d
}

#[test]
fn thresholds_table() {
    let opts = FreezeOptions::default();
    let in_place = {
        let mut d = deployment("d", 10, rolling("1", "0"));
        let s = d.spec.strategy.as_mut().unwrap();
        s.rolling_update = None;
        s.in_place_update = Some(crate::api::mcm::InPlaceUpdate {
            update: crate::api::mcm::UpdateConfiguration {
                max_surge: Some(IntOrString::Int(3)),
                max_unavailable: None,
            },
            orchestration_type: None,
        });
        d
    };
    // (name, set replicas, parent, options, upper, lower)
    type Row = (&'static str, i32, Option<MachineDeployment>, FreezeOptions, i32, i32);
    let cases: Vec<Row> = vec![
        ("no deployment: 2 × replicas + 2", 3, None, opts, 8, 7),
        ("no deployment, zero replicas", 0, None, opts, 2, 1),
        ("deployment: replicas + surge + 2", 1, Some(deployment("d", 5, rolling("2", "0"))), opts, 9, 8),
        ("deployment, 25% of 10 rounds up to 3", 0, Some(deployment("d", 10, rolling("25%", "0"))), opts, 15, 14),
        ("deployment, 10% of 3 rounds up to 1", 0, Some(deployment("d", 3, rolling("10%", "0"))), opts, 6, 5),
        ("recreate: surge 0 (MCM would abort the sweep)", 5, Some(deployment("d", 5, recreate())), opts, 7, 6),
        ("in-place surge is used when there is no rollingUpdate", 0, Some(in_place), opts, 15, 14),
        ("custom safety margins", 3, None, FreezeOptions { safety_up: 5, safety_down: 3 }, 11, 8),
    ];
    for (name, replicas, parent, options, upper, lower) in cases {
        let t = thresholds(&set("s", replicas), parent.as_ref(), options);
        assert_eq!((t.upper, t.lower), (upper, lower), "{name}");
    }
}

#[test]
fn count_table() {
    let s = set("s", 1);
    let machine = |name: &str, labels: &[(&str, &str)], owner: Option<&str>| {
        let mut m = Machine::new(name, Default::default());
        m.metadata.labels = Some(map(labels));
        m.metadata.owner_references =
            owner.map(|o| vec![OwnerReference { name: o.into(), kind: "MachineSet".into(), ..Default::default() }]);
        m
    };
    let machines = vec![
        machine("owned", &[("name", "pool")], Some("s")),
        machine("extra-labels", &[("name", "pool"), ("x", "y")], Some("s")),
        machine("other-owner", &[("name", "pool")], Some("t")),
        machine("orphan", &[("name", "pool")], None),
        machine("wrong-labels", &[("name", "other")], Some("s")),
    ];
    assert_eq!(count_machines(&s, &machines), 2);
}

type Row = (&'static str, Vec<(MachineSet, Option<usize>, i32)>, Vec<MachineDeployment>, Vec<FreezeAction>);

fn freeze_set(set: &str, count: i32, upper: i32) -> FreezeAction {
    FreezeAction::FreezeMachineSet {
        set: set.into(),
        message: format!(
            "The number of machines backing MachineSet: {set} is {count} >= {upper} which is the Max-ScaleUp-Limit"
        ),
    }
}

fn unfreeze_set(set: &str, reason: &'static str) -> FreezeAction {
    FreezeAction::UnfreezeMachineSet { set: set.into(), reason }
}

fn freeze_d(d: &str, reason: &'static str, message: &str) -> FreezeAction {
    FreezeAction::FreezeMachineDeployment { deployment: d.into(), reason, message: message.into() }
}

fn unfreeze_d(d: &str, reason: &'static str) -> FreezeAction {
    FreezeAction::UnfreezeMachineDeployment { deployment: d.into(), reason }
}

#[test]
fn sweep_table() {
    let d5 = deployment("d", 5, rolling("1", "0")); // upper 8, lower 7
    let sync_message = "MachineDeployment State was inconsistent, hence safety controller has fixed this and frozen it";
    let overshoot = "The number of machines backing MachineSet: s is 8 >= 8 which is the Max-ScaleUp-Limit";
    let cases: Vec<Row> = vec![
        ("nothing to do", vec![(set("s", 5), Some(0), 5)], vec![d5.clone()], vec![]),
        ("standalone set below the threshold", vec![(set("s", 3), None, 7)], vec![], vec![]),
        ("standalone set at the threshold freezes", vec![(set("s", 3), None, 8)], vec![], vec![freeze_set("s", 8, 8)]),
        (
            "a set of a deployment at the threshold freezes both",
            vec![(set("s", 5), Some(0), 8)],
            vec![d5.clone()],
            vec![freeze_set("s", 8, 8), freeze_d("d", OVERSHOOTING_REPLICA_COUNT, overshoot)],
        ),
        (
            "a rolling update's surge does not freeze",
            vec![(set("old", 5), Some(0), 5), (set("new", 1), Some(0), 1)],
            vec![d5.clone()],
            vec![],
        ),
        (
            "already frozen, still high: nothing",
            vec![(frozen_label(set("s", 5)), Some(0), 9)],
            vec![frozen_label(deployment_condition(d5.clone(), OVERSHOOTING_REPLICA_COUNT))],
            vec![],
        ),
        ("frozen, between the thresholds: stays frozen", vec![(frozen_label(set("s", 3)), None, 8)], vec![], vec![]),
        (
            "frozen, back to the lower threshold: unfreezes",
            vec![(frozen_label(set("s", 3)), None, 7)],
            vec![],
            vec![unfreeze_set("s", UNDERSHOOTING_REPLICA_COUNT)],
        ),
        (
            "a condition without the label counts as frozen for unfreezing",
            vec![(frozen_condition(set("s", 3)), None, 2)],
            vec![],
            vec![unfreeze_set("s", UNDERSHOOTING_REPLICA_COUNT)],
        ),
        (
            "a condition without the label is frozen again when high",
            vec![(frozen_condition(set("s", 3)), None, 9)],
            vec![],
            vec![freeze_set("s", 9, 8)],
        ),
        (
            "unfreezing the last frozen set unfreezes the deployment",
            vec![(frozen_label(set("s", 5)), Some(0), 7)],
            vec![frozen_label(deployment_condition(d5.clone(), OVERSHOOTING_REPLICA_COUNT))],
            vec![unfreeze_set("s", UNDERSHOOTING_REPLICA_COUNT), unfreeze_d("d", UNDERSHOOTING_REPLICA_COUNT)],
        ),
        (
            "the unfreeze annotation on a set wins over the count",
            vec![(unfreeze_annotation(frozen_label(set("s", 3))), None, 20)],
            vec![],
            vec![unfreeze_set("s", UNFREEZE_ANNOTATION)],
        ),
        (
            "the unfreeze annotation is removed even from a set that is not frozen",
            vec![(unfreeze_annotation(set("s", 3)), None, 1)],
            vec![],
            vec![unfreeze_set("s", UNFREEZE_ANNOTATION)],
        ),
        (
            "the unfreeze annotation on a deployment unfreezes it and its sets",
            vec![(frozen_label(set("a", 5)), Some(0), 20), (set("b", 0), Some(0), 0)],
            vec![unfreeze_annotation(frozen_label(d5.clone()))],
            vec![unfreeze_set("a", UNFREEZE_ANNOTATION), unfreeze_d("d", UNFREEZE_ANNOTATION)],
        ),
        (
            "state sync: a deployment with a frozen set gets frozen",
            vec![(frozen_label(set("s", 5)), Some(0), 8)],
            vec![d5.clone()],
            vec![freeze_d("d", MACHINE_DEPLOYMENT_STATE_SYNC, sync_message)],
        ),
        (
            "state sync: a frozen deployment without frozen sets is unfrozen",
            vec![(set("s", 5), Some(0), 5)],
            vec![frozen_label(d5.clone())],
            vec![unfreeze_d("d", MACHINE_DEPLOYMENT_STATE_SYNC)],
        ),
        (
            "state sync: a deployment without sets is unfrozen",
            vec![],
            vec![deployment_condition(d5.clone(), OVERSHOOTING_REPLICA_COUNT)],
            vec![unfreeze_d("d", MACHINE_DEPLOYMENT_STATE_SYNC)],
        ),
        (
            "every set is decided in one sweep (MCM: one action per sweep)",
            vec![(set("a", 1), None, 4), (set("b", 1), None, 4)],
            vec![],
            vec![freeze_set("a", 4, 4), freeze_set("b", 4, 4)],
        ),
        (
            "one set freezes while another of the same deployment unfreezes: the deployment stays frozen",
            vec![(set("s", 5), Some(0), 8), (frozen_label(set("t", 0)), Some(0), 0)],
            vec![frozen_label(deployment_condition(d5.clone(), MACHINE_DEPLOYMENT_STATE_SYNC))],
            vec![
                freeze_set("s", 8, 8),
                unfreeze_set("t", UNDERSHOOTING_REPLICA_COUNT),
                freeze_d("d", OVERSHOOTING_REPLICA_COUNT, overshoot),
            ],
        ),
    ];
    for (name, sets, deployments, expected) in cases {
        let facts: Vec<SetFreezeFacts<'_>> = sets
            .iter()
            .map(|(set, parent, count)| SetFreezeFacts {
                set,
                parent: parent.map(|i| &deployments[i]),
                machine_count: *count,
            })
            .collect();
        let refs: Vec<&MachineDeployment> = deployments.iter().collect();
        assert_eq!(plan_freeze_sweep(&facts, &refs, FreezeOptions::default()), expected, "{name}");
    }
}

#[test]
fn replace_frozen_table() {
    // Conditions as (type, status).
    type C = (String, String);
    type Row<'a> = (&'a str, Vec<C>, Option<C>, Option<Vec<C>>);
    let c = |t: &str, s: &str| (t.to_string(), s.to_string());
    let is_frozen = |x: &C| x.0 == "Frozen";
    let same_status = |a: &C, b: &C| a.1 == b.1;
    let cases: Vec<Row<'_>> = vec![
        ("freeze", vec![c("A", "True")], Some(c("Frozen", "True")), Some(vec![c("A", "True"), c("Frozen", "True")])),
        ("frozen already", vec![c("Frozen", "True")], Some(c("Frozen", "True")), None),
        (
            "replaced",
            vec![c("Frozen", "False"), c("A", "True")],
            Some(c("Frozen", "True")),
            Some(vec![c("A", "True"), c("Frozen", "True")]),
        ),
        ("unfreeze", vec![c("Frozen", "True"), c("A", "True")], None, Some(vec![c("A", "True")])),
        ("nothing to unfreeze", vec![c("A", "True")], None, None),
    ];
    for (name, old, frozen, want) in cases {
        assert_eq!(replace_frozen(&old, frozen, is_frozen, same_status), want, "{name}");
    }
}
