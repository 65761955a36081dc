//! Where Nodes are: a [`Connection`] to a cluster (its clients and a Node store). Mode "CAPI with MCM core" reaches
//! each Cluster's workload cluster as core does, through the kubeconfig in the Secret `<cluster>-kubeconfig` (key
//! `value`) of the Cluster's namespace: one cached connection per Cluster with its own Node watch, closed when the
//! Cluster goes ([`WorkloadClusters`]). An explicit `--target-kubeconfig` (and `mcm dev`, whose in-memory cloud
//! registers every Node in its own server) puts one cluster in place of all of them.
//!
//! A connection is made on first use and checked again at most every [`RECHECK`]: the Secret is read (one GET),
//! and a changed Secret (a rotated kubeconfig) replaces the connection. A missing Secret or an unreachable server
//! is not an error of the Machine: it waits with its Node conditions `Unknown` (`ConnectionDown`), as in core.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::sync::{Mutex, mpsc, watch};
use tokio::task::JoinHandle;

use crate::api::capi::Machine;
use crate::controllers::informer::{Informer, Notice, prune_node};

/// How often a connection's Secret is read again (a rotated kubeconfig is taken within this).
const RECHECK: Duration = Duration::from_secs(60);
/// How often a Cluster without a connection is tried again (its Secret looked for, its server reached).
pub(crate) const RECHECK_DOWN: Duration = Duration::from_secs(10);

/// How long a reconcile waits for a new connection's first list of Nodes before reporting it down.
const FIRST_LIST: Duration = Duration::from_secs(5);

/// The Secret holding a Cluster's kubeconfig, by core's convention.
pub(crate) fn kubeconfig_secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// The Nodes of one workload cluster and the clients to reach it.
pub(crate) struct Connection {
    /// Cordons and Node deletions.
    pub client: Client,
    /// Evictions (no automatic 429 retries: a PodDisruptionBudget's refusal must be seen at once).
    pub drain: Client,
    nodes: Store<Node>,
    ready: watch::Receiver<bool>,
    /// The Node watch; aborted when the connection is dropped.
    watch: Option<JoinHandle<()>>,
}

impl Connection {
    /// A connection over a Node store someone else fills (and waits for).
    pub(crate) fn fixed(client: Client, drain: Client, nodes: Store<Node>) -> Self {
        Connection { client, drain, nodes, ready: watch::channel(true).1, watch: None }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(task) = self.watch.take() {
            task.abort();
        }
    }
}

impl Connection {
    /// The Node named `name`.
    pub(crate) fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }

    /// The Node whose `spec.providerID` is exactly `provider_id`.
    pub(crate) fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<Node>> {
        self.nodes
            .state()
            .into_iter()
            .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
    }

    fn listed(&self) -> bool {
        *self.ready.borrow()
    }
}

/// Where a Cluster's Nodes are, as a reconcile sees it.
#[derive(Clone)]
pub(crate) enum Workload {
    /// Connected, its Nodes listed.
    Up(Arc<Connection>),
    /// Not reachable (yet): why, for the Machine's Node conditions.
    Down(String),
    /// No workload cluster at all (`--target-kubeconfig none`): Machines never get a Node.
    Absent,
}

impl Workload {
    /// The connection, when up.
    pub(crate) fn nodes(&self) -> Option<&Arc<Connection>> {
        match self {
            Workload::Up(connection) => Some(connection),
            Workload::Down(_) | Workload::Absent => None,
        }
    }

    /// Why it cannot be read, when down.
    pub(crate) fn down(&self) -> Option<&str> {
        match self {
            Workload::Down(why) => Some(why),
            Workload::Up(_) | Workload::Absent => None,
        }
    }
}

/// One Cluster's entry.
struct Entry {
    connection: Option<Arc<Connection>>,
    /// The Secret's resourceVersion the connection was made from.
    secret_version: Option<String>,
    checked: Instant,
    /// Why there is no connection.
    error: String,
}

/// Where every Cluster's Nodes are.
pub(crate) struct WorkloadClusters {
    source: Source,
    /// Machines to reconcile when a Node of theirs changes.
    triggers: mpsc::UnboundedSender<ObjectRef<Machine>>,
    machines: Store<Machine>,
}

enum Source {
    /// One cluster for all (an explicit `--target-kubeconfig`, or `mcm dev`), or none.
    Fixed(Option<Arc<Connection>>),
    /// Each Cluster's `<cluster>-kubeconfig` Secret, read from the control cluster.
    PerCluster { control: Client, entries: Mutex<HashMap<(String, String), Entry>> },
}

impl WorkloadClusters {
    /// The same cluster for every Cluster: its clients and a running Node watch (`None`: no workload cluster).
    pub(crate) fn fixed(
        target: Option<Connection>,
        machines: Store<Machine>,
        triggers: mpsc::UnboundedSender<ObjectRef<Machine>>,
    ) -> Self {
        WorkloadClusters { source: Source::Fixed(target.map(Arc::new)), triggers, machines }
    }

