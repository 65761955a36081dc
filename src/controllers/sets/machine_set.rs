//! The MachineSet controller of the MCM flavour (`docs/machine-lifecycle.md` `reconcileClusterMachineSet`):
//! validates the set and hands the pass to the shared executor (`controllers::replicas::set`): the finalizer,
//! claiming machines, auto-preservation, the in-place propagation of the template, creations and deletions as
//! `lifecycle::machine_set::plan_replicas` decides, and the status. It then waits until the stores show the pass's
//! writes (`replicas::settle`) so that the next pass counts what this one did.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::SetsContext;
use crate::api::mcm::MachineSet;
use crate::api::mcm::names::MACHINE_FINALIZER;
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::Error;
use crate::controllers::replicas;
use crate::lifecycle::machine_set::{SetValidationError, validate_machine_set};
use crate::lifecycle::status::EventSpec;

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
        ctx.reported.valid_again(&key);
    }
    replicas::set_pass(&*ctx, &*set).await
}

/// After an API error: back off per set.
pub(super) fn error_policy(set: Arc<MachineSet>, error: &Error, ctx: Arc<SetsContext>) -> Action {
    replicas::error_policy(&*ctx, "set", &*set, error)
}

fn has_finalizer(set: &MachineSet) -> bool {
    set.finalizers().iter().any(|f| f == MACHINE_FINALIZER)
}

async fn report_invalid(ctx: &SetsContext, set: &MachineSet, errors: &[SetValidationError]) {
    let key = key_of(set);
    if !ctx.reported.first(&key, set.metadata.generation.unwrap_or(0)) {
        return;
    }
    let note = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    let reason = if errors.contains(&SetValidationError::EmptySelector) { "SelectingAll" } else { "InvalidSpec" };
    tracing::warn!(machine_set = %key, "not reconciled: {note}");
    publish_to(&ctx.set_events, set, EventSpec::warning(reason, note)).await;
}
