//! Upstream Cluster API core's MachineHealthCheck (`cluster.x-k8s.io/v1beta2`) as pure decisions, for mode "CAPI with
//! MCM core": which selected Machines are targets, how each is judged (the remediate-machine annotation, the node
//! startup timeout, a deleted Node, unhealthy Node and Machine conditions), whether `spec.remediation.triggerIf`
//! allows remediation (the short circuit), and what to write: the Machines' `HealthCheckSucceeded`, `OwnerRemediated`
//! and `ExternallyRemediated` conditions, external remediation requests, the MachineHealthCheck's status, events, and
//! when to look again.
//!
//! Follows core's `core/reconcilers/machinehealthcheck/machinehealthcheck_controller.go` and
//! `machinehealthcheck_targets.go`, with its texts. Only the v1beta2 conditions are written (not the deprecated
//! v1beta1 ones). Imports `api` and sibling modules only.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use serde_json::Value;

use super::capi_cluster::{CONTROL_PLANE_LABEL, deployment_membership_patch, paused_message};
use super::capi_machine::{condition, merge_conditions};
use super::status::EventSpec;
use crate::api::capi::{self, Cluster, Machine, MachineHealthCheck, MachineHealthCheckStatus, UnhealthyCondition};

/// Annotation keeping a Machine out of every MachineHealthCheck (not a target, not counted).
pub const SKIP_REMEDIATION_ANNOTATION: &str = "cluster.x-k8s.io/skip-remediation";
/// Annotation marking a Machine unhealthy whatever its checks say.
pub const REMEDIATE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/remediate-machine";
/// Core's `DefaultNodeStartupTimeoutSeconds`, used when `checks.nodeStartupTimeoutSeconds` is absent.
pub const DEFAULT_NODE_STARTUP_TIMEOUT: Duration = Duration::from_secs(600);
/// The default of `triggerIf.unhealthyLessThanOrEqualTo`: always remediate.
const DEFAULT_MAX_UNHEALTHY: &str = "100%";
/// Stripped from the template's kind to name the remediation request's kind.
const TEMPLATE_SUFFIX: &str = "Template";

/// Condition types (Machine: the first three; MachineHealthCheck: the last two).
pub mod condition_type {
    /// On a Machine: whether it passed the health check.
    pub const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
    /// On a Machine: remediation by its owner (MachineSet, control plane) was requested.
    pub const OWNER_REMEDIATED: &str = "OwnerRemediated";
    /// On a Machine: remediation by an external remediation request.
    pub const EXTERNALLY_REMEDIATED: &str = "ExternallyRemediated";
    /// On the MachineHealthCheck: whether the short circuit lets it remediate.
    pub const REMEDIATION_ALLOWED: &str = "RemediationAllowed";
    /// On the MachineHealthCheck: whether reconciliation is paused.
    pub const PAUSED: &str = "Paused";
}

/// Condition reasons, core's texts.
pub mod reason {
    /// `HealthCheckSucceeded` True.
    pub const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
    /// `HealthCheckSucceeded` False: a Node condition held too long.
    pub const UNHEALTHY_NODE: &str = "UnhealthyNode";
    /// `HealthCheckSucceeded` False: a Machine condition held too long.
    pub const UNHEALTHY_MACHINE: &str = "UnhealthyMachine";
    /// `HealthCheckSucceeded` False: no Node within the node startup timeout.
    pub const NODE_STARTUP_TIMEOUT: &str = "NodeStartupTimeout";
    /// `HealthCheckSucceeded` False: the Node the Machine referenced is gone.
    pub const NODE_DELETED: &str = "NodeDeleted";
    /// `HealthCheckSucceeded` False: the remediate-machine annotation.
    pub const HAS_REMEDIATE_ANNOTATION: &str = "HasRemediateAnnotation";
    /// `OwnerRemediated` / `ExternallyRemediated` False: remediation requested.
    pub const WAITING_FOR_REMEDIATION: &str = "WaitingForRemediation";
    /// `ExternallyRemediated` False: the remediation template could not be read.
    pub const REMEDIATION_TEMPLATE_NOT_FOUND: &str = "RemediationTemplateNotFound";
    /// `ExternallyRemediated` False: the remediation request could not be created.
    pub const REMEDIATION_REQUEST_CREATION_FAILED: &str = "RemediationRequestCreationFailed";
    /// `RemediationAllowed` False.
    pub const TOO_MANY_UNHEALTHY: &str = "TooManyUnhealthy";
    /// `RemediationAllowed` True.
    pub const REMEDIATION_ALLOWED: &str = "RemediationAllowed";
    /// `Paused` True.
    pub const PAUSED: &str = "Paused";
    /// `Paused` False.
    pub const NOT_PAUSED: &str = "NotPaused";
}

/// Event reasons, core's texts.
pub mod event_reason {
    /// Warning on the MachineHealthCheck: the short circuit holds and some machines are unhealthy.
    pub const REMEDIATION_RESTRICTED: &str = "RemediationRestricted";
    /// Normal on a Machine: it was marked unhealthy.
    pub const MACHINE_MARKED_UNHEALTHY: &str = "MachineMarkedUnhealthy";
}

/// Why the MachineHealthCheck cannot be planned (core fails the reconcile).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HealthCheckError {
    /// `spec.remediation` does not have the v1beta2 shape.
    #[error("invalid spec.remediation: {0}")]
    Remediation(String),
    /// `triggerIf.unhealthyLessThanOrEqualTo` is neither an integer nor a percentage.
    #[error("invalid spec.remediation.triggerIf.unhealthyLessThanOrEqualTo {0:?}")]
    UnhealthyLessThanOrEqualTo(String),
    /// `triggerIf.unhealthyInRange` is not `[min-max]` with `min <= max`.
    #[error("invalid spec.remediation.triggerIf.unhealthyInRange {0:?}")]
    UnhealthyInRange(String),
}

/// `spec.remediation`, parsed from the spec's unmodelled fields.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remediation {
    /// When remediation may happen.
    #[serde(default)]
    pub trigger_if: TriggerIf,
    /// The external remediation template; undefined: the owner remediates.
    #[serde(default)]
    pub template_ref: TemplateRef,
}

/// `spec.remediation.triggerIf`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerIf {
    /// Remediate only while at most this many (or this percentage of) targets are unhealthy.
    #[serde(default)]
    pub unhealthy_less_than_or_equal_to: Option<IntOrString>,
    /// `[min-max]`: remediate only while the unhealthy count is in the range; takes precedence.
    #[serde(default)]
    pub unhealthy_in_range: Option<String>,
}

/// `spec.remediation.templateRef`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateRef {
    /// The template's kind (e.g. `Metal3RemediationTemplate`).
    #[serde(default)]
    pub kind: String,
    /// The template's name, in the MachineHealthCheck's namespace.
    #[serde(default)]
    pub name: String,
    /// The template's apiVersion.
    #[serde(default)]
    pub api_version: String,
}

impl TemplateRef {
    /// Core's `IsDefined`: any field set.
    pub fn is_defined(&self) -> bool {
        !(self.kind.is_empty() && self.name.is_empty() && self.api_version.is_empty())
    }

    /// The kind of the requests cloned from it.
    pub fn request_kind(&self) -> &str {
        self.kind.strip_suffix(TEMPLATE_SUFFIX).unwrap_or(&self.kind)
    }

    /// `Kind.group` as core's `GroupKind.String()` writes it (the cloned-from annotation).
    fn group_kind(&self) -> String {
        match self.api_version.split_once('/') {
            Some((group, _)) if !group.is_empty() => format!("{}.{group}", self.kind),
            _ => self.kind.clone(),
        }
    }
}

impl Remediation {
    /// Parses `spec.remediation`; absent is the default (owner remediation, always triggered).
    pub fn of(mhc: &MachineHealthCheck) -> Result<Self, HealthCheckError> {
        match mhc.spec.extra.get("remediation") {
            None | Some(Value::Null) => Ok(Remediation::default()),
            Some(v) => Remediation::deserialize(v).map_err(|e| HealthCheckError::Remediation(e.to_string())),
        }
    }
}

/// The short-circuit rule in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// At most this many or this percentage (rounded down) of the targets.
    UnhealthyLessThanOrEqualTo(IntOrString),
    /// Between `min` and `max` unhealthy, inclusive; `text` is the spec's `[min-max]`.
    UnhealthyInRange {
        /// Lower bound.
        min: u32,
        /// Upper bound.
        max: u32,
        /// As written in the spec (core's messages quote it).
        text: String,
    },
}

impl TriggerIf {
    /// The rule: the range when set, else the maximum (default `100%`).
    pub fn trigger(&self) -> Result<Trigger, HealthCheckError> {
        match self.unhealthy_in_range.as_deref().filter(|r| !r.is_empty()) {
            Some(text) => {
                let bad = || HealthCheckError::UnhealthyInRange(text.to_string());
                let inner = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).ok_or_else(bad)?;
                let (min, max) = inner.split_once('-').ok_or_else(bad)?;
                let min: u32 = min.parse().map_err(|_| bad())?;
                let max: u32 = max.parse().map_err(|_| bad())?;
                if max < min {
                    return Err(bad());
                }
                Ok(Trigger::UnhealthyInRange { min, max, text: text.to_string() })
            }
            None => Ok(Trigger::UnhealthyLessThanOrEqualTo(
                self.unhealthy_less_than_or_equal_to
                    .clone()
                    .unwrap_or_else(|| IntOrString::String(DEFAULT_MAX_UNHEALTHY.to_string())),
            )),
        }
    }
}

