//! A machine's in-place update (MCM's machine controller, `docs/rollouts.md` "In-place updates"), driven only by
//! its Node's labels and `InPlaceUpdate` condition, whatever the deployment's strategy:
//!
//! ```text
//! (no condition) --candidate label--> CandidateForUpdate --selected label--> SelectedForUpdate --drain--> DrainSuccessful
//!                                                                             [phase InPlaceUpdating]
//! DrainSuccessful --> ReadyForUpdate --node agent: update-result=successful--> UpdateSuccessful
//!                                    --node agent: update-result=failed-----> UpdateFailed
//! ```
//!
//! [`decide`] gives this pass's step: the condition the labels call for, then either a drain (for
//! `SelectedForUpdate`) or the hand-over to the node agent (`DrainSuccessful` -> `ReadyForUpdate`). The phases
//! that follow from the agent's result and the timeouts are the health check's (`health.rs`).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::config::{Effective, MachineConfig};
use super::preservation::FORCE_DRAIN_LABEL;
use super::status::{self, StatusPatch};
use super::{clock, health};
use crate::api::mcm::names::{
    CANDIDATE_FOR_UPDATE, IN_PLACE_CONDITION, SELECTED_FOR_UPDATE, UPDATE_FAILED, UPDATE_FAILED_REASON, UPDATE_RESULT,
    UPDATE_SUCCESSFUL, in_place_reason,
};
use crate::api::mcm::{Machine, MachineOperationType, MachinePhase, MachineState};
use crate::drain::{DrainOptions, should_force};

/// MCM's condition messages, one per reason.
pub mod message {
    /// `CandidateForUpdate`.
    pub const CANDIDATE: &str = "Node is a candidate for in-place update";
    /// `SelectedForUpdate`.
    pub const SELECTED: &str = "Node is selected for in-place update";
    /// `DrainSuccessful`.
    pub const DRAIN_SUCCESSFUL: &str = "Node draining successful";
    /// `ReadyForUpdate`.
    pub const READY: &str = "Node is ready for in-place update";
    /// `UpdateSuccessful`.
    pub const SUCCESSFUL: &str = "Node in-place update successful";
    /// `UpdateFailed`, followed by the node agent's reason.
    pub const FAILED: &str = "Node in-place update failed";
}

/// The Node's `InPlaceUpdate` condition.
pub fn condition(node: &Node) -> Option<&NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == IN_PLACE_CONDITION)
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The `InPlaceUpdate` condition with `reason` (its message is MCM's for that reason), as of `now`.
pub fn in_place_condition(reason: &str, message: String, now: Timestamp) -> NodeCondition {
    NodeCondition {
        type_: IN_PLACE_CONDITION.to_string(),
        status: "True".to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_transition_time: Some(Time(now)),
        last_heartbeat_time: None,
    }
}

/// The condition the Node's labels call for (`None`: the present one is right). Only Nodes labelled
/// `candidate-for-update` take part. A new round starts when an `UpdateSuccessful` Node has lost its result label.
pub fn condition_from_labels(node: &Node, now: Timestamp) -> Option<NodeCondition> {
    label(node, CANDIDATE_FOR_UPDATE)?;
    let reason = condition(node).and_then(|c| c.reason.as_deref());
    let result = label(node, UPDATE_RESULT);
    let (reason, message) = match reason {
        None => (in_place_reason::CANDIDATE, message::CANDIDATE.to_string()),
        Some(in_place_reason::SUCCESSFUL) if result.is_none() => {
            (in_place_reason::CANDIDATE, message::CANDIDATE.to_string())
        }
        Some(in_place_reason::CANDIDATE) if label(node, SELECTED_FOR_UPDATE).is_some() => {
            (in_place_reason::SELECTED, message::SELECTED.to_string())
        }
        Some(r) if result == Some(UPDATE_SUCCESSFUL) && r != in_place_reason::SUCCESSFUL => {
            (in_place_reason::SUCCESSFUL, message::SUCCESSFUL.to_string())
        }
        Some(r) if result == Some(UPDATE_FAILED) && r != in_place_reason::FAILED => {
            let why = annotation(node, UPDATE_FAILED_REASON).unwrap_or_default();
            (in_place_reason::FAILED, format!("{}: {why}", message::FAILED))
        }
        Some(_) => return None,
    };
    Some(in_place_condition(reason, message, now))
}

/// This pass's in-place step for a machine and its Node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The condition to write first (from the labels, or the hand-over to the node agent).
    pub condition: Option<NodeCondition>,
    /// Cordon and drain the Node; then [`drained`] or [`drain_failed`].
    pub drain: Option<DrainOptions>,
}

