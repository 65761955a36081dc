//! The in-memory object store: objects by type and key, one global resourceVersion counter, a bounded event
//! history per type for watches, and the garbage collector (ownerReferences, namespaces, CRD instances).
//!
//! All methods run under the server's single lock, so every write is atomic and events are broadcast in
//! resourceVersion order. Deletion side effects (dependents, namespace content, CRD instances) are processed to
//! a fixpoint before the lock is released: our GC is synchronous where kube-apiserver's is eventual.
//!
//! Objects are kept as [`StoredObject`]s (compact JSON with indexed metadata): `get` parses one for the requests
//! that change it, while lists and watches send the stored JSON as it is.
//!
//! Imports only the object and type layers (`object`, `stored`, `resources`): never admission, webhooks or
//! anything serving requests, which all build on it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::object::{self, finalizers, is_deleting, set_finalizers, set_meta};
use super::resources::{GroupResource, Registry, Special};
use super::stored::StoredObject;

/// `(namespace, name)`; the namespace is "" for cluster-scoped objects.
pub type ObjectKey = (String, String);

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed from storage.
    Deleted,
}

impl EventType {
    /// The watch event type name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watches see it.
#[derive(Debug)]
pub struct WatchEvent {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// The stored type.
    pub gr: GroupResource,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (the last state for deletions); shared with the store while current, so the
    /// history holds copies of superseded versions only.
    pub object: StoredObject,
    /// The object before the change (modifications only), for selector transitions.
    pub previous: Option<StoredObject>,
}

impl WatchEvent {
    fn new(rv: u64, gr: &GroupResource, kind: EventType, object: StoredObject, previous: Option<StoredObject>) -> Self {
        WatchEvent { rv, gr: gr.clone(), kind, object, previous }
    }
}

/// How dependents are treated when their owner is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// Delete the owner now, its dependents afterwards.
    Background,
    /// Delete the dependents first; the owner waits for those with `blockOwnerDeletion`.
    Foreground,
    /// Keep the dependents, removing their reference to the owner.
    Orphan,
}

/// The result of a delete request.
#[derive(Debug)]
pub enum DeleteOutcome {
    /// Removed from storage; the last state.
    Deleted(Arc<Value>),
    /// Marked for deletion; waits for finalizers.
    Pending(Arc<Value>),
}

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";
/// The finalizer kube-apiserver puts on every CRD so its instances are removed first.
pub const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

#[derive(Default)]
struct Collection {
    objects: BTreeMap<ObjectKey, StoredObject>,
    history: VecDeque<Arc<WatchEvent>>,
    /// Events at or below this resourceVersion have left the history.
    compacted: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Task {
    OwnerGone(String),
    Finalize(GroupResource, ObjectKey),
    Namespace(String),
    Crd(String),
}

/// A receiver of every event of every type, in resourceVersion order.
pub type EventReceiver = broadcast::Receiver<Arc<WatchEvent>>;

/// A watch could not start: its resourceVersion has left the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    /// The requested version.
    pub requested: u64,
    /// The oldest version still available.
    pub oldest: u64,
}

/// The API group of the admission webhook configurations: writes to it change [`Store::admission_generation`].
pub const ADMISSION_GROUP: &str = "admissionregistration.k8s.io";

/// The store behind the server's single lock, shared by every request.
pub struct SharedStore(Mutex<Store>);

impl SharedStore {
    /// Puts `store` behind the lock.
    pub fn new(store: Store) -> Self {
        SharedStore(Mutex::new(store))
    }

    /// The store, locked. A panic while holding the lock does not poison the server.
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The store. See the module documentation.
pub struct Store {
    rv: u64,
    /// The served types; CRD writes change it together with the objects.
    pub registry: Registry,
    collections: HashMap<GroupResource, Collection>,
    by_uid: HashMap<String, (GroupResource, ObjectKey)>,
    dependents: HashMap<String, BTreeSet<(GroupResource, ObjectKey)>>,
    tx: broadcast::Sender<Arc<WatchEvent>>,
    history_limit: usize,
    tasks: VecDeque<Task>,
    /// Bumped by every write of an `admissionregistration.k8s.io` object (webhook configurations are compiled
    /// again when it moves); 0 while there has been none.
    admission_generation: u64,
}

impl Store {
    /// An empty store that keeps `history_limit` events per type for watches.
    pub fn new(history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(16 * 1024);
        Store {
            rv: 1,
            registry: Registry::builtin(),
            collections: HashMap::new(),
            by_uid: HashMap::new(),
            dependents: HashMap::new(),
            tx,
            history_limit: history_limit.max(1),
            tasks: VecDeque::new(),
            admission_generation: 0,
        }
    }

