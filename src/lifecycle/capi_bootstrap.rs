//! A Machine's bootstrap config (`spec.bootstrap.configRef`) as CAPI core's Machine controller reads it: the config
//! is taken (the Machine as its controller owner, the `cluster.x-k8s.io/cluster-name` label), its
//! `status.initialization.dataSecretCreated` (v1beta2 contract; `status.ready` for a v1beta1 provider) is waited
//! for, then its `status.dataSecretName` goes into the Machine's `spec.bootstrap.dataSecretName`, which is what the
//! infrastructure machine waits for. The `BootstrapConfigReady` condition mirrors the config's `Ready` condition,
//! with core's fallback reasons when it has none.
//!
//! Imports `api` and sibling modules only.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Value, json};

use crate::api::capi::{self, Machine};

/// How often a Machine looks at a bootstrap config that is missing or has no data secret yet (core watches the
/// kind; we poll it, since the kind is only known from the reference).
pub const POLL: Duration = Duration::from_secs(2);

/// The bootstrap config a Machine names, if it names one (core's `IsDefined`: a kind and a name).
pub fn config_ref(machine: &Machine) -> Option<&capi::ContractVersionedObjectReference> {
    machine.spec.bootstrap.config_ref.as_ref().filter(|r| !r.name.is_empty() && !r.kind.is_empty())
}

/// What the Machine controller found at `spec.bootstrap.configRef`.
#[derive(Clone, Copy, Debug)]
pub enum Config<'a> {
    /// The Machine names no bootstrap config (`dataSecretName` given directly, or nothing yet).
    NotReferenced,
    /// The named config does not exist.
    Missing,
    /// The config, as JSON.
    Found(&'a Value),
}

/// The `BootstrapConfigReady` condition to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyCondition {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Core's reason.
    pub reason: String,
    /// Core's message.
    pub message: String,
}

/// What to do about the bootstrap config.
#[derive(Clone, Debug, PartialEq)]
pub struct BootstrapPlan {
    /// The merge patch taking the config (controller owner reference and cluster label); `None` when it has them.
    pub take: Option<Value>,
    /// `spec.bootstrap.dataSecretName` to set on the Machine.
    pub data_secret_name: Option<String>,
    /// Whether the Machine has its bootstrap data (`status.initialization.bootstrapDataSecretCreated`).
    pub data_secret_created: bool,
    /// The `BootstrapConfigReady` condition.
    pub condition: ReadyCondition,
    /// Look again after this long (the config is missing or not ready: it is polled, not watched).
    pub requeue_after: Option<Duration>,
    /// A config that says its secret exists but names none: core's error text.
    pub error: Option<String>,
}

fn ready(status: &str, reason: &str, message: String) -> ReadyCondition {
    ReadyCondition { status: status.to_string(), reason: reason.to_string(), message }
}

/// The data secret's state as the config reports it: `status.initialization.dataSecretCreated` (contract v1beta2),
/// else `status.ready` (v1beta1 providers).
fn data_secret_created(config: &Value) -> bool {
    let status = &config["status"];
    status["initialization"]["dataSecretCreated"].as_bool().or_else(|| status["ready"].as_bool()).unwrap_or(false)
}

/// The config's own `Ready` condition mirrored as the Machine's `BootstrapConfigReady`, or core's fallback.
fn mirrored(config: &Value, kind: &str, created: bool) -> ReadyCondition {
    let own = config["status"]["conditions"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["type"].as_str() == Some("Ready")));
    match own {
        Some(c) => {
            let status = c["status"].as_str().unwrap_or("Unknown");
            // Core gives a v1beta1 condition without a reason a plainer one.
            let reason = match c["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(r) => r,
                None if status == "True" => "Ready",
                None => "NoReasonReported",
            };
            ready(status, reason, c["message"].as_str().unwrap_or_default().to_string())
        }
        None if created => ready("True", "Ready", String::new()),
        None => ready("False", "NotReady", format!("{kind} status.initialization.dataSecretCreated is false")),
    }
}

