//! The MCMMachine controller: one VM per MCMMachine (`docs/infrastructure-provider.md`).
//!
//! Observe (the MCMMachine, its owning Machine and Cluster, the bootstrap Secret, the class, from stores), decide
//! (CAPI's gates in [`crate::lifecycle::infra`]; the VM's create and delete flows of [`crate::lifecycle::create`]
//! and [`crate::lifecycle::delete`] on the hub view of the MCMMachine, carried out by the executors the MCM
//! flavour's Machine uses, [`crate::controllers::vm`], through [`super::vm::InfraVm`]), act (driver calls,
//! `spec.providerID` first, then one status patch with MCM's fields, the contract fields and the conditions).

use std::sync::Arc;

use jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use super::InfraContext;
use super::status::{Write, write_status};
use super::vm::InfraVm;
use crate::api::capi;
use crate::api::infra::MCMMachine;
use crate::api::mcm::Machine;
use crate::api::mcm::names::USER_DATA_KEY;
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::driver_request::ClassProblem;
use crate::controllers::error::Error;
use crate::controllers::vm::create::Created;
use crate::controllers::vm::{self, Cloud};
use crate::controllers::{requeue, writes};
use crate::convert::machine::to_hub;
use crate::lifecycle::infra::{self, BOOTSTRAP_DATA_KEY, Gate, MACHINE_FINALIZER};
use crate::lifecycle::requeue::Next;
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::userdata::merge_secret_data;
use crate::lifecycle::{RetryClass, create};
use crate::providers::{Code, DriverError, MachineInfo, MachineRequest};

/// The owning Machine's name, from the ownerReferences (kind Machine of `cluster.x-k8s.io`).
fn owner_name(m: &MCMMachine) -> Option<String> {
    m.owner_references()
        .iter()
        .find(|r| r.kind == "Machine" && r.api_version.starts_with(&format!("{}/", capi::GROUP)))
        .map(|r| r.name.clone())
}

/// Reconciles one MCMMachine.
pub(crate) async fn reconcile(obj: Arc<MCMMachine>, ctx: Arc<InfraContext>) -> Result<Action, Error> {
    if !infra::passes_filter(ctx.filter.as_deref(), obj.metadata.labels.as_ref()) {
        return Ok(Action::await_change());
    }
    ctx.ready().await;
    let now = Timestamp::now();
    let namespace = obj.namespace().unwrap_or_default();
    let api: Api<MCMMachine> = Api::namespaced(ctx.client.clone(), &namespace);
    let owner_name = owner_name(&obj);
    let owner = owner_name.as_ref().and_then(|n| ctx.owners.get(&ObjectRef::new(n).within(&namespace)));
    let cluster_name = obj.labels().get(capi::CLUSTER_NAME_LABEL).cloned();
    let cluster = cluster_name.as_ref().and_then(|n| ctx.clusters.get(&ObjectRef::new(n).within(&namespace)));
    let hub = to_hub(&obj, owner.as_deref());

    let paused = infra::paused(cluster.as_deref(), obj.metadata.annotations.as_ref());
    if paused {
        // Deletion waits too: `clusterctl move` pauses the Cluster and then deletes the source objects.
        write_status(&ctx, &api, &obj, &hub, Write { paused, ..Default::default() }, now).await?;
        return Ok(Action::await_change());
    }
    if obj.metadata.deletion_timestamp.is_some() {
        return delete_flow(&obj, &hub, &api, &ctx, now).await;
    }

    let data_secret = owner.as_ref().and_then(|o| o.spec.bootstrap.data_secret_name.clone());
    let user_data = data_secret
        .as_deref()
        .and_then(|name| ctx.secret(&namespace, name))
        .and_then(|s| merge_secret_data(Some(&s), None).0.remove(BOOTSTRAP_DATA_KEY));
    let gate = Gate {
        owner_name: owner_name.as_deref(),
        owner_found: owner.is_some(),
        cluster_name: cluster_name.as_deref(),
        cluster: cluster.as_deref(),
        data_secret_name: data_secret.as_deref(),
        data_found: user_data.is_some(),
        class_problem: None,
        has_vm: create::provider_id(&hub).is_some(),
    };
    // Contract: the finalizer goes on once the owner and the Cluster exist, before the other waits.
    if owner.is_some() && cluster.is_some() && !obj.finalizers().iter().any(|f| f == MACHINE_FINALIZER) {
        writes::add_finalizer(&api, &*obj, MACHINE_FINALIZER).await?;
    }
    if let Err(wait) = infra::gate(&gate) {
        let ready = Some((false, wait.reason, wait.message));
        write_status(&ctx, &api, &obj, &hub, Write { ready, ..Default::default() }, now).await?;
        return Ok(Action::requeue(ctx.config.resync));
    }

    let gate = create_key(&obj);
    let resolved = match resolve_class(&obj, &ctx, create::provider_id(&hub)) {
        Ok(resolved) => resolved,
        Err(ClassProblem { reason, error }) => {
            // A refused Secret (tenancy) stops here too: no driver is asked, no VM is made.
            publish_to(&ctx.recorder, &*obj, EventSpec::warning(reason, error.message.clone())).await;
            let ready = Some((false, reason, error.message));
            write_status(&ctx, &api, &obj, &hub, Write { ready, ..Default::default() }, now).await?;
            return Ok(requeue::action(&ctx.retries, &ctx.config, &gate, Next::Poll(RetryClass::Other), now));
        }
    };
    let failure_domain = owner.as_ref().and_then(|o| o.spec.failure_domain.clone()).filter(|f| !f.is_empty());
    let failure_domain = obj.spec.failure_domain.clone().or(failure_domain);
    let mut cloud = resolved;
    let class = &mut cloud.request.class;
    match infra::place(&class.provider, &class.provider_spec, failure_domain.as_deref()) {
        Ok(placed) => class.provider_spec = placed,
        // A VM that exists stays where it is (adopted, or made before its class could place it).
        Err(_) if create::provider_id(&hub).is_some() => {}
        Err(why) => {
            let reason = infra::reason::INVALID_FAILURE_DOMAIN;
            publish_to(&ctx.recorder, &*obj, EventSpec::warning(reason, why.clone())).await;
            let ready = Some((false, reason, why));
            write_status(&ctx, &api, &obj, &hub, Write { ready, ..Default::default() }, now).await?;
            return Ok(requeue::action(&ctx.retries, &ctx.config, &gate, Next::Poll(RetryClass::Other), now));
        }
    }
    requeue::poll_over(&ctx.retries, &gate);
    // Where the VM was placed: the Machine's failure domain, or else the zone the class itself names (the status
    // reports the cloud's own zone first, [`infra::located`]).
    let located = failure_domain.clone().or_else(|| infra::zone_of(&class.provider, &class.provider_spec));
    if let Some(data) = user_data {
        cloud.request.secret.0.insert(USER_DATA_KEY.to_string(), data);
    }
    let flavour = InfraVm { ctx: &ctx, api: &api, cloud: Ok(cloud), failure_domain, located, now };
    match vm::create::run(&flavour, &*obj, &hub, now, ctx.retries.waiting(&gate)).await? {
        Created::Provisioned => {
            // Provisioned (or Failed for good): keep the contract fields and conditions in line.
            let write = Write {
                provisioned: infra::provisioned(&hub).then_some(true),
                failure_domain: infra::located(create::provider_id(&hub), flavour.located.as_deref())
                    .filter(|_| infra::provisioned(&hub)),
                ready: Some(infra::ready(&hub)),
                ..Default::default()
            };
            write_status(&ctx, &api, &obj, &hub, write, now).await?;
            ctx.retries.reset(&gate);
            Ok(Action::requeue(ctx.config.resync))
        }
        Created::Next(next) => Ok(requeue::action(&ctx.retries, &ctx.config, &gate, next, now)),
    }
}

