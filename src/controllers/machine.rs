//! The machine controller for machines that are not being deleted: class check, finalizer, health and node sync,
//! the create flow (`docs/machine-lifecycle.md` `reconcileClusterMachine`). Deleting machines are the termination
//! controller's ([`super::termination`]), on their own queue.
//!
//! Observe (the Machine from the store, its class, secrets and Node from stores), decide (`lifecycle`), act (driver
//! calls, patches of the fields we own, events), requeue at the next deadline.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use rand::Rng;
use serde_json::json;

use super::context::{Context, key_of};
use super::error::{Error, is_conflict, is_not_found};
use super::writes;
use crate::api::mcm::{Machine, MachineClass};
use crate::lifecycle::class::{self, ClassProblem};
use crate::lifecycle::create::{self, AfterCreate, AfterStatus};
use crate::lifecycle::health::{self, Health};
use crate::lifecycle::names::{JOIN_DURATION_ANNOTATION, MACHINE_FINALIZER};
use crate::lifecycle::status::{self, EventSpec, StatusPatch};
use crate::lifecycle::userdata::{self, BOOTSTRAP_TOKEN_NAMESPACE};
use crate::lifecycle::{Effective, RetryClass, clock, node_sync, replacement};
use crate::providers::{ClassInfo, Code, Driver, DriverError, MachineInfo, MachineRequest, SecretData};

/// When to look at the machine again.
pub(crate) enum Next {
    /// All done for now; at this deadline (or the resync period).
    Wake(Option<Timestamp>),
    /// A step failed; retry it after the back-off of `class`, but no later than `deadline`.
    Retry {
        /// The failure's class.
        class: RetryClass,
        /// A deadline the retry must not pass (a timeout that decides instead).
        deadline: Option<Timestamp>,
    },
    /// Still backing off from an earlier failure: look again after this long (the retry count stays).
    Sleep(Duration),
    /// Waiting for something else (the class, a replacement budget): look again after the back-off of `class`,
    /// counted apart from the flow's own failures, so the flow runs at once when the wait is over.
    Poll(RetryClass),
    /// The machine is gone or going; nothing to requeue.
    Done,
}

/// A little past a deadline, so the reconcile at it sees the deadline passed (status times have second precision).
const DEADLINE_SLACK: Duration = Duration::from_millis(50);

/// The requeue for `next`, at `now`; `gate` is the key whose retries are counted.
pub(crate) fn requeue(ctx: &Context, gate: &str, next: Next, now: Timestamp) -> Action {
    match next {
        Next::Done => Action::await_change(),
        Next::Sleep(d) => Action::requeue(d.min(ctx.config.resync)),
        Next::Poll(class) => Action::requeue(ctx.retries.fail(&format!("poll-{gate}"), class, &ctx.config, None)),
        Next::Wake(at) => {
            ctx.retries.reset(gate);
            let delay = at.map_or(ctx.config.resync, |at| clock::until(now, at) + DEADLINE_SLACK);
            Action::requeue(delay.min(ctx.config.resync))
        }
        Next::Retry { class, deadline } => {
            let cap = deadline.map(|d| clock::until(now, d) + DEADLINE_SLACK);
            Action::requeue(ctx.retries.fail(gate, class, &ctx.config, cap))
        }
    }
}

/// Reconciles a machine that is not being deleted.
pub(crate) async fn reconcile(machine: Arc<Machine>, ctx: Arc<Context>) -> Result<Action, Error> {
    if machine.metadata.deletion_timestamp.is_some() {
        // The termination controller's now.
        return Ok(Action::await_change());
    }
    if crate::lifecycle::names::paused(&machine.metadata) {
        // Hands off (`mcm migrate` hands the VM over); removing the annotation is a change that wakes us.
        return Ok(Action::await_change());
    }
    if ctx.freeze.frozen() {
        // An API server is unreachable (MCM's freeze): the unfreeze resets health timeouts and requeues us.
        return Ok(Action::requeue(ctx.config.resync));
    }
    ctx.ready().await;
    let now = Timestamp::now();
    let gate = format!("create:{}", key_of(&*machine));
    let next = run(&machine, &ctx, now, &gate).await?;
    ctx.retries.reset(&format!("api:{}", key_of(&*machine)));
    Ok(requeue(&ctx, &gate, next, now))
}

