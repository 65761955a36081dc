//! Which machine a MachineSet deletes first: MCM's `ActiveMachines` order (`docs/machine-lifecycle.md` "Deletion
//! order".
//!
//! Earlier in the order means deleted sooner:
//! 1. machines that are not preserved before preserved ones; among preserved ones, auto-preserved before
//!    explicitly preserved, then the earlier preservation expiry first;
//! 2. the lower `machinepriority.machine.sapcloud.io` first (absent or unparsable = 3);
//! 3. machines with a valid `machine.sapcloud.io/marked-for-deletion-time` before those without, the earlier
//!    mark first;
//! 4. the lower phase rank first (Terminating, Failed, CrashLoopBackOff, Unknown, Pending, Available, Running;
//!    in-place phases and "no phase yet" rank with Terminating);
//! 5. the older machine first.
//!
//! MCM's sort is not stable, so ties come out in any order there; we break the last tie by name so that a plan
//! is reproducible.

use std::cmp::Ordering;

use jiff::Timestamp;

use super::object_meta::{annotation, parse_rfc3339};
use crate::api::mcm::names::{MARKED_FOR_DELETION_TIME, PRESERVE, PRESERVE_AUTO, PRIORITY_ANNOTATION};
use crate::api::mcm::{Machine, MachinePhase};

/// The priority of a machine without (or with an unparsable) priority annotation.
pub const DEFAULT_PRIORITY: i64 = 3;

/// What the deletion order looks at, extracted from one Machine at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletionFacts {
    /// The machine name (the final tie-breaker).
    pub name: String,
    /// The preservation expiry, present only while the machine is preserved (expiry after `now`).
    pub preserved_until: Option<Timestamp>,
    /// Whether the machine's preserve annotation is `auto-preserved`.
    pub auto_preserved: bool,
    /// The deletion priority (default [`DEFAULT_PRIORITY`]).
    pub priority: i64,
    /// The parsed `marked-for-deletion-time`, if valid.
    pub marked_for_deletion: Option<Timestamp>,
    /// The phase rank, see [`phase_rank`].
    pub phase_rank: u8,
    /// The creation timestamp (absent sorts as oldest, like Go's zero time).
    pub created: Option<Timestamp>,
}

impl DeletionFacts {
    /// Extracts the facts from a Machine as seen at `now`.
    pub fn from_machine(machine: &Machine, now: Timestamp) -> Self {
        let meta = &machine.metadata;
        let current = machine.status.as_ref().and_then(|s| s.current_status.as_ref());
        let preserved_until = current.and_then(|c| c.preserve_expiry_time.as_ref()).map(|t| t.0).filter(|t| *t > now);
        DeletionFacts {
            name: meta.name.clone().unwrap_or_default(),
            preserved_until,
            auto_preserved: annotation(meta, PRESERVE) == Some(PRESERVE_AUTO),
            priority: parse_priority(annotation(meta, PRIORITY_ANNOTATION)),
            marked_for_deletion: annotation(meta, MARKED_FOR_DELETION_TIME).and_then(parse_rfc3339),
            phase_rank: phase_rank(current.and_then(|c| c.phase.as_ref())),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
        }
    }

    /// Whether the machine is preserved now.
    pub fn preserved(&self) -> bool {
        self.preserved_until.is_some()
    }
}

/// Reads a priority annotation as Go's `strconv.Atoi` would: absent, empty or unparsable means
/// [`DEFAULT_PRIORITY`].
pub fn parse_priority(value: Option<&str>) -> i64 {
    value.and_then(|v| v.parse::<i64>().ok()).unwrap_or(DEFAULT_PRIORITY)
}

/// The rank of a phase in the deletion order: Terminating 0, Failed 1, CrashLoopBackOff 2, Unknown 3, Pending 4,
/// Available 5, Running 6. In-place phases and a machine without a phase rank 0, as in MCM (its phase map has no
/// entry for them).
pub fn phase_rank(phase: Option<&MachinePhase>) -> u8 {
    match phase {
        Some(MachinePhase::Failed) => 1,
        Some(MachinePhase::CrashLoopBackOff) => 2,
        Some(MachinePhase::Unknown) => 3,
        Some(MachinePhase::Pending) => 4,
        Some(MachinePhase::Available) => 5,
        Some(MachinePhase::Running) => 6,
        _ => 0,
    }
}

