//! The MachineDeployment controller on CAPI objects: CAPI's defaults, the pause and upstream-core checks, core's
//! Cluster membership (label and owner), validation of the hub view, then the shared executor
//! (`controllers::replicas::deployment`, with the CAPI side of the seam in `super::flavour`).

use std::sync::Arc;

use jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::CapiContext;
use super::flavour::DEPLOYMENT_FINALIZER as FINALIZER;
use crate::api::capi::{MachineDeployment, MachineSet};
use crate::controllers::error::Error;
use crate::controllers::replicas::{self, Flavour};
use crate::controllers::writes;
use crate::lifecycle::capi_cluster::deployment_membership_patch;
use crate::lifecycle::capi_replicas::deletion_order_patch;
use crate::lifecycle::machine_deployment::validation::validate;

/// Reconciles a CAPI MachineDeployment.
pub(super) async fn reconcile(d: Arc<MachineDeployment>, ctx: Arc<CapiContext>) -> Result<Action, Error> {
    ctx.ready().await;
    let conditions = d.status.as_ref().and_then(|s| s.conditions.as_ref());
    if super::hold_if_paused(&ctx, &*d, &d.spec.cluster_name, conditions).await?.is_some() {
        return Ok(Action::await_change());
    }
    if super::left_to_upstream_core(&ctx, &*d, Some(&ctx.deployment_events), Some(FINALIZER)).await? {
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let resync = ctx.config.resync;
    let deleting = d.metadata.deletion_timestamp.is_some();
    if deleting && !d.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let hub = CapiContext::deployment_to_hub(&d);
    if !deleting && let Err(errors) = validate(&hub) {
        ctx.report_invalid(&d, &errors, now).await?;
        return Ok(Action::requeue(resync));
    }
    let cluster = ctx.clusters.get(
        &kube::runtime::reflector::ObjectRef::new(&d.spec.cluster_name).within(&d.namespace().unwrap_or_default()),
    );
    if !deleting && let Some(patch) = deployment_membership_patch(&d.metadata, &d.spec.cluster_name, cluster.as_deref())
    {
        let api: Api<MachineDeployment> = Api::namespaced(ctx.control.clone(), &d.namespace().unwrap_or_default());
        writes::merge(&api, &*d, &patch, "label and own").await?;
        // The write's watch event brings the labelled object back; the guarded writes below would conflict now.
        return Ok(Action::await_change());
    }
    if !deleting {
        propagate_deletion_order(&ctx, &d).await?;
    }
    replicas::deployment_pass(&*ctx, &*d, &hub, now).await
}

/// `spec.deletion.order` goes to the deployment's MachineSets in place, as core propagates it.
async fn propagate_deletion_order(ctx: &CapiContext, d: &MachineDeployment) -> Result<(), Error> {
    let uid = d.metadata.uid.as_deref();
    for set in ctx.sets.state() {
        let controlled =
            set.owner_references().iter().any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid);
        if !controlled || set.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(patch) = deletion_order_patch(d, &set) {
            let api: Api<MachineSet> = Api::namespaced(ctx.control.clone(), &set.namespace().unwrap_or_default());
            writes::merge(&api, &*set, &patch, "propagate the deletion order to").await?;
        }
    }
    Ok(())
}

/// After an API error: back off per deployment.
pub(super) fn error_policy(d: Arc<MachineDeployment>, error: &Error, ctx: Arc<CapiContext>) -> Action {
    replicas::error_policy(&*ctx, "deployment", &*d, error)
}
