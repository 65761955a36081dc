//! Machine preservation (`docs/machine-lifecycle.md` "Preservation"): given a Machine, its Node, the preserve
//! timeout and `now`, which marks to set or remove. MCM's semantics:
//!
//! - the preserve value is `node.machine.sapcloud.io/preserve` on the Node, else on the Machine (the Node's wins
//!   once it was applied: the Machine then records it in `last-applied-node-preserve-value` and loses its own);
//! - `now` preserves at once, `when-failed` and `auto-preserved` only while the machine is Failed; `false`, an
//!   empty value or a removed annotation stop a preservation;
//! - preserving sets `currentStatus.preserveExpiryTime` (now + timeout) first, then on the Node the
//!   cluster-autoscaler's scale-down-disabled annotation (with MCM's `-by-mcm` marker) and the `Preserved`
//!   condition; a Failed machine's Node also gets the `node.machine.sapcloud.io/preserved` NoSchedule taint and is
//!   drained (DaemonSet pods stay); a machine back to Running loses the taint;
//! - stopping sets the condition False ("Preservation stopped."), removes the autoscaler annotation (when MCM set
//!   it) and the taint, and clears the expiry last, so a stop cut short is finished by the next pass; at the
//!   expiry (and for `auto-preserved` once the machine is no longer Failed) the preserve annotations go too, so
//!   the machine is not preserved again.
//!
//! The MachineSet side (auto-preservation, keeping preserved Failed machines) is [`super::machine_set`].

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value, json};

use super::clock;
use super::config::{Effective, MachineConfig};
use crate::api::mcm::names::{
    LAST_APPLIED_NODE_PRESERVE, PRESERVE, PRESERVE_AUTO, PRESERVED_CONDITION, PRESERVED_TAINT, SCALE_DOWN_DISABLED,
    SCALE_DOWN_DISABLED_BY_MCM,
};
use crate::api::mcm::{Machine, MachinePhase};
use crate::drain::{DrainOptions, should_force};

/// `preserve=now`: preserve at once, whatever the phase.
pub const NOW: &str = "now";
/// `preserve=when-failed`: preserve while the machine is Failed.
pub const WHEN_FAILED: &str = "when-failed";
/// `preserve=false`: never auto-preserve; stops a preservation.
pub const FALSE: &str = "false";
/// The values MCM acts on; any other value is ignored (on a Node: the machine is left alone).
pub const VALUES: [&str; 4] = [NOW, WHEN_FAILED, PRESERVE_AUTO, FALSE];

/// MCM's texts of the `Preserved` condition.
pub mod text {
    /// Reason: auto-preserved.
    pub const BY_MCM: &str = "Preserved by MCM.";
    /// Reason: preserved through the annotation.
    pub const BY_USER: &str = "Preserved by user.";
    /// Reason: the preservation stopped.
    pub const STOPPED: &str = "Preservation stopped.";
    /// Message prefix: the Failed machine's Node was drained.
    pub const DRAINED: &str = "Preserved node drained successfully.";
    /// Message prefix: the drain of the Failed machine's Node failed.
    pub const NOT_DRAINED: &str = "Preserved node could not be drained.";
    /// Message: until when.
    pub const UNTIL: &str = "Machine preserved until";
}

/// The Machine label that forces the drain of a preserved Node (MCM's `force-drain=True`).
pub const FORCE_DRAIN_LABEL: &str = "force-drain";

/// The machine's Node, as far as preservation cares.
#[derive(Clone, Copy, Debug)]
pub enum NodeView<'a> {
    /// The machine has no `node` label (yet): only the Machine is marked.
    NoNode,
    /// The labelled Node is not there: the Machine's own value applies, only the Machine is marked.
    Missing,
    /// The Node.
    Found(&'a Node),
}

/// What happens to `currentStatus.preserveExpiryTime`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Expiry {
    /// Left as it is.
    #[default]
    Keep,
    /// Set (preservation starts): written before anything else.
    Set(Timestamp),
    /// Cleared (preservation stopped): written after everything else.
    Clear,
}