fn int_or_string_text(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// Core's `GetScaledValueFromIntOrPercent(v, total, roundUp=false)`.
fn scaled(v: &IntOrString, total: i64) -> Result<i64, HealthCheckError> {
    match v {
        IntOrString::Int(i) => Ok(i64::from(*i)),
        IntOrString::String(s) => {
            let bad = || HealthCheckError::UnhealthyLessThanOrEqualTo(s.clone());
            let percent: i64 = s.strip_suffix('%').ok_or_else(bad)?.parse().map_err(|_| bad())?;
            Ok((percent * total).div_euclid(100))
        }
    }
}

/// The short circuit's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remediations {
    /// Remediation may go on; `count` more machines may become unhealthy before it stops.
    Allowed {
        /// `status.remediationsAllowed`.
        count: i32,
    },
    /// Remediation is held; `message` is core's sentence (condition and event).
    Restricted {
        /// Why.
        message: String,
    },
}

/// Core's `isAllowedRemediation`: the count judged is `expected - healthy`, so machines still within a timeout or
/// not judged count against the limit too; the message names only the machines found unhealthy.
pub fn remediations(
    trigger: &Trigger,
    expected: usize,
    healthy: usize,
    unhealthy: usize,
) -> Result<Remediations, HealthCheckError> {
    let total = i64::try_from(expected).unwrap_or(i64::MAX);
    let not_healthy = total.saturating_sub(i64::try_from(healthy).unwrap_or(i64::MAX));
    let clamp = |n: i64| i32::try_from(n.max(0)).unwrap_or(i32::MAX);
    match trigger {
        Trigger::UnhealthyInRange { min, max, text } => {
            if not_healthy >= i64::from(*min) && not_healthy <= i64::from(*max) {
                return Ok(Remediations::Allowed { count: clamp(i64::from(*max) - not_healthy) });
            }
            Ok(Remediations::Restricted {
                message: format!(
                    "Remediation is not allowed, the number of not started or unhealthy machines does not fall within \
                     the range (total: {expected}, unhealthy: {unhealthy}, unhealthyRange: {text})"
                ),
            })
        }
        Trigger::UnhealthyLessThanOrEqualTo(value) => {
            let max = scaled(value, total)?;
            if not_healthy <= max {
                return Ok(Remediations::Allowed { count: clamp(max - not_healthy) });
            }
            Ok(Remediations::Restricted {
                message: format!(
                    "Remediation is not allowed, the number of not started or unhealthy machines exceeds maxUnhealthy \
                     (total: {expected}, unhealthy: {unhealthy}, maxUnhealthy: {})",
                    int_or_string_text(value)
                ),
            })
        }
    }
}

/// `spec.checks` with core's defaults applied.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Checks<'a> {
    /// How long a Machine may go without a Node; `None`: disabled (`nodeStartupTimeoutSeconds: 0`).
    pub node_startup_timeout: Option<Duration>,
    /// Node conditions that, held for their timeout, make the Machine unhealthy.
    pub unhealthy_node_conditions: &'a [UnhealthyCondition],
    /// Machine conditions that, held for their timeout, make the Machine unhealthy.
    pub unhealthy_machine_conditions: &'a [UnhealthyCondition],
}

fn seconds(s: i32) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

impl<'a> Checks<'a> {
    /// The checks of a MachineHealthCheck; the node startup timeout defaults to 10 minutes.
    pub fn of(mhc: &'a MachineHealthCheck) -> Self {
        let checks = mhc.spec.checks.as_ref();
        let startup = checks.and_then(|c| c.node_startup_timeout_seconds).map_or(DEFAULT_NODE_STARTUP_TIMEOUT, seconds);
        Checks {
            node_startup_timeout: (!startup.is_zero()).then_some(startup),
            unhealthy_node_conditions: checks.and_then(|c| c.unhealthy_node_conditions.as_deref()).unwrap_or(&[]),
            unhealthy_machine_conditions: checks.and_then(|c| c.unhealthy_machine_conditions.as_deref()).unwrap_or(&[]),
        }
    }
}

/// A Cluster milestone the health check waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Milestone {
    /// Not yet.
    NotReached,
    /// Reached, at `since` when known (it moves the node startup clock).
    Reached {
        /// When.
        since: Option<Timestamp>,
    },
}

impl Milestone {
    fn reached(self) -> bool {
        matches!(self, Milestone::Reached { .. })
    }

    fn since(self) -> Option<Timestamp> {
        match self {
            Milestone::Reached { since } => since,
            Milestone::NotReached => None,
        }
    }
}

/// What the health check needs of the Cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterFacts {
    /// Core's `InfrastructureReady` condition: nothing is judged before it.
    pub infrastructure_ready: Milestone,
    /// Core's `ControlPlaneInitialized` condition: only control-plane Machines are judged before it, and the
    /// workload cluster (Nodes) is only asked after it.
    pub control_plane_initialized: Milestone,
}

impl ClusterFacts {
    /// From the Cluster's conditions (their transition times), as core reads them; a missing condition falls back
    /// on `status.initialization` (without a time), which is all a Cluster without a control plane provider may
    /// carry in this mode.
    pub fn of(cluster: &Cluster) -> Self {
        let status = cluster.status.as_ref();
        let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
        let init = status.and_then(|s| s.initialization.as_ref());
        let milestone = |type_: &str, flag: Option<bool>| match conditions.iter().find(|c| c.type_ == type_) {
            Some(c) if c.status == "True" => Milestone::Reached { since: Some(c.last_transition_time.0) },
            Some(_) => Milestone::NotReached,
            None if flag == Some(true) => Milestone::Reached { since: None },
            None => Milestone::NotReached,
        };
        ClusterFacts {
            infrastructure_ready: milestone("InfrastructureReady", init.and_then(|i| i.infrastructure_provisioned)),
            control_plane_initialized: milestone(
                "ControlPlaneInitialized",
                init.and_then(|i| i.control_plane_initialized),
            ),
        }
    }
}

/// What was found of a Machine's Node in the workload cluster.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NodeLookup<'a> {
    /// Not looked up: the Machine has no `status.nodeRef` yet (or there is no workload client yet).
    NotLooked,
    /// The Node `status.nodeRef` names.
    Found(&'a Node),
    /// The Machine has a `status.nodeRef` and that Node does not exist.
    Deleted,
    /// The workload cluster could not be asked.
    Unreachable,
}

impl<'a> NodeLookup<'a> {
    /// From a lookup of the Node named by the Machine's `status.nodeRef` (`node`), and whether the workload cluster
    /// answered.
    pub fn observed(machine: &Machine, node: Option<&'a Node>, connected: bool) -> Self {
        match node {
            _ if !connected => NodeLookup::Unreachable,
            Some(n) => NodeLookup::Found(n),
            None if node_ref_name(machine).is_some() => NodeLookup::Deleted,
            None => NodeLookup::NotLooked,
        }
    }
}

/// A Machine the MachineHealthCheck selects, with its Node.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The Machine.
    pub machine: &'a Machine,
    /// Its Node.
    pub node: NodeLookup<'a>,
}

/// Why a selected Machine is not a target (not counted either).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The `cluster.x-k8s.io/paused` annotation.
    Paused,
    /// The `cluster.x-k8s.io/skip-remediation` annotation.
    SkipRemediation,
}

/// Why a target was not judged, or judged without being counted healthy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotEvaluated {
    /// The workload cluster could not be asked: nothing is written (core fails the reconcile, keeping the last
    /// state).
    WorkloadUnreachable,
    /// A worker before the control plane is initialized.
    ControlPlaneNotInitialized,
    /// Before the Cluster's infrastructure is ready.
    ClusterInfrastructureNotReady,
    /// No Node and the node startup timeout is disabled.
    NoNode,
    /// Passed the checks but is being deleted.
    Deleting,
}

/// Why a target is unhealthy; [`UnhealthyReason::as_str`] is the condition reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnhealthyReason {
    /// The remediate-machine annotation.
    RemediateAnnotation,
    /// No Node within the node startup timeout.
    NodeStartupTimeout,
    /// The Node it referenced is gone.
    NodeDeleted,
    /// A Node condition held longer than its timeout.
    UnhealthyNode,
    /// A Machine condition held longer than its timeout (wins over Node reasons).
    UnhealthyMachine,
}

impl UnhealthyReason {
    /// The `HealthCheckSucceeded` reason.
    pub fn as_str(self) -> &'static str {
        match self {
            UnhealthyReason::RemediateAnnotation => reason::HAS_REMEDIATE_ANNOTATION,
            UnhealthyReason::NodeStartupTimeout => reason::NODE_STARTUP_TIMEOUT,
            UnhealthyReason::NodeDeleted => reason::NODE_DELETED,
            UnhealthyReason::UnhealthyNode => reason::UNHEALTHY_NODE,
            UnhealthyReason::UnhealthyMachine => reason::UNHEALTHY_MACHINE,
        }
    }
}