/// After an API error: back off per MCMMachine.
pub(crate) fn error_policy(obj: Arc<MCMMachine>, error: &Error, ctx: Arc<InfraContext>) -> Action {
    let key = key_of(&*obj);
    crate::controllers::error::log_reconcile_failure!(error, mcmmachine = %key);
    Action::requeue(ctx.retries.fail(&format!("api:{key}"), error.retry_class(), &ctx.config, None))
}

fn create_key(obj: &MCMMachine) -> String {
    format!("create:{}", key_of(obj))
}

fn delete_key(obj: &MCMMachine) -> String {
    format!("delete:{}", key_of(obj))
}

/// The class of an MCMMachine with its driver and the request for its VM (`provider_id`: the one it names).
fn resolve_class(obj: &MCMMachine, ctx: &InfraContext, provider_id: Option<&str>) -> Result<Cloud, ClassProblem> {
    let (class, secret) = ctx.class_of(obj)?;
    let driver = ctx.drivers.get(&class.provider).map_err(|e| DriverError::new(Code::FailedPrecondition, e.message))?;
    let request = MachineRequest {
        machine: MachineInfo {
            name: obj.name_any(),
            namespace: obj.namespace().unwrap_or_default(),
            provider_id: provider_id.map(str::to_string),
            node_template: obj.spec.node_template.clone(),
            labels: obj.labels().clone(),
        },
        class,
        secret,
        last_known_state: obj.status.as_ref().and_then(|s| s.last_known_state.clone()),
    };
    Ok(Cloud { driver, request })
}

/// Deletion: the VM goes (idempotently; a VM already gone counts as deleted), then the finalizer, as the deletion
/// flow of a machine without a target cluster (`vm::delete`). Never blocked by a missing owner or Cluster; a
/// failure shows in the `Ready` condition and is retried with back-off.
async fn delete_flow(
    obj: &MCMMachine,
    hub: &Machine,
    api: &Api<MCMMachine>,
    ctx: &InfraContext,
    now: Timestamp,
) -> Result<Action, Error> {
    if !obj.finalizers().iter().any(|f| f == MACHINE_FINALIZER) {
        return Ok(Action::await_change());
    }
    let gate = delete_key(obj);
    if let Some(wait) = ctx.retries.waiting(&gate) {
        return Ok(Action::requeue(wait));
    }
    // A refused Secret is not used to delete either: the flow sees the refusal as the driver's error (without a
    // VM recorded there is nothing to delete; with one, the deletion waits for the identity to allow it again).
    let cloud = resolve_class(obj, ctx, create::provider_id(hub)).map_err(|p| p.error);
    let flavour = InfraVm { ctx, api, cloud, failure_domain: None, located: None, now };
    let next = vm::delete::run(&flavour, obj, hub, now).await?;
    Ok(requeue::action(&ctx.retries, &ctx.config, &gate, next, now))
}
