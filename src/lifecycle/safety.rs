//! The safety controller's decisions (`docs/machine-lifecycle.md` (a) and (b)): which cloud VMs are orphans, which
//! Nodes no Machine manages, and when the API-server freeze begins and ends.
//!
//! **Orphan VMs.** A VM the driver lists (`providerID -> machine name`) is claimed by a Machine of that name with
//! the same providerID, or by a Machine of that name still being created (phase empty or `CrashLoopBackOff`, or
//! inside the create flow right now). A VM no Machine claims is an orphan, but only once two observations agree:
//! [`suspects`] compares the first listing with the controllers' cache, [`confirm`] compares the suspects with a
//! second listing and a fresh read of the Machines from the API server. MCM deletes after the first comparison,
//! which deleted healthy VMs when its cache lagged (#657).
//!
//! **Unmanaged Nodes** ([`unmanaged_node`]): a Node no Machine names, older than the creation timeout, gets
//! `node.machine.sapcloud.io/not-managed-by-mcm=1` and loses MCM's node finalizer; a Node with a Machine loses
//! the annotation.
//!
//! **Freeze** ([`after_probe`]): a state machine over probe results of the control and target API servers.
//!
//! Imports `api`, `providers::contract` (the tag names) and sibling modules only.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use serde_json::Value;

use super::clock;
use super::create;
use super::status::{self, StatusPatch};
use crate::api::mcm::names::{NODE_FINALIZER, NOT_MANAGED_ANNOTATION};
use crate::api::mcm::{Machine, MachineOperationType, MachinePhase, MachineState};
use crate::providers::contract::{Code, identity, tags};

/// The shortest wait between two probes or two collections, so a zero flag value cannot spin.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The description MCM writes when the freeze ends and Unknown machines get a fresh health timeout.
pub const HEALTH_TIMEOUT_RESET: &str = "Machine Health Timeout was reset due to APIServer being unreachable";

/// Settings of the safety controller. Defaults are MCM's.
#[derive(Clone, Debug, PartialEq)]
pub struct SafetyConfig {
    /// `--machine-safety-orphan-vms-period` (15m): how often orphan VMs are looked for.
    pub orphan_vms_period: Duration,
    /// `--machine-safety-apiserver-statuscheck-period` (1m): how often the API servers are probed while up.
    pub apiserver_statuscheck_period: Duration,
    /// `--machine-safety-apiserver-statuscheck-timeout` (30s): how long the probes may fail before the machine
    /// controller freezes; while they fail they run every fifth of it. Also the deadline of one probe.
    pub apiserver_statuscheck_timeout: Duration,
    /// How long after an unfreeze every machine is reconciled again (MCM: 30s, fixed), so Nodes have time to
    /// report after the outage before health is judged.
    pub unfreeze_requeue_delay: Duration,
    /// The shortest pause between two orphan collections woken by machine events (not an MCM setting: a mass
    /// deletion would otherwise list every class once per machine).
    pub orphan_trigger_cooldown: Duration,
}

impl Default for SafetyConfig {
    fn default() -> Self {
        SafetyConfig {
            orphan_vms_period: Duration::from_secs(15 * 60),
            apiserver_statuscheck_period: Duration::from_secs(60),
            apiserver_statuscheck_timeout: Duration::from_secs(30),
            unfreeze_requeue_delay: Duration::from_secs(30),
            orphan_trigger_cooldown: Duration::from_secs(10),
        }
    }
}

impl SafetyConfig {
    /// The wait until the next probe: the period while the API servers answer, a fifth of the timeout while not.
    pub fn probe_interval(&self, down: bool) -> Duration {
        let interval = if down { self.apiserver_statuscheck_timeout / 5 } else { self.apiserver_statuscheck_period };
        interval.max(MIN_INTERVAL)
    }

    /// The wait between periodic orphan collections.
    pub fn orphan_period(&self) -> Duration {
        self.orphan_vms_period.max(MIN_INTERVAL)
    }

