//! OpenAPI documents built from the registry: `/openapi/v3` (an index of group-versions), one OpenAPI 3.0
//! document per group-version under `/openapi/v3/api/v1` and `/openapi/v3/apis/{group}/{version}`, and a
//! Swagger 2.0 `/openapi/v2` in JSON.
//!
//! What kubectl (1.32) reads from them:
//! - `apply`/`create`/`replace` with `--validate=strict` (the default) ask the v3 document of the object's
//!   group-version for a PATCH operation whose `x-kubernetes-group-version-kind` is the object's and look for a
//!   `fieldValidation` query parameter; found, kubectl leaves validation to the server (`fieldValidation=Strict`).
//!   Without the document kubectl falls back to `/openapi/v2`, which it only takes as protobuf.
//! - `explain` finds the resource's path (`.../namespaces/{namespace}/<plural>` and the like), takes the GVK of
//!   its operations and prints the component schema carrying the same `x-kubernetes-group-version-kind`.
//! - client-side `apply` computes a strategic merge patch from the v3 schemas when a PATCH operation accepts
//!   `application/strategic-merge-patch+json`. Our schemas (from k8s-openapi) have no patch strategies or merge
//!   keys, so that content type is deliberately not listed: kubectl then uses the strategies compiled into it.
//!
//! Built-in kinds get their schemas from k8s-openapi's `schemars` implementations (cached for the process: they
//! never change); custom resources get each served version's `openAPIV3Schema`. The documents are serialised once
//! per registry generation (a CRD change makes a new one) and served from [`Cache`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

use super::discovery::KUBERNETES_MINOR;
use super::error::ApiError;
use super::resources::{Registry, ResourceType, Special};

/// Where component schemas live in an OpenAPI 3 document.
const REF_PREFIX: &str = "#/components/schemas/";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";
const EVICTION: &str = "io.k8s.api.policy.v1.Eviction";

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object: the \
    group and version the server accepts and returns it in.";
const KIND_DOC: &str = "Kind is the REST resource this object represents, in CamelCase.";
const METADATA_DOC: &str = "Standard object's metadata: name, namespace, labels, annotations, owners and the fields \
    the server maintains.";

type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// A process-wide memo keyed by (group, version).
type PerGroupVersion<T> = LazyLock<Mutex<HashMap<(String, String), T>>>;

fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// The k8s-openapi type of each built-in kind the registry serves: `(group, version, kind, schema)`.
const BUILTIN_SCHEMAS: &[(&str, &str, &str, SchemaFn)] = {
    use k8s_openapi::api::{
        admissionregistration, apps, authentication, authorization, autoscaling, batch, certificates, coordination,
        core, discovery, events, networking, node, policy, rbac, scheduling, storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
    &[
        ("", "v1", "Namespace", schema_of::<core::v1::Namespace>),
        ("", "v1", "Node", schema_of::<core::v1::Node>),
        ("", "v1", "Pod", schema_of::<core::v1::Pod>),
        ("", "v1", "Secret", schema_of::<core::v1::Secret>),
        ("", "v1", "ConfigMap", schema_of::<core::v1::ConfigMap>),
        ("", "v1", "Event", schema_of::<core::v1::Event>),
        ("", "v1", "ServiceAccount", schema_of::<core::v1::ServiceAccount>),
        ("", "v1", "Service", schema_of::<core::v1::Service>),
        ("", "v1", "Endpoints", schema_of::<core::v1::Endpoints>),
        ("", "v1", "PersistentVolume", schema_of::<core::v1::PersistentVolume>),
        ("", "v1", "PersistentVolumeClaim", schema_of::<core::v1::PersistentVolumeClaim>),
        ("", "v1", "ReplicationController", schema_of::<core::v1::ReplicationController>),
        ("", "v1", "ResourceQuota", schema_of::<core::v1::ResourceQuota>),
        ("", "v1", "LimitRange", schema_of::<core::v1::LimitRange>),
        ("", "v1", "PodTemplate", schema_of::<core::v1::PodTemplate>),
        ("apps", "v1", "Deployment", schema_of::<apps::v1::Deployment>),
        ("apps", "v1", "ReplicaSet", schema_of::<apps::v1::ReplicaSet>),
        ("apps", "v1", "StatefulSet", schema_of::<apps::v1::StatefulSet>),
        ("apps", "v1", "DaemonSet", schema_of::<apps::v1::DaemonSet>),
        ("apps", "v1", "ControllerRevision", schema_of::<apps::v1::ControllerRevision>),
        ("batch", "v1", "Job", schema_of::<batch::v1::Job>),
        ("batch", "v1", "CronJob", schema_of::<batch::v1::CronJob>),
        ("autoscaling", "v2", "HorizontalPodAutoscaler", schema_of::<autoscaling::v2::HorizontalPodAutoscaler>),
        ("policy", "v1", "PodDisruptionBudget", schema_of::<policy::v1::PodDisruptionBudget>),
        ("coordination.k8s.io", "v1", "Lease", schema_of::<coordination::v1::Lease>),
        ("events.k8s.io", "v1", "Event", schema_of::<events::v1::Event>),
        ("rbac.authorization.k8s.io", "v1", "Role", schema_of::<rbac::v1::Role>),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding", schema_of::<rbac::v1::RoleBinding>),
        ("rbac.authorization.k8s.io", "v1", "ClusterRole", schema_of::<rbac::v1::ClusterRole>),
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", schema_of::<rbac::v1::ClusterRoleBinding>),
        ("networking.k8s.io", "v1", "Ingress", schema_of::<networking::v1::Ingress>),
        ("networking.k8s.io", "v1", "IngressClass", schema_of::<networking::v1::IngressClass>),
        ("networking.k8s.io", "v1", "NetworkPolicy", schema_of::<networking::v1::NetworkPolicy>),
        ("discovery.k8s.io", "v1", "EndpointSlice", schema_of::<discovery::v1::EndpointSlice>),
        ("storage.k8s.io", "v1", "StorageClass", schema_of::<storage::v1::StorageClass>),
        ("storage.k8s.io", "v1", "VolumeAttachment", schema_of::<storage::v1::VolumeAttachment>),
        ("storage.k8s.io", "v1", "CSIDriver", schema_of::<storage::v1::CSIDriver>),
        ("storage.k8s.io", "v1", "CSINode", schema_of::<storage::v1::CSINode>),
        ("storage.k8s.io", "v1", "CSIStorageCapacity", schema_of::<storage::v1::CSIStorageCapacity>),
        ("scheduling.k8s.io", "v1", "PriorityClass", schema_of::<scheduling::v1::PriorityClass>),
        ("node.k8s.io", "v1", "RuntimeClass", schema_of::<node::v1::RuntimeClass>),
        (
            "certificates.k8s.io",
            "v1",
            "CertificateSigningRequest",
            schema_of::<certificates::v1::CertificateSigningRequest>,
        ),
        (
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            schema_of::<admissionregistration::v1::MutatingWebhookConfiguration>,
        ),
        (
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            schema_of::<admissionregistration::v1::ValidatingWebhookConfiguration>,
        ),
        (
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
            schema_of::<admissionregistration::v1::ValidatingAdmissionPolicy>,
        ),
        (
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
            schema_of::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>,
        ),
        (
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            schema_of::<apiextensions::v1::CustomResourceDefinition>,
        ),
        ("apiregistration.k8s.io", "v1", "APIService", schema_of::<apiregistration::v1::APIService>),
        (
            "authorization.k8s.io",
            "v1",
            "SelfSubjectAccessReview",
            schema_of::<authorization::v1::SelfSubjectAccessReview>,
        ),
        (
            "authorization.k8s.io",
            "v1",
            "SelfSubjectRulesReview",
            schema_of::<authorization::v1::SelfSubjectRulesReview>,
        ),
        ("authorization.k8s.io", "v1", "SubjectAccessReview", schema_of::<authorization::v1::SubjectAccessReview>),
        ("authentication.k8s.io", "v1", "TokenReview", schema_of::<authentication::v1::TokenReview>),
        ("authentication.k8s.io", "v1", "SelfSubjectReview", schema_of::<authentication::v1::SelfSubjectReview>),
    ]
};

/// Component schemas generated from k8s-openapi types, with the component name of each requested kind.
#[derive(Debug)]
pub struct Components {
    /// Component name -> schema (OpenAPI 3.0 style: `$ref`s into `#/components/schemas/`).
    pub schemas: Map<String, Value>,
    /// Kind -> component name, for the kinds the components were generated for.
    pub kinds: BTreeMap<String, String>,
}

fn ref_name(schema: &Schema) -> Option<String> {
    schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix(REF_PREFIX)).map(str::to_string)
}

fn generate(kinds: &[(&str, SchemaFn)]) -> Components {
    let mut generator = SchemaSettings::openapi3().into_generator();
    // Present in every document: what metadata, lists, deletes, errors and subresources refer to.
    for common in [
        schema_of::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> as SchemaFn,
        schema_of::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta>,
        schema_of::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>,
        schema_of::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>,
    ] {
        common(&mut generator);
    }
    let mut names = BTreeMap::new();
    for (kind, schema) in kinds {
        if let Some(name) = ref_name(&schema(&mut generator)) {
            names.insert(kind.to_string(), name);
        }
    }
    let mut schemas = generator.take_definitions(true);
    schemas.insert(
        PATCH.to_string(),
        json!({"type": "object", "description": "The body of a PATCH request, in the format its content type names."}),
    );
    Components { schemas, kinds: names }
}

/// The built-in components of one group-version (all its kinds), generated once per process.
pub fn builtin_components(group: &str, version: &str) -> Option<Arc<Components>> {
    static CACHE: PerGroupVersion<Arc<Components>> = LazyLock::new(Default::default);
    let key = (group.to_string(), version.to_string());
    if let Some(found) = CACHE.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Some(found.clone());
    }
    let kinds: Vec<(&str, SchemaFn)> = BUILTIN_SCHEMAS
        .iter()
        .filter(|(g, v, _, _)| *g == group && *v == version)
        .map(|(_, _, kind, f)| (*kind, *f))
        .collect();
    if kinds.is_empty() {
        return None;
    }
    let mut extra: Vec<(&str, SchemaFn)> = kinds;
    // Subresources served in these groups refer to kinds of other groups.
    extra.push(("Scale", schema_of::<k8s_openapi::api::autoscaling::v1::Scale>));
    extra.push(("Eviction", schema_of::<k8s_openapi::api::policy::v1::Eviction>));
    let built = Arc::new(generate(&extra));
    CACHE.lock().unwrap_or_else(|p| p.into_inner()).insert(key, built.clone());
    Some(built)
}

