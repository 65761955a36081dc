//! The AWS providerSpec, in the shape of Gardener's machine-controller-manager-provider-aws, parsed strictly:
//! unknown fields, wrong types and values AWS would refuse are `InvalidArgument` naming the field
//! (`providerSpec.blockDevices[1].ebs.volumeType: ...`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::providers::fields::Obj;

use crate::providers::{DriverError, tags};

/// The top-level providerSpec fields, as Gardener's AWS provider names them.
pub const FIELDS: &[&str] = &[
    "apiVersion",
    "ami",
    "blockDevices",
    "capacityReservation",
    "cpuOptions",
    "ebsOptimized",
    "iam",
    "instanceMarketOptions",
    "instanceMetadataOptions",
    "keyName",
    "machineType",
    "monitoring",
    "networkInterfaces",
    "placement",
    "region",
    "spotPrice",
    "srcAndDstChecksEnabled",
    SUBNETS_BY_ZONE,
    "tags",
];

/// Ours, not Gardener's: zone -> subnet, read by the MCMMachine controller to place a VM in its Machine's failure
/// domain before the driver is called (`docs/infrastructure-provider.md`, "Failure domains"); admitted and
/// ignored here (it must be an object). Gardener's AWS provider decodes the providerSpec leniently and ignores it.
pub const SUBNETS_BY_ZONE: &str = "subnetsByZone";

/// EBS volume types accepted in `blockDevices[].ebs.volumeType` (Gardener's list plus `io2`).
pub const VOLUME_TYPES: &[&str] = &["gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"];

/// The `deviceName` that marks the root disk when several block devices are given.
pub const ROOT_DEVICE: &str = "/root";

/// AWS allows 50 tags per resource; the `Name` tag is one of them.
pub const MAX_TAGS: usize = 50;

/// A data disk's device name when several block devices are given (AWS's naming rules, as Gardener checks them).
static DATA_DEVICE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^/dev/(sd[a-z]|xvd[a-c][a-z]?)$").ok());

/// The instance profile: exactly one of name and ARN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IamProfile {
    /// `iam.name`.
    Name(String),
    /// `iam.arn`.
    Arn(String),
}

/// One entry of `networkInterfaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkInterface {
    /// `subnetID` (required).
    pub subnet_id: String,
    /// `securityGroupIDs` (at least one).
    pub security_group_ids: Vec<String>,
    /// `associatePublicIPAddress`.
    pub associate_public_ip_address: Option<bool>,
    /// `ipv6AddressCount`.
    pub ipv6_address_count: Option<i32>,
    /// `ipv6PrefixCount`: prefixes assigned by `initialize_machine`.
    pub ipv6_prefix_count: Option<i32>,
    /// `deleteOnTermination` (default true).
    pub delete_on_termination: Option<bool>,
    /// `description`.
    pub description: Option<String>,
    /// `interfaceType`: `interface`, `efa` or `efa-only`.
    pub interface_type: Option<String>,
    /// `networkCardIndex`.
    pub network_card_index: Option<i32>,
    /// `deviceIndex` (default: the position in the list).
    pub device_index: Option<i32>,
    /// `primaryIpv6` (default true when `ipv6AddressCount` is set).
    pub primary_ipv6: Option<bool>,
}

/// `blockDevices[].ebs`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ebs {
    /// `volumeSize` in GiB (> 0).
    pub volume_size: i32,
    /// `volumeType`, one of [`VOLUME_TYPES`].
    pub volume_type: String,
    /// `iops` (required for io1/io2).
    pub iops: Option<i32>,
    /// `throughput` in MiB/s (gp3).
    pub throughput: Option<i32>,
    /// `encrypted`.
    pub encrypted: bool,
    /// `kmsKeyID`.
    pub kms_key_id: Option<String>,
    /// `deleteOnTermination` (default true).
    pub delete_on_termination: Option<bool>,
    /// `snapshotID`.
    pub snapshot_id: Option<String>,
}

/// One entry of `blockDevices`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockDevice {
    /// `deviceName`: `/root` for the root disk, `/dev/sdX` or `/dev/xvdX` for data disks; with a single block
    /// device it may be empty (that device is the root disk).
    pub device_name: String,
    /// `ebs`.
    pub ebs: Ebs,
    /// `noDevice`.
    pub no_device: Option<String>,
    /// `virtualName`.
    pub virtual_name: Option<String>,
}

impl BlockDevice {
    /// Whether this is the root disk (named `/root`, or the only block device).
    pub fn is_root(&self, count: usize) -> bool {
        self.device_name == ROOT_DEVICE || count == 1
    }
}

/// `instanceMetadataOptions`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetadataOptions {
    /// `httpEndpoint`: `enabled` or `disabled`.
    pub http_endpoint: Option<String>,
    /// `httpPutResponseHopLimit`: 1..=64.
    pub http_put_response_hop_limit: Option<i32>,
    /// `httpTokens`: `required` or `optional`.
    pub http_tokens: Option<String>,
    /// `httpProtocolIpv6`: `enabled` or `disabled`.
    pub http_protocol_ipv6: Option<String>,
}

