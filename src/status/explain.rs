//! What explains an object's state: the one condition (or fact) `mcm status` prints next to it, picked by a fixed
//! precedence (`docs/status.md`), and the one word of its status column. Pure: objects and `now` in, verdict out;
//! MCM's names, texts and deadlines are `lifecycle`'s (the same functions the controllers decide with).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde::Serialize;

use crate::api::mcm::names::{FREEZE_LABEL, FREEZE_VALUE};
use crate::api::mcm::{
    ConditionStatus, Machine, MachineDeployment, MachineDeploymentCondition, MachineDeploymentConditionType,
    MachinePhase, MachineSet, MachineSetConditionType,
};
use crate::lifecycle::class::ClassProblem;
use crate::lifecycle::config::Effective;
use crate::lifecycle::machine_deployment::revision::revision;
use crate::lifecycle::machine_deployment::status as deployment_status;
use crate::lifecycle::names::text;
use crate::lifecycle::{create, delete, health, infra, status};
use crate::providers::contract::Code;

/// The stable `reason` codes of explanations (the `-o json|yaml` field; `docs/status.md` lists what each means).
pub mod reason {
    /// A MachineDeployment or MachineSet frozen by the overshoot freeze.
    pub const FROZEN: &str = "Frozen";
    /// A MachineDeployment whose spec is refused.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// A rollout that made no progress within `progressDeadlineSeconds`.
    pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    /// A MachineSet (or its MachineDeployment) could not create or delete machines.
    pub const REPLICA_FAILURE: &str = "ReplicaFailure";
    /// Being deleted.
    pub const DELETING: &str = "Deleting";
    /// `spec.paused`, or a paused annotation on a Machine.
    pub const PAUSED: &str = "Paused";
    /// A rolling update in progress.
    pub const ROLLING_UPDATE: &str = "RollingUpdate";
    /// Replicas on their way to the desired number.
    pub const SCALING: &str = "Scaling";
    /// Fewer available machines than the MachineDeployment needs.
    pub const UNAVAILABLE: &str = "Unavailable";
    /// A drain that a PodDisruptionBudget refuses.
    pub const DRAIN_BLOCKED: &str = "DrainBlocked";
    /// A drain that failed otherwise.
    pub const DRAIN_FAILED: &str = "DrainFailed";
    /// A drain in progress.
    pub const DRAINING: &str = "Draining";
    /// The machine's class cannot serve it (missing, wrong kind, invalid; for an MCMMachine also a failure domain or
    /// credentials its class cannot use).
    pub const CLASS_INVALID: &str = "ClassInvalid";
    /// The cloud refused the class (`InvalidArgument`).
    pub const CLASS_REFUSED: &str = "ClassRefused";
    /// The class exists but its controller has not taken it yet.
    pub const WAITING_FOR_CLASS: &str = "WaitingForClass";
    /// The machine failed (MCM's `Failed`).
    pub const FAILED: &str = "Failed";
    /// Creating the VM fails and is retried until the creation timeout (`CrashLoopBackOff`).
    pub const CREATION_FAILING: &str = "CreationFailing";
    /// The Node is unhealthy (`Unknown`) and the health timeout counts down.
    pub const UNHEALTHY: &str = "Unhealthy";
    /// The machine is being created or waits for its Node.
    pub const CREATING: &str = "Creating";
    /// Running, but its Node is not Ready.
    pub const NODE_NOT_READY: &str = "NodeNotReady";
}

/// How bad it is; the text view colours by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Something in progress: nothing is wrong yet.
    Info,
    /// Something wrong that may still resolve itself (a deadline counts down).
    Warning,
    /// Something wrong that needs a person.
    Error,
}

/// When something happens unless the state changes first.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Deadline {
    /// When.
    pub at: Time,
    /// What happens then: `Failed`, `drain forced`, `ProgressDeadlineExceeded`.
    pub event: String,
    /// The setting that fixes the time: `creation timeout`, `health timeout`, `drain timeout`, `progress deadline`.
    pub timeout: String,
}

/// What explains an object's state.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// How bad.
    pub severity: Severity,
    /// A stable code ([`reason`]).
    pub reason: String,
    /// For a person.
    pub message: String,
    /// Since when it holds, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// What happens next, and when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Deadline>,
}

