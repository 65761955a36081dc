//! MCM's machine-controller-manager side: the MachineSet controller, the MachineDeployment controller and the
//! overshoot freeze (`docs/machine-lifecycle.md`). The decisions are `lifecycle`'s
//! (`machine_set`, `machine_deployment`, `deletion_order`, `freeze`, `claim`); this module observes, calls them and
//! applies their plans.
//!
//! Design:
//! - Two more shared watches (MachineSets, MachineDeployments) next to the machine side's; Machine and Node notices
//!   come from the machine side's informers, so every kind is still watched once.
//! - Two kube-runtime `Controller`s: a set is reconciled on its own changes and on its machines' (an orphan's
//!   change reaches every set whose selector matches it); a deployment on its own changes, its sets', and the
//!   changes of its machines and their Nodes that its decisions read.
//! - Read-your-writes (`controllers::replicas::settle`): a reconcile waits until the shared stores show what it wrote before it ends,
//!   so the next reconcile of the object (kube-runtime never runs two at once) never acts on a stale view — the
//!   expectations MCM records but never checks. Writes not shown within the wait are carried: the object's next
//!   reconciles wait for them (up to upstream's five-minute expectations timeout) instead of counting without them.
//! - The overshoot sweep ([`overshoot`]) is a task: every `--machine-safety-overshooting-period` and whenever a
//!   Machine appears.

mod flavour;
mod machine_deployment;
mod machine_set;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::controller::Config as ControllerConfig;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::watch;

use super::ControllerOptions;
use super::context::{Context, Reports};
use super::events::Recorder;
use super::informer::{Changed, Informer, Notice, wait_all};
use super::replicas::settle::Unsettled;
use super::tasks::{controller, on_stop};
use super::triggers::{applied, controller_named, hash_of, owners_of, refs, scoped};
use crate::api::mcm::names::{
    CANDIDATE_FOR_UPDATE, IN_PLACE_CONDITION, NODE_LABEL, SELECTED_FOR_UPDATE, UPDATE_RESULT,
};
use crate::api::mcm::names::{MARKED_FOR_DELETION_TIME, PRESERVE, PRIORITY_ANNOTATION};
use crate::api::mcm::names::{PREFER_NO_SCHEDULE, SCALE_DOWN_DISABLED, SCALE_DOWN_DISABLED_BY_MCM};
use crate::api::mcm::{Machine, MachineDeployment, MachineSet};
use crate::lifecycle::claim::controller_of;
use crate::lifecycle::freeze::FreezeOptions;
use crate::lifecycle::machine_deployment::plan::DeploymentOptions;

/// How the MachineSet and MachineDeployment controllers and the overshoot freeze run (MCM's
/// machine-controller-manager flags).
#[derive(Clone, Debug, PartialEq)]
pub struct SetOptions {
    /// `--safety-up` / `--safety-down` (2 / 1).
    pub freeze: FreezeOptions,
    /// `--machine-safety-overshooting-period` (1 m): how often the overshoot sweep runs besides Machine additions.
    pub overshooting_period: Duration,
    /// `--autoscaler-scaledown-annotation-during-rollout` (true).
    pub deployment: DeploymentOptions,
}

impl Default for SetOptions {
    fn default() -> Self {
        SetOptions {
            freeze: FreezeOptions::default(),
            overshooting_period: Duration::from_secs(60),
            deployment: DeploymentOptions::default(),
        }
    }
}

/// What the set and deployment reconciles share, on top of the machine side's [`Context`].
pub(crate) struct SetsContext {
    /// The machine side's context: clients, the Machine and Node stores, the configuration, retries.
    pub base: Arc<Context>,
    /// MachineSets.
    pub sets: Store<MachineSet>,
    /// MachineDeployments.
    pub deployments: Store<MachineDeployment>,
    /// Readiness of the two stores above.
    pub ready: Vec<watch::Receiver<bool>>,
    /// Events of the MachineSet controller (`machineset-controller`).
    pub set_events: Recorder,
    /// Events of the MachineDeployment controller (`machinedeployment-controller`).
    pub deployment_events: Recorder,
    /// Events of the overshoot freeze (`machine-controller-manager`).
    pub safety_events: Recorder,
    /// Options.
    pub options: SetOptions,
    /// Invalid MachineSets reported.
    pub reported: Reports,
    /// Writes of earlier passes the stores have not shown yet.
    pub unsettled: Unsettled,
}

impl SetsContext {
    /// Waits until every store has its first list.
    async fn ready(&self) {
        self.base.ready().await;
        wait_all(self.ready.clone()).await;
    }

    /// The set `namespace/name`.
    fn set(&self, namespace: &str, name: &str) -> Option<Arc<MachineSet>> {
        self.sets.get(&ObjectRef::new(name).within(namespace))
    }
}

