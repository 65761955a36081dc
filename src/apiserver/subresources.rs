//! The `scale` and `eviction` subresources, and the review kinds (answered, never stored).
//!
//! Called by `handlers`, which it must not import: it works from the request context (`context`), the shared
//! state (`state`) and the patch and response helpers (`patch`, `response`).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::admission::Part;
use super::context::Ctx;
use super::error::{ApiError, Subject};
use super::object::{self, get_path, set_path};
use super::patch::{PatchKind, apply_patch};
use super::resources::GroupResource;
use super::response::{json_response, with_warnings};
use super::selectors::LabelSelector;
use super::state::Shared;
use super::store::{DeleteOutcome, ObjectKey, Propagation, Store};
use super::webhook::{self, ADMISSION_ATTEMPTS, Operation, Review, RuleInput};

/// The `autoscaling/v1` Scale view of an object.
pub fn scale_view(ctx: &Ctx<'_>, stored: &Value) -> Value {
    let paths = ctx.rt.version(ctx.version).and_then(|v| v.scale.clone());
    let (spec_path, status_path, selector_path) = match &paths {
        Some(p) => (p.spec_replicas.as_str(), p.status_replicas.as_str(), p.label_selector.as_deref()),
        None => (".spec.replicas", ".status.replicas", None),
    };
    let replicas = |path: &str| get_path(stored, path).and_then(Value::as_i64).unwrap_or(0);
    let mut status = json!({ "replicas": replicas(status_path) });
    if let Some(selector) = selector_path.and_then(|p| get_path(stored, p)).and_then(Value::as_str) {
        status["selector"] = json!(selector);
    } else if !ctx.rt.custom
        && let Some(selector) = stored.pointer("/spec/selector")
        && let Ok(parsed) = LabelSelector::from_json(selector)
    {
        status["selector"] = json!(parsed.to_string());
    }
    let meta = &stored["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": { "replicas": replicas(spec_path) },
        "status": status,
    })
}

/// The replicas a Scale asks for, checked against the current object's resourceVersion.
fn wanted_replicas(ctx: &Ctx<'_>, scale: &Value, current: &Value) -> Result<i64, ApiError> {
    let name = object::name(current);
    if let Some(rv) = object::meta_str(scale, "resourceVersion")
        && Some(rv) != object::meta_str(current, "resourceVersion")
    {
        return Err(ApiError::stale(ctx.subject(name)));
    }
    scale.pointer("/spec/replicas").and_then(Value::as_i64).ok_or_else(|| {
        ApiError::invalid(
            ctx.subject(name),
            "Scale",
            vec![super::error::Cause {
                reason: "FieldValueRequired".into(),
                field: "spec.replicas".into(),
                message: "Required value".into(),
            }],
        )
    })
}

/// The object with `replicas` written at the type's spec replicas path, prepared as an update.
fn scaled(ctx: &Ctx<'_>, current: &Value, replicas: i64) -> Result<Value, ApiError> {
    let spec_path = ctx
        .rt
        .version(ctx.version)
        .and_then(|v| v.scale.as_ref())
        .map_or(".spec.replicas".to_string(), |s| s.spec_replicas.clone());
    let mut updated = ctx.output(current);
    set_path(&mut updated, &spec_path, json!(replicas));
    super::admission::prepare_update(&ctx.rt, ctx.version, current, updated, Part::Main, false)
}

/// Stores a scaled object (nothing when nothing changed or on a dry run) and answers its Scale.
fn store_scaled(store: &mut Store, ctx: &Ctx<'_>, current: Arc<Value>, prepared: Value) -> Response {
    let stored = if prepared == *current || ctx.query.dry_run {
        current
    } else {
        let (stored, _) = store.replace(&ctx.rt.storage_gr(), &ctx.key(), prepared);
        store.settle();
        stored
    };
    json_response(StatusCode::OK, &scale_view(ctx, &stored))
}

