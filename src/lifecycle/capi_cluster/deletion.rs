//! Deleting a Cluster as core's Cluster controller does: while its finalizer holds the Cluster, its workers go
//! first (its MachineDeployments, the MachineSets no deployment controls, the Machines no set controls,
//! control-plane Machines last), and the Cluster waits until none of its MachineDeployments, MachineSets and
//! Machines is left, so their drains run and their VMs are deleted; then its MCMCluster; then the finalizer.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{CONTROL_PLANE_LABEL, INFRA_CLUSTER_KIND};
use crate::api::capi::{self, Machine, MachineDeployment, MachineSet};
use crate::api::infra::MCMCluster;
use crate::lifecycle::claim::controller_of;

/// The finalizer our Cluster controller holds on CAPI Clusters (not core's `cluster.cluster.x-k8s.io`, so the two
/// are told apart).
pub const CLUSTER_FINALIZER: &str = "capi.machine.sapcloud.io/cluster";

/// Reasons of the Cluster's `Deleting` condition (core's).
pub mod reason {
    /// Not being deleted.
    pub const NOT_DELETING: &str = "NotDeleting";
    /// Workers are left.
    pub const WAITING_FOR_WORKERS: &str = "WaitingForWorkersDeletion";
    /// The MCMCluster is left.
    pub const WAITING_FOR_INFRASTRUCTURE: &str = "WaitingForInfrastructureDeletion";
    /// Done.
    pub const DELETION_COMPLETED: &str = "DeletionCompleted";
}

/// A direct child of the Cluster to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Child {
    /// A MachineDeployment.
    Deployment(String),
    /// A MachineSet no MachineDeployment controls.
    Set(String),
    /// A Machine no MachineSet controls.
    Machine(String),
}

/// The Cluster's objects, as the stores show them (only those whose `spec.clusterName` is the Cluster's).
#[derive(Clone, Copy, Debug)]
pub struct Descendants<'a> {
    /// Its MachineDeployments.
    pub deployments: &'a [&'a MachineDeployment],
    /// Its MachineSets.
    pub sets: &'a [&'a MachineSet],
    /// Its Machines.
    pub machines: &'a [&'a Machine],
}

/// The next step of a Cluster's deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterDeletionStep {
    /// Workers are left: delete these (those not being deleted yet) and wait; the `Deleting` message lists what is
    /// left, as core lists it.
    Workers {
        /// Children to delete now.
        delete: Vec<Child>,
        /// The condition's message.
        message: String,
    },
    /// Delete the MCMCluster of this name.
    DeleteInfrastructure(String),
    /// The MCMCluster is being deleted.
    WaitForInfrastructure,
    /// Everything is gone: drop the finalizer.
    RemoveFinalizer,
}

fn controlled_by(meta: &ObjectMeta, kind: &str) -> bool {
    controller_of(meta).is_some_and(|o| o.kind == kind && o.api_version.starts_with(capi::GROUP))
}

