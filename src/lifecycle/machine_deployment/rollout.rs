//! Rolling-update and recreate arithmetic (`docs/machine-lifecycle.md` "Rolling update math", "Recreate").
//!
//! Worked example: 10 replicas, `maxSurge: 25%`, `maxUnavailable: 25%`. Surge rounds up (2.5 -> 3), unavailable
//! rounds down (2.5 -> 2): at most 13 machines exist and at least 8 are available. A new template creates the
//! new set with `min(13 - 10, 10 - 0) = 3` replicas; once some are available, the old set is scaled down by at
//! most `Σspec - 8 - (new.spec - new.available)`, unhealthy old machines first. Each reconcile does one phase:
//! scale up the new set **or** scale down old sets.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{actual, available, by_creation, set_name, spec_replicas, sum};
use crate::api::mcm::{MachineDeployment, MachineDeploymentStrategyType, MachineSet};

/// A parsed `maxSurge` / `maxUnavailable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOrPercent {
    /// An absolute number of machines.
    Int(i32),
    /// A percentage of `spec.replicas`.
    Percent(i32),
}

/// Parses a fencepost: a non-negative integer, or a string `N%` with a non-negative integer `N`. Anything else
/// (including `"3"` without `%`, as in Kubernetes) is `None`.
pub fn parse_int_or_percent(value: &IntOrString) -> Option<IntOrPercent> {
    match value {
        IntOrString::Int(i) if *i >= 0 => Some(IntOrPercent::Int(*i)),
        IntOrString::Int(_) => None,
        IntOrString::String(s) => {
            let n: i32 = s.strip_suffix('%')?.parse().ok()?;
            (n >= 0).then_some(IntOrPercent::Percent(n))
        }
    }
}

/// The number of machines a fencepost stands for out of `total`, rounding a percentage up or down.
pub fn scaled_value(value: IntOrPercent, total: i32, round_up: bool) -> i32 {
    match value {
        IntOrPercent::Int(i) => i,
        IntOrPercent::Percent(p) => {
            let product = i64::from(p) * i64::from(total.max(0));
            let v = if round_up { (product + 99) / 100 } else { product / 100 };
            i32::try_from(v).unwrap_or(i32::MAX)
        }
    }
}

/// `maxSurge` and `maxUnavailable` resolved against a replica count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fenceposts {
    /// Machines allowed above `replicas`.
    pub max_surge: i32,
    /// Machines allowed to be unavailable.
    pub max_unavailable: i32,
}

/// Resolves both fenceposts in one step: surge rounds up, unavailable rounds down, and if both come to 0,
/// unavailable becomes 1 (surge may be impossible, e.g. for lack of quota). A missing or invalid value counts as
/// 0 (validation reports it before this is reached).
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    replicas: i32,
) -> Fenceposts {
    let resolve = |v: Option<&IntOrString>, up: bool| {
        v.and_then(parse_int_or_percent).map_or(0, |v| scaled_value(v, replicas, up))
    };
    let max_surge = resolve(max_surge, true);
    let mut max_unavailable = resolve(max_unavailable, false);
    if max_surge == 0 && max_unavailable == 0 {
        max_unavailable = 1;
    }
    Fenceposts { max_surge, max_unavailable }
}

/// Whether the deployment rolls (strategy `RollingUpdate`).
pub fn is_rolling_update(d: &MachineDeployment) -> bool {
    strategy_type(d) == Some(&MachineDeploymentStrategyType::RollingUpdate)
}

/// Whether the deployment recreates (strategy `Recreate`).
pub fn is_recreate(d: &MachineDeployment) -> bool {
    strategy_type(d) == Some(&MachineDeploymentStrategyType::Recreate)
}

/// Whether the deployment updates machines in place (strategy `InPlaceUpdate`).
pub fn is_in_place(d: &MachineDeployment) -> bool {
    strategy_type(d) == Some(&MachineDeploymentStrategyType::InPlaceUpdate)
}