/// What preservation does to a machine in this pass, in this order: the expiry (when set), the Node's metadata,
/// the drain, the Node's condition (after the drain, from its result: [`Plan::condition_after`]), the Machine's
/// annotations, the expiry (when cleared).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The expiry.
    pub expiry: Expiry,
    /// A JSON merge patch of the Node (annotations, `spec.taints` whole), to be guarded by its resourceVersion.
    pub node_patch: Option<Value>,
    /// Drain the Node (a preserved Failed machine's, not drained yet).
    pub drain: Option<DrainOptions>,
    /// The `Preserved` condition to write when there is no drain (with a drain: [`Plan::condition_after`]).
    pub condition: Option<NodeCondition>,
    /// A JSON merge patch of the Machine's annotations.
    pub machine_patch: Option<Value>,
    /// While preserved: the expiry, to look again then.
    pub wake_at: Option<Timestamp>,
    /// The inputs of the condition after a drain.
    after_drain: Option<ConditionInputs>,
}

#[derive(Clone, Debug, PartialEq)]
struct ConditionInputs {
    existing: Option<NodeCondition>,
    phase: Option<MachinePhase>,
    auto: bool,
    until: Timestamp,
    now: Timestamp,
}

impl Plan {
    /// Whether it does nothing.
    pub fn is_empty(&self) -> bool {
        self.expiry == Expiry::Keep
            && self.node_patch.is_none()
            && self.drain.is_none()
            && self.condition.is_none()
            && self.machine_patch.is_none()
    }

    /// The `Preserved` condition after the drain: `Err` carries why the drain failed.
    pub fn condition_after(&self, drained: &Result<(), String>) -> Option<NodeCondition> {
        let i = self.after_drain.as_ref()?;
        preserved_condition(i.existing.as_ref(), i.phase.as_ref(), i.auto, i.until, Some(drained.is_ok()), i.now)
    }
}

fn annotation<'a>(meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn phase(machine: &Machine) -> Option<&MachinePhase> {
    machine.status.as_ref()?.current_status.as_ref()?.phase.as_ref()
}

/// `currentStatus.preserveExpiryTime`.
pub fn expiry(machine: &Machine) -> Option<Timestamp> {
    Some(machine.status.as_ref()?.current_status.as_ref()?.preserve_expiry_time.as_ref()?.0)
}

/// The Node's `Preserved` condition.
pub fn condition(node: &Node) -> Option<&NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == PRESERVED_CONDITION)
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default()
}

/// The preserve value that applies (MCM's rule): with no Node found, the Machine's; while the Node has none and
/// none was applied from it, the Machine's; otherwise the Node's, even when empty or removed.
fn effective_value<'a>(machine_value: Option<&'a str>, node_value: Option<&'a str>, last_applied: &str) -> &'a str {
    match node_value.unwrap_or("") {
        "" if last_applied.is_empty() => machine_value.unwrap_or(""),
        value => value,
    }
}

/// Preservation's decision for `machine` and its Node at `now`.
pub fn decide(
    machine: &Machine,
    node: NodeView<'_>,
    effective: &Effective,
    config: &MachineConfig,
    now: Timestamp,
) -> Plan {
    let meta = &machine.metadata;
    // An invalid value on the Machine counts as none; one on the Node leaves the machine alone (MCM).
    let machine_value = annotation(meta, PRESERVE).filter(|v| VALUES.contains(v));
    let last_applied = annotation(meta, LAST_APPLIED_NODE_PRESERVE).unwrap_or("");
    let node_value = match node {
        NodeView::Found(n) => annotation(&n.metadata, PRESERVE),
        _ => None,
    };
    if node_value.is_some_and(|v| !VALUES.contains(&v)) {
        return Plan::default();
    }
    let expiry = expiry(machine);
    if expiry.is_none() && machine_value.is_none() && node_value.is_none() && last_applied.is_empty() {
        return Plan::default();
    }
    let value = match node {
        NodeView::Found(_) => effective_value(machine_value, node_value, last_applied),
        _ => machine_value.unwrap_or(""),
    };
    let failed = phase(machine) == Some(&MachinePhase::Failed);
    let expired = expiry.is_some_and(|t| t <= now);
    // (preserve, remove the preserve annotations when stopping)
    let (preserve, remove) = match value {
        NOW => (!expired, expired),
        WHEN_FAILED => (failed && !expired, expired),
        PRESERVE_AUTO => (failed && !expired, !failed || expired),
        _ => (false, false),
    };
    let mut plan = if preserve {
        preserving(machine, node, expiry, value == PRESERVE_AUTO, effective, config, now)
    } else {
        stopping(node, expiry, remove, now)
    };
    // The Node's value, once applied, replaces the Machine's (unless the stop already removed both).
    let stop_removes = !preserve && remove && expiry.is_some();
    let node_in_control = node_value.is_some() || !last_applied.is_empty();
    let unchanged = node_value.unwrap_or("") == last_applied && annotation(meta, PRESERVE).is_none();
    if !stop_removes && node_in_control && !unchanged && matches!(node, NodeView::Found(_)) {
        let applied = node_value.filter(|v| !v.is_empty());
        plan.machine_patch =
            Some(json!({"metadata": {"annotations": {PRESERVE: null, LAST_APPLIED_NODE_PRESERVE: applied}}}));
    }
    plan
}

