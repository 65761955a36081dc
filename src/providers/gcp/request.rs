//! Pure translations between our types and Compute Engine's REST shapes: the instance body of an insert, the
//! providerID, ownership by network tags, addresses and volume IDs. Bodies are built as JSON in the API's own
//! shape (camelCase, int64 values as strings) and handed to the SDK's model. No I/O here.

use k8s_openapi::api::core::v1::{NodeAddress, PersistentVolumeSpec};
use serde_json::{Map, Value, json};

use super::spec::{Disk, NetworkInterface, ProviderSpec, SCRATCH, STARTUP_SCRIPT_KEY, USER_DATA_KEY};
use crate::providers::{Code, DriverError};

/// The scheme of GCE providerIDs.
pub const PROVIDER_ID_SCHEME: &str = "gce://";

/// The CSI driver whose volume handles are persistent disks.
pub const CSI_DRIVER: &str = "pd.csi.storage.gke.io";

/// `gce://<project>/<zone>/<name>`: what the kubelet and GCE's cloud-controller put on the Node.
pub fn provider_id(project: &str, zone: &str, name: &str) -> String {
    format!("{PROVIDER_ID_SCHEME}{project}/{zone}/{name}")
}

/// Where a providerID points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceRef {
    /// The project.
    pub project: String,
    /// The zone.
    pub zone: String,
    /// The instance name.
    pub name: String,
}

/// The project, zone and name in a providerID: `gce://<project>/<zone>/<name>`, or Gardener's
/// `gce:///<project>/<zone>/<name>`.
pub fn parse_provider_id(provider_id: &str) -> Result<InstanceRef, DriverError> {
    let bad = || {
        DriverError::new(
            Code::InvalidArgument,
            format!("providerID {provider_id:?} is not of the form gce://<project>/<zone>/<instance-name>"),
        )
    };
    let rest = provider_id.strip_prefix(PROVIDER_ID_SCHEME).ok_or_else(bad)?;
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let parts: Vec<&str> = rest.split('/').collect();
    let [project, zone, name] = parts.as_slice() else { return Err(bad()) };
    let fine =
        |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if !(fine(project) && fine(zone) && fine(name)) {
        return Err(bad());
    }
    Ok(InstanceRef { project: project.to_string(), zone: zone.to_string(), name: name.to_string() })
}

/// The metadata key the user data goes to: `user-data` for a cloud-config, `startup-script` for anything else
/// (as Gardener's driver decides).
pub fn user_data_key(user_data: &str) -> &'static str {
    if user_data.starts_with("#cloud-config") { USER_DATA_KEY } else { STARTUP_SCRIPT_KEY }
}

/// The body of `instances.insert` for machine `name` in `project`, with `user_data` in the metadata.
pub fn instance_body(spec: &ProviderSpec, project: &str, name: &str, user_data: &str) -> Result<Value, DriverError> {
    let zone = &spec.zone;
    let user_data_key = user_data_key(user_data);
    if spec.metadata.iter().any(|(k, _)| k == user_data_key) {
        return Err(DriverError::invalid_field(
            "metadata",
            format!("{user_data_key} is set from the secret's userData; a class may not set it"),
        ));
    }
    let mut metadata = vec![json!({"key": user_data_key, "value": user_data})];
    metadata.extend(spec.metadata.iter().map(|(key, value)| match value {
        Some(value) => json!({"key": key, "value": value}),
        None => json!({"key": key}),
    }));
    let mut body = json!({
        "name": name,
        "machineType": format!("zones/{zone}/machineTypes/{}", spec.machine_type),
        "canIpForward": spec.can_ip_forward,
        "deletionProtection": spec.deletion_protection,
        "disks": spec.disks.iter().map(|d| disk(d, zone)).collect::<Vec<_>>(),
        "metadata": {"items": metadata},
        "networkInterfaces": spec.network_interfaces.iter().map(|n| nic(n, project, &spec.region)).collect::<Vec<_>>(),
        "scheduling": {
            "automaticRestart": spec.scheduling.automatic_restart,
            "onHostMaintenance": spec.scheduling.on_host_maintenance,
            "preemptible": spec.scheduling.preemptible,
        },
        "tags": {"items": spec.tags},
    });
    let Some(fields) = body.as_object_mut() else { return Ok(body) };
    if let Some(d) = &spec.description {
        fields.insert("description".into(), json!(d));
    }
    if let Some(p) = &spec.min_cpu_platform {
        fields.insert("minCpuPlatform".into(), json!(p));
    }
    if !spec.labels.is_empty() {
        fields.insert("labels".into(), json!(spec.labels));
    }
    if !spec.service_accounts.is_empty() {
        let accounts: Vec<Value> =
            spec.service_accounts.iter().map(|a| json!({"email": a.email, "scopes": a.scopes})).collect();
        fields.insert("serviceAccounts".into(), json!(accounts));
    }
    if let Some(gpu) = &spec.gpu {
        fields.insert(
            "guestAccelerators".into(),
            json!([{
                "acceleratorType": format!("projects/{project}/zones/{zone}/acceleratorTypes/{}", gpu.accelerator_type),
                "acceleratorCount": gpu.count,
            }]),
        );
    }
    if let Some(s) = &spec.shielded {
        let mut shielded = Map::new();
        for (key, value) in [
            ("enableIntegrityMonitoring", s.integrity_monitoring),
            ("enableSecureBoot", s.secure_boot),
            ("enableVtpm", s.vtpm),
        ] {
            if let Some(v) = value {
                shielded.insert(key.into(), json!(v));
            }
        }
        fields.insert("shieldedInstanceConfig".into(), Value::Object(shielded));
    }
    if let Some(nested) = spec.nested_virtualization {
        fields.insert("advancedMachineFeatures".into(), json!({"enableNestedVirtualization": nested}));
    }
    Ok(body)
}

