//! Pure translations between our types and ARM's: resource names and IDs, providerIDs, the NIC and VM bodies (in
//! ARM's JSON shape), ownership by tags, machine names from listed resources, and volume IDs. No I/O here.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_openapi::api::core::v1::PersistentVolumeSpec;
use serde_json::{Map, Value, json};

use super::spec::{Image, Placement, ProviderSpec};
use crate::providers::{Code, DriverError};

/// Suffix of a machine's NIC name (`<vm>-nic`), as Gardener names it.
pub const NIC_SUFFIX: &str = "-nic";
/// Suffix of a machine's OS disk name (`<vm>-os-disk`).
pub const OS_DISK_SUFFIX: &str = "-os-disk";
/// Suffix of a machine's data disk names (`<vm>[-<name>]-<lun>-data-disk`).
pub const DATA_DISK_SUFFIX: &str = "-data-disk";
/// The CSI driver whose volume handles are Azure disk IDs.
pub const CSI_DRIVER: &str = "disk.csi.azure.com";

/// The VM's name for a machine: the machine name in lower case (Azure names are case-insensitive; Gardener
/// lower-cases too).
pub fn vm_name(machine: &str) -> String {
    machine.to_ascii_lowercase()
}

/// `<vm>-nic`.
pub fn nic_name(vm: &str) -> String {
    format!("{vm}{NIC_SUFFIX}")
}

/// `<vm>-os-disk`.
pub fn os_disk_name(vm: &str) -> String {
    format!("{vm}{OS_DISK_SUFFIX}")
}

/// `<vm>-<name>-<lun>-data-disk`, or `<vm>-<lun>-data-disk` without a name.
pub fn data_disk_name(vm: &str, name: Option<&str>, lun: i32) -> String {
    match name {
        Some(name) => format!("{vm}-{name}-{lun}{DATA_DISK_SUFFIX}"),
        None => format!("{vm}-{lun}{DATA_DISK_SUFFIX}"),
    }
}

/// Every disk name a machine of `spec` has: the OS disk, then the data disks.
pub fn disk_names(spec: &ProviderSpec, vm: &str) -> Vec<String> {
    std::iter::once(os_disk_name(vm))
        .chain(spec.data_disks.iter().map(|d| data_disk_name(vm, d.name.as_deref(), d.lun)))
        .collect()
}

/// `/subscriptions/<sub>/resourceGroups/<rg>/providers/<provider>/<kind>/<name>`.
pub fn resource_id(subscription: &str, resource_group: &str, provider_kind: &str, name: &str) -> String {
    format!("/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/{provider_kind}/{name}")
}

/// The VM's resource ID.
pub fn vm_id(subscription: &str, resource_group: &str, vm: &str) -> String {
    resource_id(subscription, resource_group, "Microsoft.Compute/virtualMachines", vm)
}

/// The NIC's resource ID.
pub fn nic_id(subscription: &str, resource_group: &str, nic: &str) -> String {
    resource_id(subscription, resource_group, "Microsoft.Network/networkInterfaces", nic)
}

/// The subnet's resource ID (in the vnet's resource group).
pub fn subnet_id(subscription: &str, spec: &ProviderSpec) -> String {
    format!(
        "{}/subnets/{}",
        resource_id(subscription, &spec.vnet_resource_group, "Microsoft.Network/virtualNetworks", &spec.vnet_name),
        spec.subnet_name
    )
}

/// `azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachines/<vm>`: the form
/// Azure's cloud-controller-manager writes into `Node.spec.providerID`.
pub fn provider_id(subscription: &str, resource_group: &str, vm: &str) -> String {
    format!("azure://{}", vm_id(subscription, resource_group, vm))
}

/// What a providerID names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedProviderId {
    /// The resource group, when the providerID has one (the cloud-controller's form).
    pub resource_group: Option<String>,
    /// The VM's name.
    pub vm: String,
}