/// PUT (a Scale body) or PATCH (a patch of the Scale view) of the scale subresource. Webhooks whose rules name
/// `<resource>/scale` see the `autoscaling/v1` Scale.
pub async fn update_scale(
    shared: &Shared,
    ctx: &Ctx<'_>,
    body: Option<Value>,
    patch: Option<(PatchKind<'_>, &[u8])>,
) -> Result<Response, ApiError> {
    let key = ctx.key();
    let namespace = if ctx.rt.namespaced { key.0.clone() } else { String::new() };
    for _ in 0..ADMISSION_ATTEMPTS {
        let (current, view, scale, matched) = {
            let mut store = shared.lock();
            let current = ctx.require(&store)?;
            let view = scale_view(ctx, &current);
            let scale = match (&body, &patch) {
                (Some(body), _) => body.clone(),
                (None, Some((kind, raw))) => apply_patch(ctx, *kind, &view, raw)?,
                (None, None) => return Err(ApiError::bad_request("a scale update needs a body")),
            };
            let replicas = wanted_replicas(ctx, &scale, &current)?;
            let input = RuleInput {
                operation: Operation::Update,
                group: &ctx.rt.gr.group,
                version: ctx.version,
                resource: &ctx.rt.gr.resource,
                subresource: "scale",
                namespace: &namespace,
            };
            let Some(matched) = shared.webhooks.matching(&store, &ctx.rt, &input) else {
                let prepared = scaled(ctx, &current, replicas)?;
                return Ok(store_scaled(&mut store, ctx, current, prepared));
            };
            (current, view, scale, matched)
        };
        let admitted = scale_admitted(shared, ctx, &namespace, current, view, scale, matched);
        if let Some(response) = Box::pin(admitted).await? {
            return Ok(response);
        }
    }
    Err(ApiError::stale(ctx.subject(&key.1)))
}

/// A scale update through admission webhooks (called without the lock); `None` when the object changed
/// meanwhile and the update must be computed again.
async fn scale_admitted(
    shared: &Shared,
    ctx: &Ctx<'_>,
    namespace: &str,
    current: Arc<Value>,
    view: Value,
    scale: Value,
    matched: webhook::Matched,
) -> Result<Option<Response>, ApiError> {
    let mut review = Review {
        operation: Operation::Update,
        rt: ctx.rt.clone(),
        version: ctx.version.to_string(),
        subresource: "scale".into(),
        sub_kind: Some(webhook::SCALE),
        name: object::name(&current).to_string(),
        namespace: namespace.to_string(),
        object: Some(scale),
        old_object: Some(view),
        options: json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}),
        dry_run: ctx.query.dry_run,
    };
    if ctx.query.dry_run {
        review.options["dryRun"] = json!(["All"]);
    }
    let mut warnings = webhook::mutate(shared.store(), &matched, &mut review).await?;
    let scale = review.object.as_ref().cloned().unwrap_or_default();
    let replicas = wanted_replicas(ctx, &scale, &current)?;
    let prepared = scaled(ctx, &current, replicas)?;
    warnings.extend(webhook::validate(shared.store(), &matched, &review).await?);
    let mut store = shared.lock();
    let latest = ctx.require(&store)?;
    if !object::same_resource_version(&latest, &current) {
        return Ok(None);
    }
    let response = store_scaled(&mut store, ctx, current, prepared);
    Ok(Some(with_warnings(response, &warnings)))
}

/// Answers a review kind (`SelfSubjectAccessReview`, `TokenReview`, ...): everything is allowed, every token
/// authenticates. The embedded server has no authorization.
pub fn review(ctx: &Ctx<'_>, mut body: Value) -> Value {
    body["apiVersion"] = json!(ctx.rt.api_version(ctx.version));
    body["kind"] = json!(ctx.rt.kind);
    body["status"] = match ctx.rt.kind.as_str() {
        "TokenReview" | "SelfSubjectReview" => {
            json!({"authenticated": true, "user": {"username": "mcm-dev-admin", "groups": ["system:masters", "system:authenticated"]}, "userInfo": {"username": "mcm-dev-admin", "groups": ["system:masters", "system:authenticated"]}})
        }
        "SelfSubjectRulesReview" => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false
        }),
        _ => json!({"allowed": true, "reason": "the embedded API server authorizes every request"}),
    };
    body
}

fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// How many pods may be disrupted under a budget: `(healthy, desired healthy, expected)`.
fn budget(pdb: &Value, pods: &[Value]) -> Result<(i64, i64, i64), String> {
    let healthy = pods.iter().filter(|p| is_ready(p) && !object::is_deleting(p)).count() as i64;
    let expected = pods.len() as i64;
    let resolve = |v: &Value, round_up: bool| -> Result<i64, String> {
        match v {
            Value::Number(n) => n.as_i64().ok_or_else(|| "not an integer".to_string()),
            Value::String(s) => {
                let pct: f64 = s
                    .strip_suffix('%')
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| format!("invalid value {s:?}: an integer or a percentage"))?;
                let exact = pct * expected as f64 / 100.0;
                Ok(if round_up { exact.ceil() } else { exact.floor() } as i64)
            }
            _ => Err("invalid value".into()),
        }
    };
    let desired = if let Some(min) = pdb.pointer("/spec/minAvailable") {
        resolve(min, true)?
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        expected - resolve(max, true)?
    } else {
        expected
    };
    Ok((healthy, desired, expected))
}

/// `POST pods/{name}/eviction`: deletes the pod unless a PodDisruptionBudget forbids it (429). Webhooks whose
/// rules name `pods/eviction` (CREATE) see the `policy/v1` Eviction first.
pub async fn evict(shared: &Shared, ctx: &Ctx<'_>, body: Value) -> Result<Response, ApiError> {
    let key = ctx.key();
    let matched = {
        let store = shared.lock();
        let input = RuleInput {
            operation: Operation::Create,
            group: "",
            version: ctx.version,
            resource: "pods",
            subresource: "eviction",
            namespace: &key.0,
        };
        shared.webhooks.matching(&store, &ctx.rt, &input)
    };
    let Some(matched) = matched else { return evict_now(shared, ctx, body) };
    Box::pin(evict_admitted(shared, ctx, body, matched)).await
}

/// An eviction through admission webhooks (called without the lock).
async fn evict_admitted(
    shared: &Shared,
    ctx: &Ctx<'_>,
    body: Value,
    matched: webhook::Matched,
) -> Result<Response, ApiError> {
    let key = ctx.key();
    let mut review = Review {
        operation: Operation::Create,
        rt: ctx.rt.clone(),
        version: ctx.version.to_string(),
        subresource: "eviction".into(),
        sub_kind: Some(webhook::EVICTION),
        name: key.1,
        namespace: key.0,
        object: Some(body),
        old_object: None,
        options: json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}),
        dry_run: ctx.query.dry_run,
    };
    let mut warnings = webhook::mutate(shared.store(), &matched, &mut review).await?;
    warnings.extend(webhook::validate(shared.store(), &matched, &review).await?);
    let body = review.object.take().unwrap_or_default();
    evict_now(shared, ctx, body).map(|r| with_warnings(r, &warnings))
}

