//! The MachineSet controller (`docs/machine-lifecycle.md` `reconcileClusterMachineSet`): the finalizer, claiming
//! machines, auto-preservation, the in-place propagation of the template, creating and deleting machines as
//! `lifecycle::machine_set::plan_replicas` decides, and the status.
//!
//! Observe (the set and the machines from the stores, Nodes for the preserve annotation), decide (`lifecycle`),
//! act (creations in slow-start batches, deletions in parallel, merge patches), then wait until the stores show
//! the writes ([`super::settle`]) so that the next pass counts what this one did.
//!
//! Events: MCM records `SuccessfulCreate`/`SuccessfulDelete` per machine; kube-runtime's recorder folds repeats of
//! a reason into one event that keeps its first note, so we record one per pass naming all its machines (the
//! same reasons, more information, a request per pass instead of per machine).

use std::sync::Arc;

use futures::future::join_all;
use jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::SetsContext;
use super::settle::Written;
use crate::api::mcm::{Machine, MachineSet, MachineStatus};
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::{Error, is_conflict, is_not_found};
use crate::controllers::writes::{self, MANAGER};
use crate::lifecycle::claim::{Claim, Owner, adopt_patch, claim, controller_ref, release_patch};
use crate::lifecycle::deletion_order::{PRESERVE, PRESERVE_AUTO};
use crate::lifecycle::machine_deployment::plan::FINALIZER;
use crate::lifecycle::machine_set::machines::{deleting_status, machine_from_template};
use crate::lifecycle::machine_set::propagation::plan_propagation;
use crate::lifecycle::machine_set::status::{
    FailedOperation, ReplicaFailure, machine_set_status, status_update_required,
};
use crate::lifecycle::machine_set::{
    DeletionReason, ReplicaFacts, SetMachine, SetValidationError, Victim, plan_replicas, slow_start_batches,
    validate_machine_set,
};
use crate::lifecycle::names::NODE_LABEL;
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::{RetryClass, status_patch};

pub(super) fn params() -> PatchParams {
    PatchParams { field_manager: Some(MANAGER.to_string()), ..Default::default() }
}

/// Reconciles a MachineSet.
pub(super) async fn reconcile(set: Arc<MachineSet>, ctx: Arc<SetsContext>) -> Result<Action, Error> {
    if crate::lifecycle::names::paused(&set.metadata) {
        return Ok(Action::await_change());
    }
    ctx.ready().await;
    let key = key_of(&*set);
    let resync = Action::requeue(ctx.base.config.resync);
    let deleting = set.metadata.deletion_timestamp.is_some();
    if deleting && !has_finalizer(&set) {
        // Not held by us: the API server's garbage collector takes its machines.
        return Ok(Action::await_change());
    }
    if !deleting {
        if let Err(errors) = validate_machine_set(&set) {
            report_invalid(&ctx, &set, &errors).await;
            return Ok(resync);
        }
        ctx.valid_again(&key);
    }
    // Settled also after an error: a pass that created machines and then failed must not create them again.
    let mut written = Written::default();
    let result = run(&set, &ctx, &mut written).await;
    written.settle(&ctx.base.machines, &ctx.sets, &ctx.deployments, &key).await;
    let failed = result?;
    let gate = format!("set-create:{key}");
    Ok(match failed {
        // Creating or deleting machines failed: the condition says so; try again with back-off.
        true => Action::requeue(ctx.base.retries.fail(&gate, RetryClass::Api, &ctx.base.config, None)),
        false => {
            ctx.base.retries.reset(&gate);
            ctx.base.retries.reset(&format!("set:{key}"));
            resync
        }
    })
}

/// After an API error: back off per set.
pub(super) fn error_policy(set: Arc<MachineSet>, error: &Error, ctx: Arc<SetsContext>) -> Action {
    let key = key_of(&*set);
    crate::controllers::error::log_reconcile_failure!(error, machine_set = %key);
    Action::requeue(ctx.base.retries.fail(&format!("set:{key}"), error.retry_class(), &ctx.base.config, None))
}

fn has_finalizer(set: &MachineSet) -> bool {
    set.finalizers().iter().any(|f| f == FINALIZER)
}

async fn report_invalid(ctx: &SetsContext, set: &MachineSet, errors: &[SetValidationError]) {
    let key = key_of(set);
    if !ctx.first_report(&key, set.metadata.generation.unwrap_or(0)) {
        return;
    }
    let note = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    let reason = if errors.contains(&SetValidationError::EmptySelector) { "SelectingAll" } else { "InvalidSpec" };
    tracing::warn!(machine_set = %key, "not reconciled: {note}");
    publish_to(&ctx.set_events, set, EventSpec::warning(reason, note)).await;
}

