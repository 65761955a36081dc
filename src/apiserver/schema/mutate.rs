//! Defaulting and pruning: the two steps that change the object, in place.

use serde_json::{Map, Value};

use super::compile::{Additional, Node};

/// The fields kube keeps at the root and in embedded resources whatever the schema says.
fn is_meta_field(name: &str) -> bool {
    matches!(name, "apiVersion" | "kind" | "metadata")
}

/// kube drops a `null` given for a non-nullable property without a default while decoding.
fn drops_null(prop: &Node, value: &Value) -> bool {
    value.is_null() && !prop.nullable && prop.default.is_none()
}

/// A `null` array item or map value that is not nullable gets the default of its schema, if any.
fn default_null(node: &Node, value: &mut Value) {
    if value.is_null()
        && !node.nullable
        && let Some(default) = &node.default
    {
        *value = default.clone();
    }
}

pub(super) fn apply_defaults(node: &Node, value: &mut Value) {
    match value {
        Value::Object(map) => {
            for name in &node.defaulted_properties {
                if !map.contains_key(name)
                    && let Some(default) = node.properties.get(name).and_then(|prop| prop.default.as_ref())
                {
                    map.insert(name.clone(), default.clone());
                }
            }
            // One pass over the object: nulls replaced or dropped, then defaults inside every value, including
            // the defaults just inserted.
            map.retain(|name, child| {
                if let Some(prop) = node.properties.get(name) {
                    if child.is_null() && !prop.nullable {
                        match &prop.default {
                            Some(default) => *child = default.clone(),
                            None => return false,
                        }
                    }
                    apply_defaults(prop, child);
                } else if let Additional::Schema(values) = &node.additional {
                    default_null(values, child);
                    apply_defaults(values, child);
                }
                true
            });
        }
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                for item in items {
                    default_null(item_node, item);
                    apply_defaults(item_node, item);
                }
            }
        }
        _ => {}
    }
}

/// Prunes a whole resource: like an embedded resource, its `apiVersion`, `kind` and `metadata` always stay.
pub(super) fn prune_root(node: &Node, value: &mut Value) {
    match value {
        Value::Object(map) if node.preserve_unknown => skip_prune_object(node, map, true),
        Value::Object(map) => prune_object(node, map, true),
        other => prune(node, other),
    }
}

fn prune(node: &Node, value: &mut Value) {
    if node.preserve_unknown {
        return skip_prune(node, value);
    }
    match value {
        Value::Object(map) => prune_object(node, map, false),
        Value::Array(items) => match &node.items {
            Some(item_node) => items.iter_mut().for_each(|item| prune(item_node, item)),
            None => items.iter_mut().for_each(prune_all),
        },
        _ => {}
    }
}

fn prune_object(node: &Node, map: &mut Map<String, Value>, root: bool) {
    map.retain(|name, child| {
        // Embedded resources keep string apiVersion/kind and their metadata (the root: whatever they hold).
        if (root || node.embedded)
            && (name == "metadata" || (matches!(name.as_str(), "apiVersion" | "kind") && (root || child.is_string())))
        {
            return true;
        }
        if let Some(prop) = node.properties.get(name) {
            if drops_null(prop, child) {
                return false;
            }
            prune(prop, child);
            return true;
        }
        match &node.additional {
            Additional::Schema(values) => {
                prune(values, child);
                true
            }
            // kube prunes values of `additionalProperties: true` as having no schema at all.
            Additional::Any => {
                prune_all(child);
                true
            }
            Additional::Absent | Additional::Deny => false,
        }
    });
}

/// Below `x-kubernetes-preserve-unknown-fields`: unknown fields stay, declared ones are still pruned.
fn skip_prune(node: &Node, value: &mut Value) {
    match value {
        Value::Object(map) => skip_prune_object(node, map, false),
        // As kube: the preservation extends to the items' own fields.
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                items.iter_mut().for_each(|item| skip_prune(item_node, item));
            }
        }
        _ => {}
    }
}

fn skip_prune_object(node: &Node, map: &mut Map<String, Value>, root: bool) {
    map.retain(|name, child| {
        if (root || node.embedded) && is_meta_field(name) {
            return true;
        }
        if let Some(prop) = node.properties.get(name) {
            if drops_null(prop, child) {
                return false;
            }
            prune(prop, child);
        } else {
            match &node.additional {
                Additional::Schema(values) => prune(values, child),
                Additional::Any => prune_all(child),
                Additional::Absent | Additional::Deny => {}
            }
        }
        true
    });
}

/// Pruning without a schema: objects lose every field, arrays are pruned item by item, scalars stay.
fn prune_all(value: &mut Value) {
    match value {
        Value::Object(map) => map.clear(),
        Value::Array(items) => items.iter_mut().for_each(prune_all),
        _ => {}
    }
}
