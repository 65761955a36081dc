//! The InPlaceUpdate strategy's steps (MCM's `rolloutInPlace`, `docs/rollouts.md` "In-place updates"): the
//! same VMs take the new template, one batch of Nodes at a time.
//!
//! Each pass, after the new set exists and the old sets are marked (`scale-up-disabled`, their Nodes labelled
//! `candidate-for-update`):
//! 1. [`sync_sets`]: the new set counts machines moved to it; Nodes done with their update are cleaned up; old
//!    sets shrink to the machines they still have.
//! 2. [`reconcile_new`]: the new set grows (only to replace lost machines, or when no old machine is left), or
//!    machines whose update succeeded move from their old set to the new one (labels and owner change; the VM
//!    stays).
//! 3. [`reconcile_old`]: with the new set complete, old sets go to 0; otherwise (Auto only) the next Nodes are
//!    selected for update, within `maxUnavailable`. With Manual orchestration the user selects them.
//!
//! Worked example: 10 machines, `maxUnavailable: 2`, Auto. Two Nodes are selected; each is drained, updated by
//! the node agent and moved to the new set (old 8, new 2); once both are available again, the next two are
//! selected. At no time are more than 2 Nodes selected or fewer than 8 machines available, and no VM is made.

use super::nodes::DeploymentMachine;
use super::rollout::{ScaleTarget, in_place_bounds, is_manual};
use super::{by_creation, set_name, spec_replicas, sum};
use crate::api::mcm::names::{SCALE_UP_DISABLED, in_place_reason};
use crate::api::mcm::{MachineDeployment, MachinePhase, MachineSet};
use crate::lifecycle::object_meta::label;

/// What [`sync_sets`] does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncSets {
    /// The new set's size, when machines moved to it are not counted in it yet.
    pub scale_new: Option<i32>,
    /// New-set machines whose `update-result` label goes (the set counts them now).
    pub clear_moved: Vec<String>,
    /// Nodes of new-set machines done with their update, to clean up.
    pub done_nodes: Vec<String>,
    /// Old sets with fewer machines than their size, shrunk to what they have.
    pub shrink_old: Vec<ScaleTarget>,
    /// Nodes of new-set machines labelled `candidate-for-update` but never selected (a set that became new
    /// again by a revert): the label goes.
    pub unlabel: Vec<String>,
}

fn of_set<'a>(machines: &'a [DeploymentMachine], set: &'a str) -> impl Iterator<Item = &'a DeploymentMachine> + 'a {
    machines.iter().filter(move |m| m.set.as_deref() == Some(set))
}

fn count(machines: &[DeploymentMachine], set: &str) -> i32 {
    i32::try_from(of_set(machines, set).count()).unwrap_or(i32::MAX)
}

/// Step 1 (`syncMachineSets`). A moved machine's label is cleared only once the new set's size covers it: the
/// label is what keeps the set from deleting it as surplus meanwhile. Only old sets already seen with
/// `scale-up-disabled` shrink: before that, a missing machine may just not be created yet.
pub fn sync_sets(new: &MachineSet, old: &[&MachineSet], machines: &[DeploymentMachine]) -> SyncSets {
    let mut out = SyncSets::default();
    let new_name = set_name(new);
    let moved: Vec<&DeploymentMachine> = of_set(machines, new_name)
        .filter(|m| m.moved_in_place && m.in_place_reason.as_deref() == Some(in_place_reason::SUCCESSFUL))
        .collect();
    let have = count(machines, new_name);
    let spec = spec_replicas(new);
    if !moved.is_empty() && have > spec {
        let add = i32::try_from(moved.len()).unwrap_or(i32::MAX).min(have - spec);
        out.scale_new = Some(spec + add);
    } else {
        out.clear_moved = of_set(machines, new_name).filter(|m| m.moved_in_place).map(|m| m.name.clone()).collect();
    }
    let nodes = || of_set(machines, new_name).filter_map(|m| m.node.as_ref());
    out.done_nodes = nodes().filter(|n| n.in_place.updated()).map(|n| n.name.clone()).collect();
    out.unlabel = nodes()
        .filter(|n| n.in_place.candidate && !n.in_place.selected && n.in_place.result.is_none())
        .map(|n| n.name.clone())
        .collect();
    for set in old.iter().filter(|s| label(&s.metadata, SCALE_UP_DISABLED).is_some()) {
        let name = set_name(set);
        let have = count(machines, name);
        if have < spec_replicas(set) {
            out.shrink_old.push(ScaleTarget { name: name.to_string(), replicas: have });
        }
    }
    out
}