/// The merge patch making the Machine the config's controller and labelling it with the cluster, as core's
/// `ensureExternalOwnershipAndWatch` does (owners set before the Machine existed, its MachineSet's, are dropped).
fn take(meta: &ObjectMeta, owner: &OwnerReference, cluster_name: &str) -> Option<Value> {
    let owners = meta.owner_references.clone().unwrap_or_default();
    let owned = owners.iter().any(|o| o.uid == owner.uid && o.controller == Some(true));
    let labelled = meta.labels.as_ref().and_then(|l| l.get(capi::CLUSTER_NAME_LABEL)).map(String::as_str);
    if owned && labelled == Some(cluster_name) {
        return None;
    }
    let mut patch = json!({"metadata": {"labels": {capi::CLUSTER_NAME_LABEL: cluster_name}}});
    if !owned {
        let mut kept: Vec<OwnerReference> = owners
            .into_iter()
            .filter(|o| {
                o.uid != owner.uid && !(o.kind == "MachineSet" && o.api_version.starts_with("cluster.x-k8s.io/"))
            })
            .map(|mut o| {
                // Only one controller: a MachineDeployment's or another's mark goes.
                o.controller = None;
                o
            })
            .collect();
        kept.push(owner.clone());
        patch["metadata"]["ownerReferences"] = json!(kept);
        patch["metadata"]["resourceVersion"] = json!(meta.resource_version);
    }
    Some(patch)
}

/// Decides what a Machine that is not being deleted does about its bootstrap config.
pub fn plan_bootstrap(machine: &Machine, config: Config<'_>, owner: &OwnerReference) -> BootstrapPlan {
    let given = machine.spec.bootstrap.data_secret_name.as_ref().is_some_and(|s| !s.is_empty());
    let kind = machine.spec.bootstrap.config_ref.as_ref().map_or("", |r| r.kind.as_str());
    let mut plan = BootstrapPlan {
        take: None,
        data_secret_name: None,
        data_secret_created: given,
        condition: if given {
            ready("True", "DataSecretProvided", String::new())
        } else {
            ready("False", "DataSecretNotAvailable", String::new())
        },
        requeue_after: None,
        error: None,
    };
    match config {
        Config::NotReferenced => plan,
        Config::Missing => {
            plan.condition = ready("False", "ObjectDoesNotExist", format!("{kind} does not exist"));
            plan.requeue_after = (!given).then_some(POLL);
            plan
        }
        Config::Found(value) => {
            let meta: ObjectMeta = serde_json::from_value(value["metadata"].clone()).unwrap_or_default();
            plan.take = take(&meta, owner, &machine.spec.cluster_name);
            let created = data_secret_created(value);
            plan.condition = mirrored(value, kind, created || given);
            if given || meta.deletion_timestamp.is_some() {
                return plan;
            }
            if !created {
                plan.requeue_after = Some(POLL);
                return plan;
            }
            match value["status"]["dataSecretName"].as_str().filter(|s| !s.is_empty()) {
                Some(name) => {
                    plan.data_secret_name = Some(name.to_string());
                    plan.data_secret_created = true;
                }
                None => {
                    plan.error = Some(format!(
                        "got empty status.dataSecretName field from {kind} {}",
                        meta.name.as_deref().unwrap_or_default()
                    ));
                    plan.requeue_after = Some(POLL);
                }
            }
            plan
        }
    }
}

/// The kind a bootstrap config template makes (`KubeadmConfigTemplate` makes `KubeadmConfig`), or `None` when
/// `kind` names no template: a MachineSet's Machines then share the referenced config itself.
pub fn config_kind_of_template(kind: &str) -> Option<&str> {
    kind.strip_suffix("Template").filter(|k| !k.is_empty())
}

