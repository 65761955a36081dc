//! The MCMMachine controller: one VM per MCMMachine (`docs/infrastructure-provider.md`).
//!
//! Observe (the MCMMachine, its owning Machine and Cluster, the bootstrap Secret, the class, from stores), decide
//! (CAPI's gates in [`crate::lifecycle::infra`]; the VM's create and delete flow in [`crate::lifecycle::create`]
//! and [`crate::lifecycle::delete`], run on the hub view of the MCMMachine), act (driver calls, `spec.providerID`
//! first, then one status patch with MCM's fields, the contract fields and the conditions).

use std::sync::Arc;

use jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::{Map, Value, json};

use super::InfraContext;
use crate::api::capi;
use crate::api::infra::MCMMachine;
use crate::api::mcm::{Machine, MachineClass, MachinePhase};
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::Error;
use crate::controllers::writes;
use crate::convert::machine::to_hub;
use crate::lifecycle::infra::{self, BOOTSTRAP_DATA_KEY, Gate, MACHINE_FINALIZER, condition};
use crate::lifecycle::names::{MACHINE_CLASS_KIND, USER_DATA_KEY};
use crate::lifecycle::status::{self, EventSpec, StatusPatch};
use crate::lifecycle::userdata::merge_secret_data;
use crate::lifecycle::{Effective, RetryClass, clock, create, delete};
use crate::providers::{ClassInfo, Code, Driver, DriverError, MachineInfo, MachineRequest, SecretData};

/// A little past a deadline, so the reconcile at it sees the deadline passed.
const DEADLINE_SLACK: std::time::Duration = std::time::Duration::from_millis(50);

/// What one reconcile writes into the MCMMachine's status besides MCM's fields.
#[derive(Default)]
struct Write {
    /// MCM's fields (phase, lastOperation, lastKnownState, addresses).
    patch: StatusPatch,
    /// `status.initialization.provisioned`.
    provisioned: Option<bool>,
    /// `status.failureDomain`.
    failure_domain: Option<String>,
    /// The `Ready` condition.
    ready: Option<(bool, &'static str, String)>,
    /// The `Paused` condition.
    paused: bool,
}

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

    let resolved = match resolve_class(&obj, &ctx) {
        Ok(resolved) => resolved,
        Err(problem) => {
            publish_to(&ctx.recorder, &*obj, EventSpec::warning("InvalidClass", problem.clone())).await;
            let ready = Some((false, infra::reason::INVALID_CLASS, problem));
            write_status(&ctx, &api, &obj, &hub, Write { ready, ..Default::default() }, now).await?;
            return Ok(Action::requeue(ctx.retries.fail(&poll_key(&obj), RetryClass::Other, &ctx.config, None)));
        }
    };
    ctx.retries.reset(&poll_key(&obj));
    let failure_domain = owner.as_ref().and_then(|o| o.spec.failure_domain.clone()).filter(|f| !f.is_empty());
    let failure_domain = obj.spec.failure_domain.clone().or(failure_domain);
    let mut secret = resolved.secrets;
    if let Some(data) = user_data {
        secret.0.insert(USER_DATA_KEY.to_string(), data);
    }
    let class = ClassInfo {
        provider_spec: infra::place(&resolved.class.provider, &resolved.class.provider_spec, failure_domain.as_deref()),
        ..resolved.class
    };
    let request = MachineRequest {
        machine: MachineInfo {
            name: obj.name_any(),
            namespace: namespace.clone(),
            provider_id: create::provider_id(&hub).map(str::to_string),
            node_template: obj.spec.node_template.clone(),
            labels: obj.labels().clone(),
        },
        class,
        secret,
        last_known_state: obj.status.as_ref().and_then(|s| s.last_known_state.clone()),
    };
    create_flow(&obj, &hub, resolved.driver, request, failure_domain, &api, &ctx, now).await
}

/// After an API error: back off per MCMMachine.
pub(crate) fn error_policy(obj: Arc<MCMMachine>, error: &Error, ctx: Arc<InfraContext>) -> Action {
    let key = key_of(&*obj);
    crate::controllers::error::log_reconcile_failure!(error, mcmmachine = %key);
    Action::requeue(ctx.retries.fail(&format!("api:{key}"), error.retry_class(), &ctx.config, None))
}

fn poll_key(obj: &MCMMachine) -> String {
    format!("poll-class:{}", key_of(obj))
}

fn create_key(obj: &MCMMachine) -> String {
    format!("create:{}", key_of(obj))
}

fn delete_key(obj: &MCMMachine) -> String {
    format!("delete:{}", key_of(obj))
}

/// A class the driver can be asked with.
struct Resolved {
    driver: Arc<dyn Driver>,
    class: ClassInfo,
    secrets: SecretData,
}