    /// The deadline of one probe: a probe that has not answered within the whole timeout counts as down.
    pub fn probe_deadline(&self) -> Duration {
        self.apiserver_statuscheck_timeout.max(MIN_INTERVAL)
    }
}

/// What the orphan decision needs of a Machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claimant {
    /// The Machine's name (VMs are listed with the name of the machine they were created for).
    pub name: String,
    /// `spec.providerID`, if set.
    pub provider_id: Option<String>,
    /// The phase (`None`: being created).
    pub phase: Option<MachinePhase>,
}

impl Claimant {
    /// The claimant view of `machine`.
    pub fn of(machine: &Machine) -> Claimant {
        Claimant {
            name: machine.metadata.name.clone().unwrap_or_default(),
            provider_id: create::provider_id(machine).map(str::to_string),
            phase: status::phase(machine).cloned(),
        }
    }
}

/// Why a VM is not an orphan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A Machine of that name carries its providerID (in any spelling of it).
    ProviderId,
    /// A Machine of that name is still being created (phase empty or `CrashLoopBackOff`): the VM may be the one
    /// its create call just made, before the providerID is written.
    CreationInProgress,
    /// The create flow of a Machine of that name is calling the cloud right now.
    CreateFlowRunning,
}

/// The Machines that can claim VMs, by name (names are unique per namespace only, so several may share one; any
/// of them claiming a VM keeps it), and the names inside the create flow.
#[derive(Clone, Debug, Default)]
pub struct Claims {
    by_name: HashMap<String, Vec<Claimant>>,
    creating: BTreeSet<String>,
}

impl Claims {
    /// Claims of `machines`, with the machine names whose create flow is running.
    pub fn new(machines: impl IntoIterator<Item = Claimant>, creating: impl IntoIterator<Item = String>) -> Claims {
        let mut by_name: HashMap<String, Vec<Claimant>> = HashMap::new();
        for m in machines {
            by_name.entry(m.name.clone()).or_default().push(m);
        }
        Claims { by_name, creating: creating.into_iter().collect() }
    }

    /// Who claims the VM `provider_id` listed for machine `name`, if anyone. A Machine's providerID claims the VM
    /// in any spelling of it (MCM's AWS region form `aws:///<region>/<id>` and the zone form a driver lists now
    /// are one instance: [`identity::same_vm`]).
    pub fn claim(&self, provider_id: &str, name: &str) -> Option<Claim> {
        if self.creating.contains(name) {
            return Some(Claim::CreateFlowRunning);
        }
        let machines = self.by_name.get(name)?;
        if machines.iter().any(|m| m.provider_id.as_deref().is_some_and(|id| identity::same_vm(id, provider_id))) {
            return Some(Claim::ProviderId);
        }
        machines.iter().any(|m| being_created(m.phase.as_ref())).then_some(Claim::CreationInProgress)
    }
}

/// Phase empty or `CrashLoopBackOff`: the create flow is not done with the machine.
fn being_created(phase: Option<&MachinePhase>) -> bool {
    match phase {
        None | Some(MachinePhase::CrashLoopBackOff) => true,
        Some(MachinePhase::Other(text)) => text.is_empty(),
        Some(_) => false,
    }
}

/// A VM no Machine claims.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Orphan {
    /// The VM's providerID.
    pub provider_id: String,
    /// The machine name the driver listed it with.
    pub machine_name: String,
}

/// The VMs of `listing` (providerID -> machine name) that the cached Machines do not claim: candidates, not yet
/// orphans.
pub fn suspects(listing: &BTreeMap<String, String>, cached: &Claims) -> Vec<Orphan> {
    listing
        .iter()
        .filter(|(id, name)| cached.claim(id, name).is_none())
        .map(|(id, name)| Orphan { provider_id: id.clone(), machine_name: name.clone() })
        .collect()
}

