//! The machine tree `mcm status` shows, built from an [`Inventory`]: both flavours converted to the hub
//! (`crate::convert`) and judged once ([`super::explain`]), then grouped by namespace, API group and (for CAPI)
//! Cluster. This is also the `-o json|yaml` schema (`docs/status.md`): nothing is folded here; folding is the
//! text rendering's business.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::Serialize;

use super::explain::{self, ClassIssue, Explanation, MachineFacts};
use super::inventory::Inventory;
use crate::api::{capi, infra, mcm};
use crate::convert;
use crate::lifecycle::claim::controller_of;
use crate::lifecycle::class;
use crate::lifecycle::config::{Effective, MachineConfig};
use crate::lifecycle::machine_deployment::revision::revision;
use crate::lifecycle::{create, status as machine_status};

/// The annotation upstream CAPI core records a MachineSet's revision in.
const CAPI_REVISION: &str = "machinedeployment.clusters.x-k8s.io/revision";

/// What the tree is built for.
#[derive(Clone, Debug)]
pub struct Options {
    /// The time ages and deadlines are measured against.
    pub now: Timestamp,
    /// The machine controller's timeouts (creation, health, drain) the deadlines are computed with, before each
    /// machine's own overrides.
    pub config: MachineConfig,
    /// Only this namespace (`None`: every namespace of the inventory).
    pub namespace: Option<String>,
    /// Only the MachineDeployment(s) of this name, of either flavour (their MachineSets and Machines).
    pub deployment: Option<String>,
}

/// The whole tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// When it was judged (ages and deadlines count from here).
    pub now: Time,
    /// One group per namespace, API group and Cluster, in that order.
    pub groups: Vec<Group>,
}

/// The objects of one namespace and flavour (and, for `cluster.x-k8s.io`, one Cluster).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    /// The namespace.
    pub namespace: String,
    /// `machine.sapcloud.io` or `cluster.x-k8s.io`.
    pub api_group: String,
    /// The Cluster (`spec.clusterName`) of `cluster.x-k8s.io` objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// MachineDeployments with their MachineSets and Machines, by name.
    pub machine_deployments: Vec<DeploymentNode>,
    /// MachineSets no listed MachineDeployment controls.
    pub machine_sets: Vec<SetNode>,
    /// Machines no listed MachineSet controls.
    pub machines: Vec<MachineNode>,
}

/// Replica counts of a MachineDeployment or MachineSet, from its status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// `spec.replicas`.
    pub desired: i32,
    /// Machines that exist (`status.replicas`).
    pub replicas: i32,
    /// Ready machines.
    pub ready: i32,
    /// Available machines.
    pub available: i32,
    /// Machines of the current template (MachineDeployments only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up_to_date: Option<i32>,
}

/// A MachineDeployment.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentNode {
    /// Its name.
    pub name: String,
    /// Its counts.
    #[serde(flatten)]
    pub counts: Counts,
    /// One word: `Available`, `RollingOut`, `Frozen`, … (`docs/status.md`).
    pub status: String,
    /// What explains its state, if anything needs explaining.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Explanation>,
    /// Its MachineSets, newest revision first.
    pub machine_sets: Vec<SetNode>,
}

/// A MachineSet.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetNode {
    /// Its name.
    pub name: String,
    /// The revision it serves (`deployment.kubernetes.io/revision`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Its counts.
    #[serde(flatten)]
    pub counts: Counts,
    /// One word: `Available`, `ScalingUp`, `Frozen`, `Empty`, …
    pub status: String,
    /// What explains its state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Explanation>,
    /// Its Machines, by name.
    pub machines: Vec<MachineNode>,
}

