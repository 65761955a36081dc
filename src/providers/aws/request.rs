//! Pure translations between our types and EC2's: the parts of a RunInstances request built from the
//! providerSpec, providerIDs, the idempotency token, tags, addresses and volume IDs. No I/O here.

use aws_sdk_ec2::types::{
    AttributeBooleanValue, BlockDeviceMapping, CapacityReservationPreference, CapacityReservationSpecification,
    CapacityReservationTarget, CpuOptionsRequest, EbsBlockDevice, Filter, HttpTokensState,
    IamInstanceProfileSpecification, Instance, InstanceMarketOptionsRequest, InstanceMetadataEndpointState,
    InstanceMetadataOptionsRequest, InstanceMetadataProtocolState, InstanceNetworkInterfaceSpecification,
    InstanceStateName, MarketType, Placement, ResourceType, SpotInstanceType, SpotMarketOptions, Tag, TagSpecification,
    Tenancy, VolumeType,
};
use k8s_openapi::api::core::v1::{NodeAddress, PersistentVolumeSpec};
use sha2::{Digest, Sha256};

use super::spec::{self, IamProfile, ProviderSpec};
use crate::providers::{Code, DriverError};

/// The tag holding the machine name on instances, volumes and network interfaces.
pub const NAME_TAG: &str = "Name";

/// Instance states that count as an existing VM (terminated and shutting-down ones are gone).
pub const LIVE_STATES: [&str; 4] = ["pending", "running", "stopping", "stopped"];

/// The CSI driver whose volume handles are EBS volume IDs.
pub const CSI_DRIVER: &str = "ebs.csi.aws.com";

/// `aws:///<availability-zone>/<instance-id>`: what the AWS cloud-controller-manager writes into
/// `Node.spec.providerID` (and CAPA into its machines), so CAPI core can link a Node to its Machine by equality.
/// `zone` is the instance's placement; without one (an endpoint that does not report it) the region stands in,
/// which is the form MCM's own AWS provider wrote.
pub fn provider_id(zone: Option<&str>, region: &str, instance_id: &str) -> String {
    let at = zone.filter(|z| !z.is_empty()).unwrap_or(region);
    format!("aws:///{at}/{instance_id}")
}

/// The availability zone an instance runs in (its placement), if EC2 reported it.
pub fn zone_of(instance: &Instance) -> Option<&str> {
    instance.placement().and_then(|p| p.availability_zone()).filter(|z| !z.is_empty())
}

/// The instance ID in a providerID: the zone form `aws:///<zone>/<id>` or MCM's region form
/// `aws:///<region>/<id>` (both name the same instance).
pub fn instance_id(provider_id: &str) -> Result<String, DriverError> {
    crate::providers::identity::aws_instance_id(provider_id).map(str::to_string).ok_or_else(|| {
        DriverError::new(
            Code::InvalidArgument,
            format!("providerID {provider_id:?} is not of the form aws:///<zone or region>/<instance-id>"),
        )
    })
}

/// The RunInstances ClientToken for a machine: stable across retries of one machine's create (a second guard
/// after the tag lookup), at most 64 ASCII characters as EC2 requires. `attempt` > 0 gives a fresh token when the
/// stable one is spent (it belonged to an instance that is gone).
pub fn client_token(namespace: &str, machine: &str, attempt: u64) -> String {
    let mut hash = Sha256::new();
    hash.update(namespace.as_bytes());
    hash.update([0]);
    hash.update(machine.as_bytes());
    if attempt > 0 {
        hash.update(attempt.to_be_bytes());
    }
    let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("mcm-{}", &hex[..60])
}

/// `Name=<machine>` plus the providerSpec's tags, for the instance, its volumes and its network interfaces.
pub fn tag_specifications(spec: &ProviderSpec, machine: &str) -> Vec<TagSpecification> {
    let tags: Vec<Tag> = std::iter::once(Tag::builder().key(NAME_TAG).value(machine).build())
        .chain(spec.tags.iter().map(|(k, v)| Tag::builder().key(k).value(v).build()))
        .collect();
    [ResourceType::Instance, ResourceType::Volume, ResourceType::NetworkInterface]
        .into_iter()
        .map(|kind| TagSpecification::builder().resource_type(kind).set_tags(Some(tags.clone())).build())
        .collect()
}

