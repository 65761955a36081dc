//! Small readers shared by the MachineSet and MachineDeployment decisions: labels and annotations of an
//! `ObjectMeta`, MCM's RFC 3339 timestamps, and the "semantic" equality Kubernetes uses when it compares specs
//! (a missing map equals an empty one).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde_json::Value;

/// The value of annotation `key`, if present.
pub(crate) fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str)
}

/// The value of label `key`, if present.
pub(crate) fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str)
}

/// Sets (or, with `None`, removes) an annotation; returns whether anything changed.
pub(crate) fn set_annotation(meta: &mut ObjectMeta, key: &str, value: Option<&str>) -> bool {
    match value {
        Some(v) => {
            let map = meta.annotations.get_or_insert_with(BTreeMap::new);
            if map.get(key).map(String::as_str) == Some(v) {
                return false;
            }
            map.insert(key.to_string(), v.to_string());
            true
        }
        None => meta.annotations.as_mut().is_some_and(|m| m.remove(key).is_some()),
    }
}

/// Whether every `key=value` of `selector` is among `labels` (an empty selector matches everything).
pub(crate) fn labels_match(
    selector: Option<&BTreeMap<String, String>>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    selector.into_iter().flatten().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// Parses an RFC 3339 timestamp as MCM writes them (`2026-01-02T15:04:05Z`); anything else is `None`.
pub(crate) fn parse_rfc3339(value: &str) -> Option<Timestamp> {
    // Go's RFC 3339 layout requires the `T` separator and an offset; jiff is more lenient about the
    // separator, so check the shape first to reject what MCM would reject.
    if value.len() < 20 || value.as_bytes().get(10) != Some(&b'T') {
        return None;
    }
    value.parse().ok()
}

/// Formats a timestamp the way MCM does (`time.RFC3339`, whole seconds, UTC).
pub(crate) fn format_rfc3339(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// JSON of `value` with nulls, empty objects and empty arrays removed recursively: Go's semantic equality treats
/// a missing map or list as equal to an empty one. Zeros, `false` and empty strings are kept: in our types they
/// are `Option`s, and `Some(0)` differs from "not set" (e.g. `maxEvictRetries: 0`).
pub(crate) fn normalized_json<T: Serialize>(value: &T) -> Value {
    prune(serde_json::to_value(value).unwrap_or(Value::Null))
}

fn prune(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, prune(v))).filter(|(_, v)| !is_empty(v)).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(prune).collect()),
        other => other,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(_) | Value::Number(_) | Value::String(_) => false,
    }
}

/// Semantic equality of two values: equal after [`normalized_json`].
pub(crate) fn semantically_equal<T: Serialize>(a: &T, b: &T) -> bool {
    normalized_json(a) == normalized_json(b)
}

/// The JSON merge patch (RFC 7386) that turns `from` into `to`, or `None` when they are equal. Removed keys
/// become `null`; arrays and scalars are replaced whole.
pub(crate) fn merge_patch(from: &Value, to: &Value) -> Option<Value> {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = serde_json::Map::new();
            for (k, va) in a {
                match b.get(k) {
                    None => {
                        out.insert(k.clone(), Value::Null);
                    }
                    Some(vb) => {
                        if let Some(d) = merge_patch(va, vb) {
                            out.insert(k.clone(), d);
                        }
                    }
                }
            }
            for (k, vb) in b {
                if !a.contains_key(k) {
                    out.insert(k.clone(), vb.clone());
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        _ => (from != to).then(|| to.clone()),
    }
}

/// The merge patch between two serializable objects (see [`merge_patch`]).
pub(crate) fn merge_patch_of<T: Serialize>(from: &T, to: &T) -> Option<Value> {
    let from = serde_json::to_value(from).ok()?;
    let to = serde_json::to_value(to).ok()?;
    merge_patch(&from, &to)
}

/// The merge patch of a status subresource from `old` to `new` (`{"status": …}`), or `None` when they are equal.
/// Removed fields become `null`, so a list that empties (say `failedMachines`) goes instead of staying.
pub fn status_patch<T: Serialize>(old: &T, new: &T) -> Option<Value> {
    merge_patch_of(old, new).map(|p| serde_json::json!({ "status": p }))
}

/// Canonical bytes of a JSON value: object keys sorted at every level, no whitespace. Stable whatever the map
/// implementation `serde_json` was built with.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(*k) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_parsing_matches_go_layout() {
        let cases = [
            ("utc", "2026-01-02T15:04:05Z", true),
            ("offset", "2026-01-02T15:04:05+02:00", true),
            ("fraction", "2026-01-02T15:04:05.123Z", true),
            ("space separator", "2026-01-02 15:04:05Z", false),
            ("date only", "2026-01-02", false),
            ("no offset", "2026-01-02T15:04:05", false),
            ("garbage", "yesterday", false),
            ("empty", "", false),
        ];
        for (name, input, ok) in cases {
            assert_eq!(parse_rfc3339(input).is_some(), ok, "{name}");
        }
    }

    #[test]
    fn format_is_whole_seconds_utc() {
        let ts: Timestamp = "2026-01-02T15:04:05.987Z".parse().unwrap();
        assert_eq!(format_rfc3339(ts), "2026-01-02T15:04:05Z");
    }

    #[test]
    fn semantic_equality_ignores_empty_collections() {
        let a = serde_json::json!({"labels": {}, "spec": {"taints": []}, "x": null});
        let b = serde_json::json!({});
        assert!(semantically_equal(&a, &b));
        let c = serde_json::json!({"labels": {"a": "b"}});
        assert!(!semantically_equal(&a, &c));
    }

    #[test]
    fn merge_patch_table() {
        use serde_json::json;
        let cases = [
            ("equal", json!({"a": 1}), json!({"a": 1}), None),
            ("changed scalar", json!({"a": 1}), json!({"a": 2}), Some(json!({"a": 2}))),
            ("removed key", json!({"a": 1, "b": 2}), json!({"a": 1}), Some(json!({"b": null}))),
            ("added key", json!({}), json!({"a": {"b": 1}}), Some(json!({"a": {"b": 1}}))),
            ("nested", json!({"s": {"x": 1, "y": 2}}), json!({"s": {"x": 1, "y": 3}}), Some(json!({"s": {"y": 3}}))),
            ("array replaced whole", json!({"l": [1, 2]}), json!({"l": [1]}), Some(json!({"l": [1]}))),
        ];
        for (name, from, to, expected) in cases {
            assert_eq!(merge_patch(&from, &to), expected, "{name}");
        }
    }

    #[test]
    fn canonical_json_sorts_keys() {
        let v = serde_json::json!({"b": 1, "a": {"d": [1, {"z": 1, "y": 2}], "c": "x"}});
        assert_eq!(canonical_json(&v), r#"{"a":{"c":"x","d":[1,{"y":2,"z":1}]},"b":1}"#);
    }
}
