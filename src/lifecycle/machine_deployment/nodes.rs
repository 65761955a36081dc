//! What a rollout does to Nodes (`docs/machine-lifecycle.md` "Side effects during a rollout"):
//! - nodes of old sets get the taint `deployment.machine.sapcloud.io/prefer-no-schedule=True:PreferNoSchedule`,
//!   so pods drift to new nodes; the old set is annotated with the same key once that is decided;
//! - while old sets still have machines, every node of the deployment gets
//!   `cluster-autoscaler.kubernetes.io/scale-down-disabled=true` plus the `-by-mcm` marker, so the autoscaler
//!   does not remove nodes under a rollout;
//! - on completion the annotations go again where the marker says MCM put them and the machine is not
//!   preserved (preservation sets them too), and the new set's nodes lose the taint (a rollback can leave it).
//!
//! MCM re-applies taints and annotations to every node on every pass and taints an old set's nodes only once
//! (later replacements in an old set stay untainted). We read the nodes and plan only the missing changes, for
//! every node of an old set, and never mark a node a user protected themselves.

use k8s_openapi::api::core::v1::Node;

use crate::api::mcm::names::{
    CANDIDATE_FOR_UPDATE, CRITICAL_COMPONENTS_NOT_READY_TAINT, IN_PLACE_CONDITION, MARKED_FOR_DELETION_TIME,
    PRIORITY_ANNOTATION, SELECTED_FOR_UPDATE, UPDATE_RESULT, UPDATE_SUCCESSFUL, in_place_reason,
};
use crate::api::mcm::names::{NODE_LABEL, PREFER_NO_SCHEDULE, SCALE_DOWN_DISABLED, SCALE_DOWN_DISABLED_BY_MCM};
use crate::api::mcm::{Machine, MachinePhase};
use crate::lifecycle::object_meta::{annotation, label};

/// What the rollout needs to know of a Node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The Node name.
    pub name: String,
    /// It has the PreferNoSchedule taint of [`PREFER_NO_SCHEDULE`].
    pub prefer_no_schedule: bool,
    /// It has `scale-down-disabled=true`.
    pub scale_down_disabled: bool,
    /// It has the `scale-down-disabled-by-mcm` marker.
    pub scale_down_disabled_by_mcm: bool,
    /// The in-place update's labels and condition on it.
    pub in_place: InPlaceNode,
}

/// What an in-place update has put on a Node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InPlaceNode {
    /// Labelled `candidate-for-update`.
    pub candidate: bool,
    /// Labelled `selected-for-update`.
    pub selected: bool,
    /// The `update-result` label's value.
    pub result: Option<String>,
    /// The reason of its `InPlaceUpdate` condition.
    pub reason: Option<String>,
    /// `spec.unschedulable` (cordoned).
    pub cordoned: bool,
    /// It has the `critical-components-not-ready` taint.
    pub critical_taint: bool,
}

impl InPlaceNode {
    /// Whether the node agent reported success and the machine controller recorded it.
    pub fn updated(&self) -> bool {
        self.reason.as_deref() == Some(in_place_reason::SUCCESSFUL) && self.result.as_deref() == Some(UPDATE_SUCCESSFUL)
    }

    /// Whether any in-place label is on the Node.
    pub fn labelled(&self) -> bool {
        self.candidate || self.selected || self.result.is_some()
    }
}

