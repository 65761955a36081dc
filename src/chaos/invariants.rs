//! What must hold after every chaos trial, judged from a snapshot of the API server and the cloud (pure), and
//! the deployment's bounds as a watcher sees them while the trial runs ([`Bounds`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A Machine as the checks see it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineView {
    /// Name.
    pub name: String,
    /// `spec.providerID`.
    pub provider_id: Option<String>,
    /// `status.currentStatus.phase`.
    pub phase: Option<String>,
    /// `status.node`.
    pub node: Option<String>,
    /// The template revision label (`chaos-rev`).
    pub revision: Option<String>,
    /// Has a deletion timestamp.
    pub deleting: bool,
}

impl MachineView {
    fn running(&self) -> bool {
        !self.deleting && self.phase.as_deref() == Some("Running")
    }
}

/// A Node as the checks see it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeView {
    /// Name.
    pub name: String,
    /// `spec.providerID`.
    pub provider_id: Option<String>,
    /// Has a deletion timestamp.
    pub deleting: bool,
}

/// Whose a VM is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Made by our controllers (our cluster's tag).
    Ours,
    /// Planted by the chaos run with our tags and no Machine: must be collected.
    PlantedOrphan,
    /// Planted by the chaos run with another cluster's tag or none: must never be touched.
    Foreign,
}

/// A VM, deleted ones included.
#[derive(Clone, Debug, PartialEq)]
pub struct VmView {
    /// providerID.
    pub provider_id: String,
    /// The machine it was made for.
    pub machine_name: String,
    /// Whose.
    pub owner: Owner,
    /// Not deleted.
    pub exists: bool,
}

/// Everything at the end of a trial.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The deployment's Machines.
    pub machines: Vec<MachineView>,
    /// Every Node.
    pub nodes: Vec<NodeView>,
    /// Every VM the cloud ever had.
    pub vms: Vec<VmView>,
    /// MachineSets and MachineDeployments still being deleted (`kind/name`).
    pub deleting_owners: Vec<String>,
    /// What the deployment asks for.
    pub replicas: u32,
    /// The template revision it asks for.
    pub revision: String,
}

/// One invariant's verdict.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// The invariant, as the report names it.
    pub invariant: &'static str,
    /// Whether it held.
    pub held: bool,
    /// What broke it (empty when it held).
    pub detail: String,
}

fn verdict(invariant: &'static str, problems: Vec<String>) -> Verdict {
    const SHOWN: usize = 5;
    let more = problems.len().saturating_sub(SHOWN);
    let mut detail = problems.iter().take(SHOWN).cloned().collect::<Vec<_>>().join("; ");
    if more > 0 {
        detail.push_str(&format!("; and {more} more"));
    }
    Verdict { invariant, held: problems.is_empty(), detail }
}

/// The names of the invariants, in report order.
pub const INVARIANTS: [&str; 7] = [
    "converged",
    "VMs = Running machines",
    "no VM made twice",
    "foreign VMs untouched",
    "Nodes linked",
    "no finalizer stuck",
    "bounds kept",
];

