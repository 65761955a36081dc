//! One AdmissionReview in, one out: the path picks the webhook ([`HOOKS`]), the object is decoded into its API type
//! and handed to [`crate::lifecycle::admission`]; a denial is a 422 `Invalid` status with one cause per field, as
//! controller-runtime answers (`MCMMachineTemplate.infrastructure.cluster.x-k8s.io "t" is invalid: ...`).

use base64::Engine;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::api::infra::{MCMCluster, MCMMachine, MCMMachineTemplate};
use crate::api::mcm::MachineClass;
use crate::lifecycle::admission::{self, FieldError, ProviderSpecCheck, Verdict};

/// What a webhook does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// Defaulting (a MutatingWebhookConfiguration's entry).
    Mutate,
    /// Validation (a ValidatingWebhookConfiguration's entry).
    Validate,
}

/// One served webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hook {
    /// Defaulting or validation.
    pub kind: HookKind,
    /// The API group of the resource.
    pub group: &'static str,
    /// Its version.
    pub version: &'static str,
    /// The Kind.
    pub kind_name: &'static str,
    /// The plural resource name (the rule's `resources`).
    pub resource: &'static str,
    /// The configuration's `failurePolicy`: `Fail` for our kinds; `Ignore` for MachineClass, whose writes must not
    /// depend on our manager being up where another MCM uses the kind.
    pub failure_policy: &'static str,
}

impl Hook {
    /// controller-runtime's path: `/validate-infrastructure-cluster-x-k8s-io-v1alpha1-mcmmachine`.
    pub fn path(&self) -> String {
        let verb = match self.kind {
            HookKind::Mutate => "mutate",
            HookKind::Validate => "validate",
        };
        format!("/{verb}-{}-{}-{}", self.group.replace('.', "-"), self.version, self.kind_name.to_lowercase())
    }

    /// The webhook's name in its configuration, as CAPI providers name theirs:
    /// `validation.mcmmachine.infrastructure.cluster.x-k8s.io`, `default.mcmmachine...`.
    pub fn name(&self) -> String {
        let verb = match self.kind {
            HookKind::Mutate => "default",
            HookKind::Validate => "validation",
        };
        format!("{verb}.{}.{}", self.kind_name.to_lowercase(), self.group)
    }
}

const INFRA: &str = crate::api::infra::GROUP;
const MCM: &str = "machine.sapcloud.io";

/// Every webhook `mcm run` and `mcm dev` serve; `config/webhook/manifests.yaml` registers the same list.
pub const HOOKS: &[Hook] = &[
    Hook {
        kind: HookKind::Mutate,
        group: INFRA,
        version: "v1alpha1",
        kind_name: "MCMMachine",
        resource: "mcmmachines",
        failure_policy: "Fail",
    },
    Hook {
        kind: HookKind::Mutate,
        group: INFRA,
        version: "v1alpha1",
        kind_name: "MCMMachineTemplate",
        resource: "mcmmachinetemplates",
        failure_policy: "Fail",
    },
    Hook {
        kind: HookKind::Validate,
        group: INFRA,
        version: "v1alpha1",
        kind_name: "MCMMachine",
        resource: "mcmmachines",
        failure_policy: "Fail",
    },
    Hook {
        kind: HookKind::Validate,
        group: INFRA,
        version: "v1alpha1",
        kind_name: "MCMMachineTemplate",
        resource: "mcmmachinetemplates",
        failure_policy: "Fail",
    },
    Hook {
        kind: HookKind::Validate,
        group: INFRA,
        version: "v1alpha1",
        kind_name: "MCMCluster",
        resource: "mcmclusters",
        failure_policy: "Fail",
    },
    Hook {
        kind: HookKind::Validate,
        group: MCM,
        version: "v1alpha1",
        kind_name: "MachineClass",
        resource: "machineclasses",
        failure_policy: "Ignore",
    },
];

/// A request the webhook cannot judge (a 400 in the response, as controller-runtime answers a bad request).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct BadRequest(String);

fn decode<T: DeserializeOwned>(value: Option<&Value>, what: &str) -> Result<T, BadRequest> {
    let value = value.filter(|v| !v.is_null()).ok_or_else(|| BadRequest(format!("the review carries no {what}")))?;
    serde_json::from_value(value.clone()).map_err(|e| BadRequest(format!("could not decode the {what}: {e}")))
}

