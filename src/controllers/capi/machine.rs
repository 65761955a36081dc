//! The Machine controller on CAPI objects (what upstream core's Machine controller does, with MCM's semantics):
//! status and phase from the MCMMachine and the Node (`lifecycle::capi_machine::plan_machine`), `spec.providerID`
//! copied from the MCMMachine, and the deletion: pre-drain hooks, cordon and drain within
//! `spec.deletion.nodeDrainTimeoutSeconds` (`drain`), pre-terminate hooks, the MCMMachine deleted and waited for,
//! the Node deleted, then the finalizer removed.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, Patch};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::CapiContext;
use crate::api::capi::{Machine, MachineStatus};
use crate::api::infra::MCMMachine;
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::{Error, is_not_found};
use crate::controllers::workload::RECHECK_DOWN;
use crate::controllers::writes;
use crate::controllers::writes::patch_params as params;
use crate::drain::{self, DrainError, DrainOptions};
use crate::lifecycle::capi_bootstrap::{BootstrapPlan, Config, POLL, config_ref, plan_bootstrap};
use crate::lifecycle::capi_machine::{
    DeletionObservation, DeletionStep, MACHINE_FINALIZER, MachineObservation, condition, deletion_step, infra_adoption,
    merge_conditions, phase, plan_machine, rebase_conditions,
};
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::status_patch;

/// Reasons of the `Deleting` condition that say the drain is behind us.
const DRAINED_REASONS: [&str; 5] = [
    "DrainingSucceeded",
    "DrainingSkipped",
    "WaitingForPreTerminateHook",
    "WaitingForInfrastructureDeletion",
    "DeletingNode",
];

fn describe(m: &Machine) -> String {
    format!("Machine {}", key_of(m))
}

/// Reconciles a CAPI Machine.
pub(super) async fn reconcile(m: Arc<Machine>, ctx: Arc<CapiContext>) -> Result<Action, Error> {
    ctx.ready().await;
    let conditions = m.status.as_ref().and_then(|s| s.conditions.as_ref());
    if super::hold_if_paused(&ctx, &*m, &m.spec.cluster_name, conditions).await?.is_some() {
        return Ok(Action::await_change());
    }
    if super::left_to_upstream_core(&ctx, &*m, Some(&ctx.machine_events), Some(MACHINE_FINALIZER)).await? {
        return Ok(Action::await_change());
    }
    let api: Api<Machine> = Api::namespaced(ctx.control.clone(), &m.namespace().unwrap_or_default());
    let has_finalizer = m.finalizers().iter().any(|f| f == MACHINE_FINALIZER);
    if m.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        return delete(&m, &api, &ctx).await;
    }
    if !has_finalizer {
        writes::add_finalizer(&api, &*m, MACHINE_FINALIZER).await?;
    }
    let infra = ctx.infra_of(&m);
    if let Some(infra) = &infra {
        take_infra(&ctx, &m, infra).await?;
    }
    let bootstrap = bootstrap(&ctx, &m, &api).await?;
    let provider_id = infra.as_ref().and_then(|i| i.spec.provider_id.clone()).or_else(|| m.spec.provider_id.clone());
    let workload = ctx.workloads.get(&m.namespace().unwrap_or_default(), &m.spec.cluster_name).await;
    let node = provider_id.as_deref().filter(|p| !p.is_empty()).and_then(|p| workload.nodes()?.node_by_provider_id(p));
    let connection_down = workload.down();
    // An in-place update under way (the Node's labels drive it), before the status that shows it.
    let in_place_after = match (&infra, &node, workload.nodes()) {
        (Some(infra), Some(node), Some(nodes)) => {
            super::in_place::pass(&ctx, &m, infra, node, nodes, Timestamp::now()).await?
        }
        _ => None,
    };
    let configuration = infra.as_ref().map(|i| i.spec.configuration.clone()).unwrap_or_default();
    let creation_timeout = configuration.creation_timeout.map_or(ctx.config.creation_timeout, |d| d.as_std());
    let health_timeout = match configuration.disable_health_timeout {
        Some(true) => None,
        _ => Some(configuration.health_timeout.map_or(ctx.config.health_timeout, |d| d.as_std())),
    };
    let plan = plan_machine(&MachineObservation {
        machine: &m,
        infra: infra.as_deref(),
        node: node.as_deref(),
        now: Timestamp::now(),
        creation_timeout,
        health_timeout,
        up_to_date: ctx.up_to_date(&m),
        bootstrap: Some(&bootstrap),
        connection_down,
    });
    if let Some(provider_id) = &plan.provider_id {
        writes::merge(&api, &*m, &json!({"spec": {"providerID": provider_id}}), "set the providerID of").await?;
    }
    let old = m.status.clone().unwrap_or_default();
    let old_phase = old.phase.clone();
    write_status(&api, &m, &old, &plan.status).await?;
    if plan.status.phase != old_phase {
        tracing::info!(machine = %key_of(&*m), phase = ?plan.status.phase, "phase");
        if plan.status.phase.as_deref() == Some(phase::FAILED) {
            let reason = plan
                .status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.message.clone())
                .unwrap_or_default();
            publish_to(&ctx.machine_events, &*m, EventSpec::warning("MachineFailed", reason)).await;
        }
    }
    let resync = ctx.config.resync;
    // A Cluster whose workload cluster is down is looked at again when its Secret is.
    let workload_retry = connection_down.map(|_| RECHECK_DOWN);
    let after = [plan.requeue_after.map(|d| d + Duration::from_millis(100)), bootstrap.requeue_after, workload_retry]
        .into_iter()
        .flatten()
        .min();
    let action = Action::requeue(after.map_or(resync, |d| d.min(resync)));
    Ok(in_place_after.unwrap_or(action))
}