/// Whether an in-place update waits for the user to select Nodes (`orchestrationType: Manual`).
pub fn is_manual(d: &MachineDeployment) -> bool {
    d.spec.strategy.as_ref().and_then(|s| s.in_place_update.as_ref()).and_then(|i| i.orchestration_type.as_ref())
        == Some(&crate::api::mcm::OrchestrationType::Manual)
}

/// An in-place update's fenceposts (MCM's `MaxUnavailable`/`NewISNewReplicas` for that strategy): Manual counts
/// no surge when resolving `maxUnavailable`, and `maxUnavailable` is capped at `replicas` (0 when `replicas` is 0).
pub fn in_place_bounds(d: &MachineDeployment) -> Fenceposts {
    let config = d.spec.strategy.as_ref().and_then(|s| s.in_place_update.as_ref()).map(|i| &i.update);
    let surge = config.and_then(|c| c.max_surge.as_ref());
    let unavailable = config.and_then(|c| c.max_unavailable.as_ref());
    let zero = IntOrString::Int(0);
    let resolved = resolve_fenceposts(surge, unavailable, d.spec.replicas);
    let for_unavailable =
        if is_manual(d) { resolve_fenceposts(Some(&zero), unavailable, d.spec.replicas) } else { resolved };
    Fenceposts {
        max_surge: resolved.max_surge,
        max_unavailable: if d.spec.replicas == 0 { 0 } else { for_unavailable.max_unavailable.min(d.spec.replicas) },
    }
}

/// CAPI's `OnDelete` strategy, carried through the hub as a strategy type MCM does not know.
pub const ON_DELETE: &str = "OnDelete";

/// Whether the deployment replaces machines only as they are deleted (CAPI's `OnDelete`).
pub fn is_on_delete(d: &MachineDeployment) -> bool {
    matches!(strategy_type(d), Some(MachineDeploymentStrategyType::Other(t)) if t == ON_DELETE)
}

fn strategy_type(d: &MachineDeployment) -> Option<&MachineDeploymentStrategyType> {
    d.spec.strategy.as_ref().and_then(|s| s.type_.as_ref())
}

fn fenceposts(d: &MachineDeployment) -> Fenceposts {
    let config = d.spec.strategy.as_ref().and_then(|s| s.rolling_update.as_ref());
    resolve_fenceposts(
        config.and_then(|c| c.max_surge.as_ref()),
        config.and_then(|c| c.max_unavailable.as_ref()),
        d.spec.replicas,
    )
}

/// Machines allowed above `replicas`: the resolved surge for a rolling update, 0 otherwise.
pub fn max_surge(d: &MachineDeployment) -> i32 {
    if is_rolling_update(d) { fenceposts(d).max_surge } else { 0 }
}

/// Machines allowed to be unavailable: the resolved value capped at `replicas` for a rolling update; 0 for
/// Recreate or when `replicas` is 0.
pub fn max_unavailable(d: &MachineDeployment) -> i32 {
    if !is_rolling_update(d) || d.spec.replicas == 0 {
        return 0;
    }
    fenceposts(d).max_unavailable.min(d.spec.replicas)
}

/// The replicas the new set should have now (MCM `NewISNewReplicas`): for a rolling update, grow by what the
/// surge leaves room for without passing `replicas`; for Recreate, `replicas` outright.
///
/// The room is measured in machines per set as `max(spec, status.replicas)`: machines still terminating count
/// (as in MCM, which counts `status.replicas` so a slow drain holds the surge), and so do machines a set was
/// asked for but has not created yet. MCM counts only existing machines, so two passes before the MachineSet
/// controller catches up surge twice (10 replicas at 25%: first 3, then 6 new machines).
pub fn new_set_replicas(d: &MachineDeployment, all: &[&MachineSet], new: &MachineSet) -> i32 {
    let replicas = d.spec.replicas;
    if is_on_delete(d) {
        // Core's `NewMSNewReplicas` for OnDelete: fill what the deleted machines left, never more.
        let current = sum(all, |s| spec_replicas(s).max(actual(s)));
        return spec_replicas(new) + (replicas - current).max(0);
    }
    let surge = if is_in_place(d) {
        if is_manual(d) {
            // Manual: the user decides which machine moves when; the new set grows only by moves.
            return spec_replicas(new);
        }
        in_place_bounds(d).max_surge
    } else if is_rolling_update(d) {
        max_surge(d)
    } else {
        return replicas;
    };
    let current = sum(all, |s| spec_replicas(s).max(actual(s)));
    let max_total = replicas.saturating_add(surge);
    if current >= max_total {
        return spec_replicas(new);
    }
    let room = (max_total - current).min(replicas - spec_replicas(new));
    spec_replicas(new) + room
}

