//! Scenario tables of one deployment reconcile: observed objects in, writes out.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::*;
use crate::api::mcm::names::LAST_REPLICA_CHANGE_BY_SCALER;
use crate::api::mcm::names::TRIGGER_DELETION_BY_MCM;
use crate::api::mcm::names::{DESIRED_REPLICAS, MAX_REPLICAS, REVISION_HISTORY};
use crate::api::mcm::{MachineDeploymentCondition, MachinePhase, MachineSetStatus, RollbackConfig};
use crate::lifecycle::machine_deployment::nodes::NodeFacts;
use crate::lifecycle::machine_deployment::status::{
    DEPLOYMENT_PAUSED, MACHINE_SET_UPDATED, MINIMUM_REPLICAS_AVAILABLE, NEW_MACHINE_SET_AVAILABLE,
    PROGRESS_DEADLINE_EXCEEDED,
};
use crate::lifecycle::machine_deployment::test_support::{
    SetExt, at_minute, deployment, in_place, map, ms, now, recreate, rolling,
};

fn cond(type_: MachineDeploymentConditionType, status: ConditionStatus, reason: &str) -> MachineDeploymentCondition {
    MachineDeploymentCondition {
        type_,
        status,
        last_update_time: Some(Time(at_minute(0))),
        last_transition_time: Some(Time(at_minute(0))),
        reason: Some(reason.into()),
        message: Some("m".into()),
    }
}

/// A deployment of `replicas` whose single set `s1` (revision 1) is complete, as the last reconcile left it.
fn settled(replicas: i32, strategy: crate::api::mcm::MachineDeploymentStrategy) -> (MachineDeployment, MachineSet) {
    let mut d = deployment("d", replicas, strategy);
    d.metadata.finalizers = Some(vec![MACHINE_FINALIZER.into()]);
    d.metadata.annotations = Some(map(&[(REVISION, "1")]));
    let surge = max_surge(&d);
    d.status = Some(MachineDeploymentStatus {
        observed_generation: Some(1),
        replicas,
        updated_replicas: replicas,
        ready_replicas: replicas,
        available_replicas: replicas,
        conditions: Some(vec![
            cond(MachineDeploymentConditionType::Available, ConditionStatus::True, MINIMUM_REPLICAS_AVAILABLE),
            cond(MachineDeploymentConditionType::Progressing, ConditionStatus::True, NEW_MACHINE_SET_AVAILABLE),
        ]),
        ..Default::default()
    });
    let set = ms("s1", 0, replicas, replicas, replicas).revision("1").replicas_annotations(replicas, replicas + surge);
    (d, set)
}

fn machine(name: &str, set: &str, node: Option<NodeFacts>) -> DeploymentMachine {
    DeploymentMachine {
        name: name.into(),
        set: Some(set.into()),
        node,
        phase: Some(MachinePhase::Running),
        ..Default::default()
    }
}

fn node(name: &str) -> NodeFacts {
    NodeFacts { name: name.into(), ..Default::default() }
}

fn run(d: &MachineDeployment, sets: &[MachineSet], machines: &[DeploymentMachine]) -> DeploymentPlan {
    run_with(d, sets, machines, DeploymentOptions::default())
}

fn run_with(
    d: &MachineDeployment,
    sets: &[MachineSet],
    machines: &[DeploymentMachine],
    options: DeploymentOptions,
) -> DeploymentPlan {
    let obs = DeploymentObservation { deployment: d, sets, machines, now: now(), options };
    match plan_deployment(&obs) {
        DeploymentDecision::Plan(p) => *p,
        DeploymentDecision::Invalid(e) => panic!("unexpected invalid: {e:?}"),
    }
}

/// `(set, spec.replicas)` of every set patch that scales.
fn scales(plan: &DeploymentPlan) -> Vec<(String, i64)> {
    plan.update_sets
        .iter()
        .filter_map(|u| u.patch.pointer("/spec/replicas").and_then(Value::as_i64).map(|r| (u.name.clone(), r)))
        .collect()
}

fn patch_of<'a>(plan: &'a DeploymentPlan, set: &str) -> Option<&'a Value> {
    plan.update_sets.iter().find(|u| u.name == set).map(|u| &u.patch)
}

fn progressing_reason(plan: &DeploymentPlan) -> Option<String> {
    plan.status.as_ref().and_then(|s| {
        get_condition(s.conditions.as_deref().unwrap_or_default(), MachineDeploymentConditionType::Progressing)
            .and_then(|c| c.reason.clone())
    })
}

fn events(plan: &DeploymentPlan) -> Vec<(&'static str, String)> {
    plan.events.iter().map(|e| (e.reason, e.note.clone())).collect()
}