/// The answer to an `admission.k8s.io/v1` AdmissionReview posted to `path`.
/// `classes`: whether MachineClasses are judged ([`admission::validates_classes`]).
pub fn answer(path: &str, review: &Value, check: ProviderSpecCheck<'_>, classes: bool) -> Value {
    let request = review.get("request").cloned().unwrap_or(Value::Null);
    let uid = request.get("uid").cloned().unwrap_or(json!(""));
    let api_version = review.get("apiVersion").and_then(Value::as_str).unwrap_or("admission.k8s.io/v1");
    let response = match HOOKS.iter().find(|h| h.path() == path) {
        None => json!({"allowed": false, "status": {"code": 404, "message": format!("no webhook at {path}")}}),
        Some(hook) => match respond(hook, &request, check, classes) {
            Ok(response) => response,
            Err(BadRequest(why)) => json!({"allowed": false, "status": {"code": 400, "message": why}}),
        },
    };
    let mut response = response;
    response["uid"] = uid;
    json!({"apiVersion": api_version, "kind": "AdmissionReview", "response": response})
}

fn respond(hook: &Hook, request: &Value, check: ProviderSpecCheck<'_>, classes: bool) -> Result<Value, BadRequest> {
    let operation = request.get("operation").and_then(Value::as_str).unwrap_or_default();
    let object = request.get("object");
    let old = request.get("oldObject");
    let update = operation == "UPDATE";
    if !matches!(operation, "CREATE" | "UPDATE") {
        return Ok(json!({"allowed": true}));
    }
    match (hook.kind, hook.kind_name) {
        (HookKind::Mutate, "MCMMachine") => defaulted::<MCMMachine>(object, admission::default_machine),
        (HookKind::Mutate, "MCMMachineTemplate") => {
            defaulted::<MCMMachineTemplate>(object, admission::default_template)
        }
        (HookKind::Validate, "MCMMachine") => {
            let new: MCMMachine = decode(object, "object")?;
            let verdict = if update {
                admission::validate_machine_update(&decode(old, "oldObject")?, &new)
            } else {
                admission::validate_machine_create(&new, check)
            };
            Ok(verdict_response(hook, new.metadata.name.as_deref(), verdict))
        }
        (HookKind::Validate, "MCMMachineTemplate") => {
            let new: MCMMachineTemplate = decode(object, "object")?;
            let verdict = if update {
                admission::validate_template_update(&decode(old, "oldObject")?, &new)
            } else {
                admission::validate_template_create(&new, check)
            };
            Ok(verdict_response(hook, new.metadata.name.as_deref(), verdict))
        }
        (HookKind::Validate, "MCMCluster") => {
            let new: MCMCluster = decode(object, "object")?;
            let verdict = if update {
                admission::validate_cluster_update(&decode(old, "oldObject")?, &new)
            } else {
                admission::validate_cluster_create(&new)
            };
            Ok(verdict_response(hook, new.metadata.name.as_deref(), verdict))
        }
        (HookKind::Validate, "MachineClass") if !classes => Ok(json!({
            "allowed": true,
            "warnings": ["not validated: the MachineClass CRD is not the one this provider installs (another MCM owns it)"],
        })),
        (HookKind::Validate, "MachineClass") => {
            let new: MachineClass = decode(object, "object")?;
            let old: Option<MachineClass> = if update { Some(decode(old, "oldObject")?) } else { None };
            let verdict = admission::validate_machine_class(old.as_ref(), &new, check);
            Ok(verdict_response(hook, new.metadata.name.as_deref(), verdict))
        }
        _ => Ok(json!({"allowed": true})),
    }
}

