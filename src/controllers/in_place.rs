//! A machine's in-place update, carried out for the machine controllers of both flavours: observes the Machine's
//! Node from the store, decides with [`lifecycle::in_place`](crate::lifecycle::in_place), and writes in order —
//! the Node's condition, then (for a selected Node) the drain, the machine's status and the `DrainSuccessful`
//! condition. The condition is written last so a pass cut short after the drain drains again (a no-op) instead
//! of skipping the machine's `InPlaceUpdating` phase.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use kube::api::Patch;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::context::{Context, key_of};
use super::error::{Error, is_not_found};
use super::vm::machine::MachineVm;
use super::writes;
use crate::api::mcm::Machine;
use crate::drain;
use crate::lifecycle::in_place;
use crate::lifecycle::requeue::Next;
use crate::lifecycle::status::{EventSpec, StatusPatch};
use crate::lifecycle::{Effective, RetryClass};

/// Where the machine's status goes: the MCM flavour writes the Machine, the CAPI flavour its hub view's owner.
pub(crate) trait StatusSink {
    /// Writes `patch` to the machine's status.
    fn write(&self, patch: StatusPatch) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The in-place pass for `machine` (its hub view) and its Node: `Ok(None)` to go on, `Ok(Some(next))` to stop
/// the reconcile there.
pub(crate) async fn step(
    machine: &Machine,
    node: &Node,
    ctx: &Context,
    effective: &Effective,
    now: Timestamp,
    sink: &impl StatusSink,
) -> Result<Option<Next>, Error> {
    let Some(target) = &ctx.target else { return Ok(None) };
    let plan = in_place::decide(machine, node, effective, &ctx.config, now);
    if plan.is_empty() {
        return Ok(None);
    }
    let name = node.name_any();
    if let Some(condition) = plan.condition {
        write_condition(target, &name, condition).await?;
    }
    let Some(options) = plan.drain else {
        // The condition's change wakes the machine for the next stage.
        return Ok(Some(Next::Wake(None)));
    };
    let driver = MachineVm::new(ctx, machine, None).cloud_of(machine).ok().map(|c| c.driver);
    let client = ctx.drain.as_ref().unwrap_or(target);
    let result = async {
        drain::cordon(client, &name).await?;
        drain::drain(client, driver.as_deref(), &options).await.map(|_| ())
    }
    .await;
    match result {
        Ok(()) => {
            let (patch, condition) = in_place::drained(machine, now);
            sink.write(patch).await?;
            ctx.publish(
                machine,
                EventSpec::normal("InPlaceUpdateDrained", format!("Drained node {name} for its in-place update")),
            )
            .await;
            write_condition(target, &name, condition).await?;
            Ok(Some(Next::Wake(None)))
        }
        Err(e) => {
            let error = e.to_string();
            tracing::info!(machine = %key_of(machine), node = %name, %error, "draining for the in-place update failed");
            ctx.publish(
                machine,
                EventSpec::warning(
                    "FailedDrain",
                    format!("Draining node {name} for its in-place update failed: {error}"),
                ),
            )
            .await;
            sink.write(in_place::drain_failed(&error, now)).await?;
            Ok(Some(Next::Retry { class: RetryClass::Transient, deadline: None }))
        }
    }
}

/// The Node's `InPlaceUpdate` condition (merged by type; the other conditions stay).
async fn write_condition(target: &kube::Client, node: &str, condition: NodeCondition) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(target.clone());
    let patch = json!({"status": {"conditions": [condition]}});
    match nodes.patch_status(node, &writes::patch_params(), &Patch::Strategic(patch)).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::kube("set the InPlaceUpdate condition of", format!("Node {node}"), e)),
    }
}
