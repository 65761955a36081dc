//! The machine controller for machines that are not being deleted: class check, finalizer, health and node sync,
//! then the create flow (`docs/machine-lifecycle.md` `reconcileClusterMachine`), carried out by [`super::vm::create`].
//! Deleting machines are the termination controller's ([`super::termination`]), on their own queue.
//!
//! Observe (the Machine from the store, its class, secrets and Node from stores), decide (`lifecycle`), act (driver
//! calls, patches of the fields we own, events), requeue at the next deadline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::context::{Context, key_of};
use super::driver_request::class_secrets;
use super::error::{Error, is_conflict, is_not_found};
use super::vm::create::Created;
use super::vm::machine::MachineVm;
use super::{requeue, superseded, vm, writes};
use crate::api::mcm::names::{JOIN_DURATION_ANNOTATION, MACHINE_FINALIZER};
use crate::api::mcm::{Machine, MachinePhase};
use crate::lifecycle::class::{self, ClassProblem};
use crate::lifecycle::create;
use crate::lifecycle::health::{self, Health};
use crate::lifecycle::requeue::Next;
use crate::lifecycle::status::{self, EventSpec, StatusPatch};
use crate::lifecycle::userdata::{self, BOOTSTRAP_TOKEN_NAMESPACE};
use crate::lifecycle::{Effective, RetryClass, clock, node_sync, replacement};
use crate::metrics::Step;

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
    if ctx.superseded.holds(&*machine) {
        // The store has not seen our last write yet: its watch event brings us back with it.
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let gate = format!("create:{}", key_of(&*machine));
    let (next, writes) = superseded::tracking(run(&machine, &ctx, now, &gate)).await;
    ctx.superseded.absorb(writes);
    let next = next?;
    ctx.retries.reset(&format!("api:{}", key_of(&*machine)));
    Ok(requeue::action(&ctx.retries, &ctx.config, &gate, next, now))
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
    requeue::poll_over(&ctx.retries, gate);

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
            let virtual_capacity = class.spec.node_template.as_ref().and_then(|t| t.virtual_capacity.as_ref());
            sync_node(machine, node, virtual_capacity, ctx).await?;
            if let Some(target) = &ctx.target {
                let sink = MachineStatus { ctx, api: &api, machine };
                let cloud = MachineVm::new(ctx, machine, None).cloud_of(machine).ok();
                let access = super::in_place::NodeAccess {
                    client: target,
                    drain: ctx.drain.as_ref().unwrap_or(target),
                    driver: cloud.as_ref().map(|c| &*c.driver),
                };
                let config = (&ctx.config, &effective);
                if let Some(next) = super::in_place::step(machine, node, access, config, now, &sink).await? {
                    return Ok(next);
                }
            }
        }
    }

    if let Some(next) = super::preservation::step(machine, &api, ctx, &effective, now, &mut wake).await? {
        return Ok(next);
    }

    if !create::needs_creation(machine) {
        return Ok(Next::Wake(wake));
    }
    let _creating = ctx.creating.enter(&key_of(machine));
    let flavour = MachineVm::new(ctx, machine, Some(class));
    match vm::create::run(&flavour, machine, machine, now, ctx.retries.waiting(gate)).await? {
        Created::Provisioned => Ok(Next::Wake(wake)),
        Created::Next(next) => Ok(next),
    }
}

/// The machine's own status, for the in-place step.
struct MachineStatus<'a> {
    ctx: &'a Context,
    api: &'a Api<Machine>,
    machine: &'a Machine,
}

impl super::in_place::InPlaceSink for MachineStatus<'_> {
    async fn write(&self, patch: StatusPatch) -> Result<(), Error> {
        writes::machine_status(self.ctx, self.api, self.machine, patch).await
    }
    async fn event(&self, event: EventSpec) {
        self.ctx.publish(self.machine, event).await;
    }
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
            // MCM's join metrics: the first join's duration, or Pending -> Failed at the creation timeout.
            let failed_join = status::phase(machine) == Some(&MachinePhase::Pending)
                && patch.current_status.as_ref().and_then(|c| c.phase.as_ref()) == Some(&MachinePhase::Failed);
            writes::machine_status(ctx, api, machine, patch).await?;
            let class = ObjectRef::new(&machine.spec.class.name).within(&machine.namespace().unwrap_or_default());
            let class = ctx.classes.get(&class);
            let instance_type =
                class.as_ref().and_then(|c| Some(c.spec.node_template.as_ref()?.instance_type.as_str()));
            if failed_join {
                ctx.metrics.machines.failed_to_join(machine, instance_type);
            }
            if let Some(took) = joined {
                ctx.metrics.machines.record(Step::Join, machine, instance_type, took);
                joined_cluster(machine, api, ctx, took).await?;
            }
            Ok(Some(Next::Wake(wake_at)).filter(|_| wake_at.is_some()))
        }
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
    // No token was made for user data without the placeholder (one left behind expires with the creation timeout).
    let class =
        ctx.classes.get(&ObjectRef::new(&machine.spec.class.name).within(&machine.namespace().unwrap_or_default()));
    let token_made = class.is_none_or(|class| {
        userdata::wants_token(&class_secrets(&class, &|namespace, name| ctx.secret(namespace, name)))
    });
    if let (Some(target), true) = (&ctx.target, token_made) {
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
        writes::machine_status(ctx, api, machine, patch).await?;
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
                // Not itself: an InPlaceUpdateFailed machine would count itself and never be replaced (MCM's bug).
                && m.name_any() != machine.name_any()
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
    writes::machine_status(ctx, api, machine, patch).await?;
    let key = ObjectRef::from_obj(machine);
    // Hold the permit until our own store shows the write (bounded: a slow watch must not block the deployment's
    // other machines for long), so the next machine of the deployment counts this one as being replaced.
    for _ in 0..250 {
        let seen = ctx.machines.get(&key);
        if seen.is_none_or(|m| status::phase(&m) == Some(&crate::api::mcm::MachinePhase::Failed)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Next::Wake(None))
}

/// MCM's node finalizer, the node template and machine name onto the Node, and the class's virtual capacity into
/// its status.
async fn sync_node(
    machine: &Machine,
    node: &Node,
    virtual_capacity: Option<&BTreeMap<String, Quantity>>,
    ctx: &Context,
) -> Result<(), Error> {
    let Some(target) = &ctx.target else { return Ok(()) };
    if ctx.superseded.holds(node) {
        // Our last write to the Node is not in the store yet; its watch event brings us back.
        return Ok(());
    }
    let nodes: Api<Node> = Api::all(target.clone());
    let result = async {
        if let Some(patch) = node_sync::node_write(node, &machine.name_any(), machine.spec.node_template.as_ref()) {
            writes::strategic(&nodes, node, &patch, "sync the finalizer and node template to").await?;
        }
        if let Some(capacity) = node_sync::virtual_capacity_patch(node, virtual_capacity) {
            writes::merge_status(&nodes, node, &capacity.status, "put the virtual capacity on").await?;
            writes::merge(&nodes, node, &capacity.record, "record the virtual capacity on").await?;
        }
        Ok(())
    }
    .await;
    match result {
        // The Node changed meanwhile: its watch event brings us back with the new one.
        Err(Error::Kube { source, .. }) if is_conflict(&source) || is_not_found(&source) => Ok(()),
        other => other,
    }
}
