//! Carries out a MachineSet pass for either flavour (`docs/machine-lifecycle.md` `reconcileClusterMachineSet`):
//! the finalizer, claiming machines, auto-preservation, the in-place propagation of the template, creating and
//! deleting machines as `lifecycle::machine_set::plan_replicas` decides, and the status.
//!
//! Creations go in slow-start batches, deletions in parallel; the caller waits until the stores show the writes
//! (`settle`) so that the next pass counts what this one did.
//!
//! Events: MCM records `SuccessfulCreate`/`SuccessfulDelete` per machine; kube-runtime's recorder folds repeats of
//! a reason into one event that keeps its first note, so we record one per pass naming all its machines (the
//! same reasons, more information, a request per pass instead of per machine).

use futures::future::join_all;
use jiff::Timestamp;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use super::Flavour;
use super::deployment::WrittenBy;
use crate::api::mcm;
use crate::api::mcm::names::{PRESERVE, PRESERVE_AUTO};
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::{Error, is_not_found};
use crate::controllers::writes;
use crate::lifecycle::claim::{Claim, Owner, adopt_patch, claim, release_patch};
use crate::lifecycle::machine_set::propagation::plan_propagation;
use crate::lifecycle::machine_set::status::{FailedOperation, ReplicaFailure};
use crate::lifecycle::machine_set::{
    DeletionReason, ReplicaFacts, SetMachine, Victim, plan_replicas, slow_start_batches,
};

/// One pass over `observed`; returns whether creating or deleting machines failed.
pub(crate) async fn run<F: Flavour>(f: &F, observed: &F::Set, written: &mut WrittenBy<F>) -> Result<bool, Error> {
    let now = Timestamp::now();
    let namespace = observed.namespace().unwrap_or_default();
    let sets: Api<F::Set> = Api::namespaced(f.control().clone(), &namespace);
    let api: Api<F::Machine> = Api::namespaced(f.control().clone(), &namespace);
    let deleting = observed.meta().deletion_timestamp.is_some();
    let mut set = observed.clone();

    if !deleting && !set.finalizers().iter().any(|x| x == F::SET_FINALIZER) {
        let mut finalizers = set.finalizers().to_vec();
        finalizers.push(F::SET_FINALIZER.to_string());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": set.resource_version()}});
        let updated = writes::merge(&sets, &set, &patch, "add a finalizer to").await?;
        written.set_changed(&set, &updated);
        set = updated;
    }
    let hub = F::set_to_hub(&set).into_owned();

    let mut machines = claim_machines(f, &set, &sets, &api, written).await?;
    if !deleting {
        f.before_plan(&set, &machines).await;
    }
    let plan = {
        let views: Vec<_> = machines.iter().map(|m| f.machine_to_hub(m)).collect();
        let facts = ReplicaFacts::from_machine_set(
            &hub,
            views.iter().map(|m| SetMachine::from_machine(m, f.node_preserve(m).as_deref(), now)).collect(),
        );
        plan_replicas(&facts)
    };
    if let Some(blocked) = plan.blocked {
        tracing::debug!(machine_set = %key_of(&set), ?blocked, "machines are missing but may not be created");
    }

    // Auto-preservation, then the in-place propagation of the template, where the flavour's machines hold them.
    let preserve = plan.auto_preserve.iter().map(|n| (n, Some(PRESERVE_AUTO)));
    let unpreserve = plan.stop_auto_preserve.iter().map(|n| (n, None));
    for (name, value) in preserve.chain(unpreserve) {
        if let Some(patch) = F::machine_patch(&json!({"metadata": {"annotations": {PRESERVE: value}}})) {
            update_machine::<F>(&api, &mut machines, name, &patch, "annotate", written).await?;
        }
    }
    if !deleting {
        let propagations = {
            let views: Vec<_> = machines.iter().map(|m| f.machine_to_hub(m)).collect();
            plan_propagation(&hub, views.iter().map(|m| m.as_ref()))
        };
        for p in propagations {
            let Some(patch) = F::machine_patch(&p.patch) else { continue };
            tracing::info!(machine_set = %key_of(&set), machine = %p.machine, fields = ?p.fields, "template in place");
            update_machine::<F>(&api, &mut machines, &p.machine, &patch, "propagate the template to", written).await?;
        }
    }

    let mut failure = None;
    if plan.create > 0 {
        let (created, error) = create_machines(f, &set, &hub, &api, plan.create).await;
        for m in &created {
            written.machine_created(m);
        }
        machines.extend(created);
        failure = error.map(|message| ReplicaFailure { operation: FailedOperation::Create, message });
    }
    if !plan.delete.is_empty() {
        let (gone, error) = delete_machines(f, &set, &api, &mut machines, &plan.delete, now).await;
        for m in &gone {
            written.machine_deleted(m);
        }
        if failure.is_none() {
            failure = error.map(|message| ReplicaFailure { operation: FailedOperation::Delete, message });
        }
    }

    if plan.remove_finalizer {
        tracing::info!(machine_set = %key_of(&set), "no machine left; removing the finalizer");
        writes::remove_finalizer(&sets, &set, F::SET_FINALIZER).await?;
        return Ok(false);
    }

    if let Some(updated) = f.write_set_status(&set, &hub, &machines, failure.as_ref(), now).await? {
        written.set_changed(&set, &updated);
    }
    Ok(failure.is_some())
}