/// The components every custom resource document refers to (ObjectMeta, ListMeta, Status, Scale ...).
pub fn common_components() -> &'static Components {
    static COMMON: LazyLock<Components> =
        LazyLock::new(|| generate(&[("Scale", schema_of::<k8s_openapi::api::autoscaling::v1::Scale>)]));
    &COMMON
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("{REF_PREFIX}{name}")})
}

/// kube's component name for a custom kind: the group reversed, then version and kind
/// (`io.sapcloud.machine.v1alpha1.Machine`).
fn custom_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The component schema of a custom resource version: its `openAPIV3Schema` with the standard fields.
fn custom_schema(rt: &ResourceType, version: &str) -> Value {
    let declared = rt.version(version).and_then(|v| v.openapi_schema.as_deref());
    let mut schema =
        declared.cloned().unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    if !schema.is_object() {
        schema = json!({"type": "object"});
    }
    if !schema["properties"].is_object() {
        schema["properties"] = json!({});
    }
    let props = &mut schema["properties"];
    if props.get("apiVersion").is_none() {
        props["apiVersion"] = json!({"type": "string", "description": API_VERSION_DOC});
    }
    if props.get("kind").is_none() {
        props["kind"] = json!({"type": "string", "description": KIND_DOC});
    }
    props["metadata"] = json!({"allOf": [reference(OBJECT_META)], "description": METADATA_DOC});
    schema["x-kubernetes-group-version-kind"] = json!([gvk(&rt.gr.group, version, &rt.kind)]);
    schema
}

fn list_schema(rt: &ResourceType, version: &str, item: &str) -> Value {
    json!({
        "description": format!("{} is a list of {}.", rt.list_kind, rt.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": API_VERSION_DOC},
            "kind": {"type": "string", "description": KIND_DOC},
            "metadata": {"allOf": [reference(LIST_META)], "description": "Standard list metadata."},
            "items": {"type": "array", "items": reference(item), "description": format!("The {} objects.", rt.kind)},
        },
        "x-kubernetes-group-version-kind": [gvk(&rt.gr.group, version, &rt.list_kind)],
    })
}

fn query_param(name: &str, ty: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": ty, "uniqueItems": true}})
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description,
           "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params(patch: bool) -> Vec<Value> {
    let mut params = vec![
        query_param("dryRun", "string", "When set to All, the request is checked and answered but nothing is stored."),
        query_param(
            "fieldManager",
            "string",
            "The name of the actor making the change, recorded in managedFields. Required for apply patches.",
        ),
        query_param(
            "fieldValidation",
            "string",
            "How the server treats unknown and duplicate fields in the object: Ignore drops them silently, Warn \
             (the default) drops them and reports each in a Warning header, Strict fails the request with \
             400 BadRequest.",
        ),
    ];
    if patch {
        params.push(query_param(
            "force",
            "boolean",
            "For apply patches only: take ownership of fields other managers own instead of failing with a conflict.",
        ));
    }
    params
}

fn list_params() -> Vec<Value> {
    vec![
        query_param("labelSelector", "string", "Only objects whose labels match this selector."),
        query_param("fieldSelector", "string", "Only objects whose fields match this selector."),
        query_param("limit", "integer", "The largest number of objects to return; the rest via continue."),
        query_param("continue", "string", "The token of the previous page, to read the next one."),
        query_param("resourceVersion", "string", "Where a watch starts from."),
        query_param("resourceVersionMatch", "string", "How resourceVersion applies to a list."),
        query_param("timeoutSeconds", "integer", "How long a watch lasts."),
        query_param("watch", "boolean", "Stream changes instead of listing."),
        query_param("allowWatchBookmarks", "boolean", "Ask for BOOKMARK events on a watch."),
        query_param("sendInitialEvents", "boolean", "Start a watch with the current objects, then a bookmark."),
    ]
}

fn delete_params() -> Vec<Value> {
    vec![
        query_param("dryRun", "string", "When set to All, nothing is deleted."),
        query_param("gracePeriodSeconds", "integer", "Accepted; deletion is immediate."),
        query_param("propagationPolicy", "string", "Orphan, Background or Foreground deletion of dependents."),
    ]
}

fn json_content(schema: Value) -> Value {
    json!({"application/json": {"schema": schema.clone()}, "application/yaml": {"schema": schema}})
}

/// One operation as kube documents it; what kubectl reads are `x-kubernetes-group-version-kind`, the parameters
/// and the request body's content types.
struct Operation<'a> {
    action: &'a str,
    description: String,
    id: String,
    gvk: Value,
    params: Vec<Value>,
    body: Option<Value>,
    response: Value,
}

impl Operation<'_> {
    fn into_value(self, tag: &str) -> Value {
        let mut op = json!({
            "description": self.description,
            "operationId": self.id,
            "tags": [tag],
            "responses": {
                "200": {"description": "OK", "content": json_content(self.response)},
                "401": {"description": "Unauthorized"},
            },
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": self.gvk,
        });
        if !self.params.is_empty() {
            op["parameters"] = Value::Array(self.params);
        }
        if let Some(body) = self.body {
            op["requestBody"] = json!({"content": body, "required": true});
        }
        op
    }
}

fn camel(s: &str) -> String {
    s.split(['.', '-'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next().map(|f| f.to_uppercase().chain(c).collect::<String>()).unwrap_or_default()
        })
        .collect()
}

