//! The way back (pure): the CAPI objects of one migrated MachineDeployment in, the MCM MachineDeployment,
//! MachineSet and Machines that take their VMs over again out. The inverse of [`super::plan`]: the conversion layer
//! (`convert`) restores the MCM-only fields from its annotations; what the plan added (cluster labels, the
//! MCMMachineTemplate reference, the CAPI-only fields) is taken off again, and the class comes back from the
//! MCMMachineTemplate and the MCMMachines.

use std::collections::BTreeMap;

use super::objects::{AUTOSCALER_OPTIONS, carried_meta, controlled_by};
use super::plan::Blocker;
use crate::api::capi::{self, CLUSTER_NAME_LABEL};
use crate::api::infra::{MCMMachine, MCMMachineTemplate};
use crate::api::mcm;
use crate::api::mcm::names::MACHINE_CLASS_KIND;
use crate::convert::machine_view::{machine_to_hub, phase};
use crate::convert::{CAPI_DATA, CAPI_MACHINE_DATA, MCM_MACHINE_DATA, deployment_from_capi, machine_set_from_capi};

/// The CAPI objects of a namespace that a rollback reads.
#[derive(Clone, Debug, Default)]
pub struct CapiInventory {
    /// MachineSets.
    pub sets: Vec<capi::MachineSet>,
    /// Machines.
    pub machines: Vec<capi::Machine>,
    /// MCMMachines.
    pub infra: Vec<MCMMachine>,
    /// MCMMachineTemplates.
    pub templates: Vec<MCMMachineTemplate>,
}

/// The MCM objects for one CAPI MachineDeployment.
#[derive(Clone, Debug)]
pub struct RestoredDeployment {
    /// The MachineDeployment.
    pub deployment: mcm::MachineDeployment,
    /// Its MachineSet (owner references are set when it is created).
    pub set: mcm::MachineSet,
    /// The Machines with their providerIDs and `node` labels.
    pub machines: Vec<mcm::Machine>,
    /// The CAPI objects they replace: the MachineSets, Machines (= MCMMachines) and the template.
    pub capi_sets: Vec<String>,
    /// The names of the CAPI Machines (and their MCMMachines).
    pub capi_machines: Vec<String>,
    /// The MCMMachineTemplate of the deployment.
    pub template: String,
}

