//! The GCP providerSpec, in the shape of Gardener's machine-controller-manager-provider-gcp, parsed strictly:
//! unknown fields, wrong types and values Compute Engine would refuse are `InvalidArgument` naming the field
//! (`providerSpec.disks[1].interface: "IDE" is not one of NVME, SCSI`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::providers::fields::Obj;
use crate::providers::{DriverError, tags};

/// The top-level providerSpec fields, as Gardener's GCP provider names them (`APIVersion` and `kind` are read and
/// ignored).
pub const FIELDS: &[&str] = &[
    "apiVersion",
    "APIVersion",
    "kind",
    "advancedMachineFeatures",
    "canIpForward",
    "deletionProtection",
    "description",
    "disks",
    "gpu",
    "labels",
    "machineType",
    "metadata",
    "minCpuPlatform",
    "networkInterfaces",
    "region",
    "scheduling",
    "serviceAccounts",
    "shieldedInstanceConfiguration",
    "tags",
    "zone",
];

/// Prefix of the network tag naming the cluster (`kubernetes-io-cluster-<cluster>`), as Gardener tags VMs.
pub const CLUSTER_TAG_PREFIX: &str = tags::NETWORK_CLUSTER_PREFIX;
/// Prefix of the network tag naming the role (`kubernetes-io-role-<role>`).
pub const ROLE_TAG_PREFIX: &str = tags::NETWORK_ROLE_PREFIX;
/// The disk type that means a local SSD.
pub const SCRATCH: &str = "SCRATCH";
/// The disk type used when a persistent disk names none.
pub const DEFAULT_DISK_TYPE: &str = "pd-standard";
/// Compute Engine's limits: network tags and labels per instance.
pub const MAX_TAGS: usize = 64;
/// Labels per resource.
pub const MAX_LABELS: usize = 64;
/// The metadata key the user data goes to when it is a cloud-config; a class may not set it.
pub const USER_DATA_KEY: &str = "user-data";
/// The metadata key any other user data (a script) goes to.
pub const STARTUP_SCRIPT_KEY: &str = "startup-script";

/// RFC 1035 names: network tags, instance names.
static NAME: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$").ok());
/// Label keys: a lowercase letter, then lowercase letters, digits, `_` and `-` (international letters allowed).
static LABEL_KEY: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^\p{Ll}[\p{Ll}\p{Lo}\p{N}_-]{0,62}$").ok());
/// Label values: the same characters, possibly empty.
static LABEL_VALUE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^[\p{Ll}\p{Lo}\p{N}_-]{0,63}$").ok());
/// Metadata keys.
static METADATA_KEY: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^[a-zA-Z0-9_-]{1,128}$").ok());

fn matches(re: &LazyLock<Option<Regex>>, s: &str) -> bool {
    re.as_ref().is_some_and(|re| re.is_match(s))
}

/// Whether `name` can be a Compute Engine instance name (machine names become instance names).
pub fn is_instance_name(name: &str) -> bool {
    matches(&NAME, name)
}

/// `disks[].encryption`: a Cloud KMS key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Encryption {
    /// `kmsKeyName` (required).
    pub kms_key_name: String,
    /// `kmsKeyServiceAccount`; empty: the Compute Engine service agent.
    pub kms_key_service_account: Option<String>,
}

/// One entry of `disks`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disk {
    /// `autoDelete` (default true): deleted with the instance.
    pub auto_delete: bool,
    /// `boot`: the boot disk (exactly one).
    pub boot: bool,
    /// `sizeGb`; `None`: the image's size.
    pub size_gb: Option<i64>,
    /// `type`: a disk type name (`pd-ssd`, ...), or `SCRATCH` for a local SSD (default `pd-standard`).
    pub disk_type: String,
    /// `interface`: `NVME` or `SCSI`, for local SSDs.
    pub interface: Option<String>,
    /// `image`: the source image (required for the boot disk).
    pub image: Option<String>,
    /// `encryption`.
    pub encryption: Option<Encryption>,
    /// `labels`.
    pub labels: BTreeMap<String, String>,
    /// `provisionedIops` (> 0 to send).
    pub provisioned_iops: Option<i64>,
    /// `provisionedThroughput` in MiB/s (> 0 to send).
    pub provisioned_throughput: Option<i64>,
    /// `storagePool`.
    pub storage_pool: Option<String>,
}

impl Disk {
    /// Whether this is a local SSD.
    pub fn is_scratch(&self) -> bool {
        self.disk_type == SCRATCH
    }
}

/// One entry of `networkInterfaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkInterface {
    /// `disableExternalIP`: without it the interface gets an ephemeral external IP.
    pub disable_external_ip: bool,
    /// `network`: a network name in the project.
    pub network: Option<String>,
    /// `subnetwork`: a subnetwork name in the region.
    pub subnetwork: Option<String>,
    /// `stackType`: `IPV4_ONLY` or `IPV4_IPV6`.
    pub stack_type: Option<String>,
    /// `ipv6accessType`: `EXTERNAL` or `INTERNAL`.
    pub ipv6_access_type: Option<String>,
    /// `useAliasIPs`: assign an alias IP range.
    pub use_alias_ips: bool,
    /// `ipCidrRange`: the alias range's mask (`/24`).
    pub ip_cidr_range: Option<String>,
    /// `subnetworkRangeName`: the secondary range the alias comes from.
    pub subnetwork_range_name: Option<String>,
}

