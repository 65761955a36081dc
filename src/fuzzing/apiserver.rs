//! The embedded API server's parsers of untrusted request data: paths, query parameters (with the watch
//! parameters and both selectors), patches of every type with the field ownership they record, and field
//! validation of request bodies.

use std::sync::{Arc, LazyLock};

use axum::http::{HeaderMap, HeaderValue, header};
use serde_json::{Map, Value, json};

use crate::apiserver::admission::{self, Part};
use crate::apiserver::context::Ctx;
use crate::apiserver::field_validation::{self, Raw};
use crate::apiserver::patch::{self, PatchKind, PatchType};
use crate::apiserver::printing::TableOptions;
use crate::apiserver::request::{self, Query, ResourcePath, Target};
use crate::apiserver::resources::{Registry, ResourceType, from_crd};
use crate::apiserver::selectors::{FieldRequirement, FieldSelector, LabelOperator, LabelSelector};
use crate::apiserver::{managed, object};

/// The built-in types and every CRD the project ships, as `mcm dev` serves them.
static REGISTRY: LazyLock<Registry> = LazyLock::new(|| {
    let mut registry = Registry::builtin();
    for file in crate::api::crds::files().unwrap_or_default() {
        if let Ok(crd) = serde_yaml::from_str::<Value>(&file.yaml)
            && let Ok(t) = from_crd(&crd)
        {
            registry.insert(t);
        }
    }
    registry
});

/// `group/version/resource`, or `version/resource` for the core group.
fn resource_type(name: &str) -> Option<(Arc<ResourceType>, ResourcePath)> {
    let parts: Vec<&str> = name.split('/').collect();
    let (group, version, resource) = match parts.as_slice() {
        [version, resource] => ("", *version, *resource),
        [group, version, resource] => (*group, *version, *resource),
        _ => return None,
    };
    let rt = REGISTRY.lookup(group, version, resource)?;
    let path = ResourcePath {
        group: group.into(),
        version: version.into(),
        resource: resource.into(),
        namespace: rt.namespaced.then(|| "default".to_string()),
        name: Some("fuzz".into()),
        subresource: None,
    };
    Some((rt, path))
}

fn ctx<'a>(rt: Arc<ResourceType>, path: &'a ResourcePath, query: &'a Query) -> Ctx<'a> {
    Ctx { rt, version: &path.version, path, query, manager: "fuzz".into(), table: None, metadata_only: None }
}

/// Label selectors print back to the selector they were parsed from, and match without panicking.
fn check_label_selector(selector: &LabelSelector, source: &str) {
    let printed = selector.to_string();
    let reparsed = LabelSelector::parse(&printed);
    assert!(
        reparsed.as_ref().is_ok_and(|r| r == selector),
        "label selector {source:?} prints as {printed:?}, which parses to {reparsed:?}, not {selector:?}"
    );
    // An object carrying the first value of every requirement, so that matching compares values, not absence.
    let mut labels = Map::new();
    for r in &selector.requirements {
        labels.insert(r.key.clone(), json!(r.values.first().cloned().unwrap_or_default()));
    }
    let object = json!({"metadata": {"labels": labels}});
    let matched = selector.matches_object(&object);
    let by_text = selector.matches_with(|key| labels.get(key).and_then(Value::as_str));
    assert_eq!(matched, by_text, "label selector {source:?}: matching parsed labels and indexed labels disagree");
    // Unless it requires one key twice (`p=,p=m` matches nothing, as in kube).
    let keys: std::collections::BTreeSet<&String> = selector.requirements.iter().map(|r| &r.key).collect();
    if selector.requirements.iter().all(|r| r.operator == LabelOperator::Equals)
        && keys.len() == selector.requirements.len()
    {
        assert!(matched, "label selector {source:?} does not match the labels it requires");
    }
}

fn field_terms(selector: &FieldSelector) -> Vec<(String, String, String)> {
    let mut terms: Vec<_> = selector
        .requirements
        .iter()
        .map(|FieldRequirement { field, operator, value }| (field.clone(), format!("{operator:?}"), value.clone()))
        .collect();
    terms.sort();
    terms
}

