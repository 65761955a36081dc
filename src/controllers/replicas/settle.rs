//! Read-your-writes for reconciles that count: a MachineSet that created three machines must not, on its next
//! reconcile, see only one of them in the store and create two more; a MachineDeployment must not scale a set
//! again from the size it had before its own patch. A reconcile records what it wrote ([`Written`]) and, before
//! it ends, waits until the shared stores show it ([`Written::settle`]). kube-runtime never reconciles one object
//! twice at once, so the next reconcile starts from a view that includes this one's writes.
//!
//! This is what MCM's expectations were for (they are recorded but the check is commented out there). The wait
//! is bounded: a watch that is down must not hold a worker forever, so after [`LIMIT`] the reconcile ends anyway
//! and says so in the log. What it wrote is carried to the object's next reconciles ([`Unsettled`]): they count
//! nothing until the stores show it (as upstream Kubernetes' controllers wait for their expectations), for at most
//! [`CARRY_LIMIT`]. A controller slower than its watch (10,000 machines on two cores) would otherwise act on a
//! view without its last batch and create that batch again.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::controllers::context::lock;

use kube::Resource;
use kube::runtime::reflector::{Lookup, ObjectRef, Store};

use crate::api::mcm::{Machine, MachineDeployment, MachineSet};

/// The longest wait for the stores.
const LIMIT: Duration = Duration::from_secs(10);
/// How often the stores are looked at while waiting.
const POLL: Duration = Duration::from_millis(5);
/// How long an object's later reconciles wait for the writes of one the stores did not show in time before they go
/// on regardless: upstream Kubernetes' `ExpectationsTimeout`, so a watch that lost an event (a machine created and
/// deleted before the store saw it) holds a set for minutes, not for good.
pub(crate) const CARRY_LIMIT: Duration = Duration::from_secs(5 * 60);
/// How soon a reconcile held by unseen writes looks again.
pub(crate) const CARRY_RETRY: Duration = Duration::from_secs(1);

/// What the store must show.
#[derive(Debug)]
pub(crate) enum Expect {
    /// The object exists (we created it).
    Exists,
    /// The object is gone or being deleted (we deleted it).
    Deleting,
    /// We changed the object from version `from` to version `to`: the store must show `to` or a later version.
    /// A version between the two (another writer's, say the Machine controller's status write, arriving late)
    /// does not count. Versions are compared as numbers where both sides are (etcd's and the embedded server's
    /// are); otherwise any version other than `from` counts.
    Reached {
        /// The version our write started from.
        from: String,
        /// The version our write made.
        to: String,
    },
}

#[derive(Debug)]
pub(crate) struct Entry {
    namespace: String,
    name: String,
    expect: Expect,
}

impl Entry {
    pub(crate) fn seen<K>(&self, store: &Store<K>) -> bool
    where
        K: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
    {
        let found = store.get(&ObjectRef::new(&self.name).within(&self.namespace));
        match &self.expect {
            Expect::Exists => found.is_some(),
            Expect::Deleting => found.is_none_or(|o| o.meta().deletion_timestamp.is_some()),
            Expect::Reached { from, to } => found.is_none_or(|o| {
                let shown = o.meta().resource_version.as_deref().unwrap_or_default();
                match (shown.parse::<u64>(), to.parse::<u64>()) {
                    (Ok(shown), Ok(to)) => shown >= to,
                    _ => shown != from,
                }
            }),
        }
    }
}

/// The writes of one reconcile, per kind: Machines, MachineSets and MachineDeployments, of MCM's API (the
/// default) or of CAPI's.
#[derive(Debug)]
pub(crate) struct Written<M = Machine, S = MachineSet, D = MachineDeployment> {
    machines: Vec<Entry>,
    sets: Vec<Entry>,
    deployments: Vec<Entry>,
    kinds: PhantomData<(M, S, D)>,
}

impl<M, S, D> Default for Written<M, S, D> {
    fn default() -> Self {
        Written { machines: Vec::new(), sets: Vec::new(), deployments: Vec::new(), kinds: PhantomData }
    }
}

pub(crate) fn entry<K: Resource>(object: &K, expect: Expect) -> Entry {
    Entry {
        namespace: object.meta().namespace.clone().unwrap_or_default(),
        name: object.meta().name.clone().unwrap_or_default(),
        expect,
    }
}

