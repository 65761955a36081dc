//! The simulated Gardener node agent (gardener-node-agent): it performs the in-place updates MCM's `InPlaceUpdate`
//! strategy asks for, and plays Gardener's resource manager removing the critical-components taint.
//!
//! The contract, as the real agent keeps it: when a Node carries the condition `InPlaceUpdate` with reason
//! `ReadyForUpdate` and no `update-result` label yet, the agent applies the update and then labels the Node
//! `update-result=successful` (removing the `update-failed-reason` annotation), or `update-result=failed` with
//! that annotation saying why. It never touches the candidate/selected labels or the condition. Separately, a
//! Ready Node carrying the `critical-components-not-ready` taint loses it about a second later.
//!
//! "Applying the update" here means [`InMemoryCloud::update_in_place`] with the providerSpec of the Machine's
//! MachineDeployment (Node -> Machine -> MachineSet -> MachineDeployment -> MachineClass), so the kubelet then
//! reports the new kubelet version and instance type. Only the MCM flavour is resolved; for anything else (a CAPI
//! Machine, a Node without a Machine) the update changes no VM and still succeeds.
//!
//! [`decide`] is pure (a Node, what the agent remembers of it, the time, the config and a random draw give an
//! [`Action`]); the task below only watches Nodes and writes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::cloud::{InMemoryCloud, VmUpdate};
use super::node::ready_condition;
use super::spec::ProviderSpec;
use crate::api::mcm::names::{
    CRITICAL_COMPONENTS_NOT_READY_TAINT, IN_PLACE_CONDITION, MACHINE_NAME_LABEL, UPDATE_FAILED, UPDATE_FAILED_REASON,
    UPDATE_RESULT, UPDATE_SUCCESSFUL, in_place_reason,
};
use crate::api::mcm::{Machine, MachineClass, MachineDeployment, MachineSet};

/// Node annotation overriding the agent for that Node (tests and demos): `fail` fails the update with the
/// configured reason, `fail:<reason>` with that reason, `hang` never answers (to exercise the controller's
/// in-place update timeout). Other values are ignored.
pub const OVERRIDE_ANNOTATION: &str = "inmemory.mcm.gardener.cloud/in-place-update";

/// How the node agent behaves.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeAgentConfig {
    /// How long an update takes, from the agent seeing the trigger to it writing the result. Default 2 s.
    pub update_duration: Duration,
    /// Share of updates that fail (0..=1, drawn from `seed`). Default 0.
    pub failure_rate: f64,
    /// The `update-failed-reason` of a failed update (unless the override annotation names one).
    pub failure_reason: String,
    /// Seeds the failure draws (reproducible runs).
    pub seed: u64,
    /// How long a Ready Node keeps the critical-components taint before the agent removes it. Default 1 s.
    pub critical_components_delay: Duration,
    /// First retry delay after an API error (doubling, with jitter). Default 200 ms.
    pub min_retry: Duration,
    /// Longest retry delay. Default 30 s.
    pub max_retry: Duration,
}

impl Default for NodeAgentConfig {
    fn default() -> Self {
        NodeAgentConfig {
            update_duration: Duration::from_secs(2),
            failure_rate: 0.0,
            failure_reason: "simulated update failure".into(),
            seed: rand::random(),
            critical_components_delay: Duration::from_secs(1),
            min_retry: Duration::from_millis(200),
            max_retry: Duration::from_secs(30),
        }
    }
}

/// What the [`OVERRIDE_ANNOTATION`] asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Override {
    /// Fail, with this reason (`None`: the configured one).
    Fail(Option<String>),
    /// Never answer.
    Hang,
}

impl Override {
    /// Parses the annotation's value (`None`: not an override the agent knows).
    pub fn parse(value: &str) -> Option<Override> {
        match value.trim() {
            "hang" => Some(Override::Hang),
            "fail" => Some(Override::Fail(None)),
            other => {
                let reason = other.strip_prefix("fail:")?.trim();
                Some(Override::Fail((!reason.is_empty()).then(|| reason.to_string())))
            }
        }
    }
}

