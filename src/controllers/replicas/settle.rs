//! Read-your-writes for reconciles that count: a MachineSet that created three machines must not, on its next
//! reconcile, see only one of them in the store and create two more; a MachineDeployment must not scale a set
//! again from the size it had before its own patch. A reconcile records what it wrote ([`Written`]) and, before
//! it ends, waits until the shared stores show it ([`Written::settle`]). kube-runtime never reconciles one object
//! twice at once, so the next reconcile starts from a view that includes this one's writes.
//!
//! This is what MCM's expectations were for (they are recorded but the check is commented out there). The wait
//! is bounded: a watch that is down must not hold a worker forever, so after [`LIMIT`] the reconcile ends anyway
//! and says so in the log.

use std::marker::PhantomData;
use std::time::Duration;

use kube::Resource;
use kube::runtime::reflector::{Lookup, ObjectRef, Store};

use crate::api::mcm::{Machine, MachineDeployment, MachineSet};

/// The longest wait for the stores.
const LIMIT: Duration = Duration::from_secs(10);
/// How often the stores are looked at while waiting.
const POLL: Duration = Duration::from_millis(5);

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

    /// Waits (at most [`LIMIT`]) until the stores show every write.
    pub(crate) async fn settle(self, machines: &Store<M>, sets: &Store<S>, deployments: &Store<D>, what: &str) {
        if self.machines.is_empty() && self.sets.is_empty() && self.deployments.is_empty() {
            return;
        }
        wait(what, || {
            self.machines.iter().all(|e| e.seen(machines))
                && self.sets.iter().all(|e| e.seen(sets))
                && self.deployments.iter().all(|e| e.seen(deployments))
        })
        .await;
    }
}

pub(crate) async fn wait(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !done() {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(object = %what, "the watches did not show this reconcile's writes within {LIMIT:?}; going on");
            return;
        }
        tokio::time::sleep(POLL).await;
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
}
