//! Mode "CAPI with MCM core": our MachineDeployment, MachineSet and Machine controllers on `cluster.x-k8s.io/v1beta2`
//! objects, for clusters without upstream CAPI core and for `mcm dev` (`docs/capi-mode.md`).
//!
//! The decisions are the MCM flavour's, reached through the conversion layer (`convert`): a reconcile converts the
//! CAPI objects to hub values, calls `lifecycle` (`machine_set::plan_replicas`, `machine_deployment::plan_deployment`,
//! the status computations), converts the resulting objects and patches back, and writes them to the CAPI objects.
//! The Machine controller's decisions are `lifecycle::capi_machine`. VMs are the infrastructure provider's business:
//! a Machine waits for its MCMMachine (created by the MachineSet controller as a clone of the template) to report
//! `status.initialization.provisioned`.
//!
//! The Cluster controller does the part of upstream core's Cluster controller workers need: it owns the MCMCluster
//! and mirrors its `provisioned` onto `Cluster.status.initialization.infrastructureProvisioned`
//! (`lifecycle::capi_cluster`).
//!
//! The controllers refuse to start when upstream CAPI core's finalizers are found on the objects (both would act on
//! them).

mod bootstrap;
mod clones;
mod cluster;
mod flavour;
mod health_check;
mod in_place;
mod machine;
mod machine_deployment;
mod machine_set;

use std::collections::HashMap;
use std::sync::Arc;

use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::runtime::controller::Config as ControllerConfig;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::context::{Reports, RetryBook};
use super::events::Recorder;
use super::informer::{Informer, Notice, wait_all};
use super::replicas::settle::Unsettled;
use super::sets::SetOptions;
use super::tasks::{controller, on_stop};
use super::triggers::{applied, controller_named, owners_of, refs, scoped};
use super::workload::{Connection, WorkloadClusters, machines_of_node};
use super::{CapiNodes, ControllerOptions};
use crate::api::capi::{self, Machine, MachineDeployment, MachineHealthCheck, MachineSet};
use crate::api::infra::{MCMCluster, MCMMachine};
use crate::lifecycle::MachineConfig;
use crate::lifecycle::capi_cluster::paused_message;
use crate::lifecycle::capi_machine::{condition_with_status, merge_conditions};
use crate::lifecycle::claim::controller_of;

/// Finalizers of upstream CAPI core's controllers: found on an object, CAPI core manages it.
pub const UPSTREAM_CORE_FINALIZERS: [&str; 4] = [
    "cluster.x-k8s.io/machinedeployment",
    "cluster.x-k8s.io/machineset",
    "machine.cluster.x-k8s.io",
    "cluster.cluster.x-k8s.io",
];

/// Whether upstream CAPI core's controllers hold `meta` (one of their finalizers is on it).
pub fn held_by_upstream_core(meta: &ObjectMeta) -> bool {
    meta.finalizers.iter().flatten().any(|f| UPSTREAM_CORE_FINALIZERS.contains(&f.as_str()))
}

/// While an object of `kind` is paused (`lifecycle::capi_cluster::paused_message`): its `Paused` condition True with
/// core's message, written once; the caller then leaves the object alone. `None` when it is not paused.
async fn hold_if_paused<K>(
    ctx: &CapiContext,
    object: &K,
    cluster_name: &str,
    conditions: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
) -> Result<Option<()>, super::Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let namespace = object.namespace().unwrap_or_default();
    let cluster = ctx.clusters.get(&ObjectRef::new(cluster_name).within(&namespace));
    let kind = K::kind(&()).to_string();
    let Some(message) = paused_message(cluster.as_deref(), &kind, object.meta()) else {
        return Ok(None);
    };
    let mut all = conditions.cloned().unwrap_or_default();
    if all.iter().any(|c| c.type_ == "Paused" && c.status == "True" && c.message == message) {
        return Ok(Some(()));
    }
    let paused = condition_with_status(&all, "Paused", "True", "Paused", &message, jiff::Timestamp::now());
    merge_conditions(&mut all, vec![paused]);
    let api: kube::Api<K> = kube::Api::namespaced(ctx.control.clone(), &namespace);
    let patch = serde_json::json!({"status": {"conditions": all}});
    api.patch_status(&object.name_any(), &super::writes::patch_params(), &kube::api::Patch::Merge(&patch))
        .await
        .map_err(|e| super::Error::kube("mark paused", format!("{kind} {namespace}/{}", object.name_any()), e))?;
    tracing::info!(kind, object = %object.name_any(), namespace, %message, "paused");
    Ok(Some(()))
}

