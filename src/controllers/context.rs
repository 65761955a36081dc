//! What every reconcile shares: clients, stores, drivers, the configuration, the event recorder, and the small
//! pieces of memory a controller keeps between reconciles (retry counts, machines being created, replacement
//! permits). Nothing here survives a restart, and nothing needs to: the state that matters is on the objects.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};

use super::events::Recorder;
use super::freeze::FreezeFlag;
use super::workload::Connection;
use crate::api::mcm::{Machine, MachineClass};
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::{MachineConfig, RetryClass};
use crate::providers::DriverRegistry;

/// Locks a std mutex, ignoring poisoning: every critical section here is a single map operation, so a panic
/// inside one cannot leave the map half-changed.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `namespace/name` of an object.
pub(crate) fn key_of<K: Resource>(object: &K) -> String {
    format!("{}/{}", object.meta().namespace.as_deref().unwrap_or(""), object.meta().name.as_deref().unwrap_or(""))
}

/// `text` cut to at most `max` bytes on a character boundary (event notes are limited to 1 kB).
fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// Failed attempts per machine and flow, for capped exponential back-off (reset when the flow succeeds), and when
/// the next attempt is due: a reconcile woken earlier by an event (often our own status write) must not retry
/// before then.
#[derive(Default)]
pub(crate) struct RetryBook {
    attempts: Mutex<HashMap<String, (u32, Instant)>>,
}

impl RetryBook {
    /// Counts a failure of `key` and returns the delay before the next try (at most `cap`).
    pub(crate) fn fail(&self, key: &str, class: RetryClass, config: &MachineConfig, cap: Option<Duration>) -> Duration {
        let mut attempts = lock(&self.attempts);
        let entry = attempts.entry(key.to_string()).or_insert((0, Instant::now()));
        let delay = config.retry_policy().delay(class, entry.0);
        let delay = cap.map_or(delay, |c| c.min(delay));
        *entry = (entry.0.saturating_add(1), Instant::now() + delay);
        delay
    }

    /// How long until the next try of `key` is due, if it is not yet.
    pub(crate) fn waiting(&self, key: &str) -> Option<Duration> {
        let due = lock(&self.attempts).get(key)?.1;
        let now = Instant::now();
        (due > now).then(|| due - now)
    }

    /// Forgets the failures of `key`.
    pub(crate) fn reset(&self, key: &str) {
        lock(&self.attempts).remove(key);
    }

    /// Forgets every flow of object `object` (`namespace/name`), once it is gone.
    pub(crate) fn forget(&self, object: &str) {
        lock(&self.attempts).retain(|k, _| k.split_once(':').is_none_or(|(_, o)| o != object));
    }
}

/// The generation of each invalid object last reported, so an invalid spec is reported once, not every resync.
#[derive(Default)]
pub(crate) struct Reports {
    reported: Mutex<HashMap<String, i64>>,
}

impl Reports {
    /// Whether an invalid spec of `object` at `generation` is news (and remembers it).
    pub(crate) fn first(&self, object: &str, generation: i64) -> bool {
        lock(&self.reported).insert(object.to_string(), generation) != Some(generation)
    }

    /// Forgets the reports of a spec that is valid again.
    pub(crate) fn valid_again(&self, object: &str) {
        lock(&self.reported).remove(object);
    }
}

/// Machines inside the create flow. The termination controller leaves them alone until the flow is done (MCM's
/// `pendingMachineCreationMap`), so a VM created while the deletion starts is never missed.
#[derive(Default)]
pub(crate) struct InFlight {
    keys: Mutex<HashSet<String>>,
}

/// Holds a machine in [`InFlight`]; dropping it (also when the reconcile is cancelled) releases it.
pub(crate) struct InFlightGuard<'a> {
    set: &'a InFlight,
    key: String,
}

impl InFlight {
    /// Marks `key` as being created.
    pub(crate) fn enter(&self, key: &str) -> InFlightGuard<'_> {
        lock(&self.keys).insert(key.to_string());
        InFlightGuard { set: self, key: key.to_string() }
    }

    /// Whether `key` is being created.
    pub(crate) fn contains(&self, key: &str) -> bool {
        lock(&self.keys).contains(key)
    }

    /// The keys being created now.
    pub(crate) fn keys(&self) -> Vec<String> {
        lock(&self.keys).iter().cloned().collect()
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        lock(&self.set.keys).remove(&self.key);
    }
}

/// One permit per MachineDeployment for marking machines Failed, so two reconciles never both see room for a
/// replacement (MCM's `PermitGiver`).
#[derive(Default)]
pub(crate) struct Permits {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Permits {
    /// The permit of `deployment` (`namespace/name`).
    pub(crate) fn of(&self, deployment: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.locks).entry(deployment.to_string()).or_default().clone()
    }
}

