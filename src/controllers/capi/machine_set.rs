//! The MachineSet controller on CAPI objects: the MCM MachineSet decisions (`lifecycle::machine_set`) on the hub
//! view of a CAPI MachineSet and its Machines, applied to CAPI objects. A new Machine gets an MCMMachine cloned from
//! the template's MCMMachineTemplate (annotations `cluster.x-k8s.io/cloned-from-name`/`-groupkind`, owned by the
//! Machine); a Machine whose clone is missing (a pass cut short between the two creations) gets it on the next pass.
//!
//! Not carried over from the MCM flavour: auto-preservation and the in-place propagation of `nodeTemplate` and the
//! machine configuration (CAPI Machines do not hold them; the MCMMachine does).

use std::sync::Arc;

use futures::future::join_all;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use rand::Rng;
use serde_json::json;

use super::Written;
use super::{CapiContext, capi_controller_ref, capi_owner_refs};
use crate::api::capi::{CLUSTER_NAME_LABEL, ContractVersionedObjectReference, Machine, MachineSet, MachineSetStatus};
use crate::api::infra::{self, MCMMachine, MCMMachineTemplate};
use crate::api::mcm;
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::{Error, is_conflict, is_not_found};
use crate::controllers::writes::{self, MANAGER};
use crate::convert::machine_view::{machine_from_hub, machine_to_hub};
use crate::convert::{machine_set_from_capi, set_status_to_capi};
use crate::lifecycle::capi_machine::merge_conditions;
use crate::lifecycle::capi_replicas::{ReplicaObservation, machine_set_conditions};
use crate::lifecycle::claim::{Claim, Owner, adopt_patch, claim, release_patch};
use crate::lifecycle::machine_set::machines::machine_from_template;
use crate::lifecycle::machine_set::status::{FailedOperation, ReplicaFailure, machine_set_status};
use crate::lifecycle::machine_set::{
    ReplicaFacts, SetMachine, plan_replicas, slow_start_batches, validate_machine_set,
};
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::{RetryClass, status_patch};

/// The finalizer our MachineSet controller holds on CAPI MachineSets.
pub const FINALIZER: &str = "capi.machine.sapcloud.io/machineset";
/// The annotation naming the template a clone was made from.
pub const CLONED_FROM_NAME: &str = crate::api::capi::CLONED_FROM_NAME_ANNOTATION;
/// The annotation naming the group and kind of the template a clone was made from.
pub const CLONED_FROM_GROUPKIND: &str = crate::api::capi::CLONED_FROM_GROUPKIND_ANNOTATION;
/// The label naming a Machine's MachineSet (CAPI's).
pub const SET_NAME_LABEL: &str = crate::api::capi::SET_NAME_LABEL;

pub(super) fn params() -> PatchParams {
    PatchParams { field_manager: Some(MANAGER.to_string()), ..Default::default() }
}

/// Reconciles a CAPI MachineSet.
pub(super) async fn reconcile(set: Arc<MachineSet>, ctx: Arc<CapiContext>) -> Result<Action, Error> {
    ctx.ready().await;
    let conditions = set.status.as_ref().and_then(|s| s.conditions.as_ref());
    if super::hold_if_paused(&ctx, &*set, &set.spec.cluster_name, conditions).await?.is_some() {
        return Ok(Action::await_change());
    }
    if super::left_to_upstream_core(&ctx, &*set, Some(&ctx.set_events), Some(FINALIZER)).await? {
        return Ok(Action::await_change());
    }
    let key = key_of(&*set);
    let resync = Action::requeue(ctx.config.resync);
    let deleting = set.metadata.deletion_timestamp.is_some();
    if deleting && !set.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let hub = machine_set_from_capi(&set);
    if !deleting && let Err(errors) = validate_machine_set(&hub) {
        if ctx.first_report(&key, set.metadata.generation.unwrap_or(0)) {
            let note = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            tracing::warn!(machine_set = %key, "not reconciled: {note}");
            publish_to(&ctx.set_events, &*set, EventSpec::warning("InvalidSpec", note)).await;
        }
        return Ok(resync);
    }
    let mut written = Written::default();
    let result = run(&set, hub, &ctx, &mut written).await;
    written.settle(&ctx.machines, &ctx.sets, &ctx.deployments, &key).await;
    let gate = format!("capi-set-create:{key}");
    Ok(match result? {
        true => Action::requeue(ctx.retries.fail(&gate, RetryClass::Api, &ctx.config, None)),
        false => {
            ctx.retries.reset(&gate);
            ctx.retries.reset(&format!("capi-set:{key}"));
            resync
        }
    })
}