fn key(kind: &str, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!("{kind} {}/{}", meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
}

fn remove(map: &mut Option<BTreeMap<String, String>>, keys: &[&str]) {
    if let Some(m) = map.as_mut() {
        for k in keys {
            m.remove(*k);
        }
    }
    if map.as_ref().is_some_and(BTreeMap::is_empty) {
        *map = None;
    }
}

/// Takes what the plan added off a hub template, and puts the class back.
fn restore_template(t: &mut mcm::MachineTemplateSpec, class: &mcm::ClassSpec) {
    if let Some(meta) = t.metadata.as_mut() {
        remove(&mut meta.labels, &[CLUSTER_NAME_LABEL]);
        remove(&mut meta.annotations, &[CAPI_MACHINE_DATA]);
        if meta.labels.is_none() && meta.annotations.is_none() {
            t.metadata = None;
        }
    }
    if let Some(spec) = t.spec.as_mut() {
        spec.class = class.clone();
    }
}

/// The MCM objects for the CAPI MachineDeployment `d`, or what blocks restoring them.
pub fn reverse(d: &capi::MachineDeployment, inventory: &CapiInventory) -> Result<RestoredDeployment, Vec<Blocker>> {
    let name = d.metadata.name.clone().unwrap_or_default();
    let d_key = key("MachineDeployment", &d.metadata);
    let mut blockers = Vec::new();
    let mut block = |object: &str, reason: String| blockers.push(Blocker { object: object.to_string(), reason });

    let template_name = d.spec.template.spec.infrastructure_ref.name.clone();
    let template = inventory.templates.iter().find(|t| t.metadata.name.as_deref() == Some(template_name.as_str()));
    let class = template.and_then(|t| t.spec.template.spec.class.clone());
    match &class {
        Some(c) if c.kind == MACHINE_CLASS_KIND => {}
        _ => block(
            &d_key,
            format!(
                "MCMMachineTemplate {template_name} does not name a MachineClass (MCM needs one); nothing to return to"
            ),
        ),
    }
    let sets: Vec<&capi::MachineSet> =
        inventory.sets.iter().filter(|s| controlled_by(&s.metadata, "MachineDeployment", &name)).collect();
    let machines_of = |set: &str| -> Vec<&capi::Machine> {
        inventory.machines.iter().filter(|m| controlled_by(&m.metadata, "MachineSet", set)).collect()
    };
    let active: Vec<&capi::MachineSet> = sets
        .iter()
        .copied()
        .filter(|s| {
            s.spec.replicas.unwrap_or(0) > 0 || !machines_of(s.metadata.name.as_deref().unwrap_or_default()).is_empty()
        })
        .collect();
    if active.len() > 1 {
        let names: Vec<&str> = active.iter().filter_map(|s| s.metadata.name.as_deref()).collect();
        block(&d_key, format!("rollout in progress: MachineSets {} are active", names.join(", ")));
    }
    let set = active.first().copied().or_else(|| sets.first().copied());
    let Some(set) = set else {
        block(&d_key, "has no MachineSet".into());
        return Err(blockers);
    };
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let machines = machines_of(&set_name);
    let mut restored_machines = Vec::new();
    for m in &machines {
        let m_key = key("Machine", &m.metadata);
        let status = m.status.as_ref();
        if m.metadata.deletion_timestamp.is_some() {
            block(&m_key, "is being deleted".into());
        }
        let machine_phase = status.and_then(|s| s.phase.as_deref());
        if machine_phase != Some(phase::RUNNING) {
            block(&m_key, format!("is {}, not Running", machine_phase.unwrap_or("without a phase")));
        }
        let infra = inventory
            .infra
            .iter()
            .find(|i| i.metadata.name.as_deref() == Some(m.spec.infrastructure_ref.name.as_str()));
        let Some(infra) = infra else {
            block(&m_key, format!("its MCMMachine {} does not exist", m.spec.infrastructure_ref.name));
            continue;
        };
        let provider_id = infra.spec.provider_id.clone().or_else(|| m.spec.provider_id.clone());
        if provider_id.as_deref().is_none_or(str::is_empty) {
            block(&m_key, "has no providerID".into());
        }
        let machine_class = infra.spec.class.clone().or_else(|| class.clone());
        if machine_class.as_ref().is_none_or(|c| c.kind != MACHINE_CLASS_KIND) {
            block(&m_key, "its MCMMachine does not name a MachineClass".into());
            continue;
        }
        let mut hub = machine_to_hub(m, Some(infra));
        hub.metadata = carried_meta(&hub.metadata);
        remove(&mut hub.metadata.labels, &[CLUSTER_NAME_LABEL, capi::SET_NAME_LABEL, capi::DEPLOYMENT_NAME_LABEL]);
        remove(&mut hub.metadata.annotations, &[CAPI_MACHINE_DATA, MCM_MACHINE_DATA, capi::DELETE_MACHINE_ANNOTATION]);
        hub.spec = mcm::MachineSpec {
            class: machine_class.unwrap_or_default(),
            provider_id,
            node_template: infra.spec.node_template.clone(),
            configuration: infra.spec.configuration.clone(),
        };
        hub.status = None;
        restored_machines.push(hub);
    }
    let Some(class) = class.filter(|_| blockers.is_empty()) else {
        return Err(blockers);
    };

    let mut clean_d = d.clone();
    clean_d.metadata = carried_meta(&d.metadata);
    clean_d.status = None;
    let mut deployment = deployment_from_capi(&clean_d);
    remove(&mut deployment.metadata.labels, &[CLUSTER_NAME_LABEL]);
    let capi_keys: Vec<&str> = AUTOSCALER_OPTIONS.iter().map(|(_, c)| *c).collect();
    remove(&mut deployment.metadata.annotations, &capi_keys);
    remove(&mut deployment.metadata.annotations, &[CAPI_DATA]);
    restore_template(&mut deployment.spec.template, &class);

    let mut clean_s = set.clone();
    clean_s.metadata = carried_meta(&set.metadata);
    clean_s.status = None;
    let mut mcm_set = machine_set_from_capi(&clean_s);
    remove(&mut mcm_set.metadata.labels, &[CLUSTER_NAME_LABEL, capi::DEPLOYMENT_NAME_LABEL]);
    remove(&mut mcm_set.metadata.annotations, &[CAPI_DATA]);
    if let Some(t) = mcm_set.spec.template.as_mut() {
        restore_template(t, &class);
    }
    Ok(RestoredDeployment {
        deployment,
        set: mcm_set,
        machines: restored_machines,
        capi_sets: sets.iter().filter_map(|s| s.metadata.name.clone()).collect(),
        capi_machines: sets
            .iter()
            .flat_map(|s| machines_of(s.metadata.name.as_deref().unwrap_or_default()))
            .filter_map(|m| m.metadata.name.clone())
            .collect(),
        template: template_name,
    })
}