/// The scale of the new set in this reconcile (`reconcileNewMachineSet`): `None` when it stays; `replicas` when
/// it is above that; otherwise [`new_set_replicas`] if that differs.
pub fn reconcile_new_set(d: &MachineDeployment, all: &[&MachineSet], new: &MachineSet) -> Option<i32> {
    let replicas = d.spec.replicas;
    let current = spec_replicas(new);
    if current == replicas {
        return None;
    }
    if current > replicas {
        return Some(replicas);
    }
    let target = new_set_replicas(d, all, new);
    (target != current).then_some(target)
}

/// A new `spec.replicas` for a MachineSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleTarget {
    /// The MachineSet.
    pub name: String,
    /// Its new `spec.replicas`.
    pub replicas: i32,
}

/// Scales old sets down during a rolling update (`reconcileOldMachineSets`): first their unhealthy machines
/// (`cleanupUnhealthyReplicas`, oldest set first), then available ones down to `replicas - maxUnavailable`
/// (`scaleDownOldMachineSetsForRollingUpdate`). Returns one target per set that changes.
///
/// An old set with more available machines than its spec (its surplus is still being deleted) stops the
/// scale-down for this pass, after the sets before it: MCM and Kubernetes treat that as an error and retry, which
/// keeps stale availability from being counted twice.
pub fn reconcile_old_sets(d: &MachineDeployment, all: &[&MachineSet], new: &MachineSet) -> Vec<ScaleTarget> {
    let new_name = set_name(new);
    let mut old: Vec<(&MachineSet, i32)> = all
        .iter()
        .copied()
        .filter(|s| set_name(s) != new_name && spec_replicas(s) > 0)
        .map(|s| (s, spec_replicas(s)))
        .collect();
    if old.is_empty() {
        return Vec::new();
    }
    old.sort_by(|a, b| by_creation(a.0, b.0));

    let min_available = d.spec.replicas - max_unavailable(d);
    let new_unavailable = spec_replicas(new) - available(new);
    let max_scaled_down = sum(all, spec_replicas) - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Vec::new();
    }

    let mut targets: Vec<ScaleTarget> = Vec::new();
    let record =
        |targets: &mut Vec<ScaleTarget>, name: &str, replicas: i32| match targets.iter_mut().find(|t| t.name == name) {
            Some(t) => t.replicas = replicas,
            None => targets.push(ScaleTarget { name: name.to_string(), replicas }),
        };

    // Unhealthy machines first: removing them does not lower availability.
    let mut cleaned = 0;
    for (set, spec) in old.iter_mut() {
        if cleaned >= max_scaled_down {
            break;
        }
        let unhealthy = *spec - available(set);
        if *spec == 0 || unhealthy == 0 {
            continue;
        }
        if unhealthy < 0 {
            return targets;
        }
        let n = unhealthy.min(max_scaled_down - cleaned);
        *spec -= n;
        cleaned += n;
        record(&mut targets, set_name(set), *spec);
    }

    // Then available machines, as far as maxUnavailable allows. Sets scaled to 0 above no longer count.
    let active_available =
        old.iter().filter(|(_, spec)| *spec > 0).fold(0i32, |acc, (s, _)| acc + available(s)) + available(new);
    if active_available <= min_available {
        return targets;
    }
    let to_scale_down = active_available - min_available;
    let mut scaled = 0;
    for (set, spec) in old.iter_mut() {
        if scaled >= to_scale_down {
            break;
        }
        if *spec == 0 {
            continue;
        }
        let n = (*spec).min(to_scale_down - scaled);
        *spec -= n;
        scaled += n;
        record(&mut targets, set_name(set), *spec);
    }
    targets
}