/// What the agent remembers of one Node between events.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Memory {
    /// When it first saw the update trigger, and the draw (0..1) that decides whether the update fails.
    pub update: Option<(Instant, f64)>,
    /// When it first saw the critical-components taint on the Node while Ready.
    pub tainted: Option<Instant>,
}

/// What to do about one Node now.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Nothing, until the Node changes.
    Nothing,
    /// Nothing yet; look again at this time (or when the Node changes).
    WaitUntil(Instant),
    /// Apply the update and label the Node successful.
    Succeed,
    /// Label the Node failed with this reason.
    Fail(String),
    /// Remove the critical-components taint.
    RemoveCriticalTaint,
}

/// Whether the Node asks for its update: condition `InPlaceUpdate` with reason `ReadyForUpdate`, no result yet.
pub fn update_requested(node: &Node) -> bool {
    let ready_for_update = node.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
        cs.iter().any(|c| c.type_ == IN_PLACE_CONDITION && c.reason.as_deref() == Some(in_place_reason::READY))
    });
    ready_for_update && !node.labels().contains_key(UPDATE_RESULT)
}

fn has_critical_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == CRITICAL_COMPONENTS_NOT_READY_TAINT))
}

/// Decides what is due for `node` at `now`, given what the agent remembered (returned updated). `draw` gives a
/// number in 0..1 and is called only when an update starts, so one update has one verdict however often it is
/// looked at. An update due now wins over the taint; otherwise the earlier deadline is the wake-up.
pub fn decide(
    node: &Node,
    memory: Memory,
    now: Instant,
    config: &NodeAgentConfig,
    draw: impl FnOnce() -> f64,
) -> (Memory, Action) {
    let mut memory = memory;
    let update = if update_requested(node) {
        let (since, sample) = *memory.update.get_or_insert_with(|| (now, draw()));
        let verdict = node.annotations().get(OVERRIDE_ANNOTATION).and_then(|v| Override::parse(v));
        let due = since + config.update_duration;
        match verdict {
            Some(Override::Hang) => Action::Nothing,
            _ if now < due => Action::WaitUntil(due),
            Some(Override::Fail(reason)) => Action::Fail(reason.unwrap_or_else(|| config.failure_reason.clone())),
            None if sample < config.failure_rate => Action::Fail(config.failure_reason.clone()),
            None => Action::Succeed,
        }
    } else {
        memory.update = None;
        Action::Nothing
    };
    let ready = ready_condition(node).is_some_and(|c| c.status == "True");
    let taint = if ready && has_critical_taint(node) {
        let due = *memory.tainted.get_or_insert(now) + config.critical_components_delay;
        if now < due { Action::WaitUntil(due) } else { Action::RemoveCriticalTaint }
    } else {
        memory.tainted = None;
        Action::Nothing
    };
    let action = match (update, taint) {
        (Action::Nothing, other) | (other, Action::Nothing) => other,
        (Action::WaitUntil(a), Action::WaitUntil(b)) => Action::WaitUntil(a.min(b)),
        (Action::WaitUntil(_), due) => due,
        (due, _) => due,
    };
    (memory, action)
}

/// What the agent has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeAgentStats {
    /// Updates reported successful.
    pub succeeded: u64,
    /// Updates reported failed.
    pub failed: u64,
    /// Successful updates that changed the VM (the spec was resolved).
    pub vms_updated: u64,
    /// Critical-components taints removed.
    pub taints_removed: u64,
    /// API errors (each followed by a retry).
    pub errors: u64,
}

