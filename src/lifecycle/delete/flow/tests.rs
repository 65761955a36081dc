use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::api::mcm::{LastOperation, MachinePhase, MachineState, MachineStatus};
use crate::lifecycle::names::text;
use crate::lifecycle::retry::RetryClass;
use crate::lifecycle::status;

fn t(s: &str) -> Timestamp {
    format!("2025-01-01T{s}Z").parse().unwrap()
}

fn machine(phase: MachinePhase, description: &str, node: Option<&str>) -> Machine {
    let mut m = Machine::new("m1", Default::default());
    m.spec.provider_id = Some("vm://1".into());
    m.metadata.deletion_timestamp = Some(Time(t("00:00:00")));
    m.metadata.labels = node.map(|n| BTreeMap::from([("node".to_string(), n.to_string())]));
    m.status = Some(MachineStatus {
        current_status: Some(status::entering(phase, t("00:00:00"))),
        last_operation: Some(LastOperation { description: Some(description.into()), ..Default::default() }),
        ..Default::default()
    });
    m
}

fn err(code: Code) -> DriverError {
    DriverError::new(code, "boom")
}

/// What a row expects, in short.
#[derive(Debug, PartialEq)]
enum Want {
    /// Advance: the description's next step, the label, the event reason, whether it stops.
    Advance(Step, Option<&'static str>, Option<&'static str>, Option<Next>),
    FindVm,
    /// Drain: forced.
    Drain(bool),
    ListVolumeAttachments,
    DeleteVolumeAttachments(usize),
    DeleteVm,
    DeleteNode,
    RemoveFinalizer,
}

fn short(action: DeleteAction) -> Want {
    match action {
        DeleteAction::Advance(a) => {
            let mut after = Machine::new("m1", Default::default());
            after.status = Some(MachineStatus {
                current_status: Some(status::entering(MachinePhase::Terminating, t("00:00:00"))),
                ..Default::default()
            });
            a.patch.apply_to(after.status.get_or_insert_with(Default::default));
            let label = a.label.map(|l| if l == "n1" { "n1" } else { "other" });
            Want::Advance(step(&after), label, a.event.map(|e| e.reason), a.stop)
        }
        DeleteAction::FindVm => Want::FindVm,
        DeleteAction::Drain { options, .. } => Want::Drain(options.force),
        DeleteAction::ListVolumeAttachments { .. } => Want::ListVolumeAttachments,
        DeleteAction::DeleteVolumeAttachments { names, .. } => Want::DeleteVolumeAttachments(names.len()),
        DeleteAction::DeleteVm => Want::DeleteVm,
        DeleteAction::DeleteNode { .. } => Want::DeleteNode,
        DeleteAction::RemoveFinalizer => Want::RemoveFinalizer,
    }
}

/// A row: name, machine, target, the Node by machine-name label, the answer, what the flow does next.
type Row = (&'static str, Machine, bool, Option<&'static str>, Option<DeleteAnswer>, Want);