impl NetworkInterface {
    /// Whether the interface carries an alias IP range (dual stack or `useAliasIPs`, as Gardener decides).
    pub fn has_alias_range(&self) -> bool {
        self.stack_type.as_deref() == Some("IPV4_IPV6") || self.use_alias_ips
    }
}

/// `scheduling`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scheduling {
    /// `automaticRestart` (default false, as Gardener sends it).
    pub automatic_restart: bool,
    /// `onHostMaintenance`: `MIGRATE` or `TERMINATE`.
    pub on_host_maintenance: String,
    /// `preemptible`.
    pub preemptible: bool,
}

/// One entry of `serviceAccounts`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceAccount {
    /// `email`.
    pub email: String,
    /// `scopes`.
    pub scopes: Vec<String>,
}

/// `gpu`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gpu {
    /// `acceleratorType` (`nvidia-tesla-t4`, ...).
    pub accelerator_type: String,
    /// `count` (> 0).
    pub count: i64,
}

/// `shieldedInstanceConfiguration`; unset fields keep Compute Engine's defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shielded {
    /// `integrityMonitoring`.
    pub integrity_monitoring: Option<bool>,
    /// `secureBoot`.
    pub secure_boot: Option<bool>,
    /// `vtpm`.
    pub vtpm: Option<bool>,
}

/// A parsed and validated GCP providerSpec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderSpec {
    /// `region` (required).
    pub region: String,
    /// `zone` (required, in the region); part of the providerID.
    pub zone: String,
    /// `machineType` (required): a machine type name (`n2-standard-4`, `custom-4-5120`).
    pub machine_type: String,
    /// `canIpForward`.
    pub can_ip_forward: bool,
    /// `deletionProtection`.
    pub deletion_protection: bool,
    /// `description`.
    pub description: Option<String>,
    /// `disks` (at least one, exactly one boot disk).
    pub disks: Vec<Disk>,
    /// `gpu`.
    pub gpu: Option<Gpu>,
    /// `labels` of the instance.
    pub labels: BTreeMap<String, String>,
    /// `metadata`: key, value (a value may be null).
    pub metadata: Vec<(String, Option<String>)>,
    /// `minCpuPlatform`.
    pub min_cpu_platform: Option<String>,
    /// `networkInterfaces` (at least one).
    pub network_interfaces: Vec<NetworkInterface>,
    /// `scheduling`.
    pub scheduling: Scheduling,
    /// `serviceAccounts` (at most one).
    pub service_accounts: Vec<ServiceAccount>,
    /// `tags`: network tags, the cluster and role tags among them.
    pub tags: Vec<String>,
    /// The `kubernetes-io-cluster-<cluster>` tag.
    pub cluster_tag: String,
    /// The `kubernetes-io-role-<role>` tag.
    pub role_tag: String,
    /// `shieldedInstanceConfiguration`.
    pub shielded: Option<Shielded>,
    /// `advancedMachineFeatures.enableNestedVirtualization`.
    pub nested_virtualization: Option<bool>,
}

impl ProviderSpec {
    /// Parses and validates a providerSpec; errors name the field.
    pub fn parse(value: &Value) -> Result<ProviderSpec, DriverError> {
        let spec = Obj::new("", value, FIELDS)?;
        for ignored in ["apiVersion", "APIVersion", "kind"] {
            spec.string(ignored)?;
        }
        let region = spec.required_string("region")?;
        let zone = spec.required_string("zone")?;
        if !zone.starts_with(&format!("{region}-")) {
            return Err(spec.invalid("zone", format!("{zone:?} is not a zone of region {region:?}")));
        }
        let machine_type = spec.required_string("machineType")?;
        if machine_type.contains('/') {
            return Err(spec.invalid(
                "machineType",
                "give the machine type's name, not a URL (zones/<zone>/machineTypes/ is added)",
            ));
        }
        let (tags, cluster_tag, role_tag) = parse_tags(&spec)?;
        let gpu = parse_gpu(&spec)?;
        let parsed = ProviderSpec {
            machine_type,
            can_ip_forward: spec.boolean("canIpForward")?.unwrap_or(false),
            deletion_protection: spec.boolean("deletionProtection")?.unwrap_or(false),
            description: spec.string("description")?,
            disks: parse_disks(&spec)?,
            labels: parse_labels(&spec, "labels")?,
            metadata: parse_metadata(&spec)?,
            min_cpu_platform: spec.string("minCpuPlatform")?,
            network_interfaces: parse_network_interfaces(&spec)?,
            scheduling: parse_scheduling(&spec, gpu.is_some())?,
            service_accounts: parse_service_accounts(&spec)?,
            gpu,
            tags,
            cluster_tag,
            role_tag,
            shielded: parse_shielded(&spec)?,
            nested_virtualization: spec
                .object("advancedMachineFeatures", &["enableNestedVirtualization"])?
                .map(|o| o.boolean("enableNestedVirtualization"))
                .transpose()?
                .flatten(),
            region,
            zone,
        };
        Ok(parsed)
    }

    /// Whether an instance with these network tags belongs to this class's cluster and role.
    pub fn owns<'a>(&self, tags: impl IntoIterator<Item = &'a str>) -> bool {
        let (mut cluster, mut role) = (false, false);
        for tag in tags {
            cluster |= tag == self.cluster_tag;
            role |= tag == self.role_tag;
        }
        cluster && role
    }
}