/// A new template for `d` (class `class-b`) so that `s1` becomes old.
fn new_template(d: &mut MachineDeployment) {
    d.spec.template.spec.as_mut().unwrap().class.name = "class-b".into();
}

#[test]
fn steady_state_writes_nothing() {
    for strategy in [rolling("1", "0"), recreate()] {
        let (d, set) = settled(3, strategy);
        let machines = [machine("m1", "s1", Some(node("n1")))];
        let plan = run(&d, &[set], &machines);
        assert!(plan.finalizer.is_none());
        assert!(plan.deployment_patch.is_none(), "{:?}", plan.deployment_patch);
        assert!(plan.update_sets.is_empty(), "{:?}", plan.update_sets);
        assert!(plan.create_set.is_none() && plan.delete_sets.is_empty() && plan.machine_marks.is_empty());
        assert!(plan.nodes.is_empty(), "{:?}", plan.nodes);
        assert!(plan.status.is_none(), "{:?}", plan.status);
        assert!(plan.events.is_empty());
        assert_eq!(plan.requeue_after, None);
    }
}

#[test]
fn invalid_deployments_are_left_alone() {
    let (mut d, set) = settled(3, rolling("1", "0"));
    d.spec.strategy = None;
    let obs = DeploymentObservation {
        deployment: &d,
        sets: std::slice::from_ref(&set),
        machines: &[],
        now: now(),
        options: DeploymentOptions::default(),
    };
    match plan_deployment(&obs) {
        DeploymentDecision::Invalid(e) => assert_eq!(e, vec![ValidationError::MissingStrategyType]),
        DeploymentDecision::Plan(p) => panic!("expected invalid, got {p:?}"),
    }
}

#[test]
fn finalizer_table() {
    let (mut fresh, set) = settled(3, rolling("1", "0"));
    fresh.metadata.finalizers = None;
    assert_eq!(run(&fresh, std::slice::from_ref(&set), &[]).finalizer, Some(FinalizerChange::Add));

    let (mut deleting, set) = settled(3, rolling("1", "0"));
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    let plan = run(&deleting, std::slice::from_ref(&set), &[]);
    assert_eq!(plan.delete_sets, ["s1"], "deleting: every set goes");
    assert_eq!(plan.finalizer, None, "the finalizer stays while sets remain");
    assert!(scales(&plan).is_empty() && plan.create_set.is_none(), "no rollout while deleting");

    let plan = run(&deleting, &[], &[]);
    assert_eq!(plan.finalizer, Some(FinalizerChange::Remove), "no set left: the finalizer goes");

    let mut gone = set.clone();
    gone.metadata.deletion_timestamp = Some(Time(now()));
    assert!(run(&deleting, &[gone], &[]).delete_sets.is_empty(), "sets already being deleted are not deleted again");

    let mut invalid = deleting.clone();
    invalid.spec.strategy = None;
    assert_eq!(run(&invalid, std::slice::from_ref(&set), &[]).delete_sets, ["s1"], "an invalid spec is still deleted");

    deleting.metadata.finalizers = None;
    let plan = run(&deleting, &[set], &[]);
    assert!(plan.delete_sets.is_empty() && plan.finalizer.is_none(), "without our finalizer, nothing");
}

#[test]
fn a_new_template_starts_a_rolling_update() {
    let (mut d, old) = settled(10, rolling("25%", "25%"));
    new_template(&mut d);
    d.metadata.annotations.as_mut().unwrap().insert("team".into(), "a".into());
    let machines = [machine("m1", "s1", Some(node("n1"))), machine("m2", "s1", None)];
    let plan = run(&d, &[old], &machines);

    let created = plan.create_set.as_ref().expect("a new set");
    let name = created.metadata.name.clone().unwrap();
    assert!(name.starts_with("d-"), "{name}");
    assert_eq!(created.spec.replicas, 3, "25% of 10 surges 3");
    let annotations = created.metadata.annotations.clone().unwrap();
    assert_eq!(annotations.get(REVISION).map(String::as_str), Some("2"));
    assert_eq!(annotations.get(DESIRED_REPLICAS).map(String::as_str), Some("10"));
    assert_eq!(annotations.get(MAX_REPLICAS).map(String::as_str), Some("13"));
    assert_eq!(annotations.get("team").map(String::as_str), Some("a"));
    assert_eq!(
        events(&plan),
        [
            (SCALING_MACHINE_SET, format!("Scaled up machine set {name} to 3")),
            // The new set cannot grow further, so the same pass uses maxUnavailable (2) on the old one.
            (SCALING_MACHINE_SET, "Scaled down machine set s1 to 8".to_string()),
        ]
    );
    assert_eq!(
        plan.deployment_patch,
        Some(json!({"metadata": {"annotations": {"deployment.kubernetes.io/revision": "2"}}}))
    );
    assert_eq!(progressing_reason(&plan).as_deref(), Some("NewMachineSetCreated"));

    assert_eq!(plan.nodes.add_prefer_no_schedule, ["n1"], "old nodes are tainted");
    assert_eq!(plan.nodes.disable_scale_down, ["n1"], "the autoscaler keeps off during the rollout");
    assert_eq!(
        patch_of(&plan, "s1"),
        Some(&json!({
            "metadata": {"annotations": {"deployment.machine.sapcloud.io/prefer-no-schedule": "True"}},
            "spec": {"replicas": 8}
        })),
        "the old set is marked as tainted and scaled down within maxUnavailable"
    );
}