/// The class of an MCMMachine: exactly one of a referenced MachineClass and an inline class, with its driver and
/// merged credentials; `Err` says what is wrong.
fn resolve_class(obj: &MCMMachine, ctx: &InfraContext) -> Result<Resolved, String> {
    let namespace = obj.namespace().unwrap_or_default();
    let secret = |r: Option<&k8s_openapi::api::core::v1::SecretReference>| {
        let r = r?;
        let ns = r.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(&namespace);
        ctx.secret(ns, r.name.as_deref()?)
    };
    let (class, secrets) = match (&obj.spec.class, &obj.spec.inline_class) {
        (Some(_), Some(_)) => return Err("spec.class and spec.inlineClass are both set; set exactly one".into()),
        (None, None) => return Err("neither spec.class nor spec.inlineClass is set; set exactly one".into()),
        (Some(r), None) => {
            if r.kind != MACHINE_CLASS_KIND {
                return Err(format!("spec.class.kind is {:?}; only {MACHINE_CLASS_KIND:?} is supported", r.kind));
            }
            let Some(class) = ctx.classes.get(&ObjectRef::<MachineClass>::new(&r.name).within(&namespace)) else {
                return Err(format!("MachineClass {namespace}/{} does not exist", r.name));
            };
            let secrets = merge_secret_data(
                secret(class.spec.secret_ref.as_ref()).as_deref(),
                secret(class.spec.credentials_secret_ref.as_ref()).as_deref(),
            );
            (crate::controllers::machine::class_info(&class), secrets)
        }
        (None, Some(inline)) => {
            let info = ClassInfo {
                name: obj.name_any(),
                provider: inline.provider.clone(),
                provider_spec: inline.provider_spec.clone(),
                node_template: inline.node_template.clone(),
            };
            (info, merge_secret_data(None, secret(inline.credentials_secret_ref.as_ref()).as_deref()))
        }
    };
    // The class's own userData is not used: CAPI's bootstrap data replaces it.
    let mut secrets = secrets;
    secrets.0.remove(USER_DATA_KEY);
    let driver = ctx.drivers.get(&class.provider).map_err(|e| e.to_string())?;
    Ok(Resolved { driver, class, secrets })
}

/// What the create flow knows of the VM once it exists.
struct Vm {
    provider_id: String,
    node_name: String,
    addresses: Vec<k8s_openapi::api::core::v1::NodeAddress>,
    initialize: bool,
    last_known_state: Option<String>,
}