fn parse_tags(spec: &Obj<'_>) -> Result<(Vec<String>, String, String), DriverError> {
    let tags = spec.strings("tags")?.unwrap_or_default();
    let mut seen = BTreeSet::new();
    for (i, tag) in tags.iter().enumerate() {
        if !matches(&NAME, tag) {
            return Err(spec.invalid(
                &format!("tags[{i}]"),
                format!("{tag:?} is not a network tag (lowercase letters, digits and '-', 1-63 characters, starting with a letter)"),
            ));
        }
        if !seen.insert(tag.as_str()) {
            return Err(spec.invalid(&format!("tags[{i}]"), format!("{tag:?} is given twice")));
        }
    }
    if tags.len() > MAX_TAGS {
        return Err(spec.invalid("tags", format!("{} tags exceed Compute Engine's limit of {MAX_TAGS}", tags.len())));
    }
    let (cluster, role) = crate::providers::tags::network_ownership(&tags).map_err(|why| spec.invalid("tags", why))?;
    Ok((tags, cluster, role))
}

fn parse_labels(o: &Obj<'_>, key: &str) -> Result<BTreeMap<String, String>, DriverError> {
    let labels = o.string_map(key)?.unwrap_or_default();
    if labels.len() > MAX_LABELS {
        return Err(o.invalid(key, format!("{} labels exceed Compute Engine's limit of {MAX_LABELS}", labels.len())));
    }
    for (k, v) in &labels {
        let field = format!("{key}[{k:?}]");
        if !matches(&LABEL_KEY, k) {
            return Err(
                o.invalid(&field, "label keys are 1-63 lowercase letters, digits, '_' or '-', starting with a letter")
            );
        }
        if !matches(&LABEL_VALUE, v) {
            return Err(
                o.invalid(&field, format!("{v:?}: label values are at most 63 lowercase letters, digits, '_' or '-'"))
            );
        }
    }
    Ok(labels)
}

fn parse_disks(spec: &Obj<'_>) -> Result<Vec<Disk>, DriverError> {
    const KNOWN: &[&str] = &[
        "autoDelete",
        "boot",
        "sizeGb",
        "type",
        "interface",
        "image",
        "encryption",
        "labels",
        "provisionedIops",
        "provisionedThroughput",
        "storagePool",
    ];
    let items = spec.list("disks", KNOWN)?;
    if items.is_empty() {
        return Err(spec.invalid("disks", "needs at least one disk (the boot disk)"));
    }
    let mut disks = Vec::with_capacity(items.len());
    for d in &items {
        let disk = Disk {
            auto_delete: d.boolean("autoDelete")?.unwrap_or(true),
            boot: d.boolean("boot")?.unwrap_or(false),
            size_gb: d.int64("sizeGb", 0, i64::MAX)?.filter(|&s| s > 0),
            disk_type: d.string("type")?.unwrap_or_else(|| DEFAULT_DISK_TYPE.to_string()),
            interface: d.one_of("interface", &["NVME", "SCSI"])?,
            image: d.string("image")?,
            encryption: match d.object("encryption", &["kmsKeyName", "kmsKeyServiceAccount"])? {
                None => None,
                Some(e) => {
                    let name = e.string("kmsKeyName")?.map(|n| n.trim().to_string()).filter(|n| !n.is_empty());
                    let account = e.string("kmsKeyServiceAccount")?;
                    if account.as_deref().is_some_and(|a| a.trim().is_empty()) {
                        return Err(e.invalid(
                            "kmsKeyServiceAccount",
                            "is blank: give an account or leave it out (the Compute Engine service agent)",
                        ));
                    }
                    Some(Encryption {
                        kms_key_name: name.ok_or_else(|| e.invalid("kmsKeyName", "is required"))?,
                        kms_key_service_account: account.map(|a| a.trim().to_string()),
                    })
                }
            },
            labels: parse_labels(d, "labels")?,
            provisioned_iops: d.int64("provisionedIops", 0, i64::MAX)?.filter(|&n| n > 0),
            provisioned_throughput: d.int64("provisionedThroughput", 0, i64::MAX)?.filter(|&n| n > 0),
            storage_pool: d.string("storagePool")?,
        };
        if disk.disk_type.contains('/') {
            return Err(d.invalid("type", "give the disk type's name (pd-ssd, ...), not a URL"));
        }
        if disk.is_scratch() {
            if disk.interface.is_none() {
                return Err(d.invalid("interface", "is required for SCRATCH disks (NVME, SCSI)"));
            }
            if disk.boot {
                return Err(d.invalid("boot", "a SCRATCH disk (local SSD) cannot be the boot disk"));
            }
        }
        if disk.boot && disk.image.is_none() {
            return Err(d.invalid("image", "is required for the boot disk"));
        }
        disks.push(disk);
    }
    let boots = disks.iter().filter(|d| d.boot).count();
    if boots != 1 {
        return Err(spec.invalid("disks", format!("exactly one disk must have boot: true, found {boots}")));
    }
    Ok(disks)
}

