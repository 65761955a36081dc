//! The v1beta2 conditions CAPI core writes on MachineSets and MachineDeployments, from their replica counts and
//! their Machines' conditions, for mode "CAPI with MCM core": `ScalingUp`, `ScalingDown`, `MachinesReady`,
//! `MachinesUpToDate`, `Remediating`, `Deleting`, `Paused`, and on MachineDeployments `Available` and `RollingOut`.
//! Types, statuses and reasons are core's (`clusterctl describe` and users' tooling read them); MCM's own
//! conditions (`Progressing`, `ReplicaFailure`, `Frozen`) stay next to them. docs/capi-mode.md lists the rules.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::capi_machine::condition_with_status;
use crate::api::capi::Machine;

/// Core leaves a new Machine out of `MachinesUpToDate` this long while it has no `UpToDate` condition yet, so the
/// aggregate does not flicker.
const NEW_MACHINE_GRACE: Duration = Duration::from_secs(10);

/// What the conditions are computed from.
#[derive(Clone, Copy, Debug)]
pub struct ReplicaObservation<'a> {
    /// `spec.replicas` (0 while the object is being deleted).
    pub desired: i32,
    /// The replicas there are now (`status.replicas`).
    pub current: i32,
    /// The Machines it controls (through its MachineSets, for a MachineDeployment).
    pub machines: &'a [Machine],
    /// Whether the object is being deleted.
    pub deleting: bool,
    /// The current time.
    pub now: Timestamp,
}

/// What a MachineDeployment adds: its availability bound.
#[derive(Clone, Copy, Debug)]
pub struct Availability {
    /// `spec.replicas` (also while deleting: a deployment going away becomes unavailable as its Machines go).
    pub replicas: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// The rollout's `maxUnavailable`, resolved against `spec.replicas` (0 for other strategies).
    pub max_unavailable: i32,
}

/// The merge patch carrying a MachineDeployment's `spec.deletion.order` to one of its MachineSets, as core
/// propagates it in place (no rollout); `None` when the set has it.
pub fn deletion_order_patch(
    deployment: &crate::api::capi::MachineDeployment,
    set: &crate::api::capi::MachineSet,
) -> Option<serde_json::Value> {
    let wanted = deployment.spec.deletion.as_ref().and_then(|d| d.order.as_deref());
    let has = set.spec.deletion.as_ref().and_then(|d| d.order.as_deref());
    (wanted != has).then(|| serde_json::json!({"spec": {"deletion": {"order": wanted}}}))
}

/// A MachineSet's v1beta2 replica counters, as core counts them: its Machines whose `Ready`, `Available` and
/// `UpToDate` conditions are True. A Machine being deleted counts for none (core's `Deleting` makes it not Ready,
/// so not Available). `Available` is Ready for the Machine's `minReadySeconds`, so a Machine with no Node yet
/// (phase `Provisioned`) is not available, and a rolling update does not take an old Machine away for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaCounts {
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// `status.upToDateReplicas`.
    pub up_to_date: i32,
}

/// Counts [`ReplicaCounts`] over a set's Machines.
pub fn replica_counts(machines: &[Machine]) -> ReplicaCounts {
    let live: Vec<&Machine> = machines.iter().filter(|m| m.metadata.deletion_timestamp.is_none()).collect();
    let count = |type_: &str| {
        let n = live.iter().filter(|m| is_true(m, type_)).count();
        i32::try_from(n).unwrap_or(i32::MAX)
    };
    ReplicaCounts { ready: count("Ready"), available: count("Available"), up_to_date: count("UpToDate") }
}

/// The conditions of a MachineSet, with transition times kept from `old`.
pub fn machine_set_conditions(obs: &ReplicaObservation<'_>, old: &[Condition]) -> Vec<Condition> {
    shared(obs, old)
}

/// The conditions of a MachineDeployment, with transition times kept from `old`.
pub fn machine_deployment_conditions(
    obs: &ReplicaObservation<'_>,
    availability: Availability,
    old: &[Condition],
) -> Vec<Condition> {
    let mut all = shared(obs, old);
    let needed = availability.replicas - availability.max_unavailable;
    all.push(if availability.available >= needed {
        make(old, "Available", "True", "Available", String::new(), obs.now)
    } else {
        let message = match obs.deleting {
            true => "Deletion in progress".to_string(),
            false => format!(
                "{} available replicas, at least {needed} required (spec.strategy.rollout.maxUnavailable is {}, \
                 spec.replicas is {})",
                availability.available, availability.max_unavailable, availability.replicas
            ),
        };
        make(old, "Available", "False", "NotAvailable", message, obs.now)
    });
    let rolling = obs.machines.iter().filter(|m| status_of(m, "UpToDate") == Some("False")).count();
    all.push(match rolling {
        0 => make(old, "RollingOut", "False", "NotRollingOut", String::new(), obs.now),
        n => {
            let message = format!("Rolling out {n} not up-to-date replicas");
            make(old, "RollingOut", "True", "RollingOut", message, obs.now)
        }
    });
    all
}

