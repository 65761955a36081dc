//! The simulated cloud: VMs and call counters behind a cloneable handle that outlives any controller or kubelet.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::NodeAddress;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::time::Instant;

use super::spec::{ProviderSpec, boot_delay, create_verdict};
use crate::api::mcm::NodeTemplateSpec;
use crate::providers::{DriverError, MachineInfo};

/// Where a VM is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VmState {
    /// Created, not booted yet.
    Booting,
    /// Booted and alive.
    Running,
    /// Died (`dieAfterSeconds` or [`InMemoryCloud::kill`]); it still exists, like a stopped instance.
    Dead,
    /// Deleted through the driver; kept as a tombstone until [`InMemoryCloud::forget_deleted`].
    Deleted,
}

/// A simulated VM (a snapshot: the cloud keeps the real one).
#[derive(Clone, Debug, PartialEq)]
pub struct Vm {
    /// The cloud's ID (`i-` and 16 hex digits).
    pub id: String,
    /// `inmemory:///<zone>/<id>`.
    pub provider_id: String,
    /// The machine it was created for (and the Node's name).
    pub machine_name: String,
    /// The machine's namespace.
    pub namespace: String,
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// Machine type (free text).
    pub machine_type: String,
    /// CPU capacity (a quantity).
    pub cpu: String,
    /// Memory capacity (a quantity).
    pub memory: String,
    /// The providerSpec tags.
    pub tags: BTreeMap<String, String>,
    /// Labels, annotations and taints its Node registers with.
    pub node_template: Option<NodeTemplateSpec>,
    /// What its kubelet reports as `status.nodeInfo.kubeletVersion`.
    pub kubelet_version: String,
    /// How many in-place updates it took ([`InMemoryCloud::update_in_place`]); the kubelet re-posts its Node's
    /// labels and status when this moves past what it posted.
    pub revision: u64,
    /// When it was created.
    pub created_at: Instant,
    /// When it finishes (or finished) booting.
    pub boot_at: Instant,
    /// When it was initialized (creation time unless the class asked for `requireInitialize`).
    pub initialized_at: Option<Instant>,
    /// When it dies (or died), if ever.
    pub dies_at: Option<Instant>,
    /// When it was deleted.
    pub deleted_at: Option<Instant>,
}

impl Vm {
    /// Its state at `now`.
    pub fn state(&self, now: Instant) -> VmState {
        if self.deleted_at.is_some() {
            VmState::Deleted
        } else if self.dies_at.is_some_and(|t| t <= now) {
            VmState::Dead
        } else if now < self.boot_at {
            VmState::Booting
        } else {
            VmState::Running
        }
    }

    /// Whether it still exists (dead VMs do, deleted ones don't).
    pub fn exists(&self) -> bool {
        self.deleted_at.is_none()
    }

    /// Whether it awaits `initialize_machine`.
    pub fn initialized(&self) -> bool {
        self.initialized_at.is_some()
    }

    /// When its Node can register: booted and initialized (`None` while uninitialized).
    pub fn node_ready_at(&self) -> Option<Instant> {
        self.initialized_at.map(|t| t.max(self.boot_at))
    }

    /// Whether it carries the tag key `key`.
    pub fn has_tag(&self, key: &str) -> bool {
        self.tags.contains_key(key)
    }

    /// Its private address, made up from its ID (stable across restarts of anything).
    pub fn internal_ip(&self) -> String {
        internal_ip(&self.id)
    }

    /// InternalIP and Hostname, as the Node and the driver report them.
    pub fn addresses(&self) -> Vec<NodeAddress> {
        vec![
            NodeAddress { type_: "InternalIP".into(), address: self.internal_ip() },
            NodeAddress { type_: "Hostname".into(), address: self.machine_name.clone() },
        ]
    }
}

/// A private address in 10.0.0.0/8 derived from `id` (FNV-1a, so it never changes between builds).
pub fn internal_ip(id: &str) -> String {
    let hash = id.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    let [_, a, b, c] = hash.to_be_bytes();
    // .0 and .255 look like network and broadcast addresses; keep clear of them.
    format!("10.{a}.{b}.{}", c.clamp(1, 254))
}