/// After an API error: back off per set.
pub(super) fn error_policy(set: Arc<MachineSet>, error: &Error, ctx: Arc<CapiContext>) -> Action {
    let key = key_of(&*set);
    crate::controllers::error::log_reconcile_failure!(error, machine_set = %key);
    Action::requeue(ctx.retries.fail(&format!("capi-set:{key}"), error.retry_class(), &ctx.config, None))
}

/// `key=value,...` of a selector's labels (`status.selector`, for the scale subresource).
pub(super) fn selector_string(s: &LabelSelector) -> String {
    s.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// One pass; returns whether creating or deleting machines failed.
async fn run(
    observed: &MachineSet,
    mut hub: mcm::MachineSet,
    ctx: &CapiContext,
    written: &mut Written,
) -> Result<bool, Error> {
    let now = Timestamp::now();
    let namespace = observed.namespace().unwrap_or_default();
    let sets: Api<MachineSet> = Api::namespaced(ctx.control.clone(), &namespace);
    let api: Api<Machine> = Api::namespaced(ctx.control.clone(), &namespace);
    let deleting = observed.metadata.deletion_timestamp.is_some();
    let mut set = observed.clone();
    if !deleting && !set.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = set.finalizers().to_vec();
        finalizers.push(FINALIZER.to_string());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": set.resource_version()}});
        let updated = writes::merge(&sets, &set, &patch, "add a finalizer to").await?;
        written.set_changed(&set, &updated);
        set = updated;
        hub.metadata = machine_set_from_capi(&set).metadata;
    }

    let mut machines = claim_machines(ctx, &set, &api, written).await?;
    if !deleting {
        ensure_clones(ctx, &set, &machines).await;
    }
    let view = |ms: &[Machine]| -> Vec<mcm::Machine> {
        ms.iter().map(|m| machine_to_hub(m, ctx.infra_of(m).as_deref())).collect()
    };
    let hub_machines = view(&machines);
    let facts = ReplicaFacts::from_machine_set(
        &hub,
        hub_machines.iter().map(|m| SetMachine::from_machine(m, None, now)).collect(),
    );
    let plan = plan_replicas(&facts);

    let mut failure = None;
    if plan.create > 0 {
        let (created, error) = create_machines(ctx, &set, &hub, &api, plan.create).await;
        for m in &created {
            written.machine_created(m);
        }
        machines.extend(created);
        failure = error.map(|message| ReplicaFailure { operation: FailedOperation::Create, message });
    }
    if !plan.delete.is_empty() {
        let mut deleted = Vec::new();
        let mut error = None;
        for victim in &plan.delete {
            let Some(m) = machines.iter_mut().find(|m| m.metadata.name.as_deref() == Some(victim.name.as_str())) else {
                continue;
            };
            match api.delete(&victim.name, &DeleteParams::default()).await {
                Ok(either) => {
                    tracing::info!(machine_set = %key_of(&set), machine = %victim.name, reason = ?victim.reason, "deleted a machine");
                    written.machine_deleted(m);
                    deleted.push(victim.name.clone());
                    match either.left() {
                        Some(after) => *m = after,
                        None => {
                            m.metadata.deletion_timestamp =
                                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now))
                        }
                    }
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    error.get_or_insert(format!("Error deleting: {e}"));
                }
            }
        }
        if !deleted.is_empty() {
            let note = format!("Deleted machines: {}", deleted.join(", "));
            publish_to(&ctx.set_events, &set, EventSpec::normal("SuccessfulDelete", note)).await;
        }
        if let Some(message) = &error {
            publish_to(&ctx.set_events, &set, EventSpec::warning("FailedDelete", message.clone())).await;
        }
        if failure.is_none() {
            failure = error.map(|message| ReplicaFailure { operation: FailedOperation::Delete, message });
        }
    }

    if plan.remove_finalizer {
        tracing::info!(machine_set = %key_of(&set), "no machine left; removing the finalizer");
        writes::remove_finalizer(&sets, &set, FINALIZER).await?;
        return Ok(false);
    }

    let hub_status = machine_set_status(&hub, &view(&machines), failure.as_ref(), now);
    let old = set.status.clone().unwrap_or_default();
    let mut new = capi_status(&old, &set, &hub_status);
    // CAPI counts the machines whose `UpToDate` (set by the Machine controller from the owners) is True.
    let up_to_date = machines.iter().filter(|m| m.metadata.deletion_timestamp.is_none() && is_up_to_date(m)).count();
    new.up_to_date_replicas = Some(i32::try_from(up_to_date).unwrap_or(i32::MAX));
    let observation = ReplicaObservation {
        desired: if deleting { 0 } else { set.spec.replicas.unwrap_or(1) },
        current: new.replicas.unwrap_or(0),
        machines: &machines,
        deleting,
        now,
    };
    let core = machine_set_conditions(&observation, old.conditions.as_deref().unwrap_or(&[]));
    let mut conditions = new.conditions.take().unwrap_or_default();
    merge_conditions(&mut conditions, core);
    new.conditions = Some(conditions);
    if let Some(patch) = status_patch(&old, &new) {
        let updated = sets
            .patch_status(&set.name_any(), &params(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::kube("patch status of", format!("MachineSet {}", key_of(&set)), e))?;
        written.set_changed(&set, &updated);
    }
    Ok(failure.is_some())
}

