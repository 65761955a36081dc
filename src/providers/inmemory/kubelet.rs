//! The simulated kubelet: one task per cloud that registers a Node for every booted VM, keeps its heartbeat and
//! sets it Unknown when the VM dies or goes. It sleeps until the cloud changes or the next deadline, and writes
//! only when something is due (`plan.rs` decides, this file talks to the API server).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::cloud::{InMemoryCloud, Vm};
use super::node::{Health, conditions, node_object, ready_status, refreshed};
use super::plan::{Action, Phase, Record, adopt, plan};

/// How the kubelet behaves.
#[derive(Clone, Debug)]
pub struct KubeletConfig {
    /// How often a Ready Node's conditions get a new `lastHeartbeatTime` (`None`: never). Default 30 s.
    pub heartbeat: Option<Duration>,
    /// Node writes in flight at once. Default 16.
    pub concurrency: usize,
    /// First retry delay after an API error (doubling, with jitter). Default 200 ms.
    pub min_retry: Duration,
    /// Longest retry delay. Default 30 s.
    pub max_retry: Duration,
    /// Plays the cloud-controller-manager's node lifecycle controller: the Node of a VM deleted this long ago is
    /// deleted (`None`, the default: never; `mcm chaos` turns it on).
    pub remove_nodes_of_deleted_vms: Option<Duration>,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        KubeletConfig {
            heartbeat: Some(Duration::from_secs(30)),
            concurrency: 16,
            min_retry: Duration::from_millis(200),
            max_retry: Duration::from_secs(30),
            remove_nodes_of_deleted_vms: None,
        }
    }
}

/// What the kubelet has written so far (each counter is one API write, except `errors`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KubeletStats {
    /// Nodes created.
    pub nodes_created: u64,
    /// Ready statuses posted (after a create or an adoption).
    pub ready_posts: u64,
    /// Heartbeats posted.
    pub heartbeats: u64,
    /// Unknown statuses posted.
    pub unknown_posts: u64,
    /// Nodes re-posted after their VM was updated in place (label and status writes).
    pub refreshes: u64,
    /// API errors (each followed by a retry).
    pub errors: u64,
}