/// MCM's create flow on the hub view: status first (a restart never creates twice), then create or initialize by
/// the answer, `spec.providerID` before the status.
#[allow(clippy::too_many_arguments)]
async fn create_flow(
    obj: &MCMMachine,
    hub: &Machine,
    driver: Arc<dyn Driver>,
    mut request: MachineRequest,
    failure_domain: Option<String>,
    api: &Api<MCMMachine>,
    ctx: &InfraContext,
    now: Timestamp,
) -> Result<Action, Error> {
    let effective = Effective::of(hub, &ctx.config);
    let gate = create_key(obj);
    // Reported in status: the Machine's failure domain, or else the zone the class itself names.
    let located =
        failure_domain.clone().or_else(|| infra::zone_of(&request.class.provider, &request.class.provider_spec));
    if !create::needs_creation(hub) {
        // Provisioned (or Failed for good): keep the contract fields and conditions in line.
        let write = Write {
            provisioned: infra::provisioned(hub).then_some(true),
            failure_domain: located.filter(|_| infra::provisioned(hub)),
            ready: Some(infra::ready(hub)),
            ..Default::default()
        };
        write_status(ctx, api, obj, hub, write, now).await?;
        ctx.retries.reset(&gate);
        return Ok(Action::requeue(ctx.config.resync));
    }
    let deadline = create::creation_deadline(hub, &effective);
    if let Some(patch) = create::crash_loop_expired(hub, now, &effective) {
        let ready = Some(infra::ready(&after(hub, &patch)));
        write_status(ctx, api, obj, hub, Write { patch, ready, ..Default::default() }, now).await?;
        return Ok(Action::requeue(ctx.config.resync));
    }
    if let Some(wait) = ctx.retries.waiting(&gate) {
        let until_deadline = deadline.map(|d| clock::until(now, d) + DEADLINE_SLACK);
        return Ok(Action::requeue(until_deadline.map_or(wait, |d| d.min(wait))));
    }
    let name = obj.name_any();
    let vm = match create::after_status(driver.get_machine_status(&request).await, hub) {
        create::AfterStatus::Adopt(found) => Vm {
            provider_id: found.provider_id,
            node_name: found.node_name,
            addresses: found.addresses,
            initialize: false,
            last_known_state: None,
        },
        create::AfterStatus::Initialize => match driver.initialize_machine(&request).await {
            Ok(done) => Vm {
                provider_id: done.provider_id,
                node_name: done.node_name,
                addresses: done.addresses,
                initialize: false,
                last_known_state: None,
            },
            Err(e) => {
                let (patch, class) = create::initialize_failure(hub, &e, now, &effective);
                return failed(obj, hub, api, ctx, patch, class, "FailedInitialize", deadline, now).await;
            }
        },
        // An MCMMachine that already names its VM (adopted by `mcm migrate`, or moved by clusterctl, which drops
        // status) is never given a second one when the driver cannot find or look up the first: MCM trusts a
        // machine's providerID the same way (its `TrustExisting`); the creation and health timeouts judge the VM.
        create::AfterStatus::Create | create::AfterStatus::TrustExisting if create::provider_id(hub).is_some() => {
            let provider_id = create::provider_id(hub).unwrap_or_default().to_string();
            tracing::info!(mcmmachine = %key_of(obj), %provider_id, "VM not found by the driver; trusting spec.providerID");
            Vm {
                provider_id,
                node_name: String::new(),
                addresses: Vec::new(),
                initialize: false,
                last_known_state: None,
            }
        }
        // Without a providerID (the hub view of an MCMMachine has no `node` label), NotFound means "create".
        create::AfterStatus::Create | create::AfterStatus::TrustExisting => {
            let latest = ctx.machines.get(&ObjectRef::from_obj(obj));
            if latest.is_none_or(|m| m.metadata.deletion_timestamp.is_some()) {
                return Ok(Action::await_change());
            }
            match create::after_create(driver.create_machine(&request).await, &name, |_| false) {
                create::AfterCreate::Created(created) | create::AfterCreate::StaleNode(created) => {
                    let note = format!("Created VM {} for MCMMachine {name}", created.provider_id);
                    tracing::info!(mcmmachine = %key_of(obj), provider_id = %created.provider_id, "created a VM");
                    publish_to(&ctx.recorder, obj, EventSpec::normal("SuccessfulCreate", note)).await;
                    Vm {
                        provider_id: created.provider_id,
                        node_name: created.node_name,
                        addresses: created.addresses,
                        initialize: true,
                        last_known_state: created.last_known_state,
                    }
                }
                create::AfterCreate::Failed(e) => {
                    let (patch, class) = create::create_failure(hub, &e, None, now, &effective);
                    return failed(obj, hub, api, ctx, patch, class, "FailedCreate", deadline, now).await;
                }
            }
        }
        create::AfterStatus::Failed(e) => {
            let (patch, class) = create::create_failure(hub, &e, None, now, &effective);
            return failed(obj, hub, api, ctx, patch, class, "FailedCreate", deadline, now).await;
        }
    };
    if vm.provider_id.is_empty() {
        let e = DriverError::new(Code::Internal, "the driver returned no providerID for the VM");
        let (patch, class) = create::create_failure(hub, &e, vm.last_known_state, now, &effective);
        return failed(obj, hub, api, ctx, patch, class, "FailedCreate", deadline, now).await;
    }
    // Identity in spec first (clusterctl move drops status): a restart from here adopts the VM.
    let mut spec = Map::new();
    if obj.spec.provider_id.as_deref() != Some(vm.provider_id.as_str()) {
        spec.insert("providerID".into(), json!(vm.provider_id));
    }
    if obj.spec.failure_domain.is_none()
        && let Some(fd) = &failure_domain
    {
        spec.insert("failureDomain".into(), json!(fd));
    }
    // The spec write bumps the generation: the conditions below must observe the new one.
    let recorded = if spec.is_empty() {
        None
    } else {
        Some(writes::merge(api, obj, &json!({ "spec": spec }), "record the VM on").await?)
    };
    let obj = recorded.as_ref().unwrap_or(obj);
    if vm.initialize {
        request.machine.provider_id = Some(vm.provider_id.clone());
        match driver.initialize_machine(&request).await {
            Ok(_) => {}
            Err(e) if e.code == Code::Unimplemented => {}
            Err(e) => {
                let (patch, class) = create::initialize_failure(hub, &e, now, &effective);
                return failed(obj, hub, api, ctx, patch, class, "FailedInitialize", deadline, now).await;
            }
        }
    }
    let mut patch = create::created(hub, false, &vm.node_name, &vm.addresses, now).unwrap_or_default();
    patch.last_known_state = vm.last_known_state.filter(|s| !s.is_empty());
    let mut provisioned_hub = after(hub, &patch);
    provisioned_hub.spec.provider_id = Some(vm.provider_id.clone());
    let write = Write {
        patch,
        provisioned: Some(true),
        failure_domain: located,
        ready: Some(infra::ready(&provisioned_hub)),
        ..Default::default()
    };
    write_status(ctx, api, obj, hub, write, now).await?;
    ctx.retries.reset(&gate);
    Ok(Action::requeue(ctx.config.resync))
}

