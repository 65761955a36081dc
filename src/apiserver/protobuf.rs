//! Kubernetes protobuf request bodies, as client-go sends them for built-in kinds (controller-runtime's clients of
//! a workload cluster, `kubectl create <kind>`): the magic `k8s\0`, then a `runtime.Unknown` envelope naming the
//! kind and carrying the message. Decoded with the kube-rs project's generated messages (`k8s-pb`) into the JSON
//! the handlers work on. Only the option and subresource kinds writes send are understood so far; another kind is
//! answered 415 with a hint.

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
        _ => {
            return Err(ApiError::with_code(
                415,
                "UnsupportedMediaType",
                &format!(
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
    fn other_kinds_and_garbage_are_refused() {
        assert_eq!(decode(&envelope("v1", "ConfigMap", Vec::new())).unwrap_err().code, 415);
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code, 400);
    }
}