impl Explanation {
    fn new(severity: Severity, reason: &str, message: impl Into<String>) -> Self {
        Explanation { severity, reason: reason.to_string(), message: message.into(), since: None, deadline: None }
    }

    fn since(mut self, since: Option<&Time>) -> Self {
        self.since = since.cloned();
        self
    }

    fn deadline(mut self, at: Option<Timestamp>, event: &str, timeout: &str) -> Self {
        self.deadline = at.map(|at| Deadline { at: Time(at), event: event.to_string(), timeout: timeout.to_string() });
        self
    }
}

/// A status word and what explains it.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The status column.
    pub status: String,
    /// The message column.
    pub explanation: Option<Explanation>,
}

fn verdict(status: &str, explanation: Option<Explanation>) -> Verdict {
    Verdict { status: status.to_string(), explanation }
}

fn frozen_label(labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    labels.and_then(|l| l.get(FREEZE_LABEL)).is_some_and(|v| v == FREEZE_VALUE)
}

/// When the rollout began: the creation of the newest MachineSet (highest revision).
fn rollout_start<'a>(sets: &[&'a MachineSet]) -> Option<&'a Time> {
    let newest = sets.iter().max_by_key(|s| revision(s).unwrap_or(0))?;
    newest.metadata.creation_timestamp.as_ref()
}

/// A MachineDeployment (hub view) and the MachineSets it controls. Precedence: frozen, invalid spec, progress
/// deadline exceeded, replica failure, being deleted, paused, rolling update (with the progress deadline), scaling,
/// unavailable.
pub fn deployment(d: &MachineDeployment, sets: &[&MachineSet]) -> Verdict {
    let Some(status) = d.status.as_ref() else {
        return verdict("Unknown", Some(Explanation::new(Severity::Info, reason::CREATING, "no status yet")));
    };
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let condition = |type_| deployment_status::get_condition(conditions, type_);
    fn is_true(c: Option<&MachineDeploymentCondition>) -> Option<&MachineDeploymentCondition> {
        c.filter(|c| c.status == ConditionStatus::True)
    }
    let message = |c: &MachineDeploymentCondition, default: &str| {
        c.message.clone().filter(|m| !m.is_empty()).unwrap_or_else(|| default.to_string())
    };
    if let Some(c) = is_true(condition(MachineDeploymentConditionType::Frozen)) {
        let e = Explanation::new(Severity::Error, reason::FROZEN, message(c, "frozen"));
        return verdict("Frozen", Some(e.since(c.last_transition_time.as_ref())));
    }
    if frozen_label(d.metadata.labels.as_ref()) {
        let e =
            Explanation::new(Severity::Error, reason::FROZEN, format!("frozen (label {FREEZE_LABEL}={FREEZE_VALUE})"));
        return verdict("Frozen", Some(e));
    }
    let progressing = condition(MachineDeploymentConditionType::Progressing);
    let progressing_reason = progressing.and_then(|c| c.reason.as_deref());
    if let Some(c) = progressing.filter(|_| {
        matches!(progressing_reason, Some(deployment_status::INVALID_SPEC | deployment_status::SELECTING_ALL))
    }) {
        let e = Explanation::new(Severity::Error, reason::INVALID_SPEC, message(c, "invalid spec"));
        return verdict("Invalid", Some(e.since(c.last_transition_time.as_ref())));
    }
    if let Some(c) = progressing.filter(|_| progressing_reason == Some(deployment_status::PROGRESS_DEADLINE_EXCEEDED)) {
        let e = Explanation::new(
            Severity::Error,
            reason::PROGRESS_DEADLINE_EXCEEDED,
            message(c, "the rollout made no progress within progressDeadlineSeconds"),
        );
        return verdict("Stalled", Some(e.since(c.last_update_time.as_ref().or(c.last_transition_time.as_ref()))));
    }
    if let Some(c) = is_true(condition(MachineDeploymentConditionType::ReplicaFailure)) {
        let e = Explanation::new(Severity::Error, reason::REPLICA_FAILURE, message(c, "replica failure"));
        return verdict("ReplicaFailure", Some(e.since(c.last_transition_time.as_ref())));
    }
    if d.metadata.deletion_timestamp.is_some() {
        let e = Explanation::new(Severity::Info, reason::DELETING, "being deleted");
        return verdict("Deleting", Some(e.since(d.metadata.deletion_timestamp.as_ref())));
    }
    if d.spec.paused {
        return verdict("Paused", Some(Explanation::new(Severity::Info, reason::PAUSED, "paused (spec.paused)")));
    }
    let desired = d.spec.replicas;
    // Machines of older MachineSets, or a new MachineSet still short of machines next to older ones.
    let old = status.replicas - status.updated_replicas;
    if old > 0 || (status.updated_replicas < desired && sets.len() > 1) {
        let e = Explanation::new(
            Severity::Info,
            reason::ROLLING_UPDATE,
            format!("rolling update: {} of {desired} up to date, {} old", status.updated_replicas, old.max(0)),
        )
        .since(rollout_start(sets))
        .deadline(
            deployment_status::progress_deadline(d, status),
            "ProgressDeadlineExceeded",
            "progress deadline",
        );
        return verdict("RollingOut", Some(e));
    }
    if status.replicas != desired {
        let word = if status.replicas < desired { "ScalingUp" } else { "ScalingDown" };
        let e = Explanation::new(
            Severity::Info,
            reason::SCALING,
            format!("scaling from {} to {desired} machines", status.replicas),
        );
        return verdict(word, Some(e));
    }
    if let Some(c) = condition(MachineDeploymentConditionType::Available).filter(|c| c.status == ConditionStatus::False)
    {
        let e = Explanation::new(Severity::Warning, reason::UNAVAILABLE, message(c, "not enough available machines"));
        return verdict("Unavailable", Some(e.since(c.last_transition_time.as_ref())));
    }
    verdict("Available", None)
}