/// A machine moving from an old set to the new one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The machine.
    pub machine: String,
    /// The old set it leaves.
    pub from: String,
}

/// Step 2 (`reconcileNewMachineSetInPlace`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NewSetStep {
    /// Nothing to do.
    Stay,
    /// Scale the new set (new VMs when it grows).
    Scale(i32),
    /// Move these machines.
    Transfer(Vec<Transfer>),
}

/// Whether a machine of an old set is updated and may move: its Node's update succeeded (label and condition),
/// the machine copied that condition, and it is no longer `InPlaceUpdating`.
fn may_move(m: &DeploymentMachine) -> bool {
    m.node.as_ref().is_some_and(|n| n.in_place.updated())
        && m.in_place_reason.as_deref() == Some(in_place_reason::SUCCESSFUL)
        && m.phase != Some(MachinePhase::InPlaceUpdating)
        && !m.deleting
}

/// Step 2: grow the new set only where no old machine can be updated instead; otherwise move updated machines.
pub fn reconcile_new(
    d: &MachineDeployment,
    new: &MachineSet,
    old: &[&MachineSet],
    machines: &[DeploymentMachine],
) -> NewSetStep {
    let replicas = d.spec.replicas;
    let spec = spec_replicas(new);
    if spec == replicas {
        return NewSetStep::Stay;
    }
    if spec > replicas {
        return NewSetStep::Scale(replicas);
    }
    let old_spec = sum(old, spec_replicas);
    if old_spec == 0 {
        return NewSetStep::Scale(replicas);
    }
    if old_spec + spec < replicas {
        return NewSetStep::Scale(replicas - old_spec);
    }
    let mut sorted: Vec<&MachineSet> = old.to_vec();
    sorted.sort_by(|a, b| by_creation(a, b));
    let moves: Vec<Transfer> = sorted
        .iter()
        .flat_map(|s| {
            let name = set_name(s);
            let mut ready: Vec<&DeploymentMachine> = of_set(machines, name).filter(|m| may_move(m)).collect();
            ready.sort_by(|a, b| a.name.cmp(&b.name));
            ready.into_iter().map(move |m| Transfer { machine: m.name.clone(), from: name.to_string() })
        })
        .take(usize::try_from(replicas - spec).unwrap_or(0))
        .collect();
    if moves.is_empty() { NewSetStep::Stay } else { NewSetStep::Transfer(moves) }
}

/// Step 3 (`reconcileOldMachineSetsInPlace`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OldSetStep {
    /// Nothing to do (waiting for updates, for availability, or for the user).
    Wait,
    /// The new set is complete: every old set goes to 0 (machines never updated are deleted).
    ScaleToZero,
    /// Label these Nodes `selected-for-update`.
    Select(Vec<String>),
}

