//! Table tests of the MachineSet replica plan: one row per MCM edge case.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::api::mcm::names::MARKED_FOR_DELETION_TIME;
use crate::api::mcm::{CurrentStatus, MachineSetSpec, MachineSetStatus, MachineStatus};

const NOW: &str = "2026-03-01T12:00:00Z";
const FUTURE: &str = "2026-03-02T12:00:00Z";
const PAST: &str = "2026-03-01T00:00:00Z";

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// A machine for the tables, built through a real `Machine` so `SetMachine::from_machine` is exercised too.
#[derive(Clone)]
struct M {
    name: String,
    phase: Option<MachinePhase>,
    created_min: u32,
    annotations: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    expiry: Option<&'static str>,
    deleting: bool,
    node_preserve: Option<&'static str>,
}

fn m(name: &str, phase: MachinePhase, created_min: u32) -> M {
    M {
        name: name.into(),
        phase: Some(phase),
        created_min,
        annotations: BTreeMap::new(),
        labels: BTreeMap::new(),
        expiry: None,
        deleting: false,
        node_preserve: None,
    }
}

impl M {
    fn ann(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }
    fn marked(self, at: &str) -> Self {
        self.ann(PRIORITY_ANNOTATION, "1").ann(MARKED_FOR_DELETION_TIME, at)
    }
    fn preserve(self, value: &str) -> Self {
        self.ann(PRESERVE, value)
    }
    fn expiry(mut self, t: &'static str) -> Self {
        self.expiry = Some(t);
        self
    }
    fn deleting(mut self) -> Self {
        self.deleting = true;
        self
    }
    fn moved(mut self) -> Self {
        self.labels.insert(UPDATE_RESULT.into(), UPDATE_SUCCESSFUL.into());
        self
    }
    fn node_preserve(mut self, v: &'static str) -> Self {
        self.node_preserve = Some(v);
        self
    }
    fn facts(&self) -> SetMachine {
        let mut machine = Machine::new(&self.name, Default::default());
        machine.metadata.creation_timestamp = Some(Time(ts(&format!("2026-03-01T10:{:02}:00Z", self.created_min))));
        machine.metadata.annotations = Some(self.annotations.clone());
        machine.metadata.labels = Some(self.labels.clone());
        if self.deleting {
            machine.metadata.deletion_timestamp = Some(Time(ts(NOW)));
        }
        machine.status = Some(MachineStatus {
            current_status: Some(CurrentStatus {
                phase: self.phase.clone(),
                preserve_expiry_time: self.expiry.map(|t| Time(ts(t))),
                ..Default::default()
            }),
            ..Default::default()
        });
        SetMachine::from_machine(&machine, self.node_preserve, ts(NOW))
    }
}

/// The set for the tables.
#[derive(Clone)]
struct S {
    replicas: i32,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    deleting: bool,
    auto_max: i32,
    auto_count: i32,
}

fn s(replicas: i32) -> S {
    S { replicas, labels: BTreeMap::new(), annotations: BTreeMap::new(), deleting: false, auto_max: 0, auto_count: 0 }
}

impl S {
    fn frozen(mut self) -> Self {
        self.labels.insert(FREEZE_LABEL.into(), FREEZE_VALUE.into());
        self
    }
    fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }
    fn scaler_change(mut self, at: &str) -> Self {
        self.annotations.insert(LAST_REPLICA_CHANGE_BY_SCALER.into(), at.into());
        self
    }
    fn deleting(mut self) -> Self {
        self.deleting = true;
        self
    }
    fn auto_preserve(mut self, max: i32, count: i32) -> Self {
        self.auto_max = max;
        self.auto_count = count;
        self
    }
    fn facts(&self, machines: &[M]) -> ReplicaFacts {
        let mut set = MachineSet::new(
            "ms",
            MachineSetSpec {
                replicas: self.replicas,
                auto_preserve_failed_machine_max: self.auto_max,
                ..Default::default()
            },
        );
        set.metadata.labels = Some(self.labels.clone());
        set.metadata.annotations = Some(self.annotations.clone());
        if self.deleting {
            set.metadata.deletion_timestamp = Some(Time(ts(NOW)));
        }
        set.status =
            Some(MachineSetStatus { auto_preserve_failed_machine_count: self.auto_count, ..Default::default() });
        ReplicaFacts::from_machine_set(&set, machines.iter().map(M::facts).collect())
    }
}

