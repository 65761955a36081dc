//! What drivers are asked and what they answer.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{NodeAddress, PersistentVolumeSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

use crate::api::mcm::{NodeTemplate, NodeTemplateSpec};

/// Secret data: the merged `secretRef` and `credentialsSecretRef` data, `userData` templated.
///
/// `Debug` never prints values, so a request can be logged safely.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretData(pub BTreeMap<String, Vec<u8>>);

impl SecretData {
    /// The value of `key` as UTF-8 text.
    pub fn text(&self, key: &str) -> Option<String> {
        self.0.get(key).map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// The first of `keys` present, as text (providers accept aliases such as `userData`/`userdata`).
    pub fn first_text(&self, keys: &[&str]) -> Option<String> {
        keys.iter().find_map(|k| self.text(k))
    }
}

impl fmt::Debug for SecretData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.keys().map(|k| (k, "<redacted>"))).finish()
    }
}

/// The machine a request is about.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MachineInfo {
    /// The Machine's name (VMs are tagged with it).
    pub name: String,
    /// The Machine's namespace.
    pub namespace: String,
    /// The providerID, once known.
    pub provider_id: Option<String>,
    /// Labels, annotations and taints for the Node.
    pub node_template: Option<NodeTemplateSpec>,
    /// The Machine's labels.
    pub labels: BTreeMap<String, String>,
}

/// The class a request uses (an MCM MachineClass, or an MCMMachine's inline class).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClassInfo {
    /// The class name (for messages).
    pub name: String,
    /// `MachineClass.provider`: which driver.
    pub provider: String,
    /// The driver's configuration.
    pub provider_spec: Value,
    /// Node resources for scale-from-zero.
    pub node_template: Option<NodeTemplate>,
}

/// A request about one machine.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MachineRequest {
    /// The machine.
    pub machine: MachineInfo,
    /// Its class.
    pub class: ClassInfo,
    /// Merged secret data, `userData` templated.
    /// Never serialized: secrets stay in the process (the remote in-memory cloud needs none).
    #[serde(skip)]
    pub secret: SecretData,
    /// Opaque state from the previous call (`status.lastKnownState`).
    pub last_known_state: Option<String>,
}

/// The VM a create made (or found).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CreateMachineResponse {
    /// The VM's provider ID, exactly as its Node will carry it.
    pub provider_id: String,
    /// The name the Node will have.
    pub node_name: String,
    /// Opaque state for the next call.
    pub last_known_state: Option<String>,
    /// Addresses (used when there is no target cluster).
    pub addresses: Vec<NodeAddress>,
}

/// The VM an initialization finished.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InitializeMachineResponse {
    /// The VM's provider ID.
    pub provider_id: String,
    /// The Node's name.
    pub node_name: String,
    /// Addresses.
    pub addresses: Vec<NodeAddress>,
}

/// What a delete leaves.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeleteMachineResponse {
    /// Opaque state for the next call.
    pub last_known_state: Option<String>,
}

/// The VM's current state.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MachineStatusResponse {
    /// The VM's provider ID.
    pub provider_id: String,
    /// The Node's name.
    pub node_name: String,
    /// Addresses.
    pub addresses: Vec<NodeAddress>,
}

/// A request to list a class's VMs.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ListMachinesRequest {
    /// The class (its cluster and role tags select the VMs).
    pub class: ClassInfo,
    /// Merged secret data.
    /// Never serialized: secrets stay in the process (the remote in-memory cloud needs none).
    #[serde(skip)]
    pub secret: SecretData,
}

/// A request to map persistent volumes to cloud volume IDs.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GetVolumeIdsRequest {
    /// The volumes' specs.
    pub pv_specs: Vec<PersistentVolumeSpec>,
}