/// Field selectors print back to the same requirements. Their order may change once: kube orders them by their
/// raw text, and printing turns `==` into `=`; a printed selector prints back to itself.
fn check_field_selector(selector: &FieldSelector, source: &str) {
    let printed = selector.to_string();
    let reparsed = FieldSelector::parse(&printed);
    let Ok(reparsed) = reparsed else {
        // Assert with the error in the message.
        assert!(reparsed.is_ok(), "field selector {source:?} prints as {printed:?}, which fails: {reparsed:?}");
        return;
    };
    assert_eq!(
        field_terms(&reparsed),
        field_terms(selector),
        "field selector {source:?} prints as {printed:?}, which parses to other requirements"
    );
    let again = reparsed.to_string();
    let third = FieldSelector::parse(&again).map(|s| s.to_string());
    assert!(third.as_ref().is_ok_and(|t| *t == again), "field selector {again:?} prints as {third:?}");
    let object = json!({"metadata": {"name": "fuzz", "namespace": "default"}, "spec": {"nodeName": "n"}});
    let _matched = selector.matches(&object);
}

/// Request paths and query strings as the server routes and reads them, with the watch parameters and both
/// selectors; and the whole input taken as a label selector, a field selector and a JSON `metav1.LabelSelector`.
///
/// Input: `path?query`. Invariants: selectors print back to themselves ([`LabelSelector`]'s and
/// [`FieldSelector`]'s `Display`); a selector from JSON equals the one parsed from its printed form.
pub fn apiserver_request(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(selector) = LabelSelector::parse(&text) {
        check_label_selector(&selector, &text);
    }
    if let Ok(selector) = FieldSelector::parse(&text) {
        check_field_selector(&selector, &text);
    }
    if let Ok(value) = serde_json::from_slice::<Value>(data)
        && let Ok(selector) = LabelSelector::from_json(&value)
    {
        check_label_selector(&selector, &text);
    }
    let (path, query) = text.split_once('?').unwrap_or((&text, ""));
    let target = request::parse_path(path);
    let Ok(query) = request::parse_query(Some(query)) else { return };
    // What `list` and `watch::serve` check before touching the store.
    let labels = LabelSelector::parse(&query.label_selector);
    if let Ok(labels) = &labels {
        check_label_selector(labels, &query.label_selector);
    }
    let fields = FieldSelector::parse(&query.field_selector);
    if let Ok(fields) = &fields {
        check_field_selector(fields, &query.field_selector);
    }
    let _directive = field_validation::directive(query.field_validation.as_deref());
    let accept = Some("application/json;as=Table;v=v1;g=meta.k8s.io");
    let _table = TableOptions::from_request(accept, query.include_object.as_deref());
    let _from = query.resource_version.as_deref().map(str::parse::<u64>);
    if let (Ok(Target::Resource(path)), Ok(fields)) = (target, fields)
        && let Some(rt) = REGISTRY.lookup(&path.group, &path.version, &path.resource)
    {
        let _unsupported = fields.fields().find(|f| !rt.supports_field(&path.version, f));
    }
}

/// Reads `<type> <resource> [fieldValidation]` (the type is `merge`, `json`, `strategic` or `apply`).
fn patch_header(line: &str) -> Option<(PatchType, &str, Option<String>)> {
    let mut words = line.split_whitespace();
    let pt = match words.next()? {
        "merge" => PatchType::Merge,
        "json" => PatchType::Json,
        "strategic" => PatchType::Strategic,
        "apply" => PatchType::Apply,
        _ => return None,
    };
    Some((pt, words.next()?, words.next().map(str::to_string)))
}