/// The bootstrap config core's MachineSet clones from a template for a new Machine (same name as the Machine, in
/// its namespace): the template's `spec.template.spec`, its `spec.template.metadata` labels and annotations plus the
/// cluster label and the cloned-from annotations, and the Machine as controller owner (core hands it from the
/// MachineSet to the Machine; ours is created after the Machine, so it starts there).
pub fn clone_of_template(template: &Value, machine: &Machine, owner: &OwnerReference) -> Option<Value> {
    let template_kind = template["kind"].as_str()?;
    let kind = config_kind_of_template(template_kind)?;
    let api_version = template["apiVersion"].as_str()?;
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let mut labels = template["spec"]["template"]["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels[capi::CLUSTER_NAME_LABEL] = json!(machine.spec.cluster_name);
    let mut annotations = template["spec"]["template"]["metadata"]["annotations"].clone();
    if !annotations.is_object() {
        annotations = json!({});
    }
    annotations[capi::CLONED_FROM_NAME_ANNOTATION] = template["metadata"]["name"].clone();
    annotations[capi::CLONED_FROM_GROUPKIND_ANNOTATION] = json!(format!("{template_kind}.{group}"));
    let spec = match &template["spec"]["template"]["spec"] {
        Value::Null => json!({}),
        spec => spec.clone(),
    };
    Some(json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": machine.metadata.name,
            "namespace": machine.metadata.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": spec,
    }))
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // the case table reads best as rows of tuples
mod tests {
    use super::*;

