use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
use serde_json::json;

use super::*;
use crate::api::mcm::{CurrentStatus, MachineStatus};

fn t(s: &str) -> Timestamp {
    format!("2026-03-01T{s}Z").parse().unwrap()
}

const AT: &str = "12:00:00";

fn machine(phase: MachinePhase, annotations: &[(&str, &str)], expiry: Option<&str>) -> Machine {
    let mut m = Machine::new("m", Default::default());
    let map: BTreeMap<String, String> = annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    m.metadata.annotations = (!map.is_empty()).then_some(map);
    m.status = Some(MachineStatus {
        current_status: Some(CurrentStatus {
            phase: Some(phase),
            last_update_time: Some(Time(t("11:59:00"))),
            preserve_expiry_time: expiry.map(|e| Time(t(e))),
            ..Default::default()
        }),
        ..Default::default()
    });
    m
}

fn node(annotations: &[(&str, &str)], tainted: bool, condition: Option<(&str, &str, &str)>) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some("n".into());
    let map: BTreeMap<String, String> = annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    n.metadata.annotations = (!map.is_empty()).then_some(map);
    let mut taints = vec![Taint { key: "other".into(), effect: "NoExecute".into(), ..Default::default() }];
    if tainted {
        taints.push(Taint { key: PRESERVED_TAINT.into(), effect: "NoSchedule".into(), ..Default::default() });
    }
    n.spec = Some(NodeSpec { taints: Some(taints), ..Default::default() });
    n.status = Some(NodeStatus {
        conditions: condition.map(|(status, reason, message)| {
            vec![NodeCondition {
                type_: PRESERVED_CONDITION.into(),
                status: status.into(),
                reason: Some(reason.into()),
                message: Some(message.into()),
                ..Default::default()
            }]
        }),
        ..Default::default()
    });
    n
}

fn run(m: &Machine, n: NodeView<'_>) -> Plan {
    let config = MachineConfig { preserve_timeout: Duration::from_secs(3600), ..Default::default() };
    decide(m, n, &Effective::of(m, &config), &config, t(AT))
}

const CA: [(&str, &str); 2] = [(SCALE_DOWN_DISABLED, "true"), (SCALE_DOWN_DISABLED_BY_MCM, "true")];

fn taint_keys(plan: &Plan) -> Option<Vec<String>> {
    let taints = plan.node_patch.as_ref()?.get("spec")?.get("taints")?.as_array()?.clone();
    Some(taints.iter().map(|t| t["key"].as_str().unwrap_or_default().to_string()).collect())
}

#[test]
fn not_preservation_bound_is_left_alone() {
    let cases = [
        ("nothing", machine(MachinePhase::Failed, &[], None), node(&[], false, None)),
        ("invalid machine value", machine(MachinePhase::Failed, &[(PRESERVE, "yes")], None), node(&[], false, None)),
        ("invalid node value", machine(MachinePhase::Failed, &[(PRESERVE, NOW)], Some("13:00:00")), {
            node(&[(PRESERVE, "always")], false, None)
        }),
        // Asked only on failure, or stopping without a preservation: nothing to do (MCM).
        ("when-failed while running", machine(MachinePhase::Running, &[(PRESERVE, WHEN_FAILED)], None), {
            node(&[], false, None)
        }),
        ("false, not preserved", machine(MachinePhase::Failed, &[(PRESERVE, FALSE)], None), node(&[], false, None)),
        ("auto while running", machine(MachinePhase::Running, &[(PRESERVE, PRESERVE_AUTO)], None), {
            node(&[], false, None)
        }),
    ];
    for (name, m, n) in cases {
        assert!(run(&m, NodeView::Found(&n)).is_empty(), "{name}: {:?}", run(&m, NodeView::Found(&n)));
    }
}

#[test]
fn preserving_a_running_machine_from_its_node() {
    let m = machine(MachinePhase::Running, &[], None);
    let n = node(&[(PRESERVE, NOW)], false, None);
    let plan = run(&m, NodeView::Found(&n));
    let until = t("13:00:00");
    assert_eq!(plan.expiry, Expiry::Set(until));
    assert_eq!(plan.wake_at, Some(until));
    let patch = plan.node_patch.clone().unwrap();
    assert_eq!(
        patch["metadata"]["annotations"],
        json!({SCALE_DOWN_DISABLED: "true", SCALE_DOWN_DISABLED_BY_MCM: "true"})
    );
    assert_eq!(taint_keys(&plan), None, "a Running machine's Node is not tainted");
    assert!(plan.drain.is_none());
    let c = plan.condition.clone().unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", Some(text::BY_USER)));
    assert_eq!(c.message.as_deref(), Some("Machine preserved until 2026-03-01T13:00:00Z."));
    // The Node's value is recorded on the Machine.
    assert_eq!(
        plan.machine_patch,
        Some(json!({"metadata": {"annotations": {PRESERVE: null, LAST_APPLIED_NODE_PRESERVE: NOW}}}))
    );
}

