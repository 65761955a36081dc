//! Scaling a MachineDeployment whose sets already exist (`docs/machine-lifecycle.md` "Scaling, including proportional
//! scaling"; item 6, MCM #754).
//!
//! - One active set (or none): it takes all replicas.
//! - A saturated new set: old sets go to 0.
//! - During a rolling update, with `allowed = replicas + maxSurge` (0 when replicas is 0) and
//!   `toAdd = allowed − Σspec`: **scale-out goes to the new set only** (MCM #754: Kubernetes would spread it over
//!   old sets, which then roll again); **scale-in is proportional**: sets are taken largest first (then oldest),
//!   each gets `round(spec × allowed / max-replicas annotation) − spec`, never removing more than is left to
//!   remove, and whatever rounding leaves over goes to the largest set (floored at 0).
//!
//! Worked example: sets of 6 (old) and 4 (new), both annotated `max-replicas: 10`, scaled to 5 with
//! `maxSurge: 0`: toAdd = 5 − 10 = −5; old: round(6 × 5 / 10) − 6 = −3; new: round(4 × 5 / 10) − 4 = −2;
//! result 3 and 2.

use super::rollout::{ScaleTarget, is_rolling_update, max_surge};
use super::{available, by_creation, set_name, spec_replicas, sum};
use crate::api::mcm::names::{DESIRED_REPLICAS, MAX_REPLICAS};
use crate::api::mcm::{MachineDeployment, MachineSet};
use crate::lifecycle::object_meta::annotation;

/// An integer annotation as MCM reads it (`strconv.Atoi`); anything else is absent.
pub(crate) fn int_annotation(set: &MachineSet, key: &str) -> Option<i32> {
    annotation(&set.metadata, key).and_then(|v| v.parse().ok())
}

fn active<'a>(sets: impl IntoIterator<Item = &'a MachineSet>) -> Vec<&'a MachineSet> {
    sets.into_iter().filter(|s| spec_replicas(s) > 0).collect()
}

/// Whether the deployment's replicas changed since its sets were last scaled: an active set's
/// `desired-replicas` annotation differs from `spec.replicas`, or no set is active while replicas > 0. Without a
/// new set it is never a scaling event (the rollout creates one first).
pub fn is_scaling_event(d: &MachineDeployment, new: Option<&MachineSet>, old: &[&MachineSet]) -> bool {
    let Some(new) = new else {
        return false;
    };
    let all = active(old.iter().copied().chain(std::iter::once(new)));
    if all.is_empty() {
        return d.spec.replicas > 0;
    }
    all.iter().any(|s| int_annotation(s, DESIRED_REPLICAS).is_some_and(|desired| desired != d.spec.replicas))
}