/// The Machine's bootstrap config, as core reads it (`lifecycle::capi_bootstrap`): taken, waited for, its data
/// secret's name copied into `spec.bootstrap.dataSecretName`.
async fn bootstrap(ctx: &CapiContext, m: &Machine, api: &Api<Machine>) -> Result<BootstrapPlan, Error> {
    let namespace = m.namespace().unwrap_or_default();
    let reference = config_ref(m);
    let found = match reference {
        Some(r) => Some(ctx.kinds.get(&ctx.control, r, &namespace).await?),
        None => None,
    };
    let config = match &found {
        None => Config::NotReferenced,
        Some(None) => Config::Missing,
        Some(Some(value)) => Config::Found(value),
    };
    let plan = plan_bootstrap(m, config, &super::capi_controller_ref("Machine", &m.metadata));
    if let (Some(patch), Some(r)) = (&plan.take, reference) {
        ctx.kinds.patch(&ctx.control, r, &namespace, patch).await?;
        tracing::info!(machine = %key_of(m), config = %r.name, kind = %r.kind, "took its bootstrap config");
    }
    if let Some(name) = &plan.data_secret_name {
        let patch = json!({"spec": {"bootstrap": {"dataSecretName": name}}});
        writes::merge(api, m, &patch, "set the bootstrap data secret of").await?;
        tracing::info!(machine = %key_of(m), secret = %name, "bootstrap provider generated data secret");
    }
    if let Some(error) = &plan.error
        && ctx.reported.first(&format!("bootstrap:{}", key_of(m)), m.metadata.generation.unwrap_or(0))
    {
        tracing::warn!(machine = %key_of(m), "{error}");
        publish_to(&ctx.machine_events, m, EventSpec::warning("BootstrapDataSecretMissing", error.clone())).await;
    }
    Ok(plan)
}

/// Takes the MCMMachine as core does (`lifecycle::capi_machine::infra_adoption`).
async fn take_infra(ctx: &CapiContext, m: &Machine, infra: &MCMMachine) -> Result<(), Error> {
    let owner = super::capi_controller_ref("Machine", &m.metadata);
    let Some(patch) = infra_adoption(&infra.metadata, &owner, &m.spec.cluster_name) else {
        return Ok(());
    };
    let api: Api<MCMMachine> = Api::namespaced(ctx.control.clone(), &m.namespace().unwrap_or_default());
    writes::merge(&api, infra, &patch, "take").await?;
    tracing::info!(machine = %key_of(m), "took its MCMMachine (controller reference and cluster label)");
    Ok(())
}

/// After an API error: back off per machine.
pub(super) fn error_policy(m: Arc<Machine>, error: &Error, ctx: Arc<CapiContext>) -> Action {
    let key = key_of(&*m);
    crate::controllers::error::log_reconcile_failure!(error, machine = %key);
    Action::requeue(ctx.retries.fail(&format!("capi-machine:{key}"), error.retry_class(), &ctx.config, None))
}

/// Writes the status change `old` -> `new`. A merge patch replaces `conditions` whole, so a write that changes them is guarded by the resourceVersion read:
/// when someone else wrote the Machine meanwhile (a health check, a user's tool setting its own condition), our
/// change is carried onto the server's list (`rebase_conditions`) and written once more, instead of erasing theirs.
async fn write_status(api: &Api<Machine>, m: &Machine, old: &MachineStatus, new: &MachineStatus) -> Result<(), Error> {
    let Some(mut patch) = status_patch(old, new) else { return Ok(()) };
    if patch["status"].get("conditions").is_none() {
        return patch_status(api, m, &patch).await;
    }
    patch["metadata"] = json!({"resourceVersion": m.resource_version()});
    match patch_status(api, m, &patch).await {
        Err(e) if e.is_conflict() => {}
        other => return other,
    }
    let fresh = api.get_status(&m.name_any()).await.map_err(|e| Error::kube("read the status of", describe(m), e))?;
    let conditions = |s: Option<&MachineStatus>| s.and_then(|s| s.conditions.clone()).unwrap_or_default();
    let rebased = rebase_conditions(&conditions(Some(old)), &conditions(Some(new)), &conditions(fresh.status.as_ref()));
    patch["status"]["conditions"] = json!(rebased);
    patch["metadata"] = json!({"resourceVersion": fresh.resource_version()});
    patch_status(api, m, &patch).await
}

