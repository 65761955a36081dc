//! What kube-apiserver does to an object between the request and storage: metadata rules, status and spec
//! separation, generation, CRD registration and status, schema defaulting, pruning and validation.
//!
//! Pure functions over JSON, in two halves around mutating admission webhooks (`decode_*` before, `finish_*`
//! after, as kube-apiserver orders them); the caller commits the result under the store lock.

use serde_json::{Value, json};

use super::convert;
use super::error::{ApiError, Cause, Subject};
use super::object::{self, finalizers, is_deleting, meta_str, set_meta};
use super::resources::{self, ResourceType, Special};
use super::selectors;
use super::store::{CRD_CLEANUP, Store};

/// Metadata fields only the server writes.
const SERVER_OWNED: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
    "managedFields",
];

fn subject<'a>(rt: &'a ResourceType, name: &'a str) -> Subject<'a> {
    Subject { group: &rt.gr.group, resource: &rt.gr.resource, name }
}

fn invalid(rt: &ResourceType, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(subject(rt, name), &rt.kind, causes)
}

fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause { reason: reason.to_string(), field: field.to_string(), message }
}

/// Checks the body's apiVersion and kind against the request and converts it to the stored form.
fn accept_body(rt: &ResourceType, version: &str, body: Value) -> Result<Value, ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON or YAML object"));
    }
    let expected = rt.api_version(version);
    if let Some(api_version) = body.get("apiVersion").and_then(Value::as_str)
        && api_version != expected
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({expected})"
        )));
    }
    if let Some(kind) = body.get("kind").and_then(Value::as_str)
        && kind != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    let mut obj = convert::to_storage(rt, body);
    if !rt.custom && rt.gr.group.is_empty() && rt.gr.resource == "secrets" {
        fold_string_data(&mut obj);
        default_secret_type(&mut obj);
    }
    Ok(obj)
}

/// As Kubernetes does on every write of a Secret: `stringData` is merged into `data` (base64-encoded, its keys
/// winning) and never stored.
fn fold_string_data(secret: &mut Value) {
    use base64::Engine as _;
    let Some(map) = secret.as_object_mut() else { return };
    let Some(Value::Object(strings)) = map.remove("stringData") else { return };
    if strings.is_empty() {
        return;
    }
    if !map.get("data").is_some_and(Value::is_object) {
        map.insert("data".into(), json!({}));
    }
    if let Some(Value::Object(data)) = map.get_mut("data") {
        for (key, value) in strings {
            let text = match value {
                Value::String(s) => s,
                other => other.to_string(),
            };
            data.insert(key, Value::String(base64::engine::general_purpose::STANDARD.encode(text)));
        }
    }
}

/// kube-apiserver's defaulting of a Secret: no type (or an empty one, as `kubectl create secret generic` sends in
/// protobuf) is `Opaque`.
fn default_secret_type(secret: &mut Value) {
    let Some(map) = secret.as_object_mut() else { return };
    if map.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
        map.insert("type".into(), json!("Opaque"));
    }
}

fn check_labels_and_annotations(rt: &ResourceType, name: &str, obj: &Value) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    for (field, is_label) in [("labels", true), ("annotations", false)] {
        let Some(map) = obj.pointer(&format!("/metadata/{field}")) else { continue };
        let Some(map) = map.as_object() else {
            causes.push(cause(
                "FieldValueInvalid",
                &format!("metadata.{field}"),
                "Invalid value: must be a map of strings".to_string(),
            ));
            continue;
        };
        for (key, value) in map {
            let path = format!("metadata.{field}");
            if let Err(why) = selectors::validate_label_key(key) {
                causes.push(cause("FieldValueInvalid", &path, format!("Invalid value: {why}")));
            }
            match value.as_str() {
                None => causes.push(cause(
                    "FieldValueInvalid",
                    &path,
                    format!("Invalid value: the value of {key:?} must be a string"),
                )),
                Some(v) if is_label => {
                    if let Err(why) = selectors::validate_label_value(key, v) {
                        causes.push(cause("FieldValueInvalid", &path, format!("Invalid value: {why}")));
                    }
                }
                Some(_) => {}
            }
        }
    }
    if causes.is_empty() { Ok(()) } else { Err(invalid(rt, name, causes)) }
}

