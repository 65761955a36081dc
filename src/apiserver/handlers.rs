//! Request handling: from a parsed request to store operations and a response.
//!
//! Builds the request context (`context`) and dispatches to `watch`, `subresources` and `field_validation`;
//! only `server` imports this module, and it must not import `server` (the state it needs is `state`'s).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};

use super::admission::{self, Part};
use super::context::Ctx;
use super::convert;
use super::error::ApiError;
use super::object;
use super::patch::{PatchKind, PatchType, apply_patch, patch_type};
use super::request::{Query, ResourcePath};
use super::resources::Special;
use super::response::{json_response, with_warnings};
use super::selectors::{self, FieldSelector, LabelSelector};
use super::state::Shared;
use super::store::{DeleteOutcome, ObjectKey, Propagation, Store};
use super::webhook::{self, ADMISSION_ATTEMPTS, Matched, Operation, Review, RuleInput};
use super::{field_validation, managed, printing, subresources, watch};

/// Serves a resource request.
pub async fn resource(
    shared: Arc<Shared>,
    method: Method,
    path: ResourcePath,
    query: Query,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let rt = {
        let store = shared.lock();
        store.registry.lookup(&path.group, &path.version, &path.resource)
    };
    let Some(rt) = rt else {
        return Err(ApiError::no_route(&format!("{} {}/{}", path.resource, path.group, path.version)));
    };
    if !rt.namespaced && path.namespace.is_some() {
        return Err(ApiError::no_route(&format!("{} is not namespaced", rt.gr)));
    }
    let version = path.version.clone();
    let manager = query.field_manager.clone().filter(|m| !m.is_empty()).unwrap_or_else(|| {
        let agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("unknown");
        agent.split('/').next().unwrap_or("unknown").to_string()
    });
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).filter(|_| method == Method::GET);
    let table = printing::TableOptions::from_request(accept, query.include_object.as_deref())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let metadata_only = accept.and_then(printing::metadata_only);
    let ctx = Ctx { rt, version: &version, path: &path, query: &query, manager, table, metadata_only };
    let read_body = |body| super::request::read_body(body, shared.config.max_body_bytes);
    let sub = path.subresource.as_deref();
    if let Some(sub) = sub {
        let served = match sub {
            "status" => ctx.rt.version(&version).is_some_and(|v| v.status),
            "scale" => ctx.rt.version(&version).is_some_and(|v| v.scale.is_some()),
            "eviction" => ctx.rt.special == Special::Pod,
            _ => false,
        };
        if !served {
            return Err(ApiError::no_route(&format!("{}/{sub}", ctx.rt.gr)));
        }
    }
    match (method.as_str(), path.name.is_some(), sub) {
        ("GET", false, None) if query.watch => watch::serve(shared, &ctx).await,
        ("GET", false, None) => list(&shared, &ctx),
        ("GET", true, None | Some("status")) => {
            let obj = ctx.require(&shared.lock())?;
            if let Some(options) = ctx.table {
                let table = printing::TableBuilder::new(&ctx.rt, ctx.version, options);
                return Ok(json_response(StatusCode::OK, &table.object_table(&ctx.output(&obj), true)));
            }
            if let Some(version) = ctx.metadata_only {
                return Ok(json_response(StatusCode::OK, &printing::partial_metadata(&obj, version)));
            }
            Ok(json_response(StatusCode::OK, &ctx.output(&obj)))
        }
        ("GET", true, Some("scale")) => {
            let obj = ctx.require(&shared.lock())?;
            Ok(json_response(StatusCode::OK, &subresources::scale_view(&ctx, &obj)))
        }
        ("POST", false, None) => {
            let raw = read_body(body).await?;
            let checked = field_validation::check_body(&ctx, &headers, &raw, parse_body(&headers, &raw)?)?;
            create(&shared, &ctx, checked.body, false).await.map(|r| with_warnings(r, &checked.warnings))
        }
        ("POST", true, Some("eviction")) => {
            let body = parse_body(&headers, &read_body(body).await?)?;
            subresources::evict(&shared, &ctx, body).await
        }
        ("PUT", true, None | Some("status")) => {
            let raw = read_body(body).await?;
            let checked = field_validation::check_body(&ctx, &headers, &raw, parse_body(&headers, &raw)?)?;
            let part = if sub == Some("status") { Part::Status } else { Part::Main };
            update(&shared, &ctx, checked.body, part).await.map(|r| with_warnings(r, &checked.warnings))
        }
        ("PUT", true, Some("scale")) => {
            let body = parse_body(&headers, &read_body(body).await?)?;
            subresources::update_scale(&shared, &ctx, Some(body), None).await
        }
        ("PATCH", true, _) => {
            let content_type = content_type(&headers);
            let raw = read_body(body).await?;
            patch(&shared, &ctx, &content_type, &raw).await
        }
        ("DELETE", true, None) => {
            let raw = read_body(body).await?;
            let options = if raw.is_empty() { json!({}) } else { parse_body(&headers, &raw)? };
            delete(&shared, &ctx, &options).await
        }
        ("DELETE", false, None) => {
            let raw = read_body(body).await?;
            let options = if raw.is_empty() { json!({}) } else { parse_body(&headers, &raw)? };
            delete_collection(&shared, &ctx, &options).await
        }
        (m, _, s) => Err(ApiError::method_not_allowed(
            m,
            &format!("{}{}", ctx.rt.gr, s.map(|s| format!("/{s}")).unwrap_or_default()),
        )),
    }
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Parses a JSON or YAML request body.
pub fn parse_body(headers: &HeaderMap, raw: &[u8]) -> Result<Value, ApiError> {
    let ct = content_type(headers);
    let value: Value = if ct.contains("yaml") {
        serde_yaml::from_slice(raw)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid YAML: {e}")))?
    } else if ct.is_empty() || ct.contains("json") {
        serde_json::from_slice(raw)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?
    } else if ct.contains("protobuf") {
        super::protobuf::decode(raw)?
    } else {
        return Err(ApiError::unsupported_media_type(&ct, &["application/json", "application/yaml"]));
    };
    Ok(value)
}