/// The machines the set owns after adopting matching orphans and releasing machines that no longer match.
async fn claim_machines<F: Flavour>(
    f: &F,
    set: &F::Set,
    sets: &Api<F::Set>,
    api: &Api<F::Machine>,
    written: &mut WrittenBy<F>,
) -> Result<Vec<F::Machine>, Error> {
    let selector = F::set_selector(set);
    let uid = set.uid().unwrap_or_default();
    let owner = Owner { uid: &uid, selector: &selector, deleting: set.meta().deletion_timestamp.is_some() };
    let namespace = set.namespace();
    let mut mine = Vec::new();
    let mut orphans = Vec::new();
    for m in f.machines().state().into_iter().filter(|m| m.namespace() == namespace) {
        match claim(owner, m.meta()) {
            Claim::Owned => mine.push((*m).clone()),
            Claim::Adopt => orphans.push(m),
            Claim::Release => {
                tracing::info!(machine_set = %key_of(set), machine = %m.name_any(), "releasing a machine that no longer matches");
                match writes::merge(api, &*m, &release_patch(m.meta(), &uid), "release").await {
                    Ok(updated) => written.machine_changed(&m, &updated),
                    Err(e) => tracing::info!(machine = %key_of(&*m), error = %e, "release failed; next pass"),
                }
            }
            Claim::Ignore => {}
        }
    }
    if orphans.is_empty() {
        return Ok(mine);
    }
    // A set being deleted must not adopt: read it from the API server first (the store may be behind), as MCM.
    let fresh = sets
        .get_opt(&set.name_any())
        .await
        .map_err(|e| Error::kube("get", format!("MachineSet {}", key_of(set)), e))?;
    if fresh.is_none_or(|x| x.uid() != set.uid() || x.meta().deletion_timestamp.is_some()) {
        return Ok(mine);
    }
    let reference = F::controller_ref("MachineSet", set.meta());
    for m in orphans {
        match writes::merge(api, &*m, &adopt_patch(m.meta(), &reference), "adopt").await {
            Ok(updated) => {
                tracing::info!(machine_set = %key_of(set), machine = %m.name_any(), "adopted a machine");
                written.machine_changed(&m, &updated);
                mine.push(updated);
            }
            Err(e) => tracing::info!(machine = %key_of(&*m), error = %e, "adoption failed; next pass"),
        }
    }
    Ok(mine)
}

