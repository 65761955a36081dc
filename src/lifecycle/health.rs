//! Health of machines whose Node exists (or existed): conditions copied from the Node, Pending -> Running on
//! join, Running -> Unknown when unhealthy, Pending -> Failed at the creation timeout, Unknown -> Failed at the
//! health timeout (`docs/machine-lifecycle.md` "Health".

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};

use super::clock;
use super::config::Effective;
use super::status::{self, StatusPatch};
use crate::api::mcm::names::{CRITICAL_COMPONENTS_NOT_READY_TAINT, IN_PLACE_CONDITION};
use crate::api::mcm::{Machine, MachineOperationType, MachinePhase, MachineState};

/// Healthy, as MCM defines it: conditions are known, `Ready` is `True` and every watched condition is `False`
/// (a watched condition that is absent is fine).
pub fn is_healthy(conditions: &[NodeCondition], watched: &[String]) -> bool {
    !conditions.is_empty()
        && conditions.iter().all(|c| {
            let ready_ok = c.type_ != "Ready" || c.status == "True";
            let watched_ok = !watched.contains(&c.type_) || c.status == "False";
            ready_ok && watched_ok
        })
}

/// Whether the Node's conditions differ from the machine's copy in type or status, or in reason for the
/// `InPlaceUpdate` condition, whose stages are reasons (heartbeats alone are not a change, so a heartbeat never
/// costs a Machine write).
pub fn conditions_changed(machine: &[NodeCondition], node: &[NodeCondition]) -> bool {
    machine.len() != node.len()
        || machine.iter().zip(node).any(|(m, n)| {
            m.type_ != n.type_ || m.status != n.status || (n.type_ == IN_PLACE_CONDITION && m.reason != n.reason)
        })
}

/// `[Ready=True, DiskPressure=False]`: conditions in a description.
pub fn summary(conditions: &[NodeCondition]) -> String {
    let parts: Vec<String> = conditions.iter().map(|c| format!("{}={}", c.type_, c.status)).collect();
    format!("[{}]", parts.join(", "))
}

fn has_taint(node: &Node, key: &str) -> bool {
    node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| t.iter().any(|t| t.key == key))
}

fn node_conditions(node: &Node) -> &[NodeCondition] {
    node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or(&[])
}

/// What the health check decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Health {
    /// Nothing to write; look again at `wake_at` (a timeout) if set.
    Steady {
        /// When a timeout fires.
        wake_at: Option<Timestamp>,
    },
    /// Write `patch`. `joined` is set when the machine just joined the cluster (delete the bootstrap token,
    /// annotate the join duration).
    Update {
        /// The status change.
        patch: StatusPatch,
        /// How long the join took, on the first join.
        joined: Option<Duration>,
        /// When a timeout fires.
        wake_at: Option<Timestamp>,
    },
    /// Unknown for longer than the health timeout: mark Failed with `patch` if the MachineDeployment's
    /// replacement budget allows (see `replacement`).
    MarkFailed {
        /// The Failed status.
        patch: StatusPatch,
    },
    /// The Node the machine had is gone or being deleted (`kubectl delete node`; our finalizer holds it until the
    /// deletion flow drained it): delete the machine (MCM deletes the Machine of a deleted Node).
    DeleteMachine {
        /// The Node's name.
        node: String,
    },
}

