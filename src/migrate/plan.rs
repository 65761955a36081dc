//! The migration plan (pure): the MCM objects of a namespace in, the CAPI objects that adopt their VMs and a
//! [`Summary`] out. No client, no clock.
//!
//! Per MCM MachineDeployment (with its active MachineSet and that set's Machines):
//!
//! | MCM | CAPI |
//! |---|---|
//! | MachineDeployment `d` | MachineDeployment `d` (`convert::deployment_to_capi`), `infrastructureRef` → MCMMachineTemplate `d` |
//! | the deployment's template class (a MachineClass) | MCMMachineTemplate `d` whose `spec.template.spec.class` names it |
//! | the active MachineSet `s` | MachineSet `s` (`convert::machine_set_to_capi`), owned by the CAPI deployment |
//! | Machine `m` (providerID `p`, Node `n`) | Machine `m` (providerID `p`, or the spelling of that VM Node `n` carries: [`handed_over_provider_id`]) owned by `s`, and MCMMachine `m` (the same providerID, the class) owned by it |
//! | — | Cluster `--cluster-name` and its MCMCluster, when absent |
//!
//! Names are kept: the in-memory and the real drivers tag VMs with the machine name, and the orphan collectors
//! claim a VM by machine name and providerID, so the MCMMachine must carry the MCM Machine's name.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::FROM_ANNOTATION;
use super::WAS_PAUSED_ANNOTATION;
use super::objects::{AUTOSCALER_OPTIONS, annotate, carried_meta, controlled_by, label};
use crate::api::capi::{self, CLUSTER_NAME_LABEL, ContractVersionedObjectReference};
use crate::api::infra::{self, MCMCluster, MCMClusterSpec, MCMMachine, MCMMachineSpec, MCMMachineTemplate};
use crate::api::infra::{MCMMachineTemplateResource, MCMMachineTemplateSpec};
use crate::api::mcm::names::TRIGGER_DELETION_BY_MCM;
use crate::api::mcm::names::{CANDIDATE_FOR_UPDATE, SELECTED_FOR_UPDATE, UPDATE_RESULT};
use crate::api::mcm::names::{FREEZE_LABEL, FREEZE_VALUE};
use crate::api::mcm::names::{MACHINE_CLASS_KIND, NODE_LABEL, PRIORITY_ANNOTATION};
use crate::api::mcm::{self, MachineClass, MachineDeploymentStrategyType, MachinePhase};
use crate::convert::machine_view::machine_from_hub;
use crate::convert::{self, MCM_DATA, MCM_MACHINE_DATA};
use crate::lifecycle::create;
use crate::lifecycle::machine_deployment::template::find_new_machine_set;
use crate::providers::contract::identity;

/// Where the CAPI objects go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The namespace of the MCM objects (and of the CAPI objects).
    pub namespace: String,
    /// The CAPI Cluster the machines join (created with its MCMCluster when absent).
    pub cluster_name: String,
}

/// What the plan reads: the MCM and CAPI objects of the namespace.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    /// MCM MachineDeployments.
    pub deployments: Vec<mcm::MachineDeployment>,
    /// MCM MachineSets.
    pub sets: Vec<mcm::MachineSet>,
    /// MCM Machines.
    pub machines: Vec<mcm::Machine>,
    /// MCM MachineClasses.
    pub classes: Vec<MachineClass>,
    /// The CAPI Cluster named `--cluster-name`, if it exists.
    pub cluster: Option<capi::Cluster>,
    /// The MCMCluster named `--cluster-name`, if it exists.
    pub mcm_cluster: Option<MCMCluster>,
    /// CAPI MachineDeployments (a name taken by one `mcm migrate` did not make blocks).
    pub capi_deployments: Vec<capi::MachineDeployment>,
    /// `spec.providerID` of the Nodes that name one, by Node name: CAPI core links a Machine to the Node whose
    /// providerID equals the Machine's, so a handed-over machine carries its Node's spelling.
    pub node_provider_ids: BTreeMap<String, String>,
    /// The labels of the Nodes that have any, by Node name: the in-place update protocol lives in them.
    pub node_labels: BTreeMap<String, BTreeMap<String, String>>,
}