/// The judgement of one selected Machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not a target.
    Skipped(SkipReason),
    /// Not judged, or not counted healthy; nothing is written.
    NotEvaluated(NotEvaluated),
    /// A timeout is running: not counted healthy, nothing written; look again after `next_check`.
    Pending {
        /// Until the nearest timeout expires (plus core's second).
        next_check: Duration,
    },
    /// Healthy: counted, `HealthCheckSucceeded` True.
    Healthy,
    /// Unhealthy: `HealthCheckSucceeded` False with this reason and message.
    Unhealthy {
        /// Why.
        reason: UnhealthyReason,
        /// Core's message.
        message: String,
    },
}

fn has_annotation(machine: &Machine, key: &str) -> bool {
    machine.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(key))
}

fn node_ref_name(machine: &Machine) -> Option<&str> {
    machine.status.as_ref().and_then(|s| s.node_ref.as_ref()).map(|r| r.name.as_str()).filter(|n| !n.is_empty())
}

fn machine_conditions(machine: &Machine) -> &[Condition] {
    machine.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or(&[])
}

fn deleting(machine: &Machine) -> bool {
    machine.metadata.deletion_timestamp.is_some()
}

/// Core's `shouldSkipRemediation`.
pub fn skip_reason(machine: &Machine) -> Option<SkipReason> {
    if has_annotation(machine, capi::PAUSED_ANNOTATION) {
        Some(SkipReason::Paused)
    } else if has_annotation(machine, SKIP_REMEDIATION_ANNOTATION) {
        Some(SkipReason::SkipRemediation)
    } else {
        None
    }
}

/// Whether the MachineHealthCheck selects the Machine: same namespace, its Cluster's label, and the selector.
pub fn selects(mhc: &MachineHealthCheck, machine: &Machine) -> bool {
    let empty = BTreeMap::new();
    let labels = machine.metadata.labels.as_ref().unwrap_or(&empty);
    mhc.metadata.namespace == machine.metadata.namespace
        && labels.get(capi::CLUSTER_NAME_LABEL) == Some(&mhc.spec.cluster_name)
        && super::machine_deployment::validation::selector_matches(&mhc.spec.selector, labels)
}

/// Go's `time.Duration.String()` for whole seconds (core's messages use it).
fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, s % 3600 / 60, s % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

enum Timer {
    Expired,
    Running(Duration),
}

/// Core's test `since + timeout < now` (strictly); a missing `since` is Go's zero time, long expired. While running,
/// the next check is the time left plus one second, as core adds.
fn timer(since: Option<Timestamp>, timeout: Duration, now: Timestamp) -> Timer {
    let Some(since) = since else { return Timer::Expired };
    let timeout = SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX);
    let elapsed = now.duration_since(since);
    if elapsed > timeout {
        return Timer::Expired;
    }
    let left = timeout.checked_sub(elapsed).and_then(|d| d.checked_add(SignedDuration::from_secs(1)));
    Timer::Running(left.and_then(|d| Duration::try_from(d).ok()).unwrap_or(Duration::ZERO))
}

/// Unhealthy messages of the Machine's conditions, else the nearest timeout.
fn machine_checks(machine: &Machine, checks: &Checks<'_>, now: Timestamp) -> (Vec<String>, Option<Duration>) {
    let mut messages = Vec::new();
    let mut next: Option<Duration> = None;
    for check in checks.unhealthy_machine_conditions {
        let Some(c) = machine_conditions(machine).iter().find(|c| c.type_ == check.type_) else { continue };
        if c.status != check.status {
            continue;
        }
        let timeout = seconds(check.timeout_seconds);
        match timer(Some(c.last_transition_time.0), timeout, now) {
            Timer::Expired => messages.push(format!(
                "Condition {} on Machine is reporting status {} with reason {} for more than {}",
                check.type_,
                check.status,
                c.reason,
                go_duration(timeout)
            )),
            Timer::Running(d) => next = Some(next.map_or(d, |n| n.min(d))),
        }
    }
    if messages.is_empty() { (messages, next) } else { (messages, None) }
}

/// What the Node says: an unhealthy reason with messages, else the nearest timeout.
struct NodeJudgement {
    reason: Option<UnhealthyReason>,
    messages: Vec<String>,
    next: Option<Duration>,
}

fn node_checks(target: &Target<'_>, checks: &Checks<'_>, cluster: &ClusterFacts, now: Timestamp) -> NodeJudgement {
    let healthy = |next| NodeJudgement { reason: None, messages: Vec::new(), next };
    let m = target.machine;
    let node = match target.node {
        NodeLookup::Deleted => {
            return NodeJudgement {
                reason: Some(UnhealthyReason::NodeDeleted),
                messages: vec![format!("Node {} has been deleted", node_ref_name(m).unwrap_or_default())],
                next: None,
            };
        }
        NodeLookup::Found(node) => node,
        // No Node to judge (core's nil Node): the startup clock.
        NodeLookup::NotLooked | NodeLookup::Unreachable => {
            let Some(timeout) = checks.node_startup_timeout else { return healthy(None) };
            // The latest of the machine's creation, the Cluster's milestones and the machine's InfrastructureReady.
            let machine_infra = machine_conditions(m)
                .iter()
                .find(|c| c.type_ == "InfrastructureReady" && c.status == "True")
                .map(|c| c.last_transition_time.0);
            let created = m.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let since =
                [cluster.control_plane_initialized.since(), cluster.infrastructure_ready.since(), machine_infra]
                    .into_iter()
                    .flatten()
                    .fold(created, |acc, t| Some(acc.map_or(t, |a| a.max(t))));
            return match timer(since, timeout, now) {
                Timer::Expired => NodeJudgement {
                    reason: Some(UnhealthyReason::NodeStartupTimeout),
                    messages: vec![format!("Node failed to report startup in {}", go_duration(timeout))],
                    next: None,
                },
                Timer::Running(d) => healthy(Some(d)),
            };
        }
    };
    let mut messages = Vec::new();
    let mut next: Option<Duration> = None;
    let node_conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    for check in checks.unhealthy_node_conditions {
        let Some(c) = node_conditions.iter().find(|c| c.type_ == check.type_) else { continue };
        if c.status != check.status {
            continue;
        }
        let timeout = seconds(check.timeout_seconds);
        match timer(c.last_transition_time.as_ref().map(|t| t.0), timeout, now) {
            Timer::Expired => messages.push(format!(
                "Condition {} on Node is reporting status {} with reason {} for more than {}",
                check.type_,
                check.status,
                c.reason.as_deref().unwrap_or_default(),
                go_duration(timeout)
            )),
            Timer::Running(d) => next = Some(next.map_or(d, |n| n.min(d))),
        }
    }
    if messages.is_empty() {
        healthy(next)
    } else {
        NodeJudgement { reason: Some(UnhealthyReason::UnhealthyNode), messages, next: None }
    }
}

/// Core's `needsRemediation` plus how `healthCheckTargets` counts the result.
pub fn judge(target: &Target<'_>, checks: &Checks<'_>, cluster: &ClusterFacts, now: Timestamp) -> Verdict {
    let m = target.machine;
    if let Some(skip) = skip_reason(m) {
        return Verdict::Skipped(skip);
    }
    // Core only asks the workload cluster once the control plane is initialized, and fails the reconcile when it
    // cannot: nothing is judged, the last conditions stay.
    if cluster.control_plane_initialized.reached() && target.node == NodeLookup::Unreachable {
        return Verdict::NotEvaluated(NotEvaluated::WorkloadUnreachable);
    }
    if has_annotation(m, REMEDIATE_MACHINE_ANNOTATION) {
        return Verdict::Unhealthy {
            reason: UnhealthyReason::RemediateAnnotation,
            message: format!(
                "Health check failed: marked for remediation via {REMEDIATE_MACHINE_ANNOTATION} annotation"
            ),
        };
    }
    let control_plane = m.metadata.labels.as_ref().is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL));
    if !cluster.control_plane_initialized.reached() && !control_plane {
        return Verdict::NotEvaluated(NotEvaluated::ControlPlaneNotInitialized);
    }
    if !cluster.infrastructure_ready.reached() {
        return Verdict::NotEvaluated(NotEvaluated::ClusterInfrastructureNotReady);
    }
    let (machine_messages, machine_next) = machine_checks(m, checks, now);
    let node = node_checks(target, checks, cluster, now);
    if machine_messages.is_empty() && node.messages.is_empty() {
        let next = [machine_next, node.next].into_iter().flatten().filter(|d| !d.is_zero()).min();
        return match next {
            Some(next_check) => Verdict::Pending { next_check },
            None if deleting(m) => Verdict::NotEvaluated(NotEvaluated::Deleting),
            None if matches!(target.node, NodeLookup::Found(_)) => Verdict::Healthy,
            None => Verdict::NotEvaluated(NotEvaluated::NoNode),
        };
    }
    let reason = match node.reason {
        Some(r) if machine_messages.is_empty() => r,
        _ => UnhealthyReason::UnhealthyMachine,
    };
    let lines: Vec<String> = machine_messages.iter().chain(&node.messages).map(|l| format!("  * {l}")).collect();
    Verdict::Unhealthy { reason, message: format!("Health check failed:\n{}", lines.join("\n")) }
}