/// The health decision for a machine with a `node` label and a phase, given its Node (`None`: not in the target
/// cluster) at `now`.
pub fn decide(
    machine: &Machine,
    node_name: &str,
    node: Option<&Node>,
    now: Timestamp,
    effective: &Effective,
) -> Health {
    let name = machine.metadata.name.as_deref().unwrap_or_default();
    let phase = status::phase(machine).cloned();
    let current = status::conditions(machine);
    if node.is_some_and(|n| n.metadata.deletion_timestamp.is_some()) {
        return Health::DeleteMachine { node: node_name.to_string() };
    }
    let Some(node) = node else {
        // Conditions were copied, so the Node existed: it was deleted. A Pending machine whose Node never
        // registered falls through to the creation timeout.
        if !current.is_empty() {
            return Health::DeleteMachine { node: node_name.to_string() };
        }
        return timeouts(machine, now, effective);
    };
    let mut patch = StatusPatch::default();
    let observed = node_conditions(node);
    if conditions_changed(current, observed) {
        patch.conditions = Some(observed.to_vec());
    }
    let conditions = patch.conditions.as_deref().unwrap_or(current);
    let healthy = is_healthy(conditions, &effective.node_conditions);
    let mut joined = None;
    match phase {
        Some(MachinePhase::Running) if !healthy => {
            let description = format!(
                "Machine {name} is unhealthy - changing MachinePhase to Unknown. Node conditions: {}",
                summary(conditions)
            );
            let op =
                status::operation(MachineOperationType::HealthCheck, MachineState::Processing, description, None, now);
            patch = patch.and(StatusPatch::phase(MachinePhase::Unknown, op, now));
        }
        Some(
            ref p @ (MachinePhase::Pending
            | MachinePhase::Unknown
            | MachinePhase::Failed
            | MachinePhase::CrashLoopBackOff
            | MachinePhase::InPlaceUpdateSuccessful),
        ) if healthy => {
            let waiting_for_components =
                *p == MachinePhase::Pending && has_taint(node, CRITICAL_COMPONENTS_NOT_READY_TAINT);
            if !waiting_for_components {
                let op = status::last_operation(machine);
                let first_join = op.is_some_and(|op| {
                    op.type_ == Some(MachineOperationType::Create) && op.state != Some(MachineState::Successful)
                });
                let running = if first_join {
                    let took = machine
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| clock::between(t.0, now))
                        .unwrap_or_default();
                    joined = Some(took);
                    let description = format!("Machine {name} successfully joined the cluster in {}", clock::go(took));
                    let op = status::operation(
                        MachineOperationType::Create,
                        MachineState::Successful,
                        description,
                        None,
                        now,
                    );
                    StatusPatch::phase(MachinePhase::Running, op, now)
                } else {
                    rejoined(name, now)
                };
                patch = patch.and(running);
            }
        }
        // InPlaceUpdating and InPlaceUpdateFailed: the Node is drained and being changed; its health says
        // nothing until the node agent reports.
        _ => {}
    }
    if patch.current_status.is_none()
        && let Some(result) = super::in_place::result(machine, node, now)
    {
        patch = patch.and(result);
    }
    if patch.is_empty() {
        return timeouts(machine, now, effective);
    }
    let wake_at = match timeouts(machine, now, effective) {
        Health::Steady { wake_at } => wake_at,
        _ => None,
    };
    Health::Update { patch, joined, wake_at }
}

/// When an Unknown (or InPlaceUpdateFailed) machine becomes Failed: `currentStatus.lastUpdateTime + healthTimeout`. `None` when the machine
/// is not Unknown, its health timeout is disabled, or no time is recorded (the health check then counts from now).
pub fn health_deadline(machine: &Machine, effective: &Effective) -> Option<Timestamp> {
    let phase = status::phase(machine);
    if !matches!(phase, Some(MachinePhase::Unknown | MachinePhase::InPlaceUpdateFailed))
        || effective.disable_health_timeout
    {
        return None;
    }
    let since = machine.status.as_ref()?.current_status.as_ref()?.last_update_time.as_ref()?.0;
    Some(clock::plus(since, effective.health_timeout))
}

/// Pending -> Failed after the creation timeout (from `creationTimestamp`); Unknown -> Failed after the health
/// timeout (from `currentStatus.lastUpdateTime`), unless disabled. A rolling MachineDeployment's mark on the Node
/// does not defer the failure (MCM dropped that check, gardener/machine-controller-manager#733): the mark stays
/// until the rollout completes, so a machine dying mid-rollout must be replaced or the rollout stalls.
fn timeouts(machine: &Machine, now: Timestamp, effective: &Effective) -> Health {
    let name = machine.metadata.name.as_deref().unwrap_or_default();
    match status::phase(machine) {
        Some(MachinePhase::Pending) => {
            let Some(created) = machine.metadata.creation_timestamp.as_ref() else {
                return Health::Steady { wake_at: None };
            };
            let deadline = clock::plus(created.0, effective.creation_timeout);
            if now < deadline {
                return Health::Steady { wake_at: Some(deadline) };
            }
            let description = format!(
                "Machine {name} failed to join the cluster in {} minutes.",
                clock::go(effective.creation_timeout)
            );
            let type_ =
                status::last_operation(machine).and_then(|o| o.type_.clone()).unwrap_or(MachineOperationType::Create);
            let op = status::operation(type_, MachineState::Failed, description, None, now);
            Health::Update { patch: StatusPatch::phase(MachinePhase::Failed, op, now), joined: None, wake_at: None }
        }
        Some(MachinePhase::InPlaceUpdating) => match super::in_place::timed_out(machine, effective, now) {
            Err(deadline) => Health::Steady { wake_at: Some(deadline) },
            Ok(patch) => Health::Update { patch, joined: None, wake_at: None },
        },
        // A failed in-place update is replaced like an unhealthy machine (MCM uses the same text).
        Some(MachinePhase::Unknown | MachinePhase::InPlaceUpdateFailed) if !effective.disable_health_timeout => {
            let deadline =
                health_deadline(machine, effective).unwrap_or_else(|| clock::plus(now, effective.health_timeout));
            if now < deadline {
                return Health::Steady { wake_at: Some(deadline) };
            }
            Health::MarkFailed { patch: health_timed_out(machine, effective, now) }
        }
        _ => Health::Steady { wake_at: None },
    }
}