/// A Machine (for `cluster.x-k8s.io`, with its MCMMachine), its VM and its Node.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineNode {
    /// Its name.
    pub name: String,
    /// Its phase as its flavour writes it (MCM's `status.currentStatus.phase`, CAPI's `status.phase`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Running with a Ready Node.
    pub ready: bool,
    /// Ready and nothing to explain: the machines the text view folds.
    pub healthy: bool,
    /// MCM's `lastOperation` (an MCMMachine's, for `cluster.x-k8s.io`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<Operation>,
    /// The VM.
    pub vm: Vm,
    /// The Node, once the machine names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeState>,
    /// What explains its state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Explanation>,
}

/// MCM's last operation on a machine.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// `Create`, `Delete`, `HealthCheck`, …
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// `Processing`, `Successful`, `Failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// MCM's description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The driver's error code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// When.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

/// The VM of a machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Vm {
    /// The cloud's ID, once the VM exists.
    #[serde(rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The MCMMachine holding it (`cluster.x-k8s.io` Machines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcm_machine: Option<String>,
    /// The MCMMachine's `Ready` condition: status, reason and message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<ConditionState>,
}

/// One condition's status, reason and message.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionState {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Its reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A machine's Node.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeState {
    /// Its name.
    pub name: String,
    /// Its `Ready` condition's status (`Unknown` when none is known).
    pub ready: String,
    /// Cordoned.
    pub unschedulable: bool,
    /// Where `ready` comes from: `Node` (listed); `Machine` (Nodes were not read: the conditions the machine
    /// controller copied into the Machine's status); `Missing` (Nodes were read, this one is not among them: the
    /// copied conditions too).
    pub source: String,
}

/// Builds the tree of `inventory` as `options` say.
pub fn build(inventory: &Inventory, options: &Options) -> Report {
    let nodes: Option<HashMap<&str, &Node>> = inventory
        .nodes
        .as_ref()
        .map(|nodes| nodes.iter().filter_map(|n| Some((n.metadata.name.as_deref()?, n))).collect());
    let judge = Judge { options, nodes: nodes.as_ref() };
    let mut groups: BTreeMap<GroupKey, Flat> = BTreeMap::new();
    judge.mcm(inventory, &mut groups);
    judge.capi(inventory, &mut groups);
    let groups = groups.into_iter().filter_map(|(key, flat)| assemble(key, flat, options)).collect();
    Report { now: Time(options.now), groups }
}

/// Groups sort by namespace, then the MCM flavour before CAPI's, then Cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct GroupKey {
    namespace: String,
    capi: bool,
    cluster: Option<String>,
}

/// One group's objects, judged, before they are put into a tree.
#[derive(Default)]
struct Flat {
    deployments: Vec<(ObjectMeta, DeploymentNode)>,
    sets: Vec<(ObjectMeta, SetNode)>,
    machines: Vec<(ObjectMeta, MachineNode)>,
}

struct Judge<'a> {
    options: &'a Options,
    nodes: Option<&'a HashMap<&'a str, &'a Node>>,
}

