//! In-place updates for Cluster API Machines ("CAPI with MCM core"): the same Node protocol and phases as the MCM
//! flavour's machine controller ([`crate::controllers::in_place`], [`crate::lifecycle::in_place`]), on the hub view
//! of a Machine whose MCM phase is recorded on its MCMMachine. The phase shows on the Machine as CAPI's `Updating`
//! (`lifecycle::capi_machine`).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::CapiContext;
use crate::api::capi::Machine;
use crate::api::infra::MCMMachine;
use crate::api::mcm;
use crate::controllers::context::publish_to;
use crate::controllers::error::Error;
use crate::controllers::in_place::{InPlaceSink, NodeAccess, step};
use crate::controllers::workload::Connection;
use crate::lifecycle::requeue::Next;
use crate::lifecycle::status::{self, EventSpec, StatusPatch};
use crate::lifecycle::{Effective, in_place};

/// How often an updating machine is looked at besides its Node's changes.
const POLL: Duration = Duration::from_secs(2);

/// The hub view the in-place decisions read: the Machine's, with MCM's phase, its clock and the machine
/// configuration from the MCMMachine.
fn hub_view(m: &Machine, infra: &MCMMachine) -> mcm::Machine {
    let mut hub = crate::convert::machine_view::machine_to_hub(m, Some(infra));
    if let Some(current) = infra.status.as_ref().and_then(|s| s.current_status.clone()) {
        hub.status.get_or_insert_with(Default::default).current_status = Some(current);
    }
    hub.spec.configuration = infra.spec.configuration.clone();
    hub
}

/// The pass: `Ok(Some(action))` while an update is under way (the reconcile ends there), `Ok(None)` otherwise.
pub(super) async fn pass(
    ctx: &CapiContext,
    m: &Machine,
    infra: &MCMMachine,
    node: &Node,
    nodes: &Connection,
    now: Timestamp,
) -> Result<Option<Action>, Error> {
    let hub = hub_view(m, infra);
    let effective = Effective::of(&hub, &ctx.config);
    let sink = InfraSink { ctx, machine: m, infra };
    if let Some(patch) = in_place::phase_change(&hub, node, &effective, now) {
        sink.write(patch).await?;
        return Ok(Some(Action::requeue(Duration::ZERO)));
    }
    let access = NodeAccess { client: &nodes.client, drain: &nodes.drain, driver: None };
    let next = step(&hub, node, access, (&ctx.config, &effective), now, &sink).await?;
    let updating = status::phase(&hub).is_some_and(crate::convert::machine_view::is_in_place);
    Ok(match next {
        Some(Next::Retry { .. }) => Some(Action::requeue(ctx.config.forced_drain_timeout.min(POLL * 5))),
        Some(_) => Some(Action::requeue(POLL)),
        None if updating => Some(Action::requeue(POLL)),
        None => None,
    })
}

/// MCM's fields of the MCMMachine's status; events on the Machine.
struct InfraSink<'a> {
    ctx: &'a CapiContext,
    machine: &'a Machine,
    infra: &'a MCMMachine,
}

impl InPlaceSink for InfraSink<'_> {
    async fn write(&self, patch: StatusPatch) -> Result<(), Error> {
        let api: Api<MCMMachine> =
            Api::namespaced(self.ctx.control.clone(), &self.infra.namespace().unwrap_or_default());
        let status = match patch.to_merge_patch() {
            serde_json::Value::Object(mut o) => o.remove("status").unwrap_or_default(),
            _ => serde_json::Value::Null,
        };
        if let Some(phase) = patch.new_phase() {
            tracing::info!(machine = %crate::controllers::context::key_of(self.machine), ?phase, "in-place phase");
        }
        crate::controllers::infra::patch_status(&api, self.infra, status).await
    }

    async fn event(&self, event: EventSpec) {
        publish_to(&self.ctx.machine_events, self.machine, event).await;
    }
}
