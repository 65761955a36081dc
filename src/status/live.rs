//! The edge of `mcm status` that talks to clusters: one list per kind ([`list`]), or one watch per kind
//! ([`watch`]) feeding reflector stores, rendered again when something changed. No object is read one by one.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::inventory::Inventory;
use crate::api::{capi, infra, mcm};

/// Where the objects are.
#[derive(Clone)]
pub struct Sources {
    /// The cluster holding the machine objects.
    pub control: Client,
    /// The cluster holding the Nodes (the same one unless `--target-kubeconfig`).
    pub nodes: Client,
    /// Only this namespace (`None`: all namespaces).
    pub namespace: Option<String>,
}

/// The kinds `mcm status` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `machine.sapcloud.io` MachineDeployments.
    McmDeployments,
    /// `machine.sapcloud.io` MachineSets.
    McmSets,
    /// `machine.sapcloud.io` Machines.
    McmMachines,
    /// MachineClasses.
    MachineClasses,
    /// `cluster.x-k8s.io` MachineDeployments.
    CapiDeployments,
    /// `cluster.x-k8s.io` MachineSets.
    CapiSets,
    /// `cluster.x-k8s.io` Machines.
    CapiMachines,
    /// MCMMachines.
    InfraMachines,
    /// Nodes.
    Nodes,
}

impl Kind {
    fn plural(self) -> &'static str {
        match self {
            Kind::McmDeployments => "machinedeployments.machine.sapcloud.io",
            Kind::McmSets => "machinesets.machine.sapcloud.io",
            Kind::McmMachines => "machines.machine.sapcloud.io",
            Kind::MachineClasses => "machineclasses.machine.sapcloud.io",
            Kind::CapiDeployments => "machinedeployments.cluster.x-k8s.io",
            Kind::CapiSets => "machinesets.cluster.x-k8s.io",
            Kind::CapiMachines => "machines.cluster.x-k8s.io",
            Kind::InfraMachines => "mcmmachines.infrastructure.cluster.x-k8s.io",
            Kind::Nodes => "nodes",
        }
    }
}

/// What one round of lists found.
#[derive(Clone, Debug, Default)]
pub struct Listed {
    /// The objects.
    pub inventory: Inventory,
    /// The kinds the clusters serve and let us list (what a watch watches).
    pub served: Vec<Kind>,
    /// Kinds left out because listing them was forbidden, one sentence each.
    pub notes: Vec<String>,
}

/// Why the objects could not be read or watched.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// A list failed (other than a kind not served, or forbidden).
    #[error("could not list {what}: {source}")]
    List {
        /// The resource.
        what: &'static str,
        /// The cause.
        source: kube::Error,
    },
    /// Writing a rendering failed.
    #[error("could not write the output: {0}")]
    Output(#[source] std::io::Error),
}

fn namespaced<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// One kind's list: `None` when the kind is not served (404) or may not be listed (403, with a note).
async fn list_kind<K>(api: Api<K>, kind: Kind) -> Result<(Kind, Option<Vec<K>>, Option<String>), LiveError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok((kind, Some(list.items), None)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok((kind, None, None)),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            Ok((kind, None, Some(format!("{} are not shown: {}", kind.plural(), status.message))))
        }
        Err(source) => Err(LiveError::List { what: kind.plural(), source }),
    }
}

