//! vCPUs, memory, GPUs and architecture of Azure VM sizes (`Standard_D4s_v3`), for scale from zero.
//!
//! Written from Azure's published size tables (general purpose, memory and compute optimised, burstable and the
//! common NVIDIA GPU sizes), as rules plus exceptions, not fetched: a size neither rule nor table covers gives
//! `None` (a class's `nodeTemplate` can say what it offers). The rules:
//!
//! - `D<n>[features]_v3` … `_v6`: `n` vCPUs, 4 GiB each (2 GiB with the `l` feature: low memory);
//! - `E<n>[features]_v3` … `_v6`: `n` vCPUs, 8 GiB each (the largest sizes are exceptions);
//! - `F<n>s_v2`: `n` vCPUs, 2 GiB each;
//! - the `p` feature (Ampere Altra): `arm64`; a constrained-vCPU size (`E8-4s_v5`) has the vCPUs after the dash
//!   and the memory of its base size.
//!
//! Sizes whose number is not the vCPU count (`D2_v2`, `B2ms`, the `N` series) are in [`EXCEPTIONS`].

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::providers::NodeCapacity;

/// Sizes the rules do not cover: lower-case name without `standard_`, vCPUs, memory in MiB, NVIDIA GPUs.
pub const EXCEPTIONS: &[(&str, u32, u64, u32)] = &[
    // Burstable.
    ("b1ls", 1, 512, 0),
    ("b1s", 1, 1024, 0),
    ("b1ms", 1, 2048, 0),
    ("b2s", 2, 4096, 0),
    ("b2ms", 2, 8192, 0),
    ("b4ms", 4, 16384, 0),
    ("b8ms", 8, 32768, 0),
    ("b12ms", 12, 49152, 0),
    ("b16ms", 16, 65536, 0),
    ("b20ms", 20, 81920, 0),
    // Dv2 / DSv2: the number is a size step, not vCPUs.
    ("d1_v2", 1, 3584, 0),
    ("d2_v2", 2, 7168, 0),
    ("d3_v2", 4, 14336, 0),
    ("d4_v2", 8, 28672, 0),
    ("d5_v2", 16, 57344, 0),
    ("ds1_v2", 1, 3584, 0),
    ("ds2_v2", 2, 7168, 0),
    ("ds3_v2", 4, 14336, 0),
    ("ds4_v2", 8, 28672, 0),
    ("ds5_v2", 16, 57344, 0),
    ("d11_v2", 2, 14336, 0),
    ("d12_v2", 4, 28672, 0),
    ("d13_v2", 8, 57344, 0),
    ("d14_v2", 16, 114688, 0),
    ("ds11_v2", 2, 14336, 0),
    ("ds12_v2", 4, 28672, 0),
    ("ds13_v2", 8, 57344, 0),
    ("ds14_v2", 16, 114688, 0),
    // The largest E sizes break the 8 GiB per vCPU rule.
    ("e64_v3", 64, 442368, 0),
    ("e64s_v3", 64, 442368, 0),
    ("e96_v5", 96, 688128, 0),
    ("e96s_v5", 96, 688128, 0),
    ("e96d_v5", 96, 688128, 0),
    ("e96ds_v5", 96, 688128, 0),
    ("e96as_v5", 96, 688128, 0),
    ("e96ads_v5", 96, 688128, 0),
    // NVIDIA GPU sizes.
    ("nc6s_v3", 6, 114688, 1),
    ("nc12s_v3", 12, 229376, 2),
    ("nc24s_v3", 24, 458752, 4),
    ("nc24rs_v3", 24, 458752, 4),
    ("nc4as_t4_v3", 4, 28672, 1),
    ("nc8as_t4_v3", 8, 57344, 1),
    ("nc16as_t4_v3", 16, 112640, 1),
    ("nc64as_t4_v3", 64, 450560, 4),
    ("nc24ads_a100_v4", 24, 225280, 1),
    ("nc48ads_a100_v4", 48, 450560, 2),
    ("nc96ads_a100_v4", 96, 901120, 4),
    ("nd96asr_v4", 96, 921600, 8),
    ("nd96amsr_a100_v4", 96, 1945600, 8),
];

/// `<family><n>[-<vcpus>]<features>_v<version>`, lower-case.
static RULE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^([a-z]+?)(\d+)(?:-(\d+))?([a-z]*)_v(\d+)$").ok());

