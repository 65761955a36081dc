//! What wakes which controller, and the small plumbing of the watches: notices of a kind mapped to the objects a
//! controller reconciles (a Node to its machines, a machine to its class, a class to its secrets), filtered so
//! heartbeats and other irrelevant changes wake nobody.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::context;
use super::informer::{Changed, Informer, Notice};
use crate::api::mcm::names::{IN_PLACE_CONDITION, MACHINE_CLASS_KIND, MACHINE_NAME_LABEL, NODE_LABEL};
use crate::api::mcm::{Machine, MachineClass};
use crate::lifecycle::claim::controller_of;
use crate::lifecycle::class;
use crate::lifecycle::machine_deployment::validation::selector_matches;

/// An `Api` over one namespace, or over all of them.
pub(super) fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A stream of `ObjectRef`s from a subscriber and a mapping of each notice to refs.
pub(super) fn refs<K, T, F, I>(
    rx: mpsc::UnboundedReceiver<Notice<K>>,
    mut map: F,
) -> impl Stream<Item = ObjectRef<T>> + Send + 'static
where
    K: Send + Sync + 'static,
    T: Resource<DynamicType = ()> + 'static,
    F: FnMut(Notice<K>) -> I + Send + 'static,
    I: IntoIterator<Item = ObjectRef<T>>,
    I::IntoIter: Send + 'static,
{
    UnboundedReceiverStream::new(rx).flat_map(move |n| stream::iter(map(n)))
}

/// A stream of the objects of an informer as they are created or changed (deletions wake nobody: finalizers
/// make a deletion an update first).
pub(super) fn applied<K>(informer: &mut Informer<K>) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Resource<DynamicType = ()>
        + kube::runtime::reflector::Lookup<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    refs(informer.subscribe(), |n| match n {
        Notice::Applied(o) => Some(ObjectRef::from_obj(&*o)),
        Notice::Deleted(_) => None,
    })
}

pub(super) fn hash_of(value: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// What of a Node a machine reacts to: labels, annotations, taints, condition statuses, deletion — not heartbeats.
pub(super) fn node_key(node: &Node) -> u64 {
    let taints: Vec<(String, String, Option<String>)> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| t.iter().map(|t| (t.key.clone(), t.effect.clone(), t.value.clone())).collect())
        .unwrap_or_default();
    // The in-place update's stages change only the reason of its condition.
    let conditions: Vec<(String, String, Option<String>)> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| {
            c.iter()
                .map(|c| {
                    let reason = (c.type_ == IN_PLACE_CONDITION).then(|| c.reason.clone()).flatten();
                    (c.type_.clone(), c.status.clone(), reason)
                })
                .collect()
        })
        .unwrap_or_default();
    hash_of((
        node.metadata.labels.as_ref(),
        node.metadata.annotations.as_ref(),
        taints,
        conditions,
        node.metadata.deletion_timestamp.is_some(),
    ))
}

/// The machines (not being deleted) a Node belongs to: by their `node` label, or named by the Node's
/// machine-name label while they have no `node` label yet.
pub(super) fn machines_of_node(store: &Store<Machine>, node: &Node) -> Vec<ObjectRef<Machine>> {
    let node_name = node.name_any();
    let named = node.labels().get(MACHINE_NAME_LABEL).cloned();
    store
        .state()
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| {
            let label = m.labels().get(NODE_LABEL);
            label == Some(&node_name) || (label.is_none() && named.as_deref() == Some(m.name_any().as_str()))
        })
        .map(|m| ObjectRef::from_obj(&**m))
        .collect()
}

/// The machine controller's triggers: machine changes, relevant Node changes, class changes.
pub(super) fn machine_triggers(
    machines: &mut Informer<Machine>,
    nodes: Option<&mut Informer<Node>>,
    classes: &mut Informer<MachineClass>,
    store: Store<Machine>,
) -> impl Stream<Item = ObjectRef<Machine>> + Send + 'static {
    let own = refs(machines.subscribe(), |n| match n {
        Notice::Applied(m) if m.metadata.deletion_timestamp.is_none() => Some(ObjectRef::from_obj(&*m)),
        _ => None,
    });
    let by_node = nodes.map(|nodes| {
        let store = store.clone();
        let mut changed = Changed::new(node_key);
        refs(
            nodes.subscribe(),
            move |n: Notice<Node>| {
                if changed.pass(&n) { machines_of_node(&store, n.object()) } else { Vec::new() }
            },
        )
        .boxed()
    });
    let by_class = refs(classes.subscribe(), move |n: Notice<MachineClass>| {
        let class = n.object();
        let namespace = class.namespace().unwrap_or_default();
        let name = class.name_any();
        store
            .state()
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none() && class::uses_class(m, &namespace, &name))
            .map(|m| ObjectRef::from_obj(&**m))
            .collect::<Vec<_>>()
    });
    let mut all = vec![own.boxed(), by_class.boxed()];
    all.extend(by_node);
    stream::select_all(all)
}

