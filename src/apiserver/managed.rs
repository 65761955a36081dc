//! Field ownership (`metadata.managedFields`), enough for server-side apply to detect conflicts.
//!
//! Simplified from kube-apiserver's structured-merge-diff: a field is a path of object keys; lists and scalars
//! are atomic leaves; in `metadata` only labels, annotations, finalizers and ownerReferences are tracked. An apply
//! owns exactly the leaves it sets; any other write owns the leaves it changes; removed fields are owned by nobody.
//! A non-forced apply that would change a leaf another manager owns fails with 409 Conflict — which is what
//! leader election over a Lease relies on.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// A field path, e.g. `["spec", "holderIdentity"]`.
pub type FieldPath = Vec<String>;
/// A set of field paths.
pub type FieldSet = BTreeSet<FieldPath>;

/// The leaves an object (or an apply configuration) sets.
pub fn leaves(obj: &Value, include_status: bool) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(map) = obj.as_object() else { return out };
    for (key, value) in map {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "status" if !include_status => {}
            "metadata" => {
                for tracked in ["labels", "annotations"] {
                    if let Some(m) = value.get(tracked).and_then(Value::as_object) {
                        for k in m.keys() {
                            out.insert(vec!["metadata".into(), tracked.into(), k.clone()]);
                        }
                    }
                }
                for tracked in ["finalizers", "ownerReferences"] {
                    if value.get(tracked).is_some_and(|v| !v.is_null()) {
                        out.insert(vec!["metadata".into(), tracked.into()]);
                    }
                }
            }
            _ => collect(value, vec![key.clone()], &mut out),
        }
    }
    out
}

fn collect(value: &Value, path: FieldPath, out: &mut FieldSet) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let mut p = path.clone();
                p.push(k.clone());
                collect(v, p, out);
            }
        }
        // An empty object sets nothing; null removes.
        Value::Null | Value::Object(_) => {}
        _ => {
            out.insert(path);
        }
    }
}

/// The value at a field path; a null counts as absent.
pub(crate) fn get<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k)).filter(|v| !v.is_null())
}

/// Leaves whose value differs between two objects (present in either).
pub fn changed(before: &Value, after: &Value, include_status: bool) -> FieldSet {
    leaves(before, include_status)
        .union(&leaves(after, include_status))
        .filter(|p| get(before, p) != get(after, p))
        .cloned()
        .collect()
}

fn encode(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for key in path {
            let entry = cur.entry(format!("f:{key}")).or_insert_with(|| json!({}));
            let Some(next) = entry.as_object_mut() else { break };
            cur = next;
        }
    }
    Value::Object(root)
}

fn decode(value: &Value, path: FieldPath, out: &mut FieldSet) {
    let Some(map) = value.as_object() else { return };
    let children: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| k.starts_with("f:")).collect();
    if children.is_empty() {
        if !path.is_empty() {
            out.insert(path);
        }
        return;
    }
    for (k, v) in children {
        let mut p = path.clone();
        p.push(k[2..].to_string());
        decode(v, p, out);
    }
}

/// One manager's entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The field manager.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The apiVersion the fields were written in.
    pub api_version: String,
    /// When the entry last changed.
    pub time: String,
    /// `""` or `"status"`.
    pub subresource: String,
    /// The owned fields.
    pub fields: FieldSet,
}

/// The entries of an object.
pub fn read(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj.pointer("/metadata/managedFields").and_then(Value::as_array) else { return Vec::new() };
    list.iter()
        .map(|e| {
            let mut fields = FieldSet::new();
            decode(&e["fieldsV1"], Vec::new(), &mut fields);
            Entry {
                manager: e["manager"].as_str().unwrap_or_default().into(),
                operation: e["operation"].as_str().unwrap_or("Update").into(),
                api_version: e["apiVersion"].as_str().unwrap_or_default().into(),
                time: e["time"].as_str().unwrap_or_default().into(),
                subresource: e["subresource"].as_str().unwrap_or_default().into(),
                fields,
            }
        })
        .collect()
}

