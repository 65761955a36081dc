//! The MachineSet controller on CAPI objects: the pause and upstream-core checks, validation of the hub view, then
//! the shared executor (`controllers::replicas::set`, with the CAPI side of the seam in `super::flavour`: Machines
//! created with their MCMMachine clones, core's conditions on the status).

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::CapiContext;
use super::flavour::SET_FINALIZER as FINALIZER;
use crate::api::capi::MachineSet;
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::Error;
use crate::controllers::replicas;
use crate::convert::machine_set_from_capi;
use crate::lifecycle::machine_set::validate_machine_set;
use crate::lifecycle::status::EventSpec;

/// Reconciles a CAPI MachineSet.
pub(super) async fn reconcile(set: Arc<MachineSet>, ctx: Arc<CapiContext>) -> Result<Action, Error> {
    ctx.ready().await;
    let conditions = set.status.as_ref().and_then(|s| s.conditions.as_ref());
    if super::hold_if_paused(&ctx, &*set, &set.spec.cluster_name, conditions).await?.is_some() {
        return Ok(Action::await_change());
    }
    if super::left_to_upstream_core(&ctx, &*set, Some(&ctx.set_events), Some(FINALIZER)).await? {
        return Ok(Action::await_change());
    }
    let key = key_of(&*set);
    let resync = Action::requeue(ctx.config.resync);
    let deleting = set.metadata.deletion_timestamp.is_some();
    if deleting && !set.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let hub = machine_set_from_capi(&set);
    if !deleting && let Err(errors) = validate_machine_set(&hub) {
        if ctx.reported.first(&key, set.metadata.generation.unwrap_or(0)) {
            let note = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            tracing::warn!(machine_set = %key, "not reconciled: {note}");
            publish_to(&ctx.set_events, &*set, EventSpec::warning("InvalidSpec", note)).await;
        }
        return Ok(resync);
    }
    replicas::set_pass(&*ctx, &*set).await
}

/// After an API error: back off per set.
pub(super) fn error_policy(set: Arc<MachineSet>, error: &Error, ctx: Arc<CapiContext>) -> Action {
    replicas::error_policy(&*ctx, "set", &*set, error)
}