fn deleting(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

fn name(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// `Kind: a, b, c` with at most three names, as core's list helper shortens them.
fn listed(what: &str, mut names: Vec<String>) -> Option<String> {
    if names.is_empty() {
        return None;
    }
    names.sort();
    let more = names.len().saturating_sub(3);
    names.truncate(3);
    let mut text = format!("* {what}: {}", names.join(", "));
    if more > 0 {
        text.push_str(&format!(", ... ({more} more)"));
    }
    Some(text)
}

/// Decides the next step of deleting a Cluster whose `spec.infrastructureRef` names `infra_name` (`infra` is that
/// MCMCluster if it exists).
pub fn deletion_step(d: &Descendants<'_>, infra_name: Option<&str>, infra: Option<&MCMCluster>) -> ClusterDeletionStep {
    let control_plane = |m: &Machine| m.metadata.labels.as_ref().is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL));
    let mut delete: Vec<Child> = Vec::new();
    delete
        .extend(d.deployments.iter().filter(|o| !deleting(&o.metadata)).map(|o| Child::Deployment(name(&o.metadata))));
    delete.extend(
        d.sets
            .iter()
            .filter(|o| !deleting(&o.metadata) && !controlled_by(&o.metadata, "MachineDeployment"))
            .map(|o| Child::Set(name(&o.metadata))),
    );
    let standalone: Vec<&&Machine> =
        d.machines.iter().filter(|m| !deleting(&m.metadata) && !controlled_by(&m.metadata, "MachineSet")).collect();
    delete.extend(standalone.iter().filter(|m| !control_plane(m)).map(|m| Child::Machine(name(&m.metadata))));
    delete.extend(standalone.iter().filter(|m| control_plane(m)).map(|m| Child::Machine(name(&m.metadata))));

    let (control, workers): (Vec<&&Machine>, Vec<&&Machine>) = d.machines.iter().partition(|m| control_plane(m));
    let lines: Vec<String> = [
        listed("Control plane Machines", control.iter().map(|m| name(&m.metadata)).collect()),
        listed("MachineDeployments", d.deployments.iter().map(|o| name(&o.metadata)).collect()),
        listed("MachineSets", d.sets.iter().map(|o| name(&o.metadata)).collect()),
        listed("Worker Machines", workers.iter().map(|m| name(&m.metadata)).collect()),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !lines.is_empty() {
        return ClusterDeletionStep::Workers { delete, message: lines.join("\n") };
    }
    match (infra_name, infra) {
        (Some(_), Some(i)) if deleting(&i.metadata) => ClusterDeletionStep::WaitForInfrastructure,
        (Some(n), Some(_)) => ClusterDeletionStep::DeleteInfrastructure(n.to_string()),
        _ => ClusterDeletionStep::RemoveFinalizer,
    }
}

/// The `Deleting` condition's reason and message for a step.
pub fn deleting_condition(step: &ClusterDeletionStep) -> (&'static str, String) {
    match step {
        ClusterDeletionStep::Workers { message, .. } => (reason::WAITING_FOR_WORKERS, message.clone()),
        ClusterDeletionStep::DeleteInfrastructure(_) | ClusterDeletionStep::WaitForInfrastructure => {
            (reason::WAITING_FOR_INFRASTRUCTURE, format!("Waiting for {INFRA_CLUSTER_KIND} to be deleted"))
        }
        ClusterDeletionStep::RemoveFinalizer => (reason::DELETION_COMPLETED, "Deletion completed".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object<T: serde::de::DeserializeOwned>(kind: &str, name: &str, extra: serde_json::Value) -> T {
        let mut v = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind,
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"clusterName": "c", "selector": {}, "template": {"spec": {"clusterName": "c",
                "infrastructureRef": {"apiGroup": "x", "kind": "y", "name": "z"}, "bootstrap": {}}},
                "infrastructureRef": {"apiGroup": "x", "kind": "y", "name": "z"}, "bootstrap": {}}});
        json_patch::merge(&mut v, &extra);
        serde_json::from_value(v).unwrap()
    }

    fn owned_by(kind: &str) -> serde_json::Value {
        json!({"metadata": {"ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind,
            "name": "o", "uid": "u", "controller": true}]}})
    }

    #[test]
    fn workers_first_then_the_infrastructure_then_the_finalizer() {
        let md: MachineDeployment = object("MachineDeployment", "md", json!({}));
        let owned_set: MachineSet = object("MachineSet", "md-1", owned_by("MachineDeployment"));
        let lone_set: MachineSet = object("MachineSet", "lone", json!({}));
        let set_machine: Machine = object("Machine", "md-1-a", owned_by("MachineSet"));
        let cp: Machine =
            object("Machine", "cp", json!({"metadata": {"labels": {"cluster.x-k8s.io/control-plane": ""}}}));
        let worker: Machine = object("Machine", "w", json!({}));
        let gone_soon: Machine =
            object("Machine", "x", json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        let infra: MCMCluster = serde_json::from_value(json!({"metadata": {"name": "c", "namespace": "ns"},
            "spec": {}}))
        .unwrap();
        let mut infra_deleting = infra.clone();
        infra_deleting.metadata.deletion_timestamp = gone_soon.metadata.deletion_timestamp.clone();

        let step = deletion_step(
            &Descendants {
                deployments: &[&md],
                sets: &[&owned_set, &lone_set],
                machines: &[&set_machine, &cp, &worker, &gone_soon],
            },
            Some("c"),
            Some(&infra),
        );
        let ClusterDeletionStep::Workers { delete, message } = step else { panic!("{step:?}") };
        assert_eq!(
            delete,
            [
                Child::Deployment("md".into()),
                Child::Set("lone".into()),
                Child::Machine("w".into()),
                Child::Machine("cp".into())
            ],
            "control-plane Machines last; owned and deleting objects go by their owners"
        );
        assert_eq!(
            message,
            "* Control plane Machines: cp\n* MachineDeployments: md\n* MachineSets: lone, md-1\n\
             * Worker Machines: md-1-a, w, x"
        );
        let none = Descendants { deployments: &[], sets: &[], machines: &[] };
        assert_eq!(
            deletion_step(&none, Some("c"), Some(&infra)),
            ClusterDeletionStep::DeleteInfrastructure("c".into())
        );
        assert_eq!(deletion_step(&none, Some("c"), Some(&infra_deleting)), ClusterDeletionStep::WaitForInfrastructure);
        assert_eq!(deletion_step(&none, Some("c"), None), ClusterDeletionStep::RemoveFinalizer);
        assert_eq!(deletion_step(&none, None, None), ClusterDeletionStep::RemoveFinalizer);
        let many: Vec<Machine> = (0..5).map(|i| object("Machine", &format!("m{i}"), owned_by("MachineSet"))).collect();
        let refs: Vec<&Machine> = many.iter().collect();
        let step = deletion_step(&Descendants { deployments: &[], sets: &[], machines: &refs }, None, None);
        assert_eq!(
            step,
            ClusterDeletionStep::Workers {
                delete: vec![],
                message: "* Worker Machines: m0, m1, m2, ... (2 more)".into()
            }
        );
    }
}