fn preserving(
    machine: &Machine,
    node: NodeView<'_>,
    expiry: Option<Timestamp>,
    auto: bool,
    effective: &Effective,
    config: &MachineConfig,
    now: Timestamp,
) -> Plan {
    let until = expiry.unwrap_or_else(|| clock::plus(now, effective.preserve_timeout));
    let mut plan = Plan {
        expiry: if expiry.is_none() { Expiry::Set(until) } else { Expiry::Keep },
        wake_at: Some(until),
        ..Plan::default()
    };
    let NodeView::Found(node) = node else { return plan };
    let phase = phase(machine);
    let failed = phase == Some(&MachinePhase::Failed);
    let existing = condition(node);
    let drain = failed && !existing.and_then(|c| c.message.as_deref()).is_some_and(|m| m.contains(text::DRAINED));

    let mut patch = Map::new();
    if annotation(&node.metadata, SCALE_DOWN_DISABLED) != Some("true") {
        patch.insert(
            "metadata".into(),
            json!({"annotations": {SCALE_DOWN_DISABLED: "true", SCALE_DOWN_DISABLED_BY_MCM: "true"}}),
        );
    }
    let mut taints = taints(node);
    let tainted = taints.iter().any(|t| t.key == PRESERVED_TAINT);
    if failed && !tainted {
        taints.push(Taint {
            key: PRESERVED_TAINT.to_string(),
            effect: "NoSchedule".to_string(),
            time_added: Some(Time(now)),
            value: None,
        });
        patch.insert("spec".into(), json!({"taints": taints}));
    } else if phase == Some(&MachinePhase::Running) && tainted {
        taints.retain(|t| t.key != PRESERVED_TAINT);
        patch.insert("spec".into(), json!({"taints": taints}));
    }
    plan.node_patch = (!patch.is_empty()).then_some(Value::Object(patch));

    if drain {
        plan.drain = Some(drain_options(machine, node, effective, config, now));
        plan.after_drain =
            Some(ConditionInputs { existing: existing.cloned(), phase: phase.cloned(), auto, until, now });
    } else {
        plan.condition = preserved_condition(existing, phase, auto, until, None, now);
    }
    plan
}