/// What one node of a class offers, as the driver knows it from the class alone (its instance type or machine
/// size, its root disk): the keys are the ones cluster-autoscaler reads to scale a node group from zero (`cpu`,
/// `memory`, `nvidia.com/gpu`, `ephemeral-storage`, `pods`). A class's `nodeTemplate` overrides it key by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeCapacity {
    /// Resources by name.
    pub resources: BTreeMap<String, Quantity>,
    /// The CPU architecture as Kubernetes names it (`amd64`, `arm64`), when the type implies one.
    pub architecture: Option<String>,
}

/// The resource names of [`NodeCapacity`] (cluster-autoscaler's keys).
pub mod capacity_keys {
    /// vCPUs.
    pub const CPU: &str = "cpu";
    /// Memory.
    pub const MEMORY: &str = "memory";
    /// NVIDIA GPUs.
    pub const GPU: &str = "nvidia.com/gpu";
    /// The root disk.
    pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
    /// Pods.
    pub const PODS: &str = "pods";
}

impl NodeCapacity {
    /// `cpu` and `memory` (MiB), with `nvidia.com/gpu` when `gpu > 0`.
    pub fn new(cpu: u32, memory_mib: u64, gpu: u32, architecture: &str) -> NodeCapacity {
        let mut resources = BTreeMap::from([
            (capacity_keys::CPU.to_string(), Quantity(cpu.to_string())),
            (capacity_keys::MEMORY.to_string(), Quantity(format!("{memory_mib}Mi"))),
        ]);
        if gpu > 0 {
            resources.insert(capacity_keys::GPU.to_string(), Quantity(gpu.to_string()));
        }
        NodeCapacity { resources, architecture: Some(architecture.to_string()) }
    }

    /// With `ephemeral-storage` of `gib` GiB (the root disk), when known and positive.
    pub fn with_root_disk_gib(mut self, gib: Option<i64>) -> NodeCapacity {
        if let Some(gib) = gib.filter(|g| *g > 0) {
            self.resources.insert(capacity_keys::EPHEMERAL_STORAGE.to_string(), Quantity(format!("{gib}Gi")));
        }
        self
    }
}

/// Tag keys every driver puts on what it creates and selects by.
pub mod tags {
    /// Prefix of the cluster tag key (`kubernetes.io/cluster/<cluster>`).
    pub const CLUSTER_PREFIX: &str = "kubernetes.io/cluster/";
    /// Prefix of the role tag key (`kubernetes.io/role/<role>`).
    pub const ROLE_PREFIX: &str = "kubernetes.io/role/";
    /// The tag carrying the machine name on VMs of drivers without a name field.
    pub const MACHINE_NAME: &str = "mcm.gardener.cloud/machine-name";

    /// Prefix of the cluster network tag of GCE instances (`kubernetes-io-cluster-<cluster>`, Gardener's form:
    /// network tags allow neither `.` nor `/`).
    pub const NETWORK_CLUSTER_PREFIX: &str = "kubernetes-io-cluster-";
    /// Prefix of the role network tag of GCE instances (`kubernetes-io-role-<role>`).
    pub const NETWORK_ROLE_PREFIX: &str = "kubernetes-io-role-";

    /// Prefix of the cluster tag key on Azure (`kubernetes.io-cluster-<cluster>`): Azure tag keys cannot hold `/`,
    /// so Gardener's Azure classes spell the keys with `-`.
    pub const AZURE_CLUSTER_PREFIX: &str = "kubernetes.io-cluster-";
    /// Prefix of the role tag key on Azure (`kubernetes.io-role-<role>`).
    pub const AZURE_ROLE_PREFIX: &str = "kubernetes.io-role-";