/// A MachineSet (hub view). Precedence: frozen, replica failure, being deleted, scaling.
pub fn machine_set(s: &MachineSet) -> Verdict {
    let status = s.status.clone().unwrap_or_default();
    let conditions = status.machine_set_condition.as_deref().unwrap_or_default();
    let condition = |type_: MachineSetConditionType| {
        conditions.iter().find(|c| c.type_ == type_ && c.status == ConditionStatus::True)
    };
    if let Some(c) = condition(MachineSetConditionType::Frozen) {
        let message = c.message.clone().unwrap_or_else(|| "frozen".to_string());
        let e = Explanation::new(Severity::Error, reason::FROZEN, message).since(c.last_transition_time.as_ref());
        return verdict("Frozen", Some(e));
    }
    if frozen_label(s.metadata.labels.as_ref()) {
        let e =
            Explanation::new(Severity::Error, reason::FROZEN, format!("frozen (label {FREEZE_LABEL}={FREEZE_VALUE})"));
        return verdict("Frozen", Some(e));
    }
    if let Some(c) = condition(MachineSetConditionType::ReplicaFailure) {
        let message = c.message.clone().unwrap_or_else(|| "replica failure".to_string());
        let e =
            Explanation::new(Severity::Error, reason::REPLICA_FAILURE, message).since(c.last_transition_time.as_ref());
        return verdict("ReplicaFailure", Some(e));
    }
    if s.metadata.deletion_timestamp.is_some() {
        let e = Explanation::new(Severity::Info, reason::DELETING, "being deleted");
        return verdict("Deleting", Some(e.since(s.metadata.deletion_timestamp.as_ref())));
    }
    let desired = s.spec.replicas;
    if status.replicas != desired {
        let word = if status.replicas < desired { "ScalingUp" } else { "ScalingDown" };
        let e = Explanation::new(
            Severity::Info,
            reason::SCALING,
            format!("scaling from {} to {desired} machines", status.replicas),
        );
        return verdict(word, Some(e));
    }
    match (desired, status.available_replicas >= desired) {
        (0, _) => verdict("Empty", None),
        (_, true) => verdict("Available", None),
        (_, false) => verdict("Unavailable", None),
    }
}

/// What is wrong with a machine's class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassIssue {
    /// Only waiting for the class controller (not a problem yet).
    pub waiting: bool,
    /// What.
    pub message: String,
}

impl From<ClassProblem> for ClassIssue {
    fn from(problem: ClassProblem) -> Self {
        ClassIssue { waiting: matches!(problem, ClassProblem::NoFinalizer(_)), message: problem.to_string() }
    }
}

