//! Revisions, annotation copying, rollback and history cleanup (`docs/machine-lifecycle.md` "Annotations written by
//! this controller", "Rollback", `cleanupMachineDeployment`).
//!
//! - The new set's revision is one more than the highest revision among the old sets; it only ever goes up, and
//!   when it does on a set that already had one (a rollback to it), the old number is appended to
//!   `revision-history`.
//! - Deployment annotations are copied to the new set, except the skip list.
//! - Rollback to revision 0 means the previous revision.
//! - History cleanup deletes the oldest old sets beyond `revisionHistoryLimit`, and only drained ones.

use std::collections::BTreeMap;

use super::template::equal_ignore_hash;
use super::{actual, by_creation, set_name, spec_replicas};
use crate::api::mcm::names::TRIGGER_DELETION_BY_MCM;
use crate::api::mcm::names::UNFREEZE;
use crate::api::mcm::names::{
    DESIRED_REPLICAS, LAST_APPLIED_CONFIGURATION, MAX_REPLICAS, PREFER_NO_SCHEDULE, REVISION, REVISION_HISTORY,
    TEMPLATE_HASH_LABEL,
};
use crate::api::mcm::{MachineDeployment, MachineSet, MachineTemplateSpec};
use crate::lifecycle::object_meta::{annotation, set_annotation};

/// Deployment annotations never copied to MachineSets (nor back on rollback).
pub const ANNOTATIONS_NOT_COPIED: [&str; 8] = [
    LAST_APPLIED_CONFIGURATION,
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    PREFER_NO_SCHEDULE,
    UNFREEZE,
    TRIGGER_DELETION_BY_MCM,
];

/// The conversion annotations of the CAPI flavour (`src/convert`): each object carries its own.
const CONVERSION_ANNOTATIONS: [&str; 2] =
    ["capi.machine.sapcloud.io/conversion-data", "machine.sapcloud.io/conversion-data"];

/// Whether annotation `key` stays on the deployment.
pub fn skip_copy(key: &str) -> bool {
    ANNOTATIONS_NOT_COPIED.contains(&key) || CONVERSION_ANNOTATIONS.contains(&key)
}

/// The revision of a set: 0 without the annotation, `None` when it is not a number (such sets are skipped).
pub fn revision(set: &MachineSet) -> Option<i64> {
    match annotation(&set.metadata, REVISION) {
        None => Some(0),
        Some(v) => v.parse().ok(),
    }
}

/// The highest revision among `sets` (0 if none).
pub fn max_revision(sets: &[&MachineSet]) -> i64 {
    sets.iter().filter_map(|s| revision(s)).max().unwrap_or(0).max(0)
}

/// The second-highest revision among `sets`: the revision before the current one.
pub fn last_revision(sets: &[&MachineSet]) -> i64 {
    let (mut max, mut second) = (0i64, 0i64);
    for v in sets.iter().filter_map(|s| revision(s)) {
        if v >= max {
            second = max;
            max = v;
        } else if v > second {
            second = v;
        }
    }
    second
}

/// Copies the deployment's annotations (except the skip list) onto `set`; returns whether any changed.
pub fn copy_deployment_annotations(d: &MachineDeployment, set: &mut MachineSet) -> bool {
    let mut changed = false;
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if !skip_copy(k) {
            changed |= set_annotation(&mut set.metadata, k, Some(v));
        }
    }
    changed
}

/// Sets `desired-replicas` and `max-replicas`; returns whether either changed.
pub fn set_replicas_annotations(set: &mut MachineSet, desired: i32, max: i32) -> bool {
    let a = set_annotation(&mut set.metadata, DESIRED_REPLICAS, Some(&desired.to_string()));
    let b = set_annotation(&mut set.metadata, MAX_REPLICAS, Some(&max.to_string()));
    a || b
}

/// Brings the new set's annotations up to date (`SetNewMachineSetAnnotations`): copies the deployment's, raises
/// the revision to `new_revision` if it is lower (recording the old one in `revision-history`). Returns whether
/// anything changed.
///
/// MCM also appends to the history when only a copied annotation changed; we append only when the revision
/// actually moves, so the history lists revisions the set really served.
pub fn sync_new_set_annotations(d: &MachineDeployment, set: &mut MachineSet, new_revision: i64) -> bool {
    let mut changed = copy_deployment_annotations(d, set);
    let old = annotation(&set.metadata, REVISION).map(str::to_string);
    let old_number = match old.as_deref() {
        None | Some("") => 0,
        Some(v) => match v.parse::<i64>() {
            Ok(n) => n,
            // Not a number: leave the revision alone rather than guess.
            Err(_) => return changed,
        },
    };
    if old_number < new_revision {
        set_annotation(&mut set.metadata, REVISION, Some(&new_revision.to_string()));
        changed = true;
        if let Some(old) = old.filter(|o| !o.is_empty()) {
            let history = match annotation(&set.metadata, REVISION_HISTORY) {
                Some(h) if !h.is_empty() => format!("{h},{old}"),
                _ => old,
            };
            set_annotation(&mut set.metadata, REVISION_HISTORY, Some(&history));
        }
    }
    changed
}

