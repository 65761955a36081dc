//! Which requests a webhook's rules name: operations, API groups, versions, resources (with `*`, `*/*`,
//! `resource/subresource`) and scope, the way kube-apiserver's rule matcher reads them.

use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;

/// An admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Create (POST, or a server-side apply that creates).
    Create,
    /// Update (PUT, PATCH, apply).
    Update,
    /// Delete (DELETE, and each object of a deletecollection).
    Delete,
}

impl Operation {
    /// The name used in rules and in `AdmissionReview.request.operation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// What a rule is matched against.
#[derive(Clone, Copy, Debug)]
pub struct RuleInput<'a> {
    /// The operation.
    pub operation: Operation,
    /// API group ("" for core).
    pub group: &'a str,
    /// Version.
    pub version: &'a str,
    /// Plural resource.
    pub resource: &'a str,
    /// Subresource ("" for the main resource).
    pub subresource: &'a str,
    /// The request's namespace: "" for cluster-scoped objects (a Namespace's own name for requests on it).
    pub namespace: &'a str,
}

impl RuleInput<'_> {
    /// Whether the request is about Namespace objects, which are cluster-scoped whatever `namespace` says.
    fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.version == "v1" && self.resource == "namespaces"
    }
}

fn listed(list: Option<&Vec<String>>, value: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|v| v == "*" || v == value))
}

fn resource_listed(resources: Option<&Vec<String>>, resource: &str, subresource: &str) -> bool {
    resources.is_some_and(|l| {
        l.iter().any(|r| {
            let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
            (res == "*" || res == resource) && (sub == "*" || sub == subresource)
        })
    })
}

fn scope_matches(scope: Option<&str>, input: &RuleInput<'_>) -> bool {
    match scope {
        None | Some("*") => true,
        Some("Namespaced") => !input.is_namespace() && !input.namespace.is_empty(),
        Some("Cluster") => input.is_namespace() || input.namespace.is_empty(),
        Some(_) => false,
    }
}

/// Whether one rule names the request.
pub fn rule_matches(rule: &RuleWithOperations, input: &RuleInput<'_>) -> bool {
    listed(rule.operations.as_ref(), input.operation.as_str())
        && listed(rule.api_groups.as_ref(), input.group)
        && listed(rule.api_versions.as_ref(), input.version)
        && resource_listed(rule.resources.as_ref(), input.resource, input.subresource)
        && scope_matches(rule.scope.as_deref(), input)
}