impl NodeFacts {
    /// Reads the facts from a Node.
    pub fn from_node(node: &Node) -> Self {
        let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
        NodeFacts {
            name: node.metadata.name.clone().unwrap_or_default(),
            prefer_no_schedule: taints
                .into_iter()
                .flatten()
                .any(|t| t.key == PREFER_NO_SCHEDULE && t.effect == "PreferNoSchedule"),
            scale_down_disabled: annotation(&node.metadata, SCALE_DOWN_DISABLED) == Some("true"),
            scale_down_disabled_by_mcm: annotation(&node.metadata, SCALE_DOWN_DISABLED_BY_MCM).is_some(),
            in_place: InPlaceNode {
                candidate: label(&node.metadata, CANDIDATE_FOR_UPDATE).is_some(),
                selected: label(&node.metadata, SELECTED_FOR_UPDATE).is_some(),
                result: label(&node.metadata, UPDATE_RESULT).map(str::to_string),
                reason: node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == IN_PLACE_CONDITION))
                    .and_then(|c| c.reason.clone()),
                cordoned: node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true),
                critical_taint: taints.into_iter().flatten().any(|t| t.key == CRITICAL_COMPONENTS_NOT_READY_TAINT),
            },
        }
    }
}

/// One machine of the deployment, with its Node, as the rollout and the autoscaler contract see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeploymentMachine {
    /// The machine name.
    pub name: String,
    /// The MachineSet that controls it.
    pub set: Option<String>,
    /// Its Node (absent while it has none, or when the Node was not found).
    pub node: Option<NodeFacts>,
    /// The phase.
    pub phase: Option<MachinePhase>,
    /// A deletion timestamp is set.
    pub deleting: bool,
    /// `status.currentStatus.preserveExpiryTime` is set.
    pub preserve_expiry_set: bool,
    /// The `machinepriority.machine.sapcloud.io` annotation.
    pub priority: Option<String>,
    /// The `machine.sapcloud.io/marked-for-deletion-time` annotation.
    pub marked_for_deletion_time: Option<String>,
    /// Labelled `update-result=successful` (moved to the new set by an in-place update, not yet counted there).
    pub moved_in_place: bool,
    /// The reason of the `InPlaceUpdate` condition copied from its Node.
    pub in_place_reason: Option<String>,
}

impl DeploymentMachine {
    /// Extracts the facts from a Machine and the Node named by its `node` label (pass `None` if not found).
    pub fn from_machine(machine: &Machine, node: Option<&Node>) -> Self {
        let meta = &machine.metadata;
        let current = machine.status.as_ref().and_then(|s| s.current_status.as_ref());
        let node_name = label(meta, NODE_LABEL).filter(|n| !n.is_empty());
        DeploymentMachine {
            name: meta.name.clone().unwrap_or_default(),
            set: meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true) && o.kind == "MachineSet")
                .map(|o| o.name.clone()),
            node: node_name.and(node).map(NodeFacts::from_node),
            phase: current.and_then(|c| c.phase.clone()),
            deleting: meta.deletion_timestamp.is_some(),
            preserve_expiry_set: current.is_some_and(|c| c.preserve_expiry_time.is_some()),
            priority: annotation(meta, PRIORITY_ANNOTATION).map(str::to_string),
            marked_for_deletion_time: annotation(meta, MARKED_FOR_DELETION_TIME).map(str::to_string),
            moved_in_place: label(meta, UPDATE_RESULT) == Some(UPDATE_SUCCESSFUL),
            in_place_reason: match machine.status.as_ref().and_then(|s| s.conditions.as_ref()) {
                Some(copied) => copied.iter().find(|c| c.type_ == IN_PLACE_CONDITION).and_then(|c| c.reason.clone()),
                // A CAPI Machine's hub view has no copy of its Node's conditions: the Node's own.
                None => node_name.and(node).and_then(|n| NodeFacts::from_node(n).in_place.reason),
            },
        }
    }
}