/// The block device mappings; the root disk takes the AMI's root device name. Empty: the AMI's own mapping.
pub fn block_device_mappings(
    spec: &ProviderSpec,
    root_device_name: Option<&str>,
) -> Result<Vec<BlockDeviceMapping>, DriverError> {
    let count = spec.block_devices.len();
    spec.block_devices
        .iter()
        .map(|disk| {
            let device_name = if disk.is_root(count) {
                root_device_name.ok_or_else(|| {
                    DriverError::new(
                        Code::InvalidArgument,
                        format!(
                            "AMI {} has no root device name to map providerSpec.blockDevices' root disk to",
                            spec.ami
                        ),
                    )
                })?
            } else {
                disk.device_name.as_str()
            };
            let ebs = &disk.ebs;
            let volume = EbsBlockDevice::builder()
                .volume_size(ebs.volume_size)
                .volume_type(VolumeType::from(ebs.volume_type.as_str()))
                .encrypted(ebs.encrypted)
                .delete_on_termination(ebs.delete_on_termination.unwrap_or(true))
                .set_iops(ebs.iops)
                .set_throughput(ebs.throughput)
                .set_kms_key_id(ebs.kms_key_id.clone())
                .set_snapshot_id(ebs.snapshot_id.clone())
                .build();
            Ok(BlockDeviceMapping::builder()
                .device_name(device_name)
                .ebs(volume)
                .set_no_device(disk.no_device.clone())
                .set_virtual_name(disk.virtual_name.clone())
                .build())
        })
        .collect()
}

/// The network interfaces; device indexes default to the position, deleteOnTermination to true.
pub fn network_interfaces(spec: &ProviderSpec) -> Vec<InstanceNetworkInterfaceSpecification> {
    spec.network_interfaces
        .iter()
        .zip(0i32..)
        .map(|(nic, index)| {
            let primary_ipv6 = nic.ipv6_address_count.map(|_| nic.primary_ipv6.unwrap_or(true));
            InstanceNetworkInterfaceSpecification::builder()
                .subnet_id(&nic.subnet_id)
                .set_groups(Some(nic.security_group_ids.clone()))
                .set_associate_public_ip_address(nic.associate_public_ip_address)
                .delete_on_termination(nic.delete_on_termination.unwrap_or(true))
                .set_description(nic.description.clone())
                .device_index(nic.device_index.unwrap_or(index))
                .set_network_card_index(nic.network_card_index)
                .set_interface_type(nic.interface_type.clone())
                .set_ipv6_address_count(nic.ipv6_address_count)
                .set_primary_ipv6(primary_ipv6)
                .build()
        })
        .collect()
}

/// The instance profile, by name or ARN.
pub fn iam_profile(spec: &ProviderSpec) -> IamInstanceProfileSpecification {
    match &spec.iam {
        IamProfile::Name(name) => IamInstanceProfileSpecification::builder().name(name).build(),
        IamProfile::Arn(arn) => IamInstanceProfileSpecification::builder().arn(arn).build(),
    }
}

/// `instanceMetadataOptions`.
pub fn metadata_options(spec: &ProviderSpec) -> Option<InstanceMetadataOptionsRequest> {
    let o = spec.metadata_options.as_ref()?;
    Some(
        InstanceMetadataOptionsRequest::builder()
            .set_http_endpoint(o.http_endpoint.as_deref().map(InstanceMetadataEndpointState::from))
            .set_http_put_response_hop_limit(o.http_put_response_hop_limit)
            .set_http_tokens(o.http_tokens.as_deref().map(HttpTokensState::from))
            .set_http_protocol_ipv6(o.http_protocol_ipv6.as_deref().map(InstanceMetadataProtocolState::from))
            .build(),
    )
}

/// `instanceMarketOptions`, or the deprecated `spotPrice` (a one-time spot request; `""`: no maximum price).
pub fn market_options(spec: &ProviderSpec) -> Option<InstanceMarketOptionsRequest> {
    if let Some(market) = &spec.market_type {
        return Some(InstanceMarketOptionsRequest::builder().market_type(MarketType::from(market.as_str())).build());
    }
    let price = spec.spot_price.as_ref()?;
    let spot = SpotMarketOptions::builder()
        .spot_instance_type(SpotInstanceType::OneTime)
        .set_max_price(Some(price.clone()).filter(|p| !p.is_empty()))
        .build();
    Some(InstanceMarketOptionsRequest::builder().market_type(MarketType::Spot).spot_options(spot).build())
}