#[derive(Default)]
struct Counters {
    succeeded: AtomicU64,
    failed: AtomicU64,
    vms_updated: AtomicU64,
    taints_removed: AtomicU64,
    errors: AtomicU64,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> NodeAgentStats {
        NodeAgentStats {
            succeeded: self.succeeded.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            vms_updated: self.vms_updated.load(Ordering::Relaxed),
            taints_removed: self.taints_removed.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

/// Why a write of the agent failed (it logs it and retries with back-off).
#[derive(Debug, thiserror::Error)]
pub enum NodeAgentError {
    /// The API server refused or did not answer.
    #[error("node {node}: {source}")]
    Api {
        /// The Node.
        node: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
}

/// Why the new providerSpec of a Node's machine could not be found (the update then changes no VM).
#[derive(Debug, thiserror::Error)]
enum Unresolved {
    /// Nothing to find: not our VM, no Machine, no deployment, not an in-memory class.
    #[error("{0}")]
    Missing(String),
    /// A read failed; worth retrying.
    #[error("reading {what}: {source}")]
    Api { what: String, source: kube::Error },
}

/// A running node agent. Dropping it stops the task too (after the write in flight); [`NodeAgent::stop`] also
/// waits for it.
pub struct NodeAgent {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    counters: Arc<Counters>,
}

impl NodeAgent {
    /// Starts the agent for the Nodes of `client`'s cluster, updating `cloud`'s VMs.
    pub fn spawn(cloud: InMemoryCloud, client: kube::Client, config: NodeAgentConfig) -> NodeAgent {
        let (stop, stopped) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let worker = Worker {
            cloud,
            nodes: Api::all(client.clone()),
            client,
            rng: StdRng::seed_from_u64(config.seed),
            config,
            counters: counters.clone(),
        };
        let task = tokio::spawn(worker.run(stopped));
        NodeAgent { stop, task, counters }
    }

    /// What it has done so far.
    pub fn stats(&self) -> NodeAgentStats {
        self.counters.snapshot()
    }

    /// Stops the task and waits for it to end; returns what it did in all.
    pub async fn stop(self) -> NodeAgentStats {
        let _ = self.stop.send(true);
        if let Err(e) = self.task.await
            && e.is_panic()
        {
            tracing::error!("the in-memory node agent task panicked");
        }
        self.counters.snapshot()
    }
}

struct Worker {
    cloud: InMemoryCloud,
    nodes: Api<Node>,
    client: kube::Client,
    rng: StdRng,
    config: NodeAgentConfig,
    counters: Arc<Counters>,
}

/// The outcome of a write.
enum Written {
    /// Done; the Node as the API server returned it.
    Node(Node),
    /// The Node is gone (its delete event follows).
    Gone,
    /// The Node changed since it was read (a conflict): what it is now (`None`: gone).
    Stale(Option<Node>),
}

/// Per Node: the latest copy seen, what the agent remembers, when to look again and the retry back-off.
#[derive(Default)]
struct Tracked {
    node: Option<Node>,
    memory: Memory,
    wake_at: Option<Instant>,
    retry: Option<ExponentialBackoff>,
    /// The resourceVersion of the copy a write of ours returned, until the watch shows it: the events before it
    /// are older than that copy (a Node without the result just written would be answered twice).
    written: Option<String>,
}

impl Tracked {
    /// Keeps the copy an API call returned, newer than anything the watch showed so far.
    fn remember_written(&mut self, node: Node) {
        self.written = node.resource_version();
        self.node = Some(node);
    }

    /// Whether `event` is older than the copy kept from a write (watch events come in order, so everything
    /// before the write's own event is); the write's own event ends the catching up.
    fn catching_up(&mut self, event: &Node) -> bool {
        match &self.written {
            Some(written) if event.resource_version().as_ref() == Some(written) => {
                self.written = None;
                true
            }
            Some(_) => true,
            None => false,
        }
    }
}

impl Worker {
    async fn run(mut self, mut stopped: watch::Receiver<bool>) {
        // The watcher re-lists and backs off by itself (kube-runtime's default back-off, on backon).
        let mut events = watcher(self.nodes.clone(), watcher::Config::default()).default_backoff().boxed();
        let mut tracked: HashMap<String, Tracked> = HashMap::new();
        loop {
            if *stopped.borrow() {
                return;
            }
            let wake_at = tracked.values().filter_map(|t| t.wake_at).min();
            let due: Vec<String> = tokio::select! {
                _ = stopped.changed() => return,
                event = events.next() => match event {
                    None => return,
                    Some(Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node))) => {
                        let name = node.name_any();
                        let entry = tracked.entry(name.clone()).or_default();
                        if entry.catching_up(&node) {
                            Vec::new()
                        } else {
                            entry.node = Some(node);
                            vec![name]
                        }
                    }
                    Some(Ok(watcher::Event::Delete(node))) => {
                        tracked.remove(&node.name_any());
                        Vec::new()
                    }
                    Some(Ok(watcher::Event::Init)) => {
                        // A re-list shows the latest of everything: no event to wait for any more.
                        tracked.values_mut().for_each(|t| t.written = None);
                        Vec::new()
                    }
                    Some(Ok(watcher::Event::InitDone)) => Vec::new(),
                    Some(Err(e)) => {
                        Counters::bump(&self.counters.errors);
                        tracing::warn!(error = %e, "in-memory node agent: watching Nodes failed, retrying");
                        Vec::new()
                    }
                },
                _ = sleep_until(wake_at) => {
                    let now = Instant::now();
                    tracked.iter().filter(|(_, t)| t.wake_at.is_some_and(|w| w <= now)).map(|(n, _)| n.clone()).collect()
                }
            };
            for name in due {
                if let Some(entry) = tracked.get_mut(&name) {
                    self.look_at(&name, entry).await;
                }
            }
        }
    }

    /// Decides about one Node and does what is due; a failed write is retried after a back-off.
    async fn look_at(&mut self, name: &str, entry: &mut Tracked) {
        let now = Instant::now();
        if entry.retry.is_some() && entry.wake_at.is_some_and(|w| w > now) {
            return;
        }
        let Some(node) = entry.node.as_ref() else { return };
        let rng = &mut self.rng;
        let (memory, action) = decide(node, entry.memory, now, &self.config, || rng.random());
        entry.memory = memory;
        entry.wake_at = None;
        let result = match action {
            Action::Nothing => return,
            Action::WaitUntil(at) => {
                entry.wake_at = Some(at);
                return;
            }
            Action::Succeed => self.succeed(node).await,
            Action::Fail(reason) => self.fail(name, &reason).await,
            Action::RemoveCriticalTaint => self.remove_taint(node).await,
        };
        match result {
            Ok(Written::Node(written)) => {
                entry.retry = None;
                entry.remember_written(written);
            }
            Ok(Written::Gone) => entry.retry = None,
            Ok(Written::Stale(fresh)) => {
                // Someone wrote first: decide again on what is there now.
                match fresh {
                    Some(fresh) => entry.remember_written(fresh),
                    None => entry.node = None,
                }
                entry.wake_at = Some(Instant::now());
            }
            Err(e) => {
                Counters::bump(&self.counters.errors);
                tracing::warn!(error = %e, node = name, "in-memory node agent: write failed, retrying");
                let delays = entry.retry.get_or_insert_with(|| backoff(&self.config));
                entry.wake_at = Some(Instant::now() + delays.next().unwrap_or(self.config.max_retry));
            }
        }
    }

    /// Applies the update to the VM (when the new spec can be found) and reports success.
    async fn succeed(&self, node: &Node) -> Result<Written, NodeAgentError> {
        let name = node.name_any();
        match self.resolve(node).await {
            Ok((provider_id, update)) => {
                if self.cloud.update_in_place(&provider_id, &update) {
                    Counters::bump(&self.counters.vms_updated);
                }
            }
            Err(Unresolved::Api { what, source }) => {
                return Err(NodeAgentError::Api { node: format!("{name} ({what})"), source });
            }
            Err(Unresolved::Missing(why)) => {
                tracing::debug!(node = %name, why = %why, "in-memory node agent: no new spec; the update changes no VM");
            }
        }
        let patch = json!({ "metadata": {
            "labels": { UPDATE_RESULT: UPDATE_SUCCESSFUL },
            "annotations": { UPDATE_FAILED_REASON: null },
        }});
        let written = self.patch(&name, patch).await?;
        Counters::bump(&self.counters.succeeded);
        Ok(written)
    }

    async fn fail(&self, name: &str, reason: &str) -> Result<Written, NodeAgentError> {
        let patch = json!({ "metadata": {
            "labels": { UPDATE_RESULT: UPDATE_FAILED },
            "annotations": { UPDATE_FAILED_REASON: reason },
        }});
        let written = self.patch(name, patch).await?;
        Counters::bump(&self.counters.failed);
        Ok(written)
    }

    /// Writes the taints without the critical-components one, guarded by the resourceVersion it was decided on; on
    /// a conflict it reads the Node again, and the next look decides on that.
    async fn remove_taint(&self, node: &Node) -> Result<Written, NodeAgentError> {
        let name = node.name_any();
        let remaining: Vec<_> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key != CRITICAL_COMPONENTS_NOT_READY_TAINT)
            .collect();
        let taints = if remaining.is_empty() { json!(null) } else { json!(remaining) };
        let patch = json!({
            "metadata": { "resourceVersion": node.resource_version() },
            "spec": { "taints": taints },
        });
        match self.nodes.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(written) => {
                Counters::bump(&self.counters.taints_removed);
                Ok(Written::Node(written))
            }
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(Written::Gone),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let fresh =
                    self.nodes.get_opt(&name).await.map_err(|source| NodeAgentError::Api { node: name, source })?;
                Ok(Written::Stale(fresh))
            }
            Err(source) => Err(NodeAgentError::Api { node: name, source }),
        }
    }

    /// A merge patch of the Node.
    async fn patch(&self, name: &str, patch: serde_json::Value) -> Result<Written, NodeAgentError> {
        match self.nodes.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(node) => Ok(Written::Node(node)),
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(Written::Gone),
            Err(source) => Err(NodeAgentError::Api { node: name.to_string(), source }),
        }
    }

    /// The VM of the Node and the update its MachineDeployment's class describes: Node -> VM (providerID) ->
    /// Machine (label `node.gardener.cloud/machine-name`, else the VM's machine, in the VM's namespace) ->
    /// controller MachineSet -> controller MachineDeployment -> `spec.template.spec.class` -> MachineClass.
    async fn resolve(&self, node: &Node) -> Result<(String, VmUpdate), Unresolved> {
        let missing = |why: String| Unresolved::Missing(why);
        let provider_id =
            node.spec.as_ref().and_then(|s| s.provider_id.clone()).ok_or_else(|| missing("no providerID".into()))?;
        let vm = self.cloud.vm(&provider_id).ok_or_else(|| missing(format!("{provider_id} is no in-memory VM")))?;
        if vm.namespace.is_empty() {
            return Err(missing(format!("VM {} belongs to no machine", vm.id)));
        }
        let machine_name = node.labels().get(MACHINE_NAME_LABEL).cloned().unwrap_or(vm.machine_name.clone());
        let ns = vm.namespace.as_str();
        let machine: Machine = self.get(ns, &machine_name).await?;
        let set_name = controller(&machine, "MachineSet")
            .ok_or_else(|| missing(format!("machine {machine_name} has no MachineSet")))?;
        let set: MachineSet = self.get(ns, &set_name).await?;
        let deployment_name = controller(&set, "MachineDeployment")
            .ok_or_else(|| missing(format!("MachineSet {set_name} has no MachineDeployment")))?;
        let deployment: MachineDeployment = self.get(ns, &deployment_name).await?;
        let template = deployment.spec.template.spec.as_ref();
        let class_name = template
            .map(|s| s.class.name.clone())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| missing(format!("MachineDeployment {deployment_name} names no class")))?;
        let class: MachineClass = self.get(ns, &class_name).await?;
        let spec = ProviderSpec::parse(&class.spec.provider_spec)
            .map_err(|e| missing(format!("MachineClass {class_name} is no in-memory class: {}", e.message)))?;
        let node_template = template.and_then(|s| s.node_template.clone());
        Ok((provider_id, VmUpdate::from_spec(&spec, node_template)))
    }

    async fn get<K>(&self, namespace: &str, name: &str) -> Result<K, Unresolved>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let what = || format!("{} {namespace}/{name}", K::kind(&K::DynamicType::default()));
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        match api.get_opt(name).await {
            Ok(Some(object)) => Ok(object),
            Ok(None) => Err(Unresolved::Missing(format!("{} not found", what()))),
            Err(source) => Err(Unresolved::Api { what: what(), source }),
        }
    }
}