fn selectors(ctx: &Ctx<'_>) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(&ctx.query.label_selector)
        .map_err(|e| ApiError::bad_request(format!("unable to parse labelSelector: {e}")))?;
    let fields = FieldSelector::parse(&ctx.query.field_selector)
        .map_err(|e| ApiError::bad_request(format!("unable to parse fieldSelector: {e}")))?;
    if let Some(field) = fields.fields().find(|f| !ctx.rt.supports_field(ctx.version, f)) {
        return Err(ApiError::bad_request(format!(
            "field label not supported: {field} (for {} {})",
            ctx.rt.kind,
            ctx.rt.api_version(ctx.version)
        )));
    }
    Ok((labels, fields))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Continue {
    rv: u64,
    ns: String,
    name: String,
}

fn list(shared: &Shared, ctx: &Ctx<'_>) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(ctx)?;
    let after = match &ctx.query.continue_token {
        Some(token) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(token)
                .map_err(|_| ApiError::bad_request("continue key is not valid: not base64"))?;
            let c: Continue = serde_json::from_slice(&bytes)
                .map_err(|_| ApiError::bad_request("continue key is not valid: malformed"))?;
            Some(c)
        }
        None => None,
    };
    let convert = convert::needs_output_conversion(&ctx.rt, ctx.version);
    let store = shared.lock();
    // Pages after the first report the first page's resourceVersion, as kube-apiserver does.
    let list_rv = after.as_ref().map_or(store.rv(), |c| c.rv);
    let after_key = after.map(|c| (c.ns, c.name));
    let namespace = if ctx.rt.namespaced { ctx.path.namespace.as_deref() } else { None };
    // Items as stored are spliced in as they are; only conversion, tables and metadata-only lists parse them.
    let as_stored = !convert && ctx.table.is_none() && ctx.metadata_only.is_none();
    let mut items: Vec<u8> = Vec::new();
    if as_stored {
        // Sized once: growing a buffer of many megabytes by doubling copies it over and over.
        let at_most = if ctx.query.limit > 0 { ctx.query.limit } else { usize::MAX };
        let candidates = store.list(&ctx.rt.storage_gr(), namespace, after_key.as_ref()).take(at_most);
        items.reserve(candidates.map(|(_, stored)| stored.json().len() + 1).sum());
    }
    // Or, when kubectl asked for a table, one row per item.
    let table = ctx.table.map(|options| printing::TableBuilder::new(&ctx.rt, ctx.version, options));
    let mut rows = Vec::new();
    let mut count = 0usize;
    let mut last_key = None;
    let mut remaining = 0usize;
    for (key, stored) in store.list(&ctx.rt.storage_gr(), namespace, after_key.as_ref()) {
        let served_of = || {
            let object = stored.to_value();
            if convert { convert::to_version(&ctx.rt, ctx.version, &object) } else { object }
        };
        let mut served = None;
        let matched = match stored.matches_indexed(&labels, &fields).filter(|_| !convert) {
            Some(matched) => matched,
            None => selectors::matches(&labels, &fields, served.insert(served_of())),
        };
        if !matched {
            continue;
        }
        if ctx.query.limit > 0 && count == ctx.query.limit {
            remaining += 1;
            continue;
        }
        if count > 0 && table.is_none() {
            items.push(b',');
        }
        if as_stored {
            items.extend_from_slice(stored.json());
        } else {
            let served = served.get_or_insert_with(served_of);
            if let Some(table) = &table {
                rows.push(table.row(served));
            } else {
                let written = match ctx.metadata_only {
                    Some(version) => serde_json::to_writer(&mut items, &printing::partial_metadata(served, version)),
                    None => serde_json::to_writer(&mut items, served),
                };
                written.map_err(|e| ApiError::internal(format!("could not serialise an object: {e}")))?;
            }
        }
        count += 1;
        last_key = Some(key.clone());
    }
    drop(store);
    let mut metadata = json!({ "resourceVersion": list_rv.to_string() });
    if remaining > 0
        && let Some((ns, name)) = last_key
    {
        let token = serde_json::to_vec(&Continue { rv: list_rv, ns, name })
            .map_err(|e| ApiError::internal(format!("could not build a continue token: {e}")))?;
        metadata["continue"] = json!(base64::engine::general_purpose::STANDARD.encode(token));
        metadata["remainingItemCount"] = json!(remaining);
    }
    if let Some(table) = &table {
        return Ok(json_response(StatusCode::OK, &table.table(rows, metadata, true)));
    }
    let head = match ctx.metadata_only {
        Some(version) => {
            json!({"kind": "PartialObjectMetadataList", "apiVersion": version.api_version(), "metadata": metadata})
        }
        None => json!({"kind": ctx.rt.list_kind, "apiVersion": ctx.rt.api_version(ctx.version), "metadata": metadata}),
    };
    let head = serde_json::to_vec(&head).map_err(|e| ApiError::internal(e.to_string()))?;
    let mut body = Vec::with_capacity(head.len() + items.len() + 16);
    body.extend_from_slice(&head[..head.len().saturating_sub(1)]); // without the closing brace
    body.extend_from_slice(b",\"items\":[");
    body.extend_from_slice(&items);
    body.extend_from_slice(b"]}");
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// `CreateOptions`, `UpdateOptions` or `DeleteOptions` as webhooks receive them.
fn options(ctx: &Ctx<'_>, kind: &str) -> Value {
    let mut options = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if let Some(manager) = ctx.query.field_manager.as_deref().filter(|m| !m.is_empty()) {
        options["fieldManager"] = json!(manager);
    }
    if ctx.query.dry_run {
        options["dryRun"] = json!(["All"]);
    }
    options
}

impl Ctx<'_> {
    /// The namespace admission sees: the object's, or a Namespace's own name for requests on it.
    fn admission_namespace(&self, namespace: &str) -> String {
        if self.rt.special == Special::Namespace {
            self.path.name.clone().unwrap_or_default()
        } else if self.rt.namespaced {
            namespace.to_string()
        } else {
            String::new()
        }
    }

    /// The webhooks whose rules name this request (under the store lock).
    fn webhooks(&self, shared: &Shared, store: &Store, operation: Operation, namespace: &str) -> Option<Matched> {
        let input = RuleInput {
            operation,
            group: &self.rt.gr.group,
            version: self.version,
            resource: &self.rt.gr.resource,
            subresource: self.path.subresource.as_deref().unwrap_or_default(),
            namespace,
        };
        shared.webhooks.matching(store, &self.rt, &input)
    }

    /// An admission review of this request.
    fn review(&self, operation: Operation, namespace: String, object: Option<Value>, old: Option<Value>) -> Review {
        let name = object.as_ref().or(old.as_ref()).map(|o| object::name(o).to_string()).unwrap_or_default();
        let kind = match operation {
            Operation::Create => "CreateOptions",
            Operation::Update => "UpdateOptions",
            Operation::Delete => "DeleteOptions",
        };
        Review {
            operation,
            rt: self.rt.clone(),
            version: self.version.to_string(),
            subresource: self.path.subresource.clone().unwrap_or_default(),
            sub_kind: None,
            name,
            namespace,
            object,
            old_object: old,
            options: options(self, kind),
            dry_run: self.query.dry_run,
        }
    }
}

