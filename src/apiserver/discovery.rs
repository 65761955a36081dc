//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/{group}` and the resource lists of each
//! group-version, built from the registry (so a new CRD shows up at once).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::resources::{Registry, ResourceType, Special, version_priority};

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
}