/// vCPUs, memory in MiB, NVIDIA GPUs and architecture of `vm_size` (`Standard_D4s_v3`; case-insensitive), if
/// known.
pub fn size(vm_size: &str) -> Option<(u32, u64, u32, &'static str)> {
    let lower = vm_size.to_ascii_lowercase();
    let name = lower.strip_prefix("standard_")?;
    if let Some(&(_, cpu, memory, gpu)) = EXCEPTIONS.iter().find(|(n, ..)| *n == name) {
        return Some((cpu, memory, gpu, "amd64"));
    }
    let caps = RULE.as_ref()?.captures(name)?;
    let base: u32 = caps[2].parse().ok()?;
    let cpu: u32 = match caps.get(3) {
        Some(c) => c.as_str().parse().ok()?,
        None => base,
    };
    let features = &caps[4];
    let version: u32 = caps[5].parse().ok()?;
    let per_vcpu_gib: u64 = match (&caps[1], version) {
        ("d", 3..=6) if features.contains('l') => 2,
        ("d", 3..=6) => 4,
        ("e", 3..=6) => 8,
        ("f", 2) if features == "s" => 2,
        _ => return None,
    };
    let architecture = if features.contains('p') { "arm64" } else { "amd64" };
    (cpu > 0 && cpu <= base).then_some((cpu, u64::from(base) * per_vcpu_gib * 1024, 0, architecture))
}

/// What a node of a class with this providerSpec offers: `properties.hardwareProfile.vmSize` by [`size`], and
/// `ephemeral-storage` from `properties.storageProfile.osDisk.diskSizeGB`.
pub fn capacity_of(provider_spec: &Value) -> Option<NodeCapacity> {
    let vm_size = provider_spec.pointer("/properties/hardwareProfile/vmSize")?.as_str()?;
    let (cpu, memory, gpu, architecture) = size(vm_size)?;
    let disk = provider_spec.pointer("/properties/storageProfile/osDisk/diskSizeGB").and_then(Value::as_i64);
    Some(NodeCapacity::new(cpu, memory, gpu, architecture).with_root_disk_gib(disk))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sizes_by_rule_and_exception() {
        let gib = |g: u64| g * 1024;
        let cases = [
            ("Standard_D4s_v3", Some((4, gib(16), 0, "amd64"))),
            ("Standard_D2_v3", Some((2, gib(8), 0, "amd64"))),
            ("standard_d8ads_v5", Some((8, gib(32), 0, "amd64"))),
            ("Standard_D4ls_v5", Some((4, gib(8), 0, "amd64"))),
            ("Standard_D4ps_v5", Some((4, gib(16), 0, "arm64"))),
            ("Standard_E8s_v5", Some((8, gib(64), 0, "amd64"))),
            ("Standard_E8-4s_v5", Some((4, gib(64), 0, "amd64"))),
            ("Standard_E64s_v3", Some((64, gib(432), 0, "amd64"))),
            ("Standard_F16s_v2", Some((16, gib(32), 0, "amd64"))),
            ("Standard_B2ms", Some((2, gib(8), 0, "amd64"))),
            ("Standard_D2_v2", Some((2, 7168, 0, "amd64"))),
            ("Standard_NC6s_v3", Some((6, gib(112), 1, "amd64"))),
            ("Standard_NC4as_T4_v3", Some((4, gib(28), 1, "amd64"))),
            ("Standard_D4_v2_Promo", None),
            ("Standard_M128s", None),
            ("Standard_L8s_v3", None),
            ("Standard_E8-16s_v5", None),
            ("D4s_v3", None),
        ];
        for (name, want) in cases {
            assert_eq!(size(name), want, "{name}");
        }
    }

    #[test]
    fn capacity_of_a_class() {
        let spec = json!({"properties": {
            "hardwareProfile": {"vmSize": "Standard_NC6s_v3"},
            "storageProfile": {"osDisk": {"diskSizeGB": 64}},
        }});
        let c = capacity_of(&spec).unwrap();
        let r = |k: &str| c.resources.get(k).map(|q| q.0.as_str());
        assert_eq!(
            (r("cpu"), r("memory"), r("nvidia.com/gpu"), r("ephemeral-storage")),
            (Some("6"), Some("114688Mi"), Some("1"), Some("64Gi"))
        );
        assert_eq!(c.architecture.as_deref(), Some("amd64"));
        assert_eq!(capacity_of(&json!({"properties": {"hardwareProfile": {"vmSize": "Standard_X1"}}})), None);
        assert_eq!(capacity_of(&json!({})), None);
    }
}