#[test]
fn the_autoscaler_option_can_be_switched_off() {
    let (mut d, old) = settled(3, rolling("1", "0"));
    new_template(&mut d);
    let machines = [machine("m1", "s1", Some(node("n1")))];
    let options = DeploymentOptions { autoscaler_scale_down_annotation_during_rollout: false };
    let plan = run_with(&d, &[old], &machines, options);
    assert!(plan.nodes.disable_scale_down.is_empty());
    assert_eq!(plan.nodes.add_prefer_no_schedule, ["n1"]);
}

/// (name, replicas, surge, unavailable, old (spec, actual, available), new (spec, actual, available),
///  expected scales)
type StepRow =
    (&'static str, i32, &'static str, &'static str, (i32, i32, i32), (i32, i32, i32), Vec<(&'static str, i64)>);

#[test]
fn rolling_update_step_table() {
    let cases: Vec<StepRow> = vec![
        ("new machines not available yet: wait", 3, "1", "0", (3, 3, 3), (1, 1, 0), vec![]),
        ("a new machine is available: one old goes", 3, "1", "0", (3, 3, 3), (1, 1, 1), vec![("s1", 2)]),
        ("old one gone: the new set grows", 3, "1", "0", (2, 2, 2), (1, 1, 1), vec![("s2", 2)]),
        ("one phase per reconcile: scale-up first", 3, "1", "1", (3, 3, 3), (0, 0, 0), vec![("s2", 1)]),
        ("the new set above replicas is cut back", 3, "1", "0", (0, 0, 0), (5, 5, 5), vec![("s2", 3)]),
    ];
    for (name, replicas, surge, unav, (os, oa, ov), (ns, na, nv), expected) in cases {
        let (mut d, old) = settled(replicas, rolling(surge, unav));
        new_template(&mut d);
        d.status.as_mut().unwrap().conditions = None;
        let max = replicas + max_surge(&d);
        let mut old = old;
        old.spec.replicas = os;
        old.status = Some(MachineSetStatus {
            replicas: oa,
            available_replicas: ov,
            ready_replicas: ov,
            observed_generation: Some(1),
            ..Default::default()
        });
        let new = ms("s2", 5, ns, na, nv).class("class-b").revision("2").replicas_annotations(replicas, max);
        let plan = run(&d, &[old.annotate(PREFER_NO_SCHEDULE, "True"), new], &[]);
        let expected: Vec<(String, i64)> = expected.into_iter().map(|(n, r)| (n.to_string(), r)).collect();
        assert_eq!(scales(&plan), expected, "{name}");
        assert!(plan.create_set.is_none(), "{name}");
        assert!(plan.status.is_some(), "{name}: the status follows every step");
    }
}

#[test]
fn rollout_completion_cleans_up() {
    let (mut d, _) = settled(2, rolling("1", "0"));
    new_template(&mut d);
    d.spec.revision_history_limit = Some(1);
    // The last reconcile wrote a complete status.
    d.metadata.annotations = Some(map(&[(REVISION, "3")]));
    let oldest = ms("s0", 0, 0, 0, 0).class("class-c").revision("1").annotate(PREFER_NO_SCHEDULE, "True");
    let old = ms("s1", 1, 0, 0, 0).class("class-a").revision("2").annotate(PREFER_NO_SCHEDULE, "True");
    let new = ms("s2", 2, 2, 2, 2)
        .class("class-b")
        .revision("3")
        .replicas_annotations(2, 3)
        .annotate(PREFER_NO_SCHEDULE, "True");
    let tainted = NodeFacts {
        prefer_no_schedule: true,
        scale_down_disabled: true,
        scale_down_disabled_by_mcm: true,
        ..node("n1")
    };
    let preserved = DeploymentMachine {
        preserve_expiry_set: true,
        ..machine(
            "m2",
            "s2",
            Some(NodeFacts { scale_down_disabled: true, scale_down_disabled_by_mcm: true, ..node("n2") }),
        )
    };
    let machines = [machine("m1", "s2", Some(tainted)), preserved];
    let plan = run(&d, &[oldest, old, new], &machines);
    assert_eq!(plan.delete_sets, ["s0"], "history beyond the limit, oldest first");
    assert_eq!(plan.nodes.enable_scale_down, ["n1"], "the rollout's protection goes, except on preserved machines");
    assert_eq!(plan.nodes.remove_prefer_no_schedule, ["n1"], "new nodes lose a leftover taint");
    assert_eq!(
        patch_of(&plan, "s2"),
        Some(&json!({"metadata": {"annotations": {"deployment.machine.sapcloud.io/prefer-no-schedule": null}}}))
    );
    assert!(scales(&plan).is_empty());
}