/// `placement`, or the [`PLACEMENT_ANNOTATION`] of a machine's node template (whose keys are EC2's field names in
/// camelCase; an unknown key is refused: Gardener's decoder ignores it, and a misspelt `tenancy` would place the
/// VM on shared hardware unnoticed).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Placement {
    /// `groupId`.
    pub group_id: Option<String>,
    /// `tenancy`: `default`, `dedicated` or `host`.
    pub tenancy: Option<String>,
    /// `hostId` (only with tenancy `host`).
    pub host_id: Option<String>,
    /// `partitionNumber` (>= 1).
    pub partition_number: Option<i32>,
    /// `affinity`: `default` or `host`.
    pub affinity: Option<String>,
    /// `availabilityZone` (the annotation only).
    pub availability_zone: Option<String>,
    /// `groupName` (the annotation only).
    pub group_name: Option<String>,
    /// `hostResourceGroupArn` (the annotation only).
    pub host_resource_group_arn: Option<String>,
}

/// `capacityReservation`: a preference, or one target (ID or resource group ARN).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapacityReservation {
    /// `capacityReservationPreference`.
    pub preference: Option<String>,
    /// `capacityReservationId`.
    pub id: Option<String>,
    /// `capacityReservationResourceGroupArn`.
    pub resource_group_arn: Option<String>,
}

/// `cpuOptions`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuOptions {
    /// `coreCount` (together with `threadsPerCore`).
    pub core_count: Option<i32>,
    /// `threadsPerCore`: 1 or 2.
    pub threads_per_core: Option<i32>,
    /// `amdSevSnp`: `enabled` or `disabled`.
    pub amd_sev_snp: Option<String>,
}

/// A parsed and validated AWS providerSpec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderSpec {
    /// `ami` (required).
    pub ami: String,
    /// `machineType`: the EC2 instance type (required).
    pub machine_type: String,
    /// `region` (required): where the EC2 client connects; in the providerID only when EC2 reports no zone.
    pub region: String,
    /// `keyName`: the EC2 key pair; empty means none.
    pub key_name: Option<String>,
    /// `iam`.
    pub iam: IamProfile,
    /// `networkInterfaces` (at least one).
    pub network_interfaces: Vec<NetworkInterface>,
    /// `blockDevices`; empty means the AMI's own mapping.
    pub block_devices: Vec<BlockDevice>,
    /// `tags`, without a `Name` tag (the driver sets `Name` to the machine name).
    pub tags: BTreeMap<String, String>,
    /// The `kubernetes.io/cluster/<name>` key among the tags.
    pub cluster_tag: String,
    /// The `kubernetes.io/role/<role>` key among the tags.
    pub role_tag: String,
    /// `spotPrice`: set means a spot instance, `""` without a maximum price (deprecated in Gardener in favour of
    /// `instanceMarketOptions`, still honoured).
    pub spot_price: Option<String>,
    /// `instanceMarketOptions.marketType`.
    pub market_type: Option<String>,
    /// `instanceMetadataOptions`.
    pub metadata_options: Option<MetadataOptions>,
    /// `placement`.
    pub placement: Option<Placement>,
    /// `capacityReservation`.
    pub capacity_reservation: Option<CapacityReservation>,
    /// `cpuOptions`.
    pub cpu_options: Option<CpuOptions>,
    /// `ebsOptimized`.
    pub ebs_optimized: bool,
    /// `monitoring`: detailed CloudWatch monitoring.
    pub monitoring: bool,
    /// `srcAndDstChecksEnabled`: `false` makes `initialize_machine` disable the source/destination check.
    pub src_and_dst_checks_enabled: Option<bool>,
}

impl ProviderSpec {
    /// Parses and validates a providerSpec; errors name the field.
    pub fn parse(value: &Value) -> Result<ProviderSpec, DriverError> {
        let spec = Obj::new("", value, FIELDS)?;
        // Read and ignored: Gardener's classes carry it, and it selects nothing here.
        spec.string("apiVersion")?;
        // Placement's, not the driver's; its entries are read where a VM is placed.
        if spec.get(SUBNETS_BY_ZONE).is_some_and(|v| !v.is_object()) {
            return Err(spec.invalid(SUBNETS_BY_ZONE, "must be an object of zone to subnet ID (or IDs)"));
        }
        let iam = match spec.object("iam", &["name", "arn"])? {
            None => return Err(DriverError::invalid_field("iam", "set either name or arn")),
            Some(iam) => match (iam.string("name")?, iam.string("arn")?) {
                (Some(name), None) => IamProfile::Name(name),
                (None, Some(arn)) => IamProfile::Arn(arn),
                _ => return Err(DriverError::invalid_field("iam", "set either name or arn, not both")),
            },
        };
        let (tags, cluster_tag, role_tag) = parse_tags(&spec)?;
        let spot_price = spec.get("spotPrice").map(|v| spec.text("spotPrice", v)).transpose()?;
        if let Some(price) = spot_price.as_deref().filter(|p| !p.is_empty())
            && !price.parse::<f64>().is_ok_and(|p| p.is_finite() && p > 0.0)
        {
            return Err(DriverError::invalid_field("spotPrice", format!("{price:?} must be a positive price")));
        }
        let market_type = match spec.object("instanceMarketOptions", &["marketType"])? {
            Some(o) => Some(o.required_one_of("marketType", market_types())?),
            None => None,
        };
        Ok(ProviderSpec {
            ami: spec.required_string("ami")?,
            machine_type: spec.required_string("machineType")?,
            region: spec.required_string("region")?,
            key_name: spec.string("keyName")?,
            iam,
            network_interfaces: parse_network_interfaces(&spec)?,
            block_devices: parse_block_devices(&spec)?,
            tags,
            cluster_tag,
            role_tag,
            spot_price,
            market_type,
            metadata_options: parse_metadata_options(&spec)?,
            placement: parse_placement(&spec)?,
            capacity_reservation: parse_capacity_reservation(&spec)?,
            cpu_options: parse_cpu_options(&spec)?,
            ebs_optimized: spec.boolean("ebsOptimized")?.unwrap_or(false),
            monitoring: spec.boolean("monitoring")?.unwrap_or(false),
            src_and_dst_checks_enabled: spec.boolean("srcAndDstChecksEnabled")?,
        })
    }