#[test]
fn the_deletion_flow_step_by_step() {
    use MachinePhase::{Running, Terminating};
    let retry = |class| Some(Next::Retry { class, deadline: None });
    let drain_retry = Some(Next::Retry { class: RetryClass::Transient, deadline: Some(t("02:00:00")) });
    // (name, machine, target, Node by machine-name label, answer, want)
    let rows: Vec<Row> = vec![
        (
            "running: set Terminating",
            machine(Running, "joined", Some("n1")),
            true,
            None,
            None,
            Want::Advance(Step::FindVm, None, None, None),
        ),
        (
            "node label known: drain next, no driver call",
            machine(Terminating, text::GET_VM_STATUS, Some("n1")),
            true,
            None,
            None,
            Want::Advance(Step::Drain, None, None, None),
        ),
        (
            "no node label, a Node carries the machine's name: label it",
            machine(Terminating, text::GET_VM_STATUS, None),
            true,
            Some("n1"),
            None,
            Want::Advance(Step::Drain, Some("n1"), None, None),
        ),
        (
            "no node label: ask the driver",
            machine(Terminating, text::GET_VM_STATUS, None),
            true,
            None,
            None,
            Want::FindVm,
        ),
        (
            "the driver names the Node",
            machine(Terminating, text::GET_VM_STATUS, None),
            true,
            None,
            Some(DeleteAnswer::VmStatus(Ok("n1".into()))),
            Want::Advance(Step::Drain, Some("n1"), None, None),
        ),
        (
            "the lookup is throttled: retried",
            machine(Terminating, text::GET_VM_STATUS, None),
            true,
            None,
            Some(DeleteAnswer::VmStatus(Err(err(Code::Unavailable)))),
            Want::Advance(Step::FindVm, None, Some("FailedGetStatus"), retry(RetryClass::Transient)),
        ),
        (
            "no target cluster: nothing to find",
            machine(Terminating, text::GET_VM_STATUS, None),
            false,
            None,
            None,
            Want::Advance(Step::Drain, None, None, None),
        ),
        ("drain", machine(Terminating, text::INITIATE_DRAIN, Some("n1")), true, None, None, Want::Drain(false)),
        (
            "drained",
            machine(Terminating, text::INITIATE_DRAIN, Some("n1")),
            true,
            None,
            Some(DeleteAnswer::Drained { forced: false, result: Ok(()) }),
            Want::Advance(Step::DeleteVm, None, None, None),
        ),
        (
            "the drain failed: retried before the drain deadline",
            machine(Terminating, text::INITIATE_DRAIN, Some("n1")),
            true,
            None,
            Some(DeleteAnswer::Drained { forced: false, result: Err("pdb".into()) }),
            Want::Advance(Step::Drain, None, None, drain_retry),
        ),
        (
            "a forced drain failed: volume attachments next",
            machine(Terminating, text::INITIATE_DRAIN, Some("n1")),
            true,
            None,
            Some(DeleteAnswer::Drained { forced: true, result: Err("pdb".into()) }),
            Want::Advance(Step::DeleteVolumeAttachments, None, None, None),
        ),
        (
            "no target cluster: no drain",
            machine(Terminating, text::INITIATE_DRAIN, None),
            false,
            None,
            None,
            Want::Advance(Step::DeleteVm, None, None, None),
        ),
        (
            "volume attachments: look",
            machine(Terminating, text::DELETE_VOLUME_ATTACHMENTS, Some("n1")),
            true,
            None,
            None,
            Want::ListVolumeAttachments,
        ),
        (
            "live volume attachments: delete them",
            machine(Terminating, text::DELETE_VOLUME_ATTACHMENTS, Some("n1")),
            true,
            None,
            Some(DeleteAnswer::VolumeAttachments(VolumeAttachments::Live(vec!["va1".into(), "va2".into()]))),
            Want::DeleteVolumeAttachments(2),
        ),
        (
            "volumes detached",
            machine(Terminating, text::DELETE_VOLUME_ATTACHMENTS, Some("n1")),
            true,
            None,
            Some(DeleteAnswer::VolumeAttachments(VolumeAttachments::NoneAttached)),
            Want::Advance(Step::DeleteVm, None, None, None),
        ),
        (
            "volume attachments without a target cluster",
            machine(Terminating, text::DELETE_VOLUME_ATTACHMENTS, Some("n1")),
            false,
            None,
            None,
            Want::Advance(Step::DeleteVm, None, None, None),
        ),
        (
            "delete the VM",
            machine(Terminating, text::INITIATE_VM_DELETION, Some("n1")),
            true,
            None,
            None,
            Want::DeleteVm,
        ),
        (
            "VM deleted",
            machine(Terminating, text::INITIATE_VM_DELETION, Some("n1")),
            true,
            None,
            Some(DeleteAnswer::VmDeleted(Ok(None))),
            Want::Advance(Step::DeleteNode, None, Some("SuccessfulDelete"), None),
        ),
        (
            "VM already gone: no event",
            machine(Terminating, text::INITIATE_VM_DELETION, Some("n1")),
            true,
            None,
            Some(DeleteAnswer::VmDeleted(Err(err(Code::NotFound)))),
            Want::Advance(Step::DeleteNode, None, None, None),
        ),
        (
            "bad credentials: retried",
            machine(Terminating, text::INITIATE_VM_DELETION, Some("n1")),
            true,
            None,
            Some(DeleteAnswer::VmDeleted(Err(err(Code::Unauthenticated)))),
            Want::Advance(Step::DeleteVm, None, Some("FailedDelete"), retry(RetryClass::of(Code::Unauthenticated))),
        ),
        (
            "delete the Node",
            machine(Terminating, text::INITIATE_NODE_DELETION, Some("n1")),
            true,
            None,
            None,
            Want::DeleteNode,
        ),
        (
            "Node deleted",
            machine(Terminating, text::INITIATE_NODE_DELETION, Some("n1")),
            true,
            None,
            Some(DeleteAnswer::NodeDeleted(NodeDeletion::Deleted("n1".into()))),
            Want::Advance(Step::RemoveFinalizer, None, None, None),
        ),
        (
            "the Node's deletion refused: retried",
            machine(Terminating, text::INITIATE_NODE_DELETION, Some("n1")),
            true,
            None,
            Some(DeleteAnswer::NodeDeleted(NodeDeletion::Failed("n1".into(), "forbidden".into()))),
            Want::Advance(Step::DeleteNode, None, None, retry(RetryClass::Api)),
        ),
        (
            "no target cluster: no Node to delete",
            machine(Terminating, text::INITIATE_NODE_DELETION, None),
            false,
            None,
            None,
            Want::Advance(Step::RemoveFinalizer, None, None, None),
        ),
        ("done", machine(Terminating, text::INITIATE_FINALIZER_REMOVAL, None), true, None, None, Want::RemoveFinalizer),
        (
            "an answer for another step: the step is decided afresh",
            machine(Terminating, text::INITIATE_VM_DELETION, Some("n1")),
            true,
            None,
            Some(DeleteAnswer::Drained { forced: false, result: Ok(()) }),
            Want::DeleteVm,
        ),
    ];
    let config = MachineConfig::default();
    let effective = Effective::of(&Machine::new("x", Default::default()), &config);
    for (name, m, target, node_of_machine, answer, want) in rows {
        let o = DeleteObservation {
            machine: &m,
            now: t("00:01:00"),
            effective: &effective,
            config: &config,
            target,
            node_of_machine,
            answer: answer.as_ref(),
        };
        assert_eq!(short(next(&o)), want, "{name}");
    }
}