/// What [`start`] started.
pub(crate) struct Started {
    /// The MachineSet controller, the MachineDeployment controller and the overshoot sweep (stopped by the stop
    /// signal, with the grace period), not yet spawned: the caller spawns those it runs.
    pub controllers: [BoxFuture<'static, ()>; 3],
    /// The two watches, not yet spawned.
    pub informers: Vec<BoxFuture<'static, ()>>,
}

/// Starts the MachineSet and MachineDeployment controllers and the overshoot sweep. Subscribes to the machine
/// side's Machine and Node informers, so call it before they run.
pub(crate) fn start(
    base: Arc<Context>,
    machines: &mut Informer<Machine>,
    mut nodes: Option<&mut Informer<Node>>,
    options: &ControllerOptions,
    stop: watch::Receiver<bool>,
) -> Started {
    let ns = options.namespace.as_deref();
    let mut sets: Informer<MachineSet> = Informer::new(scoped(&base.control, ns), watcher::Config::default());
    let mut deployments: Informer<MachineDeployment> =
        Informer::new(scoped(&base.control, ns), watcher::Config::default());
    let recorder = |name: &str| Recorder::new(base.control.clone(), name);
    let ctx = Arc::new(SetsContext {
        sets: sets.store(),
        deployments: deployments.store(),
        ready: vec![sets.ready(), deployments.ready()],
        set_events: recorder("machineset-controller"),
        deployment_events: recorder("machinedeployment-controller"),
        safety_events: recorder("machine-controller-manager"),
        options: options.sets.clone(),
        reported: Reports::default(),
        unsettled: Unsettled::default(),
        base,
    });

    let shutdown = || on_stop(&stop);
    let config = ControllerConfig::default().concurrency(options.concurrent_syncs);

    let set_triggers = set_triggers(&mut sets, machines, nodes.as_deref_mut(), &ctx);
    let set_controller = controller(
        ctx.sets.clone(),
        set_triggers,
        config.clone(),
        shutdown(),
        crate::metrics::timed(&options.metrics, "machineset", machine_set::reconcile),
        machine_set::error_policy,
        ctx.clone(),
    );

    let deployment_triggers = deployment_triggers(&mut deployments, &mut sets, machines, nodes, &ctx);
    let deployment_controller = controller(
        ctx.deployments.clone(),
        deployment_triggers,
        config,
        shutdown(),
        crate::metrics::timed(&options.metrics, "machinedeployment", machine_deployment::reconcile),
        machine_deployment::error_policy,
        ctx.clone(),
    );

    let sweep = crate::controllers::replicas::overshoot::run(ctx.clone(), machines.subscribe(), shutdown());

    Started {
        controllers: [set_controller.boxed(), deployment_controller.boxed(), sweep.boxed()],
        informers: vec![sets.run().boxed(), deployments.run().boxed()],
    }
}

/// The sets a machine concerns: its controller set, or (an orphan) every set whose selector matches it.
fn sets_of_machine(store: &Store<MachineSet>, m: &Machine) -> Vec<ObjectRef<MachineSet>> {
    owners_of(store, &m.metadata, "MachineSet", None, |s| s.spec.selector.as_ref())
}

/// The deployments a set concerns: its controller deployment, or (an orphan) every matching one.
fn deployments_of_set(store: &Store<MachineDeployment>, s: &MachineSet) -> Vec<ObjectRef<MachineDeployment>> {
    owners_of(store, &s.metadata, "MachineDeployment", None, |d| d.spec.selector.as_ref())
}

/// The deployment of a machine: its set's controller deployment.
fn deployment_of_machine(ctx: &SetsContext, m: &Machine) -> Option<ObjectRef<MachineDeployment>> {
    let (ns, set) = controller_named(&m.metadata, "MachineSet", None)?;
    let set = ctx.set(&ns, &set)?;
    controller_named(&set.metadata, "MachineDeployment", None).map(|(ns, name)| ObjectRef::new(&name).within(&ns))
}

/// The machines a Node belongs to (by their `node` label).
fn machines_on_node(store: &Store<Machine>, node: &Node) -> Vec<Arc<Machine>> {
    let name = node.name_any();
    store.state().into_iter().filter(|m| m.labels().get(NODE_LABEL) == Some(&name)).collect()
}

/// What of a Machine the MachineSet controller reacts to: labels, annotations, owners, deletion, spec, phase and
/// last operation (not the timestamps the machine controller refreshes).
fn machine_key_for_set(m: &Machine) -> u64 {
    let status = m.status.as_ref();
    let current = status.and_then(|s| s.current_status.as_ref());
    let op = status.and_then(|s| s.last_operation.as_ref());
    hash_of((
        serde_json::to_string(&m.metadata.labels).unwrap_or_default(),
        serde_json::to_string(&m.metadata.annotations).unwrap_or_default(),
        serde_json::to_string(&m.metadata.owner_references).unwrap_or_default(),
        m.metadata.deletion_timestamp.is_some(),
        serde_json::to_string(&m.spec).unwrap_or_default(),
        current.map(|c| (format!("{:?}", c.phase), c.preserve_expiry_time.as_ref().map(|t| t.0.to_string()))),
        op.map(|o| (o.description.clone(), format!("{:?}", o.state), format!("{:?}", o.type_))),
    ))
}

/// What of a Machine the MachineDeployment controller reacts to: its set, its Node, its phase, deletion,
/// preservation and the autoscaler's marks.
fn machine_key_for_deployment(m: &Machine) -> u64 {
    let annotations = m.annotations();
    let current = m.status.as_ref().and_then(|s| s.current_status.as_ref());
    hash_of((
        controller_of(&m.metadata).map(|r| r.uid.clone()),
        m.labels().get(NODE_LABEL).cloned(),
        current.map(|c| (format!("{:?}", c.phase), c.preserve_expiry_time.is_some())),
        m.metadata.deletion_timestamp.is_some(),
        annotations.get(PRIORITY_ANNOTATION).cloned(),
        annotations.get(MARKED_FOR_DELETION_TIME).cloned(),
        m.labels().get(UPDATE_RESULT).cloned(),
        in_place_reason(m.status.as_ref().and_then(|s| s.conditions.as_deref())),
    ))
}

/// The reason of an `InPlaceUpdate` condition among `conditions`.
fn in_place_reason(conditions: Option<&[k8s_openapi::api::core::v1::NodeCondition]>) -> Option<String> {
    conditions?.iter().find(|c| c.type_ == IN_PLACE_CONDITION)?.reason.clone()
}

/// What of a Node the MachineDeployment controller reacts to: the rollout taint, the autoscaler annotations and
/// the in-place update's labels and stage.
fn node_key_for_deployment(node: &Node) -> u64 {
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == PREFER_NO_SCHEDULE));
    let annotations = node.annotations();
    let labels = node.labels();
    hash_of((
        tainted,
        annotations.get(SCALE_DOWN_DISABLED).cloned(),
        annotations.get(SCALE_DOWN_DISABLED_BY_MCM).cloned(),
        [CANDIDATE_FOR_UPDATE, SELECTED_FOR_UPDATE, UPDATE_RESULT].map(|k| labels.get(k).cloned()),
        in_place_reason(node.status.as_ref().and_then(|s| s.conditions.as_deref())),
        node.spec.as_ref().and_then(|s| s.unschedulable),
    ))
}