#[test]
fn mcm_754_scaling_during_a_rollout_goes_to_the_new_set_only() {
    let (mut d, old) = settled(4, rolling("1", "0"));
    new_template(&mut d);
    d.spec.replicas = 8;
    let old = {
        let mut o = old;
        o.spec.replicas = 3;
        o.annotate(DESIRED_REPLICAS, "4").annotate(MAX_REPLICAS, "5")
    };
    let new = ms("s2", 5, 2, 2, 1).class("class-b").revision("2").replicas_annotations(4, 5);
    let plan = run(&d, &[old, new], &[]);
    // allowed = 8 + 1 = 9; Σspec = 5: the 4 extra go to s2; s1 only gets its annotations refreshed.
    assert_eq!(scales(&plan), [("s2".to_string(), 6)]);
    assert_eq!(
        patch_of(&plan, "s1"),
        Some(&json!({"metadata": {"annotations": {DESIRED_REPLICAS: "8", MAX_REPLICAS: "9"}}}))
    );
    assert_eq!(events(&plan), [(SCALING_MACHINE_SET, "Scaled up machine set s2 to 6".to_string())]);
}

#[test]
fn scale_in_during_a_rollout_is_proportional() {
    let (mut d, old) = settled(10, rolling("0", "1"));
    new_template(&mut d);
    d.spec.replicas = 5;
    let old = {
        let mut o = old;
        o.spec.replicas = 6;
        o.annotate(DESIRED_REPLICAS, "10").annotate(MAX_REPLICAS, "10")
    };
    let new = ms("s2", 5, 4, 4, 4).class("class-b").revision("2").replicas_annotations(10, 10);
    let plan = run(&d, &[old, new], &[]);
    assert_eq!(scales(&plan), [("s1".to_string(), 3), ("s2".to_string(), 2)]);
}

#[test]
fn a_paused_deployment_scales_but_does_not_roll() {
    let (mut d, old) = settled(3, rolling("1", "0"));
    new_template(&mut d);
    d.spec.paused = true;
    d.spec.replicas = 5;
    d.spec.revision_history_limit = Some(0);
    let drained = ms("s0", 0, 0, 0, 0).class("class-c").revision("0");
    let plan = run(&d, &[drained, old], &[]);
    assert!(plan.create_set.is_none(), "no new set while paused");
    assert_eq!(scales(&plan), [("s1".to_string(), 5)], "the only active set takes the new size");
    assert_eq!(plan.delete_sets, ["s0"], "history is cleaned up while paused");
    assert_eq!(progressing_reason(&plan).as_deref(), Some(DEPLOYMENT_PAUSED));
}