/// The VM a providerID names: the cloud-controller's form (`azure:///subscriptions/.../virtualMachines/<vm>`) or
/// Gardener's older `azure:///<location>/<vm>`.
pub fn parse_provider_id(provider_id: &str) -> Result<ParsedProviderId, DriverError> {
    let bad = || {
        DriverError::new(
            Code::InvalidArgument,
            format!(
                "providerID {provider_id:?} is not of the form \
                 azure:///subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.Compute/virtualMachines/<name>"
            ),
        )
    };
    let rest = provider_id.strip_prefix("azure://").ok_or_else(bad)?;
    let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
    let valid = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.()".contains(c));
    match parts.as_slice() {
        [s, _, g, rg, p, ns, kind, vm]
            if s.eq_ignore_ascii_case("subscriptions")
                && g.eq_ignore_ascii_case("resourceGroups")
                && p.eq_ignore_ascii_case("providers")
                && ns.eq_ignore_ascii_case("Microsoft.Compute")
                && kind.eq_ignore_ascii_case("virtualMachines")
                && valid(vm)
                && valid(rg) =>
        {
            Ok(ParsedProviderId { resource_group: Some(rg.to_string()), vm: vm.to_ascii_lowercase() })
        }
        [location, vm] if valid(location) && valid(vm) => {
            Ok(ParsedProviderId { resource_group: None, vm: vm.to_ascii_lowercase() })
        }
        _ => Err(bad()),
    }
}

/// Whether a resource's tags carry the class's cluster and role keys (values are free).
pub fn owned(tags: &BTreeMap<String, String>, spec: &ProviderSpec) -> bool {
    tags.contains_key(&spec.cluster_tag) && tags.contains_key(&spec.role_tag)
}

/// The NICs and disks a VM names in its network and storage profiles (by resource name).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attached {
    /// NIC names.
    pub nics: Vec<String>,
    /// OS and data disk names.
    pub disks: Vec<String>,
}

/// What a VM's JSON (as ARM answers a GET) says is attached to it.
pub fn attached(vm: &Value) -> Attached {
    let props = &vm["properties"];
    let last_segment = |id: &Value| id.as_str().and_then(|id| id.rsplit('/').next()).map(str::to_string);
    let nics = props["networkProfile"]["networkInterfaces"]
        .as_array()
        .map(|list| list.iter().filter_map(|nic| last_segment(&nic["id"])).collect())
        .unwrap_or_default();
    let disk_name =
        |disk: &Value| disk["name"].as_str().map(str::to_string).or_else(|| last_segment(&disk["managedDisk"]["id"]));
    let storage = &props["storageProfile"];
    let disks = std::iter::once(&storage["osDisk"])
        .filter(|d| d.is_object())
        .chain(storage["dataDisks"].as_array().into_iter().flatten())
        .filter_map(disk_name)
        .filter(|n| !n.is_empty())
        .collect();
    Attached { nics, disks }
}

/// Whether a NIC or disk named after a machine (and not found attached to its VM) may be deleted as that machine's
/// leftover: it carries the class's cluster and role keys, or, for a disk, it carries no cluster key at all and is
/// attached to nothing. Azure does not copy a VM's tags onto the disks it creates with the VM, so an untagged,
/// unattached `<vm>-os-disk` in the class's resource group is the machine's (as Gardener's driver assumes of every
/// disk of that name); a disk tagged for another cluster, or in use, is never touched.
pub fn leftover_is_ours(
    disk: bool,
    tags: &BTreeMap<String, String>,
    managed_by: Option<&str>,
    spec: &ProviderSpec,
) -> bool {
    owned(tags, spec)
        || (disk && managed_by.is_none() && !tags.keys().any(|k| k.starts_with(super::spec::CLUSTER_TAG_PREFIX)))
}