    /// The cluster and role tag keys among `tags`, or a message naming what is missing.
    pub fn ownership<'a>(tags: impl IntoIterator<Item = &'a String>) -> Result<(String, String), String> {
        find_pair(tags, CLUSTER_PREFIX, ROLE_PREFIX, "a tag key")
    }

    /// The cluster and role tags among GCE network tags (a list, not a map), or a message naming what is missing.
    pub fn network_ownership<'a>(tags: impl IntoIterator<Item = &'a String>) -> Result<(String, String), String> {
        find_pair(tags, NETWORK_CLUSTER_PREFIX, NETWORK_ROLE_PREFIX, "a tag")
    }

    /// As [`ownership`], with Azure's spelling of the keys.
    pub fn azure_ownership<'a>(tags: impl IntoIterator<Item = &'a String>) -> Result<(String, String), String> {
        find_pair(tags, AZURE_CLUSTER_PREFIX, AZURE_ROLE_PREFIX, "a tag key")
    }

    /// The cluster and role tag keys in either spelling (for code that serves every provider), or the message of
    /// [`ownership`].
    pub fn any_ownership<'a>(tags: impl IntoIterator<Item = &'a String>) -> Result<(String, String), String> {
        let keys: Vec<&String> = tags.into_iter().collect();
        ownership(keys.iter().copied()).or_else(|why| azure_ownership(keys.iter().copied()).map_err(|_| why))
    }

    fn find_pair<'a>(
        tags: impl IntoIterator<Item = &'a String>,
        cluster_prefix: &str,
        role_prefix: &str,
        what: &str,
    ) -> Result<(String, String), String> {
        let keys: Vec<&String> = tags.into_iter().collect();
        let cluster = keys.iter().find(|k| k.starts_with(cluster_prefix) && k.len() > cluster_prefix.len());
        let role = keys.iter().find(|k| k.starts_with(role_prefix) && k.len() > role_prefix.len());
        match (cluster, role) {
            (Some(c), Some(r)) => Ok((c.to_string(), r.to_string())),
            (None, _) => Err(format!("must contain {what} {cluster_prefix}<cluster name>")),
            (_, None) => Err(format!("must contain {what} {role_prefix}<role>")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_debug_never_shows_values() {
        let s = SecretData([("providerSecretAccessKey".to_string(), b"hunter2".to_vec())].into());
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter2") && shown.contains("<redacted>"), "{shown}");
        assert_eq!(s.first_text(&["missing", "providerSecretAccessKey"]).as_deref(), Some("hunter2"));
    }

    #[test]
    fn ownership_tags_are_required() {
        let ok = ["kubernetes.io/cluster/dev".to_string(), "kubernetes.io/role/node".to_string()];
        assert_eq!(
            tags::ownership(&ok).unwrap(),
            ("kubernetes.io/cluster/dev".to_string(), "kubernetes.io/role/node".to_string())
        );
        assert!(tags::ownership(&ok[..1]).unwrap_err().contains("kubernetes.io/role/"));
        assert!(tags::ownership(&[]).unwrap_err().contains("kubernetes.io/cluster/"));
        let network = ["kubernetes-io-cluster-a".to_string(), "kubernetes-io-role-node".to_string()];
        assert_eq!(
            tags::network_ownership(&network).unwrap(),
            ("kubernetes-io-cluster-a".to_string(), "kubernetes-io-role-node".to_string())
        );
        assert_eq!(
            tags::network_ownership(&network[1..]).unwrap_err(),
            "must contain a tag kubernetes-io-cluster-<cluster name>"
        );
        assert!(tags::network_ownership(&network[..1]).unwrap_err().contains("kubernetes-io-role-"));
        let azure = ["kubernetes.io-cluster-dev".to_string(), "kubernetes.io-role-node".to_string()];
        assert!(tags::ownership(&azure).is_err(), "AWS, GCP and InMemory classes keep the slash spelling");
        assert_eq!(tags::azure_ownership(&azure).unwrap().0, "kubernetes.io-cluster-dev");
        assert!(tags::azure_ownership(&ok).is_err());
        assert_eq!(tags::any_ownership(&azure).unwrap().1, "kubernetes.io-role-node");
        assert_eq!(tags::any_ownership(&ok).unwrap().1, "kubernetes.io/role/node");
        assert!(tags::any_ownership(&azure[..1]).unwrap_err().contains("kubernetes.io/cluster/"));
    }
}
