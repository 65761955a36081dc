//! The simulated kubelet's decisions (pure): given the VMs, what it knows of their Nodes and the time, which Node
//! writes are due and when to look again.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::time::Instant;

use super::cloud::{Vm, VmState};
use super::node::ready_condition;

/// What the kubelet last wrote to a Node (or found there when it adopted it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Conditions posted Ready.
    Ready,
    /// Conditions set Unknown.
    Unknown,
    /// The Node was deleted by someone else; never recreated or written again.
    Gone,
}

/// The kubelet's memory of one Node, keyed by providerID.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// The Node's name.
    pub node_name: String,
    /// What the conditions say.
    pub phase: Phase,
    /// When the conditions last changed (their `lastTransitionTime`).
    pub since: Time,
    /// The last heartbeat posted.
    pub last_heartbeat: Time,
    /// When the next heartbeat is due.
    pub next_heartbeat: Instant,
    /// The VM revision whose labels and status were last posted (0 after an adoption: an updated VM is
    /// re-posted once, which is harmless).
    pub revision: u64,
}

/// A write to a Node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the Node (or adopt one with our providerID) and post a Ready status.
    Register,
    /// Post a fresh heartbeat on the Ready conditions.
    Heartbeat,
    /// Post Ready again on a Node found Unknown while its VM runs (after an adoption).
    MarkReady,
    /// Re-post the instance-type label, capacity and node info: the VM was updated in place.
    Refresh,
    /// Set the conditions Unknown: the VM died or was deleted.
    MarkUnknown,
    /// Delete the Node of a VM deleted a while ago, as a cloud-controller-manager's node lifecycle controller
    /// does for an instance that no longer exists (only when asked to: see `plan`'s `remove_after`).
    RemoveNode,
}

/// What is due now and when to look again (`None`: only when the cloud changes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// providerID and the write due for it.
    pub actions: Vec<(String, Action)>,
    /// The next boot, death or heartbeat deadline.
    pub wake_at: Option<Instant>,
}