/// An entry for a write that took `before` to `after`; none when the server wrote nothing (same version).
pub(crate) fn changed<K: Resource>(before: &K, after: &K) -> Option<Entry> {
    let from = before.meta().resource_version.clone()?;
    let to = after.meta().resource_version.clone()?;
    (to != from).then(|| entry(before, Expect::Reached { from, to }))
}

impl<M, S, D> Written<M, S, D>
where
    M: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
    S: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
    D: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
{
    /// A machine we created.
    pub(crate) fn machine_created(&mut self, created: &M) {
        self.machines.push(entry(created, Expect::Exists));
    }

    /// A machine we deleted.
    pub(crate) fn machine_deleted(&mut self, machine: &M) {
        self.machines.push(entry(machine, Expect::Deleting));
    }

    /// A machine we changed from `before` to `after`.
    pub(crate) fn machine_changed(&mut self, before: &M, after: &M) {
        self.machines.extend(changed(before, after));
    }

    /// A set we created.
    pub(crate) fn set_created(&mut self, created: &S) {
        self.sets.push(entry(created, Expect::Exists));
    }

    /// A set we deleted.
    pub(crate) fn set_deleted(&mut self, set: &S) {
        self.sets.push(entry(set, Expect::Deleting));
    }

    /// A set we changed from `before` to `after`.
    pub(crate) fn set_changed(&mut self, before: &S, after: &S) {
        self.sets.extend(changed(before, after));
    }

    /// A deployment we changed from `before` to `after`.
    pub(crate) fn deployment_changed(&mut self, before: &D, after: &D) {
        self.deployments.extend(changed(before, after));
    }

    /// Waits (at most [`LIMIT`]) until the stores show every write of the machines only, then forgets them:
    /// used before a step that must see its machine writes (the autoscaler's marks before a scale-down).
    pub(crate) async fn settle_machines(&mut self, machines: &Store<M>, what: &str) {
        let pending = std::mem::take(&mut self.machines);
        wait(what, || pending.iter().all(|e| e.seen(machines))).await;
    }

    /// Whether the stores show every write.
    fn seen(&self, machines: &Store<M>, sets: &Store<S>, deployments: &Store<D>) -> bool {
        self.machines.iter().all(|e| e.seen(machines))
            && self.sets.iter().all(|e| e.seen(sets))
            && self.deployments.iter().all(|e| e.seen(deployments))
    }

    /// Waits (at most [`LIMIT`]) until the stores show every write; what they do not show by then is returned,
    /// for the object's next reconcile to wait for ([`Unsettled::carry`]).
    pub(crate) async fn settle(
        self,
        machines: &Store<M>,
        sets: &Store<S>,
        deployments: &Store<D>,
        what: &str,
    ) -> Option<Self> {
        if self.machines.is_empty() && self.sets.is_empty() && self.deployments.is_empty() {
            return None;
        }
        match wait(what, || self.seen(machines, sets, deployments)).await {
            true => None,
            false => Some(self),
        }
    }
}