/// What a MachineHealthCheck reconcile sees.
#[derive(Clone, Copy, Debug)]
pub struct HealthCheckObservation<'a> {
    /// The MachineHealthCheck.
    pub mhc: &'a MachineHealthCheck,
    /// Its Cluster (`spec.clusterName`).
    pub cluster: &'a Cluster,
    /// The Cluster's milestones, usually [`ClusterFacts::of`] the Cluster.
    pub facts: ClusterFacts,
    /// The Machines it selects ([`selects`]), skipped ones included, with their Nodes.
    pub targets: &'a [Target<'a>],
    /// Now.
    pub now: Timestamp,
}

/// An external remediation request to create for an unhealthy Machine (core clones the template's
/// `spec.template`; see [`remediation_request_object`]). Core creates it only if none of that kind and name exists.
#[derive(Clone, Debug, PartialEq)]
pub struct RemediationRequest {
    /// Where it goes and what it is called: the template's apiVersion and kind without `Template`, the Machine's
    /// namespace and name.
    pub request: RemediationRequestRef,
    /// The template to read, in the MachineHealthCheck's namespace.
    pub template: TemplateRef,
    /// The namespace of the template.
    pub template_namespace: String,
    /// The Machine's `spec.clusterName` (the cluster-name label of the clone).
    pub cluster_name: String,
    /// The Machine, as the clone's owner.
    pub owner: OwnerReference,
    /// `ExternallyRemediated` False WaitingForRemediation: write it once the request is created.
    pub on_created: Condition,
}

/// An external remediation request, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemediationRequestRef {
    /// apiVersion.
    pub api_version: String,
    /// Kind (the template's, without `Template`).
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name (the Machine's).
    pub name: String,
}

/// What to do to one selected Machine.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineUpdate {
    /// The Machine's name.
    pub name: String,
    /// How it was judged.
    pub verdict: Verdict,
    /// Conditions to merge into `status.conditions` (only `HealthCheckSucceeded` and `OwnerRemediated`, owned by
    /// the health check); empty: write nothing.
    pub conditions: Vec<Condition>,
    /// The external remediation request to create.
    pub create_remediation_request: Option<RemediationRequest>,
    /// The external remediation request to delete (the Machine is healthy again), unless already being deleted.
    pub delete_remediation_request: Option<RemediationRequestRef>,
    /// Events to record on the Machine, after its conditions are written.
    pub events: Vec<EventSpec>,
}

/// How the reconcile ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The Cluster or the MachineHealthCheck is paused: only the `Paused` condition is written.
    Paused,
    /// The workload cluster could not be asked: nothing but `Paused` is written; retry with back-off.
    WorkloadUnreachable,
    /// The short circuit holds: conditions are written, nothing is remediated.
    Restricted,
    /// Unhealthy Machines are handed to remediation.
    Allowed,
}

/// What a MachineHealthCheck reconcile writes.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthCheckPlan {
    /// How it ended.
    pub outcome: Outcome,
    /// Merge patch giving the MachineHealthCheck its cluster-name label and an owner reference to its Cluster.
    pub membership_patch: Option<Value>,
    /// The MachineHealthCheck's status.
    pub status: MachineHealthCheckStatus,
    /// Per selected Machine, in the order given.
    pub machines: Vec<MachineUpdate>,
    /// Events to record on the MachineHealthCheck.
    pub events: Vec<EventSpec>,
    /// Look again after this long: the nearest running timeout (none when restricted, as core).
    pub requeue_after: Option<Duration>,
}

fn with_generation(c: Condition, generation: Option<i64>) -> Condition {
    Condition { observed_generation: generation, ..c }
}

fn key(namespace: Option<&str>, name: Option<&str>) -> String {
    match namespace.filter(|n| !n.is_empty()) {
        Some(ns) => format!("{ns}/{}", name.unwrap_or_default()),
        None => name.unwrap_or_default().to_string(),
    }
}

fn machine_owner_ref(m: &Machine) -> OwnerReference {
    OwnerReference {
        api_version: format!("{}/{}", capi::GROUP, capi::VERSION),
        kind: "Machine".into(),
        name: m.metadata.name.clone().unwrap_or_default(),
        uid: m.metadata.uid.clone().unwrap_or_default(),
        controller: None,
        block_owner_deletion: None,
    }
}

fn request_ref(template: &TemplateRef, namespace: &str, machine: &Machine) -> RemediationRequestRef {
    RemediationRequestRef {
        api_version: template.api_version.clone(),
        kind: template.request_kind().to_string(),
        namespace: namespace.to_string(),
        name: machine.metadata.name.clone().unwrap_or_default(),
    }
}

/// Decides a MachineHealthCheck reconcile (core's `reconcile`, `patchUnhealthyTargets`, `patchHealthyTargets`).
pub fn plan_health_check(obs: &HealthCheckObservation<'_>) -> Result<HealthCheckPlan, HealthCheckError> {
    let mhc = obs.mhc;
    let now = obs.now;
    let generation = mhc.metadata.generation;
    let old = mhc.status.clone().unwrap_or_default();
    let old_conditions = old.conditions.clone().unwrap_or_default();
    let mut status = old.clone();
    let mut conditions = old_conditions.clone();
    let paused = paused_message(Some(obs.cluster), "MachineHealthCheck", &mhc.metadata);
    let paused_condition = match &paused {
        Some(message) => condition(&old_conditions, condition_type::PAUSED, true, reason::PAUSED, message, now),
        None => condition(&old_conditions, condition_type::PAUSED, false, reason::NOT_PAUSED, "", now),
    };
    merge_conditions(&mut conditions, vec![with_generation(paused_condition, generation)]);
    status.conditions = Some(conditions.clone());
    let mut plan = HealthCheckPlan {
        outcome: Outcome::Paused,
        membership_patch: None,
        status,
        machines: Vec::new(),
        events: Vec::new(),
        requeue_after: None,
    };
    if paused.is_some() {
        return Ok(plan);
    }
    plan.membership_patch = deployment_membership_patch(&mhc.metadata, &mhc.spec.cluster_name, Some(obs.cluster));

    let remediation = Remediation::of(mhc)?;
    let trigger = remediation.trigger_if.trigger()?;
    let checks = Checks::of(mhc);
    let verdicts: Vec<Verdict> = obs.targets.iter().map(|t| judge(t, &checks, &obs.facts, now)).collect();
    let mut updates: Vec<MachineUpdate> = obs
        .targets
        .iter()
        .zip(&verdicts)
        .map(|(t, v)| MachineUpdate {
            name: t.machine.metadata.name.clone().unwrap_or_default(),
            verdict: v.clone(),
            conditions: Vec::new(),
            create_remediation_request: None,
            delete_remediation_request: None,
            events: Vec::new(),
        })
        .collect();
    if verdicts.contains(&Verdict::NotEvaluated(NotEvaluated::WorkloadUnreachable)) {
        plan.outcome = Outcome::WorkloadUnreachable;
        plan.machines = updates;
        return Ok(plan);
    }

    let counted = || verdicts.iter().filter(|v| !matches!(v, Verdict::Skipped(_)));
    let expected = counted().count();
    let healthy = counted().filter(|v| **v == Verdict::Healthy).count();
    let unhealthy = counted().filter(|v| matches!(v, Verdict::Unhealthy { .. })).count();
    let mut targets: Vec<String> = obs
        .targets
        .iter()
        .zip(&verdicts)
        .filter(|(_, v)| !matches!(v, Verdict::Skipped(_)))
        .map(|(t, _)| t.machine.metadata.name.clone().unwrap_or_default())
        .collect();
    targets.sort();
    let allowance = remediations(&trigger, expected, healthy, unhealthy)?;
    plan.status.expected_machines = Some(i32::try_from(expected).unwrap_or(i32::MAX));
    plan.status.current_healthy = Some(i32::try_from(healthy).unwrap_or(i32::MAX));
    plan.status.targets = Some(targets);
    plan.status.observed_generation = generation;
    let allowed_condition = match &allowance {
        Remediations::Allowed { count } => {
            plan.status.remediations_allowed = Some(*count);
            plan.outcome = Outcome::Allowed;
            condition(&old_conditions, condition_type::REMEDIATION_ALLOWED, true, reason::REMEDIATION_ALLOWED, "", now)
        }
        Remediations::Restricted { message } => {
            plan.status.remediations_allowed = Some(0);
            plan.outcome = Outcome::Restricted;
            if unhealthy > 0 {
                plan.events.push(EventSpec::warning(event_reason::REMEDIATION_RESTRICTED, message.clone()));
            }
            let r = reason::TOO_MANY_UNHEALTHY;
            condition(&old_conditions, condition_type::REMEDIATION_ALLOWED, false, r, message, now)
        }
    };
    merge_conditions(&mut conditions, vec![with_generation(allowed_condition, generation)]);
    plan.status.conditions = Some(conditions);

    let allowed = plan.outcome == Outcome::Allowed;
    let template = remediation.template_ref.is_defined().then_some(&remediation.template_ref);
    let mhc_namespace = mhc.metadata.namespace.clone().unwrap_or_default();
    let mut next_checks = Vec::new();
    for (target, update) in obs.targets.iter().zip(updates.iter_mut()) {
        let m = target.machine;
        let old = machine_conditions(m);
        let stamp = |c: Condition| with_generation(c, m.metadata.generation);
        match &update.verdict {
            Verdict::Pending { next_check } => next_checks.push(*next_check),
            Verdict::Healthy => {
                let r = reason::HEALTH_CHECK_SUCCEEDED;
                update.conditions.push(stamp(condition(old, condition_type::HEALTH_CHECK_SUCCEEDED, true, r, "", now)));
                if let Some(template) = template.filter(|_| allowed) {
                    update.delete_remediation_request = Some(request_ref(template, &mhc_namespace, m));
                }
            }
            Verdict::Unhealthy { reason: why, message } => {
                let c = condition(old, condition_type::HEALTH_CHECK_SUCCEEDED, false, why.as_str(), message, now);
                update.conditions.push(stamp(c));
                if !allowed {
                    continue;
                }
                if let Some(template) = template {
                    let waiting = condition(
                        old,
                        condition_type::EXTERNALLY_REMEDIATED,
                        false,
                        reason::WAITING_FOR_REMEDIATION,
                        "",
                        now,
                    );
                    let namespace = m.metadata.namespace.clone().unwrap_or_default();
                    update.create_remediation_request = Some(RemediationRequest {
                        request: request_ref(template, &namespace, m),
                        template: template.clone(),
                        template_namespace: mhc_namespace.clone(),
                        cluster_name: m.spec.cluster_name.clone(),
                        owner: machine_owner_ref(m),
                        on_created: stamp(waiting),
                    });
                } else if !deleting(m) {
                    // A remediation in progress (OwnerRemediated False) is the owner's to finish.
                    let in_progress =
                        old.iter().any(|c| c.type_ == condition_type::OWNER_REMEDIATED && c.status != "True");
                    if !in_progress {
                        let r = reason::WAITING_FOR_REMEDIATION;
                        let c =
                            condition(old, condition_type::OWNER_REMEDIATED, false, r, "Waiting for remediation", now);
                        update.conditions.push(stamp(c));
                    }
                }
                update.events.push(EventSpec::normal(
                    event_reason::MACHINE_MARKED_UNHEALTHY,
                    format!(
                        "Machine {} has been marked as unhealthy by {}",
                        key(m.metadata.namespace.as_deref(), m.metadata.name.as_deref()),
                        key(mhc.metadata.namespace.as_deref(), mhc.metadata.name.as_deref())
                    ),
                ));
            }
            Verdict::Skipped(_) | Verdict::NotEvaluated(_) => {}
        }
    }
    plan.machines = updates;
    // Core does not requeue a restricted check (it waits for a watch event or its resync, minutes later), so a
    // Machine still inside its timeout is judged late; we look again when the nearest timeout runs out.
    plan.requeue_after = next_checks.into_iter().min();
    Ok(plan)
}