#[test]
fn a_preserved_machine_as_mcm_leaves_it_needs_nothing() {
    let running = machine(MachinePhase::Running, &[(LAST_APPLIED_NODE_PRESERVE, NOW)], Some("12:30:00"));
    let n = node(&[(PRESERVE, NOW), CA[0], CA[1]], false, Some(("True", text::BY_USER, "Machine preserved until x.")));
    let plan = run(&running, NodeView::Found(&n));
    assert!(plan.is_empty(), "{plan:?}");
    assert_eq!(plan.wake_at, Some(t("12:30:00")));

    let failed = machine(MachinePhase::Failed, &[(PRESERVE, PRESERVE_AUTO)], Some("12:30:00"));
    let message = format!("{} {} x.", text::DRAINED, text::UNTIL);
    let n = node(&[CA[0], CA[1]], true, Some(("True", text::BY_MCM, &message)));
    let plan = run(&failed, NodeView::Found(&n));
    assert!(plan.is_empty(), "{plan:?}");
}

#[test]
fn a_failed_machine_is_tainted_drained_then_true() {
    let m = machine(MachinePhase::Failed, &[(PRESERVE, WHEN_FAILED)], None);
    let n = node(&[], false, None);
    let plan = run(&m, NodeView::Found(&n));
    assert_eq!(plan.expiry, Expiry::Set(t("13:00:00")));
    assert_eq!(taint_keys(&plan), Some(vec!["other".to_string(), PRESERVED_TAINT.to_string()]));
    let drain = plan.drain.clone().unwrap();
    assert_eq!((drain.node.as_str(), drain.force, drain.timeout), ("n", false, Duration::from_secs(7200)));
    assert!(plan.condition.is_none(), "written after the drain");
    let ok = plan.condition_after(&Ok(())).unwrap();
    assert_eq!((ok.status.as_str(), ok.reason.as_deref()), ("True", Some(text::BY_USER)));
    assert!(ok.message.unwrap().starts_with(text::DRAINED));
    let failed = plan.condition_after(&Err("pdb".into())).unwrap();
    assert_eq!(failed.status, "False");
    assert!(failed.message.unwrap().starts_with(text::NOT_DRAINED));
    assert_eq!(plan.machine_patch, None, "the machine's own value stays");

    // After a failed drain it is drained again; the auto-preserved reason is MCM's.
    let m = machine(MachinePhase::Failed, &[(PRESERVE, PRESERVE_AUTO)], Some("12:30:00"));
    let message = format!("{} {} x.", text::NOT_DRAINED, text::UNTIL);
    let n = node(&[CA[0], CA[1]], true, Some(("False", text::BY_MCM, &message)));
    let plan = run(&m, NodeView::Found(&n));
    assert_eq!((plan.expiry.clone(), plan.node_patch.clone()), (Expiry::Keep, None));
    assert!(plan.drain.is_some());
    assert_eq!(plan.condition_after(&Ok(())).unwrap().reason.as_deref(), Some(text::BY_MCM));
}

#[test]
fn drain_is_forced_by_label_time_or_unready_node() {
    let config = MachineConfig::default();
    let mut m = machine(MachinePhase::Failed, &[], None);
    let n = node(&[], false, None);
    let e = Effective::of(&m, &config);
    assert!(!drain_options(&m, &n, &e, &config, t(AT)).force);
    assert!(drain_options(&m, &n, &e, &config, t(AT) + jiff::SignedDuration::from_hours(3)).force);
    m.metadata.labels = Some(BTreeMap::from([(FORCE_DRAIN_LABEL.to_string(), "True".to_string())]));
    let forced = drain_options(&m, &n, &e, &config, t(AT));
    assert_eq!((forced.force, forced.timeout, forced.max_evict_retries), (true, Duration::from_secs(60), 1));
}

#[test]
fn a_recovered_machine_preserved_now_loses_the_taint_only() {
    let m = machine(MachinePhase::Running, &[(LAST_APPLIED_NODE_PRESERVE, NOW)], Some("12:30:00"));
    let message = format!("{} {} x.", text::DRAINED, text::UNTIL);
    let n = node(&[(PRESERVE, NOW), CA[0], CA[1]], true, Some(("True", text::BY_USER, &message)));
    let plan = run(&m, NodeView::Found(&n));
    assert_eq!(plan.expiry, Expiry::Keep);
    assert_eq!(taint_keys(&plan), Some(vec!["other".to_string()]));
    assert_eq!((plan.condition.clone(), plan.drain.clone(), plan.machine_patch.clone()), (None, None, None));
}