#[derive(Default)]
struct Counters {
    nodes_created: AtomicU64,
    ready_posts: AtomicU64,
    heartbeats: AtomicU64,
    unknown_posts: AtomicU64,
    refreshes: AtomicU64,
    errors: AtomicU64,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> KubeletStats {
        KubeletStats {
            nodes_created: self.nodes_created.load(Ordering::Relaxed),
            ready_posts: self.ready_posts.load(Ordering::Relaxed),
            heartbeats: self.heartbeats.load(Ordering::Relaxed),
            unknown_posts: self.unknown_posts.load(Ordering::Relaxed),
            refreshes: self.refreshes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

/// Why a Node write failed (the kubelet logs it and retries with back-off).
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// The API server refused or did not answer.
    #[error("node {node}: {source}")]
    Api {
        /// The Node.
        node: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
    /// A Node of that name exists for another VM (waiting for whoever owns it to delete it).
    #[error("node {node} exists with providerID {existing:?}, not {wanted}; waiting for it to go")]
    NameTaken {
        /// The Node.
        node: String,
        /// The providerID it has.
        existing: Option<String>,
        /// Ours.
        wanted: String,
    },
    /// The Node was deleted between its creation and its first status.
    #[error("node {node} was deleted while registering; registering again")]
    Vanished {
        /// The Node.
        node: String,
    },
}

/// A running kubelet simulator. Dropping it stops the task too (after the write in flight);
/// [`Kubelet::stop`] also waits for it.
pub struct Kubelet {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    counters: Arc<Counters>,
}

impl Kubelet {
    /// Starts the kubelet for `cloud`'s VMs, writing Nodes through `client` (the target cluster). It first adopts
    /// the Nodes that already carry a providerID of this cloud, so a restart never duplicates a Node.
    pub fn spawn(cloud: InMemoryCloud, client: kube::Client, config: KubeletConfig) -> Kubelet {
        let (stop, stopped) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let worker = Worker { cloud, nodes: Api::all(client), config, counters: counters.clone() };
        let task = tokio::spawn(worker.run(stopped));
        Kubelet { stop, task, counters }
    }

    /// What it has written so far.
    pub fn stats(&self) -> KubeletStats {
        self.counters.snapshot()
    }

    /// Stops the task and waits for it to end (Nodes stay as they are, like a kubelet that stopped); returns
    /// what it wrote in all.
    pub async fn stop(self) -> KubeletStats {
        let _ = self.stop.send(true);
        if let Err(e) = self.task.await
            && e.is_panic()
        {
            tracing::error!("the in-memory kubelet task panicked");
        }
        self.counters.snapshot()
    }
}

struct Worker {
    cloud: InMemoryCloud,
    nodes: Api<Node>,
    config: KubeletConfig,
    counters: Arc<Counters>,
}

/// The result of one write: the record to keep (`None`: forget it).
type Outcome = Result<Option<Record>, KubeletError>;

impl Worker {
    async fn run(self, mut stopped: watch::Receiver<bool>) {
        let mut changes = self.cloud.subscribe();
        let mut records: Option<HashMap<String, Record>> = None;
        // Back-off of the start-up list, and of each VM whose last write failed (one stuck Node must not hold up
        // the others).
        let mut list_backoff: Option<ExponentialBackoff> = None;
        let mut retries: HashMap<String, (ExponentialBackoff, Instant)> = HashMap::new();
        loop {
            if *stopped.borrow() {
                return;
            }
            changes.borrow_and_update();
            let Some(records) = records.as_mut() else {
                match self.adopt_all().await {
                    Ok(adopted) => records = Some(adopted),
                    Err(e) => {
                        Counters::bump(&self.counters.errors);
                        tracing::warn!(error = %e, "in-memory kubelet: listing Nodes failed, retrying");
                        let delay = list_backoff.get_or_insert_with(|| self.backoff()).next();
                        // Nothing can happen before the list succeeds, so cloud changes need not wake us.
                        tokio::select! {
                            _ = stopped.changed() => return,
                            _ = tokio::time::sleep(delay.unwrap_or(self.config.max_retry)) => {}
                        }
                    }
                }
                continue;
            };
            let now = Instant::now();
            // Plan over the cloud in place and copy only the VMs a write needs: rounds stay cheap with thousands
            // of VMs.
            let (decided, vms) = self.cloud.inspect(|all| {
                let decided =
                    plan(all.values(), records, now, self.config.heartbeat, self.config.remove_nodes_of_deleted_vms);
                let wanted: HashSet<&str> = decided.actions.iter().map(|(id, _)| id.as_str()).collect();
                let vms: HashMap<String, Vm> = all
                    .values()
                    .filter(|vm| wanted.contains(vm.provider_id.as_str()))
                    .map(|vm| (vm.provider_id.clone(), vm.clone()))
                    .collect();
                (decided, vms)
            });
            retries.retain(|id, _| vms.contains_key(id) || records.contains_key(id));
            let mut wake_at = decided.wake_at;
            let mut due = Vec::new();
            for (id, action) in decided.actions {
                match retries.get(&id) {
                    Some((_, at)) if *at > now => wake_at = Some(wake_at.map_or(*at, |w| w.min(*at))),
                    _ => due.push((id, action)),
                }
            }
            let this = &self;
            let current: &HashMap<String, Record> = records;
            let outcomes: Vec<(String, Outcome)> = futures::stream::iter(due)
                .map(|(id, action)| {
                    let (vm, record) = (vms.get(&id), current.get(&id));
                    async move {
                        let outcome = this.execute(action, vm, record).await;
                        (id, outcome)
                    }
                })
                .buffer_unordered(self.config.concurrency.max(1))
                .collect()
                .await;
            // A write changes the records the deadlines come from: plan again before sleeping.
            let mut wrote = false;
            for (id, outcome) in outcomes {
                match outcome {
                    Ok(record) => {
                        retries.remove(&id);
                        match record {
                            Some(record) => records.insert(id, record),
                            None => records.remove(&id),
                        };
                        wrote = true;
                    }
                    Err(e) => {
                        Counters::bump(&self.counters.errors);
                        tracing::warn!(error = %e, provider_id = %id, "in-memory kubelet: write failed, retrying");
                        let (delays, at) = retries.entry(id).or_insert_with(|| (self.backoff(), now));
                        *at = Instant::now() + delays.next().unwrap_or(self.config.max_retry);
                        wake_at = Some(wake_at.map_or(*at, |w| w.min(*at)));
                    }
                }
            }
            if wrote {
                continue;
            }
            tokio::select! {
                _ = stopped.changed() => return,
                _ = changed(&mut changes) => {}
                _ = sleep_until(wake_at) => {}
            }
        }
    }

    fn backoff(&self) -> ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(self.config.min_retry)
            .with_max_delay(self.config.max_retry)
            .with_jitter()
            .without_max_times()
            .build()
    }

    /// Records for the Nodes that carry a providerID of this cloud.
    async fn adopt_all(&self) -> Result<HashMap<String, Record>, KubeletError> {
        let list = self
            .nodes
            .list(&ListParams::default())
            .await
            .map_err(|source| KubeletError::Api { node: "(list)".into(), source })?;
        let ours: HashSet<String> = self.cloud.inspect(|all| all.values().map(|vm| vm.provider_id.clone()).collect());
        let (now, wall) = (Instant::now(), wall_now());
        let adopted: HashMap<String, Record> = list
            .items
            .iter()
            .filter_map(|node| adopt(node, |id| ours.contains(id), now, &wall, self.config.heartbeat))
            .collect();
        tracing::debug!(nodes = adopted.len(), "in-memory kubelet: adopted existing Nodes");
        Ok(adopted)
    }

    async fn execute(&self, action: Action, vm: Option<&Vm>, record: Option<&Record>) -> Outcome {
        match (action, vm, record) {
            (Action::Register, Some(vm), _) => self.register(vm).await.map(Some),
            (Action::MarkReady, Some(vm), Some(record)) => self.post_ready(vm, &record.node_name).await,
            (Action::Refresh, Some(vm), Some(record)) => self.refresh(vm, record).await,
            (Action::Heartbeat, _, Some(record)) => self.heartbeat(record).await,
            (Action::MarkUnknown, _, Some(record)) => self.mark_unknown(record).await,
            (Action::RemoveNode, _, Some(record)) => self.remove(record).await,
            // The plan only asks for what it has the inputs for.
            _ => Ok(record.cloned()),
        }
    }

    /// Deletes the Node of a deleted VM (already gone: nothing to do); the record is forgotten.
    async fn remove(&self, record: &Record) -> Outcome {
        match self.nodes.delete(&record.node_name, &Default::default()).await {
            Ok(_) => Ok(None),
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(None),
            Err(source) => Err(KubeletError::Api { node: record.node_name.clone(), source }),
        }
    }

    /// Creates the Node (or takes over one that already carries our providerID) and posts Ready.
    async fn register(&self, vm: &Vm) -> Result<Record, KubeletError> {
        let name = vm.machine_name.clone();
        let api = |source| KubeletError::Api { node: name.clone(), source };
        match self.nodes.create(&PostParams::default(), &node_object(vm)).await {
            Ok(_) => Counters::bump(&self.counters.nodes_created),
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                let existing = self.nodes.get(&name).await.map_err(api)?;
                let existing = existing.spec.and_then(|s| s.provider_id);
                if existing.as_deref() != Some(vm.provider_id.as_str()) {
                    return Err(KubeletError::NameTaken { node: name, existing, wanted: vm.provider_id.clone() });
                }
            }
            Err(e) => return Err(api(e)),
        }
        match self.post_ready(vm, &name).await? {
            Some(record) => Ok(record),
            // Deleted between create and status: try again from scratch.
            None => Err(KubeletError::Vanished { node: name }),
        }
    }

    /// Posts the full Ready status; `None` when the Node is gone.
    async fn post_ready(&self, vm: &Vm, name: &str) -> Outcome {
        let now = wall_now();
        let status = ready_status(vm, &now, &now);
        let gone = self.patch_status(name, json!({ "status": status })).await?;
        Counters::bump(&self.counters.ready_posts);
        Ok(self.next_record(name, Phase::Ready, now.clone(), now, gone, vm.revision))
    }

    /// Re-posts what an in-place update changed: the instance-type label, then capacity and node info.
    async fn refresh(&self, vm: &Vm, record: &Record) -> Outcome {
        let name = &record.node_name;
        let (labels, status) = refreshed(vm);
        let gone = match self.nodes.patch(name, &PatchParams::default(), &Patch::Merge(labels)).await {
            Ok(_) => false,
            Err(kube::Error::Api(status)) if status.is_not_found() => true,
            Err(source) => return Err(KubeletError::Api { node: name.clone(), source }),
        };
        let gone = gone || self.patch_status(name, status).await?;
        Counters::bump(&self.counters.refreshes);
        let next = self.next_record(
            name,
            Phase::Ready,
            record.since.clone(),
            record.last_heartbeat.clone(),
            gone,
            vm.revision,
        );
        // The heartbeat schedule stays as it was: a refresh is no heartbeat.
        Ok(next.map(|r| Record { next_heartbeat: record.next_heartbeat, ..r }))
    }

    async fn heartbeat(&self, record: &Record) -> Outcome {
        let now = wall_now();
        let conditions = conditions(Health::Ready, &record.since, &now);
        let gone = self.patch_status(&record.node_name, json!({ "status": { "conditions": conditions } })).await?;
        Counters::bump(&self.counters.heartbeats);
        Ok(self.next_record(&record.node_name, Phase::Ready, record.since.clone(), now, gone, record.revision))
    }

    /// What the node-lifecycle controller does once a kubelet goes silent: every condition Unknown, the last
    /// heartbeat kept.
    async fn mark_unknown(&self, record: &Record) -> Outcome {
        let now = wall_now();
        let conditions = conditions(Health::Unknown, &now, &record.last_heartbeat);
        let gone = self.patch_status(&record.node_name, json!({ "status": { "conditions": conditions } })).await?;
        Counters::bump(&self.counters.unknown_posts);
        Ok(self.next_record(
            &record.node_name,
            Phase::Unknown,
            now,
            record.last_heartbeat.clone(),
            gone,
            record.revision,
        ))
    }

    fn next_record(
        &self,
        name: &str,
        phase: Phase,
        since: Time,
        last_heartbeat: Time,
        gone: bool,
        revision: u64,
    ) -> Option<Record> {
        let phase = if gone { Phase::Gone } else { phase };
        // Far enough to never come due when heartbeats are off; the plan ignores it then anyway.
        let interval = self.config.heartbeat.unwrap_or(Duration::from_secs(86_400));
        Some(Record {
            node_name: name.to_string(),
            phase,
            since,
            last_heartbeat,
            next_heartbeat: Instant::now() + interval,
            revision,
        })
    }

    /// A strategic merge patch of the status (conditions merge by type); true when the Node no longer exists.
    async fn patch_status(&self, name: &str, patch: serde_json::Value) -> Result<bool, KubeletError> {
        match self.nodes.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch)).await {
            Ok(_) => Ok(false),
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(true),
            Err(source) => Err(KubeletError::Api { node: name.to_string(), source }),
        }
    }
}