/// The expected plan, compactly: creations, deletions as (name, reason), blocked.
#[derive(Debug, PartialEq)]
struct Expect {
    create: usize,
    delete: Vec<(String, DeletionReason)>,
    blocked: Option<ScaleUpBlocked>,
}

fn create(n: usize) -> Expect {
    Expect { create: n, delete: vec![], blocked: None }
}

fn delete(victims: &[(&str, DeletionReason)]) -> Expect {
    Expect { create: 0, delete: victims.iter().map(|(n, r)| (n.to_string(), *r)).collect(), blocked: None }
}

fn blocked(b: ScaleUpBlocked) -> Expect {
    Expect { create: 0, delete: vec![], blocked: Some(b) }
}

fn nothing() -> Expect {
    create(0)
}

fn running(n: usize) -> Vec<M> {
    (0..n).map(|i| m(&format!("r{i}"), MachinePhase::Running, u32::try_from(i).unwrap())).collect()
}

const SURPLUS: DeletionReason = DeletionReason::Surplus;
const MARKED: DeletionReason = DeletionReason::MarkedByAutoscaler;
const FAILED: DeletionReason = DeletionReason::Failed;

#[test]
fn replica_plan_table() {
    use MachinePhase::*;
    let cut = "2026-03-01T11:00:00Z";
    let before = "2026-03-01T10:59:00Z";
    let after = "2026-03-01T11:01:00Z";
    let cases: Vec<(&str, S, Vec<M>, Expect)> = vec![
        ("steady state", s(3), running(3), nothing()),
        ("empty set, nothing wanted", s(0), vec![], nothing()),
        ("scale up from zero", s(3), vec![], create(3)),
        ("scale up by the difference", s(5), running(2), create(3)),
        ("scale up is capped at 100", s(250), running(10), create(100)),
        (
            "terminating machines do not count: replace them",
            s(2),
            vec![m("t", Terminating, 0), m("r", Running, 1)],
            create(1),
        ),
        (
            "a machine being deleted counts as terminating",
            s(2),
            vec![m("d", Running, 0).deleting(), m("r", Running, 1)],
            create(1),
        ),
        ("frozen: no creation", s(3).frozen(), running(1), blocked(ScaleUpBlocked::Frozen)),
        ("a freeze label other than True does not freeze", s(3).label(FREEZE_LABEL, "true"), running(1), create(2)),
        (
            "scale-up disabled: no creation",
            s(3).label(SCALE_UP_DISABLED, ""),
            running(1),
            blocked(ScaleUpBlocked::ScaleUpDisabled),
        ),
        ("frozen but not short: deletions go on", s(1).frozen(), running(2), delete(&[("r0", SURPLUS)])),
        (
            "too few: failed machines stay until their replacement exists",
            s(3),
            vec![m("f", Failed, 0), m("r", Running, 1)],
            create(1),
        ),
        (
            "count matches: a failed machine is deleted (and replaced through the diff next pass)",
            s(2),
            vec![m("f", Failed, 0), m("r", Running, 1)],
            delete(&[("f", FAILED)]),
        ),
        (
            "scale down by the difference, by deletion order",
            s(1),
            vec![m("p", Pending, 5), m("r", Running, 0), m("u", Unknown, 9)],
            delete(&[("u", SURPLUS), ("p", SURPLUS)]),
        ),
        ("scale down to zero", s(0), running(2), delete(&[("r0", SURPLUS), ("r1", SURPLUS)])),
        ("scale down: older first among equals", s(1), running(2), delete(&[("r0", SURPLUS)])),
        (
            "a surplus failed machine is named once, as surplus",
            s(1),
            vec![m("f", Failed, 3), m("r", Running, 0)],
            delete(&[("f", SURPLUS)]),
        ),
        (
            "scale down also deletes failed machines beyond the surplus",
            s(2),
            vec![m("f1", Failed, 0), m("f2", Failed, 1), m("r1", Running, 2), m("r2", Running, 3)],
            delete(&[("f1", SURPLUS), ("f2", SURPLUS)]),
        ),
        (
            "MCM #1078: a marked priority-1 machine is deleted although the count matches",
            s(2).scaler_change(cut),
            vec![m("a", Running, 0), m("b", Running, 1).marked(before)],
            delete(&[("b", MARKED)]),
        ),
        (
            "a mark equal to the cut-off counts",
            s(2).scaler_change(cut),
            vec![m("a", Running, 0), m("b", Running, 1).marked(cut)],
            delete(&[("b", MARKED)]),
        ),
        (
            "a mark after the set's cut-off waits for the replica change",
            s(2).scaler_change(cut),
            vec![m("a", Running, 0), m("b", Running, 1).marked(after)],
            nothing(),
        ),
        (
            "no cut-off on the set: marks wait",
            s(2),
            vec![m("a", Running, 0), m("b", Running, 1).marked(before)],
            nothing(),
        ),
        (
            "an unparsable cut-off: marks wait",
            s(2).scaler_change("yesterday"),
            vec![m("a", Running, 0), m("b", Running, 1).marked(before)],
            nothing(),
        ),
        (
            "a mark without priority 1 is not the autoscaler path",
            s(2).scaler_change(cut),
            vec![m("a", Running, 0), m("b", Running, 1).ann(MARKED_FOR_DELETION_TIME, before)],
            nothing(),
        ),
        (
            "priority must be exactly \"1\"",
            s(2).scaler_change(cut),
            vec![
                m("a", Running, 0),
                m("b", Running, 1).ann(PRIORITY_ANNOTATION, "01").ann(MARKED_FOR_DELETION_TIME, before),
            ],
            nothing(),
        ),
        (
            "the surplus picks the marked machine first, named once",
            s(1).scaler_change(cut),
            vec![m("a", Running, 0), m("b", Running, 1).marked(before)],
            delete(&[("b", SURPLUS)]),
        ),
        (
            "surplus, marked and failed together",
            s(2).scaler_change(cut),
            vec![
                m("a", Running, 0),
                m("b", Running, 1).marked(before),
                m("c", Running, 2).marked(before),
                m("f", Failed, 3).preserve("false"),
            ],
            delete(&[("b", SURPLUS), ("c", SURPLUS), ("f", FAILED)]),
        ),
        (
            "too few: marked machines wait too (MCM returns after creating)",
            s(3).scaler_change(cut),
            vec![m("a", Running, 0), m("b", Running, 1).marked(before)],
            create(1),
        ),
        (
            "a preserved failed machine is not deleted",
            s(2),
            vec![m("f", Failed, 0).preserve("now").expiry(FUTURE), m("r", Running, 1)],
            nothing(),
        ),
        (
            "a failed machine about to be preserved (annotation, no expiry yet) is not deleted",
            s(2),
            vec![m("f", Failed, 0).preserve("when-failed"), m("r", Running, 1)],
            nothing(),
        ),
        (
            "the Node's preserve value wins over the Machine's",
            s(2),
            vec![m("f", Failed, 0).node_preserve("now"), m("r", Running, 1)],
            nothing(),
        ),
        (
            "the Node's false wins over the Machine's now",
            s(2),
            vec![m("f", Failed, 0).preserve("now").node_preserve("false"), m("r", Running, 1)],
            delete(&[("f", FAILED)]),
        ),
        (
            "a Node value applied before and since removed means no preservation",
            s(2),
            vec![m("f", Failed, 0).preserve("now").ann(LAST_APPLIED_NODE_PRESERVE, "now"), m("r", Running, 1)],
            delete(&[("f", FAILED)]),
        ),
        (
            "an expired preservation: the failed machine is deleted",
            s(2),
            vec![m("f", Failed, 0).preserve("now").expiry(PAST), m("r", Running, 1)],
            delete(&[("f", FAILED)]),
        ),
        (
            "preserved machines count as replicas and go last on scale-down",
            s(2),
            vec![m("p", Running, 0).preserve("now").expiry(FUTURE), m("a", Running, 1), m("b", Running, 2)],
            delete(&[("a", SURPLUS)]),
        ),
        (
            "preserved machines are scaled down when the count demands it",
            s(0),
            vec![m("p", Failed, 0).preserve("now").expiry(FUTURE), m("a", Running, 1)],
            delete(&[("a", SURPLUS), ("p", SURPLUS)]),
        ),
        (
            "machines moved in place are never surplus",
            s(1),
            vec![m("moved", Running, 0).moved(), m("a", Running, 1)],
            nothing(),
        ),
        (
            "machines moved in place are not deleted as failed either",
            s(2),
            vec![m("moved", Failed, 0).moved(), m("a", Running, 1)],
            nothing(),
        ),
        (
            "terminating machines are never victims",
            s(0),
            vec![m("t", Terminating, 0), m("d", Running, 1).deleting()],
            nothing(),
        ),
    ];
    for (name, set, machines, expected) in cases {
        let plan = plan_replicas(&set.facts(&machines));
        let got = Expect {
            create: plan.create,
            delete: plan.delete.iter().map(|v| (v.name.clone(), v.reason)).collect(),
            blocked: plan.blocked,
        };
        assert_eq!(got, expected, "{name}");
        assert!(!plan.remove_finalizer, "{name}");
    }
}

