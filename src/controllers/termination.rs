//! The termination controller: deletes a machine's VM and Node before its finalizer goes, step by step as MCM's
//! deletion flow (`lifecycle::delete`), on a queue of its own so long drains never hold up creations (MCM #943).
//!
//! One reconcile runs the steps in a row, writing each outcome before the next step, so a restart resumes at the
//! step the status names — ours or an MCM's. A step that fails is retried with back-off (per machine); a drain
//! that keeps failing is forced once the drain timeout passes.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::context::{Context, key_of};
use super::error::{Error, is_not_found};
use super::machine::{Next, class_info, class_secrets, machine_info, requeue, write_status};
use super::writes;
use crate::api::mcm::{Machine, MachineClass};
use crate::drain::{self, DrainOptions, DrainOutcome};
use crate::lifecycle::delete::{self, DrainPlan, FindVm, NodeDeletion, Outcome, Step, VolumeAttachments};
use crate::lifecycle::names::{
    MACHINE_FINALIZER, MACHINE_NAME_LABEL, NODE_FINALIZER, NODE_LABEL, TERMINATING_CONDITION,
};
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::{Effective, class, create};
use crate::providers::{Driver, DriverError, MachineRequest};

/// Steps one reconcile runs at most (the flow has seven; a re-initiated termination adds one).
const MAX_STEPS: usize = 10;

/// Reconciles a machine being deleted.
pub(crate) async fn reconcile(machine: Arc<Machine>, ctx: Arc<Context>) -> Result<Action, Error> {
    if machine.metadata.deletion_timestamp.is_none() || crate::lifecycle::names::paused(&machine.metadata) {
        // Not deleting, or paused: a paused machine's VM and Node are never deleted (`mcm migrate`).
        return Ok(Action::await_change());
    }
    if !class::has_finalizer(machine.metadata.finalizers.as_ref(), MACHINE_FINALIZER) {
        // Not ours (never created by us, or already done): the API server deletes it.
        return Ok(Action::await_change());
    }
    let key = key_of(&*machine);
    if ctx.creating.contains(&key) {
        // The create flow is calling the cloud; a VM it makes must not be missed. Look again shortly.
        return Ok(Action::requeue(ctx.config.retry.api.first));
    }
    ctx.ready().await;
    let gate = format!("delete:{key}");
    if let Some(wait) = ctx.retries.waiting(&gate) {
        return Ok(Action::requeue(wait));
    }
    let now = Timestamp::now();
    let next = match run(&machine, &ctx, now).await {
        Ok(next) => next,
        // The store was behind: an earlier pass removed the finalizer and the machine is gone.
        Err(e) if e.is_gone(&format!("Machine {key}")) => {
            ctx.retries.forget(&key);
            return Ok(Action::await_change());
        }
        Err(e) => return Err(e),
    };
    if matches!(next, Next::Done) {
        ctx.retries.forget(&key);
    }
    Ok(requeue(&ctx, &gate, next, now))
}

/// After an API error: back off per machine.
pub(crate) fn error_policy(machine: Arc<Machine>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&*machine);
    tracing::warn!(machine = %key, error = %error, "termination reconcile failed");
    Action::requeue(ctx.retries.fail(&format!("api-delete:{key}"), error.retry_class(), &ctx.config, None))
}

/// The class and driver a machine's deletion needs, when the class still exists.
struct Cloud {
    driver: Arc<dyn Driver>,
    request: MachineRequest,
}

fn cloud(machine: &Machine, ctx: &Context) -> Result<Cloud, String> {
    let namespace = machine.namespace().unwrap_or_default();
    let class: Arc<MachineClass> = ctx
        .classes
        .get(&ObjectRef::new(&machine.spec.class.name).within(&namespace))
        .ok_or_else(|| format!("MachineClass {:?} does not exist", machine.spec.class.name))?;
    let driver = ctx.drivers.get(class.spec.provider.as_deref().unwrap_or_default()).map_err(|e| e.to_string())?;
    let request = MachineRequest {
        machine: machine_info(machine),
        class: class_info(&class),
        secret: class_secrets(ctx, &class),
        last_known_state: machine.status.as_ref().and_then(|s| s.last_known_state.clone()),
    };
    Ok(Cloud { driver, request })
}