fn disk(d: &Disk, zone: &str) -> Value {
    let mut disk = if d.disk_type == SCRATCH {
        json!({
            "type": "SCRATCH",
            "boot": false,
            "autoDelete": d.auto_delete,
            "interface": d.interface,
            "initializeParams": {"diskType": format!("zones/{zone}/diskTypes/local-ssd")},
        })
    } else {
        let mut params = Map::new();
        params.insert("diskType".into(), json!(format!("zones/{zone}/diskTypes/{}", d.disk_type)));
        // int64 fields travel as strings in Compute's JSON.
        if let Some(size) = d.size_gb {
            params.insert("diskSizeGb".into(), json!(size.to_string()));
        }
        if let Some(image) = &d.image {
            params.insert("sourceImage".into(), json!(image));
        }
        if !d.labels.is_empty() {
            params.insert("labels".into(), json!(d.labels));
        }
        if let Some(iops) = d.provisioned_iops {
            params.insert("provisionedIops".into(), json!(iops.to_string()));
        }
        if let Some(throughput) = d.provisioned_throughput {
            params.insert("provisionedThroughput".into(), json!(throughput.to_string()));
        }
        if let Some(pool) = &d.storage_pool {
            params.insert("storagePool".into(), json!(pool));
        }
        json!({"type": "PERSISTENT", "boot": d.boot, "autoDelete": d.auto_delete, "initializeParams": params})
    };
    if let (Some(e), Some(fields)) = (&d.encryption, disk.as_object_mut()) {
        let mut key = json!({"kmsKeyName": e.kms_key_name});
        if let (Some(account), Some(k)) = (&e.kms_key_service_account, key.as_object_mut()) {
            k.insert("kmsKeyServiceAccount".into(), json!(account));
        }
        fields.insert("diskEncryptionKey".into(), key);
    }
    disk
}

