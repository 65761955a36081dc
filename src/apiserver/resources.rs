//! The resource types the server serves: a fixed table of built-in kinds plus one entry per established CRD.
//!
//! A type is identified by its group and plural ([`GroupResource`]); objects are stored once, in the storage
//! version, and served in every served version (kube-apiserver's `None` conversion strategy).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::schema::StructuralSchema;

/// A resource type's identity, independent of version: `machines.machine.sapcloud.io`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    /// API group, "" for the core group.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

impl GroupResource {
    /// A group and resource.
    pub fn new(group: &str, resource: &str) -> Self {
        GroupResource { group: group.to_string(), resource: resource.to_string() }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() { f.write_str(&self.resource) } else { write!(f, "{}.{}", self.resource, self.group) }
    }
}

/// Paths of a custom resource's scale subresource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// e.g. `.spec.replicas`.
    pub spec_replicas: String,
    /// e.g. `.status.replicas`.
    pub status_replicas: String,
    /// e.g. `.status.selector` (a string field holding the selector), if any.
    pub label_selector: Option<String>,
}

/// What is served for one version of a type.
#[derive(Clone, Debug)]
pub struct VersionInfo {
    /// Version name, e.g. `v1beta2`.
    pub name: String,
    /// The structural schema (custom resources only).
    pub schema: Option<Arc<StructuralSchema>>,
    /// The CRD's `openAPIV3Schema` as written (custom resources only), for the OpenAPI documents.
    pub openapi_schema: Option<Arc<Value>>,
    /// `additionalPrinterColumns` as JSON (custom resources only).
    pub printer_columns: Vec<Value>,
    /// Extra fields selectable with field selectors (`selectableFields[].jsonPath`, without the leading dot).
    pub selectable_fields: Vec<String>,
    /// Whether `/status` is served.
    pub status: bool,
    /// The scale subresource, if served.
    pub scale: Option<ScalePaths>,
}

/// Behaviour beyond plain storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    /// Plain storage.
    None,
    /// Namespaces: lifecycle and content deletion.
    Namespace,
    /// Pods: `eviction` subresource, immediate deletion (no kubelet), `Pending` phase on create.
    Pod,
    /// CustomResourceDefinitions: creating one serves its resources.
    Crd,
    /// `events.k8s.io/v1` Events: stored as core `v1` Events and converted.
    EventsV1,
    /// Review kinds (`SelfSubjectAccessReview`, `TokenReview` ...): create-only, answered, never stored.
    Review,
}

/// One served resource type.
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// Group and plural.
    pub gr: GroupResource,
    /// Kind, e.g. `Machine`.
    pub kind: String,
    /// List kind, e.g. `MachineList`.
    pub list_kind: String,
    /// Singular name, e.g. `machine`.
    pub singular: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`mc`).
    pub short_names: Vec<String>,
    /// Categories (`all`, `cluster-api`).
    pub categories: Vec<String>,
    /// Served versions, preferred first.
    pub versions: Vec<VersionInfo>,
    /// The version objects are stored in.
    pub storage_version: String,
    /// Whether this is a custom resource (schema enforced, no strategic merge patch).
    pub custom: bool,
    /// Behaviour beyond plain storage.
    pub special: Special,
    /// Field selectors accepted besides `metadata.name` and `metadata.namespace`.
    pub field_labels: Vec<String>,
}

impl ResourceType {
    /// The served version named `version`.
    pub fn version(&self, version: &str) -> Option<&VersionInfo> {
        self.versions.iter().find(|v| v.name == version)
    }

    /// `group/version` or `version` for the core group.
    pub fn api_version(&self, version: &str) -> String {
        if self.gr.group.is_empty() { version.to_string() } else { format!("{}/{version}", self.gr.group) }
    }

    /// The preferred (first served) version.
    pub fn preferred_version(&self) -> &str {
        self.versions.first().map(|v| v.name.as_str()).unwrap_or(&self.storage_version)
    }

    /// The type under which objects are actually stored (differs only for aliases such as events.k8s.io).
    pub fn storage_gr(&self) -> GroupResource {
        match self.special {
            Special::EventsV1 => GroupResource::new("", "events"),
            _ => self.gr.clone(),
        }
    }

    /// Whether `field` may be used in a field selector.
    pub fn supports_field(&self, version: &str, field: &str) -> bool {
        matches!(field, "metadata.name" | "metadata.namespace")
            || self.field_labels.iter().any(|f| f == field)
            || self.version(version).is_some_and(|v| v.selectable_fields.iter().any(|f| f == field))
    }
}

/// `(group, version, plural, kind, namespaced, short names, status subresource, categories)` of a built-in kind.
type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    bool,
    &'static [&'static str],
);

const ALL: &[&str] = &["all"];
const NONE: &[&str] = &[];

