//! [`InMemoryDriver`]: the [`Driver`] contract over an [`InMemoryCloud`].

use std::collections::BTreeMap;

use super::cloud::{Call, InMemoryCloud, Vm};
use super::spec::ProviderSpec;
use crate::providers::{
    ClassInfo, Code, CreateMachineResponse, DeleteMachineResponse, Driver, DriverError, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineRequest, MachineStatusResponse,
};

/// The `MachineClass.provider` value the in-memory driver serves.
pub const PROVIDER: &str = "InMemory";

/// The CSI driver whose volumes [`InMemoryDriver::get_volume_ids`] maps to volume IDs.
pub const CSI_DRIVER: &str = "inmemory.csi.mcm.dev";

/// A driver whose VMs live in an [`InMemoryCloud`]. Needs no credentials; the secret data is ignored.
#[derive(Clone, Debug)]
pub struct InMemoryDriver {
    cloud: InMemoryCloud,
}

impl InMemoryDriver {
    /// A driver over `cloud` (keep a clone of the cloud to look at its VMs and counters).
    pub fn new(cloud: InMemoryCloud) -> Self {
        InMemoryDriver { cloud }
    }

    /// The cloud this driver creates VMs in.
    pub fn cloud(&self) -> &InMemoryCloud {
        &self.cloud
    }
}

/// The class's providerSpec, once the class is known to be ours.
fn spec_of(class: &ClassInfo) -> Result<ProviderSpec, DriverError> {
    if class.provider != PROVIDER {
        return Err(DriverError::new(
            Code::InvalidArgument,
            format!(
                "machine class {:?} has provider {:?}, this driver serves {PROVIDER:?}",
                class.name, class.provider
            ),
        ));
    }
    ProviderSpec::parse(&class.provider_spec)
}

/// The spec of a per-machine request, which must name its machine.
fn machine_spec(request: &MachineRequest) -> Result<ProviderSpec, DriverError> {
    let spec = spec_of(&request.class)?;
    if request.machine.name.is_empty() {
        return Err(DriverError::new(Code::InvalidArgument, "the machine has no name"));
    }
    Ok(spec)
}

fn provider_id(request: &MachineRequest) -> Option<&str> {
    request.machine.provider_id.as_deref().filter(|id| !id.is_empty())
}

/// Exactly one VM, or `NotFound` / `OutOfRange`.
fn one(request: &MachineRequest, mut vms: Vec<Vm>) -> Result<Vm, DriverError> {
    let what = match provider_id(request) {
        Some(id) => format!("providerID {id:?}"),
        None => format!("machine {:?}", request.machine.name),
    };
    match vms.len() {
        0 => Err(DriverError::new(Code::NotFound, format!("no VM for {what}"))),
        1 => Ok(vms.remove(0)),
        n => {
            let ids: Vec<&str> = vms.iter().map(|vm| vm.provider_id.as_str()).collect();
            Err(DriverError::new(Code::OutOfRange, format!("{n} VMs claim {what}: {}", ids.join(", "))))
        }
    }
}

#[async_trait::async_trait]
impl Driver for InMemoryDriver {
    fn provider(&self) -> &str {
        PROVIDER
    }

    async fn create_machine(&self, request: &MachineRequest) -> Result<CreateMachineResponse, DriverError> {
        self.cloud.count(Call::Create);
        let vm =
            machine_spec(request).and_then(|spec| self.cloud.create(&request.machine, &spec)).inspect_err(|_| {
                self.cloud.count_create_error();
            })?;
        Ok(CreateMachineResponse {
            addresses: vm.addresses(),
            provider_id: vm.provider_id,
            node_name: vm.machine_name,
            last_known_state: None,
        })
    }

    async fn initialize_machine(&self, request: &MachineRequest) -> Result<InitializeMachineResponse, DriverError> {
        self.cloud.count(Call::Initialize);
        let spec = machine_spec(request)?;
        if !spec.require_initialize {
            return Err(DriverError::new(
                Code::Unimplemented,
                "nothing to initialize (providerSpec.requireInitialize is false)",
            ));
        }
        let vm = one(request, self.cloud.find(provider_id(request), &request.machine.name, &spec.cluster_tag))?;
        self.cloud.initialize(Some(&vm.provider_id), "", "");
        Ok(InitializeMachineResponse {
            addresses: vm.addresses(),
            provider_id: vm.provider_id,
            node_name: vm.machine_name,
        })
    }