    /// Whether `initialize_machine` has work: the source/destination check to disable or IPv6 prefixes to assign.
    pub fn needs_initialization(&self) -> bool {
        self.src_and_dst_checks_enabled == Some(false)
            || self.network_interfaces.iter().any(|n| n.ipv6_prefix_count.is_some_and(|c| c > 0))
    }
}

fn market_types() -> &'static [&'static str] {
    aws_sdk_ec2::types::MarketType::values()
}

fn parse_tags(spec: &Obj<'_>) -> Result<(BTreeMap<String, String>, String, String), DriverError> {
    let mut tags = spec.string_map("tags")?.unwrap_or_default();
    // The Name tag carries the machine name; a class cannot choose it (Gardener drops it too).
    tags.remove("Name");
    let (cluster, role) = tags::ownership(tags.keys()).map_err(|why| DriverError::invalid_field("tags", why))?;
    if tags.len() + 1 > MAX_TAGS {
        return Err(DriverError::invalid_field(
            "tags",
            format!("{} tags plus Name exceed AWS's limit of {MAX_TAGS}", tags.len()),
        ));
    }
    for (key, value) in &tags {
        let field = format!("tags[{key:?}]");
        if key.to_ascii_lowercase().starts_with("aws:") {
            return Err(DriverError::invalid_field(&field, "the aws: prefix is reserved by AWS"));
        }
        if key.chars().count() > 128 {
            return Err(DriverError::invalid_field(&field, "keys are at most 128 characters"));
        }
        if value.chars().count() > 256 {
            return Err(DriverError::invalid_field(&field, "values are at most 256 characters"));
        }
    }
    Ok((tags, cluster, role))
}

fn parse_network_interfaces(spec: &Obj<'_>) -> Result<Vec<NetworkInterface>, DriverError> {
    const KNOWN: &[&str] = &[
        "subnetID",
        "securityGroupIDs",
        "associatePublicIPAddress",
        "ipv6AddressCount",
        "ipv6PrefixCount",
        "deleteOnTermination",
        "description",
        "interfaceType",
        "networkCardIndex",
        "deviceIndex",
        "primaryIpv6",
    ];
    let items = spec.list("networkInterfaces", KNOWN)?;
    if items.is_empty() {
        return Err(DriverError::invalid_field("networkInterfaces", "needs at least one network interface"));
    }
    items
        .iter()
        .map(|nic| {
            let groups = nic.strings("securityGroupIDs")?.unwrap_or_default();
            if groups.is_empty() {
                return Err(nic.invalid("securityGroupIDs", "needs at least one security group ID"));
            }
            if let Some(i) = groups.iter().position(|g| g.trim().is_empty()) {
                return Err(nic.invalid(&format!("securityGroupIDs[{i}]"), "must not be empty"));
            }
            Ok(NetworkInterface {
                subnet_id: nic.required_string("subnetID")?,
                security_group_ids: groups,
                associate_public_ip_address: nic.boolean("associatePublicIPAddress")?,
                ipv6_address_count: nic.int("ipv6AddressCount", 0, i32::MAX)?,
                ipv6_prefix_count: nic.int("ipv6PrefixCount", 0, i32::MAX)?,
                delete_on_termination: nic.boolean("deleteOnTermination")?,
                description: nic.string("description")?,
                interface_type: nic.one_of("interfaceType", &["interface", "efa", "efa-only"])?,
                network_card_index: nic.int("networkCardIndex", 0, i32::MAX)?,
                device_index: nic.int("deviceIndex", 0, i32::MAX)?,
                primary_ipv6: nic.boolean("primaryIpv6")?,
            })
        })
        .collect()
}

fn parse_block_devices(spec: &Obj<'_>) -> Result<Vec<BlockDevice>, DriverError> {
    const KNOWN: &[&str] = &["deviceName", "ebs", "noDevice", "virtualName"];
    const EBS: &[&str] = &[
        "volumeSize",
        "volumeType",
        "iops",
        "throughput",
        "encrypted",
        "kmsKeyID",
        "deleteOnTermination",
        "snapshotID",
    ];
    let items = spec.list("blockDevices", KNOWN)?;
    let count = items.len();
    let mut names = BTreeSet::new();
    let mut devices = Vec::with_capacity(count);
    for disk in &items {
        let device_name = disk.string("deviceName")?.unwrap_or_default();
        let ebs = disk.object("ebs", EBS)?.ok_or_else(|| disk.invalid("ebs", "is required"))?;
        let volume_type = ebs.required_one_of("volumeType", VOLUME_TYPES)?;
        let iops = ebs.int("iops", 0, i32::MAX)?.filter(|&i| i > 0);
        if matches!(volume_type.as_str(), "io1" | "io2") && iops.is_none() {
            return Err(ebs.invalid("iops", format!("is required for volume type {volume_type}")));
        }
        let device = BlockDevice {
            ebs: Ebs {
                volume_size: ebs
                    .int("volumeSize", 1, i32::MAX)?
                    .ok_or_else(|| ebs.invalid("volumeSize", "is required"))?,
                volume_type,
                iops,
                throughput: ebs.int("throughput", 1, i32::MAX)?,
                encrypted: ebs.boolean("encrypted")?.unwrap_or(false),
                kms_key_id: ebs.string("kmsKeyID")?,
                delete_on_termination: ebs.boolean("deleteOnTermination")?,
                snapshot_id: ebs.string("snapshotID")?,
            },
            no_device: disk.string("noDevice")?,
            virtual_name: disk.string("virtualName")?,
            device_name,
        };
        if count > 1
            && !device.is_root(count)
            && !DATA_DEVICE.as_ref().is_some_and(|re| re.is_match(&device.device_name))
        {
            return Err(disk.invalid(
                "deviceName",
                format!(
                    "{:?} must be {ROOT_DEVICE} or match ^/dev/(sd[a-z]|xvd[a-c][a-z]?)$ when there are several block devices",
                    device.device_name
                ),
            ));
        }
        if !names.insert(device.device_name.clone()) {
            return Err(disk.invalid("deviceName", format!("{:?} is used twice", device.device_name)));
        }
        devices.push(device);
    }
    let roots = devices.iter().filter(|d| d.device_name == ROOT_DEVICE).count();
    if count > 1 && roots != 1 {
        return Err(DriverError::invalid_field(
            "blockDevices",
            format!("exactly one device must be named {ROOT_DEVICE} when there are several, found {roots}"),
        ));
    }
    Ok(devices)
}