impl Plan {
    /// Whether it does nothing.
    pub fn is_empty(&self) -> bool {
        self.condition.is_none() && self.drain.is_none()
    }
}

/// The step for `machine` and its Node at `now`.
pub fn decide(machine: &Machine, node: &Node, effective: &Effective, config: &MachineConfig, now: Timestamp) -> Plan {
    let from_labels = condition_from_labels(node, now);
    let current = from_labels.as_ref().or(condition(node));
    let mut plan = Plan { condition: from_labels.clone(), drain: None };
    match current.and_then(|c| c.reason.as_deref()) {
        Some(in_place_reason::SELECTED) => {
            let since = current.and_then(|c| c.last_transition_time.as_ref()).map_or(now, |t| t.0);
            plan.drain = Some(drain_options(machine, node, since, effective, config, now));
        }
        Some(in_place_reason::DRAIN_SUCCESSFUL) => {
            plan.condition = Some(in_place_condition(in_place_reason::READY, message::READY.to_string(), now));
        }
        _ => {}
    }
    plan
}

/// How a selected Node is drained (MCM's `drainNodeForInPlace`): the machine's drain timeout and eviction retries;
/// forced (1 minute, one attempt) with the `force-drain=True` label, once the drain timeout has passed since the
/// Node was selected, or when the Node has been NotReady or read-only for 5 minutes.
pub fn drain_options(
    machine: &Machine,
    node: &Node,
    selected_since: Timestamp,
    effective: &Effective,
    config: &MachineConfig,
    now: Timestamp,
) -> DrainOptions {
    let labelled =
        machine.metadata.labels.as_ref().and_then(|l| l.get(FORCE_DRAIN_LABEL)).map(String::as_str) == Some("True");
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let unhealthy = should_force(None, None, effective.drain_timeout, conditions, now).is_some();
    let force = labelled || unhealthy || clock::between(selected_since, now) > effective.drain_timeout;
    let node = node.metadata.name.clone().unwrap_or_default();
    super::config::drain_options(node, force, effective.drain_timeout, effective, config)
}

/// After a successful drain: the machine enters `InPlaceUpdating`, and the Node's condition says so.
pub fn drained(machine: &Machine, now: Timestamp) -> (StatusPatch, NodeCondition) {
    let name = machine.metadata.name.as_deref().unwrap_or_default();
    let op = status::operation(
        MachineOperationType::InPlaceUpdate,
        MachineState::Processing,
        format!("Machine {name} is undergoing an in-place update"),
        None,
        now,
    );
    let condition = in_place_condition(in_place_reason::DRAIN_SUCCESSFUL, message::DRAIN_SUCCESSFUL.to_string(), now);
    (StatusPatch::phase(MachinePhase::InPlaceUpdating, op, now), condition)
}

/// The node agent's result (Node label `update-result`) as a phase, for a machine updating or whose update failed
/// (a late success rescues a machine that timed out): `InPlaceUpdateSuccessful` or `InPlaceUpdateFailed`.
pub fn result(machine: &Machine, node: &Node, now: Timestamp) -> Option<StatusPatch> {
    let phase = status::phase(machine)?;
    if !matches!(phase, MachinePhase::InPlaceUpdating | MachinePhase::InPlaceUpdateFailed) {
        return None;
    }
    let name = machine.metadata.name.as_deref().unwrap_or_default();
    let (to, state, description) = match label(node, UPDATE_RESULT)? {
        UPDATE_SUCCESSFUL => (
            MachinePhase::InPlaceUpdateSuccessful,
            MachineState::Successful,
            format!("Machine {name} successfully updated dependencies"),
        ),
        UPDATE_FAILED if *phase != MachinePhase::InPlaceUpdateFailed => {
            let why = annotation(node, UPDATE_FAILED_REASON).unwrap_or_default();
            (
                MachinePhase::InPlaceUpdateFailed,
                MachineState::Failed,
                format!("Machine {name} failed to update dependencies: {why}"),
            )
        }
        _ => return None,
    };
    let op = status::operation(MachineOperationType::InPlaceUpdate, state, description, None, now);
    Some(StatusPatch::phase(to, op, now))
}

