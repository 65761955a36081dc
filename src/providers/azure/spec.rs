//! The Azure providerSpec, in the shape of Gardener's machine-controller-manager-provider-azure, parsed strictly:
//! unknown fields, wrong types and values Gardener refuses are `InvalidArgument` naming the field
//! (`providerSpec.properties.storageProfile.dataDisks[1].lun: ...`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::providers::fields::Obj;
use crate::providers::{DriverError, tags};

/// The top-level providerSpec fields, as Gardener's Azure provider names them.
pub const FIELDS: &[&str] =
    &["apiVersion", "location", "resourceGroup", "subnetInfo", "properties", "tags", "cloudConfiguration"];

/// Prefix of the cluster tag key. Azure tag keys cannot hold `/`, so Gardener's Azure classes spell the cluster
/// key `kubernetes.io-cluster-<cluster>` (not `kubernetes.io/cluster/<cluster>`).
pub const CLUSTER_TAG_PREFIX: &str = tags::AZURE_CLUSTER_PREFIX;
/// Prefix of the role tag key (`kubernetes.io-role-<role>`).
pub const ROLE_TAG_PREFIX: &str = tags::AZURE_ROLE_PREFIX;

/// Azure allows 50 tags per resource. The VM's name is the machine's name, so no tag carries it.
pub const MAX_TAGS: usize = 50;

/// Cloud names `cloudConfiguration.name` accepts.
pub const CLOUD_NAMES: &[&str] = &["AzurePublic", "AzureChina", "AzureGovernment"];

/// Disk caching modes.
pub const CACHING: &[&str] = &["None", "ReadOnly", "ReadWrite"];

/// Managed disk storage account types.
pub const STORAGE_ACCOUNT_TYPES: &[&str] = &[
    "Standard_LRS",
    "Premium_LRS",
    "StandardSSD_LRS",
    "UltraSSD_LRS",
    "Premium_ZRS",
    "StandardSSD_ZRS",
    "PremiumV2_LRS",
];

/// How the image is named: exactly one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Image {
    /// `urn`: `publisher:offer:sku:version` (a marketplace or platform image).
    Urn {
        /// The publisher.
        publisher: String,
        /// The offer.
        offer: String,
        /// The SKU.
        sku: String,
        /// The version (`latest` allowed).
        version: String,
    },
    /// `id`: a managed image or gallery image version resource ID.
    Id(String),
    /// `communityGalleryImageID`.
    CommunityGallery(String),
    /// `sharedGalleryImageID`.
    SharedGallery(String),
}

/// `storageProfile.osDisk`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OsDisk {
    /// `diskSizeGB` (> 0, required).
    pub size_gb: i32,
    /// `createOption` (required; `FromImage` in every Gardener class).
    pub create_option: String,
    /// `caching`.
    pub caching: Option<String>,
    /// `managedDisk.storageAccountType`.
    pub storage_account_type: Option<String>,
    /// `managedDisk.securityProfile.securityEncryptionType` (confidential VMs).
    pub security_encryption_type: Option<String>,
}

/// One entry of `storageProfile.dataDisks`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataDisk {
    /// `name`: part of the disk's name `<vm>-<name>-<lun>-data-disk` (or `<vm>-<lun>-data-disk` without it).
    pub name: Option<String>,
    /// `lun` (>= 0, unique).
    pub lun: i32,
    /// `caching` (default `None`).
    pub caching: Option<String>,
    /// `storageAccountType` (required).
    pub storage_account_type: String,
    /// `diskSizeGB` (> 0, required).
    pub size_gb: i32,
}

/// `osProfile.linuxConfiguration.ssh.publicKeys`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SshKey {
    /// `path` on the VM (default `/home/<adminUsername>/.ssh/authorized_keys`).
    pub path: Option<String>,
    /// `keyData`; empty: the driver puts a key nobody holds the private half of, as Gardener does.
    pub key_data: Option<String>,
}

/// `securityProfile`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecurityProfile {
    /// `securityType`: `TrustedLaunch` or `ConfidentialVM`.
    pub security_type: Option<String>,
    /// `uefiSettings.vtpmEnabled`.
    pub vtpm_enabled: Option<bool>,
    /// `uefiSettings.secureBootEnabled`.
    pub secure_boot_enabled: Option<bool>,
}

/// Where the VM is placed: exactly one, as Gardener requires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// `zone`: an availability zone number.
    Zone(i32),
    /// `availabilitySet.id` (or the deprecated `machineSet` of kind `availabilityset`).
    AvailabilitySet(String),
    /// `virtualMachineScaleSet.id`, a Flexible scale set (or the deprecated `machineSet` of kind `vmo`).
    ScaleSet(String),
}