impl ClassIssue {
    /// The class issue an MCMMachine's `Ready` condition reports, if any.
    pub fn from_infra_ready(ready: &Condition) -> Option<ClassIssue> {
        let class_reasons =
            [infra::reason::INVALID_CLASS, infra::reason::INVALID_FAILURE_DOMAIN, infra::reason::INVALID_CREDENTIALS];
        (ready.status == "False" && class_reasons.contains(&ready.reason.as_str())).then(|| ClassIssue {
            waiting: false,
            message: match ready.message.as_str() {
                "" => ready.reason.clone(),
                message => format!("{}: {message}", ready.reason),
            },
        })
    }
}

/// What is known of a machine beyond its hub view.
#[derive(Clone, Copy, Debug)]
pub struct MachineFacts<'a> {
    /// The hub view (for `cluster.x-k8s.io`: the Machine's, with its MCMMachine's operation, timeouts and
    /// deletion).
    pub machine: &'a Machine,
    /// What is wrong with its class (`None`: nothing, or not known).
    pub class_issue: Option<&'a ClassIssue>,
    /// Its Node's `Ready` status, once it has a Node.
    pub node_ready: Option<&'a str>,
    /// It carries a paused annotation.
    pub paused: bool,
}

/// The error a failed drain's description carries (between MCM's prefix and its "Will retry"/"However" tail).
fn drain_error(description: &str) -> Option<&str> {
    let rest = description.strip_prefix(text::DRAIN_FAILED)?;
    let end = [". Will retry", ". However"].iter().filter_map(|tail| rest.find(tail)).min().unwrap_or(rest.len());
    Some(&rest[..end])
}

