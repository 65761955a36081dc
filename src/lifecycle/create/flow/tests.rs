use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::api::mcm::names::NODE_LABEL;
use crate::api::mcm::{MachineOperationType, MachineState, MachineStatus};
use crate::lifecycle::config::MachineConfig;
use crate::lifecycle::status;

fn t(s: &str) -> Timestamp {
    format!("2025-01-01T{s}Z").parse().unwrap()
}

fn machine(phase: Option<MachinePhase>, provider_id: Option<&str>, node: Option<&str>) -> Machine {
    let mut m = Machine::new("m1", Default::default());
    m.metadata.creation_timestamp = Some(Time(t("00:00:00")));
    m.spec.provider_id = provider_id.map(str::to_string);
    m.metadata.labels = node.map(|n| BTreeMap::from([(NODE_LABEL.to_string(), n.to_string())]));
    m.status = phase.map(|p| MachineStatus {
        current_status: Some(status::entering(p, t("00:00:01"))),
        last_operation: Some(crate::api::mcm::LastOperation {
            type_: Some(MachineOperationType::Create),
            state: Some(MachineState::Failed),
            description: Some(
                "Cloud provider message - machine codes error: code = [Unavailable] message = [busy]".into(),
            ),
            error_code: Some("Unavailable".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    m
}

fn err(code: Code) -> DriverError {
    DriverError::new(code, "boom")
}

fn found() -> MachineStatusResponse {
    MachineStatusResponse { provider_id: "vm://1".into(), node_name: "n1".into(), addresses: vec![] }
}

fn made(node: &str) -> CreateMachineResponse {
    CreateMachineResponse {
        provider_id: "vm://2".into(),
        node_name: node.into(),
        last_known_state: Some("state".into()),
        addresses: vec![],
    }
}

fn refused_mark() -> crate::lifecycle::create::refusal::Refusal {
    crate::lifecycle::create::refusal::Refusal { error: err(Code::InvalidArgument), count: 1, until: t("00:05:40") }
}

fn prepared() -> CreateProgress {
    CreateProgress { prepared: Some(Ok(())), ..Default::default() }
}

/// A row: a name, the machine, the pass's answers, flags, and what the flow does next.
struct Row {
    name: &'static str,
    machine: Machine,
    progress: CreateProgress,
    target: bool,
    backing_off: Option<Duration>,
    deleting: bool,
    want: Want,
}

/// What a row expects, in short.
#[derive(Debug, PartialEq)]
enum Want {
    Provisioned,
    Prepare,
    GetStatus,
    InitializeFound,
    Create,
    DeleteStaleVm,
    /// Record: providerID, node name, trusted, with an event.
    Record(&'static str, &'static str, bool, bool),
    Initialize,
    /// Finish: new phase, event reason, next, provisioned.
    Finish(Option<MachinePhase>, Option<&'static str>, Next, bool),
}

fn row(name: &'static str, machine: Machine, progress: CreateProgress, want: Want) -> Row {
    Row { name, machine, progress, target: true, backing_off: None, deleting: false, want }
}

fn short(action: CreateAction) -> Want {
    match action {
        CreateAction::Provisioned => Want::Provisioned,
        CreateAction::Prepare => Want::Prepare,
        CreateAction::GetStatus => Want::GetStatus,
        CreateAction::InitializeFound => Want::InitializeFound,
        CreateAction::Create => Want::Create,
        CreateAction::DeleteStaleVm { .. } => Want::DeleteStaleVm,
        CreateAction::Record { vm, event } => Want::Record(
            if vm.provider_id == "vm://1" {
                "vm://1"
            } else if vm.provider_id == "vm://2" {
                "vm://2"
            } else {
                "other"
            },
            if vm.node_name == "n1" {
                "n1"
            } else if vm.node_name.is_empty() {
                ""
            } else {
                "other"
            },
            vm.trusted,
            event.is_some(),
        ),
        CreateAction::Initialize { .. } => Want::Initialize,
        CreateAction::Finish(f) => {
            Want::Finish(f.patch.new_phase().cloned(), f.event.map(|e| e.reason), f.next, f.provisioned)
        }
    }
}

#[test]
fn the_create_flow_step_by_step() {
    use MachinePhase::{CrashLoopBackOff, Failed, Pending, Running};
    let deadline = Some(t("00:20:00"));
    let fresh = || machine(None, None, None);
    let with = |f: fn(&mut CreateProgress)| {
        let mut p = prepared();
        f(&mut p);
        p
    };
    let mut rows = vec![
        row(
            "running with its VM",
            machine(Some(Running), Some("vm://1"), Some("n1")),
            Default::default(),
            Want::Provisioned,
        ),
        row("failed for good", machine(Some(Failed), None, None), Default::default(), Want::Provisioned),
        row("new", fresh(), Default::default(), Want::Prepare),
        Row {
            backing_off: Some(Duration::from_secs(30)),
            ..row(
                "crash loop, backing off",
                machine(Some(CrashLoopBackOff), None, None),
                Default::default(),
                Want::Finish(None, None, Next::Sleep(Duration::from_secs(30)), false),
            )
        },
        row("prepared", fresh(), prepared(), Want::GetStatus),
        row(
            "no driver for the class",
            fresh(),
            CreateProgress { prepared: Some(Err(err(Code::Internal))), ..Default::default() },
            Want::Finish(
                Some(CrashLoopBackOff),
                Some("FailedCreate"),
                Next::Retry { class: RetryClass::Other, deadline },
                false,
            ),
        ),
        row("found", fresh(), with(|p| p.status = Some(Ok(found()))), Want::Record("vm://1", "n1", false, false)),
        row("not found: create", fresh(), with(|p| p.status = Some(Err(err(Code::NotFound)))), Want::Create),
        Row {
            deleting: true,
            ..row(
                "not found, deleted meanwhile: nothing is created",
                fresh(),
                with(|p| p.status = Some(Err(err(Code::NotFound)))),
                Want::Finish(None, None, Next::Done, false),
            )
        },
        row(
            "not found, but the machine names its VM by providerID: trusted",
            machine(None, Some("vm://1"), None),
            with(|p| p.status = Some(Err(err(Code::NotFound)))),
            Want::Record("vm://1", "", true, false),
        ),
        row(
            "not found, but the machine has its node label: trusted",
            machine(Some(CrashLoopBackOff), Some("vm://1"), Some("n1")),
            with(|p| p.status = Some(Err(err(Code::Unimplemented)))),
            Want::Record("vm://1", "n1", true, false),
        ),
        row(
            "lookup unavailable",
            fresh(),
            with(|p| p.status = Some(Err(err(Code::Unavailable)))),
            Want::Finish(
                Some(CrashLoopBackOff),
                Some("FailedCreate"),
                Next::Retry { class: RetryClass::Transient, deadline },
                false,
            ),
        ),
        row(
            "lookup refuses the class: CrashLoopBackOff until the creation timeout, as MCM",
            fresh(),
            with(|p| p.status = Some(Err(err(Code::InvalidArgument)))),
            Want::Finish(
                Some(CrashLoopBackOff),
                Some("FailedCreate"),
                Next::Retry { class: RetryClass::Other, deadline },
                false,
            ),
        ),
        row(
            "the class is marked refused: the machine waits without asking the cloud, quietly",
            fresh(),
            with(|p| p.class_refused = Some((refused_mark(), Duration::from_secs(40)))),
            Want::Finish(Some(CrashLoopBackOff), None, Next::Sleep(Duration::from_secs(40)), false),
        ),
        row(
            "the class is marked refused, but the machine names its VM: looked up as usual",
            machine(Some(CrashLoopBackOff), Some("vm://1"), None),
            with(|p| p.class_refused = Some((refused_mark(), Duration::from_secs(40)))),
            Want::GetStatus,
        ),
        row(
            "the create refused the class: the class's back-off, not the machine's",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Err(err(Code::InvalidArgument)));
                p.class_refused = Some((refused_mark(), Duration::from_secs(15)));
            }),
            Want::Finish(Some(CrashLoopBackOff), Some("FailedCreate"), Next::Sleep(Duration::from_secs(15)), false),
        ),
        row("uninitialized", fresh(), with(|p| p.status = Some(Err(err(Code::Uninitialized)))), Want::InitializeFound),
        row(
            "uninitialized, initialized",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::Uninitialized)));
                p.initialized_found = Some(Ok(InitializeMachineResponse {
                    provider_id: "vm://1".into(),
                    node_name: "n1".into(),
                    addresses: vec![],
                }));
            }),
            Want::Record("vm://1", "n1", false, false),
        ),
        row(
            "uninitialized, initialization failed",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::Uninitialized)));
                p.initialized_found = Some(Err(err(Code::Internal)));
            }),
            Want::Finish(
                Some(CrashLoopBackOff),
                Some("FailedInitialize"),
                Next::Retry { class: RetryClass::Other, deadline },
                false,
            ),
        ),
        row(
            "created",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Ok(made("n2")));
            }),
            Want::Record("vm://2", "other", false, true),
        ),
        row(
            "creation failed",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Err(err(Code::ResourceExhausted)));
            }),
            Want::Finish(
                Some(CrashLoopBackOff),
                Some("FailedCreate"),
                Next::Retry { class: RetryClass::Exhausted, deadline },
                false,
            ),
        ),
        row(
            "created on a stale Node",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Ok(made("old-node")));
            }),
            Want::DeleteStaleVm,
        ),
        row(
            "created on a stale Node, deleted again",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Ok(made("old-node")));
                p.stale_deleted = true;
            }),
            Want::Finish(
                Some(Failed),
                Some("StaleNode"),
                Next::Retry { class: RetryClass::Transient, deadline },
                false,
            ),
        ),
        row(
            "created without a node name",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Ok(made("")));
            }),
            Want::Finish(
                Some(CrashLoopBackOff),
                Some("FailedCreate"),
                Next::Retry { class: RetryClass::Other, deadline },
                false,
            ),
        ),
        row(
            "created and recorded: initialize",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Ok(made("n2")));
                p.recorded = true;
            }),
            Want::Initialize,
        ),
        row(
            "created and recorded, the machine now naming it: still the new VM",
            machine(None, Some("vm://2"), Some("n2")),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Ok(made("n2")));
                p.recorded = true;
            }),
            Want::Initialize,
        ),
        row(
            "initialized: Pending until the Node joins",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Ok(made("n2")));
                p.recorded = true;
                p.initialized = Some(Ok(()));
            }),
            Want::Finish(Some(Pending), None, Next::Wake(deadline), true),
        ),
        row(
            "initialization not implemented: fine",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Ok(made("n2")));
                p.recorded = true;
                p.initialized = Some(Err(err(Code::Unimplemented)));
            }),
            Want::Finish(Some(Pending), None, Next::Wake(deadline), true),
        ),
        row(
            "initialization failed",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Ok(made("n2")));
                p.recorded = true;
                p.initialized = Some(Err(err(Code::Unavailable)));
            }),
            Want::Finish(
                Some(CrashLoopBackOff),
                Some("FailedInitialize"),
                Next::Retry { class: RetryClass::Transient, deadline },
                false,
            ),
        ),
        row(
            "found and recorded: no initialization",
            fresh(),
            with(|p| {
                p.status = Some(Ok(found()));
                p.recorded = true;
            }),
            Want::Finish(Some(Pending), None, Next::Wake(deadline), true),
        ),
    ];
    rows.push(Row {
        target: false,
        ..row(
            "no target cluster: Available, no deadline to wake for, no node name needed",
            fresh(),
            with(|p| {
                p.status = Some(Err(err(Code::NotFound)));
                p.created = Some(Ok(made("")));
                p.recorded = true;
                p.initialized = Some(Ok(()));
            }),
            Want::Finish(Some(MachinePhase::Available), None, Next::Wake(None), true),
        )
    });
    let effective = Effective::of(&Machine::new("x", Default::default()), &MachineConfig::default());
    let nodes = |name: &str| name == "old-node" || name == "m1";
    for r in rows {
        let o = CreateObservation {
            machine: &r.machine,
            kind: "machine",
            now: t("00:05:00"),
            effective: &effective,
            target: r.target,
            backing_off: r.backing_off,
            deleting: r.deleting,
            node_exists: &nodes,
            progress: &r.progress,
        };
        assert_eq!(short(next(&o)), r.want, "{}", r.name);
    }
}