/// Applies the CRD schema of `version`: defaults, pruning, then validation.
fn apply_schema(rt: &ResourceType, version: &str, name: &str, obj: &mut Value) -> Result<(), ApiError> {
    let Some(schema) = rt.version(version).and_then(|v| v.schema.clone()) else { return Ok(()) };
    schema.apply_defaults(obj);
    schema.prune(obj);
    let errors = schema.validate(obj);
    if errors.is_empty() {
        return Ok(());
    }
    let causes = errors.iter().map(|e| cause(e.error_type.reason(), &e.field, e.body())).collect();
    Err(invalid(rt, name, causes))
}

/// kube-apiserver's defaulting of a v1 CRD's names: `spec.names.singular` (the kind in lower case) and
/// `spec.names.listKind` (`<kind>List`) when absent. Clients read them from the spec (clusterctl lists a provider's
/// objects by `listKind`).
fn default_crd_names(crd: &mut Value) {
    let Some(names) = crd.pointer_mut("/spec/names").and_then(Value::as_object_mut) else { return };
    let Some(kind) = names.get("kind").and_then(Value::as_str).map(str::to_string) else { return };
    let empty = |v: Option<&Value>| v.and_then(Value::as_str).is_none_or(str::is_empty);
    if empty(names.get("singular")) {
        names.insert("singular".into(), json!(kind.to_lowercase()));
    }
    if empty(names.get("listKind")) {
        names.insert("listKind".into(), json!(format!("{kind}List")));
    }
}

/// Everything a CRD's status says once it is served.
fn crd_status(crd: &Value, previous: Option<&Value>) -> Value {
    let names = &crd["spec"]["names"];
    let kind = names["kind"].as_str().unwrap_or_default();
    let mut accepted = names.clone();
    if accepted.get("listKind").is_none() {
        accepted["listKind"] = json!(format!("{kind}List"));
    }
    if accepted.get("singular").is_none() {
        accepted["singular"] = json!(kind.to_lowercase());
    }
    let now = object::now();
    let since = |t: &str| {
        previous
            .and_then(|p| p["status"]["conditions"].as_array())
            .and_then(|c| c.iter().find(|c| c["type"] == t))
            .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
            .unwrap_or_else(|| now.clone())
    };
    let mut stored: Vec<String> = previous
        .and_then(|p| p["status"]["storedVersions"].as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    for v in crd["spec"]["versions"].as_array().map(Vec::as_slice).unwrap_or_default() {
        if v["storage"] == true
            && let Some(name) = v["name"].as_str()
            && !stored.iter().any(|s| s == name)
        {
            stored.push(name.to_string());
        }
    }
    json!({
        "acceptedNames": accepted,
        "storedVersions": stored,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": since("NamesAccepted")},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": since("Established")}
        ]
    })
}

/// The CRD type's own `invalid` error for `problems`.
fn crd_invalid(rt: &ResourceType, name: &str, problems: Vec<resources::CrdProblem>) -> ApiError {
    let causes = problems.into_iter().map(|p| cause("FieldValueInvalid", &p.field, p.detail)).collect();
    invalid(rt, name, causes)
}

/// What kube-apiserver checks of a CRD before storing it: the type it declares can be served, and group and
/// scope are immutable. Returns the type.
fn check_crd(
    rt: &ResourceType,
    name: &str,
    crd: &Value,
    previous: Option<&Value>,
) -> Result<resources::ResourceType, ApiError> {
    let served = resources::from_crd(crd).map_err(|p| crd_invalid(rt, name, p))?;
    if let Some(prev) = previous {
        let problems: Vec<resources::CrdProblem> = ["group", "scope"]
            .into_iter()
            .filter(|field| prev["spec"][field] != crd["spec"][field])
            .map(|field| resources::CrdProblem {
                field: format!("spec.{field}"),
                detail: "Invalid value: field is immutable".into(),
            })
            .collect();
        if !problems.is_empty() {
            return Err(crd_invalid(rt, name, problems));
        }
    }
    Ok(served)
}

/// Validates a CRD and makes its resources served; returns the CRD with its status. Called when the CRD is
/// committed (never for dry runs).
pub fn admit_crd(store: &mut Store, crd: Value, previous: Option<&Value>) -> Result<Value, ApiError> {
    let name = object::name(&crd).to_string();
    let crd_gr = resources::GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions");
    let Some(crd_type) = store.registry.get(&crd_gr) else {
        return Err(ApiError::internal("the CustomResourceDefinition type is not registered"));
    };
    let served = check_crd(&crd_type, &name, &crd, previous)?;
    if let Some(existing) = store.registry.get(&served.gr)
        && !existing.custom
    {
        return Err(crd_invalid(
            &crd_type,
            &name,
            vec![resources::CrdProblem {
                field: "spec.names.plural".into(),
                detail: format!("Invalid value: {} is a built-in resource", served.gr),
            }],
        ));
    }
    let mut crd = crd;
    default_crd_names(&mut crd);
    crd["status"] = crd_status(&crd, previous);
    store.registry.insert(served);
    Ok(crd)
}