fn is_up_to_date(m: &Machine) -> bool {
    let conditions = m.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "UpToDate" && c.status == "True"))
}

/// The CAPI status from the hub's: counts and MCM's conditions converted, CAPI's own conditions kept.
fn capi_status(old: &MachineSetStatus, set: &MachineSet, hub: &mcm::MachineSetStatus) -> MachineSetStatus {
    let mut new = set_status_to_capi(hub);
    let mut conditions: Vec<_> = old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !matches!(c.type_.as_str(), "ReplicaFailure" | "Frozen"))
        .cloned()
        .collect();
    merge_conditions(&mut conditions, new.conditions.take().unwrap_or_default());
    new.conditions = (!conditions.is_empty()).then_some(conditions);
    new.selector = Some(selector_string(&set.spec.selector));
    new.extra = old.extra.clone();
    new
}

/// The set's Machines after adopting matching orphans and releasing Machines that no longer match.
async fn claim_machines(
    ctx: &CapiContext,
    set: &MachineSet,
    api: &Api<Machine>,
    written: &mut Written,
) -> Result<Vec<Machine>, Error> {
    let uid = set.uid().unwrap_or_default();
    let owner = Owner { uid: &uid, selector: &set.spec.selector, deleting: set.metadata.deletion_timestamp.is_some() };
    let mut mine = Vec::new();
    for m in ctx.machines.state().into_iter().filter(|m| m.namespace() == set.namespace()) {
        match claim(owner, &m.metadata) {
            Claim::Owned => mine.push((*m).clone()),
            Claim::Adopt => {
                let reference = capi_controller_ref("MachineSet", &set.metadata);
                match writes::merge(api, &*m, &adopt_patch(&m.metadata, &reference), "adopt").await {
                    Ok(updated) => {
                        written.machine_changed(&m, &updated);
                        mine.push(updated);
                    }
                    Err(e) => tracing::info!(machine = %key_of(&*m), error = %e, "adoption failed; next pass"),
                }
            }
            Claim::Release => match writes::merge(api, &*m, &release_patch(&m.metadata, &uid), "release").await {
                Ok(updated) => written.machine_changed(&m, &updated),
                Err(e) => tracing::info!(machine = %key_of(&*m), error = %e, "release failed; next pass"),
            },
            Claim::Ignore => {}
        }
    }
    Ok(mine)
}

/// The set's infrastructure template, when it is an MCMMachineTemplate.
async fn template_of(ctx: &CapiContext, set: &MachineSet) -> Result<MCMMachineTemplate, String> {
    let r = &set.spec.template.spec.infrastructure_ref;
    if r.kind != "MCMMachineTemplate" || r.api_group != infra::GROUP {
        return Err(format!(
            "spec.template.spec.infrastructureRef must be an {}/MCMMachineTemplate, not {}/{}",
            infra::GROUP,
            r.api_group,
            r.kind
        ));
    }
    let api: Api<MCMMachineTemplate> = Api::namespaced(ctx.control.clone(), &set.namespace().unwrap_or_default());
    match api.get_opt(&r.name).await {
        Ok(Some(t)) => Ok(t),
        Ok(None) => Err(format!("MCMMachineTemplate {} not found", r.name)),
        Err(e) => Err(format!("reading MCMMachineTemplate {}: {e}", r.name)),
    }
}

/// The MCMMachine cloned from `template` for `machine` (same name, owned by it).
fn clone_of(template: &MCMMachineTemplate, machine: &Machine) -> MCMMachine {
    let t = &template.spec.template;
    let meta = t.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(CLUSTER_NAME_LABEL.to_string(), machine.spec.cluster_name.clone());
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(CLONED_FROM_NAME.to_string(), template.name_any());
    annotations.insert(CLONED_FROM_GROUPKIND.to_string(), format!("MCMMachineTemplate.{}", infra::GROUP));
    let mut spec = t.spec.clone();
    spec.provider_id = None;
    spec.failure_domain = machine.spec.failure_domain.clone();
    let mut clone = MCMMachine::new(&machine.name_any(), spec);
    clone.metadata = ObjectMeta {
        name: machine.metadata.name.clone(),
        namespace: machine.metadata.namespace.clone(),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: Some(vec![capi_controller_ref("Machine", &machine.metadata)]),
        ..Default::default()
    };
    clone
}

