//! Admission webhooks: the server calls the MutatingWebhookConfigurations and ValidatingWebhookConfigurations
//! stored in it, as kube-apiserver does.
//!
//! The handlers decide under the store lock whether any webhook's rules name a request ([`Cache::matching`];
//! nothing to do and no allocation when no configuration exists), then release the lock, call the mutating
//! webhooks one after the other ([`mutate`]), run the server's own validation, call the validating webhooks
//! concurrently ([`validate`]) and commit under the lock again. What is simplified is listed in
//! `docs/apiserver.md`.
//!
//! Below the server's state (`state` holds the [`Cache`]): calls get the store itself ([`SharedStore`], to
//! resolve Services), and this module must not import `state`, `handlers` or `server`.

mod call;
mod rules;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhookConfiguration,
};
use serde_json::{Map, Value, json};

pub use rules::{Operation, RuleInput};

use super::convert;
use super::error::{ApiError, Subject};
use super::object;
use super::resources::{GroupResource, ResourceType};
use super::selectors::LabelSelector;
use super::store::{ADMISSION_GROUP, SharedStore, Store};
use call::{Answer, ConfigError, Target};

/// Attempts at a write whose object changed while webhooks were being called (kube-apiserver's patch handler
/// retries as often).
pub const ADMISSION_ATTEMPTS: usize = 5;

/// Resources of the admission group that are never sent to webhooks (kube-apiserver exempts them, so a broken
/// webhook can always be removed).
const EXEMPT: &[&str] = &[
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "mutatingadmissionpolicies",
    "mutatingadmissionpolicybindings",
];

/// The user webhooks are told about: the embedded server authenticates no one by name.
const USERNAME: &str = "system:admin";

/// One webhook of a configuration, ready to be matched and called.
struct Hook {
    name: String,
    mutating: bool,
    rules: Vec<RuleWithOperations>,
    /// `matchPolicy: Exact`; otherwise (`Equivalent`, the default) other versions of the resource match too.
    exact: bool,
    namespace_selector: Result<LabelSelector, String>,
    object_selector: Result<LabelSelector, String>,
    /// `failurePolicy: Ignore`.
    ignore_failures: bool,
    /// `sideEffects` is `None` or `NoneOnDryRun`: safe to call for dry runs.
    dry_run_safe: bool,
    timeout: Duration,
    /// `admissionReviewVersions` lists `v1`.
    accepts_v1: bool,
    target: Result<Target, ConfigError>,
    tls: Result<Arc<rustls::ClientConfig>, ConfigError>,
}

fn selector(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> Result<LabelSelector, String> {
    let Some(selector) = selector else { return Ok(LabelSelector::default()) };
    let json = serde_json::to_value(selector).map_err(|e| e.to_string())?;
    LabelSelector::from_json(&json).map_err(|e| e.to_string())
}

impl Hook {
    fn compile(webhook: MutatingWebhook, mutating: bool) -> Self {
        let seconds = webhook.timeout_seconds.unwrap_or(10).clamp(1, 30);
        Hook {
            mutating,
            rules: webhook.rules.unwrap_or_default(),
            exact: webhook.match_policy.as_deref() == Some("Exact"),
            namespace_selector: selector(webhook.namespace_selector.as_ref()),
            object_selector: selector(webhook.object_selector.as_ref()),
            ignore_failures: webhook.failure_policy.as_deref() == Some("Ignore"),
            dry_run_safe: matches!(webhook.side_effects.as_str(), "None" | "NoneOnDryRun"),
            timeout: Duration::from_secs(u64::try_from(seconds).unwrap_or(10)),
            accepts_v1: webhook.admission_review_versions.iter().any(|v| v == "v1"),
            target: Target::from_config(&webhook.client_config),
            tls: call::tls_config(webhook.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice())),
            name: webhook.name,
        }
    }

    /// The version under which the hook's rules name the request: the request's own, or (matchPolicy
    /// `Equivalent`) another served version of the same resource.
    fn matched_version(&self, rt: &ResourceType, input: &RuleInput<'_>) -> Option<String> {
        if rules::any_rule_matches(&self.rules, input) {
            return Some(input.version.to_string());
        }
        if self.exact {
            return None;
        }
        rt.versions.iter().map(|v| v.name.as_str()).filter(|v| *v != input.version).find_map(|version| {
            let other = RuleInput { version, ..*input };
            rules::any_rule_matches(&self.rules, &other).then(|| version.to_string())
        })
    }
}