/// The phase changes of an in-place machine whose controller runs no MCM health check (the CAPI flavour; the MCM
/// flavour's health check makes the same ones): the node agent's result, the update timeout, a failed update past
/// its health timeout (Failed: its set replaces it), and the rejoin once the Node is healthy.
pub fn phase_change(machine: &Machine, node: &Node, effective: &Effective, now: Timestamp) -> Option<StatusPatch> {
    if let Some(patch) = result(machine, node, now) {
        return Some(patch);
    }
    match status::phase(machine)? {
        MachinePhase::InPlaceUpdating => timed_out(machine, effective, now).ok(),
        MachinePhase::InPlaceUpdateFailed => {
            let deadline = health::health_deadline(machine, effective)?;
            (now >= deadline).then(|| health::health_timed_out(machine, effective, now))
        }
        MachinePhase::InPlaceUpdateSuccessful => {
            let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
            let name = machine.metadata.name.as_deref().unwrap_or_default();
            health::is_healthy(conditions, &effective.node_conditions).then(|| health::rejoined(name, now))
        }
        _ => None,
    }
}

/// An `InPlaceUpdating` machine past its in-place update timeout (from `currentStatus.lastUpdateTime`):
/// `Ok` with the `InPlaceUpdateFailed` status, or `Err` with the deadline.
pub fn timed_out(machine: &Machine, effective: &Effective, now: Timestamp) -> Result<StatusPatch, Timestamp> {
    let name = machine.metadata.name.as_deref().unwrap_or_default();
    let since = machine
        .status
        .as_ref()
        .and_then(|s| s.current_status.as_ref())
        .and_then(|c| c.last_update_time.as_ref())
        .map_or(now, |t| t.0);
    let deadline = clock::plus(since, effective.in_place_update_timeout);
    if now < deadline {
        return Err(deadline);
    }
    let description = format!(
        "Machine {name} failed to in-place update in {} minutes.",
        clock::go(effective.in_place_update_timeout)
    );
    let op = status::operation(MachineOperationType::InPlaceUpdate, MachineState::Failed, description, None, now);
    Ok(StatusPatch::phase(MachinePhase::InPlaceUpdateFailed, op, now))
}