/// The hub view with `patch` applied.
fn after(hub: &Machine, patch: &StatusPatch) -> Machine {
    let mut next = hub.clone();
    patch.apply_to(next.status.get_or_insert_with(Default::default));
    next
}

/// A failed create step: status (CrashLoopBackOff or Failed) and condition, an event, and the back-off.
#[allow(clippy::too_many_arguments)]
async fn failed(
    obj: &MCMMachine,
    hub: &Machine,
    api: &Api<MCMMachine>,
    ctx: &InfraContext,
    patch: StatusPatch,
    class: RetryClass,
    reason: &'static str,
    deadline: Option<Timestamp>,
    now: Timestamp,
) -> Result<Action, Error> {
    let description = patch.last_operation.as_ref().and_then(|o| o.description.clone()).unwrap_or_default();
    tracing::info!(mcmmachine = %key_of(obj), "{reason}: {description}");
    publish_to(&ctx.recorder, obj, EventSpec::warning(reason, description)).await;
    let terminal = patch.new_phase() == Some(&MachinePhase::Failed);
    let ready = Some(infra::ready(&after(hub, &patch)));
    write_status(ctx, api, obj, hub, Write { patch, ready, ..Default::default() }, now).await?;
    if terminal {
        return Ok(Action::requeue(ctx.config.resync));
    }
    let cap = deadline.map(|d| clock::until(now, d) + DEADLINE_SLACK);
    Ok(Action::requeue(ctx.retries.fail(&create_key(obj), class, &ctx.config, cap)))
}

/// Deletion: the VM goes (idempotently; a VM already gone counts as deleted), then the finalizer. Never blocked
/// by a missing owner or Cluster; a failure shows in the `Ready` condition and is retried with back-off.
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
    let mut patch = StatusPatch::default();
    if status::phase(hub) != Some(&MachinePhase::Terminating) {
        patch = delete::terminating(now);
    }
    let resolved = match resolve_class(obj, ctx) {
        Ok(resolved) => resolved,
        Err(problem)
            if create::provider_id(hub).is_none() && obj.spec.class.is_none() == obj.spec.inline_class.is_none() =>
        {
            // Neither or both classes: no driver was ever asked for this machine.
            tracing::info!(mcmmachine = %key_of(obj), "no valid class, so no VM: releasing ({problem})");
            writes::remove_finalizer(api, obj, MACHINE_FINALIZER).await?;
            ctx.retries.forget(&key_of(obj));
            return Ok(Action::await_change());
        }
        Err(problem) => {
            let message = format!("Cannot delete the VM: {problem}");
            publish_to(&ctx.recorder, obj, EventSpec::warning("FailedDelete", message.clone())).await;
            let ready = Some((false, infra::reason::DELETION_FAILED, message));
            write_status(ctx, api, obj, hub, Write { patch, ready, ..Default::default() }, now).await?;
            return Ok(Action::requeue(ctx.retries.fail(&gate, RetryClass::Other, &ctx.config, None)));
        }
    };
    let request = MachineRequest {
        machine: MachineInfo {
            name: obj.name_any(),
            namespace: obj.namespace().unwrap_or_default(),
            provider_id: create::provider_id(hub).map(str::to_string),
            node_template: obj.spec.node_template.clone(),
            labels: obj.labels().clone(),
        },
        class: resolved.class,
        secret: resolved.secrets,
        last_known_state: obj.status.as_ref().and_then(|s| s.last_known_state.clone()),
    };
    let result = resolved.driver.delete_machine(&request).await;
    let error = result.as_ref().err().cloned();
    let outcome = delete::after_vm_delete(hub, result.map(|r| r.last_known_state));
    match outcome.retry {
        None => {
            let note = match &request.machine.provider_id {
                Some(id) => format!("Deleted VM {id}"),
                None => "Deleted the VMs of the machine".to_string(),
            };
            tracing::info!(mcmmachine = %key_of(obj), "{note}");
            publish_to(&ctx.recorder, obj, EventSpec::normal("SuccessfulDelete", note)).await;
            writes::remove_finalizer(api, obj, MACHINE_FINALIZER).await?;
            ctx.retries.forget(&key_of(obj));
            Ok(Action::await_change())
        }
        Some(class) => {
            let ready = Some(infra::deleting(error.as_ref()));
            let message = ready.as_ref().map(|r| r.2.clone()).unwrap_or_default();
            publish_to(&ctx.recorder, obj, EventSpec::warning("FailedDelete", message)).await;
            let patch = patch.and(outcome.patch(now));
            write_status(ctx, api, obj, hub, Write { patch, ready, ..Default::default() }, now).await?;
            Ok(Action::requeue(ctx.retries.fail(&gate, class, &ctx.config, None)))
        }
    }
}

/// Writes what changed: MCM's fields, the contract fields, the conditions; one status patch, or none.
async fn write_status(
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
