//! The migrate planner (`mcm migrate plan`) over whatever a namespace holds, and the rollback planner
//! (`mcm migrate rollback`) over the CAPI objects, both the ones the namespace holds and the ones the plan makes.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::{capi, mcm};
use crate::migrate::plan::{Inventory, Target, plan};
use crate::migrate::reverse::{CapiInventory, reverse};

fn typed<T: DeserializeOwned>(object: &Value) -> Option<T> {
    serde_json::from_value(object.clone()).ok()
}

/// Input: a JSON array of objects (MCM's MachineDeployments, MachineSets, Machines and MachineClasses; CAPI's
/// Cluster, MachineDeployments, MachineSets and Machines; MCMCluster, MCMMachines, MCMMachineTemplates; Nodes),
/// sorted into the planners' inventories by `apiVersion` and `kind`; objects that do not decode are left out, as
/// a typed list would refuse them. Invariant: planning is deterministic (the same objects twice).
pub fn migrate_plan(data: &[u8]) {
    let Ok(Value::Array(objects)) = serde_json::from_slice::<Value>(data) else { return };
    let mut inventory = Inventory::default();
    let mut capi_inventory = CapiInventory::default();
    let mut capi_deployments = Vec::new();
    for object in &objects {
        let group = object["apiVersion"].as_str().unwrap_or_default().split('/').next().unwrap_or_default();
        match (group, object["kind"].as_str().unwrap_or_default()) {
            ("machine.sapcloud.io", "MachineDeployment") => inventory.deployments.extend(typed(object)),
            ("machine.sapcloud.io", "MachineSet") => inventory.sets.extend(typed(object)),
            ("machine.sapcloud.io", "Machine") => inventory.machines.extend(typed(object)),
            ("machine.sapcloud.io", "MachineClass") => inventory.classes.extend(typed(object)),
            ("cluster.x-k8s.io", "Cluster") => inventory.cluster = typed(object),
            ("cluster.x-k8s.io", "MachineDeployment") => {
                capi_deployments.extend(typed::<capi::MachineDeployment>(object));
                inventory.capi_deployments.extend(typed(object));
            }
            ("cluster.x-k8s.io", "MachineSet") => capi_inventory.sets.extend(typed(object)),
            ("cluster.x-k8s.io", "Machine") => capi_inventory.machines.extend(typed(object)),
            ("infrastructure.cluster.x-k8s.io", "MCMCluster") => inventory.mcm_cluster = typed(object),
            ("infrastructure.cluster.x-k8s.io", "MCMMachine") => capi_inventory.infra.extend(typed(object)),
            ("infrastructure.cluster.x-k8s.io", "MCMMachineTemplate") => {
                capi_inventory.templates.extend(typed(object));
            }
            ("v1", "Node") => {
                if let (Some(name), Some(id)) =
                    (object["metadata"]["name"].as_str(), object["spec"]["providerID"].as_str())
                {
                    inventory.node_provider_ids.insert(name.into(), id.into());
                }
                if let (Some(name), Ok(labels)) = (
                    object["metadata"]["name"].as_str(),
                    serde_json::from_value::<BTreeMap<String, String>>(object["metadata"]["labels"].clone()),
                ) {
                    inventory.node_labels.insert(name.into(), labels);
                }
            }
            _ => {}
        }
    }
    let namespace = inventory
        .deployments
        .first()
        .and_then(|d: &mcm::MachineDeployment| d.metadata.namespace.clone())
        .unwrap_or_else(|| "default".into());
    let target = Target { namespace, cluster_name: "fuzz".into() };
    let planned = plan(&inventory, &target);
    let objects = planned.objects();
    let _summary = planned.summary.render();
    assert!(plan(&inventory, &target).objects() == objects, "planning the same inventory twice differs");
    for d in &capi_deployments {
        let _ = reverse(d, &capi_inventory);
    }
    // The rollback of what the plan would create.
    let mut made = CapiInventory::default();
    for d in &planned.deployments {
        made.sets.push(d.set.clone());
        made.templates.push(d.template.clone());
        for pair in &d.machines {
            made.machines.push(pair.machine.clone());
            made.infra.push(pair.infra.clone());
        }
    }
    for d in &planned.deployments {
        let _ = reverse(&d.deployment, &made);
    }
}