/// One machine's CAPI pair.
#[derive(Clone, Debug)]
pub struct MachinePair {
    /// The CAPI Machine (owner references are set when it is created).
    pub machine: capi::Machine,
    /// Its MCMMachine, naming the existing VM.
    pub infra: MCMMachine,
    /// The VM's providerID.
    pub provider_id: String,
    /// The Node the machine runs on (MCM's `node` label).
    pub node: String,
}

/// The CAPI objects for one MCM MachineDeployment.
#[derive(Clone, Debug)]
pub struct DeploymentPlan {
    /// The MachineDeployment's name (on both sides).
    pub name: String,
    /// The MCMMachineTemplate made from the deployment's class.
    pub template: MCMMachineTemplate,
    /// The CAPI MachineDeployment.
    pub deployment: capi::MachineDeployment,
    /// The CAPI MachineSet of the active MCM MachineSet.
    pub set: capi::MachineSet,
    /// The machines.
    pub machines: Vec<MachinePair>,
    /// Every MCM MachineSet of the deployment (the active one and old ones at zero), to pause and remove.
    pub mcm_sets: Vec<String>,
}

/// A value that does not map 1:1, and where it is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lossy {
    /// The value.
    pub what: String,
    /// Where it lives after the migration (or what to do about it).
    pub kept: String,
}

/// Something that makes the hand-over unsafe now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    /// The object, e.g. `MachineDeployment ns/name`.
    pub object: String,
    /// Why, as a sentence.
    pub reason: String,
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.object, self.reason)
    }
}

/// The human summary of a plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// What maps 1:1.
    pub one_to_one: Vec<String>,
    /// What maps with loss, and where the value is kept.
    pub lossy: Vec<Lossy>,
    /// What blocks the migration (apply refuses while there is any).
    pub blockers: Vec<Blocker>,
    /// MCM objects the migration does not touch.
    pub left_alone: Vec<String>,
}

impl Summary {
    /// The summary as text, one item a line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut section = |title: &str, lines: Vec<String>| {
            out.push_str(title);
            out.push('\n');
            if lines.is_empty() {
                out.push_str("  (none)\n");
            }
            for line in lines {
                out.push_str("  - ");
                out.push_str(&line);
                out.push('\n');
            }
        };
        section("maps 1:1:", self.one_to_one.clone());
        section(
            "maps with loss (where the value is kept):",
            self.lossy.iter().map(|l| format!("{}: {}", l.what, l.kept)).collect(),
        );
        section("left alone:", self.left_alone.clone());
        section("blockers:", self.blockers.iter().map(ToString::to_string).collect());
        out
    }
}

/// The plan: the CAPI objects to create and the summary.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The Cluster to create (absent: it exists).
    pub cluster: Option<capi::Cluster>,
    /// The MCMCluster to create (absent: it exists).
    pub mcm_cluster: Option<MCMCluster>,
    /// One entry per MCM MachineDeployment.
    pub deployments: Vec<DeploymentPlan>,
    /// What maps how, and what blocks.
    pub summary: Summary,
}

impl Plan {
    /// Every object of the plan as JSON values, in creation order (what `plan` prints).
    pub fn objects(&self) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        let mut push = |v: serde_json::Result<serde_json::Value>| {
            if let Ok(v) = v {
                out.push(v);
            }
        };
        if let Some(c) = &self.cluster {
            push(serde_json::to_value(c));
        }
        if let Some(c) = &self.mcm_cluster {
            push(serde_json::to_value(c));
        }
        for d in &self.deployments {
            push(serde_json::to_value(&d.template));
            for pair in &d.machines {
                push(serde_json::to_value(&pair.machine));
                push(serde_json::to_value(&pair.infra));
            }
            push(serde_json::to_value(&d.set));
            push(serde_json::to_value(&d.deployment));
        }
        out
    }
}

