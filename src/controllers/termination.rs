//! The termination controller: deletes a machine's VM and Node before its finalizer goes, step by step as MCM's
//! deletion flow (`lifecycle::delete::next`, carried out by [`super::vm::delete`]), on a queue of its own so long
//! drains never hold up creations (MCM #943).
//!
//! One reconcile runs the steps in a row, the status naming each step before it reaches outside, so a restart
//! resumes at the step the status names — ours or an MCM's. A step that fails is retried with back-off (per
//! machine); a drain that keeps failing is forced once the drain timeout passes.

use std::sync::Arc;

use jiff::Timestamp;
use kube::runtime::controller::Action;

use super::context::{Context, key_of};
use super::error::Error;
use super::vm::machine::MachineVm;
use super::{requeue, superseded, vm};
use crate::api::mcm::Machine;
use crate::api::mcm::names::MACHINE_FINALIZER;
use crate::lifecycle::class;
use crate::lifecycle::requeue::Next;

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
    if ctx.superseded.holds(&*machine) {
        // The store has not seen our last write yet: its watch event brings us back with it.
        return Ok(Action::await_change());
    }
    let gate = format!("delete:{key}");
    if let Some(wait) = ctx.retries.waiting(&gate) {
        return Ok(Action::requeue(wait));
    }
    let now = Timestamp::now();
    let flavour = MachineVm::new(&ctx, &machine, None);
    let (result, writes) = superseded::tracking(vm::delete::run(&flavour, &*machine, &machine, now)).await;
    ctx.superseded.absorb(writes);
    let next = match result {
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
    Ok(requeue::action(&ctx.retries, &ctx.config, &gate, next, now))
}

/// After an API error: back off per machine.
pub(crate) fn error_policy(machine: Arc<Machine>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&*machine);
    tracing::warn!(machine = %key, error = %error, "termination reconcile failed");
    Action::requeue(ctx.retries.fail(&format!("api-delete:{key}"), error.retry_class(), &ctx.config, None))
}