/// A parsed and validated Azure providerSpec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderSpec {
    /// `location` (required), e.g. `westeurope`.
    pub location: String,
    /// `resourceGroup` (required): where VMs, NICs and disks live.
    pub resource_group: String,
    /// `subnetInfo.vnetName` (required).
    pub vnet_name: String,
    /// `subnetInfo.vnetResourceGroup` (default: `resourceGroup`).
    pub vnet_resource_group: String,
    /// `subnetInfo.subnetName` (required).
    pub subnet_name: String,
    /// `properties.hardwareProfile.vmSize` (required).
    pub vm_size: String,
    /// `properties.storageProfile.imageReference`.
    pub image: Image,
    /// `properties.storageProfile.diskControllerType`: `SCSI` or `NVMe`.
    pub disk_controller_type: Option<String>,
    /// `properties.storageProfile.osDisk`.
    pub os_disk: OsDisk,
    /// `properties.storageProfile.dataDisks`.
    pub data_disks: Vec<DataDisk>,
    /// `properties.osProfile.adminUsername` (required).
    pub admin_username: String,
    /// `properties.osProfile.linuxConfiguration.disablePasswordAuthentication` (default false, as in Gardener).
    pub disable_password_authentication: bool,
    /// `properties.osProfile.linuxConfiguration.ssh.publicKeys`.
    pub ssh_key: SshKey,
    /// `properties.networkProfile.acceleratedNetworking`.
    pub accelerated_networking: Option<bool>,
    /// Zone, availability set or scale set.
    pub placement: Placement,
    /// `properties.identityID`: a user-assigned managed identity's resource ID.
    pub identity_id: Option<String>,
    /// `properties.diagnosticsProfile`: (enabled, storageURI).
    pub boot_diagnostics: Option<(bool, Option<String>)>,
    /// `properties.securityProfile`.
    pub security_profile: Option<SecurityProfile>,
    /// `properties.capacityReservation.capacityReservationGroupID`.
    pub capacity_reservation_group_id: Option<String>,
    /// `tags`, put on the VM, its NIC and its disks.
    pub tags: BTreeMap<String, String>,
    /// The `kubernetes.io-cluster-<name>` key among the tags.
    pub cluster_tag: String,
    /// The `kubernetes.io-role-<role>` key among the tags.
    pub role_tag: String,
    /// `cloudConfiguration.name` (default `AzurePublic`).
    pub cloud: String,
}

impl ProviderSpec {
    /// Parses and validates a providerSpec; errors name the field.
    pub fn parse(value: &Value) -> Result<ProviderSpec, DriverError> {
        let spec = Obj::new("", value, FIELDS)?;
        spec.string("apiVersion")?;
        let location = spec.required_string("location")?;
        let resource_group = spec.required_string("resourceGroup")?;
        let subnet = spec
            .object("subnetInfo", &["vnetName", "vnetResourceGroup", "subnetName"])?
            .ok_or_else(|| DriverError::invalid_field("subnetInfo", "is required (vnetName, subnetName)"))?;
        let vnet_resource_group = subnet.string("vnetResourceGroup")?.unwrap_or_else(|| resource_group.clone());
        let props = spec
            .object(
                "properties",
                &[
                    "hardwareProfile",
                    "storageProfile",
                    "osProfile",
                    "networkProfile",
                    "availabilitySet",
                    "identityID",
                    "zone",
                    "virtualMachineScaleSet",
                    "diagnosticsProfile",
                    "machineSet",
                    "securityProfile",
                    "capacityReservation",
                ],
            )?
            .ok_or_else(|| DriverError::invalid_field("properties", "is required"))?;
        let hardware = props
            .object("hardwareProfile", &["vmSize"])?
            .ok_or_else(|| props.invalid("hardwareProfile", "is required (vmSize)"))?;
        let storage = props
            .object("storageProfile", &["imageReference", "diskControllerType", "osDisk", "dataDisks"])?
            .ok_or_else(|| props.invalid("storageProfile", "is required (imageReference, osDisk)"))?;
        let os = props
            .object(
                "osProfile",
                &["computerName", "adminUsername", "adminPassword", "customData", "linuxConfiguration"],
            )?
            .ok_or_else(|| props.invalid("osProfile", "is required (adminUsername)"))?;
        let (disable_password_authentication, ssh_key) = parse_linux(&os)?;
        let network = props.object("networkProfile", &["networkInterfaces", "acceleratedNetworking"])?;
        let (tags, cluster_tag, role_tag) = parse_tags(&spec)?;
        let cloud = match spec.object("cloudConfiguration", &["name"])? {
            Some(c) => c.required_one_of("name", CLOUD_NAMES)?,
            None => CLOUD_NAMES[0].to_string(),
        };
        Ok(ProviderSpec {
            location,
            resource_group,
            vnet_name: subnet.required_string("vnetName")?,
            vnet_resource_group,
            subnet_name: subnet.required_string("subnetName")?,
            vm_size: hardware.required_string("vmSize")?,
            image: parse_image(&storage)?,
            disk_controller_type: storage.one_of("diskControllerType", &["SCSI", "NVMe"])?,
            os_disk: parse_os_disk(&storage)?,
            data_disks: parse_data_disks(&storage)?,
            admin_username: os.required_string("adminUsername")?,
            disable_password_authentication,
            ssh_key,
            accelerated_networking: network.as_ref().map(|n| n.boolean("acceleratedNetworking")).transpose()?.flatten(),
            placement: parse_placement(&props)?,
            identity_id: props.string("identityID")?,
            boot_diagnostics: match props.object("diagnosticsProfile", &["enabled", "storageURI"])? {
                Some(d) => Some((d.boolean("enabled")?.unwrap_or(false), d.string("storageURI")?)),
                None => None,
            },
            security_profile: parse_security_profile(&props)?,
            capacity_reservation_group_id: parse_capacity_reservation(&props)?,
            tags,
            cluster_tag,
            role_tag,
            cloud,
        })
    }
}