fn key(kind: &str, meta: &ObjectMeta) -> String {
    format!("{kind} {}/{}", meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
}

fn phase_of(m: &mcm::Machine) -> Option<&MachinePhase> {
    m.status.as_ref()?.current_status.as_ref()?.phase.as_ref()
}

fn infra_ref(kind: &str, name: &str) -> ContractVersionedObjectReference {
    ContractVersionedObjectReference {
        api_group: infra::GROUP.to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
    }
}

fn frozen_set(s: &mcm::MachineSet) -> bool {
    let labelled = s.metadata.labels.as_ref().and_then(|l| l.get(FREEZE_LABEL)).is_some_and(|v| v == FREEZE_VALUE);
    let condition = s.status.as_ref().and_then(|st| st.machine_set_condition.as_ref()).is_some_and(|cs| {
        cs.iter().any(|c| c.type_ == mcm::MachineSetConditionType::Frozen && c.status == mcm::ConditionStatus::True)
    });
    labelled || condition
}

fn frozen_deployment(d: &mcm::MachineDeployment) -> bool {
    let labelled = d.metadata.labels.as_ref().and_then(|l| l.get(FREEZE_LABEL)).is_some_and(|v| v == FREEZE_VALUE);
    let condition = d.status.as_ref().and_then(|st| st.conditions.as_ref()).is_some_and(|cs| {
        cs.iter()
            .any(|c| c.type_ == mcm::MachineDeploymentConditionType::Frozen && c.status == mcm::ConditionStatus::True)
    });
    labelled || condition
}

/// The deployment as the user left it: the migration's pause undone, runtime fields dropped.
fn source_deployment(d: &mcm::MachineDeployment) -> mcm::MachineDeployment {
    let mut src = d.clone();
    src.metadata = carried_meta(&d.metadata);
    if let Some(was) = d.metadata.annotations.as_ref().and_then(|a| a.get(WAS_PAUSED_ANNOTATION)) {
        src.spec.paused = was == "true";
    }
    src.status = None;
    src
}

/// Points a CAPI machine template at the cluster and the MCMMachineTemplate.
fn capi_template(t: &mut capi::MachineTemplateSpec, target: &Target, template: &str) {
    t.spec.cluster_name = target.cluster_name.clone();
    t.spec.infrastructure_ref = infra_ref("MCMMachineTemplate", template);
    let meta = t.metadata.get_or_insert_with(Default::default);
    label(&mut meta.labels, CLUSTER_NAME_LABEL, &target.cluster_name);
}

/// Plans the hand-over of every MCM MachineDeployment of the inventory.
pub fn plan(inventory: &Inventory, target: &Target) -> Plan {
    let mut summary = Summary::default();
    let classes: BTreeMap<&str, &MachineClass> =
        inventory.classes.iter().filter_map(|c| Some((c.metadata.name.as_deref()?, c))).collect();
    let mut deployments = Vec::new();
    let mut planned_sets: BTreeSet<String> = BTreeSet::new();
    let mut planned_machines: BTreeSet<String> = BTreeSet::new();
    for d in &inventory.deployments {
        if let Some(p) = plan_deployment(d, inventory, &classes, target, &mut summary) {
            planned_sets.extend(p.mcm_sets.iter().cloned());
            planned_machines.extend(p.machines.iter().filter_map(|m| m.machine.metadata.name.clone()));
            deployments.push(p);
        }
    }
    for s in inventory.sets.iter().filter(|s| !planned_sets.contains(s.metadata.name.as_deref().unwrap_or_default())) {
        if controller_name_of(&s.metadata, "MachineDeployment").is_none() {
            summary.left_alone.push(format!("{} (no MachineDeployment; not migrated)", key("MachineSet", &s.metadata)));
        }
    }
    for m in
        inventory.machines.iter().filter(|m| !planned_machines.contains(m.metadata.name.as_deref().unwrap_or_default()))
    {
        if controller_name_of(&m.metadata, "MachineSet").is_none() {
            summary.left_alone.push(format!("{} (no MachineSet; not migrated)", key("Machine", &m.metadata)));
        }
    }
    for c in &inventory.classes {
        summary.left_alone.push(format!(
            "{} (kept: the MCMMachineTemplates and MCMMachines reference it)",
            key("MachineClass", &c.metadata)
        ));
    }
    let cluster = inventory.cluster.is_none().then(|| {
        let mut c = capi::Cluster::new(
            &target.cluster_name,
            capi::ClusterSpec {
                infrastructure_ref: Some(infra_ref("MCMCluster", &target.cluster_name)),
                ..Default::default()
            },
        );
        c.metadata.namespace = Some(target.namespace.clone());
        annotate(&mut c.metadata.annotations, FROM_ANNOTATION, "mcm migrate");
        c
    });
    if let Some(c) = &inventory.cluster {
        let infra_kind = c.spec.infrastructure_ref.as_ref().map(|r| r.kind.as_str());
        if infra_kind.is_some_and(|k| k != "MCMCluster") {
            summary.lossy.push(Lossy {
                what: format!("Cluster {}/{}", target.namespace, target.cluster_name),
                kept: format!(
                    "exists with infrastructure {}; the MCMMachines wait for this Cluster, not for an MCMCluster",
                    infra_kind.unwrap_or_default()
                ),
            });
        }
    }
    let mcm_cluster = inventory.mcm_cluster.is_none().then(|| {
        let mut c = MCMCluster::new(&target.cluster_name, MCMClusterSpec::default());
        c.metadata.namespace = Some(target.namespace.clone());
        label(&mut c.metadata.labels, CLUSTER_NAME_LABEL, &target.cluster_name);
        annotate(&mut c.metadata.annotations, FROM_ANNOTATION, "mcm migrate");
        c
    });
    Plan { cluster, mcm_cluster, deployments, summary }
}

/// The providerID a handed-over machine carries: the one its Node carries when the Node names one, else the MCM
/// Machine's. MCM matches Nodes by name, so an MCM Machine may spell its VM otherwise than the Node does (MCM's AWS
/// provider wrote `aws:///<region>/<id>`, the cloud-controller writes `aws:///<zone>/<id>`); CAPI core matches by
/// equal providerIDs and would never link such a Machine. A Node naming another VM than the Machine is an error
/// (`Err` with the reason).
pub fn handed_over_provider_id(machine: &str, node: &str, node_provider_id: Option<&str>) -> Result<String, String> {
    match node_provider_id.filter(|p| !p.is_empty()) {
        None => Ok(machine.to_string()),
        Some(on_node) if identity::same_vm(machine, on_node) => Ok(on_node.to_string()),
        Some(on_node) => {
            Err(format!("its providerID {machine} and the providerID {on_node} of its Node {node} name different VMs"))
        }
    }
}

/// The in-place update labels of a machine's Node: a selected Node or one with a result is mid-update (blocks);
/// `candidate-for-update` alone is what MCM leaves behind after a finished in-place rollout (harmless, noted in
/// `settled`; so is the `InPlaceUpdate` condition with reason `UpdateSuccessful`, which the plan does not check).
fn in_place_node(node: &str, inventory: &Inventory, block: &mut impl FnMut(&str, String), settled: &mut Vec<String>) {
    let Some(labels) = inventory.node_labels.get(node) else { return };
    let n_key = format!("Node {node}");
    let mut busy = false;
    for label in [SELECTED_FOR_UPDATE, UPDATE_RESULT] {
        if let Some(v) = labels.get(label) {
            busy = true;
            block(&n_key, format!("in-place update in progress: label {label}={v}"));
        }
    }
    if !busy && labels.contains_key(CANDIDATE_FOR_UPDATE) {
        settled.push(format!(
            "{n_key}: label {CANDIDATE_FOR_UPDATE} (and any InPlaceUpdate condition) from a finished in-place update; \
             harmless, kept"
        ));
    }
}

fn controller_name_of<'a>(meta: &'a ObjectMeta, kind: &str) -> Option<&'a str> {
    super::objects::controller_name(meta, kind)
}