/// Node changes planned by one reconcile; each list names Nodes, without duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeEffects {
    /// Add the taint `deployment.machine.sapcloud.io/prefer-no-schedule=True:PreferNoSchedule`.
    pub add_prefer_no_schedule: Vec<String>,
    /// Remove that taint.
    pub remove_prefer_no_schedule: Vec<String>,
    /// Add `cluster-autoscaler.kubernetes.io/scale-down-disabled=true` and the `-by-mcm` marker.
    pub disable_scale_down: Vec<String>,
    /// Remove both annotations.
    pub enable_scale_down: Vec<String>,
    /// Label `candidate-for-update=true` (the machine is in an old set of an in-place rollout).
    pub label_candidate: Vec<String>,
    /// Label `selected-for-update=true` (Auto orchestration picked it).
    pub label_selected: Vec<String>,
    /// Done with its in-place update: remove the three labels and the failure reason, uncordon, remove the
    /// PreferNoSchedule taint and add `critical-components-not-ready:NoSchedule` (Gardener removes it once its
    /// components run again).
    pub in_place_done: Vec<String>,
    /// Remove `candidate-for-update` (the deployment no longer updates in place).
    pub unlabel_candidate: Vec<String>,
}

impl NodeEffects {
    /// Whether nothing is to be done.
    pub fn is_empty(&self) -> bool {
        self.add_prefer_no_schedule.is_empty()
            && self.remove_prefer_no_schedule.is_empty()
            && self.disable_scale_down.is_empty()
            && self.enable_scale_down.is_empty()
            && self.label_candidate.is_empty()
            && self.label_selected.is_empty()
            && self.in_place_done.is_empty()
            && self.unlabel_candidate.is_empty()
    }
}

pub(crate) fn push_unique(list: &mut Vec<String>, name: &str) {
    if !list.iter().any(|n| n == name) {
        list.push(name.to_string());
    }
}

fn nodes_of<'a>(machines: &'a [DeploymentMachine], sets: &'a [&'a str]) -> impl Iterator<Item = &'a NodeFacts> + 'a {
    machines.iter().filter(move |m| m.set.as_deref().is_some_and(|s| sets.contains(&s))).filter_map(|m| m.node.as_ref())
}

/// Taints the nodes of `old_sets` that lack the PreferNoSchedule taint.
pub fn taint_old_nodes(effects: &mut NodeEffects, old_sets: &[&str], machines: &[DeploymentMachine]) {
    for node in nodes_of(machines, old_sets).filter(|n| !n.prefer_no_schedule) {
        push_unique(&mut effects.add_prefer_no_schedule, &node.name);
    }
}

/// Removes the PreferNoSchedule taint from the nodes of `sets` that have it.
pub fn untaint_nodes(effects: &mut NodeEffects, sets: &[&str], machines: &[DeploymentMachine]) {
    for node in nodes_of(machines, sets).filter(|n| n.prefer_no_schedule) {
        push_unique(&mut effects.remove_prefer_no_schedule, &node.name);
    }
}

/// Protects the nodes of `sets` from autoscaler scale-down during a rollout. A node already carrying
/// `scale-down-disabled=true` is left alone: if a user put it there, adding MCM's marker would make the end of
/// the rollout remove the user's annotation (MCM does exactly that).
pub fn disable_scale_down(effects: &mut NodeEffects, sets: &[&str], machines: &[DeploymentMachine]) {
    for node in nodes_of(machines, sets).filter(|n| !n.scale_down_disabled) {
        push_unique(&mut effects.disable_scale_down, &node.name);
    }
}