/// What an in-place update changes on a VM (`None`: keep). The VM keeps its ID, providerID, addresses and
/// tags, as an OS or kubelet update on a real instance does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VmUpdate {
    /// New machine type (the Node's `node.kubernetes.io/instance-type`).
    pub machine_type: Option<String>,
    /// New cpu capacity.
    pub cpu: Option<String>,
    /// New memory capacity.
    pub memory: Option<String>,
    /// New `status.nodeInfo.kubeletVersion`.
    pub kubelet_version: Option<String>,
    /// New node template (what a re-registered Node would carry; MCM syncs it onto the live Node itself).
    pub node_template: Option<NodeTemplateSpec>,
}

impl VmUpdate {
    /// The update to the machine type, capacity and kubelet version of `spec`, and `node_template`.
    pub fn from_spec(spec: &ProviderSpec, node_template: Option<NodeTemplateSpec>) -> Self {
        VmUpdate {
            machine_type: Some(spec.machine_type.clone()),
            cpu: Some(spec.cpu.clone()),
            memory: Some(spec.memory.clone()),
            kubelet_version: Some(spec.kubelet_version.clone()),
            node_template,
        }
    }

    /// Applies it to `vm`; true if anything changed.
    fn apply(&self, vm: &mut Vm) -> bool {
        let before = vm.clone();
        let set = |field: &mut String, value: &Option<String>| {
            if let Some(value) = value {
                field.clone_from(value);
            }
        };
        set(&mut vm.machine_type, &self.machine_type);
        set(&mut vm.cpu, &self.cpu);
        set(&mut vm.memory, &self.memory);
        set(&mut vm.kubelet_version, &self.kubelet_version);
        if self.node_template.is_some() {
            vm.node_template.clone_from(&self.node_template);
        }
        *vm != before
    }
}

/// How often each driver method was called, and what the cloud did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CloudStats {
    /// `create_machine` calls.
    pub creates: u64,
    /// `create_machine` calls that failed (injected failures, quota, bad input).
    pub create_errors: u64,
    /// `initialize_machine` calls.
    pub initializes: u64,
    /// `delete_machine` calls.
    pub deletes: u64,
    /// `get_machine_status` calls.
    pub status_gets: u64,
    /// `list_machines` calls.
    pub lists: u64,
    /// `get_volume_ids` calls.
    pub volume_id_gets: u64,
    /// VMs created (creates that found an existing VM do not count).
    pub vms_created: u64,
    /// VMs deleted.
    pub vms_deleted: u64,
    /// VMs killed by [`InMemoryCloud::kill`].
    pub kills: u64,
    /// VMs changed by [`InMemoryCloud::update_in_place`].
    pub in_place_updates: u64,
}

/// A driver method, for counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Call {
    Create,
    Initialize,
    Delete,
    Status,
    List,
    VolumeIds,
}

struct State {
    vms: BTreeMap<String, Vm>,
    rng: StdRng,
    stats: CloudStats,
}

struct Inner {
    state: Mutex<State>,
    /// Bumped on every change, so a kubelet can sleep until something happens.
    changes: watch::Sender<u64>,
}

/// A handle to a simulated cloud. Clones share the same VMs; the cloud lives as long as any handle.
#[derive(Clone)]
pub struct InMemoryCloud {
    inner: Arc<Inner>,
}

impl Default for InMemoryCloud {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for InMemoryCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("InMemoryCloud").field("vms", &state.vms.len()).field("stats", &state.stats).finish()
    }
}

impl InMemoryCloud {
    /// An empty cloud with a random seed for IDs, boot jitter and injected failures.
    pub fn new() -> Self {
        Self::with_seed(rand::random())
    }