/// After an API error: back off per machine.
pub(crate) fn error_policy(machine: Arc<Machine>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&*machine);
    crate::controllers::error::log_reconcile_failure!(error, machine = %key);
    Action::requeue(ctx.retries.fail(&format!("api:{key}"), error.retry_class(), &ctx.config, None))
}

async fn run(machine: &Machine, ctx: &Context, now: Timestamp, gate: &str) -> Result<Next, Error> {
    let namespace = machine.namespace().unwrap_or_default();
    let api: Api<Machine> = Api::namespaced(ctx.control.clone(), &namespace);
    let effective = Effective::of(machine, &ctx.config);

    let class_ref = ObjectRef::new(&machine.spec.class.name).within(&namespace);
    let stored_class = ctx.classes.get(&class_ref);
    let class = match class::check_class(machine, stored_class.as_deref()) {
        Ok(class) => class,
        Err(ClassProblem::NoFinalizer(_)) => {
            // The class controller adds it at once, and its change wakes us; the poll is a backstop.
            return Ok(Next::Poll(RetryClass::Api));
        }
        Err(problem) => {
            ctx.publish(machine, EventSpec::warning("ClassNotReady", problem.to_string())).await;
            return Ok(Next::Poll(RetryClass::Other));
        }
    };
    ctx.retries.reset(&format!("poll-{gate}"));

    if !class::has_finalizer(machine.metadata.finalizers.as_ref(), MACHINE_FINALIZER) {
        writes::add_finalizer(&api, machine, MACHINE_FINALIZER).await?;
    }

    let mut wake = None;
    if let (Some(_), Some(node_name), Some(_)) = (&ctx.target, create::node_label(machine), status::phase(machine)) {
        let node = ctx.node(node_name);
        match health_step(machine, &api, ctx, node_name, node.as_deref(), now, &effective).await? {
            Some(Next::Wake(at)) => wake = at,
            Some(next) => return Ok(next),
            None => {}
        }
        if let Some(node) = &node {
            sync_node(machine, node, ctx).await?;
        }
    }

    if !create::needs_creation(machine) {
        return Ok(Next::Wake(wake));
    }
    let deadline = create::creation_deadline(machine, &effective);
    if let Some(patch) = create::crash_loop_expired(machine, now, &effective) {
        write_status(ctx, &api, machine, patch).await?;
        return Ok(Next::Wake(None));
    }
    if let Some(wait) = ctx.retries.waiting(gate) {
        // Woken by an event before the back-off ran out (often our own status write): keep waiting.
        let until_deadline = deadline.map(|d| clock::until(now, d) + DEADLINE_SLACK);
        return Ok(Next::Sleep(until_deadline.map_or(wait, |d| d.min(wait))));
    }
    let _creating = ctx.creating.enter(&key_of(machine));
    create_flow(machine, class, &api, ctx, now, &effective, deadline).await
}

/// Writes the part of `patch` that changes, with an event for a phase change.
pub(crate) async fn write_status(
    ctx: &Context,
    api: &Api<Machine>,
    machine: &Machine,
    patch: StatusPatch,
) -> Result<(), Error> {
    let patch = patch.minimize(machine.status.as_ref());
    if patch.is_empty() {
        return Ok(());
    }
    writes::status(api, machine, &patch).await?;
    if let Some(event) = status::phase_event(status::phase(machine), &patch) {
        tracing::info!(machine = %key_of(machine), phase = %event.reason, "{}", event.note);
        ctx.publish(machine, event).await;
    }
    Ok(())
}