async fn patch_status(api: &Api<Machine>, m: &Machine, patch: &serde_json::Value) -> Result<(), Error> {
    api.patch_status(&m.name_any(), &params(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| Error::kube("patch status of", describe(m), e))
}

/// Sets phase Deleting and the `Deleting` condition (and, with `drain_started`, `status.deletion.nodeDrainStartTime`).
async fn deleting_status(
    api: &Api<Machine>,
    m: &Machine,
    reason: &str,
    message: &str,
    drain_started: Option<Timestamp>,
) -> Result<(), Error> {
    let old = m.status.clone().unwrap_or_default();
    let mut new = old.clone();
    let now = Timestamp::now();
    let mut conditions: Vec<Condition> = old.conditions.clone().unwrap_or_default();
    let mut deleting = condition(&conditions, "Deleting", true, reason, message, now);
    if conditions.iter().any(|c| c.type_ == "Deleting" && c.reason != reason) {
        deleting.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
    }
    let ready = condition(&conditions, "Ready", false, "Deleting", "", now);
    merge_conditions(&mut conditions, vec![deleting, ready]);
    new.conditions = Some(conditions);
    if new.phase.as_deref() != Some(phase::DELETING) {
        new.phase = Some(phase::DELETING.to_string());
        new.last_updated = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    }
    if let Some(started) = drain_started {
        let deletion = new.extra.entry("deletion".to_string()).or_insert_with(|| json!({}));
        if deletion.get("nodeDrainStartTime").is_none() {
            deletion["nodeDrainStartTime"] = json!(started.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        }
    }
    write_status(api, m, &old, &new).await
}

fn deleting_reason(m: &Machine) -> Option<String> {
    m.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Deleting" && c.status == "True")
        .map(|c| c.reason.clone())
}

fn drain_started(m: &Machine) -> Option<Timestamp> {
    m.status.as_ref()?.extra.get("deletion")?.get("nodeDrainStartTime")?.as_str()?.parse().ok()
}

async fn delete(m: &Machine, api: &Api<Machine>, ctx: &CapiContext) -> Result<Action, Error> {
    let key = key_of(m);
    let infra = ctx.infra_of(m);
    let workload = ctx.workloads.get(&m.namespace().unwrap_or_default(), &m.spec.cluster_name).await;
    let (nodes, connection_down) = (workload.nodes(), workload.down());
    let node: Option<Arc<Node>> = nodes.and_then(|nodes| {
        m.spec
            .provider_id
            .as_deref()
            .and_then(|p| nodes.node_by_provider_id(p))
            .or_else(|| m.status.as_ref().and_then(|s| s.node_ref.as_ref()).and_then(|r| nodes.node(&r.name)))
    });
    let cluster_deleting = ctx
        .clusters
        .get(&kube::runtime::reflector::ObjectRef::new(&m.spec.cluster_name).within(&m.namespace().unwrap_or_default()))
        .is_some_and(|c| c.metadata.deletion_timestamp.is_some());
    let now = Timestamp::now();
    let reason = deleting_reason(m);
    let namespace = m.namespace().unwrap_or_default();
    let reference = config_ref(m);
    let bootstrap_deleting = match reference {
        Some(r) => ctx
            .kinds
            .get(&ctx.control, r, &namespace)
            .await?
            .map(|config| !config["metadata"]["deletionTimestamp"].is_null()),
        None => None,
    };
    let step = deletion_step(&DeletionObservation {
        machine: m,
        infra: infra.as_deref(),
        node: node.as_deref(),
        drained: reason.as_deref().is_some_and(|r| DRAINED_REASONS.contains(&r)),
        drain_started: drain_started(m),
        now,
        bootstrap_deleting,
        connection_down,
        cluster_deleting,
    });
    tracing::debug!(machine = %key, ?step, "deletion step");
    match step {
        DeletionStep::WaitForPreDrainHooks(hooks) => {
            deleting_status(api, m, "WaitingForPreDrainHook", &format!("waiting for {}", hooks.join(", ")), None)
                .await?;
            Ok(Action::await_change())
        }
        DeletionStep::Drain { node, timeout } => {
            let started = drain_started(m).unwrap_or(now);
            deleting_status(api, m, "DrainingNode", &format!("draining Node {node}"), Some(started)).await?;
            let Some(nodes) = nodes else { return Ok(Action::requeue(RECHECK_DOWN)) };
            let target = &nodes.client;
            let options = DrainOptions {
                node: node.clone(),
                timeout: timeout.unwrap_or(Duration::from_secs(365 * 24 * 3600)),
                max_evict_retries: ctx.config.max_evict_retries,
                evict_retry_interval: ctx.config.evict_retry_interval,
                volume_detach_timeout: ctx.config.pv_detach_timeout,
                volume_reattach_timeout: ctx.config.pv_reattach_timeout,
                force: false,
            };
            let result = match drain::cordon(target, &node).await {
                Ok(()) => drain::drain(&nodes.drain, None, &options).await.map(|_| ()),
                Err(e) => Err(e),
            };
            // Re-read: the status changed above.
            let fresh = api.get(&m.name_any()).await.map_err(|e| Error::kube("get", describe(m), e))?;
            match result {
                Ok(()) => {
                    tracing::info!(machine = %key, node = %node, "drained");
                    deleting_status(api, &fresh, "DrainingSucceeded", &format!("drained Node {node}"), None).await?;
                    Ok(Action::requeue(Duration::ZERO))
                }
                Err(DrainError::Timeout { .. }) => {
                    tracing::info!(machine = %key, node = %node, "drain timed out; going on without it");
                    publish_to(
                        &ctx.machine_events,
                        m,
                        EventSpec::warning(
                            "DrainTimeout",
                            format!(
                                "draining Node {node} did not finish within nodeDrainTimeoutSeconds; deleting anyway"
                            ),
                        ),
                    )
                    .await;
                    deleting_status(api, &fresh, "DrainingSucceeded", "drain timed out; going on", None).await?;
                    Ok(Action::requeue(Duration::ZERO))
                }
                Err(e) => {
                    tracing::info!(machine = %key, node = %node, error = %e, "drain failed; retrying");
                    deleting_status(api, &fresh, "DrainingNode", &e.to_string(), None).await?;
                    Ok(Action::requeue(ctx.config.evict_retry_interval))
                }
            }
        }
        DeletionStep::WaitForPreTerminateHooks(hooks) => {
            deleting_status(api, m, "WaitingForPreTerminateHook", &format!("waiting for {}", hooks.join(", ")), None)
                .await?;
            Ok(Action::await_change())
        }
        DeletionStep::DeleteInfrastructure => {
            let infra_api: Api<MCMMachine> = Api::namespaced(ctx.control.clone(), &m.namespace().unwrap_or_default());
            let name = m.spec.infrastructure_ref.name.clone();
            match infra_api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => tracing::info!(machine = %key, mcm_machine = %name, "deleting the MCMMachine"),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(Error::kube("delete", format!("MCMMachine {name}"), e)),
            }
            deleting_status(
                api,
                m,
                "WaitingForInfrastructureDeletion",
                &format!("waiting for MCMMachine {name}"),
                None,
            )
            .await?;
            Ok(Action::await_change())
        }
        DeletionStep::WaitForInfrastructure => {
            deleting_status(api, m, "WaitingForInfrastructureDeletion", "waiting for the MCMMachine to go", None)
                .await?;
            Ok(Action::await_change())
        }
        DeletionStep::DeleteBootstrap | DeletionStep::WaitForBootstrap => {
            let kind = reference.map_or("", |r| r.kind.as_str());
            if let (DeletionStep::DeleteBootstrap, Some(r)) = (&step, reference) {
                ctx.kinds.delete(&ctx.control, r, &namespace).await?;
                tracing::info!(machine = %key, config = %r.name, kind = %r.kind, "deleting the bootstrap config");
            }
            let message = format!("Waiting for {kind} to be deleted");
            deleting_status(api, m, "WaitingForBootstrapDeletion", &message, None).await?;
            // The config's kind is not watched: look again.
            Ok(Action::requeue(POLL))
        }
        DeletionStep::DeleteNode(name) => {
            if let Some(workload) = nodes {
                let nodes: Api<Node> = Api::all(workload.client.clone());
                match nodes.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => tracing::info!(machine = %key, node = %name, "deleted the Node"),
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(Error::kube("delete", format!("Node {name}"), e)),
                }
            }
            deleting_status(api, m, "DeletingNode", &format!("deleting Node {name}"), None).await?;
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        DeletionStep::WaitForWorkloadCluster(why) => {
            let message = format!("waiting to drain the Node: cannot reach the workload cluster: {why}");
            deleting_status(api, m, "DrainingNode", &message, Some(drain_started(m).unwrap_or(now))).await?;
            Ok(Action::requeue(RECHECK_DOWN))
        }
        DeletionStep::RemoveFinalizer => {
            tracing::info!(machine = %key, "deleted");
            writes::remove_finalizer(api, m, MACHINE_FINALIZER).await?;
            Ok(Action::await_change())
        }
    }
}