/// The suspects that are orphans: listed again under the same name by `relisted`, and claimed by none of the
/// Machines in `fresh` (read from the API server after the first listing, plus the cache and the create flows as
/// they are now).
pub fn confirm(suspects: &[Orphan], relisted: &BTreeMap<String, String>, fresh: &Claims) -> Vec<Orphan> {
    suspects
        .iter()
        .filter(|o| relisted.get(&o.provider_id) == Some(&o.machine_name))
        .filter(|o| fresh.claim(&o.provider_id, &o.machine_name).is_none())
        .cloned()
        .collect()
}

/// Why a class's VMs are not looked at: its providerSpec lists `tags` without this cluster's ownership keys (in
/// either spelling: `kubernetes.io/cluster/<c>`, or Azure's `kubernetes.io-cluster-<c>`), so a
/// listing by them could not be trusted to hold only this cluster's VMs. Classes without a `tags` field are left to
/// their driver, which selects by its own ownership rules. A list of tags is GCP's network tags
/// (`kubernetes-io-cluster-<cluster>`); a map holds tag keys (`kubernetes.io/cluster/<cluster>`).
pub fn class_tags_problem(provider_spec: &Value) -> Option<String> {
    let tags = provider_spec.get("tags")?;
    let found = match tags.as_array() {
        Some(list) => {
            let names: Vec<String> = list.iter().filter_map(|t| t.as_str().map(str::to_string)).collect();
            tags::network_ownership(&names)
        }
        None => {
            let keys: Vec<String> = tags.as_object().map(|t| t.keys().cloned().collect()).unwrap_or_default();
            tags::any_ownership(&keys)
        }
    };
    found.err().map(|why| format!("providerSpec.tags {why}"))
}

/// Whether a machine's last operation reports several VMs for it (the driver's `OutOfRange`), which asks for an
/// orphan collection when it first appears.
pub fn reports_out_of_range(machine: &Machine) -> bool {
    status::description(machine).contains(Code::OutOfRange.as_str())
}

/// What to change on a Node about MCM's management of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeMarks {
    /// `Some(true)`: add the not-managed annotation; `Some(false)`: remove it.
    pub annotate: Option<bool>,
    /// Remove MCM's node finalizer.
    pub remove_finalizer: bool,
}

impl NodeMarks {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.annotate.is_none() && !self.remove_finalizer
    }
}

/// MCM's `AnnotateNodesUnmanagedByMCM` for one Node: `has_machine` tells whether a Machine names it. A Node
/// without a Machine is left alone while younger than the creation timeout (its Machine may still be recording
/// it) — unless it is being deleted: then no Machine's deletion flow will release it, so MCM's finalizer goes at
/// once (a Node is never held by our finalizer once its Machine is gone).
pub fn unmanaged_node(node: &Node, has_machine: bool, now: Timestamp, creation_timeout: Duration) -> NodeMarks {
    let annotated = node.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(NOT_MANAGED_ANNOTATION));
    if has_machine {
        return NodeMarks { annotate: annotated.then_some(false), remove_finalizer: false };
    }
    let finalizer = node.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == NODE_FINALIZER));
    if node.metadata.deletion_timestamp.is_some() {
        return NodeMarks { annotate: None, remove_finalizer: finalizer };
    }
    let old_enough = node
        .metadata
        .creation_timestamp
        .as_ref()
        .is_some_and(|created| clock::between(created.0, now) >= creation_timeout);
    if !old_enough {
        return NodeMarks::default();
    }
    NodeMarks { annotate: (!annotated).then_some(true), remove_finalizer: finalizer }
}

/// The status an `Unknown` machine gets when the freeze ends: Running, with a fresh health clock.
pub fn health_timeout_reset(now: Timestamp) -> StatusPatch {
    let mut patch = StatusPatch::phase(
        MachinePhase::Running,
        status::operation(MachineOperationType::HealthCheck, MachineState::Successful, HEALTH_TIMEOUT_RESET, None, now),
        now,
    );
    if let Some(current) = patch.current_status.as_mut() {
        current.timeout_active = false;
    }
    patch
}