#[test]
fn rollback_table() {
    let (mut d, _) = settled(3, rolling("1", "0"));
    d.metadata.annotations = Some(map(&[(REVISION, "2"), ("team", "b")]));
    new_template(&mut d);
    let s1 =
        ms("s1", 0, 0, 0, 0).class("class-a").revision("1").annotate("team", "a").annotate(PREFER_NO_SCHEDULE, "True");
    let s2 = ms("s2", 1, 3, 3, 3).class("class-b").revision("2").annotate("team", "b").replicas_annotations(3, 4);
    let machines = [machine("m1", "s1", Some(NodeFacts { prefer_no_schedule: true, ..node("n1") }))];

    // (name, revision, expected event reason, template class afterwards)
    let cases = [
        ("revision 0 is the previous revision", 0, DEPLOYMENT_ROLLBACK, Some("class-a")),
        ("an explicit revision", 1, DEPLOYMENT_ROLLBACK, Some("class-a")),
        ("the current revision: unchanged", 2, ROLLBACK_TEMPLATE_UNCHANGED, None),
        ("an unknown revision", 9, ROLLBACK_REVISION_NOT_FOUND, None),
    ];
    for (name, revision, reason, class) in cases {
        let mut d = d.clone();
        d.spec.rollback_to = Some(RollbackConfig { revision });
        let plan = run(&d, &[s1.clone(), s2.clone()], &machines);
        assert_eq!(plan.events.iter().map(|e| e.reason).collect::<Vec<_>>(), [reason], "{name}");
        let patch = plan.deployment_patch.clone().unwrap_or_default();
        assert_eq!(patch.pointer("/spec/rollbackTo"), Some(&Value::Null), "{name}: rollbackTo is cleared");
        assert_eq!(patch.pointer("/spec/template/spec/class/name").and_then(Value::as_str), class, "{name}: template");
        assert!(plan.create_set.is_none() && scales(&plan).is_empty(), "{name}: nothing else this pass");
        if reason == DEPLOYMENT_ROLLBACK {
            assert_eq!(patch.pointer("/metadata/annotations/team").and_then(Value::as_str), Some("a"), "{name}");
            assert_eq!(plan.nodes.remove_prefer_no_schedule, ["n1"], "{name}: the target's nodes are untainted");
        }
    }
}

#[test]
fn rolling_back_to_a_set_raises_its_revision_and_keeps_history() {
    // After the rollback above, the deployment's template is s1's again: s1 becomes the new set.
    let (mut d, _) = settled(3, rolling("1", "0"));
    d.metadata.annotations = Some(map(&[(REVISION, "2")]));
    let s1 = ms("s1", 0, 0, 0, 0).class("class-a").revision("1");
    let s2 = ms("s2", 1, 3, 3, 3).class("class-b").revision("2").replicas_annotations(3, 4);
    let plan = run(&d, &[s1, s2], &[]);
    let patch = patch_of(&plan, "s1").unwrap();
    assert_eq!(patch.pointer("/metadata/annotations/deployment.kubernetes.io~1revision"), Some(&json!("3")));
    assert_eq!(
        patch.pointer(&format!("/metadata/annotations/{}", REVISION_HISTORY.replace('/', "~1"))),
        Some(&json!("1"))
    );
    assert_eq!(scales(&plan), [("s1".to_string(), 1)], "and the rollout back starts");
}

#[test]
fn recreate_table() {
    // (name, old (spec, actual), machines left in old, new set (spec) if any, expected scales, create)
    type Row = (&'static str, (i32, i32), bool, Option<i32>, Vec<(&'static str, i64)>, Option<i32>);
    let cases: Vec<Row> = vec![
        ("first the old sets go to 0", (3, 3), true, None, vec![("s1", 0)], None),
        ("then wait for their machines", (0, 2), true, None, vec![], None),
        ("machines still listed: wait", (0, 0), true, None, vec![], None),
        ("all gone: create the new set at full size", (0, 0), false, None, vec![], Some(3)),
        ("an existing new set is scaled up", (0, 0), false, Some(0), vec![("s2", 3)], None),
    ];
    for (name, (os, oa), machines_left, new, expected, create) in cases {
        let (mut d, old) = settled(3, recreate());
        new_template(&mut d);
        let mut old = old;
        old.spec.replicas = os;
        old.status.as_mut().unwrap().replicas = oa;
        let mut sets = vec![old];
        sets.extend(new.map(|spec| ms("s2", 5, spec, spec, spec).class("class-b").revision("2")));
        let machines: Vec<DeploymentMachine> = if machines_left { vec![machine("m1", "s1", None)] } else { vec![] };
        let plan = run(&d, &sets, &machines);
        let expected: Vec<(String, i64)> = expected.into_iter().map(|(n, r)| (n.to_string(), r)).collect();
        assert_eq!(scales(&plan), expected, "{name}");
        assert_eq!(plan.create_set.as_ref().map(|s| s.spec.replicas), create, "{name}");
    }
}

#[test]
fn a_name_collision_bumps_the_collision_count() {
    let (mut d, old) = settled(3, rolling("1", "0"));
    new_template(&mut d);
    let taken = machine_set_name("d", super::super::template::template_hash(&d.spec.template, None));
    // A set with our would-be name but another template (a hash collision).
    let mut clash = ms(&taken, 3, 0, 0, 0).class("class-z");
    clash.metadata.name = Some(taken.clone());
    let plan = run(&d, &[old, clash], &[]);
    assert!(plan.create_set.is_none());
    assert_eq!(plan.status.as_ref().and_then(|s| s.collision_count), Some(1));
    assert_eq!(plan.requeue_after, Some(Duration::ZERO));
}