#[test]
fn deletions_are_capped_at_100() {
    let machines: Vec<M> = (0..150).map(|i| m(&format!("f{i:03}"), MachinePhase::Failed, 0)).collect();
    let plan = plan_replicas(&s(150).facts(&machines));
    assert_eq!(plan.delete.len(), BURST_REPLICAS);
    let surplus: Vec<M> = (0..250).map(|i| m(&format!("r{i:03}"), MachinePhase::Running, 0)).collect();
    let plan = plan_replicas(&s(10).facts(&surplus));
    assert_eq!(plan.delete.len(), BURST_REPLICAS);
    assert_eq!(plan.delete[0].name, "r000");
}

#[test]
fn set_deletion_table() {
    use MachinePhase::*;
    let cases: Vec<(&str, Vec<M>, Vec<&str>, bool)> = vec![
        ("no machines left: drop the finalizer", vec![], vec![], true),
        (
            "every machine not yet being deleted is deleted, preserved ones too",
            vec![m("a", Running, 0), m("p", Failed, 1).preserve("now").expiry(FUTURE), m("d", Running, 2).deleting()],
            vec!["a", "p"],
            false,
        ),
        ("only machines already being deleted: wait", vec![m("d", Terminating, 0).deleting()], vec![], false),
    ];
    for (name, machines, victims, finalizer) in cases {
        let plan = plan_replicas(&s(3).frozen().deleting().facts(&machines));
        let names: Vec<&str> = plan.delete.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, victims, "{name}");
        assert!(plan.delete.iter().all(|v| v.reason == DeletionReason::SetDeleted), "{name}");
        assert_eq!(plan.remove_finalizer, finalizer, "{name}");
        assert_eq!(plan.create, 0, "{name}");
    }
}

