//! Server-side field validation (`fieldValidation=Strict|Warn|Ignore`) on create, update and patch.
//!
//! kube-apiserver decodes a request strictly unless told to ignore: fields the type does not know and fields
//! given twice are problems. `Strict` fails the request (400 on create and update, 422 on patch, with kube's
//! `strict decoding error: unknown field "spec.foo"`), `Warn` (the default) drops the unknown fields and reports
//! each problem in a `Warning: 299 - "..."` header, `Ignore` drops them silently.
//!
//! "Unknown" is what the type would not keep: for custom resources what pruning removes (see
//! [`super::schema::StructuralSchema::unknown_fields`]), for built-in kinds what the k8s-openapi type does not
//! declare (its generated schema, see [`super::openapi::builtin_components`]); `metadata` is checked against
//! `ObjectMeta` for both. Duplicates are looked for in the request body or patch, JSON or YAML.
//!
//! Works on the request context (`context`) and must not import `handlers`, which calls it.

use std::collections::HashSet;
use std::fmt;

use axum::http::{HeaderMap, header};
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::context::Ctx;
use super::error::{ApiError, Cause, Subject};
use super::openapi;

/// What the request asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Directive {
    /// Unknown or duplicate fields fail the request.
    Strict,
    /// They are dropped and reported as warnings (the default).
    Warn,
    /// They are dropped silently.
    Ignore,
}

/// Parses the `fieldValidation` query parameter (absent or empty: `Warn`).
pub fn directive(value: Option<&str>) -> Result<Directive, ApiError> {
    match value.unwrap_or_default() {
        "" | "Warn" => Ok(Directive::Warn),
        "Strict" => Ok(Directive::Strict),
        "Ignore" => Ok(Directive::Ignore),
        other => Err(ApiError::bad_request(format!(
            "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
        ))),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

/// A request document to look for duplicate fields in.
#[derive(Clone, Copy, Debug)]
pub enum Raw<'a> {
    /// A JSON body or patch.
    Json(&'a [u8]),
    /// A YAML body or apply patch.
    Yaml(&'a [u8]),
}

/// Fields given more than once (later values win when decoding, in JSON as in YAML).
pub fn duplicate_fields(raw: Raw<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let seed = Duplicates { path: String::new(), out: &mut out };
    // A body that does not parse was already refused; nothing to add then.
    let _parsed = match raw {
        Raw::Json(bytes) => seed.deserialize(&mut serde_json::Deserializer::from_slice(bytes)).is_ok(),
        Raw::Yaml(bytes) => seed.deserialize(serde_yaml::Deserializer::from_slice(bytes)).is_ok(),
    };
    out
}

struct Duplicates<'a> {
    path: String,
    out: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for Duplicates<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Duplicates<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq.next_element_seed(Duplicates { path: format!("{}[{i}]", self.path), out: &mut *self.out })?.is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = join(&self.path, &key);
            if !seen.insert(key) {
                self.out.push(path.clone());
            }
            map.next_value_seed(Duplicates { path, out: &mut *self.out })?;
        }
        Ok(())
    }
}

/// Follows `$ref`s and the single-element `allOf` wrappers schemars puts around refs with a description.
fn resolve<'a>(defs: &'a Map<String, Value>, mut schema: &'a Value) -> &'a Value {
    for _ in 0..32 {
        if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
            match target.strip_prefix("#/components/schemas/").and_then(|name| defs.get(name)) {
                Some(next) => schema = next,
                None => return &Value::Null,
            }
            continue;
        }
        if schema.get("properties").is_none()
            && let Some([only]) = schema.get("allOf").and_then(Value::as_array).map(Vec::as_slice)
        {
            schema = only;
            continue;
        }
        break;
    }
    schema
}

/// For `oneOf`/`anyOf` (JSONSchemaPropsOrBool and the like): the branch that describes this kind of value.
fn branch<'a>(defs: &'a Map<String, Value>, schema: &'a Value, value: &Value) -> Option<&'a Value> {
    let alternatives = schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(Value::as_array)?;
    alternatives.iter().map(|s| resolve(defs, s)).find(|s| match value {
        Value::Object(_) => s.get("properties").is_some() || s.get("additionalProperties").is_some(),
        Value::Array(_) => s.get("items").is_some(),
        _ => false,
    })
}