/// Writes entries into `metadata.managedFields` (removing the field when there are none).
pub fn write(obj: &mut Value, entries: &[Entry]) {
    let meta = super::object::metadata_mut(obj);
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version, "time": e.time,
                "fieldsType": "FieldsV1", "fieldsV1": encode(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// Fields an apply by `manager` would change that others own: `(field, owner)` pairs.
pub fn conflicts(current: &Value, manager: &str, applied: &Value) -> Vec<(String, String)> {
    let entries = read(current);
    let mut out = Vec::new();
    for path in leaves(applied, false) {
        if get(current, &path).is_none_or(|v| Some(v) == get(applied, &path)) {
            continue;
        }
        for e in entries.iter().filter(|e| e.manager != manager && e.fields.contains(&path)) {
            out.push((format!(".{}", path.join(".")), e.manager.clone()));
        }
    }
    out
}

/// Records a write: `owned` becomes `manager`'s (an apply replaces its set, an update adds to it); nobody else
/// keeps those fields, and fields now absent from `result` are owned by nobody.
pub fn record(
    result: &mut Value,
    previous: Option<&Value>,
    manager: &str,
    apply: bool,
    owned: FieldSet,
    api_version: &str,
    subresource: &str,
) {
    let mut entries = previous.map(read).unwrap_or_default();
    let operation = if apply { "Apply" } else { "Update" };
    let before = entries.clone();
    for e in entries.iter_mut().filter(|e| !(e.manager == manager && e.operation == operation)) {
        e.fields.retain(|p| !owned.contains(p));
    }
    match entries.iter_mut().find(|e| e.manager == manager && e.operation == operation) {
        Some(e) => {
            if apply {
                e.fields = owned;
            } else {
                e.fields.extend(owned);
            }
        }
        None => entries.push(Entry {
            manager: manager.into(),
            operation: operation.into(),
            api_version: api_version.into(),
            time: String::new(),
            subresource: subresource.into(),
            fields: owned,
        }),
    }
    for e in &mut entries {
        e.fields.retain(|p| get(result, p).is_some());
    }
    let now = super::object::now();
    for e in &mut entries {
        let unchanged =
            before.iter().any(|b| b.manager == e.manager && b.operation == e.operation && b.fields == e.fields);
        if !unchanged || e.time.is_empty() {
            e.time = now.clone();
        }
    }
    write(result, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_track_spec_and_selected_metadata() {
        let obj = json!({"apiVersion": "v1", "metadata": {"name": "x", "labels": {"a": "1"}, "finalizers": ["f"]},
                         "spec": {"a": {"b": 1, "c": [1]}, "d": null}, "status": {"s": 1}});
        let got: Vec<String> = leaves(&obj, false).into_iter().map(|p| p.join(".")).collect();
        assert_eq!(got, ["metadata.finalizers", "metadata.labels.a", "spec.a.b", "spec.a.c"]);
    }

    #[test]
    fn encoding_round_trips() {
        let set = leaves(&json!({"spec": {"a": 1, "b": {"c": 2}}}), false);
        let mut back = FieldSet::new();
        decode(&encode(&set), Vec::new(), &mut back);
        assert_eq!(set, back);
    }

    #[test]
    fn another_managers_field_conflicts_until_it_is_removed() {
        let mut lease = json!({"spec": {"holderIdentity": "a", "renewTime": "t1"}});
        let owned = leaves(&lease, false);
        record(&mut lease, None, "mgr-a", true, owned, "coordination.k8s.io/v1", "");
        let b = json!({"spec": {"holderIdentity": "b", "renewTime": "t2"}});
        let found = conflicts(&lease, "mgr-b", &b);
        assert_eq!(found.len(), 2);
        assert!(found.iter().all(|(_, owner)| owner == "mgr-a"));
        assert!(conflicts(&lease, "mgr-a", &b).is_empty(), "own fields never conflict");
        // Released: fields removed by an update are owned by nobody.
        let released = json!({"spec": {}});
        let mut result = released.clone();
        record(
            &mut result,
            Some(&lease),
            "mgr-b",
            false,
            changed(&lease, &released, false),
            "coordination.k8s.io/v1",
            "",
        );
        assert!(read(&result).is_empty());
        assert!(conflicts(&result, "mgr-b", &b).is_empty());
    }
}