fn plan_deployment(
    d: &mcm::MachineDeployment,
    inventory: &Inventory,
    classes: &BTreeMap<&str, &MachineClass>,
    target: &Target,
    summary: &mut Summary,
) -> Option<DeploymentPlan> {
    let name = d.metadata.name.clone().unwrap_or_default();
    let d_key = key("MachineDeployment", &d.metadata);
    let before = summary.blockers.len();
    let mut block =
        |object: &str, reason: String| summary.blockers.push(Blocker { object: object.to_string(), reason });

    if let Some(step) = d.metadata.annotations.as_ref().and_then(|a| a.get(super::STEP_ANNOTATION))
        && super::RollbackStep::parse(step).is_some()
    {
        block(&d_key, format!("a rollback stopped at step {step}; run `mcm migrate rollback` again to finish it"));
    }
    if d.metadata.deletion_timestamp.is_some() {
        block(&d_key, "is being deleted".into());
    }
    let taken = inventory.capi_deployments.iter().find(|c| c.metadata.name.as_deref() == Some(name.as_str()));
    if taken.is_some_and(|c| c.metadata.annotations.as_ref().is_none_or(|a| !a.contains_key(FROM_ANNOTATION))) {
        block(
            &d_key,
            format!("a cluster.x-k8s.io MachineDeployment named {name} exists and was not made by mcm migrate"),
        );
    }
    if frozen_deployment(d) {
        block(&d_key, "is frozen (label freeze=True or condition Frozen): MCM's overshoot safety is acting".into());
    }
    if d.metadata.annotations.as_ref().and_then(|a| a.get(TRIGGER_DELETION_BY_MCM)).is_some_and(|v| !v.is_empty()) {
        block(&d_key, format!("a cluster-autoscaler scale-down is in progress ({TRIGGER_DELETION_BY_MCM} is set)"));
    }
    // The migration's own pause (`spec.paused`) bumps the generation of a deployment no controller observes any
    // more: only a deployment not yet touched is checked.
    let touched = d.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(super::STEP_ANNOTATION));
    if let (Some(generation), Some(observed)) =
        (d.metadata.generation, d.status.as_ref().and_then(|s| s.observed_generation))
        && observed < generation
        && !touched
    {
        block(&d_key, format!("rollout in progress: generation {generation} not yet observed (observed {observed})"));
    }
    let class = d.spec.template.spec.as_ref().map(|s| s.class.clone()).unwrap_or_default();
    if class.kind != MACHINE_CLASS_KIND {
        block(&d_key, format!("template class kind is {:?}; only MachineClass can be migrated", class.kind));
    } else if !classes.contains_key(class.name.as_str()) {
        block(&d_key, format!("MachineClass {} does not exist", class.name));
    }

    let sets: Vec<mcm::MachineSet> =
        inventory.sets.iter().filter(|s| controlled_by(&s.metadata, "MachineDeployment", &name)).cloned().collect();
    let machines_of = |set: &str| -> Vec<&mcm::Machine> {
        inventory.machines.iter().filter(|m| controlled_by(&m.metadata, "MachineSet", set)).collect()
    };
    let active: Vec<String> = sets
        .iter()
        .filter(|s| s.spec.replicas > 0 || !machines_of(s.metadata.name.as_deref().unwrap_or_default()).is_empty())
        .map(|s| format!("{} ({} replicas)", s.metadata.name.as_deref().unwrap_or_default(), s.spec.replicas))
        .collect();
    if active.len() > 1 {
        block(&d_key, format!("rollout in progress: MachineSets {} are active", active.join(", ")));
    }
    let new_set = find_new_machine_set(d, &sets, None).cloned();
    let Some(set) = new_set else {
        block(&d_key, "rollout in progress: no MachineSet has the deployment's current template yet".into());
        return None;
    };
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let set_key = key("MachineSet", &set.metadata);
    if frozen_set(&set) {
        block(&set_key, "is frozen (label freeze=True or condition Frozen)".into());
    }
    if set.spec.replicas != d.spec.replicas {
        block(
            &set_key,
            format!("scaling in progress: {} replicas, the deployment wants {}", set.spec.replicas, d.spec.replicas),
        );
    }
    let machines = machines_of(&set_name);
    if usize::try_from(set.spec.replicas).ok() != Some(machines.len()) {
        block(&set_key, format!("scaling in progress: {} machines for {} replicas", machines.len(), set.spec.replicas));
    }
    let mut node_names: BTreeMap<String, String> = BTreeMap::new();
    let mut provider_ids: BTreeMap<String, String> = BTreeMap::new();
    let mut respelled = Vec::new();
    let mut settled = Vec::new();
    for m in &machines {
        let m_key = key("Machine", &m.metadata);
        if m.metadata.deletion_timestamp.is_some() {
            block(&m_key, "is being deleted".into());
        }
        match phase_of(m) {
            Some(MachinePhase::Running) => {}
            // Not resumable on the CAPI side: the Node protocol's state would be half on MCM's objects.
            Some(
                p @ (MachinePhase::InPlaceUpdating
                | MachinePhase::InPlaceUpdateSuccessful
                | MachinePhase::InPlaceUpdateFailed),
            ) => {
                block(&m_key, format!("in-place update in progress ({}), not Running", p.as_str()));
            }
            phase => block(
                &m_key,
                format!("is {}, not Running", phase.map_or("being created".to_string(), |p| p.as_str().to_string())),
            ),
        }
        // MCM sets it when it moves a machine updated in place to the new set and removes it on its next pass.
        if let Some(v) = m.metadata.labels.as_ref().and_then(|l| l.get(UPDATE_RESULT)) {
            block(
                &m_key,
                format!(
                    "in-place update in progress: label {UPDATE_RESULT}={v} (MCM removes it on its next pass over \
                     the deployment)"
                ),
            );
        }
        let node = m.metadata.labels.as_ref().and_then(|l| l.get(NODE_LABEL)).filter(|n| !n.is_empty());
        if let Some(node) = node {
            in_place_node(node, inventory, &mut block, &mut settled);
        }
        match (create::provider_id(m), node) {
            (Some(id), Some(node)) => {
                let name = m.metadata.name.clone().unwrap_or_default();
                match handed_over_provider_id(id, node, inventory.node_provider_ids.get(node).map(String::as_str)) {
                    Ok(handed) => {
                        if handed != id {
                            respelled.push(format!(
                                "{m_key}: providerID {id} -> {handed}, the same VM as Node {node} spells it (CAPI \
                                 core links a Machine to the Node with an equal providerID)"
                            ));
                        }
                        provider_ids.insert(name.clone(), handed);
                    }
                    Err(reason) => block(&m_key, reason),
                }
                node_names.insert(name, node.clone());
            }
            (None, _) => block(&m_key, "has no providerID".into()),
            (_, None) => block(&m_key, "has no Node (label node)".into()),
        }
    }
    if summary.blockers.len() > before {
        return None;
    }
    summary.one_to_one.extend(respelled);
    summary.left_alone.extend(settled);

    // The objects.
    let src = source_deployment(d);
    let template_name = name.clone();
    let template_spec = src.spec.template.spec.clone().unwrap_or_default();
    let mut template = MCMMachineTemplate::new(
        &template_name,
        MCMMachineTemplateSpec {
            template: MCMMachineTemplateResource {
                metadata: None,
                spec: MCMMachineSpec {
                    class: Some(class.clone()),
                    node_template: template_spec.node_template.clone(),
                    configuration: template_spec.configuration.clone(),
                    ..Default::default()
                },
            },
        },
    );
    template.metadata.namespace = Some(target.namespace.clone());
    label(&mut template.metadata.labels, CLUSTER_NAME_LABEL, &target.cluster_name);
    label(&mut template.metadata.labels, capi::DEPLOYMENT_NAME_LABEL, &name);
    annotate(&mut template.metadata.annotations, FROM_ANNOTATION, &format!("MachineClass/{}", class.name));

    let mut deployment = convert::deployment_to_capi(&src);
    deployment.status = None;
    deployment.spec.cluster_name = target.cluster_name.clone();
    capi_template(&mut deployment.spec.template, target, &template_name);
    label(&mut deployment.metadata.labels, CLUSTER_NAME_LABEL, &target.cluster_name);
    annotate(&mut deployment.metadata.annotations, FROM_ANNOTATION, &format!("MachineDeployment/{name}"));
    for (mcm_key, capi_key) in AUTOSCALER_OPTIONS {
        if let Some(v) = src.metadata.annotations.as_ref().and_then(|a| a.get(mcm_key)) {
            annotate(&mut deployment.metadata.annotations, capi_key, v);
        }
    }

    let mut src_set = set.clone();
    src_set.metadata = carried_meta(&set.metadata);
    src_set.status = None;
    let mut capi_set = convert::machine_set_to_capi(&src_set);
    capi_set.status = None;
    capi_set.spec.cluster_name = target.cluster_name.clone();
    capi_template(&mut capi_set.spec.template, target, &template_name);
    label(&mut capi_set.metadata.labels, CLUSTER_NAME_LABEL, &target.cluster_name);
    label(&mut capi_set.metadata.labels, capi::DEPLOYMENT_NAME_LABEL, &name);
    annotate(&mut capi_set.metadata.annotations, FROM_ANNOTATION, &format!("MachineSet/{set_name}"));

    let mut pairs = Vec::new();
    for m in &machines {
        let machine_name = m.metadata.name.clone().unwrap_or_default();
        let provider_id = provider_ids.get(&machine_name).cloned().unwrap_or_default();
        let mut src_m = (*m).clone();
        src_m.metadata = carried_meta(&m.metadata);
        src_m.status = None;
        if let Some(labels) = src_m.metadata.labels.as_mut() {
            labels.remove(NODE_LABEL);
        }
        let mut machine = machine_from_hub(&src_m);
        machine.spec.cluster_name = target.cluster_name.clone();
        machine.spec.infrastructure_ref = infra_ref("MCMMachine", &machine_name);
        machine.spec.provider_id = Some(provider_id.clone());
        label(&mut machine.metadata.labels, CLUSTER_NAME_LABEL, &target.cluster_name);
        label(&mut machine.metadata.labels, capi::SET_NAME_LABEL, &set_name);
        label(&mut machine.metadata.labels, capi::DEPLOYMENT_NAME_LABEL, &name);
        if m.metadata.annotations.as_ref().and_then(|a| a.get(PRIORITY_ANNOTATION)).is_some_and(|p| p == "1") {
            annotate(&mut machine.metadata.annotations, capi::DELETE_MACHINE_ANNOTATION, "true");
        }
        annotate(&mut machine.metadata.annotations, FROM_ANNOTATION, &format!("Machine/{machine_name}"));

        let hub_view = mcm::Machine { metadata: ObjectMeta::default(), spec: src_m.spec.clone(), status: None };
        let mut infra_machine = convert::machine::from_hub(&hub_view);
        infra_machine.status = None;
        infra_machine.spec.provider_id = Some(provider_id.clone());
        infra_machine.metadata = ObjectMeta {
            name: Some(machine_name.clone()),
            namespace: Some(target.namespace.clone()),
            ..Default::default()
        };
        label(&mut infra_machine.metadata.labels, CLUSTER_NAME_LABEL, &target.cluster_name);
        label(&mut infra_machine.metadata.labels, capi::DEPLOYMENT_NAME_LABEL, &name);
        annotate(&mut infra_machine.metadata.annotations, capi::CLONED_FROM_NAME_ANNOTATION, &template_name);
        annotate(
            &mut infra_machine.metadata.annotations,
            capi::CLONED_FROM_GROUPKIND_ANNOTATION,
            &format!("MCMMachineTemplate.{}", infra::GROUP),
        );
        annotate(&mut infra_machine.metadata.annotations, FROM_ANNOTATION, &format!("Machine/{machine_name}"));
        let node = node_names.get(&machine_name).cloned().unwrap_or_default();
        pairs.push(MachinePair { machine, infra: infra_machine, provider_id, node });
    }

    describe(d, &src, &set, &sets, pairs.len(), &template_name, summary);
    Some(DeploymentPlan {
        name,
        template,
        deployment,
        set: capi_set,
        machines: pairs,
        mcm_sets: sets.iter().filter_map(|s| s.metadata.name.clone()).collect(),
    })
}

