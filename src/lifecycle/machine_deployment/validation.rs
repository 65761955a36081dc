//! MachineDeployment validation. MCM validates in the controller and, on failure, logs and skips the object
//! without a trace on it; we return every reason so the controller can report them (event, log) and stop.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::rollout::parse_int_or_percent;
use crate::api::mcm::{MachineDeployment, MachineDeploymentStrategyType, OrchestrationType, UpdateConfiguration};

/// Why a MachineDeployment is not reconciled. Each message says what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// `spec.replicas` is negative.
    #[error("spec.replicas is {0}; it must be 0 or more")]
    NegativeReplicas(i32),
    /// `spec.strategy.type` is missing: MCM has no default.
    #[error("spec.strategy.type is missing; set it to RollingUpdate, Recreate or InPlaceUpdate")]
    MissingStrategyType,
    /// `spec.strategy.type` is not one we know.
    #[error("spec.strategy.type {0:?} is unknown; use RollingUpdate, Recreate or InPlaceUpdate")]
    UnknownStrategyType(String),
    /// `spec.strategy.inPlaceUpdate` is missing for an in-place update.
    #[error(
        "spec.strategy.inPlaceUpdate is missing; an InPlaceUpdate strategy needs maxSurge, maxUnavailable and orchestrationType"
    )]
    MissingInPlaceUpdate,
    /// `spec.strategy.inPlaceUpdate.orchestrationType` is missing or unknown (MCM has no default).
    #[error("spec.strategy.inPlaceUpdate.orchestrationType is {0:?}; set it to Auto or Manual")]
    InvalidOrchestrationType(String),
    /// `spec.strategy.rollingUpdate` is missing for a rolling update.
    #[error("spec.strategy.rollingUpdate is missing; a RollingUpdate strategy needs maxSurge and maxUnavailable")]
    MissingRollingUpdate,
    /// `maxSurge` or `maxUnavailable` is missing.
    #[error("spec.strategy.{0} is missing; set it to a number or a percentage such as 25%")]
    MissingFencepost(&'static str),
    /// `maxSurge` or `maxUnavailable` is neither a non-negative number nor a percentage.
    #[error("spec.strategy.{field} is {value:?}; use a non-negative number or a percentage such as 25%")]
    InvalidFencepost {
        /// `rollingUpdate.maxSurge`, `inPlaceUpdate.maxUnavailable` ….
        field: &'static str,
        /// The value as written.
        value: String,
    },
    /// The selector is missing or empty: it would select every machine.
    #[error("spec.selector is empty and would select every machine; set matchLabels to labels of the template")]
    EmptySelector,
    /// The selector does not match the template's labels.
    #[error(
        "spec.selector does not match spec.template.metadata.labels; machines created from the template would not be selected"
    )]
    SelectorDoesNotMatchTemplate,
    /// `spec.template.spec.class.kind` or `.name` is empty.
    #[error("spec.template.spec.class.{0} is empty; name the MachineClass the machines use")]
    MissingClass(&'static str),
}

impl ValidationError {
    /// A short stable label for metrics and event reasons.
    pub fn label(&self) -> &'static str {
        match self {
            ValidationError::NegativeReplicas(_) => "negative_replicas",
            ValidationError::MissingStrategyType => "missing_strategy_type",
            ValidationError::UnknownStrategyType(_) => "unknown_strategy_type",
            ValidationError::MissingInPlaceUpdate => "missing_in_place_update",
            ValidationError::InvalidOrchestrationType(_) => "invalid_orchestration_type",
            ValidationError::MissingRollingUpdate => "missing_rolling_update",
            ValidationError::MissingFencepost(_) => "missing_fencepost",
            ValidationError::InvalidFencepost { .. } => "invalid_fencepost",
            ValidationError::EmptySelector => "empty_selector",
            ValidationError::SelectorDoesNotMatchTemplate => "selector_does_not_match_template",
            ValidationError::MissingClass(_) => "missing_class",
        }
    }

    /// The event reason: `SelectingAll` for the empty selector (as MCM), `InvalidSpec` otherwise.
    pub fn event_reason(&self) -> &'static str {
        match self {
            ValidationError::EmptySelector => "SelectingAll",
            _ => "InvalidSpec",
        }
    }
}