/// The patch content types; deliberately no `strategic-merge-patch+json` for built-in kinds although the server
/// accepts it (see the module docs).
fn patch_content() -> Value {
    let patch = json!({"schema": reference(PATCH)});
    json!({
        "application/json-patch+json": patch.clone(),
        "application/merge-patch+json": patch.clone(),
        "application/apply-patch+yaml": patch,
    })
}

/// Adds the paths of one served type to `paths`.
fn add_paths(paths: &mut Map<String, Value>, rt: &ResourceType, version: &str, kind_ref: &str, list_ref: &str) {
    let group = &rt.gr.group;
    let base = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
    let plural = &rt.gr.resource;
    let collection =
        if rt.namespaced { format!("{base}/namespaces/{{namespace}}/{plural}") } else { format!("{base}/{plural}") };
    let item = format!("{collection}/{{name}}");
    let tag = format!("{}_{version}", if group.is_empty() { "core" } else { group.as_str() }).replace('.', "_");
    let id_tail = format!(
        "{}{}{}{}",
        if group.is_empty() { "Core".to_string() } else { camel(group) },
        camel(version),
        if rt.namespaced { "Namespaced" } else { "" },
        rt.kind
    );
    let kind_gvk = gvk(group, version, &rt.kind);
    let op = |action: &'static str, verb: &str, what: String, params: Vec<Value>, body: Option<Value>, response| {
        Operation {
            action,
            description: what,
            id: format!("{verb}{id_tail}"),
            gvk: kind_gvk.clone(),
            params,
            body,
            response,
        }
        .into_value(&tag)
    };
    let ns_param = rt.namespaced.then(|| path_param("namespace", "The namespace of the objects."));
    let name_param = path_param("name", &format!("The name of the {}.", rt.kind));
    let kind = &rt.kind;
    let mut coll = Map::new();
    if rt.special == Special::Review {
        coll.insert(
            "post".into(),
            op(
                "post",
                "create",
                format!("create a {kind}"),
                write_params(false),
                Some(json_content(reference(kind_ref))),
                reference(kind_ref),
            ),
        );
    } else {
        coll.insert(
            "get".into(),
            op(
                "list",
                "list",
                format!("list or watch objects of kind {kind}"),
                list_params(),
                None,
                reference(list_ref),
            ),
        );
        coll.insert(
            "post".into(),
            op(
                "post",
                "create",
                format!("create a {kind}"),
                write_params(false),
                Some(json_content(reference(kind_ref))),
                reference(kind_ref),
            ),
        );
        coll.insert(
            "delete".into(),
            op(
                "deletecollection",
                "deleteCollection",
                format!("delete a collection of {kind}"),
                delete_params(),
                None,
                reference(STATUS),
            ),
        );
    }
    coll.insert("parameters".into(), Value::Array(ns_param.iter().cloned().collect()));
    paths.insert(collection.clone(), Value::Object(coll));
    if rt.special == Special::Review {
        return;
    }
    if rt.namespaced {
        // Listing across namespaces.
        let mut all = Map::new();
        all.insert(
            "get".into(),
            op(
                "list",
                "list",
                format!("list or watch objects of kind {kind} in all namespaces"),
                list_params(),
                None,
                reference(list_ref),
            ),
        );
        paths.insert(format!("{base}/{plural}"), Value::Object(all));
    }
    let item_params: Vec<Value> = ns_param.iter().cloned().chain([name_param]).collect();
    let mut one = Map::new();
    one.insert(
        "get".into(),
        op("get", "read", format!("read the specified {kind}"), Vec::new(), None, reference(kind_ref)),
    );
    one.insert(
        "put".into(),
        op(
            "put",
            "replace",
            format!("replace the specified {kind}"),
            write_params(false),
            Some(json_content(reference(kind_ref))),
            reference(kind_ref),
        ),
    );
    one.insert(
        "patch".into(),
        op(
            "patch",
            "patch",
            format!("partially update the specified {kind}"),
            write_params(true),
            Some(patch_content()),
            reference(kind_ref),
        ),
    );
    one.insert(
        "delete".into(),
        op(
            "delete",
            "delete",
            format!("delete a {kind}"),
            delete_params(),
            Some(json_content(reference(DELETE_OPTIONS))),
            reference(kind_ref),
        ),
    );
    one.insert("parameters".into(), Value::Array(item_params.clone()));
    paths.insert(item.clone(), Value::Object(one));
    let Some(info) = rt.version(version) else { return };
    let mut subresource = |name: &str, gvk_value: Value, target: &str, id_prefix: &str| {
        let mut sub = Map::new();
        let mk = |action: &'static str, verb: &str, what: String, params: Vec<Value>, body: Option<Value>| {
            Operation {
                action,
                description: what,
                id: format!("{verb}{id_tail}{id_prefix}"),
                gvk: gvk_value.clone(),
                params,
                body,
                response: reference(target),
            }
            .into_value(&tag)
        };
        sub.insert("get".into(), mk("get", "read", format!("read {name} of the specified {kind}"), Vec::new(), None));
        sub.insert(
            "put".into(),
            mk(
                "put",
                "replace",
                format!("replace {name} of the specified {kind}"),
                write_params(false),
                Some(json_content(reference(target))),
            ),
        );
        sub.insert(
            "patch".into(),
            mk(
                "patch",
                "patch",
                format!("partially update {name} of the specified {kind}"),
                write_params(true),
                Some(patch_content()),
            ),
        );
        sub.insert("parameters".into(), Value::Array(item_params.clone()));
        paths.insert(format!("{item}/{name}"), Value::Object(sub));
    };
    if info.status {
        subresource("status", kind_gvk.clone(), kind_ref, "Status");
    }
    if info.scale.is_some() {
        subresource("scale", gvk("autoscaling", "v1", "Scale"), SCALE, "Scale");
    }
    if rt.special == Special::Pod {
        let mut eviction = Map::new();
        eviction.insert(
            "post".into(),
            Operation {
                action: "post",
                description: "create eviction of a Pod".into(),
                id: format!("create{id_tail}Eviction"),
                gvk: gvk("policy", "v1", "Eviction"),
                params: write_params(false),
                body: Some(json_content(reference(EVICTION))),
                response: reference(EVICTION),
            }
            .into_value(&tag),
        );
        eviction.insert("parameters".into(), Value::Array(item_params));
        paths.insert(format!("{item}/eviction"), Value::Object(eviction));
    }
}