/// The objects of a Cluster whose `spec.paused` changed (only then: a Cluster changes with every count).
fn by_paused_cluster<K>(
    clusters: &mut Informer<capi::Cluster>,
    store: Store<K>,
    cluster_name_of: fn(&K) -> &str,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let mut seen: HashMap<(String, String), bool> = HashMap::new();
    refs(clusters.subscribe(), move |n: Notice<capi::Cluster>| {
        let c = n.object();
        let (ns, name) = (c.namespace().unwrap_or_default(), c.name_any());
        let paused = c.spec.paused == Some(true);
        let changed = seen.insert((ns.clone(), name.clone()), paused).is_some_and(|before| before != paused);
        store
            .state()
            .iter()
            .filter(|o| changed && o.namespace().as_deref() == Some(ns.as_str()) && cluster_name_of(o) == name)
            .map(|o| ObjectRef::from_obj(&**o))
            .collect::<Vec<_>>()
    })
}

/// Leaves an object alone that upstream core holds (its finalizer appeared after our start-up check, e.g. core was
/// installed later): logs it, with a Warning event when a recorder is given, once per generation, and releases our
/// own finalizer if it is there, so the object's deletion is upstream core's alone and nothing hangs on us.
async fn left_to_upstream_core<K>(
    ctx: &CapiContext,
    object: &K,
    recorder: Option<&Recorder>,
    our_finalizer: Option<&str>,
) -> Result<bool, super::Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    if !held_by_upstream_core(object.meta()) {
        return Ok(false);
    }
    let key = format!("upstream:{}:{}", K::kind(&()), super::context::key_of(object));
    if ctx.reported.first(&key, object.meta().generation.unwrap_or(0)) {
        let note = "upstream Cluster API core manages this object (its finalizer is on it); the MCM core \
                    controllers leave it alone (see docs/capi-mode.md)";
        tracing::warn!(kind = %K::kind(&()), object = %super::context::key_of(object), "{note}");
        if let Some(recorder) = recorder {
            let event = crate::lifecycle::status::EventSpec::warning("ManagedByUpstreamCore", note.to_string());
            super::context::publish_to(recorder, object, event).await;
        }
    }
    if let Some(finalizer) = our_finalizer
        && object.meta().finalizers.iter().flatten().any(|f| f == finalizer)
    {
        let api: kube::Api<K> =
            kube::Api::namespaced(ctx.control.clone(), &object.meta().namespace.clone().unwrap_or_default());
        super::writes::remove_finalizer(&api, object, finalizer).await?;
    }
    Ok(true)
}

/// What the three controllers share.
pub(crate) struct CapiContext {
    pub control: Client,
    /// Each Cluster's Nodes.
    pub workloads: WorkloadClusters,
    pub config: MachineConfig,
    pub machines: Store<Machine>,
    pub sets: Store<MachineSet>,
    pub deployments: Store<MachineDeployment>,
    pub infra: Store<MCMMachine>,
    pub clusters: Store<capi::Cluster>,
    pub infra_clusters: Store<MCMCluster>,
    pub ready: Vec<watch::Receiver<bool>>,
    pub set_events: Recorder,
    pub deployment_events: Recorder,
    pub machine_events: Recorder,
    pub health_check_events: Recorder,
    pub health_checks: Store<MachineHealthCheck>,
    pub retries: RetryBook,
    pub options: SetOptions,
    /// Invalid objects reported.
    pub reported: Reports,
    /// Bootstrap config kinds found by discovery.
    pub kinds: bootstrap::ReferencedKinds,
    /// Writes of earlier passes the stores have not shown yet.
    pub unsettled: Unsettled<Machine, MachineSet, MachineDeployment>,
}