fn parse_network_interfaces(spec: &Obj<'_>) -> Result<Vec<NetworkInterface>, DriverError> {
    const KNOWN: &[&str] = &[
        "disableExternalIP",
        "network",
        "subnetwork",
        "stackType",
        "ipv6accessType",
        "ipv6AccessType",
        "useAliasIPs",
        "ipCidrRange",
        "subnetworkRangeName",
    ];
    let items = spec.list("networkInterfaces", KNOWN)?;
    if items.is_empty() {
        return Err(spec.invalid("networkInterfaces", "needs at least one network interface"));
    }
    items
        .iter()
        .map(|n| {
            let access = match (n.string("ipv6accessType")?, n.string("ipv6AccessType")?) {
                (Some(_), Some(_)) => return Err(n.invalid("ipv6accessType", "is also given as ipv6AccessType")),
                (a, b) => a.or(b),
            };
            if let Some(a) = &access
                && !["EXTERNAL", "INTERNAL"].contains(&a.as_str())
            {
                return Err(n.invalid("ipv6accessType", format!("{a:?} is not one of EXTERNAL, INTERNAL")));
            }
            let nic = NetworkInterface {
                disable_external_ip: n.boolean("disableExternalIP")?.unwrap_or(false),
                network: n.string("network")?,
                subnetwork: n.string("subnetwork")?,
                stack_type: n.one_of("stackType", &["IPV4_ONLY", "IPV4_IPV6"])?,
                ipv6_access_type: access,
                use_alias_ips: n.boolean("useAliasIPs")?.unwrap_or(false),
                ip_cidr_range: n.string("ipCidrRange")?,
                subnetwork_range_name: n.string("subnetworkRangeName")?,
            };
            if nic.network.is_none() && nic.subnetwork.is_none() {
                return Err(n.invalid("network", "set network, subnetwork or both"));
            }
            for (key, value) in [("network", &nic.network), ("subnetwork", &nic.subnetwork)] {
                if value.as_deref().is_some_and(|v| v.contains('/')) {
                    return Err(n.invalid(key, "give the name, not a URL (the driver builds the URL)"));
                }
            }
            if let Some(range) = &nic.ip_cidr_range {
                let mask = range.strip_prefix('/').and_then(|m| m.parse::<u8>().ok());
                if mask.is_none_or(|m| m > 32) {
                    return Err(n.invalid("ipCidrRange", format!("{range:?} must be a mask size /0 to /32")));
                }
            }
            Ok(nic)
        })
        .collect()
}

fn parse_metadata(spec: &Obj<'_>) -> Result<Vec<(String, Option<String>)>, DriverError> {
    let items = spec.list("metadata", &["key", "value"])?;
    let mut seen = BTreeSet::new();
    items
        .iter()
        .map(|m| {
            let key = m.required_string("key")?;
            if !matches(&METADATA_KEY, &key) {
                return Err(m.invalid("key", format!("{key:?}: metadata keys are 1-128 of a-z, A-Z, 0-9, '_' and '-'")));
            }
            if key == USER_DATA_KEY {
                return Err(m.invalid("key", "user-data is set from the secret's userData; a class may not set it"));
            }
            if !seen.insert(key.clone()) {
                return Err(m.invalid("key", format!("{key:?} is given twice")));
            }
            let value = m.get("value").map(|v| m.text("value", v)).transpose()?;
            if value.as_ref().is_some_and(|v| v.len() > 256 * 1024) {
                return Err(m.invalid("value", "metadata values are at most 256 KiB"));
            }
            Ok((key, value))
        })
        .collect()
}

fn parse_scheduling(spec: &Obj<'_>, gpu: bool) -> Result<Scheduling, DriverError> {
    let o = spec.object("scheduling", &["automaticRestart", "onHostMaintenance", "preemptible"])?;
    let (automatic_restart, maintenance, preemptible) = match &o {
        Some(o) => (
            o.boolean("automaticRestart")?.unwrap_or(false),
            o.one_of("onHostMaintenance", &["MIGRATE", "TERMINATE"])?,
            o.boolean("preemptible")?.unwrap_or(false),
        ),
        None => (false, None, false),
    };
    let must_terminate = gpu || preemptible;
    let on_host_maintenance = match maintenance {
        Some(m) if m == "MIGRATE" && gpu => {
            return Err(DriverError::invalid_field(
                "scheduling.onHostMaintenance",
                "instances with a GPU cannot live-migrate: use TERMINATE",
            ));
        }
        Some(m) if m == "MIGRATE" && preemptible => {
            return Err(DriverError::invalid_field(
                "scheduling.onHostMaintenance",
                "preemptible instances cannot live-migrate: use TERMINATE",
            ));
        }
        Some(m) => m,
        None if must_terminate => "TERMINATE".to_string(),
        None => "MIGRATE".to_string(),
    };
    if preemptible && automatic_restart {
        return Err(DriverError::invalid_field(
            "scheduling.automaticRestart",
            "preemptible instances cannot restart automatically",
        ));
    }
    Ok(Scheduling { automatic_restart, on_host_maintenance, preemptible })
}

fn parse_service_accounts(spec: &Obj<'_>) -> Result<Vec<ServiceAccount>, DriverError> {
    let items = spec.list("serviceAccounts", &["email", "scopes"])?;
    if items.len() > 1 {
        return Err(spec.invalid("serviceAccounts", "Compute Engine allows one service account per instance"));
    }
    items
        .iter()
        .map(|a| {
            Ok(ServiceAccount { email: a.required_string("email")?, scopes: a.strings("scopes")?.unwrap_or_default() })
        })
        .collect()
}

fn parse_gpu(spec: &Obj<'_>) -> Result<Option<Gpu>, DriverError> {
    let Some(g) = spec.object("gpu", &["acceleratorType", "count"])? else { return Ok(None) };
    Ok(Some(Gpu {
        accelerator_type: g.required_string("acceleratorType")?,
        count: g.int64("count", 1, i64::from(i32::MAX))?.ok_or_else(|| g.invalid("count", "is required (> 0)"))?,
    }))
}