/// Every webhook of the stored configurations: mutating ones sorted by configuration name, then in order.
#[derive(Default)]
struct Set {
    mutating: Vec<Arc<Hook>>,
    validating: Vec<Arc<Hook>>,
}

impl Set {
    fn compile(store: &Store) -> Self {
        let mut set = Set::default();
        // The store lists by (namespace, name): configurations come sorted by name.
        for (_, stored) in
            store.list_values(&GroupResource::new(ADMISSION_GROUP, "mutatingwebhookconfigurations"), None, None)
        {
            let name = object::name(&stored).to_string();
            match serde_json::from_value::<MutatingWebhookConfiguration>(stored) {
                Ok(config) => {
                    let hooks = config.webhooks.unwrap_or_default().into_iter();
                    set.mutating.extend(hooks.map(|w| Arc::new(Hook::compile(w, true))));
                }
                Err(e) => {
                    tracing::warn!(name = %name, error = %e, "unusable MutatingWebhookConfiguration")
                }
            }
        }
        for (_, stored) in
            store.list_values(&GroupResource::new(ADMISSION_GROUP, "validatingwebhookconfigurations"), None, None)
        {
            let name = object::name(&stored).to_string();
            match serde_json::from_value::<ValidatingWebhookConfiguration>(stored) {
                Ok(config) => {
                    let hooks = config.webhooks.unwrap_or_default().into_iter().map(|w| MutatingWebhook {
                        admission_review_versions: w.admission_review_versions,
                        client_config: w.client_config,
                        failure_policy: w.failure_policy,
                        match_conditions: w.match_conditions,
                        match_policy: w.match_policy,
                        name: w.name,
                        namespace_selector: w.namespace_selector,
                        object_selector: w.object_selector,
                        reinvocation_policy: None,
                        rules: w.rules,
                        side_effects: w.side_effects,
                        timeout_seconds: w.timeout_seconds,
                    });
                    set.validating.extend(hooks.map(|w| Arc::new(Hook::compile(w, false))));
                }
                Err(e) => {
                    tracing::warn!(name = %name, error = %e, "unusable ValidatingWebhookConfiguration")
                }
            }
        }
        set
    }

    fn is_empty(&self) -> bool {
        self.mutating.is_empty() && self.validating.is_empty()
    }
}

/// The compiled webhook configurations, rebuilt when the store's admission configurations change.
#[derive(Default)]
pub struct Cache {
    current: Mutex<Option<(u64, Arc<Set>)>>,
}

/// The labels `namespaceSelector` is matched against.
enum NamespaceLabels {
    /// A cluster-scoped object other than a Namespace: never exempted by a namespace selector.
    ClusterScoped,
    /// A Namespace: its own labels (the new object's, or the old one's on delete).
    Own,
    /// The labels of the object's namespace.
    Of(Option<Map<String, Value>>),
    /// The object's namespace does not exist.
    Missing(String),
}

/// The webhooks whose rules name one request.
pub struct Matched {
    mutating: Vec<(Arc<Hook>, String)>,
    validating: Vec<(Arc<Hook>, String)>,
    namespace_labels: NamespaceLabels,
}

impl Cache {
    /// The current configurations, compiled again when they changed; `None` while no admission configuration was
    /// ever written (the common case: nothing to look at).
    fn set(&self, store: &Store) -> Option<Arc<Set>> {
        let generation = store.admission_generation();
        if generation == 0 {
            return None;
        }
        let mut current = self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match &*current {
            Some((seen, set)) if *seen == generation => Some(set.clone()),
            _ => {
                let set = Arc::new(Set::compile(store));
                *current = Some((generation, set.clone()));
                Some(set)
            }
        }
    }

    /// Whether any webhook is configured at all.
    pub fn any(&self, store: &Store) -> bool {
        self.set(store).is_some_and(|s| !s.is_empty())
    }