/// The class controller's triggers: class changes; a machine appearing, changing class, or going.
pub(super) fn class_triggers(
    classes: &mut Informer<MachineClass>,
    machines: &mut Informer<Machine>,
) -> impl Stream<Item = ObjectRef<MachineClass>> + Send + 'static {
    let own = applied(classes);
    let class_of = |m: &Machine| (m.spec.class.kind == MACHINE_CLASS_KIND).then(|| m.spec.class.name.clone());
    let mut changed = Changed::new(class_of);
    let mut last: HashMap<String, ObjectRef<MachineClass>> = HashMap::new();
    let by_machine = refs(machines.subscribe(), move |n: Notice<Machine>| {
        if !changed.pass(&n) {
            return Vec::new();
        }
        let m = n.object();
        let id = m.uid().unwrap_or_else(|| context::key_of(&**m));
        let current = class_of(m).map(|c| ObjectRef::new(&c).within(&m.namespace().unwrap_or_default()));
        let previous = match (&n, &current) {
            (Notice::Deleted(_), _) | (_, None) => last.remove(&id),
            (Notice::Applied(_), Some(c)) => last.insert(id, c.clone()),
        };
        previous.into_iter().chain(current).collect::<Vec<_>>()
    });
    stream::select_all([own.boxed(), by_machine.boxed()])
}

/// The secret controller's triggers: secret changes; the secrets a class references, before and after a change.
pub(super) fn secret_triggers(
    secrets: &mut Informer<Secret>,
    classes: &mut Informer<MachineClass>,
) -> impl Stream<Item = ObjectRef<Secret>> + Send + 'static {
    let own = applied(secrets);
    let mut last: HashMap<String, Vec<(String, String)>> = HashMap::new();
    let by_class = refs(classes.subscribe(), move |n: Notice<MachineClass>| {
        let c = n.object();
        let id = c.uid().unwrap_or_else(|| context::key_of(&**c));
        let current = class::secret_refs(c);
        let previous = match &n {
            Notice::Deleted(_) => last.remove(&id).unwrap_or_default(),
            Notice::Applied(_) => last.insert(id, current.clone()).unwrap_or_default(),
        };
        let mut all: Vec<(String, String)> = previous.into_iter().chain(current).collect();
        all.sort();
        all.dedup();
        all.into_iter().map(|(ns, name)| ObjectRef::new(&name).within(&ns)).collect::<Vec<_>>()
    });
    stream::select_all([own.boxed(), by_class.boxed()])
}

/// The controller of `meta` when it is of `kind` (and, with `group`, of that API group): its namespace and name.
pub(super) fn controller_named(meta: &ObjectMeta, kind: &str, group: Option<&str>) -> Option<(String, String)> {
    controller_of(meta)
        .filter(|r| r.kind == kind && group.is_none_or(|g| r.api_version.starts_with(g)))
        .map(|r| (meta.namespace.clone().unwrap_or_default(), r.name.clone()))
}

/// The owners of kind `kind` a child concerns: its controller, or (an orphan) every owner of its namespace whose
/// non-empty selector matches its labels, which may adopt it. A set for a machine, a deployment for a set, in
/// either flavour.
pub(super) fn owners_of<O>(
    store: &Store<O>,
    child: &ObjectMeta,
    kind: &str,
    group: Option<&str>,
    selector: impl Fn(&O) -> Option<&LabelSelector>,
) -> Vec<ObjectRef<O>>
where
    O: Resource<DynamicType = ()> + Clone + 'static,
{
    if controller_of(child).is_some() {
        return controller_named(child, kind, group)
            .map(|(ns, name)| ObjectRef::new(&name).within(&ns))
            .into_iter()
            .collect();
    }
    let empty = BTreeMap::new();
    let labels = child.labels.as_ref().unwrap_or(&empty);
    store
        .state()
        .iter()
        .filter(|o| o.meta().namespace == child.namespace)
        .filter(|o| selector(o).is_some_and(|s| !is_empty_selector(s) && selector_matches(s, labels)))
        .map(|o| ObjectRef::from_obj(&**o))
        .collect()
}

fn is_empty_selector(s: &LabelSelector) -> bool {
    s.match_labels.as_ref().is_none_or(|l| l.is_empty()) && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
}