#[test]
fn auto_preservation_table() {
    use MachinePhase::*;
    type Row = (&'static str, S, Vec<M>, Vec<&'static str>, Vec<&'static str>, Vec<&'static str>);
    let cases: Vec<Row> = vec![
        ("disabled", s(2), vec![m("f", Failed, 0), m("r", Running, 1)], vec![], vec![], vec!["f"]),
        (
            "room for one: the newest failed machine is preserved, the other deleted",
            s(3).auto_preserve(1, 0),
            vec![m("old", Failed, 0), m("new", Failed, 5), m("r", Running, 1)],
            vec!["new"],
            vec![],
            vec!["old"],
        ),
        (
            "no room left",
            s(2).auto_preserve(1, 1),
            vec![m("p", Failed, 0).preserve(PRESERVE_AUTO).expiry(FUTURE), m("f", Failed, 5)],
            vec![],
            vec![],
            vec!["f"],
        ),
        (
            "machines with a known preserve value are not candidates",
            s(3).auto_preserve(3, 0),
            vec![m("no", Failed, 0).preserve("false"), m("wf", Failed, 1).preserve("when-failed"), m("r", Running, 2)],
            vec![],
            vec![],
            vec!["no"],
        ),
        (
            "an unknown preserve value does not stop auto-preservation",
            s(2).auto_preserve(1, 0),
            vec![m("f", Failed, 0).preserve("maybe"), m("r", Running, 1)],
            vec!["f"],
            vec![],
            vec![],
        ),
        (
            "running machines are not candidates",
            s(2).auto_preserve(2, 0),
            vec![m("r1", Running, 0), m("r2", Running, 1)],
            vec![],
            vec![],
            vec![],
        ),
        (
            "the maximum was lowered: the oldest auto-preserved lose it",
            s(3).auto_preserve(1, 3),
            vec![
                m("a", Failed, 0).preserve(PRESERVE_AUTO).expiry(FUTURE),
                m("b", Failed, 1).preserve(PRESERVE_AUTO).expiry(FUTURE),
                m("c", Failed, 2).preserve(PRESERVE_AUTO).expiry(FUTURE),
            ],
            vec![],
            vec!["a", "b"],
            vec![],
        ),
    ];
    for (name, set, machines, preserve, stop, failed_deleted) in cases {
        let plan = plan_replicas(&set.facts(&machines));
        assert_eq!(plan.auto_preserve, preserve, "{name}");
        assert_eq!(plan.stop_auto_preserve, stop, "{name}");
        let deleted: Vec<&str> =
            plan.delete.iter().filter(|v| v.reason == DeletionReason::Failed).map(|v| v.name.as_str()).collect();
        assert_eq!(deleted, failed_deleted, "{name}");
    }
}