    /// The webhooks whose rules name the request, or `None` when there are none. Called under the store lock.
    pub fn matching(&self, store: &Store, rt: &ResourceType, input: &RuleInput<'_>) -> Option<Matched> {
        let set = self.set(store)?;
        if set.is_empty() || (rt.gr.group == ADMISSION_GROUP && EXEMPT.contains(&rt.gr.resource.as_str())) {
            return None;
        }
        let pick = |hooks: &[Arc<Hook>]| -> Vec<(Arc<Hook>, String)> {
            hooks.iter().filter_map(|h| h.matched_version(rt, input).map(|v| (h.clone(), v))).collect()
        };
        let mutating = pick(&set.mutating);
        let validating = pick(&set.validating);
        if mutating.is_empty() && validating.is_empty() {
            return None;
        }
        let is_namespace = rt.gr.group.is_empty() && rt.gr.resource == "namespaces";
        let namespace_labels = if is_namespace {
            NamespaceLabels::Own
        } else if !rt.namespaced || input.namespace.is_empty() {
            NamespaceLabels::ClusterScoped
        } else {
            let ns = store.get(&GroupResource::new("", "namespaces"), &(String::new(), input.namespace.to_string()));
            match ns {
                Some(ns) => NamespaceLabels::Of(object::labels(&ns).cloned()),
                None => NamespaceLabels::Missing(input.namespace.to_string()),
            }
        };
        Some(Matched { mutating, validating, namespace_labels })
    }
}

/// `(group, version, kind)` of an object sent to webhooks that is not the resource's own kind (`Scale`,
/// `Eviction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubKind {
    /// Group.
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
}

/// The `autoscaling/v1` Scale of the scale subresource.
pub const SCALE: SubKind = SubKind { group: "autoscaling", version: "v1", kind: "Scale" };
/// The `policy/v1` Eviction of `pods/eviction`.
pub const EVICTION: SubKind = SubKind { group: "policy", version: "v1", kind: "Eviction" };

/// What an `AdmissionReview` request describes.
pub struct Review {
    /// The operation.
    pub operation: Operation,
    /// The resource type.
    pub rt: Arc<ResourceType>,
    /// The version of the request.
    pub version: String,
    /// The subresource ("" for none).
    pub subresource: String,
    /// The kind of a subresource's own object (`Scale`), `None` for the resource's kind.
    pub sub_kind: Option<SubKind>,
    /// The object's name ("" for a create with `generateName`).
    pub name: String,
    /// The object's namespace ("" for cluster-scoped objects).
    pub namespace: String,
    /// The new object (stored form), `None` on delete.
    pub object: Option<Value>,
    /// The current object (stored form) on update and delete.
    pub old_object: Option<Value>,
    /// `CreateOptions`, `UpdateOptions` or `DeleteOptions`.
    pub options: Value,
    /// A dry run.
    pub dry_run: bool,
}

impl Review {
    /// An object as the hook matched at `version` sees it.
    fn served(&self, version: &str, stored: &Value) -> Value {
        if self.sub_kind.is_some() { stored.clone() } else { convert::to_version(&self.rt, version, stored) }
    }

    fn body(&self, version: &str, uid: &str) -> Value {
        let group = self.rt.gr.group.as_str();
        let gvk = |version: &str| match self.sub_kind {
            Some(k) => json!({"group": k.group, "version": k.version, "kind": k.kind}),
            None => json!({"group": group, "version": version, "kind": self.rt.kind}),
        };
        let gvr = |version: &str| json!({"group": group, "version": version, "resource": self.rt.gr.resource});
        let mut request = json!({
            "uid": uid,
            "kind": gvk(version),
            "resource": gvr(version),
            "requestKind": gvk(&self.version),
            "requestResource": gvr(&self.version),
            "operation": self.operation.as_str(),
            "userInfo": {"username": USERNAME, "groups": ["system:masters", "system:authenticated"]},
            "object": self.object.as_ref().map(|o| self.served(version, o)),
            "oldObject": self.old_object.as_ref().map(|o| self.served(version, o)),
            "dryRun": self.dry_run,
            "options": self.options,
        });
        for (field, value) in [
            ("subResource", &self.subresource),
            ("requestSubResource", &self.subresource),
            ("name", &self.name),
            ("namespace", &self.namespace),
        ] {
            if !value.is_empty() {
                request[field] = json!(value);
            }
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    }

    fn labels_of(&self, prefer_old: bool) -> [Option<&Map<String, Value>>; 2] {
        let new = self.object.as_ref().and_then(object::labels);
        let old = self.old_object.as_ref().and_then(object::labels);
        if prefer_old { [old, new] } else { [new, old] }
    }
}

/// kube-apiserver's `Internal error occurred: ...` (500).
fn internal(message: &str) -> ApiError {
    let mut e = ApiError::internal(format!("Internal error occurred: {message}"));
    e.details = Some(json!({"causes": [{"message": message}]}));
    e
}

/// The error of a denial: `admission webhook "<name>" denied the request: <message>`, with the webhook's code
/// (400 when it gave none below 400), reason and details.
fn denied(hook: &str, status: Option<Map<String, Value>>) -> ApiError {
    let status = status.unwrap_or_default();
    let text = |key: &str| status.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
    let code = status.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()).filter(|c| *c >= 400);
    let denied_by = format!("admission webhook \"{hook}\" denied the request");
    let message = match (text("message"), text("reason")) {
        (Some(message), _) => format!("{denied_by}: {message}"),
        (None, Some(reason)) => format!("{denied_by}: {reason}"),
        (None, None) => format!("{denied_by} without explanation"),
    };
    let mut e = ApiError::bad_request(message);
    e.code = code.unwrap_or(400);
    e.reason = Cow::Owned(text("reason").unwrap_or_default());
    e.details = status.get("details").cloned();
    e
}