/// After a failed cordon or drain: only the last operation says so (the phase stays; the next attempt, once the
/// drain timeout has passed since selection, is forced).
pub fn drain_failed(error: &str, now: Timestamp) -> StatusPatch {
    let description = format!("Drain failed due to - {error}. Will retry in next sync. Initiate node drain");
    StatusPatch::operation(status::operation(
        MachineOperationType::DrainNode,
        MachineState::Processing,
        description,
        None,
        now,
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::NodeStatus;

    use super::*;

    fn t(s: &str) -> Timestamp {
        format!("2025-01-01T{s}Z").parse().unwrap()
    }

    fn node(labels: &[(&str, &str)], reason: Option<&str>, failure: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        if let Some(f) = failure {
            n.metadata.annotations = Some(BTreeMap::from([(UPDATE_FAILED_REASON.to_string(), f.to_string())]));
        }
        let mut conditions = vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: Some(Time(t("00:00:00"))),
            ..Default::default()
        }];
        if let Some(r) = reason {
            let mut c = in_place_condition(r, String::new(), t("00:00:00"));
            c.message = None;
            conditions.push(c);
        }
        n.status = Some(NodeStatus { conditions: Some(conditions), ..Default::default() });
        n
    }

    const CAND: (&str, &str) = (CANDIDATE_FOR_UPDATE, "true");
    const SEL: (&str, &str) = (SELECTED_FOR_UPDATE, "true");
    const OK: (&str, &str) = (UPDATE_RESULT, UPDATE_SUCCESSFUL);
    const FAIL: (&str, &str) = (UPDATE_RESULT, UPDATE_FAILED);

    #[test]
    fn condition_from_labels_table() {
        use in_place_reason::*;
        type Case<'a> =
            (&'a str, &'a [(&'a str, &'a str)], Option<&'a str>, Option<&'a str>, Option<(&'a str, &'a str)>);
        // (case, labels, present reason, failure annotation, expected (reason, message))
        let cases: [Case<'_>; 9] = [
            ("not a candidate", &[], None, None, None),
            ("a new candidate", &[CAND], None, None, Some((CANDIDATE, message::CANDIDATE))),
            ("a candidate again: unchanged", &[CAND], Some(CANDIDATE), None, None),
            ("a new round after a success", &[CAND], Some(SUCCESSFUL), None, Some((CANDIDATE, message::CANDIDATE))),
            ("selected", &[CAND, SEL], Some(CANDIDATE), None, Some((SELECTED, message::SELECTED))),
            ("selected, not drained yet: unchanged", &[CAND, SEL], Some(SELECTED), None, None),
            ("the agent succeeded", &[CAND, SEL, OK], Some(READY), None, Some((SUCCESSFUL, message::SUCCESSFUL))),
            (
                "the agent failed",
                &[CAND, SEL, FAIL],
                Some(DRAIN_SUCCESSFUL),
                Some("OS image not found"),
                Some((FAILED, "Node in-place update failed: OS image not found")),
            ),
            ("failed, recorded: unchanged", &[CAND, SEL, FAIL], Some(FAILED), Some("x"), None),
        ];
        for (name, labels, reason, failure, expected) in cases {
            let got = condition_from_labels(&node(labels, reason, failure), t("00:10:00"));
            let got = got.map(|c| (c.reason.unwrap(), c.message.unwrap()));
            assert_eq!(got, expected.map(|(r, m)| (r.to_string(), m.to_string())), "{name}");
        }
    }

    #[test]
    fn steps_table() {
        use in_place_reason::*;
        let machine = Machine::new("m1", Default::default());
        let effective = Effective::of(&machine, &MachineConfig::default());
        let config = MachineConfig::default();
        let now = t("00:10:00");
        let plan = decide(&machine, &node(&[CAND, SEL], Some(CANDIDATE), None), &effective, &config, now);
        assert_eq!(plan.condition.as_ref().and_then(|c| c.reason.as_deref()), Some(SELECTED));
        assert!(plan.drain.as_ref().is_some_and(|d| !d.force), "selected now: drained, not forced");
        let plan = decide(&machine, &node(&[CAND, SEL], Some(DRAIN_SUCCESSFUL), None), &effective, &config, now);
        assert_eq!(plan.condition.and_then(|c| c.reason), Some(READY.to_string()), "the hand-over");
        assert!(plan.drain.is_none());
        assert!(decide(&machine, &node(&[CAND, SEL], Some(READY), None), &effective, &config, now).is_empty());
        assert!(decide(&machine, &node(&[], None, None), &effective, &config, now).is_empty(), "not a candidate");

        // Selected longer ago than the drain timeout: forced.
        let late = clock::plus(t("00:00:00"), effective.drain_timeout + Duration::from_secs(1));
        let plan = decide(&machine, &node(&[CAND, SEL], Some(SELECTED), None), &effective, &config, late);
        assert!(plan.drain.is_some_and(|d| d.force && d.max_evict_retries == 1));
        let mut forced = machine.clone();
        forced.metadata.labels = Some(BTreeMap::from([(FORCE_DRAIN_LABEL.to_string(), "True".to_string())]));
        let plan = decide(&forced, &node(&[CAND, SEL], Some(SELECTED), None), &effective, &config, now);
        assert!(plan.drain.is_some_and(|d| d.force), "force-drain label");
    }

    fn in_phase(phase: MachinePhase, since: &str) -> Machine {
        let mut m = Machine::new("m1", Default::default());
        m.status = Some(crate::api::mcm::MachineStatus {
            current_status: Some(status::entering(phase, t(since))),
            ..Default::default()
        });
        m
    }

    #[test]
    fn results_and_timeouts_table() {
        use MachinePhase::*;
        let now = t("00:30:00");
        // (case, phase, Node labels, failure reason, expected (phase, description))
        let cases = [
            (
                "success",
                InPlaceUpdating,
                vec![OK],
                None,
                Some((InPlaceUpdateSuccessful, "Machine m1 successfully updated dependencies")),
            ),
            (
                "failure",
                InPlaceUpdating,
                vec![FAIL],
                Some("OS image not found"),
                Some((InPlaceUpdateFailed, "Machine m1 failed to update dependencies: OS image not found")),
            ),
            (
                "a late success rescues",
                InPlaceUpdateFailed,
                vec![OK],
                None,
                Some((InPlaceUpdateSuccessful, "Machine m1 successfully updated dependencies")),
            ),
            ("failed, recorded", InPlaceUpdateFailed, vec![FAIL], Some("x"), None),
            ("no result yet", InPlaceUpdating, vec![CAND, SEL], None, None),
            ("not updating", Running, vec![OK], None, None),
        ];
        for (name, phase, labels, failure, expected) in cases {
            let got = result(&in_phase(phase, "00:00:00"), &node(&labels, None, failure), now);
            let got = got.map(|p| (p.new_phase().cloned().unwrap(), p.last_operation.unwrap().description.unwrap()));
            assert_eq!(got, expected.map(|(p, d)| (p, d.to_string())), "{name}");
        }
        let machine = in_phase(InPlaceUpdating, "00:20:00");
        let mut effective = Effective::of(&machine, &MachineConfig::default());
        assert_eq!(effective.in_place_update_timeout, Duration::from_secs(20 * 60), "MCM's default");
        assert_eq!(timed_out(&machine, &effective, now), Err(t("00:40:00")));
        effective.in_place_update_timeout = Duration::from_secs(5 * 60);
        let patch = timed_out(&machine, &effective, now).unwrap();
        assert_eq!(patch.new_phase(), Some(&InPlaceUpdateFailed));
        assert_eq!(
            patch.last_operation.unwrap().description.as_deref(),
            Some("Machine m1 failed to in-place update in 5m0s minutes.")
        );
    }

    #[test]
    fn phase_changes_without_a_health_check_table() {
        use MachinePhase::*;
        let now = t("00:30:00");
        let mut effective = Effective::of(&in_phase(Running, "00:00:00"), &MachineConfig::default());
        effective.in_place_update_timeout = Duration::from_secs(5 * 60);
        effective.health_timeout = Duration::from_secs(10 * 60);
        // (case, phase, since, Node labels, expected (phase, description start))
        let cases = [
            (
                "the agent's result first",
                InPlaceUpdating,
                "00:00:00",
                vec![OK],
                Some((InPlaceUpdateSuccessful, "Machine m1 successfully updated")),
            ),
            (
                "updating past the timeout",
                InPlaceUpdating,
                "00:20:00",
                vec![CAND, SEL],
                Some((InPlaceUpdateFailed, "Machine m1 failed to in-place update in 5m0s")),
            ),
            ("updating within it", InPlaceUpdating, "00:28:00", vec![CAND, SEL], None),
            (
                "failed past the health timeout",
                InPlaceUpdateFailed,
                "00:15:00",
                vec![FAIL],
                Some((Failed, "Machine m1 health checks failing since last 10m0s minutes.")),
            ),
            ("failed within it", InPlaceUpdateFailed, "00:25:00", vec![FAIL], None),
            (
                "updated, Node healthy",
                InPlaceUpdateSuccessful,
                "00:29:00",
                vec![],
                Some((Running, "Machine m1 successfully re-joined the cluster")),
            ),
            ("Running", Running, "00:00:00", vec![], None),
        ];
        for (name, phase, since, labels, expected) in cases {
            let got = phase_change(&in_phase(phase, since), &node(&labels, None, None), &effective, now);
            let got = got.map(|p| (p.new_phase().cloned().unwrap(), p.last_operation.unwrap().description.unwrap()));
            match (got, expected) {
                (Some((p, d)), Some((want, start))) => {
                    assert_eq!(p, want, "{name}");
                    assert!(d.starts_with(start), "{name}: {d}");
                }
                (got, expected) => assert_eq!(got.is_none(), expected.is_none(), "{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn drain_results() {
        let machine = Machine::new("m1", Default::default());
        let (patch, condition) = drained(&machine, t("00:10:00"));
        assert_eq!(patch.new_phase(), Some(&MachinePhase::InPlaceUpdating));
        assert_eq!(
            patch.last_operation.and_then(|o| o.description),
            Some("Machine m1 is undergoing an in-place update".into())
        );
        assert_eq!(condition.reason.as_deref(), Some(in_place_reason::DRAIN_SUCCESSFUL));
        let patch = drain_failed("pod p refused eviction", t("00:10:00"));
        assert!(patch.current_status.is_none(), "the phase stays");
        let op = patch.last_operation.unwrap();
        assert_eq!(op.type_, Some(MachineOperationType::DrainNode));
        assert_eq!(
            op.description.as_deref(),
            Some("Drain failed due to - pod p refused eviction. Will retry in next sync. Initiate node drain")
        );
    }
}
