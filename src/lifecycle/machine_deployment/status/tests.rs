//! Table tests of the deployment status, conditions and progress.

use crate::api::mcm::{LastOperation, MachineSetCondition, MachineSetStatus, MachineSummary};
use crate::lifecycle::machine_deployment::test_support::{deployment, ms, now, rolling};

use super::*;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn condition(
    type_: MachineDeploymentConditionType,
    status: ConditionStatus,
    reason: &str,
    updated: &str,
) -> MachineDeploymentCondition {
    MachineDeploymentCondition {
        type_,
        status,
        last_update_time: Some(Time(at(updated))),
        last_transition_time: Some(Time(at(updated))),
        reason: Some(reason.into()),
        message: Some("m".into()),
    }
}

fn progressing(status: ConditionStatus, reason: &str, updated: &str) -> MachineDeploymentCondition {
    condition(MachineDeploymentConditionType::Progressing, status, reason, updated)
}

fn find(status: &MachineDeploymentStatus, type_: MachineDeploymentConditionType) -> Option<(ConditionStatus, String)> {
    get_condition(status.conditions.as_deref().unwrap_or_default(), type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn with_failed(mut s: MachineSet, names: &[&str]) -> MachineSet {
    s.status.get_or_insert_with(MachineSetStatus::default).failed_machines =
        Some(names.iter().map(|n| MachineSummary { name: Some(n.to_string()), ..Default::default() }).collect());
    s
}

fn with_preserved(mut s: MachineSet, n: i32) -> MachineSet {
    s.status.get_or_insert_with(MachineSetStatus::default).preserved_failed_replicas = n;
    s
}

#[test]
fn calculate_status_counts_table() {
    // (name, old sets (spec, actual, available), new (spec, actual, available),
    //  expected (replicas, updated, available, unavailable))
    type Row = (&'static str, Vec<(i32, i32, i32)>, Option<(i32, i32, i32)>, (i32, i32, i32, i32));
    let cases: Vec<Row> = vec![
        ("steady", vec![], Some((3, 3, 3)), (3, 3, 3, 0)),
        ("mid rollout", vec![(2, 3, 3)], Some((2, 2, 1)), (5, 2, 4, 0)),
        ("unavailable is Σspec − Σavailable", vec![(2, 2, 1)], Some((3, 1, 0)), (3, 1, 1, 4)),
        ("more available than specified: unavailable 0", vec![(0, 2, 2)], Some((3, 3, 3)), (5, 3, 5, 0)),
        ("no new set: nothing updated", vec![(3, 3, 3)], None, (3, 0, 3, 0)),
    ];
    for (name, old, new, (replicas, updated, avail, unavailable)) in cases {
        let d = deployment("d", 3, rolling("1", "0"));
        let old: Vec<MachineSet> =
            old.iter().enumerate().map(|(i, (s, a, v))| ms(&format!("old{i}"), i as u32, *s, *a, *v)).collect();
        let new = new.map(|(s, a, v)| ms("new", 9, s, a, v));
        let mut all: Vec<&MachineSet> = old.iter().collect();
        all.extend(new.as_ref());
        let st = calculate_status(&d, &all, new.as_ref(), now());
        assert_eq!(
            (st.replicas, st.updated_replicas, st.available_replicas, st.unavailable_replicas),
            (replicas, updated, avail, unavailable),
            "{name}"
        );
        assert_eq!(st.ready_replicas, avail, "{name}: ready = available in these sets");
        assert_eq!(st.observed_generation, Some(1), "{name}");
    }
}

#[test]
fn failed_machines_and_preserved_are_aggregated() {
    let d = deployment("d", 3, rolling("1", "0"));
    let a = with_preserved(with_failed(ms("a", 0, 1, 1, 1), &["m1"]), 1);
    let b = with_preserved(with_failed(ms("b", 1, 2, 2, 2), &["m2", "m3"]), 2);
    let st = calculate_status(&d, &[&a, &b], Some(&b), now());
    let names: Vec<String> = st.failed_machines.unwrap().into_iter().filter_map(|m| m.name).collect();
    assert_eq!(names, ["m1", "m2", "m3"]);
    assert_eq!(st.preserved_failed_replicas, 3);
}

#[test]
fn available_condition_table() {
    // (name, replicas, maxSurge, maxUnavailable, available, preserved failed, expected status)
    let cases = [
        ("all available", 3, "1", "0", 3, 0, ConditionStatus::True),
        ("one short, maxUnavailable 0", 3, "1", "0", 2, 0, ConditionStatus::False),
        ("one short, maxUnavailable 1", 3, "0", "1", 2, 0, ConditionStatus::True),
        ("25% of 10 unavailable allowed: 8 is enough", 10, "25%", "25%", 8, 0, ConditionStatus::True),
        ("25% of 10 unavailable allowed: 7 is not", 10, "25%", "25%", 7, 0, ConditionStatus::False),
        ("preserved failed machines lower the bar", 3, "1", "0", 2, 1, ConditionStatus::True),
        ("the bar never goes below 0", 1, "1", "0", 0, 5, ConditionStatus::True),
        ("zero replicas: always available", 0, "1", "0", 0, 0, ConditionStatus::True),
    ];
    for (name, replicas, surge, unav, available, preserved, expected) in cases {
        let d = deployment("d", replicas, rolling(surge, unav));
        let set = with_preserved(ms("s", 0, replicas, available, available), preserved);
        let st = calculate_status(&d, &[&set], Some(&set), now());
        let (status, reason) = find(&st, MachineDeploymentConditionType::Available).unwrap();
        assert_eq!(status, expected, "{name}");
        let want =
            if expected == ConditionStatus::True { MINIMUM_REPLICAS_AVAILABLE } else { MINIMUM_REPLICAS_UNAVAILABLE };
        assert_eq!(reason, want, "{name}");
    }
}

#[test]
fn set_condition_semantics() {
    let earlier = "2026-03-01T10:00:00Z";
    let mut conditions = vec![
        progressing(ConditionStatus::True, MACHINE_SET_UPDATED, earlier),
        condition(
            MachineDeploymentConditionType::Available,
            ConditionStatus::True,
            MINIMUM_REPLICAS_AVAILABLE,
            earlier,
        ),
    ];
    // Same status and reason: untouched.
    set_condition(
        &mut conditions,
        new_condition(
            MachineDeploymentConditionType::Progressing,
            ConditionStatus::True,
            MACHINE_SET_UPDATED,
            "x",
            now(),
        ),
    );
    assert_eq!(conditions[0].last_update_time, Some(Time(at(earlier))));
    // Same status, new reason: replaced, transition time kept, moved to the end.
    set_condition(
        &mut conditions,
        new_condition(
            MachineDeploymentConditionType::Progressing,
            ConditionStatus::True,
            NEW_MACHINE_SET_AVAILABLE,
            "x",
            now(),
        ),
    );
    assert_eq!(conditions[1].reason.as_deref(), Some(NEW_MACHINE_SET_AVAILABLE));
    assert_eq!(conditions[1].last_transition_time, Some(Time(at(earlier))));
    assert_eq!(conditions[1].last_update_time, Some(Time(now())));
    // New status: transition time moves.
    set_condition(
        &mut conditions,
        new_condition(
            MachineDeploymentConditionType::Progressing,
            ConditionStatus::False,
            PROGRESS_DEADLINE_EXCEEDED,
            "x",
            now(),
        ),
    );
    assert_eq!(conditions[1].last_transition_time, Some(Time(now())));
    remove_condition(&mut conditions, MachineDeploymentConditionType::Progressing);
    assert_eq!(conditions.len(), 1);
}

#[test]
fn paused_conditions_table() {
    let t = "2026-03-01T10:00:00Z";
    // (name, paused, current Progressing, changed, expected (status, reason))
    type Row = (&'static str, bool, Option<MachineDeploymentCondition>, bool, Option<(ConditionStatus, &'static str)>);
    let cases: Vec<Row> = vec![
        ("pausing", true, None, true, Some((ConditionStatus::Unknown, DEPLOYMENT_PAUSED))),
        (
            "pausing mid rollout",
            true,
            Some(progressing(ConditionStatus::True, MACHINE_SET_UPDATED, t)),
            true,
            Some((ConditionStatus::Unknown, DEPLOYMENT_PAUSED)),
        ),
        (
            "already paused",
            true,
            Some(progressing(ConditionStatus::Unknown, DEPLOYMENT_PAUSED, t)),
            false,
            Some((ConditionStatus::Unknown, DEPLOYMENT_PAUSED)),
        ),
        (
            "resuming",
            false,
            Some(progressing(ConditionStatus::Unknown, DEPLOYMENT_PAUSED, t)),
            true,
            Some((ConditionStatus::Unknown, DEPLOYMENT_RESUMED)),
        ),
        (
            "not paused, nothing to do",
            false,
            Some(progressing(ConditionStatus::True, MACHINE_SET_UPDATED, t)),
            false,
            Some((ConditionStatus::True, MACHINE_SET_UPDATED)),
        ),
        (
            "a timed-out deployment keeps its condition when paused",
            true,
            Some(progressing(ConditionStatus::False, PROGRESS_DEADLINE_EXCEEDED, t)),
            false,
            Some((ConditionStatus::False, PROGRESS_DEADLINE_EXCEEDED)),
        ),
        ("nothing, not paused", false, None, false, None),
    ];
    for (name, paused, current, changed, expected) in cases {
        let mut conditions: Vec<_> = current.into_iter().collect();
        assert_eq!(check_paused_conditions(paused, &mut conditions, now()), changed, "{name}");
        let got = get_condition(&conditions, MachineDeploymentConditionType::Progressing)
            .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()));
        assert_eq!(got, expected.map(|(s, r)| (s, r.to_string())), "{name}");
    }
}

