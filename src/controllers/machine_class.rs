//! The MachineClass controller: a class carries its finalizer while any Machine uses it, so it cannot be deleted
//! from under them, and loses it once none does; an invalid `nodeTemplate` is reported as a Warning event. The
//! Secret controller gives the Secrets a class references their finalizer the same way (MCM's secret controller).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::context::{Context, key_of};
use super::error::Error;
use super::writes;
use crate::api::mcm::MachineClass;
use crate::api::mcm::names::{MACHINE_FINALIZER, SECRET_FINALIZER};
use crate::lifecycle::class::{self, FinalizerChange};
use crate::lifecycle::status::EventSpec;

async fn apply<K>(api: &Api<K>, object: &K, finalizer: &str, change: Option<FinalizerChange>) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match change {
        Some(FinalizerChange::Add) => writes::add_finalizer(api, object, finalizer).await,
        Some(FinalizerChange::Remove) => writes::remove_finalizer(api, object, finalizer).await,
        None => Ok(()),
    }
}

/// Reconciles a MachineClass.
pub(crate) async fn reconcile(class: Arc<MachineClass>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.ready().await;
    let namespace = class.namespace().unwrap_or_default();
    let name = class.name_any();
    let referenced = ctx.machines.find(|m| class::uses_class(m, &namespace, &name)).is_some();
    let has = class::has_finalizer(class.metadata.finalizers.as_ref(), MACHINE_FINALIZER);
    let deleting = class.metadata.deletion_timestamp.is_some();
    let change = class::finalizer_change(has, referenced, deleting);
    if let Some(change) = change {
        tracing::info!(class = %key_of(&*class), ?change, referenced, "machine class finalizer");
    }
    let api: Api<MachineClass> = Api::namespaced(ctx.control.clone(), &namespace);
    apply(&api, &*class, MACHINE_FINALIZER, change).await?;
    if let Err(why) = class::validate_node_template(class.spec.node_template.as_ref()) {
        ctx.publish(&*class, EventSpec::warning("InvalidNodeTemplate", why)).await;
    }
    if deleting && referenced {
        tracing::info!(class = %key_of(&*class), "deletion waits until no machine uses the class");
    }
    Ok(Action::requeue(ctx.config.resync))
}

/// Reconciles a Secret: the finalizer while a MachineClass references it.
pub(crate) async fn reconcile_secret(secret: Arc<Secret>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.ready().await;
    let namespace = secret.namespace().unwrap_or_default();
    let name = secret.name_any();
    let wanted = (namespace.clone(), name);
    let referenced = ctx.classes.find(|c| class::secret_refs(c).contains(&wanted)).is_some();
    let has = class::has_finalizer(secret.metadata.finalizers.as_ref(), SECRET_FINALIZER);
    let change = class::finalizer_change(has, referenced, secret.metadata.deletion_timestamp.is_some());
    let api: Api<Secret> = Api::namespaced(ctx.control.clone(), &namespace);
    apply(&api, &*secret, SECRET_FINALIZER, change).await?;
    Ok(Action::requeue(ctx.config.resync))
}

/// After an API error: back off per object.
pub(crate) fn error_policy<K: kube::Resource>(object: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&*object);
    crate::controllers::error::log_reconcile_failure!(error, object = %key);
    Action::requeue(ctx.retries.fail(&format!("api-class:{key}"), error.retry_class(), &ctx.config, None))
}