fn parse_tags(spec: &Obj<'_>) -> Result<(BTreeMap<String, String>, String, String), DriverError> {
    let tags = spec.string_map("tags")?.unwrap_or_default();
    let (cluster, role) = tags::azure_ownership(tags.keys()).map_err(|why| DriverError::invalid_field("tags", why))?;
    if tags.len() > MAX_TAGS {
        return Err(DriverError::invalid_field(
            "tags",
            format!("{} tags exceed Azure's limit of {MAX_TAGS}", tags.len()),
        ));
    }
    for (key, value) in &tags {
        let field = format!("tags[{key:?}]");
        if key.chars().count() > 512 || key.contains(['<', '>', '%', '&', '\\', '?', '/']) {
            return Err(DriverError::invalid_field(
                &field,
                "Azure tag keys are at most 512 characters without < > % & \\ ? /",
            ));
        }
        if value.chars().count() > 256 {
            return Err(DriverError::invalid_field(&field, "values are at most 256 characters"));
        }
    }
    Ok((tags, cluster, role))
}

fn parse_linux(os: &Obj<'_>) -> Result<(bool, SshKey), DriverError> {
    os.string("computerName")?;
    os.string("adminPassword")?;
    os.string("customData")?;
    let Some(linux) = os.object("linuxConfiguration", &["disablePasswordAuthentication", "ssh"])? else {
        return Ok((false, SshKey::default()));
    };
    let disable = linux.boolean("disablePasswordAuthentication")?.unwrap_or(false);
    let key = match linux.object("ssh", &["publicKeys"])? {
        Some(ssh) => match ssh.object("publicKeys", &["path", "keyData"])? {
            Some(k) => SshKey { path: k.string("path")?, key_data: k.string("keyData")? },
            None => SshKey::default(),
        },
        None => SshKey::default(),
    };
    Ok((disable, key))
}

fn parse_image(storage: &Obj<'_>) -> Result<Image, DriverError> {
    const KNOWN: &[&str] =
        &["id", "urn", "skipMarketplaceAgreement", "communityGalleryImageID", "sharedGalleryImageID"];
    let image = storage.object("imageReference", KNOWN)?.ok_or_else(|| {
        storage.invalid("imageReference", "is required (urn, id, communityGalleryImageID or sharedGalleryImageID)")
    })?;
    image.boolean("skipMarketplaceAgreement")?;
    let set: Vec<(&str, String)> = ["urn", "id", "communityGalleryImageID", "sharedGalleryImageID"]
        .into_iter()
        .map(|k| image.string(k).map(|v| v.map(|v| (k, v))))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    let (key, value) = match set.as_slice() {
        [(key, value)] => (*key, value.clone()),
        _ => {
            return Err(storage.invalid(
                "imageReference",
                "set exactly one of urn, id, communityGalleryImageID and sharedGalleryImageID",
            ));
        }
    };
    Ok(match key {
        "urn" => {
            let parts: Vec<&str> = value.split(':').collect();
            match parts.as_slice() {
                [p, o, s, v] if parts.iter().all(|part| !part.trim().is_empty()) => Image::Urn {
                    publisher: p.to_string(),
                    offer: o.to_string(),
                    sku: s.to_string(),
                    version: v.to_string(),
                },
                _ => {
                    return Err(
                        image.invalid("urn", format!("{value:?} is not of the form publisher:offer:sku:version"))
                    );
                }
            }
        }
        "id" => Image::Id(value),
        "communityGalleryImageID" => Image::CommunityGallery(value),
        _ => Image::SharedGallery(value),
    })
}

