//! Strategic merge patch (`application/strategic-merge-patch+json`) for built-in kinds.
//!
//! kube-apiserver applies these patches with `k8s.io/apimachinery/pkg/util/strategicpatch`, which reads how each
//! list merges from the `patchStrategy`/`patchMergeKey` tags of the Go API types. We have no Go types, so this
//! module carries a small, hand-written schema of the fields that matter to kubectl (`apply`, `patch`, `label`,
//! `annotate`, `cordon`, `drain`, `taint`) and to kube-rs `Patch::Strategic`, and applies the patch to plain
//! [`serde_json::Value`]s.
//!
//! Semantics, in short:
//! - maps merge recursively and a `null` in the patch deletes the key;
//! - a list without a merge strategy is replaced wholesale, as in a JSON merge patch;
//! - a list with a merge key merges item by item on that key (matching items merge recursively, new ones are
//!   appended in patch order); a primitive list with the merge strategy (`metadata.finalizers`) is an ordered set;
//! - the directives `$patch` (`merge`, `replace`, `delete`), `$retainKeys`, `$setElementOrder/<field>` and
//!   `$deleteFromPrimitiveList/<field>` are honoured and never appear in the result.
//!
//! Where a field merges depends on where it is: `ports` merges on `containerPort` in a container but on `port` in a
//! Service spec, so the walk tracks the type it is in ([`apply`]'s `kind` picks the root type).
//!
//! Where we knowingly differ from `strategicpatch`:
//! - `$patch: delete` on a nested map removes the field (kube leaves `{}` behind); at the top level the result is
//!   `{}`, as in kube.
//! - Merged lists keep the original order with new items appended; kube additionally re-sorts patched items into
//!   patch order. With `$setElementOrder`, items the order does not mention go to the end (kube interleaves them
//!   by their original position). Neither changes which items a list holds.
//! - Patch values for absent fields, and items appended to lists, are merged into an empty value rather than
//!   copied, so nested directives and `null`s never reach the result.
//! - A map patched over a non-map (or a list over a non-list) replaces it instead of failing.
//! - `$setElementOrder` is not checked against the patch's own list items.
//! - Node `spec.taints` is replaced, not merged: kube gives it no patch strategy, and `kubectl taint` relies on
//!   that by sending the complete new list.

use serde_json::{Map, Value};

/// Why a strategic merge patch could not be applied. Each variant names the JSON path (in the patch) of the
/// problem, written as dotted field names with `[i]` for the i-th item of a patch list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategicMergeError {
    /// The patch document itself is not a JSON object.
    #[error("invalid patch: a strategic merge patch must be a JSON object, not {found}")]
    NotAnObject {
        /// The JSON type that was found instead (`array`, `string`, ...).
        found: &'static str,
    },
    /// An item of a list that merges on a key does not carry that key.
    #[error("invalid patch at {path}: a list item lacks its merge key \"{key}\"")]
    MissingMergeKey {
        /// Path of the list.
        path: String,
        /// The merge key the item should have carried.
        key: &'static str,
    },
    /// An item of a list that merges on a key is not a JSON object.
    #[error("invalid patch at {path}: a list item is a {found}, but this list holds objects merged on \"{key}\"")]
    ItemNotAnObject {
        /// Path of the list.
        path: String,
        /// The merge key of the list.
        key: &'static str,
        /// The JSON type that was found instead.
        found: &'static str,
    },
    /// A `$patch` directive with a value other than `merge`, `replace` or `delete`.
    #[error("invalid patch at {path}: unknown $patch value {value}; expected \"merge\", \"replace\" or \"delete\"")]
    UnknownPatchDirective {
        /// Path of the map or list item holding the directive.
        path: String,
        /// The offending value, as JSON.
        value: String,
    },
    /// A directive whose value has the wrong shape, e.g. `$retainKeys` that is not a list of strings.
    #[error("invalid patch at {path}: {directive} must be {expected}")]
    MalformedDirective {
        /// Path of the map holding the directive.
        path: String,
        /// The directive key as written in the patch.
        directive: String,
        /// What the value should have been.
        expected: &'static str,
    },
    /// The patch sets a field that its own `$retainKeys` list would drop.
    #[error("invalid patch at {path}: field \"{field}\" is set by the patch but missing from $retainKeys")]
    FieldNotRetained {
        /// Path of the map holding `$retainKeys`.
        path: String,
        /// The field the patch sets.
        field: String,
    },
}

type Result<T> = std::result::Result<T, StrategicMergeError>;

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Applies `patch` to `original` and returns the result. `kind` is the object's kind (e.g. "Pod", "Node",
/// "Service") when known, used where the same field name merges differently per kind; when it is empty, the `kind`
/// field of `original` (or else of `patch`) is used.
///
/// A top-level `$patch: delete` yields an empty object, as in kube. An `original` that is not an object is treated
/// as an empty one.
pub fn apply(original: &Value, patch: &Value, kind: &str) -> std::result::Result<Value, StrategicMergeError> {
    let Value::Object(patch) = patch else {
        return Err(StrategicMergeError::NotAnObject { found: json_type(patch) });
    };
    let kind = if kind.is_empty() {
        [original.get("kind"), patch.get("kind")].into_iter().flatten().find_map(Value::as_str).unwrap_or_default()
    } else {
        kind
    };
    let original = original.as_object().cloned().unwrap_or_default();
    let merged = merge_map(original, patch, Ty::Root(RootKind::of(kind)), &Path::ROOT)?;
    Ok(Value::Object(merged.unwrap_or_default()))
}