#[test]
fn a_crash_loop_past_its_deadline_fails_without_calling_the_cloud() {
    let effective = Effective::of(&Machine::new("x", Default::default()), &MachineConfig::default());
    let m = machine(Some(MachinePhase::CrashLoopBackOff), None, None);
    let progress = CreateProgress::default();
    let o = CreateObservation {
        machine: &m,
        kind: "machine",
        now: t("00:20:00"),
        effective: &effective,
        target: true,
        backing_off: Some(Duration::from_secs(60)),
        deleting: false,
        node_exists: &|_| false,
        progress: &progress,
    };
    let CreateAction::Finish(f) = next(&o) else { panic!("a finish") };
    assert_eq!(f.patch.new_phase(), Some(&MachinePhase::Failed));
    assert_eq!(f.patch.last_operation.unwrap().error_code.as_deref(), Some("Unavailable"));
    assert_eq!(f.next, Next::Wake(None));
}

#[test]
fn events_name_the_kind_and_the_vm() {
    let effective = Effective::of(&Machine::new("x", Default::default()), &MachineConfig::default());
    let m = machine(None, None, None);
    let progress = CreateProgress {
        prepared: Some(Ok(())),
        status: Some(Err(err(Code::NotFound))),
        created: Some(Ok(made("n2"))),
        ..Default::default()
    };
    let o = CreateObservation {
        machine: &m,
        kind: "MCMMachine",
        now: t("00:05:00"),
        effective: &effective,
        target: true,
        backing_off: None,
        deleting: false,
        node_exists: &|_| false,
        progress: &progress,
    };
    let CreateAction::Record { event: Some(event), .. } = next(&o) else { panic!("a record with an event") };
    assert_eq!(event.note, "Created VM vm://2 for MCMMachine m1");
}