/// Lists every kind once (concurrently).
pub async fn list(sources: &Sources) -> Result<Listed, LiveError> {
    let ns = sources.namespace.as_deref();
    let c = &sources.control;
    let (d, s, m, classes, cd, cs, cm, im, nodes) = tokio::try_join!(
        list_kind(namespaced::<mcm::MachineDeployment>(c, ns), Kind::McmDeployments),
        list_kind(namespaced::<mcm::MachineSet>(c, ns), Kind::McmSets),
        list_kind(namespaced::<mcm::Machine>(c, ns), Kind::McmMachines),
        list_kind(namespaced::<mcm::MachineClass>(c, ns), Kind::MachineClasses),
        list_kind(namespaced::<capi::MachineDeployment>(c, ns), Kind::CapiDeployments),
        list_kind(namespaced::<capi::MachineSet>(c, ns), Kind::CapiSets),
        list_kind(namespaced::<capi::Machine>(c, ns), Kind::CapiMachines),
        list_kind(namespaced::<infra::MCMMachine>(c, ns), Kind::InfraMachines),
        list_kind(Api::<Node>::all(sources.nodes.clone()), Kind::Nodes),
    )?;
    let mut listed = Listed::default();
    let mut note = |kind: Kind, served: bool, note: Option<String>| {
        if served {
            listed.served.push(kind);
        }
        listed.notes.extend(note);
    };
    note(d.0, d.1.is_some(), d.2);
    note(s.0, s.1.is_some(), s.2);
    note(m.0, m.1.is_some(), m.2);
    note(classes.0, classes.1.is_some(), classes.2);
    note(cd.0, cd.1.is_some(), cd.2);
    note(cs.0, cs.1.is_some(), cs.2);
    note(cm.0, cm.1.is_some(), cm.2);
    note(im.0, im.1.is_some(), im.2);
    note(nodes.0, nodes.1.is_some(), nodes.2);
    listed.inventory = Inventory {
        mcm_deployments: d.1.unwrap_or_default(),
        mcm_sets: s.1.unwrap_or_default(),
        mcm_machines: m.1.unwrap_or_default(),
        machine_classes: classes.1,
        capi_deployments: cd.1.unwrap_or_default(),
        capi_sets: cs.1.unwrap_or_default(),
        capi_machines: cm.1.unwrap_or_default(),
        infra_machines: im.1.unwrap_or_default(),
        nodes: nodes.1,
    };
    Ok(listed)
}

/// What a watch stream says.
enum Change {
    /// Its (re)list is complete.
    Synced,
    /// An object changed.
    Changed,
    /// Nothing to render (a relist in progress).
    Quiet,
    /// The watch failed; it is retried with back-off.
    Failed(String),
}

/// A reflector store of one kind and its watch, each event tagged with the stream's index.
fn reflect<K>(api: Api<K>, index: usize, streams: &mut SelectAll<BoxStream<'static, (usize, Change)>>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff())
        .map(move |event| {
            let change = match event {
                Ok(watcher::Event::InitDone) => Change::Synced,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => Change::Changed,
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => Change::Quiet,
                Err(error) => Change::Failed(error.to_string()),
            };
            (index, change)
        })
        .boxed();
    streams.push(stream);
    reader
}

fn items<K>(store: &Option<Store<K>>) -> Option<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.as_ref().map(|s| s.state().iter().map(|o| o.as_ref().clone()).collect())
}

/// Stores of the served kinds.
#[derive(Default)]
struct Stores {
    mcm_deployments: Option<Store<mcm::MachineDeployment>>,
    mcm_sets: Option<Store<mcm::MachineSet>>,
    mcm_machines: Option<Store<mcm::Machine>>,
    machine_classes: Option<Store<mcm::MachineClass>>,
    capi_deployments: Option<Store<capi::MachineDeployment>>,
    capi_sets: Option<Store<capi::MachineSet>>,
    capi_machines: Option<Store<capi::Machine>>,
    infra_machines: Option<Store<infra::MCMMachine>>,
    nodes: Option<Store<Node>>,
}

impl Stores {
    fn snapshot(&self) -> Inventory {
        Inventory {
            mcm_deployments: items(&self.mcm_deployments).unwrap_or_default(),
            mcm_sets: items(&self.mcm_sets).unwrap_or_default(),
            mcm_machines: items(&self.mcm_machines).unwrap_or_default(),
            machine_classes: items(&self.machine_classes),
            capi_deployments: items(&self.capi_deployments).unwrap_or_default(),
            capi_sets: items(&self.capi_sets).unwrap_or_default(),
            capi_machines: items(&self.capi_machines).unwrap_or_default(),
            infra_machines: items(&self.infra_machines).unwrap_or_default(),
            nodes: items(&self.nodes),
        }
    }
}