fn stopping(node: NodeView<'_>, expiry: Option<Timestamp>, remove: bool, now: Timestamp) -> Plan {
    // Without an expiry the machine is not preserved: nothing to stop (MCM).
    if expiry.is_none() {
        return Plan::default();
    }
    let mut plan = Plan { expiry: Expiry::Clear, ..Plan::default() };
    if remove {
        plan.machine_patch =
            Some(json!({"metadata": {"annotations": {PRESERVE: null, LAST_APPLIED_NODE_PRESERVE: null}}}));
    }
    let NodeView::Found(node) = node else { return plan };
    let existing = condition(node);
    if existing.is_none_or(|c| c.status != "False" || c.reason.as_deref() != Some(text::STOPPED)) {
        plan.condition = Some(NodeCondition {
            type_: PRESERVED_CONDITION.to_string(),
            status: "False".to_string(),
            reason: Some(text::STOPPED.to_string()),
            message: Some(String::new()),
            last_transition_time: Some(Time(now)),
            last_heartbeat_time: None,
        });
    }
    let mut annotations = Map::new();
    if annotation(&node.metadata, SCALE_DOWN_DISABLED_BY_MCM) == Some("true") {
        annotations.insert(SCALE_DOWN_DISABLED.into(), Value::Null);
        annotations.insert(SCALE_DOWN_DISABLED_BY_MCM.into(), Value::Null);
    }
    if remove && annotation(&node.metadata, PRESERVE).is_some() {
        annotations.insert(PRESERVE.into(), Value::Null);
    }
    let mut patch = Map::new();
    if !annotations.is_empty() {
        patch.insert("metadata".into(), json!({ "annotations": annotations }));
    }
    let mut taints = taints(node);
    if taints.iter().any(|t| t.key == PRESERVED_TAINT) {
        taints.retain(|t| t.key != PRESERVED_TAINT);
        patch.insert("spec".into(), json!({"taints": taints}));
    }
    plan.node_patch = (!patch.is_empty()).then_some(Value::Object(patch));
    plan
}

/// The `Preserved` condition of a preserved machine's Node (`None`: the existing one is right). A Failed machine's
/// is True once its Node was drained (`drained`: the drain just run; `None`: no drain this pass), False while the
/// drain fails; any other phase's is True.
pub fn preserved_condition(
    existing: Option<&NodeCondition>,
    phase: Option<&MachinePhase>,
    auto: bool,
    until: Timestamp,
    drained: Option<bool>,
    now: Timestamp,
) -> Option<NodeCondition> {
    let reason = if auto { text::BY_MCM } else { text::BY_USER };
    let message = existing.and_then(|c| c.message.clone()).unwrap_or_default();
    let (status, message) = match (phase, drained) {
        (Some(MachinePhase::Failed), Some(true) | None) if !message.contains(text::DRAINED) => {
            ("True", format!("{} {} {}.", text::DRAINED, text::UNTIL, until))
        }
        (Some(MachinePhase::Failed), Some(false)) if !message.contains(text::NOT_DRAINED) => {
            ("False", format!("{} {} {}.", text::NOT_DRAINED, text::UNTIL, until))
        }
        (Some(MachinePhase::Failed), _) => {
            (existing.map_or("False", |c| if c.status == "True" { "True" } else { "False" }), message)
        }
        _ if existing.is_some_and(|c| c.status == "True") => ("True", message),
        _ => ("True", format!("{} {}.", text::UNTIL, until)),
    };
    let unchanged = existing.is_some_and(|c| {
        c.status == status && c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(message.as_str())
    });
    if unchanged {
        return None;
    }
    let transition = match existing {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    Some(NodeCondition {
        type_: PRESERVED_CONDITION.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_transition_time: transition,
        last_heartbeat_time: None,
    })
}

/// How a preserved Failed machine's Node is drained (MCM): the machine's drain timeout and eviction retries
/// (`min(retries, timeout / interval)`); forced (1 minute, one attempt) with the `force-drain=True` label, once
/// the drain timeout has passed since `currentStatus.lastUpdateTime` (when the machine failed), or when the Node
/// has been NotReady or read-only for 5 minutes.
pub fn drain_options(
    machine: &Machine,
    node: &Node,
    effective: &Effective,
    config: &MachineConfig,
    now: Timestamp,
) -> DrainOptions {
    let since_failure = machine
        .status
        .as_ref()
        .and_then(|s| s.current_status.as_ref())
        .and_then(|c| c.last_update_time.as_ref())
        .map(|t| clock::between(t.0, now));
    let labelled =
        machine.metadata.labels.as_ref().and_then(|l| l.get(FORCE_DRAIN_LABEL)).map(String::as_str) == Some("True");
    let conditions = machine.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let unhealthy = should_force(None, None, effective.drain_timeout, conditions, now).is_some();
    let force = labelled || unhealthy || since_failure.is_some_and(|d| d > effective.drain_timeout);
    let node = node.metadata.name.clone().unwrap_or_default();
    super::config::drain_options(node, force, effective.drain_timeout, effective, config)
}

#[cfg(test)]
mod tests;