/// Running again after an outage or an in-place update (MCM's text).
pub fn rejoined(name: &str, now: Timestamp) -> StatusPatch {
    let description = format!("Machine {name} successfully re-joined the cluster");
    let op = status::operation(MachineOperationType::HealthCheck, MachineState::Successful, description, None, now);
    StatusPatch::phase(MachinePhase::Running, op, now)
}

/// Failed once the health timeout has passed (MCM's text, with the Node's conditions).
pub fn health_timed_out(machine: &Machine, effective: &Effective, now: Timestamp) -> StatusPatch {
    let name = machine.metadata.name.as_deref().unwrap_or_default();
    let description = format!(
        "Machine {name} health checks failing since last {} minutes. Updating machine phase to Failed. Node Conditions: {}",
        clock::go(effective.health_timeout),
        summary(status::conditions(machine))
    );
    let type_ =
        status::last_operation(machine).and_then(|o| o.type_.clone()).unwrap_or(MachineOperationType::HealthCheck);
    let op = status::operation(type_, MachineState::Failed, description, None, now);
    StatusPatch::phase(MachinePhase::Failed, op, now)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::mcm::names::SCALE_DOWN_DISABLED_BY_MCM;
    use crate::api::mcm::{LastOperation, MachineStatus};
    use crate::lifecycle::config::MachineConfig;

    fn t(s: &str) -> Timestamp {
        format!("2025-01-01T{s}Z").parse().unwrap()
    }

    fn cond(type_: &str, status: &str) -> NodeCondition {
        NodeCondition { type_: type_.into(), status: status.into(), ..Default::default() }
    }

    fn ready() -> Vec<NodeCondition> {
        vec![cond("Ready", "True"), cond("DiskPressure", "False")]
    }

    fn not_ready() -> Vec<NodeCondition> {
        vec![cond("Ready", "Unknown"), cond("DiskPressure", "Unknown")]
    }

    fn deleting(mut n: Node) -> Node {
        n.metadata.deletion_timestamp = Some(Time(t("00:34:00")));
        n
    }

    fn node(conditions: Vec<NodeCondition>, taint: bool, rolling: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("m1".into());
        if rolling {
            n.metadata.annotations =
                Some(BTreeMap::from([(SCALE_DOWN_DISABLED_BY_MCM.to_string(), "true".to_string())]));
        }
        n.spec = Some(NodeSpec {
            taints: taint.then(|| {
                vec![Taint {
                    key: CRITICAL_COMPONENTS_NOT_READY_TAINT.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        });
        n.status = Some(NodeStatus { conditions: Some(conditions), ..Default::default() });
        n
    }

    fn machine(
        phase: MachinePhase,
        since: &str,
        op: (MachineOperationType, MachineState),
        conditions: Vec<NodeCondition>,
    ) -> Machine {
        let mut m = Machine::new("m1", Default::default());
        m.metadata.creation_timestamp = Some(Time(t("00:00:00")));
        m.status = Some(MachineStatus {
            current_status: Some(status::entering(phase, t(since))),
            last_operation: Some(LastOperation {
                type_: Some(op.0),
                state: Some(op.1),
                description: Some("before".into()),
                ..Default::default()
            }),
            conditions: (!conditions.is_empty()).then_some(conditions),
            ..Default::default()
        });
        m
    }

    fn effective() -> Effective {
        Effective::of(&Machine::new("x", Default::default()), &MachineConfig::default())
    }

    /// A short label of a decision: what phase it sets and when it wakes.
    fn label(h: &Health) -> String {
        match h {
            Health::Steady { wake_at } => format!("steady wake={wake_at:?}"),
            Health::Update { patch, joined, .. } => format!(
                "update phase={:?} conditions={} joined={joined:?}",
                patch.new_phase(),
                patch.conditions.is_some()
            ),
            Health::MarkFailed { .. } => "mark failed".into(),
            Health::DeleteMachine { node } => format!("delete machine (node {node})"),
        }
    }

    #[test]
    fn healthy_follows_mcm() {
        let watched = effective().node_conditions;
        let cases = [
            ("no conditions", vec![], false),
            ("ready", ready(), true),
            ("not ready", vec![cond("Ready", "False")], false),
            ("disk pressure", vec![cond("Ready", "True"), cond("DiskPressure", "True")], false),
            ("unknown watched condition", vec![cond("Ready", "True"), cond("KernelDeadlock", "Unknown")], false),
            ("unwatched pressure", vec![cond("Ready", "True"), cond("MemoryPressure", "True")], true),
        ];
        for (name, conditions, want) in cases {
            assert_eq!(is_healthy(&conditions, &watched), want, "{name}");
        }
    }

    #[test]
    fn decisions() {
        use MachineOperationType::{Create, HealthCheck};
        use MachineState::{Processing, Successful};
        let e = effective();
        let cases: Vec<(&str, Machine, Option<Node>, Timestamp, &str)> = vec![
            (
                "pending joins",
                machine(MachinePhase::Pending, "00:00:01", (Create, Processing), vec![]),
                Some(node(ready(), false, false)),
                t("00:02:00"),
                "update phase=Some(Running) conditions=true joined=Some(120s)",
            ),
            (
                "pending waits for critical components",
                machine(MachinePhase::Pending, "00:00:01", (Create, Processing), vec![]),
                Some(node(ready(), true, false)),
                t("00:02:00"),
                "update phase=None conditions=true joined=None",
            ),
            (
                "pending, node not yet registered",
                machine(MachinePhase::Pending, "00:00:01", (Create, Processing), vec![]),
                None,
                t("00:02:00"),
                "steady wake=Some(2025-01-01T00:20:00Z)",
            ),
            (
                "pending times out at the creation timeout",
                machine(MachinePhase::Pending, "00:00:01", (Create, Processing), vec![]),
                None,
                t("00:20:00"),
                "update phase=Some(Failed) conditions=false joined=None",
            ),
            (
                "running stays running",
                machine(MachinePhase::Running, "00:01:00", (Create, Successful), ready()),
                Some(node(ready(), false, false)),
                t("00:30:00"),
                "steady wake=None",
            ),
            (
                "running turns unknown",
                machine(MachinePhase::Running, "00:01:00", (Create, Successful), ready()),
                Some(node(not_ready(), false, false)),
                t("00:30:00"),
                "update phase=Some(Unknown) conditions=true joined=None",
            ),
            (
                "unknown waits for the health timeout",
                machine(MachinePhase::Unknown, "00:30:00", (HealthCheck, Processing), not_ready()),
                Some(node(not_ready(), false, false)),
                t("00:35:00"),
                "steady wake=Some(2025-01-01T00:40:00Z)",
            ),
            (
                "unknown fails at the health timeout",
                machine(MachinePhase::Unknown, "00:30:00", (HealthCheck, Processing), not_ready()),
                Some(node(not_ready(), false, false)),
                t("00:40:00"),
                "mark failed",
            ),
            (
                "unknown fails at the health timeout during a rollout too",
                machine(MachinePhase::Unknown, "00:30:00", (HealthCheck, Processing), not_ready()),
                Some(node(not_ready(), false, true)),
                t("00:41:00"),
                "mark failed",
            ),
            (
                "unknown during a rollout still waits for the health timeout",
                machine(MachinePhase::Unknown, "00:30:00", (HealthCheck, Processing), not_ready()),
                Some(node(not_ready(), false, true)),
                t("00:35:00"),
                "steady wake=Some(2025-01-01T00:40:00Z)",
            ),
            (
                "node being deleted",
                machine(MachinePhase::Running, "00:01:00", (Create, Successful), ready()),
                Some(deleting(node(ready(), false, false))),
                t("00:35:00"),
                "delete machine (node m1)",
            ),
            (
                "pending machine's node being deleted",
                machine(MachinePhase::Pending, "00:00:01", (Create, Processing), vec![]),
                Some(deleting(node(not_ready(), false, false))),
                t("00:02:00"),
                "delete machine (node m1)",
            ),
            (
                "unknown recovers",
                machine(MachinePhase::Unknown, "00:30:00", (HealthCheck, Processing), not_ready()),
                Some(node(ready(), false, false)),
                t("00:35:00"),
                "update phase=Some(Running) conditions=true joined=None",
            ),
            (
                "node deleted",
                machine(MachinePhase::Running, "00:01:00", (Create, Successful), ready()),
                None,
                t("00:35:00"),
                "delete machine (node m1)",
            ),
            (
                "heartbeat only",
                machine(MachinePhase::Running, "00:01:00", (Create, Successful), ready()),
                Some(node(
                    ready()
                        .into_iter()
                        .map(|mut c| {
                            c.last_heartbeat_time = Some(Time(t("00:34:00")));
                            c
                        })
                        .collect(),
                    false,
                    false,
                )),
                t("00:35:00"),
                "steady wake=None",
            ),
        ];
        for (name, m, n, now, want) in cases {
            assert_eq!(label(&decide(&m, "m1", n.as_ref(), now, &e)), want, "{name}");
        }
    }

    #[test]
    fn descriptions_are_mcms() {
        let e = effective();
        let joined = decide(
            &machine(
                MachinePhase::Pending,
                "00:00:01",
                (MachineOperationType::Create, MachineState::Processing),
                vec![],
            ),
            "m1",
            Some(&node(ready(), false, false)),
            t("00:01:05"),
            &e,
        );
        let Health::Update { patch, .. } = joined else { panic!("{joined:?}") };
        let op = patch.last_operation.unwrap();
        assert_eq!(op.description.as_deref(), Some("Machine m1 successfully joined the cluster in 1m5s"));
        assert_eq!((op.type_, op.state), (Some(MachineOperationType::Create), Some(MachineState::Successful)));

        let failed = decide(
            &machine(
                MachinePhase::Unknown,
                "00:00:00",
                (MachineOperationType::HealthCheck, MachineState::Processing),
                not_ready(),
            ),
            "m1",
            Some(&node(not_ready(), false, false)),
            t("01:00:00"),
            &e,
        );
        let Health::MarkFailed { patch } = failed else { panic!("{failed:?}") };
        assert_eq!(
            patch.last_operation.unwrap().description.as_deref(),
            Some(
                "Machine m1 health checks failing since last 10m0s minutes. Updating machine phase to Failed. Node \
                 Conditions: [Ready=Unknown, DiskPressure=Unknown]"
            )
        );
    }

    /// The descriptions MCM master writes (`reconcileMachineHealth`), one row per transition; only the conditions'
    /// rendering is ours (`[Ready=Unknown, …]` for Go's struct dump, see docs/machine-lifecycle.md).
    #[test]
    fn descriptions_are_mcm_masters() {
        use MachineOperationType::{Create, HealthCheck};
        use MachineState::{Processing, Successful};
        let e = effective();
        let description = |h: Health| match h {
            Health::Update { patch, .. } | Health::MarkFailed { patch } => {
                patch.last_operation.and_then(|o| o.description).unwrap_or_default()
            }
            other => panic!("{other:?}"),
        };
        let cases: Vec<(&str, Machine, Option<Node>, Timestamp, &str)> = vec![
            (
                "join",
                machine(MachinePhase::Pending, "00:00:01", (Create, Processing), vec![]),
                Some(node(ready(), false, false)),
                t("00:02:00"),
                "Machine m1 successfully joined the cluster in 2m0s",
            ),
            (
                "re-join",
                machine(MachinePhase::Unknown, "00:10:00", (HealthCheck, Processing), not_ready()),
                Some(node(ready(), false, false)),
                t("00:11:00"),
                "Machine m1 successfully re-joined the cluster",
            ),
            (
                "unhealthy",
                machine(MachinePhase::Running, "00:02:00", (Create, Successful), ready()),
                Some(node(not_ready(), false, false)),
                t("00:03:00"),
                "Machine m1 is unhealthy - changing MachinePhase to Unknown. Node conditions: [Ready=Unknown, \
                 DiskPressure=Unknown]",
            ),
            (
                "creation timeout",
                machine(MachinePhase::Pending, "00:00:01", (Create, Processing), vec![]),
                None,
                t("00:21:00"),
                "Machine m1 failed to join the cluster in 20m0s minutes.",
            ),
            (
                "health timeout",
                machine(MachinePhase::Unknown, "00:10:00", (HealthCheck, Processing), not_ready()),
                Some(node(not_ready(), false, false)),
                t("00:21:00"),
                "Machine m1 health checks failing since last 10m0s minutes. Updating machine phase to Failed. Node \
                 Conditions: [Ready=Unknown, DiskPressure=Unknown]",
            ),
        ];
        for (name, m, n, now, want) in cases {
            assert_eq!(description(decide(&m, "m1", n.as_ref(), now, &e)), want, "{name}");
        }
    }

    #[test]
    fn disabled_health_timeout_never_fails() {
        let mut e = effective();
        e.disable_health_timeout = true;
        let m = machine(
            MachinePhase::Unknown,
            "00:00:00",
            (MachineOperationType::HealthCheck, MachineState::Processing),
            not_ready(),
        );
        assert_eq!(
            decide(&m, "m1", Some(&node(not_ready(), false, false)), t("05:00:00"), &e),
            Health::Steady { wake_at: None }
        );
    }
}