fn parse_os_disk(storage: &Obj<'_>) -> Result<OsDisk, DriverError> {
    let disk = storage
        .object("osDisk", &["name", "caching", "managedDisk", "diskSizeGB", "createOption"])?
        .ok_or_else(|| storage.invalid("osDisk", "is required (diskSizeGB, createOption)"))?;
    // Read and ignored: the driver names the OS disk `<vm>-os-disk`, as Gardener does.
    disk.string("name")?;
    let managed = disk.object("managedDisk", &["id", "storageAccountType", "securityProfile"])?;
    let (storage_account_type, security_encryption_type) = match &managed {
        Some(m) => {
            m.string("id")?;
            let encryption = match m.object("securityProfile", &["securityEncryptionType"])? {
                Some(p) => p.one_of(
                    "securityEncryptionType",
                    &["DiskWithVMGuestState", "VMGuestStateOnly", "NonPersistedTPM"],
                )?,
                None => None,
            };
            (m.one_of("storageAccountType", STORAGE_ACCOUNT_TYPES)?, encryption)
        }
        None => (None, None),
    };
    Ok(OsDisk {
        size_gb: disk.int("diskSizeGB", 1, i32::MAX)?.ok_or_else(|| disk.invalid("diskSizeGB", "is required (> 0)"))?,
        create_option: disk.required_one_of("createOption", &["FromImage", "Attach", "Empty"])?,
        caching: disk.one_of("caching", CACHING)?,
        storage_account_type,
        security_encryption_type,
    })
}

fn parse_data_disks(storage: &Obj<'_>) -> Result<Vec<DataDisk>, DriverError> {
    let items =
        storage.list("dataDisks", &["name", "lun", "caching", "storageAccountType", "diskSizeGB", "imageRef"])?;
    let mut luns = BTreeSet::new();
    let mut disks = Vec::with_capacity(items.len());
    for disk in &items {
        if disk.get("imageRef").is_some() {
            return Err(disk.invalid("imageRef", "data disks made from an image are not supported by this driver"));
        }
        let lun = disk.int("lun", 0, i32::MAX)?.ok_or_else(|| disk.invalid("lun", "is required (>= 0)"))?;
        if !luns.insert(lun) {
            return Err(disk.invalid("lun", format!("{lun} is used twice; luns must be unique")));
        }
        disks.push(DataDisk {
            name: disk.string("name")?,
            lun,
            caching: disk.one_of("caching", CACHING)?,
            storage_account_type: disk.required_one_of("storageAccountType", STORAGE_ACCOUNT_TYPES)?,
            size_gb: disk
                .int("diskSizeGB", 1, i32::MAX)?
                .ok_or_else(|| disk.invalid("diskSizeGB", "is required (> 0)"))?,
        });
    }
    Ok(disks)
}

fn parse_placement(props: &Obj<'_>) -> Result<Placement, DriverError> {
    let zone = props.int("zone", 1, i32::MAX)?;
    let id_of = |key: &str| -> Result<Option<String>, DriverError> {
        Ok(props.object(key, &["id"])?.map(|o| o.string("id")).transpose()?.flatten())
    };
    let mut availability_set = id_of("availabilitySet")?;
    let mut scale_set = id_of("virtualMachineScaleSet")?;
    // Deprecated in Gardener, still honoured: machineSet {id, kind} fills in what is not set.
    if let Some(set) = props.object("machineSet", &["id", "kind"])? {
        let id = set.required_string("id")?;
        match set.required_one_of("kind", &["availabilityset", "vmo"])?.as_str() {
            "availabilityset" => availability_set = availability_set.or(Some(id)),
            _ => scale_set = scale_set.or(Some(id)),
        }
    }
    match (zone, availability_set, scale_set) {
        (Some(z), None, None) => Ok(Placement::Zone(z)),
        (None, Some(a), None) => Ok(Placement::AvailabilitySet(a)),
        (None, None, Some(s)) => Ok(Placement::ScaleSet(s)),
        _ => Err(props.invalid("zone", "set exactly one of zone, availabilitySet and virtualMachineScaleSet")),
    }
}