/// Refuses new objects in a namespace that does not exist (404) or is being deleted (403), as kube-apiserver's
/// NamespaceLifecycle admission does before any webhook is called.
pub fn check_namespace(store: &Store, rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    if !rt.namespaced {
        return Ok(());
    }
    let namespace = object::namespace(obj);
    let ns_obj = store.get(&resources::GroupResource::new("", "namespaces"), &(String::new(), namespace.to_string()));
    match ns_obj {
        None => Err(ApiError::not_found(Subject { group: "", resource: "namespaces", name: namespace })),
        Some(ns) if is_deleting(&ns) => Err(ApiError::forbidden(
            subject(rt, object::name(obj)),
            format!("unable to create new content in namespace {namespace} because it is being terminated"),
        )),
        Some(_) => Ok(()),
    }
}

/// A create as admission sees it, before mutating webhooks: the body checked against the request and converted
/// to the stored form, server-owned metadata dropped, the namespace resolved and checked. No name is generated
/// yet (kube-apiserver generates it after mutating admission).
pub fn decode_create(
    store: &Store,
    rt: &ResourceType,
    version: &str,
    url_namespace: Option<&str>,
    body: Value,
) -> Result<Value, ApiError> {
    let mut obj = accept_body(rt, version, body)?;
    let meta = object::metadata_mut(&mut obj);
    for field in SERVER_OWNED {
        meta.remove(*field);
    }
    if rt.namespaced {
        // An empty namespace in the body is unset (protobuf clients always send the field).
        let body_ns = meta.get("namespace").and_then(Value::as_str).filter(|ns| !ns.is_empty()).map(str::to_string);
        if let (Some(url), Some(body)) = (url_namespace, &body_ns)
            && url != body
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let ns = url_namespace.map(str::to_string).or(body_ns).unwrap_or_default();
        if ns.is_empty() {
            return Err(ApiError::bad_request("an empty namespace may not be set during creation"));
        }
        meta.insert("namespace".into(), json!(ns));
    } else {
        meta.remove("namespace");
    }
    check_namespace(store, rt, &obj)?;
    Ok(obj)
}

/// Applies a custom resource's schema defaults and pruning (what decoding does in kube-apiserver), so mutating
/// webhooks see a defaulted object. Built-in kinds are left alone.
pub fn default_object(rt: &ResourceType, version: &str, obj: &mut Value) {
    if rt.custom
        && let Some(schema) = rt.version(version).and_then(|v| v.schema.as_ref())
    {
        schema.normalize(obj);
    }
}