/// Judges a snapshot (every invariant but the bounds, which [`Bounds`] judges).
pub fn check(s: &Snapshot) -> Vec<Verdict> {
    let mut out = Vec::new();

    let mut problems = Vec::new();
    let running = s.machines.iter().filter(|m| m.running()).count();
    let current = s.machines.iter().filter(|m| m.running() && m.revision.as_deref() == Some(&s.revision)).count();
    if s.machines.len() != s.replicas as usize || current != s.replicas as usize {
        problems.push(format!(
            "{} machines, {running} Running, {current} Running on revision {}; wanted {}",
            s.machines.len(),
            s.revision,
            s.replicas
        ));
    }
    out.push(verdict(INVARIANTS[0], problems));

    let ours_live: BTreeMap<&str, &VmView> = s
        .vms
        .iter()
        .filter(|vm| vm.exists && vm.owner != Owner::Foreign)
        .map(|vm| (vm.provider_id.as_str(), vm))
        .collect();
    let running_ids: BTreeSet<&str> =
        s.machines.iter().filter(|m| m.running()).filter_map(|m| m.provider_id.as_deref()).collect();
    let mut problems = Vec::new();
    for (id, vm) in &ours_live {
        if !running_ids.contains(id) {
            let what = if vm.owner == Owner::PlantedOrphan { "planted orphan" } else { "VM" };
            problems.push(format!("{what} {id} (for {}) has no Running machine", vm.machine_name));
        }
    }
    for id in &running_ids {
        if !ours_live.contains_key(id) {
            problems.push(format!("Running machine's VM {id} does not exist"));
        }
    }
    out.push(verdict(INVARIANTS[1], problems));

    let mut made: BTreeMap<&str, usize> = BTreeMap::new();
    for vm in s.vms.iter().filter(|vm| vm.owner == Owner::Ours) {
        *made.entry(vm.machine_name.as_str()).or_default() += 1;
    }
    let problems =
        made.iter().filter(|(_, n)| **n > 1).map(|(name, n)| format!("{n} VMs made for machine {name}")).collect();
    out.push(verdict(INVARIANTS[2], problems));

    let problems = s
        .vms
        .iter()
        .filter(|vm| vm.owner == Owner::Foreign && !vm.exists)
        .map(|vm| format!("foreign VM {} was deleted", vm.provider_id))
        .collect();
    out.push(verdict(INVARIANTS[3], problems));

    let nodes: BTreeMap<&str, &NodeView> = s.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut problems = Vec::new();
    for m in s.machines.iter().filter(|m| m.running()) {
        match m.node.as_deref().and_then(|n| nodes.get(n)) {
            None => problems.push(format!("machine {} has no Node ({:?})", m.name, m.node)),
            Some(node) if node.provider_id != m.provider_id => problems.push(format!(
                "machine {}'s Node {} has providerID {:?}, the machine {:?}",
                m.name, node.name, node.provider_id, m.provider_id
            )),
            Some(_) => {}
        }
    }
    let linked: BTreeSet<&str> = s.machines.iter().filter_map(|m| m.node.as_deref()).collect();
    for node in s.nodes.iter().filter(|n| !linked.contains(n.name.as_str())) {
        problems.push(format!("Node {} belongs to no machine", node.name));
    }
    out.push(verdict(INVARIANTS[4], problems));

    let mut problems: Vec<String> =
        s.machines.iter().filter(|m| m.deleting).map(|m| format!("Machine {} still deleting", m.name)).collect();
    problems.extend(s.nodes.iter().filter(|n| n.deleting).map(|n| format!("Node {} still deleting", n.name)));
    problems.extend(s.deleting_owners.iter().map(|o| format!("{o} still deleting")));
    out.push(verdict(INVARIANTS[5], problems));
    out
}

/// How long the bounds before a change of the wish still hold (see [`Bounds`]).
pub const SETTLE: Duration = Duration::from_secs(20);

/// The deployment's bounds as a watcher of its Machines sees them during a trial. Upward: the controllers never
/// hold more machines (not being deleted) than `max(wanted, what there was when the wish changed)` plus
/// `maxSurge` plus the safety margin `--safety-up`. Downward: never fewer Running machines than
/// `min(wanted, Running ones when the wish changed)` minus `maxUnavailable` minus `--safety-down`.
///
/// For [`SETTLE`] after a change of the wish the previous bounds also hold: a MachineSet's pass that began before
/// the change finishes the batch it decided (as upstream's slow-start batches do) before the next pass sees the
/// new size.
#[derive(Clone, Debug)]
pub struct Bounds {
    surge_percent: u32,
    max_unavailable: u32,
    safety_up: u32,
    safety_down: u32,
    ceiling: u32,
    floor: u32,
    /// The bounds before the last change of the wish, and when it changed.
    previous: Option<(Duration, u32, u32)>,
    last: (u32, u32),
    /// The most machines seen at once.
    pub peak: u32,
    /// The fewest Running machines seen since the trial's first step converged.
    pub lowest_running: Option<u32>,
    /// Every breach, with when it was seen.
    pub breaches: Vec<String>,
    /// Observations while a MachineSet of the deployment was frozen by the overshoot freeze.
    pub frozen: u32,
}

impl Bounds {
    /// The bounds of a deployment with `maxSurge` `surge_percent` %, `maxUnavailable` `max_unavailable` and the
    /// given safety margins; nothing is allowed until the first [`Bounds::wish`].
    pub fn new(surge_percent: u32, max_unavailable: u32, safety_up: u32, safety_down: u32) -> Bounds {
        Bounds {
            surge_percent,
            max_unavailable,
            safety_up,
            safety_down,
            ceiling: 0,
            floor: 0,
            previous: None,
            last: (0, 0),
            peak: 0,
            lowest_running: None,
            breaches: Vec::new(),
            frozen: 0,
        }
    }

    /// `maxSurge` resolved against `replicas` (percentages round up, as upstream's do).
    fn surge(&self, replicas: u32) -> u32 {
        (u64::from(replicas) * u64::from(self.surge_percent)).div_ceil(100) as u32
    }

    /// At `at`, the deployment now wants `replicas`; the watcher last saw `(machines, running)`.
    pub fn wish(&mut self, at: Duration, replicas: u32) {
        self.previous = Some((at, self.ceiling, self.floor));
        let (machines, running) = self.last;
        let base = replicas.max(machines);
        self.ceiling = base + self.surge(base) + self.safety_up;
        self.floor = replicas.min(running).saturating_sub(self.max_unavailable + self.safety_down);
    }