/// Patches as a PATCH of an existing object applies them: the patch document onto the current object, field
/// validation of the result, admission of the update and the managed fields the write records.
///
/// Input: a header line `<merge|json|strategic|apply> <group/version/resource> [Strict|Warn|Ignore]`, the
/// current object as JSON, a line `---`, then the patch. Invariants: a merge patch (and an apply, merged the same
/// way) is idempotent; field ownership only names fields the object has; after validation that drops unknown
/// fields, a built-in object has none left.
pub fn apiserver_patch(data: &[u8]) {
    let Some((line, rest)) = super::header(data) else { return };
    let Some((pt, resource, validation)) = patch_header(line) else { return };
    let Some((rt, path)) = resource_type(resource) else { return };
    let Some((current, raw)) = rest.split_once("\n---\n") else { return };
    let Ok(current) = serde_json::from_str::<Value>(current) else { return };
    if !current.is_object() {
        return;
    }
    let query = Query { field_validation: validation, field_manager: Some("fuzz".into()), ..Query::default() };
    let ctx = ctx(rt, &path, &query);
    // What `handlers::patch` refuses before applying.
    if pt == PatchType::Strategic && ctx.rt.custom {
        return;
    }
    let raw = raw.as_bytes();
    let applied = if pt == PatchType::Apply {
        let Ok(config) = serde_yaml::from_slice::<Value>(raw) else { return };
        let _conflicts = managed::conflicts(&current, &ctx.manager, &config);
        Some(config)
    } else {
        None
    };
    let Ok(patched) = patch::apply_patch(&ctx, PatchKind(pt, &ctx.rt.kind), &current, raw) else { return };
    if matches!(pt, PatchType::Merge | PatchType::Apply) {
        let twice = patch::apply_patch(&ctx, PatchKind(pt, &ctx.rt.kind), &patched, raw);
        assert!(
            twice.as_ref().is_ok_and(|t| t == &patched),
            "a {pt:?} patch applied twice changed the object again: {twice:?}"
        );
    }
    let raw_patch = if pt == PatchType::Apply { Raw::Yaml(raw) } else { Raw::Json(raw) };
    let Ok(checked) = field_validation::check_patched(&ctx, Some(raw_patch), patched) else { return };
    check_dropped(&ctx, &checked.body);
    // From here on as `handlers::store_update` writes an admitted update of the main resource.
    let Ok(mut result) = admission::prepare_update(&ctx.rt, ctx.version, &current, checked.body, Part::Main, false)
    else {
        return;
    };
    if let Some(fields) = current.pointer("/metadata/managedFields") {
        object::set_meta(&mut result, "managedFields", fields.clone());
    }
    let owned = match &applied {
        Some(config) => managed::leaves(config, false),
        None => managed::changed(&current, &result, false),
    };
    let api_version = ctx.rt.api_version(ctx.version);
    managed::record(&mut result, Some(&current), &ctx.manager, applied.is_some(), owned, &api_version, "");
    for entry in managed::read(&result) {
        for field in &entry.fields {
            assert!(
                managed::get(&result, field).is_some(),
                "managedFields of {:?} name {field:?}, which the object does not have",
                entry.manager
            );
        }
    }
}

/// After validation that drops unknown fields (Warn, Ignore), a built-in object has none left, nor has the
/// metadata of a custom resource (its other fields are pruned at admission).
fn check_dropped(ctx: &Ctx<'_>, body: &Value) {
    if field_validation::directive(ctx.query.field_validation.as_deref())
        .is_ok_and(|d| d == field_validation::Directive::Strict)
    {
        return;
    }
    let mut again = body.clone();
    // Of a custom resource, only the metadata object is looked at: filtering the names that start with
    // `metadata.` would also keep a top-level key such as `metadata.count`, which admission prunes.
    if ctx.rt.custom
        && let Some(top) = again.as_object_mut()
    {
        top.retain(|key, _| matches!(key.as_str(), "apiVersion" | "kind" | "metadata"));
    }
    let left = field_validation::unknown_fields(ctx, &mut again, false);
    assert!(left.is_empty(), "unknown fields {left:?} of {} survive being dropped", ctx.rt.gr);
}

/// Field validation of a create or update body: duplicate fields in the raw JSON or YAML, unknown fields of
/// built-in types (by their OpenAPI schemas) and of custom resources (by their CRD's structural schema).
///
/// Input: a header line `<json|yaml> <group/version/resource> [Strict|Warn|Ignore]`, then the body. Invariant:
/// what validation drops is gone (see [`apiserver_patch`]).
pub fn field_validation(data: &[u8]) {
    let Some((line, raw)) = super::header(data) else { return };
    let mut words = line.split_whitespace();
    let (Some(format), Some(resource)) = (words.next(), words.next()) else { return };
    let validation = words.next().map(str::to_string);
    let Some((rt, path)) = resource_type(resource) else { return };
    let (content_type, body) = match format {
        "json" => ("application/json", serde_json::from_str::<Value>(raw).ok()),
        "yaml" => ("application/yaml", serde_yaml::from_str::<Value>(raw).ok()),
        _ => return,
    };
    let Some(body) = body else { return };
    let _duplicates = field_validation::duplicate_fields(Raw::Json(raw.as_bytes()));
    let query = Query { field_validation: validation, ..Query::default() };
    let ctx = ctx(rt, &path, &query);
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(checked) = field_validation::check_body(&ctx, &headers, raw.as_bytes(), body) {
        check_dropped(&ctx, &checked.body);
    }
}