fn namespace(meta: &ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

fn name(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

impl Judge<'_> {
    fn wanted(&self, meta: &ObjectMeta) -> bool {
        self.options.namespace.as_ref().is_none_or(|ns| meta.namespace.as_deref() == Some(ns.as_str()))
    }

    fn mcm(&self, inventory: &Inventory, groups: &mut BTreeMap<GroupKey, Flat>) {
        let key = |meta: &ObjectMeta| GroupKey { namespace: namespace(meta), capi: false, cluster: None };
        for d in inventory.mcm_deployments.iter().filter(|d| self.wanted(&d.metadata)) {
            let node = self.deployment(d, &inventory.mcm_sets);
            groups.entry(key(&d.metadata)).or_default().deployments.push((d.metadata.clone(), node));
        }
        for s in inventory.mcm_sets.iter().filter(|s| self.wanted(&s.metadata)) {
            groups.entry(key(&s.metadata)).or_default().sets.push((s.metadata.clone(), self.set(s)));
        }
        let classes: Option<HashMap<(String, String), &mcm::MachineClass>> = inventory
            .machine_classes
            .as_ref()
            .map(|classes| classes.iter().map(|c| ((namespace(&c.metadata), name(&c.metadata)), c)).collect());
        for m in inventory.mcm_machines.iter().filter(|m| self.wanted(&m.metadata)) {
            let class_issue = classes.as_ref().and_then(|classes| {
                let class = classes.get(&(namespace(&m.metadata), m.spec.class.name.clone())).copied();
                class::check_class(m, class).err().map(ClassIssue::from)
            });
            let vm = Vm { provider_id: create::provider_id(m).map(str::to_string), ..Default::default() };
            let phase = machine_status::phase(m).map(|p| p.as_str().to_string());
            let node = self.machine(m, phase, vm, class_issue);
            groups.entry(key(&m.metadata)).or_default().machines.push((m.metadata.clone(), node));
        }
    }

    fn capi(&self, inventory: &Inventory, groups: &mut BTreeMap<GroupKey, Flat>) {
        let key = |meta: &ObjectMeta, cluster: &str| GroupKey {
            namespace: namespace(meta),
            capi: true,
            cluster: Some(cluster.to_string()).filter(|c| !c.is_empty()),
        };
        let hub_sets: Vec<mcm::MachineSet> = inventory.capi_sets.iter().map(convert::machine_set_from_capi).collect();
        for d in inventory.capi_deployments.iter().filter(|d| self.wanted(&d.metadata)) {
            let hub = convert::deployment_from_capi(d);
            let node = self.deployment(&hub, &hub_sets);
            groups
                .entry(key(&d.metadata, &d.spec.cluster_name))
                .or_default()
                .deployments
                .push((d.metadata.clone(), node));
        }
        for (s, hub) in inventory.capi_sets.iter().zip(&hub_sets).filter(|(s, _)| self.wanted(&s.metadata)) {
            let mut node = self.set(hub);
            // Upstream core records the revision under its own annotation.
            node.revision = node.revision.or_else(|| {
                let annotations = s.metadata.annotations.as_ref()?;
                annotations.get(CAPI_REVISION)?.parse().ok()
            });
            groups.entry(key(&s.metadata, &s.spec.cluster_name)).or_default().sets.push((s.metadata.clone(), node));
        }
        let infra_machines: HashMap<(String, String), &infra::MCMMachine> =
            inventory.infra_machines.iter().map(|i| ((namespace(&i.metadata), name(&i.metadata)), i)).collect();
        for m in inventory.capi_machines.iter().filter(|m| self.wanted(&m.metadata)) {
            let reference = &m.spec.infrastructure_ref;
            let infra = (reference.kind == "MCMMachine")
                .then(|| infra_machines.get(&(namespace(&m.metadata), reference.name.clone())).copied())
                .flatten();
            let (hub, vm, class_issue) = capi_machine(m, infra);
            let phase = m.status.as_ref().and_then(|s| s.phase.clone());
            let node = self.machine(&hub, phase, vm, class_issue);
            groups.entry(key(&m.metadata, &m.spec.cluster_name)).or_default().machines.push((m.metadata.clone(), node));
        }
    }

    fn deployment(&self, d: &mcm::MachineDeployment, sets: &[mcm::MachineSet]) -> DeploymentNode {
        let uid = d.metadata.uid.as_deref();
        let owned: Vec<&mcm::MachineSet> = sets.iter().filter(|s| controlled_by(&s.metadata, uid)).collect();
        let verdict = explain::deployment(d, &owned);
        let status = d.status.clone().unwrap_or_default();
        DeploymentNode {
            name: name(&d.metadata),
            counts: Counts {
                desired: d.spec.replicas,
                replicas: status.replicas,
                ready: status.ready_replicas,
                available: status.available_replicas,
                up_to_date: Some(status.updated_replicas),
            },
            status: verdict.status,
            explanation: verdict.explanation,
            machine_sets: Vec::new(),
        }
    }

    fn set(&self, s: &mcm::MachineSet) -> SetNode {
        let verdict = explain::machine_set(s);
        let status = s.status.clone().unwrap_or_default();
        SetNode {
            name: name(&s.metadata),
            revision: revision(s).filter(|r| *r > 0),
            counts: Counts {
                desired: s.spec.replicas,
                replicas: status.replicas,
                ready: status.ready_replicas,
                available: status.available_replicas,
                up_to_date: None,
            },
            status: verdict.status,
            explanation: verdict.explanation,
            machines: Vec::new(),
        }
    }

    /// A machine in its hub view (`hub`) with its flavour's phase word, its VM and what is wrong with its class.
    fn machine(
        &self,
        hub: &mcm::Machine,
        phase: Option<String>,
        vm: Vm,
        class_issue: Option<ClassIssue>,
    ) -> MachineNode {
        let node = create::node_label(hub).map(|node_name| self.node(node_name, machine_status::conditions(hub)));
        let paused = crate::lifecycle::names::paused(&hub.metadata)
            || hub.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(capi::PAUSED_ANNOTATION));
        let facts = MachineFacts {
            machine: hub,
            class_issue: class_issue.as_ref(),
            node_ready: node.as_ref().map(|n| n.ready.as_str()),
            paused,
        };
        let effective = Effective::of(hub, &self.options.config);
        let explanation = explain::machine(&facts, &effective);
        let running = machine_status::phase(hub) == Some(&mcm::MachinePhase::Running);
        let ready = running && node.as_ref().is_some_and(|n| n.ready == "True");
        let op = machine_status::last_operation(hub).map(|op| Operation {
            type_: op.type_.as_ref().map(|t| t.as_str().to_string()),
            state: op.state.as_ref().map(|s| s.as_str().to_string()),
            description: op.description.clone(),
            error_code: op.error_code.clone(),
            last_update_time: op.last_update_time.clone(),
        });
        MachineNode {
            name: name(&hub.metadata),
            phase,
            ready,
            healthy: ready && explanation.is_none(),
            last_operation: op,
            vm,
            node,
            explanation,
        }
    }

    /// The Node `name`: as listed, or as the machine's copy of its conditions says.
    fn node(&self, name: &str, copied: &[NodeCondition]) -> NodeState {
        let ready_of = |conditions: &[NodeCondition]| {
            conditions.iter().find(|c| c.type_ == "Ready").map_or("Unknown".to_string(), |c| c.status.clone())
        };
        let Some(nodes) = self.nodes else {
            return NodeState {
                name: name.to_string(),
                ready: ready_of(copied),
                unschedulable: false,
                source: "Machine".into(),
            };
        };
        match nodes.get(name) {
            Some(node) => NodeState {
                name: name.to_string(),
                ready: ready_of(node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default()),
                unschedulable: node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
                source: "Node".into(),
            },
            None => NodeState {
                name: name.to_string(),
                ready: ready_of(copied),
                unschedulable: false,
                source: "Missing".into(),
            },
        }
    }
}