/// Whether any of the rules names the request.
pub fn any_rule_matches(rules: &[RuleWithOperations], input: &RuleInput<'_>) -> bool {
    rules.iter().any(|r| rule_matches(r, input))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        ops: &[&str],
        groups: &[&str],
        versions: &[&str],
        resources: &[&str],
        scope: Option<&str>,
    ) -> RuleWithOperations {
        let owned = |l: &[&str]| Some(l.iter().map(|s| s.to_string()).collect());
        RuleWithOperations {
            operations: owned(ops),
            api_groups: owned(groups),
            api_versions: owned(versions),
            resources: owned(resources),
            scope: scope.map(str::to_string),
        }
    }

    fn input<'a>(op: Operation, gvr: (&'a str, &'a str, &'a str), sub: &'a str, ns: &'a str) -> RuleInput<'a> {
        RuleInput { operation: op, group: gvr.0, version: gvr.1, resource: gvr.2, subresource: sub, namespace: ns }
    }

    #[test]
    fn rules_match_like_kube_apiserver() {
        use Operation::*;
        let md = ("cluster.x-k8s.io", "v1beta2", "machinedeployments");
        let ns = ("", "v1", "namespaces");
        let node = ("", "v1", "nodes");
        let cases: Vec<(&str, RuleWithOperations, RuleInput<'_>, bool)> = vec![
            (
                "exact",
                rule(&["CREATE", "UPDATE"], &["cluster.x-k8s.io"], &["v1beta2"], &["machinedeployments"], None),
                input(Create, md, "", "default"),
                true,
            ),
            (
                "operation not listed",
                rule(&["CREATE"], &["cluster.x-k8s.io"], &["v1beta2"], &["machinedeployments"], None),
                input(Delete, md, "", "default"),
                false,
            ),
            ("operation *", rule(&["*"], &["*"], &["*"], &["*"], None), input(Delete, md, "", "default"), true),
            (
                "other group",
                rule(&["*"], &["apps"], &["*"], &["machinedeployments"], None),
                input(Create, md, "", "default"),
                false,
            ),
            (
                "other version",
                rule(&["*"], &["*"], &["v1beta1"], &["machinedeployments"], None),
                input(Create, md, "", "default"),
                false,
            ),
            (
                "* skips subresources",
                rule(&["*"], &["*"], &["*"], &["*"], None),
                input(Update, md, "status", "d"),
                false,
            ),
            (
                "*/* takes subresources",
                rule(&["*"], &["*"], &["*"], &["*/*"], None),
                input(Update, md, "scale", "d"),
                true,
            ),
            (
                "*/* takes main resources",
                rule(&["*"], &["*"], &["*"], &["*/*"], None),
                input(Update, md, "", "d"),
                true,
            ),
            (
                "resource/subresource",
                rule(&["*"], &["*"], &["*"], &["machinedeployments/scale"], None),
                input(Update, md, "scale", "d"),
                true,
            ),
            (
                "resource/subresource not the main resource",
                rule(&["*"], &["*"], &["*"], &["machinedeployments/scale"], None),
                input(Update, md, "", "d"),
                false,
            ),
            (
                "other subresource",
                rule(&["*"], &["*"], &["*"], &["machinedeployments/status"], None),
                input(Update, md, "scale", "d"),
                false,
            ),
            ("*/scale", rule(&["*"], &["*"], &["*"], &["*/scale"], None), input(Update, md, "scale", "d"), true),
            (
                "resource/*",
                rule(&["*"], &["*"], &["*"], &["machinedeployments/*"], None),
                input(Update, md, "status", "d"),
                true,
            ),
            ("empty lists match nothing", rule(&[], &[], &[], &[], None), input(Create, md, "", "d"), false),
            (
                "scope Namespaced",
                rule(&["*"], &["*"], &["*"], &["*"], Some("Namespaced")),
                input(Create, md, "", "d"),
                true,
            ),
            (
                "scope Namespaced, cluster object",
                rule(&["*"], &["*"], &["*"], &["*"], Some("Namespaced")),
                input(Create, node, "", ""),
                false,
            ),
            (
                "scope Namespaced, a namespace is cluster-scoped",
                rule(&["*"], &["*"], &["*"], &["*"], Some("Namespaced")),
                input(Update, ns, "", "team-a"),
                false,
            ),
            ("scope Cluster", rule(&["*"], &["*"], &["*"], &["*"], Some("Cluster")), input(Create, node, "", ""), true),
            (
                "scope Cluster, namespace",
                rule(&["*"], &["*"], &["*"], &["*"], Some("Cluster")),
                input(Update, ns, "", "team-a"),
                true,
            ),
            (
                "scope Cluster, namespaced object",
                rule(&["*"], &["*"], &["*"], &["*"], Some("Cluster")),
                input(Create, md, "", "d"),
                false,
            ),
            ("scope *", rule(&["*"], &["*"], &["*"], &["*"], Some("*")), input(Create, md, "", "d"), true),
            ("unknown scope", rule(&["*"], &["*"], &["*"], &["*"], Some("Galaxy")), input(Create, md, "", "d"), false),
        ];
        for (name, rule, input, expected) in cases {
            assert_eq!(rule_matches(&rule, &input), expected, "{name}");
        }
    }

    #[test]
    fn any_of_several_rules() {
        let rules = vec![
            rule(&["CREATE"], &[""], &["v1"], &["configmaps"], None),
            rule(&["DELETE"], &[""], &["v1"], &["secrets"], None),
        ];
        let secret = input(Operation::Delete, ("", "v1", "secrets"), "", "default");
        let secret_create = input(Operation::Create, ("", "v1", "secrets"), "", "default");
        assert!(any_rule_matches(&rules, &secret));
        assert!(!any_rule_matches(&rules, &secret_create));
        assert!(!any_rule_matches(&[], &secret));
    }
}
