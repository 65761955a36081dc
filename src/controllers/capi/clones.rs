//! New CAPI Machines and their MCMMachines, cloned from the set's MCMMachineTemplate (annotations
//! `cluster.x-k8s.io/cloned-from-name`/`-groupkind`, owned by the Machine), as core's MachineSet controller makes
//! them; a Machine whose clone is missing (a pass cut short between the two creations) gets it on the next pass.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use rand::Rng;

use super::{CapiContext, capi_controller_ref, capi_owner_refs};
use crate::api::capi::{
    CLONED_FROM_GROUPKIND_ANNOTATION, CLONED_FROM_NAME_ANNOTATION, CLUSTER_NAME_LABEL,
    ContractVersionedObjectReference, Machine, MachineSet, SET_NAME_LABEL,
};
use crate::api::infra::{self, MCMMachine, MCMMachineTemplate};
use crate::api::mcm;
use crate::controllers::context::key_of;
use crate::controllers::error::is_conflict;
use crate::controllers::writes::MANAGER;
use crate::convert::machine_view::machine_from_hub;
use crate::lifecycle::capi_bootstrap::config_kind_of_template;
use crate::lifecycle::machine_set::machines::machine_from_template;

pub(super) fn post() -> PostParams {
    PostParams { field_manager: Some(MANAGER.to_string()), ..Default::default() }
}

/// The set's infrastructure template, when it is an MCMMachineTemplate.
pub(super) async fn template_of(ctx: &CapiContext, set: &MachineSet) -> Result<MCMMachineTemplate, String> {
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
pub(super) fn clone_of(template: &MCMMachineTemplate, machine: &Machine) -> MCMMachine {
    let t = &template.spec.template;
    let meta = t.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(CLUSTER_NAME_LABEL.to_string(), machine.spec.cluster_name.clone());
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(CLONED_FROM_NAME_ANNOTATION.to_string(), template.name_any());
    annotations.insert(CLONED_FROM_GROUPKIND_ANNOTATION.to_string(), format!("MCMMachineTemplate.{}", infra::GROUP));
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
pub(super) async fn ensure_clones(ctx: &CapiContext, set: &MachineSet, machines: &[Machine]) {
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

/// A name suffix in Kubernetes' "safe" alphabet.
fn suffix() -> String {
    const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5).map(|_| char::from(SAFE[rng.random_range(0..SAFE.len())])).collect()
}

/// The CAPI Machine to create for `set` (a fresh name: its MCMMachine is created under the same one).
pub(super) fn new_machine(set: &MachineSet, hub: &mcm::MachineSet) -> Machine {
    let name = format!("{}-{}", set.name_any(), suffix());
    let mut m = machine_from_hub(&machine_from_template(hub));
    m.metadata.name = Some(name.clone());
    m.metadata.generate_name = None;
    m.metadata.owner_references = Some(vec![capi_controller_ref("MachineSet", &set.metadata)]);
    capi_owner_refs(&mut m.metadata);
    if m.spec.cluster_name.is_empty() {
        m.spec.cluster_name = set.spec.cluster_name.clone();
    }
    let labels = m.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(CLUSTER_NAME_LABEL.to_string(), m.spec.cluster_name.clone());
    labels.insert(SET_NAME_LABEL.to_string(), set.name_any());
    // A bootstrap config template gives each Machine a config of its own, of the same name (as core clones it).
    if let Some(r) = &set.spec.template.spec.bootstrap.config_ref
        && let Some(kind) = config_kind_of_template(&r.kind)
    {
        m.spec.bootstrap.config_ref = Some(ContractVersionedObjectReference {
            api_group: r.api_group.clone(),
            kind: kind.to_string(),
            name: name.clone(),
        });
    }
    m.spec.infrastructure_ref =
        ContractVersionedObjectReference { api_group: infra::GROUP.to_string(), kind: "MCMMachine".to_string(), name };
    m
}

/// Creates the bootstrap configs of the set's Machines that are still waiting for one (a pass cut short between a
/// Machine and its config), from the set's bootstrap config template.
pub(super) async fn ensure_bootstrap_clones(ctx: &CapiContext, set: &MachineSet, machines: &[Machine]) {
    let Some(template) = &set.spec.template.spec.bootstrap.config_ref else { return };
    if config_kind_of_template(&template.kind).is_none() {
        return;
    }
    let waiting = machines.iter().filter(|m| {
        m.metadata.deletion_timestamp.is_none()
            && m.spec.bootstrap.data_secret_name.is_none()
            && m.spec.bootstrap.config_ref.as_ref().is_some_and(|r| Some(&r.name) == m.metadata.name.as_ref())
            && bootstrap_missing(m)
    });
    for m in waiting {
        if let Err(e) = super::bootstrap::create_clone(&ctx.kinds, &ctx.control, template, m).await {
            tracing::info!(machine = %key_of(m), error = %e, "creating the bootstrap config failed; next pass");
        }
    }
}

/// Whether the Machine controller reported its bootstrap config missing.
fn bootstrap_missing(m: &Machine) -> bool {
    let conditions = m.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "BootstrapConfigReady" && c.reason == "ObjectDoesNotExist"))
}