/// Validates a MachineDeployment; every problem is reported, not only the first.
pub fn validate(d: &MachineDeployment) -> Result<(), Vec<ValidationError>> {
    let mut errors = Vec::new();
    let spec = &d.spec;
    if spec.replicas < 0 {
        errors.push(ValidationError::NegativeReplicas(spec.replicas));
    }
    let strategy = spec.strategy.as_ref();
    match strategy.and_then(|s| s.type_.as_ref()) {
        None => errors.push(ValidationError::MissingStrategyType),
        Some(MachineDeploymentStrategyType::Recreate) => {}
        Some(MachineDeploymentStrategyType::RollingUpdate) => match strategy.and_then(|s| s.rolling_update.as_ref()) {
            None => errors.push(ValidationError::MissingRollingUpdate),
            Some(config) => validate_fenceposts(config, "rollingUpdate", &mut errors),
        },
        Some(MachineDeploymentStrategyType::InPlaceUpdate) => match strategy.and_then(|s| s.in_place_update.as_ref()) {
            None => errors.push(ValidationError::MissingInPlaceUpdate),
            Some(config) => {
                validate_fenceposts(&config.update, "inPlaceUpdate", &mut errors);
                match &config.orchestration_type {
                    Some(OrchestrationType::Auto | OrchestrationType::Manual) => {}
                    Some(OrchestrationType::Other(t)) => {
                        errors.push(ValidationError::InvalidOrchestrationType(t.clone()))
                    }
                    None => errors.push(ValidationError::InvalidOrchestrationType(String::new())),
                }
            }
        },
        Some(MachineDeploymentStrategyType::Other(t)) if t.is_empty() => {
            errors.push(ValidationError::MissingStrategyType)
        }
        // CAPI's OnDelete, on a deployment converted from CAPI's API (MCM's own API has no such strategy).
        Some(MachineDeploymentStrategyType::Other(t))
            if t == super::rollout::ON_DELETE
                && d.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(crate::convert::CAPI_DATA)) => {}
        Some(MachineDeploymentStrategyType::Other(t)) => errors.push(ValidationError::UnknownStrategyType(t.clone())),
    }
    let template_labels = d.spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    match spec.selector.as_ref() {
        Some(selector) if !selector_is_empty(selector) => {
            if !selector_matches(selector, &template_labels) {
                errors.push(ValidationError::SelectorDoesNotMatchTemplate);
            }
        }
        _ => errors.push(ValidationError::EmptySelector),
    }
    let class = d.spec.template.spec.as_ref().map(|s| &s.class);
    if class.is_none_or(|c| c.kind.is_empty()) {
        errors.push(ValidationError::MissingClass("kind"));
    }
    if class.is_none_or(|c| c.name.is_empty()) {
        errors.push(ValidationError::MissingClass("name"));
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

fn validate_fenceposts(config: &UpdateConfiguration, section: &str, errors: &mut Vec<ValidationError>) {
    let (surge, unavailable) = if section == "inPlaceUpdate" {
        ("inPlaceUpdate.maxSurge", "inPlaceUpdate.maxUnavailable")
    } else {
        ("rollingUpdate.maxSurge", "rollingUpdate.maxUnavailable")
    };
    for (field, value) in [(surge, &config.max_surge), (unavailable, &config.max_unavailable)] {
        match value {
            None => errors.push(ValidationError::MissingFencepost(field)),
            Some(v) => {
                if parse_int_or_percent(v).is_none() {
                    let value = match v {
                        IntOrString::Int(i) => i.to_string(),
                        IntOrString::String(s) => s.clone(),
                    };
                    errors.push(ValidationError::InvalidFencepost { field, value });
                }
            }
        }
    }
}

/// An empty selector (`{}`) selects everything.
fn selector_is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|l| l.is_empty())
        && selector.match_expressions.as_ref().is_none_or(|e| e.is_empty())
}

