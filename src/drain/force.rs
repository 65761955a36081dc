//! When a drain is forced (every pod deleted with grace period 0, nothing waited for): MCM's rules, pure, for the
//! machine controller to decide before it calls [`drain`](super::drain).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The Machine label that forces the drain when it parses as true ([`parse_bool`]).
pub const FORCE_DELETION_LABEL: &str = "force-deletion";

/// How long a node may be NotReady (or have a read-only filesystem) before its drain is forced: its kubelet cannot
/// stop pods any more, so waiting for graceful termination is pointless. Hard-coded in MCM too.
pub const UNHEALTHY_NODE_FORCE_AFTER: Duration = Duration::from_secs(5 * 60);

/// Why a drain is forced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForceReason {
    /// The Machine carries `force-deletion` with a true value.
    Label,
    /// The drain timeout has passed since the Machine's deletion began.
    DrainTimeout {
        /// Time since `metadata.deletionTimestamp`.
        since_deletion: Duration,
    },
    /// The node's `Ready` condition has not been `True` for longer than [`UNHEALTHY_NODE_FORCE_AFTER`].
    NodeNotReady {
        /// Time since the condition's last transition.
        since: Duration,
    },
    /// The node's `ReadonlyFilesystem` condition has not been `False` for longer than
    /// [`UNHEALTHY_NODE_FORCE_AFTER`].
    ReadonlyFilesystem {
        /// Time since the condition's last transition.
        since: Duration,
    },
}

impl fmt::Display for ForceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForceReason::Label => write!(f, "the machine is labelled {FORCE_DELETION_LABEL}=true"),
            ForceReason::DrainTimeout { since_deletion } => {
                write!(f, "the drain timeout passed ({}s since deletion began)", since_deletion.as_secs())
            }
            ForceReason::NodeNotReady { since } => write!(f, "the node has not been Ready for {}s", since.as_secs()),
            ForceReason::ReadonlyFilesystem { since } => {
                write!(f, "the node has had a read-only filesystem for {}s", since.as_secs())
            }
        }
    }
}

/// Go's `strconv.ParseBool`: `1 t T TRUE true True` and `0 f F FALSE false False`; anything else is `None`.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Time from `then` to `now`, zero when `then` is in the future.
fn elapsed(then: &Time, now: jiff::Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then.0)).unwrap_or_default()
}