    /// Each Cluster's own, through its kubeconfig Secret in `control`.
    pub(crate) fn per_cluster(
        control: Client,
        machines: Store<Machine>,
        triggers: mpsc::UnboundedSender<ObjectRef<Machine>>,
    ) -> Self {
        WorkloadClusters { source: Source::PerCluster { control, entries: Mutex::default() }, triggers, machines }
    }

    /// The workload cluster of Cluster `namespace/cluster`, connecting (or checking the Secret again) when due.
    pub(crate) async fn get(&self, namespace: &str, cluster: &str) -> Workload {
        let (control, entries) = match &self.source {
            Source::Fixed(Some(connection)) => return Workload::Up(connection.clone()),
            Source::Fixed(None) => return Workload::Absent,
            Source::PerCluster { control, entries } => (control, entries),
        };
        let key = (namespace.to_string(), cluster.to_string());
        let connection = {
            // Held across the Secret read: concurrent reconciles of one Cluster's machines connect once.
            let mut entries = entries.lock().await;
            let due = entries
                .get(&key)
                .is_none_or(|e| e.checked.elapsed() >= if e.connection.is_some() { RECHECK } else { RECHECK_DOWN });
            if due {
                let known = entries.remove(&key);
                let entry = self.refresh(control, &key, known).await;
                entries.insert(key.clone(), entry);
            }
            match entries.get(&key) {
                Some(Entry { connection: Some(c), .. }) => c.clone(),
                Some(entry) => return Workload::Down(entry.error.clone()),
                None => return Workload::Down("Remote connection not established yet".into()),
            }
        };
        if !connection.listed() {
            let mut ready = connection.ready.clone();
            let listed = tokio::time::timeout(FIRST_LIST, ready.wait_for(|r| *r)).await;
            if !matches!(listed, Ok(Ok(_))) {
                return Workload::Down("Remote connection not established yet".into());
            }
        }
        Workload::Up(connection)
    }

    /// Reads the Cluster's Secret and keeps, replaces or drops its connection.
    async fn refresh(&self, control: &Client, (namespace, cluster): &(String, String), known: Option<Entry>) -> Entry {
        let name = kubeconfig_secret_name(cluster);
        let secrets: Api<Secret> = Api::namespaced(control.clone(), namespace);
        let down = |error: String| Entry { connection: None, secret_version: None, checked: Instant::now(), error };
        let secret = match secrets.get_opt(&name).await {
            Ok(Some(secret)) => secret,
            Ok(None) => {
                if known.as_ref().is_some_and(|e| e.connection.is_some()) {
                    tracing::info!(cluster, namespace, "kubeconfig Secret gone; workload cluster connection closed");
                }
                return down(format!("Secret {namespace}/{name} with the workload cluster's kubeconfig not found"));
            }
            Err(e) => {
                // Keep a working connection through a hiccup of the control cluster.
                if let Some(mut entry) = known.filter(|e| e.connection.is_some()) {
                    entry.checked = Instant::now();
                    return entry;
                }
                return down(format!("reading Secret {namespace}/{name}: {e}"));
            }
        };
        let version = secret.resource_version();
        if let Some(mut entry) = known.filter(|e| e.connection.is_some() && e.secret_version == version) {
            entry.checked = Instant::now();
            return entry;
        }
        match self.connect(&secret, namespace, cluster).await {
            Ok(connection) => {
                tracing::info!(cluster, namespace, "connected to the workload cluster");
                Entry {
                    connection: Some(Arc::new(connection)),
                    secret_version: version,
                    checked: Instant::now(),
                    error: String::new(),
                }
            }
            Err(error) => {
                tracing::warn!(cluster, namespace, %error, "cannot connect to the workload cluster");
                down(error)
            }
        }
    }

    /// A connection from the kubeconfig in `secret` (its key `value`), with a running Node watch.
    async fn connect(&self, secret: &Secret, namespace: &str, cluster: &str) -> Result<Connection, String> {
        let name = secret.name_any();
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .ok_or_else(|| format!("Secret {namespace}/{name} has no key value"))?;
        // Parse errors can quote the text, which holds credentials: say only what is wrong.
        let invalid = || format!("Secret {namespace}/{name}: key value is not a usable kubeconfig");
        let text = std::str::from_utf8(&value.0).map_err(|_| invalid())?;
        let kubeconfig = Kubeconfig::from_yaml(text).map_err(|_| invalid())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|_| invalid())?;
        let client = Client::try_from(config.clone()).map_err(|e| format!("workload cluster client: {e}"))?;
        let drain = crate::drain::client_for_drain(config).map_err(|e| format!("workload cluster client: {e}"))?;
        let mut informer: Informer<Node> =
            Informer::new(Api::all(client.clone()), watcher::Config::default()).pruned(prune_node);
        let notices = informer.subscribe();
        let (nodes, ready) = (informer.store(), informer.ready());
        let forward = forward_node_notices(
            notices,
            self.machines.clone(),
            self.triggers.clone(),
            (namespace.to_string(), cluster.to_string()),
        );
        let watch = tokio::spawn(async move {
            futures::join!(informer.run(), forward);
        });
        Ok(Connection { client, drain, nodes, ready, watch: Some(watch) })
    }

    /// Closes the connection of Cluster `namespace/cluster` (it was deleted).
    pub(crate) async fn disconnect(&self, namespace: &str, cluster: &str) {
        if let Source::PerCluster { entries, .. } = &self.source
            && entries.lock().await.remove(&(namespace.to_string(), cluster.to_string())).is_some()
        {
            tracing::info!(cluster, namespace, "workload cluster connection closed");
        }
    }

    /// How many workload clusters are connected (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) async fn connected(&self) -> usize {
        match &self.source {
            Source::Fixed(c) => usize::from(c.is_some()),
            Source::PerCluster { entries, .. } => {
                entries.lock().await.values().filter(|e| e.connection.is_some()).count()
            }
        }
    }
}