/// Health: `None` to go on with node sync and creation, `Some` to stop here with that requeue.
async fn health_step(
    machine: &Machine,
    api: &Api<Machine>,
    ctx: &Context,
    node_name: &str,
    node: Option<&Node>,
    now: Timestamp,
    effective: &Effective,
) -> Result<Option<Next>, Error> {
    match health::decide(machine, node_name, node, now, effective) {
        Health::Steady { wake_at } => Ok(Some(Next::Wake(wake_at)).filter(|_| wake_at.is_some())),
        Health::Update { patch, joined, wake_at } => {
            write_status(ctx, api, machine, patch).await?;
            if let Some(took) = joined {
                joined_cluster(machine, api, ctx, took).await?;
            }
            Ok(Some(Next::Wake(wake_at)).filter(|_| wake_at.is_some()))
        }
        Health::DeferFailure => Ok(Some(Next::Poll(RetryClass::Other))),
        Health::MarkFailed { patch } => mark_failed(machine, api, ctx, patch, now).await.map(Some),
        Health::DeleteMachine { node } => {
            let note = format!("Node {node} was deleted; deleting machine {}", machine.name_any());
            tracing::info!(machine = %key_of(machine), "{note}");
            ctx.publish(machine, EventSpec::normal("NodeDeleted", note)).await;
            match api.delete(&machine.name_any(), &DeleteParams::default()).await {
                Ok(_) => Ok(Some(Next::Done)),
                Err(e) if is_not_found(&e) => Ok(Some(Next::Done)),
                Err(e) => Err(Error::kube("delete", format!("Machine {}", key_of(machine)), e)),
            }
        }
    }
}

/// The first join: the join duration annotation, and the bootstrap token goes.
async fn joined_cluster(machine: &Machine, api: &Api<Machine>, ctx: &Context, took: Duration) -> Result<(), Error> {
    let annotation = json!({"metadata": {"annotations": {JOIN_DURATION_ANNOTATION: clock::go(took)}}});
    writes::merge(api, machine, &annotation, "annotate").await?;
    if let Some(target) = &ctx.target {
        let secrets: Api<Secret> = Api::namespaced(target.clone(), BOOTSTRAP_TOKEN_NAMESPACE);
        let name = userdata::token_secret_name(&userdata::token_id(&machine.name_any()));
        match secrets.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Error::kube("delete bootstrap token", format!("Secret kube-system/{name}"), e)),
        }
    }
    Ok(())
}