    /// Changes how many events per type are kept for watches.
    pub fn set_history_limit(&mut self, limit: usize) {
        self.history_limit = limit.max(1);
    }

    /// The newest resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// Changes whenever an `admissionregistration.k8s.io` object is written; 0 while none ever was.
    pub fn admission_generation(&self) -> u64 {
        self.admission_generation
    }

    fn note_admission_change(&mut self, gr: &GroupResource) {
        if gr.group == ADMISSION_GROUP {
            self.admission_generation += 1;
        }
    }

    /// Sets the counter (restoring persisted state); never moves it backwards.
    pub fn advance_rv(&mut self, rv: u64) {
        self.rv = self.rv.max(rv);
    }

    /// One object, parsed.
    pub fn get(&self, gr: &GroupResource, key: &ObjectKey) -> Option<Arc<Value>> {
        self.stored(gr, key).map(|stored| Arc::new(stored.to_value()))
    }

    /// One object as stored.
    pub fn stored(&self, gr: &GroupResource, key: &ObjectKey) -> Option<&StoredObject> {
        self.collections.get(gr)?.objects.get(key)
    }

    /// Whether an object exists.
    pub fn contains(&self, gr: &GroupResource, key: &ObjectKey) -> bool {
        self.stored(gr, key).is_some()
    }

    /// The object with this uid, with its type and key.
    pub fn get_by_uid(&self, uid: &str) -> Option<(GroupResource, ObjectKey, Arc<Value>)> {
        let (gr, key) = self.by_uid.get(uid)?;
        Some((gr.clone(), key.clone(), self.get(gr, key)?))
    }

    /// Objects of a type in key order, parsed (for the few callers that read them; lists and watches do not).
    pub fn list_values<'a>(
        &'a self,
        gr: &GroupResource,
        namespace: Option<&'a str>,
        after: Option<&'a ObjectKey>,
    ) -> impl Iterator<Item = (&'a ObjectKey, Value)> + 'a {
        self.list(gr, namespace, after).map(|(key, stored)| (key, stored.to_value()))
    }

    /// Objects of a type in key order, in one namespace or all; starting after `after` (pagination).
    pub fn list<'a>(
        &'a self,
        gr: &GroupResource,
        namespace: Option<&'a str>,
        after: Option<&'a ObjectKey>,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a StoredObject)> + 'a {
        let objects = self.collections.get(gr).map(|c| &c.objects);
        let start = match (after, namespace) {
            (Some(key), _) => std::ops::Bound::Excluded(key.clone()),
            (None, Some(ns)) => std::ops::Bound::Included((ns.to_string(), String::new())),
            (None, None) => std::ops::Bound::Unbounded,
        };
        objects
            .into_iter()
            .flat_map(move |o| o.range((start.clone(), std::ops::Bound::Unbounded)))
            .take_while(move |(key, _)| namespace.is_none_or(|ns| key.0 == ns))
    }

    /// How many objects of a type exist.
    pub fn count(&self, gr: &GroupResource) -> usize {
        self.collections.get(gr).map_or(0, |c| c.objects.len())
    }

    /// Every stored type and object (persistence).
    pub fn all_objects(&self) -> impl Iterator<Item = (&GroupResource, &StoredObject)> {
        self.collections.iter().flat_map(|(gr, c)| c.objects.values().map(move |o| (gr, o)))
    }

    /// A receiver of every future event.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.tx.subscribe()
    }

    /// Events of a type after `from` still in the history, and a receiver of all later events. Called under the
    /// lock, so nothing falls between the two.
    pub fn watch_from(&self, gr: &GroupResource, from: u64) -> Result<(Vec<Arc<WatchEvent>>, EventReceiver), Expired> {
        let rx = self.tx.subscribe();
        let Some(c) = self.collections.get(gr) else { return Ok((Vec::new(), rx)) };
        if from < c.compacted {
            return Err(Expired { requested: from, oldest: c.compacted + 1 });
        }
        Ok((c.history.iter().filter(|e| e.rv > from).cloned().collect(), rx))
    }