fn parse_shielded(spec: &Obj<'_>) -> Result<Option<Shielded>, DriverError> {
    let Some(s) = spec.object("shieldedInstanceConfiguration", &["integrityMonitoring", "secureBoot", "vtpm"])? else {
        return Ok(None);
    };
    Ok(Some(Shielded {
        integrity_monitoring: s.boolean("integrityMonitoring")?,
        secure_boot: s.boolean("secureBoot")?,
        vtpm: s.boolean("vtpm")?,
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use crate::providers::Code;

    /// Gardener's sample MachineClass providerSpec (kubernetes/machine-class.yaml), every option filled in.
    pub(crate) fn full() -> Value {
        json!({
            "canIpForward": true,
            "deletionProtection": false,
            "description": "Machine of shoot ash created by Machine-Controller-Manager.",
            "disks": [
                {"autoDelete": true, "boot": true, "sizeGb": 50, "type": "pd-balanced",
                 "image": "projects/gardenlinux-cloud/global/images/gardenlinux-1592", "labels": {"name": "test-mc"},
                 "encryption": {"kmsKeyName": "projects/p/locations/europe-west1/keyRings/r/cryptoKeys/k",
                                "kmsKeyServiceAccount": "kms@p.iam.gserviceaccount.com"},
                 "provisionedIops": 3000, "provisionedThroughput": 140,
                 "storagePool": "projects/p/zones/europe-west1-b/storagePools/pool"},
                {"autoDelete": false, "boot": false, "sizeGb": 100, "type": "pd-ssd", "labels": {"role": "data"}},
                {"type": "SCRATCH", "interface": "NVME"}
            ],
            "gpu": {"acceleratorType": "nvidia-tesla-t4", "count": 1},
            "labels": {"name": "test-mc", "k8s-cluster": "shoot--dev"},
            "machineType": "n1-standard-2",
            "metadata": [{"key": "ash", "value": "my-value"}, {"key": "block-project-ssh-keys", "value": null}],
            "minCpuPlatform": "Intel Skylake",
            "networkInterfaces": [
                {"network": "network-name", "subnetwork": "sub-net-name", "stackType": "IPV4_IPV6",
                 "ipv6accessType": "EXTERNAL", "ipCidrRange": "/24", "subnetworkRangeName": "ipv4-cidr-range"},
                {"subnetwork": "second", "disableExternalIP": true, "useAliasIPs": true, "ipCidrRange": "/28"}
            ],
            "scheduling": {"automaticRestart": true, "onHostMaintenance": "TERMINATE", "preemptible": false},
            "serviceAccounts": [{"email": "default@project.iam.gserviceaccount.com",
                                 "scopes": ["https://www.googleapis.com/auth/compute"]}],
            "tags": ["kubernetes-io-cluster-shoot--dev", "kubernetes-io-role-node", "test-mc"],
            "region": "europe-west1",
            "zone": "europe-west1-b",
            "shieldedInstanceConfiguration": {"integrityMonitoring": false, "vtpm": false, "secureBoot": true},
            "advancedMachineFeatures": {"enableNestedVirtualization": true}
        })
    }

    /// The smallest valid spec.
    pub(crate) fn minimal() -> Value {
        json!({
            "region": "europe-west1", "zone": "europe-west1-b", "machineType": "n2-standard-2",
            "disks": [{"boot": true, "image": "projects/debian-cloud/global/images/family/debian-12"}],
            "networkInterfaces": [{"network": "default"}],
            "tags": ["kubernetes-io-cluster-dev", "kubernetes-io-role-node"]
        })
    }

    /// `base` with the value at the JSON pointer `path` replaced (or removed for `None`).
    pub(crate) fn with(base: Value, path: &str, value: Option<Value>) -> Value {
        let mut v = base;
        let (parent, key) = path.rsplit_once('/').unwrap();
        let target = if parent.is_empty() { &mut v } else { v.pointer_mut(parent).unwrap() };
        match (target, value) {
            (Value::Object(map), Some(value)) => {
                map.insert(key.to_string(), value);
            }
            (Value::Object(map), None) => {
                map.remove(key);
            }
            (Value::Array(items), Some(value)) => match key.parse::<usize>().unwrap() {
                i if i == items.len() => items.push(value),
                i => items[i] = value,
            },
            (Value::Array(items), None) => {
                items.remove(key.parse::<usize>().unwrap());
            }
            _ => panic!("{path}"),
        }
        v
    }

    #[test]
    fn gardeners_full_example_parses() {
        let spec = ProviderSpec::parse(&full()).unwrap();
        assert_eq!((spec.region.as_str(), spec.zone.as_str()), ("europe-west1", "europe-west1-b"));
        assert_eq!(spec.machine_type, "n1-standard-2");
        assert!(spec.can_ip_forward && !spec.deletion_protection);
        assert_eq!(spec.disks.len(), 3);
        let boot = &spec.disks[0];
        assert!(boot.boot && boot.auto_delete && !boot.is_scratch());
        assert_eq!(
            (boot.size_gb, boot.provisioned_iops, boot.provisioned_throughput),
            (Some(50), Some(3000), Some(140))
        );
        assert_eq!(
            boot.encryption.as_ref().unwrap().kms_key_service_account.as_deref(),
            Some("kms@p.iam.gserviceaccount.com")
        );
        assert!(!spec.disks[1].auto_delete && spec.disks[2].is_scratch());
        assert_eq!(spec.disks[2].interface.as_deref(), Some("NVME"));
        assert_eq!(spec.gpu, Some(Gpu { accelerator_type: "nvidia-tesla-t4".into(), count: 1 }));
        assert_eq!(
            spec.metadata,
            vec![("ash".into(), Some("my-value".into())), ("block-project-ssh-keys".into(), None)]
        );
        assert!(spec.network_interfaces[0].has_alias_range() && spec.network_interfaces[1].has_alias_range());
        assert_eq!(spec.network_interfaces[0].ipv6_access_type.as_deref(), Some("EXTERNAL"));
        assert_eq!(spec.scheduling.on_host_maintenance, "TERMINATE");
        assert_eq!(spec.service_accounts[0].scopes, ["https://www.googleapis.com/auth/compute"]);
        assert_eq!(
            (spec.cluster_tag.as_str(), spec.role_tag.as_str()),
            ("kubernetes-io-cluster-shoot--dev", "kubernetes-io-role-node")
        );
        assert_eq!(
            spec.shielded,
            Some(Shielded { integrity_monitoring: Some(false), secure_boot: Some(true), vtpm: Some(false) })
        );
        assert_eq!(spec.nested_virtualization, Some(true));
        assert!(spec.owns(["x", "kubernetes-io-role-node", "kubernetes-io-cluster-shoot--dev"]));
        assert!(!spec.owns(["kubernetes-io-cluster-shoot--dev", "kubernetes-io-role-bastion"]));
        assert!(!spec.owns(["kubernetes-io-cluster-shoot--dev2", "kubernetes-io-role-node"]));
    }

    #[test]
    fn defaults_of_the_minimal_spec() {
        let spec = ProviderSpec::parse(&minimal()).unwrap();
        let disk = &spec.disks[0];
        assert!(disk.auto_delete && disk.size_gb.is_none() && disk.encryption.is_none());
        assert_eq!(disk.disk_type, DEFAULT_DISK_TYPE);
        assert_eq!(
            spec.scheduling,
            Scheduling { automatic_restart: false, on_host_maintenance: "MIGRATE".into(), preemptible: false }
        );
        assert!(
            spec.gpu.is_none()
                && spec.labels.is_empty()
                && spec.metadata.is_empty()
                && spec.service_accounts.is_empty()
        );
        assert!(!spec.network_interfaces[0].disable_external_ip && !spec.network_interfaces[0].has_alias_range());
        // Preemptible and GPU instances default to TERMINATE.
        let pre = with(minimal(), "/scheduling", Some(json!({"preemptible": true})));
        assert_eq!(ProviderSpec::parse(&pre).unwrap().scheduling.on_host_maintenance, "TERMINATE");
        let gpu = with(minimal(), "/gpu", Some(json!({"acceleratorType": "nvidia-l4", "count": 2})));
        assert_eq!(ProviderSpec::parse(&gpu).unwrap().scheduling.on_host_maintenance, "TERMINATE");
        // Gardener's Go field name for the API version, and the alias of ipv6accessType.
        let v = with(minimal(), "/APIVersion", Some(json!("mcm.gardener.cloud/v1alpha1")));
        let v = with(v, "/networkInterfaces/0/ipv6AccessType", Some(json!("INTERNAL")));
        assert_eq!(
            ProviderSpec::parse(&v).unwrap().network_interfaces[0].ipv6_access_type.as_deref(),
            Some("INTERNAL")
        );
        assert!(is_instance_name("shoot--dev-worker-z1-5d8f-abcde") && !is_instance_name("Worker_1"));
    }

    #[test]
    fn every_invalid_field_is_named() {
        let m = minimal;
        let f = full;
        let cases: Vec<(&str, Value, &str)> = vec![
            ("not an object", json!([]), "providerSpec: must be an object"),
            ("unknown", with(m(), "/image", Some(json!("x"))), "providerSpec: unknown field \"image\""),
            ("region", with(m(), "/region", None), "providerSpec.region: is required"),
            ("zone", with(m(), "/zone", Some(json!(""))), "providerSpec.zone: is required"),
            (
                "zone of region",
                with(m(), "/zone", Some(json!("us-east1-b"))),
                "providerSpec.zone: \"us-east1-b\" is not a zone of region",
            ),
            ("machineType", with(m(), "/machineType", None), "providerSpec.machineType: is required"),
            (
                "machineType URL",
                with(m(), "/machineType", Some(json!("zones/z/machineTypes/n2"))),
                "providerSpec.machineType: give the machine type's name",
            ),
            (
                "canIpForward",
                with(m(), "/canIpForward", Some(json!("yes"))),
                "providerSpec.canIpForward: must be true or false",
            ),
            (
                "deletionProtection",
                with(m(), "/deletionProtection", Some(json!(1))),
                "providerSpec.deletionProtection: must be true or false",
            ),
            ("description", with(m(), "/description", Some(json!(3))), "providerSpec.description: must be a string"),
            ("no disks", with(m(), "/disks", Some(json!([]))), "providerSpec.disks: needs at least one disk"),
            (
                "no boot disk",
                with(m(), "/disks/0/boot", Some(json!(false))),
                "providerSpec.disks: exactly one disk must have boot: true, found 0",
            ),
            (
                "boot count",
                with(with(f(), "/disks/1/boot", Some(json!(true))), "/disks/1/image", Some(json!("i"))),
                "providerSpec.disks: exactly one disk must have boot: true, found 2",
            ),
            (
                "zero boot",
                with(with(f(), "/disks/0/boot", Some(json!(false))), "/disks/0/image", Some(json!("i"))),
                "providerSpec.disks: exactly one disk must have boot: true, found 0",
            ),
            ("image", with(m(), "/disks/0/image", None), "providerSpec.disks[0].image: is required for the boot disk"),
            (
                "sizeGb",
                with(f(), "/disks/1/sizeGb", Some(json!(-1))),
                "providerSpec.disks[1].sizeGb: -1 must be at least 0",
            ),
            (
                "sizeGb type",
                with(f(), "/disks/1/sizeGb", Some(json!("100"))),
                "providerSpec.disks[1].sizeGb: must be a whole number",
            ),
            (
                "type URL",
                with(f(), "/disks/1/type", Some(json!("zones/z/diskTypes/pd-ssd"))),
                "providerSpec.disks[1].type: give the disk type's name",
            ),
            (
                "interface",
                with(f(), "/disks/2/interface", Some(json!("IDE"))),
                "providerSpec.disks[2].interface: \"IDE\" is not one of NVME, SCSI",
            ),
            (
                "scratch interface",
                with(f(), "/disks/2/interface", None),
                "providerSpec.disks[2].interface: is required for SCRATCH disks",
            ),
            (
                "scratch boot",
                with(with(m(), "/disks/0/type", Some(json!("SCRATCH"))), "/disks/0/interface", Some(json!("NVME"))),
                "providerSpec.disks[0].boot: a SCRATCH disk",
            ),
            (
                "kmsKeyName",
                with(f(), "/disks/0/encryption/kmsKeyName", Some(json!(" "))),
                "providerSpec.disks[0].encryption.kmsKeyName: is required",
            ),
            (
                "kmsKeyServiceAccount",
                with(f(), "/disks/0/encryption/kmsKeyServiceAccount", Some(json!("  "))),
                "providerSpec.disks[0].encryption.kmsKeyServiceAccount: is blank",
            ),
            (
                "encryption unknown",
                with(f(), "/disks/0/encryption/key", Some(json!("k"))),
                "providerSpec.disks[0].encryption: unknown field \"key\"",
            ),
            (
                "disk label",
                with(f(), "/disks/0/labels/Name", Some(json!("x"))),
                "providerSpec.disks[0].labels[\"Name\"]: label keys are",
            ),
            (
                "provisionedIops",
                with(f(), "/disks/0/provisionedIops", Some(json!(1.5))),
                "providerSpec.disks[0].provisionedIops: must be a whole number",
            ),
            (
                "autoDelete",
                with(f(), "/disks/0/autoDelete", Some(json!("true"))),
                "providerSpec.disks[0].autoDelete: must be true or false",
            ),
            (
                "disk unknown",
                with(m(), "/disks/0/deviceName", Some(json!("sda"))),
                "providerSpec.disks[0]: unknown field \"deviceName\"",
            ),
            (
                "labels",
                with(m(), "/labels", Some(json!({"team": "A"}))),
                "providerSpec.labels[\"team\"]: \"A\": label values",
            ),
            (
                "label key",
                with(m(), "/labels", Some(json!({"kubernetes.io/x": "a"}))),
                "providerSpec.labels[\"kubernetes.io/x\"]: label keys",
            ),
            ("label type", with(m(), "/labels", Some(json!({"a": 1}))), "providerSpec.labels[\"a\"]: must be a string"),
            (
                "no nics",
                with(m(), "/networkInterfaces", Some(json!([]))),
                "providerSpec.networkInterfaces: needs at least one",
            ),
            (
                "nic network",
                with(m(), "/networkInterfaces/0", Some(json!({}))),
                "providerSpec.networkInterfaces[0].network: set network, subnetwork or both",
            ),
            (
                "nic URL",
                with(m(), "/networkInterfaces/0/network", Some(json!("global/networks/default"))),
                "providerSpec.networkInterfaces[0].network: give the name",
            ),
            (
                "stackType",
                with(f(), "/networkInterfaces/0/stackType", Some(json!("IPV6_ONLY"))),
                "providerSpec.networkInterfaces[0].stackType: \"IPV6_ONLY\" is not one of IPV4_ONLY, IPV4_IPV6",
            ),
            (
                "ipv6accessType",
                with(f(), "/networkInterfaces/0/ipv6accessType", Some(json!("PUBLIC"))),
                "providerSpec.networkInterfaces[0].ipv6accessType: \"PUBLIC\" is not one of",
            ),
            (
                "both access types",
                with(f(), "/networkInterfaces/0/ipv6AccessType", Some(json!("INTERNAL"))),
                "providerSpec.networkInterfaces[0].ipv6accessType: is also given",
            ),
            (
                "ipCidrRange",
                with(f(), "/networkInterfaces/0/ipCidrRange", Some(json!("24"))),
                "providerSpec.networkInterfaces[0].ipCidrRange: \"24\" must be a mask size",
            ),
            (
                "ipCidrRange size",
                with(f(), "/networkInterfaces/1/ipCidrRange", Some(json!("/33"))),
                "providerSpec.networkInterfaces[1].ipCidrRange: \"/33\"",
            ),
            (
                "disableExternalIP",
                with(m(), "/networkInterfaces/0/disableExternalIP", Some(json!("true"))),
                "providerSpec.networkInterfaces[0].disableExternalIP: must be true or false",
            ),
            (
                "nic unknown",
                with(m(), "/networkInterfaces/0/subnet", Some(json!("s"))),
                "providerSpec.networkInterfaces[0]: unknown field \"subnet\"",
            ),
            (
                "metadata key",
                with(f(), "/metadata/0/key", Some(json!("a b"))),
                "providerSpec.metadata[0].key: \"a b\": metadata keys",
            ),
            (
                "metadata user-data",
                with(f(), "/metadata/0/key", Some(json!("user-data"))),
                "providerSpec.metadata[0].key: user-data is set from the secret",
            ),
            (
                "metadata twice",
                with(f(), "/metadata/1/key", Some(json!("ash"))),
                "providerSpec.metadata[1].key: \"ash\" is given twice",
            ),
            ("metadata no key", with(f(), "/metadata/0/key", None), "providerSpec.metadata[0].key: is required"),
            (
                "metadata value",
                with(f(), "/metadata/0/value", Some(json!(1))),
                "providerSpec.metadata[0].value: must be a string",
            ),
            (
                "onHostMaintenance",
                with(m(), "/scheduling", Some(json!({"onHostMaintenance": "LIVE"}))),
                "providerSpec.scheduling.onHostMaintenance: \"LIVE\" is not one of MIGRATE, TERMINATE",
            ),
            (
                "gpu migrate",
                with(f(), "/scheduling/onHostMaintenance", Some(json!("MIGRATE"))),
                "providerSpec.scheduling.onHostMaintenance: instances with a GPU cannot live-migrate",
            ),
            (
                "preemptible migrate",
                with(m(), "/scheduling", Some(json!({"preemptible": true, "onHostMaintenance": "MIGRATE"}))),
                "providerSpec.scheduling.onHostMaintenance: preemptible instances",
            ),
            (
                "preemptible restart",
                with(m(), "/scheduling", Some(json!({"preemptible": true, "automaticRestart": true}))),
                "providerSpec.scheduling.automaticRestart: preemptible instances",
            ),
            (
                "scheduling unknown",
                with(m(), "/scheduling", Some(json!({"provisioningModel": "SPOT"}))),
                "providerSpec.scheduling: unknown field \"provisioningModel\"",
            ),
            (
                "two service accounts",
                with(f(), "/serviceAccounts/1", Some(json!({"email": "b"}))),
                "providerSpec.serviceAccounts: Compute Engine allows one",
            ),
            (
                "service account email",
                with(f(), "/serviceAccounts/0/email", None),
                "providerSpec.serviceAccounts[0].email: is required",
            ),
            (
                "scopes",
                with(f(), "/serviceAccounts/0/scopes", Some(json!("all"))),
                "providerSpec.serviceAccounts[0].scopes: must be a list",
            ),
            ("gpu type", with(f(), "/gpu/acceleratorType", None), "providerSpec.gpu.acceleratorType: is required"),
            ("gpu count", with(f(), "/gpu/count", Some(json!(0))), "providerSpec.gpu.count: 0 must be at least 1"),
            ("gpu count missing", with(f(), "/gpu/count", None), "providerSpec.gpu.count: is required"),
            (
                "tags",
                with(m(), "/tags", None),
                "providerSpec.tags: must contain a tag kubernetes-io-cluster-<cluster name>",
            ),
            (
                "role tag",
                with(m(), "/tags", Some(json!(["kubernetes-io-cluster-dev"]))),
                "providerSpec.tags: must contain a tag kubernetes-io-role-<role>",
            ),
            (
                "bare prefix",
                with(m(), "/tags", Some(json!(["kubernetes-io-cluster-", "kubernetes-io-role-node"]))),
                "providerSpec.tags[0]: \"kubernetes-io-cluster-\" is not a network tag",
            ),
            (
                "tag chars",
                with(m(), "/tags/2", Some(json!("kubernetes.io/role/node"))),
                "providerSpec.tags[2]: \"kubernetes.io/role/node\" is not a network tag",
            ),
            (
                "tag twice",
                with(m(), "/tags/2", Some(json!("kubernetes-io-role-node"))),
                "providerSpec.tags[2]: \"kubernetes-io-role-node\" is given twice",
            ),
            ("tag type", with(m(), "/tags", Some(json!({"a": "b"}))), "providerSpec.tags: must be a list"),
            (
                "shielded",
                with(f(), "/shieldedInstanceConfiguration/vtpm", Some(json!("no"))),
                "providerSpec.shieldedInstanceConfiguration.vtpm: must be true or false",
            ),
            (
                "nested",
                with(f(), "/advancedMachineFeatures/threadsPerCore", Some(json!(1))),
                "providerSpec.advancedMachineFeatures: unknown field \"threadsPerCore\"",
            ),
            (
                "minCpuPlatform",
                with(m(), "/minCpuPlatform", Some(json!(true))),
                "providerSpec.minCpuPlatform: must be a string",
            ),
        ];
        for (name, value, want) in cases {
            let err = ProviderSpec::parse(&value).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument, "{name}");
            assert!(err.message.starts_with(want), "{name}: {:?} should start with {want:?}", err.message);
        }
    }

    #[test]
    fn limits_on_tags_and_labels() {
        let mut v = minimal();
        for i in 0..63 {
            v["tags"].as_array_mut().unwrap().push(json!(format!("t{i}")));
        }
        let err = ProviderSpec::parse(&v).unwrap_err();
        assert!(err.message.starts_with("providerSpec.tags: 65 tags exceed"), "{err}");
        v["tags"].as_array_mut().unwrap().pop();
        ProviderSpec::parse(&v).unwrap();
        let long = with(minimal(), "/labels", Some(json!({"a": "x".repeat(64)})));
        assert!(ProviderSpec::parse(&long).unwrap_err().message.contains("label values are at most 63"));
        let intl = with(minimal(), "/labels", Some(json!({"équipe": "café"})));
        ProviderSpec::parse(&intl).unwrap();
    }
}