/// Everything a reconcile needs.
pub(crate) struct Context {
    /// The control cluster: Machines, classes, Secrets, events.
    pub control: Client,
    /// The target cluster: Nodes, bootstrap tokens, VolumeAttachments; `None` without one.
    pub target: Option<Client>,
    /// The target cluster for drains (no automatic 429 retries); `None` without a target cluster.
    pub drain: Option<Client>,
    /// Drivers by provider.
    pub drivers: DriverRegistry,
    /// Settings.
    pub config: MachineConfig,
    /// Machines.
    pub machines: Store<Machine>,
    /// MachineClasses.
    pub classes: Store<MachineClass>,
    /// Secrets of the control namespace(s).
    pub secrets: Store<Secret>,
    /// Nodes of the target cluster.
    pub nodes: Option<Store<Node>>,
    /// Each store's readiness (see `Informer::ready`).
    pub ready: Vec<tokio::sync::watch::Receiver<bool>>,
    /// One recorder for all events (it aggregates repeats).
    pub recorder: Recorder,
    /// Retry counts.
    pub retries: RetryBook,
    /// Machines being created.
    pub creating: InFlight,
    /// Replacement permits.
    pub permits: Permits,
    /// The classes the cloud refused.
    pub refusals: super::vm::refusals::ClassRefusals,
    /// The API-server freeze (MCM's safety controller): machine reconciles wait while it is on.
    pub freeze: Arc<FreezeFlag>,
    /// Reconcile and drain metrics.
    pub metrics: super::ReconcileMetrics,
    /// Versions our own writes replaced, so a pass does not act twice on a store that lags behind.
    pub superseded: super::superseded::Superseded,
}

impl Context {
    /// Waits until every store has its first list (a decision on a half-filled store could, say, remove a class
    /// finalizer because the machines using it are not listed yet).
    pub(crate) async fn ready(&self) {
        for ready in &self.ready {
            // An error means the informer is gone, i.e. we are shutting down; the reconcile then ends with it.
            let _ = ready.clone().wait_for(|r| *r).await;
        }
    }

    /// The Node named `name`, from the store.
    pub(crate) fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.as_ref()?.get(&ObjectRef::new(name))
    }

    /// The target cluster as a [`Connection`] (`None` without one).
    pub(crate) fn workload(&self) -> Option<Arc<Connection>> {
        let (target, nodes) = (self.target.clone()?, self.nodes.clone()?);
        let drain = self.drain.clone().unwrap_or_else(|| target.clone());
        Some(Arc::new(Connection::fixed(target, drain, nodes)))
    }

    /// The Secret `namespace/name`, from the store.
    pub(crate) fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.secrets.get(&ObjectRef::new(name).within(namespace))
    }

    /// Records `event` on `object`; a failure is only logged (events are best effort).
    pub(crate) async fn publish<K: Resource<DynamicType = ()>>(&self, object: &K, event: EventSpec) {
        publish_to(&self.recorder, object, event).await;
    }
}

/// Records `event` on `object` with `recorder` (the set and deployment controllers report under their own names,
/// as MCM's do); a failure is only logged (events are best effort).
pub(crate) async fn publish_to<K: Resource<DynamicType = ()>>(recorder: &Recorder, object: &K, event: EventSpec) {
    let event = EventSpec { note: truncate(event.note, 1000), ..event };
    if let Err(err) = recorder.publish(event, object.object_ref(&())).await {
        tracing::debug!(object = %key_of(object), error = %err, "could not record an event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::RetryPolicy;

    fn config() -> MachineConfig {
        MachineConfig {
            retry: RetryPolicy::uniform(Duration::from_secs(1), Duration::from_secs(8)),
            ..MachineConfig::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_gate_and_reset() {
        let book = RetryBook::default();
        let c = config();
        let delays: Vec<Duration> = (0..5).map(|_| book.fail("create:ns/m", RetryClass::Other, &c, None)).collect();
        let secs: Vec<u64> = delays.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [1, 2, 4, 8, 8]);
        assert_eq!(book.waiting("create:ns/m"), Some(Duration::from_secs(8)));
        tokio::time::advance(Duration::from_secs(8)).await;
        assert_eq!(book.waiting("create:ns/m"), None, "due again");
        assert_eq!(
            book.fail("create:ns/m", RetryClass::Other, &c, Some(Duration::from_millis(10))),
            Duration::from_millis(10)
        );
        book.reset("create:ns/m");
        assert_eq!(book.fail("create:ns/m", RetryClass::Other, &c, None), Duration::from_secs(1));
        book.fail("delete:ns/m", RetryClass::Other, &c, None);
        book.fail("delete:ns/other", RetryClass::Other, &c, None);
        book.forget("ns/m");
        assert_eq!(book.waiting("create:ns/m"), None);
        assert_eq!(book.waiting("delete:ns/m"), None);
        assert!(book.waiting("delete:ns/other").is_some(), "other machines keep theirs");
    }

    #[test]
    fn in_flight_guard_releases_on_drop() {
        let set = InFlight::default();
        {
            let _g = set.enter("ns/m");
            assert!(set.contains("ns/m"));
            assert_eq!(set.keys(), ["ns/m"]);
        }
        assert!(!set.contains("ns/m"));
        assert!(set.keys().is_empty());
    }

    #[test]
    fn notes_are_cut_on_char_boundaries() {
        assert_eq!(truncate("héllo".to_string(), 2), "h");
        assert_eq!(truncate("abc".to_string(), 10), "abc");
    }
}