/// The last key of the order, among machines alike in everything else: MCM's (and CAPI's `Oldest`) older first,
/// CAPI's `Newest` newer first, or CAPI's `Random`, which core breaks by name alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AgeOrder {
    /// The older machine first (MCM; CAPI `deletion.order: Oldest`).
    #[default]
    Oldest,
    /// The newer machine first (CAPI `Newest`).
    Newest,
    /// No age: the name decides (CAPI `Random`, its default).
    Random,
}

impl AgeOrder {
    /// The order a MachineSet asks for: `None` (an MCM set) is MCM's; CAPI's `deletion.order`, unset meaning
    /// `Random` as in core.
    pub fn of_capi(order: Option<&str>) -> AgeOrder {
        match order {
            None | Some("Oldest") => AgeOrder::Oldest,
            Some("Newest") => AgeOrder::Newest,
            Some(_) => AgeOrder::Random,
        }
    }
}

/// Compares two machines: `Less` means `a` is deleted before `b`.
pub fn compare(a: &DeletionFacts, b: &DeletionFacts) -> Ordering {
    compare_in(AgeOrder::Oldest, a, b)
}

/// [`compare`] with the last key in `age` order.
pub fn compare_in(age: AgeOrder, a: &DeletionFacts, b: &DeletionFacts) -> Ordering {
    preservation_key(a)
        .cmp(&preservation_key(b))
        .then(a.priority.cmp(&b.priority))
        .then_with(|| match (a.marked_for_deletion, b.marked_for_deletion) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
        .then(a.phase_rank.cmp(&b.phase_rank))
        .then(match age {
            AgeOrder::Oldest => a.created.cmp(&b.created),
            AgeOrder::Newest => b.created.cmp(&a.created),
            AgeOrder::Random => Ordering::Equal,
        })
        .then_with(|| a.name.cmp(&b.name))
}

/// Not preserved (0) before auto-preserved (1) before explicitly preserved (2); then the earlier expiry.
fn preservation_key(f: &DeletionFacts) -> (u8, Option<Timestamp>) {
    match f.preserved_until {
        None => (0, None),
        Some(until) if f.auto_preserved => (1, Some(until)),
        Some(until) => (2, Some(until)),
    }
}

/// Sorts machines so that the first is the first to delete.
pub fn sort_for_deletion(machines: &mut [DeletionFacts]) {
    machines.sort_by(compare);
}

/// The names of the first `n` machines to delete.
pub fn first_to_delete(machines: &[DeletionFacts], n: usize) -> Vec<String> {
    let mut sorted: Vec<&DeletionFacts> = machines.iter().collect();
    sorted.sort_by(|a, b| compare(a, b));
    sorted.into_iter().take(n).map(|f| f.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;
    use crate::api::mcm::{CurrentStatus, MachineStatus};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const NOW: &str = "2026-03-01T12:00:00Z";

    /// A machine for the table: name, phase, creation minute, annotations, preserve expiry.
    fn machine(
        name: &str,
        phase: Option<MachinePhase>,
        created_min: u32,
        annotations: &[(&str, &str)],
        preserve_until: Option<&str>,
    ) -> Machine {
        let mut m = Machine::new(name, Default::default());
        m.metadata = ObjectMeta {
            name: Some(name.into()),
            creation_timestamp: Some(Time(ts(&format!("2026-03-01T10:{created_min:02}:00Z")))),
            annotations: Some(
                annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        };
        m.status = Some(MachineStatus {
            current_status: Some(CurrentStatus {
                phase,
                preserve_expiry_time: preserve_until.map(|t| Time(ts(t))),
                ..Default::default()
            }),
            ..Default::default()
        });
        m
    }

    fn order(machines: &[Machine]) -> Vec<String> {
        let mut facts: Vec<DeletionFacts> = machines.iter().map(|m| DeletionFacts::from_machine(m, ts(NOW))).collect();
        sort_for_deletion(&mut facts);
        facts.into_iter().map(|f| f.name).collect()
    }

    use MachinePhase::*;

    #[test]
    fn capis_deletion_orders_decide_between_alike_machines() {
        // b is the oldest, c the newest; a Failed machine goes first in every order (CAPI: unhealthy first).
        let machines = [
            machine("c", Some(Running), 3, &[], None),
            machine("a", Some(Running), 2, &[], None),
            machine("b", Some(Running), 1, &[], None),
            machine("z", Some(Failed), 4, &[], None),
        ];
        let facts: Vec<DeletionFacts> = machines.iter().map(|m| DeletionFacts::from_machine(m, ts(NOW))).collect();
        for (order, expected) in [
            (None, ["z", "b", "a", "c"]),
            (Some("Oldest"), ["z", "b", "a", "c"]),
            (Some("Newest"), ["z", "c", "a", "b"]),
            (Some("Random"), ["z", "a", "b", "c"]),
            (Some(""), ["z", "a", "b", "c"]),
        ] {
            let age = AgeOrder::of_capi(order);
            let mut sorted: Vec<&DeletionFacts> = facts.iter().collect();
            sorted.sort_by(|a, b| compare_in(age, a, b));
            let names: Vec<&str> = sorted.iter().map(|f| f.name.as_str()).collect();
            assert_eq!(names, expected, "{order:?}");
        }
    }

    #[test]
    fn deletion_order_table() {
        let later = Some("2026-03-02T00:00:00Z");
        let sooner = Some("2026-03-01T18:00:00Z");
        let expired = Some("2026-03-01T11:00:00Z");
        let auto = [(PRESERVE, PRESERVE_AUTO)];
        let p1 = [(PRIORITY_ANNOTATION, "1")];
        let cases: Vec<(&str, Vec<Machine>, Vec<&str>)> = vec![
            (
                "phase rank: terminating, failed, crashloop, unknown, pending, available, running",
                vec![
                    machine("run", Some(Running), 0, &[], None),
                    machine("avail", Some(Available), 0, &[], None),
                    machine("pend", Some(Pending), 0, &[], None),
                    machine("unk", Some(Unknown), 0, &[], None),
                    machine("clb", Some(CrashLoopBackOff), 0, &[], None),
                    machine("fail", Some(Failed), 0, &[], None),
                    machine("term", Some(Terminating), 0, &[], None),
                ],
                vec!["term", "fail", "clb", "unk", "pend", "avail", "run"],
            ),
            (
                "no phase and in-place phases rank with Terminating (MCM's map zero value)",
                vec![
                    machine("fail", Some(Failed), 0, &[], None),
                    machine("inplace", Some(InPlaceUpdating), 1, &[], None),
                    machine("new", None, 2, &[], None),
                ],
                vec!["inplace", "new", "fail"],
            ),
            (
                "older first when everything else ties",
                vec![machine("young", Some(Running), 30, &[], None), machine("old", Some(Running), 10, &[], None)],
                vec!["old", "young"],
            ),
            (
                "name breaks a full tie",
                vec![machine("b", Some(Running), 0, &[], None), machine("a", Some(Running), 0, &[], None)],
                vec!["a", "b"],
            ),
            (
                "priority beats phase",
                vec![
                    machine("failed-p3", Some(Failed), 0, &[], None),
                    machine("running-p1", Some(Running), 0, &p1, None),
                ],
                vec!["running-p1", "failed-p3"],
            ),
            (
                "priority 2 before default 3, 5 after it",
                vec![
                    machine("p5", Some(Running), 0, &[(PRIORITY_ANNOTATION, "5")], None),
                    machine("p3", Some(Running), 0, &[], None),
                    machine("p2", Some(Running), 0, &[(PRIORITY_ANNOTATION, "2")], None),
                ],
                vec!["p2", "p3", "p5"],
            ),
            (
                "unparsable priority counts as 3",
                vec![
                    machine("junk", Some(Pending), 0, &[(PRIORITY_ANNOTATION, "high")], None),
                    machine("p3", Some(Running), 0, &[(PRIORITY_ANNOTATION, "3")], None),
                    machine("p1", Some(Running), 0, &p1, None),
                ],
                vec!["p1", "junk", "p3"],
            ),
            (
                "empty priority counts as 3",
                vec![
                    machine("empty", Some(Running), 5, &[(PRIORITY_ANNOTATION, "")], None),
                    machine("none", Some(Running), 0, &[], None),
                ],
                vec!["none", "empty"],
            ),
            (
                "marked before unmarked at equal priority, even against a worse phase",
                vec![
                    machine("unmarked-failed", Some(Failed), 0, &p1, None),
                    machine(
                        "marked-running",
                        Some(Running),
                        0,
                        &[(PRIORITY_ANNOTATION, "1"), (MARKED_FOR_DELETION_TIME, "2026-03-01T11:00:00Z")],
                        None,
                    ),
                ],
                vec!["marked-running", "unmarked-failed"],
            ),
            (
                "earlier mark first",
                vec![
                    machine("late", Some(Running), 0, &[(MARKED_FOR_DELETION_TIME, "2026-03-01T11:30:00Z")], None),
                    machine("early", Some(Running), 9, &[(MARKED_FOR_DELETION_TIME, "2026-03-01T11:00:00Z")], None),
                ],
                vec!["early", "late"],
            ),
            (
                "an invalid mark counts as no mark",
                vec![
                    machine("bad", Some(Running), 0, &[(MARKED_FOR_DELETION_TIME, "soon")], None),
                    machine("good", Some(Running), 9, &[(MARKED_FOR_DELETION_TIME, "2026-03-01T11:00:00Z")], None),
                ],
                vec!["good", "bad"],
            ),
            (
                "preserved last, even with priority 1",
                vec![
                    machine("preserved-p1", Some(Failed), 0, &p1, later),
                    machine("running", Some(Running), 0, &[], None),
                ],
                vec!["running", "preserved-p1"],
            ),
            (
                "auto-preserved before explicitly preserved",
                vec![
                    machine("explicit", Some(Failed), 0, &[(PRESERVE, "now")], sooner),
                    machine("auto", Some(Failed), 0, &auto, later),
                ],
                vec!["auto", "explicit"],
            ),
            (
                "among explicitly preserved, earlier expiry first",
                vec![
                    machine("later", Some(Running), 0, &[(PRESERVE, "now")], later),
                    machine("sooner", Some(Running), 9, &[(PRESERVE, "now")], sooner),
                ],
                vec!["sooner", "later"],
            ),
            (
                "an expired preservation does not count",
                vec![
                    machine("running", Some(Running), 0, &[], None),
                    machine("expired", Some(Failed), 9, &[(PRESERVE, "when-failed")], expired),
                ],
                vec!["expired", "running"],
            ),
            (
                "among preserved with equal expiry, the usual order applies",
                vec![
                    machine("running", Some(Running), 0, &[(PRESERVE, "now")], later),
                    machine("failed", Some(Failed), 0, &[(PRESERVE, "now")], later),
                ],
                vec!["failed", "running"],
            ),
        ];
        for (name, machines, expected) in cases {
            assert_eq!(order(&machines), expected, "{name}");
        }
    }

    #[test]
    fn priority_parsing_table() {
        let cases = [
            (None, 3),
            (Some(""), 3),
            (Some("1"), 1),
            (Some("+2"), 2),
            (Some("-1"), -1),
            (Some("01"), 1),
            (Some(" 1"), 3),
            (Some("1.5"), 3),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_priority(input), expected, "{input:?}");
        }
    }

    #[test]
    fn first_to_delete_takes_the_head_of_the_order() {
        let machines = [
            machine("run", Some(Running), 0, &[], None),
            machine("pend", Some(Pending), 0, &[], None),
            machine("fail", Some(Failed), 0, &[], None),
        ];
        let facts: Vec<_> = machines.iter().map(|m| DeletionFacts::from_machine(m, ts(NOW))).collect();
        assert_eq!(first_to_delete(&facts, 2), ["fail", "pend"]);
        assert_eq!(first_to_delete(&facts, 5).len(), 3);
        assert!(first_to_delete(&facts, 0).is_empty());
    }

    #[test]
    fn facts_from_a_bare_machine() {
        let m = Machine::new("bare", Default::default());
        let f = DeletionFacts::from_machine(&m, ts(NOW));
        assert_eq!(
            f,
            DeletionFacts {
                name: "bare".into(),
                preserved_until: None,
                auto_preserved: false,
                priority: 3,
                marked_for_deletion: None,
                phase_rank: 0,
                created: None
            }
        );
    }
}
