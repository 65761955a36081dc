//! Capacity of EC2 instance types (vCPUs, memory, GPUs, architecture) for node templates, so a pool can scale
//! from zero. The table is `data/aws-instance-types.csv`, compiled in and parsed on first use.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

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