/// A machine. Precedence: being deleted (a drain blocked by a PodDisruptionBudget, a failed drain, a drain in
/// progress, another deletion step), an invalid class, a class the cloud refused, Failed, CrashLoopBackOff (the
/// creation timeout counting down), Unknown (the health timeout counting down), a class not yet taken, being
/// created (the creation timeout counting down), paused, a Node that is not Ready.
pub fn machine(facts: &MachineFacts<'_>, effective: &Effective) -> Option<Explanation> {
    let m = facts.machine;
    let phase = status::phase(m);
    let op = status::last_operation(m);
    let op_time = op.and_then(|o| o.last_update_time.as_ref());
    let description = status::description(m);
    let described =
        |fallback: &str| if description.is_empty() { fallback.to_string() } else { description.to_string() };
    let creation_deadline = create::creation_deadline(m, effective);
    if m.metadata.deletion_timestamp.is_some() || phase == Some(&MachinePhase::Terminating) {
        let drain_deadline = delete::drain_deadline(m, effective);
        let e = match drain_error(description) {
            Some(error) if error.contains("PodDisruptionBudget") => {
                Explanation::new(Severity::Warning, reason::DRAIN_BLOCKED, format!("drain blocked: {error}"))
            }
            Some(error) => Explanation::new(Severity::Warning, reason::DRAIN_FAILED, format!("drain failed: {error}")),
            None if description.ends_with(text::INITIATE_DRAIN) => {
                Explanation::new(Severity::Info, reason::DRAINING, "draining the Node")
            }
            None => {
                let e = Explanation::new(
                    Severity::Info,
                    reason::DELETING,
                    format!("being deleted: {}", described("waiting for the deletion to start")),
                );
                return Some(e.since(op_time.or(m.metadata.deletion_timestamp.as_ref())));
            }
        };
        return Some(e.since(op_time).deadline(drain_deadline, "drain forced", "drain timeout"));
    }
    if let Some(issue) = facts.class_issue.filter(|i| !i.waiting) {
        return Some(Explanation::new(Severity::Error, reason::CLASS_INVALID, issue.message.clone()).since(op_time));
    }
    let refused = op.and_then(|o| o.error_code.as_deref()) == Some(Code::InvalidArgument.as_str());
    let creating = matches!(phase, None | Some(MachinePhase::CrashLoopBackOff | MachinePhase::Failed));
    if refused && creating {
        let answer = description.strip_prefix(text::CLOUD_PROVIDER_MESSAGE).unwrap_or(description);
        let e =
            Explanation::new(Severity::Error, reason::CLASS_REFUSED, format!("the cloud refused the class: {answer}"))
                .since(op_time);
        return Some(match phase {
            Some(MachinePhase::Failed) => e,
            _ => e.deadline(creation_deadline, "Failed", "creation timeout"),
        });
    }
    match phase {
        Some(MachinePhase::Failed) => {
            return Some(Explanation::new(Severity::Error, reason::FAILED, described("failed")).since(op_time));
        }
        Some(MachinePhase::CrashLoopBackOff) => {
            let e = Explanation::new(Severity::Warning, reason::CREATION_FAILING, described("creating the VM fails"));
            return Some(e.since(op_time).deadline(creation_deadline, "Failed", "creation timeout"));
        }
        Some(MachinePhase::Unknown) => {
            let mut e = Explanation::new(Severity::Warning, reason::UNHEALTHY, described("the Node is unhealthy"));
            if effective.disable_health_timeout {
                e.message.push_str(" (health timeout disabled)");
            }
            let since =
                m.status.as_ref().and_then(|s| s.current_status.as_ref()).and_then(|c| c.last_update_time.as_ref());
            return Some(e.since(since.or(op_time)).deadline(
                health::health_deadline(m, effective),
                "Failed",
                "health timeout",
            ));
        }
        _ => {}
    }
    if let Some(issue) = facts.class_issue {
        return Some(Explanation::new(Severity::Info, reason::WAITING_FOR_CLASS, issue.message.clone()));
    }
    if matches!(phase, None | Some(MachinePhase::Pending | MachinePhase::Available)) {
        let message = match phase {
            None => described("being created"),
            _ => "waiting for the Node to be Ready".to_string(),
        };
        let e = Explanation::new(Severity::Info, reason::CREATING, message);
        return Some(e.since(op_time).deadline(creation_deadline, "Failed", "creation timeout"));
    }
    if facts.paused {
        return Some(Explanation::new(Severity::Info, reason::PAUSED, "paused: the controllers leave it alone"));
    }
    if phase == Some(&MachinePhase::Running)
        && let Some(ready) = facts.node_ready.filter(|r| *r != "True")
    {
        let node = create::node_label(m).unwrap_or_default();
        return Some(Explanation::new(
            Severity::Warning,
            reason::NODE_NOT_READY,
            format!("Node {node} is not Ready ({ready})"),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::mcm::{
        CurrentStatus, LastOperation, MachineDeploymentCondition, MachineDeploymentStatus, MachineOperationType,
        MachineSetCondition, MachineSetStatus, MachineSpec, MachineState, MachineStatus,
    };
    use crate::lifecycle::config::MachineConfig;

    fn t(s: &str) -> Timestamp {
        format!("2025-06-01T{s}Z").parse().unwrap()
    }

    fn now() -> Timestamp {
        t("12:00:00")
    }

    fn d_condition(
        type_: MachineDeploymentConditionType,
        status: ConditionStatus,
        reason: &str,
    ) -> MachineDeploymentCondition {
        MachineDeploymentCondition {
            type_,
            status,
            last_update_time: Some(Time(t("11:58:00"))),
            last_transition_time: Some(Time(t("11:50:00"))),
            reason: Some(reason.into()),
            message: Some(format!("{reason} message")),
        }
    }

    fn deployment_with(
        replicas: i32,
        status: (i32, i32, i32),
        conditions: Vec<MachineDeploymentCondition>,
    ) -> MachineDeployment {
        let mut d = MachineDeployment::new("d", Default::default());
        d.spec.replicas = replicas;
        d.spec.progress_deadline_seconds = Some(600);
        d.status = Some(MachineDeploymentStatus {
            replicas: status.0,
            updated_replicas: status.1,
            available_replicas: status.2,
            ready_replicas: status.2,
            conditions: Some(conditions),
            ..Default::default()
        });
        d
    }

    #[test]
    fn deployments_by_precedence() {
        use ConditionStatus::{False, True};
        use MachineDeploymentConditionType::{Available, Frozen, Progressing, ReplicaFailure};
        let frozen = d_condition(Frozen, True, "OvershootingReplicaCount");
        let deadline = d_condition(Progressing, False, deployment_status::PROGRESS_DEADLINE_EXCEEDED);
        let updated = d_condition(Progressing, True, deployment_status::MACHINE_SET_UPDATED);
        let mut labelled = deployment_with(3, (3, 3, 3), vec![]);
        labelled.metadata.labels = Some(BTreeMap::from([(FREEZE_LABEL.to_string(), FREEZE_VALUE.to_string())]));
        let mut deleting = deployment_with(3, (3, 3, 3), vec![]);
        deleting.metadata.deletion_timestamp = Some(Time(t("11:59:00")));
        let mut paused = deployment_with(3, (4, 2, 3), vec![]);
        paused.spec.paused = true;
        let mut unseen = deployment_with(3, (0, 0, 0), vec![]);
        unseen.status = None;
        let cases: Vec<(&str, MachineDeployment, usize, &str, Option<&str>)> = vec![
            (
                "frozen wins",
                deployment_with(3, (4, 2, 3), vec![deadline.clone(), frozen]),
                1,
                "Frozen",
                Some(reason::FROZEN),
            ),
            ("freeze label", labelled, 1, "Frozen", Some(reason::FROZEN)),
            (
                "invalid spec",
                deployment_with(3, (0, 0, 0), vec![d_condition(Progressing, False, deployment_status::INVALID_SPEC)]),
                1,
                "Invalid",
                Some(reason::INVALID_SPEC),
            ),
            (
                "deadline exceeded",
                deployment_with(3, (4, 2, 3), vec![deadline]),
                2,
                "Stalled",
                Some(reason::PROGRESS_DEADLINE_EXCEEDED),
            ),
            (
                "replica failure",
                deployment_with(3, (2, 2, 2), vec![d_condition(ReplicaFailure, True, "FailedCreate")]),
                1,
                "ReplicaFailure",
                Some(reason::REPLICA_FAILURE),
            ),
            ("deleting", deleting, 1, "Deleting", Some(reason::DELETING)),
            ("paused", paused, 2, "Paused", Some(reason::PAUSED)),
            (
                "rolling: old machines",
                deployment_with(3, (4, 2, 3), vec![updated.clone()]),
                2,
                "RollingOut",
                Some(reason::ROLLING_UPDATE),
            ),
            (
                "rolling: new set short",
                deployment_with(3, (3, 1, 3), vec![updated.clone()]),
                2,
                "RollingOut",
                Some(reason::ROLLING_UPDATE),
            ),
            ("scaling up", deployment_with(3, (1, 1, 1), vec![]), 1, "ScalingUp", Some(reason::SCALING)),
            ("scaling down", deployment_with(3, (5, 5, 5), vec![]), 1, "ScalingDown", Some(reason::SCALING)),
            (
                "unavailable",
                deployment_with(3, (3, 3, 1), vec![d_condition(Available, False, "MinimumReplicasUnavailable")]),
                1,
                "Unavailable",
                Some(reason::UNAVAILABLE),
            ),
            ("available", deployment_with(3, (3, 3, 3), vec![updated]), 1, "Available", None),
            ("no status", unseen, 0, "Unknown", Some(reason::CREATING)),
        ];
        for (name, d, sets, status, why) in cases {
            let set = MachineSet::new("s", Default::default());
            let owned: Vec<&MachineSet> = std::iter::repeat_n(&set, sets).collect();
            let v = deployment(&d, &owned);
            assert_eq!((v.status.as_str(), v.explanation.as_ref().map(|e| e.reason.as_str())), (status, why), "{name}");
        }
    }

    #[test]
    fn a_rolling_update_counts_down_to_its_progress_deadline() {
        let d = deployment_with(
            3,
            (4, 2, 3),
            vec![d_condition(MachineDeploymentConditionType::Progressing, ConditionStatus::True, "MachineSetUpdated")],
        );
        let set = |revision: &str, created: &str| {
            let mut s = MachineSet::new(revision, Default::default());
            s.metadata.annotations =
                Some(BTreeMap::from([(crate::api::mcm::names::REVISION.to_string(), revision.to_string())]));
            s.metadata.creation_timestamp = Some(Time(t(created)));
            s
        };
        let (old, new) = (set("1", "09:00:00"), set("2", "11:51:00"));
        let e = deployment(&d, &[&new, &old]).explanation.unwrap();
        assert_eq!(e.message, "rolling update: 2 of 3 up to date, 2 old");
        assert_eq!(e.since.map(|t| t.0), Some(t("11:51:00")), "since the newest set was made");
        let deadline = e.deadline.unwrap();
        assert_eq!((deadline.at.0, deadline.event.as_str()), (t("12:08:00"), "ProgressDeadlineExceeded"));
    }

    #[test]
    fn machine_sets_by_precedence() {
        let set = |replicas: i32, status: (i32, i32), conditions: Vec<MachineSetCondition>| {
            let mut s = MachineSet::new("s", Default::default());
            s.spec.replicas = replicas;
            s.status = Some(MachineSetStatus {
                replicas: status.0,
                available_replicas: status.1,
                machine_set_condition: Some(conditions),
                ..Default::default()
            });
            s
        };
        let condition = |type_, reason: &str| MachineSetCondition {
            type_,
            status: ConditionStatus::True,
            last_transition_time: None,
            reason: Some(reason.into()),
            message: Some("m".into()),
        };
        let cases = [
            (
                "frozen",
                set(3, (4, 4), vec![condition(MachineSetConditionType::Frozen, "Over")]),
                "Frozen",
                Some(reason::FROZEN),
            ),
            (
                "replica failure",
                set(3, (2, 2), vec![condition(MachineSetConditionType::ReplicaFailure, "FailedCreate")]),
                "ReplicaFailure",
                Some(reason::REPLICA_FAILURE),
            ),
            ("scaling up", set(3, (2, 2), vec![]), "ScalingUp", Some(reason::SCALING)),
            ("scaling down", set(1, (2, 2), vec![]), "ScalingDown", Some(reason::SCALING)),
            ("empty", set(0, (0, 0), vec![]), "Empty", None),
            ("available", set(2, (2, 2), vec![]), "Available", None),
            ("unavailable", set(2, (2, 1), vec![]), "Unavailable", None),
        ];
        for (name, s, status, why) in cases {
            let v = machine_set(&s);
            assert_eq!((v.status.as_str(), v.explanation.as_ref().map(|e| e.reason.as_str())), (status, why), "{name}");
        }
    }

    fn op(type_: MachineOperationType, state: MachineState, description: &str, code: Option<&str>) -> LastOperation {
        LastOperation {
            description: Some(description.into()),
            error_code: code.map(str::to_string),
            last_update_time: Some(Time(t("11:59:00"))),
            state: Some(state),
            type_: Some(type_),
        }
    }

    fn machine_with(phase: Option<MachinePhase>, op: Option<LastOperation>) -> Machine {
        let mut m = Machine::new("m", MachineSpec::default());
        m.metadata.creation_timestamp = Some(Time(t("11:50:00")));
        m.metadata.labels = Some(BTreeMap::from([("node".to_string(), "n1".to_string())]));
        m.status = Some(MachineStatus {
            last_operation: op,
            current_status: Some(CurrentStatus {
                phase,
                last_update_time: Some(Time(t("11:56:00"))),
                ..Default::default()
            }),
            ..Default::default()
        });
        m
    }

    #[test]
    fn machines_by_precedence() {
        use MachineOperationType::{Create, Delete, HealthCheck};
        use MachinePhase::{CrashLoopBackOff, Failed, Pending, Running, Terminating, Unknown};
        use MachineState::{Failed as OpFailed, Processing, Successful};
        let pdb = "Drain failed due to - pod a/b on node n1 is covered by PodDisruptionBudget a/pdb, which is misconfigured and requires zero voluntary evictions. Will retry in next sync. Initiate node drain";
        let evict = "Drain failed due to - evicting pod a/b from node n1 failed: boom. Will retry in next sync. Initiate node drain";
        let terminating = |description: &str| {
            let mut m = machine_with(Some(Terminating), Some(op(Delete, OpFailed, description, None)));
            m.metadata.deletion_timestamp = Some(Time(t("11:00:00")));
            m
        };
        let invalid = ClassIssue { waiting: false, message: "MachineClass \"c\" does not exist".into() };
        let waiting = ClassIssue { waiting: true, message: "waiting".into() };
        let refused = "Cloud provider message - machine codes error: code = [InvalidArgument] message = [bad]";
        let healthy = machine_with(Some(Running), Some(op(Create, Successful, "joined", None)));
        let mut paused = healthy.clone();
        paused.metadata.annotations =
            Some(BTreeMap::from([(crate::api::mcm::names::PAUSED_ANNOTATION.to_string(), String::new())]));
        // (name, machine, class issue, node ready, reason, deadline)
        type Case<'a> = (&'a str, Machine, Option<&'a ClassIssue>, Option<&'a str>, Option<&'a str>, Option<Timestamp>);
        let cases: Vec<Case<'_>> = vec![
            (
                "drain blocked by a budget",
                terminating(pdb),
                Some(&invalid),
                Some("True"),
                Some(reason::DRAIN_BLOCKED),
                Some(t("13:00:00")),
            ),
            ("drain failed", terminating(evict), None, Some("True"), Some(reason::DRAIN_FAILED), Some(t("13:00:00"))),
            (
                "draining",
                terminating("Initiate node drain"),
                None,
                Some("True"),
                Some(reason::DRAINING),
                Some(t("13:00:00")),
            ),
            ("deleting", terminating("Initiate VM deletion"), None, Some("True"), Some(reason::DELETING), None),
            ("invalid class", machine_with(None, None), Some(&invalid), None, Some(reason::CLASS_INVALID), None),
            (
                "refused class",
                machine_with(Some(CrashLoopBackOff), Some(op(Create, OpFailed, refused, Some("InvalidArgument")))),
                None,
                None,
                Some(reason::CLASS_REFUSED),
                Some(t("12:10:00")),
            ),
            (
                "failed",
                machine_with(Some(Failed), Some(op(Create, OpFailed, "timeout", None))),
                None,
                None,
                Some(reason::FAILED),
                None,
            ),
            (
                "crash loop",
                machine_with(Some(CrashLoopBackOff), Some(op(Create, OpFailed, "quota", Some("ResourceExhausted")))),
                None,
                None,
                Some(reason::CREATION_FAILING),
                Some(t("12:10:00")),
            ),
            (
                "unhealthy",
                machine_with(Some(Unknown), Some(op(HealthCheck, Processing, "unhealthy", None))),
                None,
                Some("False"),
                Some(reason::UNHEALTHY),
                Some(t("12:06:00")),
            ),
            (
                "class not taken yet",
                machine_with(None, None),
                Some(&waiting),
                None,
                Some(reason::WAITING_FOR_CLASS),
                None,
            ),
            (
                "pending",
                machine_with(Some(Pending), None),
                None,
                Some("False"),
                Some(reason::CREATING),
                Some(t("12:10:00")),
            ),
            ("being created", machine_with(None, None), None, None, Some(reason::CREATING), Some(t("12:10:00"))),
            ("node not ready", healthy.clone(), None, Some("Unknown"), Some(reason::NODE_NOT_READY), None),
            ("healthy", healthy, None, Some("True"), None, None),
        ];
        let config = MachineConfig::default();
        for (name, m, class_issue, node_ready, why, deadline) in cases {
            let facts = MachineFacts { machine: &m, class_issue, node_ready, paused: false };
            let e = machine(&facts, &Effective::of(&m, &config));
            assert_eq!(e.as_ref().map(|e| e.reason.as_str()), why, "{name}");
            assert_eq!(e.and_then(|e| e.deadline).map(|d| d.at.0), deadline, "{name}");
        }
        let facts = MachineFacts { machine: &paused, class_issue: None, node_ready: Some("True"), paused: true };
        let e = machine(&facts, &Effective::of(&paused, &config));
        assert_eq!(e.map(|e| e.reason), Some(reason::PAUSED.to_string()));
    }

    #[test]
    fn a_blocked_drain_says_what_blocks_it() {
        let description = "Drain failed due to - pod a/b on node n1 is covered by PodDisruptionBudget a/pdb, which is misconfigured and requires zero voluntary evictions. Will retry in next sync. Initiate node drain";
        assert_eq!(
            drain_error(description),
            Some(
                "pod a/b on node n1 is covered by PodDisruptionBudget a/pdb, which is misconfigured and requires zero voluntary evictions"
            )
        );
        assert_eq!(drain_error("Drain failed due to - x. However, since it's a force deletion …"), Some("x"));
        assert_eq!(drain_error("Initiate node drain"), None);
    }

    #[test]
    fn an_mcm_machines_ready_condition_names_class_problems_only() {
        let condition = |status: &str, reason: &str| Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: "no such class".into(),
            last_transition_time: Time(now()),
            observed_generation: None,
        };
        assert_eq!(
            ClassIssue::from_infra_ready(&condition("False", infra::reason::INVALID_CLASS)),
            Some(ClassIssue { waiting: false, message: "InvalidClass: no such class".into() })
        );
        assert_eq!(ClassIssue::from_infra_ready(&condition("False", infra::reason::PROVISIONING)), None);
        assert_eq!(ClassIssue::from_infra_ready(&condition("True", infra::reason::INVALID_CLASS)), None);
    }
}