/// Waits (at most [`LIMIT`]) until `done`; whether it came.
pub(crate) async fn wait(what: &str, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !done() {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(object = %what, "the watches did not show this reconcile's writes within {LIMIT:?}");
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
    true
}

/// Writes of a reconcile the stores did not show in time, and when it ended.
type Carried<M, S, D> = (Written<M, S, D>, Instant);

/// Writes of earlier reconciles the stores did not show in time, per object (its key).
pub(crate) struct Unsettled<M = Machine, S = MachineSet, D = MachineDeployment> {
    pending: Mutex<HashMap<String, Carried<M, S, D>>>,
}

impl<M, S, D> Default for Unsettled<M, S, D> {
    fn default() -> Self {
        Unsettled { pending: Mutex::new(HashMap::new()) }
    }
}

impl<M, S, D> Unsettled<M, S, D>
where
    M: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
    S: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
    D: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
{
    /// Keeps what a reconcile of `key` wrote and the stores did not show, for its next reconciles.
    pub(crate) fn carry(&self, key: &str, written: Written<M, S, D>) {
        lock(&self.pending).insert(key.to_string(), (written, Instant::now()));
    }

    /// Whether a reconcile of `key` must wait for an earlier one's writes: `Some(when to look again)` while the
    /// stores do not show them and they are younger than [`CARRY_LIMIT`]; `None` (and forgotten) otherwise.
    pub(crate) fn hold(
        &self,
        key: &str,
        machines: &Store<M>,
        sets: &Store<S>,
        deployments: &Store<D>,
    ) -> Option<Duration> {
        let mut pending = lock(&self.pending);
        let (written, since) = pending.get(key)?;
        if written.seen(machines, sets, deployments) {
            pending.remove(key);
            return None;
        }
        if since.elapsed() >= CARRY_LIMIT {
            tracing::warn!(object = %key, "the watches never showed an earlier reconcile's writes; going on without them");
            pending.remove(key);
            return None;
        }
        Some(CARRY_RETRY)
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;

    use super::*;

    fn machine(name: &str, rv: &str, deleting: bool) -> Machine {
        let mut m = Machine::new(name, Default::default());
        m.metadata.namespace = Some("ns".into());
        m.metadata.resource_version = Some(rv.into());
        if deleting {
            m.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-03-01T12:00:00Z".parse().unwrap()));
        }
        m
    }

    #[test]
    fn expectations_table() {
        let mut writer: Writer<Machine> = Writer::default();
        let store = writer.as_reader();
        writer.apply_watcher_event(&watcher::Event::Apply(machine("a", "2", false)));
        writer.apply_watcher_event(&watcher::Event::Apply(machine("b", "5", true)));
        // (case, entry, seen)
        let cases = [
            ("created and listed", entry(&machine("a", "1", false), Expect::Exists), true),
            ("created, not listed yet", entry(&machine("x", "1", false), Expect::Exists), false),
            ("deleted, shown deleting", entry(&machine("b", "4", false), Expect::Deleting), true),
            ("deleted, gone", entry(&machine("y", "4", false), Expect::Deleting), true),
            ("deleted, not shown yet", entry(&machine("a", "2", false), Expect::Deleting), false),
            ("changed, shown", changed(&machine("a", "1", false), &machine("a", "2", false)).unwrap(), true),
            ("changed, not shown yet", changed(&machine("a", "2", false), &machine("a", "3", false)).unwrap(), false),
            // The store shows version 2, another writer's, between ours (1 -> 4): not our write yet.
            ("changed, store between", changed(&machine("a", "1", false), &machine("a", "4", false)).unwrap(), false),
            ("changed, store beyond", changed(&machine("b", "3", false), &machine("b", "4", false)).unwrap(), true),
            ("opaque versions", changed(&machine("a", "x", false), &machine("a", "y", false)).unwrap(), true),
        ];
        for (name, e, seen) in cases {
            assert_eq!(e.seen(&store), seen, "{name}");
        }
        assert!(
            changed(&machine("a", "2", false), &machine("a", "2", false)).is_none(),
            "no-op writes wait for nothing"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_whose_writes_were_not_shown_holds_the_next_until_they_are_or_too_long() {
        let mut writer: Writer<Machine> = Writer::default();
        let machines = writer.as_reader();
        let (sets, deployments) = (Writer::<MachineSet>::default().as_reader(), Writer::default().as_reader());
        let unsettled: Unsettled = Unsettled::default();
        let hold = |key| unsettled.hold(key, &machines, &sets, &deployments);
        assert_eq!(hold("set:ns/s"), None, "nothing carried");

        // A pass created machine "a"; the store had not shown it when the pass ended.
        let mut written: Written = Written::default();
        written.machine_created(&machine("a", "1", false));
        let unseen = written.settle(&machines, &sets, &deployments, "ns/s").await.expect("not shown within LIMIT");
        unsettled.carry("set:ns/s", unseen);
        assert_eq!(hold("set:ns/s"), Some(CARRY_RETRY), "the next pass waits");
        assert_eq!(hold("set:ns/other"), None, "other objects do not");
        writer.apply_watcher_event(&watcher::Event::Apply(machine("a", "1", false)));
        assert_eq!(hold("set:ns/s"), None, "shown: the pass goes on");
        writer.apply_watcher_event(&watcher::Event::Delete(machine("a", "1", false)));
        assert_eq!(hold("set:ns/s"), None, "and the carried writes are forgotten");

        // A machine the store never shows (created and deleted before the watch saw it) holds for CARRY_LIMIT.
        let mut written: Written = Written::default();
        written.machine_created(&machine("b", "1", false));
        unsettled.carry("set:ns/s", written);
        tokio::time::advance(CARRY_LIMIT - Duration::from_secs(1)).await;
        assert_eq!(hold("set:ns/s"), Some(CARRY_RETRY));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(hold("set:ns/s"), None, "waited long enough");
        assert_eq!(hold("set:ns/s"), None);
    }
}