/// Unknown too long: Failed, if the MachineDeployment's replacement budget allows (under its permit, counting
/// from the store, waiting for the store to see the change before the next machine is counted).
async fn mark_failed(
    machine: &Machine,
    api: &Api<Machine>,
    ctx: &Context,
    patch: StatusPatch,
    now: Timestamp,
) -> Result<Next, Error> {
    let namespace = machine.namespace().unwrap_or_default();
    let Some(deployment) = replacement::deployment(machine).map(str::to_string) else {
        write_status(ctx, api, machine, patch).await?;
        return Ok(Next::Wake(None));
    };
    let permit = ctx.permits.of(&format!("{namespace}/{deployment}"));
    let _held = permit.lock().await;
    let peers: Vec<Arc<Machine>> = ctx
        .machines
        .state()
        .into_iter()
        .filter(|m| {
            m.namespace().as_deref() == Some(namespace.as_str())
                && replacement::deployment(m) == Some(deployment.as_str())
        })
        .collect();
    let busy = replacement::in_progress(peers.iter().map(|m| &**m), now);
    if !replacement::may_mark_failed(busy, ctx.config.max_replacements) {
        tracing::info!(
            machine = %key_of(machine),
            deployment = %deployment,
            in_progress = busy,
            "not marking the machine Failed yet: other machines of its MachineDeployment are being replaced"
        );
        return Ok(Next::Poll(RetryClass::Transient));
    }
    write_status(ctx, api, machine, patch).await?;
    let key = ObjectRef::from_obj(machine);
    // Hold the permit until our own store shows the write (bounded: a slow watch must not block the deployment's
    // other machines for long), so the next machine of the deployment counts this one as being replaced.
    for _ in 0..250 {
        let seen = ctx.machines.get(&key);
        if seen.is_none_or(|m| status::phase(&m) != Some(&crate::api::mcm::MachinePhase::Unknown)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Next::Wake(None))
}

/// The node template and machine name onto the Node.
async fn sync_node(machine: &Machine, node: &Node, ctx: &Context) -> Result<(), Error> {
    let Some(target) = &ctx.target else { return Ok(()) };
    let Some(patch) = node_sync::node_patch(node, &machine.name_any(), machine.spec.node_template.as_ref()) else {
        return Ok(());
    };
    let nodes: Api<Node> = Api::all(target.clone());
    match writes::merge(&nodes, node, &patch, "sync the node template to").await {
        Ok(_) => Ok(()),
        // The Node changed meanwhile: its watch event brings us back with the new one.
        Err(Error::Kube { source, .. }) if is_conflict(&source) || is_not_found(&source) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The class as the driver sees it.
pub(crate) fn class_info(class: &MachineClass) -> ClassInfo {
    ClassInfo {
        name: class.name_any(),
        provider: class.spec.provider.clone().unwrap_or_default(),
        provider_spec: class.spec.provider_spec.clone(),
        node_template: class.spec.node_template.clone(),
    }
}

/// The merged secret data of a class (missing secrets are empty).
pub(crate) fn class_secrets(ctx: &Context, class: &MachineClass) -> SecretData {
    let namespace = class.namespace().unwrap_or_default();
    let get = |r: &Option<k8s_openapi::api::core::v1::SecretReference>| {
        let r = r.as_ref()?;
        let name = r.name.as_deref()?;
        ctx.secret(r.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(&namespace), name)
    };
    let primary = get(&class.spec.secret_ref);
    let credentials = get(&class.spec.credentials_secret_ref);
    userdata::merge_secret_data(primary.as_deref(), credentials.as_deref())
}

/// The machine as the driver sees it.
pub(crate) fn machine_info(machine: &Machine) -> MachineInfo {
    MachineInfo {
        name: machine.name_any(),
        namespace: machine.namespace().unwrap_or_default(),
        provider_id: create::provider_id(machine).map(str::to_string),
        node_template: machine.spec.node_template.clone(),
        labels: machine.labels().clone(),
    }
}

/// The bootstrap token for a machine: the existing Secret's, or a new one valid for the creation timeout.
async fn bootstrap_token(
    target: &kube::Client,
    machine: &Machine,
    ctx: &Context,
    effective: &Effective,
) -> Result<String, Error> {
    let secrets: Api<Secret> = Api::namespaced(target.clone(), BOOTSTRAP_TOKEN_NAMESPACE);
    let name = userdata::token_secret_name(&userdata::token_id(&machine.name_any()));
    let object = format!("Secret {BOOTSTRAP_TOKEN_NAMESPACE}/{name}");
    let existing = secrets.get_opt(&name).await.map_err(|e| Error::kube("get bootstrap token", object.clone(), e))?;
    if let Some(token) = existing.as_ref().and_then(userdata::token_of) {
        return Ok(token);
    }
    let secret: String = {
        let mut rng = rand::rng();
        (0..userdata::TOKEN_SECRET_LEN)
            .map(|_| userdata::TOKEN_SECRET_CHARSET[rng.random_range(0..userdata::TOKEN_SECRET_CHARSET.len())] as char)
            .collect()
    };
    let expires = clock::plus(Timestamp::now(), effective.creation_timeout);
    let wanted =
        userdata::token_secret(&machine.name_any(), &secret, expires, &ctx.config.bootstrap_token_auth_extra_groups);
    let stored = match secrets.create(&PostParams::default(), &wanted).await {
        Ok(created) => created,
        // Another reconcile made it first.
        Err(e) if is_conflict(&e) => {
            secrets.get(&name).await.map_err(|e| Error::kube("get bootstrap token", object.clone(), e))?
        }
        Err(e) => return Err(Error::kube("create bootstrap token", object, e)),
    };
    // A token Secret someone left without id or secret cannot be fixed here; a driver error names it.
    Ok(userdata::token_of(&stored).unwrap_or_default())
}

/// What the create flow knows about the VM once it exists.
struct Vm {
    provider_id: String,
    node_name: String,
    addresses: Vec<k8s_openapi::api::core::v1::NodeAddress>,
    initialize: bool,
    last_known_state: Option<String>,
}

/// The create flow: status first, then create or initialize by the answer, record the VM, set the status.
async fn create_flow(
    machine: &Machine,
    class: &MachineClass,
    api: &Api<Machine>,
    ctx: &Context,
    now: Timestamp,
    effective: &Effective,
    deadline: Option<Timestamp>,
) -> Result<Next, Error> {
    let retry = |class| Next::Retry { class, deadline };
    let driver: Arc<dyn Driver> = match ctx.drivers.get(class.spec.provider.as_deref().unwrap_or_default()) {
        Ok(driver) => driver,
        Err(e) => return fail_create(machine, api, ctx, &e, None, now, effective, deadline).await,
    };
    let token = match &ctx.target {
        Some(target) => Some(bootstrap_token(target, machine, ctx, effective).await?),
        None => None,
    };
    let secret = match userdata::template(
        &class_secrets(ctx, class),
        &class.name_any(),
        &machine.name_any(),
        token.as_deref(),
    ) {
        Ok(secret) => secret,
        Err(e) => {
            ctx.publish(machine, EventSpec::warning("MissingUserData", e.to_string())).await;
            return Ok(Next::Poll(RetryClass::Other));
        }
    };
    let mut request = MachineRequest {
        machine: machine_info(machine),
        class: class_info(class),
        secret,
        last_known_state: machine.status.as_ref().and_then(|s| s.last_known_state.clone()),
    };
    let name = machine.name_any();

    let vm = match create::after_status(driver.get_machine_status(&request).await, machine) {
        AfterStatus::Adopt(found) => Vm {
            provider_id: found.provider_id,
            node_name: found.node_name,
            addresses: found.addresses,
            initialize: false,
            last_known_state: None,
        },
        AfterStatus::TrustExisting => Vm {
            provider_id: create::provider_id(machine).unwrap_or_default().to_string(),
            node_name: create::node_label(machine).unwrap_or_default().to_string(),
            addresses: Vec::new(),
            initialize: false,
            last_known_state: None,
        },
        AfterStatus::Initialize => match driver.initialize_machine(&request).await {
            Ok(done) => Vm {
                provider_id: done.provider_id,
                node_name: done.node_name,
                addresses: done.addresses,
                initialize: false,
                last_known_state: None,
            },
            Err(e) => return fail_initialize(machine, api, ctx, &e, now, effective, deadline).await,
        },
        AfterStatus::Create => {
            // The store may have seen the deletion request since this reconcile began: then create nothing (the
            // termination controller waits for this flow, and would otherwise find no VM to delete).
            let latest = ctx.machines.get(&ObjectRef::from_obj(machine));
            if latest.is_none_or(|m| m.metadata.deletion_timestamp.is_some()) {
                return Ok(Next::Done);
            }
            let created = driver.create_machine(&request).await;
            let decision = create::after_create(created, &name, |node| ctx.node(node).is_some());
            match decision {
                AfterCreate::Created(created) => {
                    let note = format!("Created VM {} for machine {name}", created.provider_id);
                    tracing::info!(machine = %key_of(machine), provider_id = %created.provider_id, "created a VM");
                    ctx.publish(machine, EventSpec::normal("SuccessfulCreate", note)).await;
                    Vm {
                        provider_id: created.provider_id,
                        node_name: created.node_name,
                        addresses: created.addresses,
                        initialize: true,
                        last_known_state: created.last_known_state,
                    }
                }
                AfterCreate::StaleNode(created) => {
                    let mut stale = request.clone();
                    stale.machine.provider_id = Some(created.provider_id.clone());
                    if let Err(e) = driver.delete_machine(&stale).await {
                        tracing::warn!(machine = %key_of(machine), error = %e, "deleting the VM of a stale node failed; will be retried");
                    }
                    let note = format!(
                        "VM {} would use the existing Node {} of an old VM; deleted it",
                        created.provider_id, created.node_name
                    );
                    ctx.publish(machine, EventSpec::warning("StaleNode", note)).await;
                    write_status(ctx, api, machine, create::stale_node(now)).await?;
                    return Ok(retry(RetryClass::Transient));
                }
                AfterCreate::Failed(e) => {
                    return fail_create(machine, api, ctx, &e, None, now, effective, deadline).await;
                }
            }
        }
        AfterStatus::Failed(e) => return fail_create(machine, api, ctx, &e, None, now, effective, deadline).await,
    };

    if vm.provider_id.is_empty() || (ctx.target.is_some() && vm.node_name.is_empty()) {
        let e = DriverError::new(Code::Internal, "the driver returned no providerID or node name for the VM");
        return fail_create(machine, api, ctx, &e, vm.last_known_state, now, effective, deadline).await;
    }
    if let Some(patch) = create::adoption_patch(machine, &vm.node_name, &vm.provider_id, ctx.target.is_some()) {
        writes::merge(api, machine, &patch, "record the VM on").await?;
    }
    if vm.initialize {
        request.machine.provider_id = Some(vm.provider_id.clone());
        match driver.initialize_machine(&request).await {
            Ok(_) => {}
            Err(e) if e.code == Code::Unimplemented => {}
            Err(e) => return fail_initialize(machine, api, ctx, &e, now, effective, deadline).await,
        }
    }
    let mut patch =
        create::created(machine, ctx.target.is_some(), &vm.node_name, &vm.addresses, now).unwrap_or_default();
    patch.last_known_state = vm.last_known_state.filter(|s| !s.is_empty());
    write_status(ctx, api, machine, patch).await?;
    Ok(Next::Wake(deadline.filter(|_| ctx.target.is_some())))
}

#[allow(clippy::too_many_arguments)]
async fn fail_create(
    machine: &Machine,
    api: &Api<Machine>,
    ctx: &Context,
    error: &DriverError,
    last_known_state: Option<String>,
    now: Timestamp,
    effective: &Effective,
    deadline: Option<Timestamp>,
) -> Result<Next, Error> {
    let (patch, class) = create::create_failure(machine, error, last_known_state, now, effective);
    failed(machine, api, ctx, patch, class, "FailedCreate", error, deadline).await
}

async fn fail_initialize(
    machine: &Machine,
    api: &Api<Machine>,
    ctx: &Context,
    error: &DriverError,
    now: Timestamp,
    effective: &Effective,
    deadline: Option<Timestamp>,
) -> Result<Next, Error> {
    let (patch, class) = create::initialize_failure(machine, error, now, effective);
    failed(machine, api, ctx, patch, class, "FailedInitialize", error, deadline).await
}

#[allow(clippy::too_many_arguments)]
async fn failed(
    machine: &Machine,
    api: &Api<Machine>,
    ctx: &Context,
    patch: StatusPatch,
    class: RetryClass,
    reason: &'static str,
    error: &DriverError,
    deadline: Option<Timestamp>,
) -> Result<Next, Error> {
    tracing::info!(machine = %key_of(machine), error = %error, "{reason}");
    let description = patch.last_operation.as_ref().and_then(|o| o.description.clone()).unwrap_or_default();
    let terminal = patch.new_phase() == Some(&crate::api::mcm::MachinePhase::Failed);
    ctx.publish(machine, EventSpec::warning(reason, description)).await;
    write_status(ctx, api, machine, patch).await?;
    if terminal {
        return Ok(Next::Wake(None));
    }
    Ok(Next::Retry { class, deadline })
}