/// The MachineSet controller's triggers: its sets, their machines (orphans reach every matching set), and Nodes
/// whose preserve annotation changed.
fn set_triggers(
    sets: &mut Informer<MachineSet>,
    machines: &mut Informer<Machine>,
    nodes: Option<&mut Informer<Node>>,
    ctx: &Arc<SetsContext>,
) -> impl Stream<Item = ObjectRef<MachineSet>> + Send + 'static {
    let own = applied(sets);
    let store = ctx.sets.clone();
    let mut changed = Changed::new(machine_key_for_set);
    let by_machine =
        refs(
            machines.subscribe(),
            move |n: Notice<Machine>| {
                if changed.pass(&n) { sets_of_machine(&store, n.object()) } else { Vec::new() }
            },
        );
    let mut all = vec![own.boxed(), by_machine.boxed()];
    if let Some(nodes) = nodes {
        let (machines, sets) = (ctx.base.machines.clone(), ctx.sets.clone());
        let preserve = |node: &Node| node.annotations().get(PRESERVE).cloned();
        let mut changed = Changed::new(preserve);
        all.push(
            refs(nodes.subscribe(), move |n: Notice<Node>| {
                if !changed.pass(&n) {
                    return Vec::new();
                }
                machines_on_node(&machines, n.object()).iter().flat_map(|m| sets_of_machine(&sets, m)).collect()
            })
            .boxed(),
        );
    }
    stream::select_all(all)
}

/// The MachineDeployment controller's triggers: its deployments, their sets, the machines of those sets and the
/// machines' Nodes.
fn deployment_triggers(
    deployments: &mut Informer<MachineDeployment>,
    sets: &mut Informer<MachineSet>,
    machines: &mut Informer<Machine>,
    nodes: Option<&mut Informer<Node>>,
    ctx: &Arc<SetsContext>,
) -> impl Stream<Item = ObjectRef<MachineDeployment>> + Send + 'static {
    let own = applied(deployments);
    let store = ctx.deployments.clone();
    let by_set = refs(sets.subscribe(), move |n: Notice<MachineSet>| deployments_of_set(&store, n.object()));
    let c = ctx.clone();
    let mut changed = Changed::new(machine_key_for_deployment);
    let by_machine =
        refs(
            machines.subscribe(),
            move |n: Notice<Machine>| {
                if changed.pass(&n) { deployment_of_machine(&c, n.object()) } else { None }
            },
        );
    let mut all = vec![own.boxed(), by_set.boxed(), by_machine.boxed()];
    if let Some(nodes) = nodes {
        let c = ctx.clone();
        let mut changed = Changed::new(node_key_for_deployment);
        all.push(
            refs(nodes.subscribe(), move |n: Notice<Node>| {
                if !changed.pass(&n) {
                    return Vec::new();
                }
                let mut found: Vec<ObjectRef<MachineDeployment>> = machines_on_node(&c.base.machines, n.object())
                    .iter()
                    .filter_map(|m| deployment_of_machine(&c, m))
                    .collect();
                found.dedup();
                found
            })
            .boxed(),
        );
    }
    stream::select_all(all)
}