    fn machine(config_ref: bool, secret: Option<&str>) -> Machine {
        let mut spec = json!({"clusterName": "c", "infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachine", "name": "m"}, "bootstrap": {}});
        if config_ref {
            spec["bootstrap"]["configRef"] =
                json!({"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "m"});
        }
        if let Some(s) = secret {
            spec["bootstrap"]["dataSecretName"] = json!(s);
        }
        serde_json::from_value(json!({"metadata": {"name": "m", "namespace": "ns", "uid": "u-m"}, "spec": spec}))
            .unwrap()
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Machine".into(),
            name: "m".into(),
            uid: "u-m".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    fn config(status: Value, owned: bool) -> Value {
        let mut meta = json!({"name": "m", "namespace": "ns", "resourceVersion": "7",
            "labels": {"cluster.x-k8s.io/cluster-name": "c"}});
        if owned {
            meta["ownerReferences"] = json!([owner()]);
        }
        json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": meta, "status": status})
    }

    #[test]
    fn bootstrap_table() {
        let ready_true = json!({"initialization": {"dataSecretCreated": true}, "dataSecretName": "m-data"});
        let v1beta1 = json!({"ready": true, "dataSecretName": "m-data"});
        let with_condition = json!({"initialization": {"dataSecretCreated": false},
            "conditions": [{"type": "Ready", "status": "False", "reason": "WaitingForControlPlane", "message": "cp"}]});
        let nameless = json!({"initialization": {"dataSecretCreated": true}});
        // (case, configRef, dataSecretName, config, secret to set, created, condition (status, reason, message),
        //  requeues, error)
        let cases: Vec<(&str, bool, Option<&str>, Option<Value>, Option<&str>, bool, (&str, &str, &str), bool, bool)> = vec![
            (
                "no config, no secret",
                false,
                None,
                None,
                None,
                false,
                ("False", "DataSecretNotAvailable", ""),
                false,
                false,
            ),
            (
                "secret given directly",
                false,
                Some("s"),
                None,
                None,
                true,
                ("True", "DataSecretProvided", ""),
                false,
                false,
            ),
            (
                "config missing",
                true,
                None,
                None,
                None,
                false,
                ("False", "ObjectDoesNotExist", "KubeadmConfig does not exist"),
                true,
                false,
            ),
            (
                "config not ready",
                true,
                None,
                Some(config(json!({}), true)),
                None,
                false,
                ("False", "NotReady", "KubeadmConfig status.initialization.dataSecretCreated is false"),
                true,
                false,
            ),
            (
                "config ready: its secret is taken",
                true,
                None,
                Some(config(ready_true.clone(), true)),
                Some("m-data"),
                true,
                ("True", "Ready", ""),
                false,
                false,
            ),
            (
                "v1beta1 config ready",
                true,
                None,
                Some(config(v1beta1, true)),
                Some("m-data"),
                true,
                ("True", "Ready", ""),
                false,
                false,
            ),
            (
                "the config's own Ready is mirrored",
                true,
                None,
                Some(config(with_condition, true)),
                None,
                false,
                ("False", "WaitingForControlPlane", "cp"),
                true,
                false,
            ),
            (
                "ready without a secret name",
                true,
                None,
                Some(config(nameless, true)),
                None,
                false,
                ("True", "Ready", ""),
                true,
                true,
            ),
            (
                "secret already copied",
                true,
                Some("m-data"),
                Some(config(ready_true, true)),
                None,
                true,
                ("True", "Ready", ""),
                false,
                false,
            ),
        ];
        for (case, config_ref, secret, cfg, set, created, (status, reason, message), requeues, error) in cases {
            let m = machine(config_ref, secret);
            let found = match (&cfg, config_ref) {
                (_, false) => Config::NotReferenced,
                (None, true) => Config::Missing,
                (Some(v), true) => Config::Found(v),
            };
            let plan = plan_bootstrap(&m, found, &owner());
            assert_eq!(plan.data_secret_name.as_deref(), set, "{case}");
            assert_eq!(plan.data_secret_created, created, "{case}");
            assert_eq!(plan.condition, ready(status, reason, message.to_string()), "{case}");
            assert_eq!(plan.requeue_after.is_some(), requeues, "{case}");
            assert_eq!(plan.error.is_some(), error, "{case}");
        }
    }

    #[test]
    fn a_template_is_cloned_into_a_config_for_the_machine() {
        assert_eq!(config_kind_of_template("KubeadmConfigTemplate"), Some("KubeadmConfig"));
        assert_eq!(config_kind_of_template("KubeadmConfig"), None);
        assert_eq!(config_kind_of_template("Template"), None);
        let template = json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "workers", "namespace": "ns"},
            "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"users": [{"name": "u"}]}}}});
        let clone = clone_of_template(&template, &machine(true, None), &owner()).unwrap();
        assert_eq!(clone["kind"], "KubeadmConfig");
        assert_eq!(clone["apiVersion"], "bootstrap.cluster.x-k8s.io/v1beta2");
        assert_eq!(clone["metadata"]["name"], "m");
        assert_eq!(clone["metadata"]["namespace"], "ns");
        assert_eq!(clone["metadata"]["labels"], json!({"a": "b", "cluster.x-k8s.io/cluster-name": "c"}));
        assert_eq!(clone["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"], "workers");
        assert_eq!(
            clone["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-groupkind"],
            "KubeadmConfigTemplate.bootstrap.cluster.x-k8s.io"
        );
        assert_eq!(clone["metadata"]["ownerReferences"][0]["uid"], "u-m");
        assert_eq!(clone["spec"], json!({"users": [{"name": "u"}]}));
        let mut config = template.clone();
        config["kind"] = json!("KubeadmConfig");
        assert_eq!(clone_of_template(&config, &machine(true, None), &owner()), None);
    }

    #[test]
    fn the_machine_takes_its_config_from_the_machine_set() {
        let mut cfg = config(json!({}), false);
        cfg["metadata"]["labels"] = json!({});
        cfg["metadata"]["ownerReferences"] = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "name": "s", "uid": "u-s", "controller": true}, {"apiVersion": "v1", "kind": "ConfigMap", "name": "x",
            "uid": "u-x", "controller": true}]);
        let plan = plan_bootstrap(&machine(true, None), Config::Found(&cfg), &owner());
        let take = plan.take.unwrap();
        assert_eq!(take["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"], "c");
        let owners = take["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(owners.len(), 2, "the MachineSet's reference goes: {owners:?}");
        assert_eq!(owners[0]["kind"], "ConfigMap");
        assert!(owners[0].get("controller").is_none_or(Value::is_null), "one controller only: {owners:?}");
        assert_eq!(owners[1]["uid"], "u-m");
        assert_eq!(owners[1]["controller"], true);
        assert_eq!(take["metadata"]["resourceVersion"], "7");

        let owned = config(json!({}), true);
        assert_eq!(plan_bootstrap(&machine(true, None), Config::Found(&owned), &owner()).take, None);
    }
}