/// Built-in kinds of Kubernetes served as plain storage (plus the special ones), so that real manifests apply.
const BUILTINS: &[Builtin] = &[
    ("", "v1", "namespaces", "Namespace", false, &["ns"], true, NONE),
    ("", "v1", "nodes", "Node", false, &["no"], true, NONE),
    ("", "v1", "pods", "Pod", true, &["po"], true, ALL),
    ("", "v1", "secrets", "Secret", true, NONE, false, NONE),
    ("", "v1", "configmaps", "ConfigMap", true, &["cm"], false, NONE),
    ("", "v1", "events", "Event", true, &["ev"], false, NONE),
    ("", "v1", "serviceaccounts", "ServiceAccount", true, &["sa"], false, NONE),
    ("", "v1", "services", "Service", true, &["svc"], true, ALL),
    ("", "v1", "endpoints", "Endpoints", true, &["ep"], false, NONE),
    ("", "v1", "persistentvolumes", "PersistentVolume", false, &["pv"], true, NONE),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", true, &["pvc"], true, NONE),
    ("", "v1", "replicationcontrollers", "ReplicationController", true, &["rc"], true, ALL),
    ("", "v1", "resourcequotas", "ResourceQuota", true, &["quota"], true, NONE),
    ("", "v1", "limitranges", "LimitRange", true, &["limits"], false, NONE),
    ("", "v1", "podtemplates", "PodTemplate", true, NONE, false, NONE),
    ("apps", "v1", "deployments", "Deployment", true, &["deploy"], true, ALL),
    ("apps", "v1", "replicasets", "ReplicaSet", true, &["rs"], true, ALL),
    ("apps", "v1", "statefulsets", "StatefulSet", true, &["sts"], true, ALL),
    ("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"], true, ALL),
    ("apps", "v1", "controllerrevisions", "ControllerRevision", true, NONE, false, NONE),
    ("batch", "v1", "jobs", "Job", true, NONE, true, ALL),
    ("batch", "v1", "cronjobs", "CronJob", true, &["cj"], true, ALL),
    ("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true, &["hpa"], true, ALL),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true, &["pdb"], true, NONE),
    ("coordination.k8s.io", "v1", "leases", "Lease", true, NONE, false, NONE),
    ("events.k8s.io", "v1", "events", "Event", true, &["ev"], false, NONE),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", true, NONE, false, NONE),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", true, NONE, false, NONE),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", false, NONE, false, NONE),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", false, NONE, false, NONE),
    ("networking.k8s.io", "v1", "ingresses", "Ingress", true, &["ing"], true, NONE),
    ("networking.k8s.io", "v1", "ingressclasses", "IngressClass", false, NONE, false, NONE),
    ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", true, &["netpol"], false, NONE),
    ("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", true, NONE, false, NONE),
    ("storage.k8s.io", "v1", "storageclasses", "StorageClass", false, &["sc"], false, NONE),
    ("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", false, NONE, true, NONE),
    ("storage.k8s.io", "v1", "csidrivers", "CSIDriver", false, NONE, false, NONE),
    ("storage.k8s.io", "v1", "csinodes", "CSINode", false, NONE, false, NONE),
    ("storage.k8s.io", "v1", "csistoragecapacities", "CSIStorageCapacity", true, NONE, false, NONE),
    ("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false, &["pc"], false, NONE),
    ("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", false, NONE, false, NONE),
    (
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        "CertificateSigningRequest",
        false,
        &["csr"],
        true,
        NONE,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        false,
        NONE,
        false,
        NONE,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        false,
        NONE,
        false,
        NONE,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        false,
        NONE,
        true,
        NONE,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        false,
        NONE,
        false,
        NONE,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
        NONE,
    ),
    ("apiregistration.k8s.io", "v1", "apiservices", "APIService", false, NONE, true, NONE),
    ("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", false, NONE, false, NONE),
    ("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", false, NONE, false, NONE),
    ("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", false, NONE, false, NONE),
    ("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", false, NONE, false, NONE),
    ("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", false, NONE, false, NONE),
];

/// Field selectors kube-apiserver accepts per built-in type, besides metadata.name/namespace.
fn builtin_field_labels(gr: &GroupResource) -> Vec<String> {
    let fields: &[&str] = match (gr.group.as_str(), gr.resource.as_str()) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "replicationcontrollers") => &["status.replicas"],
        ("apps", "replicasets") => &["status.replicas"],
        ("batch", "jobs") => &["status.successful"],
        ("certificates.k8s.io", "certificatesigningrequests") => &["spec.signerName"],
        _ => &[],
    };
    fields.iter().map(|f| f.to_string()).collect()
}

fn singular_of(kind: &str) -> String {
    kind.to_lowercase()
}