/// The set that takes all replicas when at most one set is active: the active one, or with none active the new
/// set, else the newest old one. `None` when several sets are active.
pub fn active_or_latest<'a>(new: Option<&'a MachineSet>, old: &[&'a MachineSet]) -> Option<&'a MachineSet> {
    let mut newest_first: Vec<&MachineSet> = old.to_vec();
    newest_first.sort_by(|a, b| by_creation(b, a));
    let all = active(newest_first.iter().copied().chain(new));
    match all.len() {
        0 => new.or(newest_first.first().copied()),
        1 => all.first().copied(),
        _ => None,
    }
}

/// A new set is saturated when its spec, its `desired-replicas` annotation and its available machines all equal
/// the deployment's replicas.
pub fn is_saturated(d: &MachineDeployment, set: &MachineSet) -> bool {
    let replicas = d.spec.replicas;
    spec_replicas(set) == replicas
        && int_annotation(set, DESIRED_REPLICAS) == Some(replicas)
        && available(set) == replicas
}

/// `scale()`: the sets to (re)scale for a scaling event or a paused deployment. Every returned set also gets its
/// `desired-replicas` / `max-replicas` annotations refreshed, even if its size stays.
pub fn scale(d: &MachineDeployment, new: Option<&MachineSet>, old: &[&MachineSet]) -> Vec<ScaleTarget> {
    let target = |s: &MachineSet, replicas: i32| ScaleTarget { name: set_name(s).to_string(), replicas };
    if let Some(only) = active_or_latest(new, old) {
        // Also when the size is right: the desired-replicas annotation may be stale (MCM #815).
        return vec![target(only, d.spec.replicas)];
    }
    if let Some(new) = new.filter(|n| is_saturated(d, n)) {
        return active(old.iter().copied())
            .into_iter()
            .filter(|s| set_name(s) != set_name(new))
            .map(|s| target(s, 0))
            .collect();
    }
    if !is_rolling_update(d) {
        return Vec::new();
    }

    // Old sets newest first, then the new one: the order MCM leaves its list in before filtering.
    let mut newest_first: Vec<&MachineSet> = old.to_vec();
    newest_first.sort_by(|a, b| by_creation(b, a));
    let mut all = active(newest_first.into_iter().chain(new));
    let allowed = if d.spec.replicas > 0 { d.spec.replicas.saturating_add(max_surge(d)) } else { 0 };
    let to_add = allowed - sum(&all, spec_replicas);

    let mut sizes: Vec<i32> = all.iter().map(|s| spec_replicas(s)).collect();
    let added = if to_add >= 0 {
        // Scale-out: only the new set grows (MCM #754).
        if let Some(i) = new.and_then(|n| all.iter().position(|s| set_name(s) == set_name(n))) {
            sizes[i] += to_add;
        }
        to_add
    } else {
        let mut order: Vec<usize> = (0..all.len()).collect();
        order.sort_by(|&a, &b| {
            spec_replicas(all[b]).cmp(&spec_replicas(all[a])).then_with(|| by_creation(all[a], all[b]))
        });
        all = order.iter().map(|&i| all[i]).collect();
        sizes = all.iter().map(|s| spec_replicas(s)).collect();
        let mut added = 0;
        for (i, set) in all.iter().enumerate() {
            let p = proportion(d, set, to_add, added);
            sizes[i] += p;
            added += p;
        }
        added
    };
    if to_add != 0 && !sizes.is_empty() {
        sizes[0] = (sizes[0] + to_add - added).max(0);
    }
    all.iter().zip(sizes).map(|(s, n)| target(s, n)).collect()
}

/// The share of `to_add` (negative: removal) a set takes, bounded by what is left (`to_add − added`).
pub fn proportion(d: &MachineDeployment, set: &MachineSet, to_add: i32, added: i32) -> i32 {
    if spec_replicas(set) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = fraction(d, set);
    let allowed = to_add - added;
    if to_add > 0 { fraction.min(allowed) } else { fraction.max(allowed) }
}

/// `round(spec × (replicas + maxSurge) / max-replicas annotation) − spec`; the annotation falls back to the
/// deployment's `status.replicas`. Scaling to 0 removes the whole set. A base of 0 (MCM would divide by zero)
/// gives no share: the leftover step then settles the difference on the largest set.
fn fraction(d: &MachineDeployment, set: &MachineSet) -> i32 {
    let spec = spec_replicas(set);
    if d.spec.replicas == 0 {
        return -spec;
    }
    let target = i64::from(d.spec.replicas) + i64::from(max_surge(d));
    let base = int_annotation(set, MAX_REPLICAS).unwrap_or_else(|| d.status.as_ref().map_or(0, |s| s.replicas));
    if base <= 0 {
        return 0;
    }
    // Half rounds up, as Go's RoundToInt32 (floor(x + 0.5)).
    let numerator = 2 * i64::from(spec) * target + i64::from(base);
    let new_size = numerator.div_euclid(2 * i64::from(base));
    i32::try_from(new_size).unwrap_or(i32::MAX) - spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::machine_deployment::test_support::{SetExt, deployment, ms, recreate, rolling};

    #[test]
    fn scaling_event_table() {
        // (name, replicas, new (spec, desired annotation), old (spec, desired annotation), expected)
        type Row = (&'static str, i32, Option<(i32, Option<i32>)>, Vec<(i32, Option<i32>)>, bool);
        let cases: Vec<Row> = vec![
            ("no new set: never", 5, None, vec![(3, Some(3))], false),
            ("annotations agree", 3, Some((3, Some(3))), vec![], false),
            ("replicas changed", 5, Some((3, Some(3))), vec![], true),
            ("an old active set disagrees", 5, Some((2, Some(5))), vec![(3, Some(4))], true),
            ("inactive sets are not asked", 5, Some((5, Some(5))), vec![(0, Some(1))], false),
            ("no annotation: not a scaling event", 5, Some((3, None)), vec![], false),
            ("scale from zero: nothing active, replicas > 0", 2, Some((0, Some(0))), vec![(0, None)], true),
            ("nothing active, replicas 0", 0, Some((0, Some(0))), vec![], false),
        ];
        for (name, replicas, new, old, expected) in cases {
            let d = deployment("d", replicas, rolling("1", "0"));
            let annotate = |s: MachineSet, desired: Option<i32>| match desired {
                Some(v) => s.annotate(DESIRED_REPLICAS, &v.to_string()),
                None => s,
            };
            let new = new.map(|(spec, desired)| annotate(ms("new", 9, spec, spec, spec), desired));
            let old: Vec<MachineSet> = old
                .into_iter()
                .enumerate()
                .map(|(i, (spec, desired))| annotate(ms(&format!("old{i}"), i as u32, spec, spec, spec), desired))
                .collect();
            let old_refs: Vec<&MachineSet> = old.iter().collect();
            assert_eq!(is_scaling_event(&d, new.as_ref(), &old_refs), expected, "{name}");
        }
    }

    #[test]
    fn active_or_latest_table() {
        let a = ms("a", 0, 0, 0, 0);
        let b = ms("b", 5, 0, 0, 0);
        let c = ms("c", 3, 2, 2, 2);
        let n = ms("n", 9, 0, 0, 0);
        let n_active = ms("n", 9, 1, 1, 1);
        type Row<'a> = (&'a str, Option<&'a MachineSet>, Vec<&'a MachineSet>, Option<&'a str>);
        let cases: Vec<Row> = vec![
            ("nothing at all", None, vec![], None),
            ("none active: the new set", Some(&n), vec![&a, &b], Some("n")),
            ("none active, no new set: the newest old", None, vec![&a, &b], Some("b")),
            ("one active old", Some(&n), vec![&a, &c], Some("c")),
            ("only the new set active", Some(&n_active), vec![&a], Some("n")),
            ("two active: none", Some(&n_active), vec![&c], None),
        ];
        for (name, new, old, expected) in cases {
            assert_eq!(active_or_latest(new, &old).map(set_name), expected, "{name}");
        }
    }

    #[test]
    fn saturation_table() {
        let d = deployment("d", 3, rolling("1", "0"));
        let cases = [
            ("everything agrees", ms("n", 0, 3, 3, 3).replicas_annotations(3, 4), true),
            ("not all available", ms("n", 0, 3, 3, 2).replicas_annotations(3, 4), false),
            ("stale desired annotation", ms("n", 0, 3, 3, 3).replicas_annotations(2, 3), false),
            ("no annotation", ms("n", 0, 3, 3, 3), false),
            ("spec differs", ms("n", 0, 2, 3, 3).replicas_annotations(3, 4), false),
        ];
        for (name, set, expected) in cases {
            assert_eq!(is_saturated(&d, &set), expected, "{name}");
        }
    }

    /// (name, deployment, new (created, spec, available, max annotation), old sets (created, spec, max annotation),
    /// expected targets)
    type ScaleRow = (
        &'static str,
        MachineDeployment,
        Option<(u32, i32, i32, Option<i32>)>,
        Vec<(u32, i32, Option<i32>)>,
        Vec<(&'static str, i32)>,
    );

    #[test]
    fn scale_table() {
        let cases: Vec<ScaleRow> = vec![
            ("no sets: nothing", deployment("d", 3, rolling("1", "0")), None, vec![], vec![]),
            (
                "one active set takes all",
                deployment("d", 5, rolling("1", "0")),
                Some((9, 3, 3, Some(4))),
                vec![(0, 0, None)],
                vec![("new", 5)],
            ),
            (
                "right size: refreshed anyway (MCM #815)",
                deployment("d", 3, rolling("1", "0")),
                Some((9, 3, 3, Some(4))),
                vec![],
                vec![("new", 3)],
            ),
            (
                "scale from zero: the new set",
                deployment("d", 2, rolling("1", "0")),
                Some((9, 0, 0, None)),
                vec![(0, 0, None)],
                vec![("new", 2)],
            ),
            (
                "paused without a new set: the newest old set",
                deployment("d", 4, rolling("1", "0")),
                None,
                vec![(0, 0, None), (5, 0, None)],
                vec![("old1", 4)],
            ),
            (
                "MCM #754: scale-out during a rollout goes to the new set only",
                deployment("d", 10, rolling("1", "0")),
                Some((9, 2, 2, Some(6))),
                vec![(0, 4, Some(6))],
                vec![("old0", 4), ("new", 7)],
            ),
            (
                "scale-out with surge: allowed = replicas + surge",
                deployment("d", 8, rolling("2", "0")),
                Some((9, 1, 1, Some(6))),
                vec![(0, 5, Some(6))],
                vec![("old0", 5), ("new", 5)],
            ),
            (
                "proportional scale-in, worked example: 6 + 4 to 5",
                deployment("d", 5, rolling("0", "1")),
                Some((9, 4, 4, Some(10))),
                vec![(0, 6, Some(10))],
                vec![("old0", 3), ("new", 2)],
            ),
            (
                "proportional scale-in with a leftover to the largest set",
                deployment("d", 5, rolling("0", "1")),
                Some((9, 3, 3, Some(9))),
                vec![(0, 3, Some(9)), (1, 3, Some(9))],
                // toAdd −4; each set round(3×5/9)=2, i.e. −1: −3 in all, the last −1 goes to the largest (oldest of
                // equals).
                vec![("old0", 1), ("old1", 2), ("new", 2)],
            ),
            (
                "scale-in to zero removes everything",
                deployment("d", 0, rolling("1", "0")),
                Some((9, 2, 2, Some(4))),
                vec![(0, 2, Some(4))],
                vec![("old0", 0), ("new", 0)],
            ),
            (
                "no max-replicas annotation: the deployment's status.replicas (10) is the base",
                deployment("d", 5, rolling("0", "1")),
                Some((9, 4, 4, None)),
                vec![(0, 6, None)],
                vec![("old0", 3), ("new", 2)],
            ),
            (
                "a base of 0 gives no share; the largest set takes the difference",
                deployment("d", 5, rolling("0", "1")),
                Some((9, 4, 4, Some(0))),
                vec![(0, 6, Some(0))],
                vec![("old0", 1), ("new", 4)],
            ),
            (
                "the largest set is scaled first, then the older among equals",
                deployment("d", 6, rolling("0", "1")),
                Some((9, 2, 2, Some(9))),
                vec![(0, 3, Some(9)), (1, 4, Some(9))],
                vec![("old1", 3), ("old0", 2), ("new", 1)],
            ),
            (
                "saturated new set: old sets go to 0",
                deployment("d", 3, rolling("1", "0")),
                Some((9, 3, 3, Some(4))),
                vec![(0, 2, Some(4))],
                vec![("old0", 0)],
            ),
            (
                "recreate with several active sets: nothing",
                deployment("d", 3, recreate()),
                Some((9, 1, 1, None)),
                vec![(0, 2, None)],
                vec![],
            ),
        ];
        for (name, mut d, new, old, expected) in cases {
            d.status.get_or_insert_with(Default::default).replicas = 10;
            let with_max = |s: MachineSet, max: Option<i32>| match max {
                Some(m) => s.annotate(MAX_REPLICAS, &m.to_string()),
                None => s,
            };
            let desired = d.spec.replicas;
            let new = new.map(|(created, spec, avail, max)| {
                with_max(ms("new", created, spec, spec, avail), max).annotate(DESIRED_REPLICAS, &desired.to_string())
            });
            let old: Vec<MachineSet> = old
                .into_iter()
                .enumerate()
                .map(|(i, (created, spec, max))| with_max(ms(&format!("old{i}"), created, spec, spec, spec), max))
                .collect();
            let old_refs: Vec<&MachineSet> = old.iter().collect();
            let got: Vec<(String, i32)> =
                scale(&d, new.as_ref(), &old_refs).into_iter().map(|t| (t.name, t.replicas)).collect();
            let expected: Vec<(String, i32)> = expected.into_iter().map(|(n, r)| (n.to_string(), r)).collect();
            assert_eq!(got, expected, "{name}");
        }
    }
}