/// Where a strategy CAPI cannot express is kept, and who honours it: only our CAPI core reads the annotation back.
fn strategy_kept(strategy: &MachineDeploymentStrategyType) -> String {
    let honoured = match strategy {
        MachineDeploymentStrategyType::InPlaceUpdate => "updates in place, with the same orchestration and bounds",
        MachineDeploymentStrategyType::Recreate => "deletes every old machine before creating new ones",
        _ => return format!("annotation {MCM_DATA} on the CAPI MachineDeployment (CAPI has no equivalent)"),
    };
    format!(
        "kept in annotation {MCM_DATA} on the CAPI MachineDeployment: our CAPI core honours it ({honoured}); \
         upstream CAPI core ignores it, and the next template change replaces VMs (RollingUpdate)"
    )
}

/// The summary lines of one planned deployment.
fn describe(
    d: &mcm::MachineDeployment,
    src: &mcm::MachineDeployment,
    set: &mcm::MachineSet,
    sets: &[mcm::MachineSet],
    machines: usize,
    template: &str,
    summary: &mut Summary,
) {
    let d_key = key("MachineDeployment", &d.metadata);
    let class = src.spec.template.spec.as_ref().map(|s| s.class.name.clone()).unwrap_or_default();
    summary.one_to_one.push(format!(
        "{d_key}: replicas ({}), selector, template labels and annotations, paused -> MachineDeployment of the same name",
        src.spec.replicas
    ));
    summary.one_to_one.push(format!(
        "{d_key}: template class MachineClass {class} -> MCMMachineTemplate {template} (spec.template.spec.class)"
    ));
    let strategy = src.spec.strategy.as_ref().and_then(|s| s.type_.clone());
    match strategy {
        None | Some(MachineDeploymentStrategyType::RollingUpdate) => summary
            .one_to_one
            .push(format!("{d_key}: strategy RollingUpdate (maxSurge, maxUnavailable) -> spec.rollout.strategy")),
        Some(other) => summary
            .lossy
            .push(Lossy { what: format!("{d_key}: strategy {}", other.as_str()), kept: strategy_kept(&other) }),
    }
    let spec = &src.spec;
    let mut mcm_only = Vec::new();
    if spec.min_ready_seconds != 0 {
        mcm_only.push("minReadySeconds");
    }
    if spec.revision_history_limit.is_some() {
        mcm_only.push("revisionHistoryLimit");
    }
    if spec.progress_deadline_seconds.is_some() {
        mcm_only.push("progressDeadlineSeconds");
    }
    if spec.rollback_to.is_some() {
        mcm_only.push("rollbackTo");
    }
    if spec.auto_preserve_failed_machine_max != 0 {
        mcm_only.push("autoPreserveFailedMachineMax");
    }
    if !mcm_only.is_empty() {
        summary.lossy.push(Lossy {
            what: format!("{d_key}: {}", mcm_only.join(", ")),
            kept: format!("annotation {MCM_DATA} on the CAPI MachineDeployment"),
        });
    }
    let t = spec.template.spec.clone().unwrap_or_default();
    if t.configuration.drain_timeout.is_some() {
        summary
            .one_to_one
            .push(format!("{d_key}: drainTimeout -> spec.template.spec.deletion.nodeDrainTimeoutSeconds"));
    }
    let mut machine_only = Vec::new();
    if t.node_template.is_some() {
        machine_only.push("nodeTemplate");
    }
    let c = &t.configuration;
    if c.health_timeout.is_some()
        || c.creation_timeout.is_some()
        || c.disable_health_timeout.is_some()
        || c.max_evict_retries.is_some()
        || c.node_conditions.is_some()
        || c.in_place_update_timeout.is_some()
        || c.machine_preserve_timeout.is_some()
    {
        machine_only.push("health and creation timeouts, maxEvictRetries, nodeConditions");
    }
    if !machine_only.is_empty() {
        summary.lossy.push(Lossy {
            what: format!("{d_key}: template {}", machine_only.join(", ")),
            kept: format!(
                "spec.template.spec of MCMMachineTemplate {template} and of each MCMMachine (in force), and annotation \
                 {MCM_MACHINE_DATA} on the CAPI templates (a MachineHealthCheck is CAPI's own answer)"
            ),
        });
    }
    summary.one_to_one.push(format!(
        "{d_key}: MachineSet {} and its {machines} Machines -> MachineSet, Machines and MCMMachines of the same names \
         and providerIDs (every VM adopted; no VM created or deleted)",
        set.metadata.name.as_deref().unwrap_or_default()
    ));
    let old: Vec<&str> = sets
        .iter()
        .filter(|s| s.metadata.name != set.metadata.name)
        .filter_map(|s| s.metadata.name.as_deref())
        .collect();
    if !old.is_empty() {
        summary.lossy.push(Lossy {
            what: format!("{d_key}: old MachineSets {} (revision history)", old.join(", ")),
            kept: "not migrated (they have no machines); rolling back to their revisions needs their templates".into(),
        });
    }
    summary.lossy.push(Lossy {
        what: format!("{d_key}: the machines' status (phase, lastOperation)"),
        kept: "rebuilt by the controllers from the VMs and Nodes".into(),
    });
    summary.lossy.push(Lossy {
        what: format!("{d_key}: userData of MachineClass {class}'s secret"),
        kept: "not used by MCMMachines: set spec.template.spec.bootstrap.dataSecretName (a Secret with key `value`) \
               on the CAPI MachineDeployment before scaling up; adopted machines are not affected"
            .into(),
    });
    let mapped: Vec<&str> = AUTOSCALER_OPTIONS
        .iter()
        .filter(|(k, _)| src.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(*k)))
        .map(|(_, v)| *v)
        .collect();
    if !mapped.is_empty() {
        summary.one_to_one.push(format!("{d_key}: autoscaler options -> {}", mapped.join(", ")));
    }
    summary.lossy.push(Lossy {
        what: format!("{d_key}: cluster-autoscaler node group (MCM provider, --nodes=min:max:{}.{})",
            d.metadata.namespace.as_deref().unwrap_or_default(), d.metadata.name.as_deref().unwrap_or_default()),
        kept: "switch the autoscaler to its clusterapi provider and set cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size \
               and -max-size on the CAPI MachineDeployment"
            .into(),
    });
}

#[cfg(test)]
mod tests;