/// Whether `meta`'s controller reference points at the object with `uid`.
fn controlled_by(meta: &ObjectMeta, uid: Option<&str>) -> bool {
    uid.is_some_and(|uid| controller_of(meta).is_some_and(|o| o.uid == uid))
}

/// The hub view of a CAPI Machine as the set logic sees it (`convert::machine_view`), with what its MCMMachine
/// adds: the timeouts, the VM, the Node conditions and the deletion the VM's flow counts from.
fn capi_machine(m: &capi::Machine, infra: Option<&infra::MCMMachine>) -> (mcm::Machine, Vm, Option<ClassIssue>) {
    let mut hub = convert::machine_view::machine_to_hub(m, infra);
    let mut vm = Vm { provider_id: m.spec.provider_id.clone(), ..Default::default() };
    let Some(infra) = infra else {
        return (hub, vm, None);
    };
    let view = convert::machine::to_hub(infra, Some(m));
    hub.spec.configuration = view.spec.configuration.clone();
    if let Some(id) = create::provider_id(&view) {
        vm.provider_id = Some(id.to_string());
    }
    hub.spec.provider_id = vm.provider_id.clone();
    if let (Some(status), Some(conditions)) =
        (hub.status.as_mut(), view.status.as_ref().and_then(|s| s.conditions.clone()))
    {
        status.conditions = Some(conditions);
    }
    if infra.metadata.deletion_timestamp.is_some() {
        hub.metadata.deletion_timestamp = infra.metadata.deletion_timestamp.clone();
    }
    vm.mcm_machine = infra.metadata.name.clone();
    let ready = infra
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == crate::lifecycle::infra::condition::READY));
    vm.ready = ready.map(|c| ConditionState {
        status: c.status.clone(),
        reason: Some(c.reason.clone()).filter(|r| !r.is_empty()),
        message: Some(c.message.clone()).filter(|m| !m.is_empty()),
    });
    let class_issue = ready.and_then(ClassIssue::from_infra_ready);
    (hub, vm, class_issue)
}

