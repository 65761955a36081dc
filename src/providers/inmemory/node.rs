//! What the simulated kubelet writes: the Node a VM registers and the statuses it posts (pure functions).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::cloud::Vm;

/// The message the node-lifecycle controller puts on conditions of a Node whose kubelet went silent.
pub const UNKNOWN_MESSAGE: &str = "Kubelet stopped posting node status.";

/// The kubelet version Nodes report.
pub const KUBELET_VERSION: &str = "v1.37.0";

/// The condition types the kubelet owns, Ready first.
pub const CONDITION_TYPES: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// Whether the kubelet is posting (`Ready`) or has gone silent (`Unknown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Ready=True, pressures False.
    Ready,
    /// Every condition Unknown (NodeStatusUnknown).
    Unknown,
}

/// The Node a VM registers (status is written separately: the API server drops it on create).
pub fn node_object(vm: &Vm) -> Node {
    let template_meta = vm.node_template.as_ref().and_then(|t| t.metadata.as_ref());
    let mut labels: BTreeMap<String, String> = template_meta.and_then(|m| m.labels.clone()).unwrap_or_default();
    // The kubelet's own labels win over the template's, as with `--node-labels`.
    labels.extend([
        ("kubernetes.io/hostname".to_string(), vm.machine_name.clone()),
        ("node.kubernetes.io/instance-type".to_string(), vm.machine_type.clone()),
        ("topology.kubernetes.io/region".to_string(), vm.region.clone()),
        ("topology.kubernetes.io/zone".to_string(), vm.zone.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
    ]);
    let annotations = template_meta.and_then(|m| m.annotations.clone()).filter(|a| !a.is_empty());
    let taints = vm.node_template.as_ref().and_then(|t| t.spec.as_ref()).and_then(|s| s.taints.clone());
    Node {
        metadata: ObjectMeta {
            name: Some(vm.machine_name.clone()),
            labels: Some(labels),
            annotations,
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(vm.provider_id.clone()),
            taints: taints.filter(|t| !t.is_empty()),
            ..Default::default()
        }),
        status: None,
    }
}

/// The kubelet's four conditions: Ready since `since`, or Unknown since `since`, last heard of at `heartbeat`.
pub fn conditions(health: Health, since: &Time, heartbeat: &Time) -> Vec<NodeCondition> {
    CONDITION_TYPES
        .iter()
        .map(|type_| {
            let (status, reason, message) = match (health, *type_) {
                (Health::Unknown, _) => ("Unknown", "NodeStatusUnknown", UNKNOWN_MESSAGE),
                (Health::Ready, "Ready") => ("True", "KubeletReady", "kubelet is posting ready status"),
                (Health::Ready, "MemoryPressure") => {
                    ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
                }
                (Health::Ready, "DiskPressure") => {
                    ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
                }
                (Health::Ready, _) => ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            };
            NodeCondition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: Some(reason.to_string()),
                message: Some(message.to_string()),
                last_transition_time: Some(since.clone()),
                last_heartbeat_time: Some(heartbeat.clone()),
            }
        })
        .collect()
}