async fn create(shared: &Shared, ctx: &Ctx<'_>, body: Value, apply: bool) -> Result<Response, ApiError> {
    if ctx.rt.special == Special::Review {
        return Ok(json_response(StatusCode::CREATED, &subresources::review(ctx, body)));
    }
    let applied = apply.then(|| managed::leaves(&body, false));
    let (decoded, matched) = {
        let mut store = shared.lock();
        let decoded = admission::decode_create(&store, &ctx.rt, ctx.version, ctx.path.namespace.as_deref(), body)?;
        let namespace = object::namespace(&decoded);
        let Some(matched) = ctx.webhooks(shared, &store, Operation::Create, &ctx.admission_namespace(namespace)) else {
            let gr = ctx.rt.storage_gr();
            let namespace = namespace.to_string();
            let taken = |name: &str| store.contains(&gr, &(namespace.clone(), name.to_string()));
            let obj = admission::finish_create(&ctx.rt, ctx.version, decoded, &taken)?;
            let stored = commit_create(&mut store, ctx, obj, applied)?;
            drop(store);
            return Ok(json_response(StatusCode::CREATED, &ctx.output(&stored)));
        };
        (decoded, matched)
    };
    // Boxed: requests no webhook matches keep a small future.
    Box::pin(create_admitted(shared, ctx, decoded, matched, applied)).await
}