/// The JSON patch from the object to its defaulted form. Both sides are the typed object re-encoded, so the patch
/// holds the defaults only, never an encoding difference.
fn defaulted<T: DeserializeOwned + serde::Serialize>(
    object: Option<&Value>,
    default: fn(&mut T),
) -> Result<Value, BadRequest> {
    let mut typed: T = decode(object, "object")?;
    let before = serde_json::to_value(&typed).map_err(|e| BadRequest(e.to_string()))?;
    default(&mut typed);
    let after = serde_json::to_value(&typed).map_err(|e| BadRequest(e.to_string()))?;
    let patch = json_patch::diff(&before, &after);
    if patch.0.is_empty() {
        return Ok(json!({"allowed": true}));
    }
    let bytes = serde_json::to_vec(&patch).map_err(|e| BadRequest(e.to_string()))?;
    Ok(json!({
        "allowed": true,
        "patchType": "JSONPatch",
        "patch": base64::engine::general_purpose::STANDARD.encode(bytes),
    }))
}

fn cause(error: &FieldError) -> Value {
    json!({"reason": error.kind.reason(), "message": error.message(), "field": error.field})
}

/// Allowed (with warnings), or denied with apimachinery's `NewInvalid` status.
fn verdict_response(hook: &Hook, name: Option<&str>, verdict: Verdict) -> Value {
    let mut response = if verdict.allowed() {
        json!({"allowed": true})
    } else {
        let name = name.unwrap_or_default();
        let shown: Vec<String> = verdict.errors.iter().map(ToString::to_string).collect();
        let listed = if shown.len() == 1 { shown.concat() } else { format!("[{}]", shown.join(", ")) };
        json!({
            "allowed": false,
            "status": {
                "metadata": {},
                "status": "Failure",
                "message": format!("{}.{} {name:?} is invalid: {listed}", hook.kind_name, hook.group),
                "reason": "Invalid",
                "details": {
                    "name": name,
                    "group": hook.group,
                    "kind": hook.kind_name,
                    "causes": verdict.errors.iter().map(cause).collect::<Vec<_>>(),
                },
                "code": 422,
            },
        })
    };
    if !verdict.warnings.is_empty() {
        response["warnings"] = json!(verdict.warnings);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_drivers(_: &str, _: &Value) -> Option<Result<(), String>> {
        None
    }

    fn review(operation: &str, object: Value, old: Option<Value>) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "request": {"uid": "u-1", "operation": operation, "object": object, "oldObject": old}})
    }

    #[test]
    fn paths_and_names_follow_controller_runtime() {
        let paths: Vec<String> = HOOKS.iter().map(Hook::path).collect();
        assert!(paths.contains(&"/validate-infrastructure-cluster-x-k8s-io-v1alpha1-mcmmachinetemplate".to_string()));
        assert!(paths.contains(&"/mutate-infrastructure-cluster-x-k8s-io-v1alpha1-mcmmachine".to_string()));
        assert!(paths.contains(&"/validate-machine-sapcloud-io-v1alpha1-machineclass".to_string()));
        assert_eq!(HOOKS[2].name(), "validation.mcmmachine.infrastructure.cluster.x-k8s.io");
        assert_eq!(HOOKS[0].name(), "default.mcmmachine.infrastructure.cluster.x-k8s.io");
    }

    #[test]
    fn a_denial_is_a_422_invalid_with_causes() {
        let template = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachineTemplate",
            "metadata": {"name": "t"}, "spec": {"template": {"spec": {"providerID": "x://1", "class": {"kind": "MachineClass", "name": "c"}}}}});
        let out = answer(
            "/validate-infrastructure-cluster-x-k8s-io-v1alpha1-mcmmachinetemplate",
            &review("CREATE", template, None),
            &no_drivers,
            true,
        );
        assert_eq!(out["kind"], "AdmissionReview");
        let response = &out["response"];
        assert_eq!((response["uid"].clone(), response["allowed"].clone()), (json!("u-1"), json!(false)));
        let status = &response["status"];
        assert_eq!((status["code"].clone(), status["reason"].clone()), (json!(422), json!("Invalid")));
        let message = status["message"].as_str().unwrap();
        assert!(
            message.starts_with(
                "MCMMachineTemplate.infrastructure.cluster.x-k8s.io \"t\" is invalid: spec.template.spec.providerID: Forbidden: cannot be set in a template"
            ),
            "{message}"
        );
        assert_eq!(status["details"]["causes"][0]["field"], "spec.template.spec.providerID");
        assert_eq!(status["details"]["causes"][0]["reason"], "FieldValueForbidden");
    }

    #[test]
    fn defaulting_answers_a_json_patch_of_the_defaults_only() {
        let machine = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachine",
            "metadata": {"name": "m"}, "spec": {"class": {"name": "c"}, "creationTimeout": "20m"}});
        let out = answer(
            "/mutate-infrastructure-cluster-x-k8s-io-v1alpha1-mcmmachine",
            &review("CREATE", machine.clone(), None),
            &no_drivers,
            true,
        );
        let response = &out["response"];
        assert_eq!((response["allowed"].clone(), response["patchType"].clone()), (json!(true), json!("JSONPatch")));
        let bytes = base64::engine::general_purpose::STANDARD.decode(response["patch"].as_str().unwrap()).unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        let mut patched = machine;
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(
            patched["spec"]["class"],
            json!({"apiGroup": "machine.sapcloud.io", "kind": "MachineClass", "name": "c"})
        );
        assert_eq!(patched["spec"]["creationTimeout"], "20m", "the rest is untouched");
        assert_eq!(patch.0.len(), 2, "{patch:?}");

        let complete = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachine", "metadata": {"name": "m"}, "spec": {"class": {"apiGroup": "machine.sapcloud.io", "kind": "MachineClass", "name": "c"}}});
        let out = answer(
            "/mutate-infrastructure-cluster-x-k8s-io-v1alpha1-mcmmachine",
            &review("CREATE", complete, None),
            &no_drivers,
            true,
        );
        assert_eq!(out["response"], json!({"allowed": true, "uid": "u-1"}), "nothing to default: no patch");
    }

    #[test]
    fn warnings_updates_and_bad_requests() {
        let class = |spec: Value| json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass", "metadata": {"name": "c"}, "provider": "OutOfTree", "providerSpec": spec});
        let out = answer(
            "/validate-machine-sapcloud-io-v1alpha1-machineclass",
            &review("CREATE", class(json!({})), None),
            &no_drivers,
            true,
        );
        assert_eq!(out["response"]["allowed"], true);
        assert_eq!(out["response"]["warnings"].as_array().unwrap().len(), 1);
        let template = |name: &str| json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachineTemplate", "metadata": {"name": "t"}, "spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": name}}}}});
        let out = answer(
            "/validate-infrastructure-cluster-x-k8s-io-v1alpha1-mcmmachinetemplate",
            &review("UPDATE", template("b"), Some(template("a"))),
            &no_drivers,
            true,
        );
        assert_eq!(out["response"]["status"]["details"]["causes"][0]["field"], "spec.template.spec");
        let out = answer(
            "/validate-infrastructure-cluster-x-k8s-io-v1alpha1-mcmcluster",
            &review("CREATE", json!("x"), None),
            &no_drivers,
            true,
        );
        assert_eq!(
            (out["response"]["allowed"].clone(), out["response"]["status"]["code"].clone()),
            (json!(false), json!(400))
        );
        let out = answer("/nope", &review("CREATE", json!({}), None), &no_drivers, true);
        assert_eq!(out["response"]["status"]["code"], 404);
        let out = answer(
            "/validate-infrastructure-cluster-x-k8s-io-v1alpha1-mcmcluster",
            &review("DELETE", Value::Null, None),
            &no_drivers,
            true,
        );
        assert_eq!(out["response"]["allowed"], true);
    }

    #[test]
    fn a_class_is_admitted_unjudged_where_another_mcm_owns_the_crd() {
        // A Gardener class our strict parser would refuse (an unknown field).
        let class = json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass", "metadata": {"name": "c"},
            "provider": "InMemory", "providerSpec": {"newGardenerField": 1}});
        let path = "/validate-machine-sapcloud-io-v1alpha1-machineclass";
        let ours = answer(path, &review("CREATE", class.clone(), None), &crate::providers::check_provider_spec, true);
        assert_eq!(ours["response"]["allowed"], false, "{ours}");
        let theirs = answer(path, &review("CREATE", class, None), &crate::providers::check_provider_spec, false);
        assert_eq!(theirs["response"]["allowed"], true, "{theirs}");
        assert!(theirs["response"]["warnings"][0].as_str().unwrap().starts_with("not validated"));
    }
}
