//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/{group}` and the resource lists of each
//! group-version, built from the registry (so a new CRD shows up at once). `/api` and `/apis` also come as
//! aggregated discovery (`apidiscovery.k8s.io/v2`), every group's resources in one document, when the Accept header
//! asks for it as kubectl and client-go do.

use std::collections::BTreeMap;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::ApiError;
use super::printing::clauses;
use super::resources::{Registry, ResourceType, Special, version_priority};

/// The media type of aggregated discovery, as kube-apiserver names it in its responses.
pub const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The Kubernetes version the built-in kinds follow.
pub const KUBERNETES_MINOR: &str = "37";

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBERNETES_MINOR,
        "emulationMajor": "1",
        "emulationMinor": KUBERNETES_MINOR,
        "gitVersion": format!("v1.{KUBERNETES_MINOR}.0-mcm.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": env!("MCM_GIT_COMMIT"),
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "none (the embedded API server of cluster-api-provider-mcm, written in Rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// Served versions of each named group, preferred first.
fn group_versions(registry: &Registry) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in registry.iter().filter(|t| !t.gr.group.is_empty()) {
        let versions = groups.entry(t.gr.group.clone()).or_default();
        for v in &t.versions {
            if !versions.contains(&v.name) {
                versions.push(v.name.clone());
            }
        }
    }
    for versions in groups.values_mut() {
        versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
    }
    groups
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({
        "name": group,
        "versions": entries,
        "preferredVersion": entries.first().cloned().unwrap_or_else(|| json!({})),
    })
}