/// A create through admission webhooks, called without the lock: mutating ones on the defaulted request, then
/// the server's own checks, then validating ones on the object about to be stored.
async fn create_admitted(
    shared: &Shared,
    ctx: &Ctx<'_>,
    decoded: Value,
    matched: Matched,
    applied: Option<managed::FieldSet>,
) -> Result<Response, ApiError> {
    let namespace = object::namespace(&decoded).to_string();
    let mut defaulted = decoded;
    admission::default_object(&ctx.rt, ctx.version, &mut defaulted);
    let mut review = ctx.review(Operation::Create, ctx.admission_namespace(&namespace), Some(defaulted), None);
    let mut warnings = webhook::mutate(shared.store(), &matched, &mut review).await?;
    let mutated = review.object.take().unwrap_or_default();
    if ctx.rt.namespaced && object::namespace(&mutated) != namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let gr = ctx.rt.storage_gr();
    let taken = |name: &str| shared.lock().get(&gr, &(namespace.clone(), name.to_string())).is_some();
    let obj = admission::finish_create(&ctx.rt, ctx.version, mutated, &taken)?;
    review.name = object::name(&obj).to_string();
    review.object = Some(obj);
    warnings.extend(webhook::validate(shared.store(), &matched, &review).await?);
    let obj = review.object.take().unwrap_or_default();
    let stored = {
        let mut store = shared.lock();
        admission::check_namespace(&store, &ctx.rt, &obj)?;
        commit_create(&mut store, ctx, obj, applied)?
    };
    Ok(with_warnings(json_response(StatusCode::CREATED, &ctx.output(&stored)), &warnings))
}

/// Stores a created object (its managed fields recorded), unless it exists; a dry run returns it unstored.
fn commit_create(
    store: &mut Store,
    ctx: &Ctx<'_>,
    mut obj: Value,
    applied: Option<managed::FieldSet>,
) -> Result<Arc<Value>, ApiError> {
    let apply = applied.is_some();
    let owned = applied.unwrap_or_else(|| managed::leaves(&obj, false));
    managed::record(&mut obj, None, &ctx.manager, apply, owned, &ctx.rt.api_version(ctx.version), "");
    let gr = ctx.rt.storage_gr();
    let key = (object::namespace(&obj).to_string(), object::name(&obj).to_string());
    if store.contains(&gr, &key) {
        return Err(ApiError::already_exists(ctx.subject(&key.1)));
    }
    if ctx.query.dry_run {
        return Ok(Arc::new(obj));
    }
    if ctx.rt.special == Special::Crd {
        obj = admission::admit_crd(store, obj, None)?;
    }
    let stored = store.insert(&gr, obj);
    store.settle();
    Ok(stored)
}