/// The API-server freeze between probes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FreezeState {
    /// Machine reconciles (not deletions) are held.
    pub frozen: bool,
    /// When the current run of failed probes began (`None` while the API servers answer).
    pub down_since: Option<Timestamp>,
}

/// A change of the freeze.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreezeChange {
    /// Hold machine reconciles.
    Freeze,
    /// Reset `Unknown` machines, reconcile every machine again, and release them.
    Unfreeze,
}

/// The outcome of a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreezeStep {
    /// The state once the change (if any) is done. On [`FreezeChange::Unfreeze`] it is to be kept only once the
    /// `Unknown` machines are reset; until then the controller stays frozen and probes again.
    pub state: FreezeState,
    /// What changes now.
    pub change: Option<FreezeChange>,
    /// When to probe again.
    pub next_probe: Duration,
}

/// After a probe that began at `started` and ended at `now` with both API servers answering (`up`) or not.
///
/// Down for at least the status-check timeout (counted from the first failed probe's start) freezes; one probe
/// with both up unfreezes. Probes run every period while up, every fifth of the timeout while down.
pub fn after_probe(
    state: FreezeState,
    up: bool,
    started: Timestamp,
    now: Timestamp,
    config: &SafetyConfig,
) -> FreezeStep {
    if up {
        return FreezeStep {
            state: FreezeState::default(),
            change: state.frozen.then_some(FreezeChange::Unfreeze),
            next_probe: config.probe_interval(false),
        };
    }
    let down_since = state.down_since.unwrap_or(started).min(started);
    let frozen = state.frozen || clock::between(down_since, now) >= config.apiserver_statuscheck_timeout;
    FreezeStep {
        state: FreezeState { frozen, down_since: Some(down_since) },
        change: (frozen && !state.frozen).then_some(FreezeChange::Freeze),
        next_probe: config.probe_interval(true),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;
    use crate::api::mcm::{CurrentStatus, LastOperation, MachineStatus};

    fn listing(vms: &[(&str, &str)]) -> BTreeMap<String, String> {
        vms.iter().map(|(id, name)| (id.to_string(), name.to_string())).collect()
    }

    fn m(name: &str, provider_id: Option<&str>, phase: Option<MachinePhase>) -> Claimant {
        Claimant { name: name.into(), provider_id: provider_id.map(str::to_string), phase }
    }

    fn claims(machines: &[Claimant], creating: &[&str]) -> Claims {
        Claims::new(machines.iter().cloned(), creating.iter().map(|s| s.to_string()))
    }

    fn ids(orphans: &[Orphan]) -> Vec<&str> {
        orphans.iter().map(|o| o.provider_id.as_str()).collect()
    }

    /// A row: name, machines, machine names in the create flow, the claim on VM `id-1` listed as `a`.
    type ClaimRow = (&'static str, Vec<Claimant>, Vec<&'static str>, Option<Claim>);

    #[test]
    fn claims_by_name_and_provider_id() {
        use MachinePhase::*;
        let cases: [ClaimRow; 11] = [
            ("no machine", vec![], vec![], None),
            ("same name and id", vec![m("a", Some("id-1"), Some(Running))], vec![], Some(Claim::ProviderId)),
            ("same id, Failed", vec![m("a", Some("id-1"), Some(Failed))], vec![], Some(Claim::ProviderId)),
            ("same name, other id, Running", vec![m("a", Some("id-2"), Some(Running))], vec![], None),
            ("same name, no id, Pending", vec![m("a", None, Some(Pending))], vec![], None),
            ("same name, no phase", vec![m("a", None, None)], vec![], Some(Claim::CreationInProgress)),
            (
                "same name, empty phase",
                vec![m("a", None, Some(Other(String::new())))],
                vec![],
                Some(Claim::CreationInProgress),
            ),
            (
                "same name, CrashLoopBackOff",
                vec![m("a", Some("id-2"), Some(CrashLoopBackOff))],
                vec![],
                Some(Claim::CreationInProgress),
            ),
            ("other name, same id", vec![m("b", Some("id-1"), Some(Running))], vec![], None),
            ("create flow running", vec![], vec!["a"], Some(Claim::CreateFlowRunning)),
            (
                "two namespaces, one claims",
                vec![m("a", Some("id-2"), Some(Running)), m("a", Some("id-1"), Some(Running))],
                vec![],
                Some(Claim::ProviderId),
            ),
        ];
        for (name, machines, creating, want) in cases {
            assert_eq!(claims(&machines, &creating).claim("id-1", "a"), want, "{name}");
        }
    }

    #[test]
    fn claims_match_any_spelling_of_the_vm() {
        use MachinePhase::*;
        // name, the Machine's providerID, the providerID the driver lists, claimed?
        let cases = [
            ("AWS region form on the Machine, zone form listed", "aws:///eu-west-1/i-1", "aws:///eu-west-1a/i-1", true),
            ("AWS zone form on the Machine, region form listed", "aws:///eu-west-1a/i-1", "aws:///eu-west-1/i-1", true),
            ("AWS other instance", "aws:///eu-west-1/i-1", "aws:///eu-west-1a/i-2", false),
            ("GCE two and three slashes", "gce:///p/europe-west1-b/m1", "gce://p/europe-west1-b/m1", true),
            ("in-memory other zone is another VM", "inmemory:///local-a/i-1", "inmemory:///local-b/i-1", false),
        ];
        for (name, on_machine, listed, want) in cases {
            for phase in [Running, Pending, Failed] {
                let got = claims(&[m("a", Some(on_machine), Some(phase.clone()))], &[]).claim(listed, "a");
                assert_eq!(got, want.then_some(Claim::ProviderId), "{name}, {phase:?}");
            }
        }
    }

    /// One row: the first listing, the cache, a second listing, a fresh read, the create flows running at the
    /// confirmation, and the VMs deleted.
    struct Row {
        name: &'static str,
        first: Vec<(&'static str, &'static str)>,
        cached: Vec<Claimant>,
        second: Vec<(&'static str, &'static str)>,
        fresh: Vec<Claimant>,
        creating: Vec<&'static str>,
        suspects: Vec<&'static str>,
        deleted: Vec<&'static str>,
    }

    #[test]
    fn orphans_need_two_listings_and_a_fresh_read() {
        use MachinePhase::*;
        let running = |n: &str, id: &str| m(n, Some(id), Some(Running));
        let rows = [
            Row {
                name: "every VM claimed",
                first: vec![("id-a", "a"), ("id-b", "b")],
                cached: vec![running("a", "id-a"), running("b", "id-b")],
                second: vec![("id-a", "a"), ("id-b", "b")],
                fresh: vec![running("a", "id-a"), running("b", "id-b")],
                creating: vec![],
                suspects: vec![],
                deleted: vec![],
            },
            Row {
                name: "no machine anywhere: deleted",
                first: vec![("id-x", "x")],
                cached: vec![],
                second: vec![("id-x", "x")],
                fresh: vec![],
                creating: vec![],
                suspects: vec!["id-x"],
                deleted: vec!["id-x"],
            },
            Row {
                name: "machine in the API server, not yet in the cache (#657): kept",
                first: vec![("id-x", "x")],
                cached: vec![],
                second: vec![("id-x", "x")],
                fresh: vec![running("x", "id-x")],
                creating: vec![],
                suspects: vec!["id-x"],
                deleted: vec![],
            },
            Row {
                name: "fresh read shows the machine being created: kept",
                first: vec![("id-x", "x")],
                cached: vec![],
                second: vec![("id-x", "x")],
                fresh: vec![m("x", None, None)],
                creating: vec![],
                suspects: vec!["id-x"],
                deleted: vec![],
            },
            Row {
                name: "create flow started between the reads: kept",
                first: vec![("id-x", "x")],
                cached: vec![],
                second: vec![("id-x", "x")],
                fresh: vec![],
                creating: vec!["x"],
                suspects: vec!["id-x"],
                deleted: vec![],
            },
            Row {
                name: "gone by the second listing: nothing to delete",
                first: vec![("id-x", "x")],
                cached: vec![],
                second: vec![],
                fresh: vec![],
                creating: vec![],
                suspects: vec!["id-x"],
                deleted: vec![],
            },
            Row {
                name: "second listing names another machine: kept",
                first: vec![("id-x", "x")],
                cached: vec![],
                second: vec![("id-x", "y")],
                fresh: vec![],
                creating: vec![],
                suspects: vec!["id-x"],
                deleted: vec![],
            },
            Row {
                name: "second VM of a running machine (OutOfRange): the extra one goes",
                first: vec![("id-a", "a"), ("id-a2", "a")],
                cached: vec![running("a", "id-a")],
                second: vec![("id-a", "a"), ("id-a2", "a")],
                fresh: vec![running("a", "id-a")],
                creating: vec![],
                suspects: vec!["id-a2"],
                deleted: vec!["id-a2"],
            },
            Row {
                name: "VM of a machine in CrashLoopBackOff without providerID: kept",
                first: vec![("id-c", "c")],
                cached: vec![m("c", None, Some(CrashLoopBackOff))],
                second: vec![("id-c", "c")],
                fresh: vec![m("c", None, Some(CrashLoopBackOff))],
                creating: vec![],
                suspects: vec![],
                deleted: vec![],
            },
            Row {
                name: "VM of a Failed machine without providerID: deleted",
                first: vec![("id-f", "f")],
                cached: vec![m("f", None, Some(Failed))],
                second: vec![("id-f", "f")],
                fresh: vec![m("f", None, Some(Failed))],
                creating: vec![],
                suspects: vec!["id-f"],
                deleted: vec!["id-f"],
            },
            Row {
                name: "MCM's region-form providerID, the zone form listed: kept",
                first: vec![("aws:///eu-west-1a/i-1", "r")],
                cached: vec![running("r", "aws:///eu-west-1/i-1")],
                second: vec![("aws:///eu-west-1a/i-1", "r")],
                fresh: vec![running("r", "aws:///eu-west-1/i-1")],
                creating: vec![],
                suspects: vec![],
                deleted: vec![],
            },
            Row {
                name: "VM created after the first listing is not a suspect",
                first: vec![],
                cached: vec![],
                second: vec![("id-new", "new")],
                fresh: vec![],
                creating: vec![],
                suspects: vec![],
                deleted: vec![],
            },
        ];
        for row in rows {
            let found = suspects(&listing(&row.first), &claims(&row.cached, &[]));
            assert_eq!(ids(&found), row.suspects, "{}: suspects", row.name);
            let fresh = claims(&row.fresh, &row.creating);
            let deleted = confirm(&found, &listing(&row.second), &fresh);
            assert_eq!(ids(&deleted), row.deleted, "{}: deleted", row.name);
        }
    }

    #[test]
    fn class_tags_are_checked_when_present() {
        let cases = [
            ("no tags field: the driver's business", json!({"machineType": "m"}), None),
            (
                "cluster and role",
                json!({"tags": {"kubernetes.io/cluster/a": "1", "kubernetes.io/role/node": "1"}}),
                None,
            ),
            ("no cluster key", json!({"tags": {"kubernetes.io/role/node": "1"}}), Some("kubernetes.io/cluster/")),
            ("no role key", json!({"tags": {"kubernetes.io/cluster/a": "1"}}), Some("kubernetes.io/role/")),
            (
                "empty cluster name",
                json!({"tags": {"kubernetes.io/cluster/": "1", "kubernetes.io/role/n": "1"}}),
                Some("cluster"),
            ),
            ("tags not a map", json!({"tags": "x"}), Some("kubernetes.io/cluster/")),
            ("GCP network tags", json!({"tags": ["kubernetes-io-cluster-a", "kubernetes-io-role-node", "x"]}), None),
            ("GCP without role", json!({"tags": ["kubernetes-io-cluster-a"]}), Some("kubernetes-io-role-")),
            (
                "GCP tag keys of AWS",
                json!({"tags": ["kubernetes.io/cluster/a", "kubernetes.io/role/n"]}),
                Some("kubernetes-io-cluster-"),
            ),
            (
                "Azure's spelling",
                json!({"tags": {"kubernetes.io-cluster-a": "1", "kubernetes.io-role-node": "1"}}),
                None,
            ),
            ("Azure's, no role key", json!({"tags": {"kubernetes.io-cluster-a": "1"}}), Some("kubernetes.io/cluster/")),
        ];
        for (name, spec, want) in cases {
            let got = class_tags_problem(&spec);
            match want {
                None => assert_eq!(got, None, "{name}"),
                Some(text) => assert!(got.as_deref().is_some_and(|g| g.contains(text)), "{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn out_of_range_descriptions() {
        let with = |description: &str| {
            let mut machine = Machine::new("m", Default::default());
            machine.status = Some(MachineStatus {
                last_operation: Some(LastOperation { description: Some(description.into()), ..Default::default() }),
                ..Default::default()
            });
            machine
        };
        assert!(reports_out_of_range(&with(
            "Cloud provider message - machine codes error: code = [OutOfRange] message = [2 VMs claim machine \"m\"]"
        )));
        assert!(!reports_out_of_range(&with("Creating machine on cloud provider")));
        assert!(!reports_out_of_range(&Machine::new("m", Default::default())));
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn node(created: &str, annotated: bool, finalizer: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n".into());
        n.metadata.creation_timestamp = Some(Time(t(created)));
        if annotated {
            n.metadata.annotations = Some([(NOT_MANAGED_ANNOTATION.to_string(), "1".to_string())].into());
        }
        if finalizer {
            n.metadata.finalizers = Some(vec![NODE_FINALIZER.to_string(), "other".to_string()]);
        }
        n
    }

    #[test]
    fn unmanaged_nodes() {
        let now = t("2025-01-01T01:00:00Z");
        let timeout = Duration::from_secs(20 * 60);
        let old = "2025-01-01T00:00:00Z";
        let young = "2025-01-01T00:50:00Z";
        let exactly = "2025-01-01T00:40:00Z";
        let add = Some(true);
        let remove = Some(false);
        let cases = [
            ("old, no machine: annotate, drop finalizer", node(old, false, true), false, add, true),
            ("old, no machine, no finalizer", node(old, false, false), false, add, false),
            ("at the timeout counts as old", node(exactly, false, false), false, add, false),
            ("young, no machine: wait", node(young, false, true), false, None, false),
            ("annotated already, finalizer back", node(old, true, true), false, None, true),
            ("annotated already, done", node(old, true, false), false, None, false),
            ("has a machine, annotated: unannotate", node(old, true, true), true, remove, false),
            ("has a machine, clean", node(old, false, true), true, None, false),
        ];
        for (name, n, has_machine, annotate, remove_finalizer) in cases {
            let got = unmanaged_node(&n, has_machine, now, timeout);
            assert_eq!(got, NodeMarks { annotate, remove_finalizer }, "{name}");
        }
        let mut no_time = node(old, false, true);
        no_time.metadata.creation_timestamp = None;
        assert!(unmanaged_node(&no_time, false, now, timeout).is_empty(), "no creation time: left alone");
        let deleting = |mut n: Node| {
            n.metadata.deletion_timestamp = Some(Time(t(young)));
            n
        };
        let cases = [
            ("deleting, young, no machine: release at once", deleting(node(young, false, true)), false, true),
            ("deleting, no finalizer: nothing", deleting(node(young, false, false)), false, false),
            ("deleting, has a machine: its deletion flow releases it", deleting(node(old, false, true)), true, false),
        ];
        for (name, n, has_machine, remove_finalizer) in cases {
            let got = unmanaged_node(&n, has_machine, now, timeout);
            assert_eq!(got, NodeMarks { annotate: None, remove_finalizer }, "{name}");
        }
    }

    #[test]
    fn health_timeout_reset_is_mcms() {
        let now = t("2025-01-01T00:00:00Z");
        let patch = health_timeout_reset(now);
        assert_eq!(
            patch.current_status,
            Some(CurrentStatus {
                phase: Some(MachinePhase::Running),
                timeout_active: false,
                last_update_time: Some(Time(now)),
                preserve_expiry_time: None
            })
        );
        let op = patch.last_operation.unwrap();
        assert_eq!(op.description.as_deref(), Some(HEALTH_TIMEOUT_RESET));
        assert_eq!((op.type_, op.state), (Some(MachineOperationType::HealthCheck), Some(MachineState::Successful)));
    }

    #[test]
    fn freeze_state_machine() {
        let config = SafetyConfig {
            apiserver_statuscheck_period: Duration::from_secs(60),
            apiserver_statuscheck_timeout: Duration::from_secs(30),
            ..SafetyConfig::default()
        };
        let at = |secs: i64| t("2025-01-01T00:00:00Z") + jiff::SignedDuration::from_secs(secs);
        let up = FreezeState::default();
        let down = |since: i64| FreezeState { frozen: false, down_since: Some(at(since)) };
        let frozen = |since: i64| FreezeState { frozen: true, down_since: Some(at(since)) };
        let (period, fast) = (Duration::from_secs(60), Duration::from_secs(6));
        // name, state, probe up?, started, ended, next state, change, next probe
        let cases = [
            ("up stays up", up, true, 0, 0, up, None, period),
            ("first failure starts the clock", up, false, 10, 11, down(10), None, fast),
            ("failing, not long enough", down(10), false, 30, 39, down(10), None, fast),
            ("failing for the timeout freezes", down(10), false, 36, 40, frozen(10), Some(FreezeChange::Freeze), fast),
            (
                "a hanging first probe freezes at its deadline",
                up,
                false,
                0,
                30,
                frozen(0),
                Some(FreezeChange::Freeze),
                fast,
            ),
            ("recovered before the timeout", down(10), true, 20, 20, up, None, period),
            ("frozen and still down", frozen(10), false, 100, 101, frozen(10), None, fast),
            ("frozen, then up: unfreeze", frozen(10), true, 200, 200, up, Some(FreezeChange::Unfreeze), period),
        ];
        for (name, state, probe_up, started, ended, want_state, want_change, want_next) in cases {
            let step = after_probe(state, probe_up, at(started), at(ended), &config);
            assert_eq!(step.state, want_state, "{name}: state");
            assert_eq!(step.change, want_change, "{name}: change");
            assert_eq!(step.next_probe, want_next, "{name}: next probe");
        }
    }

    #[test]
    fn zero_settings_do_not_spin() {
        let config = SafetyConfig {
            orphan_vms_period: Duration::ZERO,
            apiserver_statuscheck_period: Duration::ZERO,
            apiserver_statuscheck_timeout: Duration::ZERO,
            ..SafetyConfig::default()
        };
        assert_eq!(config.orphan_period(), MIN_INTERVAL);
        assert_eq!(config.probe_interval(true), MIN_INTERVAL);
        assert_eq!(config.probe_interval(false), MIN_INTERVAL);
        assert_eq!(config.probe_deadline(), MIN_INTERVAL);
    }
}
