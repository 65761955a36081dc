//! Capacity of EC2 instance types (vCPUs, memory, GPUs, architecture) for node templates, so a pool can scale
//! from zero. The table is `data/aws-instance-types.csv`, compiled in and parsed on first use.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

use crate::providers::NodeCapacity;

/// The CSV the table is read from (comment lines start with `#`).
pub const TABLE_CSV: &str = include_str!("../../../data/aws-instance-types.csv");

/// The resources of one instance type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceCapacity {
    /// The instance type (`m5.large`).
    pub instance_type: &'static str,
    /// vCPUs.
    pub cpu: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// NVIDIA GPUs.
    pub gpu: u32,
    /// CPU architecture, as Kubernetes names it (`amd64`, `arm64`).
    pub architecture: &'static str,
}

impl InstanceCapacity {
    /// The node template capacity: `cpu`, `memory` and, with GPUs, `nvidia.com/gpu`.
    pub fn resources(&self) -> BTreeMap<String, Quantity> {
        let mut out = BTreeMap::from([
            ("cpu".to_string(), Quantity(self.cpu.to_string())),
            ("memory".to_string(), Quantity(format!("{}Mi", self.memory_mib))),
        ]);
        if self.gpu > 0 {
            out.insert("nvidia.com/gpu".to_string(), Quantity(self.gpu.to_string()));
        }
        out
    }
}

/// What a node of a class with this providerSpec offers: `machineType` from the table, and `ephemeral-storage`
/// from the root disk (`blockDevices[]` named `/root`, or the only one) when the spec sizes it. `None` for an
/// instance type the table does not know. Read leniently: the driver validates the spec when it creates a VM.
pub fn capacity_of(provider_spec: &Value) -> Option<NodeCapacity> {
    let machine_type = provider_spec.get("machineType")?.as_str()?;
    let c = capacity(machine_type)?;
    let devices = provider_spec.get("blockDevices").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let root = devices
        .iter()
        .find(|d| devices.len() == 1 || d.get("deviceName").and_then(Value::as_str) == Some(super::spec::ROOT_DEVICE));
    let gib = root.and_then(|d| d.pointer("/ebs/volumeSize")).and_then(Value::as_i64);
    Some(NodeCapacity::new(c.cpu, c.memory_mib, c.gpu, c.architecture).with_root_disk_gib(gib))
}

static TABLE: LazyLock<Result<Vec<InstanceCapacity>, String>> = LazyLock::new(|| parse_table(TABLE_CSV));

/// The capacity of `instance_type`, if the table knows it.
pub fn capacity(instance_type: &str) -> Option<&'static InstanceCapacity> {
    TABLE.as_ref().ok()?.iter().find(|c| c.instance_type == instance_type)
}

/// Every instance type in the table (empty if the compiled-in table were malformed; a test keeps it parsing).
pub fn all() -> &'static [InstanceCapacity] {
    TABLE.as_ref().map(Vec::as_slice).unwrap_or(&[])
}