/// How long a burst of changes may go on before the view is rendered anyway, and how quiet it must be before.
const QUIET: Duration = Duration::from_millis(100);
const AT_MOST: Duration = Duration::from_secs(1);

/// Watches the `served` kinds until `stop` resolves: `render` gets the objects once every watch has listed, then
/// after every burst of changes (100 ms of quiet, at most 1 s late), and every `tick` if given (ages move on).
/// `warn` hears watch failures (the watch retries with back-off).
pub async fn watch(
    sources: &Sources,
    served: &[Kind],
    tick: Option<Duration>,
    stop: impl Future<Output = ()>,
    mut warn: impl FnMut(&str),
    mut render: impl FnMut(&Inventory) -> std::io::Result<()>,
) -> Result<(), LiveError> {
    let ns = sources.namespace.as_deref();
    let c = &sources.control;
    let mut streams = SelectAll::new();
    let mut stores = Stores::default();
    for (index, kind) in served.iter().enumerate() {
        let s = &mut streams;
        match kind {
            Kind::McmDeployments => stores.mcm_deployments = Some(reflect(namespaced(c, ns), index, s)),
            Kind::McmSets => stores.mcm_sets = Some(reflect(namespaced(c, ns), index, s)),
            Kind::McmMachines => stores.mcm_machines = Some(reflect(namespaced(c, ns), index, s)),
            Kind::MachineClasses => stores.machine_classes = Some(reflect(namespaced(c, ns), index, s)),
            Kind::CapiDeployments => stores.capi_deployments = Some(reflect(namespaced(c, ns), index, s)),
            Kind::CapiSets => stores.capi_sets = Some(reflect(namespaced(c, ns), index, s)),
            Kind::CapiMachines => stores.capi_machines = Some(reflect(namespaced(c, ns), index, s)),
            Kind::InfraMachines => stores.infra_machines = Some(reflect(namespaced(c, ns), index, s)),
            Kind::Nodes => stores.nodes = Some(reflect(Api::all(sources.nodes.clone()), index, s)),
        }
    }
    let mut synced = vec![false; served.len()];
    // Since when changes wait to be rendered, and the last of them.
    let mut pending: Option<(Instant, Instant)> = None;
    let mut rendered = false;
    let mut ticker = tokio::time::interval(tick.unwrap_or(Duration::from_secs(3600)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        let ready = synced.iter().all(|s| *s);
        let due = pending.map(|(first, last)| (last + QUIET).min(first + AT_MOST));
        tokio::select! {
            () = &mut stop => return Ok(()),
            event = streams.next() => {
                let Some((index, change)) = event else {
                    return Ok(());
                };
                let now = Instant::now();
                match change {
                    Change::Synced => {
                        if let Some(s) = synced.get_mut(index) {
                            *s = true;
                        }
                        pending = Some(pending.map_or((now, now), |(first, _)| (first, now)));
                    }
                    Change::Changed => pending = Some(pending.map_or((now, now), |(first, _)| (first, now))),
                    Change::Quiet => {}
                    Change::Failed(error) => {
                        let kind = served.get(index).map_or("objects", |k| k.plural());
                        warn(&format!("watching {kind} failed (retrying): {error}"));
                    }
                }
            }
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if ready && due.is_some() => {
                pending = None;
                rendered = true;
                render(&stores.snapshot()).map_err(LiveError::Output)?;
            }
            _ = ticker.tick(), if tick.is_some() && rendered => {
                render(&stores.snapshot()).map_err(LiveError::Output)?;
            }
        }
    }
}
