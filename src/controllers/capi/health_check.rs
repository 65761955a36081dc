//! The MachineHealthCheck controller of mode "CAPI with MCM core": core's semantics, decided by
//! `lifecycle::capi_health_check` over the Machines it selects and their Nodes in the Cluster's workload cluster.
//! It marks Machines (`HealthCheckSucceeded`, `OwnerRemediated`); a MachineSet's Machine marked for remediation is
//! Failed in the hub view (`convert::machine_view`), so MCM's MachineSet decision deletes and replaces it. With
//! `spec.remediation.templateRef`, a remediation request is cloned from the template instead, as core does.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::CapiContext;
use crate::api::capi::{ContractVersionedObjectReference, Machine, MachineHealthCheck};
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::Error;
use crate::controllers::workload::RECHECK_DOWN;
use crate::controllers::writes::{self, patch_params};
use crate::lifecycle::capi_health_check::{
    ClusterFacts, HealthCheckObservation, Milestone, NodeLookup, Outcome, RemediationFailure, RemediationRequest,
    RemediationRequestRef, Target, plan_health_check, remediation_failure_condition, remediation_request_object,
    selects,
};
use crate::lifecycle::capi_machine::merge_conditions;
use crate::lifecycle::status::EventSpec;

/// Reconciles a MachineHealthCheck.
pub(super) async fn reconcile(mhc: Arc<MachineHealthCheck>, ctx: Arc<CapiContext>) -> Result<Action, Error> {
    ctx.ready().await;
    let namespace = mhc.namespace().unwrap_or_default();
    let cluster_name = &mhc.spec.cluster_name;
    let Some(cluster) = ctx.clusters.get(&ObjectRef::new(cluster_name).within(&namespace)) else {
        tracing::debug!(machine_health_check = %key_of(&*mhc), cluster = %cluster_name, "waiting for its Cluster");
        return Ok(Action::await_change());
    };
    let machines: Vec<Arc<Machine>> = ctx.machines.state().into_iter().filter(|m| selects(&mhc, m)).collect();
    let workload = ctx.workloads.get(&namespace, cluster_name).await;
    let connected = workload.down().is_none();
    let nodes: Vec<_> = machines
        .iter()
        .map(|m| {
            let name = m.status.as_ref().and_then(|s| s.node_ref.as_ref())?.name.as_str();
            workload.nodes()?.node(name)
        })
        .collect();
    let targets: Vec<Target<'_>> = machines
        .iter()
        .zip(&nodes)
        .map(|(m, node)| Target { machine: m, node: NodeLookup::observed(m, node.as_deref(), connected) })
        .collect();
    let plan = match plan_health_check(&HealthCheckObservation {
        mhc: &mhc,
        cluster: &cluster,
        facts: facts_of(&cluster),
        targets: &targets,
        now: Timestamp::now(),
    }) {
        Ok(plan) => plan,
        Err(e) => {
            if ctx.reported.first(&format!("mhc:{}", key_of(&*mhc)), mhc.metadata.generation.unwrap_or(0)) {
                tracing::warn!(machine_health_check = %key_of(&*mhc), error = %e, "invalid");
                publish_to(&ctx.health_check_events, &*mhc, EventSpec::warning("InvalidSpec", e.to_string())).await;
            }
            return Ok(Action::await_change());
        }
    };
    let api: Api<MachineHealthCheck> = Api::namespaced(ctx.control.clone(), &namespace);
    if let Some(patch) = &plan.membership_patch {
        writes::merge(&api, &*mhc, patch, "take into its Cluster").await?;
    }
    for update in &plan.machines {
        let Some(machine) = machines.iter().find(|m| m.name_any() == update.name) else { continue };
        let mut conditions = update.conditions.clone();
        if let Some(request) = &update.create_remediation_request
            && let Some(failed) = request_remediation(&ctx, machine, request).await?
        {
            conditions.push(failed);
        }
        if let Some(request) = &update.delete_remediation_request {
            ctx.kinds.delete(&ctx.control, &reference(request), &request.namespace).await?;
        }
        write_machine_conditions(&ctx, machine, conditions).await?;
        for event in &update.events {
            publish_to(&ctx.machine_events, &**machine, event.clone()).await;
        }
    }
    if mhc.status.as_ref() != Some(&plan.status) {
        let patch = json!({"status": plan.status});
        api.patch_status(&mhc.name_any(), &patch_params(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::kube("patch status of", format!("MachineHealthCheck {}", key_of(&*mhc)), e))?;
    }
    for event in plan.events {
        publish_to(&ctx.health_check_events, &*mhc, event).await;
    }
    let after = match plan.outcome {
        Outcome::WorkloadUnreachable => Some(RECHECK_DOWN),
        Outcome::Paused => None,
        Outcome::Restricted | Outcome::Allowed => plan.requeue_after,
    };
    // Node conditions other than Ready do not change the Machine: look again on the resync as well.
    let resync = ctx.config.resync;
    Ok(Action::requeue(after.map_or(resync, |a| a.min(resync))))
}

/// This mode runs no control plane provider: a Cluster without `spec.controlPlaneRef` counts as initialized once
/// its infrastructure is (core waits for a control-plane Machine's Node; here the workers' Nodes are read anyway).
fn facts_of(cluster: &crate::api::capi::Cluster) -> ClusterFacts {
    let mut facts = ClusterFacts::of(cluster);
    let no_control_plane = cluster.spec.control_plane_ref.is_none();
    if no_control_plane && facts.control_plane_initialized == Milestone::NotReached {
        facts.control_plane_initialized = facts.infrastructure_ready;
    }
    facts
}

/// A reference by `apiVersion` as one by group (the resource is found by discovery).
fn by_group(api_version: &str, kind: &str, name: &str) -> ContractVersionedObjectReference {
    ContractVersionedObjectReference {
        api_group: api_version.split_once('/').map_or("", |(group, _)| group).to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
    }
}

fn reference(request: &RemediationRequestRef) -> ContractVersionedObjectReference {
    by_group(&request.api_version, &request.kind, &request.name)
}

/// Clones the remediation template into a request for `machine`; the Machine's failure condition when it cannot.
async fn request_remediation(
    ctx: &CapiContext,
    machine: &Machine,
    request: &RemediationRequest,
) -> Result<Option<Condition>, Error> {
    let now = Timestamp::now();
    let t = &request.template;
    let template = by_group(&t.api_version, &t.kind, &t.name);
    let Some(source) = ctx.kinds.get(&ctx.control, &template, &request.template_namespace).await? else {
        return Ok(Some(remediation_failure_condition(machine, request, RemediationFailure::TemplateNotFound, now)));
    };
    let object = remediation_request_object(&source, request);
    match ctx.kinds.create(&ctx.control, &reference(&request.request), &request.request.namespace, object).await {
        Ok(Some(created)) => {
            if created {
                tracing::info!(machine = %key_of(machine), kind = %request.request.kind, "requested external remediation");
            }
            Ok(Some(request.on_created.clone()))
        }
        Ok(None) | Err(_) => {
            Ok(Some(remediation_failure_condition(machine, request, RemediationFailure::RequestCreationFailed, now)))
        }
    }
}

/// Merges the health check's conditions into the Machine's, written only when they change something.
async fn write_machine_conditions(ctx: &CapiContext, machine: &Machine, new: Vec<Condition>) -> Result<(), Error> {
    if new.is_empty() {
        return Ok(());
    }
    let old = machine.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let mut all = old.clone();
    merge_conditions(&mut all, new);
    if all == old {
        return Ok(());
    }
    let api: Api<Machine> = Api::namespaced(ctx.control.clone(), &machine.namespace().unwrap_or_default());
    // Guarded by the resourceVersion read: conditions written meanwhile by the Machine controller are not lost.
    let patch = json!({
        "metadata": {"resourceVersion": machine.resource_version()},
        "status": {"conditions": all},
    });
    api.patch_status(&machine.name_any(), &patch_params(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::kube("patch status of", format!("Machine {}", key_of(machine)), e))?;
    Ok(())
}

/// After an API error: back off per health check.
pub(super) fn error_policy(mhc: Arc<MachineHealthCheck>, error: &Error, ctx: Arc<CapiContext>) -> Action {
    let key = key_of(&*mhc);
    crate::controllers::error::log_reconcile_failure!(error, machine_health_check = %key);
    Action::requeue(ctx.retries.fail(&format!("capi-mhc:{key}"), error.retry_class(), &ctx.config, None))
}
