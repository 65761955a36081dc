//! One watch per kind, shared by every controller: a reflector store to read from, and a notice per change to
//! each subscriber — deletions included.
//!
//! kube-runtime's shared streams (`reflect_shared` + `subscribe`) broadcast only applied objects, never
//! deletions, and the controllers need both (a deleted Node deletes its Machine; the last Machine of a class
//! going lets the class's finalizer go). So the informer drives the store's `Writer` itself and fans out
//! [`Notice`]s; after a re-list it reports what vanished during the gap as deleted. The queues stay
//! kube-runtime's: subscribers turn notices into `ObjectRef`s for `Controller::reconcile_on`.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};

/// A change to an object.
#[derive(Debug)]
pub(crate) enum Notice<K> {
    /// Created or changed (or listed after a re-list).
    Applied(Arc<K>),
    /// Deleted; the last state known.
    Deleted(Arc<K>),
}

impl<K> Notice<K> {
    /// The object.
    pub(crate) fn object(&self) -> &Arc<K> {
        match self {
            Notice::Applied(o) | Notice::Deleted(o) => o,
        }
    }
}

impl<K> Clone for Notice<K> {
    fn clone(&self) -> Self {
        match self {
            Notice::Applied(o) => Notice::Applied(o.clone()),
            Notice::Deleted(o) => Notice::Deleted(o.clone()),
        }
    }
}

/// A watch of one kind: its store, and the subscribers its driving task feeds.
pub(crate) struct Informer<K>
where
    K: Resource + Lookup<DynamicType = ()> + Clone + 'static,
{
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    reader: Store<K>,
    subscribers: Vec<mpsc::UnboundedSender<Notice<K>>>,
    ready: watch::Sender<bool>,
    optional: bool,
    prune: fn(&mut K),
}

/// What no controller reads and every cache would otherwise hold once per object: `metadata.managedFields`
/// (often the largest part of a small object). Writes are patches, never whole-object updates, so nothing
/// written back is missing it.
fn drop_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// A Node's cache entry: also without `status.images` (kilobytes on a real Node, read by nothing here).
pub(crate) fn prune_node(node: &mut k8s_openapi::api::core::v1::Node) {
    drop_managed_fields(node);
    if let Some(status) = node.status.as_mut() {
        status.images = None;
    }
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    <K as Lookup>::DynamicType: Default + Eq + Hash + Clone,
{
    /// An informer over `api` (not yet running).
    pub(crate) fn new(api: Api<K>, config: watcher::Config) -> Self {
        let writer = Writer::default();
        let reader = writer.as_reader();
        Informer {
            api,
            config,
            writer,
            reader,
            subscribers: Vec::new(),
            ready: watch::channel(false).0,
            optional: false,
            prune: drop_managed_fields::<K>,
        }
    }

    /// Prunes every object with `prune` before it is cached (instead of only dropping its managedFields).
    pub(crate) fn pruned(mut self, prune: fn(&mut K)) -> Self {
        self.prune = prune;
        self
    }

    /// For a kind whose CRD may not be installed (MCM's MachineClass next to a Cluster API install): while the API
    /// server does not serve the kind (its list answers 404), the store is empty and counts as ready, so the
    /// controllers run for everything else. The watch keeps retrying and fills the store once the kind is served.
    pub(crate) fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    /// Turns `true` once the store has its first list. Unlike `Store::wait_until_ready`, whose one-shot channel
    /// wakes only the last of several concurrent waiters, any number of reconciles can wait on this.
    pub(crate) fn ready(&self) -> watch::Receiver<bool> {
        self.ready.subscribe()
    }

    /// The store (ready once the first list is in).
    pub(crate) fn store(&self) -> Store<K> {
        self.reader.clone()
    }

    /// A new subscriber: every notice from now on. Unbounded, so a busy controller never holds up the watch
    /// (its queue deduplicates by object anyway).
    pub(crate) fn subscribe(&mut self) -> mpsc::UnboundedReceiver<Notice<K>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers.push(tx);
        rx
    }

    fn send(&mut self, notice: Notice<K>) {
        self.subscribers.retain(|s| s.send(notice.clone()).is_ok());
    }

    /// Runs the watch until the future is dropped.
    pub(crate) async fn run(mut self) {
        let kind = <K as Resource>::kind(&()).to_string();
        let mut events = watcher(self.api.clone(), self.config.clone()).default_backoff().modify(self.prune).boxed();
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    if self.optional && not_served(&e) {
                        if !*self.ready.borrow() {
                            tracing::info!(kind = %kind, "not served by the API server (no CRD); empty until it is");
                            self.ready.send_replace(true);
                        }
                        continue;
                    }
                    tracing::warn!(kind = %kind, error = %e, "watch failed; retrying");
                    continue;
                }
            };
            // Before a re-list replaces the store, remember what was there, to report what went meanwhile.
            let before: Option<HashMap<ObjectRef<K>, Arc<K>>> = matches!(event, watcher::Event::InitDone)
                .then(|| self.reader.state().into_iter().map(|o| (o.to_object_ref(()), o)).collect());
            self.writer.apply_watcher_event(&event);
            match event {
                watcher::Event::Apply(o) => {
                    let key = o.to_object_ref(());
                    let stored = self.reader.get(&key).unwrap_or_else(|| Arc::new(o));
                    self.send(Notice::Applied(stored));
                }
                watcher::Event::Delete(o) => self.send(Notice::Deleted(Arc::new(o))),
                watcher::Event::InitDone => {
                    let now = self.reader.state();
                    tracing::debug!(kind = %kind, objects = now.len(), "listed");
                    self.ready.send_replace(true);
                    let mut before = before.unwrap_or_default();
                    for o in &now {
                        before.remove(&o.to_object_ref(()));
                    }
                    for gone in before.into_values() {
                        self.send(Notice::Deleted(gone));
                    }
                    for o in now {
                        self.send(Notice::Applied(o));
                    }
                }
                watcher::Event::Init | watcher::Event::InitApply(_) => {}
            }
        }
    }
}