/// The full status the kubelet posts when it registers a VM's Node.
pub fn ready_status(vm: &Vm, since: &Time, heartbeat: &Time) -> NodeStatus {
    let capacity: BTreeMap<String, Quantity> = [
        ("cpu".to_string(), Quantity(vm.cpu.clone())),
        ("memory".to_string(), Quantity(vm.memory.clone())),
        ("pods".to_string(), Quantity("110".to_string())),
    ]
    .into();
    let hex = vm.id.trim_start_matches("i-");
    NodeStatus {
        allocatable: Some(capacity.clone()),
        capacity: Some(capacity),
        addresses: Some(vm.addresses()),
        conditions: Some(conditions(Health::Ready, since, heartbeat)),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            operating_system: "linux".into(),
            os_image: "InMemory Linux".into(),
            kernel_version: "6.12.0-inmemory".into(),
            container_runtime_version: "containerd://2.1.0".into(),
            kubelet_version: vm.kubelet_version.clone(),
            kube_proxy_version: String::new(),
            machine_id: format!("{hex:0>32}"),
            system_uuid: uuid_like(hex),
            boot_id: uuid_like(&format!("{hex}b")),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What the kubelet re-posts once its VM was updated in place: a merge patch of the spec-dependent label
/// (instance type), and a strategic merge patch of the status with the new capacity and node info (conditions
/// and addresses untouched).
pub fn refreshed(vm: &Vm) -> (serde_json::Value, serde_json::Value) {
    let labels = serde_json::json!({
        "metadata": { "labels": { "node.kubernetes.io/instance-type": vm.machine_type } }
    });
    // Conditions need times, which this patch leaves alone; any will do before they are dropped.
    let epoch = Time(jiff::Timestamp::UNIX_EPOCH);
    let full = ready_status(vm, &epoch, &epoch);
    let status = serde_json::json!({
        "status": { "capacity": full.capacity, "allocatable": full.allocatable, "nodeInfo": full.node_info }
    });
    (labels, status)
}

/// A UUID-shaped string from hex digits (system UUID and boot ID only need to look like one and be stable).
fn uuid_like(hex: &str) -> String {
    let digits: String = format!("{hex:0>32}").chars().rev().take(32).collect();
    format!("{}-{}-{}-{}-{}", &digits[..8], &digits[8..12], &digits[12..16], &digits[16..20], &digits[20..32])
}

/// The Ready condition of a Node: its status, when it last changed and when the kubelet last posted.
pub fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Taint;
    use tokio::time::Instant;

    use super::*;
    use crate::api::mcm::NodeTemplateSpec;

    fn vm() -> Vm {
        let now = Instant::now();
        Vm {
            id: "i-00000000000000ab".into(),
            provider_id: "inmemory:///local-a/i-00000000000000ab".into(),
            machine_name: "m1".into(),
            namespace: "default".into(),
            region: "local".into(),
            zone: "local-a".into(),
            machine_type: "m.large".into(),
            cpu: "4".into(),
            memory: "16Gi".into(),
            tags: BTreeMap::new(),
            kubelet_version: "v1.34.1".into(),
            revision: 0,
            node_template: Some(NodeTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some([("pool".into(), "a".into()), ("kubernetes.io/os".into(), "windows".into())].into()),
                    annotations: Some([("note".into(), "x".into())].into()),
                    ..Default::default()
                }),
                spec: Some(NodeSpec {
                    taints: Some(vec![Taint {
                        key: "dedicated".into(),
                        effect: "NoSchedule".into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            }),
            created_at: now,
            boot_at: now,
            initialized_at: Some(now),
            dies_at: None,
            deleted_at: None,
        }
    }

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn node_carries_provider_id_labels_and_template() {
        let node = node_object(&vm());
        let labels = node.metadata.labels.unwrap();
        let want = [
            ("kubernetes.io/hostname", "m1"),
            ("node.kubernetes.io/instance-type", "m.large"),
            ("topology.kubernetes.io/region", "local"),
            ("topology.kubernetes.io/zone", "local-a"),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
            ("pool", "a"),
        ];
        for (k, v) in want {
            assert_eq!(labels.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert_eq!(node.metadata.name.as_deref(), Some("m1"));
        assert_eq!(node.metadata.annotations.unwrap()["note"], "x");
        let spec = node.spec.unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("inmemory:///local-a/i-00000000000000ab"));
        assert_eq!(spec.taints.unwrap()[0].key, "dedicated");
        assert!(node.status.is_none());
    }

    #[test]
    fn ready_status_reports_capacity_addresses_and_conditions() {
        let (since, beat) = (t("2025-01-01T00:00:00Z"), t("2025-01-01T00:00:30Z"));
        let status = ready_status(&vm(), &since, &beat);
        let cap = status.capacity.unwrap();
        assert_eq!((cap["cpu"].0.as_str(), cap["memory"].0.as_str(), cap["pods"].0.as_str()), ("4", "16Gi", "110"));
        assert_eq!(status.allocatable.unwrap(), cap);
        let addresses = status.addresses.unwrap();
        assert_eq!(addresses[0].type_, "InternalIP");
        assert_eq!(addresses[0].address, vm().internal_ip());
        assert_eq!((addresses[1].type_.as_str(), addresses[1].address.as_str()), ("Hostname", "m1"));
        let info = status.node_info.unwrap();
        assert_eq!(info.system_uuid.len(), 36);
        assert_eq!(info.kubelet_version, "v1.34.1", "the VM's version");
        let conditions = status.conditions.unwrap();
        let got: Vec<(&str, &str, &str)> =
            conditions.iter().map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_deref().unwrap())).collect();
        assert_eq!(
            got,
            [
                ("Ready", "True", "KubeletReady"),
                ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ]
        );
        assert!(conditions.iter().all(|c| c.last_transition_time == Some(since.clone())));
        assert!(conditions.iter().all(|c| c.last_heartbeat_time == Some(beat.clone())));
    }

    #[test]
    fn unknown_conditions_look_like_the_node_lifecycle_controller() {
        let (since, beat) = (t("2025-01-01T00:01:00Z"), t("2025-01-01T00:00:30Z"));
        for c in conditions(Health::Unknown, &since, &beat) {
            assert_eq!(c.status, "Unknown");
            assert_eq!(c.reason.as_deref(), Some("NodeStatusUnknown"));
            assert_eq!(c.message.as_deref(), Some(UNKNOWN_MESSAGE));
            assert_eq!((c.last_transition_time, c.last_heartbeat_time), (Some(since.clone()), Some(beat.clone())));
        }
    }

    #[test]
    fn refreshed_names_the_new_type_capacity_and_version() {
        let updated =
            Vm { machine_type: "m.xlarge".into(), memory: "32Gi".into(), kubelet_version: "v1.38.0".into(), ..vm() };
        let (labels, status) = refreshed(&updated);
        assert_eq!(labels["metadata"]["labels"]["node.kubernetes.io/instance-type"], "m.xlarge");
        assert_eq!(labels["metadata"].as_object().unwrap().len(), 1, "labels only");
        let status = &status["status"];
        assert_eq!(status["capacity"]["memory"], "32Gi");
        assert_eq!(status["allocatable"]["memory"], "32Gi");
        assert_eq!(status["nodeInfo"]["kubeletVersion"], "v1.38.0");
        assert!(status.get("conditions").is_none() && status.get("addresses").is_none());
    }

    #[test]
    fn node_without_template() {
        let mut plain = vm();
        plain.node_template = None;
        let node = node_object(&plain);
        assert_eq!(node.metadata.labels.unwrap().len(), 6);
        assert!(node.metadata.annotations.is_none());
        assert!(node.spec.unwrap().taints.is_none());
    }
}
