//! Kubernetes protobuf request bodies, as client-go sends them for built-in kinds (controller-runtime's clients of
//! a workload cluster, `kubectl create <kind>`): the magic `k8s\0`, then a `runtime.Unknown` envelope naming the
//! kind and carrying the message. Decoded with the kube-rs project's generated messages (`k8s-pb`) into the JSON
//! the handlers work on. Understood so far: the options and subresources writes send (DeleteOptions, Eviction) and
//! the kinds clusterctl and `kubectl create namespace|secret|configmap` create (Namespace, Secret, ConfigMap);
//! another kind is answered 415 with a hint.

use base64::Engine;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{Map, Value, json};

use super::error::ApiError;

/// The four bytes before every Kubernetes protobuf message.
const MAGIC: &[u8] = b"k8s\0";

/// Decodes a protobuf request body into its JSON form.
pub fn decode(raw: &[u8]) -> Result<Value, ApiError> {
    let envelope = raw
        .strip_prefix(MAGIC)
        .ok_or_else(|| ApiError::bad_request("the protobuf request body does not start with the `k8s\\0` prefix"))?;
    let unknown = Unknown::decode(envelope)
        .map_err(|e| ApiError::bad_request(format!("the protobuf request body is not a runtime.Unknown: {e}")))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let (api_version, kind) = (type_meta.api_version.unwrap_or_default(), type_meta.kind.unwrap_or_default());
    let message = unknown.raw.unwrap_or_default();
    let bad = |e: prost::DecodeError| ApiError::bad_request(format!("the protobuf {kind} is not valid: {e}"));
    let mut value = match kind.as_str() {
        "DeleteOptions" => delete_options(&meta::DeleteOptions::decode(message.as_slice()).map_err(bad)?),
        "Eviction" => {
            let eviction = k8s_pb::api::policy::v1::Eviction::decode(message.as_slice()).map_err(bad)?;
            let metadata = eviction.metadata.unwrap_or_default();
            let mut value = json!({"metadata": {"name": metadata.name, "namespace": metadata.namespace}});
            if let Some(options) = &eviction.delete_options {
                value["deleteOptions"] = delete_options(options);
            }
            value
        }
        "Namespace" => {
            let namespace = core::Namespace::decode(message.as_slice()).map_err(bad)?;
            let finalizers = namespace.spec.map(|s| s.finalizers).unwrap_or_default();
            json!({
                "metadata": object_meta(namespace.metadata.unwrap_or_default()),
                "spec": if finalizers.is_empty() { Value::Null } else { json!({"finalizers": finalizers}) },
            })
        }
        "Secret" => {
            let secret = core::Secret::decode(message.as_slice()).map_err(bad)?;
            json!({
                "metadata": object_meta(secret.metadata.unwrap_or_default()),
                "immutable": secret.immutable,
                "type": secret.r#type,
                "data": non_empty(base64_values(secret.data)),
                "stringData": non_empty(json!(secret.string_data)),
            })
        }
        "ConfigMap" => {
            let map = core::ConfigMap::decode(message.as_slice()).map_err(bad)?;
            json!({
                "metadata": object_meta(map.metadata.unwrap_or_default()),
                "immutable": map.immutable,
                "data": non_empty(json!(map.data)),
                "binaryData": non_empty(base64_values(map.binary_data)),
            })
        }
        _ => {
            return Err(ApiError::with_code(
                415,
                "UnsupportedMediaType",
                format!(
                    "the embedded API server does not decode protobuf {kind} bodies yet (only JSON and YAML): write the \
                     object to a file and use `kubectl create -f` or `kubectl apply -f`"
                ),
            ));
        }
    };
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(kind);
    Ok(strip_nulls(value))
}

/// The fields of ObjectMeta a client may write (the server sets the others).
fn object_meta(meta: meta::ObjectMeta) -> Value {
    let owners: Vec<Value> = meta
        .owner_references
        .into_iter()
        .map(|o| {
            json!({"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid,
                   "controller": o.controller, "blockOwnerDeletion": o.block_owner_deletion})
        })
        .collect();
    // Go writes every plain string, empty ones too; an empty one is unset (JSON clients leave it out).
    let set = |s: Option<String>| s.filter(|s| !s.is_empty());
    json!({
        "name": set(meta.name),
        "generateName": set(meta.generate_name),
        "namespace": set(meta.namespace),
        "resourceVersion": set(meta.resource_version),
        "uid": set(meta.uid),
        "labels": non_empty(json!(meta.labels)),
        "annotations": non_empty(json!(meta.annotations)),
        "ownerReferences": non_empty(json!(owners)),
        "finalizers": non_empty(json!(meta.finalizers)),
    })
}