/// Commits an update prepared from `body`; writes nothing when nothing changed.
fn commit_update(
    store: &mut Store,
    ctx: &Ctx<'_>,
    current: &Value,
    body: Value,
    part: Part,
    require_rv: bool,
    applied: Option<&Value>,
) -> Result<Value, ApiError> {
    let updated = admission::prepare_update(&ctx.rt, ctx.version, current, body, part, require_rv)?;
    store_update(store, ctx, current, updated, part, applied)
}

/// Stores an update already admitted; writes nothing when nothing changed or on a dry run.
fn store_update(
    store: &mut Store,
    ctx: &Ctx<'_>,
    current: &Value,
    mut updated: Value,
    part: Part,
    applied: Option<&Value>,
) -> Result<Value, ApiError> {
    if let (Some(fields), Part::Main) = (current.pointer("/metadata/managedFields"), part) {
        object::set_meta(&mut updated, "managedFields", fields.clone());
    }
    if updated == *current || ctx.query.dry_run {
        return Ok(ctx.output(&updated));
    }
    if ctx.rt.special == Special::Crd && part == Part::Main {
        updated = admission::admit_crd(store, updated, Some(current))?;
    }
    let status = part == Part::Status;
    let owned = match applied {
        Some(config) => managed::leaves(config, status),
        None => managed::changed(current, &updated, status),
    };
    let subresource = if status { "status" } else { "" };
    let api_version = ctx.rt.api_version(ctx.version);
    managed::record(&mut updated, Some(current), &ctx.manager, applied.is_some(), owned, &api_version, subresource);
    let (stored, _removed) = store.replace(&ctx.rt.storage_gr(), &ctx.key(), updated);
    store.settle();
    Ok(ctx.output(&stored))
}

/// What an update (PUT, or a patch computed from the current object) writes.
enum Next {
    /// Update the current object with this body.
    Update {
        /// The new object as the client wants it (request version).
        body: Value,
        /// A server-side apply's configuration.
        applied: Option<Value>,
        /// Whether the body must carry a resourceVersion (PUT of a custom resource).
        require_rv: bool,
        /// Field validation warnings.
        warnings: Vec<String>,
    },
    /// The object does not exist and the request creates it (server-side apply).
    Create {
        /// The object to create.
        body: Value,
        /// Field validation warnings.
        warnings: Vec<String>,
    },
}

/// An update waiting for its webhooks: the object it was computed from, the decoded body, the matched
/// webhooks, a server-side apply's configuration and the warnings so far.
struct PendingUpdate {
    current: Arc<Value>,
    decoded: Value,
    matched: Matched,
    applied: Option<Value>,
    warnings: Vec<String>,
}

/// One attempt at an update, decided under the lock.
enum Attempt {
    /// Done without webhooks: the object as served, and warnings.
    Done(Value, Vec<String>),
    /// The request creates the object (server-side apply).
    Create(Value, Vec<String>),
    /// Webhooks must be called.
    Admit(Box<PendingUpdate>),
}