/// The Machines a Node notice concerns, of the Cluster whose connection saw it: by providerID or by nodeRef.
pub(crate) fn machines_of_node(
    machines: &Store<Machine>,
    node: &Node,
    cluster: Option<&(String, String)>,
) -> Vec<ObjectRef<Machine>> {
    let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.clone());
    let name = node.name_any();
    machines
        .state()
        .iter()
        .filter(|m| {
            cluster.is_none_or(|(ns, c)| m.namespace().as_deref() == Some(ns.as_str()) && &m.spec.cluster_name == c)
        })
        .filter(|m| {
            provider_id.is_some() && m.spec.provider_id == provider_id
                || m.status.as_ref().and_then(|s| s.node_ref.as_ref()).is_some_and(|r| r.name == name)
        })
        .map(|m| ObjectRef::from_obj(&**m))
        .collect()
}

async fn forward_node_notices(
    mut notices: mpsc::UnboundedReceiver<Notice<Node>>,
    machines: Store<Machine>,
    triggers: mpsc::UnboundedSender<ObjectRef<Machine>>,
    cluster: (String, String),
) {
    while let Some(notice) = notices.recv().await {
        for machine in machines_of_node(&machines, notice.object(), Some(&cluster)) {
            if triggers.send(machine).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::ByteString;
    use kube::api::PostParams;
    use kube::runtime::reflector::store::Writer;
    use serde_json::json;

    use crate::apiserver::{ApiServer, ServerConfig};

    #[test]
    fn the_kubeconfig_secret_is_named_as_core_names_it() {
        assert_eq!(kubeconfig_secret_name("demo"), "demo-kubeconfig");
    }

    async fn put_secret(control: &Client, value: &[u8]) {
        let secrets: Api<Secret> = Api::namespaced(control.clone(), "default");
        let _ = secrets.delete("demo-kubeconfig", &Default::default()).await;
        let mut secret: Secret = serde_json::from_value(json!({"metadata": {"name": "demo-kubeconfig"}})).unwrap();
        secret.data = Some([("value".to_string(), ByteString(value.to_vec()))].into());
        secrets.create(&PostParams::default(), &secret).await.unwrap();
    }

    #[tokio::test]
    async fn a_clusters_nodes_are_read_through_its_kubeconfig_secret() {
        let control_server = ApiServer::start(ServerConfig::default()).await.unwrap();
        let workload_server = ApiServer::start(ServerConfig::default()).await.unwrap();
        let control = control_server.client().await.unwrap();
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"}, "spec": {"providerID": "inmemory:///vm-1"},
        }))
        .unwrap();
        let workload_client = workload_server.client().await.unwrap();
        Api::<Node>::all(workload_client).create(&PostParams::default(), &node).await.unwrap();
        let (triggers, _) = mpsc::unbounded_channel();
        let clusters = WorkloadClusters::per_cluster(control.clone(), Writer::default().as_reader(), triggers);

        let Workload::Down(why) = clusters.get("default", "demo").await else { panic!("no Secret yet: down") };
        assert!(why.contains("Secret default/demo-kubeconfig") && why.contains("not found"), "{why}");

        put_secret(&control, workload_server.kubeconfig_yaml().as_bytes()).await;
        clusters.disconnect("default", "demo").await; // forget the failed attempt instead of waiting for its retry
        let Workload::Up(nodes) = clusters.get("default", "demo").await else { panic!("connected") };
        assert_eq!(
            nodes.node_by_provider_id("inmemory:///vm-1").and_then(|n| n.metadata.name.clone()),
            Some("n1".into())
        );
        assert!(nodes.node("n1").is_some());
        assert_eq!(clusters.connected().await, 1);

        // Credentials never reach the message of a broken kubeconfig.
        put_secret(&control, b"token: s3cr3t-t0ken\nnot: [a kubeconfig").await;
        clusters.disconnect("default", "demo").await;
        assert_eq!(clusters.connected().await, 0);
        let Workload::Down(why) = clusters.get("default", "demo").await else { panic!("broken: down") };
        assert!(why.contains("not a usable kubeconfig") && !why.contains("s3cr3t"), "{why}");
    }
}
