//! What `mcm status` looks at: one list per kind, read from a cluster ([`super::live`]) or from a file of objects
//! (`mcm status -f`, e.g. the output of `kubectl get … -o yaml`).

use k8s_openapi::api::core::v1::Node;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::{capi, infra, mcm};

/// The objects of both flavours, as listed. Nothing here is filtered or converted yet.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    /// `machine.sapcloud.io` MachineDeployments.
    pub mcm_deployments: Vec<mcm::MachineDeployment>,
    /// `machine.sapcloud.io` MachineSets.
    pub mcm_sets: Vec<mcm::MachineSet>,
    /// `machine.sapcloud.io` Machines.
    pub mcm_machines: Vec<mcm::Machine>,
    /// MachineClasses; `None` when they were not read (not served, not permitted, not in the file): the class
    /// checks are then left out.
    pub machine_classes: Option<Vec<mcm::MachineClass>>,
    /// `cluster.x-k8s.io` MachineDeployments.
    pub capi_deployments: Vec<capi::MachineDeployment>,
    /// `cluster.x-k8s.io` MachineSets.
    pub capi_sets: Vec<capi::MachineSet>,
    /// `cluster.x-k8s.io` Machines.
    pub capi_machines: Vec<capi::Machine>,
    /// MCMMachines (the CAPI Machines' VMs).
    pub infra_machines: Vec<infra::MCMMachine>,
    /// Nodes; `None` when they were not read. A Machine's Node is then judged by the conditions the machine
    /// controller copied into the Machine's status.
    pub nodes: Option<Vec<Node>>,
}

/// Why a file of objects cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// A document is not YAML (or JSON).
    #[error("document {document} is not valid YAML or JSON: {source}")]
    Syntax {
        /// 1-based.
        document: usize,
        /// The parser's error.
        source: serde_yaml::Error,
    },
    /// An object of a kind `mcm status` reads does not have that kind's shape.
    #[error("document {document}: {kind} {name:?} cannot be read: {source}")]
    Object {
        /// 1-based.
        document: usize,
        /// `apiVersion/kind`.
        kind: String,
        /// `metadata.name`.
        name: String,
        /// The decoder's error.
        source: serde_json::Error,
    },
}

impl Inventory {
    /// The objects of a YAML stream (or one JSON document): single objects, and `List`s of them as
    /// `kubectl get -o yaml` prints. Kinds `mcm status` does not read are skipped; MachineClasses and Nodes count
    /// as read only when the file holds at least one.
    pub fn from_documents(text: &str) -> Result<Inventory, InventoryError> {
        let mut inventory = Inventory::default();
        let mut classes = Vec::new();
        let mut nodes = Vec::new();
        for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let document_number = index + 1;
            let value = Value::deserialize(document)
                .map_err(|source| InventoryError::Syntax { document: document_number, source })?;
            inventory.add(value, document_number, &mut classes, &mut nodes)?;
        }
        inventory.machine_classes = (!classes.is_empty()).then_some(classes);
        inventory.nodes = (!nodes.is_empty()).then_some(nodes);
        Ok(inventory)
    }

    fn add(
        &mut self,
        value: Value,
        document: usize,
        classes: &mut Vec<mcm::MachineClass>,
        nodes: &mut Vec<Node>,
    ) -> Result<(), InventoryError> {
        let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
        if let Some(Value::Array(items)) = value.get("items")
            && kind.ends_with("List")
        {
            for item in items.clone() {
                self.add(item, document, classes, nodes)?;
            }
            return Ok(());
        }
        let group = api_version.split_once('/').map_or("", |(group, _)| group);
        match (group, kind.as_str()) {
            (mcm::GROUP, "MachineDeployment") => self.mcm_deployments.push(decode(value, document)?),
            (mcm::GROUP, "MachineSet") => self.mcm_sets.push(decode(value, document)?),
            (mcm::GROUP, "Machine") => self.mcm_machines.push(decode(value, document)?),
            (mcm::GROUP, "MachineClass") => classes.push(decode(value, document)?),
            (capi::GROUP, "MachineDeployment") => self.capi_deployments.push(decode(value, document)?),
            (capi::GROUP, "MachineSet") => self.capi_sets.push(decode(value, document)?),
            (capi::GROUP, "Machine") => self.capi_machines.push(decode(value, document)?),
            (infra::GROUP, "MCMMachine") => self.infra_machines.push(decode(value, document)?),
            ("", "Node") if api_version == "v1" => nodes.push(decode(value, document)?),
            _ => {}
        }
        Ok(())
    }
}

fn decode<K: DeserializeOwned>(value: Value, document: usize) -> Result<K, InventoryError> {
    let kind = format!(
        "{}/{}",
        value.get("apiVersion").and_then(Value::as_str).unwrap_or_default(),
        value.get("kind").and_then(Value::as_str).unwrap_or_default()
    );
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
    serde_json::from_value(value).map_err(|source| InventoryError::Object { document, kind, name, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_single_objects_of_both_flavours_are_read_and_other_kinds_skipped() {
        let text = r#"
apiVersion: v1
kind: List
items:
- apiVersion: machine.sapcloud.io/v1alpha1
  kind: Machine
  metadata: {name: m1, namespace: ns}
  spec: {class: {kind: MachineClass, name: c}}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: skipped}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineSet
metadata: {name: s1, namespace: ns}
spec: {clusterName: c}
---
{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
"#;
        let inventory = Inventory::from_documents(text).unwrap();
        assert_eq!(inventory.mcm_machines.len(), 1);
        assert_eq!(inventory.capi_sets.len(), 1);
        assert_eq!(inventory.nodes.as_ref().map(Vec::len), Some(1));
        assert!(inventory.machine_classes.is_none(), "no class in the file: classes not read");
    }

    #[test]
    fn a_malformed_object_names_its_document_and_kind() {
        let text =
            "apiVersion: machine.sapcloud.io/v1alpha1\nkind: MachineSet\nmetadata: {name: s}\nspec: {replicas: many}\n";
        let err = Inventory::from_documents(text).unwrap_err().to_string();
        assert!(err.starts_with("document 1: machine.sapcloud.io/v1alpha1/MachineSet \"s\" cannot be read"), "{err}");
        let err = Inventory::from_documents("a: [").unwrap_err().to_string();
        assert!(err.starts_with("document 1 is not valid YAML"), "{err}");
    }
}
