//! The safety controller (MCM's `machine_safety.go`, `docs/machine-lifecycle.md` (a), (b)): two tasks next to the
//! machine controllers, over the same stores.
//!
//! - **Orphan VMs**: at start, every `--machine-safety-orphan-vms-period`, and (after a short cooldown) when a
//!   Machine is deleted or newly reports `OutOfRange`, each class's VMs are listed and those no Machine claims are
//!   deleted, after a fresh read of the Machines (and MCMMachines, whose VMs may share a class) from the API
//!   server and a second listing agree
//!   ([`crate::lifecycle::safety`]). Never while frozen, while a probe is failing, or before the stores are
//!   synced. The same pass marks Nodes no Machine manages (MCM's `AnnotateNodesUnmanagedByMCM`).
//! - **API-server freeze** (with a target cluster only): the control and target API servers are probed with a
//!   GET of an object that does not exist (NotFound is an answer); failing for the status-check timeout freezes
//!   machine reconciles (deletions go on). When both answer again, `Unknown` machines get a fresh health timeout,
//!   every machine is reconciled again shortly after, and the freeze ends. Gauge `mcm_machine_controller_frozen`.

use std::collections::{BTreeSet, HashSet};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

use futures::{FutureExt, Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::context::{Context, key_of, lock};
use super::driver_request::{class_info, class_secrets};
use super::error::Error;
use super::informer::{Changed, Notice};
use super::tasks::on_stop;
use super::{ProbeClients, writes};
use crate::api::infra::MCMMachine;
use crate::api::mcm::names::NOT_MANAGED_VALUE;
use crate::api::mcm::names::{MACHINE_NAME_LABEL, NODE_FINALIZER, NODE_LABEL, NOT_MANAGED_ANNOTATION};
use crate::api::mcm::{Machine, MachineClass, MachinePhase};
use crate::convert::machine::to_hub;
use crate::lifecycle::safety::{self, Claimant, Claims, FreezeChange, FreezeState, Orphan, SafetyConfig};
use crate::lifecycle::status::{self, EventSpec};
use crate::providers::{Code, Driver, DriverError, ListMachinesRequest, MachineInfo, MachineRequest};

/// The gauge's name (MCM's): 1 while machine reconciles are frozen.
pub use crate::metrics::FROZEN_METRIC;

/// The object the probes GET; it need not exist (NotFound means the API server answered).
const PROBE_OBJECT: &str = "mcm-safety-apiserver-probe";

/// The orphan collection's wake-ups from Machine notices: a deletion, or a description newly containing
/// `OutOfRange` (a first sight with it counts, so a restart does not miss one). Each item names the reason.
pub(crate) fn triggers(notices: mpsc::UnboundedReceiver<Notice<Machine>>) -> impl Stream<Item = String> + Send + Unpin {
    let mut changed = Changed::new(safety::reports_out_of_range);
    UnboundedReceiverStream::new(notices).filter_map(move |notice| {
        let passed = changed.pass(&notice);
        let reason = match &notice {
            Notice::Deleted(m) => Some(format!("machine {} was deleted", key_of(&**m))),
            Notice::Applied(m) if passed && safety::reports_out_of_range(m) => {
                tracing::warn!(machine = %key_of(&**m), "several VMs back this machine; looking for orphan VMs");
                Some(format!("machine {} reports OutOfRange", key_of(&**m)))
            }
            Notice::Applied(_) => None,
        };
        futures::future::ready(reason)
    })
}

/// The safety tasks' shared parts.
pub(crate) struct Safety {
    /// What every controller shares (stores, clients, drivers, the freeze flag).
    pub ctx: Arc<Context>,
    /// Periods and timeouts.
    pub config: SafetyConfig,
    /// Machines as the controllers watch them (all namespaces or one), for fresh reads.
    pub machines: Api<Machine>,
    /// MCMMachines in the same scope, for fresh reads: the VMs of CAPI-flavour machines are claimed too.
    pub infra_machines: Api<MCMMachine>,
    /// The namespace of the control cluster's probe.
    pub probe_namespace: String,
    /// `None` without a target cluster: no freeze.
    pub probes: Option<ProbeClients>,
    /// Into the machine controller's queue.
    pub requeue: mpsc::UnboundedSender<ObjectRef<Machine>>,
    /// Turns `true` when the controllers stop.
    pub stop: watch::Receiver<bool>,
}

/// The orphan collections' schedule, shared by the MCM-flavour and the infrastructure collectors: `collect` runs
/// once `ready` resolves (reason `start`), then every [`SafetyConfig::orphan_period`] (`period`), and on a trigger
/// (its reason) no sooner than [`SafetyConfig::orphan_trigger_cooldown`] after the previous collection. Triggers
/// arriving before a collection starts are folded into it. Ends when `stop` turns `true`.
///
/// `triggers` is read all the time, also while a collection or a cooldown runs: its source is an informer's
/// notice queue, and every notice left in it holds a version of an object (a 10,000-machine rollout's worth of
/// Machines), where only "something happened" needs keeping.
pub(crate) async fn schedule_orphan_collections<F, Fut>(
    ready: impl Future<Output = ()>,
    stop: &watch::Receiver<bool>,
    config: &SafetyConfig,
    mut triggers: impl Stream<Item = String> + Unpin,
    mut collect: F,
) where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = ()>,
{
    // The first reason since the last collection began, and a wake-up for each trigger.
    let pending = Mutex::new(None::<String>);
    let woken = Notify::new();
    let read_triggers = async {
        while let Some(why) = triggers.next().await {
            lock(&pending).get_or_insert(why);
            woken.notify_one();
        }
        // No more triggers (the informer stopped): the period and the stop still hold.
        std::future::pending::<()>().await;
    };
    let schedule = async {
        tokio::select! {
            () = ready => {}
            () = on_stop(stop) => return,
        }
        let mut reason = "start".to_string();
        loop {
            lock(&pending).take();
            collect(reason).await;
            let last = Instant::now();
            let triggered = async {
                // A wake-up whose trigger the last collection already covered is not one.
                while lock(&pending).is_none() {
                    woken.notified().await;
                }
            };
            tokio::select! {
                () = on_stop(stop) => return,
                () = tokio::time::sleep(config.orphan_period()) => reason = "period".to_string(),
                () = triggered => {
                    tokio::select! {
                        () = on_stop(stop) => return,
                        () = tokio::time::sleep_until(last + config.orphan_trigger_cooldown) => {}
                    }
                    reason = lock(&pending).take().unwrap_or_else(|| "trigger".to_string());
                }
            }
        }
    };
    tokio::select! {
        () = schedule => {}
        () = read_triggers => {}
    }
}

impl Safety {
    /// Whether orphans may be collected now: not frozen, the last probe fine, every store listed.
    fn may_collect(&self) -> bool {
        self.ctx.freeze.calm() && self.ctx.ready.iter().all(|r| *r.borrow())
    }

    /// The orphan task: a collection once the stores are synced, then every period and on triggers.
    pub(crate) async fn run_orphans(self: Arc<Self>, triggers: impl Stream<Item = String> + Send + Unpin) {
        let collect = |reason: String| {
            let this = self.clone();
            async move { this.collect(&reason).await }
        };
        schedule_orphan_collections(self.ctx.ready(), &self.stop, &self.config, triggers, collect).await;
    }

    /// One collection over every class, then the Node marks.
    async fn collect(&self, reason: &str) {
        if !self.may_collect() {
            tracing::info!(
                reason,
                "skipping the orphan VM collection: frozen, an API server unreachable, or stores not synced"
            );
            return;
        }
        tracing::debug!(reason, "looking for orphan VMs");
        let mut classes = self.ctx.classes.state();
        classes.sort_by_key(|c| key_of(&**c));
        let mut handled = BTreeSet::new();
        for class in classes {
            if self.collect_class(&class, &mut handled).await.is_break() {
                return;
            }
        }
        self.mark_nodes().await;
    }

    /// The cache's claims, with the machines inside their create flow now.
    fn cached_claims(&self, extra: Vec<Machine>) -> Claims {
        let cached = self.ctx.machines.state();
        let creating = self.ctx.creating.keys().into_iter().map(|k| match k.split_once('/') {
            Some((_, name)) => name.to_string(),
            None => k,
        });
        Claims::new(cached.iter().map(|m| Claimant::of(m)).chain(extra.iter().map(Claimant::of)), creating)
    }

    /// The orphans of one class; `Break` stops the whole collection (frozen meanwhile, or the API server did not
    /// answer the fresh read). `handled` holds the VMs already decided this collection (classes of one cluster
    /// list the same VMs).
    async fn collect_class(&self, class: &MachineClass, handled: &mut BTreeSet<String>) -> ControlFlow<()> {
        let key = key_of(class);
        if let Some(problem) = safety::class_tags_problem(&class.spec.provider_spec) {
            tracing::warn!(class = %key, problem = %problem, "not looking for orphan VMs of this class");
            return ControlFlow::Continue(());
        }
        let driver = match self.ctx.drivers.get(class.spec.provider.as_deref().unwrap_or_default()) {
            Ok(driver) => driver,
            Err(e) => {
                tracing::debug!(class = %key, error = %e, "no driver for this class; its VMs are not looked at");
                return ControlFlow::Continue(());
            }
        };
        let request = ListMachinesRequest {
            class: class_info(class),
            secret: class_secrets(class, &|ns, name| self.ctx.secret(ns, name)),
        };
        let Some(first) = self.list(class, &*driver, &request).await else { return ControlFlow::Continue(()) };
        let suspects: Vec<Orphan> = safety::suspects(&first, &self.cached_claims(Vec::new()))
            .into_iter()
            .filter(|o| !handled.contains(&o.provider_id))
            .collect();
        if suspects.is_empty() {
            return ControlFlow::Continue(());
        }
        tracing::info!(class = %key, suspects = suspects.len(), "VMs no cached Machine claims; confirming");
        if !self.may_collect() {
            return ControlFlow::Break(());
        }
        // A quorum read (no resourceVersion): what the API server has now, not what a cache has.
        let fresh = match self.machines.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(class = %key, error = %e, "could not read the Machines from the API server; no VM is deleted");
                return ControlFlow::Break(());
            }
        };
        // MCMMachines (the CAPI flavour) may use the same class: their VMs are claimed alike.
        let infra = match self.infra_machines.list(&ListParams::default()).await {
            Ok(list) => list.items,
            // The infrastructure CRDs are not installed: no MCMMachine claims anything.
            Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
            Err(e) => {
                tracing::warn!(class = %key, error = %e, "could not read the MCMMachines from the API server; no VM is deleted");
                return ControlFlow::Break(());
            }
        };
        let fresh = fresh.into_iter().chain(infra.iter().map(|m| to_hub(m, None))).collect();
        let Some(relisted) = self.list(class, &*driver, &request).await else { return ControlFlow::Continue(()) };
        let orphans = safety::confirm(&suspects, &relisted, &self.cached_claims(fresh));
        handled.extend(suspects.into_iter().map(|o| o.provider_id));
        for orphan in orphans {
            if !self.may_collect() {
                return ControlFlow::Break(());
            }
            self.delete_orphan(class, &*driver, &request, &orphan).await;
        }
        ControlFlow::Continue(())
    }

    /// The class's VMs, or `None` after a failure (logged, and recorded on the class).
    async fn list(
        &self,
        class: &MachineClass,
        driver: &dyn Driver,
        request: &ListMachinesRequest,
    ) -> Option<std::collections::BTreeMap<String, String>> {
        match driver.list_machines(request).await {
            Ok(listing) => Some(listing),
            Err(e) => {
                tracing::warn!(class = %key_of(class), error = %e, "listing the class's VMs failed; retried at the next collection");
                let note = format!("Listing the VMs of the class failed: {e}");
                self.ctx.publish(class, EventSpec::warning("FailedListMachines", note)).await;
                None
            }
        }
    }

    /// Deletes an orphan through the driver with only its name and providerID (there is no Machine).
    async fn delete_orphan(
        &self,
        class: &MachineClass,
        driver: &dyn Driver,
        list: &ListMachinesRequest,
        orphan: &Orphan,
    ) {
        let request = MachineRequest {
            machine: MachineInfo {
                name: orphan.machine_name.clone(),
                namespace: class.namespace().unwrap_or_default(),
                provider_id: Some(orphan.provider_id.clone()),
                ..Default::default()
            },
            class: list.class.clone(),
            secret: list.secret.clone(),
            last_known_state: None,
        };
        let (id, name) = (&orphan.provider_id, &orphan.machine_name);
        match driver.delete_machine(&request).await {
            Ok(_) => {
                tracing::info!(class = %key_of(class), provider_id = %id, machine = %name, "deleted an orphan VM");
                let note = format!("Deleted VM {id} (created for machine {name}): no Machine claims it");
                self.ctx.publish(class, EventSpec::normal("DeletedOrphanVM", note)).await;
            }
            Err(DriverError { code: Code::NotFound, .. }) => {}
            Err(e) => {
                tracing::warn!(class = %key_of(class), provider_id = %id, machine = %name, error = %e, "deleting an orphan VM failed");
                let note =
                    format!("Deleting orphan VM {id} (machine {name}) failed: {e}; retried at the next collection");
                self.ctx.publish(class, EventSpec::warning("FailedDeleteOrphanVM", note)).await;
            }
        }
    }

    /// MCM's `AnnotateNodesUnmanagedByMCM` over the Node store.
    async fn mark_nodes(&self) {
        let (Some(target), Some(nodes)) = (&self.ctx.target, &self.ctx.nodes) else { return };
        let machines = self.ctx.machines.state();
        let by_label: HashSet<&str> =
            machines.iter().filter_map(|m| m.labels().get(NODE_LABEL).map(String::as_str)).collect();
        let names: HashSet<String> = machines.iter().map(|m| m.name_any()).collect();
        let api: Api<Node> = Api::all(target.clone());
        let now = Timestamp::now();
        for node in nodes.state() {
            let name = node.name_any();
            let has_machine = by_label.contains(name.as_str())
                || node.labels().get(MACHINE_NAME_LABEL).is_some_and(|m| names.contains(m));
            let marks = safety::unmanaged_node(&node, has_machine, now, self.ctx.config.creation_timeout);
            if marks.is_empty() {
                continue;
            }
            if let Some(add) = marks.annotate {
                let value = add.then_some(NOT_MANAGED_VALUE);
                let patch = json!({"metadata": {"annotations": {NOT_MANAGED_ANNOTATION: value}}});
                match writes::merge(&api, &*node, &patch, "annotate").await {
                    Ok(_) if add => tracing::info!(node = %name, "no Machine manages this node; annotated it"),
                    Ok(_) => tracing::info!(node = %name, "a Machine manages this node again; removed the annotation"),
                    Err(e) => tracing::warn!(node = %name, error = %e, "could not update the not-managed annotation"),
                }
            }
            if marks.remove_finalizer
                && let Err(e) = writes::remove_finalizer(&api, &*node, NODE_FINALIZER).await
            {
                tracing::warn!(node = %name, error = %e, "could not remove MCM's finalizer from an unmanaged node");
            }
        }
    }

    /// The freeze task (nothing to do without probes, i.e. without a target cluster).
    pub(crate) async fn run_freeze(self: Arc<Self>) {
        let Some(probes) = self.probes.clone() else { return };
        let mut state = FreezeState::default();
        let mut next_probe = Instant::now();
        let mut requeue_at: Option<Instant> = None;
        loop {
            tokio::select! {
                () = on_stop(&self.stop) => return,
                () = tokio::time::sleep_until(next_probe) => {}
                () = tokio::time::sleep_until(requeue_at.unwrap_or(next_probe)), if requeue_at.is_some() => {
                    requeue_at = None;
                    self.requeue_all();
                    continue;
                }
            }
            let started = Timestamp::now();
            let result = self.probe(&probes).await;
            let step = safety::after_probe(state, result.is_ok(), started, Timestamp::now(), &self.config);
            let mut wait = step.next_probe;
            let mut next_state = step.state;
            let why = result.as_ref().err().map(String::as_str).unwrap_or_default();
            match step.change {
                Some(FreezeChange::Freeze) => {
                    self.ctx.freeze.set_frozen(true);
                    tracing::warn!(
                        error = %why,
                        timeout = ?self.config.apiserver_statuscheck_timeout,
                        "an API server has been unreachable for the status-check timeout: freezing machine reconciles (deletions go on)"
                    );
                }
                Some(FreezeChange::Unfreeze) => match self.reset_unknown().await {
                    Ok(reset) => {
                        self.ctx.freeze.set_frozen(false);
                        requeue_at = Some(Instant::now() + self.config.unfreeze_requeue_delay);
                        tracing::info!(reset, "the API servers answer again: unfreezing machine reconciles");
                    }
                    Err(e) => {
                        // Unfreezing now would let health timeouts that ran during the outage fail machines.
                        tracing::warn!(error = %e, "could not reset the health timeouts of Unknown machines; staying frozen");
                        next_state = state;
                        wait = self.config.probe_interval(true);
                    }
                },
                None if result.is_err() => {
                    tracing::warn!(error = %why, frozen = state.frozen, "API server probe failed")
                }
                None => {}
            }
            self.ctx.freeze.set_suspect(next_state.down_since.is_some());
            state = next_state;
            next_probe = Instant::now() + wait;
        }
    }

    /// GETs an absent Machine in the control cluster and an absent Node in the target cluster, at once.
    async fn probe(&self, probes: &ProbeClients) -> Result<(), String> {
        let deadline = self.config.probe_deadline();
        let control: Api<Machine> = Api::namespaced(probes.control.clone(), &self.probe_namespace);
        let target: Api<Node> = Api::all(probes.target.clone());
        let answer = |cluster: &'static str, result: Result<Result<(), kube::Error>, tokio::time::error::Elapsed>| {
            match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(format!("{cluster} cluster: {e}")),
                Err(_) => Err(format!("{cluster} cluster: no answer within {deadline:?}")),
            }
        };
        let (c, t) = tokio::join!(
            tokio::time::timeout(deadline, control.get_opt(PROBE_OBJECT).map(|r| r.map(|_| ()))),
            tokio::time::timeout(deadline, target.get_opt(PROBE_OBJECT).map(|r| r.map(|_| ()))),
        );
        answer("control", c).and(answer("target", t))
    }

    /// Gives every `Unknown` machine (not being deleted) a fresh health timeout: its clock ran while the API
    /// servers could not tell whether its Node was healthy. Returns how many.
    async fn reset_unknown(&self) -> Result<usize, Error> {
        let now = Timestamp::now();
        let mut reset = 0;
        let unknown =
            self.ctx.machines.state().into_iter().filter(|m| {
                m.metadata.deletion_timestamp.is_none() && status::phase(m) == Some(&MachinePhase::Unknown)
            });
        for cached in unknown {
            let api: Api<Machine> = Api::namespaced(self.ctx.control.clone(), &cached.namespace().unwrap_or_default());
            let key = key_of(&*cached);
            // The store may lag after an outage: decide on the object as it is now.
            let Some(machine) =
                api.get_opt(&cached.name_any()).await.map_err(|e| Error::kube("get", key.clone(), e))?
            else {
                continue;
            };
            if machine.metadata.deletion_timestamp.is_some() || status::phase(&machine) != Some(&MachinePhase::Unknown)
            {
                continue;
            }
            writes::machine_status(&self.ctx, &api, &machine, safety::health_timeout_reset(now)).await?;
            tracing::info!(machine = %key, "reset the health timeout of an Unknown machine after the API-server outage");
            reset += 1;
        }
        Ok(reset)
    }

    /// Puts every machine not being deleted into the machine controller's queue.
    fn requeue_all(&self) {
        for m in self.ctx.machines.state().iter().filter(|m| m.metadata.deletion_timestamp.is_none()) {
            let _ = self.requeue.send(ObjectRef::from_obj(&**m));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::api::mcm::{LastOperation, MachineStatus};

    use super::*;

    fn machine(name: &str, description: &str) -> Arc<Machine> {
        let mut m = Machine::new(name, Default::default());
        m.metadata.namespace = Some("ns".into());
        m.metadata.uid = Some(format!("uid-{name}"));
        m.status = Some(MachineStatus {
            last_operation: Some(LastOperation { description: Some(description.into()), ..Default::default() }),
            ..Default::default()
        });
        Arc::new(m)
    }

    #[tokio::test]
    async fn deletions_and_new_out_of_range_trigger_collections() {
        let out_of_range =
            "Cloud provider message - machine codes error: code = [OutOfRange] message = [2 VMs claim machine \"a\"]";
        let (tx, rx) = mpsc::unbounded_channel();
        let notices = [
            ("plain", Notice::Applied(machine("a", "Creating machine on cloud provider")), None),
            ("newly OutOfRange", Notice::Applied(machine("a", out_of_range)), Some("machine ns/a reports OutOfRange")),
            ("still OutOfRange", Notice::Applied(machine("a", out_of_range)), None),
            (
                "first sight with OutOfRange",
                Notice::Applied(machine("b", out_of_range)),
                Some("machine ns/b reports OutOfRange"),
            ),
            ("healed", Notice::Applied(machine("a", "Machine a successfully joined the cluster")), None),
            ("OutOfRange again", Notice::Applied(machine("a", out_of_range)), Some("machine ns/a reports OutOfRange")),
            ("deleted", Notice::Deleted(machine("a", "")), Some("machine ns/a was deleted")),
        ];
        let mut stream = triggers(rx);
        for (name, notice, want) in notices {
            tx.send(notice).unwrap();
            let got = stream.next().now_or_never().flatten();
            assert_eq!(got.as_deref(), want, "{name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn triggers_are_read_while_a_collection_runs() {
        let config = SafetyConfig::default();
        let (_stop_tx, stop) = watch::channel(false);
        let (trigger_tx, trigger_rx) = mpsc::unbounded_channel::<String>();
        let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let gate = Arc::new(Notify::new());
        let (ran_tx, mut ran) = mpsc::unbounded_channel();
        let counted = read.clone();
        let held = gate.clone();
        tokio::spawn(async move {
            let collect = |reason: String| {
                let (gate, ran_tx) = (held.clone(), ran_tx.clone());
                async move {
                    let start = reason == "start";
                    ran_tx.send(reason).unwrap();
                    if start {
                        gate.notified().await;
                    }
                }
            };
            let triggers = UnboundedReceiverStream::new(trigger_rx).inspect(move |_| {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
            schedule_orphan_collections(futures::future::ready(()), &stop, &config, triggers, collect).await;
        });
        assert_eq!(ran.recv().await.unwrap(), "start");
        for i in 0..1000 {
            trigger_tx.send(format!("deleted {i}")).unwrap();
        }
        // The start collection is still running, and the queue is read meanwhile (paused time: this is a bound
        // on the schedule's own steps, not a wall-clock wait).
        tokio::time::timeout(Duration::from_secs(1), async {
            while read.load(std::sync::atomic::Ordering::SeqCst) < 1000 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("every trigger read while the collection runs");
        gate.notify_one();
        assert_eq!(ran.recv().await.unwrap(), "deleted 0", "one collection for all that came during the first");
        assert_eq!(ran.recv().await.unwrap(), "period");
    }

    #[tokio::test(start_paused = true)]
    async fn orphan_collections_run_at_start_after_a_cooldown_on_triggers_and_every_period() {
        let config = SafetyConfig::default();
        let (stop_tx, stop) = watch::channel(false);
        let (trigger_tx, trigger_rx) = mpsc::unbounded_channel::<String>();
        let (ran_tx, mut ran) = mpsc::unbounded_channel();
        let (cooldown, period) = (config.orphan_trigger_cooldown, config.orphan_period());
        let t0 = Instant::now();
        let schedule = tokio::spawn(async move {
            let collect = |reason: String| {
                ran_tx.send((reason, Instant::now() - t0)).unwrap();
                futures::future::ready(())
            };
            let triggers = UnboundedReceiverStream::new(trigger_rx);
            schedule_orphan_collections(futures::future::ready(()), &stop, &config, triggers, collect).await;
        });
        assert_eq!(ran.recv().await.unwrap(), ("start".to_string(), Duration::ZERO));
        // A rollout's worth of deletions: more than tokio's cooperative budget of one poll.
        for i in 0..1000 {
            trigger_tx.send(if i == 0 { "first".into() } else { format!("then {i}") }).unwrap();
        }
        assert_eq!(ran.recv().await.unwrap(), ("first".to_string(), cooldown), "one collection for all triggers");
        assert_eq!(ran.recv().await.unwrap(), ("period".to_string(), cooldown + period));
        stop_tx.send(true).unwrap();
        schedule.await.unwrap();
        assert!(ran.recv().await.is_none(), "no collection after the stop");
    }
}