/// Whether a matched hook's selectors take the request.
fn selected(hook: &Hook, matched: &Matched, review: &Review) -> Result<bool, ApiError> {
    let namespace_selector = hook.namespace_selector.as_ref().map_err(|e| internal(e))?;
    if !namespace_selector.is_empty() {
        let labels = match &matched.namespace_labels {
            NamespaceLabels::ClusterScoped => None,
            NamespaceLabels::Own => Some(review.labels_of(review.operation == Operation::Delete)[0].cloned()),
            NamespaceLabels::Of(labels) => Some(labels.clone()),
            NamespaceLabels::Missing(ns) => {
                return Err(ApiError::not_found(Subject { group: "", resource: "namespaces", name: ns }));
            }
        };
        if let Some(labels) = labels
            && !namespace_selector.matches(labels.as_ref())
        {
            return Ok(false);
        }
    }
    let object_selector = hook.object_selector.as_ref().map_err(|e| internal(e))?;
    if object_selector.is_empty() {
        return Ok(true);
    }
    let objects = [review.object.as_ref(), review.old_object.as_ref()];
    Ok(objects.into_iter().flatten().any(|o| object_selector.matches(object::labels(o))))
}

/// Resolves a Service reference under the store lock.
fn resolve(store: &SharedStore, namespace: &str, name: &str, port: i32) -> Result<std::net::SocketAddr, String> {
    let store = store.lock();
    let service = store.get(&GroupResource::new("", "services"), &(namespace.to_string(), name.to_string()));
    let slices: Vec<Value> = store
        .list(&GroupResource::new("discovery.k8s.io", "endpointslices"), Some(namespace), None)
        .filter(|(_, s)| s.label("kubernetes.io/service-name") == Some(name))
        .map(|(_, s)| s.to_value())
        .collect();
    let endpoints = store.get(&GroupResource::new("", "endpoints"), &(namespace.to_string(), name.to_string()));
    drop(store);
    let slices: Vec<&Value> = slices.iter().collect();
    call::resolve_service(name, port, service.as_deref(), &slices, endpoints.as_deref())
}

/// One call; `Err` is a failed call worded for `failed calling webhook "<name>": ...`.
async fn attempt(store: &SharedStore, hook: &Hook, version: &str, review: &Review) -> Result<Answer, String> {
    if !hook.accepts_v1 {
        return Err("webhook does not accept v1 AdmissionReview (the only version the embedded server sends)".into());
    }
    let target = hook.target.as_ref().map_err(|e| format!("could not get REST client: {e}"))?;
    let tls = hook.tls.as_ref().map_err(|e| format!("could not get REST client: {e}"))?.clone();
    let url = target.display_url(hook.timeout);
    let failed = |why: String| format!("failed to call webhook: Post \"{url}\": {why}");
    let connect = match target {
        Target::Url { authority, .. } => authority.clone(),
        Target::Service { namespace, name, port, .. } => {
            resolve(store, namespace, name, *port).map_err(failed)?.to_string()
        }
    };
    let uid = uuid::Uuid::new_v4().to_string();
    let body = serde_json::to_vec(&review.body(version, &uid)).map_err(|e| format!("encoding the review: {e}"))?;
    let path = target.path_and_query(hook.timeout);
    let (server_name, host) = (target.server_name(), target.host_header());
    let exchange = call::post(&connect, &server_name, &host, &path, tls, body);
    let (status, bytes) = match tokio::time::timeout(hook.timeout, exchange).await {
        Err(_) => return Err(failed("context deadline exceeded".into())),
        Ok(Err(e)) => return Err(failed(e)),
        Ok(Ok(answer)) => answer,
    };
    call::interpret(&uid, hook.mutating, status, &bytes)
}