#[test]
fn complete_table() {
    let d = deployment("d", 3, rolling("1", "0"));
    let st = |replicas, updated, available, observed| MachineDeploymentStatus {
        replicas,
        updated_replicas: updated,
        available_replicas: available,
        observed_generation: Some(observed),
        ..Default::default()
    };
    let cases = [
        ("complete", st(3, 3, 3, 1), true),
        ("an old machine left", st(4, 3, 4, 1), false),
        ("not all available", st(3, 3, 2, 1), false),
        ("not all updated", st(3, 2, 3, 1), false),
        ("generation not observed", st(3, 3, 3, 0), false),
    ];
    for (name, status, expected) in cases {
        assert_eq!(deployment_complete(&d, &status), expected, "{name}");
    }
}

/// (name, deadline, current Progressing, old counts (replicas, updated, ready, available), sets (spec, actual,
/// available) [old, new], expected (status, reason), lastUpdateTime refreshed)
type ProgressRow = (
    &'static str,
    Option<i32>,
    Option<MachineDeploymentCondition>,
    (i32, i32, i32, i32),
    ((i32, i32, i32), (i32, i32, i32)),
    Option<(ConditionStatus, &'static str)>,
);

#[test]
fn rollout_progress_table() {
    let ten_min_ago = "2026-03-01T11:50:00Z";
    let two_min_ago = "2026-03-01T11:58:00Z";
    let cases: Vec<ProgressRow> = vec![
        (
            "complete: NewMachineSetAvailable",
            Some(600),
            Some(progressing(ConditionStatus::True, MACHINE_SET_UPDATED, two_min_ago)),
            (4, 2, 4, 4),
            ((0, 0, 0), (3, 3, 3)),
            Some((ConditionStatus::True, NEW_MACHINE_SET_AVAILABLE)),
        ),
        (
            "progress: MachineSetUpdated",
            Some(600),
            Some(progressing(ConditionStatus::True, NEW_MACHINE_SET_CREATED, ten_min_ago)),
            (3, 0, 3, 3),
            ((3, 3, 3), (1, 1, 0)),
            Some((ConditionStatus::True, MACHINE_SET_UPDATED)),
        ),
        (
            "no progress, deadline passed: ProgressDeadlineExceeded",
            Some(300),
            Some(progressing(ConditionStatus::True, MACHINE_SET_UPDATED, ten_min_ago)),
            (4, 1, 3, 3),
            ((3, 3, 3), (1, 1, 0)),
            Some((ConditionStatus::False, PROGRESS_DEADLINE_EXCEEDED)),
        ),
        (
            "no progress, deadline not passed: unchanged",
            Some(900),
            Some(progressing(ConditionStatus::True, MACHINE_SET_UPDATED, ten_min_ago)),
            (4, 1, 3, 3),
            ((3, 3, 3), (1, 1, 0)),
            Some((ConditionStatus::True, MACHINE_SET_UPDATED)),
        ),
        (
            "no deadline: never times out",
            None,
            Some(progressing(ConditionStatus::True, MACHINE_SET_UPDATED, "2026-02-01T00:00:00Z")),
            (4, 1, 3, 3),
            ((3, 3, 3), (1, 1, 0)),
            Some((ConditionStatus::True, MACHINE_SET_UPDATED)),
        ),
        (
            "timed out stays timed out",
            Some(300),
            Some(progressing(ConditionStatus::False, PROGRESS_DEADLINE_EXCEEDED, ten_min_ago)),
            (4, 1, 3, 3),
            ((3, 3, 3), (1, 1, 0)),
            Some((ConditionStatus::False, PROGRESS_DEADLINE_EXCEEDED)),
        ),
        (
            "a resumed deployment's clock starts at the resume",
            Some(300),
            Some(progressing(ConditionStatus::Unknown, DEPLOYMENT_RESUMED, two_min_ago)),
            (4, 1, 3, 3),
            ((3, 3, 3), (1, 1, 0)),
            Some((ConditionStatus::Unknown, DEPLOYMENT_RESUMED)),
        ),
        (
            "already complete and nothing old: no estimation",
            Some(1),
            Some(progressing(ConditionStatus::True, NEW_MACHINE_SET_AVAILABLE, "2026-02-01T00:00:00Z")),
            (3, 3, 3, 3),
            ((0, 0, 0), (3, 3, 2)),
            Some((ConditionStatus::True, NEW_MACHINE_SET_AVAILABLE)),
        ),
        (
            "a new rollout after completion: progress replaces the old reason",
            Some(600),
            Some(progressing(ConditionStatus::True, NEW_MACHINE_SET_AVAILABLE, "2026-02-01T00:00:00Z")),
            (3, 0, 3, 3),
            ((3, 3, 3), (1, 1, 0)),
            Some((ConditionStatus::True, MACHINE_SET_UPDATED)),
        ),
        ("no condition yet and no progress: none added", Some(1), None, (4, 1, 3, 3), ((3, 3, 3), (1, 1, 0)), None),
    ];
    for (name, deadline, current, (replicas, updated, ready, available), (old, new), expected) in cases {
        let mut d = deployment("d", 3, rolling("1", "0"));
        d.spec.progress_deadline_seconds = deadline;
        d.status = Some(MachineDeploymentStatus {
            observed_generation: Some(1),
            replicas,
            updated_replicas: updated,
            ready_replicas: ready,
            available_replicas: available,
            conditions: current.clone().map(|c| vec![c]),
            ..Default::default()
        });
        let old = ms("old", 0, old.0, old.1, old.2);
        let new = ms("new", 1, new.0, new.1, new.2);
        let st = sync_rollout_status(&d, &[&old, &new], Some(&new), now());
        let got = find(&st, MachineDeploymentConditionType::Progressing);
        assert_eq!(got, expected.map(|(s, r)| (s, r.to_string())), "{name}");
    }
}

#[test]
fn progress_keeps_the_transition_time_while_true() {
    let mut d = deployment("d", 3, rolling("1", "0"));
    let since = "2026-03-01T11:00:00Z";
    d.status = Some(MachineDeploymentStatus {
        observed_generation: Some(1),
        replicas: 3,
        conditions: Some(vec![progressing(ConditionStatus::True, MACHINE_SET_UPDATED, since)]),
        ..Default::default()
    });
    let old = ms("old", 0, 3, 3, 3);
    let new = ms("new", 1, 1, 1, 1);
    let st = sync_rollout_status(&d, &[&old, &new], Some(&new), now());
    let c = get_condition(st.conditions.as_deref().unwrap(), MachineDeploymentConditionType::Progressing).unwrap();
    assert_eq!(
        (c.last_transition_time.clone(), c.last_update_time.clone()),
        (Some(Time(at(since))), Some(Time(now())))
    );
}

#[test]
fn replica_failure_table() {
    let failure = |s: MachineSet, reason: &str| {
        let mut s = s;
        s.status.get_or_insert_with(MachineSetStatus::default).machine_set_condition =
            Some(vec![MachineSetCondition {
                type_: MachineSetConditionType::ReplicaFailure,
                status: ConditionStatus::True,
                last_transition_time: None,
                reason: Some(reason.into()),
                message: Some("quota".into()),
            }]);
        s
    };
    let d = {
        let mut d = deployment("d", 3, rolling("1", "0"));
        d.status.as_mut().unwrap().conditions = Some(vec![condition(
            MachineDeploymentConditionType::ReplicaFailure,
            ConditionStatus::True,
            "FailedCreate",
            "2026-03-01T11:00:00Z",
        )]);
        d
    };
    let cases: Vec<(&str, MachineSet, MachineSet, Option<&str>)> = vec![
        ("none: removed", ms("old", 0, 1, 1, 1), ms("new", 1, 2, 2, 2), None),
        (
            "from an old set",
            failure(ms("old", 0, 1, 1, 1), "FailedDelete"),
            ms("new", 1, 2, 2, 2),
            Some("FailedDelete"),
        ),
        (
            "the new set's wins",
            failure(ms("old", 0, 1, 1, 1), "FailedDelete"),
            failure(ms("new", 1, 2, 2, 2), "FailedCreate"),
            Some("FailedCreate"),
        ),
    ];
    for (name, old, new, expected) in cases {
        let st = sync_rollout_status(&d, &[&old, &new], Some(&new), now());
        let got = find(&st, MachineDeploymentConditionType::ReplicaFailure).map(|(_, r)| r);
        assert_eq!(got.as_deref(), expected, "{name}");
    }
}

#[test]
fn progress_requeue_table() {
    // (name, deadline, current condition, complete, expected)
    type Row = (&'static str, Option<i32>, Option<MachineDeploymentCondition>, bool, Option<Duration>);
    let cases: Vec<Row> = vec![
        (
            "no deadline",
            None,
            Some(progressing(ConditionStatus::True, MACHINE_SET_UPDATED, "2026-03-01T11:58:00Z")),
            false,
            None,
        ),
        ("no condition", Some(600), None, false, None),
        (
            "time left plus a second",
            Some(600),
            Some(progressing(ConditionStatus::True, MACHINE_SET_UPDATED, "2026-03-01T11:58:00Z")),
            false,
            Some(Duration::from_secs(481)),
        ),
        (
            "overdue: now",
            Some(60),
            Some(progressing(ConditionStatus::True, MACHINE_SET_UPDATED, "2026-03-01T11:50:00Z")),
            false,
            Some(Duration::ZERO),
        ),
        (
            "complete",
            Some(600),
            Some(progressing(ConditionStatus::True, MACHINE_SET_UPDATED, "2026-03-01T11:58:00Z")),
            true,
            None,
        ),
        (
            "already timed out",
            Some(600),
            Some(progressing(ConditionStatus::False, PROGRESS_DEADLINE_EXCEEDED, "2026-03-01T11:58:00Z")),
            false,
            None,
        ),
    ];
    for (name, deadline, current, complete, expected) in cases {
        let mut d = deployment("d", 3, rolling("1", "0"));
        d.spec.progress_deadline_seconds = deadline;
        let status = MachineDeploymentStatus {
            observed_generation: Some(1),
            replicas: 3,
            updated_replicas: if complete { 3 } else { 1 },
            available_replicas: 3,
            conditions: current.map(|c| vec![c]),
            ..Default::default()
        };
        assert_eq!(progress_requeue(&d, &status, now()), expected, "{name}");
    }
}

#[test]
fn status_update_required_table() {
    let failed = |name: &str, description: &str| MachineSummary {
        name: Some(name.into()),
        last_operation: Some(LastOperation { description: Some(description.into()), ..Default::default() }),
        ..Default::default()
    };
    let base = MachineDeploymentStatus {
        observed_generation: Some(1),
        replicas: 3,
        updated_replicas: 3,
        ready_replicas: 3,
        available_replicas: 3,
        failed_machines: Some(vec![failed("m1", "boom")]),
        ..Default::default()
    };
    let edit = |f: &dyn Fn(&mut MachineDeploymentStatus)| {
        let mut s = base.clone();
        f(&mut s);
        s
    };
    let cases = [
        ("identical", base.clone(), false),
        ("available", edit(&|s| s.available_replicas = 2), true),
        ("unavailable (MCM PR #833)", edit(&|s| s.unavailable_replicas = 1), true),
        ("observed generation", edit(&|s| s.observed_generation = Some(2)), true),
        ("collision count", edit(&|s| s.collision_count = Some(1)), true),
        ("preserved failed replicas (not compared by MCM)", edit(&|s| s.preserved_failed_replicas = 1), true),
        (
            "a condition",
            edit(&|s| s.conditions = Some(vec![progressing(ConditionStatus::True, MACHINE_SET_UPDATED, NOW_TEXT)])),
            true,
        ),
        ("a failed machine's new description", edit(&|s| s.failed_machines = Some(vec![failed("m1", "other")])), true),
        ("another failed machine, same count", edit(&|s| s.failed_machines = Some(vec![failed("m2", "boom")])), true),
        (
            "a failed machine's other fields",
            edit(&|s| s.failed_machines.as_mut().unwrap()[0].provider_id = Some("x".into())),
            false,
        ),
    ];
    for (name, new, expected) in cases {
        assert_eq!(status_update_required(&base, &new), expected, "{name}");
    }
}

const NOW_TEXT: &str = crate::lifecycle::machine_deployment::test_support::NOW;

#[test]
fn invalid_spec_status_table() {
    use crate::lifecycle::machine_deployment::validation::ValidationError;
    let found = progressing(ConditionStatus::True, FOUND_NEW_MACHINE_SET, "2026-03-01T11:00:00Z");
    let mut invalid = progressing(ConditionStatus::False, INVALID_SPEC, "2026-03-01T11:00:00Z");
    invalid.message = Some(ValidationError::MissingStrategyType.to_string());
    // (case, existing Progressing, errors, expected (status, reason), message changes)
    let cases = [
        (
            "missing strategy",
            Some(found.clone()),
            vec![ValidationError::MissingStrategyType],
            (ConditionStatus::False, INVALID_SPEC),
        ),
        ("empty selector", None, vec![ValidationError::EmptySelector], (ConditionStatus::False, SELECTING_ALL)),
        (
            "in-place update",
            Some(invalid.clone()),
            vec![ValidationError::MissingInPlaceUpdate, ValidationError::MissingFencepost("rollingUpdate.maxSurge")],
            (ConditionStatus::False, INVALID_SPEC),
        ),
    ];
    for (name, existing, errors, expected) in cases {
        let mut d = deployment("d", 3, rolling("1", "0"));
        d.metadata.generation = Some(4);
        d.status.as_mut().unwrap().conditions = existing.map(|c| vec![c]);
        let status = invalid_spec_status(&d, &errors, now());
        assert_eq!(status.observed_generation, Some(4), "{name}");
        assert_eq!(
            find(&status, MachineDeploymentConditionType::Progressing),
            Some((expected.0, expected.1.to_string())),
            "{name}"
        );
        let c = get_condition(status.conditions.as_deref().unwrap(), MachineDeploymentConditionType::Progressing);
        let message = c.and_then(|c| c.message.clone()).unwrap_or_default();
        for e in &errors {
            assert!(message.contains(&e.to_string()), "{name}: {message}");
        }
    }

    // The same invalid spec again writes nothing.
    let mut d = deployment("d", 3, rolling("1", "0"));
    d.status.as_mut().unwrap().conditions = Some(vec![invalid.clone()]);
    let again = invalid_spec_status(&d, &[ValidationError::MissingStrategyType], now());
    assert!(!status_update_required(d.status.as_ref().unwrap(), &again));

    let mut conditions = vec![invalid];
    assert!(clear_invalid_spec(&mut conditions), "a valid spec drops the condition");
    assert!(conditions.is_empty());
    let mut conditions = vec![found];
    assert!(!clear_invalid_spec(&mut conditions), "other reasons stay");
}