fn evict_now(shared: &Shared, ctx: &Ctx<'_>, body: Value) -> Result<Response, ApiError> {
    let mut store = shared.lock();
    let pod = ctx.require(&store)?;
    let ns = object::namespace(&pod).to_string();
    let name = object::name(&pod).to_string();
    let subject = Subject { group: "", resource: "pods", name: &name };
    let pdb_gr = GroupResource::new("policy", "poddisruptionbudgets");
    let pdbs: Vec<(ObjectKey, Value)> = store
        .list_values(&pdb_gr, Some(&ns), None)
        .filter(|(_, pdb)| {
            pdb.pointer("/spec/selector")
                .and_then(|s| LabelSelector::from_json(s).ok())
                .is_some_and(|s| !s.is_empty() && s.matches_object(&pod))
        })
        .map(|(k, v)| (k.clone(), v))
        .collect();
    if pdbs.len() > 1 {
        return Err(ApiError::internal(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        ));
    }
    if let Some((pdb_key, pdb)) = pdbs.into_iter().next()
        && is_ready(&pod)
    {
        let selector = pdb.pointer("/spec/selector").and_then(|s| LabelSelector::from_json(s).ok()).unwrap_or_default();
        let covered: Vec<Value> = store
            .list(&ctx.rt.gr, Some(&ns), None)
            .filter(|(_, p)| selector.matches_with(|key| p.label(key)))
            .map(|(_, p)| p.to_value())
            .collect();
        let (healthy, desired, expected) = budget(&pdb, &covered)
            .map_err(|e| ApiError::internal(format!("PodDisruptionBudget {} is invalid: {e}", pdb_key.1)))?;
        let allowed = (healthy - desired).max(0);
        let counts = BudgetCounts { healthy, desired, expected, allowed };
        update_pdb_status(&mut store, &pdb_gr, &pdb_key, &pdb, counts);
        if allowed <= 0 {
            let mut err = ApiError::too_many_requests();
            err.message = format!(
                "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget {} needs {desired} healthy pods and has {healthy} currently",
                pdb_key.1
            );
            err.details = Some(
                json!({"causes": [{"reason": "DisruptionBudget", "message": format!("The disruption budget {} needs {desired} healthy pods and has {healthy} currently", pdb_key.1)}]}),
            );
            return Err(err);
        }
    }
    let options = body.get("deleteOptions").cloned().unwrap_or_else(|| json!({}));
    if let Some(uid) = options.pointer("/preconditions/uid").and_then(Value::as_str)
        && uid != object::uid(&pod)
    {
        return Err(ApiError::conflict(subject, "Precondition failed: UID mismatch"));
    }
    if ctx.query.dry_run {
        return Ok(json_response(StatusCode::CREATED, &success()));
    }
    match store.delete(&ctx.rt.gr, &ctx.key(), Propagation::Background) {
        Some(DeleteOutcome::Deleted(_) | DeleteOutcome::Pending(_)) => {
            Ok(json_response(StatusCode::CREATED, &success()))
        }
        None => Err(ApiError::not_found(subject)),
    }
}

fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// A PodDisruptionBudget's counts, as its status reports them.
struct BudgetCounts {
    healthy: i64,
    desired: i64,
    expected: i64,
    allowed: i64,
}

fn update_pdb_status(store: &mut Store, gr: &GroupResource, key: &ObjectKey, pdb: &Value, counts: BudgetCounts) {
    let BudgetCounts { healthy, desired, expected, allowed } = counts;
    let mut updated = pdb.clone();
    let status = json!({
        "currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected,
        "disruptionsAllowed": allowed, "observedGeneration": pdb["metadata"]["generation"],
    });
    if updated.get("status").is_some_and(|s| {
        ["currentHealthy", "desiredHealthy", "expectedPods", "disruptionsAllowed"].iter().all(|k| s[*k] == status[*k])
    }) {
        return;
    }
    let mut merged = updated.get("status").cloned().unwrap_or_else(|| json!({}));
    json_patch::merge(&mut merged, &status);
    updated["status"] = merged;
    store.replace(gr, key, updated);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ready: bool) -> Value {
        let status = if ready { "True" } else { "False" };
        json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": status}]}})
    }

    #[test]
    fn budgets_count_ready_pods() {
        let pods = vec![pod(true), pod(true), pod(false)];
        let cases = [
            (json!({"spec": {"minAvailable": 2}}), (2, 2, 3)),
            (json!({"spec": {"minAvailable": "50%"}}), (2, 2, 3)),
            (json!({"spec": {"maxUnavailable": 1}}), (2, 2, 3)),
            (json!({"spec": {"maxUnavailable": "100%"}}), (2, 0, 3)),
        ];
        for (pdb, expected) in cases {
            assert_eq!(budget(&pdb, &pods).unwrap(), expected, "{pdb}");
        }
        assert!(budget(&json!({"spec": {"minAvailable": "x"}}), &pods).is_err());
    }
}
