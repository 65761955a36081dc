//! The MCMMachine's status as one write: MCM's fields (phase, lastOperation, lastKnownState, addresses), the
//! contract fields (`initialization.provisioned`, `failureDomain`) and the `Ready` and `Paused` conditions, in one
//! status patch or none. Shared by the controller and the machine-flow seam ([`super::vm`]).

use jiff::Timestamp;
use kube::Api;
use serde_json::{Map, Value, json};

use super::InfraContext;
use crate::api::infra::MCMMachine;
use crate::api::mcm::Machine;
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::Error;
use crate::lifecycle::infra::{self, condition};
use crate::lifecycle::status::{self, StatusPatch};

/// What one reconcile writes into the MCMMachine's status besides MCM's fields.
#[derive(Default)]
pub(super) struct Write {
    /// MCM's fields (phase, lastOperation, lastKnownState, addresses).
    pub patch: StatusPatch,
    /// `status.initialization.provisioned`.
    pub provisioned: Option<bool>,
    /// `status.failureDomain`.
    pub failure_domain: Option<String>,
    /// The `Ready` condition.
    pub ready: Option<(bool, &'static str, String)>,
    /// The `Paused` condition.
    pub paused: bool,
}

/// Writes what changed: MCM's fields, the contract fields, the conditions; one status patch, or none.
pub(super) async fn write_status(
    ctx: &InfraContext,
    api: &Api<MCMMachine>,
    obj: &MCMMachine,
    hub: &Machine,
    write: Write,
    now: Timestamp,
) -> Result<(), Error> {
    let current = obj.status.as_ref();
    let deleting = obj.metadata.deletion_timestamp.is_some();
    let patch = write.patch.minimize(hub.status.as_ref());
    let event = status::phase_event(status::phase(hub), &patch);
    let mut status = match patch.to_merge_patch() {
        Value::Object(mut o) => match o.remove("status") {
            Some(Value::Object(s)) => s,
            _ => Map::new(),
        },
        _ => Map::new(),
    };
    // The hub's `conditions` are a Node's; an MCMMachine's are metav1 conditions, set below.
    status.remove("conditions");
    let generation = obj.metadata.generation;
    let mut conditions: Option<Vec<_>> = None;
    let existing = |c: &Option<Vec<_>>| c.clone().or_else(|| current.and_then(|s| s.conditions.clone()));
    if let Some(changed) = infra::set_condition(
        existing(&conditions).as_deref(),
        condition::PAUSED,
        infra::paused_condition(write.paused),
        generation,
        now,
    ) {
        conditions = Some(changed);
    }
    let ready = match (write.ready, deleting) {
        (Some(r), _) => Some(r),
        (None, true) if !write.paused => Some(infra::deleting(None)),
        (None, _) => None,
    };
    if let Some(ready) = ready
        && let Some(changed) =
            infra::set_condition(existing(&conditions).as_deref(), condition::READY, ready, generation, now)
    {
        conditions = Some(changed);
    }
    if let Some(conditions) = conditions {
        status.insert("conditions".into(), json!(conditions));
    }
    let current_provisioned = current.and_then(|s| s.initialization.as_ref()).and_then(|i| i.provisioned);
    if let Some(p) = write.provisioned
        && current_provisioned != Some(p)
    {
        status.insert("initialization".into(), json!({ "provisioned": p }));
    }
    if let Some(fd) = write.failure_domain
        && current.and_then(|s| s.failure_domain.as_deref()) != Some(fd.as_str())
    {
        status.insert("failureDomain".into(), json!(fd));
    }
    if status.is_empty() {
        return Ok(());
    }
    super::patch_status(api, obj, Value::Object(status)).await?;
    if let Some(event) = event {
        tracing::info!(mcmmachine = %key_of(obj), phase = %event.reason, "{}", event.note);
        publish_to(&ctx.recorder, obj, event).await;
    }
    Ok(())
}