    async fn delete_machine(&self, request: &MachineRequest) -> Result<DeleteMachineResponse, DriverError> {
        self.cloud.count(Call::Delete);
        // A providerID alone names the VM (an orphan may have no machine name); without one the name is needed.
        let spec = if provider_id(request).is_some() { spec_of(&request.class)? } else { machine_spec(request)? };
        if let Some(code) = spec.fail_delete {
            return Err(DriverError::new(code, "injected failure (providerSpec.failDelete)"));
        }
        // Without a providerID every VM of the machine in this cluster goes, as MCM's AWS driver does.
        self.cloud.delete(provider_id(request), &request.machine.name, &spec.cluster_tag);
        Ok(DeleteMachineResponse { last_known_state: None })
    }

    async fn get_machine_status(&self, request: &MachineRequest) -> Result<MachineStatusResponse, DriverError> {
        self.cloud.count(Call::Status);
        let spec = machine_spec(request)?;
        let vm = one(request, self.cloud.find(provider_id(request), &request.machine.name, &spec.cluster_tag))?;
        if !vm.initialized() {
            return Err(DriverError::new(Code::Uninitialized, format!("VM {} awaits initialization", vm.provider_id)));
        }
        Ok(MachineStatusResponse { addresses: vm.addresses(), provider_id: vm.provider_id, node_name: vm.machine_name })
    }

    async fn list_machines(&self, request: &ListMachinesRequest) -> Result<BTreeMap<String, String>, DriverError> {
        self.cloud.count(Call::List);
        let spec = spec_of(&request.class)?;
        Ok(self.cloud.list(&spec.cluster_tag, &spec.role_tag))
    }