#[test]
fn autoscaler_marks_are_planned_and_the_annotation_pruned() {
    let (mut d, set) = settled(2, rolling("1", "0"));
    d.spec.replicas = 2;
    d.metadata.annotations.as_mut().unwrap().extend([
        (TRIGGER_DELETION_BY_MCM.to_string(), "m1~2026-03-01T11:00:00Z,gone~2026-03-01T11:00:00Z".to_string()),
        (LAST_REPLICA_CHANGE_BY_SCALER.to_string(), "2026-03-01T11:00:00Z".to_string()),
    ]);
    let machines = [machine("m1", "s1", None), machine("m2", "s1", None)];
    let plan = run(&d, &[set], &machines);
    assert_eq!(
        plan.machine_marks,
        [MachineMark {
            machine: "m1".into(),
            priority_one: true,
            marked_for_deletion_time: Some("2026-03-01T11:00:00Z".into())
        }]
    );
    assert_eq!(
        plan.deployment_patch.as_ref().and_then(|p| p.pointer("/metadata/annotations").cloned()),
        Some(json!({TRIGGER_DELETION_BY_MCM: "m1~2026-03-01T11:00:00Z"}))
    );
    let copied = patch_of(&plan, "s1").and_then(|p| p.pointer("/metadata/annotations").cloned());
    assert_eq!(
        copied,
        Some(json!({LAST_REPLICA_CHANGE_BY_SCALER: "2026-03-01T11:00:00Z"})),
        "the cut-off reaches the set; the trigger annotation does not"
    );
}

#[test]
fn in_place_changes_propagate_without_rolling() {
    let (mut d, set) = settled(3, rolling("1", "0"));
    let spec = d.spec.template.spec.as_mut().unwrap();
    spec.configuration.drain_timeout = Some(crate::api::Duration::from_secs(600));
    spec.class.kind = "MachineClass".into();
    d.spec.min_ready_seconds = 30;
    let plan = run(&d, &[set], &[]);
    assert!(plan.create_set.is_none(), "no new set");
    assert_eq!(
        patch_of(&plan, "s1"),
        Some(&json!({"spec": {"minReadySeconds": 30, "template": {"spec": {"drainTimeout": "10m0s"}}}}))
    );
}

#[test]
fn progress_deadline_table() {
    // (name, condition reason and minutes since its last update, deadline, expected reason, requeue)
    type Row = (&'static str, &'static str, u32, i32, &'static str, Option<Duration>);
    let cases: Vec<Row> = vec![
        ("stuck past the deadline", MACHINE_SET_UPDATED, 100, 600, PROGRESS_DEADLINE_EXCEEDED, None),
        (
            "stuck within the deadline: look again when it ends",
            MACHINE_SET_UPDATED,
            115,
            600,
            MACHINE_SET_UPDATED,
            Some(Duration::from_secs(301)),
        ),
    ];
    for (name, reason, minute, deadline, expected, requeue) in cases {
        let (mut d, old) = settled(3, rolling("1", "0"));
        new_template(&mut d);
        d.spec.progress_deadline_seconds = Some(deadline);
        let status = d.status.as_mut().unwrap();
        status.replicas = 4;
        status.updated_replicas = 1;
        status.available_replicas = 3;
        status.ready_replicas = 3;
        status.conditions = Some(vec![MachineDeploymentCondition {
            last_update_time: Some(Time(at_minute(minute))),
            ..cond(MachineDeploymentConditionType::Progressing, ConditionStatus::True, reason)
        }]);
        let new = ms("s2", 5, 1, 1, 0).class("class-b").revision("2").replicas_annotations(3, 4);
        let plan = run(&d, &[old.annotate(PREFER_NO_SCHEDULE, "True"), new], &[]);
        let got = plan
            .status
            .as_ref()
            .and_then(|s| {
                get_condition(s.conditions.as_deref().unwrap_or_default(), MachineDeploymentConditionType::Progressing)
                    .cloned()
            })
            .or_else(|| {
                get_condition(
                    d.status.as_ref().unwrap().conditions.as_deref().unwrap(),
                    MachineDeploymentConditionType::Progressing,
                )
                .cloned()
            })
            .and_then(|c| c.reason);
        assert_eq!(got.as_deref(), Some(expected), "{name}");
        assert_eq!(plan.requeue_after, requeue, "{name}");
    }
}

#[test]
fn create_failed_sets_the_condition() {
    let (d, _) = settled(3, rolling("1", "0"));
    let (status, event) = create_failed(&d, "d-abcde", "quota exceeded", now());
    let c = get_condition(status.conditions.as_deref().unwrap(), MachineDeploymentConditionType::Progressing).unwrap();
    assert_eq!((c.status.clone(), c.reason.as_deref()), (ConditionStatus::False, Some(MACHINE_SET_CREATE_ERROR)));
    assert_eq!(event.note, "Failed to create new machine set \"d-abcde\": quota exceeded");
    assert_eq!(event.type_, EventType::Warning);
}

#[test]
fn a_fresh_deployment_creates_its_first_set() {
    // (name, strategy, replicas, expected replicas of the first set)
    let cases = [
        ("rolling: all replicas at once (nothing to replace)", rolling("1", "0"), 3, 3),
        ("rolling with a large surge: never above replicas", rolling("10", "0"), 3, 3),
        ("recreate: all replicas", recreate(), 3, 3),
        ("zero replicas: an empty set", rolling("1", "0"), 0, 0),
    ];
    for (name, strategy, replicas, expected) in cases {
        let mut d = deployment("d", replicas, strategy);
        d.status = None;
        let plan = run(&d, &[], &[]);
        let created = plan.create_set.as_ref().unwrap_or_else(|| panic!("{name}: a set"));
        assert_eq!(created.spec.replicas, expected, "{name}");
        assert_eq!(
            created.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).map(String::as_str),
            Some("1"),
            "{name}"
        );
        assert_eq!(plan.finalizer, Some(FinalizerChange::Add), "{name}");
        assert_eq!(plan.events.len(), usize::from(expected > 0), "{name}");
        let status = plan.status.as_ref().unwrap_or_else(|| panic!("{name}: a first status"));
        assert_eq!(status.observed_generation, Some(1), "{name}");
    }
}