/// The OpenAPI 3.0 document of one group-version, or `None` when nothing is served there.
pub fn group_version_document(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types: Vec<&Arc<ResourceType>> =
        registry.iter().filter(|t| t.gr.group == group && t.version(version).is_some()).collect();
    if types.is_empty() {
        return None;
    }
    let builtin = if types.iter().any(|t| !t.custom) { builtin_components(group, version) } else { None };
    let mut schemas = match &builtin {
        Some(c) => c.schemas.clone(),
        None => common_components().schemas.clone(),
    };
    let mut paths = Map::new();
    for t in &types {
        let builtin_name = builtin.as_ref().and_then(|c| c.kinds.get(&t.kind)).filter(|_| !t.custom).cloned();
        let (kind_ref, list_ref) = match builtin_name {
            Some(name) => {
                if let Some(schema) = schemas.get_mut(&name) {
                    schema["x-kubernetes-group-version-kind"] = json!([gvk(group, version, &t.kind)]);
                }
                let list = format!("{name}List");
                (name, list)
            }
            None if t.custom => {
                let name = custom_name(group, version, &t.kind);
                schemas.insert(name.clone(), custom_schema(t, version));
                (name.clone(), format!("{name}List"))
            }
            // A built-in kind without a k8s-openapi schema: free-form.
            None => {
                let name = custom_name(if group.is_empty() { "core" } else { group }, version, &t.kind);
                let mut schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"apiVersion": {"type": "string", "description": API_VERSION_DOC},
                                   "kind": {"type": "string", "description": KIND_DOC},
                                   "metadata": {"allOf": [reference(OBJECT_META)], "description": METADATA_DOC}}});
                schema["x-kubernetes-group-version-kind"] = json!([gvk(group, version, &t.kind)]);
                schemas.insert(name.clone(), schema);
                (name.clone(), format!("{name}List"))
            }
        };
        schemas.insert(list_ref.clone(), list_schema(t, version, &kind_ref));
        add_paths(&mut paths, t, version, &kind_ref, &list_ref);
    }
    // Subresource kinds keep their own group-version-kind.
    if let Some(scale) = schemas.get_mut(SCALE) {
        scale["x-kubernetes-group-version-kind"] = json!([gvk("autoscaling", "v1", "Scale")]);
    }
    if let Some(eviction) = schemas.get_mut(EVICTION) {
        eviction["x-kubernetes-group-version-kind"] = json!([gvk("policy", "v1", "Eviction")]);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v1.{KUBERNETES_MINOR}.0")},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// Every served group-version as the index names it: `api/v1`, `apis/apps/v1` ...
fn served_group_versions(registry: &Registry) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for t in registry.iter() {
        for v in &t.versions {
            let gv = (t.gr.group.clone(), v.name.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
    }
    out.sort();
    out
}

fn index_key(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// A stable 64-bit FNV-1a hash: the documents' version, for cache-busting URLs and ETags.
fn content_hash(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016X}")
}

/// The serialised document of a group-version. Those serving built-in kinds only are the same for every
/// registry, so they are serialised once per process: a CRD change rebuilds only its own group-versions.
fn serialized_document(registry: &Registry, group: &str, version: &str) -> Result<Option<Serialized>, ApiError> {
    static BUILTIN_ONLY: PerGroupVersion<Serialized> = LazyLock::new(Default::default);
    let builtin_only =
        registry.iter().filter(|t| t.gr.group == group && t.version(version).is_some()).all(|t| !t.custom);
    let key = (group.to_string(), version.to_string());
    if builtin_only && let Some(found) = BUILTIN_ONLY.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(Some(found.clone()));
    }
    let Some(doc) = group_version_document(registry, group, version) else { return Ok(None) };
    let serialized = Serialized::new(&doc)?;
    if builtin_only {
        BUILTIN_ONLY.lock().unwrap_or_else(|p| p.into_inner()).insert(key, serialized.clone());
    }
    Ok(Some(serialized))
}

/// One serialised document and its hash.
#[derive(Debug, Clone)]
struct Serialized {
    hash: String,
    body: Bytes,
}

impl Serialized {
    fn new(value: &Value) -> Result<Self, ApiError> {
        let body = serde_json::to_vec(value)
            .map_err(|e| ApiError::internal(format!("could not serialise the OpenAPI document: {e}")))?;
        Ok(Serialized { hash: content_hash(&body), body: Bytes::from(body) })
    }
}

/// Every document of one registry generation.
#[derive(Debug)]
pub struct Documents {
    generation: u64,
    index: Serialized,
    group_versions: BTreeMap<String, Serialized>,
    v2: OnceLock<Result<Serialized, ApiError>>,
}

impl Documents {
    /// Builds every v3 document of `registry` (v2 is derived on first use).
    pub fn build(registry: &Registry) -> Result<Self, ApiError> {
        let mut group_versions = BTreeMap::new();
        let mut index = Map::new();
        for (group, version) in served_group_versions(registry) {
            let Some(serialized) = serialized_document(registry, &group, &version)? else { continue };
            let key = index_key(&group, &version);
            index.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", serialized.hash)}),
            );
            group_versions.insert(key, serialized);
        }
        let index = Serialized::new(&json!({"paths": index}))?;
        Ok(Documents { generation: registry.generation(), index, group_versions, v2: OnceLock::new() })
    }

    /// `/openapi/v3`: `{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=..."}, ...}}`.
    pub fn index(&self) -> Value {
        serde_json::from_slice(&self.index.body).unwrap_or(Value::Null)
    }

    /// The document of `api/v1` or `apis/{group}/{version}`.
    pub fn group_version(&self, key: &str) -> Option<Value> {
        self.group_versions.get(key).and_then(|s| serde_json::from_slice(&s.body).ok())
    }

    fn v2(&self) -> Result<&Serialized, ApiError> {
        self.v2.get_or_init(|| Serialized::new(&self.swagger()?)).as_ref().map_err(Clone::clone)
    }

    /// The Swagger 2.0 form of all group-versions together.
    fn swagger(&self) -> Result<Value, ApiError> {
        let mut definitions = Map::new();
        let mut paths = Map::new();
        for doc in self.group_versions.values() {
            // Refs move from components to definitions; rewriting the text is the simplest faithful way.
            let text = String::from_utf8_lossy(&doc.body).replace("\"#/components/schemas/", "\"#/definitions/");
            let doc: Value = serde_json::from_str(&text)
                .map_err(|e| ApiError::internal(format!("could not convert an OpenAPI document: {e}")))?;
            if let Some(schemas) = doc["components"]["schemas"].as_object() {
                for (name, schema) in schemas {
                    definitions.entry(name.clone()).or_insert_with(|| schema.clone());
                }
            }
            if let Some(doc_paths) = doc["paths"].as_object() {
                for (path, item) in doc_paths {
                    paths.insert(path.clone(), swagger_path_item(item));
                }
            }
        }
        Ok(json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": format!("v1.{KUBERNETES_MINOR}.0")},
            "paths": paths,
            "definitions": definitions,
        }))
    }
}