fn parse_metadata_options(spec: &Obj<'_>) -> Result<Option<MetadataOptions>, DriverError> {
    const KNOWN: &[&str] = &["httpEndpoint", "httpPutResponseHopLimit", "httpTokens", "httpProtocolIpv6"];
    let Some(o) = spec.object("instanceMetadataOptions", KNOWN)? else { return Ok(None) };
    Ok(Some(MetadataOptions {
        http_endpoint: o.one_of("httpEndpoint", &["enabled", "disabled"])?,
        http_put_response_hop_limit: o.int("httpPutResponseHopLimit", 1, 64)?,
        http_tokens: o.one_of("httpTokens", &["required", "optional"])?,
        http_protocol_ipv6: o.one_of("httpProtocolIpv6", &["enabled", "disabled"])?,
    }))
}

fn parse_placement(spec: &Obj<'_>) -> Result<Option<Placement>, DriverError> {
    const KNOWN: &[&str] = &["groupId", "tenancy", "hostId", "partitionNumber", "affinity"];
    let Some(o) = spec.object("placement", KNOWN)? else { return Ok(None) };
    let placement = Placement {
        group_id: o.string("groupId")?,
        tenancy: o.one_of("tenancy", &["default", "dedicated", "host"])?,
        host_id: o.string("hostId")?,
        partition_number: o.int("partitionNumber", 1, i32::MAX)?,
        affinity: o.one_of("affinity", &["default", "host"])?,
        ..Placement::default()
    };
    if placement.host_id.is_some() && placement.tenancy.as_deref() != Some("host") {
        return Err(o.invalid("hostId", "can only be set with tenancy \"host\""));
    }
    Ok(Some(placement))
}

/// The node-template annotation Gardener's AWS provider reads a placement from when the providerSpec has none:
/// a JSON object with EC2's `Placement` fields (`{"affinity": "host", "availabilityZone": "eu-west-1a",
/// "tenancy": "host"}`).
pub const PLACEMENT_ANNOTATION: &str = "machine.sapcloud.io/awsPlacement";

/// The placement a machine's node template asks for in [`PLACEMENT_ANNOTATION`]; absent, empty and `{}` are none.
pub fn annotated_placement(
    template: Option<&crate::api::mcm::NodeTemplateSpec>,
) -> Result<Option<Placement>, DriverError> {
    let text = template
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(PLACEMENT_ANNOTATION))
        .filter(|text| !text.trim().is_empty());
    let Some(text) = text else { return Ok(None) };
    let placement: Placement = serde_json::from_str(text).map_err(|e| {
        DriverError::new(
            crate::providers::Code::InvalidArgument,
            format!("node template annotation {PLACEMENT_ANNOTATION}: {e}"),
        )
    })?;
    Ok(Some(placement).filter(|p| *p != Placement::default()))
}

fn parse_capacity_reservation(spec: &Obj<'_>) -> Result<Option<CapacityReservation>, DriverError> {
    const KNOWN: &[&str] =
        &["capacityReservationPreference", "capacityReservationId", "capacityReservationResourceGroupArn"];
    let Some(o) = spec.object("capacityReservation", KNOWN)? else { return Ok(None) };
    let reservation = CapacityReservation {
        preference: o
            .one_of("capacityReservationPreference", aws_sdk_ec2::types::CapacityReservationPreference::values())?,
        id: o.string("capacityReservationId")?,
        resource_group_arn: o.string("capacityReservationResourceGroupArn")?,
    };
    match (&reservation.preference, &reservation.id, &reservation.resource_group_arn) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(DriverError::invalid_field(
            "capacityReservation",
            "capacityReservationPreference cannot be combined with capacityReservationId or \
             capacityReservationResourceGroupArn",
        )),
        (None, Some(_), Some(_)) => Err(DriverError::invalid_field(
            "capacityReservation",
            "set capacityReservationId or capacityReservationResourceGroupArn, not both",
        )),
        _ => Ok(Some(reservation)),
    }
}