fn shared(obs: &ReplicaObservation<'_>, old: &[Condition]) -> Vec<Condition> {
    let now = obs.now;
    let (current, desired) = (obs.current, obs.desired);
    let scaling_up = match current < desired {
        true => {
            make(old, "ScalingUp", "True", "ScalingUp", format!("Scaling up from {current} to {desired} replicas"), now)
        }
        false => make(old, "ScalingUp", "False", "NotScalingUp", String::new(), now),
    };
    let scaling_down = match current > desired {
        true => {
            let message = format!("Scaling down from {current} to {desired} replicas");
            make(old, "ScalingDown", "True", "ScalingDown", message, now)
        }
        false => make(old, "ScalingDown", "False", "NotScalingDown", String::new(), now),
    };
    let ready = aggregate(obs.machines.iter().collect(), "Ready", ("Ready", "NotReady", "ReadyUnknown"));
    let counted: Vec<&Machine> =
        obs.machines.iter().filter(|m| status_of(m, "UpToDate").is_some() || age(m, now) > NEW_MACHINE_GRACE).collect();
    let up_to_date = aggregate(counted, "UpToDate", ("UpToDate", "NotUpToDate", "UpToDateUnknown"));
    let deleting = match obs.deleting {
        false => make(old, "Deleting", "False", "NotDeleting", String::new(), now),
        true => {
            let message = match obs.machines.len() {
                0 => "Deletion completed".to_string(),
                1 => "Deleting 1 Machine".to_string(),
                n => format!("Deleting {n} Machines"),
            };
            make(old, "Deleting", "True", "Deleting", message, now)
        }
    };
    vec![
        scaling_up,
        scaling_down,
        make(old, "MachinesReady", ready.0, ready.1, ready.2, now),
        make(old, "MachinesUpToDate", up_to_date.0, up_to_date.1, up_to_date.2, now),
        remediating(old, obs.machines, now),
        deleting,
        // Computed only while not paused: a paused object is not reconciled.
        make(old, "Paused", "False", "NotPaused", String::new(), now),
    ]
}

/// Core's `Remediating`: True while Machines wait for the remediation a MachineHealthCheck asked of their owner.
fn remediating(old: &[Condition], machines: &[Machine], now: Timestamp) -> Condition {
    let marked: Vec<&str> = machines
        .iter()
        .filter(|m| crate::convert::machine_view::owner_remediation_requested(m))
        .filter_map(|m| m.metadata.name.as_deref())
        .collect();
    if marked.is_empty() {
        return make(old, "Remediating", "False", "NotRemediating", String::new(), now);
    }
    let listed = marked.iter().take(3).copied().collect::<Vec<_>>().join(", ");
    let more = if marked.len() > 3 { format!(" and {} more", marked.len() - 3) } else { String::new() };
    let message = format!("* Machines {listed}{more}: remediation requested by a MachineHealthCheck");
    make(old, "Remediating", "True", "Remediating", message, now)
}

/// The status of condition `type_` of a Machine.
fn status_of<'a>(m: &'a Machine, type_: &str) -> Option<&'a str> {
    let conditions = m.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str())
}

/// Whether condition `type_` of a Machine is True: what core's replica counters count.
pub fn is_true(m: &Machine, type_: &str) -> bool {
    status_of(m, type_) == Some("True")
}

fn age(m: &Machine, now: Timestamp) -> Duration {
    m.metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| now.duration_since(t.0).try_into().ok())
        .unwrap_or(Duration::ZERO)
}