/// `placement`.
pub fn placement(spec: &ProviderSpec) -> Option<Placement> {
    spec.placement.as_ref().map(ec2_placement)
}

/// The placement of a machine: the providerSpec's `placement`, else the node template's
/// `machine.sapcloud.io/awsPlacement` annotation (as Gardener's AWS provider chooses).
pub fn placement_of(spec: &ProviderSpec, annotated: Option<&spec::Placement>) -> Option<Placement> {
    placement(spec).or_else(|| annotated.map(ec2_placement))
}

fn ec2_placement(p: &spec::Placement) -> Placement {
    Placement::builder()
        .set_group_id(p.group_id.clone())
        .set_tenancy(p.tenancy.as_deref().map(Tenancy::from))
        .set_host_id(p.host_id.clone())
        .set_partition_number(p.partition_number)
        .set_affinity(p.affinity.clone())
        .set_availability_zone(p.availability_zone.clone())
        .set_group_name(p.group_name.clone())
        .set_host_resource_group_arn(p.host_resource_group_arn.clone())
        .build()
}

/// `capacityReservation`: a preference, or a target reservation (ID or resource group).
pub fn capacity_reservation(spec: &ProviderSpec) -> Option<CapacityReservationSpecification> {
    let r = spec.capacity_reservation.as_ref()?;
    let builder = CapacityReservationSpecification::builder()
        .set_capacity_reservation_preference(r.preference.as_deref().map(CapacityReservationPreference::from));
    let builder = if r.id.is_some() || r.resource_group_arn.is_some() {
        builder.capacity_reservation_target(
            CapacityReservationTarget::builder()
                .set_capacity_reservation_id(r.id.clone())
                .set_capacity_reservation_resource_group_arn(r.resource_group_arn.clone())
                .build(),
        )
    } else {
        builder
    };
    Some(builder.build())
}

/// `cpuOptions`.
pub fn cpu_options(spec: &ProviderSpec) -> Option<CpuOptionsRequest> {
    let c = spec.cpu_options.as_ref()?;
    Some(
        CpuOptionsRequest::builder()
            .set_core_count(c.core_count)
            .set_threads_per_core(c.threads_per_core)
            .set_amd_sev_snp(c.amd_sev_snp.as_deref().map(Into::into))
            .build(),
    )
}

/// A filter `name` in `values`.
pub fn filter(name: &str, values: &[&str]) -> Filter {
    Filter::builder().name(name).set_values(Some(values.iter().map(|v| v.to_string()).collect())).build()
}

/// The server-side filters selecting a cluster's live instances: the cluster tag key and the live states; with
/// `machine`, also its `Name` tag. Only one `tag-key` filter: EC2 ANDs filters of different names, but moto keeps
/// only the last of several with the same name, so the role key is checked on the answer ([`owned`]).
pub fn owner_filters(spec: &ProviderSpec, machine: Option<&str>) -> Vec<Filter> {
    let mut filters = vec![filter("tag-key", &[&spec.cluster_tag]), filter("instance-state-name", &LIVE_STATES)];
    if let Some(name) = machine {
        filters.push(filter(&format!("tag:{NAME_TAG}"), &[name]));
    }
    filters
}

/// The value of tag `key` on `instance`.
pub fn tag<'a>(instance: &'a Instance, key: &str) -> Option<&'a str> {
    instance.tags().iter().find(|t| t.key() == Some(key)).and_then(|t| t.value())
}

/// Whether `instance` carries the class's cluster and role tag keys (what makes it ours), and, with `machine`,
/// that machine's `Name`.
pub fn owned(instance: &Instance, spec: &ProviderSpec, machine: Option<&str>) -> bool {
    let keys = |key: &str| instance.tags().iter().any(|t| t.key() == Some(key));
    keys(&spec.cluster_tag) && keys(&spec.role_tag) && machine.is_none_or(|m| tag(instance, NAME_TAG) == Some(m))
}

/// Whether the instance still exists (not shutting down or terminated).
pub fn is_live(instance: &Instance) -> bool {
    instance.state().and_then(|s| s.name()).is_some_and(|s| LIVE_STATES.contains(&s.as_str()))
}

/// Whether the instance is terminated or on its way there.
pub fn is_gone(instance: &Instance) -> bool {
    matches!(
        instance.state().and_then(|s| s.name()),
        Some(InstanceStateName::ShuttingDown | InstanceStateName::Terminated)
    )
}