    /// What the watcher sees at `at`: machines not being deleted, how many of them are Running, and whether a
    /// MachineSet of the deployment is frozen. A breach is recorded with `context()` appended (what the sets held
    /// at that instant, to find the cause in the logs).
    ///
    /// The floor is not judged while a set is frozen: the overshoot freeze is MCM's deliberate stop of a set that
    /// owns too many machines (at `--safety-up` above its size), and while it lasts the deployment creates no
    /// replacements, so the Running count may sink below the floor until the freeze lifts. The ceiling is judged
    /// all the same; freezes are counted in [`Bounds::frozen`].
    pub fn observe(
        &mut self,
        at: Duration,
        machines: u32,
        running: u32,
        frozen: bool,
        context: impl FnOnce() -> String,
    ) {
        self.frozen += u32::from(frozen);
        self.last = (machines, running);
        self.peak = self.peak.max(machines);
        self.lowest_running = Some(self.lowest_running.map_or(running, |low| low.min(running)));
        let (ceiling, floor) = match self.previous {
            Some((changed, ceiling, floor)) if at.saturating_sub(changed) < SETTLE => {
                (self.ceiling.max(ceiling), self.floor.min(floor))
            }
            _ => (self.ceiling, self.floor),
        };
        let at = at.as_secs_f64();
        let mut breach = None;
        if machines > ceiling {
            breach = Some(format!("{machines} machines at {at:.1} s (at most {ceiling})"));
        }
        if running < floor && !frozen {
            breach = Some(format!("{running} Running at {at:.1} s (at least {floor})"));
        }
        if let Some(breach) = breach {
            self.breaches.push(breach + &context());
        }
    }

    /// The verdict on the bounds.
    pub fn verdict(&self) -> Verdict {
        verdict(INVARIANTS[6], self.breaches.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, phase: &str, rev: &str) -> MachineView {
        MachineView {
            name: name.into(),
            provider_id: Some(format!("inmemory:///local-a/{name}")),
            phase: Some(phase.into()),
            node: Some(name.into()),
            revision: Some(rev.into()),
            deleting: false,
        }
    }

    fn node(name: &str) -> NodeView {
        NodeView { name: name.into(), provider_id: Some(format!("inmemory:///local-a/{name}")), deleting: false }
    }

    fn vm(name: &str, owner: Owner, exists: bool) -> VmView {
        VmView { provider_id: format!("inmemory:///local-a/{name}"), machine_name: name.into(), owner, exists }
    }

    fn healthy() -> Snapshot {
        Snapshot {
            machines: vec![machine("a", "Running", "2"), machine("b", "Running", "2")],
            nodes: vec![node("a"), node("b")],
            vms: vec![
                vm("a", Owner::Ours, true),
                vm("b", Owner::Ours, true),
                vm("old", Owner::Ours, false),
                vm("f", Owner::Foreign, true),
                vm("o", Owner::PlantedOrphan, false),
            ],
            deleting_owners: vec![],
            replicas: 2,
            revision: "2".into(),
        }
    }

    fn broken(s: &Snapshot) -> Vec<&'static str> {
        check(s).into_iter().filter(|v| !v.held).map(|v| v.invariant).collect()
    }

    #[test]
    fn each_break_is_named_by_its_invariant() {
        assert!(broken(&healthy()).is_empty(), "{:?}", check(&healthy()));
        type Break = Box<dyn Fn(&mut Snapshot)>;
        let cases: Vec<(&str, Break, Vec<&str>)> = vec![
            ("one short", Box::new(|s| s.replicas = 3), vec!["converged"]),
            ("old revision", Box::new(|s| s.machines[0].revision = Some("1".into())), vec!["converged"]),
            ("a leaked VM", Box::new(|s| s.vms.push(vm("leak", Owner::Ours, true))), vec!["VMs = Running machines"]),
            ("an uncollected orphan", Box::new(|s| s.vms[4].exists = true), vec!["VMs = Running machines"]),
            ("a VM made twice", Box::new(|s| s.vms.push(vm("a", Owner::Ours, false))), vec!["no VM made twice"]),
            ("a foreign VM deleted", Box::new(|s| s.vms[3].exists = false), vec!["foreign VMs untouched"]),
            ("a VM gone under its machine", Box::new(|s| s.vms[1].exists = false), vec!["VMs = Running machines"]),
            ("a Node missing", Box::new(|s| s.nodes.pop().map(drop).unwrap_or(())), vec!["Nodes linked"]),
            ("a stray Node", Box::new(|s| s.nodes.push(node("stray"))), vec!["Nodes linked"]),
            (
                "a Node of another VM",
                Box::new(|s| s.nodes[0].provider_id = Some("inmemory:///local-a/x".into())),
                vec!["Nodes linked"],
            ),
            (
                "a machine stuck deleting",
                Box::new(|s| s.machines[1].deleting = true),
                vec!["converged", "VMs = Running machines", "no finalizer stuck"],
            ),
            (
                "a MachineSet stuck deleting",
                Box::new(|s| s.deleting_owners.push("MachineSet/x".into())),
                vec!["no finalizer stuck"],
            ),
        ];
        for (what, break_it, expected) in cases {
            let mut s = healthy();
            break_it(&mut s);
            assert_eq!(broken(&s), expected, "{what}");
        }
    }