#[test]
fn a_drain_past_its_deadline_is_forced() {
    let config = MachineConfig::default();
    let effective = Effective::of(&Machine::new("x", Default::default()), &config);
    let m = machine(MachinePhase::Terminating, text::INITIATE_DRAIN, Some("n1"));
    let o = DeleteObservation {
        machine: &m,
        now: t("03:00:00"),
        effective: &effective,
        config: &config,
        target: true,
        node_of_machine: None,
        answer: None,
    };
    let DeleteAction::Drain { options, force } = next(&o) else { panic!("a drain") };
    assert!(options.force);
    assert_eq!(force, Some(ForceReason::Timeout));
    assert_eq!(options.timeout, config.forced_drain_timeout);
}

#[test]
fn every_record_states_the_operation() {
    let config = MachineConfig::default();
    let effective = Effective::of(&Machine::new("x", Default::default()), &config);
    let m = machine(MachinePhase::Terminating, text::INITIATE_VM_DELETION, Some("n1"));
    let answer = DeleteAnswer::VmDeleted(Err(err(Code::Internal)));
    let o = DeleteObservation {
        machine: &m,
        now: t("00:01:00"),
        effective: &effective,
        config: &config,
        target: true,
        node_of_machine: None,
        answer: Some(&answer),
    };
    let DeleteAction::Advance(a) = next(&o) else { panic!("an advance") };
    let op = a.patch.last_operation.unwrap();
    assert_eq!(op.state, Some(MachineState::Failed));
    assert!(op.description.unwrap().ends_with(text::INITIATE_VM_DELETION));
}

fn drain_options() -> DrainOptions {
    let zero = std::time::Duration::ZERO;
    DrainOptions {
        node: "n".into(),
        timeout: zero,
        max_evict_retries: 0,
        evict_retry_interval: zero,
        volume_detach_timeout: zero,
        volume_reattach_timeout: zero,
        force: false,
    }
}

#[test]
fn the_status_names_each_step_that_reaches_outside_except_the_node_deletion() {
    let cases = [
        (DeleteAction::FindVm, true),
        (DeleteAction::Drain { options: drain_options(), force: None }, true),
        (DeleteAction::ListVolumeAttachments { node: "n".into() }, true),
        (DeleteAction::DeleteVolumeAttachments { names: vec![], next: Next::Done }, true),
        (DeleteAction::DeleteVm, true),
        (DeleteAction::DeleteNode { node: "n".into() }, false),
        (DeleteAction::RemoveFinalizer, false),
    ];
    for (action, want) in cases {
        assert_eq!(action.records_first(), want, "{action:?}");
    }
}