/// `/apis`.
pub fn groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = group_versions(registry).iter().map(|(g, v)| group_doc(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/`: every path the server serves, as kube-apiserver lists them (clients such as CAPI core's cluster cache
/// probe it to see that a cluster is reachable).
pub fn root_paths(registry: &Registry) -> Value {
    let mut paths: Vec<String> = [
        "/api",
        "/api/v1",
        "/apis",
        "/healthz",
        "/livez",
        "/metrics",
        "/openapi/v2",
        "/openapi/v3",
        "/readyz",
        "/version",
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    for (group, versions) in group_versions(registry) {
        paths.push(format!("/apis/{group}"));
        paths.extend(versions.iter().map(|v| format!("/apis/{group}/{v}")));
    }
    paths.sort();
    json!({ "paths": paths })
}

/// `/apis/{group}`.
pub fn group(registry: &Registry, group: &str) -> Option<Value> {
    let groups = group_versions(registry);
    let versions = groups.get(group)?;
    let mut doc = group_doc(group, versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

fn verbs(t: &ResourceType) -> Vec<&'static str> {
    if t.special == Special::Review {
        vec!["create"]
    } else {
        vec!["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    }
}

/// `/api/v1` or `/apis/{group}/{version}`: `None` when nothing is served there.
pub fn resources(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for t in registry.iter().filter(|t| t.gr.group == group) {
        let Some(v) = t.version(version) else { continue };
        let mut entry = json!({
            "name": t.gr.resource,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": verbs(t),
        });
        if !t.short_names.is_empty() {
            entry["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            entry["categories"] = json!(t.categories);
        }
        resources.push(entry);
        if v.status {
            resources.push(json!({
                "name": format!("{}/status", t.gr.resource), "singularName": "", "namespaced": t.namespaced,
                "kind": t.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        if v.scale.is_some() {
            resources.push(json!({
                "name": format!("{}/scale", t.gr.resource), "singularName": "", "namespaced": t.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"],
            }));
        }
        if t.special == Special::Pod {
            resources.push(json!({
                "name": "pods/eviction", "singularName": "", "namespaced": true,
                "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}))
}

/// Whether the Accept header prefers aggregated discovery in a form this server produces (JSON, `v2`) over the
/// plain documents. Clauses it cannot produce (protobuf, `v2beta1`) are skipped, as kube-apiserver skips them.
pub fn wants_aggregated(headers: &HeaderMap) -> bool {
    let accept = headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).collect::<Vec<_>>().join(",");
    for clause in clauses(&accept) {
        let json = matches!(clause.media_type.as_str(), "application/json" | "application/*" | "*/*");
        match clause.param("as") {
            None if json => return false,
            Some(kind)
                if json
                    && kind == "APIGroupDiscoveryList"
                    && clause.param("g") == Some("apidiscovery.k8s.io")
                    && clause.param("v") == Some("v2") =>
            {
                return true;
            }
            _ => {}
        }
    }
    false
}

/// `/api` (the core group) or `/apis` (every named group) as an `APIGroupDiscoveryList`.
pub fn aggregated(registry: &Registry, core: bool) -> Value {
    let groups: Vec<(String, Vec<String>)> = if core {
        vec![(String::new(), vec!["v1".to_string()])]
    } else {
        group_versions(registry).into_iter().collect()
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|version| {
                    json!({"version": version, "resources": discovered_resources(registry, group, version),
                           "freshness": "Current"})
                })
                .collect();
            // The core group has no name; its metadata is empty.
            let metadata = if group.is_empty() { json!({}) } else { json!({"name": group}) };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// The `APIResourceDiscovery` entries of one group-version.
fn discovered_resources(registry: &Registry, group: &str, version: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for t in registry.iter().filter(|t| t.gr.group == group) {
        let Some(v) = t.version(version) else { continue };
        // kube-apiserver leaves a built-in kind's group and version empty (the group-version's own); the CRD
        // handler names them.
        let own_kind = if t.custom {
            json!({"group": group, "version": version, "kind": t.kind})
        } else {
            json!({"group": "", "version": "", "kind": t.kind})
        };
        let mut subresources = Vec::new();
        if v.status {
            subresources
                .push(json!({"subresource": "status", "responseKind": own_kind, "verbs": ["get", "patch", "update"]}));
        }
        if v.scale.is_some() {
            subresources.push(json!({"subresource": "scale",
                "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                "verbs": ["get", "patch", "update"]}));
        }
        if t.special == Special::Pod {
            subresources.push(json!({"subresource": "eviction",
                "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"}, "verbs": ["create"]}));
        }
        let mut entry = json!({
            "resource": t.gr.resource,
            "responseKind": own_kind,
            "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": t.singular,
            "verbs": verbs(t),
        });
        if !t.short_names.is_empty() {
            entry["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            entry["categories"] = json!(t.categories);
        }
        if !subresources.is_empty() {
            entry["subresources"] = json!(subresources);
        }
        out.push(entry);
    }
    out
}

/// A discovery response for `/api` or `/apis`, aggregated or plain; the answer depends on Accept, so it says so.
pub fn response(doc: &Value, aggregated: bool) -> Response {
    let content_type = if aggregated { AGGREGATED_V2 } else { "application/json" };
    match serde_json::to_vec(doc) {
        Ok(bytes) => {
            let headers = [
                (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                (header::VARY, HeaderValue::from_static("Accept")),
            ];
            (StatusCode::OK, headers, bytes).into_response()
        }
        Err(e) => ApiError::internal(format!("could not serialise the response: {e}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_lists_builtins_with_subresources() {
        let r = Registry::builtin();
        let core = resources(&r, "", "v1").unwrap();
        let names: Vec<&str> =
            core["resources"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"pods") && names.contains(&"pods/eviction") && names.contains(&"nodes/status"));
        let groups = groups(&r);
        assert!(groups["groups"].as_array().unwrap().iter().any(|g| g["name"] == "coordination.k8s.io"));
        assert!(resources(&r, "nope", "v1").is_none());
        assert_eq!(group(&r, "apps").unwrap()["preferredVersion"]["version"], "v1");
    }

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn aggregated_discovery_is_negotiated_like_kube_apiserver() {
        // What kubectl 1.3x sends.
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
                       application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert!(wants_aggregated(&accept(kubectl)));
        assert!(!wants_aggregated(&accept("application/json")));
        assert!(!wants_aggregated(&HeaderMap::new()));
        assert!(!wants_aggregated(&accept(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
        )));
        // A protobuf clause first is skipped (not produced), the JSON one behind it wins.
        let proto_first = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
                           application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        assert!(wants_aggregated(&accept(proto_first)));
        // Quality decides before order.
        assert!(!wants_aggregated(&accept(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0.5,application/json"
        )));
    }

    #[test]
    fn aggregated_discovery_lists_resources_with_subresources() {
        let r = Registry::builtin();
        let core = aggregated(&r, true);
        assert_eq!(core["kind"], "APIGroupDiscoveryList");
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        assert_eq!(core["items"][0]["metadata"], json!({}));
        let v1 = &core["items"][0]["versions"][0];
        assert_eq!(v1["version"], "v1");
        let pods = v1["resources"].as_array().unwrap().iter().find(|e| e["resource"] == "pods").unwrap();
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["singularResource"], "pod");
        assert_eq!(pods["responseKind"], json!({"group": "", "version": "", "kind": "Pod"}));
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        let subresources: Vec<&str> =
            pods["subresources"].as_array().unwrap().iter().map(|s| s["subresource"].as_str().unwrap()).collect();
        assert_eq!(subresources, ["status", "eviction"]);

        let apis = aggregated(&r, false);
        let apps = apis["items"].as_array().unwrap().iter().find(|g| g["metadata"]["name"] == "apps").unwrap();
        let deployments =
            apps["versions"][0]["resources"].as_array().unwrap().iter().find(|e| e["resource"] == "deployments");
        let scale = &deployments.unwrap()["subresources"][1];
        assert_eq!(scale["responseKind"], json!({"group": "autoscaling", "version": "v1", "kind": "Scale"}));
        assert!(apis["items"].as_array().unwrap().iter().all(|g| g["metadata"]["name"] != ""));
    }
}