/// One call with the failure policy applied: `None` when a failure is ignored.
async fn call_hook(
    store: &SharedStore,
    hook: &Hook,
    version: &str,
    review: &Review,
) -> Result<Option<Answer>, ApiError> {
    if review.dry_run && !hook.dry_run_safe {
        return Err(ApiError::bad_request(format!("admission webhook \"{}\" does not support dry run", hook.name)));
    }
    match attempt(store, hook, version, review).await {
        Ok(answer) => Ok(Some(answer)),
        Err(reason) => {
            let message = format!("failed calling webhook \"{}\": {reason}", hook.name);
            if hook.ignore_failures {
                tracing::warn!(webhook = %hook.name, "{message}; failurePolicy Ignore");
                Ok(None)
            } else {
                Err(internal(&message))
            }
        }
    }
}

/// Calls the matched mutating webhooks in order, each seeing the previous ones' patches; `review.object` ends
/// as the mutated object (stored form). Returns the webhooks' warnings.
pub async fn mutate(store: &SharedStore, matched: &Matched, review: &mut Review) -> Result<Vec<String>, ApiError> {
    let mut warnings = Vec::new();
    for (hook, version) in &matched.mutating {
        if !selected(hook, matched, review)? {
            continue;
        }
        match call_hook(store, hook, version, review).await? {
            None => {}
            Some(Answer::Denied { status, .. }) => return Err(denied(&hook.name, status)),
            Some(Answer::Allowed { patch, warnings: more }) => {
                warnings.extend(more);
                let Some(patch) = patch.filter(|p| !p.0.is_empty()) else { continue };
                let Some(stored) = &review.object else {
                    return Err(internal(&format!(
                        "admission webhook \"{}\" attempted to modify the object, which is not supported for this operation",
                        hook.name
                    )));
                };
                let mut served = review.served(version, stored);
                json_patch::patch(&mut served, &patch).map_err(|e| internal(&e.to_string()))?;
                review.object =
                    Some(if review.sub_kind.is_some() { served } else { convert::to_storage(&review.rt, served) });
            }
        }
    }
    Ok(warnings)
}

/// Calls the matched validating webhooks concurrently; the first denial or failure (in configuration order)
/// fails the request. Returns the webhooks' warnings.
pub async fn validate(store: &SharedStore, matched: &Matched, review: &Review) -> Result<Vec<String>, ApiError> {
    let mut chosen = Vec::new();
    for (hook, version) in &matched.validating {
        if selected(hook, matched, review)? {
            chosen.push((hook, version));
        }
    }
    let answers =
        futures::future::join_all(chosen.iter().map(|(hook, version)| call_hook(store, hook, version, review))).await;
    let mut warnings = Vec::new();
    for ((hook, _), answer) in chosen.iter().zip(answers) {
        match answer? {
            None => {}
            Some(Answer::Denied { status, .. }) => return Err(denied(&hook.name, status)),
            Some(Answer::Allowed { warnings: more, .. }) => warnings.extend(more),
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_become_kube_apiserver_errors() {
        let status = |v: Value| v.as_object().cloned();
        let cases = [
            (None, 400, "", "admission webhook \"h\" denied the request without explanation"),
            (
                status(json!({"code": 403, "reason": "Forbidden", "message": "no"})),
                403,
                "Forbidden",
                "admission webhook \"h\" denied the request: no",
            ),
            (status(json!({"code": 200, "message": "no"})), 400, "", "admission webhook \"h\" denied the request: no"),
            (
                status(json!({"reason": "NotAllowed"})),
                400,
                "NotAllowed",
                "admission webhook \"h\" denied the request: NotAllowed",
            ),
            (
                status(json!({"code": 422, "reason": "Invalid", "message": "bad", "details": {"causes": []}})),
                422,
                "Invalid",
                "admission webhook \"h\" denied the request: bad",
            ),
        ];
        for (given, code, reason, message) in cases {
            let e = denied("h", given);
            assert_eq!((e.code, e.reason.as_ref(), e.message.as_str()), (code, reason, message));
        }
        assert_eq!(denied("h", status(json!({"details": {"name": "x"}}))).details, Some(json!({"name": "x"})));
    }
}