/// A create after mutating admission: the name (generated from `generateName` when missing, avoiding names
/// `taken` says exist), server-owned metadata, kind-specific rules, then the schema (defaults, pruning,
/// validation). The CRD of a CRD create is checked here and registered when committed ([`admit_crd`]).
pub fn finish_create(
    rt: &ResourceType,
    version: &str,
    mut obj: Value,
    taken: &dyn Fn(&str) -> bool,
) -> Result<Value, ApiError> {
    let meta = object::metadata_mut(&mut obj);
    for field in SERVER_OWNED {
        meta.remove(*field);
    }
    let generate = meta.get("generateName").and_then(Value::as_str).map(str::to_string);
    let mut name = meta.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
    if name.is_empty()
        && let Some(prefix) = &generate
    {
        name = loop {
            let candidate = format!("{prefix}{}", object::random_suffix());
            if !taken(&candidate) {
                break candidate;
            }
        };
    }
    let dns_label = rt.special == Special::Namespace;
    if let Err(why) = object::validate_name(&name, dns_label) {
        let field = if generate.is_some() { "metadata.generateName" } else { "metadata.name" };
        let message = if name.is_empty() {
            "Required value: name or generateName is required".to_string()
        } else {
            format!("Invalid value: \"{name}\": {why}")
        };
        let reason = if name.is_empty() { "FieldValueRequired" } else { "FieldValueInvalid" };
        return Err(invalid(rt, &name, vec![cause(reason, field, message)]));
    }
    let meta = object::metadata_mut(&mut obj);
    meta.insert("name".into(), json!(name));
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(object::now()));
    meta.insert("generation".into(), json!(1));
    check_labels_and_annotations(rt, &name, &obj)?;

    if rt.custom
        && rt.version(version).is_some_and(|v| v.status)
        && let Some(map) = obj.as_object_mut()
    {
        map.remove("status");
    }
    match rt.special {
        Special::Namespace => {
            if obj.pointer("/spec/finalizers").is_none() {
                obj["spec"]["finalizers"] = json!(["kubernetes"]);
            }
            obj["status"] = json!({"phase": "Active"});
        }
        Special::Pod if obj.pointer("/status/phase").is_none() => {
            obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        Special::Crd => {
            let mut fins = finalizers(&obj);
            if !fins.iter().any(|f| f == CRD_CLEANUP) {
                fins.push(CRD_CLEANUP.into());
                object::set_finalizers(&mut obj, &fins);
            }
            check_crd(rt, &name, &obj, None)?;
        }
        _ => {}
    }
    if rt.custom {
        apply_schema(rt, version, &name, &mut obj)?;
        obj["apiVersion"] = json!(rt.api_version(&rt.storage_version));
    }
    Ok(obj)
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The main resource: everything but status (when the type has a status subresource).
    Main,
    /// The status subresource: status only.
    Status,
}

fn without(obj: &Value, keys: &[&str]) -> Value {
    let mut v = obj.clone();
    if let Some(map) = v.as_object_mut() {
        for k in keys {
            map.remove(*k);
        }
    }
    v
}

/// An update as admission sees it, before mutating webhooks: the body (PUT, or the result of a patch) checked
/// against the request and `current` (name, namespace, resourceVersion) and converted to the stored form.
pub fn decode_update(
    rt: &ResourceType,
    version: &str,
    current: &Value,
    body: Value,
    require_rv: bool,
) -> Result<Value, ApiError> {
    let name = object::name(current);
    let body = accept_body(rt, version, body)?;
    if let Some(body_name) = meta_str(&body, "name")
        && body_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if rt.namespaced
        && let Some(ns) = meta_str(&body, "namespace").filter(|ns| !ns.is_empty())
        && ns != object::namespace(current)
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    // An empty resourceVersion is none: an unconditional update.
    match meta_str(&body, "resourceVersion").filter(|rv| !rv.is_empty()) {
        Some(rv) if Some(rv) != meta_str(current, "resourceVersion") => Err(ApiError::stale(subject(rt, name))),
        None if require_rv && rt.custom => Err(invalid(
            rt,
            name,
            vec![cause(
                "FieldValueInvalid",
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update".into(),
            )],
        )),
        _ => Ok(body),
    }
}

