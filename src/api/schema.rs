//! Schema fragments that schemars cannot derive in the shape Kubernetes expects.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object whose content the API server must keep as written (`runtime.RawExtension`, template metadata).
pub(crate) fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// A map of resource name to quantity (`corev1.ResourceList`), as controller-gen writes it.
pub(crate) fn resource_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
            "x-kubernetes-int-or-string": true
        }
    })
}

/// A list of metav1 Conditions keyed by `type`, as CAPI declares them.
pub(crate) fn condition_list(g: &mut SchemaGenerator) -> Schema {
    let item = g.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>();
    json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"]
    })
}