/// Updates the object `ctx` names with what `next` computes from the current object (`None`: it does not
/// exist). `next` is told whether webhooks will be called, in which case it may be asked again after a
/// concurrent write.
async fn write_existing<F>(shared: &Shared, ctx: &Ctx<'_>, part: Part, mut next: F) -> Result<Response, ApiError>
where
    F: FnMut(Option<&Arc<Value>>, bool) -> Result<Next, ApiError>,
{
    let key = ctx.key();
    let namespace = ctx.admission_namespace(&key.0);
    for _ in 0..ADMISSION_ATTEMPTS {
        let attempt = {
            let mut store = shared.lock();
            let current = store.get(&ctx.rt.storage_gr(), &key);
            let matched = ctx.webhooks(shared, &store, Operation::Update, &namespace);
            match next(current.as_ref(), matched.is_some())? {
                Next::Create { body, warnings } => Attempt::Create(body, warnings),
                Next::Update { body, applied, require_rv, warnings } => {
                    let current = current.ok_or_else(|| ApiError::not_found(ctx.subject(&key.1)))?;
                    match matched {
                        None => Attempt::Done(
                            commit_update(&mut store, ctx, &current, body, part, require_rv, applied.as_ref())?,
                            warnings,
                        ),
                        Some(matched) => {
                            let decoded = admission::decode_update(&ctx.rt, ctx.version, &current, body, require_rv)?;
                            Attempt::Admit(Box::new(PendingUpdate { current, decoded, matched, applied, warnings }))
                        }
                    }
                }
            }
        };
        match attempt {
            Attempt::Done(result, warnings) => {
                return Ok(with_warnings(json_response(StatusCode::OK, &result), &warnings));
            }
            Attempt::Create(body, warnings) => {
                let created = Box::pin(create(shared, ctx, body, true)).await;
                return created.map(|r| with_warnings(r, &warnings));
            }
            Attempt::Admit(pending) => {
                if let Some(response) = Box::pin(update_admitted(shared, ctx, part, &namespace, *pending)).await? {
                    return Ok(response);
                }
            }
        }
    }
    Err(ApiError::stale(ctx.subject(&key.1)))
}

/// An update through admission webhooks (called without the lock); `None` when the object changed meanwhile
/// and the update must be computed again.
async fn update_admitted(
    shared: &Shared,
    ctx: &Ctx<'_>,
    part: Part,
    namespace: &str,
    pending: PendingUpdate,
) -> Result<Option<Response>, ApiError> {
    let PendingUpdate { current, mut decoded, matched, applied, mut warnings } = pending;
    admission::default_object(&ctx.rt, ctx.version, &mut decoded);
    let mut review = ctx.review(Operation::Update, namespace.to_string(), Some(decoded), Some((*current).clone()));
    warnings.extend(webhook::mutate(shared.store(), &matched, &mut review).await?);
    let mutated = review.object.take().unwrap_or_default();
    review.object = Some(admission::finish_update(&ctx.rt, ctx.version, &current, mutated, part)?);
    warnings.extend(webhook::validate(shared.store(), &matched, &review).await?);
    let updated = review.object.take().unwrap_or_default();
    let result = {
        let mut store = shared.lock();
        let latest = ctx.require(&store)?;
        if !object::same_resource_version(&latest, &current) {
            // Written meanwhile: the caller computes the update again from the new state (a stale
            // resourceVersion in the body then fails with 409).
            return Ok(None);
        }
        store_update(&mut store, ctx, &current, updated, part, applied.as_ref())?
    };
    Ok(Some(with_warnings(json_response(StatusCode::OK, &result), &warnings)))
}

async fn update(shared: &Shared, ctx: &Ctx<'_>, body: Value, part: Part) -> Result<Response, ApiError> {
    let mut body = Some(body);
    write_existing(shared, ctx, part, |current, keep| {
        if current.is_none() {
            return Err(ApiError::not_found(ctx.subject(&ctx.key().1)));
        }
        let body = if keep { body.clone() } else { body.take() };
        let body = body.ok_or_else(|| ApiError::internal("the update body was used up"))?;
        Ok(Next::Update { body, applied: None, require_rv: true, warnings: Vec::new() })
    })
    .await
}

async fn patch(shared: &Shared, ctx: &Ctx<'_>, content_type: &str, raw: &[u8]) -> Result<Response, ApiError> {
    let pt = patch_type(content_type)?;
    if pt == PatchType::Strategic && ctx.rt.custom {
        return Err(ApiError::unsupported_media_type(
            content_type,
            &["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"],
        ));
    }
    if pt == PatchType::Apply && ctx.query.field_manager.as_deref().is_none_or(str::is_empty) {
        return Err(ApiError::bad_request("PATCH, fieldManager is required for apply patch"));
    }
    if ctx.path.subresource.as_deref() == Some("scale") {
        return subresources::update_scale(shared, ctx, None, Some((PatchKind(pt, "Scale"), raw))).await;
    }
    let part = if ctx.path.subresource.as_deref() == Some("status") { Part::Status } else { Part::Main };
    write_existing(shared, ctx, part, |current, _| {
        let key = ctx.key();
        let current = match current {
            Some(c) => c,
            None if pt == PatchType::Apply && ctx.path.subresource.is_none() => {
                // Server-side apply creates what does not exist.
                let mut body: Value = serde_yaml::from_slice(raw)
                    .map_err(|e| ApiError::bad_request(format!("the apply configuration is not valid YAML: {e}")))?;
                object::set_meta(&mut body, "name", json!(key.1));
                let checked = field_validation::check_patched(ctx, Some(field_validation::Raw::Yaml(raw)), body)?;
                return Ok(Next::Create { body: checked.body, warnings: checked.warnings });
            }
            None => return Err(ApiError::not_found(ctx.subject(&key.1))),
        };
        let served = ctx.output(current);
        let applied = if pt == PatchType::Apply {
            let config: Value = serde_yaml::from_slice(raw)
                .map_err(|e| ApiError::bad_request(format!("the apply configuration is not valid YAML: {e}")))?;
            let conflicts = managed::conflicts(&served, &ctx.manager, &config);
            if !conflicts.is_empty() && !ctx.query.force {
                let listed: Vec<String> =
                    conflicts.iter().map(|(field, owner)| format!("conflict with \"{owner}\": {field}")).collect();
                let count =
                    if listed.len() == 1 { "1 conflict".to_string() } else { format!("{} conflicts", listed.len()) };
                return Err(ApiError::conflict(
                    ctx.subject(&key.1),
                    &format!("Apply failed with {count}: {}", listed.join(", ")),
                ));
            }
            Some(config)
        } else {
            None
        };
        let patched = apply_patch(ctx, PatchKind(pt, &ctx.rt.kind), &served, raw)?;
        let raw_patch =
            if pt == PatchType::Apply { field_validation::Raw::Yaml(raw) } else { field_validation::Raw::Json(raw) };
        let checked = field_validation::check_patched(ctx, Some(raw_patch), patched)?;
        Ok(Next::Update { body: checked.body, applied, require_rv: false, warnings: checked.warnings })
    })
    .await
}

/// Propagation policy from the body's DeleteOptions or the query.
fn propagation(ctx: &Ctx<'_>, options: &Value) -> Result<Propagation, ApiError> {
    let policy = options["propagationPolicy"].as_str().or(ctx.query.propagation_policy.as_deref());
    let orphan = options["orphanDependents"].as_bool();
    match (policy, orphan) {
        (Some("Background"), _) | (None, None | Some(false)) => Ok(Propagation::Background),
        (Some("Foreground"), _) => Ok(Propagation::Foreground),
        (Some("Orphan"), _) | (None, Some(true)) => Ok(Propagation::Orphan),
        (Some(other), _) => Err(ApiError::bad_request(format!(
            "propagationPolicy {other:?} is not supported (Background, Foreground or Orphan)"
        ))),
    }
}

fn check_preconditions(ctx: &Ctx<'_>, options: &Value, current: &Value) -> Result<(), ApiError> {
    let pre = &options["preconditions"];
    let name = object::name(current);
    if let Some(uid) = pre["uid"].as_str()
        && uid != object::uid(current)
    {
        return Err(ApiError::conflict(
            ctx.subject(name),
            &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", object::uid(current)),
        ));
    }
    if let Some(rv) = pre["resourceVersion"].as_str()
        && Some(rv) != object::meta_str(current, "resourceVersion")
    {
        return Err(ApiError::conflict(
            ctx.subject(name),
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                object::meta_str(current, "resourceVersion").unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

/// Whether a delete is a dry run (query or DeleteOptions).
fn delete_dry_run(ctx: &Ctx<'_>, options: &Value) -> bool {
    ctx.query.dry_run || options["dryRun"].as_array().is_some_and(|a| !a.is_empty())
}

async fn delete(shared: &Shared, ctx: &Ctx<'_>, options: &Value) -> Result<Response, ApiError> {
    let policy = propagation(ctx, options)?;
    let key = ctx.key();
    match delete_one(shared, ctx, &key, options, policy).await? {
        Some((obj, warnings)) => Ok(with_warnings(json_response(StatusCode::OK, &ctx.output(&obj)), &warnings)),
        None => Err(ApiError::not_found(ctx.subject(&key.1))),
    }
}

/// Deletes one object after its DELETE webhooks allowed it: the deleted (or pending, or for a dry run the
/// current) object and the webhooks' warnings; `None` when it does not exist.
async fn delete_one(
    shared: &Shared,
    ctx: &Ctx<'_>,
    key: &ObjectKey,
    options: &Value,
    policy: Propagation,
) -> Result<Option<(Arc<Value>, Vec<String>)>, ApiError> {
    let gr = ctx.rt.storage_gr();
    let dry_run = delete_dry_run(ctx, options);
    let namespace = ctx.admission_namespace(&key.0);
    for _ in 0..ADMISSION_ATTEMPTS {
        let (current, matched) = {
            let mut store = shared.lock();
            let Some(current) = store.get(&gr, key) else { return Ok(None) };
            check_preconditions(ctx, options, &current)?;
            let Some(matched) = ctx.webhooks(shared, &store, Operation::Delete, &namespace) else {
                return Ok(remove(&mut store, &gr, key, policy, dry_run, current).map(|obj| (obj, Vec::new())));
            };
            (current, matched)
        };
        let admitted = Box::pin(delete_admitted(shared, ctx, key, options, &namespace, &current, matched)).await?;
        let mut store = shared.lock();
        let Some(latest) = store.get(&gr, key) else { return Ok(None) };
        if !object::same_resource_version(&latest, &current) {
            continue;
        }
        return Ok(remove(&mut store, &gr, key, policy, dry_run, current).map(|obj| (obj, admitted)));
    }
    Err(ApiError::stale(ctx.subject(&key.1)))
}

/// Deletes (or for a dry run only returns) an object; `None` when it is gone.
fn remove(
    store: &mut Store,
    gr: &super::resources::GroupResource,
    key: &ObjectKey,
    policy: Propagation,
    dry_run: bool,
    current: Arc<Value>,
) -> Option<Arc<Value>> {
    if dry_run { Some(current) } else { deleted(store.delete(gr, key, policy)) }
}

/// Calls the DELETE webhooks of an object (without the lock); their warnings.
async fn delete_admitted(
    shared: &Shared,
    ctx: &Ctx<'_>,
    key: &ObjectKey,
    options: &Value,
    namespace: &str,
    current: &Value,
    matched: Matched,
) -> Result<Vec<String>, ApiError> {
    let dry_run = delete_dry_run(ctx, options);
    let mut review = ctx.review(Operation::Delete, namespace.to_string(), None, Some(current.clone()));
    review.name = key.1.clone();
    review.dry_run = dry_run;
    let mut delete_options = if options.is_object() { options.clone() } else { json!({}) };
    delete_options["kind"] = json!("DeleteOptions");
    delete_options["apiVersion"] = json!("meta.k8s.io/v1");
    if let Some(policy) = &ctx.query.propagation_policy
        && delete_options.get("propagationPolicy").is_none()
    {
        delete_options["propagationPolicy"] = json!(policy);
    }
    if dry_run {
        delete_options["dryRun"] = json!(["All"]);
    }
    review.options = delete_options;
    let mut warnings = webhook::mutate(shared.store(), &matched, &mut review).await?;
    warnings.extend(webhook::validate(shared.store(), &matched, &review).await?);
    Ok(warnings)
}

async fn delete_collection(shared: &Shared, ctx: &Ctx<'_>, options: &Value) -> Result<Response, ApiError> {
    let policy = propagation(ctx, options)?;
    let (labels, fields) = selectors(ctx)?;
    let gr = ctx.rt.storage_gr();
    let namespace = if ctx.rt.namespaced { ctx.path.namespace.as_deref() } else { None };
    let dry_run = delete_dry_run(ctx, options);
    let keys = {
        let mut store = shared.lock();
        let keys: Vec<ObjectKey> = store
            .list_values(&gr, namespace, None)
            .filter(|(_, stored)| selectors::matches(&labels, &fields, &ctx.output(stored)))
            .map(|(k, _)| k.clone())
            .collect();
        if !shared.webhooks.any(&store) {
            // No webhooks: the whole collection goes in one locked step.
            let mut items = Vec::new();
            for key in keys {
                let outcome = if dry_run { store.get(&gr, &key) } else { deleted(store.delete(&gr, &key, policy)) };
                items.extend(outcome.map(|obj| ctx.output(&obj)));
            }
            return Ok(deleted_list(ctx, items, store.rv()));
        }
        keys
    };
    // Each object is its own DELETE for admission, as in kube-apiserver.
    let mut items = Vec::new();
    let mut warnings = Vec::new();
    for key in keys {
        if let Some((obj, more)) = Box::pin(delete_one(shared, ctx, &key, options, policy)).await? {
            items.push(ctx.output(&obj));
            warnings.extend(more);
        }
    }
    let rv = shared.lock().rv();
    Ok(with_warnings(deleted_list(ctx, items, rv), &warnings))
}

fn deleted(outcome: Option<DeleteOutcome>) -> Option<Arc<Value>> {
    match outcome {
        Some(DeleteOutcome::Deleted(obj) | DeleteOutcome::Pending(obj)) => Some(obj),
        None => None,
    }
}

fn deleted_list(ctx: &Ctx<'_>, items: Vec<Value>, rv: u64) -> Response {
    let list = json!({
        "kind": ctx.rt.list_kind,
        "apiVersion": ctx.rt.api_version(ctx.version),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items,
    });
    json_response(StatusCode::OK, &list)
}