/// The NIC's PUT body: in the class's location, tagged, one dynamic IP configuration in the subnet, IP forwarding
/// on (pod traffic), accelerated networking as the class says.
pub fn nic_body(spec: &ProviderSpec, subscription: &str, nic: &str) -> Value {
    let mut properties = json!({
        "enableIPForwarding": true,
        "nicType": "Standard",
        "ipConfigurations": [{
            "name": nic,
            "properties": {
                "privateIPAllocationMethod": "Dynamic",
                "subnet": {"id": subnet_id(subscription, spec)},
            },
        }],
    });
    if let Some(accelerated) = spec.accelerated_networking {
        properties["enableAcceleratedNetworking"] = json!(accelerated);
    }
    json!({"location": spec.location, "tags": spec.tags, "properties": properties})
}

fn image_reference(image: &Image) -> Value {
    match image {
        Image::Urn { publisher, offer, sku, version } => {
            json!({"publisher": publisher, "offer": offer, "sku": sku, "version": version})
        }
        Image::Id(id) => json!({"id": id}),
        Image::CommunityGallery(id) => json!({"communityGalleryImageId": id}),
        Image::SharedGallery(id) => json!({"sharedGalleryImageId": id}),
    }
}

/// The VM's PUT body. `custom_data` is the user data in base64; `ssh_key` the public key to install (the class's,
/// or a dummy one). Every disk and the NIC are deleted with the VM (`deleteOption: Delete`), so a deleted VM leaves
/// nothing behind; the driver still deletes them by name afterwards for VMs made otherwise.
pub fn vm_body(spec: &ProviderSpec, subscription: &str, vm: &str, custom_data: &str, ssh_key: &str) -> Value {
    let mut os_disk = json!({
        "name": os_disk_name(vm),
        "createOption": spec.os_disk.create_option,
        "diskSizeGB": spec.os_disk.size_gb,
        "deleteOption": "Delete",
    });
    if let Some(caching) = &spec.os_disk.caching {
        os_disk["caching"] = json!(caching);
    }
    let mut managed = Map::new();
    if let Some(t) = &spec.os_disk.storage_account_type {
        managed.insert("storageAccountType".into(), json!(t));
    }
    if let Some(e) = &spec.os_disk.security_encryption_type {
        managed.insert("securityProfile".into(), json!({"securityEncryptionType": e}));
    }
    if !managed.is_empty() {
        os_disk["managedDisk"] = Value::Object(managed);
    }
    let data_disks: Vec<Value> = spec
        .data_disks
        .iter()
        .map(|d| {
            json!({
                "name": data_disk_name(vm, d.name.as_deref(), d.lun),
                "lun": d.lun,
                "caching": d.caching.as_deref().unwrap_or("None"),
                "createOption": "Empty",
                "diskSizeGB": d.size_gb,
                "deleteOption": "Delete",
                "managedDisk": {"storageAccountType": d.storage_account_type},
            })
        })
        .collect();
    let mut storage = json!({"imageReference": image_reference(&spec.image), "osDisk": os_disk});
    if !data_disks.is_empty() {
        storage["dataDisks"] = json!(data_disks);
    }
    if let Some(controller) = &spec.disk_controller_type {
        storage["diskControllerType"] = json!(controller);
    }
    let key_path =
        spec.ssh_key.path.clone().unwrap_or_else(|| format!("/home/{}/.ssh/authorized_keys", spec.admin_username));
    let mut properties = json!({
        "hardwareProfile": {"vmSize": spec.vm_size},
        "storageProfile": storage,
        "osProfile": {
            "computerName": vm,
            "adminUsername": spec.admin_username,
            "customData": custom_data,
            "linuxConfiguration": {
                "disablePasswordAuthentication": spec.disable_password_authentication,
                "ssh": {"publicKeys": [{"path": key_path, "keyData": ssh_key}]},
            },
        },
        "networkProfile": {"networkInterfaces": [{
            "id": nic_id(subscription, &spec.resource_group, &nic_name(vm)),
            "properties": {"primary": true, "deleteOption": "Delete"},
        }]},
    });
    match &spec.placement {
        Placement::AvailabilitySet(id) => properties["availabilitySet"] = json!({"id": id}),
        Placement::ScaleSet(id) => properties["virtualMachineScaleSet"] = json!({"id": id}),
        Placement::Zone(_) => {}
    }
    if let Some((enabled, uri)) = &spec.boot_diagnostics {
        let mut boot = json!({"enabled": enabled});
        if let Some(uri) = uri {
            boot["storageUri"] = json!(uri);
        }
        properties["diagnosticsProfile"] = json!({"bootDiagnostics": boot});
    }
    if let Some(security) = &spec.security_profile {
        let mut profile = Map::new();
        if let Some(t) = &security.security_type {
            profile.insert("securityType".into(), json!(t));
        }
        let mut uefi = Map::new();
        if let Some(v) = security.secure_boot_enabled {
            uefi.insert("secureBootEnabled".into(), json!(v));
        }
        if let Some(v) = security.vtpm_enabled {
            uefi.insert("vTpmEnabled".into(), json!(v));
        }
        if !uefi.is_empty() {
            profile.insert("uefiSettings".into(), Value::Object(uefi));
        }
        properties["securityProfile"] = Value::Object(profile);
    }
    if let Some(group) = &spec.capacity_reservation_group_id {
        properties["capacityReservation"] = json!({"capacityReservationGroup": {"id": group}});
    }
    let mut body = json!({"location": spec.location, "tags": spec.tags, "properties": properties});
    if let Placement::Zone(zone) = spec.placement {
        body["zones"] = json!([zone.to_string()]);
    }
    if let Some(identity) = &spec.identity_id {
        body["identity"] = json!({"type": "UserAssigned", "userAssignedIdentities": {identity.as_str(): {}}});
    }
    body
}

