//! The MCMMachineTemplate controller (`docs/infrastructure-provider.md`): `status.capacity` and `status.nodeInfo` from
//! what the class's driver knows of its instance type or size, overridden by the class's `nodeTemplate`, so
//! cluster-autoscaler can scale a MachineDeployment from zero.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};

use crate::api::infra::MCMMachineTemplate;
use crate::api::mcm::MachineClass;
use crate::api::mcm::names::MACHINE_CLASS_KIND;
use crate::controllers::context::key_of;
use crate::controllers::error::Error;
use crate::lifecycle::infra;
use crate::providers::DriverRegistry;

/// What the template reconciles share.
pub(crate) struct TemplateContext {
    /// The management cluster.
    pub client: Client,
    /// Drivers by provider: what a node of a class offers.
    pub drivers: DriverRegistry,
    /// `--watch-filter`.
    pub filter: Option<String>,
    /// MCM MachineClasses.
    pub classes: Store<MachineClass>,
    /// Store readiness.
    pub ready: Vec<tokio::sync::watch::Receiver<bool>>,
    /// The backstop resync.
    pub resync: Duration,
}

/// Reconciles one MCMMachineTemplate.
pub(crate) async fn reconcile(obj: Arc<MCMMachineTemplate>, ctx: Arc<TemplateContext>) -> Result<Action, Error> {
    if !infra::passes_filter(ctx.filter.as_deref(), obj.metadata.labels.as_ref())
        || obj.metadata.deletion_timestamp.is_some()
    {
        return Ok(Action::await_change());
    }
    for ready in &ctx.ready {
        let _ = ready.clone().wait_for(|r| *r).await;
    }
    let namespace = obj.namespace().unwrap_or_default();
    let spec = &obj.spec.template.spec;
    let (node_template, derived) = match (&spec.class, &spec.inline_class) {
        (Some(r), None) if r.kind == MACHINE_CLASS_KIND => {
            match ctx.classes.get(&ObjectRef::new(&r.name).within(&namespace)) {
                Some(c) => (
                    c.spec.node_template.clone(),
                    c.spec.provider.as_deref().and_then(|p| ctx.drivers.capacity_of(p, &c.spec.provider_spec)),
                ),
                None => (None, None),
            }
        }
        (None, Some(inline)) => {
            (inline.node_template.clone(), ctx.drivers.capacity_of(&inline.provider, &inline.provider_spec))
        }
        _ => (None, None),
    };
    let Some((capacity, node_info)) = infra::template_status(node_template.as_ref(), derived.as_ref()) else {
        return Ok(Action::requeue(ctx.resync));
    };
    let current = obj.status.as_ref();
    let mut status = Map::new();
    if current.and_then(|s| s.capacity.as_ref()) != Some(&capacity) {
        status.insert("capacity".into(), json!(capacity));
    }
    if current.and_then(|s| s.node_info.as_ref()) != Some(&node_info) {
        status.insert("nodeInfo".into(), json!(node_info));
    }
    if !status.is_empty() {
        let api: Api<MCMMachineTemplate> = Api::namespaced(ctx.client.clone(), &namespace);
        super::patch_status(&api, &*obj, Value::Object(status)).await?;
    }
    Ok(Action::requeue(ctx.resync))
}

/// After an API error: retry in a while.
pub(crate) fn error_policy(obj: Arc<MCMMachineTemplate>, error: &Error, _ctx: Arc<TemplateContext>) -> Action {
    crate::controllers::error::log_reconcile_failure!(error, mcmmachinetemplate = %key_of(&*obj));
    Action::requeue(Duration::from_secs(5))
}