// ---------------------------------------------------------------------------------------------------------------
// Schema: which type we are in, and how each of its list fields merges.
// ---------------------------------------------------------------------------------------------------------------

/// The shape of a top-level object, as far as merging is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RootKind {
    Pod,
    /// `PodTemplate`: the pod template sits at `template`.
    PodTemplate,
    /// Kinds whose pod template sits at `spec.template`.
    Workload,
    CronJob,
    Node,
    Service,
    /// Anything else: only `metadata` and `conditions` get special treatment.
    Other,
}

impl RootKind {
    fn of(kind: &str) -> Self {
        match kind {
            "Pod" => Self::Pod,
            "PodTemplate" => Self::PodTemplate,
            "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" | "Job" | "ReplicationController" => {
                Self::Workload
            }
            "CronJob" => Self::CronJob,
            "Node" => Self::Node,
            "Service" => Self::Service,
            _ => Self::Other,
        }
    }
}

/// The API type a value belongs to; only types with strategically merged lists (or leading to them) are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Unknown,
    Root(RootKind),
    ObjectMeta,
    PodTemplateSpec,
    PodSpec,
    Container,
    PodStatus,
    /// Spec of a kind with `spec.template`, and `spec` of a CronJob's `jobTemplate`.
    WorkloadSpec,
    CronJobSpec,
    JobTemplateSpec,
    NodeSpec,
    NodeStatus,
    ServiceSpec,
}

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy {
    /// No strategy: the patch list replaces the original.
    Replace,
    /// `patchStrategy:"merge"` on a list of scalars: an ordered set.
    Set,
    /// `patchStrategy:"merge"` with `patchMergeKey`: objects merge on this key.
    MergeOn(&'static str),
}

/// The type of field `name` of `ty` (the item type, for lists) and how it merges if it is a list.
fn field(ty: Ty, name: &str) -> (Ty, ListStrategy) {
    use ListStrategy::{MergeOn, Replace, Set};
    use RootKind as K;
    let (child, strategy) = match (ty, name) {
        (Ty::Root(_) | Ty::PodTemplateSpec | Ty::JobTemplateSpec, "metadata") => (Ty::ObjectMeta, Replace),
        (Ty::Root(K::Pod), "spec") | (Ty::PodTemplateSpec, "spec") => (Ty::PodSpec, Replace),
        (Ty::Root(K::Pod), "status") => (Ty::PodStatus, Replace),
        (Ty::Root(K::PodTemplate), "template") | (Ty::WorkloadSpec, "template") => (Ty::PodTemplateSpec, Replace),
        (Ty::Root(K::Workload), "spec") | (Ty::JobTemplateSpec, "spec") => (Ty::WorkloadSpec, Replace),
        (Ty::Root(K::CronJob), "spec") => (Ty::CronJobSpec, Replace),
        (Ty::CronJobSpec, "jobTemplate") => (Ty::JobTemplateSpec, Replace),
        (Ty::Root(K::Node), "spec") => (Ty::NodeSpec, Replace),
        (Ty::Root(K::Node), "status") => (Ty::NodeStatus, Replace),
        (Ty::Root(K::Service), "spec") => (Ty::ServiceSpec, Replace),

        (Ty::ObjectMeta, "ownerReferences") => (Ty::Unknown, MergeOn("uid")),
        (Ty::ObjectMeta, "finalizers") => (Ty::Unknown, Set),

        (Ty::PodSpec, "containers" | "initContainers" | "ephemeralContainers") => (Ty::Container, MergeOn("name")),
        (Ty::PodSpec, "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates") => {
            (Ty::Unknown, MergeOn("name"))
        }
        (Ty::PodSpec, "hostAliases") => (Ty::Unknown, MergeOn("ip")),
        (Ty::PodSpec, "topologySpreadConstraints") => (Ty::Unknown, MergeOn("topologyKey")),
        (Ty::Container, "env") => (Ty::Unknown, MergeOn("name")),
        (Ty::Container, "ports") => (Ty::Unknown, MergeOn("containerPort")),
        (Ty::Container, "volumeMounts") => (Ty::Unknown, MergeOn("mountPath")),
        (Ty::Container, "volumeDevices") => (Ty::Unknown, MergeOn("devicePath")),
        (Ty::PodStatus, "podIPs" | "hostIPs") => (Ty::Unknown, MergeOn("ip")),
        (Ty::PodStatus, "resourceClaimStatuses") => (Ty::Unknown, MergeOn("name")),

        // Node taints have no patch strategy in kube (`+listType=atomic`): kubectl taint sends the whole new
        // list, so merging would make removals impossible.
        (Ty::NodeSpec, "podCIDRs") => (Ty::Unknown, Set),
        (Ty::NodeStatus, "addresses") => (Ty::Unknown, MergeOn("type")),
        (Ty::ServiceSpec, "ports") => (Ty::Unknown, MergeOn("port")),

        // Every built-in `conditions` list (Pod, Node, Namespace, Deployment, Job, PVC, ...) merges on `type`.
        (_, "conditions") => (Ty::Unknown, MergeOn("type")),
        _ => (Ty::Unknown, Replace),
    };
    (child, strategy)
}

// ---------------------------------------------------------------------------------------------------------------
// Paths, kept as a stack-allocated chain and rendered only for errors.
// ---------------------------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Seg<'a> {
    Root,
    Field(&'a str),
    Index(usize),
}

#[derive(Clone, Copy)]
struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
}