/// The Node addresses of an instance: private IP and DNS name, public ones when it has them.
pub fn addresses(instance: &Instance) -> Vec<NodeAddress> {
    let mut out = Vec::new();
    let mut add = |kind: &str, value: Option<&str>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            out.push(NodeAddress { type_: kind.to_string(), address: v.to_string() });
        }
    };
    add("InternalIP", instance.private_ip_address());
    add("ExternalIP", instance.public_ip_address());
    add("InternalDNS", instance.private_dns_name());
    add("Hostname", instance.private_dns_name());
    add("ExternalDNS", instance.public_dns_name());
    out
}

/// EBS volume IDs of in-tree `awsElasticBlockStore` volumes (`aws://<zone>/vol-...`, `aws:///vol-...` or
/// `vol-...`) and of CSI volumes of driver `ebs.csi.aws.com`; other volumes are skipped.
pub fn volume_ids(specs: &[PersistentVolumeSpec]) -> Vec<String> {
    specs
        .iter()
        .filter_map(|pv| {
            if let Some(ebs) = &pv.aws_elastic_block_store {
                let id = ebs.volume_id.rsplit('/').next().unwrap_or_default();
                return id.starts_with("vol-").then(|| id.to_string());
            }
            pv.csi
                .as_ref()
                .filter(|csi| csi.driver == CSI_DRIVER && !csi.volume_handle.is_empty())
                .map(|csi| csi.volume_handle.clone())
        })
        .collect()
}

/// The source/destination check setting, for `initialize_machine` and status.
pub fn source_dest_check_off() -> AttributeBooleanValue {
    AttributeBooleanValue::builder().value(false).build()
}

#[cfg(test)]
mod tests {
    use aws_sdk_ec2::types::{InstanceState, Tag};
    use k8s_openapi::api::core::v1::{
        AWSElasticBlockStoreVolumeSource, CSIPersistentVolumeSource, GCEPersistentDiskVolumeSource,
    };
    use serde_json::json;

    use super::*;
    use crate::providers::aws::spec::tests::{full, minimal};

    fn spec(v: serde_json::Value) -> ProviderSpec {
        ProviderSpec::parse(&v).unwrap()
    }