/// Whether the drain of a machine must be forced, and why (the first rule that fires, in MCM's order):
/// the `force-deletion` label, `now - deletionTimestamp > drain_timeout`, or the node (`node_conditions`: the Node's
/// or the Machine's copy of them) NotReady or with a read-only filesystem for more than 5 minutes, measured from the
/// condition's `lastTransitionTime`. A condition without a transition time never forces (MCM would treat it as
/// ancient and force).
pub fn should_force(
    machine_labels: Option<&BTreeMap<String, String>>,
    deletion_timestamp: Option<&Time>,
    drain_timeout: Duration,
    node_conditions: &[NodeCondition],
    now: jiff::Timestamp,
) -> Option<ForceReason> {
    if machine_labels.and_then(|l| l.get(FORCE_DELETION_LABEL)).and_then(|v| parse_bool(v)) == Some(true) {
        return Some(ForceReason::Label);
    }
    if let Some(deleted) = deletion_timestamp {
        let since_deletion = elapsed(deleted, now);
        if since_deletion > drain_timeout {
            return Some(ForceReason::DrainTimeout { since_deletion });
        }
    }
    node_conditions.iter().find_map(|c| {
        let since = elapsed(c.last_transition_time.as_ref()?, now);
        if since <= UNHEALTHY_NODE_FORCE_AFTER {
            return None;
        }
        match c.type_.as_str() {
            "Ready" if c.status != "True" => Some(ForceReason::NodeNotReady { since }),
            "ReadonlyFilesystem" if c.status != "False" => Some(ForceReason::ReadonlyFilesystem { since }),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_bool_follows_go() {
        for v in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(v), Some(true), "{v}");
        }
        for v in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(v), Some(false), "{v}");
        }
        for v in ["", "yes", "tRUE", "on", " true", "2"] {
            assert_eq!(parse_bool(v), None, "{v:?}");
        }
    }

    fn at(seconds_ago: i64, now: jiff::Timestamp) -> Time {
        Time(now - jiff::SignedDuration::from_secs(seconds_ago))
    }

    fn condition(type_: &str, status: &str, seconds_ago: Option<i64>, now: jiff::Timestamp) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: seconds_ago.map(|s| at(s, now)),
            ..Default::default()
        }
    }

    #[test]
    fn force_rules() {
        let now: jiff::Timestamp = "2025-06-01T12:00:00Z".parse().unwrap();
        let timeout = Duration::from_secs(2 * 3600);
        let label = |v: &str| BTreeMap::from([(FORCE_DELETION_LABEL.to_string(), v.to_string())]);
        let healthy = vec![
            condition("Ready", "True", Some(86_400), now),
            condition("ReadonlyFilesystem", "False", Some(86_400), now),
        ];
        // What, the machine's labels, how long ago deletion began, the node's conditions, the verdict.
        type Case =
            (&'static str, Option<BTreeMap<String, String>>, Option<i64>, Vec<NodeCondition>, Option<ForceReason>);
        let cases: Vec<Case> = vec![
            ("nothing", None, None, healthy.clone(), None),
            ("label true", Some(label("true")), None, healthy.clone(), Some(ForceReason::Label)),
            ("label 1", Some(label("1")), Some(10), healthy.clone(), Some(ForceReason::Label)),
            ("label False", Some(label("False")), None, healthy.clone(), None),
            ("label garbage", Some(label("yes")), None, healthy.clone(), None),
            ("deleting within the timeout", None, Some(7200), healthy.clone(), None),
            (
                "deleting past the timeout",
                None,
                Some(7201),
                healthy.clone(),
                Some(ForceReason::DrainTimeout { since_deletion: Duration::from_secs(7201) }),
            ),
            ("deletion in the future", None, Some(-60), healthy.clone(), None),
            (
                "NotReady for 5m1s",
                None,
                None,
                vec![condition("Ready", "False", Some(301), now)],
                Some(ForceReason::NodeNotReady { since: Duration::from_secs(301) }),
            ),
            (
                "Unknown for 10m",
                None,
                None,
                vec![condition("Ready", "Unknown", Some(600), now)],
                Some(ForceReason::NodeNotReady { since: Duration::from_secs(600) }),
            ),
            ("NotReady for exactly 5m", None, None, vec![condition("Ready", "False", Some(300), now)], None),
            ("NotReady, no transition time", None, None, vec![condition("Ready", "False", None, now)], None),
            (
                "read-only filesystem for 6m",
                None,
                None,
                vec![
                    condition("Ready", "True", Some(600), now),
                    condition("ReadonlyFilesystem", "True", Some(360), now),
                ],
                Some(ForceReason::ReadonlyFilesystem { since: Duration::from_secs(360) }),
            ),
            (
                "read-only filesystem for 1m",
                None,
                None,
                vec![condition("ReadonlyFilesystem", "True", Some(60), now)],
                None,
            ),
            (
                "other conditions do not count",
                None,
                None,
                vec![condition("DiskPressure", "True", Some(3600), now)],
                None,
            ),
            (
                "the label wins over the timeout",
                Some(label("T")),
                Some(9000),
                vec![condition("Ready", "False", Some(3600), now)],
                Some(ForceReason::Label),
            ),
        ];
        for (what, labels, deleted_ago, conditions, expected) in cases {
            let deleted = deleted_ago.map(|s| at(s, now));
            assert_eq!(should_force(labels.as_ref(), deleted.as_ref(), timeout, &conditions, now), expected, "{what}");
        }
    }

    #[test]
    fn reasons_read_well() {
        assert_eq!(ForceReason::Label.to_string(), "the machine is labelled force-deletion=true");
        let r = ForceReason::NodeNotReady { since: Duration::from_secs(301) };
        assert_eq!(r.to_string(), "the node has not been Ready for 301s");
    }
}
