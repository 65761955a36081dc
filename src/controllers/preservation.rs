//! Machine preservation, carried out for the machine controller: observes the Machine and its Node from the
//! stores, decides with [`lifecycle::preservation`](crate::lifecycle::preservation), and writes in the plan's
//! order (expiry set first, cleared last, so a pass cut short is finished by the next one).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::api::Patch;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::context::{Context, key_of};
use super::error::{Error, is_conflict, is_not_found};
use super::vm::machine::MachineVm;
use super::writes;
use crate::api::mcm::Machine;
use crate::drain;
use crate::lifecycle::preservation::{self, Expiry, NodeView};
use crate::lifecycle::requeue::Next;
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::{Effective, RetryClass, create};

/// Preservation's pass: `Ok(None)` when done for now (the expiry, if preserved, is in `wake`), `Ok(Some(next))`
/// to stop the reconcile there (a write raced, a drain failed).
pub(crate) async fn step(
    machine: &Machine,
    api: &Api<Machine>,
    ctx: &Context,
    effective: &Effective,
    now: Timestamp,
    wake: &mut Option<Timestamp>,
) -> Result<Option<Next>, Error> {
    let stored = create::node_label(machine).map(|name| ctx.node(name));
    let view = match &stored {
        None => NodeView::NoNode,
        Some(None) => NodeView::Missing,
        Some(Some(node)) => NodeView::Found(node),
    };
    let plan = preservation::decide(machine, view, effective, &ctx.config, now);
    *wake = crate::lifecycle::clock::earliest(*wake, plan.wake_at);
    if plan.is_empty() {
        return Ok(None);
    }
    let key = key_of(machine);
    if let Expiry::Set(until) = plan.expiry {
        expiry(api, machine, json!(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(until))).await?;
        let note = format!("Machine {} preserved until {until}", machine.name_any());
        tracing::info!(machine = %key, "{note}");
        ctx.publish(machine, EventSpec::normal("Preserved", note)).await;
    }
    let node = match (&ctx.target, &stored) {
        (Some(target), Some(Some(node))) => Some((target, node)),
        _ => None,
    };
    if let (Some((target, node)), Some(patch)) = (node, &plan.node_patch) {
        let nodes: Api<Node> = Api::all(target.clone());
        let guarded = writes::guarded(patch.clone(), node.resource_version());
        match writes::merge(&nodes, node, &guarded, "mark the preserved").await {
            Ok(_) => {}
            // The Node changed meanwhile: its watch event brings us back with the new one.
            Err(Error::Kube { source, .. }) if is_conflict(&source) || is_not_found(&source) => {
                return Ok(Some(Next::Poll(RetryClass::Api)));
            }
            Err(e) => return Err(e),
        }
    }
    let mut drain_failed = false;
    let mut condition = plan.condition.clone();
    if let (Some((target, _)), Some(options)) = (node, &plan.drain) {
        let driver = MachineVm::new(ctx, machine, None).cloud_of(machine).ok().map(|c| c.driver);
        let client = ctx.drain.as_ref().unwrap_or(target);
        let result = drain::drain(client, driver.as_deref(), options).await.map(|_| ()).map_err(|e| e.to_string());
        match &result {
            Ok(()) => {
                let note = format!("Drained node {} of the preserved machine", options.node);
                ctx.publish(machine, EventSpec::normal("PreservedNodeDrained", note)).await;
            }
            Err(e) => {
                drain_failed = true;
                let note = format!("Draining node {} of the preserved machine failed: {e}", options.node);
                ctx.publish(machine, EventSpec::warning("FailedDrain", note)).await;
            }
        }
        condition = plan.condition_after(&result);
    }
    if let (Some((target, node)), Some(condition)) = (node, condition) {
        writes::node_condition(target, &node.name_any(), condition).await?;
    }
    if let Some(patch) = &plan.machine_patch {
        writes::merge(api, machine, patch, "annotate").await?;
    }
    if plan.expiry == Expiry::Clear {
        expiry(api, machine, serde_json::Value::Null).await?;
        let note = format!("Preservation of machine {} stopped", machine.name_any());
        tracing::info!(machine = %key, "{note}");
        ctx.publish(machine, EventSpec::normal("PreservationStopped", note)).await;
    }
    if drain_failed {
        return Ok(Some(Next::Retry { class: RetryClass::Transient, deadline: None }));
    }
    Ok(None)
}

/// Writes `currentStatus.preserveExpiryTime` alone (`null` clears it).
async fn expiry(api: &Api<Machine>, machine: &Machine, value: serde_json::Value) -> Result<(), Error> {
    let patch = json!({"status": {"currentStatus": {"preserveExpiryTime": value}}});
    api.patch_status(&machine.name_any(), &writes::patch_params(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| Error::kube("patch preserveExpiryTime of", format!("Machine {}", key_of(machine)), e))
}
