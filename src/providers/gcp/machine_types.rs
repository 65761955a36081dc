//! vCPUs, memory, GPUs and architecture of Compute Engine machine types (`n2-standard-4`, `e2-medium`,
//! `custom-4-8192`), for scale from zero.
//!
//! Written from Compute Engine's published machine series, as rules plus exceptions, not fetched (Compute
//! Engine's "GB" are GiB):
//!
//! - `<series>-<kind>-<n>`: `n` vCPUs and the series' memory per vCPU for `standard`, `highmem` and `highcpu`
//!   ([`PER_VCPU`]);
//! - `[<series>-]custom-<n>-<MiB>[-ext]`: what it says;
//! - shared-core types and the accelerator-optimised `a2`, `a3` and `g2` types (GPUs implied) in [`FIXED`] and
//!   [`accelerator_type`].
//!
//! Types neither rule nor table covers (`m1-megamem-96`, ...) give `None`; a class's `nodeTemplate` can say what
//! they offer.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::providers::NodeCapacity;

/// Memory per vCPU in tenths of a MiB (`n1-highcpu` has 0.9 GiB), by series and kind; and the architecture.
pub const PER_VCPU: &[(&str, &str, u64, &str)] = &[
    ("n1", "standard", 38400, "amd64"),
    ("n1", "highmem", 66560, "amd64"),
    ("n1", "highcpu", 9216, "amd64"),
    ("n2", "standard", 40960, "amd64"),
    ("n2", "highmem", 81920, "amd64"),
    ("n2", "highcpu", 10240, "amd64"),
    ("n2d", "standard", 40960, "amd64"),
    ("n2d", "highmem", 81920, "amd64"),
    ("n2d", "highcpu", 10240, "amd64"),
    ("e2", "standard", 40960, "amd64"),
    ("e2", "highmem", 81920, "amd64"),
    ("e2", "highcpu", 10240, "amd64"),
    ("n4", "standard", 40960, "amd64"),
    ("n4", "highmem", 81920, "amd64"),
    ("n4", "highcpu", 20480, "amd64"),
    ("c2", "standard", 40960, "amd64"),
    ("c2d", "standard", 40960, "amd64"),
    ("c2d", "highmem", 81920, "amd64"),
    ("c2d", "highcpu", 20480, "amd64"),
    ("c3", "standard", 40960, "amd64"),
    ("c3", "highmem", 81920, "amd64"),
    ("c3", "highcpu", 20480, "amd64"),
    ("c3d", "standard", 40960, "amd64"),
    ("c3d", "highmem", 81920, "amd64"),
    ("c3d", "highcpu", 20480, "amd64"),
    ("c4", "standard", 38400, "amd64"),
    ("c4", "highmem", 79360, "amd64"),
    ("c4", "highcpu", 20480, "amd64"),
    ("t2d", "standard", 40960, "amd64"),
    ("t2a", "standard", 40960, "arm64"),
    ("c4a", "standard", 40960, "arm64"),
    ("c4a", "highmem", 81920, "arm64"),
    ("c4a", "highcpu", 20480, "arm64"),
    ("g2", "standard", 40960, "amd64"),
];

/// Types the rules do not cover: name, vCPUs, memory in MiB, NVIDIA GPUs (all `amd64`).
pub const FIXED: &[(&str, u32, u64, u32)] = &[
    ("e2-micro", 2, 1024, 0),
    ("e2-small", 2, 2048, 0),
    ("e2-medium", 2, 4096, 0),
    ("f1-micro", 1, 614, 0),
    ("g1-small", 1, 1740, 0),
    ("n2-highmem-128", 128, 884736, 0),
    ("a2-megagpu-16g", 96, 1392640, 16),
    ("a3-highgpu-8g", 208, 1916928, 8),
];

/// The GPUs a `g2-standard-<n>` type comes with.
const G2_GPUS: &[(u32, u32)] = &[(4, 1), (8, 1), (12, 1), (16, 1), (24, 2), (32, 1), (48, 4), (96, 8)];

static SERIES: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^([a-z0-9]+)-([a-z]+)-(\d+)$").ok());
static CUSTOM: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^(?:([a-z0-9]+)-)?custom-(\d+)-(\d+)(?:-ext)?$").ok());
static A2: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^a2-(highgpu|ultragpu)-(\d+)g$").ok());

/// The `a2` types: 12 vCPUs and 85 GiB (`highgpu`) or 170 GiB (`ultragpu`) per A100.
fn accelerator_type(name: &str) -> Option<(u32, u64, u32, &'static str)> {
    let caps = A2.as_ref()?.captures(name)?;
    let gpus: u32 = caps[2].parse().ok().filter(|g| [1, 2, 4, 8].contains(g))?;
    let per_gpu_gib: u64 = if &caps[1] == "highgpu" { 85 } else { 170 };
    Some((12 * gpus, u64::from(gpus) * per_gpu_gib * 1024, gpus, "amd64"))
}