/// Decides the writes due at `now`. A VM's Node should be Ready once the VM runs and is initialized, Unknown once
/// it is dead or deleted; heartbeats every `heartbeat` (none when `None`); and, with `remove_after`, gone that
/// long after its VM was deleted (the Node of a machine deleted before it learned its Node's name is otherwise
/// nobody's to delete: in a real cluster the cloud-controller-manager deletes it).
pub fn plan<'a>(
    vms: impl IntoIterator<Item = &'a Vm>,
    records: &HashMap<String, Record>,
    now: Instant,
    heartbeat: Option<Duration>,
    remove_after: Option<Duration>,
) -> Plan {
    let mut plan = Plan::default();
    let mut wake = |t: Instant| {
        if t > now {
            plan.wake_at = Some(plan.wake_at.map_or(t, |w| w.min(t)));
        }
    };
    let mut actions = Vec::new();
    // The recorded Nodes whose VM the cloud still knows.
    let mut seen = std::collections::HashSet::new();
    for vm in vms {
        let state = vm.state(now);
        let ready_at = vm.node_ready_at();
        let up = state == VmState::Running && ready_at.is_some_and(|t| t <= now);
        let down = matches!(state, VmState::Dead | VmState::Deleted);
        if !down {
            ready_at.into_iter().chain(vm.dies_at).for_each(&mut wake);
        }
        let record = records.get_key_value(&vm.provider_id);
        if let Some((id, _)) = record {
            seen.insert(id.as_str());
        }
        let action = match record.map(|(_, r)| (r.phase, r.next_heartbeat, r.revision)) {
            None if up => Some(Action::Register),
            Some((Phase::Ready, _, _)) if down => Some(Action::MarkUnknown),
            Some((Phase::Ready, _, revision)) if up && revision != vm.revision => Some(Action::Refresh),
            Some((Phase::Ready, next, _)) if up && heartbeat.is_some() => {
                if next <= now {
                    Some(Action::Heartbeat)
                } else {
                    wake(next);
                    None
                }
            }
            Some((Phase::Unknown, _, _)) if up => Some(Action::MarkReady),
            Some((Phase::Unknown, _, _)) => match (remove_after, vm.deleted_at) {
                (Some(after), Some(deleted)) if deleted + after <= now => Some(Action::RemoveNode),
                (Some(after), Some(deleted)) => {
                    wake(deleted + after);
                    None
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(action) = action {
            actions.push((vm.provider_id.clone(), action));
        }
    }
    // Nodes whose VM the cloud has forgotten entirely: the VM is gone.
    let mut orphans: Vec<(String, Action)> = records
        .iter()
        .filter(|(id, r)| r.phase == Phase::Ready && !seen.contains(id.as_str()))
        .map(|(id, _)| (id.clone(), Action::MarkUnknown))
        .collect();
    orphans.sort_by(|a, b| a.0.cmp(&b.0));
    actions.extend(orphans);
    plan.actions = actions;
    plan
}

/// The record for a Node found at start-up, if it belongs to a VM of this cloud (`is_ours`). The next heartbeat
/// is due one interval after the one the Node shows, so a quick restart writes nothing.
pub fn adopt(
    node: &Node,
    is_ours: impl Fn(&str) -> bool,
    now: Instant,
    wall_now: &Time,
    heartbeat: Option<Duration>,
) -> Option<(String, Record)> {
    let provider_id = node.spec.as_ref()?.provider_id.clone().filter(|id| is_ours(id))?;
    let ready = ready_condition(node);
    let phase = if ready.is_some_and(|c| c.status == "True") { Phase::Ready } else { Phase::Unknown };
    let since = ready.and_then(|c| c.last_transition_time.clone()).unwrap_or_else(|| wall_now.clone());
    let last_heartbeat = ready.and_then(|c| c.last_heartbeat_time.clone()).unwrap_or_else(|| wall_now.clone());
    let age = wall_now.0.duration_since(last_heartbeat.0);
    let age = Duration::try_from(age).unwrap_or_default();
    let next_heartbeat = now + heartbeat.map_or(Duration::ZERO, |h| h.saturating_sub(age));
    let record =
        Record { node_name: node.metadata.name.clone()?, phase, since, last_heartbeat, next_heartbeat, revision: 0 };
    Some((provider_id, record))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::providers::inmemory::node::{Health, conditions};

    const S: Duration = Duration::from_secs(1);
    const BEAT: Option<Duration> = Some(Duration::from_secs(30));

    fn vm(id: &str, t0: Instant, boot: u64) -> Vm {
        Vm {
            id: id.into(),
            provider_id: format!("inmemory:///z/{id}"),
            machine_name: id.into(),
            namespace: "default".into(),
            region: "r".into(),
            zone: "z".into(),
            machine_type: "m".into(),
            cpu: "1".into(),
            memory: "1Gi".into(),
            tags: BTreeMap::new(),
            node_template: None,
            kubelet_version: "v1.37.0".into(),
            revision: 0,
            created_at: t0,
            boot_at: t0 + S * boot as u32,
            initialized_at: Some(t0),
            dies_at: None,
            deleted_at: None,
        }
    }

    fn time() -> Time {
        Time("2025-01-01T00:00:00Z".parse().unwrap())
    }

    fn record(phase: Phase, next_heartbeat: Instant) -> Record {
        Record { node_name: "n".into(), phase, since: time(), last_heartbeat: time(), next_heartbeat, revision: 0 }
    }

    #[tokio::test(start_paused = true)]
    async fn plan_table() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + S * s as u32;
        let booting = vm("a", t0, 10);
        let running = vm("a", t0, 0);
        let dead = Vm { dies_at: Some(at(5)), ..running.clone() };
        let dying = Vm { dies_at: Some(at(50)), ..running.clone() };
        let deleted = Vm { deleted_at: Some(at(5)), ..running.clone() };
        let uninit = Vm { initialized_at: None, ..running.clone() };
        let updated = Vm { revision: 1, ..running.clone() };
        let updated_dead = Vm { revision: 1, ..dead.clone() };
        let late_init = Vm { initialized_at: Some(at(20)), ..running.clone() };
        let id = running.provider_id.clone();
        // name, VM, record, now, heartbeat interval, expected action, expected wake-up
        type Case<'a> = (&'a str, Vm, Option<Record>, Instant, Option<Duration>, Option<Action>, Option<Instant>);
        let cases: Vec<Case> = vec![
            ("booting: wake at boot", booting.clone(), None, at(1), BEAT, None, Some(at(10))),
            ("booted: register", booting.clone(), None, at(10), BEAT, Some(Action::Register), None),
            ("uninitialized: wait for the cloud", uninit.clone(), None, at(10), BEAT, None, None),
            ("initialized late: wake then", late_init.clone(), None, at(10), BEAT, None, Some(at(20))),
            (
                "ready, heartbeat not due",
                running.clone(),
                Some(record(Phase::Ready, at(30))),
                at(10),
                BEAT,
                None,
                Some(at(30)),
            ),
            (
                "ready, heartbeat due",
                running.clone(),
                Some(record(Phase::Ready, at(30))),
                at(30),
                BEAT,
                Some(Action::Heartbeat),
                None,
            ),
            ("ready, no heartbeats", running.clone(), Some(record(Phase::Ready, at(30))), at(99), None, None, None),
            ("ready, will die", dying.clone(), Some(record(Phase::Ready, at(60))), at(10), BEAT, None, Some(at(50))),
            (
                "dead: unknown",
                dead.clone(),
                Some(record(Phase::Ready, at(30))),
                at(6),
                BEAT,
                Some(Action::MarkUnknown),
                None,
            ),
            (
                "deleted: unknown",
                deleted.clone(),
                Some(record(Phase::Ready, at(30))),
                at(6),
                BEAT,
                Some(Action::MarkUnknown),
                None,
            ),
            ("dead, already unknown", dead.clone(), Some(record(Phase::Unknown, at(30))), at(6), BEAT, None, None),
            ("dead before registering: never", dead.clone(), None, at(6), BEAT, None, None),
            (
                "adopted unknown, VM runs",
                running.clone(),
                Some(record(Phase::Unknown, at(0))),
                at(1),
                BEAT,
                Some(Action::MarkReady),
                None,
            ),
            (
                "updated in place: refresh before the heartbeat",
                updated.clone(),
                Some(record(Phase::Ready, at(30))),
                at(10),
                BEAT,
                Some(Action::Refresh),
                None,
            ),
            (
                "updated, no heartbeats: refresh",
                updated.clone(),
                Some(record(Phase::Ready, at(30))),
                at(10),
                None,
                Some(Action::Refresh),
                None,
            ),
            (
                "updated then died: unknown",
                updated_dead.clone(),
                Some(record(Phase::Ready, at(30))),
                at(6),
                BEAT,
                Some(Action::MarkUnknown),
                None,
            ),
            ("gone: never again", running.clone(), Some(record(Phase::Gone, at(0))), at(99), BEAT, None, None),
        ];
        for (name, vm, rec, now, beat, want_action, want_wake) in cases {
            let records: HashMap<String, Record> = rec.into_iter().map(|r| (id.clone(), r)).collect();
            let got = plan(&[vm], &records, now, beat, None);
            let want_actions: Vec<(String, Action)> = want_action.into_iter().map(|a| (id.clone(), a)).collect();
            assert_eq!(got.actions, want_actions, "{name}");
            assert_eq!(got.wake_at, want_wake, "{name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_node_of_a_deleted_vm_is_removed_when_asked_to() {
        let t0 = Instant::now();
        let deleted = Vm { deleted_at: Some(t0 + S * 5), ..vm("a", t0, 0) };
        let id = deleted.provider_id.clone();
        let unknown: HashMap<String, Record> = [(id.clone(), record(Phase::Unknown, t0))].into();
        let after = Some(S * 10);
        let early = plan(std::slice::from_ref(&deleted), &unknown, t0 + S * 6, BEAT, after);
        assert_eq!((early.actions.as_slice(), early.wake_at), (&[][..], Some(t0 + S * 15)));
        let due = plan(std::slice::from_ref(&deleted), &unknown, t0 + S * 15, BEAT, after);
        assert_eq!(due.actions, vec![(id.clone(), Action::RemoveNode)]);
        let never = plan(std::slice::from_ref(&deleted), &unknown, t0 + S * 99, BEAT, None);
        assert!(never.actions.is_empty());
        // Still Ready: marked Unknown first, as a kubelet that stops posting would.
        let ready: HashMap<String, Record> = [(id.clone(), record(Phase::Ready, t0))].into();
        let first = plan(std::slice::from_ref(&deleted), &ready, t0 + S * 99, BEAT, after);
        assert_eq!(first.actions, vec![(id, Action::MarkUnknown)]);
    }

    #[tokio::test(start_paused = true)]
    async fn forgotten_vms_go_unknown() {
        let t0 = Instant::now();
        let records: HashMap<String, Record> = [
            ("inmemory:///z/x".to_string(), record(Phase::Ready, t0)),
            ("inmemory:///z/y".to_string(), record(Phase::Unknown, t0)),
        ]
        .into();
        let got = plan(&[] as &[Vm], &records, t0, BEAT, None);
        assert_eq!(got.actions, vec![("inmemory:///z/x".to_string(), Action::MarkUnknown)]);
    }

    fn node(provider_id: &str, ready: Option<Health>, beat: &str) -> Node {
        let beat = Time(beat.parse().unwrap());
        Node {
            metadata: ObjectMeta { name: Some("n1".into()), ..Default::default() },
            spec: Some(NodeSpec { provider_id: Some(provider_id.into()), ..Default::default() }),
            status: ready.map(|h| NodeStatus { conditions: Some(conditions(h, &time(), &beat)), ..Default::default() }),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn adopt_table() {
        let now = Instant::now();
        let wall = Time("2025-01-01T00:01:00Z".parse().unwrap());
        let ours = |id: &str| id.starts_with("inmemory:///z/");
        let cases = [
            (
                "fresh ready",
                node("inmemory:///z/a", Some(Health::Ready), "2025-01-01T00:00:50Z"),
                Some((Phase::Ready, 20)),
            ),
            (
                "stale ready",
                node("inmemory:///z/a", Some(Health::Ready), "2025-01-01T00:00:00Z"),
                Some((Phase::Ready, 0)),
            ),
            (
                "unknown",
                node("inmemory:///z/a", Some(Health::Unknown), "2025-01-01T00:00:50Z"),
                Some((Phase::Unknown, 20)),
            ),
            ("no status", node("inmemory:///z/a", None, "2025-01-01T00:00:50Z"), Some((Phase::Unknown, 30))),
            ("not ours", node("aws:///eu/i-1", Some(Health::Ready), "2025-01-01T00:00:50Z"), None),
        ];
        for (name, node, want) in cases {
            let got = adopt(&node, ours, now, &wall, BEAT).map(|(id, r)| {
                assert_eq!(id, "inmemory:///z/a");
                (r.phase, (r.next_heartbeat - now).as_secs())
            });
            assert_eq!(got, want, "{name}");
        }
    }
}