impl<'a> Path<'a> {
    const ROOT: Path<'static> = Path { parent: None, seg: Seg::Root };

    fn field(&'a self, name: &'a str) -> Path<'a> {
        Path { parent: Some(self), seg: Seg::Field(name) }
    }

    fn index(&'a self, i: usize) -> Path<'a> {
        Path { parent: Some(self), seg: Seg::Index(i) }
    }

    fn render(&self) -> String {
        let mut segs = Vec::new();
        let mut cur = Some(self);
        while let Some(p) = cur {
            segs.push(p.seg);
            cur = p.parent;
        }
        let mut out = String::new();
        for seg in segs.into_iter().rev() {
            match seg {
                Seg::Root => {}
                Seg::Field(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                }
                Seg::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        if out.is_empty() { "the top level".to_owned() } else { out }
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Merging.
// ---------------------------------------------------------------------------------------------------------------

/// What a `$patch` directive asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Directive {
    Merge,
    Replace,
    Delete,
}

/// Reads the `$patch` directive of a patch map, if any.
fn directive(patch: &Map<String, Value>, path: &Path) -> Result<Option<Directive>> {
    match patch.get(PATCH) {
        None => Ok(None),
        Some(Value::String(s)) if s == "merge" => Ok(Some(Directive::Merge)),
        Some(Value::String(s)) if s == "replace" => Ok(Some(Directive::Replace)),
        Some(Value::String(s)) if s == "delete" => Ok(Some(Directive::Delete)),
        Some(other) => {
            Err(StrategicMergeError::UnknownPatchDirective { path: path.render(), value: other.to_string() })
        }
    }
}

fn malformed(path: &Path, directive: &str, expected: &'static str) -> StrategicMergeError {
    StrategicMergeError::MalformedDirective { path: path.render(), directive: directive.to_owned(), expected }
}

/// Merges patch map `patch` into `original`, which is of type `ty`. `None` means the map is to be deleted
/// (`$patch: delete`).
fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    ty: Ty,
    path: &Path,
) -> Result<Option<Map<String, Value>>> {
    match directive(patch, path)? {
        Some(Directive::Delete) => return Ok(None),
        // Merging into an empty map is how we take the patch as it is while still stripping nested directives.
        Some(Directive::Replace) => original = Map::new(),
        Some(Directive::Merge) | None => {}
    }

    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let keys = retain
            .as_array()
            .and_then(|items| items.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
            .ok_or_else(|| malformed(path, RETAIN_KEYS, "a list of field names"))?;
        // Like kube, refuse a patch that sets a field its own retain list would drop: that is a client bug.
        if let Some(field) = patch.iter().find(|(k, v)| !v.is_null() && !is_directive(k) && !keys.contains(&k.as_str()))
        {
            return Err(StrategicMergeError::FieldNotRetained { path: path.render(), field: field.0.clone() });
        }
        original.retain(|k, _| keys.contains(&k.as_str()));
    }

    // Deletions from primitive lists come before the merge, so a value both deleted and added ends up present.
    for (key, values) in patch {
        let Some(name) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) else { continue };
        let values = values.as_array().ok_or_else(|| malformed(path, key, "a list of values"))?;
        if let Some(Value::Array(list)) = original.get_mut(name) {
            list.retain(|item| !values.contains(item));
        }
    }

    for (key, value) in patch {
        if is_directive(key) {
            continue;
        }
        let field_path = path.field(key);
        if value.is_null() {
            original.remove(key);
            continue;
        }
        let (child_ty, strategy) = field(ty, key);
        let old = original.get_mut(key).map(std::mem::take);
        match merge_value(old, value, child_ty, strategy, &field_path)? {
            Some(merged) => {
                original.insert(key.clone(), merged);
            }
            None => {
                original.remove(key);
            }
        }
    }

    for (key, order) in patch {
        let Some(name) = key.strip_prefix(SET_ELEMENT_ORDER) else { continue };
        let order = order.as_array().ok_or_else(|| malformed(path, key, "a list"))?;
        let (_, strategy) = field(ty, name);
        if let Some(Value::Array(list)) = original.get_mut(name) {
            *list = reorder(std::mem::take(list), order, strategy, &path.field(key))?;
        }
    }

    Ok(Some(original))
}

fn is_directive(key: &str) -> bool {
    key == PATCH
        || key == RETAIN_KEYS
        || key.starts_with(SET_ELEMENT_ORDER)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

/// Merges a non-null patch value into the original value of a field (absent when `None`). `None` in the result
/// means the field is to be removed.
fn merge_value(
    original: Option<Value>,
    patch: &Value,
    ty: Ty,
    strategy: ListStrategy,
    path: &Path,
) -> Result<Option<Value>> {
    Ok(match patch {
        Value::Object(patch) => {
            // A type mismatch (patching a map over a scalar) is resolved in the patch's favour.
            let original = match original {
                Some(Value::Object(m)) => m,
                _ => Map::new(),
            };
            merge_map(original, patch, ty, path)?.map(Value::Object)
        }
        Value::Array(patch) => {
            let original = match original {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            };
            Some(Value::Array(merge_list(original, patch, ty, strategy, path)?))
        }
        scalar => Some(scalar.clone()),
    })
}

/// Merges patch list `patch` into `original`, a list of `item_ty` merged with `strategy`.
fn merge_list(
    mut original: Vec<Value>,
    patch: &[Value],
    item_ty: Ty,
    strategy: ListStrategy,
    path: &Path,
) -> Result<Vec<Value>> {
    // First pass: `$patch` items. `replace` drops the original, `delete` removes matching original items; both are
    // markers that never become list items themselves.
    let mut replace = strategy == ListStrategy::Replace;
    let mut items = Vec::with_capacity(patch.len());
    for (i, item) in patch.iter().enumerate() {
        let Value::Object(map) = item else {
            items.push((i, item));
            continue;
        };
        match directive(map, &path.index(i))? {
            None | Some(Directive::Merge) => items.push((i, item)),
            Some(Directive::Replace) => replace = true,
            Some(Directive::Delete) => match strategy {
                ListStrategy::MergeOn(key) => {
                    let value = map
                        .get(key)
                        .ok_or_else(|| StrategicMergeError::MissingMergeKey { path: path.render(), key })?;
                    original.retain(|o| o.get(key) != Some(value));
                }
                // Without a merge key there is nothing to match the item against; it is only dropped.
                ListStrategy::Set | ListStrategy::Replace => {}
            },
        }
    }
    if replace {
        original.clear();
    }

    for (i, item) in items {
        let item_path = path.index(i);
        match strategy {
            ListStrategy::Replace => {
                if let Some(v) = merge_item(None, item, item_ty, &item_path)? {
                    original.push(v);
                }
            }
            ListStrategy::Set => {
                if !original.contains(item) {
                    original.push(item.clone());
                }
            }
            ListStrategy::MergeOn(key) => {
                let Value::Object(map) = item else {
                    return Err(StrategicMergeError::ItemNotAnObject {
                        path: path.render(),
                        key,
                        found: json_type(item),
                    });
                };
                let value =
                    map.get(key).ok_or_else(|| StrategicMergeError::MissingMergeKey { path: path.render(), key })?;
                match original.iter().position(|o| o.get(key) == Some(value)) {
                    Some(at) => {
                        let old = std::mem::take(&mut original[at]);
                        match merge_item(Some(old), item, item_ty, &item_path)? {
                            Some(v) => original[at] = v,
                            None => {
                                original.remove(at);
                            }
                        }
                    }
                    None => {
                        if let Some(v) = merge_item(None, item, item_ty, &item_path)? {
                            original.push(v);
                        }
                    }
                }
            }
        }
    }
    Ok(original)
}

/// Merges one list item. Nested lists of unknown item types replace; `null` items are kept as they are.
fn merge_item(original: Option<Value>, item: &Value, ty: Ty, path: &Path) -> Result<Option<Value>> {
    match item {
        Value::Null => Ok(Some(Value::Null)),
        _ => merge_value(original, item, ty, ListStrategy::Replace, path),
    }
}

/// Reorders `list` to follow `order` (the value of `$setElementOrder/<field>`); items the order does not mention
/// keep their relative order after the mentioned ones.
fn reorder(list: Vec<Value>, order: &[Value], strategy: ListStrategy, path: &Path) -> Result<Vec<Value>> {
    // A replaced list already has the patch's order.
    if strategy == ListStrategy::Replace {
        return Ok(list);
    }
    let mut slots: Vec<Option<Value>> = list.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    for entry in order {
        let slot = match strategy {
            ListStrategy::MergeOn(key) => {
                let want = entry
                    .as_object()
                    .and_then(|m| m.get(key))
                    .ok_or_else(|| StrategicMergeError::MissingMergeKey { path: path.render(), key })?;
                slots.iter_mut().find(|s| s.as_ref().is_some_and(|v| v.get(key) == Some(want)))
            }
            _ => slots.iter_mut().find(|s| s.as_ref() == Some(entry)),
        };
        if let Some(v) = slot.and_then(Option::take) {
            out.push(v);
        }
    }
    out.extend(slots.into_iter().flatten());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    /// Fails if any `$`-directive survived into `v`.
    fn assert_no_directive(v: &Value, at: &str) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    assert!(!is_directive(k), "{at}: directive {k} leaked into the result");
                    assert_no_directive(v, at);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| assert_no_directive(v, at)),
            _ => {}
        }
    }

    #[test]
    fn merges() {
        // (name, original, patch, kind, expected)
        let cases: Vec<(&str, Value, Value, &str, Value)> = vec![
            (
                "map merge and null delete",
                json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "data": {"k": "v"}}),
                json!({"metadata": {"labels": {"x": null, "z": "3"}}, "data": null}),
                "ConfigMap",
                json!({"metadata": {"name": "a", "labels": {"y": "2", "z": "3"}}}),
            ),
            (
                "null for an absent key is a no-op, and nulls inside new maps are dropped",
                json!({"metadata": {"name": "a"}}),
                json!({"metadata": {"labels": {"gone": null, "kept": "1"}, "annotations": null}}),
                "ConfigMap",
                json!({"metadata": {"name": "a", "labels": {"kept": "1"}}}),
            ),
            (
                "kubectl annotate",
                json!({"metadata": {"name": "n", "annotations": {"a": "1"}}}),
                json!({"metadata": {"annotations": {"b": "2"}}}),
                "Node",
                json!({"metadata": {"name": "n", "annotations": {"a": "1", "b": "2"}}}),
            ),
            (
                "plain list is replaced",
                json!({"spec": {"containers": [{"name": "c", "args": ["a", "b"], "image": "i"}]}}),
                json!({"spec": {"containers": [{"name": "c", "args": ["z"]}]}}),
                "Pod",
                json!({"spec": {"containers": [{"name": "c", "args": ["z"], "image": "i"}]}}),
            ),
            (
                "list of an unknown field is replaced",
                json!({"spec": {"things": [{"name": "a", "v": 1}, {"name": "b"}]}}),
                json!({"spec": {"things": [{"name": "a", "w": 2}]}}),
                "Widget",
                json!({"spec": {"things": [{"name": "a", "w": 2}]}}),
            ),
            (
                "tolerations are replaced",
                json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}}),
                json!({"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}),
                "Pod",
                json!({"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}),
            ),
            (
                "conditions merge by type",
                json!({"status": {"conditions": [
                    {"type": "Ready", "status": "False", "reason": "Starting"},
                    {"type": "Custom", "status": "True"}
                ]}}),
                json!({"status": {"conditions": [
                    {"type": "Ready", "status": "True", "reason": null},
                    {"type": "PodScheduled", "status": "True"}
                ]}}),
                "Pod",
                json!({"status": {"conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "Custom", "status": "True"},
                    {"type": "PodScheduled", "status": "True"}
                ]}}),
            ),
            (
                "conditions merge by type for kinds we know nothing else about",
                json!({"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "B", "status": "True"}]}}),
                json!({"status": {"conditions": [{"type": "A", "status": "True"}]}}),
                "Namespace",
                json!({"status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}}),
            ),
            (
                "ownerReferences merge by uid",
                json!({"metadata": {"ownerReferences": [
                    {"uid": "1", "kind": "ReplicaSet", "name": "rs", "controller": true},
                    {"uid": "2", "kind": "Thing", "name": "t"}
                ]}}),
                json!({"metadata": {"ownerReferences": [
                    {"uid": "2", "blockOwnerDeletion": true},
                    {"uid": "3", "kind": "Other", "name": "o"}
                ]}}),
                "Pod",
                json!({"metadata": {"ownerReferences": [
                    {"uid": "1", "kind": "ReplicaSet", "name": "rs", "controller": true},
                    {"uid": "2", "kind": "Thing", "name": "t", "blockOwnerDeletion": true},
                    {"uid": "3", "kind": "Other", "name": "o"}
                ]}}),
            ),
            (
                "containers merge by name with nested env merge by name",
                json!({"spec": {"containers": [
                    {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                    {"name": "side", "image": "side:1"}
                ]}}),
                json!({"spec": {"containers": [
                    {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]},
                    {"name": "new", "image": "new:1"}
                ]}}),
                "Pod",
                json!({"spec": {"containers": [
                    {"name": "app", "image": "app:2", "env": [
                        {"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}
                    ]},
                    {"name": "side", "image": "side:1"},
                    {"name": "new", "image": "new:1"}
                ]}}),
            ),
            (
                "env valueFrom replaced by value via null",
                json!({"spec": {"containers": [{"name": "c", "env": [
                    {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                ]}]}}),
                json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "x", "valueFrom": null}]}]}}),
                "Pod",
                json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "x"}]}]}}),
            ),
            (
                "initContainers, volumes, volumeMounts, imagePullSecrets and hostAliases merge",
                json!({"spec": {
                    "initContainers": [{"name": "init", "image": "i:1"}],
                    "containers": [{"name": "c", "volumeMounts": [{"mountPath": "/a", "name": "va"}],
                        "volumeDevices": [{"devicePath": "/dev/x", "name": "dx"}]}],
                    "volumes": [{"name": "va", "emptyDir": {}}],
                    "imagePullSecrets": [{"name": "s1"}],
                    "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}]
                }}),
                json!({"spec": {
                    "initContainers": [{"name": "init", "image": "i:2"}],
                    "containers": [{"name": "c", "volumeMounts": [{"mountPath": "/a", "readOnly": true},
                        {"mountPath": "/b", "name": "vb"}], "volumeDevices": [{"devicePath": "/dev/y", "name": "dy"}]}],
                    "volumes": [{"name": "vb", "emptyDir": {}}],
                    "imagePullSecrets": [{"name": "s2"}],
                    "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}]
                }}),
                "Pod",
                json!({"spec": {
                    "initContainers": [{"name": "init", "image": "i:2"}],
                    "containers": [{"name": "c",
                        "volumeMounts": [{"mountPath": "/a", "name": "va", "readOnly": true}, {"mountPath": "/b", "name": "vb"}],
                        "volumeDevices": [{"devicePath": "/dev/x", "name": "dx"}, {"devicePath": "/dev/y", "name": "dy"}]}],
                    "volumes": [{"name": "va", "emptyDir": {}}, {"name": "vb", "emptyDir": {}}],
                    "imagePullSecrets": [{"name": "s1"}, {"name": "s2"}],
                    "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}]
                }}),
            ),
            (
                "$patch: delete removes a list item",
                json!({"spec": {"containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}}),
                json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}),
                "Pod",
                json!({"spec": {"containers": [{"name": "b", "image": "b"}]}}),
            ),
            (
                "$patch: delete of an absent item is a no-op",
                json!({"spec": {"containers": [{"name": "b", "image": "b"}]}}),
                json!({"spec": {"containers": [{"name": "zz", "$patch": "delete"}]}}),
                "Pod",
                json!({"spec": {"containers": [{"name": "b", "image": "b"}]}}),
            ),
            (
                "$patch: delete on a map removes it",
                json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}}}]}}),
                json!({"spec": {"containers": [{"name": "a", "resources": {"$patch": "delete"}}]}}),
                "Pod",
                json!({"spec": {"containers": [{"name": "a"}]}}),
            ),
            (
                "$patch: merge is the default",
                json!({"metadata": {"labels": {"a": "1"}}}),
                json!({"metadata": {"labels": {"$patch": "merge", "b": "2"}}}),
                "Pod",
                json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            ),
            (
                "$patch: replace list marker",
                json!({"spec": {"containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}}),
                json!({"spec": {"containers": [{"name": "c", "image": "c"}, {"$patch": "replace"}]}}),
                "Pod",
                json!({"spec": {"containers": [{"name": "c", "image": "c"}]}}),
            ),
            (
                "$patch: replace map",
                json!({"metadata": {"name": "x", "labels": {"a": "1", "b": "2"}}}),
                json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
                "Pod",
                json!({"metadata": {"name": "x", "labels": {"c": "3"}}}),
            ),
            (
                "$patch: replace map strips nested directives",
                json!({"spec": {"selector": {"a": "1"}}}),
                json!({"spec": {"$patch": "replace", "selector": {"b": "2", "$patch": "merge"}}}),
                "Service",
                json!({"spec": {"selector": {"b": "2"}}}),
            ),
            (
                "finalizers merge as an ordered set",
                json!({"metadata": {"finalizers": ["a", "b"]}}),
                json!({"metadata": {"finalizers": ["c", "a", "d"]}}),
                "Pod",
                json!({"metadata": {"finalizers": ["a", "b", "c", "d"]}}),
            ),
            (
                "$deleteFromPrimitiveList removes finalizers",
                json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "zz"]}}),
                "Pod",
                json!({"metadata": {"finalizers": ["a", "c"]}}),
            ),
            (
                "$deleteFromPrimitiveList together with additions",
                json!({"metadata": {"finalizers": ["a", "b"]}}),
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "finalizers": ["c"]}}),
                "Pod",
                json!({"metadata": {"finalizers": ["b", "c"]}}),
            ),
            (
                "finalizers set to null are removed",
                json!({"metadata": {"name": "x", "finalizers": ["a"]}}),
                json!({"metadata": {"finalizers": null}}),
                "Pod",
                json!({"metadata": {"name": "x"}}),
            ),
            (
                "node podCIDRs merge as a set",
                json!({"spec": {"podCIDRs": ["10.0.0.0/24"]}}),
                json!({"spec": {"podCIDRs": ["10.0.0.0/24", "fd00::/64"]}}),
                "Node",
                json!({"spec": {"podCIDRs": ["10.0.0.0/24", "fd00::/64"]}}),
            ),
            (
                "$retainKeys drops keys not listed (deployment strategy)",
                json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
                json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": null}}}),
                "Deployment",
                json!({"spec": {"strategy": {"type": "Recreate"}}}),
            ),
            (
                "$retainKeys in a volume switches its source",
                json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "emptyDir": {}}]}}),
                json!({"spec": {"volumes": [
                    {"name": "v", "$retainKeys": ["configMap", "name"], "configMap": {"name": "cm"}}
                ]}}),
                "Pod",
                json!({"spec": {"volumes": [{"name": "v", "configMap": {"name": "cm"}}, {"name": "w", "emptyDir": {}}]}}),
            ),
            (
                "$setElementOrder reorders a merged list and does not leak",
                json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "server-only"}]}}),
                json!({"spec": {
                    "$setElementOrder/containers": [{"name": "c"}, {"name": "b"}, {"name": "a"}],
                    "containers": [{"name": "c", "image": "c"}]
                }}),
                "Pod",
                json!({"spec": {"containers": [
                    {"name": "c", "image": "c"}, {"name": "b"}, {"name": "a"}, {"name": "server-only"}
                ]}}),
            ),
            (
                "kubectl apply removing a container",
                json!({"spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}}),
                json!({"spec": {
                    "$setElementOrder/containers": [{"name": "a"}],
                    "containers": [{"name": "a", "image": "a:2"}, {"name": "b", "$patch": "delete"}]
                }}),
                "Pod",
                json!({"spec": {"containers": [{"name": "a", "image": "a:2"}]}}),
            ),
            (
                "$setElementOrder on a primitive list and on an untouched list",
                json!({"metadata": {"finalizers": ["a", "b"]}, "status": {"conditions": [{"type": "X"}, {"type": "Y"}]}}),
                json!({
                    "metadata": {"$setElementOrder/finalizers": ["c", "b", "a"], "finalizers": ["c"]},
                    "status": {"$setElementOrder/conditions": [{"type": "Y"}, {"type": "X"}]}
                }),
                "Pod",
                json!({"metadata": {"finalizers": ["c", "b", "a"]}, "status": {"conditions": [{"type": "Y"}, {"type": "X"}]}}),
            ),
            (
                "kubelet-style node status patch",
                json!({"status": {
                    "conditions": [{"type": "Ready", "status": "False"}, {"type": "MemoryPressure", "status": "False"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n1"}]
                }}),
                json!({"status": {
                    "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]
                }}),
                "Node",
                json!({"status": {
                    "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n1"}]
                }}),
            ),
            (
                "kubectl cordon leaves taints alone",
                json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}),
                json!({"spec": {"unschedulable": true}}),
                "Node",
                json!({"spec": {"unschedulable": true, "taints": [{"key": "a", "effect": "NoSchedule"}]}}),
            ),
            (
                "kubectl uncordon",
                json!({"spec": {"unschedulable": true, "podCIDR": "10.0.0.0/24"}}),
                json!({"spec": {"unschedulable": null}}),
                "Node",
                json!({"spec": {"podCIDR": "10.0.0.0/24"}}),
            ),
            (
                "kubectl taint adds: the whole new list is sent",
                json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}),
                json!({"spec": {"taints": [
                    {"key": "a", "effect": "NoSchedule"}, {"key": "a", "value": "v", "effect": "NoExecute"}
                ]}}),
                "Node",
                json!({"spec": {"taints": [
                    {"key": "a", "effect": "NoSchedule"}, {"key": "a", "value": "v", "effect": "NoExecute"}
                ]}}),
            ),
            (
                "kubectl taint removes one: the shorter list replaces",
                json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}]}}),
                json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}),
                "Node",
                json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}),
            ),
            (
                "kubectl taint removes the last one",
                json!({"spec": {"unschedulable": true, "taints": [{"key": "a", "effect": "NoSchedule"}]}}),
                json!({"spec": {"taints": null}}),
                "Node",
                json!({"spec": {"unschedulable": true}}),
            ),
            (
                "service ports merge on port",
                json!({"spec": {"ports": [{"port": 80, "targetPort": 8080, "name": "http"}, {"port": 443}]}}),
                json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 8443, "name": "alt"}]}}),
                "Service",
                json!({"spec": {"ports": [
                    {"port": 80, "targetPort": 9090, "name": "http"}, {"port": 443}, {"port": 8443, "name": "alt"}
                ]}}),
            ),
            (
                "container ports merge on containerPort",
                json!({"spec": {"containers": [{"name": "c", "ports": [
                    {"containerPort": 80, "name": "http"}, {"containerPort": 81, "port": 1}
                ]}]}}),
                json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 81, "protocol": "UDP"}]}]}}),
                "Pod",
                json!({"spec": {"containers": [{"name": "c", "ports": [
                    {"containerPort": 80, "name": "http"}, {"containerPort": 81, "port": 1, "protocol": "UDP"}
                ]}]}}),
            ),
            (
                "deployment template containers merge",
                json!({"spec": {"replicas": 1, "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}
                }}}),
                json!({"spec": {"template": {
                    "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}},
                    "spec": {"containers": [{"name": "b", "image": "b:2"}]}
                }}}),
                "Deployment",
                json!({"spec": {"replicas": 1, "template": {
                    "metadata": {"labels": {"app": "x"}, "annotations": {"kubectl.kubernetes.io/restartedAt": "now"}},
                    "spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}]}
                }}}),
            ),
            (
                "cronjob job template containers merge",
                json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
                    "containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]
                }}}}}}),
                json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
                    "containers": [{"name": "a", "image": "a:2"}]
                }}}}}}),
                "CronJob",
                json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
                    "containers": [{"name": "a", "image": "a:2"}, {"name": "b", "image": "b:1"}]
                }}}}}}),
            ),
            (
                "containers outside a pod spec are replaced",
                json!({"spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b"}]}}),
                json!({"spec": {"containers": [{"name": "a", "image": "a:2"}]}}),
                "Service",
                json!({"spec": {"containers": [{"name": "a", "image": "a:2"}]}}),
            ),
            (
                "kind is taken from the object when not given",
                json!({"kind": "Pod", "spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b"}]}}),
                json!({"spec": {"containers": [{"name": "a", "image": "a:2"}]}}),
                "",
                json!({"kind": "Pod", "spec": {"containers": [{"name": "a", "image": "a:2"}, {"name": "b"}]}}),
            ),
            (
                "new merge-keyed list is built from the patch with directives stripped",
                json!({"metadata": {"name": "p"}}),
                json!({"spec": {"containers": [
                    {"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "$patch": "delete"}]},
                    {"name": "gone", "$patch": "delete"}
                ]}}),
                "Pod",
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}]}}),
            ),
            (
                "top-level $patch: replace",
                json!({"metadata": {"name": "a"}, "data": {"x": "1"}}),
                json!({"$patch": "replace", "metadata": {"name": "a"}}),
                "ConfigMap",
                json!({"metadata": {"name": "a"}}),
            ),
            (
                "dollar keys that are not directives are ordinary fields",
                json!({"spec": {}}),
                json!({"spec": {"$ref": "#/x"}}),
                "CustomResourceDefinition",
                json!({"spec": {"$ref": "#/x"}}),
            ),
        ];
        for (name, original, patch, kind, expected) in cases {
            let got = apply(&original, &patch, kind).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got, expected, "{name}");
            assert_no_directive(&got, name);
        }
    }

    #[test]
    fn errors() {
        // (name, original, patch, kind, expected error)
        let cases: Vec<(&str, Value, Value, &str, &str)> = vec![
            (
                "patch is an array",
                json!({}),
                json!([{"op": "add"}]),
                "Pod",
                "invalid patch: a strategic merge patch must be a JSON object, not array",
            ),
            (
                "patch is null",
                json!({}),
                json!(null),
                "Pod",
                "invalid patch: a strategic merge patch must be a JSON object, not null",
            ),
            (
                "list item without merge key",
                json!({"spec": {"containers": [{"name": "a"}]}}),
                json!({"spec": {"containers": [{"image": "x"}]}}),
                "Pod",
                "invalid patch at spec.containers: a list item lacks its merge key \"name\"",
            ),
            (
                "nested list item without merge key",
                json!({}),
                json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "env": [{"value": "1"}]}]}}}}),
                "Deployment",
                "invalid patch at spec.template.spec.containers[0].env: a list item lacks its merge key \"name\"",
            ),
            (
                "delete item without merge key",
                json!({"metadata": {"ownerReferences": [{"uid": "1"}]}}),
                json!({"metadata": {"ownerReferences": [{"$patch": "delete", "name": "x"}]}}),
                "Pod",
                "invalid patch at metadata.ownerReferences: a list item lacks its merge key \"uid\"",
            ),
            (
                "scalar item in a merge-keyed list",
                json!({}),
                json!({"spec": {"ports": [80]}}),
                "Service",
                "invalid patch at spec.ports: a list item is a number, but this list holds objects merged on \"port\"",
            ),
            (
                "unknown $patch value on a map",
                json!({}),
                json!({"metadata": {"labels": {"$patch": "squash"}}}),
                "Pod",
                "invalid patch at metadata.labels: unknown $patch value \"squash\"; expected \"merge\", \"replace\" or \"delete\"",
            ),
            (
                "unknown $patch value on a list item",
                json!({}),
                json!({"spec": {"containers": [{"name": "a", "$patch": 1}]}}),
                "Pod",
                "invalid patch at spec.containers[0]: unknown $patch value 1; expected \"merge\", \"replace\" or \"delete\"",
            ),
            (
                "$retainKeys not a list of strings",
                json!({}),
                json!({"spec": {"strategy": {"$retainKeys": "type"}}}),
                "Deployment",
                "invalid patch at spec.strategy: $retainKeys must be a list of field names",
            ),
            (
                "$retainKeys missing a field the patch sets",
                json!({}),
                json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "RollingUpdate", "rollingUpdate": {}}}}),
                "Deployment",
                "invalid patch at spec.strategy: field \"rollingUpdate\" is set by the patch but missing from $retainKeys",
            ),
            (
                "$setElementOrder entry without merge key",
                json!({"spec": {"containers": [{"name": "a"}]}}),
                json!({"spec": {"$setElementOrder/containers": [{"image": "a"}]}}),
                "Pod",
                "invalid patch at spec.$setElementOrder/containers: a list item lacks its merge key \"name\"",
            ),
            (
                "$deleteFromPrimitiveList not a list",
                json!({"metadata": {"finalizers": ["a"]}}),
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
                "Pod",
                "invalid patch at metadata: $deleteFromPrimitiveList/finalizers must be a list of values",
            ),
        ];
        for (name, original, patch, kind, expected) in cases {
            match apply(&original, &patch, kind) {
                Ok(v) => panic!("{name}: expected an error, got {v}"),
                Err(e) => assert_eq!(e.to_string(), expected, "{name}"),
            }
        }
    }

    #[test]
    fn top_level_delete_yields_empty_object() {
        let got = apply(&json!({"metadata": {"name": "a"}}), &json!({"$patch": "delete"}), "Pod");
        assert_eq!(got, Ok(json!({})));
    }

    #[test]
    fn original_is_not_modified_and_non_object_original_is_empty() {
        let original = json!({"metadata": {"labels": {"a": "1"}}});
        let before = original.clone();
        let _ = apply(&original, &json!({"metadata": {"labels": {"a": null}}}), "Pod");
        assert_eq!(original, before);
        assert_eq!(apply(&Value::Null, &json!({"a": 1}), "Pod"), Ok(json!({"a": 1})));
    }
}