#[test]
fn scaling_from_zero_is_a_scaling_event() {
    let (mut d, set) = settled(0, rolling("1", "0"));
    d.spec.replicas = 2;
    let plan = run(&d, &[set], &[]);
    assert_eq!(scales(&plan), [("s1".to_string(), 2)]);
    assert_eq!(
        patch_of(&plan, "s1").and_then(|p| p.pointer("/metadata/annotations").cloned()),
        Some(json!({DESIRED_REPLICAS: "2", MAX_REPLICAS: "3"}))
    );
    assert!(plan.create_set.is_none());
}

#[test]
fn scaling_to_zero_writes_an_explicit_zero() {
    let (mut d, set) = settled(2, rolling("1", "0"));
    d.spec.replicas = 0;
    let plan = run(&d, &[set], &[]);
    assert_eq!(scales(&plan), [("s1".to_string(), 0)]);
    assert_eq!(patch_of(&plan, "s1").and_then(|p| p.pointer("/spec/replicas").cloned()), Some(json!(0)));
}

#[test]
fn a_paused_rollout_never_times_out() {
    let (mut d, old) = settled(3, rolling("1", "0"));
    new_template(&mut d);
    d.spec.paused = true;
    d.spec.progress_deadline_seconds = Some(1);
    d.status.as_mut().unwrap().conditions =
        Some(vec![cond(MachineDeploymentConditionType::Progressing, ConditionStatus::True, MACHINE_SET_UPDATED)]);
    let plan = run(&d, &[old], &[]);
    assert_eq!(progressing_reason(&plan).as_deref(), Some(DEPLOYMENT_PAUSED));
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn a_timed_out_deployment_stays_timed_out_when_paused() {
    let (mut d, old) = settled(3, rolling("1", "0"));
    new_template(&mut d);
    d.spec.paused = true;
    d.status.as_mut().unwrap().conditions = Some(vec![cond(
        MachineDeploymentConditionType::Progressing,
        ConditionStatus::False,
        PROGRESS_DEADLINE_EXCEEDED,
    )]);
    let plan = run(&d, &[old], &[]);
    let reason = plan
        .status
        .as_ref()
        .and_then(|s| {
            get_condition(s.conditions.as_deref().unwrap_or_default(), MachineDeploymentConditionType::Progressing)
                .and_then(|c| c.reason.clone())
        })
        .unwrap_or_else(|| PROGRESS_DEADLINE_EXCEEDED.to_string());
    assert_eq!(reason, PROGRESS_DEADLINE_EXCEEDED);
}

#[test]
fn the_autoscaler_sees_a_finished_rollout_only_when_complete() {
    use crate::lifecycle::machine_deployment::autoscaler::rollout_finished;
    let (mut d, old) = settled(3, rolling("1", "0"));
    assert!(rollout_finished(d.status.as_ref().unwrap().conditions.as_deref().unwrap()));
    new_template(&mut d);
    let plan = run(&d, &[old], &[]);
    assert!(!rollout_finished(plan.status.as_ref().unwrap().conditions.as_deref().unwrap()), "a rollout started");
}

fn in_place_node(name: &str, candidate: bool, selected: bool, updated: bool) -> NodeFacts {
    use crate::api::mcm::names::{UPDATE_SUCCESSFUL, in_place_reason};
    use crate::lifecycle::machine_deployment::nodes::InPlaceNode;
    let reason = if updated {
        in_place_reason::SUCCESSFUL
    } else if selected {
        in_place_reason::SELECTED
    } else {
        in_place_reason::CANDIDATE
    };
    NodeFacts {
        name: name.into(),
        in_place: InPlaceNode {
            candidate,
            selected,
            result: updated.then(|| UPDATE_SUCCESSFUL.to_string()),
            reason: candidate.then(|| reason.to_string()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn a_new_template_starts_an_in_place_update() {
    let (mut d, old) = settled(3, in_place("0", "1", "Auto"));
    new_template(&mut d);
    let machines: Vec<DeploymentMachine> =
        (1..=3).map(|i| machine(&format!("m{i}"), "s1", Some(node(&format!("n{i}"))))).collect();
    let plan = run(&d, &[old], &machines);
    let created = plan.create_set.as_ref().expect("a new set");
    assert_eq!(created.spec.replicas, 0, "no surge: the new set grows only by moves");
    assert_eq!(plan.nodes.label_candidate, ["n1", "n2", "n3"]);
    assert!(plan.nodes.label_selected.is_empty(), "selection waits for the candidates to be seen");
    assert_eq!(
        patch_of(&plan, "s1").and_then(|p| p.pointer("/metadata/labels")),
        Some(&json!({SCALE_UP_DISABLED: "true"})),
        "the old set may not replace machines"
    );
    assert!(plan.transfers.is_empty());
}

#[test]
fn an_in_place_rollout_selects_then_moves() {
    let (mut d, old) = settled(3, in_place("0", "1", "Auto"));
    new_template(&mut d);
    let first = run(&d, std::slice::from_ref(&old), &[]);
    let new = first.create_set.unwrap();
    let new_name = new.metadata.name.clone().unwrap();
    let old = old.label_set(SCALE_UP_DISABLED, "true");
    let candidates: Vec<DeploymentMachine> = (1..=3)
        .map(|i| machine(&format!("m{i}"), "s1", Some(in_place_node(&format!("n{i}"), true, false, false))))
        .collect();
    let plan = run(&d, &[old.clone(), new.clone()], &candidates);
    assert_eq!(plan.nodes.label_selected, ["n1"], "maxUnavailable 1: one Node, by name");
    assert_eq!(events(&plan), [(SELECTED_FOR_UPDATE_EVENT, "Selected node(s) n1 for in-place update".to_string())]);

    // n1 was updated: it moves, the old set shrinks by one and the new set grows by one.
    let mut machines = candidates.clone();
    machines[0].node = Some(in_place_node("n1", true, true, true));
    machines[0].in_place_reason = Some(crate::api::mcm::names::in_place_reason::SUCCESSFUL.into());
    let plan = run(&d, &[old.clone(), new.clone()], &machines);
    assert_eq!(plan.transfers, [MachineTransfer { machine: "m1".into(), from: "s1".into(), to: new_name.clone() }]);
    assert_eq!(scales(&plan), [("s1".to_string(), 2), (new_name.clone(), 1)]);
    assert!(plan.nodes.label_selected.is_empty(), "one move per pass; selection follows");
}

#[test]
fn a_change_of_replicas_mid_in_place_rollout_does_not_wedge_it() {
    let (mut d, old) = settled(3, in_place("0", "1", "Auto"));
    new_template(&mut d);
    let new = run(&d, std::slice::from_ref(&old), &[]).create_set.unwrap();
    let new_name = new.metadata.name.clone().unwrap();
    let mut old = old.label_set(SCALE_UP_DISABLED, "true");
    old.spec.replicas = 2;
    let mut new = new;
    new.spec.replicas = 1;
    // Scaled from 3 to 5 while old 2 / new 1: the new set grows into the room (fresh VMs), not a stuck scaling event.
    d.spec.replicas = 5;
    let machines = [
        machine("m1", "s1", Some(in_place_node("n1", true, false, false))),
        machine("m2", "s1", Some(in_place_node("n2", true, false, false))),
        machine("m3", &new_name, Some(node("n3"))),
    ];
    let plan = run(&d, &[old, new], &machines);
    assert_eq!(scales(&plan), [(new_name, 3)]);
}