    fn record(&mut self, event: WatchEvent) {
        self.note_admission_change(&event.gr);
        let event = Arc::new(event);
        let c = self.collections.entry(event.gr.clone()).or_default();
        c.history.push_back(event.clone());
        while c.history.len() > self.history_limit {
            if let Some(old) = c.history.pop_front() {
                c.compacted = old.rv;
            }
        }
        // No receivers is fine: nobody watches.
        let _ = self.tx.send(event);
    }

    fn index(&mut self, gr: &GroupResource, key: &ObjectKey, obj: &StoredObject, add: bool) {
        let uid = obj.uid();
        if !uid.is_empty() {
            if add {
                self.by_uid.insert(uid.to_string(), (gr.clone(), key.clone()));
            } else {
                self.by_uid.remove(uid);
            }
        }
        for owner in obj.owner_uids() {
            if add {
                self.dependents.entry(owner.to_string()).or_default().insert((gr.clone(), key.clone()));
            } else if let Some(deps) = self.dependents.get_mut(owner) {
                deps.remove(&(gr.clone(), key.clone()));
                if deps.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }

    /// Stores a new object (its metadata already prepared) and returns it with its resourceVersion.
    pub fn insert(&mut self, gr: &GroupResource, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        set_meta(&mut obj, "resourceVersion", json!(self.rv.to_string()));
        let key = (object::namespace(&obj).to_string(), object::name(&obj).to_string());
        let stored = StoredObject::new(&obj);
        self.index(gr, &key, &stored, true);
        self.check_owners(&stored);
        self.collections.entry(gr.clone()).or_default().objects.insert(key, stored.clone());
        self.record(WatchEvent::new(self.rv, gr, EventType::Added, stored, None));
        Arc::new(obj)
    }

    /// As kube-controller-manager's garbage collector does: an object whose owners do not exist is collected (or
    /// loses the references to the missing ones).
    fn check_owners(&mut self, obj: &StoredObject) {
        for owner in obj.owner_uids() {
            if !self.by_uid.contains_key(owner) {
                self.tasks.push_back(Task::OwnerGone(owner.to_string()));
            }
        }
    }

    /// Restores an object exactly as persisted (no new resourceVersion, no event).
    pub fn restore(&mut self, gr: &GroupResource, obj: Value) {
        self.note_admission_change(gr);
        let key = (object::namespace(&obj).to_string(), object::name(&obj).to_string());
        let stored = StoredObject::new(&obj);
        self.index(gr, &key, &stored, true);
        self.collections.entry(gr.clone()).or_default().objects.insert(key, stored);
    }

    /// Replaces an existing object. An object being deleted whose last finalizer is gone is removed instead.
    /// Returns the stored object (or the last state, when removed) and whether it was removed.
    pub fn replace(&mut self, gr: &GroupResource, key: &ObjectKey, mut obj: Value) -> (Arc<Value>, bool) {
        let previous = self.stored(gr, key).cloned();
        if is_deleting(&obj) && finalizers(&obj).is_empty() && !self.waits_for_namespace_content(gr, &obj) {
            if let Some(prev) = &previous {
                self.index(gr, key, prev, false);
                if let Some(c) = self.collections.get_mut(gr) {
                    c.objects.remove(key);
                }
            }
            return (self.finish_removal(gr, key, obj), true);
        }
        self.rv += 1;
        set_meta(&mut obj, "resourceVersion", json!(self.rv.to_string()));
        let stored = StoredObject::new(&obj);
        if let Some(prev) = &previous {
            self.index(gr, key, prev, false);
        }
        self.index(gr, key, &stored, true);
        self.check_owners(&stored);
        self.collections.entry(gr.clone()).or_default().objects.insert(key.clone(), stored.clone());
        let deleting = stored.is_deleting();
        self.record(WatchEvent::new(self.rv, gr, EventType::Modified, stored, previous));
        if deleting {
            self.tasks.push_back(Task::Finalize(gr.clone(), key.clone()));
        }
        (Arc::new(obj), false)
    }

    fn waits_for_namespace_content(&self, gr: &GroupResource, obj: &Value) -> bool {
        gr.group.is_empty() && gr.resource == "namespaces" && self.namespace_has_content(object::name(obj))
    }

    /// Removes an object now, whatever its finalizers.
    fn remove(&mut self, gr: &GroupResource, key: &ObjectKey) -> Option<Arc<Value>> {
        let obj = self.collections.get_mut(gr)?.objects.remove(key)?;
        self.index(gr, key, &obj, false);
        Some(self.finish_removal(gr, key, obj.to_value()))
    }

    fn finish_removal(&mut self, gr: &GroupResource, key: &ObjectKey, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        set_meta(&mut obj, "resourceVersion", json!(self.rv.to_string()));
        let obj = Arc::new(obj);
        self.record(WatchEvent::new(self.rv, gr, EventType::Deleted, StoredObject::new(&obj), None));
        let uid = object::uid(&obj).to_string();
        if self.dependents.contains_key(&uid) {
            self.tasks.push_back(Task::OwnerGone(uid));
        }
        // Owners deleting in the foreground may have been waiting for this object.
        for owner in object::owner_uids(&obj) {
            if let Some((ogr, okey)) = self.by_uid.get(&owner).cloned() {
                self.tasks.push_back(Task::Finalize(ogr, okey));
            }
        }
        if !key.0.is_empty() {
            self.tasks.push_back(Task::Namespace(key.0.clone()));
        }
        if let Some(t) = self.registry.get(gr).filter(|t| t.custom) {
            self.tasks.push_back(Task::Crd(t.gr.to_string()));
        }
        if gr.group == "apiextensions.k8s.io" && gr.resource == "customresourcedefinitions" {
            let group = obj["spec"]["group"].as_str().unwrap_or_default();
            let plural = obj["spec"]["names"]["plural"].as_str().unwrap_or_default();
            let served = GroupResource::new(group, plural);
            self.registry.remove(&served);
            self.drop_collection(&served);
        }
        obj
    }

    /// Forgets every object of a type (its CRD is gone).
    fn drop_collection(&mut self, gr: &GroupResource) {
        if let Some(c) = self.collections.remove(gr) {
            for (key, obj) in &c.objects {
                self.index(gr, key, obj, false);
            }
        }
    }

    /// Deletes an object: at once when nothing holds it, otherwise marks it (deletionTimestamp) and lets
    /// finalizers and the garbage collector finish.
    pub fn delete(&mut self, gr: &GroupResource, key: &ObjectKey, policy: Propagation) -> Option<DeleteOutcome> {
        let current = self.get(gr, key)?;
        let special = self.registry.get(gr).map(|t| t.special);
        let mut obj = (*current).clone();
        let mut fins = finalizers(&obj);
        let before = fins.clone();
        match policy {
            Propagation::Foreground => {
                fins.retain(|f| f != ORPHAN);
                if !fins.iter().any(|f| f == FOREGROUND) {
                    fins.push(FOREGROUND.into());
                }
            }
            Propagation::Orphan => {
                fins.retain(|f| f != FOREGROUND);
                if !fins.iter().any(|f| f == ORPHAN) {
                    fins.push(ORPHAN.into());
                }
            }
            Propagation::Background => {}
        }
        let is_namespace = special == Some(Special::Namespace);
        if fins.is_empty() && !is_deleting(&obj) && !is_namespace {
            let last = self.remove(gr, key)?;
            self.settle();
            return Some(DeleteOutcome::Deleted(last));
        }
        if is_deleting(&obj) && fins == before {
            return Some(DeleteOutcome::Pending(current));
        }
        if !is_deleting(&obj) {
            mark_as_deleting(&mut obj);
        }
        set_finalizers(&mut obj, &fins);
        if is_namespace {
            obj["status"]["phase"] = json!("Terminating");
            self.tasks.push_back(Task::Namespace(key.1.clone()));
        }
        if special == Some(Special::Crd) {
            self.tasks.push_back(Task::Crd(key.1.clone()));
        }
        let (stored, removed) = self.replace(gr, key, obj);
        self.settle();
        Some(if removed { DeleteOutcome::Deleted(stored) } else { DeleteOutcome::Pending(stored) })
    }

    /// Runs garbage collection until nothing is left to do.
    pub fn settle(&mut self) {
        // Each task either changes an object (which may queue more) or is a no-op; a cap guards against a bug
        // turning into a hang of the whole server.
        let mut budget = 1_000_000usize;
        while let Some(task) = self.tasks.pop_front() {
            budget -= 1;
            if budget == 0 {
                tracing::error!("garbage collection did not settle; dropping {} queued tasks", self.tasks.len());
                self.tasks.clear();
                return;
            }
            match task {
                Task::OwnerGone(uid) => self.owner_gone(&uid),
                Task::Finalize(gr, key) => self.finalize(&gr, &key),
                Task::Namespace(ns) => self.namespace_progress(&ns),
                Task::Crd(name) => self.crd_progress(&name),
            }
        }
    }

    fn dependents_of(&self, uid: &str) -> Vec<(GroupResource, ObjectKey)> {
        self.dependents.get(uid).map(|d| d.iter().cloned().collect()).unwrap_or_default()
    }

    /// An owner is gone: dependents with no owner left are deleted; the others lose the dangling reference.
    fn owner_gone(&mut self, uid: &str) {
        for (gr, key) in self.dependents_of(uid) {
            let Some(dep) = self.get(&gr, &key) else { continue };
            let owners = object::owner_refs(&dep);
            // An owner of a kind this server does not serve cannot be looked up: like the real collector, keep the
            // reference rather than guess.
            let alive: Vec<Value> = owners
                .iter()
                .filter(|r| r["uid"].as_str().is_some_and(|u| self.by_uid.contains_key(u)) || !self.serves_kind(r))
                .cloned()
                .collect();
            if alive.is_empty() {
                if !is_deleting(&dep) {
                    self.delete_nested(&gr, &key);
                }
            } else if alive.len() != owners.len() {
                let mut obj = (*dep).clone();
                set_meta(&mut obj, "ownerReferences", Value::Array(alive));
                self.replace(&gr, &key, obj);
            }
        }
    }

    /// Whether an owner reference names a kind this server serves.
    fn serves_kind(&self, owner: &Value) -> bool {
        let api_version = owner["apiVersion"].as_str().unwrap_or_default();
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let kind = owner["kind"].as_str().unwrap_or_default();
        self.registry.iter().any(|t| t.gr.group == group && t.kind == kind)
    }

    fn delete_nested(&mut self, gr: &GroupResource, key: &ObjectKey) {
        let Some(current) = self.get(gr, key) else { return };
        if finalizers(&current).is_empty() && self.registry.get(gr).is_none_or(|t| t.special != Special::Namespace) {
            self.remove(gr, key);
        } else if !is_deleting(&current) {
            let mut obj = (*current).clone();
            mark_as_deleting(&mut obj);
            self.replace(gr, key, obj);
        }
    }

    /// Progresses an object that is being deleted with the orphan or foreground finalizer.
    fn finalize(&mut self, gr: &GroupResource, key: &ObjectKey) {
        let Some(current) = self.get(gr, key) else { return };
        if !is_deleting(&current) {
            return;
        }
        let mut fins = finalizers(&current);
        let uid = object::uid(&current).to_string();
        if fins.iter().any(|f| f == ORPHAN) {
            for (dgr, dkey) in self.dependents_of(&uid) {
                let Some(dep) = self.get(&dgr, &dkey) else { continue };
                let mut obj = (*dep).clone();
                let kept: Vec<Value> =
                    object::owner_refs(&dep).into_iter().filter(|r| r["uid"].as_str() != Some(uid.as_str())).collect();
                if kept.is_empty() {
                    object::metadata_mut(&mut obj).remove("ownerReferences");
                } else {
                    set_meta(&mut obj, "ownerReferences", Value::Array(kept));
                }
                self.replace(&dgr, &dkey, obj);
            }
            fins.retain(|f| f != ORPHAN);
        }
        if fins.iter().any(|f| f == FOREGROUND) {
            let mut blocked = false;
            for (dgr, dkey) in self.dependents_of(&uid) {
                let Some(dep) = self.get(&dgr, &dkey) else { continue };
                if !is_deleting(&dep) {
                    self.delete_nested(&dgr, &dkey);
                }
                let still_there = self.get(&dgr, &dkey);
                let blocks = still_there.as_ref().is_some_and(|d| {
                    object::owner_refs(d).iter().any(|r| {
                        r["uid"].as_str() == Some(uid.as_str()) && r["blockOwnerDeletion"].as_bool() == Some(true)
                    })
                });
                blocked |= blocks;
            }
            if !blocked {
                fins.retain(|f| f != FOREGROUND);
            }
        }
        let Some(current) = self.get(gr, key) else { return };
        if fins != finalizers(&current) {
            let mut obj = (*current).clone();
            set_finalizers(&mut obj, &fins);
            self.replace(gr, key, obj);
        }
    }

    fn namespace_has_content(&self, ns: &str) -> bool {
        let key = (ns.to_string(), String::new());
        self.collections.values().any(|c| c.objects.range(key.clone()..).next().is_some_and(|(k, _)| k.0 == ns))
    }

    /// A terminating namespace deletes its content and goes once empty.
    fn namespace_progress(&mut self, ns: &str) {
        let ns_gr = GroupResource::new("", "namespaces");
        let ns_key = (String::new(), ns.to_string());
        if !self.stored(&ns_gr, &ns_key).is_some_and(StoredObject::is_deleting) {
            return;
        }
        let mut content = Vec::new();
        for (gr, c) in &self.collections {
            let start = (ns.to_string(), String::new());
            for (key, obj) in c.objects.range(start..).take_while(|(k, _)| k.0 == ns) {
                if !obj.is_deleting() || obj.finalizers().next().is_none() {
                    content.push((gr.clone(), key.clone()));
                }
            }
        }
        for (gr, key) in content {
            self.delete_nested(&gr, &key);
        }
        if !self.namespace_has_content(ns) {
            let Some(namespace) = self.get(&ns_gr, &ns_key) else { return };
            let mut obj = (*namespace).clone();
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("finalizers");
            }
            if finalizers(&obj).is_empty() {
                if let Some(stored) = self.collections.get_mut(&ns_gr).and_then(|c| c.objects.remove(&ns_key)) {
                    self.index(&ns_gr, &ns_key, &stored, false);
                }
                self.finish_removal(&ns_gr, &ns_key, obj);
            } else if obj != *namespace {
                self.replace(&ns_gr, &ns_key, obj);
            }
        }
    }

    /// A CRD being deleted removes its instances, then its cleanup finalizer.
    fn crd_progress(&mut self, crd_name: &str) {
        let crd_gr = GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions");
        let crd_key = (String::new(), crd_name.to_string());
        let Some(crd) = self.get(&crd_gr, &crd_key) else { return };
        if !is_deleting(&crd) {
            return;
        }
        let served = GroupResource::new(
            crd["spec"]["group"].as_str().unwrap_or_default(),
            crd["spec"]["names"]["plural"].as_str().unwrap_or_default(),
        );
        let keys: Vec<ObjectKey> = self.list(&served, None, None).map(|(k, _)| k.clone()).collect();
        for key in keys {
            self.delete_nested(&served, &key);
        }
        if self.count(&served) == 0 {
            let Some(crd) = self.get(&crd_gr, &crd_key) else { return };
            let mut fins = finalizers(&crd);
            if fins.iter().any(|f| f == CRD_CLEANUP) {
                fins.retain(|f| f != CRD_CLEANUP);
                let mut obj = (*crd).clone();
                set_finalizers(&mut obj, &fins);
                self.replace(&crd_gr, &crd_key, obj);
            }
        }
    }
}

/// Marks an object that is not yet being deleted as deleting. Like kube-apiserver, this raises a set
/// `generation`: controllers that skip updates without a new generation (MCM's machine controller does) must
/// still see the deletion.
fn mark_as_deleting(obj: &mut Value) {
    if let Some(generation) = obj["metadata"]["generation"].as_i64().filter(|g| *g > 0) {
        set_meta(obj, "generation", json!(generation + 1));
    }
    set_meta(obj, "deletionTimestamp", json!(object::now()));
    set_meta(obj, "deletionGracePeriodSeconds", json!(0));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(ns: &str, name: &str, uid: &str, owners: &[(&str, bool)]) -> Value {
        let refs: Vec<Value> = owners
            .iter()
            .map(|(u, block)| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": u, "blockOwnerDeletion": block}))
            .collect();
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "uid": uid}});
        if !ns.is_empty() {
            o["metadata"]["namespace"] = json!(ns);
        }
        if !refs.is_empty() {
            o["metadata"]["ownerReferences"] = Value::Array(refs);
        }
        o
    }

    fn cm() -> GroupResource {
        GroupResource::new("", "configmaps")
    }

    fn key(name: &str) -> ObjectKey {
        ("default".into(), name.into())
    }

    fn exists(s: &Store, name: &str) -> bool {
        s.get(&cm(), &key(name)).is_some()
    }

    #[test]
    fn resource_versions_increase_and_history_is_bounded() {
        let mut s = Store::new(2);
        let a = s.insert(&cm(), obj("default", "a", "u1", &[]));
        let b = s.insert(&cm(), obj("default", "b", "u2", &[]));
        assert!(object::meta_str(&b, "resourceVersion") > object::meta_str(&a, "resourceVersion"));
        s.insert(&cm(), obj("default", "c", "u3", &[]));
        let first: u64 = object::meta_str(&a, "resourceVersion").unwrap().parse().unwrap();
        assert!(s.watch_from(&cm(), first - 1).is_err(), "the first event left the history");
        let (events, _) = s.watch_from(&cm(), first).unwrap();
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn background_deletion_removes_dependents() {
        let mut s = Store::new(100);
        s.insert(&cm(), obj("default", "owner", "o1", &[]));
        s.insert(&cm(), obj("default", "child", "c1", &[("o1", false)]));
        s.insert(&cm(), obj("default", "grandchild", "g1", &[("c1", false)]));
        s.insert(&cm(), obj("default", "shared", "s1", &[("o1", false), ("other", false)]));
        s.insert(&cm(), obj("default", "other", "other", &[]));
        assert!(matches!(s.delete(&cm(), &key("owner"), Propagation::Background), Some(DeleteOutcome::Deleted(_))));
        assert!(!exists(&s, "child") && !exists(&s, "grandchild"));
        let shared = s.get(&cm(), &key("shared")).unwrap();
        assert_eq!(object::owner_uids(&shared), vec!["other".to_string()], "dangling reference removed");
    }

    #[test]
    fn a_new_object_whose_owners_are_missing_is_collected() {
        let mut s = Store::new(100);
        s.insert(&cm(), obj("default", "owner", "o1", &[]));
        s.insert(&cm(), obj("default", "orphan", "c1", &[("missing", false)]));
        s.insert(&cm(), obj("default", "half", "c2", &[("o1", false), ("missing", false)]));
        let mut unknown_kind = obj("default", "unknown-kind", "c3", &[("missing", false)]);
        unknown_kind["metadata"]["ownerReferences"][0]["kind"] = json!("NotServed");
        s.insert(&cm(), unknown_kind);
        s.settle();
        assert!(!exists(&s, "orphan"), "no owner exists");
        let half = s.get(&cm(), &key("half")).unwrap();
        assert_eq!(object::owner_uids(&half), vec!["o1".to_string()], "the missing owner's reference is removed");
        assert!(exists(&s, "unknown-kind"), "an owner of a kind not served cannot be looked up");
    }

    #[test]
    fn orphan_deletion_keeps_dependents_without_the_reference() {
        let mut s = Store::new(100);
        s.insert(&cm(), obj("default", "owner", "o1", &[]));
        s.insert(&cm(), obj("default", "child", "c1", &[("o1", true)]));
        s.delete(&cm(), &key("owner"), Propagation::Orphan);
        assert!(!exists(&s, "owner"));
        assert!(object::owner_uids(&s.get(&cm(), &key("child")).unwrap()).is_empty());
    }

    #[test]
    fn foreground_deletion_waits_for_blocking_dependents() {
        let mut s = Store::new(100);
        s.insert(&cm(), obj("default", "owner", "o1", &[]));
        let mut child = obj("default", "child", "c1", &[("o1", true)]);
        child["metadata"]["finalizers"] = json!(["example.com/hold"]);
        s.insert(&cm(), child);
        assert!(matches!(s.delete(&cm(), &key("owner"), Propagation::Foreground), Some(DeleteOutcome::Pending(_))));
        let owner = s.get(&cm(), &key("owner")).unwrap();
        assert_eq!(finalizers(&owner), vec![FOREGROUND.to_string()]);
        let child = s.get(&cm(), &key("child")).unwrap();
        assert!(is_deleting(&child));
        // The child's finalizer is released: the child goes, then the owner.
        let mut released = (*child).clone();
        set_finalizers(&mut released, &[]);
        s.replace(&cm(), &key("child"), released);
        s.settle();
        assert!(!exists(&s, "child") && !exists(&s, "owner"));
    }

    #[test]
    fn finalizers_hold_deletion_until_removed() {
        let mut s = Store::new(100);
        let mut o = obj("default", "held", "h1", &[]);
        o["metadata"]["finalizers"] = json!(["example.com/hold"]);
        s.insert(&cm(), o);
        assert!(matches!(s.delete(&cm(), &key("held"), Propagation::Background), Some(DeleteOutcome::Pending(_))));
        let mut held = (*s.get(&cm(), &key("held")).unwrap()).clone();
        set_finalizers(&mut held, &[]);
        let (_, removed) = s.replace(&cm(), &key("held"), held);
        assert!(removed && !exists(&s, "held"));
    }

    #[test]
    fn marking_an_object_deleted_raises_its_generation() {
        let mut s = Store::new(100);
        let mut o = obj("default", "held", "h1", &[]);
        o["metadata"]["finalizers"] = json!(["example.com/hold"]);
        o["metadata"]["generation"] = json!(3);
        s.insert(&cm(), o);
        s.delete(&cm(), &key("held"), Propagation::Background);
        let held = s.get(&cm(), &key("held")).unwrap();
        assert_eq!(held["metadata"]["generation"], 4, "{held}");
        // A second delete request changes nothing.
        s.delete(&cm(), &key("held"), Propagation::Background);
        assert_eq!(s.get(&cm(), &key("held")).unwrap()["metadata"]["generation"], 4);
        // Objects without a generation (core kinds here) get none.
        let mut plain = obj("default", "plain", "p1", &[]);
        plain["metadata"]["finalizers"] = json!(["example.com/hold"]);
        s.insert(&cm(), plain);
        s.delete(&cm(), &key("plain"), Propagation::Background);
        assert!(s.get(&cm(), &key("plain")).unwrap()["metadata"].get("generation").is_none());
    }

    #[test]
    fn namespace_deletion_removes_content_then_itself() {
        let mut s = Store::new(100);
        let ns = GroupResource::new("", "namespaces");
        s.insert(&ns, json!({"metadata": {"name": "default", "uid": "n1"}, "spec": {"finalizers": ["kubernetes"]}}));
        s.insert(&cm(), obj("default", "a", "u1", &[]));
        let mut held = obj("default", "held", "h1", &[]);
        held["metadata"]["finalizers"] = json!(["example.com/hold"]);
        s.insert(&cm(), held);
        s.delete(&ns, &(String::new(), "default".into()), Propagation::Background);
        assert!(!exists(&s, "a"));
        let namespace = s.get(&ns, &(String::new(), "default".into())).unwrap();
        assert_eq!(namespace["status"]["phase"], "Terminating");
        let mut held = (*s.get(&cm(), &key("held")).unwrap()).clone();
        set_finalizers(&mut held, &[]);
        s.replace(&cm(), &key("held"), held);
        s.settle();
        assert!(s.get(&ns, &(String::new(), "default".into())).is_none());
    }

    #[test]
    fn list_filters_by_namespace_and_pages() {
        let mut s = Store::new(100);
        for (ns, n) in [("a", "1"), ("a", "2"), ("b", "1")] {
            s.insert(&cm(), obj(ns, n, &format!("{ns}{n}"), &[]));
        }
        assert_eq!(s.list(&cm(), Some("a"), None).count(), 2);
        assert_eq!(s.list(&cm(), None, None).count(), 3);
        let after = ("a".to_string(), "2".to_string());
        let rest: Vec<_> = s.list(&cm(), None, Some(&after)).map(|(k, _)| k.clone()).collect();
        assert_eq!(rest, vec![("b".to_string(), "1".to_string())]);
    }
}