/// An update after mutating admission: `body` merged into `current` (status or everything else, server-owned
/// metadata kept), finalizer and label rules, generation, then the schema. A CRD is checked here and
/// re-registered when committed ([`admit_crd`]).
pub fn finish_update(
    rt: &ResourceType,
    version: &str,
    current: &Value,
    body: Value,
    part: Part,
) -> Result<Value, ApiError> {
    let name = object::name(current).to_string();
    let has_status = rt.version(version).is_some_and(|v| v.status);
    let mut obj = match part {
        Part::Status => {
            let mut obj = current.clone();
            match body.get("status") {
                Some(status) => obj["status"] = status.clone(),
                None => {
                    if let Some(map) = obj.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            obj
        }
        Part::Main => {
            let mut obj = body;
            let current_meta = current.get("metadata").cloned().unwrap_or_else(|| json!({}));
            let meta = object::metadata_mut(&mut obj);
            meta.remove("managedFields");
            meta.remove("selfLink");
            for field in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "namespace",
                "name",
            ] {
                match current_meta.get(field) {
                    Some(v) => meta.insert(field.to_string(), v.clone()),
                    None => meta.remove(field),
                };
            }
            if has_status {
                match current.get("status") {
                    Some(status) => obj["status"] = status.clone(),
                    None => {
                        if let Some(map) = obj.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
            }
            if is_deleting(current) {
                let before = finalizers(current);
                if finalizers(&obj).iter().any(|f| !before.contains(f)) {
                    return Err(invalid(
                        rt,
                        &name,
                        vec![cause(
                            "FieldValueForbidden",
                            "metadata.finalizers",
                            "Forbidden: no new finalizers can be added if the object is being deleted".into(),
                        )],
                    ));
                }
            }
            check_labels_and_annotations(rt, &name, &obj)?;
            obj
        }
    };
    set_meta(&mut obj, "resourceVersion", current["metadata"]["resourceVersion"].clone());
    // Generation counts changes of everything but metadata (and status, when it has its own endpoint).
    let ignored: &[&str] = if has_status { &["metadata", "status"] } else { &["metadata"] };
    if without(&obj, ignored) != without(current, ignored) {
        let generation = current["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
        set_meta(&mut obj, "generation", json!(generation));
    }
    if rt.custom {
        apply_schema(rt, version, &name, &mut obj)?;
        obj["apiVersion"] = json!(rt.api_version(&rt.storage_version));
    }
    if rt.special == Special::Crd && part == Part::Main && obj != *current {
        check_crd(rt, &name, &obj, Some(current))?;
    }
    Ok(obj)
}

/// [`decode_update`] then [`finish_update`], for writes no webhook looks at.
pub fn prepare_update(
    rt: &ResourceType,
    version: &str,
    current: &Value,
    body: Value,
    part: Part,
    require_rv: bool,
) -> Result<Value, ApiError> {
    let body = decode_update(rt, version, current, body, require_rv)?;
    finish_update(rt, version, current, body, part)
}

#[cfg(test)]
mod empty_metadata_tests {
    use super::*;
    use crate::apiserver::resources::Registry;

    #[test]
    fn empty_namespace_and_resource_version_are_unset() {
        let mut store = Store::new(10);
        let ns = resources::GroupResource::new("", "namespaces");
        store.insert(&ns, json!({"metadata": {"name": "default"}}));
        let cm = Registry::builtin().lookup("", "v1", "configmaps").unwrap();
        let body = |meta: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta});
        let cases = [
            (json!({"name": "a", "namespace": ""}), Ok("default")),
            (json!({"name": "a"}), Ok("default")),
            (json!({"name": "a", "namespace": "default"}), Ok("default")),
            (json!({"name": "a", "namespace": "other"}), Err(400)),
        ];
        for (meta, expected) in cases {
            let decoded = decode_create(&store, &cm, "v1", Some("default"), body(meta.clone()));
            let got = decoded.map(|o| object::namespace(&o).to_string()).map_err(|e| e.code);
            assert_eq!(got, expected.map(str::to_string), "{meta}");
        }
        let current = json!({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "a", "namespace": "default", "resourceVersion": "7"}});
        let cases = [
            (json!({"name": "a", "namespace": "", "resourceVersion": ""}), None),
            (json!({"name": "a", "resourceVersion": "7"}), None),
            (json!({"name": "a", "resourceVersion": "6"}), Some(409)),
            (json!({"name": "a", "namespace": "other"}), Some(400)),
        ];
        for (meta, expected) in cases {
            let got = decode_update(&cm, "v1", &current, body(meta.clone()), false).err().map(|e| e.code);
            assert_eq!(got, expected, "{meta}");
        }
    }
}

#[cfg(test)]
mod string_data_tests {
    use super::*;

    #[test]
    fn string_data_is_folded_into_data() {
        let mut secret = json!({
            "kind": "Secret",
            "data": {"a": "b2xk", "keep": "eA=="},
            "stringData": {"a": "new", "userData": "#!/bin/sh"},
        });
        fold_string_data(&mut secret);
        assert_eq!(
            secret,
            json!({"kind": "Secret", "data": {"a": "bmV3", "keep": "eA==", "userData": "IyEvYmluL3No"}})
        );
        let mut only = json!({"stringData": {"k": "v"}});
        fold_string_data(&mut only);
        assert_eq!(only, json!({"data": {"k": "dg=="}}));
        let mut none = json!({"data": {"k": "dg=="}});
        fold_string_data(&mut none);
        assert_eq!(none, json!({"data": {"k": "dg=="}}));
    }

    #[test]
    fn a_secret_without_type_is_opaque() {
        for (given, want) in [(json!({}), "Opaque"), (json!({"type": ""}), "Opaque"), (json!({"type": "x/y"}), "x/y")] {
            let mut secret = given;
            default_secret_type(&mut secret);
            assert_eq!(secret["type"], want);
        }
    }
}