fn builtin_type(b: &Builtin) -> ResourceType {
    let (group, version, resource, kind, namespaced, short_names, status, categories) = *b;
    let gr = GroupResource::new(group, resource);
    let special = match (group, resource) {
        ("", "namespaces") => Special::Namespace,
        ("", "pods") => Special::Pod,
        ("apiextensions.k8s.io", "customresourcedefinitions") => Special::Crd,
        ("events.k8s.io", "events") => Special::EventsV1,
        ("authorization.k8s.io", _) | ("authentication.k8s.io", _) => Special::Review,
        _ => Special::None,
    };
    let scale = match (group, resource) {
        ("apps", "deployments" | "replicasets" | "statefulsets") | ("", "replicationcontrollers") => Some(ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: None,
        }),
        _ => None,
    };
    ResourceType {
        field_labels: builtin_field_labels(&gr),
        gr,
        kind: kind.to_string(),
        list_kind: format!("{kind}List"),
        singular: singular_of(kind),
        namespaced,
        short_names: short_names.iter().map(|s| s.to_string()).collect(),
        categories: categories.iter().map(|s| s.to_string()).collect(),
        versions: vec![VersionInfo {
            name: version.to_string(),
            schema: None,
            openapi_schema: None,
            printer_columns: Vec::new(),
            selectable_fields: Vec::new(),
            status,
            scale,
        }],
        storage_version: version.to_string(),
        custom: false,
        special,
    }
}

/// Why a CRD cannot be served.
#[derive(Debug, Clone, PartialEq)]
pub struct CrdProblem {
    /// The field path, e.g. `spec.versions`.
    pub field: String,
    /// What is wrong.
    pub detail: String,
}

fn problem(field: &str, detail: impl Into<String>) -> CrdProblem {
    CrdProblem { field: field.to_string(), detail: detail.into() }
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// Builds the resource type a CRD (as JSON) declares, validating what kube-apiserver validates structurally.
pub fn from_crd(crd: &Value) -> Result<ResourceType, Vec<CrdProblem>> {
    let spec = &crd["spec"];
    let mut problems = Vec::new();
    let group = spec["group"].as_str().unwrap_or_default();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default();
    let kind = names["kind"].as_str().unwrap_or_default();
    if group.is_empty() {
        problems.push(problem("spec.group", "Required value"));
    }
    if plural.is_empty() {
        problems.push(problem("spec.names.plural", "Required value"));
    }
    if kind.is_empty() {
        problems.push(problem("spec.names.kind", "Required value"));
    }
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        problems.push(problem(
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            problems.push(problem(
                "spec.scope",
                format!("Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""),
            ));
            true
        }
    };
    let mut versions = Vec::new();
    let mut storage = Vec::new();
    for (i, v) in spec["versions"].as_array().map(Vec::as_slice).unwrap_or_default().iter().enumerate() {
        let vname = v["name"].as_str().unwrap_or_default().to_string();
        if v["storage"].as_bool() == Some(true) {
            storage.push(vname.clone());
        }
        if v["served"].as_bool() != Some(true) {
            continue;
        }
        let schema = match v["schema"].get("openAPIV3Schema") {
            Some(s) => match StructuralSchema::compile(s) {
                Ok(compiled) => Some(Arc::new(compiled)),
                Err(e) => {
                    problems.push(problem(&format!("spec.versions[{i}].schema.openAPIV3Schema"), e.to_string()));
                    None
                }
            },
            None => None,
        };
        let subresources = &v["subresources"];
        let scale = subresources.get("scale").map(|s| ScalePaths {
            spec_replicas: s["specReplicasPath"].as_str().unwrap_or(".spec.replicas").to_string(),
            status_replicas: s["statusReplicasPath"].as_str().unwrap_or(".status.replicas").to_string(),
            label_selector: s["labelSelectorPath"].as_str().map(str::to_string),
        });
        versions.push(VersionInfo {
            name: vname,
            schema,
            openapi_schema: v["schema"].get("openAPIV3Schema").cloned().map(Arc::new),
            printer_columns: v["additionalPrinterColumns"].as_array().cloned().unwrap_or_default(),
            selectable_fields: v["selectableFields"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f["jsonPath"].as_str().map(|p| p.trim_start_matches('.').to_string()))
                        .collect()
                })
                .unwrap_or_default(),
            status: subresources.get("status").is_some(),
            scale,
        });
    }
    if storage.len() != 1 {
        problems
            .push(problem("spec.versions", "Invalid value: must have exactly one version marked as storage version"));
    }
    if versions.is_empty() {
        problems.push(problem("spec.versions", "Invalid value: must have at least one served version"));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    // kube-apiserver prefers versions by Kubernetes version priority (v1 > v1beta2 > v1alpha1).
    versions.sort_by_key(|v| std::cmp::Reverse(version_priority(&v.name)));
    Ok(ResourceType {
        gr: GroupResource::new(group, plural),
        kind: kind.to_string(),
        list_kind: names["listKind"].as_str().map(str::to_string).unwrap_or_else(|| format!("{kind}List")),
        singular: names["singular"].as_str().map(str::to_string).unwrap_or_else(|| singular_of(kind)),
        namespaced,
        short_names: strings(&names["shortNames"]),
        categories: strings(&names["categories"]),
        versions,
        storage_version: storage.remove(0),
        custom: true,
        special: Special::None,
        field_labels: Vec::new(),
    })
}

/// Kubernetes version ordering: GA > beta > alpha, then by major and minor number; others sort last.
pub fn version_priority(version: &str) -> (u8, u32, u32) {
    let Some(rest) = version.strip_prefix('v') else { return (0, 0, 0) };
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    let Ok(major) = rest[..digits].parse::<u32>() else { return (0, 0, 0) };
    let tail = &rest[digits..];
    let (stage, minor) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse().unwrap_or(0))
    } else {
        return (0, 0, 0);
    };
    (stage, major, minor)
}