/// Whether a watch error says the API server does not serve the kind at all (a list answered 404).
fn not_served(error: &watcher::Error) -> bool {
    match error {
        // By code, not reason: kube-apiserver answers a group it does not serve with a plain-text 404 (no Status,
        // so no `NotFound` reason); a list never answers 404 for anything else.
        watcher::Error::InitialListFailed(kube::Error::Api(status)) => status.code == 404,
        _ => false,
    }
}

/// Passes a notice on only when `key` of its object changed since the last notice for that object (or the object
/// was deleted): e.g. a Node's heartbeat changes nothing a machine cares about.
pub(crate) struct Changed<K, T> {
    seen: HashMap<String, T>,
    key: fn(&K) -> T,
}

impl<K: Resource, T: PartialEq> Changed<K, T> {
    /// A filter on `key`.
    pub(crate) fn new(key: fn(&K) -> T) -> Self {
        Changed { seen: HashMap::new(), key }
    }

    /// Whether to pass `notice` on; remembers its key.
    pub(crate) fn pass(&mut self, notice: &Notice<K>) -> bool {
        let object = notice.object();
        let id = object.meta().uid.clone().unwrap_or_else(|| {
            format!(
                "{}/{}",
                object.meta().namespace.as_deref().unwrap_or(""),
                object.meta().name.as_deref().unwrap_or("")
            )
        });
        match notice {
            Notice::Deleted(_) => {
                self.seen.remove(&id);
                true
            }
            Notice::Applied(o) => {
                let key = (self.key)(o);
                if self.seen.get(&id) == Some(&key) {
                    return false;
                }
                self.seen.insert(id, key);
                true
            }
        }
    }
}

/// Resolves once every one of `ready` (an informer's [`Informer::ready`]) is `true`; owns what it waits on, so it
/// can outlive the controllers' handle.
pub(crate) async fn wait_all(ready: Vec<watch::Receiver<bool>>) {
    for mut ready in ready {
        let _ = ready.wait_for(|r| *r).await;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn cm(uid: &str, value: &str) -> Arc<ConfigMap> {
        let mut c = ConfigMap::default();
        c.metadata.uid = Some(uid.into());
        c.data = Some([("k".to_string(), value.to_string())].into());
        Arc::new(c)
    }

    fn value(c: &ConfigMap) -> Option<String> {
        c.data.as_ref()?.get("k").cloned()
    }

    #[test]
    fn changed_passes_key_changes_and_deletions() {
        let mut filter = Changed::new(value);
        let cases = [
            ("first sight", Notice::Applied(cm("a", "1")), true),
            ("same key", Notice::Applied(cm("a", "1")), false),
            ("other object", Notice::Applied(cm("b", "1")), true),
            ("new key", Notice::Applied(cm("a", "2")), true),
            ("deleted", Notice::Deleted(cm("a", "2")), true),
            ("back after deletion", Notice::Applied(cm("a", "2")), true),
        ];
        for (name, notice, want) in cases {
            assert_eq!(filter.pass(&notice), want, "{name}");
        }
    }

    #[test]
    fn a_list_answered_404_means_the_kind_is_not_served() {
        let status = |code: u16, reason: &str| {
            let mut s = kube::core::Status::failure("404 page not found", reason);
            s.code = code;
            watcher::Error::InitialListFailed(kube::Error::Api(Box::new(s)))
        };
        // kube-apiserver's answer for a group it does not serve: plain text, so kube-rs makes up the reason.
        assert!(not_served(&status(404, "Failed to parse error data")));
        assert!(not_served(&status(404, "NotFound")));
        assert!(!not_served(&status(403, "Forbidden")));
        assert!(!not_served(&status(500, "InternalError")));
    }
}