/// An `ssh-rsa` public key with a random 2048-bit modulus: Azure wants a key on Linux VMs, and a class without
/// one gets a key whose private half nobody has (Gardener generates and discards a key pair for the same reason).
pub fn dummy_ssh_key(random: &[u8; 256]) -> String {
    fn put(out: &mut Vec<u8>, data: &[u8]) {
        out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(data);
    }
    let mut modulus = random.to_vec();
    // Top bit set (a full 2048 bits) and odd; a leading zero keeps the mpint positive.
    modulus[0] |= 0x80;
    modulus[255] |= 0x01;
    modulus.insert(0, 0);
    let mut blob = Vec::new();
    put(&mut blob, b"ssh-rsa");
    put(&mut blob, &[0x01, 0x00, 0x01]);
    put(&mut blob, &modulus);
    format!("ssh-rsa {} mcm-generated-no-private-key", BASE64.encode(blob))
}

/// The machine (VM) names behind listed resources of a class: VMs by name, NICs by `<vm>-nic`, disks by
/// `<vm>-os-disk` or one of the class's data disk suffixes. A machine whose VM is gone but whose NIC or disks remain
/// is listed too, so orphan collection deletes the leftovers.
pub fn machine_names(spec: &ProviderSpec, vms: &[String], nics: &[String], disks: &[String]) -> BTreeSet<String> {
    let data_suffixes: Vec<String> =
        spec.data_disks.iter().map(|d| data_disk_name("", d.name.as_deref(), d.lun)).collect();
    let mut names: BTreeSet<String> = vms.iter().map(|v| v.to_ascii_lowercase()).collect();
    names.extend(nics.iter().filter_map(|n| n.strip_suffix(NIC_SUFFIX)).map(str::to_ascii_lowercase));
    for disk in disks {
        let vm = disk
            .strip_suffix(OS_DISK_SUFFIX)
            .or_else(|| data_suffixes.iter().find_map(|suffix| disk.strip_suffix(suffix.as_str())));
        names.extend(vm.map(str::to_ascii_lowercase));
    }
    names.retain(|n| !n.is_empty());
    names
}