/// The name of `object`'s controller owner of kind `kind`.
fn controller(object: &impl ResourceExt, kind: &str) -> Option<String> {
    object.owner_references().iter().find(|o| o.controller == Some(true) && o.kind == kind).map(|o| o.name.clone())
}

fn backoff(config: &NodeAgentConfig) -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(config.min_retry)
        .with_max_delay(config.max_retry)
        .with_jitter()
        .without_max_times()
        .build()
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// A Node: Ready or not, with the in-place condition's reason, labels, annotations and taint keys.
    fn node(
        ready: bool,
        reason: Option<&str>,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
        taints: &[&str],
    ) -> Node {
        let condition = |type_: &str, status: &str, reason: &str| NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            ..Default::default()
        };
        let mut conditions = vec![condition("Ready", if ready { "True" } else { "False" }, "KubeletReady")];
        conditions.extend(reason.map(|r| condition(IN_PLACE_CONDITION, "True", r)));
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some(map(labels)),
                annotations: Some(map(annotations)),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|k| Taint { key: k.to_string(), effect: "NoSchedule".into(), ..Default::default() })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: Some(NodeStatus { conditions: Some(conditions), ..Default::default() }),
        }
    }

    fn config() -> NodeAgentConfig {
        NodeAgentConfig { failure_rate: 0.25, failure_reason: "configured".into(), seed: 1, ..Default::default() }
    }

    #[test]
    fn override_parsing() {
        let cases = [
            ("fail", Some(Override::Fail(None))),
            ("fail:boom", Some(Override::Fail(Some("boom".into())))),
            ("fail: disk full ", Some(Override::Fail(Some("disk full".into())))),
            ("fail:", Some(Override::Fail(None))),
            ("hang", Some(Override::Hang)),
            ("", None),
            ("succeed", None),
            ("failure", None),
        ];
        for (value, want) in cases {
            assert_eq!(Override::parse(value), want, "{value:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn decide_table() {
        let t0 = Instant::now();
        let at = |s: u32| t0 + S * s;
        let ready_for_update = Some(in_place_reason::READY);
        let taint = CRITICAL_COMPONENTS_NOT_READY_TAINT;
        let started = |s: u32, draw: f64| Memory { update: Some((at(s), draw)), tainted: None };
        let tainted = |s: u32| Memory { update: None, tainted: Some(at(s)) };
        // name, node, memory, now, draw if asked, expected action, expected memory
        type Case = (&'static str, Node, Memory, Instant, f64, Action, Memory);
        let cases: Vec<Case> = vec![
            (
                "nothing asked",
                node(true, None, &[], &[], &[]),
                Memory::default(),
                at(0),
                0.9,
                Action::Nothing,
                Memory::default(),
            ),
            (
                "another stage: not yet",
                node(true, Some(in_place_reason::DRAIN_SUCCESSFUL), &[], &[], &[]),
                Memory::default(),
                at(0),
                0.9,
                Action::Nothing,
                Memory::default(),
            ),
            (
                "trigger seen: wait the update duration",
                node(true, ready_for_update, &[], &[], &[]),
                Memory::default(),
                at(5),
                0.9,
                Action::WaitUntil(at(7)),
                started(5, 0.9),
            ),
            (
                "still updating",
                node(true, ready_for_update, &[], &[], &[]),
                started(5, 0.9),
                at(6),
                0.0,
                Action::WaitUntil(at(7)),
                started(5, 0.9),
            ),
            (
                "done: success",
                node(true, ready_for_update, &[], &[], &[]),
                started(5, 0.9),
                at(7),
                0.0,
                Action::Succeed,
                started(5, 0.9),
            ),
            (
                "done: the draw fails it",
                node(true, ready_for_update, &[], &[], &[]),
                started(5, 0.1),
                at(7),
                0.9,
                Action::Fail("configured".into()),
                started(5, 0.1),
            ),
            (
                "draw at the rate succeeds",
                node(true, ready_for_update, &[], &[], &[]),
                started(5, 0.25),
                at(7),
                0.0,
                Action::Succeed,
                started(5, 0.25),
            ),
            (
                "not Ready: the update still runs",
                node(false, ready_for_update, &[], &[], &[]),
                started(5, 0.9),
                at(7),
                0.0,
                Action::Succeed,
                started(5, 0.9),
            ),
            (
                "result written: forgotten",
                node(true, ready_for_update, &[(UPDATE_RESULT, UPDATE_SUCCESSFUL)], &[], &[]),
                started(5, 0.9),
                at(8),
                0.0,
                Action::Nothing,
                Memory::default(),
            ),
            (
                "failed result: not retried by the agent",
                node(true, ready_for_update, &[(UPDATE_RESULT, UPDATE_FAILED)], &[], &[]),
                Memory::default(),
                at(8),
                0.0,
                Action::Nothing,
                Memory::default(),
            ),
            (
                "override fail: configured reason",
                node(true, ready_for_update, &[], &[(OVERRIDE_ANNOTATION, "fail")], &[]),
                started(5, 0.9),
                at(7),
                0.0,
                Action::Fail("configured".into()),
                started(5, 0.9),
            ),
            (
                "override fail:reason",
                node(true, ready_for_update, &[], &[(OVERRIDE_ANNOTATION, "fail:boom")], &[]),
                started(5, 0.9),
                at(7),
                0.0,
                Action::Fail("boom".into()),
                started(5, 0.9),
            ),
            (
                "override fail still takes the update duration",
                node(true, ready_for_update, &[], &[(OVERRIDE_ANNOTATION, "fail:boom")], &[]),
                started(5, 0.9),
                at(6),
                0.0,
                Action::WaitUntil(at(7)),
                started(5, 0.9),
            ),
            (
                "override hang: never answers",
                node(true, ready_for_update, &[], &[(OVERRIDE_ANNOTATION, "hang")], &[]),
                started(5, 0.9),
                at(999),
                0.0,
                Action::Nothing,
                started(5, 0.9),
            ),
            (
                "unknown override: ignored",
                node(true, ready_for_update, &[], &[(OVERRIDE_ANNOTATION, "maybe")], &[]),
                started(5, 0.9),
                at(7),
                0.0,
                Action::Succeed,
                started(5, 0.9),
            ),
            (
                "taint on a Ready Node: wait a second",
                node(true, None, &[], &[], &[taint, "other"]),
                Memory::default(),
                at(3),
                0.0,
                Action::WaitUntil(at(4)),
                tainted(3),
            ),
            (
                "taint due: remove",
                node(true, None, &[], &[], &[taint]),
                tainted(3),
                at(4),
                0.0,
                Action::RemoveCriticalTaint,
                tainted(3),
            ),
            (
                "taint on a Node not Ready: wait for Ready",
                node(false, None, &[], &[], &[taint]),
                tainted(3),
                at(9),
                0.0,
                Action::Nothing,
                Memory::default(),
            ),
            (
                "other taints only",
                node(true, None, &[], &[], &["other"]),
                tainted(3),
                at(9),
                0.0,
                Action::Nothing,
                Memory::default(),
            ),
            (
                "update due wins over the taint",
                node(true, ready_for_update, &[], &[], &[taint]),
                Memory { update: Some((at(0), 0.9)), tainted: Some(at(0)) },
                at(9),
                0.0,
                Action::Succeed,
                Memory { update: Some((at(0), 0.9)), tainted: Some(at(0)) },
            ),
            (
                "taint due while the update runs",
                node(true, ready_for_update, &[], &[], &[taint]),
                Memory { update: Some((at(8), 0.9)), tainted: Some(at(0)) },
                at(9),
                0.0,
                Action::RemoveCriticalTaint,
                Memory { update: Some((at(8), 0.9)), tainted: Some(at(0)) },
            ),
            (
                "both waiting: the earlier",
                node(true, ready_for_update, &[], &[], &[taint]),
                Memory { update: Some((at(8), 0.9)), tainted: Some(at(8)) },
                at(8),
                0.0,
                Action::WaitUntil(at(9)),
                Memory { update: Some((at(8), 0.9)), tainted: Some(at(8)) },
            ),
        ];
        for (name, node, memory, now, draw, want_action, want_memory) in cases {
            let (got_memory, got_action) = decide(&node, memory, now, &config(), || draw);
            assert_eq!(got_action, want_action, "{name}");
            assert_eq!(got_memory, want_memory, "{name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_draw_is_taken_once_per_update() {
        let n = node(true, Some(in_place_reason::READY), &[], &[], &[]);
        let (memory, _) = decide(&n, Memory::default(), Instant::now(), &config(), || 0.5);
        let (again, _) = decide(&n, memory, Instant::now(), &config(), || panic!("drawn twice"));
        assert_eq!(again, memory);
    }

    async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(v) = check().await {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The agent against an API server with Nodes written by hand (no kubelet, no cloud VM: nothing to resolve).
    #[tokio::test]
    async fn the_agent_answers_updates_and_removes_the_taint() {
        use crate::apiserver::{ApiServer, ServerConfig};
        use kube::api::PostParams;
        let server = ApiServer::start(ServerConfig::default()).await.unwrap();
        let client = server.client().await.unwrap();
        let config = NodeAgentConfig {
            update_duration: Duration::from_millis(50),
            critical_components_delay: Duration::from_millis(50),
            ..config()
        };
        let agent = NodeAgent::spawn(
            InMemoryCloud::with_seed(1),
            client.clone(),
            NodeAgentConfig { failure_rate: 0.0, ..config },
        );
        let nodes: Api<Node> = Api::all(client);
        for (name, annotations) in [("ok", vec![]), ("boom", vec![(OVERRIDE_ANNOTATION, "fail:boom")])] {
            let mut n = node(true, None, &[], &annotations, &[]);
            n.metadata.name = Some(name.into());
            n.status = None;
            nodes.create(&PostParams::default(), &n).await.unwrap();
            // A stale failure reason goes with a success.
            let patch = json!({"metadata": {"annotations": {UPDATE_FAILED_REASON: "earlier"}}});
            nodes.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
            let status = json!({"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": IN_PLACE_CONDITION, "status": "True", "reason": in_place_reason::READY},
            ]}});
            nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
        }
        let result = |node: &Node, key: &str, map: fn(&Node) -> &BTreeMap<String, String>| map(node).get(key).cloned();
        let ok = eventually("ok updated", || async {
            let n = nodes.get("ok").await.ok()?;
            result(&n, UPDATE_RESULT, |n| n.labels()).is_some().then_some(n)
        })
        .await;
        assert_eq!(result(&ok, UPDATE_RESULT, |n| n.labels()).as_deref(), Some(UPDATE_SUCCESSFUL));
        assert_eq!(result(&ok, UPDATE_FAILED_REASON, |n| n.annotations()), None);
        let boom = eventually("boom failed", || async {
            let n = nodes.get("boom").await.ok()?;
            result(&n, UPDATE_RESULT, |n| n.labels()).is_some().then_some(n)
        })
        .await;
        assert_eq!(result(&boom, UPDATE_RESULT, |n| n.labels()).as_deref(), Some(UPDATE_FAILED));
        assert_eq!(result(&boom, UPDATE_FAILED_REASON, |n| n.annotations()).as_deref(), Some("boom"));
        // MCM taints the updated Node; the agent removes that taint only, the other stays.
        let taints = json!({"spec": {"taints": [
            {"key": CRITICAL_COMPONENTS_NOT_READY_TAINT, "effect": "NoSchedule"},
            {"key": "other", "effect": "NoSchedule"},
        ]}});
        nodes.patch("ok", &PatchParams::default(), &Patch::Merge(taints)).await.unwrap();
        let keys = eventually("the critical taint gone", || async {
            let n = nodes.get("ok").await.ok()?;
            let keys: Vec<String> = n.spec?.taints?.into_iter().map(|t| t.key).collect();
            (!keys.iter().any(|k| k == CRITICAL_COMPONENTS_NOT_READY_TAINT)).then_some(keys)
        })
        .await;
        assert_eq!(keys, ["other"]);
        let stats = agent.stop().await;
        assert_eq!((stats.succeeded, stats.failed, stats.taints_removed, stats.vms_updated), (1, 1, 1, 0), "{stats:?}");
    }
}