/// A merge patch of one machine, reflected in `machines`.
async fn update_machine<F: Flavour>(
    api: &Api<F::Machine>,
    machines: &mut [F::Machine],
    name: &str,
    patch: &Value,
    action: &'static str,
    written: &mut WrittenBy<F>,
) -> Result<(), Error> {
    let Some(m) = machines.iter_mut().find(|m| m.meta().name.as_deref() == Some(name)) else {
        return Ok(());
    };
    match writes::merge(api, m, patch, action).await {
        Ok(updated) => {
            written.machine_changed(m, &updated);
            *m = updated;
            Ok(())
        }
        // Gone meanwhile: its deletion notice brings the set back.
        Err(Error::Kube { source, .. }) if is_not_found(&source) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates `count` machines in slow-start batches (1, 2, 4, …), stopping after the first batch with a failure
/// (a quota error costs one request, not a hundred). Returns the created machines and the first error.
async fn create_machines<F: Flavour>(
    f: &F,
    set: &F::Set,
    hub: &mcm::MachineSet,
    api: &Api<F::Machine>,
    count: usize,
) -> (Vec<F::Machine>, Option<String>) {
    let mut created = Vec::new();
    let mut error = None;
    match f.create_context(set).await {
        Ok(context) => {
            for batch in slow_start_batches(count) {
                let results = join_all((0..batch).map(|_| f.create_machine(api, set, hub, &context))).await;
                for result in results {
                    match result {
                        Ok(m) => created.push(m),
                        Err(e) => {
                            error.get_or_insert(e);
                        }
                    }
                }
                if error.is_some() {
                    break;
                }
            }
        }
        Err(e) => error = Some(e),
    }
    if !created.is_empty() {
        tracing::info!(machine_set = %key_of(set), created = created.len(), "created machines");
        let note = format!("Created machine{}: {}", plural(created.len()), names(&created));
        publish_to(f.set_events(), set, crate::lifecycle::status::EventSpec::normal("SuccessfulCreate", note)).await;
    }
    if let Some(message) = &error {
        tracing::warn!(machine_set = %key_of(set), created = created.len(), wanted = count, error = %message, "creating machines failed");
        let event = crate::lifecycle::status::EventSpec::warning("FailedCreate", message.clone());
        publish_to(f.set_events(), set, event).await;
    }
    (created, error)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Names of machines for an event note (events are cut at 1 kB).
fn names<M: Resource>(machines: &[M]) -> String {
    machines.iter().map(|m| m.meta().name.clone().unwrap_or_default()).collect::<Vec<_>>().join(", ")
}

/// Deletes the victims in parallel (the flavour writes what follows a deletion). Updates `machines` to what the
/// writes returned; returns the machines deleted and the first error.
async fn delete_machines<F: Flavour>(
    f: &F,
    set: &F::Set,
    api: &Api<F::Machine>,
    machines: &mut Vec<F::Machine>,
    victims: &[Victim],
    now: Timestamp,
) -> (Vec<F::Machine>, Option<String>) {
    let targets: Vec<(&Victim, F::Machine)> = victims
        .iter()
        .filter_map(|v| {
            let m = machines.iter().find(|m| m.meta().name.as_deref() == Some(v.name.as_str()))?;
            Some((v, m.clone()))
        })
        .collect();
    let results = join_all(targets.iter().map(|(_, m)| f.delete_machine(api, m, now))).await;
    let mut deleted = Vec::new();
    let mut error = None;
    for ((victim, target), result) in targets.iter().zip(results) {
        let name = target.name_any();
        match result {
            Ok(after) => {
                let why = match victim.reason {
                    DeletionReason::Surplus => "surplus",
                    DeletionReason::MarkedByAutoscaler => "marked by the cluster-autoscaler",
                    DeletionReason::Failed => "failed",
                    DeletionReason::SetDeleted => "machine set deleted",
                };
                tracing::info!(machine_set = %key_of(set), machine = %name, reason = why, "deleted a machine");
                if let Some(stale) = f.stale_machines()
                    && crate::metrics::stale(&f.machine_to_hub(target))
                {
                    stale.inc();
                }
                deleted.push(target.clone());
                match after {
                    Some(m) => {
                        if let Some(slot) = machines.iter_mut().find(|x| x.meta().name == m.meta().name) {
                            *slot = m;
                        }
                    }
                    None => machines.retain(|x| x.meta().name.as_deref() != Some(name.as_str())),
                }
            }
            Err(e) => {
                tracing::warn!(machine_set = %key_of(set), machine = %name, error = %e, "deleting a machine failed");
                error.get_or_insert(format!("Error deleting: {e}"));
            }
        }
    }
    if !deleted.is_empty() {
        let note = format!("Deleted machine{}: {}", plural(deleted.len()), names(&deleted));
        publish_to(f.set_events(), set, crate::lifecycle::status::EventSpec::normal("SuccessfulDelete", note)).await;
    }
    if let Some(message) = &error {
        let event = crate::lifecycle::status::EventSpec::warning("FailedDelete", message.clone());
        publish_to(f.set_events(), set, event).await;
    }
    (deleted, error)
}