/// Records (and, with `drop`, removes) the members of `value` that `schema` does not declare.
fn walk(defs: &Map<String, Value>, schema: &Value, value: &mut Value, path: &str, drop: bool, out: &mut Vec<String>) {
    let mut schema = resolve(defs, schema);
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    if schema.get("oneOf").is_some() || schema.get("anyOf").is_some() {
        match branch(defs, schema, value) {
            Some(chosen) => schema = chosen,
            None => return,
        }
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            // An object schema that declares nothing (RawExtension, FieldsV1, JSON) takes anything.
            if properties.is_none() && additional.is_none_or(|a| a == &Value::Bool(true)) {
                return;
            }
            let mut unknown = Vec::new();
            for (key, child) in map.iter_mut() {
                let child_path = join(path, key);
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(prop), _) => walk(defs, prop, child, &child_path, drop, out),
                    (None, Some(Value::Bool(true))) => {}
                    (None, Some(values)) if values.is_object() => walk(defs, values, child, &child_path, drop, out),
                    _ => unknown.push(key.clone()),
                }
            }
            for key in unknown {
                out.push(join(path, &key));
                if drop {
                    map.remove(&key);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(defs, item_schema, item, &format!("{path}[{i}]"), drop, out);
                }
            }
        }
        _ => {}
    }
}

/// Unknown fields of `metadata` (checked against ObjectMeta), removed when `drop`.
fn metadata_unknown(obj: &mut Value, drop: bool, out: &mut Vec<String>) {
    let common = openapi::common_components();
    let Some(meta) = obj.get_mut("metadata") else { return };
    let schema = serde_json::json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"});
    walk(&common.schemas, &schema, meta, "metadata", drop, out);
}

/// The unknown fields of an object of the request's type, in kube's form (`spec.foo`); with `drop` they are
/// removed from built-in objects and from `metadata` (pruning removes them from custom resources later).
pub fn unknown_fields(ctx: &Ctx<'_>, obj: &mut Value, drop: bool) -> Vec<String> {
    let mut out = Vec::new();
    if ctx.rt.custom {
        metadata_unknown(obj, drop, &mut out);
        if let Some(schema) = ctx.rt.version(ctx.version).and_then(|v| v.schema.as_ref()) {
            out.extend(schema.unknown_fields(obj));
        }
    } else if let Some(components) = openapi::builtin_components(&ctx.rt.gr.group, ctx.version)
        && let Some(name) = components.kinds.get(&ctx.rt.kind)
    {
        let schema = serde_json::json!({"$ref": format!("#/components/schemas/{name}")});
        walk(&components.schemas, &schema, obj, "", drop, &mut out);
    } else {
        metadata_unknown(obj, drop, &mut out);
    }
    out.sort();
    out
}

/// What a checked body became, and the warnings to send with the response.
pub struct Checked {
    /// The body, without unknown fields unless the request was refused.
    pub body: Value,
    /// `unknown field "spec.foo"` and the like, for `Warning` headers.
    pub warnings: Vec<String>,
}

/// The body as its content type says it is written.
/// The body to look for duplicate fields in; none for protobuf, which cannot repeat a field.
fn raw_body<'a>(headers: &HeaderMap, raw: &'a [u8]) -> Option<Raw<'a>> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if ct.contains("protobuf") {
        None
    } else if ct.contains("yaml") {
        Some(Raw::Yaml(raw))
    } else {
        Some(Raw::Json(raw))
    }
}

fn problems(ctx: &Ctx<'_>, raw: Option<Raw<'_>>, body: &mut Value, directive: Directive) -> Vec<String> {
    // Ignore reports nothing, so duplicates need not be looked for (the last value already won).
    let raw = raw.filter(|_| directive != Directive::Ignore);
    let mut found: Vec<String> =
        raw.map(duplicate_fields).unwrap_or_default().into_iter().map(|p| format!("duplicate field \"{p}\"")).collect();
    let unknown = unknown_fields(ctx, body, directive != Directive::Strict);
    found.extend(unknown.into_iter().map(|p| format!("unknown field \"{p}\"")));
    found
}

