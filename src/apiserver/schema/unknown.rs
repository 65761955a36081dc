//! Which fields pruning would remove, as kube reports them for `fieldValidation` (`spec.foo`, `spec.list[0].bar`).
//!
//! A read-only walk that follows the same rules as [`super::mutate`]'s pruning; `null`s that pruning drops for a
//! declared property are not unknown fields (kube drops them silently too).

use serde_json::Value;

use super::compile::{Additional, Node};

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

/// Paths of the fields of a whole resource that pruning would remove; `apiVersion`, `kind` and `metadata` are
/// never looked at.
pub(super) fn unknown_fields_root(node: &Node, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match value {
        Value::Object(map) => {
            for (name, child) in map {
                if matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                member(node, name, child, name, node.preserve_unknown, &mut out);
            }
        }
        other => walk(node, other, "", false, &mut out),
    }
    out.sort();
    out
}

/// One member of an object described by `node`; `keep_unknown` when the object preserves unknown fields.
fn member(node: &Node, name: &str, child: &Value, path: &str, keep_unknown: bool, out: &mut Vec<String>) {
    if let Some(prop) = node.properties.get(name) {
        walk(prop, child, path, false, out);
        return;
    }
    match &node.additional {
        Additional::Schema(values) => walk(values, child, path, false, out),
        // Values of `additionalProperties: true` have no schema: kube prunes everything inside them.
        Additional::Any => everything(child, path, out),
        Additional::Absent | Additional::Deny if !keep_unknown => out.push(path.to_owned()),
        Additional::Absent | Additional::Deny => {}
    }
}

/// `preserving`: below `x-kubernetes-preserve-unknown-fields`, which extends to array items as in kube.
fn walk(node: &Node, value: &Value, path: &str, preserving: bool, out: &mut Vec<String>) {
    let preserving = preserving || node.preserve_unknown;
    match value {
        Value::Object(map) => {
            for (name, child) in map {
                // Embedded resources keep their apiVersion, kind and metadata.
                if node.embedded
                    && (name == "metadata"
                        || (matches!(name.as_str(), "apiVersion" | "kind") && (preserving || child.is_string())))
                {
                    continue;
                }
                member(node, name, child, &join(path, name), preserving, out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let item_path = format!("{path}[{i}]");
                match &node.items {
                    Some(item_node) => walk(item_node, item, &item_path, preserving, out),
                    None if preserving => {}
                    None => everything(item, &item_path, out),
                }
            }
        }
        _ => {}
    }
}

/// Below a value without a schema every object member is unknown.
fn everything(value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => out.extend(map.keys().map(|k| join(path, k))),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                everything(item, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::StructuralSchema;

    #[test]
    fn reports_what_pruning_removes() {
        let schema = StructuralSchema::compile(&json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                             "properties": {"known": {"type": "object", "properties": {}}}},
                    "any": {"type": "object", "additionalProperties": true},
                    "embedded": {"type": "object", "x-kubernetes-embedded-resource": true,
                                 "properties": {"spec": {"type": "object"}}},
                    "nothing": {"type": "string"},
                }},
            },
        }))
        .unwrap();
        let object = json!({
            "apiVersion": "x/v1", "kind": "X", "metadata": {"anything": 1},
            "spec": {
                "list": [{"a": "x", "b": 1}, {"c": 2}],
                "labels": {"k": "v"},
                "free": {"whatever": {"deep": 1}, "known": {"gone": 1}},
                "any": {"k": {"inner": 1}, "s": "v"},
                "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}, "extra": 1},
                "nothing": null,
                "unknown": {"x": 1},
            },
            "status": {},
        });
        let mut found = schema.unknown_fields(&object);
        found.sort();
        assert_eq!(
            found,
            vec![
                "spec.any.k.inner",
                "spec.embedded.extra",
                "spec.free.known.gone",
                "spec.list[0].b",
                "spec.list[1].c",
                "spec.unknown",
                "status",
            ]
        );
        // The same fields are what pruning removes.
        let mut pruned = object.clone();
        schema.prune(&mut pruned);
        assert!(pruned["spec"]["list"][0].get("b").is_none() && pruned.get("status").is_none());
        assert_eq!(pruned["spec"]["free"]["whatever"], json!({"deep": 1}));
    }
}