    async fn get_volume_ids(&self, request: &GetVolumeIdsRequest) -> Result<Vec<String>, DriverError> {
        self.cloud.count(Call::VolumeIds);
        Ok(request
            .pv_specs
            .iter()
            .filter_map(|pv| pv.csi.as_ref())
            .filter(|csi| csi.driver == CSI_DRIVER)
            .map(|csi| csi.volume_handle.clone())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolumeSpec};
    use serde_json::{Value, json};

    use super::*;
    use crate::providers::inmemory::VmState;
    use crate::providers::{MachineInfo, SecretData};

    fn class(extra: Value) -> ClassInfo {
        let mut spec =
            json!({"tags": {"kubernetes.io/cluster/dev": "1", "kubernetes.io/role/node": "1"}, "bootSeconds": 10});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        ClassInfo { name: "c".into(), provider: PROVIDER.into(), provider_spec: spec, node_template: None }
    }

    fn request(name: &str, class: &ClassInfo) -> MachineRequest {
        MachineRequest {
            machine: MachineInfo { name: name.into(), namespace: "default".into(), ..Default::default() },
            class: class.clone(),
            secret: SecretData([("token".to_string(), b"s3cr3t-value".to_vec())].into()),
            last_known_state: None,
        }
    }

    fn with_id(mut r: MachineRequest, id: &str) -> MachineRequest {
        r.machine.provider_id = Some(id.into());
        r
    }

    fn driver(seed: u64) -> InMemoryDriver {
        InMemoryDriver::new(InMemoryCloud::with_seed(seed))
    }

    #[tokio::test(start_paused = true)]
    async fn create_is_idempotent_and_boots_in_time() {
        let d = driver(1);
        let c = class(json!({}));
        let first = d.create_machine(&request("m1", &c)).await.unwrap();
        let again = d.create_machine(&request("m1", &c)).await.unwrap();
        assert_eq!(first, again);
        assert_eq!(first.node_name, "m1");
        assert!(first.provider_id.starts_with("inmemory:///local-a/i-"));
        assert_eq!(first.addresses.len(), 2);
        let vm = d.cloud().vm(&first.provider_id).unwrap();
        assert_eq!(vm.state(tokio::time::Instant::now()), VmState::Booting);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(vm.state(tokio::time::Instant::now()), VmState::Running);
        let stats = d.cloud().stats();
        assert_eq!((stats.creates, stats.vms_created), (2, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn status_by_provider_id_or_name() {
        let d = driver(2);
        let c = class(json!({}));
        let created = d.create_machine(&request("m1", &c)).await.unwrap();
        let by_name = d.get_machine_status(&request("m1", &c)).await.unwrap();
        let by_id = d.get_machine_status(&with_id(request("other-name", &c), &created.provider_id)).await.unwrap();
        assert_eq!(by_name.provider_id, created.provider_id);
        assert_eq!(by_id.provider_id, created.provider_id);
        let cases = [
            ("absent name", request("m2", &c), Code::NotFound),
            ("absent id", with_id(request("m1", &c), "inmemory:///local-a/i-0"), Code::NotFound),
            (
                "other cluster",
                request("m1", &class(json!({"tags": {"kubernetes.io/cluster/x": "", "kubernetes.io/role/node": ""}}))),
                Code::NotFound,
            ),
        ];
        for (name, req, code) in cases {
            assert_eq!(d.get_machine_status(&req).await.unwrap_err().code, code, "{name}");
        }
        assert_eq!(d.cloud().stats().status_gets, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn several_vms_for_one_machine_are_out_of_range() {
        let d = driver(3);
        let dev = class(json!({}));
        d.create_machine(&request("m1", &dev)).await.unwrap();
        d.get_machine_status(&request("m1", &dev)).await.unwrap();
        // A leak: a VM created for cluster `third` that also carries dev's cluster key and the same machine name.
        let tags = json!({"tags": {"kubernetes.io/cluster/third": "", "kubernetes.io/cluster/dev": "", "kubernetes.io/role/node": ""}});
        let mut leak = ProviderSpec::parse(&class(tags).provider_spec).unwrap();
        leak.cluster_tag = "kubernetes.io/cluster/third".into();
        d.cloud().create(&MachineInfo { name: "m1".into(), ..Default::default() }, &leak).unwrap();
        let err = d.get_machine_status(&request("m1", &dev)).await.unwrap_err();
        assert_eq!(err.code, Code::OutOfRange, "{err}");
        assert!(err.message.contains("2 VMs claim machine \"m1\""), "{err}");
        // Deleting without a providerID removes both.
        d.delete_machine(&request("m1", &dev)).await.unwrap();
        assert!(d.cloud().live_vms().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn delete_is_idempotent_by_id_or_name() {
        let d = driver(4);
        let c = class(json!({}));
        let a = d.create_machine(&request("a", &c)).await.unwrap();
        d.create_machine(&request("b", &c)).await.unwrap();
        d.delete_machine(&with_id(request("a", &c), &a.provider_id)).await.unwrap();
        d.delete_machine(&with_id(request("a", &c), &a.provider_id)).await.unwrap();
        d.delete_machine(&request("b", &c)).await.unwrap();
        d.delete_machine(&request("never", &c)).await.unwrap();
        assert!(d.cloud().live_vms().is_empty());
        assert_eq!(d.get_machine_status(&request("a", &c)).await.unwrap_err().code, Code::NotFound);
        // A new VM for a deleted machine's name is a new VM.
        let again = d.create_machine(&request("a", &c)).await.unwrap();
        assert_ne!(again.provider_id, a.provider_id);
    }

    #[tokio::test(start_paused = true)]
    async fn list_returns_exactly_this_cluster_and_role() {
        let d = driver(5);
        let mine = class(json!({}));
        let other_cluster = class(json!({"tags": {"kubernetes.io/cluster/prod": "1", "kubernetes.io/role/node": "1"}}));
        let other_role = class(json!({"tags": {"kubernetes.io/cluster/dev": "1", "kubernetes.io/role/master": "1"}}));
        let a = d.create_machine(&request("a", &mine)).await.unwrap();
        let dead = d.create_machine(&request("dead", &mine)).await.unwrap();
        let gone = d.create_machine(&request("gone", &mine)).await.unwrap();
        d.create_machine(&request("p", &other_cluster)).await.unwrap();
        d.create_machine(&request("r", &other_role)).await.unwrap();
        d.cloud().kill(&dead.provider_id);
        d.delete_machine(&with_id(request("gone", &mine), &gone.provider_id)).await.unwrap();
        let listed =
            d.list_machines(&ListMachinesRequest { class: mine, secret: SecretData::default() }).await.unwrap();
        let want: BTreeMap<String, String> =
            [(a.provider_id, "a".to_string()), (dead.provider_id, "dead".to_string())].into();
        assert_eq!(listed, want);
    }

    #[tokio::test(start_paused = true)]
    async fn injected_failures() {
        let d = driver(6);
        let cases = [
            ("failCreate", json!({"failCreate": "ResourceExhausted"}), Some(Code::ResourceExhausted)),
            ("failCreate Unavailable", json!({"failCreate": "Unavailable"}), Some(Code::Unavailable)),
            ("rate 1", json!({"failCreateRate": 1.0}), Some(Code::Internal)),
            ("rate 0", json!({"failCreateRate": 0.0}), None),
        ];
        for (i, (name, extra, want)) in cases.into_iter().enumerate() {
            let got = d.create_machine(&request(&format!("m{i}"), &class(extra))).await.err().map(|e| e.code);
            assert_eq!(got, want, "{name}");
        }
        assert_eq!(d.cloud().stats().create_errors, 3);
        // About the configured share fails.
        let half = class(json!({"failCreateRate": 0.5}));
        let mut failed = 0;
        for i in 0..400 {
            if d.create_machine(&request(&format!("r{i}"), &half)).await.is_err() {
                failed += 1;
            }
        }
        assert!((140..=260).contains(&failed), "{failed} of 400 failed");
        // failDelete
        let c = class(json!({"failDelete": "Unavailable"}));
        assert_eq!(d.delete_machine(&request("m3", &c)).await.unwrap_err().code, Code::Unavailable);
    }

    #[tokio::test(start_paused = true)]
    async fn quota_is_resource_exhausted() {
        let d = driver(7);
        let c = class(json!({"quota": 2}));
        d.create_machine(&request("a", &c)).await.unwrap();
        d.create_machine(&request("b", &c)).await.unwrap();
        let err = d.create_machine(&request("c", &c)).await.unwrap_err();
        assert_eq!(err.code, Code::ResourceExhausted);
        assert!(err.message.contains("quota of 2"), "{err}");
        d.delete_machine(&request("a", &c)).await.unwrap();
        d.create_machine(&request("c", &c)).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn require_initialize() {
        let d = driver(8);
        let plain = class(json!({}));
        d.create_machine(&request("p", &plain)).await.unwrap();
        assert_eq!(d.initialize_machine(&request("p", &plain)).await.unwrap_err().code, Code::Unimplemented);

        let c = class(json!({"requireInitialize": true, "bootSeconds": 0}));
        assert_eq!(d.initialize_machine(&request("m", &c)).await.unwrap_err().code, Code::NotFound);
        let created = d.create_machine(&request("m", &c)).await.unwrap();
        assert_eq!(d.get_machine_status(&request("m", &c)).await.unwrap_err().code, Code::Uninitialized);
        assert_eq!(d.cloud().vm(&created.provider_id).unwrap().node_ready_at(), None);
        tokio::time::advance(Duration::from_secs(3)).await;
        let init = d.initialize_machine(&request("m", &c)).await.unwrap();
        assert_eq!(init.provider_id, created.provider_id);
        d.get_machine_status(&request("m", &c)).await.unwrap();
        // Initializing twice is harmless and keeps the first time.
        let vm = d.cloud().vm(&created.provider_id).unwrap();
        d.initialize_machine(&request("m", &c)).await.unwrap();
        assert_eq!(d.cloud().vm(&created.provider_id).unwrap().initialized_at, vm.initialized_at);
        assert_eq!(vm.node_ready_at(), vm.initialized_at);
    }

    #[tokio::test(start_paused = true)]
    async fn die_after_seconds() {
        let d = driver(9);
        let c = class(json!({"bootSeconds": 1, "dieAfterSeconds": 5}));
        let created = d.create_machine(&request("m", &c)).await.unwrap();
        let at = |secs| {
            let vm = d.cloud().vm(&created.provider_id).unwrap();
            vm.state(vm.created_at + Duration::from_secs(secs))
        };
        assert_eq!((at(0), at(1), at(5), at(6)), (VmState::Booting, VmState::Running, VmState::Running, VmState::Dead));
        tokio::time::advance(Duration::from_secs(7)).await;
        // A dead VM still exists for status and list, like a stopped instance.
        d.get_machine_status(&request("m", &c)).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn bad_requests_are_invalid_argument_without_secrets() {
        let d = driver(10);
        let mut wrong = class(json!({}));
        wrong.provider = "AWS".into();
        let bad = class(json!({"foo": 1}));
        let mut nameless = request("x", &class(json!({})));
        nameless.machine.name.clear();
        let cases = [
            ("provider mismatch", request("m", &wrong), "has provider \"AWS\""),
            ("unknown field", request("m", &bad), "providerSpec: unknown field \"foo\""),
            ("no name", nameless, "no name"),
        ];
        for (name, req, want) in cases {
            let errors = [
                d.create_machine(&req).await.err(),
                d.get_machine_status(&req).await.err(),
                d.delete_machine(&req).await.err(),
                d.initialize_machine(&req).await.err(),
            ];
            for err in errors {
                let err = err.unwrap_or_else(|| panic!("{name}: expected an error"));
                assert_eq!(err.code, Code::InvalidArgument, "{name}: {err}");
                assert!(err.message.contains(want), "{name}: {err}");
                assert!(!err.message.contains("s3cr3t"), "{name}: {err}");
            }
        }
        let list = d.list_machines(&ListMachinesRequest { class: wrong, secret: SecretData::default() }).await;
        assert_eq!(list.unwrap_err().code, Code::InvalidArgument);
    }

    #[tokio::test]
    async fn volume_ids_of_our_csi_driver_only() {
        let d = driver(11);
        let csi = |driver: &str, handle: &str| PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: driver.into(),
                volume_handle: handle.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let request = GetVolumeIdsRequest {
            pv_specs: vec![
                csi(CSI_DRIVER, "vol-1"),
                csi("ebs.csi.aws.com", "vol-aws"),
                PersistentVolumeSpec::default(),
                csi(CSI_DRIVER, "vol-2"),
            ],
        };
        assert_eq!(d.get_volume_ids(&request).await.unwrap(), vec!["vol-1".to_string(), "vol-2".to_string()]);
        assert_eq!(d.cloud().stats().volume_id_gets, 1);
    }
}