    #[test]
    fn provider_ids_round_trip() {
        // name, zone of the placement, the providerID
        let cases = [
            ("the zone form, as the cloud-controller writes it", Some("eu-west-1a"), "aws:///eu-west-1a/i-1"),
            ("no placement: the region form", None, "aws:///eu-west-1/i-1"),
            ("an empty zone: the region form", Some(""), "aws:///eu-west-1/i-1"),
        ];
        for (name, zone, want) in cases {
            let id = provider_id(zone, "eu-west-1", "i-1");
            assert_eq!(id, want, "{name}");
            assert_eq!(instance_id(&id).unwrap(), "i-1", "{name}");
        }
        assert_eq!(instance_id("aws:///eu-west-1/i-0123456789abcdef0").unwrap(), "i-0123456789abcdef0");
        let placed = Instance::builder()
            .placement(Placement::builder().availability_zone("eu-west-1c").build())
            .instance_id("i-2")
            .build();
        assert_eq!(zone_of(&placed), Some("eu-west-1c"));
        assert_eq!(zone_of(&Instance::builder().instance_id("i-2").build()), None);
        for bad in ["", "gce:///x/i-1", "aws:///eu-west-1/", "aws:///eu-west-1/vol-1", "aws:///r/i-1?x", "i-1"] {
            let err = instance_id(bad).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn client_tokens_are_stable_short_and_distinct() {
        let a = client_token("default", "worker-1", 0);
        assert_eq!(a, client_token("default", "worker-1", 0));
        assert_eq!(a.len(), 64);
        assert!(a.is_ascii());
        assert_ne!(a, client_token("other", "worker-1", 0));
        assert_ne!(a, client_token("default", "worker-2", 0));
        assert_ne!(a, client_token("default", "worker-1", 1));
        assert_ne!(client_token("a", "bc", 0), client_token("ab", "c", 0));
        assert_eq!(client_token("default", &"x".repeat(300), 0).len(), 64);
    }

    #[test]
    fn tags_go_on_instance_volumes_and_nics_with_the_machine_name() {
        let specs = tag_specifications(&spec(full()), "worker-1");
        let kinds: Vec<_> = specs.iter().map(|s| s.resource_type().unwrap().as_str()).collect();
        assert_eq!(kinds, ["instance", "volume", "network-interface"]);
        for s in &specs {
            let tags: Vec<(&str, &str)> = s.tags().iter().map(|t| (t.key().unwrap(), t.value().unwrap())).collect();
            assert_eq!(
                tags,
                [
                    ("Name", "worker-1"),
                    ("kubernetes.io/cluster/shoot--dev", "1"),
                    ("kubernetes.io/role/node", "1"),
                    ("tag1", "tag1-value"),
                ]
            );
        }
    }

    #[test]
    fn block_devices_map_to_ebs() {
        let s = spec(full());
        let mappings = block_device_mappings(&s, Some("/dev/xvda")).unwrap();
        assert_eq!(mappings.len(), 2);
        let root = &mappings[0];
        assert_eq!(root.device_name(), Some("/dev/xvda"));
        let ebs = root.ebs().unwrap();
        assert_eq!(
            (ebs.volume_size(), ebs.volume_type().map(|t| t.as_str()), ebs.iops(), ebs.throughput()),
            (Some(50), Some("gp3"), Some(3000), Some(125))
        );
        assert_eq!(
            (ebs.encrypted(), ebs.delete_on_termination(), ebs.kms_key_id()),
            (Some(true), Some(true), Some("arn:aws:kms:k"))
        );
        let data = mappings[1].ebs().unwrap();
        assert_eq!(mappings[1].device_name(), Some("/dev/sdb"));
        assert_eq!(
            (data.delete_on_termination(), data.snapshot_id(), data.encrypted()),
            (Some(false), Some("snap-1"), Some(false))
        );
        let err = block_device_mappings(&s, None).unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
        assert!(block_device_mappings(&spec(minimal()), None).unwrap().is_empty());
    }

    #[test]
    fn network_interfaces_defaults() {
        let mut v = minimal();
        v["networkInterfaces"] = json!([
            {"subnetID": "subnet-1", "securityGroupIDs": ["sg-1", "sg-2"], "ipv6AddressCount": 1},
            {"subnetID": "subnet-2", "securityGroupIDs": ["sg-3"], "deleteOnTermination": false, "deviceIndex": 5}
        ]);
        let nics = network_interfaces(&spec(v));
        assert_eq!(nics[0].subnet_id(), Some("subnet-1"));
        assert_eq!(nics[0].groups(), ["sg-1", "sg-2"]);
        assert_eq!((nics[0].device_index(), nics[0].delete_on_termination()), (Some(0), Some(true)));
        assert_eq!((nics[0].ipv6_address_count(), nics[0].primary_ipv6()), (Some(1), Some(true)));
        assert_eq!((nics[1].device_index(), nics[1].delete_on_termination()), (Some(5), Some(false)));
        assert_eq!(nics[1].primary_ipv6(), None);
    }

    #[test]
    fn optional_request_parts() {
        let f = spec(full());
        assert_eq!(iam_profile(&f).name(), Some("iam-name"));
        assert_eq!(iam_profile(&spec(minimal())).arn(), Some("arn:aws:iam::1:instance-profile/x"));
        let md = metadata_options(&f).unwrap();
        assert_eq!(md.http_tokens(), Some(&HttpTokensState::Required));
        assert_eq!(md.http_put_response_hop_limit(), Some(2));
        assert_eq!(market_options(&f).unwrap().market_type(), Some(&MarketType::Spot));
        let p = placement(&f).unwrap();
        assert_eq!((p.tenancy(), p.host_id(), p.affinity()), (Some(&Tenancy::Host), Some("h-1"), Some("host")));
        let cr = capacity_reservation(&f).unwrap();
        assert_eq!(cr.capacity_reservation_target().unwrap().capacity_reservation_id(), Some("cr-05c28b843c05acc11"));
        assert_eq!(cr.capacity_reservation_preference(), None);
        assert_eq!(cpu_options(&f).unwrap().core_count(), Some(2));
        let m = spec(minimal());
        assert!(metadata_options(&m).is_none() && market_options(&m).is_none() && placement(&m).is_none());

        // The node template's awsPlacement annotation stands in for a missing providerSpec placement only.
        let annotated = spec::Placement {
            availability_zone: Some("eu-west-1a".into()),
            tenancy: Some("host".into()),
            ..Default::default()
        };
        let p = placement_of(&m, Some(&annotated)).unwrap();
        assert_eq!((p.availability_zone(), p.tenancy()), (Some("eu-west-1a"), Some(&Tenancy::Host)));
        assert_eq!(placement_of(&f, Some(&annotated)).unwrap().host_id(), Some("h-1"), "the providerSpec wins");
        assert!(placement_of(&m, None).is_none());
        assert!(capacity_reservation(&m).is_none() && cpu_options(&m).is_none());

        // The deprecated spotPrice: "" means no maximum.
        let mut v = minimal();
        v["spotPrice"] = json!("");
        let spot = market_options(&spec(v.clone())).unwrap();
        assert_eq!(spot.spot_options().unwrap().max_price(), None);
        v["spotPrice"] = json!("0.05");
        let spot = market_options(&spec(v.clone())).unwrap();
        assert_eq!(spot.spot_options().unwrap().max_price(), Some("0.05"));
        v["capacityReservation"] = json!({"capacityReservationPreference": "open"});
        let cr = capacity_reservation(&spec(v)).unwrap();
        assert_eq!(cr.capacity_reservation_preference(), Some(&CapacityReservationPreference::Open));
        assert!(cr.capacity_reservation_target().is_none());
    }

    fn instance(tags: &[(&str, &str)], state: InstanceStateName) -> Instance {
        Instance::builder()
            .instance_id("i-1")
            .state(InstanceState::builder().name(state).build())
            .set_tags(Some(tags.iter().map(|(k, v)| Tag::builder().key(*k).value(*v).build()).collect()))
            .private_ip_address("10.0.0.5")
            .private_dns_name("ip-10-0-0-5.ec2.internal")
            .build()
    }

    #[test]
    fn ownership_needs_both_keys_and_the_name() {
        let s = spec(minimal());
        let mine = [("Name", "m1"), ("kubernetes.io/cluster/dev", ""), ("kubernetes.io/role/node", "")];
        let i = instance(&mine, InstanceStateName::Running);
        assert!(owned(&i, &s, None) && owned(&i, &s, Some("m1")) && !owned(&i, &s, Some("m2")));
        assert!(!owned(&instance(&mine[..2], InstanceStateName::Running), &s, None));
        assert!(!owned(
            &instance(&[("Name", "m1"), ("kubernetes.io/cluster/prod", "")], InstanceStateName::Running),
            &s,
            None
        ));
        assert!(is_live(&i) && !is_gone(&i));
        let gone = instance(&mine, InstanceStateName::ShuttingDown);
        assert!(!is_live(&gone) && is_gone(&gone));
        assert!(is_live(&instance(&mine, InstanceStateName::Stopped)));
        let filters = owner_filters(&s, Some("m1"));
        let names: Vec<_> = filters.iter().map(|f| f.name().unwrap()).collect();
        assert_eq!(names, ["tag-key", "instance-state-name", "tag:Name"]);
    }

    #[test]
    fn addresses_of_an_instance() {
        let i = instance(&[], InstanceStateName::Running);
        let shown: Vec<(String, String)> = addresses(&i).into_iter().map(|a| (a.type_, a.address)).collect();
        assert_eq!(
            shown,
            [
                ("InternalIP".to_string(), "10.0.0.5".to_string()),
                ("InternalDNS".to_string(), "ip-10-0-0-5.ec2.internal".to_string()),
                ("Hostname".to_string(), "ip-10-0-0-5.ec2.internal".to_string()),
            ]
        );
    }

    #[test]
    fn volume_ids_of_ebs_and_the_csi_driver() {
        let ebs = |id: &str| PersistentVolumeSpec {
            aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                volume_id: id.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let csi = |driver: &str, handle: &str| PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: driver.into(),
                volume_handle: handle.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let gce = PersistentVolumeSpec {
            gce_persistent_disk: Some(GCEPersistentDiskVolumeSource { pd_name: "d".into(), ..Default::default() }),
            ..Default::default()
        };
        let specs = [
            ebs("aws://eu-west-1a/vol-1"),
            ebs("aws:///vol-2"),
            ebs("vol-3"),
            ebs("aws://eu-west-1a/not-a-volume"),
            csi("ebs.csi.aws.com", "vol-4"),
            csi("other.csi", "vol-5"),
            csi("ebs.csi.aws.com", ""),
            gce,
        ];
        assert_eq!(volume_ids(&specs), ["vol-1", "vol-2", "vol-3", "vol-4"]);
    }
}