/// Puts one group's objects into their tree; `None` when nothing of it is wanted.
fn assemble(key: GroupKey, flat: Flat, options: &Options) -> Option<Group> {
    let Flat { mut deployments, sets, machines } = flat;
    if let Some(wanted) = &options.deployment {
        deployments.retain(|(_, d)| &d.name == wanted);
        if deployments.is_empty() {
            return None;
        }
    }
    let mut machines_by_set: HashMap<String, Vec<MachineNode>> = HashMap::new();
    let mut loose_machines = Vec::new();
    let set_uids: Vec<&str> = sets.iter().filter_map(|(meta, _)| meta.uid.as_deref()).collect();
    for (meta, machine) in machines {
        match controller_of(&meta).filter(|o| set_uids.contains(&o.uid.as_str())) {
            Some(owner) => machines_by_set.entry(owner.uid.clone()).or_default().push(machine),
            None => loose_machines.push(machine),
        }
    }
    let deployment_uids: Vec<&str> = deployments.iter().filter_map(|(meta, _)| meta.uid.as_deref()).collect();
    let mut sets_by_deployment: HashMap<String, Vec<SetNode>> = HashMap::new();
    let mut loose_sets = Vec::new();
    for (meta, mut set) in sets {
        set.machines = meta.uid.as_ref().and_then(|uid| machines_by_set.remove(uid)).unwrap_or_default();
        set.machines.sort_by(|a, b| a.name.cmp(&b.name));
        match controller_of(&meta).filter(|o| deployment_uids.contains(&o.uid.as_str())) {
            Some(owner) => sets_by_deployment.entry(owner.uid.clone()).or_default().push(set),
            None => loose_sets.push(set),
        }
    }
    let mut machine_deployments: Vec<DeploymentNode> = deployments
        .into_iter()
        .map(|(meta, mut d)| {
            d.machine_sets = meta.uid.as_ref().and_then(|uid| sets_by_deployment.remove(uid)).unwrap_or_default();
            d.machine_sets.sort_by(|a, b| b.revision.cmp(&a.revision).then_with(|| a.name.cmp(&b.name)));
            d
        })
        .collect();
    machine_deployments.sort_by(|a, b| a.name.cmp(&b.name));
    let (mut machine_sets, mut machines) = match options.deployment {
        Some(_) => (Vec::new(), Vec::new()),
        None => (loose_sets, loose_machines),
    };
    machine_sets.sort_by(|a, b| a.name.cmp(&b.name));
    machines.sort_by(|a, b| a.name.cmp(&b.name));
    if machine_deployments.is_empty() && machine_sets.is_empty() && machines.is_empty() {
        return None;
    }
    Some(Group {
        namespace: key.namespace,
        api_group: if key.capi { capi::GROUP } else { mcm::GROUP }.to_string(),
        cluster: key.cluster,
        machine_deployments,
        machine_sets,
        machines,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};

    use super::*;
    use crate::api::mcm::{CurrentStatus, MachinePhase, MachineStatus};

    fn now() -> Timestamp {
        "2025-06-01T12:00:00Z".parse().unwrap()
    }

    fn meta(ns: &str, name: &str, owner: Option<(&str, &str)>) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            owner_references: owner.map(|(kind, owner)| {
                vec![OwnerReference {
                    kind: kind.into(),
                    name: owner.into(),
                    uid: format!("uid-{owner}"),
                    controller: Some(true),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }
    }

    fn running(ns: &str, name: &str, set: Option<&str>) -> mcm::Machine {
        let mut m = mcm::Machine::new(name, Default::default());
        m.metadata = meta(ns, name, set.map(|s| ("MachineSet", s)));
        m.metadata.labels = Some(BTreeMap::from([("node".to_string(), format!("node-{name}"))]));
        m.status = Some(MachineStatus {
            current_status: Some(CurrentStatus { phase: Some(MachinePhase::Running), ..Default::default() }),
            ..Default::default()
        });
        m
    }

    fn node(name: &str, ready: &str) -> Node {
        Node {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn options() -> Options {
        Options { now: now(), config: MachineConfig::default(), namespace: None, deployment: None }
    }

    fn mcm_inventory() -> Inventory {
        let mut d = mcm::MachineDeployment::new("workers", Default::default());
        d.metadata = meta("a", "workers", None);
        let mut other = mcm::MachineDeployment::new("other", Default::default());
        other.metadata = meta("a", "other", None);
        let mut set = mcm::MachineSet::new("workers-1", Default::default());
        set.metadata = meta("a", "workers-1", Some(("MachineDeployment", "workers")));
        let mut loose_set = mcm::MachineSet::new("loose", Default::default());
        loose_set.metadata = meta("a", "loose", None);
        Inventory {
            mcm_deployments: vec![d, other],
            mcm_sets: vec![set, loose_set],
            mcm_machines: vec![
                running("a", "workers-1-b", Some("workers-1")),
                running("a", "workers-1-a", Some("workers-1")),
                running("a", "bare", None),
                running("b", "elsewhere", None),
            ],
            nodes: Some(vec![node("node-workers-1-a", "True"), node("node-workers-1-b", "False")]),
            ..Default::default()
        }
    }

    #[test]
    fn objects_hang_under_their_controllers_by_uid() {
        let report = build(&mcm_inventory(), &options());
        let namespaces: Vec<&str> = report.groups.iter().map(|g| g.namespace.as_str()).collect();
        assert_eq!(namespaces, ["a", "b"]);
        let a = &report.groups[0];
        assert_eq!(a.api_group, "machine.sapcloud.io");
        let names: Vec<&str> = a.machine_deployments.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["other", "workers"]);
        let workers = &a.machine_deployments[1];
        let machines: Vec<&str> = workers.machine_sets[0].machines.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(machines, ["workers-1-a", "workers-1-b"], "by name");
        assert_eq!(a.machine_sets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["loose"]);
        assert_eq!(a.machines.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["bare"]);
    }

    #[test]
    fn a_machine_is_ready_with_a_ready_node_and_judged_by_the_node_it_names() {
        let report = build(&mcm_inventory(), &options());
        let machines = &report.groups[0].machine_deployments[1].machine_sets[0].machines;
        let (a, b) = (&machines[0], &machines[1]);
        assert!(a.ready && a.healthy);
        assert_eq!(a.node.as_ref().map(|n| (n.ready.as_str(), n.source.as_str())), Some(("True", "Node")));
        assert!(!b.ready && !b.healthy);
        assert_eq!(b.explanation.as_ref().map(|e| e.reason.as_str()), Some(explain::reason::NODE_NOT_READY));
        let bare = &report.groups[0].machines[0];
        assert_eq!(bare.node.as_ref().map(|n| (n.ready.as_str(), n.source.as_str())), Some(("Unknown", "Missing")));
    }

    #[test]
    fn filters_by_namespace_and_deployment_name() {
        let only_b = build(&mcm_inventory(), &Options { namespace: Some("b".into()), ..options() });
        assert_eq!(only_b.groups.len(), 1);
        assert_eq!(only_b.groups[0].machines[0].name, "elsewhere");
        let workers = build(&mcm_inventory(), &Options { deployment: Some("workers".into()), ..options() });
        assert_eq!(workers.groups.len(), 1);
        let g = &workers.groups[0];
        assert_eq!(g.machine_deployments.len(), 1);
        assert!(g.machine_sets.is_empty() && g.machines.is_empty(), "nothing outside the deployment");
        let none = build(&mcm_inventory(), &Options { deployment: Some("nope".into()), ..options() });
        assert!(none.groups.is_empty());
    }

    #[test]
    fn a_missing_class_is_reported_once_classes_are_known() {
        let mut inventory = mcm_inventory();
        let judged = |inventory: &Inventory| {
            let report = build(inventory, &options());
            report.groups[0].machines[0].explanation.as_ref().map(|e| e.reason.clone())
        };
        let bare = &mut inventory.mcm_machines[2];
        bare.spec.class = mcm::ClassSpec { kind: "MachineClass".into(), name: "gone".into(), ..Default::default() };
        // Its Node is not among the listed ones: the machine's copy of its conditions says Ready.
        let ready = NodeCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() };
        bare.status.get_or_insert_with(Default::default).conditions = Some(vec![ready]);
        assert_eq!(judged(&inventory), None, "classes not read: no verdict");
        inventory.machine_classes = Some(Vec::new());
        assert_eq!(judged(&inventory).as_deref(), Some(explain::reason::CLASS_INVALID));
    }

    #[test]
    fn capi_machines_are_judged_with_their_mcm_machine() {
        let mut m = capi::Machine::new("m1", Default::default());
        m.metadata = meta("p", "m1", None);
        m.spec.cluster_name = "prod".into();
        m.spec.infrastructure_ref = capi::ContractVersionedObjectReference {
            api_group: infra::GROUP.into(),
            kind: "MCMMachine".into(),
            name: "m1-infra".into(),
        };
        m.status = Some(capi::MachineStatus { phase: Some("Provisioning".into()), ..Default::default() });
        let mut i = infra::MCMMachine::new("m1-infra", Default::default());
        i.metadata = meta("p", "m1-infra", Some(("Machine", "m1")));
        i.status = Some(infra::MCMMachineStatus {
            conditions: Some(vec![Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: crate::lifecycle::infra::reason::INVALID_CLASS.into(),
                message: "MachineClass p/gone does not exist".into(),
                last_transition_time: Time(now()),
                observed_generation: None,
            }]),
            ..Default::default()
        });
        let inventory = Inventory { capi_machines: vec![m], infra_machines: vec![i], ..Default::default() };
        let report = build(&inventory, &options());
        let g = &report.groups[0];
        assert_eq!((g.api_group.as_str(), g.cluster.as_deref()), ("cluster.x-k8s.io", Some("prod")));
        let machine = &g.machines[0];
        assert_eq!(machine.phase.as_deref(), Some("Provisioning"));
        assert_eq!(machine.vm.mcm_machine.as_deref(), Some("m1-infra"));
        let e = machine.explanation.as_ref().unwrap();
        assert_eq!(
            (e.reason.as_str(), e.message.as_str()),
            (explain::reason::CLASS_INVALID, "InvalidClass: MachineClass p/gone does not exist")
        );
    }
}