impl CapiContext {
    async fn ready(&self) {
        wait_all(self.ready.clone()).await;
    }

    /// CAPI's `UpToDate` for a machine, from its MachineSet and that set's MachineDeployment in the stores: true
    /// for a set no deployment controls; `None` for a machine no set controls, or owners not seen yet.
    fn up_to_date(&self, m: &Machine) -> Option<bool> {
        let (ns, set) = controller_named(&m.metadata, "MachineSet", Some(capi::GROUP))?;
        let set = self.sets.get(&ObjectRef::new(&set).within(&ns))?;
        let Some((ns, deployment)) = controller_named(&set.metadata, "MachineDeployment", Some(capi::GROUP)) else {
            return Some(true);
        };
        let deployment = self.deployments.get(&ObjectRef::new(&deployment).within(&ns))?;
        Some(crate::lifecycle::capi_machine::machine_set_up_to_date(&deployment, &set, jiff::Timestamp::now()))
    }

    fn infra_of(&self, m: &Machine) -> Option<Arc<MCMMachine>> {
        let r = &m.spec.infrastructure_ref;
        if r.kind != "MCMMachine" {
            return None;
        }
        self.infra.get(&ObjectRef::new(&r.name).within(&m.namespace().unwrap_or_default()))
    }
}

/// The owner reference to a CAPI object of `kind` (`cluster.x-k8s.io/v1beta2`), as controller.
pub(crate) fn capi_controller_ref(kind: &str, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: format!("{}/{}", capi::GROUP, capi::VERSION),
        kind: kind.to_string(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Owner references the hub decisions wrote with MCM's group, pointed at CAPI's.
pub(crate) fn capi_owner_refs(meta: &mut ObjectMeta) {
    for r in meta.owner_references.iter_mut().flatten() {
        if r.api_version.starts_with(crate::api::mcm::GROUP) {
            r.api_version = format!("{}/{}", capi::GROUP, capi::VERSION);
        }
    }
}

/// What [`start`] started.
pub(crate) struct Started {
    pub controllers: Vec<JoinHandle<()>>,
    pub informers: Vec<JoinHandle<()>>,
}

/// Starts the CAPI MachineDeployment, MachineSet and Machine controllers (after checking that upstream CAPI core
/// does not hold the objects). Subscribes to the Node informer, so call it before that runs.
pub(crate) fn start(
    control: Client,
    target: Option<(Client, Client, &mut Informer<Node>)>,
    capi_nodes: CapiNodes,
    options: &ControllerOptions,
    stop: watch::Receiver<bool>,
) -> Started {
    let ns = options.namespace.as_deref();
    let mut machines: Informer<Machine> = Informer::new(scoped(&control, ns), watcher::Config::default());
    let mut sets: Informer<MachineSet> = Informer::new(scoped(&control, ns), watcher::Config::default());
    let mut deployments: Informer<MachineDeployment> = Informer::new(scoped(&control, ns), watcher::Config::default());
    let mut infra: Informer<MCMMachine> = Informer::new(scoped(&control, ns), watcher::Config::default());
    let mut clusters: Informer<capi::Cluster> = Informer::new(scoped(&control, ns), watcher::Config::default());
    let mut infra_clusters: Informer<MCMCluster> = Informer::new(scoped(&control, ns), watcher::Config::default());
    let mut health_checks: Informer<MachineHealthCheck> =
        Informer::new(scoped(&control, ns), watcher::Config::default());
    let recorder = |name: &str| Recorder::new(control.clone(), name);
    let mut ready = vec![
        machines.ready(),
        sets.ready(),
        deployments.ready(),
        infra.ready(),
        clusters.ready(),
        infra_clusters.ready(),
        health_checks.ready(),
    ];
    let mut node_notices = None;
    let (node_triggers, workload_notices) = mpsc::unbounded_channel();
    let workloads = match (capi_nodes, target) {
        (CapiNodes::PerCluster, _) => WorkloadClusters::per_cluster(control.clone(), machines.store(), node_triggers),
        (CapiNodes::Target, Some((client, drain, nodes))) => {
            ready.push(nodes.ready());
            node_notices = Some(nodes.subscribe());
            let connection = Connection::fixed(client, drain, nodes.store());
            WorkloadClusters::fixed(Some(connection), machines.store(), node_triggers)
        }
        (CapiNodes::Target, None) => WorkloadClusters::fixed(None, machines.store(), node_triggers),
    };
    let cluster_notices = clusters.subscribe();
    let ctx = Arc::new(CapiContext {
        control: control.clone(),
        workloads,
        config: options.machine.clone(),
        machines: machines.store(),
        sets: sets.store(),
        deployments: deployments.store(),
        infra: infra.store(),
        clusters: clusters.store(),
        infra_clusters: infra_clusters.store(),
        ready,
        set_events: recorder("machineset-controller"),
        deployment_events: recorder("machinedeployment-controller"),
        machine_events: recorder("machine-controller"),
        health_check_events: recorder("machinehealthcheck-controller"),
        health_checks: health_checks.store(),
        retries: RetryBook::default(),
        options: options.sets.clone(),
        reported: Reports::default(),
        kinds: bootstrap::ReferencedKinds::default(),
        unsettled: Unsettled::default(),
    });
    let shutdown = || on_stop(&stop);
    let config = ControllerConfig::default().concurrency(options.concurrent_syncs);

    let set_triggers = stream::select(
        set_triggers(&mut sets, &mut machines, &ctx),
        by_paused_cluster(&mut clusters, ctx.sets.clone(), |s: &MachineSet| s.spec.cluster_name.as_str()),
    );
    let set_controller = controller(
        ctx.sets.clone(),
        set_triggers,
        config.clone(),
        shutdown(),
        crate::metrics::timed(&options.metrics, "capi-machineset", machine_set::reconcile),
        machine_set::error_policy,
        ctx.clone(),
    );

    let deployment_triggers = stream::select(
        deployment_triggers(&mut deployments, &mut sets, &mut machines, &ctx),
        by_paused_cluster(&mut clusters, ctx.deployments.clone(), |d: &MachineDeployment| d.spec.cluster_name.as_str()),
    );
    let deployment_controller = controller(
        ctx.deployments.clone(),
        deployment_triggers,
        config.clone(),
        shutdown(),
        crate::metrics::timed(&options.metrics, "capi-machinedeployment", machine_deployment::reconcile),
        machine_deployment::error_policy,
        ctx.clone(),
    );

    let machine_triggers = stream::select(
        machine_triggers(&mut machines, &mut infra, &mut deployments, (node_notices, workload_notices), &ctx),
        by_paused_cluster(&mut clusters, ctx.machines.clone(), |m: &Machine| m.spec.cluster_name.as_str()),
    );
    let machine_controller = controller(
        ctx.machines.clone(),
        machine_triggers,
        config.clone(),
        shutdown(),
        crate::metrics::timed(&options.metrics, "capi-machine", machine::reconcile),
        machine::error_policy,
        ctx.clone(),
    );

    let cluster_triggers =
        cluster_triggers(&mut clusters, &mut infra_clusters, (&mut deployments, &mut sets, &mut machines), &ctx);
    let cluster_controller = controller(
        ctx.clusters.clone(),
        cluster_triggers,
        config.clone(),
        shutdown(),
        cluster::reconcile,
        cluster::error_policy,
        ctx.clone(),
    );

    let health_check_triggers = health_check_triggers(&mut health_checks, &mut machines, &mut clusters, &ctx);
    let health_check_controller = controller(
        ctx.health_checks.clone(),
        health_check_triggers,
        config,
        shutdown(),
        crate::metrics::timed(&options.metrics, "capi-machinehealthcheck", health_check::reconcile),
        health_check::error_policy,
        ctx.clone(),
    );

    // MCM's overshoot freeze over the CAPI MachineSets and MachineDeployments (their `Frozen` condition).
    let sweep = super::replicas::overshoot::run(ctx.clone(), machines.subscribe(), shutdown());

    let guard = ctx.clone();
    let controllers = async move {
        guard.ready().await;
        let held = guard.deployments.state().iter().any(|o| held_by_upstream_core(&o.metadata))
            || guard.sets.state().iter().any(|o| held_by_upstream_core(&o.metadata))
            || guard.machines.state().iter().any(|o| held_by_upstream_core(&o.metadata))
            || guard.clusters.state().iter().any(|o| held_by_upstream_core(&o.metadata));
        if held {
            tracing::error!(
                "upstream Cluster API core manages these cluster.x-k8s.io objects (its finalizers are on them); \
                 not starting the MCM core controllers for them (see docs/capi-mode.md)"
            );
            return;
        }
        tracing::info!("CAPI Cluster, MachineDeployment, MachineSet and Machine controllers (MCM core) started");
        futures::join!(
            set_controller,
            deployment_controller,
            machine_controller,
            cluster_controller,
            health_check_controller,
            sweep
        );
    };
    Started {
        controllers: vec![tokio::spawn(controllers)],
        informers: vec![
            tokio::spawn(machines.run()),
            tokio::spawn(sets.run()),
            tokio::spawn(deployments.run()),
            tokio::spawn(infra.run()),
            tokio::spawn(clusters.run()),
            tokio::spawn(infra_clusters.run()),
            tokio::spawn(health_checks.run()),
            tokio::spawn(close_workloads_of_deleted_clusters(cluster_notices, ctx.clone())),
        ],
    }
}

/// Health checks, and those selecting a changed Machine or belonging to a changed Cluster.
fn health_check_triggers(
    health_checks: &mut Informer<MachineHealthCheck>,
    machines: &mut Informer<Machine>,
    clusters: &mut Informer<capi::Cluster>,
    ctx: &Arc<CapiContext>,
) -> impl Stream<Item = ObjectRef<MachineHealthCheck>> + Send + 'static {
    let own = applied(health_checks);
    let store = ctx.health_checks.clone();
    let by_machine = refs(machines.subscribe(), move |n: Notice<Machine>| {
        let m = n.object();
        store
            .state()
            .iter()
            .filter(|h| crate::lifecycle::capi_health_check::selects(h, m))
            .map(|h| ObjectRef::from_obj(&**h))
            .collect::<Vec<_>>()
    });
    let store = ctx.health_checks.clone();
    let by_cluster = refs(clusters.subscribe(), move |n: Notice<capi::Cluster>| {
        let c = n.object();
        store
            .state()
            .iter()
            .filter(|h| h.namespace() == c.namespace() && h.spec.cluster_name == c.name_any())
            .map(|h| ObjectRef::from_obj(&**h))
            .collect::<Vec<_>>()
    });
    stream::select_all(vec![own.boxed(), by_machine.boxed(), by_cluster.boxed()])
}

/// Closes a deleted Cluster's workload cluster connection.
async fn close_workloads_of_deleted_clusters(
    mut notices: mpsc::UnboundedReceiver<Notice<capi::Cluster>>,
    ctx: Arc<CapiContext>,
) {
    while let Some(notice) = notices.recv().await {
        if let Notice::Deleted(cluster) = notice {
            ctx.workloads.disconnect(&cluster.namespace().unwrap_or_default(), &cluster.name_any()).await;
        }
    }
}

/// The sets a Machine concerns: its controller set, or (an orphan) every set whose selector matches it.
fn sets_of_machine(store: &Store<MachineSet>, m: &Machine) -> Vec<ObjectRef<MachineSet>> {
    owners_of(store, &m.metadata, "MachineSet", Some(capi::GROUP), |s| Some(&s.spec.selector))
}

/// The deployments a set concerns: its controller deployment, or (an orphan) every matching one.
fn deployments_of_set(store: &Store<MachineDeployment>, s: &MachineSet) -> Vec<ObjectRef<MachineDeployment>> {
    owners_of(store, &s.metadata, "MachineDeployment", Some(capi::GROUP), |d| Some(&d.spec.selector))
}

fn set_triggers(
    sets: &mut Informer<MachineSet>,
    machines: &mut Informer<Machine>,
    ctx: &Arc<CapiContext>,
) -> impl Stream<Item = ObjectRef<MachineSet>> + Send + 'static {
    let own = applied(sets);
    let store = ctx.sets.clone();
    let by_machine = refs(machines.subscribe(), move |n: Notice<Machine>| sets_of_machine(&store, n.object()));
    stream::select_all(vec![own.boxed(), by_machine.boxed()])
}