/// Azure disk names or IDs behind persistent volumes: in-tree `azureDisk` names and CSI volume handles of
/// [`CSI_DRIVER`]; others are skipped.
pub fn volume_ids(specs: &[PersistentVolumeSpec]) -> Vec<String> {
    specs
        .iter()
        .filter_map(|pv| {
            if let Some(disk) = &pv.azure_disk {
                return Some(disk.disk_name.clone());
            }
            pv.csi
                .as_ref()
                .filter(|c| c.driver == CSI_DRIVER && !c.volume_handle.is_empty())
                .map(|c| c.volume_handle.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{AzureDiskVolumeSource, CSIPersistentVolumeSource};

    use super::*;
    use crate::providers::azure::spec::tests::{full, minimal, with};

    #[test]
    fn names_and_ids() {
        assert_eq!(vm_name("Worker-A"), "worker-a");
        assert_eq!(nic_name("m1"), "m1-nic");
        assert_eq!(os_disk_name("m1"), "m1-os-disk");
        assert_eq!(data_disk_name("m1", Some("etcd"), 0), "m1-etcd-0-data-disk");
        assert_eq!(data_disk_name("m1", None, 3), "m1-3-data-disk");
        let spec = ProviderSpec::parse(&full()).unwrap();
        assert_eq!(disk_names(&spec, "m1"), ["m1-os-disk", "m1-etcd-0-data-disk", "m1-1-data-disk"]);
        assert_eq!(
            subnet_id("sub", &spec),
            "/subscriptions/sub/resourceGroups/vnet-rg/providers/Microsoft.Network/virtualNetworks/shoot--dev/subnets/shoot--dev-nodes"
        );
        assert_eq!(
            provider_id("sub", "rg", "m1"),
            "azure:///subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/m1"
        );
    }

    #[test]
    fn provider_ids_parse_both_forms() {
        let cases = [
            (
                "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/m1",
                Some(ParsedProviderId { resource_group: Some("rg".into()), vm: "m1".into() }),
            ),
            (
                "azure:///subscriptions/s/resourcegroups/RG/providers/microsoft.compute/virtualmachines/M1",
                Some(ParsedProviderId { resource_group: Some("RG".into()), vm: "m1".into() }),
            ),
            ("azure:///westeurope/m1", Some(ParsedProviderId { resource_group: None, vm: "m1".into() })),
            ("aws:///us-east-1/i-1", None),
            ("azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/n", None),
            ("azure:///westeurope/", None),
            ("azure:///a/b/c", None),
        ];
        for (id, want) in cases {
            match (parse_provider_id(id), want) {
                (Ok(got), Some(want)) => assert_eq!(got, want, "{id}"),
                (Err(e), None) => assert_eq!(e.code, Code::InvalidArgument, "{id}"),
                (got, want) => panic!("{id}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn nic_body_has_arms_shape() {
        let spec = ProviderSpec::parse(&full()).unwrap();
        let body = nic_body(&spec, "sub", "m1-nic");
        assert_eq!(body["location"], "westeurope");
        assert_eq!(body["tags"]["kubernetes.io-cluster-shoot--dev"], "1");
        assert_eq!(body["properties"]["enableAcceleratedNetworking"], true);
        assert_eq!(body["properties"]["enableIPForwarding"], true);
        let ip = &body["properties"]["ipConfigurations"][0];
        assert_eq!(ip["name"], "m1-nic");
        assert_eq!(ip["properties"]["privateIPAllocationMethod"], "Dynamic");
        assert!(ip["properties"]["subnet"]["id"].as_str().unwrap().ends_with("/subnets/shoot--dev-nodes"));
        let minimal_body = nic_body(&ProviderSpec::parse(&minimal()).unwrap(), "sub", "n");
        assert!(minimal_body["properties"].get("enableAcceleratedNetworking").is_none());
        // The SDK model keeps every field (a misspelt one would be dropped silently).
        let model: azure_mgmt_network::models::NetworkInterface = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(serde_json::to_value(model).unwrap(), body);
    }

    #[test]
    fn vm_body_has_arms_shape() {
        let spec = ProviderSpec::parse(&full()).unwrap();
        let body = vm_body(&spec, "sub", "m1", "Y3VzdG9t", "ssh-rsa AAAA test");
        let p = &body["properties"];
        assert_eq!(body["zones"], json!(["2"]));
        assert_eq!(p["hardwareProfile"]["vmSize"], "Standard_DS2_v2");
        assert_eq!(
            p["storageProfile"]["imageReference"],
            json!({"publisher": "sap", "offer": "gardenlinux", "sku": "greatest", "version": "184.0.0"})
        );
        assert_eq!(p["storageProfile"]["osDisk"]["name"], "m1-os-disk");
        assert_eq!(p["storageProfile"]["osDisk"]["deleteOption"], "Delete");
        assert_eq!(p["storageProfile"]["osDisk"]["managedDisk"]["storageAccountType"], "Premium_LRS");
        assert_eq!(p["storageProfile"]["dataDisks"][0]["name"], "m1-etcd-0-data-disk");
        assert_eq!(p["storageProfile"]["dataDisks"][1]["caching"], "None");
        assert_eq!(p["storageProfile"]["diskControllerType"], "NVMe");
        assert_eq!(p["osProfile"]["customData"], "Y3VzdG9t");
        assert_eq!(p["osProfile"]["computerName"], "m1");
        assert_eq!(p["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"], "ssh-rsa AAAA test");
        assert_eq!(
            p["networkProfile"]["networkInterfaces"][0]["id"],
            "/subscriptions/sub/resourceGroups/shoot--dev--rg/providers/Microsoft.Network/networkInterfaces/m1-nic"
        );
        assert_eq!(p["diagnosticsProfile"]["bootDiagnostics"]["enabled"], true);
        assert_eq!(p["securityProfile"]["uefiSettings"]["vTpmEnabled"], true);
        assert_eq!(body["identity"]["type"], "UserAssigned");
        assert_eq!(body["tags"]["worker.gardener.cloud_pool"], "pool-a");
        // The driver PUTs this JSON itself: the SDK model would drop the identity's entries and add
        // "timeCreated": null.
        let model: azure_mgmt_compute::models::VirtualMachine = serde_json::from_value(body.clone()).unwrap();
        let through_model = serde_json::to_value(model).unwrap();
        assert_eq!(through_model["identity"]["userAssignedIdentities"], json!({}));
        assert!(through_model["properties"]["timeCreated"].is_null());

        let set =
            with(with(minimal(), "/properties/zone", None), "/properties/availabilitySet", Some(json!({"id": "as-1"})));
        let mut reserved = with(
            minimal(),
            "/properties/capacityReservation",
            Some(json!({"capacityReservationGroupID":
            "/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/capacityReservationGroups/g"})),
        );
        reserved["properties"]["storageProfile"]["imageReference"] =
            json!({"communityGalleryImageID": "/CommunityGalleries/c"});
        for v in [set, reserved] {
            let body = vm_body(&ProviderSpec::parse(&v).unwrap(), "sub", "m2", "x", "k");
            let model: azure_mgmt_compute::models::VirtualMachine = serde_json::from_value(body.clone()).unwrap();
            let mut through_model = serde_json::to_value(model).unwrap();
            through_model["properties"].as_object_mut().unwrap().remove("timeCreated");
            assert_eq!(through_model, body, "every other field is ARM's");
        }
        let body = vm_body(&ProviderSpec::parse(&minimal()).unwrap(), "sub", "m3", "x", "k");
        assert_eq!(
            body["properties"]["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["path"],
            "/home/core/.ssh/authorized_keys"
        );
    }

    #[test]
    fn dummy_keys_are_well_formed_and_differ() {
        let a = dummy_ssh_key(&[7u8; 256]);
        let b = dummy_ssh_key(&[9u8; 256]);
        assert_ne!(a, b);
        let blob = BASE64.decode(a.split(' ').nth(1).unwrap()).unwrap();
        assert_eq!(&blob[..11], b"\0\0\0\x07ssh-rsa");
        // type (4+7) + exponent (4+3) + modulus (4+257)
        assert_eq!(blob.len(), 11 + 7 + 261);
    }

    #[test]
    fn machine_names_come_from_vms_nics_and_disks() {
        let spec = ProviderSpec::parse(&full()).unwrap();
        let names = machine_names(
            &spec,
            &["m1".into()],
            &["m1-nic".into(), "m2-nic".into(), "stray".into()],
            &["m3-os-disk".into(), "m4-etcd-0-data-disk".into(), "m5-1-data-disk".into(), "pvc-123".into()],
        );
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["m1", "m2", "m3", "m4", "m5"]);
    }

    #[test]
    fn volume_ids_of_azure_disks() {
        let specs = vec![
            PersistentVolumeSpec {
                azure_disk: Some(AzureDiskVolumeSource { disk_name: "d1".into(), ..Default::default() }),
                ..Default::default()
            },
            PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver: CSI_DRIVER.into(),
                    volume_handle: "/sub/d2".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver: "ebs.csi.aws.com".into(),
                    volume_handle: "vol".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ];
        assert_eq!(volume_ids(&specs), ["d1", "/sub/d2"]);
    }

    #[test]
    fn attached_resources_come_from_the_vm_profiles() {
        let vm = json!({"properties": {
            "networkProfile": {"networkInterfaces": [
                {"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/m1-nic"}]},
            "storageProfile": {
                "osDisk": {"name": "m1-os-disk", "managedDisk": {"id": "/x/disks/m1-os-disk"}},
                "dataDisks": [{"managedDisk": {"id": "/subscriptions/s/providers/Microsoft.Compute/disks/d2"}}],
            },
        }});
        assert_eq!(
            attached(&vm),
            Attached { nics: vec!["m1-nic".into()], disks: vec!["m1-os-disk".into(), "d2".into()] }
        );
        assert_eq!(attached(&json!({"name": "m1"})), Attached::default());
    }

    #[test]
    fn leftovers_are_ours_by_tags_or_as_untagged_unattached_disks() {
        let spec = ProviderSpec::parse(&minimal()).unwrap();
        let tags = |pairs: &[&str]| pairs.iter().map(|k| (k.to_string(), "1".to_string())).collect();
        let ours = tags(&["kubernetes.io-cluster-dev", "kubernetes.io-role-node"]);
        let other = tags(&["kubernetes.io-cluster-other", "kubernetes.io-role-node"]);
        let none = BTreeMap::new();
        let cases = [
            ("tagged NIC", false, &ours, None, true),
            ("untagged NIC", false, &none, None, false),
            ("tagged disk in use", true, &ours, Some("/vm"), true),
            ("untagged free disk", true, &none, None, true),
            ("untagged disk in use", true, &none, Some("/vm"), false),
            ("other cluster's free disk", true, &other, None, false),
        ];
        for (name, disk, tags, managed_by, want) in cases {
            assert_eq!(leftover_is_ours(disk, tags, managed_by, &spec), want, "{name}");
        }
    }

    #[test]
    fn ownership_needs_both_keys() {
        let spec = ProviderSpec::parse(&minimal()).unwrap();
        let tags = |pairs: &[&str]| pairs.iter().map(|k| (k.to_string(), "1".to_string())).collect();
        assert!(owned(&tags(&["kubernetes.io-cluster-dev", "kubernetes.io-role-node"]), &spec));
        assert!(!owned(&tags(&["kubernetes.io-cluster-dev"]), &spec));
        assert!(!owned(&tags(&["kubernetes.io-cluster-other", "kubernetes.io-role-node"]), &spec));
    }
}