/// Source of [`Registry::generation`] values, unique in the process (so two registries never share one).
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, Ordering::Relaxed)
}

/// Every type the server serves.
#[derive(Clone, Debug)]
pub struct Registry {
    types: BTreeMap<GroupResource, Arc<ResourceType>>,
    generation: u64,
}

impl Default for Registry {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Registry {
    /// The built-in kinds only.
    pub fn builtin() -> Self {
        let types = BUILTINS.iter().map(builtin_type).map(|t| (t.gr.clone(), Arc::new(t))).collect();
        Registry { types, generation: next_generation() }
    }

    /// Changes whenever the set of served types changes; derived documents (OpenAPI) are cached by it.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The type serving `resource` in `group`, if `version` is served.
    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceType>> {
        self.types.get(&GroupResource::new(group, resource)).filter(|t| t.version(version).is_some()).cloned()
    }

    /// The type with this identity.
    pub fn get(&self, gr: &GroupResource) -> Option<Arc<ResourceType>> {
        self.types.get(gr).cloned()
    }

    /// Serves (or re-serves) a custom resource type.
    pub fn insert(&mut self, t: ResourceType) -> Arc<ResourceType> {
        let t = Arc::new(t);
        self.types.insert(t.gr.clone(), t.clone());
        self.generation = next_generation();
        t
    }

    /// Stops serving a custom resource type.
    pub fn remove(&mut self, gr: &GroupResource) {
        if self.types.get(gr).is_some_and(|t| t.custom) {
            self.types.remove(gr);
            self.generation = next_generation();
        }
    }

    /// All types, in group/resource order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.types.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut v = vec!["v1alpha1", "v1", "v1beta2", "v2", "v1beta1", "foo", "v2alpha1"];
        v.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(v, vec!["v2", "v1", "v1beta2", "v1beta1", "v2alpha1", "v1alpha1", "foo"]);
    }

    #[test]
    fn builtins_include_what_controllers_and_kubectl_need() {
        let r = Registry::builtin();
        for (g, v, res) in [
            ("", "v1", "nodes"),
            ("", "v1", "pods"),
            ("coordination.k8s.io", "v1", "leases"),
            ("events.k8s.io", "v1", "events"),
            ("policy", "v1", "poddisruptionbudgets"),
            ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            ("apps", "v1", "deployments"),
        ] {
            assert!(r.lookup(g, v, res).is_some(), "{g}/{v} {res}");
        }
        assert!(r.lookup("", "v2", "pods").is_none());
    }

    #[test]
    fn capi_crd_serves_both_versions_preferring_v1beta2() {
        let text = include_str!("../../crds/cluster.x-k8s.io_machines.yaml");
        let crd: Value = serde_yaml::from_str(text).unwrap();
        let t = from_crd(&crd).unwrap();
        assert_eq!(t.storage_version, "v1beta2");
        assert_eq!(t.preferred_version(), "v1beta2");
        assert!(t.version("v1beta1").is_some());
        assert_eq!(t.short_names, vec!["ma"]);
        assert!(t.version("v1beta2").unwrap().status);
    }

    #[test]
    fn bad_crds_are_rejected_with_field_paths() {
        let crd = serde_json::json!({
            "metadata": {"name": "wrong.example.com"},
            "spec": {"group": "example.com", "names": {"plural": "foos", "kind": "Foo"}, "scope": "Galaxy",
                     "versions": [{"name": "v1", "served": true, "storage": false}]}
        });
        let problems = from_crd(&crd).unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, vec!["metadata.name", "spec.scope", "spec.versions"]);
    }
}