fn parse_cpu_options(spec: &Obj<'_>) -> Result<Option<CpuOptions>, DriverError> {
    let Some(o) = spec.object("cpuOptions", &["coreCount", "threadsPerCore", "amdSevSnp"])? else { return Ok(None) };
    let options = CpuOptions {
        core_count: o.int("coreCount", 1, i32::MAX)?,
        threads_per_core: o.int("threadsPerCore", 1, 2)?,
        amd_sev_snp: o.one_of("amdSevSnp", &["enabled", "disabled"])?,
    };
    match (options.core_count, options.threads_per_core) {
        (Some(_), None) => Err(o.invalid("threadsPerCore", "is required when coreCount is set")),
        (None, Some(_)) => Err(o.invalid("coreCount", "is required when threadsPerCore is set")),
        _ => Ok(Some(options)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use crate::providers::Code;

    fn template(annotation: Option<&str>) -> crate::api::mcm::NodeTemplateSpec {
        let annotations = annotation.map(|a| json!({PLACEMENT_ANNOTATION: a})).unwrap_or(json!({}));
        serde_json::from_value(json!({"metadata": {"annotations": annotations}})).unwrap()
    }

    #[test]
    fn the_placement_annotation_is_read_strictly() {
        let host = Placement {
            affinity: Some("host".into()),
            availability_zone: Some("eu-west-1a".into()),
            tenancy: Some("host".into()),
            ..Default::default()
        };
        type Want = Result<Option<Placement>, &'static str>;
        let cases: &[(Option<&str>, Want)] = &[
            (None, Ok(None)),
            (Some(""), Ok(None)),
            (Some("{}"), Ok(None)),
            (Some(r#"{ "affinity": "host", "availabilityZone": "eu-west-1a", "tenancy": "host"}"#), Ok(Some(host))),
            (Some(r#"{"tenancy": "host", "zone": "a"}"#), Err("unknown field `zone`")),
            (Some("{not json"), Err("key must be a string")),
            (Some(r#"{"partitionNumber": "1"}"#), Err("invalid type")),
        ];
        for (annotation, want) in cases {
            let got = annotated_placement(Some(&template(*annotation)));
            match (want, got) {
                (Ok(want), Ok(got)) => assert_eq!(&got, want, "{annotation:?}"),
                (Err(text), Err(e)) => {
                    assert_eq!(e.code, Code::InvalidArgument);
                    assert!(e.message.contains(PLACEMENT_ANNOTATION) && e.message.contains(text), "{}", e.message);
                }
                (want, got) => panic!("{annotation:?}: want {want:?}, got {got:?}"),
            }
        }
        assert_eq!(annotated_placement(None).unwrap(), None);
    }

    /// Gardener's sample MachineClass providerSpec (kubernetes/machine-class.yaml), every option filled in.
    pub(crate) fn full() -> Value {
        json!({
            "apiVersion": "mcm.gardener.cloud/v1alpha1",
            "ami": "ami-123456",
            "blockDevices": [
                {"deviceName": "/root", "ebs": {"volumeSize": 50, "volumeType": "gp3", "encrypted": true,
                    "deleteOnTermination": true, "iops": 3000, "throughput": 125, "kmsKeyID": "arn:aws:kms:k"}},
                {"deviceName": "/dev/sdb", "ebs": {"volumeSize": 100, "volumeType": "io1", "iops": 500,
                    "deleteOnTermination": false, "snapshotID": "snap-1"}}
            ],
            "capacityReservation": {"capacityReservationId": "cr-05c28b843c05acc11"},
            "cpuOptions": {"coreCount": 2, "threadsPerCore": 1, "amdSevSnp": "disabled"},
            "ebsOptimized": true,
            "iam": {"name": "iam-name"},
            "instanceMarketOptions": {"marketType": "spot"},
            "instanceMetadataOptions": {"httpEndpoint": "enabled", "httpPutResponseHopLimit": 2,
                "httpTokens": "required", "httpProtocolIpv6": "disabled"},
            "keyName": "key-value-pair-name",
            "machineType": "m5.large",
            "monitoring": true,
            "networkInterfaces": [{"subnetID": "subnet-acbd1234", "securityGroupIDs": ["sg-xyz12345"],
                "associatePublicIPAddress": false, "ipv6AddressCount": 1, "ipv6PrefixCount": 1,
                "deleteOnTermination": true, "description": "primary", "interfaceType": "interface",
                "networkCardIndex": 0, "deviceIndex": 0, "primaryIpv6": true}],
            "placement": {"groupId": "pg-1", "tenancy": "host", "hostId": "h-1", "partitionNumber": 1, "affinity": "host"},
            "region": "eu-west-1",
            "spotPrice": "",
            "srcAndDstChecksEnabled": false,
            "tags": {"Name": "ignored", "kubernetes.io/cluster/shoot--dev": "1", "kubernetes.io/role/node": "1",
                "tag1": "tag1-value"}
        })
    }

    /// The smallest valid spec.
    pub(crate) fn minimal() -> Value {
        json!({
            "ami": "ami-1", "machineType": "t3.micro", "region": "us-east-1", "iam": {"arn": "arn:aws:iam::1:instance-profile/x"},
            "networkInterfaces": [{"subnetID": "subnet-1", "securityGroupIDs": ["sg-1"]}],
            "tags": {"kubernetes.io/cluster/dev": "1", "kubernetes.io/role/node": "1"}
        })
    }

    /// `base` with the value at the JSON pointer `path` replaced (or removed for `None`).
    fn with(base: Value, path: &str, value: Option<Value>) -> Value {
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
            (Value::Array(items), Some(value)) => items[key.parse::<usize>().unwrap()] = value,
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
        assert_eq!(
            (spec.ami.as_str(), spec.machine_type.as_str(), spec.region.as_str()),
            ("ami-123456", "m5.large", "eu-west-1")
        );
        assert_eq!(spec.iam, IamProfile::Name("iam-name".into()));
        assert_eq!(spec.key_name.as_deref(), Some("key-value-pair-name"));
        assert_eq!(spec.block_devices.len(), 2);
        assert!(spec.block_devices[0].is_root(2) && !spec.block_devices[1].is_root(2));
        assert_eq!(spec.block_devices[0].ebs.kms_key_id.as_deref(), Some("arn:aws:kms:k"));
        assert_eq!(spec.block_devices[1].ebs.snapshot_id.as_deref(), Some("snap-1"));
        assert_eq!(spec.block_devices[1].ebs.delete_on_termination, Some(false));
        assert_eq!(spec.network_interfaces[0].ipv6_prefix_count, Some(1));
        assert_eq!(spec.tags.len(), 3, "Name is dropped: {:?}", spec.tags);
        assert_eq!(
            (spec.cluster_tag.as_str(), spec.role_tag.as_str()),
            ("kubernetes.io/cluster/shoot--dev", "kubernetes.io/role/node")
        );
        assert_eq!(spec.spot_price.as_deref(), Some(""));
        assert_eq!(spec.market_type.as_deref(), Some("spot"));
        assert_eq!(spec.metadata_options.as_ref().unwrap().http_put_response_hop_limit, Some(2));
        assert_eq!(spec.placement.as_ref().unwrap().tenancy.as_deref(), Some("host"));
        assert_eq!(spec.capacity_reservation.as_ref().unwrap().id.as_deref(), Some("cr-05c28b843c05acc11"));
        assert_eq!(spec.cpu_options.as_ref().unwrap().threads_per_core, Some(1));
        assert!(spec.ebs_optimized && spec.monitoring);
        assert!(spec.needs_initialization());
    }

    #[test]
    fn defaults_of_the_minimal_spec() {
        let spec = ProviderSpec::parse(&minimal()).unwrap();
        assert_eq!(spec.iam, IamProfile::Arn("arn:aws:iam::1:instance-profile/x".into()));
        assert!(spec.block_devices.is_empty() && spec.key_name.is_none() && spec.spot_price.is_none());
        assert!(!spec.ebs_optimized && !spec.monitoring && spec.src_and_dst_checks_enabled.is_none());
        assert!(!spec.needs_initialization());
        // A single block device needs no name: it is the root disk.
        let one = with(minimal(), "/blockDevices", Some(json!([{"ebs": {"volumeSize": 20, "volumeType": "gp2"}}])));
        let spec = ProviderSpec::parse(&one).unwrap();
        assert!(spec.block_devices[0].is_root(1));
        // The zone map is placement's: admitted, and ignored by the driver.
        let mapped = with(minimal(), "/subnetsByZone", Some(json!({"eu-west-1b": "subnet-b"})));
        assert_eq!(ProviderSpec::parse(&mapped).unwrap(), ProviderSpec::parse(&minimal()).unwrap());
        // Empty strings are Gardener's "unset".
        let empty = with(minimal(), "/keyName", Some(json!("")));
        assert_eq!(ProviderSpec::parse(&empty).unwrap().key_name, None);
    }

    #[test]
    fn every_invalid_field_is_named() {
        let m = minimal;
        let f = full;
        let nic = |v: Value| with(m(), "/networkInterfaces/0", Some(v));
        let cases: Vec<(&str, Value, &str)> = vec![
            ("not an object", json!("x"), "providerSpec: must be an object"),
            (
                "unknown top-level",
                with(m(), "/bootJitter", Some(json!(1))),
                "providerSpec: unknown field \"bootJitter\"",
            ),
            ("unknown nested", with(f(), "/iam/role", Some(json!("r"))), "providerSpec.iam: unknown field \"role\""),
            (
                "several unknown",
                with(with(m(), "/a", Some(json!(1))), "/b", Some(json!(1))),
                "providerSpec: unknown fields \"a\", \"b\"",
            ),
            (
                "subnetsByZone not an object",
                with(m(), "/subnetsByZone", Some(json!(["subnet-1"]))),
                "providerSpec.subnetsByZone: must be an object",
            ),
            ("ami", with(m(), "/ami", None), "providerSpec.ami: is required"),
            ("ami type", with(m(), "/ami", Some(json!(5))), "providerSpec.ami: must be a string, got a number"),
            ("machineType", with(m(), "/machineType", Some(json!(""))), "providerSpec.machineType: is required"),
            ("region", with(m(), "/region", None), "providerSpec.region: is required"),
            ("keyName", with(m(), "/keyName", Some(json!(true))), "providerSpec.keyName: must be a string"),
            ("iam missing", with(m(), "/iam", None), "providerSpec.iam: set either name or arn"),
            (
                "iam both",
                with(m(), "/iam", Some(json!({"name": "a", "arn": "b"}))),
                "providerSpec.iam: set either name or arn, not both",
            ),
            ("iam empty", with(m(), "/iam", Some(json!({"name": ""}))), "providerSpec.iam: set either name or arn"),
            (
                "no nics",
                with(m(), "/networkInterfaces", Some(json!([]))),
                "providerSpec.networkInterfaces: needs at least one",
            ),
            (
                "nic type",
                with(m(), "/networkInterfaces", Some(json!({}))),
                "providerSpec.networkInterfaces: must be a list",
            ),
            (
                "subnetID",
                nic(json!({"securityGroupIDs": ["sg"]})),
                "providerSpec.networkInterfaces[0].subnetID: is required",
            ),
            (
                "securityGroupIDs",
                nic(json!({"subnetID": "s"})),
                "providerSpec.networkInterfaces[0].securityGroupIDs: needs at least one",
            ),
            (
                "blank security group",
                nic(json!({"subnetID": "s", "securityGroupIDs": ["sg", " "]})),
                "providerSpec.networkInterfaces[0].securityGroupIDs[1]: must not be empty",
            ),
            (
                "interfaceType",
                nic(json!({"subnetID": "s", "securityGroupIDs": ["sg"], "interfaceType": "eni"})),
                "providerSpec.networkInterfaces[0].interfaceType: \"eni\" is not one of interface, efa, efa-only",
            ),
            (
                "deviceIndex",
                nic(json!({"subnetID": "s", "securityGroupIDs": ["sg"], "deviceIndex": -1})),
                "providerSpec.networkInterfaces[0].deviceIndex: -1 must be at least 0",
            ),
            (
                "networkCardIndex",
                nic(json!({"subnetID": "s", "securityGroupIDs": ["sg"], "networkCardIndex": 1.5})),
                "providerSpec.networkInterfaces[0].networkCardIndex: must be a whole number",
            ),
            (
                "associatePublicIPAddress",
                nic(json!({"subnetID": "s", "securityGroupIDs": ["sg"], "associatePublicIPAddress": "yes"})),
                "providerSpec.networkInterfaces[0].associatePublicIPAddress: must be true or false",
            ),
            (
                "nic unknown",
                nic(json!({"subnetID": "s", "securityGroupIDs": ["sg"], "subnetId": "x"})),
                "providerSpec.networkInterfaces[0]: unknown field \"subnetId\"",
            ),
            (
                "volumeType",
                with(f(), "/blockDevices/0/ebs/volumeType", Some(json!("gp9"))),
                "providerSpec.blockDevices[0].ebs.volumeType: \"gp9\" is not one of",
            ),
            (
                "volumeType missing",
                with(f(), "/blockDevices/0/ebs/volumeType", None),
                "providerSpec.blockDevices[0].ebs.volumeType: is required",
            ),
            (
                "volumeSize",
                with(f(), "/blockDevices/1/ebs/volumeSize", Some(json!(0))),
                "providerSpec.blockDevices[1].ebs.volumeSize: 0 must be at least 1",
            ),
            (
                "volumeSize missing",
                with(f(), "/blockDevices/1/ebs/volumeSize", None),
                "providerSpec.blockDevices[1].ebs.volumeSize: is required",
            ),
            (
                "iops io1",
                with(f(), "/blockDevices/1/ebs/iops", None),
                "providerSpec.blockDevices[1].ebs.iops: is required for volume type io1",
            ),
            (
                "iops negative",
                with(f(), "/blockDevices/0/ebs/iops", Some(json!(-5))),
                "providerSpec.blockDevices[0].ebs.iops: -5 must be at least 0",
            ),
            (
                "throughput",
                with(f(), "/blockDevices/0/ebs/throughput", Some(json!(0))),
                "providerSpec.blockDevices[0].ebs.throughput: 0 must be at least 1",
            ),
            (
                "encrypted",
                with(f(), "/blockDevices/0/ebs/encrypted", Some(json!("true"))),
                "providerSpec.blockDevices[0].ebs.encrypted: must be true or false",
            ),
            (
                "kmsKeyID",
                with(f(), "/blockDevices/0/ebs/kmsKeyID", Some(json!(1))),
                "providerSpec.blockDevices[0].ebs.kmsKeyID: must be a string",
            ),
            (
                "snapshotID",
                with(f(), "/blockDevices/1/ebs/snapshotID", Some(json!([]))),
                "providerSpec.blockDevices[1].ebs.snapshotID: must be a string",
            ),
            (
                "deleteOnTermination",
                with(f(), "/blockDevices/1/ebs/deleteOnTermination", Some(json!(0))),
                "providerSpec.blockDevices[1].ebs.deleteOnTermination: must be true or false",
            ),
            (
                "ebs unknown",
                with(f(), "/blockDevices/0/ebs/size", Some(json!(1))),
                "providerSpec.blockDevices[0].ebs: unknown field \"size\"",
            ),
            ("ebs missing", with(f(), "/blockDevices/0/ebs", None), "providerSpec.blockDevices[0].ebs: is required"),
            (
                "deviceName",
                with(f(), "/blockDevices/1/deviceName", Some(json!("/dev/nvme1"))),
                "providerSpec.blockDevices[1].deviceName: \"/dev/nvme1\" must be /root or match",
            ),
            (
                "two roots",
                with(f(), "/blockDevices/1/deviceName", Some(json!("/root"))),
                "providerSpec.blockDevices[1].deviceName: \"/root\" is used twice",
            ),
            (
                "no root",
                with(f(), "/blockDevices/0/deviceName", Some(json!("/dev/sdc"))),
                "providerSpec.blockDevices: exactly one device must be named /root",
            ),
            ("tags", with(m(), "/tags", None), "providerSpec.tags: must contain a tag key kubernetes.io/cluster/"),
            (
                "role tag",
                with(m(), "/tags", Some(json!({"kubernetes.io/cluster/dev": "1"}))),
                "providerSpec.tags: must contain a tag key kubernetes.io/role/",
            ),
            ("tag value", with(m(), "/tags/team", Some(json!(1))), "providerSpec.tags[\"team\"]: must be a string"),
            (
                "aws: tag",
                with(m(), "/tags/aws:owner", Some(json!("x"))),
                "providerSpec.tags[\"aws:owner\"]: the aws: prefix is reserved",
            ),
            (
                "long tag value",
                with(m(), "/tags/team", Some(json!("x".repeat(257)))),
                "providerSpec.tags[\"team\"]: values are at most 256",
            ),
            (
                "spotPrice",
                with(m(), "/spotPrice", Some(json!("cheap"))),
                "providerSpec.spotPrice: \"cheap\" must be a positive price",
            ),
            ("spotPrice type", with(m(), "/spotPrice", Some(json!(0.1))), "providerSpec.spotPrice: must be a string"),
            (
                "marketType",
                with(f(), "/instanceMarketOptions/marketType", Some(json!("cheap"))),
                "providerSpec.instanceMarketOptions.marketType: \"cheap\" is not one of",
            ),
            (
                "marketType missing",
                with(f(), "/instanceMarketOptions", Some(json!({}))),
                "providerSpec.instanceMarketOptions.marketType: is required",
            ),
            (
                "httpTokens",
                with(f(), "/instanceMetadataOptions/httpTokens", Some(json!("v2"))),
                "providerSpec.instanceMetadataOptions.httpTokens: \"v2\" is not one of required, optional",
            ),
            (
                "httpEndpoint",
                with(f(), "/instanceMetadataOptions/httpEndpoint", Some(json!("on"))),
                "providerSpec.instanceMetadataOptions.httpEndpoint",
            ),
            (
                "httpProtocolIpv6",
                with(f(), "/instanceMetadataOptions/httpProtocolIpv6", Some(json!("yes"))),
                "providerSpec.instanceMetadataOptions.httpProtocolIpv6",
            ),
            (
                "hop limit",
                with(f(), "/instanceMetadataOptions/httpPutResponseHopLimit", Some(json!(65))),
                "providerSpec.instanceMetadataOptions.httpPutResponseHopLimit: 65 must be between 1 and 64",
            ),
            (
                "tenancy",
                with(f(), "/placement/tenancy", Some(json!("shared"))),
                "providerSpec.placement.tenancy: \"shared\" is not one of default, dedicated, host",
            ),
            (
                "hostId",
                with(f(), "/placement/tenancy", Some(json!("dedicated"))),
                "providerSpec.placement.hostId: can only be set with tenancy \"host\"",
            ),
            ("affinity", with(f(), "/placement/affinity", Some(json!("any"))), "providerSpec.placement.affinity"),
            (
                "partitionNumber",
                with(f(), "/placement/partitionNumber", Some(json!(0))),
                "providerSpec.placement.partitionNumber: 0 must be at least 1",
            ),
            (
                "reservation both",
                with(f(), "/capacityReservation/capacityReservationResourceGroupArn", Some(json!("arn"))),
                "providerSpec.capacityReservation: set capacityReservationId or capacityReservationResourceGroupArn, not both",
            ),
            (
                "reservation preference and id",
                with(f(), "/capacityReservation/capacityReservationPreference", Some(json!("open"))),
                "providerSpec.capacityReservation: capacityReservationPreference cannot be combined",
            ),
            (
                "reservation preference",
                with(m(), "/capacityReservation", Some(json!({"capacityReservationPreference": "maybe"}))),
                "providerSpec.capacityReservation.capacityReservationPreference: \"maybe\" is not one of",
            ),
            (
                "threadsPerCore",
                with(f(), "/cpuOptions/threadsPerCore", Some(json!(3))),
                "providerSpec.cpuOptions.threadsPerCore: 3 must be between 1 and 2",
            ),
            (
                "coreCount alone",
                with(f(), "/cpuOptions/threadsPerCore", None),
                "providerSpec.cpuOptions.threadsPerCore: is required when coreCount is set",
            ),
            (
                "threadsPerCore alone",
                with(f(), "/cpuOptions/coreCount", None),
                "providerSpec.cpuOptions.coreCount: is required when threadsPerCore is set",
            ),
            ("amdSevSnp", with(f(), "/cpuOptions/amdSevSnp", Some(json!("on"))), "providerSpec.cpuOptions.amdSevSnp"),
            (
                "ebsOptimized",
                with(m(), "/ebsOptimized", Some(json!("true"))),
                "providerSpec.ebsOptimized: must be true or false",
            ),
            ("monitoring", with(m(), "/monitoring", Some(json!(1))), "providerSpec.monitoring: must be true or false"),
            (
                "srcAndDstChecksEnabled",
                with(m(), "/srcAndDstChecksEnabled", Some(json!("no"))),
                "providerSpec.srcAndDstChecksEnabled",
            ),
            ("apiVersion", with(m(), "/apiVersion", Some(json!(1))), "providerSpec.apiVersion: must be a string"),
        ];
        for (name, value, want) in cases {
            let err = ProviderSpec::parse(&value).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument, "{name}");
            assert!(err.message.starts_with(want), "{name}: {:?} should start with {want:?}", err.message);
        }
    }

    #[test]
    fn too_many_tags_are_refused() {
        let mut v = minimal();
        for i in 0..48 {
            v["tags"][format!("t{i}")] = json!("v");
        }
        // 2 ownership tags + 48 = 50, plus Name = 51.
        let err = ProviderSpec::parse(&v).unwrap_err();
        assert!(err.message.starts_with("providerSpec.tags: 50 tags plus Name exceed"), "{err}");
        v["tags"].as_object_mut().unwrap().remove("t0");
        ProviderSpec::parse(&v).unwrap();
    }
}