/// Core's aggregation of one condition over Machines: `False` wins over `Unknown` (or missing) over `True`; no
/// Machines is `True` with reason `NoReplicas`. (status, reason, message naming the Machines that are not True).
fn aggregate(
    machines: Vec<&Machine>,
    type_: &str,
    (yes, no, unknown): (&'static str, &'static str, &'static str),
) -> (&'static str, &'static str, String) {
    if machines.is_empty() {
        return ("True", "NoReplicas", String::new());
    }
    let names = |wanted: Option<&str>| -> Vec<String> {
        let mut names: Vec<String> = machines
            .iter()
            .filter(|m| match wanted {
                Some(status) => status_of(m, type_) == Some(status),
                None => !matches!(status_of(m, type_), Some("True" | "False")),
            })
            .map(|m| m.metadata.name.clone().unwrap_or_default())
            .collect();
        names.sort();
        names
    };
    let listed = |names: Vec<String>, what: &str| {
        let shown: Vec<String> = names.iter().take(3).cloned().collect();
        let more = names.len().saturating_sub(3);
        let noun = if names.len() == 1 { "Machine" } else { "Machines" };
        let tail = if more > 0 { format!(", ... ({more} more)") } else { String::new() };
        format!("* {noun} {}{tail}: {what}", shown.join(", "))
    };
    let (false_, unknown_) = (names(Some("False")), names(None));
    if !false_.is_empty() {
        return ("False", no, listed(false_, &format!("{type_} is False")));
    }
    if !unknown_.is_empty() {
        return ("Unknown", unknown, listed(unknown_, &format!("{type_} is Unknown")));
    }
    ("True", yes, String::new())
}

fn make(old: &[Condition], type_: &str, status: &str, reason: &str, message: String, now: Timestamp) -> Condition {
    condition_with_status(old, type_, status, reason, &message, now)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;

    fn now() -> Timestamp {
        "2026-01-01T00:01:00Z".parse().unwrap()
    }

    /// A Machine created at `created` with conditions `Type=Status`.
    fn machine(name: &str, created: &str, conditions: &[(&str, &str)]) -> Machine {
        let conditions: Vec<_> = conditions
            .iter()
            .map(|(t, s)| json!({"type": t, "status": s, "reason": "R", "message": "", "lastTransitionTime": created}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"clusterName": "c", "bootstrap": {}, "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": name}},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn find<'a>(all: &'a [Condition], type_: &str) -> (&'a str, &'a str, &'a str) {
        let c = all.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_}"));
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    /// (desired, current, machines, expected status and reason of ScalingUp, ScalingDown, MachinesReady,
    /// MachinesUpToDate)
    type Case = (i32, i32, Vec<Machine>, [(&'static str, &'static str); 4]);

    const OLD: &str = "2026-01-01T00:00:00Z";
    const NEW: &str = "2026-01-01T00:00:58Z";

    #[test]
    fn replica_counts_table() {
        let mut deleting = machine("gone", OLD, &[("Ready", "True"), ("Available", "True"), ("UpToDate", "True")]);
        deleting.metadata.deletion_timestamp = Some(Time(now()));
        // (case, machines, ready, available, up to date)
        let cases: Vec<(&str, Vec<Machine>, i32, i32, i32)> = vec![
            ("no machines", vec![], 0, 0, 0),
            (
                "serving",
                vec![machine("a", OLD, &[("Ready", "True"), ("Available", "True"), ("UpToDate", "True")])],
                1,
                1,
                1,
            ),
            (
                "provisioned, no Node yet: nothing",
                vec![machine("p", NEW, &[("Ready", "False"), ("UpToDate", "True")])],
                0,
                0,
                1,
            ),
            (
                "ready, waiting for minReadySeconds: not available",
                vec![machine("w", NEW, &[("Ready", "True"), ("Available", "False")])],
                1,
                0,
                0,
            ),
            (
                "unknown is not true",
                vec![machine("u", OLD, &[("Ready", "Unknown"), ("Available", "Unknown")])],
                0,
                0,
                0,
            ),
            ("being deleted: counts for none", vec![deleting], 0, 0, 0),
        ];
        for (case, machines, ready, available, up_to_date) in cases {
            assert_eq!(replica_counts(&machines), ReplicaCounts { ready, available, up_to_date }, "{case}");
        }
    }

    #[test]
    fn scaling_and_aggregates_table() {
        let ready = machine("a", OLD, &[("Ready", "True"), ("UpToDate", "True")]);
        let not_ready = machine("b", OLD, &[("Ready", "False"), ("UpToDate", "False")]);
        let fresh = machine("c", NEW, &[]);
        let old_bare = machine("d", OLD, &[]);
        let cases: Vec<Case> = vec![
            (
                0,
                0,
                vec![],
                [
                    ("False", "NotScalingUp"),
                    ("False", "NotScalingDown"),
                    ("True", "NoReplicas"),
                    ("True", "NoReplicas"),
                ],
            ),
            (
                2,
                1,
                vec![ready.clone()],
                [("True", "ScalingUp"), ("False", "NotScalingDown"), ("True", "Ready"), ("True", "UpToDate")],
            ),
            (
                1,
                2,
                vec![ready.clone(), not_ready.clone()],
                [("False", "NotScalingUp"), ("True", "ScalingDown"), ("False", "NotReady"), ("False", "NotUpToDate")],
            ),
            // A Machine seconds old without UpToDate is left out of MachinesUpToDate, not out of MachinesReady.
            (
                2,
                2,
                vec![ready.clone(), fresh.clone()],
                [
                    ("False", "NotScalingUp"),
                    ("False", "NotScalingDown"),
                    ("Unknown", "ReadyUnknown"),
                    ("True", "UpToDate"),
                ],
            ),
            (
                2,
                2,
                vec![ready.clone(), old_bare],
                [
                    ("False", "NotScalingUp"),
                    ("False", "NotScalingDown"),
                    ("Unknown", "ReadyUnknown"),
                    ("Unknown", "UpToDateUnknown"),
                ],
            ),
        ];
        for (i, (desired, current, machines, want)) in cases.into_iter().enumerate() {
            let obs = ReplicaObservation { desired, current, machines: &machines, deleting: false, now: now() };
            let all = machine_set_conditions(&obs, &[]);
            for (type_, (status, reason)) in
                ["ScalingUp", "ScalingDown", "MachinesReady", "MachinesUpToDate"].iter().zip(want)
            {
                let got = find(&all, type_);
                assert_eq!((got.0, got.1), (status, reason), "case {i}: {type_}");
            }
            assert_eq!(find(&all, "Remediating").1, "NotRemediating");
            assert_eq!(find(&all, "Deleting").1, "NotDeleting");
            assert_eq!(find(&all, "Paused").1, "NotPaused");
        }
    }

    #[test]
    fn messages_name_what_a_user_acts_on() {
        let machines = vec![machine("b", OLD, &[("Ready", "False")]), machine("a", OLD, &[("Ready", "False")])];
        let obs = ReplicaObservation { desired: 3, current: 2, machines: &machines, deleting: false, now: now() };
        let all = machine_set_conditions(&obs, &[]);
        assert_eq!(find(&all, "ScalingUp").2, "Scaling up from 2 to 3 replicas");
        assert_eq!(find(&all, "MachinesReady").2, "* Machines a, b: Ready is False");
        let deleting = ReplicaObservation { deleting: true, desired: 0, ..obs };
        assert_eq!(
            find(&machine_set_conditions(&deleting, &[]), "Deleting"),
            ("True", "Deleting", "Deleting 2 Machines")
        );
    }

    #[test]
    fn a_deployment_is_available_within_max_unavailable_and_rolls_out_outdated_machines() {
        let machines = vec![
            machine("a", OLD, &[("Ready", "True"), ("UpToDate", "True")]),
            machine("b", OLD, &[("Ready", "True"), ("UpToDate", "False")]),
        ];
        let obs = ReplicaObservation { desired: 3, current: 2, machines: &machines, deleting: false, now: now() };
        let unavailable = "2 available replicas, at least 3 required (spec.strategy.rollout.maxUnavailable is 0, \
                           spec.replicas is 3)";
        // (available, maxUnavailable, deleting, expected Available)
        let cases = [
            (2, 1, false, ("True", "Available", "")),
            (2, 0, false, ("False", "NotAvailable", unavailable)),
            // Deleting: still measured against spec.replicas, as core does.
            (2, 0, true, ("False", "NotAvailable", "Deletion in progress")),
        ];
        for (available, max_unavailable, deleting, want) in cases {
            let obs = ReplicaObservation { deleting, desired: if deleting { 0 } else { 3 }, ..obs };
            let availability = Availability { replicas: 3, available, max_unavailable };
            let all = machine_deployment_conditions(&obs, availability, &[]);
            assert_eq!(find(&all, "Available"), want);
            assert_eq!(find(&all, "RollingOut"), ("True", "RollingOut", "Rolling out 1 not up-to-date replicas"));
        }
    }

    #[test]
    fn transition_times_move_only_with_the_status() {
        let obs = ReplicaObservation { desired: 1, current: 1, machines: &[], deleting: false, now: now() };
        let before = machine_set_conditions(&ReplicaObservation { now: OLD.parse().unwrap(), ..obs }, &[]);
        let after = machine_set_conditions(&obs, &before);
        assert_eq!(find_time(&after, "ScalingUp"), find_time(&before, "ScalingUp"));
        let scaling = machine_set_conditions(&ReplicaObservation { desired: 2, ..obs }, &before);
        assert_ne!(find_time(&scaling, "ScalingUp"), find_time(&before, "ScalingUp"));
    }

    fn find_time(all: &[Condition], type_: &str) -> Time {
        all.iter().find(|c| c.type_ == type_).unwrap().last_transition_time.clone()
    }
}