/// Why an external remediation request could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemediationFailure {
    /// Reading the template failed.
    TemplateNotFound,
    /// Creating the request failed.
    RequestCreationFailed,
}

/// The Machine's `ExternallyRemediated` condition after a failure, core's texts.
pub fn remediation_failure_condition(
    machine: &Machine,
    request: &RemediationRequest,
    failure: RemediationFailure,
    now: Timestamp,
) -> Condition {
    let (r, message) = match failure {
        RemediationFailure::TemplateNotFound => (
            reason::REMEDIATION_TEMPLATE_NOT_FOUND,
            format!(
                "Error retrieving remediation template {} {}",
                request.template.kind,
                key(Some(&request.template_namespace), Some(&request.template.name))
            ),
        ),
        RemediationFailure::RequestCreationFailed => {
            (reason::REMEDIATION_REQUEST_CREATION_FAILED, "Please check controller logs for errors".to_string())
        }
    };
    let c = condition(machine_conditions(machine), condition_type::EXTERNALLY_REMEDIATED, false, r, &message, now);
    with_generation(c, machine.metadata.generation)
}

/// The request object cloned from the remediation template (core's `external.GenerateTemplate`): the template's
/// `spec.template` with the request's name and namespace, the cloned-from annotations, the cluster-name label, the
/// Machine as sole owner, and the template's apiVersion and kind without `Template` unless the clone sets them.
pub fn remediation_request_object(template: &Value, request: &RemediationRequest) -> Value {
    let mut obj = template.pointer("/spec/template").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut meta = obj.remove("metadata").and_then(|m| m.as_object().cloned()).unwrap_or_default();
    for field in ["resourceVersion", "finalizers", "uid", "selfLink"] {
        meta.remove(field);
    }
    meta.insert("name".into(), request.request.name.clone().into());
    meta.insert("namespace".into(), request.request.namespace.clone().into());
    let mut annotations = meta.remove("annotations").and_then(|a| a.as_object().cloned()).unwrap_or_default();
    annotations.insert(capi::CLONED_FROM_NAME_ANNOTATION.into(), request.template.name.clone().into());
    annotations.insert(capi::CLONED_FROM_GROUPKIND_ANNOTATION.into(), request.template.group_kind().into());
    meta.insert("annotations".into(), Value::Object(annotations));
    let mut labels = meta.remove("labels").and_then(|l| l.as_object().cloned()).unwrap_or_default();
    labels.insert(capi::CLUSTER_NAME_LABEL.into(), request.cluster_name.clone().into());
    meta.insert("labels".into(), Value::Object(labels));
    meta.insert("ownerReferences".into(), serde_json::json!([request.owner]));
    obj.insert("metadata".into(), Value::Object(meta));
    let unset = |v: Option<&Value>| v.and_then(Value::as_str).is_none_or(str::is_empty);
    if unset(obj.get("apiVersion")) {
        let api_version = template.get("apiVersion").and_then(Value::as_str).filter(|s| !s.is_empty());
        obj.insert("apiVersion".into(), api_version.unwrap_or(&request.template.api_version).into());
    }
    if unset(obj.get("kind")) {
        obj.insert("kind".into(), request.request.kind.clone().into());
    }
    Value::Object(obj)
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Skipped(r) => write!(f, "skipped ({r:?})"),
            Verdict::NotEvaluated(r) => write!(f, "not evaluated ({r:?})"),
            Verdict::Pending { next_check } => write!(f, "pending (next check in {})", go_duration(*next_check)),
            Verdict::Healthy => f.write_str("healthy"),
            Verdict::Unhealthy { reason, .. } => write!(f, "unhealthy ({})", reason.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use serde_json::json;

    use super::*;
    use crate::api::capi::{ClusterStatus, MachineNodeReference, MachineStatus};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn merge(base: &mut Value, over: &Value) {
        match (base, over) {
            (Value::Object(b), Value::Object(o)) => {
                for (k, v) in o {
                    merge(b.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
            (b, o) => *b = o.clone(),
        }
    }

    /// Node Ready False/Unknown for 5m and machine `example.com/Hardware` False for 1m are unhealthy.
    fn mhc(spec: Value) -> MachineHealthCheck {
        let mut base = json!({
            "clusterName": "c1",
            "selector": {"matchLabels": {"pool": "a"}},
            "checks": {
                "unhealthyNodeConditions": [
                    {"type": "Ready", "status": "False", "timeoutSeconds": 300},
                    {"type": "Ready", "status": "Unknown", "timeoutSeconds": 300}
                ],
                "unhealthyMachineConditions": [
                    {"type": "example.com/Hardware", "status": "False", "timeoutSeconds": 60}
                ]
            }
        });
        merge(&mut base, &spec);
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineHealthCheck",
            "metadata": {"name": "mhc", "namespace": "ns", "generation": 3},
            "spec": base
        }))
        .unwrap()
    }

    fn cond(type_: &str, status: &str, reason: &str, since: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: Time(t(since)),
            observed_generation: None,
        }
    }

    fn cluster(infra: Option<i64>, cp: Option<i64>) -> Cluster {
        let mut c = Cluster::new("c1", Default::default());
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("cluster-uid".into());
        let milestone = |type_: &str, at: Option<i64>| match at {
            Some(s) => cond(type_, "True", type_, s),
            None => cond(type_, "False", "NotYet", 0),
        };
        c.status = Some(ClusterStatus {
            conditions: Some(vec![milestone("InfrastructureReady", infra), milestone("ControlPlaneInitialized", cp)]),
            ..Default::default()
        });
        c
    }

    fn facts(infra: Option<i64>, cp: Option<i64>) -> ClusterFacts {
        ClusterFacts::of(&cluster(infra, cp))
    }

    /// Created at t(100), Node `n-<name>` linked.
    fn machine(name: &str) -> Machine {
        let mut m = Machine::new(name, Default::default());
        m.spec.cluster_name = "c1".into();
        m.metadata.namespace = Some("ns".into());
        m.metadata.uid = Some(format!("uid-{name}"));
        m.metadata.generation = Some(2);
        m.metadata.creation_timestamp = Some(Time(t(100)));
        m.metadata.labels = Some(
            [("pool", "a"), (capi::CLUSTER_NAME_LABEL, "c1")].into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
        );
        m.status = Some(MachineStatus {
            node_ref: Some(MachineNodeReference { name: format!("n-{name}") }),
            ..Default::default()
        });
        m
    }

    fn annotated(mut m: Machine, key: &str) -> Machine {
        m.metadata.annotations.get_or_insert_default().insert(key.into(), String::new());
        m
    }

    fn labelled(mut m: Machine, key: &str) -> Machine {
        m.metadata.labels.get_or_insert_default().insert(key.into(), String::new());
        m
    }

    fn with_condition(mut m: Machine, c: Condition) -> Machine {
        m.status.get_or_insert_default().conditions.get_or_insert_default().push(c);
        m
    }

    fn without_node_ref(mut m: Machine) -> Machine {
        m.status.get_or_insert_default().node_ref = None;
        m
    }

    fn being_deleted(mut m: Machine) -> Machine {
        m.metadata.deletion_timestamp = Some(Time(t(900)));
        m
    }

    fn node(ready: &str, since: i64) -> Node {
        Node {
            metadata: ObjectMeta { name: Some("n".into()), ..Default::default() },
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    reason: Some("KubeletNotReady".into()),
                    last_transition_time: Some(Time(t(since))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The Node a row finds.
    #[derive(Clone, Copy)]
    enum N {
        /// Ready True since t(0).
        Ready,
        /// Ready with this status since this time.
        Cond(&'static str, i64),
        /// No nodeRef, not looked up.
        Absent,
        /// nodeRef set, Node gone.
        Deleted,
        /// Workload cluster down.
        Down,
    }

    fn lookup<'a>(m: &Machine, n: N, node_store: &'a Node) -> NodeLookup<'a> {
        match n {
            N::Ready | N::Cond(..) => NodeLookup::observed(m, Some(node_store), true),
            N::Absent | N::Deleted => NodeLookup::observed(m, None, true),
            N::Down => NodeLookup::observed(m, None, false),
        }
    }

    fn node_for(n: N) -> Node {
        match n {
            N::Cond(status, since) => node(status, since),
            _ => node("True", 0),
        }
    }

    fn unhealthy(reason: UnhealthyReason, lines: &[&str]) -> Verdict {
        let message = if reason == UnhealthyReason::RemediateAnnotation {
            lines[0].to_string()
        } else {
            format!("Health check failed:\n{}", lines.iter().map(|l| format!("  * {l}")).collect::<Vec<_>>().join("\n"))
        };
        Verdict::Unhealthy { reason, message }
    }

    fn pending(secs: u64) -> Verdict {
        Verdict::Pending { next_check: Duration::from_secs(secs) }
    }

    const NODE_FALSE: &str =
        "Condition Ready on Node is reporting status False with reason KubeletNotReady for more than 5m0s";
    const HARDWARE: &str =
        "Condition example.com/Hardware on Machine is reporting status False with reason DiskFailed for more than 1m0s";

    /// (name, machine, its Node, spec overrides, cluster, now, verdict).
    type JudgeRow = (&'static str, Machine, N, Value, ClusterFacts, i64, Verdict);
    /// (name, spec overrides, machines with their Nodes, expectations).
    type PlanRow = (&'static str, Value, Vec<(Machine, N)>, Want);

    #[test]
    fn judge_table() {
        let ready = facts(Some(0), Some(0));
        let hw = |since| cond("example.com/Hardware", "False", "DiskFailed", since);
        #[rustfmt::skip]
        let rows: Vec<JudgeRow> = vec![
            ("healthy node", machine("m"), N::Ready, json!({}), ready, 1000, Verdict::Healthy),
            ("no node, startup timeout running", without_node_ref(machine("m")), N::Absent, json!({}), ready, 400,
                pending(301)),
            ("no node, at the timeout is not past it", without_node_ref(machine("m")), N::Absent, json!({}), ready, 700,
                pending(1)),
            ("no node, startup timeout exceeded (default 10m)", without_node_ref(machine("m")), N::Absent, json!({}),
                ready, 701, unhealthy(UnhealthyReason::NodeStartupTimeout, &["Node failed to report startup in 10m0s"])),
            ("startup counted from a later ControlPlaneInitialized", without_node_ref(machine("m")), N::Absent,
                json!({}), facts(Some(0), Some(500)), 1000, pending(101)),
            ("startup counted from the machine's InfrastructureReady",
                with_condition(without_node_ref(machine("m")), cond("InfrastructureReady", "True", "Ready", 300)),
                N::Absent, json!({}), ready, 800, pending(101)),
            ("custom startup timeout", without_node_ref(machine("m")), N::Absent,
                json!({"checks": {"nodeStartupTimeoutSeconds": 30}}), ready, 131,
                unhealthy(UnhealthyReason::NodeStartupTimeout, &["Node failed to report startup in 30s"])),
            ("startup timeout disabled", without_node_ref(machine("m")), N::Absent,
                json!({"checks": {"nodeStartupTimeoutSeconds": 0}}), ready, 99_999,
                Verdict::NotEvaluated(NotEvaluated::NoNode)),
            ("node deleted after nodeRef", machine("m"), N::Deleted, json!({}), ready, 1000,
                unhealthy(UnhealthyReason::NodeDeleted, &["Node n-m has been deleted"])),
            ("node not ready, before timeout", machine("m"), N::Cond("False", 900), json!({}), ready, 1000,
                pending(201)),
            ("node not ready, after timeout", machine("m"), N::Cond("False", 600), json!({}), ready, 1000,
                unhealthy(UnhealthyReason::UnhealthyNode, &[NODE_FALSE])),
            ("node status not the one checked", machine("m"), N::Cond("True", 999), json!({}), ready, 1000,
                Verdict::Healthy),
            ("unhealthy machine condition", with_condition(machine("m"), hw(800)), N::Ready, json!({}), ready, 1000,
                unhealthy(UnhealthyReason::UnhealthyMachine, &[HARDWARE])),
            ("machine and node unhealthy: machine reason, both messages", with_condition(machine("m"), hw(800)),
                N::Cond("False", 600), json!({}), ready, 1000,
                unhealthy(UnhealthyReason::UnhealthyMachine, &[HARDWARE, NODE_FALSE])),
            ("next check is the nearest timeout", with_condition(machine("m"), hw(980)), N::Cond("False", 900),
                json!({}), ready, 1000, pending(41)),
            ("workload cluster down: nothing judged", machine("m"), N::Down, json!({}), ready, 1000,
                Verdict::NotEvaluated(NotEvaluated::WorkloadUnreachable)),
            ("being deleted, healthy: not counted", being_deleted(machine("m")), N::Ready, json!({}), ready, 1000,
                Verdict::NotEvaluated(NotEvaluated::Deleting)),
            ("being deleted, node gone: still judged", being_deleted(machine("m")), N::Deleted, json!({}), ready, 1000,
                unhealthy(UnhealthyReason::NodeDeleted, &["Node n-m has been deleted"])),
            ("skip-remediation annotation", annotated(machine("m"), SKIP_REMEDIATION_ANNOTATION), N::Deleted,
                json!({}), ready, 1000, Verdict::Skipped(SkipReason::SkipRemediation)),
            ("paused annotation", annotated(machine("m"), capi::PAUSED_ANNOTATION), N::Deleted, json!({}), ready,
                1000, Verdict::Skipped(SkipReason::Paused)),
            ("remediate-machine annotation", annotated(machine("m"), REMEDIATE_MACHINE_ANNOTATION), N::Ready,
                json!({}), ready, 1000, unhealthy(UnhealthyReason::RemediateAnnotation,
                &["Health check failed: marked for remediation via cluster.x-k8s.io/remediate-machine annotation"])),
            ("worker before the control plane is initialized", machine("m"), N::Deleted, json!({}),
                facts(Some(0), None), 1000, Verdict::NotEvaluated(NotEvaluated::ControlPlaneNotInitialized)),
            ("control-plane machine before the control plane is initialized",
                labelled(without_node_ref(machine("m")), CONTROL_PLANE_LABEL), N::Absent, json!({}),
                facts(Some(0), None), 701,
                unhealthy(UnhealthyReason::NodeStartupTimeout, &["Node failed to report startup in 10m0s"])),
            ("cluster infrastructure not ready", machine("m"), N::Deleted, json!({}), facts(None, Some(0)), 1000,
                Verdict::NotEvaluated(NotEvaluated::ClusterInfrastructureNotReady)),
        ];
        for (name, m, n, spec, cluster, now, want) in rows {
            let hc = mhc(spec);
            let node_store = node_for(n);
            let target = Target { machine: &m, node: lookup(&m, n, &node_store) };
            assert_eq!(judge(&target, &Checks::of(&hc), &cluster, t(now)), want, "{name}");
        }
    }

    /// What a plan row expects.
    struct Want {
        outcome: Outcome,
        expected: i32,
        healthy: i32,
        allowed: i32,
        message: &'static str,
        events: &'static [&'static str],
        owner_remediated: &'static [&'static str],
        requests: &'static [&'static str],
        requeue: Option<u64>,
    }

    fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
        conditions.iter().find(|c| c.type_ == type_)
    }

    fn plan_of(spec: Value, machines: &[(Machine, N)], now: i64) -> Result<HealthCheckPlan, HealthCheckError> {
        let hc = mhc(spec);
        let c = cluster(Some(0), Some(0));
        let nodes: Vec<Node> = machines.iter().map(|(_, n)| node_for(*n)).collect();
        let targets: Vec<Target<'_>> = machines
            .iter()
            .zip(&nodes)
            .map(|((m, n), store)| Target { machine: m, node: lookup(m, *n, store) })
            .collect();
        plan_health_check(&HealthCheckObservation {
            mhc: &hc,
            cluster: &c,
            facts: ClusterFacts::of(&c),
            targets: &targets,
            now: t(now),
        })
    }

    fn healthy(name: &str) -> (Machine, N) {
        (machine(name), N::Ready)
    }

    fn gone(name: &str) -> (Machine, N) {
        (machine(name), N::Deleted)
    }

    fn fleet(healthy_count: usize, unhealthy_count: usize) -> Vec<(Machine, N)> {
        (0..healthy_count + unhealthy_count)
            .map(|i| {
                let name = format!("m{}", i + 1);
                if i < healthy_count { healthy(&name) } else { gone(&name) }
            })
            .collect()
    }

    #[test]
    fn plan_table() {
        let restricted_abs = "Remediation is not allowed, the number of not started or unhealthy machines exceeds \
                              maxUnhealthy (total: 3, unhealthy: 2, maxUnhealthy: 1)";
        let template = json!({"remediation": {"templateRef": {
            "kind": "Metal3RemediationTemplate", "name": "m3r", "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1"}}});
        let allowed = |expected, healthy, allowed| Want {
            outcome: Outcome::Allowed,
            expected,
            healthy,
            allowed,
            message: "",
            events: &[],
            owner_remediated: &[],
            requests: &[],
            requeue: None,
        };
        let le = |v: Value| json!({"remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": v}}});
        let range = |r: &str| json!({"remediation": {"triggerIf": {"unhealthyInRange": r}}});
        #[rustfmt::skip]
        let rows: Vec<PlanRow> = vec![
            ("all healthy, default 100%", json!({}), fleet(3, 0), allowed(3, 3, 3)),
            ("one unhealthy, remediated by its owner", json!({}), fleet(2, 1),
                Want { events: &["MachineMarkedUnhealthy"], owner_remediated: &["m3"], ..allowed(3, 2, 2) }),
            ("absolute limit exceeded", le(json!(1)), fleet(1, 2), Want {
                outcome: Outcome::Restricted, message: restricted_abs, events: &["RemediationRestricted"],
                ..allowed(3, 1, 0) }),
            ("percentage within (40% of 5 = 2)", le(json!("40%")), fleet(3, 2),
                Want { events: &["MachineMarkedUnhealthy"; 2], owner_remediated: &["m4", "m5"], ..allowed(5, 3, 0) }),
            ("percentage exceeded", le(json!("40%")), fleet(2, 3), Want {
                outcome: Outcome::Restricted, events: &["RemediationRestricted"],
                message: "Remediation is not allowed, the number of not started or unhealthy machines exceeds \
                          maxUnhealthy (total: 5, unhealthy: 3, maxUnhealthy: 40%)",
                ..allowed(5, 2, 0) }),
            ("a machine within its startup timeout counts against the limit, no event, requeued at its timeout", le(json!(0)),
                vec![healthy("m1"), healthy("m2"), (with_condition(without_node_ref(machine("m3")),
                    cond("InfrastructureReady", "True", "Ready", 900)), N::Absent)], Want {
                outcome: Outcome::Restricted,
                message: "Remediation is not allowed, the number of not started or unhealthy machines exceeds \
                          maxUnhealthy (total: 3, unhealthy: 0, maxUnhealthy: 0)",
                // Unlike core, looked at again when its timeout runs out.
                requeue: Some(501),
                ..allowed(3, 2, 0) }),
            ("range [1-3], none unhealthy", range("[1-3]"), fleet(3, 0), Want {
                outcome: Outcome::Restricted,
                message: "Remediation is not allowed, the number of not started or unhealthy machines does not fall \
                          within the range (total: 3, unhealthy: 0, unhealthyRange: [1-3])",
                ..allowed(3, 3, 0) }),
            ("range [1-3], two unhealthy", range("[1-3]"), fleet(1, 2),
                Want { events: &["MachineMarkedUnhealthy"; 2], owner_remediated: &["m2", "m3"], ..allowed(3, 1, 1) }),
            ("range [1-3], four unhealthy", range("[1-3]"), fleet(1, 4), Want {
                outcome: Outcome::Restricted, events: &["RemediationRestricted"],
                message: "Remediation is not allowed, the number of not started or unhealthy machines does not fall \
                          within the range (total: 5, unhealthy: 4, unhealthyRange: [1-3])",
                ..allowed(5, 1, 0) }),
            ("external remediation template", template, fleet(2, 1),
                Want { events: &["MachineMarkedUnhealthy"], requests: &["m3"], ..allowed(3, 2, 2) }),
            ("requeue at the nearest timeout", json!({}), vec![
                healthy("m1"),
                (machine("m2"), N::Cond("False", 900)),
                (with_condition(machine("m3"), cond("example.com/Hardware", "False", "DiskFailed", 980)), N::Ready)],
                Want { requeue: Some(41), ..allowed(3, 1, 1) }),
            ("skipped machines are not targets", json!({}),
                vec![healthy("m1"), healthy("m2"), (annotated(machine("m3"), SKIP_REMEDIATION_ANNOTATION), N::Deleted)],
                allowed(2, 2, 2)),
            ("a remediation in progress is the owner's", json!({}),
                vec![healthy("m1"), (with_condition(machine("m2"), cond("OwnerRemediated", "False", "Deleting", 10)),
                    N::Deleted)],
                Want { events: &["MachineMarkedUnhealthy"], ..allowed(2, 1, 1) }),
            ("an unhealthy machine being deleted gets no OwnerRemediated", json!({}),
                vec![healthy("m1"), (being_deleted(machine("m2")), N::Deleted)],
                Want { events: &["MachineMarkedUnhealthy"], ..allowed(2, 1, 1) }),
        ];
        for (name, spec, machines, want) in rows {
            let plan = plan_of(spec, &machines, 1000).unwrap();
            assert_eq!(plan.outcome, want.outcome, "{name}");
            let s = &plan.status;
            assert_eq!(
                (s.expected_machines, s.current_healthy, s.remediations_allowed, s.observed_generation),
                (Some(want.expected), Some(want.healthy), Some(want.allowed), Some(3)),
                "{name}"
            );
            let conditions = s.conditions.as_deref().unwrap();
            let ra = find(conditions, condition_type::REMEDIATION_ALLOWED).unwrap();
            let restricted = want.outcome == Outcome::Restricted;
            assert_eq!(ra.status, if restricted { "False" } else { "True" }, "{name}");
            assert_eq!(ra.reason, if restricted { reason::TOO_MANY_UNHEALTHY } else { reason::REMEDIATION_ALLOWED });
            assert_eq!(ra.message, want.message, "{name}");
            assert_eq!(ra.observed_generation, Some(3), "{name}");
            let paused = find(conditions, condition_type::PAUSED).unwrap();
            assert_eq!((paused.status.as_str(), paused.reason.as_str()), ("False", reason::NOT_PAUSED), "{name}");
            let mut events: Vec<&str> = plan.events.iter().map(|e| e.reason).collect();
            events.extend(plan.machines.iter().flat_map(|m| m.events.iter().map(|e| e.reason)));
            assert_eq!(events, want.events, "{name}");
            let owner: Vec<&str> = plan
                .machines
                .iter()
                .filter(|m| find(&m.conditions, condition_type::OWNER_REMEDIATED).is_some())
                .map(|m| m.name.as_str())
                .collect();
            assert_eq!(owner, want.owner_remediated, "{name}");
            let requests: Vec<&str> = plan
                .machines
                .iter()
                .filter_map(|m| m.create_remediation_request.as_ref())
                .map(|r| r.request.name.as_str())
                .collect();
            assert_eq!(requests, want.requests, "{name}");
            assert_eq!(plan.requeue_after, want.requeue.map(Duration::from_secs), "{name}");
            // HealthCheckSucceeded is written for every healthy and unhealthy target, restricted or not.
            for (update, (_, _)) in plan.machines.iter().zip(&machines) {
                let hcs = find(&update.conditions, condition_type::HEALTH_CHECK_SUCCEEDED);
                match &update.verdict {
                    Verdict::Healthy => assert_eq!(hcs.map(|c| c.status.as_str()), Some("True"), "{name}"),
                    Verdict::Unhealthy { reason, .. } => {
                        let hcs = hcs.unwrap();
                        assert_eq!((hcs.status.as_str(), hcs.reason.as_str()), ("False", reason.as_str()), "{name}");
                        assert_eq!(hcs.observed_generation, Some(2), "{name}");
                    }
                    _ => assert!(update.conditions.is_empty(), "{name}"),
                }
            }
        }
    }

    #[test]
    fn targets_are_sorted_and_the_mhc_joins_its_cluster() {
        let plan = plan_of(json!({}), &[healthy("m2"), healthy("m10"), healthy("m1")], 1000).unwrap();
        assert_eq!(plan.status.targets, Some(vec!["m1".into(), "m10".into(), "m2".into()]));
        let patch = plan.membership_patch.unwrap();
        assert_eq!(patch["metadata"]["labels"][capi::CLUSTER_NAME_LABEL], "c1");
        assert_eq!(patch["metadata"]["ownerReferences"][0]["uid"], "cluster-uid");
    }

    #[test]
    fn owner_remediation_and_event_texts() {
        let plan = plan_of(json!({}), &fleet(1, 1), 1000).unwrap();
        let m2 = &plan.machines[1];
        let owner = find(&m2.conditions, condition_type::OWNER_REMEDIATED).unwrap();
        assert_eq!(
            (owner.status.as_str(), owner.reason.as_str(), owner.message.as_str()),
            ("False", "WaitingForRemediation", "Waiting for remediation")
        );
        assert_eq!(
            m2.events,
            vec![EventSpec::normal("MachineMarkedUnhealthy", "Machine ns/m2 has been marked as unhealthy by ns/mhc")]
        );
        let restricted = plan_of(le_one(), &fleet(1, 2), 1000).unwrap();
        assert_eq!(restricted.events[0].severity, super::super::status::Severity::Warning);
    }

    fn le_one() -> Value {
        json!({"remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": 1}}})
    }

    #[test]
    fn unhealthy_condition_keeps_its_transition_time() {
        let since = cond(condition_type::HEALTH_CHECK_SUCCEEDED, "False", reason::NODE_DELETED, 500);
        let plan = plan_of(json!({}), &[(with_condition(machine("m1"), since), N::Deleted)], 1000).unwrap();
        let hcs = find(&plan.machines[0].conditions, condition_type::HEALTH_CHECK_SUCCEEDED).unwrap();
        assert_eq!(hcs.last_transition_time, Time(t(500)));
        assert_eq!(hcs.message, "Health check failed:\n  * Node n-m1 has been deleted");
    }

    #[test]
    fn paused_writes_only_the_paused_condition() {
        let mut hc = mhc(json!({}));
        hc.metadata.annotations = Some([(capi::PAUSED_ANNOTATION.to_string(), String::new())].into());
        let mut c = cluster(Some(0), Some(0));
        let m = machine("m1");
        let targets = [Target { machine: &m, node: NodeLookup::Deleted }];
        let obs = |c: &Cluster, hc: &MachineHealthCheck| {
            plan_health_check(&HealthCheckObservation {
                mhc: hc,
                cluster: c,
                facts: ClusterFacts::of(c),
                targets: &targets,
                now: t(1000),
            })
            .unwrap()
        };
        let plan = obs(&c, &hc);
        assert_eq!(plan.outcome, Outcome::Paused);
        let paused = find(plan.status.conditions.as_deref().unwrap(), condition_type::PAUSED).unwrap();
        assert_eq!(
            (paused.status.as_str(), paused.message.as_str()),
            ("True", "MachineHealthCheck has the cluster.x-k8s.io/paused annotation")
        );
        assert!(plan.machines.is_empty() && plan.membership_patch.is_none() && plan.status.expected_machines.is_none());
        hc.metadata.annotations = None;
        c.spec.paused = Some(true);
        let plan = obs(&c, &hc);
        let paused = find(plan.status.conditions.as_deref().unwrap(), condition_type::PAUSED).unwrap();
        assert_eq!(paused.message, "Cluster spec.paused is set to true");
    }

    #[test]
    fn workload_down_writes_nothing() {
        let plan = plan_of(json!({}), &[healthy("m1"), (machine("m2"), N::Down)], 1000).unwrap();
        assert_eq!(plan.outcome, Outcome::WorkloadUnreachable);
        assert!(plan.machines.iter().all(|m| m.conditions.is_empty() && m.events.is_empty()));
        assert_eq!(plan.status.expected_machines, None);
        assert_eq!(plan.requeue_after, None);
    }

    #[test]
    fn triggers_parse_as_core_validates_them() {
        let trigger = |v: Value| {
            let hc = mhc(json!({"remediation": {"triggerIf": v}}));
            Remediation::of(&hc).and_then(|r| r.trigger_if.trigger())
        };
        assert_eq!(trigger(json!({})), Ok(Trigger::UnhealthyLessThanOrEqualTo(IntOrString::String("100%".into()))));
        assert_eq!(
            trigger(json!({"unhealthyInRange": "[2-5]", "unhealthyLessThanOrEqualTo": 1})),
            Ok(Trigger::UnhealthyInRange { min: 2, max: 5, text: "[2-5]".into() })
        );
        for bad in ["[5-2]", "2-5", "[a-5]", "[2]"] {
            assert_eq!(trigger(json!({"unhealthyInRange": bad})), Err(HealthCheckError::UnhealthyInRange(bad.into())));
        }
        let bad_percent = json!({"remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": "40"}}});
        assert_eq!(
            plan_of(bad_percent, &fleet(1, 0), 1000).unwrap_err(),
            HealthCheckError::UnhealthyLessThanOrEqualTo("40".into())
        );
        assert!(matches!(
            plan_of(json!({"remediation": {"triggerIf": 3}}), &fleet(1, 0), 1000),
            Err(HealthCheckError::Remediation(_))
        ));
    }

    #[test]
    fn external_remediation_request_and_clone() {
        let spec = json!({"remediation": {"templateRef": {
            "kind": "Metal3RemediationTemplate", "name": "m3r", "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1"}}});
        let plan = plan_of(spec, &fleet(1, 1), 1000).unwrap();
        let healthy = &plan.machines[0];
        assert_eq!(
            healthy.delete_remediation_request,
            Some(RemediationRequestRef {
                api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
                kind: "Metal3Remediation".into(),
                namespace: "ns".into(),
                name: "m1".into()
            })
        );
        let unhealthy = &plan.machines[1];
        assert!(find(&unhealthy.conditions, condition_type::OWNER_REMEDIATED).is_none());
        let request = unhealthy.create_remediation_request.as_ref().unwrap();
        assert_eq!((request.request.kind.as_str(), request.request.name.as_str()), ("Metal3Remediation", "m2"));
        assert_eq!(
            (request.on_created.type_.as_str(), request.on_created.status.as_str(), request.on_created.reason.as_str()),
            ("ExternallyRemediated", "False", "WaitingForRemediation")
        );
        let template = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "Metal3RemediationTemplate",
            "metadata": {"name": "m3r", "namespace": "ns"},
            "spec": {"template": {
                "metadata": {"labels": {"team": "x"}, "uid": "stale"},
                "spec": {"strategy": {"type": "Reboot", "retryLimit": 1}}
            }}
        });
        let obj = remediation_request_object(&template, request);
        assert_eq!(
            obj,
            json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "Metal3Remediation",
                "metadata": {
                    "name": "m2",
                    "namespace": "ns",
                    "labels": {"team": "x", "cluster.x-k8s.io/cluster-name": "c1"},
                    "annotations": {
                        "cluster.x-k8s.io/cloned-from-name": "m3r",
                        "cluster.x-k8s.io/cloned-from-groupkind": "Metal3RemediationTemplate.infrastructure.cluster.x-k8s.io"
                    },
                    "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m2", "uid": "uid-m2"}]
                },
                "spec": {"strategy": {"type": "Reboot", "retryLimit": 1}}
            })
        );
        let m2 = machine("m2");
        let failed = remediation_failure_condition(&m2, request, RemediationFailure::TemplateNotFound, t(1000));
        assert_eq!(
            (failed.reason.as_str(), failed.message.as_str()),
            ("RemediationTemplateNotFound", "Error retrieving remediation template Metal3RemediationTemplate ns/m3r")
        );
        let failed = remediation_failure_condition(&m2, request, RemediationFailure::RequestCreationFailed, t(1000));
        assert_eq!(failed.message, "Please check controller logs for errors");
    }

    #[test]
    fn selection_and_go_durations() {
        let hc = mhc(json!({}));
        assert!(selects(&hc, &machine("m1")));
        let mut other_pool = machine("m1");
        other_pool.metadata.labels.as_mut().unwrap().insert("pool".into(), "b".into());
        assert!(!selects(&hc, &other_pool));
        let mut other_cluster = machine("m1");
        other_cluster.metadata.labels.as_mut().unwrap().insert(capi::CLUSTER_NAME_LABEL.into(), "c2".into());
        assert!(!selects(&hc, &other_cluster));
        for (secs, text) in [(0, "0s"), (30, "30s"), (90, "1m30s"), (600, "10m0s"), (3600, "1h0m0s"), (3661, "1h1m1s")]
        {
            assert_eq!(go_duration(Duration::from_secs(secs)), text);
        }
    }

    #[test]
    fn cluster_facts_fall_back_on_initialization_flags() {
        let mut c = Cluster::new("c1", Default::default());
        c.status = Some(ClusterStatus {
            initialization: Some(capi::ClusterInitializationStatus {
                infrastructure_provisioned: Some(true),
                control_plane_initialized: None,
            }),
            ..Default::default()
        });
        assert_eq!(
            ClusterFacts::of(&c),
            ClusterFacts {
                infrastructure_ready: Milestone::Reached { since: None },
                control_plane_initialized: Milestone::NotReached
            }
        );
        assert_eq!(facts(Some(5), None).infrastructure_ready, Milestone::Reached { since: Some(t(5)) });
    }
}