/// OnDelete: the old sets' new `spec.replicas` (core's `reconcileOldMachineSetsOnDelete`), with the new set at
/// `new_replicas`. First each old set follows the machines the user deleted (spec down to `status.replicas`, so a
/// deleted machine is not recreated there); then, oldest set first, as many as the total exceeds `replicas` by.
pub fn on_delete_old_sets(d: &MachineDeployment, old: &[&MachineSet], new_replicas: i32) -> Vec<ScaleTarget> {
    let mut old: Vec<(&MachineSet, i32)> =
        old.iter().copied().filter(|s| spec_replicas(s) > 0).map(|s| (s, spec_replicas(s))).collect();
    if old.is_empty() {
        return Vec::new();
    }
    old.sort_by(|a, b| by_creation(a.0, b.0));
    let total = old.iter().map(|(_, spec)| spec).sum::<i32>() + new_replicas;
    let mut excess = (total - d.spec.replicas).max(0);
    for (set, spec) in old.iter_mut() {
        let gone = (*spec - actual(set)).max(0);
        *spec -= gone;
        excess -= gone;
    }
    for (_, spec) in old.iter_mut() {
        if excess <= 0 {
            break;
        }
        let n = (*spec).min(excess);
        *spec -= n;
        excess -= n;
    }
    old.into_iter()
        .filter(|(set, spec)| *spec != spec_replicas(set))
        .map(|(set, spec)| ScaleTarget { name: set_name(set).to_string(), replicas: spec })
        .collect()
}

/// Recreate: the old sets that still have replicas, each scaled to 0.
pub fn recreate_scale_down(old: &[&MachineSet]) -> Vec<ScaleTarget> {
    old.iter()
        .filter(|s| spec_replicas(s) > 0)
        .map(|s| ScaleTarget { name: set_name(s).to_string(), replicas: 0 })
        .collect()
}