fn deployment_triggers(
    deployments: &mut Informer<MachineDeployment>,
    sets: &mut Informer<MachineSet>,
    machines: &mut Informer<Machine>,
    ctx: &Arc<CapiContext>,
) -> impl Stream<Item = ObjectRef<MachineDeployment>> + Send + 'static {
    let own = applied(deployments);
    let store = ctx.deployments.clone();
    let by_set = refs(sets.subscribe(), move |n: Notice<MachineSet>| deployments_of_set(&store, n.object()));
    let c = ctx.clone();
    let by_machine = refs(machines.subscribe(), move |n: Notice<Machine>| {
        let (ns, set) = controller_named(&n.object().metadata, "MachineSet", Some(capi::GROUP))?;
        let set = c.sets.get(&ObjectRef::new(&set).within(&ns))?;
        controller_named(&set.metadata, "MachineDeployment", Some(capi::GROUP))
            .map(|(ns, name)| ObjectRef::new(&name).within(&ns))
    });
    stream::select_all(vec![own.boxed(), by_set.boxed(), by_machine.boxed()])
}

/// Cluster changes, changes of the MCMCluster a Cluster owns or names, and of its MachineDeployments and Machines
/// (the Cluster counts their replicas).
fn cluster_triggers(
    clusters: &mut Informer<capi::Cluster>,
    infra_clusters: &mut Informer<MCMCluster>,
    (deployments, sets, machines): (
        &mut Informer<MachineDeployment>,
        &mut Informer<MachineSet>,
        &mut Informer<Machine>,
    ),
    ctx: &Arc<CapiContext>,
) -> impl Stream<Item = ObjectRef<capi::Cluster>> + Send + 'static {
    let of_cluster = |ns: Option<String>, cluster: &str| ObjectRef::new(cluster).within(&ns.unwrap_or_default());
    let by_deployment = refs(deployments.subscribe(), move |n: Notice<MachineDeployment>| {
        let d = n.object();
        (!d.spec.cluster_name.is_empty()).then(|| of_cluster(d.namespace(), &d.spec.cluster_name))
    });
    let by_set = refs(sets.subscribe(), move |n: Notice<MachineSet>| {
        let s = n.object();
        (!s.spec.cluster_name.is_empty()).then(|| of_cluster(s.namespace(), &s.spec.cluster_name))
    });
    let by_machine = refs(machines.subscribe(), move |n: Notice<Machine>| {
        let m = n.object();
        (!m.spec.cluster_name.is_empty()).then(|| of_cluster(m.namespace(), &m.spec.cluster_name))
    });
    let own = applied(clusters);
    let store = ctx.clusters.clone();
    let by_infra = refs(infra_clusters.subscribe(), move |n: Notice<MCMCluster>| {
        let i = n.object();
        let ns = i.namespace().unwrap_or_default();
        let name = i.name_any();
        store
            .state()
            .iter()
            .filter(|c| {
                c.namespace().as_deref() == Some(ns.as_str())
                    && crate::lifecycle::capi_cluster::infra_name(c) == Some(name.as_str())
            })
            .map(|c| ObjectRef::from_obj(&**c))
            .collect::<Vec<_>>()
    });
    stream::select_all(vec![own.boxed(), by_infra.boxed(), by_deployment.boxed(), by_set.boxed(), by_machine.boxed()])
}