#[test]
fn validation_table() {
    use crate::lifecycle::machine_deployment::test_support::{SetExt, ms};
    use SetValidationError::*;
    // The builder's selector carries the hash label; `class` puts it on the template too.
    let ok = ms("s", 0, 1, 1, 1).class("class-a");
    let edit = |f: &dyn Fn(&mut MachineSet)| {
        let mut s = ok.clone();
        f(&mut s);
        s
    };
    let cases: Vec<(&str, MachineSet, Vec<SetValidationError>)> = vec![
        ("valid", ok.clone(), vec![]),
        ("negative replicas", edit(&|s| s.spec.replicas = -2), vec![NegativeReplicas(-2)]),
        ("no selector (MCM's validator would crash)", edit(&|s| s.spec.selector = None), vec![EmptySelector]),
        (
            "selector not matching the template",
            edit(&|s| {
                s.spec.selector.as_mut().unwrap().match_labels.as_mut().unwrap().insert("zone".into(), "a".into());
            }),
            vec![SelectorDoesNotMatchTemplate],
        ),
        (
            "no class",
            edit(&|s| s.spec.template.as_mut().unwrap().spec = None),
            vec![MissingClass("kind"), MissingClass("name")],
        ),
    ];
    for (name, set, expected) in cases {
        assert_eq!(validate_machine_set(&set).err().unwrap_or_default(), expected, "{name}");
    }
}

#[test]
fn slow_start_batches_table() {
    let cases: [(usize, &[usize]); 7] = [
        (0, &[]),
        (1, &[1]),
        (2, &[1, 1]),
        (3, &[1, 2]),
        (7, &[1, 2, 4]),
        (10, &[1, 2, 4, 3]),
        (100, &[1, 2, 4, 8, 16, 32, 37]),
    ];
    for (n, expected) in cases {
        assert_eq!(slow_start_batches(n), expected, "{n}");
        assert_eq!(slow_start_batches(n).iter().sum::<usize>(), n, "{n}");
    }
}