    /// An empty cloud whose IDs, jitter and injected failures follow `seed` (reproducible tests).
    pub fn with_seed(seed: u64) -> Self {
        let state = State { vms: BTreeMap::new(), rng: StdRng::seed_from_u64(seed), stats: CloudStats::default() };
        let (changes, _) = watch::channel(0);
        InMemoryCloud { inner: Arc::new(Inner { state: Mutex::new(state), changes }) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-written VM behind (every write is one insert or
        // field assignment), so a poisoned lock is safe to keep using.
        self.inner.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn changed(&self) {
        self.inner.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The call counters.
    pub fn stats(&self) -> CloudStats {
        self.lock().stats
    }

    /// Every VM, deleted ones included, oldest first.
    pub fn vms(&self) -> Vec<Vm> {
        let mut vms: Vec<Vm> = self.lock().vms.values().cloned().collect();
        vms.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        vms
    }

    /// Runs `f` over every VM by VM ID (deleted ones included) without copying them; the cloud is locked
    /// meanwhile, so `f` must be quick.
    pub fn inspect<R>(&self, f: impl FnOnce(&BTreeMap<String, Vm>) -> R) -> R {
        f(&self.lock().vms)
    }

    /// The VMs that exist (not deleted), oldest first.
    pub fn live_vms(&self) -> Vec<Vm> {
        self.vms().into_iter().filter(Vm::exists).collect()
    }

    /// The VM with this providerID, deleted or not.
    pub fn vm(&self, provider_id: &str) -> Option<Vm> {
        self.lock().vms.values().find(|vm| vm.provider_id == provider_id).cloned()
    }

    /// Kills a VM now: it stays (dead) until deleted, and its Node goes `Unknown`. False if no such live VM.
    pub fn kill(&self, provider_id: &str) -> bool {
        let now = Instant::now();
        let killed = {
            let mut state = self.lock();
            let vm = state.vms.values_mut().find(|vm| vm.provider_id == provider_id && vm.exists());
            match vm {
                Some(vm) if vm.state(now) != VmState::Dead => {
                    vm.dies_at = Some(now);
                    true
                }
                _ => false,
            }
        };
        if killed {
            self.lock().stats.kills += 1;
            self.changed();
        }
        killed
    }

    /// Updates a VM in place (what Gardener's node agent does to an OS image and kubelet): same VM, new
    /// template. When anything changed its revision goes up, so the kubelet re-posts the Node (an update to what
    /// the VM already is changes nothing). False if no such VM exists or it is dead.
    pub fn update_in_place(&self, provider_id: &str, update: &VmUpdate) -> bool {
        let now = Instant::now();
        let (found, changed) = {
            let mut state = self.lock();
            let state = &mut *state;
            let vm = state.vms.values_mut().find(|vm| vm.provider_id == provider_id && vm.exists());
            match vm {
                Some(vm) if vm.state(now) != VmState::Dead => {
                    let changed = update.apply(vm);
                    if changed {
                        vm.revision += 1;
                        state.stats.in_place_updates += 1;
                    }
                    (true, changed)
                }
                _ => (false, false),
            }
        };
        if changed {
            self.changed();
        }
        found
    }

    /// Adds a VM made outside any driver of ours (another tool's, or by hand), tagged with `tags` (none: an
    /// untagged VM), in zone `local-a`. It never boots, so no Node registers for it. Returns it.
    pub fn plant(&self, name: &str, tags: BTreeMap<String, String>) -> Vm {
        let now = Instant::now();
        let vm = {
            let mut state = self.lock();
            let id = loop {
                let id = format!("i-{:016x}", state.rng.random::<u64>());
                if !state.vms.contains_key(&id) {
                    break id;
                }
            };
            let vm = Vm {
                provider_id: format!("inmemory:///local-a/{id}"),
                id: id.clone(),
                machine_name: name.to_string(),
                namespace: String::new(),
                region: "local".into(),
                zone: "local-a".into(),
                machine_type: "m.medium".into(),
                cpu: "2".into(),
                memory: "4Gi".into(),
                tags,
                node_template: None,
                kubelet_version: String::new(),
                revision: 0,
                created_at: now,
                // A century: never within a run.
                boot_at: now + Duration::from_secs(100 * 365 * 24 * 3600),
                initialized_at: Some(now),
                dies_at: None,
                deleted_at: None,
            };
            state.vms.insert(id, vm.clone());
            vm
        };
        self.changed();
        vm
    }

    /// Drops the tombstones of deleted VMs (long runs); returns how many went.
    pub fn forget_deleted(&self) -> usize {
        let mut state = self.lock();
        let before = state.vms.len();
        state.vms.retain(|_, vm| vm.exists());
        before - state.vms.len()
    }

    /// A receiver that sees a new value whenever a VM is created, initialized, updated in place, killed or
    /// deleted.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    pub(super) fn count(&self, call: Call) {
        let mut state = self.lock();
        let s = &mut state.stats;
        let counter = match call {
            Call::Create => &mut s.creates,
            Call::Initialize => &mut s.initializes,
            Call::Delete => &mut s.deletes,
            Call::Status => &mut s.status_gets,
            Call::List => &mut s.lists,
            Call::VolumeIds => &mut s.volume_id_gets,
        };
        *counter += 1;
    }

    pub(super) fn count_create_error(&self) {
        self.lock().stats.create_errors += 1;
    }

    /// The existing VM for this machine in the spec's cluster, or a new one if the spec's failures and quota
    /// allow it. One lock around lookup and insert keeps concurrent creates of one machine to one VM.
    pub(super) fn create(&self, machine: &MachineInfo, spec: &ProviderSpec) -> Result<Vm, DriverError> {
        let now = Instant::now();
        let vm = {
            let mut state = self.lock();
            let state = &mut *state;
            let mut mine = state.vms.values().filter(|vm| vm.exists() && vm.has_tag(&spec.cluster_tag));
            if let Some(existing) = mine.clone().find(|vm| vm.machine_name == machine.name) {
                return Ok(existing.clone());
            }
            let existing = mine.by_ref().count();
            let (fail_sample, jitter_sample): (f64, f64) = (state.rng.random(), state.rng.random());
            create_verdict(spec, existing, fail_sample)?;
            let id = loop {
                let id = format!("i-{:016x}", state.rng.random::<u64>());
                if !state.vms.contains_key(&id) {
                    break id;
                }
            };
            let boot_at = now + boot_delay(spec.boot_seconds, spec.boot_jitter, jitter_sample);
            let vm = Vm {
                provider_id: format!("inmemory:///{}/{id}", spec.zone),
                id: id.clone(),
                machine_name: machine.name.clone(),
                namespace: machine.namespace.clone(),
                region: spec.region.clone(),
                zone: spec.zone.clone(),
                machine_type: spec.machine_type.clone(),
                cpu: spec.cpu.clone(),
                memory: spec.memory.clone(),
                tags: spec.tags.clone(),
                node_template: machine.node_template.clone(),
                kubelet_version: spec.kubelet_version.clone(),
                revision: 0,
                created_at: now,
                boot_at,
                initialized_at: (!spec.require_initialize).then_some(now),
                dies_at: spec.life_after_boot().map(|life| boot_at + life),
                deleted_at: None,
            };
            state.vms.insert(id, vm.clone());
            state.stats.vms_created += 1;
            vm
        };
        self.changed();
        Ok(vm)
    }

    /// The existing VMs a request means: the one with `provider_id` if given, else those named `machine_name`
    /// carrying `cluster_tag`.
    pub(super) fn find(&self, provider_id: Option<&str>, machine_name: &str, cluster_tag: &str) -> Vec<Vm> {
        self.lock()
            .vms
            .values()
            .filter(|vm| vm.exists() && matches(vm, provider_id, machine_name, cluster_tag))
            .cloned()
            .collect()
    }

    /// Marks the VMs a request means initialized; returns them.
    pub(super) fn initialize(&self, provider_id: Option<&str>, machine_name: &str, cluster_tag: &str) -> Vec<Vm> {
        let now = Instant::now();
        let (found, changed) = {
            let mut state = self.lock();
            let mut changed = false;
            let mut found = Vec::new();
            for vm in
                state.vms.values_mut().filter(|vm| vm.exists() && matches(vm, provider_id, machine_name, cluster_tag))
            {
                if vm.initialized_at.is_none() {
                    vm.initialized_at = Some(now);
                    changed = true;
                }
                found.push(vm.clone());
            }
            (found, changed)
        };
        if changed {
            self.changed();
        }
        found
    }

    /// Deletes the VMs a request means; returns how many went.
    pub(super) fn delete(&self, provider_id: Option<&str>, machine_name: &str, cluster_tag: &str) -> usize {
        let now = Instant::now();
        let deleted = {
            let mut state = self.lock();
            let mut deleted = 0;
            for vm in
                state.vms.values_mut().filter(|vm| vm.exists() && matches(vm, provider_id, machine_name, cluster_tag))
            {
                vm.deleted_at = Some(now);
                deleted += 1;
            }
            state.stats.vms_deleted += deleted as u64;
            deleted
        };
        if deleted > 0 {
            self.changed();
        }
        deleted
    }

    /// The existing VMs carrying both tag keys: providerID -> machine name.
    pub(super) fn list(&self, cluster_tag: &str, role_tag: &str) -> BTreeMap<String, String> {
        self.lock()
            .vms
            .values()
            .filter(|vm| vm.exists() && vm.has_tag(cluster_tag) && vm.has_tag(role_tag))
            .map(|vm| (vm.provider_id.clone(), vm.machine_name.clone()))
            .collect()
    }

    /// Time until the next VM boots or dies after `now` (for tests and tools that want to step time).
    pub fn next_event_in(&self, now: Instant) -> Option<Duration> {
        self.lock()
            .vms
            .values()
            .filter(|vm| vm.exists())
            .flat_map(|vm| [Some(vm.boot_at), vm.dies_at])
            .flatten()
            .filter(|t| *t > now)
            .min()
            .map(|t| t - now)
    }
}

fn matches(vm: &Vm, provider_id: Option<&str>, machine_name: &str, cluster_tag: &str) -> bool {
    match provider_id {
        Some(id) => vm.provider_id == id,
        None => vm.machine_name == machine_name && vm.has_tag(cluster_tag),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(extra: serde_json::Value) -> ProviderSpec {
        let mut v = json!({"tags": {"kubernetes.io/cluster/dev": "1", "kubernetes.io/role/node": "1"}});
        for (k, val) in extra.as_object().unwrap() {
            v[k] = val.clone();
        }
        ProviderSpec::parse(&v).unwrap()
    }

    fn machine(name: &str) -> MachineInfo {
        MachineInfo { name: name.into(), namespace: "default".into(), ..Default::default() }
    }

    #[test]
    fn internal_ips_are_stable_and_private() {
        assert_eq!(internal_ip("i-0000000000000001"), internal_ip("i-0000000000000001"));
        assert_ne!(internal_ip("i-0000000000000001"), internal_ip("i-0000000000000002"));
        for i in 0..200 {
            let ip = internal_ip(&format!("i-{i:016x}"));
            let octets: Vec<u32> = ip.split('.').map(|o| o.parse().unwrap()).collect();
            assert_eq!(octets[0], 10);
            assert!((1..=254).contains(&octets[3]), "{ip}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn vm_life_follows_boot_and_death_times() {
        let cloud = InMemoryCloud::with_seed(1);
        let vm = cloud.create(&machine("m1"), &spec(json!({"bootSeconds": 5, "dieAfterSeconds": 10}))).unwrap();
        let t0 = vm.created_at;
        assert!(vm.provider_id.starts_with("inmemory:///local-a/i-"), "{}", vm.provider_id);
        let cases = [
            (0, VmState::Booting),
            (4, VmState::Booting),
            (5, VmState::Running),
            (14, VmState::Running),
            (15, VmState::Dead),
        ];
        for (secs, want) in cases {
            assert_eq!(vm.state(t0 + Duration::from_secs(secs)), want, "at {secs}s");
        }
        assert_eq!(cloud.next_event_in(t0), Some(Duration::from_secs(5)));
        assert_eq!(cloud.next_event_in(t0 + Duration::from_secs(5)), Some(Duration::from_secs(10)));
        assert_eq!(vm.node_ready_at(), Some(t0 + Duration::from_secs(5)));
    }

    #[tokio::test(start_paused = true)]
    async fn kill_and_delete_are_observable() {
        let cloud = InMemoryCloud::with_seed(2);
        let mut changes = cloud.subscribe();
        let vm = cloud.create(&machine("m1"), &spec(json!({"bootSeconds": 1}))).unwrap();
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(cloud.kill(&vm.provider_id));
        assert!(!cloud.kill(&vm.provider_id), "already dead");
        assert!(!cloud.kill("inmemory:///local-a/i-nothing"));
        assert!(changes.has_changed().unwrap());
        assert_eq!(cloud.vm(&vm.provider_id).unwrap().state(Instant::now()), VmState::Dead);
        assert_eq!(cloud.live_vms().len(), 1, "a dead VM still exists");
        assert_eq!(cloud.delete(Some(&vm.provider_id), "", ""), 1);
        assert_eq!(cloud.delete(Some(&vm.provider_id), "", ""), 0);
        assert_eq!(cloud.vm(&vm.provider_id).unwrap().state(Instant::now()), VmState::Deleted);
        assert!(cloud.live_vms().is_empty());
        assert_eq!(cloud.forget_deleted(), 1);
        assert!(cloud.vms().is_empty());
        let stats = cloud.stats();
        assert_eq!((stats.vms_created, stats.vms_deleted, stats.kills), (1, 1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn update_in_place_keeps_the_vm_and_takes_the_new_template() {
        let cloud = InMemoryCloud::with_seed(4);
        let vm = cloud.create(&machine("m1"), &spec(json!({"bootSeconds": 0}))).unwrap();
        let mut changes = cloud.subscribe();
        changes.borrow_and_update();
        let newer = spec(json!({"machineType": "m.large", "memory": "8Gi", "kubeletVersion": "v1.38.0"}));
        assert!(cloud.update_in_place(&vm.provider_id, &VmUpdate::from_spec(&newer, None)));
        assert!(changes.has_changed().unwrap());
        let after = cloud.vm(&vm.provider_id).unwrap();
        assert_eq!((after.id.as_str(), after.provider_id.as_str()), (vm.id.as_str(), vm.provider_id.as_str()));
        assert_eq!((after.machine_type.as_str(), after.memory.as_str()), ("m.large", "8Gi"));
        assert_eq!((after.kubelet_version.as_str(), after.revision), ("v1.38.0", 1));
        // Only what the update names changes.
        assert!(cloud.update_in_place(&vm.provider_id, &VmUpdate { cpu: Some("8".into()), ..Default::default() }));
        let after = cloud.vm(&vm.provider_id).unwrap();
        assert_eq!((after.cpu.as_str(), after.machine_type.as_str(), after.revision), ("8", "m.large", 2));
        changes.borrow_and_update();
        assert!(cloud.update_in_place(&vm.provider_id, &VmUpdate::from_spec(&newer, None)));
        assert_eq!(cloud.vm(&vm.provider_id).unwrap().revision, 3, "cpu went back to the spec's");
        changes.borrow_and_update();
        assert!(cloud.update_in_place(&vm.provider_id, &VmUpdate::from_spec(&newer, None)), "the VM exists");
        assert_eq!(cloud.vm(&vm.provider_id).unwrap().revision, 3, "nothing changed");
        assert!(!changes.has_changed().unwrap(), "and nobody was told");
        assert!(!cloud.update_in_place("inmemory:///local-a/i-nothing", &VmUpdate::default()));
        cloud.kill(&vm.provider_id);
        assert!(!cloud.update_in_place(&vm.provider_id, &VmUpdate::default()), "a dead VM is not updated");
        assert_eq!(cloud.stats().in_place_updates, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn quota_counts_existing_vms_of_the_cluster_only() {
        let cloud = InMemoryCloud::with_seed(3);
        let quota = spec(json!({"quota": 2}));
        let other = spec(json!({"tags": {"kubernetes.io/cluster/other": "1", "kubernetes.io/role/node": "1"}}));
        cloud.create(&machine("o1"), &other).unwrap();
        cloud.create(&machine("a"), &quota).unwrap();
        let b = cloud.create(&machine("b"), &quota).unwrap();
        assert_eq!(cloud.create(&machine("c"), &quota).unwrap_err().code, crate::providers::Code::ResourceExhausted);
        // The existing VM is returned even at quota.
        assert_eq!(cloud.create(&machine("b"), &quota).unwrap().id, b.id);
        // A dead VM still counts; a deleted one frees its slot.
        cloud.kill(&b.provider_id);
        assert!(cloud.create(&machine("c"), &quota).is_err());
        cloud.delete(Some(&b.provider_id), "", "");
        cloud.create(&machine("c"), &quota).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn same_seed_same_ids() {
        let ids = |seed| {
            let cloud = InMemoryCloud::with_seed(seed);
            (0..3).map(|i| cloud.create(&machine(&format!("m{i}")), &spec(json!({}))).unwrap().id).collect::<Vec<_>>()
        };
        assert_eq!(ids(7), ids(7));
        assert_ne!(ids(7), ids(8));
    }
}