fn swagger_param(param: &Value) -> Value {
    let mut out = param.clone();
    if let Some(map) = out.as_object_mut()
        && let Some(Value::Object(schema)) = map.remove("schema")
    {
        map.extend(schema);
    }
    out
}

fn swagger_path_item(item: &Value) -> Value {
    let mut out = Map::new();
    let Some(item) = item.as_object() else { return Value::Object(out) };
    for (key, value) in item {
        if key == "parameters" {
            let params: Vec<Value> =
                value.as_array().map(|a| a.iter().map(swagger_param).collect()).unwrap_or_default();
            out.insert(key.clone(), Value::Array(params));
            continue;
        }
        let Some(op) = value.as_object() else { continue };
        let mut converted = Map::new();
        let mut params: Vec<Value> = op
            .get("parameters")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(swagger_param).collect())
            .unwrap_or_default();
        if let Some(content) = op.get("requestBody").and_then(|b| b["content"].as_object()) {
            let schema = content.values().next().map(|c| c["schema"].clone()).unwrap_or_else(|| json!({}));
            params.push(json!({"name": "body", "in": "body", "required": true, "schema": schema}));
            converted.insert("consumes".into(), json!(content.keys().collect::<Vec<_>>()));
        }
        converted.insert("produces".into(), json!(["application/json", "application/yaml"]));
        let mut responses = Map::new();
        if let Some(rs) = op.get("responses").and_then(Value::as_object) {
            for (code, r) in rs {
                let mut response = json!({"description": r["description"]});
                if let Some(schema) = r["content"]["application/json"].get("schema") {
                    response["schema"] = schema.clone();
                }
                responses.insert(code.clone(), response);
            }
        }
        converted.insert("responses".into(), Value::Object(responses));
        if !params.is_empty() {
            converted.insert("parameters".into(), Value::Array(params));
        }
        for (k, v) in op {
            if matches!(k.as_str(), "description" | "operationId" | "tags") || k.starts_with("x-") {
                converted.insert(k.clone(), v.clone());
            }
        }
        converted.insert("schemes".into(), json!(["https"]));
        out.insert(key.clone(), Value::Object(converted));
    }
    Value::Object(out)
}

/// The documents of the latest registry generation seen, shared by the requests of one server.
#[derive(Debug, Default)]
pub struct Cache {
    current: Mutex<Option<Arc<Documents>>>,
}

impl Cache {
    /// The documents for `registry`, built when its generation differs from the cached one.
    pub fn documents(&self, registry: &Registry) -> Result<Arc<Documents>, ApiError> {
        {
            let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(docs) = current.as_ref().filter(|d| d.generation == registry.generation()) {
                return Ok(docs.clone());
            }
        }
        let built = Arc::new(Documents::build(registry)?);
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(built.clone());
        Ok(built)
    }
}

/// Whether an `Accept` header admits JSON (absent, `application/json`, `application/*` or `*/*`).
fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else { return true };
    accept.trim().is_empty()
        || accept.split(',').any(|range| {
            let media = range.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
            matches!(media.as_str(), "application/json" | "application/*" | "*/*")
        })
}