/// Machines of `set` that serve: Running or Available, not being deleted. Selection counts these rather than
/// the sets' `availableReplicas` (MCM's inputs): a set's status lags a move by one of its passes, and a moved
/// machine still counted available by its old set let a pass select more Nodes than `maxUnavailable` allows.
fn serving(machines: &[DeploymentMachine], set: &str) -> i32 {
    let n = of_set(machines, set)
        .filter(|m| !m.deleting && matches!(m.phase, Some(MachinePhase::Running | MachinePhase::Available)))
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Machines of old sets whose Node is selected: being updated, or failed and not replaced yet.
pub fn undergoing(old: &[&MachineSet], machines: &[DeploymentMachine]) -> i32 {
    let n = old
        .iter()
        .flat_map(|s| of_set(machines, set_name(s)))
        .filter(|m| m.node.as_ref().is_some_and(|n| n.in_place.selected))
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Step 3: what the old sets do. Selection follows MCM's budget: no more than `maxUnavailable` machines below
/// `replicas` counting selected ones as unavailable, oldest set first, Nodes by name (MCM's order is its cache's).
pub fn reconcile_old(
    d: &MachineDeployment,
    new: &MachineSet,
    old: &[&MachineSet],
    machines: &[DeploymentMachine],
) -> OldSetStep {
    let replicas = d.spec.replicas;
    if sum(old, spec_replicas) == 0 {
        return OldSetStep::Wait;
    }
    if spec_replicas(new) == replicas {
        return OldSetStep::ScaleToZero;
    }
    if is_manual(d) {
        return OldSetStep::Wait;
    }
    let min_available = replicas - in_place_bounds(d).max_unavailable;
    let undergoing = undergoing(old, machines);
    if undergoing + spec_replicas(new) >= replicas {
        return OldSetStep::Wait;
    }
    let all_spec = sum(old, spec_replicas) + spec_replicas(new);
    let new_unavailable = (spec_replicas(new) - serving(machines, set_name(new))).max(0);
    if all_spec - min_available - new_unavailable - undergoing <= 0 {
        return OldSetStep::Wait;
    }
    let old_serving: i32 = old.iter().map(|s| serving(machines, set_name(s))).sum();
    let available_now = old_serving + serving(machines, set_name(new)) - undergoing;
    if available_now <= min_available {
        return OldSetStep::Wait;
    }
    let mut budget = (available_now - min_available).min((replicas - spec_replicas(new)).max(0));
    let mut sorted: Vec<&MachineSet> = old.to_vec();
    sorted.sort_by(|a, b| by_creation(a, b));
    let mut selected = Vec::new();
    for set in sorted {
        let mut take = spec_replicas(set).min(budget);
        let mut nodes: Vec<&str> = of_set(machines, set_name(set))
            .filter(|m| !m.deleting)
            .filter_map(|m| m.node.as_ref())
            .filter(|n| n.in_place.candidate && !n.in_place.selected)
            .map(|n| n.name.as_str())
            .collect();
        nodes.sort_unstable();
        for node in nodes {
            if take <= 0 {
                break;
            }
            selected.push(node.to_string());
            take -= 1;
            budget -= 1;
        }
        if budget <= 0 {
            break;
        }
    }
    if selected.is_empty() { OldSetStep::Wait } else { OldSetStep::Select(selected) }
}

/// Nodes of old-set machines still to be labelled `candidate-for-update`.
pub fn candidates_to_label(old: &[&str], machines: &[DeploymentMachine]) -> Vec<String> {
    machines
        .iter()
        .filter(|m| m.set.as_deref().is_some_and(|s| old.contains(&s)) && !m.deleting)
        .filter_map(|m| m.node.as_ref())
        .filter(|n| !n.in_place.candidate)
        .map(|n| n.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::mcm::names::UPDATE_SUCCESSFUL;
    use crate::lifecycle::machine_deployment::nodes::{InPlaceNode, NodeFacts};
    use crate::lifecycle::machine_deployment::test_support::{deployment, in_place, ms};

    fn node(name: &str, in_place: InPlaceNode) -> Option<NodeFacts> {
        Some(NodeFacts { name: format!("n-{name}"), in_place, ..Default::default() })
    }

    fn candidate() -> InPlaceNode {
        InPlaceNode { candidate: true, reason: Some(in_place_reason::CANDIDATE.into()), ..Default::default() }
    }

    fn selected() -> InPlaceNode {
        InPlaceNode { selected: true, reason: Some(in_place_reason::SELECTED.into()), ..candidate() }
    }

    fn updated() -> InPlaceNode {
        InPlaceNode {
            selected: true,
            result: Some(UPDATE_SUCCESSFUL.into()),
            reason: Some(in_place_reason::SUCCESSFUL.into()),
            ..candidate()
        }
    }

    fn m(name: &str, set: &str, n: InPlaceNode) -> DeploymentMachine {
        let reason = n.reason.clone();
        DeploymentMachine {
            name: name.into(),
            set: Some(set.into()),
            node: node(name, n),
            phase: Some(MachinePhase::Running),
            in_place_reason: reason,
            ..Default::default()
        }
    }

    /// Moved to `set`, updated, not healthy again yet.
    fn rejoining(name: &str, set: &str) -> DeploymentMachine {
        let mut dm = m(name, set, InPlaceNode::default());
        dm.phase = Some(MachinePhase::InPlaceUpdateSuccessful);
        dm
    }

    fn moved(mut dm: DeploymentMachine) -> DeploymentMachine {
        dm.moved_in_place = true;
        dm
    }

    #[test]
    fn sync_sets_table() {
        let new = ms("new", 2, 2, 3, 3);
        let mut old = ms("old", 1, 2, 2, 2);
        old.metadata.labels = Some([(SCALE_UP_DISABLED.to_string(), "true".to_string())].into());
        // (case, machines, expected)
        let cases = [
            (
                "no moved machine beyond the size: nothing to scale, labels cleared",
                vec![
                    m("a", "new", InPlaceNode::default()),
                    m("b", "new", InPlaceNode::default()),
                    m("o1", "old", candidate()),
                    m("o2", "old", candidate()),
                ],
                SyncSets::default(),
            ),
            (
                "one moved machine not counted yet: the new set grows by one and keeps its label",
                vec![
                    m("a", "new", InPlaceNode::default()),
                    m("b", "new", InPlaceNode::default()),
                    moved(m("c", "new", updated())),
                    m("o1", "old", candidate()),
                    m("o2", "old", candidate()),
                ],
                SyncSets { scale_new: Some(3), done_nodes: vec!["n-c".into()], ..Default::default() },
            ),
            (
                "counted: label cleared; an old set that lost a machine shrinks to what it has",
                vec![
                    m("a", "new", InPlaceNode::default()),
                    moved(m("c", "new", updated())),
                    m("o1", "old", candidate()),
                ],
                SyncSets {
                    clear_moved: vec!["c".into()],
                    done_nodes: vec!["n-c".into()],
                    shrink_old: vec![ScaleTarget { name: "old".into(), replicas: 1 }],
                    ..Default::default()
                },
            ),
        ];
        for (name, machines, expected) in cases {
            assert_eq!(sync_sets(&new, &[&old], &machines), expected, "{name}");
        }
        let unmarked = ms("old", 1, 2, 2, 2);
        assert_eq!(sync_sets(&new, &[&unmarked], &[]).shrink_old, [], "not marked yet: its machines may be coming");
    }

    #[test]
    fn reconcile_new_table() {
        let d = deployment("d", 3, in_place("0", "1", "Auto"));
        let machines =
            vec![m("o1", "old", updated()), m("o2", "old", selected()), m("n1", "new", InPlaceNode::default())];
        let updating = {
            let mut x = m("o1", "old", updated());
            x.phase = Some(MachinePhase::InPlaceUpdating);
            x
        };
        // (case, new spec, old spec, machines, expected)
        let cases = [
            ("new set complete", 3, 0, machines.clone(), NewSetStep::Stay),
            ("new set too big", 4, 0, machines.clone(), NewSetStep::Scale(3)),
            ("no old machine left: grow", 1, 0, machines.clone(), NewSetStep::Scale(3)),
            ("an old machine was lost: grow to replace it", 1, 1, machines.clone(), NewSetStep::Scale(2)),
            (
                "an updated machine moves",
                1,
                2,
                machines.clone(),
                NewSetStep::Transfer(vec![Transfer { machine: "o1".into(), from: "old".into() }]),
            ),
            ("still InPlaceUpdating: it waits", 1, 2, vec![updating, m("o2", "old", selected())], NewSetStep::Stay),
        ];
        for (name, new_spec, old_spec, machines, expected) in cases {
            let new = ms("new", 2, new_spec, new_spec, new_spec);
            let old = ms("old", 1, old_spec, old_spec, old_spec);
            assert_eq!(reconcile_new(&d, &new, &[&old], &machines), expected, "{name}");
        }
    }

    #[test]
    fn reconcile_old_table() {
        let auto = deployment("d", 3, in_place("0", "1", "Auto"));
        let manual = deployment("d", 3, in_place("0", "1", "Manual"));
        let two = deployment("d", 3, in_place("0", "2", "Auto"));
        let cands = vec![m("o1", "old", candidate()), m("o2", "old", candidate()), m("o3", "old", candidate())];
        let one_selected = vec![m("o1", "old", selected()), m("o2", "old", candidate()), m("o3", "old", candidate())];
        let plain = vec![
            m("o1", "old", InPlaceNode::default()),
            m("o2", "old", InPlaceNode::default()),
            m("o3", "old", InPlaceNode::default()),
        ];
        // (case, deployment, new (spec, available), old (spec, available), machines, expected)
        let cases = [
            ("old sets at 0", &auto, (3, 3), (0, 0), cands.clone(), OldSetStep::Wait),
            ("new set complete: old to 0", &auto, (3, 3), (1, 1), cands.clone(), OldSetStep::ScaleToZero),
            (
                "budget 1: exactly one, by name",
                &auto,
                (0, 0),
                (3, 3),
                cands.clone(),
                OldSetStep::Select(vec!["n-o1".into()]),
            ),
            ("budget 2", &two, (0, 0), (3, 3), cands.clone(), OldSetStep::Select(vec!["n-o1".into(), "n-o2".into()])),
            ("one already selected uses the budget", &auto, (0, 0), (3, 3), one_selected, OldSetStep::Wait),
            ("no candidate nodes", &auto, (0, 0), (3, 3), plain, OldSetStep::Wait),
            ("a new machine unavailable", &auto, (1, 0), (2, 2), cands.clone(), OldSetStep::Wait),
            (
                "a moved machine not Running yet, whatever the sets' stale status says",
                &auto,
                (1, 1),
                (2, 2),
                vec![rejoining("n1", "new"), m("o2", "old", candidate()), m("o3", "old", candidate())],
                OldSetStep::Wait,
            ),
            (
                "the moved machine Running again: the next Node",
                &auto,
                (1, 1),
                (2, 2),
                vec![m("n1", "new", InPlaceNode::default()), m("o2", "old", candidate()), m("o3", "old", candidate())],
                OldSetStep::Select(vec!["n-o2".into()]),
            ),
            ("Manual never selects", &manual, (0, 0), (3, 3), cands.clone(), OldSetStep::Wait),
            ("Manual still scales old sets to 0", &manual, (3, 3), (1, 1), cands, OldSetStep::ScaleToZero),
        ];
        for (name, d, (ns, na), (os, oa), machines, expected) in cases {
            let new = ms("new", 2, ns, ns, na);
            let old = ms("old", 1, os, os, oa);
            assert_eq!(reconcile_old(d, &new, &[&old], &machines), expected, "{name}");
        }
    }

    #[test]
    fn undergoing_and_candidates() {
        let old = ms("old", 1, 3, 3, 3);
        let machines = vec![m("o1", "old", selected()), m("o2", "old", candidate()), m("n1", "new", selected())];
        assert_eq!(undergoing(&[&old], &machines), 1, "only old sets' selected Nodes count");
        let machines = vec![m("o1", "old", InPlaceNode::default()), m("o2", "old", candidate())];
        assert_eq!(candidates_to_label(&["old"], &machines), ["n-o1"]);
    }
}