/// Lifts the rollout's protection: nodes with MCM's marker whose machine is not preserved.
pub fn enable_scale_down(effects: &mut NodeEffects, sets: &[&str], machines: &[DeploymentMachine]) {
    let candidates = machines
        .iter()
        .filter(|m| m.set.as_deref().is_some_and(|s| sets.contains(&s)) && !m.preserve_expiry_set)
        .filter_map(|m| m.node.as_ref())
        .filter(|n| n.scale_down_disabled_by_mcm);
    for node in candidates {
        push_unique(&mut effects.enable_scale_down, &node.name);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    use super::*;
    use crate::api::mcm::{CurrentStatus, MachineStatus};
    use crate::lifecycle::machine_deployment::test_support::map;

    fn node(name: &str, tainted: bool, disabled: bool, by_mcm: bool) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            prefer_no_schedule: tainted,
            scale_down_disabled: disabled,
            scale_down_disabled_by_mcm: by_mcm,
            in_place: InPlaceNode::default(),
        }
    }

    fn dm(name: &str, set: &str, node: Option<NodeFacts>, preserved: bool) -> DeploymentMachine {
        DeploymentMachine {
            name: name.into(),
            set: Some(set.into()),
            node,
            preserve_expiry_set: preserved,
            ..Default::default()
        }
    }

    #[test]
    fn node_effects_table() {
        let machines = vec![
            dm("o1", "old", Some(node("n-o1", false, false, false)), false),
            dm("o2", "old", Some(node("n-o2", true, true, true)), false),
            dm("o3", "old", None, false),
            dm("n1", "new", Some(node("n-n1", true, true, true)), false),
            dm("n2", "new", Some(node("n-n2", false, true, false)), false),
            dm("n3", "new", Some(node("n-n3", false, true, true)), true),
        ];
        let mut e = NodeEffects::default();
        taint_old_nodes(&mut e, &["old"], &machines);
        assert_eq!(e.add_prefer_no_schedule, ["n-o1"], "only untainted old nodes; machines without a node skipped");

        let mut e = NodeEffects::default();
        untaint_nodes(&mut e, &["new"], &machines);
        assert_eq!(e.remove_prefer_no_schedule, ["n-n1"]);

        let mut e = NodeEffects::default();
        disable_scale_down(&mut e, &["old", "new"], &machines);
        assert_eq!(e.disable_scale_down, ["n-o1"], "a user's own annotation is left alone");

        let mut e = NodeEffects::default();
        enable_scale_down(&mut e, &["old", "new"], &machines);
        assert_eq!(e.enable_scale_down, ["n-o2", "n-n1"], "only with MCM's marker, never on preserved machines");
        assert!(!e.is_empty());
        assert!(NodeEffects::default().is_empty());
    }

    #[test]
    fn facts_from_objects() {
        let n = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                annotations: Some(map(&[(SCALE_DOWN_DISABLED, "true"), (SCALE_DOWN_DISABLED_BY_MCM, "true")])),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: PREFER_NO_SCHEDULE.into(),
                    value: Some("True".into()),
                    effect: "PreferNoSchedule".into(),
                    time_added: None,
                }]),
                ..Default::default()
            }),
            status: None,
        };
        assert_eq!(NodeFacts::from_node(&n), node("n1", true, true, true));

        let mut m = Machine::new("m1", Default::default());
        m.metadata.labels = Some(map(&[(NODE_LABEL, "n1")]));
        m.metadata.annotations = Some(map(&[(PRIORITY_ANNOTATION, "1"), (MARKED_FOR_DELETION_TIME, "t")]));
        m.metadata.owner_references = Some(vec![OwnerReference {
            kind: "MachineSet".into(),
            name: "s1".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        m.metadata.deletion_timestamp = Some(Time("2026-03-01T12:00:00Z".parse().unwrap()));
        m.status = Some(MachineStatus {
            current_status: Some(CurrentStatus {
                phase: Some(MachinePhase::Running),
                preserve_expiry_time: Some(Time("2026-03-02T12:00:00Z".parse().unwrap())),
                ..Default::default()
            }),
            ..Default::default()
        });
        let facts = DeploymentMachine::from_machine(&m, Some(&n));
        assert_eq!(
            facts,
            DeploymentMachine {
                name: "m1".into(),
                set: Some("s1".into()),
                node: Some(node("n1", true, true, true)),
                phase: Some(MachinePhase::Running),
                deleting: true,
                preserve_expiry_set: true,
                priority: Some("1".into()),
                marked_for_deletion_time: Some("t".into()),
                moved_in_place: false,
                in_place_reason: None,
            }
        );
        m.metadata.labels = None;
        assert_eq!(DeploymentMachine::from_machine(&m, Some(&n)).node, None, "no node label, no node");
    }
}