/// Parses the table: a header `instance_type,vcpu,memory_mib,gpu,architecture`, then one row per type.
pub fn parse_table(csv: &'static str) -> Result<Vec<InstanceCapacity>, String> {
    const HEADER: &str = "instance_type,vcpu,memory_mib,gpu,architecture";
    let mut lines = csv.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
    match lines.next() {
        Some((_, header)) if header.trim() == HEADER => {}
        other => return Err(format!("the first row must be {HEADER:?}, got {:?}", other.map(|(_, l)| l))),
    }
    let mut rows: Vec<InstanceCapacity> = Vec::new();
    for (n, line) in lines {
        let bad = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let [instance_type, cpu, memory, gpu, architecture] = cells[..] else {
            return Err(bad("expected 5 columns"));
        };
        if !instance_type.contains('.') || rows.iter().any(|r| r.instance_type == instance_type) {
            return Err(bad("instance type must look like family.size and appear once"));
        }
        if !matches!(architecture, "amd64" | "arm64") {
            return Err(bad("architecture must be amd64 or arm64"));
        }
        rows.push(InstanceCapacity {
            instance_type,
            cpu: cpu.parse().ok().filter(|&c| c > 0).ok_or_else(|| bad("vcpu must be a whole number > 0"))?,
            memory_mib: memory.parse().ok().filter(|&m| m > 0).ok_or_else(|| bad("memory_mib must be > 0"))?,
            gpu: gpu.parse().map_err(|_| bad("gpu must be a whole number"))?,
            architecture,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_covers_the_common_families() {
        let table = parse_table(TABLE_CSV).unwrap();
        assert_eq!(all().len(), table.len());
        assert!(table.len() > 150, "{}", table.len());
        for family in
            ["t3", "t3a", "t4g", "m5", "m6i", "m6g", "m7i", "c5", "c6i", "c7g", "r5", "r6i", "g4dn", "g5", "p3"]
        {
            assert!(table.iter().any(|c| c.instance_type.starts_with(&format!("{family}."))), "{family}");
        }
    }

    #[test]
    fn known_instance_types() {
        let m5 = capacity("m5.large").unwrap();
        assert_eq!((m5.cpu, m5.memory_mib, m5.gpu, m5.architecture), (2, 8192, 0, "amd64"));
        assert_eq!(m5.resources().get("memory"), Some(&Quantity("8192Mi".into())));
        assert!(!m5.resources().contains_key("nvidia.com/gpu"));
        let g = capacity("g4dn.12xlarge").unwrap();
        assert_eq!((g.cpu, g.gpu), (48, 4));
        assert_eq!(g.resources().get("nvidia.com/gpu"), Some(&Quantity("4".into())));
        assert_eq!(capacity("m6g.medium").unwrap().architecture, "arm64");
        assert_eq!(capacity("t3.nano").unwrap().memory_mib, 512);
        assert_eq!(capacity("m5.unknown"), None);
    }

    #[test]
    fn capacity_of_a_class() {
        use serde_json::json;
        let cases = [
            ("instance type only", json!({"machineType": "m5.xlarge"}), Some(("4", "16384Mi", None, None, "amd64"))),
            (
                "a GPU type and its single block device",
                json!({"machineType": "p3.2xlarge", "blockDevices": [{"ebs": {"volumeSize": 100}}]}),
                Some(("8", "62464Mi", Some("1"), Some("100Gi"), "amd64")),
            ),
            (
                "the /root device among several",
                json!({"machineType": "m6g.large", "blockDevices": [
                    {"deviceName": "/dev/sdf", "ebs": {"volumeSize": 500}},
                    {"deviceName": "/root", "ebs": {"volumeSize": 50}}]}),
                Some(("2", "8192Mi", None, Some("50Gi"), "arm64")),
            ),
            (
                "several devices, none named /root",
                json!({"machineType": "t3.medium", "blockDevices": [
                    {"deviceName": "/dev/sdf", "ebs": {"volumeSize": 500}},
                    {"deviceName": "/dev/sdg", "ebs": {"volumeSize": 20}}]}),
                Some(("2", "4096Mi", None, None, "amd64")),
            ),
            ("unknown type", json!({"machineType": "m5.unknown"}), None),
            ("no type", json!({"ami": "ami-1"}), None),
        ];
        for (name, spec, want) in cases {
            let got = capacity_of(&spec).map(|c| {
                let r = |k: &str| c.resources.get(k).map(|q| q.0.clone());
                (r("cpu"), r("memory"), r("nvidia.com/gpu"), r("ephemeral-storage"), c.architecture.clone())
            });
            let want = want.map(|(cpu, mem, gpu, disk, arch): (&str, &str, Option<&str>, Option<&str>, &str)| {
                (
                    Some(cpu.to_string()),
                    Some(mem.to_string()),
                    gpu.map(str::to_string),
                    disk.map(str::to_string),
                    Some(arch.to_string()),
                )
            });
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn malformed_tables_are_refused() {
        let cases = [
            ("", "the first row"),
            ("a,b\n", "the first row"),
            ("instance_type,vcpu,memory_mib,gpu,architecture\nm5.large,2,8192,0\n", "expected 5 columns"),
            ("instance_type,vcpu,memory_mib,gpu,architecture\nm5.large,0,8192,0,amd64\n", "vcpu"),
            ("instance_type,vcpu,memory_mib,gpu,architecture\nm5.large,2,lots,0,amd64\n", "memory_mib"),
            ("instance_type,vcpu,memory_mib,gpu,architecture\nm5.large,2,8192,0,x86_64\n", "architecture"),
            ("instance_type,vcpu,memory_mib,gpu,architecture\nm5.large,2,8,0,amd64\nm5.large,2,8,0,amd64\n", "once"),
        ];
        for (csv, want) in cases {
            let err = parse_table(csv).unwrap_err();
            assert!(err.contains(want), "{csv:?}: {err}");
        }
    }
}