fn machine_triggers(
    machines: &mut Informer<Machine>,
    infra: &mut Informer<MCMMachine>,
    deployments: &mut Informer<MachineDeployment>,
    (target_nodes, workload_nodes): (
        Option<mpsc::UnboundedReceiver<Notice<Node>>>,
        mpsc::UnboundedReceiver<ObjectRef<Machine>>,
    ),
    ctx: &Arc<CapiContext>,
) -> impl Stream<Item = ObjectRef<Machine>> + Send + 'static {
    let own = applied(machines);
    // An MCMMachine belongs to the Machine owning it, or (before the owner reference) to the one of its name.
    let by_infra = refs(infra.subscribe(), |n: Notice<MCMMachine>| {
        let i = n.object();
        let ns = i.namespace().unwrap_or_default();
        let owner = i
            .owner_references()
            .iter()
            .find(|r| r.kind == "Machine" && r.api_version.starts_with(capi::GROUP))
            .map(|r| r.name.clone())
            .unwrap_or_else(|| i.name_any());
        Some(ObjectRef::new(&owner).within(&ns))
    });
    // A new deployment generation (a template change or a rollback) can change every machine's `UpToDate`;
    // its status writes cannot, so only generation changes fan out to the machines.
    let c = ctx.clone();
    let mut generations: HashMap<ObjectRef<MachineDeployment>, Option<i64>> = HashMap::new();
    let by_deployment = refs(deployments.subscribe(), move |n: Notice<MachineDeployment>| {
        let d = &**n.object();
        let key = ObjectRef::from_obj(d);
        let changed = match &n {
            Notice::Applied(_) => generations.insert(key, d.metadata.generation) != Some(d.metadata.generation),
            Notice::Deleted(_) => {
                generations.remove(&key);
                false
            }
        };
        if !changed {
            return Vec::new();
        }
        let uid = d.uid();
        let sets: Vec<String> = c
            .sets
            .state()
            .iter()
            .filter(|s| {
                s.namespace() == d.namespace()
                    && controller_of(&s.metadata).is_some_and(|r| Some(&r.uid) == uid.as_ref())
            })
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        c.machines
            .state()
            .iter()
            .filter(|m| {
                controller_named(&m.metadata, "MachineSet", Some(capi::GROUP))
                    .is_some_and(|(ns, set)| Some(&ns) == d.namespace().as_ref() && sets.contains(&set))
            })
            .map(|m| ObjectRef::from_obj(&**m))
            .collect()
    });
    // Node changes: of the one target cluster, or (already mapped) of each Cluster's own.
    let by_workload = UnboundedReceiverStream::new(workload_nodes);
    let mut all = vec![own.boxed(), by_infra.boxed(), by_deployment.boxed(), by_workload.boxed()];
    if let Some(nodes) = target_nodes {
        let store = ctx.machines.clone();
        all.push(refs(nodes, move |n: Notice<Node>| machines_of_node(&store, n.object(), None)).boxed());
    }
    stream::select_all(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_core_is_recognised_by_its_finalizers() {
        let meta = |f: &str| ObjectMeta { finalizers: Some(vec![f.to_string()]), ..Default::default() };
        assert!(held_by_upstream_core(&meta("cluster.x-k8s.io/machineset")));
        assert!(held_by_upstream_core(&meta("machine.cluster.x-k8s.io")));
        assert!(held_by_upstream_core(&meta("cluster.cluster.x-k8s.io")));
        assert!(!held_by_upstream_core(&meta(crate::lifecycle::capi_machine::MACHINE_FINALIZER)));
        assert!(!held_by_upstream_core(&ObjectMeta::default()));
    }
}