/// Checks the body of a create or update (`raw`: the request body, looked at for duplicates).
pub fn check_body(ctx: &Ctx<'_>, headers: &HeaderMap, raw: &[u8], mut body: Value) -> Result<Checked, ApiError> {
    let directive = directive(ctx.query.field_validation.as_deref())?;
    let found = problems(ctx, raw_body(headers, raw), &mut body, directive);
    match directive {
        Directive::Strict if !found.is_empty() => {
            let kind = body.get("kind").and_then(Value::as_str).unwrap_or(&ctx.rt.kind).to_string();
            let version = body
                .get("apiVersion")
                .and_then(Value::as_str)
                .map(|v| v.rsplit('/').next().unwrap_or(v).to_string())
                .unwrap_or_else(|| ctx.version.to_string());
            Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {}: strict decoding error: {}",
                ctx.rt.kind,
                found.join(", ")
            )))
        }
        Directive::Ignore => Ok(Checked { body, warnings: Vec::new() }),
        _ => Ok(Checked { body, warnings: found }),
    }
}

/// Checks the result of a patch (`raw`: the patch, looked at for duplicates).
pub fn check_patched(ctx: &Ctx<'_>, raw: Option<Raw<'_>>, mut patched: Value) -> Result<Checked, ApiError> {
    let directive = directive(ctx.query.field_validation.as_deref())?;
    let found = problems(ctx, raw, &mut patched, directive);
    match directive {
        Directive::Strict if !found.is_empty() => {
            // As kube: an Invalid status about the field `patch`, with no kind or name.
            let shown = serde_json::to_string(&patched.to_string()).unwrap_or_default();
            let cause = Cause {
                reason: "FieldValueInvalid".into(),
                field: "patch".into(),
                message: format!("Invalid value: {shown}: strict decoding error: {}", found.join(", ")),
            };
            Err(ApiError::invalid(Subject { group: "", resource: "", name: "" }, "", vec![cause]))
        }
        Directive::Ignore => Ok(Checked { body: patched, warnings: Vec::new() }),
        _ => Ok(Checked { body: patched, warnings: found }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_found_with_their_path() {
        let raw = br#"{"a": 1, "spec": {"x": [{"b": 1, "b": 2}], "y": 1, "y": 2}, "a": 3}"#;
        let mut found = duplicate_fields(Raw::Json(raw));
        found.sort();
        assert_eq!(found, vec!["a", "spec.x[0].b", "spec.y"]);
        assert!(duplicate_fields(Raw::Json(br#"{"a": {"a": 1}}"#)).is_empty());
        let yaml = b"a: 1\nspec:\n  x:\n  - b: 1\n    b: 2\n";
        assert_eq!(duplicate_fields(Raw::Yaml(yaml)), vec!["spec.x[0].b"]);
        // The YAML parser itself keeps the last value silently: this is the only place duplicates show.
        assert_eq!(serde_yaml::from_slice::<Value>(yaml).unwrap()["spec"]["x"][0]["b"], 2);
    }

    #[test]
    fn directives_parse() {
        assert_eq!(directive(None).unwrap(), Directive::Warn);
        assert_eq!(directive(Some("Strict")).unwrap(), Directive::Strict);
        assert_eq!(directive(Some("Ignore")).unwrap(), Directive::Ignore);
        assert_eq!(directive(Some("strict")).unwrap_err().code, 400);
    }
}

#[cfg(test)]
mod object_tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::apiserver::request::{Query, ResourcePath};
    use crate::apiserver::resources::{Registry, ResourceType, from_crd};

    fn unknown_in(rt: Arc<ResourceType>, version: &str, mut obj: Value, drop: bool) -> (Vec<String>, Value) {
        let path = ResourcePath {
            group: rt.gr.group.clone(),
            version: version.into(),
            resource: rt.gr.resource.clone(),
            namespace: None,
            name: None,
            subresource: None,
        };
        let query = Query::default();
        let ctx =
            Ctx { rt, version, path: &path, query: &query, manager: "test".into(), table: None, metadata_only: None };
        let found = unknown_fields(&ctx, &mut obj, drop);
        (found, obj)
    }

    fn builtin(group: &str, resource: &str, obj: Value) -> Vec<String> {
        let rt = Registry::builtin().lookup(group, "v1", resource).unwrap();
        unknown_in(rt, "v1", obj, false).0
    }

    #[test]
    fn real_builtin_objects_have_no_unknown_fields() {
        for file in crate::api::crds::files().unwrap() {
            let crd: Value = serde_yaml::from_str(&file.yaml).unwrap();
            let found = builtin("apiextensions.k8s.io", "customresourcedefinitions", crd);
            assert!(found.is_empty(), "{}: {found:?}", file.file_name);
        }
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "labels": {"a": "b"}, "annotations": {"x": "y"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u",
                                     "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                                   "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:a": {}}}}}],
                "finalizers": ["x/y"], "resourceVersion": "1", "uid": "u", "generation": 1,
                "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {
                "containers": [{"name": "c", "image": "i", "args": ["a"], "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "resources": {"limits": {"cpu": "1", "memory": 1024}, "requests": {"cpu": 0.5}},
                    "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
                    "securityContext": {"capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true},
                    "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
                "volumes": [{"name": "v", "configMap": {"name": "cm", "items": [{"key": "k", "path": "p"}]}},
                            {"name": "e", "emptyDir": {}}],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms":
                    [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}}},
                "nodeSelector": {"a": "b"}, "restartPolicy": "Always", "serviceAccountName": "sa",
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.1"},
        });
        assert_eq!(builtin("", "pods", pod), Vec::<String>::new());
        let csr = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.x"},
            "spec": {"group": "x", "version": "v1", "groupPriorityMinimum": 1, "versionPriority": 1,
                     "service": {"name": "s", "namespace": "n", "port": 443}, "caBundle": "AAAA"}});
        assert_eq!(builtin("apiregistration.k8s.io", "apiservices", csr), Vec::<String>::new());
    }

    #[test]
    fn unknown_builtin_fields_are_found_and_dropped() {
        let rt = Registry::builtin().lookup("apps", "v1", "deployments").unwrap();
        let obj = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "extra": 1,
            "metadata": {"name": "d", "bogus": {"a": 1}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}},
                                  "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolice": "x"}]}}},
        });
        let (found, kept) = unknown_in(rt.clone(), "v1", obj.clone(), false);
        assert_eq!(found, vec!["extra", "metadata.bogus", "spec.template.spec.containers[0].imagePullPolice"]);
        assert_eq!(kept, obj);
        let (_, dropped) = unknown_in(rt, "v1", obj, true);
        assert!(dropped.get("extra").is_none() && dropped["metadata"].get("bogus").is_none());
        assert_eq!(dropped["spec"]["template"]["spec"]["containers"][0], json!({"name": "c", "image": "i"}));
    }

    #[test]
    fn custom_resources_report_pruned_fields_and_metadata() {
        let crd: Value =
            serde_yaml::from_str(include_str!("../../crds/machine.sapcloud.io_machinedeployments.yaml")).unwrap();
        let rt = Arc::new(from_crd(&crd).unwrap());
        let obj = json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
            "metadata": {"name": "m", "labelz": {}},
            "spec": {"replicas": 1, "foo": true,
                     "template": {"metadata": {"labels": {"a": "b"}, "anything": 1}, "spec": {"class": {"name": "c"}}}},
        });
        let (found, dropped) = unknown_in(rt, "v1alpha1", obj, true);
        assert_eq!(found, vec!["metadata.labelz", "spec.foo"]);
        // Metadata is cleaned here; pruning removes the rest when the object is admitted.
        assert!(dropped["metadata"].get("labelz").is_none());
    }
}