/// Whether old sets are fully scaled down (spec and status both 0). While they are not, a rollout is going on.
pub fn old_sets_at_zero(old: &[&MachineSet]) -> bool {
    old.iter().all(|s| spec_replicas(s) == 0 && actual(s) == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::machine_deployment::test_support::{deployment, ms, on_delete, recreate, rolling};

    fn ios(s: &str) -> IntOrString {
        if let Ok(i) = s.parse() { IntOrString::Int(i) } else { IntOrString::String(s.into()) }
    }

    #[test]
    fn on_delete_table() {
        // (case, replicas, old sets (name, created, spec, actual), new (spec, actual), new target, old targets)
        type Set = (&'static str, u32, i32, i32);
        type Case = (&'static str, i32, Vec<Set>, (i32, i32), i32, Vec<(&'static str, i32)>);
        let cases: [Case; 6] = [
            ("template changed: nothing moves", 3, vec![("old", 1, 3, 3)], (0, 0), 0, vec![]),
            (
                "one old machine deleted: the old set follows first",
                3,
                vec![("old", 1, 3, 2)],
                (0, 0),
                0,
                vec![("old", 2)],
            ),
            ("then the new set fills the room", 3, vec![("old", 1, 2, 2)], (0, 0), 1, vec![]),
            ("filled already", 3, vec![("old", 1, 2, 2)], (1, 1), 1, vec![]),
            (
                "scaled down: the oldest set gives first",
                2,
                vec![("a", 1, 2, 2), ("b", 2, 1, 1)],
                (1, 1),
                1,
                vec![("a", 0)],
            ),
            ("all old deleted: old to 0 first", 2, vec![("old", 1, 1, 0)], (1, 1), 1, vec![("old", 0)]),
        ];
        for (case, replicas, old, (new_spec, new_actual), new_target, old_targets) in cases {
            let d = deployment("d", replicas, on_delete());
            let old: Vec<MachineSet> = old.iter().map(|(n, c, s, a)| ms(n, *c, *s, *a, *a)).collect();
            let new = ms("new", 9, new_spec, new_actual, new_actual);
            let mut all: Vec<&MachineSet> = old.iter().collect();
            all.push(&new);
            assert_eq!(new_set_replicas(&d, &all, &new), new_target, "{case}: new");
            let old_refs: Vec<&MachineSet> = old.iter().collect();
            let expected: Vec<ScaleTarget> =
                old_targets.iter().map(|(n, r)| ScaleTarget { name: n.to_string(), replicas: *r }).collect();
            assert_eq!(on_delete_old_sets(&d, &old_refs, new_target), expected, "{case}: old");
        }
        assert!(is_on_delete(&deployment("d", 1, on_delete())) && !is_on_delete(&deployment("d", 1, recreate())));
    }

    #[test]
    fn fenceposts_table() {
        // (name, maxSurge, maxUnavailable, replicas, surge, unavailable)
        let cases = [
            ("absolute", "3", "2", 10, 3, 2),
            ("25% of 10: surge rounds up to 3, unavailable down to 2", "25%", "25%", 10, 3, 2),
            ("both zero: unavailable becomes 1", "0", "0", 10, 0, 1),
            ("both zero percent: unavailable becomes 1", "0%", "0%", 10, 0, 1),
            ("1% of 2: surge 1, unavailable 0", "1%", "1%", 2, 1, 0),
            ("0% surge, 1% unavailable of 2: both zero, unavailable 1", "0%", "1%", 2, 0, 1),
            ("100% of 3", "100%", "100%", 3, 3, 3),
            ("more than 100%", "200%", "0", 3, 6, 0),
            ("zero replicas, percentages: both zero, unavailable 1 (capped later)", "25%", "25%", 0, 0, 1),
            ("zero replicas, absolute surge stays", "2", "0", 0, 2, 0),
            ("an absolute unavailable above replicas is not capped here", "0", "5", 3, 0, 5),
            ("invalid values count as zero", "x", "-1", 10, 0, 1),
        ];
        for (name, surge, unav, replicas, want_surge, want_unav) in cases {
            let f = resolve_fenceposts(Some(&ios(surge)), Some(&ios(unav)), replicas);
            assert_eq!((f.max_surge, f.max_unavailable), (want_surge, want_unav), "{name}");
        }
        assert_eq!(resolve_fenceposts(None, None, 5), Fenceposts { max_surge: 0, max_unavailable: 1 });
    }

    #[test]
    fn int_or_percent_parsing_table() {
        let cases = [
            (ios("3"), Some(IntOrPercent::Int(3))),
            (ios("0"), Some(IntOrPercent::Int(0))),
            (ios("-1"), None),
            (ios("25%"), Some(IntOrPercent::Percent(25))),
            (ios("150%"), Some(IntOrPercent::Percent(150))),
            (IntOrString::String("3".into()), None),
            (ios("-5%"), None),
            (ios("2.5%"), None),
            (ios("%"), None),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_int_or_percent(&input), expected, "{input:?}");
        }
    }

    #[test]
    fn max_surge_and_unavailable_table() {
        // (name, deployment, surge, unavailable)
        let cases = [
            ("rolling 25% of 10", deployment("d", 10, rolling("25%", "25%")), 3, 2),
            ("rolling, unavailable capped at replicas", deployment("d", 3, rolling("0", "5")), 0, 3),
            ("rolling, zero replicas: no unavailable", deployment("d", 0, rolling("1", "1")), 1, 0),
            ("rolling, both zero", deployment("d", 4, rolling("0", "0")), 0, 1),
            ("recreate: neither", deployment("d", 10, recreate()), 0, 0),
        ];
        for (name, d, surge, unav) in cases {
            assert_eq!((max_surge(&d), max_unavailable(&d)), (surge, unav), "{name}");
        }
    }

    #[test]
    fn new_set_replicas_table() {
        // (name, deployment, old (spec, status), new (spec, status), expected)
        type Row = (&'static str, MachineDeployment, Vec<(i32, i32)>, (i32, i32), i32);
        let cases: Vec<Row> = vec![
            (
                "fresh rollout: surge worth of new machines",
                deployment("d", 10, rolling("3", "2")),
                vec![(10, 10)],
                (0, 0),
                3,
            ),
            ("25% of 10: surge 3", deployment("d", 10, rolling("25%", "25%")), vec![(10, 10)], (0, 0), 3),
            (
                "no room: machines at replicas + surge",
                deployment("d", 10, rolling("3", "2")),
                vec![(10, 10)],
                (3, 3),
                3,
            ),
            (
                "terminating old machines hold the surge",
                deployment("d", 10, rolling("3", "2")),
                vec![(8, 10)],
                (3, 3),
                3,
            ),
            (
                "machines the new set has not made yet count (MCM would surge to 6)",
                deployment("d", 10, rolling("3", "2")),
                vec![(10, 10)],
                (3, 0),
                3,
            ),
            ("room as old machines go", deployment("d", 10, rolling("3", "2")), vec![(5, 5)], (3, 3), 8),
            ("never above replicas", deployment("d", 3, rolling("5", "0")), vec![(1, 1)], (2, 2), 3),
            ("surge 0: wait for old machines to go", deployment("d", 3, rolling("0", "1")), vec![(3, 3)], (0, 0), 0),
            ("surge 0, one old gone", deployment("d", 3, rolling("0", "1")), vec![(2, 2)], (0, 0), 1),
            ("recreate: replicas outright", deployment("d", 5, recreate()), vec![(5, 5)], (0, 0), 5),
        ];
        for (name, d, old, (new_spec, new_actual), expected) in cases {
            let old: Vec<MachineSet> =
                old.iter().enumerate().map(|(i, (s, a))| ms(&format!("old{i}"), i as u32, *s, *a, *a)).collect();
            let new = ms("new", 50, new_spec, new_actual, new_actual);
            let mut all: Vec<&MachineSet> = old.iter().collect();
            all.push(&new);
            assert_eq!(new_set_replicas(&d, &all, &new), expected, "{name}");
        }
    }

    #[test]
    fn reconcile_new_set_table() {
        let d = deployment("d", 5, rolling("1", "0"));
        // (name, old spec/actual, new spec, expected)
        let cases = [
            ("at replicas: nothing", (0, 0), 5, None),
            ("above replicas: down to replicas", (0, 0), 7, Some(5)),
            ("room for one more", (4, 4), 1, Some(2)),
            ("no room: nothing", (5, 5), 1, None),
        ];
        for (name, (old_spec, old_actual), new_spec, expected) in cases {
            let old = ms("old", 0, old_spec, old_actual, old_actual);
            let new = ms("new", 1, new_spec, new_spec, new_spec);
            assert_eq!(reconcile_new_set(&d, &[&old, &new], &new), expected, "{name}");
        }
    }

    /// (name, replicas, maxSurge, maxUnavailable, old sets (spec, available), new (spec, available), targets)
    type OldRow =
        (&'static str, i32, &'static str, &'static str, Vec<(i32, i32)>, (i32, i32), Vec<(&'static str, i32)>);

    #[test]
    fn reconcile_old_sets_table() {
        let cases: Vec<OldRow> = vec![
            ("no old sets with replicas", 3, "1", "0", vec![(0, 0)], (3, 3), vec![]),
            ("new set not available yet, maxUnavailable 0: nothing", 3, "1", "0", vec![(3, 3)], (1, 0), vec![]),
            ("new machine available: one old goes", 3, "1", "0", vec![(3, 3)], (1, 1), vec![("old0", 2)]),
            (
                "maxUnavailable lets old go before the new set is available",
                3,
                "0",
                "1",
                vec![(3, 3)],
                (0, 0),
                vec![("old0", 2)],
            ),
            (
                "unhealthy old machines go first, without touching availability",
                10,
                "3",
                "2",
                vec![(10, 7)],
                (3, 0),
                vec![("old0", 8)],
            ),
            (
                "k8s case 1: a crashlooping new set blocks the old scale-down",
                10,
                "3",
                "2",
                vec![(8, 8)],
                (5, 0),
                vec![],
            ),
            (
                "k8s case 2: roll over: two old sets scaled down by 5, oldest first",
                10,
                "3",
                "2",
                vec![(5, 5), (8, 8)],
                (0, 0),
                vec![("old0", 0)],
            ),
            ("oldest set first for available machines", 4, "0", "2", vec![(2, 2), (2, 2)], (0, 0), vec![("old0", 0)]),
            ("cleanup is bounded by maxScaledDown", 4, "0", "1", vec![(4, 1)], (0, 0), vec![("old0", 3)]),
            (
                "cleanup of several old sets, then availability decides",
                6,
                "0",
                "2",
                vec![(3, 2), (3, 3)],
                (0, 0),
                vec![("old0", 1)],
            ),
            ("an old set with more available than spec stops the pass", 3, "1", "0", vec![(1, 3)], (3, 3), vec![]),
        ];
        for (name, replicas, surge, unav, old, (new_spec, new_avail), expected) in cases {
            let d = deployment("d", replicas, rolling(surge, unav));
            let old: Vec<MachineSet> =
                old.iter().enumerate().map(|(i, (s, a))| ms(&format!("old{i}"), i as u32, *s, *s, *a)).collect();
            let new = ms("new", 50, new_spec, new_spec, new_avail);
            let mut all: Vec<&MachineSet> = old.iter().collect();
            all.push(&new);
            let got: Vec<(String, i32)> =
                reconcile_old_sets(&d, &all, &new).into_iter().map(|t| (t.name, t.replicas)).collect();
            let expected: Vec<(String, i32)> = expected.into_iter().map(|(n, r)| (n.to_string(), r)).collect();
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn rolling_update_walkthrough_25_percent_of_10() {
        // Simulates reconciles with machines becoming available instantly: the rollout never has more than 13
        // machines nor fewer than 8 available, and ends with 10 new ones.
        let d = deployment("d", 10, rolling("25%", "25%"));
        let (mut old, mut new) = (10, 0);
        let mut steps = Vec::new();
        for _ in 0..20 {
            let old_set = ms("old", 0, old, old, old);
            let new_set = ms("new", 1, new, new, new);
            let all = [&old_set, &new_set];
            if let Some(target) = reconcile_new_set(&d, &all, &new_set) {
                new = target;
                steps.push(format!("new->{new}"));
            } else if let Some(t) = reconcile_old_sets(&d, &all, &new_set).first() {
                old = t.replicas;
                steps.push(format!("old->{old}"));
            } else {
                break;
            }
            assert!(old + new <= 13 && old + new >= 8, "{steps:?}");
        }
        assert_eq!((old, new), (0, 10), "{steps:?}");
        assert_eq!(steps, ["new->3", "old->5", "new->8", "old->0", "new->10"]);
    }

    #[test]
    fn recreate_and_zero_checks() {
        let a = ms("a", 0, 3, 3, 3);
        let b = ms("b", 1, 0, 2, 0);
        let c = ms("c", 2, 0, 0, 0);
        assert_eq!(recreate_scale_down(&[&a, &b, &c]), vec![ScaleTarget { name: "a".into(), replicas: 0 }]);
        assert!(!old_sets_at_zero(&[&b, &c]), "b still has machines");
        assert!(old_sets_at_zero(&[&c]));
        assert!(old_sets_at_zero(&[]));
    }
}