fn base64_values(map: std::collections::BTreeMap<String, Vec<u8>>) -> Value {
    let engine = base64::engine::general_purpose::STANDARD;
    Value::Object(map.into_iter().map(|(k, v)| (k, json!(engine.encode(v)))).collect())
}

/// Null for an empty map or list (left out, as a JSON client leaves it out).
fn non_empty(value: Value) -> Value {
    match &value {
        Value::Object(m) if m.is_empty() => Value::Null,
        Value::Array(a) if a.is_empty() => Value::Null,
        _ => value,
    }
}

fn delete_options(options: &meta::DeleteOptions) -> Value {
    let preconditions =
        options.preconditions.as_ref().map(|p| json!({"uid": p.uid, "resourceVersion": p.resource_version}));
    json!({
        "gracePeriodSeconds": options.grace_period_seconds,
        "preconditions": preconditions,
        "orphanDependents": options.orphan_dependents,
        "propagationPolicy": options.propagation_policy,
        "dryRun": if options.dry_run.is_empty() { Value::Null } else { json!(options.dry_run) },
    })
}

/// Drops unset (null) fields, as a JSON client would not send them.
fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, strip_nulls(v))).collect::<Map<_, _>>(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, message: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(message),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        [MAGIC.to_vec(), unknown.encode_to_vec()].concat()
    }

    #[test]
    fn delete_options_and_evictions_decode_to_their_json() {
        let options = meta::DeleteOptions {
            propagation_policy: Some("Foreground".into()),
            preconditions: Some(meta::Preconditions { uid: Some("u-1".into()), resource_version: None }),
            ..Default::default()
        };
        let cases = [
            (
                envelope("meta.k8s.io/v1", "DeleteOptions", meta::DeleteOptions::default().encode_to_vec()),
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"}),
            ),
            (
                envelope("v1", "DeleteOptions", options.encode_to_vec()),
                json!({"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground",
                       "preconditions": {"uid": "u-1"}}),
            ),
            (
                envelope(
                    "policy/v1",
                    "Eviction",
                    k8s_pb::api::policy::v1::Eviction {
                        metadata: Some(meta::ObjectMeta {
                            name: Some("p".into()),
                            namespace: Some("ns".into()),
                            ..Default::default()
                        }),
                        delete_options: Some(meta::DeleteOptions {
                            grace_period_seconds: Some(0),
                            ..Default::default()
                        }),
                    }
                    .encode_to_vec(),
                ),
                json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "ns"},
                       "deleteOptions": {"gracePeriodSeconds": 0}}),
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(decode(&raw).unwrap(), want);
        }
    }

    #[test]
    fn namespaces_secrets_and_config_maps_decode_to_their_json() {
        let meta = |name: &str| meta::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            labels: [("a".to_string(), "b".to_string())].into(),
            ..Default::default()
        };
        let secret = core::Secret {
            metadata: Some(meta("s")),
            data: [("k".to_string(), b"v".to_vec())].into(),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        let map = core::ConfigMap {
            metadata: Some(meta("c")),
            data: [("k".to_string(), "v".to_string())].into(),
            ..Default::default()
        };
        // As Go writes it: every plain string present, empty ones too.
        let namespace = core::Namespace {
            metadata: Some(meta::ObjectMeta {
                name: Some("n".into()),
                generate_name: Some(String::new()),
                namespace: Some(String::new()),
                uid: Some(String::new()),
                resource_version: Some(String::new()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let cases = [
            (
                envelope("v1", "Secret", secret.encode_to_vec()),
                json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": {"k": "dg=="},
                    "metadata": {"name": "s", "namespace": "ns", "labels": {"a": "b"}}}),
            ),
            (
                envelope("v1", "ConfigMap", map.encode_to_vec()),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"},
                    "metadata": {"name": "c", "namespace": "ns", "labels": {"a": "b"}}}),
            ),
            (
                envelope("v1", "Namespace", namespace.encode_to_vec()),
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}),
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(decode(&raw).unwrap(), want);
        }
    }

    #[test]
    fn other_kinds_and_garbage_are_refused() {
        assert_eq!(decode(&envelope("v1", "Pod", Vec::new())).unwrap_err().code, 415);
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code, 400);
    }
}
