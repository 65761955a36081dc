//! Request paths and query parameters, parsed the way kube-apiserver routes them, and the body read within its
//! size limit.

use axum::body::Body;

use super::error::ApiError;

/// What a path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `/`: the list of served paths.
    Root,
    /// `/version`.
    Version,
    /// `/healthz`, `/livez`, `/readyz` (and their sub-paths).
    Health,
    /// `/metrics` of the server itself.
    Metrics,
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/{group}`.
    Group(String),
    /// `/api/v1` or `/apis/{group}/{version}`.
    Resources {
        /// Group ("" for core).
        group: String,
        /// Version.
        version: String,
    },
    /// `/openapi/v2`, `/openapi/v3` and below.
    OpenApi(String),
    /// An object or collection.
    Resource(ResourcePath),
}

/// A resource path: `/apis/{group}/{version}[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// Group ("" for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
    /// Namespace from the path.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// Subresource (`status`, `scale`, `eviction` ...).
    pub subresource: Option<String>,
}

/// Parses a request path.
pub fn parse_path(path: &str) -> Result<Target, ApiError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let not_found = || ApiError::no_route(path);
    match segments.as_slice() {
        [] => Ok(Target::Root),
        ["version"] => Ok(Target::Version),
        ["healthz" | "livez" | "readyz", ..] => Ok(Target::Health),
        ["metrics"] => Ok(Target::Metrics),
        ["openapi", rest @ ..] => Ok(Target::OpenApi(rest.join("/"))),
        ["api"] => Ok(Target::CoreVersions),
        ["api", version] => Ok(Target::Resources { group: String::new(), version: version.to_string() }),
        ["api", version, rest @ ..] => resource_path("", version, rest).ok_or_else(not_found),
        ["apis"] => Ok(Target::Groups),
        ["apis", group] => Ok(Target::Group(group.to_string())),
        ["apis", group, version] => Ok(Target::Resources { group: group.to_string(), version: version.to_string() }),
        ["apis", group, version, rest @ ..] => resource_path(group, version, rest).ok_or_else(not_found),
        _ => Err(not_found()),
    }
}

fn resource_path(group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    let owned = |s: &&str| s.to_string();
    let (namespace, rest) = match rest {
        // `namespaces/{name}/status|finalize` address the Namespace itself.
        ["namespaces", _, "status" | "finalize"] | ["namespaces"] | ["namespaces", _] => (None, rest),
        ["namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let (resource, name, subresource) = match rest {
        [resource] => (resource, None, None),
        [resource, name] => (resource, Some(owned(name)), None),
        [resource, name, sub] => (resource, Some(owned(name)), Some(owned(sub))),
        _ => return None,
    };
    Some(Target::Resource(ResourcePath {
        group: group.to_string(),
        version: version.to_string(),
        resource: resource.to_string(),
        namespace,
        name,
        subresource,
    }))
}

/// The query parameters the server understands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// `labelSelector`.
    pub label_selector: String,
    /// `fieldSelector`.
    pub field_selector: String,
    /// `limit` (0 = no limit).
    pub limit: usize,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<String>,
    /// `watch=true`.
    pub watch: bool,
    /// `allowWatchBookmarks=true`.
    pub allow_bookmarks: bool,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<u64>,
    /// `sendInitialEvents=true`.
    pub send_initial_events: bool,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// `force=true` (server-side apply).
    pub force: bool,
    /// `propagationPolicy`.
    pub propagation_policy: Option<String>,
    /// `fieldValidation` (Strict, Warn, Ignore).
    pub field_validation: Option<String>,
    /// `includeObject` (None, Metadata, Object): what rows of a server-side printed table carry.
    pub include_object: Option<String>,
}

fn truthy(value: &str) -> bool {
    matches!(value, "true" | "1" | "True")
}