async fn run(original: &Machine, ctx: &Context, now: Timestamp) -> Result<Next, Error> {
    let namespace = original.namespace().unwrap_or_default();
    let api: Api<Machine> = Api::namespaced(ctx.control.clone(), &namespace);
    let effective = Effective::of(original, &ctx.config);
    let mut machine = original.clone();
    for _ in 0..MAX_STEPS {
        let step = delete::step(&machine);
        tracing::debug!(machine = %key_of(&machine), ?step, "deletion step");
        let outcome = match step {
            Step::SetTerminating => {
                let patch = delete::terminating(now);
                write_status(ctx, &api, &machine, patch.clone()).await?;
                patch.apply_to(machine.status.get_or_insert_with(Default::default));
                continue;
            }
            Step::FindVm => find_vm(&mut machine, &api, ctx).await?,
            Step::Drain => drain_node(&machine, ctx, now, &effective).await,
            Step::DeleteVolumeAttachments => match volume_attachments(&machine, ctx).await? {
                Ok(outcome) => outcome,
                // Deleted some; look again shortly whether they are gone.
                Err(()) => return Ok(Next::Sleep(ctx.config.retry.transient.first)),
            },
            Step::DeleteVm => delete_vm(&machine, ctx).await,
            Step::DeleteNode => delete_node(&machine, ctx).await,
            Step::RemoveFinalizer => {
                writes::remove_finalizer(&api, &machine, MACHINE_FINALIZER).await?;
                tracing::info!(machine = %key_of(&machine), "deleted");
                return Ok(Next::Done);
            }
        };
        let patch = outcome.patch(now);
        write_status(ctx, &api, &machine, patch.clone()).await?;
        patch.apply_to(machine.status.get_or_insert_with(Default::default));
        if let Some(class) = outcome.retry {
            // A failing drain is retried, but not past the moment it will be forced.
            let deadline = (step == Step::Drain).then(|| delete::drain_deadline(&machine, &effective)).flatten();
            return Ok(Next::Retry { class, deadline });
        }
    }
    Ok(Next::Wake(None))
}

/// Finds the Node's name: the `node` label, a Node carrying the machine-name label, or the driver's answer.
async fn find_vm(machine: &mut Machine, api: &Api<Machine>, ctx: &Context) -> Result<Outcome, Error> {
    let name = machine.name_any();
    let labelled = ctx
        .nodes
        .as_ref()
        .and_then(|nodes| nodes.find(|n| n.labels().get(MACHINE_NAME_LABEL) == Some(&name)).map(|n| n.name_any()));
    let (outcome, label) = match delete::find_vm(machine, labelled.as_deref(), ctx.target.is_some()) {
        FindVm::Known { outcome, label } => (outcome, label),
        FindVm::AskDriver => {
            let answer = match cloud(machine, ctx) {
                Ok(c) => c.driver.get_machine_status(&c.request).await.map(|r| r.node_name),
                Err(why) => Err(DriverError::new(crate::providers::Code::FailedPrecondition, why)),
            };
            if let Err(e) = &answer {
                ctx.publish(machine, EventSpec::warning("FailedGetStatus", format!("Finding the VM failed: {e}")))
                    .await;
            }
            delete::after_find_vm(machine, answer)
        }
    };
    if let Some(node) = label.filter(|_| ctx.target.is_some()) {
        let patch = json!({"metadata": {"labels": {NODE_LABEL: node}}});
        *machine = writes::merge(api, machine, &patch, "label").await?;
    }
    Ok(outcome)
}

/// Sets the `Terminating` condition, cordons and drains (the drain step).
async fn drain_node(machine: &Machine, ctx: &Context, now: Timestamp, effective: &Effective) -> Outcome {
    let force = delete::force_reason(machine, now, effective, &ctx.config);
    let plan = delete::drain_plan(machine, ctx.target.is_some(), force, now, effective, &ctx.config);
    let (options, target) = match (plan, &ctx.target) {
        (DrainPlan::Skip(outcome), _) => return outcome,
        (DrainPlan::Drain(options), Some(target)) => (options, target),
        // A plan to drain implies a target cluster.
        (DrainPlan::Drain(_), None) => return delete::after_drain(Ok(()), false),
    };
    if let Some(reason) = force {
        tracing::info!(machine = %key_of(machine), ?reason, node = %options.node, "forcing the drain");
    }
    let started = std::time::Instant::now();
    let result = prepare_and_drain(machine, ctx, target, &options, now).await;
    if let Ok(Some(_)) = &result {
        ctx.metrics.drained(machine, started.elapsed());
    }
    match &result {
        Ok(Some(done)) => {
            let note = format!(
                "Drained node {}: {} pods evicted, {} deleted",
                options.node,
                done.evicted.len(),
                done.deleted.len()
            );
            ctx.publish(machine, EventSpec::normal("Drained", note)).await;
        }
        Ok(None) => {}
        Err(e) => {
            let note = format!("Draining node {} failed: {e}", options.node);
            ctx.publish(machine, EventSpec::warning("FailedDrain", note)).await;
        }
    }
    delete::after_drain(result.map(|_| ()), options.force)
}