#[test]
fn stopping_removes_every_mark() {
    let message = format!("{} {} x.", text::DRAINED, text::UNTIL);
    let marked = |preserve: Option<&str>| {
        let mut a = vec![CA[0], CA[1]];
        a.extend(preserve.map(|v| (PRESERVE, v)));
        node(&a, true, Some(("True", text::BY_USER, &message)))
    };
    let ca_gone = json!({SCALE_DOWN_DISABLED: null, SCALE_DOWN_DISABLED_BY_MCM: null});
    let ca_and_preserve_gone = json!({SCALE_DOWN_DISABLED: null, SCALE_DOWN_DISABLED_BY_MCM: null, PRESERVE: null});
    let both_gone = json!({"metadata": {"annotations": {PRESERVE: null, LAST_APPLIED_NODE_PRESERVE: null}}});
    let applied_gone = json!({"metadata": {"annotations": {PRESERVE: null, LAST_APPLIED_NODE_PRESERVE: null}}});
    // (case, machine, node preserve value, node annotations patched, machine patch)
    let cases = [
        (
            "node annotation removed",
            machine(MachinePhase::Failed, &[(LAST_APPLIED_NODE_PRESERVE, NOW)], Some("12:30:00")),
            None,
            ca_gone.clone(),
            Some(applied_gone.clone()),
        ),
        (
            "node annotation false",
            machine(MachinePhase::Running, &[(LAST_APPLIED_NODE_PRESERVE, NOW)], Some("12:30:00")),
            Some(FALSE),
            ca_gone.clone(),
            Some(json!({"metadata": {"annotations": {PRESERVE: null, LAST_APPLIED_NODE_PRESERVE: FALSE}}})),
        ),
        (
            "expired now",
            machine(MachinePhase::Running, &[(LAST_APPLIED_NODE_PRESERVE, NOW)], Some("12:00:00")),
            Some(NOW),
            ca_and_preserve_gone.clone(),
            Some(both_gone.clone()),
        ),
        (
            "expired when-failed on the machine",
            machine(MachinePhase::Failed, &[(PRESERVE, WHEN_FAILED)], Some("11:00:00")),
            None,
            ca_gone.clone(),
            Some(both_gone.clone()),
        ),
        (
            "auto-preserved machine recovered",
            machine(MachinePhase::Running, &[(PRESERVE, PRESERVE_AUTO)], Some("13:00:00")),
            None,
            ca_gone.clone(),
            Some(both_gone.clone()),
        ),
        (
            "when-failed machine recovered keeps its annotation",
            machine(MachinePhase::Running, &[(PRESERVE, WHEN_FAILED)], Some("13:00:00")),
            None,
            ca_gone.clone(),
            None,
        ),
    ];
    for (name, m, value, node_annotations, machine_patch) in cases {
        let n = marked(value);
        let plan = run(&m, NodeView::Found(&n));
        assert_eq!(plan.expiry, Expiry::Clear, "{name}");
        let patch = plan.node_patch.clone().unwrap();
        assert_eq!(patch["metadata"]["annotations"], node_annotations, "{name}");
        assert_eq!(taint_keys(&plan), Some(vec!["other".to_string()]), "{name}");
        let c = plan.condition.clone().unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_deref()), ("False", Some(text::STOPPED)), "{name}");
        assert_eq!(plan.machine_patch, machine_patch, "{name}");
        assert_eq!((plan.drain.clone(), plan.wake_at), (None, None), "{name}");
    }
}

#[test]
fn autoscaler_annotation_set_by_someone_else_stays() {
    let m = machine(MachinePhase::Running, &[(LAST_APPLIED_NODE_PRESERVE, NOW)], Some("12:30:00"));
    let n = node(&[(SCALE_DOWN_DISABLED, "true")], false, Some(("True", text::BY_USER, "x")));
    let plan = run(&m, NodeView::Found(&n));
    assert_eq!(plan.expiry, Expiry::Clear);
    assert_eq!(plan.node_patch, None);
}

#[test]
fn without_a_node_only_the_machine_is_marked() {
    let m = machine(MachinePhase::Failed, &[(PRESERVE, NOW)], None);
    for view in [NodeView::NoNode, NodeView::Missing] {
        let plan = run(&m, view);
        assert_eq!(plan.expiry, Expiry::Set(t("13:00:00")));
        assert_eq!((plan.node_patch.clone(), plan.drain.clone(), plan.condition.clone()), (None, None, None));
    }
    // A per-machine timeout wins over the flag.
    let mut own = m.clone();
    own.spec.configuration.machine_preserve_timeout = Some(crate::api::Duration(Duration::from_secs(60)));
    assert_eq!(run(&own, NodeView::NoNode).expiry, Expiry::Set(t("12:01:00")));
    let expired = machine(MachinePhase::Failed, &[(PRESERVE, NOW)], Some("11:00:00"));
    let plan = run(&expired, NodeView::Missing);
    assert_eq!(plan.expiry, Expiry::Clear);
    assert_eq!(
        plan.machine_patch,
        Some(json!({"metadata": {"annotations": {PRESERVE: null, LAST_APPLIED_NODE_PRESERVE: null}}}))
    );
}