/// Annotations of a set about to be created: the deployment's (except the skip list), the revision and the
/// replica annotations.
pub fn new_set_annotations(d: &MachineDeployment, revision: i64, desired: i32, max: i32) -> BTreeMap<String, String> {
    let mut annotations: BTreeMap<String, String> = d
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !skip_copy(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.insert(REVISION.into(), revision.to_string());
    annotations.insert(DESIRED_REPLICAS.into(), desired.to_string());
    annotations.insert(MAX_REPLICAS.into(), max.to_string());
    annotations
}

/// The old sets to delete to keep `revisionHistoryLimit` of them (`cleanupMachineDeployment`): of the old sets
/// not being deleted, the oldest beyond the limit, and of those only the drained ones (spec and status 0, latest
/// generation observed). Without a limit, none.
pub fn history_cleanup(d: &MachineDeployment, old: &[&MachineSet]) -> Vec<String> {
    let Some(limit) = d.spec.revision_history_limit else {
        return Vec::new();
    };
    let mut alive: Vec<&MachineSet> = old.iter().copied().filter(|s| s.metadata.deletion_timestamp.is_none()).collect();
    let excess = usize::try_from(i64::try_from(alive.len()).unwrap_or(i64::MAX) - i64::from(limit)).unwrap_or(0);
    alive.sort_by(|a, b| by_creation(a, b));
    alive
        .into_iter()
        .take(excess)
        .filter(|s| {
            let observed = s.status.as_ref().and_then(|st| st.observed_generation).unwrap_or(0);
            actual(s) == 0 && spec_replicas(s) == 0 && s.metadata.generation.unwrap_or(0) <= observed
        })
        .map(|s| set_name(s).to_string())
        .collect()
}

/// The outcome of a rollback request (`spec.rollbackTo`). `rollbackTo` is cleared in every case.
#[derive(Clone, Debug, PartialEq)]
pub enum Rollback {
    /// No set has the revision (or there is no previous revision): warning `DeploymentRollbackRevisionNotFound`.
    RevisionNotFound {
        /// The event note.
        message: String,
    },
    /// The set with the revision has the deployment's template already: warning
    /// `DeploymentRollbackTemplateUnchanged`.
    TemplateUnchanged {
        /// The set of that revision (its nodes lose the PreferNoSchedule taint).
        set: String,
    },
    /// Copy the set's template and annotations to the deployment: event `DeploymentRollback`.
    RollBack {
        /// The revision rolled back to.
        revision: i64,
        /// The set of that revision (its nodes lose the PreferNoSchedule taint).
        set: String,
        /// The deployment's new template (the set's, without the hash label).
        template: Box<MachineTemplateSpec>,
        /// The deployment's new annotations: its own skipped ones plus the set's others.
        annotations: BTreeMap<String, String>,
    },
}

/// Decides a rollback to `to_revision` over all the deployment's sets. `new_set_exists` says whether a set with
/// the deployment's current template exists: without one, the current template counts as a revision of its own
/// (MCM creates its set before rolling back), so "the previous revision" is the highest existing one.
pub fn plan_rollback(d: &MachineDeployment, sets: &[&MachineSet], to_revision: i64, new_set_exists: bool) -> Rollback {
    let mut target = to_revision;
    if target == 0 {
        target = if new_set_exists { last_revision(sets) } else { max_revision(sets) };
        if target == 0 {
            return Rollback::RevisionNotFound { message: "Unable to find last revision.".into() };
        }
    }
    let Some(set) = sets.iter().find(|s| revision(s) == Some(target)) else {
        return Rollback::RevisionNotFound { message: "Unable to find the revision to rollback to.".into() };
    };
    let name = set_name(set).to_string();
    let Some(template) = set.spec.template.as_ref() else {
        return Rollback::RevisionNotFound { message: "Unable to find the revision to rollback to.".into() };
    };
    if equal_ignore_hash(&d.spec.template, template) {
        return Rollback::TemplateUnchanged { set: name };
    }
    let mut template = template.clone();
    if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(TEMPLATE_HASH_LABEL);
    }
    let mut annotations: BTreeMap<String, String> = d
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| skip_copy(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in set.metadata.annotations.iter().flatten() {
        if !skip_copy(k) {
            annotations.insert(k.clone(), v.clone());
        }
    }
    Rollback::RollBack { revision: target, set: name, template: Box::new(template), annotations }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::lifecycle::machine_deployment::test_support::{SetExt, deployment, map, ms, now, rolling};

    #[test]
    fn revision_numbers_table() {
        let cases: Vec<(&str, Vec<MachineSet>, i64, i64)> = vec![
            ("no sets", vec![], 0, 0),
            ("one set", vec![ms("a", 0, 1, 1, 1).revision("4")], 4, 0),
            ("two sets", vec![ms("a", 0, 1, 1, 1).revision("1"), ms("b", 1, 1, 1, 1).revision("2")], 2, 1),
            (
                "three sets, any order",
                vec![
                    ms("a", 0, 1, 1, 1).revision("5"),
                    ms("b", 1, 1, 1, 1).revision("2"),
                    ms("c", 2, 1, 1, 1).revision("7"),
                ],
                7,
                5,
            ),
            (
                "unparsable revisions are skipped",
                vec![ms("a", 0, 1, 1, 1).revision("x"), ms("b", 1, 1, 1, 1).revision("3")],
                3,
                0,
            ),
            ("a set without revision counts as 0", vec![ms("a", 0, 1, 1, 1), ms("b", 1, 1, 1, 1).revision("2")], 2, 0),
            ("equal maxima", vec![ms("a", 0, 1, 1, 1).revision("3"), ms("b", 1, 1, 1, 1).revision("3")], 3, 3),
        ];
        for (name, sets, max, last) in cases {
            let refs: Vec<&MachineSet> = sets.iter().collect();
            assert_eq!((max_revision(&refs), last_revision(&refs)), (max, last), "{name}");
        }
    }

    #[test]
    fn skip_list() {
        for key in [
            "kubectl.kubernetes.io/last-applied-configuration",
            "deployment.kubernetes.io/revision",
            "deployment.kubernetes.io/revision-history",
            "deployment.kubernetes.io/desired-replicas",
            "deployment.kubernetes.io/max-replicas",
            "deployment.machine.sapcloud.io/prefer-no-schedule",
            "safety.machine.sapcloud.io/unfreeze",
            "node.machine.sapcloud.io/trigger-deletion-by-mcm",
        ] {
            assert!(skip_copy(key), "{key}");
        }
        assert!(!skip_copy("machine.sapcloud.io/last-deployment-replica-change-by-scaler-time"));
        assert!(!skip_copy("node.machine.sapcloud.io/effective-creation-timeout"));
    }

    #[test]
    fn new_set_annotation_sync_table() {
        let mut d = deployment("d", 3, rolling("1", "0"));
        d.metadata.annotations = Some(map(&[
            ("team", "a"),
            (REVISION, "9"),
            (TRIGGER_DELETION_BY_MCM, "m~t"),
            ("machine.sapcloud.io/last-deployment-replica-change-by-scaler-time", "2026-03-01T11:00:00Z"),
        ]));
        // (name, set, new revision, changed, revision, history)
        type Row = (&'static str, MachineSet, i64, bool, Option<&'static str>, Option<&'static str>);
        let synced = |s: MachineSet| {
            s.annotate("team", "a")
                .annotate("machine.sapcloud.io/last-deployment-replica-change-by-scaler-time", "2026-03-01T11:00:00Z")
        };
        let cases: Vec<Row> = vec![
            ("first revision of a fresh set", ms("s", 0, 1, 1, 1), 1, true, Some("1"), None),
            (
                "revision goes up: history records the old one",
                synced(ms("s", 0, 1, 1, 1)).revision("1"),
                3,
                true,
                Some("3"),
                Some("1"),
            ),
            (
                "history grows",
                synced(ms("s", 0, 1, 1, 1)).revision("3").annotate(REVISION_HISTORY, "1"),
                5,
                true,
                Some("5"),
                Some("1,3"),
            ),
            ("never down", synced(ms("s", 0, 1, 1, 1)).revision("4"), 2, false, Some("4"), None),
            ("up to date", synced(ms("s", 0, 1, 1, 1)).revision("2"), 2, false, Some("2"), None),
            (
                "a copied annotation alone does not touch the history",
                ms("s", 0, 1, 1, 1).revision("2"),
                2,
                true,
                Some("2"),
                None,
            ),
            (
                "an unparsable revision is left alone",
                synced(ms("s", 0, 1, 1, 1)).revision("x"),
                2,
                false,
                Some("x"),
                None,
            ),
        ];
        for (name, mut set, new_revision, changed, rev, history) in cases {
            assert_eq!(sync_new_set_annotations(&d, &mut set, new_revision), changed, "{name}");
            assert_eq!(annotation(&set.metadata, REVISION), rev, "{name}");
            assert_eq!(annotation(&set.metadata, REVISION_HISTORY), history, "{name}");
            assert_eq!(annotation(&set.metadata, "team"), Some("a"), "{name}");
            assert_eq!(annotation(&set.metadata, TRIGGER_DELETION_BY_MCM), None, "{name}: skipped");
        }
    }

    #[test]
    fn history_cleanup_table() {
        let deleting = {
            let mut s = ms("deleting", 0, 0, 0, 0);
            s.metadata.deletion_timestamp = Some(Time(now()));
            s
        };
        let unobserved = {
            let mut s = ms("unobserved", 1, 0, 0, 0);
            s.metadata.generation = Some(2);
            s
        };
        // (name, limit, old sets, deleted)
        type Row = (&'static str, Option<i32>, Vec<MachineSet>, Vec<&'static str>);
        let cases: Vec<Row> = vec![
            ("no limit: keep all", None, vec![ms("a", 0, 0, 0, 0), ms("b", 1, 0, 0, 0)], vec![]),
            ("within the limit", Some(2), vec![ms("a", 0, 0, 0, 0), ms("b", 1, 0, 0, 0)], vec![]),
            ("oldest beyond the limit", Some(1), vec![ms("b", 1, 0, 0, 0), ms("a", 0, 0, 0, 0)], vec!["a"]),
            ("limit 0: all drained ones", Some(0), vec![ms("a", 0, 0, 0, 0), ms("b", 1, 0, 0, 0)], vec!["a", "b"]),
            (
                "only drained sets: one still scaling down is kept, and the next one is not taken instead",
                Some(1),
                vec![ms("a", 0, 0, 2, 0), ms("b", 1, 0, 0, 0)],
                vec![],
            ),
            ("a set with replicas is kept", Some(0), vec![ms("a", 0, 1, 1, 1)], vec![]),
            ("a set whose latest generation is not observed is kept", Some(0), vec![unobserved], vec![]),
            (
                "sets being deleted neither count nor get deleted again",
                Some(1),
                vec![deleting, ms("a", 2, 0, 0, 0), ms("b", 3, 0, 0, 0)],
                vec!["a"],
            ),
        ];
        for (name, limit, old, expected) in cases {
            let mut d = deployment("d", 3, rolling("1", "0"));
            d.spec.revision_history_limit = limit;
            let refs: Vec<&MachineSet> = old.iter().collect();
            assert_eq!(history_cleanup(&d, &refs), expected, "{name}");
        }
    }

    #[test]
    fn rollback_table() {
        let mut d = deployment("d", 3, rolling("1", "0"));
        d.spec.template = ms("x", 0, 0, 0, 0).class("class-c").spec.template.unwrap();
        d.spec.template.metadata.as_mut().unwrap().labels.as_mut().unwrap().remove(TEMPLATE_HASH_LABEL);
        d.metadata.annotations = Some(map(&[("team", "c"), (REVISION, "3"), (UNFREEZE, "True")]));
        let a = ms("a", 0, 0, 0, 0).class("class-a").revision("1").annotate("team", "a");
        let b = ms("b", 1, 0, 0, 0).class("class-b").revision("2").annotate("team", "b");
        let c = ms("c", 2, 3, 3, 3).class("class-c").revision("3");
        let with_new: Vec<&MachineSet> = vec![&a, &b, &c];
        let without_new: Vec<&MachineSet> = vec![&a, &b];

        let expect_rollback = |r: Rollback| match r {
            Rollback::RollBack { revision, set, template, annotations } => {
                let class = template.spec.as_ref().unwrap().class.name.clone();
                let hash =
                    template.metadata.as_ref().unwrap().labels.as_ref().unwrap().contains_key(TEMPLATE_HASH_LABEL);
                assert!(!hash, "the hash label is not copied to the deployment");
                (revision, set, class, annotations)
            }
            other => panic!("expected a rollback, got {other:?}"),
        };

        let (rev, set, class, annotations) = expect_rollback(plan_rollback(&d, &with_new, 0, true));
        assert_eq!((rev, set.as_str(), class.as_str()), (2, "b", "class-b"), "revision 0 = the previous revision");
        assert_eq!(annotations, map(&[("team", "b"), (REVISION, "3"), (UNFREEZE, "True")]), "skipped keys stay");

        let (rev, set, _, _) = expect_rollback(plan_rollback(&d, &without_new, 0, false));
        assert_eq!((rev, set.as_str()), (2, "b"), "without a new set, the current template is the latest revision");

        let (rev, set, _, _) = expect_rollback(plan_rollback(&d, &with_new, 1, true));
        assert_eq!((rev, set.as_str()), (1, "a"), "an explicit revision");

        assert_eq!(plan_rollback(&d, &with_new, 3, true), Rollback::TemplateUnchanged { set: "c".into() });
        assert_eq!(
            plan_rollback(&d, &with_new, 7, true),
            Rollback::RevisionNotFound { message: "Unable to find the revision to rollback to.".into() }
        );
        assert_eq!(
            plan_rollback(&d, &[&c], 0, true),
            Rollback::RevisionNotFound { message: "Unable to find last revision.".into() }
        );
    }
}
