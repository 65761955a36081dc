//! The MachineDeployment controller of the MCM flavour (`docs/machine-lifecycle.md`
//! `reconcileClusterMachineDeployment`): validates the deployment and hands the pass to the shared executor
//! (`controllers::replicas::deployment`), which claims the sets, lets
//! `lifecycle::machine_deployment::plan::plan_deployment` decide and applies the plan.
//!
//! An invalid deployment is not reconciled; unlike MCM, which skips it silently, it gets `Progressing=False`
//! (reason `InvalidSpec`, or `SelectingAll` for an empty selector) and a Warning event saying what to fix.

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::SetsContext;
use crate::api::mcm::names::MACHINE_FINALIZER;
use crate::api::mcm::{MachineDeployment, MachineDeploymentStatus};
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::Error;
use crate::controllers::replicas;
use crate::controllers::writes::patch_params;
use crate::lifecycle::machine_deployment::status::{invalid_spec_status, status_update_required};
use crate::lifecycle::machine_deployment::validation::{ValidationError, validate};
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::status_patch;

/// Reconciles a MachineDeployment.
pub(super) async fn reconcile(d: Arc<MachineDeployment>, ctx: Arc<SetsContext>) -> Result<Action, Error> {
    if crate::lifecycle::names::paused(&d.metadata) {
        return Ok(Action::await_change());
    }
    ctx.ready().await;
    let now = Timestamp::now();
    let resync = ctx.base.config.resync;
    let deleting = d.metadata.deletion_timestamp.is_some();
    if deleting && !has_finalizer(&d) {
        return Ok(Action::await_change());
    }
    if !deleting && let Err(errors) = validate(&d) {
        report_invalid(&ctx, &d, &errors, now).await?;
        return Ok(Action::requeue(resync));
    }
    replicas::deployment_pass(&*ctx, &*d, &d, now).await
}

/// After an API error: back off per deployment.
pub(super) fn error_policy(d: Arc<MachineDeployment>, error: &Error, ctx: Arc<SetsContext>) -> Action {
    replicas::error_policy(&*ctx, "deployment", &*d, error)
}

fn has_finalizer(d: &MachineDeployment) -> bool {
    d.finalizers().iter().any(|f| f == MACHINE_FINALIZER)
}

fn describe(d: &MachineDeployment) -> String {
    format!("MachineDeployment {}", key_of(d))
}

/// An invalid spec: the `Progressing` condition and, when it changes, a Warning event.
pub(super) async fn report_invalid(
    ctx: &SetsContext,
    d: &MachineDeployment,
    errors: &[ValidationError],
    now: Timestamp,
) -> Result<(), Error> {
    let old = d.status.clone().unwrap_or_default();
    let status = invalid_spec_status(d, errors, now);
    if !status_update_required(&old, &status) {
        return Ok(());
    }
    write_status(ctx, d, &old, &status).await?;
    let note = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    let reason = if errors.contains(&ValidationError::EmptySelector) { "SelectingAll" } else { "InvalidSpec" };
    tracing::warn!(machine_deployment = %key_of(d), "not reconciled: {note}");
    publish_to(&ctx.deployment_events, d, EventSpec::warning(reason, note)).await;
    Ok(())
}

/// Writes what changed from `old` to `new` to the status; when the conditions change, guarded by `d`'s
/// resourceVersion (the freeze writes conditions too, and the list is written whole).
pub(super) async fn write_status(
    ctx: &SetsContext,
    d: &MachineDeployment,
    old: &MachineDeploymentStatus,
    new: &MachineDeploymentStatus,
) -> Result<Option<MachineDeployment>, Error> {
    let Some(mut patch) = status_patch(old, new) else { return Ok(None) };
    if patch["status"].get("conditions").is_some() {
        patch["metadata"] = json!({"resourceVersion": d.resource_version()});
    }
    let api: Api<MachineDeployment> = Api::namespaced(ctx.base.control.clone(), &d.namespace().unwrap_or_default());
    api.patch_status(&d.name_any(), &patch_params(), &Patch::Merge(&patch))
        .await
        .map(Some)
        .map_err(|e| Error::kube("patch status of", describe(d), e))
}