fn not_acceptable(headers: &HeaderMap) -> ApiError {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    ApiError::with_code(
        406,
        "NotAcceptable",
        format!("only application/json is served for OpenAPI documents (protobuf is not), not {accept}"),
    )
}

fn document_response(doc: &Serialized, headers: &HeaderMap, immutable: bool) -> Response {
    let etag = format!("\"{}\"", doc.hash);
    let matches = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| v == etag);
    let mut response = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], doc.body.clone()).into_response()
    };
    let out = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&etag) {
        out.insert(header::ETAG, value);
    }
    // A URL naming the current hash never changes: clients may keep it (kube-apiserver does the same).
    let cache = if immutable { "public, immutable, max-age=31536000" } else { "no-cache, private" };
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}

/// Serves `/openapi/{rest}` (`rest` without the prefix, e.g. `v3/apis/apps/v1`) for a GET request.
pub fn respond(
    cache: &Cache,
    registry: &Registry,
    rest: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let path = rest.trim_matches('/');
    let known = path == "v2" || path == "v3" || path.starts_with("v3/");
    if !known {
        return Err(ApiError::no_route(&format!("/openapi/{path}")));
    }
    if !accepts_json(headers) {
        return Err(not_acceptable(headers));
    }
    let docs = cache.documents(registry)?;
    match path {
        "v2" => Ok(document_response(docs.v2()?, headers, false)),
        "v3" => Ok(document_response(&docs.index, headers, false)),
        _ => {
            let key = path.trim_start_matches("v3/");
            let Some(doc) = docs.group_versions.get(key) else {
                return Err(ApiError::no_route(&format!("/openapi/{path}")));
            };
            let hash = query
                .and_then(|q| serde_urlencoded::from_str::<Vec<(String, String)>>(q).ok())
                .and_then(|pairs| pairs.into_iter().find(|(k, _)| k == "hash").map(|(_, v)| v));
            match hash {
                // An outdated hash: send the client to the current document, as kube-apiserver does.
                Some(h) if h != doc.hash => {
                    let location = format!("/openapi/v3/{key}?hash={}", doc.hash);
                    Ok((StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, location)]).into_response())
                }
                Some(_) => Ok(document_response(doc, headers, true)),
                None => Ok(document_response(doc, headers, false)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources::from_crd;

    fn registry_with_mcm() -> Registry {
        let mut registry = Registry::builtin();
        let crd: Value =
            serde_yaml::from_str(include_str!("../../crds/machine.sapcloud.io_machinedeployments.yaml")).unwrap();
        registry.insert(from_crd(&crd).unwrap());
        registry
    }

    fn patch_op<'a>(doc: &'a Value, path: &str) -> &'a Value {
        &doc["paths"][path]["patch"]
    }

    /// The registry's table of built-in kinds and this schema table are two lists of the same kinds: keep them in step.
    #[test]
    fn every_builtin_kind_has_a_schema_and_every_schema_a_kind() {
        let registry = Registry::builtin();
        let mut kinds: Vec<(String, String, String)> = registry
            .iter()
            .flat_map(|t| t.versions.iter().map(move |v| (t.gr.group.clone(), v.name.clone(), t.kind.clone())))
            .collect();
        let mut schemas: Vec<(String, String, String)> =
            BUILTIN_SCHEMAS.iter().map(|(g, v, k, _)| (g.to_string(), v.to_string(), k.to_string())).collect();
        kinds.sort();
        kinds.dedup();
        schemas.sort();
        schemas.dedup();
        assert_eq!(kinds, schemas);
    }

    #[test]
    fn index_lists_every_group_version_with_a_hash() {
        let registry = registry_with_mcm();
        let docs = Documents::build(&registry).unwrap();
        let index = docs.index();
        let core = index["paths"]["api/v1"]["serverRelativeURL"].as_str().unwrap();
        assert!(core.starts_with("/openapi/v3/api/v1?hash="), "{core}");
        assert!(index["paths"]["apis/apps/v1"].is_object());
        assert!(index["paths"]["apis/machine.sapcloud.io/v1alpha1"].is_object());
        assert!(index["paths"].get("apis/nope/v1").is_none());
    }

    #[test]
    fn patch_operations_declare_field_validation_with_their_gvk() {
        let registry = registry_with_mcm();
        let core = group_version_document(&registry, "", "v1").unwrap();
        let op = patch_op(&core, "/api/v1/namespaces/{namespace}/configmaps/{name}");
        assert_eq!(op["x-kubernetes-group-version-kind"], json!({"group": "", "version": "v1", "kind": "ConfigMap"}));
        let params: Vec<&str> =
            op["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert!(params.contains(&"fieldValidation"), "{params:?}");
        assert!(op["parameters"].as_array().unwrap().iter().all(|p| p["in"] == "query"));
        // No strategic merge patch advertised: kubectl must use its compiled-in patch strategies.
        assert!(op["requestBody"]["content"].get("application/strategic-merge-patch+json").is_none());
        assert!(op["requestBody"]["content"].get("application/merge-patch+json").is_some());

        let mcm = group_version_document(&registry, "machine.sapcloud.io", "v1alpha1").unwrap();
        let op = patch_op(&mcm, "/apis/machine.sapcloud.io/v1alpha1/namespaces/{namespace}/machinedeployments/{name}");
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "MachineDeployment");
        assert!(op["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
    }

    #[test]
    fn schemas_carry_their_gvk_and_resolve() {
        let registry = registry_with_mcm();
        let core = group_version_document(&registry, "", "v1").unwrap();
        let schemas = core["components"]["schemas"].as_object().unwrap();
        let pod = &schemas["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["x-kubernetes-group-version-kind"], json!([{"group": "", "version": "v1", "kind": "Pod"}]));
        assert!(schemas.contains_key("io.k8s.api.core.v1.PodList"));
        // Every $ref points at a component of the same document.
        let text = core.to_string();
        for part in text.split("\"$ref\":\"").skip(1) {
            let target = part.split('"').next().unwrap();
            let name = target.strip_prefix(REF_PREFIX).unwrap_or_else(|| panic!("foreign ref {target}"));
            assert!(schemas.contains_key(name), "dangling ref {name}");
        }

        let mcm = group_version_document(&registry, "machine.sapcloud.io", "v1alpha1").unwrap();
        let md = &mcm["components"]["schemas"]["io.sapcloud.machine.v1alpha1.MachineDeployment"];
        assert_eq!(md["x-kubernetes-group-version-kind"][0]["kind"], "MachineDeployment");
        assert!(md["properties"]["spec"]["properties"]["strategy"]["description"].is_string());
        assert_eq!(md["properties"]["metadata"]["allOf"][0]["$ref"], format!("{REF_PREFIX}{OBJECT_META}"));
        assert!(mcm["components"]["schemas"].get(OBJECT_META).is_some());
        // The scale subresource documents autoscaling/v1 Scale.
        let scale =
            &mcm["paths"]["/apis/machine.sapcloud.io/v1alpha1/namespaces/{namespace}/machinedeployments/{name}/scale"];
        assert_eq!(scale["patch"]["x-kubernetes-group-version-kind"]["kind"], "Scale");
    }

    #[test]
    fn documents_are_cached_per_registry_generation() {
        let cache = Cache::default();
        let mut registry = Registry::builtin();
        let first = cache.documents(&registry).unwrap();
        assert!(Arc::ptr_eq(&first, &cache.documents(&registry).unwrap()));
        let crd: Value =
            serde_yaml::from_str(include_str!("../../crds/machine.sapcloud.io_machinedeployments.yaml")).unwrap();
        registry.insert(from_crd(&crd).unwrap());
        let second = cache.documents(&registry).unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(second.group_version("apis/machine.sapcloud.io/v1alpha1").is_some());
        assert!(first.group_version("apis/machine.sapcloud.io/v1alpha1").is_none());
        // The core document did not change, so its hash (URL) did not either.
        assert_eq!(first.index()["paths"]["api/v1"], second.index()["paths"]["api/v1"]);
    }

    #[test]
    fn swagger_has_definitions_and_paths() {
        let docs = Documents::build(&Registry::builtin()).unwrap();
        let v2: Value = serde_json::from_slice(&docs.v2().unwrap().body).unwrap();
        assert_eq!(v2["swagger"], "2.0");
        assert!(v2["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
        let op = &v2["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert!(
            op["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["type"] == "string")
        );
        assert!(!v2.to_string().contains("#/components/schemas/"));
    }

    #[test]
    fn responses_follow_hashes_and_accept_headers() {
        let cache = Cache::default();
        let registry = Registry::builtin();
        let hash = cache.documents(&registry).unwrap().group_versions["apis/apps/v1"].hash.clone();
        let get = |path: &str, query: Option<&str>, headers: &HeaderMap| {
            respond(&cache, &registry, path, query, headers).map(|r| r.into_parts().0).map_err(|e| e.code)
        };
        let none = HeaderMap::new();
        let current = format!("hash={hash}");
        let ok = get("v3/apis/apps/v1", Some(&current), &none).unwrap();
        assert_eq!(ok.status, StatusCode::OK);
        assert_eq!(ok.headers[header::CACHE_CONTROL], "public, immutable, max-age=31536000");
        assert_eq!(ok.headers[header::CONTENT_TYPE], "application/json");
        let moved = get("v3/apis/apps/v1", Some("hash=OLD"), &none).unwrap();
        assert_eq!(moved.status, StatusCode::MOVED_PERMANENTLY);
        assert_eq!(moved.headers[header::LOCATION], format!("/openapi/v3/apis/apps/v1?hash={hash}"));
        let mut cached = HeaderMap::new();
        cached.insert(header::IF_NONE_MATCH, HeaderValue::from_str(&format!("\"{hash}\"")).unwrap());
        assert_eq!(get("v3/apis/apps/v1", None, &cached).unwrap().status, StatusCode::NOT_MODIFIED);
        assert_eq!(get("v3", None, &none).unwrap().headers[header::CACHE_CONTROL], "no-cache, private");
        assert_eq!(get("v2", None, &none).unwrap().status, StatusCode::OK);
        let mut protobuf = HeaderMap::new();
        protobuf.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
        );
        assert_eq!(get("v2", None, &protobuf).unwrap_err(), 406);
        assert_eq!(get("v3/apis/nope/v1", None, &none).unwrap_err(), 404);
        assert_eq!(get("v4", None, &none).unwrap_err(), 404);
    }

    #[test]
    fn accept_headers() {
        let mut h = HeaderMap::new();
        assert!(accepts_json(&h));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
        );
        assert!(!accepts_json(&h));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json, */*"));
        assert!(accepts_json(&h));
    }
}