/// Creates the missing MCMMachines of the set's Machines (a pass cut short between a Machine and its clone).
async fn ensure_clones(ctx: &CapiContext, set: &MachineSet, machines: &[Machine]) {
    let missing: Vec<&Machine> = machines
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| m.spec.infrastructure_ref.kind == "MCMMachine" && m.spec.infrastructure_ref.name == m.name_any())
        .filter(|m| ctx.infra_of(m).is_none())
        .filter(|m| {
            m.status.as_ref().and_then(|s| s.phase.as_deref()).is_none_or(|p| p == "Pending" || p == "Provisioning")
        })
        .collect();
    if missing.is_empty() {
        return;
    }
    let template = match template_of(ctx, set).await {
        Ok(t) => t,
        Err(e) => {
            tracing::info!(machine_set = %key_of(set), error = %e, "cannot clone the missing infrastructure machines");
            return;
        }
    };
    let api: Api<MCMMachine> = Api::namespaced(ctx.control.clone(), &set.namespace().unwrap_or_default());
    for m in missing {
        match api.create(&post(), &clone_of(&template, m)).await {
            Ok(_) => tracing::info!(machine = %key_of(m), "created the missing MCMMachine"),
            Err(e) if is_conflict(&e) => {}
            Err(e) => tracing::info!(machine = %key_of(m), error = %e, "creating the MCMMachine failed; next pass"),
        }
    }
}

fn post() -> PostParams {
    PostParams { field_manager: Some(MANAGER.to_string()), ..Default::default() }
}

/// A name suffix in Kubernetes' "safe" alphabet.
fn suffix() -> String {
    const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5).map(|_| char::from(SAFE[rng.random_range(0..SAFE.len())])).collect()
}

/// The CAPI Machine to create for `set`, named `name`.
fn new_machine(set: &MachineSet, hub: &mcm::MachineSet, name: &str) -> Machine {
    let mut m = machine_from_hub(&machine_from_template(hub));
    m.metadata.name = Some(name.to_string());
    m.metadata.generate_name = None;
    m.metadata.owner_references = Some(vec![capi_controller_ref("MachineSet", &set.metadata)]);
    capi_owner_refs(&mut m.metadata);
    if m.spec.cluster_name.is_empty() {
        m.spec.cluster_name = set.spec.cluster_name.clone();
    }
    let labels = m.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(CLUSTER_NAME_LABEL.to_string(), m.spec.cluster_name.clone());
    labels.insert(SET_NAME_LABEL.to_string(), set.name_any());
    m.spec.infrastructure_ref = ContractVersionedObjectReference {
        api_group: infra::GROUP.to_string(),
        kind: "MCMMachine".to_string(),
        name: name.to_string(),
    };
    m
}

/// Creates `count` Machines, each followed by its MCMMachine clone, in slow-start batches; stops after the first
/// batch with a failure. Returns the created Machines and the first error.
async fn create_machines(
    ctx: &CapiContext,
    set: &MachineSet,
    hub: &mcm::MachineSet,
    api: &Api<Machine>,
    count: usize,
) -> (Vec<Machine>, Option<String>) {
    let template = match template_of(ctx, set).await {
        Ok(t) => t,
        Err(e) => {
            publish_to(&ctx.set_events, set, EventSpec::warning("FailedCreate", e.clone())).await;
            return (Vec::new(), Some(e));
        }
    };
    let clones: Api<MCMMachine> = Api::namespaced(ctx.control.clone(), &set.namespace().unwrap_or_default());
    let mut created = Vec::new();
    let mut error: Option<String> = None;
    for batch in slow_start_batches(count) {
        let one = |_| async {
            let name = format!("{}-{}", set.name_any(), suffix());
            let m =
                api.create(&post(), &new_machine(set, hub, &name)).await.map_err(|e| format!("Error creating: {e}"))?;
            match clones.create(&post(), &clone_of(&template, &m)).await {
                Ok(_) => Ok(m),
                Err(e) if is_conflict(&e) => Ok(m),
                // The Machine exists; its clone comes on the next pass.
                Err(e) => {
                    tracing::info!(machine = %key_of(&m), error = %e, "creating the MCMMachine failed; next pass");
                    Ok(m)
                }
            }
        };
        for result in join_all((0..batch).map(one)).await {
            match result {
                Ok(m) => created.push(m),
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        if error.is_some() {
            break;
        }
    }
    if !created.is_empty() {
        let names: Vec<String> = created.iter().map(|m| m.name_any()).collect();
        tracing::info!(machine_set = %key_of(set), created = created.len(), "created machines");
        let note = format!("Created machines: {}", names.join(", "));
        publish_to(&ctx.set_events, set, EventSpec::normal("SuccessfulCreate", note)).await;
    }
    if let Some(message) = &error {
        publish_to(&ctx.set_events, set, EventSpec::warning("FailedCreate", message.clone())).await;
    }
    (created, error)
}