fn wall_now() -> Time {
    Time(jiff::Timestamp::now())
}

/// Waits for the next cloud change (forever if the cloud could no longer change).
async fn changed(changes: &mut watch::Receiver<u64>) {
    if changes.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::api::DeleteParams;
    use serde_json::json;

    use super::*;
    use crate::api::mcm::NodeTemplateSpec;
    use crate::apiserver::faults::{Selector, Verb};
    use crate::apiserver::{ApiServer, ServerConfig};
    use crate::providers::inmemory::node::ready_condition;
    use crate::providers::inmemory::{InMemoryDriver, class};
    use crate::providers::{Driver, MachineInfo, MachineRequest};

    async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
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

    /// The Ready condition's status of Node `name`, once the Node exists.
    async fn ready(nodes: &Api<Node>, name: &str) -> Option<String> {
        let node = nodes.get_opt(name).await.ok()??;
        ready_condition(&node).map(|c| c.status.clone())
    }

    async fn wait_ready(nodes: &Api<Node>, name: &str, status: &str) -> Node {
        eventually(&format!("node {name} Ready={status}"), || async {
            (ready(nodes, name).await.as_deref() == Some(status)).then_some(())?;
            nodes.get(name).await.ok()
        })
        .await
    }

    fn request(name: &str, extra: serde_json::Value) -> MachineRequest {
        MachineRequest {
            machine: MachineInfo { name: name.into(), namespace: "default".into(), ..Default::default() },
            class: class("c", "dev", extra),
            ..Default::default()
        }
    }

    async fn setup(config: KubeletConfig) -> (ApiServer, Api<Node>, InMemoryDriver, Kubelet) {
        let server = ApiServer::start(ServerConfig::default()).await.unwrap();
        let client = server.client().await.unwrap();
        let driver = InMemoryDriver::new(InMemoryCloud::with_seed(1));
        let kubelet = Kubelet::spawn(driver.cloud().clone(), client.clone(), config);
        (server, Api::all(client), driver, kubelet)
    }

    #[tokio::test]
    async fn node_goes_ready_after_boot_and_unknown_when_the_vm_dies() {
        let (_server, nodes, driver, kubelet) = setup(KubeletConfig::default()).await;
        let mut req =
            request("m1", json!({"bootSeconds": 0.05, "cpu": "4", "memory": "16Gi", "machineType": "m.large"}));
        req.machine.node_template = Some(NodeTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("pool".to_string(), "a".to_string())].into()),
                annotations: Some([("note".to_string(), "x".to_string())].into()),
                ..Default::default()
            }),
            spec: Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: "dedicated".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        });
        let created = driver.create_machine(&req).await.unwrap();
        let node = wait_ready(&nodes, "m1", "True").await;
        assert_eq!(node.spec.as_ref().unwrap().provider_id.as_deref(), Some(created.provider_id.as_str()));
        assert_eq!(node.spec.as_ref().unwrap().taints.as_ref().unwrap()[0].key, "dedicated");
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!((labels["pool"].as_str(), labels["node.kubernetes.io/instance-type"].as_str()), ("a", "m.large"));
        assert_eq!(node.metadata.annotations.as_ref().unwrap()["note"], "x");
        let status = node.status.as_ref().unwrap();
        assert_eq!(status.capacity.as_ref().unwrap()["memory"].0, "16Gi");
        assert_eq!(status.addresses.as_ref().unwrap(), &created.addresses);
        assert_eq!(status.conditions.as_ref().unwrap().len(), 4);

        assert!(driver.cloud().kill(&created.provider_id));
        let node = wait_ready(&nodes, "m1", "Unknown").await;
        for c in node.status.unwrap().conditions.unwrap() {
            assert_eq!((c.status.as_str(), c.reason.as_deref()), ("Unknown", Some("NodeStatusUnknown")), "{}", c.type_);
            assert_eq!(c.message.as_deref(), Some(crate::providers::inmemory::node::UNKNOWN_MESSAGE));
        }
        let stats = kubelet.stats();
        assert_eq!((stats.nodes_created, stats.ready_posts, stats.unknown_posts, stats.errors), (1, 1, 1, 0));
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn an_update_in_place_is_reposted() {
        let (_server, nodes, driver, kubelet) = setup(KubeletConfig::default()).await;
        let created = driver.create_machine(&request("m1", json!({"bootSeconds": 0.0}))).await.unwrap();
        wait_ready(&nodes, "m1", "True").await;
        let update = crate::providers::inmemory::VmUpdate {
            machine_type: Some("m.xlarge".into()),
            kubelet_version: Some("v1.38.0".into()),
            ..Default::default()
        };
        assert!(driver.cloud().update_in_place(&created.provider_id, &update));
        let node = eventually("the new kubelet version", || async {
            let node = nodes.get("m1").await.ok()?;
            let version = node.status.as_ref()?.node_info.as_ref()?.kubelet_version.clone();
            (version == "v1.38.0").then_some(node)
        })
        .await;
        assert_eq!(node.metadata.labels.as_ref().unwrap()["node.kubernetes.io/instance-type"], "m.xlarge");
        assert_eq!(ready_condition(&node).map(|c| c.status.as_str()), Some("True"), "conditions untouched");
        let stats = kubelet.stop().await;
        assert_eq!((stats.nodes_created, stats.refreshes, stats.errors), (1, 1, 0));
    }

    #[tokio::test]
    async fn die_after_seconds_turns_the_node_unknown_on_time() {
        let (_server, nodes, driver, kubelet) = setup(KubeletConfig::default()).await;
        let started = Instant::now();
        driver.create_machine(&request("m1", json!({"bootSeconds": 0.05, "dieAfterSeconds": 0.3}))).await.unwrap();
        wait_ready(&nodes, "m1", "True").await;
        wait_ready(&nodes, "m1", "Unknown").await;
        assert!(started.elapsed() >= Duration::from_millis(350), "{:?}", started.elapsed());
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn heartbeats_and_write_counts() {
        let config = KubeletConfig { heartbeat: Some(Duration::from_millis(100)), ..Default::default() };
        let (server, nodes, driver, kubelet) = setup(config).await;
        driver.create_machine(&request("m1", json!({"bootSeconds": 0.0}))).await.unwrap();
        wait_ready(&nodes, "m1", "True").await;
        eventually("3 heartbeats", || async { (kubelet.stats().heartbeats >= 3).then_some(()) }).await;
        let kubelet_stats = kubelet.stop().await;
        let faults = server.faults();
        // One list at start, one create, then status patches only; never a read per round.
        assert_eq!(faults.request_count(Verb::List, "nodes"), 1);
        assert_eq!(faults.request_count(Verb::Create, "nodes"), 1);
        // The ready post and one patch per heartbeat.
        let stats = kubelet_stats;
        assert_eq!(faults.request_count(Verb::Patch, "nodes/status"), 1 + stats.heartbeats);
        assert_eq!((stats.nodes_created, stats.ready_posts, stats.errors), (1, 1, 0));
    }

    #[tokio::test]
    async fn a_restarted_kubelet_adopts_its_nodes() {
        let (server, nodes, driver, first) = setup(KubeletConfig::default()).await;
        let a = driver.create_machine(&request("a", json!({"bootSeconds": 0.0}))).await.unwrap();
        wait_ready(&nodes, "a", "True").await;
        first.stop().await;
        // Booted while no kubelet ran.
        driver.create_machine(&request("b", json!({"bootSeconds": 0.0}))).await.unwrap();
        let second = Kubelet::spawn(driver.cloud().clone(), server.client().await.unwrap(), KubeletConfig::default());
        wait_ready(&nodes, "b", "True").await;
        driver.cloud().kill(&a.provider_id);
        wait_ready(&nodes, "a", "Unknown").await;
        let stats = second.stats();
        assert_eq!((stats.nodes_created, stats.ready_posts, stats.unknown_posts), (1, 1, 1), "{stats:?}");
        assert_eq!(nodes.list(&Default::default()).await.unwrap().items.len(), 2);
        second.stop().await;
    }

    #[tokio::test]
    async fn an_uninitialized_vm_registers_once_initialized() {
        let (_server, nodes, driver, kubelet) = setup(KubeletConfig::default()).await;
        let needs_init = request("a", json!({"bootSeconds": 0.0, "requireInitialize": true}));
        driver.create_machine(&needs_init).await.unwrap();
        // Another VM's Node appearing proves the kubelet went round with `a` booted.
        driver.create_machine(&request("b", json!({"bootSeconds": 0.0}))).await.unwrap();
        wait_ready(&nodes, "b", "True").await;
        assert!(nodes.get_opt("a").await.unwrap().is_none());
        driver.initialize_machine(&needs_init).await.unwrap();
        wait_ready(&nodes, "a", "True").await;
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn a_deleted_node_is_never_recreated() {
        let (_server, nodes, driver, kubelet) = setup(KubeletConfig::default()).await;
        let req = request("a", json!({"bootSeconds": 0.0}));
        let a = driver.create_machine(&req).await.unwrap();
        wait_ready(&nodes, "a", "True").await;
        let mut by_id = req.clone();
        by_id.machine.provider_id = Some(a.provider_id.clone());
        driver.delete_machine(&by_id).await.unwrap();
        wait_ready(&nodes, "a", "Unknown").await;
        nodes.delete("a", &DeleteParams::default()).await.unwrap();
        // Another VM's Node appearing proves the kubelet went round again.
        driver.create_machine(&request("b", json!({"bootSeconds": 0.0}))).await.unwrap();
        wait_ready(&nodes, "b", "True").await;
        assert!(nodes.get_opt("a").await.unwrap().is_none());
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn api_errors_are_retried() {
        let server = ApiServer::start(ServerConfig::default()).await.unwrap();
        let client = server.client().await.unwrap();
        let faults = server.faults();
        faults.fail_next(Selector::new(Some(Verb::List), Some("nodes")), 2, 500);
        let driver = InMemoryDriver::new(InMemoryCloud::with_seed(1));
        let config = KubeletConfig { min_retry: Duration::from_millis(10), ..Default::default() };
        let kubelet = Kubelet::spawn(driver.cloud().clone(), client.clone(), config);
        let nodes: Api<Node> = Api::all(client);
        faults.fail_next(Selector::new(Some(Verb::Create), Some("nodes")), 2, 500);
        faults.fail_next(Selector::new(Some(Verb::Patch), Some("nodes/status")), 2, 500);
        driver.create_machine(&request("a", json!({"bootSeconds": 0.0}))).await.unwrap();
        wait_ready(&nodes, "a", "True").await;
        assert!(kubelet.stats().errors >= 4, "{:?}", kubelet.stats());
        assert_eq!(faults.request_count(Verb::List, "nodes"), 3, "two failed lists, then one that worked");
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn a_node_of_another_vm_blocks_registration_until_it_goes() {
        let config = KubeletConfig { min_retry: Duration::from_millis(10), ..Default::default() };
        let (_server, nodes, driver, kubelet) = setup(config).await;
        let squatter = Node {
            metadata: ObjectMeta { name: Some("a".into()), ..Default::default() },
            spec: Some(NodeSpec { provider_id: Some("inmemory:///local-a/i-old".into()), ..Default::default() }),
            status: None,
        };
        nodes.create(&PostParams::default(), &squatter).await.unwrap();
        let a = driver.create_machine(&request("a", json!({"bootSeconds": 0.0}))).await.unwrap();
        eventually("a refused registration", || async { (kubelet.stats().errors >= 1).then_some(()) }).await;
        assert_eq!(ready(&nodes, "a").await, None);
        nodes.delete("a", &DeleteParams::default()).await.unwrap();
        let node = wait_ready(&nodes, "a", "True").await;
        assert_eq!(node.spec.unwrap().provider_id, Some(a.provider_id));
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn one_stuck_node_does_not_hold_up_the_others() {
        let hour = Duration::from_secs(3600);
        let config = KubeletConfig { min_retry: hour, max_retry: hour, ..Default::default() };
        let (_server, nodes, driver, kubelet) = setup(config).await;
        let squatter = Node {
            metadata: ObjectMeta { name: Some("a".into()), ..Default::default() },
            spec: Some(NodeSpec { provider_id: Some("inmemory:///local-a/i-old".into()), ..Default::default() }),
            status: None,
        };
        nodes.create(&PostParams::default(), &squatter).await.unwrap();
        driver.create_machine(&request("a", json!({"bootSeconds": 0.0}))).await.unwrap();
        eventually("a refused registration", || async { (kubelet.stats().errors >= 1).then_some(()) }).await;
        driver.create_machine(&request("b", json!({"bootSeconds": 0.0}))).await.unwrap();
        wait_ready(&nodes, "b", "True").await;
        assert_eq!(kubelet.stop().await.errors, 1, "a is not retried before its back-off");
    }

    #[tokio::test]
    async fn dropping_the_handle_stops_the_task() {
        let (_server, _nodes, _driver, kubelet) = setup(KubeletConfig::default()).await;
        let task = kubelet.task.abort_handle();
        drop(kubelet);
        eventually("the task to end", || async { task.is_finished().then_some(()) }).await;
    }
}