/// vCPUs, memory in MiB, NVIDIA GPUs and architecture of `machine_type`, if known.
pub fn machine_type(machine_type: &str) -> Option<(u32, u64, u32, &'static str)> {
    if let Some(&(_, cpu, memory, gpu)) = FIXED.iter().find(|(n, ..)| *n == machine_type) {
        return Some((cpu, memory, gpu, "amd64"));
    }
    if let Some(found) = accelerator_type(machine_type) {
        return Some(found);
    }
    if let Some(caps) = CUSTOM.as_ref()?.captures(machine_type) {
        let architecture = match caps.get(1).map(|s| s.as_str()) {
            None | Some("n1" | "n2" | "n2d" | "e2" | "n4" | "c3" | "c3d") => "amd64",
            Some(_) => return None,
        };
        let cpu: u32 = caps[2].parse().ok().filter(|c| *c > 0)?;
        let memory: u64 = caps[3].parse().ok().filter(|m| *m > 0)?;
        return Some((cpu, memory, 0, architecture));
    }
    let caps = SERIES.as_ref()?.captures(machine_type)?;
    let cpu: u32 = caps[3].parse().ok().filter(|c| *c > 0)?;
    let &(series, _, tenths, architecture) = PER_VCPU.iter().find(|(s, k, ..)| *s == &caps[1] && *k == &caps[2])?;
    let gpu = if series == "g2" { G2_GPUS.iter().find(|(n, _)| *n == cpu)?.1 } else { 0 };
    Some((cpu, u64::from(cpu) * tenths / 10, gpu, architecture))
}

/// What a node of a class with this providerSpec offers: `machineType` by [`machine_type`] (GPUs from the type,
/// or else from `gpu.count` of an `nvidia-*` accelerator), and `ephemeral-storage` from the boot disk's `sizeGb`.
pub fn capacity_of(provider_spec: &Value) -> Option<NodeCapacity> {
    let (cpu, memory, type_gpus, architecture) = machine_type(provider_spec.get("machineType")?.as_str()?)?;
    let attached = provider_spec
        .get("gpu")
        .filter(|g| g.get("acceleratorType").and_then(Value::as_str).is_some_and(|t| t.starts_with("nvidia-")))
        .and_then(|g| g.get("count")?.as_u64())
        .and_then(|c| u32::try_from(c).ok())
        .unwrap_or(0);
    let gpu = if type_gpus > 0 { type_gpus } else { attached };
    let disks = provider_spec.get("disks").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let boot = disks.iter().find(|d| d.get("boot").and_then(Value::as_bool) == Some(true));
    let disk = boot.and_then(|d| d.get("sizeGb")).and_then(Value::as_i64);
    Some(NodeCapacity::new(cpu, memory, gpu, architecture).with_root_disk_gib(disk))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn machine_types_by_rule_and_exception() {
        let cases = [
            ("n2-standard-4", Some((4, 16384, 0, "amd64"))),
            ("n1-standard-1", Some((1, 3840, 0, "amd64"))),
            ("n1-highcpu-2", Some((2, 1843, 0, "amd64"))),
            ("e2-highmem-8", Some((8, 65536, 0, "amd64"))),
            ("e2-medium", Some((2, 4096, 0, "amd64"))),
            ("c3-highcpu-22", Some((22, 45056, 0, "amd64"))),
            ("t2a-standard-4", Some((4, 16384, 0, "arm64"))),
            ("n2-highmem-128", Some((128, 884736, 0, "amd64"))),
            ("custom-4-8192", Some((4, 8192, 0, "amd64"))),
            ("n2-custom-6-24576-ext", Some((6, 24576, 0, "amd64"))),
            ("a2-highgpu-2g", Some((24, 174080, 2, "amd64"))),
            ("a2-ultragpu-1g", Some((12, 174080, 1, "amd64"))),
            ("a2-megagpu-16g", Some((96, 1392640, 16, "amd64"))),
            ("g2-standard-24", Some((24, 98304, 2, "amd64"))),
            ("g2-standard-6", None),
            ("a2-highgpu-3g", None),
            ("m1-megamem-96", None),
            ("n2-standard-0", None),
            ("zz-custom-2-2048", None),
            ("n2-standard", None),
        ];
        for (name, want) in cases {
            assert_eq!(machine_type(name), want, "{name}");
        }
    }

    #[test]
    fn capacity_of_a_class() {
        let r = |c: &NodeCapacity, k: &str| c.resources.get(k).map(|q| q.0.clone());
        let spec = json!({"machineType": "n1-standard-4", "gpu": {"acceleratorType": "nvidia-tesla-t4", "count": 2},
                          "disks": [{"boot": false, "sizeGb": 500}, {"boot": true, "sizeGb": 50}]});
        let c = capacity_of(&spec).unwrap();
        assert_eq!(
            (r(&c, "cpu"), r(&c, "memory"), r(&c, "nvidia.com/gpu"), r(&c, "ephemeral-storage")),
            (Some("4".into()), Some("15360Mi".into()), Some("2".into()), Some("50Gi".into()))
        );
        let plain = capacity_of(&json!({"machineType": "e2-medium", "disks": [{"boot": true}]})).unwrap();
        assert_eq!((r(&plain, "nvidia.com/gpu"), r(&plain, "ephemeral-storage")), (None, None));
        let a2 = capacity_of(&json!({"machineType": "a2-highgpu-1g"})).unwrap();
        assert_eq!(r(&a2, "nvidia.com/gpu").as_deref(), Some("1"));
        assert_eq!(capacity_of(&json!({"machineType": "m1-megamem-96"})), None);
    }
}