/// The drain and what precedes it; `Ok(None)` when there was nothing to drain with. A forced drain goes on past a
/// failed condition update or cordon (MCM).
async fn prepare_and_drain(
    machine: &Machine,
    ctx: &Context,
    target: &kube::Client,
    options: &DrainOptions,
    now: Timestamp,
) -> Result<Option<DrainOutcome>, String> {
    if let Some(node) = ctx.node(&options.node) {
        let existing = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == TERMINATING_CONDITION));
        let condition = delete::terminating_condition(machine, existing, now);
        let nodes: Api<Node> = Api::all(target.clone());
        let patch = json!({"status": {"conditions": [condition]}});
        let params = PatchParams { field_manager: Some(writes::MANAGER.to_string()), ..Default::default() };
        match nodes.patch_status(&options.node, &params, &Patch::Strategic(patch)).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) if options.force => {
                tracing::warn!(node = %options.node, error = %e, "setting the Terminating condition failed; forced, going on")
            }
            Err(e) => return Err(format!("failure in update of node conditions - {e}")),
        }
    }
    match drain::cordon(target, &options.node).await {
        Ok(()) => {}
        Err(e) if options.force => tracing::warn!(node = %options.node, error = %e, "cordon failed; forced, going on"),
        Err(e) => return Err(e.to_string()),
    }
    let driver = cloud(machine, ctx).ok().map(|c| c.driver);
    let drain_client = ctx.drain.as_ref().unwrap_or(target);
    drain::drain(drain_client, driver.as_deref(), options).await.map(Some).map_err(|e| e.to_string())
}

/// Deletes the live VolumeAttachments of the Node (forced drains leave them behind). `Ok(Err(()))`: some were
/// deleted, look again.
async fn volume_attachments(machine: &Machine, ctx: &Context) -> Result<Result<Outcome, ()>, Error> {
    let node_name = create::node_label(machine).unwrap_or_default().to_string();
    let found = match (&ctx.target, ctx.node(&node_name)) {
        (Some(target), Some(node)) => {
            let attached =
                node.status.as_ref().and_then(|s| s.volumes_attached.as_ref()).is_some_and(|v| !v.is_empty());
            if attached {
                let api: Api<VolumeAttachment> = Api::all(target.clone());
                let all =
                    api.list(&ListParams::default()).await.map_err(|e| Error::kube("list", "VolumeAttachments", e))?;
                VolumeAttachments::Live(
                    all.items
                        .iter()
                        .filter(|va| va.spec.node_name == node_name && va.metadata.deletion_timestamp.is_none())
                        .map(|va| va.name_any())
                        .collect(),
                )
            } else {
                VolumeAttachments::NoneAttached
            }
        }
        _ => VolumeAttachments::NoNode,
    };
    match delete::after_volume_attachments(&node_name, found) {
        Ok(outcome) => Ok(Ok(outcome)),
        Err(names) => {
            if let Some(target) = &ctx.target {
                let api: Api<VolumeAttachment> = Api::all(target.clone());
                for name in names {
                    match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => {}
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(Error::kube("delete", format!("VolumeAttachment {name}"), e)),
                    }
                }
            }
            Ok(Err(()))
        }
    }
}

/// Deletes the VM.
async fn delete_vm(machine: &Machine, ctx: &Context) -> Outcome {
    let result = match cloud(machine, ctx) {
        Ok(c) => c.driver.delete_machine(&c.request).await.map(|r| r.last_known_state),
        Err(why) => Err(DriverError::new(crate::providers::Code::FailedPrecondition, why)),
    };
    match &result {
        Ok(_) => {
            let what = create::provider_id(machine).map_or_else(|| "the VM".to_string(), |id| format!("VM {id}"));
            ctx.publish(machine, EventSpec::normal("SuccessfulDelete", format!("Deleted {what}"))).await;
        }
        Err(e) if e.code == crate::providers::Code::NotFound => {}
        Err(e) => {
            ctx.publish(machine, EventSpec::warning("FailedDelete", format!("Deleting the VM failed: {e}"))).await
        }
    }
    delete::after_vm_delete(machine, result)
}

/// Deletes the Node (after removing MCM's node finalizer, which would hold it).
async fn delete_node(machine: &Machine, ctx: &Context) -> Outcome {
    let name = machine.name_any();
    let Some(target) = &ctx.target else { return delete::after_node_delete(&name, NodeDeletion::NoTarget) };
    let Some(node_name) = create::node_label(machine).map(str::to_string) else {
        return delete::after_node_delete(&name, NodeDeletion::NoLabel);
    };
    let nodes: Api<Node> = Api::all(target.clone());
    if let Some(node) = ctx.node(&node_name)
        && let Err(e) = writes::remove_finalizer(&nodes, &*node, NODE_FINALIZER).await
    {
        return delete::after_node_delete(&name, NodeDeletion::Failed(node_name, e.to_string()));
    }
    let result = match nodes.delete(&node_name, &DeleteParams::default()).await {
        Ok(_) => NodeDeletion::Deleted(node_name),
        Err(e) if is_not_found(&e) => NodeDeletion::NotFound(node_name),
        Err(e) => NodeDeletion::Failed(node_name, e.to_string()),
    };
    delete::after_node_delete(&name, result)
}