fn nic(n: &NetworkInterface, project: &str, region: &str) -> Value {
    let mut nic = Map::new();
    if let Some(network) = &n.network {
        nic.insert("network".into(), json!(format!("projects/{project}/global/networks/{network}")));
    }
    if let Some(subnetwork) = &n.subnetwork {
        nic.insert("subnetwork".into(), json!(format!("regions/{region}/subnetworks/{subnetwork}")));
    }
    if !n.disable_external_ip {
        nic.insert("accessConfigs".into(), json!([{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]));
    }
    if n.has_alias_range() {
        if let Some(stack) = &n.stack_type {
            nic.insert("stackType".into(), json!(stack));
        }
        if let Some(access) = &n.ipv6_access_type {
            nic.insert("ipv6AccessType".into(), json!(access));
        }
        let mut range = Map::new();
        if let Some(cidr) = &n.ip_cidr_range {
            range.insert("ipCidrRange".into(), json!(cidr));
        }
        if let Some(name) = &n.subnetwork_range_name {
            range.insert("subnetworkRangeName".into(), json!(name));
        }
        nic.insert("aliasIpRanges".into(), json!([range]));
    }
    Value::Object(nic)
}

/// The network tags of an instance (as JSON).
pub fn tags(instance: &Value) -> Vec<&str> {
    instance
        .pointer("/tags/items")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The instance's name.
pub fn name(instance: &Value) -> &str {
    instance.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// The instance's status (`PROVISIONING`, `RUNNING`, `TERMINATED`, ...).
pub fn status(instance: &Value) -> &str {
    instance.get("status").and_then(Value::as_str).unwrap_or_default()
}

/// Whether the instance carries the class's cluster and role tags.
pub fn owned(instance: &Value, spec: &ProviderSpec) -> bool {
    spec.owns(tags(instance))
}

/// The Node addresses of an instance: each interface's internal IP and its external (NAT) IPs.
pub fn addresses(instance: &Value) -> Vec<NodeAddress> {
    let mut out = Vec::new();
    let nics = instance.get("networkInterfaces").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for nic in nics {
        if let Some(ip) = nic.get("networkIP").and_then(Value::as_str).filter(|ip| !ip.is_empty()) {
            out.push(NodeAddress { type_: "InternalIP".into(), address: ip.into() });
        }
        let configs = nic.get("accessConfigs").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for config in configs {
            if let Some(ip) = config.get("natIP").and_then(Value::as_str).filter(|ip| !ip.is_empty()) {
                out.push(NodeAddress { type_: "ExternalIP".into(), address: ip.into() });
            }
        }
    }
    out
}

/// The persistent disk names behind in-tree `gcePersistentDisk` volumes, and the volume handles of CSI volumes of
/// [`CSI_DRIVER`]; other volumes are skipped.
pub fn volume_ids(specs: &[PersistentVolumeSpec]) -> Vec<String> {
    specs
        .iter()
        .filter_map(|pv| {
            if let Some(gce) = &pv.gce_persistent_disk {
                return Some(gce.pd_name.clone()).filter(|n| !n.is_empty());
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
    use google_cloud_compute_v1::model::Instance;
    use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, GCEPersistentDiskVolumeSource};
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::providers::gcp::spec::tests::{full, minimal};

    #[test]
    fn provider_ids_both_forms() {
        assert_eq!(provider_id("p", "europe-west1-b", "m1"), "gce://p/europe-west1-b/m1");
        let want = InstanceRef { project: "p".into(), zone: "europe-west1-b".into(), name: "m1".into() };
        assert_eq!(parse_provider_id("gce://p/europe-west1-b/m1").unwrap(), want);
        assert_eq!(parse_provider_id("gce:///p/europe-west1-b/m1").unwrap(), want);
        for bad in
            ["", "aws:///eu-west-1/i-1", "gce://p/z", "gce://p/z/m/x", "gce:////z/m", "gce://p/z/m?x", "gce://p/z/"]
        {
            let err = parse_provider_id(bad).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn the_minimal_body() {
        let spec = ProviderSpec::parse(&minimal()).unwrap();
        let body = instance_body(&spec, "proj", "m1", "#cloud-config\nx: 1").unwrap();
        assert_eq!(
            body,
            json!({
                "name": "m1",
                "machineType": "zones/europe-west1-b/machineTypes/n2-standard-2",
                "canIpForward": false,
                "deletionProtection": false,
                "disks": [{"type": "PERSISTENT", "boot": true, "autoDelete": true, "initializeParams": {
                    "diskType": "zones/europe-west1-b/diskTypes/pd-standard",
                    "sourceImage": "projects/debian-cloud/global/images/family/debian-12"}}],
                "metadata": {"items": [{"key": "user-data", "value": "#cloud-config\nx: 1"}]},
                "networkInterfaces": [{"network": "projects/proj/global/networks/default",
                    "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]}],
                "scheduling": {"automaticRestart": false, "onHostMaintenance": "MIGRATE", "preemptible": false},
                "tags": {"items": ["kubernetes-io-cluster-dev", "kubernetes-io-role-node"]},
            })
        );
        // A script goes to startup-script.
        let body = instance_body(&spec, "proj", "m1", "#!/bin/bash\necho hi").unwrap();
        assert_eq!(body["metadata"]["items"][0]["key"], "startup-script");
    }

    #[test]
    fn the_full_body_and_the_sdk_model_agree() {
        let spec = ProviderSpec::parse(&full()).unwrap();
        let body = instance_body(&spec, "proj", "m1", "#cloud-config").unwrap();
        assert_eq!(body["disks"][0]["initializeParams"]["diskSizeGb"], "50");
        assert_eq!(body["disks"][0]["initializeParams"]["provisionedIops"], "3000");
        assert_eq!(body["disks"][0]["initializeParams"]["provisionedThroughput"], "140");
        assert_eq!(body["disks"][0]["initializeParams"]["labels"], json!({"name": "test-mc"}));
        assert_eq!(
            body["disks"][0]["diskEncryptionKey"],
            json!({"kmsKeyName": "projects/p/locations/europe-west1/keyRings/r/cryptoKeys/k",
                   "kmsKeyServiceAccount": "kms@p.iam.gserviceaccount.com"})
        );
        assert_eq!(body["disks"][1]["autoDelete"], false);
        assert_eq!(
            body["disks"][2],
            json!({"type": "SCRATCH", "boot": false, "autoDelete": true, "interface": "NVME",
                   "initializeParams": {"diskType": "zones/europe-west1-b/diskTypes/local-ssd"}})
        );
        assert_eq!(
            body["networkInterfaces"][0],
            json!({"network": "projects/proj/global/networks/network-name",
                   "subnetwork": "regions/europe-west1/subnetworks/sub-net-name",
                   "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}],
                   "stackType": "IPV4_IPV6", "ipv6AccessType": "EXTERNAL",
                   "aliasIpRanges": [{"ipCidrRange": "/24", "subnetworkRangeName": "ipv4-cidr-range"}]})
        );
        assert_eq!(
            body["networkInterfaces"][1],
            json!({"subnetwork": "regions/europe-west1/subnetworks/second", "aliasIpRanges": [{"ipCidrRange": "/28"}]})
        );
        assert_eq!(
            body["guestAccelerators"],
            json!([{"acceleratorType": "projects/proj/zones/europe-west1-b/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 1}])
        );
        assert_eq!(body["metadata"]["items"][2], json!({"key": "block-project-ssh-keys"}));
        assert_eq!(
            body["shieldedInstanceConfig"],
            json!({"enableIntegrityMonitoring": false, "enableSecureBoot": true, "enableVtpm": false})
        );
        assert_eq!(body["advancedMachineFeatures"], json!({"enableNestedVirtualization": true}));
        assert_eq!(body["serviceAccounts"][0]["email"], "default@project.iam.gserviceaccount.com");
        assert_eq!(body["minCpuPlatform"], "Intel Skylake");
        // The SDK's model takes the body as it is and writes it back unchanged: the shapes are the API's.
        let model: Instance = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(serde_json::to_value(&model).unwrap(), body);
        let model: Instance =
            serde_json::from_value(instance_body(&ProviderSpec::parse(&minimal()).unwrap(), "p", "m", "#!").unwrap())
                .unwrap();
        assert_eq!(model.name.as_deref(), Some("m"));
    }

    #[test]
    fn a_class_cannot_take_the_user_data_key() {
        let mut v = minimal();
        v["metadata"] = json!([{"key": "startup-script", "value": "echo"}]);
        let spec = ProviderSpec::parse(&v).unwrap();
        instance_body(&spec, "p", "m", "#cloud-config").unwrap();
        let err = instance_body(&spec, "p", "m", "#!/bin/sh").unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
        assert!(err.message.starts_with("providerSpec.metadata: startup-script is set from the secret"), "{err}");
    }

    #[test]
    fn ownership_addresses_and_volumes() {
        let spec = ProviderSpec::parse(&minimal()).unwrap();
        let instance = json!({
            "name": "m1", "status": "RUNNING",
            "tags": {"items": ["kubernetes-io-role-node", "kubernetes-io-cluster-dev"]},
            "networkInterfaces": [
                {"networkIP": "10.0.0.2", "accessConfigs": [{"natIP": "34.1.2.3"}]},
                {"networkIP": "10.1.0.2"}
            ]
        });
        assert!(owned(&instance, &spec));
        assert_eq!((name(&instance), status(&instance)), ("m1", "RUNNING"));
        assert!(!owned(&json!({"tags": {"items": ["kubernetes-io-cluster-dev"]}}), &spec));
        assert!(!owned(&json!({"name": "m1"}), &spec));
        let shown: Vec<(String, String)> = addresses(&instance).into_iter().map(|a| (a.type_, a.address)).collect();
        assert_eq!(
            shown,
            [
                ("InternalIP".to_string(), "10.0.0.2".to_string()),
                ("ExternalIP".to_string(), "34.1.2.3".to_string()),
                ("InternalIP".to_string(), "10.1.0.2".to_string())
            ]
        );
        let pvs = [
            PersistentVolumeSpec {
                gce_persistent_disk: Some(GCEPersistentDiskVolumeSource {
                    pd_name: "disk-1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver: CSI_DRIVER.into(),
                    volume_handle: "projects/p/zones/z/disks/pvc-1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver: "ebs.csi.aws.com".into(),
                    volume_handle: "vol-1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ];
        assert_eq!(volume_ids(&pvs), ["disk-1", "projects/p/zones/z/disks/pvc-1"]);
    }
}