fn parse_security_profile(props: &Obj<'_>) -> Result<Option<SecurityProfile>, DriverError> {
    let Some(p) = props.object("securityProfile", &["securityType", "uefiSettings"])? else { return Ok(None) };
    let uefi = p.object("uefiSettings", &["vtpmEnabled", "secureBootEnabled"])?;
    Ok(Some(SecurityProfile {
        security_type: p.one_of("securityType", &["TrustedLaunch", "ConfidentialVM"])?,
        vtpm_enabled: uefi.as_ref().map(|u| u.boolean("vtpmEnabled")).transpose()?.flatten(),
        secure_boot_enabled: uefi.as_ref().map(|u| u.boolean("secureBootEnabled")).transpose()?.flatten(),
    }))
}

fn parse_capacity_reservation(props: &Obj<'_>) -> Result<Option<String>, DriverError> {
    let Some(c) = props.object("capacityReservation", &["capacityReservationGroupID"])? else { return Ok(None) };
    let Some(id) = c.string("capacityReservationGroupID")? else { return Ok(None) };
    let lower = id.to_ascii_lowercase();
    if !lower.starts_with("/subscriptions/")
        || !lower.contains("/providers/microsoft.compute/capacityreservationgroups/")
    {
        return Err(c.invalid(
            "capacityReservationGroupID",
            "must be the resource ID of a capacity reservation group (/subscriptions/.../providers/Microsoft.Compute/capacityReservationGroups/<name>)",
        ));
    }
    Ok(Some(id))
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use crate::providers::Code;

    /// Gardener's sample MachineClass providerSpec (kubernetes/machine-class.yaml), filled in.
    pub(crate) fn full() -> Value {
        json!({
            "location": "westeurope",
            "resourceGroup": "shoot--dev--rg",
            "subnetInfo": {"vnetName": "shoot--dev", "vnetResourceGroup": "vnet-rg", "subnetName": "shoot--dev-nodes"},
            "properties": {
                "hardwareProfile": {"vmSize": "Standard_DS2_v2"},
                "networkProfile": {"networkInterfaces": {}, "acceleratedNetworking": true},
                "osProfile": {
                    "adminUsername": "core", "computerName": "ignored", "customData": "",
                    "linuxConfiguration": {"disablePasswordAuthentication": true,
                        "ssh": {"publicKeys": {"keyData": "ssh-rsa AAAA test", "path": "/home/core/.ssh/authorized_keys"}}}
                },
                "storageProfile": {
                    "imageReference": {"urn": "sap:gardenlinux:greatest:184.0.0", "skipMarketplaceAgreement": true},
                    "diskControllerType": "NVMe",
                    "osDisk": {"caching": "None", "createOption": "FromImage", "diskSizeGB": 50,
                        "managedDisk": {"storageAccountType": "Premium_LRS"}},
                    "dataDisks": [{"name": "etcd", "lun": 0, "caching": "ReadWrite", "storageAccountType": "StandardSSD_LRS",
                        "diskSizeGB": 100}, {"lun": 1, "storageAccountType": "Standard_LRS", "diskSizeGB": 20}]
                },
                "zone": 2,
                "identityID": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id",
                "diagnosticsProfile": {"enabled": true},
                "securityProfile": {"securityType": "TrustedLaunch", "uefiSettings": {"vtpmEnabled": true, "secureBootEnabled": true}}
            },
            "tags": {
                "Name": "shoot--dev",
                "kubernetes.io-cluster-shoot--dev": "1",
                "kubernetes.io-role-node": "1",
                "worker.gardener.cloud_pool": "pool-a"
            }
        })
    }

    /// The smallest valid spec.
    pub(crate) fn minimal() -> Value {
        json!({
            "location": "westeurope", "resourceGroup": "rg",
            "subnetInfo": {"vnetName": "vnet", "subnetName": "nodes"},
            "properties": {
                "hardwareProfile": {"vmSize": "Standard_D2s_v5"},
                "osProfile": {"adminUsername": "core"},
                "storageProfile": {"imageReference": {"urn": "sap:gardenlinux:greatest:1.0"},
                    "osDisk": {"createOption": "FromImage", "diskSizeGB": 30}},
                "zone": 1
            },
            "tags": {"kubernetes.io-cluster-dev": "1", "kubernetes.io-role-node": "1"}
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
            (Value::Array(items), Some(value)) => items[key.parse::<usize>().unwrap()] = value,
            (Value::Array(items), None) => {
                items.remove(key.parse::<usize>().unwrap());
            }
            _ => panic!("{path}"),
        }
        v
    }

    #[test]
    fn gardeners_example_parses() {
        let spec = ProviderSpec::parse(&full()).unwrap();
        assert_eq!((spec.location.as_str(), spec.resource_group.as_str()), ("westeurope", "shoot--dev--rg"));
        assert_eq!((spec.vnet_name.as_str(), spec.vnet_resource_group.as_str()), ("shoot--dev", "vnet-rg"));
        assert_eq!(spec.subnet_name, "shoot--dev-nodes");
        assert_eq!(spec.vm_size, "Standard_DS2_v2");
        assert_eq!(
            spec.image,
            Image::Urn {
                publisher: "sap".into(),
                offer: "gardenlinux".into(),
                sku: "greatest".into(),
                version: "184.0.0".into()
            }
        );
        assert_eq!(spec.os_disk.size_gb, 50);
        assert_eq!(spec.os_disk.storage_account_type.as_deref(), Some("Premium_LRS"));
        assert_eq!(spec.data_disks.len(), 2);
        assert_eq!(spec.data_disks[0].name.as_deref(), Some("etcd"));
        assert_eq!(spec.data_disks[1].lun, 1);
        assert!(spec.disable_password_authentication);
        assert_eq!(spec.ssh_key.key_data.as_deref(), Some("ssh-rsa AAAA test"));
        assert_eq!(spec.accelerated_networking, Some(true));
        assert_eq!(spec.placement, Placement::Zone(2));
        assert_eq!(spec.boot_diagnostics, Some((true, None)));
        assert_eq!(spec.security_profile.as_ref().unwrap().security_type.as_deref(), Some("TrustedLaunch"));
        assert_eq!(
            (spec.cluster_tag.as_str(), spec.role_tag.as_str()),
            ("kubernetes.io-cluster-shoot--dev", "kubernetes.io-role-node")
        );
        assert_eq!(spec.cloud, "AzurePublic");
        assert_eq!(spec.disk_controller_type.as_deref(), Some("NVMe"));
    }

    #[test]
    fn defaults_and_alternatives() {
        let spec = ProviderSpec::parse(&minimal()).unwrap();
        assert_eq!(spec.vnet_resource_group, "rg", "defaults to resourceGroup");
        assert!(spec.data_disks.is_empty() && spec.identity_id.is_none() && spec.boot_diagnostics.is_none());
        assert!(!spec.disable_password_authentication && spec.ssh_key == SshKey::default());
        let images = [
            (json!({"id": "/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/images/i"}), "id"),
            (json!({"communityGalleryImageID": "/CommunityGalleries/g/Images/i/Versions/1"}), "community"),
            (json!({"sharedGalleryImageID": "/SharedGalleries/g/Images/i/Versions/1"}), "shared"),
        ];
        for (image, what) in images {
            let v = with(minimal(), "/properties/storageProfile/imageReference", Some(image));
            let spec = ProviderSpec::parse(&v).unwrap();
            match (what, &spec.image) {
                ("id", Image::Id(_))
                | ("community", Image::CommunityGallery(_))
                | ("shared", Image::SharedGallery(_)) => {}
                other => panic!("{other:?}"),
            }
        }
        let set = with(
            with(minimal(), "/properties/zone", None),
            "/properties/availabilitySet",
            Some(json!({"id": "/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/availabilitySets/a"})),
        );
        assert!(matches!(ProviderSpec::parse(&set).unwrap().placement, Placement::AvailabilitySet(_)));
        let legacy = with(
            with(minimal(), "/properties/zone", None),
            "/properties/machineSet",
            Some(json!({"id": "vmss-id", "kind": "vmo"})),
        );
        assert_eq!(ProviderSpec::parse(&legacy).unwrap().placement, Placement::ScaleSet("vmss-id".into()));
        let china = with(minimal(), "/cloudConfiguration", Some(json!({"name": "AzureChina"})));
        assert_eq!(ProviderSpec::parse(&china).unwrap().cloud, "AzureChina");
    }

    #[test]
    fn every_invalid_field_is_named() {
        let m = minimal;
        let f = full;
        let p = "/properties";
        let cases: Vec<(&str, Value, &str)> = vec![
            ("not an object", json!([]), "providerSpec: must be an object"),
            ("unknown", with(m(), "/region", Some(json!("x"))), "providerSpec: unknown field \"region\""),
            ("location", with(m(), "/location", None), "providerSpec.location: is required"),
            ("location type", with(m(), "/location", Some(json!(1))), "providerSpec.location: must be a string"),
            ("resourceGroup", with(m(), "/resourceGroup", Some(json!(""))), "providerSpec.resourceGroup: is required"),
            ("subnetInfo", with(m(), "/subnetInfo", None), "providerSpec.subnetInfo: is required"),
            ("vnetName", with(m(), "/subnetInfo/vnetName", None), "providerSpec.subnetInfo.vnetName: is required"),
            (
                "subnetName",
                with(m(), "/subnetInfo/subnetName", None),
                "providerSpec.subnetInfo.subnetName: is required",
            ),
            (
                "subnet unknown",
                with(m(), "/subnetInfo/x", Some(json!(1))),
                "providerSpec.subnetInfo: unknown field \"x\"",
            ),
            ("properties", with(m(), p, None), "providerSpec.properties: is required"),
            (
                "hardwareProfile",
                with(m(), "/properties/hardwareProfile", None),
                "providerSpec.properties.hardwareProfile: is required",
            ),
            (
                "vmSize",
                with(m(), "/properties/hardwareProfile/vmSize", Some(json!(""))),
                "providerSpec.properties.hardwareProfile.vmSize: is required",
            ),
            (
                "storageProfile",
                with(m(), "/properties/storageProfile", None),
                "providerSpec.properties.storageProfile: is required",
            ),
            (
                "imageReference",
                with(m(), "/properties/storageProfile/imageReference", None),
                "providerSpec.properties.storageProfile.imageReference: is required",
            ),
            (
                "two images",
                with(m(), "/properties/storageProfile/imageReference/id", Some(json!("/x"))),
                "providerSpec.properties.storageProfile.imageReference: set exactly one of",
            ),
            (
                "no image",
                with(m(), "/properties/storageProfile/imageReference", Some(json!({}))),
                "providerSpec.properties.storageProfile.imageReference: set exactly one of",
            ),
            (
                "urn",
                with(m(), "/properties/storageProfile/imageReference/urn", Some(json!("a:b:c"))),
                "providerSpec.properties.storageProfile.imageReference.urn: \"a:b:c\" is not of the form",
            ),
            (
                "urn part",
                with(m(), "/properties/storageProfile/imageReference/urn", Some(json!("a::c:d"))),
                "providerSpec.properties.storageProfile.imageReference.urn",
            ),
            (
                "diskControllerType",
                with(m(), "/properties/storageProfile/diskControllerType", Some(json!("IDE"))),
                "providerSpec.properties.storageProfile.diskControllerType: \"IDE\" is not one of SCSI, NVMe",
            ),
            (
                "osDisk",
                with(m(), "/properties/storageProfile/osDisk", None),
                "providerSpec.properties.storageProfile.osDisk: is required",
            ),
            (
                "osDisk size",
                with(m(), "/properties/storageProfile/osDisk/diskSizeGB", Some(json!(0))),
                "providerSpec.properties.storageProfile.osDisk.diskSizeGB: 0 must be at least 1",
            ),
            (
                "osDisk size missing",
                with(m(), "/properties/storageProfile/osDisk/diskSizeGB", None),
                "providerSpec.properties.storageProfile.osDisk.diskSizeGB: is required",
            ),
            (
                "createOption",
                with(m(), "/properties/storageProfile/osDisk/createOption", None),
                "providerSpec.properties.storageProfile.osDisk.createOption: is required",
            ),
            (
                "caching",
                with(f(), "/properties/storageProfile/osDisk/caching", Some(json!("Always"))),
                "providerSpec.properties.storageProfile.osDisk.caching: \"Always\" is not one of",
            ),
            (
                "storageAccountType",
                with(f(), "/properties/storageProfile/osDisk/managedDisk/storageAccountType", Some(json!("Fast"))),
                "providerSpec.properties.storageProfile.osDisk.managedDisk.storageAccountType",
            ),
            (
                "encryption",
                with(
                    f(),
                    "/properties/storageProfile/osDisk/managedDisk/securityProfile",
                    Some(json!({"securityEncryptionType": "All"})),
                ),
                "providerSpec.properties.storageProfile.osDisk.managedDisk.securityProfile.securityEncryptionType",
            ),
            (
                "lun",
                with(f(), "/properties/storageProfile/dataDisks/0/lun", Some(json!(-1))),
                "providerSpec.properties.storageProfile.dataDisks[0].lun: -1 must be at least 0",
            ),
            (
                "lun missing",
                with(f(), "/properties/storageProfile/dataDisks/1/lun", None),
                "providerSpec.properties.storageProfile.dataDisks[1].lun: is required",
            ),
            (
                "lun twice",
                with(f(), "/properties/storageProfile/dataDisks/1/lun", Some(json!(0))),
                "providerSpec.properties.storageProfile.dataDisks[1].lun: 0 is used twice",
            ),
            (
                "data size",
                with(f(), "/properties/storageProfile/dataDisks/0/diskSizeGB", Some(json!(0))),
                "providerSpec.properties.storageProfile.dataDisks[0].diskSizeGB: 0 must be at least 1",
            ),
            (
                "data type",
                with(f(), "/properties/storageProfile/dataDisks/0/storageAccountType", None),
                "providerSpec.properties.storageProfile.dataDisks[0].storageAccountType: is required",
            ),
            (
                "imageRef",
                with(f(), "/properties/storageProfile/dataDisks/0/imageRef", Some(json!({"id": "x"}))),
                "providerSpec.properties.storageProfile.dataDisks[0].imageRef: data disks made from an image are not supported",
            ),
            ("osProfile", with(m(), "/properties/osProfile", None), "providerSpec.properties.osProfile: is required"),
            (
                "adminUsername",
                with(m(), "/properties/osProfile/adminUsername", None),
                "providerSpec.properties.osProfile.adminUsername: is required",
            ),
            (
                "disablePassword",
                with(f(), "/properties/osProfile/linuxConfiguration/disablePasswordAuthentication", Some(json!("yes"))),
                "providerSpec.properties.osProfile.linuxConfiguration.disablePasswordAuthentication: must be true or false",
            ),
            (
                "keyData",
                with(f(), "/properties/osProfile/linuxConfiguration/ssh/publicKeys/keyData", Some(json!(1))),
                "providerSpec.properties.osProfile.linuxConfiguration.ssh.publicKeys.keyData: must be a string",
            ),
            (
                "acceleratedNetworking",
                with(f(), "/properties/networkProfile/acceleratedNetworking", Some(json!("on"))),
                "providerSpec.properties.networkProfile.acceleratedNetworking: must be true or false",
            ),
            (
                "zone",
                with(m(), "/properties/zone", Some(json!(0))),
                "providerSpec.properties.zone: 0 must be at least 1",
            ),
            (
                "zone type",
                with(m(), "/properties/zone", Some(json!("1"))),
                "providerSpec.properties.zone: must be a whole number",
            ),
            (
                "no placement",
                with(m(), "/properties/zone", None),
                "providerSpec.properties.zone: set exactly one of zone, availabilitySet and virtualMachineScaleSet",
            ),
            (
                "zone and set",
                with(m(), "/properties/availabilitySet", Some(json!({"id": "a"}))),
                "providerSpec.properties.zone: set exactly one of",
            ),
            (
                "machineSet kind",
                with(m(), "/properties/machineSet", Some(json!({"id": "a", "kind": "vmss"}))),
                "providerSpec.properties.machineSet.kind: \"vmss\" is not one of availabilityset, vmo",
            ),
            (
                "identityID",
                with(m(), "/properties/identityID", Some(json!(["x"]))),
                "providerSpec.properties.identityID: must be a string",
            ),
            (
                "securityType",
                with(f(), "/properties/securityProfile/securityType", Some(json!("Standard"))),
                "providerSpec.properties.securityProfile.securityType: \"Standard\" is not one of",
            ),
            (
                "diagnostics",
                with(f(), "/properties/diagnosticsProfile/enabled", Some(json!(1))),
                "providerSpec.properties.diagnosticsProfile.enabled: must be true or false",
            ),
            (
                "capacity reservation",
                with(m(), "/properties/capacityReservation", Some(json!({"capacityReservationGroupID": "crg"}))),
                "providerSpec.properties.capacityReservation.capacityReservationGroupID: must be the resource ID",
            ),
            ("tags", with(m(), "/tags", None), "providerSpec.tags: must contain a tag key kubernetes.io-cluster-"),
            (
                "role tag",
                with(m(), "/tags", Some(json!({"kubernetes.io-cluster-dev": "1"}))),
                "providerSpec.tags: must contain a tag key kubernetes.io-role-",
            ),
            (
                "slash tags",
                with(m(), "/tags", Some(json!({"kubernetes.io/cluster/dev": "1", "kubernetes.io/role/node": "1"}))),
                "providerSpec.tags: must contain a tag key kubernetes.io-cluster-",
            ),
            ("tag value", with(m(), "/tags/team", Some(json!(1))), "providerSpec.tags[\"team\"]: must be a string"),
            ("tag key", with(m(), "/tags/a?b", Some(json!("x"))), "providerSpec.tags[\"a?b\"]: Azure tag keys"),
            (
                "cloud",
                with(m(), "/cloudConfiguration", Some(json!({"name": "Mars"}))),
                "providerSpec.cloudConfiguration.name: \"Mars\" is not one of",
            ),
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
        for i in 0..49 {
            v["tags"][format!("t{i}")] = json!("v");
        }
        let err = ProviderSpec::parse(&v).unwrap_err();
        assert!(err.message.starts_with("providerSpec.tags: 51 tags exceed"), "{err}");
        v["tags"].as_object_mut().unwrap().remove("t0");
        ProviderSpec::parse(&v).unwrap();
    }
}