    #[test]
    fn details_name_what_broke_and_stay_short() {
        let mut s = healthy();
        for i in 0..9 {
            s.vms.push(vm(&format!("leak-{i}"), Owner::Ours, true));
        }
        let v = check(&s).into_iter().find(|v| !v.held).unwrap();
        assert!(v.detail.contains("leak-0") && v.detail.ends_with("and 4 more"), "{}", v.detail);
    }

    #[test]
    fn bounds_allow_surge_and_margin_above_the_larger_of_wish_and_what_was() {
        let s = Duration::from_secs;
        // maxSurge 10 %, maxUnavailable 0, safety margins 2 up and 1 down.
        let mut b = Bounds::new(10, 0, 2, 1);
        b.wish(s(0), 100);
        b.observe(s(1), 112, 0, false, String::new); // 100 + 10 + 2
        assert!(b.breaches.is_empty(), "{:?}", b.breaches);
        b.observe(s(1), 113, 0, false, String::new);
        assert_eq!(b.breaches.len(), 1, "{:?}", b.breaches);
        // Scaled down while 100 run: the 100 may stay until the controllers act.
        let mut b = Bounds::new(10, 0, 2, 1);
        b.wish(s(0), 100);
        b.observe(s(50), 100, 100, false, String::new);
        b.wish(s(100), 60);
        b.observe(s(130), 100, 100, false, String::new);
        b.observe(s(140), 60, 60, false, String::new);
        assert!(b.breaches.is_empty(), "{:?}", b.breaches);
        // A rolling update of 60 keeps at least 59 Running.
        b.wish(s(200), 60);
        b.observe(s(230), 66, 59, false, String::new);
        assert!(b.breaches.is_empty(), "{:?}", b.breaches);
        b.observe(s(231), 66, 58, false, || ": set a 66/66".to_string());
        assert_eq!(b.breaches, vec!["58 Running at 231.0 s (at least 59): set a 66/66".to_string()]);
        assert_eq!((b.peak, b.lowest_running), (100, Some(58)));
        assert!(!b.verdict().held);
    }

    #[test]
    fn the_bounds_before_a_change_hold_while_it_settles() {
        let s = Duration::from_secs;
        let mut b = Bounds::new(10, 0, 2, 1);
        b.wish(s(0), 70); // at most 70 + 7 + 2 = 79
        b.observe(s(30), 60, 60, false, String::new);
        b.wish(s(40), 52); // at most max(52, 60) + 6 + 2 = 68
        // A batch decided before the change lands within the settling time: the old ceiling holds.
        b.observe(s(40) + SETTLE - s(1), 79, 60, false, String::new);
        assert!(b.breaches.is_empty(), "{:?}", b.breaches);
        // Once settled, the new one.
        b.observe(s(40) + SETTLE, 69, 60, false, String::new);
        assert_eq!(b.breaches, vec![format!("69 machines at {:.1} s (at most 68)", (s(40) + SETTLE).as_secs_f64())]);
    }

    #[test]
    fn a_frozen_set_suspends_the_floor_but_not_the_ceiling() {
        let s = Duration::from_secs;
        let mut b = Bounds::new(10, 0, 2, 1);
        b.wish(s(0), 60);
        b.observe(s(30), 60, 60, false, String::new);
        b.observe(s(60), 60, 50, true, String::new);
        assert!(b.breaches.is_empty(), "{:?}", b.breaches);
        b.observe(s(61), 69, 50, true, String::new);
        assert_eq!(b.breaches.len(), 1, "{:?}", b.breaches);
        assert_eq!(b.frozen, 2);
    }

    #[test]
    fn a_scale_up_from_few_running_sets_a_low_floor() {
        let mut b = Bounds::new(10, 0, 2, 1);
        b.observe(Duration::ZERO, 0, 0, false, String::new);
        b.wish(Duration::ZERO, 100);
        b.observe(Duration::ZERO, 100, 3, false, String::new);
        assert!(b.verdict().held, "{:?}", b.breaches);
    }
}