/// One pass; returns whether creating or deleting machines failed.
async fn run(observed: &MachineSet, ctx: &SetsContext, written: &mut Written) -> Result<bool, Error> {
    let now = Timestamp::now();
    let namespace = observed.namespace().unwrap_or_default();
    let sets: Api<MachineSet> = Api::namespaced(ctx.base.control.clone(), &namespace);
    let api: Api<Machine> = Api::namespaced(ctx.base.control.clone(), &namespace);
    let deleting = observed.metadata.deletion_timestamp.is_some();
    let mut set = observed.clone();

    if !deleting && !has_finalizer(&set) {
        let mut finalizers = set.finalizers().to_vec();
        finalizers.push(FINALIZER.to_string());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": set.resource_version()}});
        let updated = writes::merge(&sets, &set, &patch, "add a finalizer to").await?;
        written.set_changed(&set, &updated);
        set = updated;
    }

    let mut machines = claim_machines(ctx, &set, &sets, &api, written).await?;
    let facts = ReplicaFacts::from_machine_set(
        &set,
        machines.iter().map(|m| SetMachine::from_machine(m, node_preserve(ctx, m).as_deref(), now)).collect(),
    );
    let plan = plan_replicas(&facts);
    if let Some(blocked) = plan.blocked {
        tracing::debug!(machine_set = %key_of(&set), ?blocked, "machines are missing but may not be created");
    }

    // Auto-preservation, then the in-place propagation of the template.
    let preserve = plan.auto_preserve.iter().map(|n| (n, Some(PRESERVE_AUTO)));
    let unpreserve = plan.stop_auto_preserve.iter().map(|n| (n, None));
    for (name, value) in preserve.chain(unpreserve) {
        let patch = json!({"metadata": {"annotations": {PRESERVE: value}}});
        update_machine(&api, &mut machines, name, &patch, "annotate", written).await?;
    }
    if !deleting {
        for p in plan_propagation(&set, &machines) {
            tracing::info!(machine_set = %key_of(&set), machine = %p.machine, fields = ?p.fields, "template in place");
            update_machine(&api, &mut machines, &p.machine, &p.patch, "propagate the template to", written).await?;
        }
    }

    let mut failure = None;
    if plan.create > 0 {
        let (created, error) = create_machines(ctx, &set, &api, plan.create).await;
        for m in &created {
            written.machine_created(m);
        }
        machines.extend(created);
        failure = error.map(|message| ReplicaFailure { operation: FailedOperation::Create, message });
    }
    if !plan.delete.is_empty() {
        let (gone, error) = delete_machines(ctx, &set, &api, &mut machines, &plan.delete, now).await;
        for m in &gone {
            written.machine_deleted(m);
        }
        if failure.is_none() {
            failure = error.map(|message| ReplicaFailure { operation: FailedOperation::Delete, message });
        }
    }

    if plan.remove_finalizer {
        tracing::info!(machine_set = %key_of(&set), "no machine left; removing the finalizer");
        writes::remove_finalizer(&sets, &set, FINALIZER).await?;
        return Ok(false);
    }

    let status = machine_set_status(&set, &machines, failure.as_ref(), now);
    if status_update_required(&set, &status)
        && let Some(mut patch) = status_patch(&set.status.clone().unwrap_or_default(), &status)
    {
        // The freeze also writes `machineSetCondition`: when this patch replaces that list, it must not overwrite
        // the freeze's change. Counts alone need no guard (and the deployment's patches of the spec would make
        // every guarded write conflict during a rollout).
        if patch["status"].get("machineSetCondition").is_some() {
            patch["metadata"] = json!({"resourceVersion": set.resource_version()});
        }
        let updated = sets
            .patch_status(&set.name_any(), &params(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::kube("patch status of", format!("MachineSet {}", key_of(&set)), e))?;
        written.set_changed(&set, &updated);
    }
    Ok(failure.is_some())
}

/// The Node's preserve annotation for a machine (it wins over the machine's own).
fn node_preserve(ctx: &SetsContext, m: &Machine) -> Option<String> {
    let node = ctx.base.node(m.labels().get(NODE_LABEL)?)?;
    node.annotations().get(PRESERVE).cloned()
}

/// The machines the set owns after adopting matching orphans and releasing machines that no longer match.
async fn claim_machines(
    ctx: &SetsContext,
    set: &MachineSet,
    sets: &Api<MachineSet>,
    api: &Api<Machine>,
    written: &mut Written,
) -> Result<Vec<Machine>, Error> {
    let selector = set.spec.selector.clone().unwrap_or_default();
    let uid = set.uid().unwrap_or_default();
    let owner = Owner { uid: &uid, selector: &selector, deleting: set.metadata.deletion_timestamp.is_some() };
    let namespace = set.namespace();
    let mut mine = Vec::new();
    let mut orphans = Vec::new();
    for m in ctx.base.machines.state().into_iter().filter(|m| m.namespace() == namespace) {
        match claim(owner, &m.metadata) {
            Claim::Owned => mine.push((*m).clone()),
            Claim::Adopt => orphans.push(m),
            Claim::Release => {
                tracing::info!(machine_set = %key_of(set), machine = %m.name_any(), "releasing a machine that no longer matches");
                match writes::merge(api, &*m, &release_patch(&m.metadata, &uid), "release").await {
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
    if fresh.is_none_or(|f| f.uid() != set.uid() || f.metadata.deletion_timestamp.is_some()) {
        return Ok(mine);
    }
    let reference = controller_ref("MachineSet", &set.metadata);
    for m in orphans {
        match writes::merge(api, &*m, &adopt_patch(&m.metadata, &reference), "adopt").await {
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
async fn update_machine(
    api: &Api<Machine>,
    machines: &mut [Machine],
    name: &str,
    patch: &Value,
    action: &'static str,
    written: &mut Written,
) -> Result<(), Error> {
    let Some(m) = machines.iter_mut().find(|m| m.metadata.name.as_deref() == Some(name)) else {
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
async fn create_machines(
    ctx: &SetsContext,
    set: &MachineSet,
    api: &Api<Machine>,
    count: usize,
) -> (Vec<Machine>, Option<String>) {
    let template = machine_from_template(set);
    let post = PostParams { field_manager: Some(MANAGER.to_string()), ..Default::default() };
    let mut created = Vec::new();
    let mut error = None;
    for batch in slow_start_batches(count) {
        let results = join_all((0..batch).map(|_| api.create(&post, &template))).await;
        for result in results {
            match result {
                Ok(m) => created.push(m),
                Err(e) => {
                    error.get_or_insert(format!("Error creating: {e}"));
                }
            }
        }
        if error.is_some() {
            break;
        }
    }
    if !created.is_empty() {
        tracing::info!(machine_set = %key_of(set), created = created.len(), "created machines");
        let note = format!("Created machine{}: {}", plural(created.len()), names(&created));
        publish_to(&ctx.set_events, set, EventSpec::normal("SuccessfulCreate", note)).await;
    }
    if let Some(message) = &error {
        tracing::warn!(machine_set = %key_of(set), created = created.len(), wanted = count, error = %message, "creating machines failed");
        publish_to(&ctx.set_events, set, EventSpec::warning("FailedCreate", message.clone())).await;
    }
    (created, error)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Names of machines for an event note (events are cut at 1 kB).
fn names(machines: &[Machine]) -> String {
    machines.iter().map(|m| m.name_any()).collect::<Vec<_>>().join(", ")
}

/// Deletes the victims in parallel, each followed by its status (Terminating, "Deleting machine from cloud
/// provider") unless the termination controller wrote one first. Updates `machines` to what the writes returned;
/// returns the machines deleted and the first error.
async fn delete_machines(
    ctx: &SetsContext,
    set: &MachineSet,
    api: &Api<Machine>,
    machines: &mut Vec<Machine>,
    victims: &[Victim],
    now: Timestamp,
) -> (Vec<Machine>, Option<String>) {
    let targets: Vec<(&Victim, Machine)> = victims
        .iter()
        .filter_map(|v| {
            let m = machines.iter().find(|m| m.metadata.name.as_deref() == Some(v.name.as_str()))?;
            Some((v, m.clone()))
        })
        .collect();
    let results = join_all(targets.iter().map(|(_, m)| delete_machine(api, m, now))).await;
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
                deleted.push(target.clone());
                match after {
                    Some(m) => {
                        if let Some(slot) = machines.iter_mut().find(|x| x.metadata.name == m.metadata.name) {
                            *slot = m;
                        }
                    }
                    None => machines.retain(|x| x.metadata.name.as_deref() != Some(name.as_str())),
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
        publish_to(&ctx.set_events, set, EventSpec::normal("SuccessfulDelete", note)).await;
    }
    if let Some(message) = &error {
        publish_to(&ctx.set_events, set, EventSpec::warning("FailedDelete", message.clone())).await;
    }
    (deleted, error)
}

/// Deletes one machine; returns it as it is afterwards (`None`: gone at once).
async fn delete_machine(api: &Api<Machine>, machine: &Machine, now: Timestamp) -> Result<Option<Machine>, kube::Error> {
    let name = machine.name_any();
    let after = match api.delete(&name, &DeleteParams::default()).await {
        Ok(either) => either.left(),
        Err(e) if is_not_found(&e) => None,
        Err(e) => return Err(e),
    };
    let Some(mut after) = after else { return Ok(None) };
    // Guarded by the version the deletion returned: if the termination controller already moved the machine on,
    // its description must not be replaced (its flow is keyed on it).
    let mut patch = deleting_status(now).to_merge_patch();
    patch["metadata"] = json!({"resourceVersion": after.resource_version()});
    match api.patch_status(&name, &params(), &Patch::Merge(&patch)).await {
        Ok(updated) => after = updated,
        Err(e) if is_conflict(&e) || is_not_found(&e) => {
            deleting_status(now).apply_to(after.status.get_or_insert_with(MachineStatus::default));
        }
        Err(e) => tracing::info!(machine = %key_of(machine), error = %e, "could not mark the machine Terminating"),
    }
    Ok(Some(after))
}