/// Parses a query string.
pub fn parse_query(query: Option<&str>) -> Result<Query, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))?;
    let mut q = Query::default();
    for (key, value) in pairs {
        match key.as_str() {
            "labelSelector" => q.label_selector = value,
            "fieldSelector" => q.field_selector = value,
            "limit" => {
                q.limit = value.parse().map_err(|_| ApiError::bad_request(format!("invalid limit {value:?}")))?;
            }
            "continue" => q.continue_token = Some(value).filter(|v| !v.is_empty()),
            "resourceVersion" => q.resource_version = Some(value).filter(|v| !v.is_empty()),
            "resourceVersionMatch" => q.resource_version_match = Some(value).filter(|v| !v.is_empty()),
            "watch" => q.watch = truthy(&value),
            "allowWatchBookmarks" => q.allow_bookmarks = truthy(&value),
            "timeoutSeconds" => {
                q.timeout_seconds = Some(
                    value.parse().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {value:?}")))?,
                );
            }
            "sendInitialEvents" => q.send_initial_events = truthy(&value),
            "dryRun" => q.dry_run = value == "All",
            "fieldManager" => q.field_manager = Some(value),
            "force" => q.force = truthy(&value),
            "propagationPolicy" => q.propagation_policy = Some(value),
            "fieldValidation" => q.field_validation = Some(value),
            "includeObject" => q.include_object = Some(value),
            _ => {}
        }
    }
    Ok(q)
}

/// Reads a request body up to `limit` bytes (413 beyond).
pub async fn read_body(body: Body, limit: usize) -> Result<bytes::Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|_| ApiError::too_large(limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(
        group: &str,
        version: &str,
        resource: &str,
        ns: Option<&str>,
        name: Option<&str>,
        sub: Option<&str>,
    ) -> Target {
        Target::Resource(ResourcePath {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
            namespace: ns.map(Into::into),
            name: name.map(Into::into),
            subresource: sub.map(Into::into),
        })
    }

    #[test]
    fn paths_route_like_kube_apiserver() {
        let cases = [
            ("/api/v1/pods", res("", "v1", "pods", None, None, None)),
            ("/api/v1/namespaces/default/pods", res("", "v1", "pods", Some("default"), None, None)),
            (
                "/api/v1/namespaces/default/pods/p/eviction",
                res("", "v1", "pods", Some("default"), Some("p"), Some("eviction")),
            ),
            ("/api/v1/namespaces", res("", "v1", "namespaces", None, None, None)),
            ("/api/v1/namespaces/kube-system", res("", "v1", "namespaces", None, Some("kube-system"), None)),
            ("/api/v1/namespaces/ns1/status", res("", "v1", "namespaces", None, Some("ns1"), Some("status"))),
            ("/api/v1/nodes/n1/status", res("", "v1", "nodes", None, Some("n1"), Some("status"))),
            (
                "/apis/machine.sapcloud.io/v1alpha1/namespaces/x/machinesets/s/scale",
                res("machine.sapcloud.io", "v1alpha1", "machinesets", Some("x"), Some("s"), Some("scale")),
            ),
            (
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                res("apiextensions.k8s.io", "v1", "customresourcedefinitions", None, None, None),
            ),
            ("/apis", Target::Groups),
            ("/api", Target::CoreVersions),
            ("/apis/apps", Target::Group("apps".into())),
            ("/apis/apps/v1", Target::Resources { group: "apps".into(), version: "v1".into() }),
            ("/version", Target::Version),
            ("/", Target::Root),
            ("/readyz", Target::Health),
        ];
        for (path, expected) in cases {
            assert_eq!(parse_path(path).unwrap(), expected, "{path}");
        }
        assert_eq!(parse_path("/apis/a/v1/x/y/z/w").unwrap_err().code, 404);
        assert_eq!(parse_path("/nope").unwrap_err().code, 404);
    }

    #[test]
    fn queries_parse() {
        let q = parse_query(Some(
            "labelSelector=a%3Db&watch=1&timeoutSeconds=290&allowWatchBookmarks=true&limit=500&dryRun=All",
        ))
        .unwrap();
        assert_eq!(q.label_selector, "a=b");
        assert!(q.watch && q.allow_bookmarks && q.dry_run);
        assert_eq!(q.timeout_seconds, Some(290));
        assert_eq!(q.limit, 500);
        assert_eq!(parse_query(Some("limit=x")).unwrap_err().code, 400);
    }
}