/// Whether `selector` selects a set of `labels` (matchLabels and matchExpressions).
pub(crate) fn selector_matches(selector: &LabelSelector, labels: &std::collections::BTreeMap<String, String>) -> bool {
    let labels_ok = selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;
    use crate::lifecycle::machine_deployment::test_support::{deployment, in_place, on_delete, rolling};

    #[test]
    fn on_delete_is_capis_only() {
        let mcm = deployment("d", 1, on_delete());
        assert_eq!(validate(&mcm), Err(vec![ValidationError::UnknownStrategyType("OnDelete".into())]));
        let mut capi = mcm.clone();
        capi.metadata.annotations =
            Some(BTreeMap::from([(crate::convert::CAPI_DATA.to_string(), r#"{"clusterName":"c"}"#.to_string())]));
        assert_eq!(validate(&capi), Ok(()));
        capi.spec.strategy = Some(in_place("0", "1", "Auto"));
        assert_eq!(validate(&capi), Ok(()), "carried in the conversion annotation");
    }

    fn selector(pairs: &[(&str, &str)]) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            match_expressions: None,
        })
    }

    #[test]
    fn validation_table() {
        use ValidationError::*;
        let ok = deployment("d", 3, rolling("1", "0"));
        let cases: Vec<(&str, MachineDeployment, Vec<ValidationError>)> = vec![
            ("valid rolling update", ok.clone(), vec![]),
            (
                "valid recreate",
                {
                    let mut d = ok.clone();
                    d.spec.strategy = Some(crate::api::mcm::MachineDeploymentStrategy {
                        type_: Some(MachineDeploymentStrategyType::Recreate),
                        ..Default::default()
                    });
                    d
                },
                vec![],
            ),
            (
                "both fenceposts zero is allowed (maxUnavailable resolves to 1)",
                deployment("d", 3, rolling("0", "0")),
                vec![],
            ),
            ("percentages are fine", deployment("d", 3, rolling("25%", "25%")), vec![]),
            (
                "negative replicas",
                {
                    let mut d = ok.clone();
                    d.spec.replicas = -1;
                    d
                },
                vec![NegativeReplicas(-1)],
            ),
            (
                "no strategy at all",
                {
                    let mut d = ok.clone();
                    d.spec.strategy = None;
                    d
                },
                vec![MissingStrategyType],
            ),
            (
                "empty strategy type",
                {
                    let mut d = ok.clone();
                    d.spec.strategy.as_mut().unwrap().type_ = Some(MachineDeploymentStrategyType::Other(String::new()));
                    d
                },
                vec![MissingStrategyType],
            ),
            (
                "unknown strategy type",
                {
                    let mut d = ok.clone();
                    d.spec.strategy.as_mut().unwrap().type_ = Some("BlueGreen".into());
                    d
                },
                vec![UnknownStrategyType("BlueGreen".into())],
            ),
            (
                "in-place update",
                {
                    let mut d = ok.clone();
                    d.spec.strategy.as_mut().unwrap().type_ = Some(MachineDeploymentStrategyType::InPlaceUpdate);
                    d
                },
                vec![MissingInPlaceUpdate],
            ),
            ("in-place update, Auto", deployment("d", 3, in_place("0", "1", "Auto")), vec![]),
            ("in-place update, Manual", deployment("d", 3, in_place("0", "25%", "Manual")), vec![]),
            (
                "in-place update with an unknown orchestration type",
                deployment("d", 3, in_place("0", "1", "invalid")),
                vec![InvalidOrchestrationType("invalid".into())],
            ),
            (
                "in-place update without orchestration type or fenceposts",
                {
                    let mut d = deployment("d", 3, in_place("0", "1", "Auto"));
                    d.spec.strategy.as_mut().unwrap().in_place_update = Some(Default::default());
                    d
                },
                vec![
                    MissingFencepost("inPlaceUpdate.maxSurge"),
                    MissingFencepost("inPlaceUpdate.maxUnavailable"),
                    InvalidOrchestrationType(String::new()),
                ],
            ),
            (
                "rolling update without parameters",
                {
                    let mut d = ok.clone();
                    d.spec.strategy.as_mut().unwrap().rolling_update = None;
                    d
                },
                vec![MissingRollingUpdate],
            ),
            (
                "nil maxSurge and maxUnavailable",
                {
                    let mut d = ok.clone();
                    d.spec.strategy.as_mut().unwrap().rolling_update = Some(UpdateConfiguration::default());
                    d
                },
                vec![MissingFencepost("rollingUpdate.maxSurge"), MissingFencepost("rollingUpdate.maxUnavailable")],
            ),
            (
                "a number in a string is not a percentage",
                deployment("d", 3, rolling("1", "one")),
                vec![InvalidFencepost { field: "rollingUpdate.maxUnavailable", value: "one".into() }],
            ),
            (
                "negative fencepost",
                deployment("d", 3, rolling("-1", "0")),
                vec![InvalidFencepost { field: "rollingUpdate.maxSurge", value: "-1".into() }],
            ),
            (
                "no selector",
                {
                    let mut d = ok.clone();
                    d.spec.selector = None;
                    d
                },
                vec![EmptySelector],
            ),
            (
                "empty selector",
                {
                    let mut d = ok.clone();
                    d.spec.selector = Some(LabelSelector::default());
                    d
                },
                vec![EmptySelector],
            ),
            (
                "selector not matching the template",
                {
                    let mut d = ok.clone();
                    d.spec.selector = selector(&[("name", "other")]);
                    d
                },
                vec![SelectorDoesNotMatchTemplate],
            ),
            (
                "selector expression not matching the template",
                {
                    let mut d = ok.clone();
                    d.spec.selector = Some(LabelSelector {
                        match_labels: None,
                        match_expressions: Some(vec![LabelSelectorRequirement {
                            key: "zone".into(),
                            operator: "Exists".into(),
                            values: None,
                        }]),
                    });
                    d
                },
                vec![SelectorDoesNotMatchTemplate],
            ),
            (
                "no class",
                {
                    let mut d = ok.clone();
                    d.spec.template.spec.as_mut().unwrap().class = Default::default();
                    d
                },
                vec![MissingClass("kind"), MissingClass("name")],
            ),
        ];
        for (name, d, expected) in cases {
            assert_eq!(validate(&d).err().unwrap_or_default(), expected, "{name}");
        }
    }

    #[test]
    fn selector_expressions_table() {
        let labels: BTreeMap<String, String> =
            [("name", "pool"), ("zone", "a")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let req = |op: &str, values: &[&str]| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "zone".into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
        };
        let cases = [
            ("In matching", req("In", &["a", "b"]), true),
            ("In not matching", req("In", &["b"]), false),
            ("NotIn", req("NotIn", &["b"]), true),
            ("NotIn excluded", req("NotIn", &["a"]), false),
            ("Exists", req("Exists", &[]), true),
            ("DoesNotExist", req("DoesNotExist", &[]), false),
            ("unknown operator", req("Near", &[]), false),
        ];
        for (name, sel, expected) in cases {
            assert_eq!(selector_matches(&sel, &labels), expected, "{name}");
        }
    }

    #[test]
    fn messages_say_what_to_do() {
        assert_eq!(
            ValidationError::MissingFencepost("rollingUpdate.maxSurge").to_string(),
            "spec.strategy.rollingUpdate.maxSurge is missing; set it to a number or a percentage such as 25%"
        );
        assert_eq!(ValidationError::EmptySelector.event_reason(), "SelectingAll");
        assert_eq!(ValidationError::MissingInPlaceUpdate.event_reason(), "InvalidSpec");
    }
}
