//! A machine's in-place update, carried out for the machine controllers of both flavours: observes the Machine's
//! Node from the store, decides with [`lifecycle::in_place`](crate::lifecycle::in_place), and writes in order —
//! the Node's condition, then (for a selected Node) the drain, the machine's status and the `DrainSuccessful`
//! condition. The condition is written last so a pass cut short after the drain drains again (a no-op) instead
//! of skipping the machine's `InPlaceUpdating` phase.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::context::key_of;
use super::error::Error;
use super::writes;
use crate::api::mcm::Machine;
use crate::drain;
use crate::lifecycle::in_place;
use crate::lifecycle::requeue::Next;
use crate::lifecycle::status::{EventSpec, StatusPatch};
use crate::lifecycle::{Effective, MachineConfig, RetryClass};
use crate::providers::contract::Driver;

/// What the in-place pass writes to besides the Node: the MCM flavour's Machine, or the CAPI flavour's MCMMachine
/// (which records MCM's phase) and Machine (its events).
pub(crate) trait InPlaceSink {
    /// Writes `patch` to the machine's status.
    fn write(&self, patch: StatusPatch) -> impl Future<Output = Result<(), Error>> + Send;
    /// Records an event on the machine.
    fn event(&self, event: EventSpec) -> impl Future<Output = ()> + Send;
}

/// How the Node is reached: its cluster's client, the client drains use, and the machine's driver (volumes).
pub(crate) struct NodeAccess<'a> {
    /// The Node's cluster.
    pub client: &'a kube::Client,
    /// The client drains use (its own rate limits).
    pub drain: &'a kube::Client,
    /// The machine's driver, to find its volumes during the drain.
    pub driver: Option<&'a dyn Driver>,
}

/// The in-place pass for `machine` (its hub view) and its Node: `Ok(None)` to go on, `Ok(Some(next))` to stop
/// the reconcile there.
pub(crate) async fn step(
    machine: &Machine,
    node: &Node,
    access: NodeAccess<'_>,
    (config, effective): (&MachineConfig, &Effective),
    now: Timestamp,
    sink: &impl InPlaceSink,
) -> Result<Option<Next>, Error> {
    let target = access.client;
    let plan = in_place::decide(machine, node, effective, config, now);
    if plan.is_empty() {
        return Ok(None);
    }
    let name = node.name_any();
    if let Some(condition) = plan.condition {
        writes::node_condition(target, &name, condition).await?;
    }
    let Some(options) = plan.drain else {
        // The condition's change wakes the machine for the next stage.
        return Ok(Some(Next::Wake(None)));
    };
    let result = async {
        drain::cordon(target, &name).await?;
        drain::drain(access.drain, access.driver, &options).await.map(|_| ())
    }
    .await;
    match result {
        Ok(()) => {
            let (patch, condition) = in_place::drained(machine, now);
            sink.write(patch).await?;
            sink.event(EventSpec::normal(
                "InPlaceUpdateDrained",
                format!("Drained node {name} for its in-place update"),
            ))
            .await;
            writes::node_condition(target, &name, condition).await?;
            Ok(Some(Next::Wake(None)))
        }
        Err(e) => {
            let error = e.to_string();
            tracing::info!(machine = %key_of(machine), node = %name, %error, "draining for the in-place update failed");
            sink.event(EventSpec::warning(
                "FailedDrain",
                format!("Draining node {name} for its in-place update failed: {error}"),
            ))
            .await;
            sink.write(in_place::drain_failed(&error, now)).await?;
            Ok(Some(Next::Retry { class: RetryClass::Transient, deadline: None }))
        }
    }
}
