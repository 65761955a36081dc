//! MachineSets: hub (MCM) <-> CAPI v1beta2, and the condition helpers MachineDeployments share.
//!
//! | hub (MCM) | CAPI |
//! |---|---|
//! | metadata | metadata (plus the conversion annotation) |
//! | `spec.replicas` | `spec.replicas` |
//! | `spec.selector` | `spec.selector` |
//! | `spec.template` | `spec.template` (see `template`) |
//! | `spec.machineClass`, `minReadySeconds`, `autoPreserveFailedMachineMax` | annotation [`MCM_DATA`] |
//! | annotation [`CAPI_DATA`] | `clusterName`, `deletion.order`, fields we do not model |
//! | status counts, observed generation | status counts, observed generation (`upToDateReplicas` = `replicas`: a set's machines are its template's) |
//! | `status.machineSetCondition` `ReplicaFailure`, `Frozen` | metav1 conditions of the same types |

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde::{Deserialize, Serialize};

use super::data::{CAPI_DATA, MCM_DATA, is_false, is_zero, put, take};
use super::template::{template_from_capi, template_to_capi};
use crate::api::capi::{self, Extra, MachineSetDeletionSpec};
use crate::api::mcm::{self, ClassSpec, ConditionStatus, MachineSetCondition, MachineSetConditionType};

/// The MCM-only fields of a MachineSet, kept on the CAPI side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct McmSetData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    machine_class: Option<ClassSpec>,
    #[serde(default, skip_serializing_if = "is_false")]
    selector_unset: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    template_unset: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    min_ready_seconds: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    auto_preserve_failed_machine_max: i32,
}

/// The CAPI-only fields of a MachineSet, kept on the hub side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CapiSetData {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    cluster_name: String,
    #[serde(default, skip_serializing_if = "is_false")]
    replicas_unset: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deletion: Option<MachineSetDeletionSpec>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    extra: Extra,
}

/// CAPI's `spec.deletion.order` of the CAPI MachineSet a hub set was converted from (empty when unset), or `None`
/// for a set that is MCM's own.
pub fn capi_deletion_order(hub: &mcm::MachineSet) -> Option<String> {
    let mut annotations = hub.metadata.annotations.clone();
    annotations.as_ref()?.get(CAPI_DATA)?;
    let data: CapiSetData = take(&mut annotations, CAPI_DATA);
    Some(data.deletion.and_then(|d| d.order).unwrap_or_default())
}

/// The CAPI MachineSet for a hub one.
pub fn machine_set_to_capi(hub: &mcm::MachineSet) -> capi::MachineSet {
    let mut metadata = hub.metadata.clone();
    let data: CapiSetData = take(&mut metadata.annotations, CAPI_DATA);
    let s = &hub.spec;
    put(
        &mut metadata.annotations,
        MCM_DATA,
        &McmSetData {
            machine_class: s.machine_class.clone(),
            selector_unset: s.selector.is_none(),
            template_unset: s.template.is_none(),
            min_ready_seconds: s.min_ready_seconds,
            auto_preserve_failed_machine_max: s.auto_preserve_failed_machine_max,
        },
    );
    capi::MachineSet {
        metadata,
        spec: capi::MachineSetSpec {
            cluster_name: data.cluster_name,
            replicas: (!data.replicas_unset || s.replicas != 0).then_some(s.replicas),
            selector: s.selector.clone().unwrap_or_default(),
            template: template_to_capi(&s.template.clone().unwrap_or_default()),
            deletion: data.deletion,
            extra: data.extra,
        },
        status: hub.status.as_ref().map(set_status_to_capi),
    }
}

/// The hub MachineSet for a CAPI one.
pub fn machine_set_from_capi(capi: &capi::MachineSet) -> mcm::MachineSet {
    let mut metadata = capi.metadata.clone();
    let data: McmSetData = take(&mut metadata.annotations, MCM_DATA);
    let s = &capi.spec;
    put(
        &mut metadata.annotations,
        CAPI_DATA,
        &CapiSetData {
            cluster_name: s.cluster_name.clone(),
            replicas_unset: s.replicas.is_none(),
            deletion: s.deletion.clone(),
            extra: s.extra.clone(),
        },
    );
    let template = template_from_capi(&s.template);
    mcm::MachineSet {
        metadata,
        spec: mcm::MachineSetSpec {
            replicas: s.replicas.unwrap_or(0),
            selector: (!data.selector_unset || s.selector != Default::default()).then(|| s.selector.clone()),
            machine_class: data.machine_class,
            template: (!data.template_unset || template != Default::default()).then_some(template),
            min_ready_seconds: data.min_ready_seconds,
            auto_preserve_failed_machine_max: data.auto_preserve_failed_machine_max,
        },
        status: capi.status.as_ref().map(set_status_from_capi),
    }
}

/// A metav1 condition from MCM's fields: CAPI requires a reason (the type stands in when there is none), a
/// message and a transition time (the epoch stands in when there is none).
pub(crate) fn condition_to_capi(
    type_: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
    time: Option<&Time>,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.filter(|r| !r.is_empty()).unwrap_or(type_).to_string(),
        message: message.unwrap_or_default().to_string(),
        last_transition_time: time.cloned().unwrap_or(Time(Timestamp::UNIX_EPOCH)),
        observed_generation: None,
    }
}

/// MCM's fields of a metav1 condition: status, reason, message (empty ones absent), transition time.
pub(crate) type HubConditionFields = (ConditionStatus, Option<String>, Option<String>, Option<Time>);

/// The [`HubConditionFields`] of a metav1 condition.
pub(crate) fn condition_from_capi(c: &Condition) -> Option<HubConditionFields> {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    Some((
        ConditionStatus::from(c.status.as_str()),
        non_empty(&c.reason),
        non_empty(&c.message),
        Some(c.last_transition_time.clone()),
    ))
}

/// The CAPI status for a hub status. Lost on the way (the hub recomputes them): `fullyLabeledReplicas`,
/// `lastOperation`, `failedMachines` and the preservation counts; and conditions of types that are not MCM's, which
/// [`set_status_from_capi`] would not bring back.
pub fn set_status_to_capi(s: &mcm::MachineSetStatus) -> capi::MachineSetStatus {
    let conditions: Vec<Condition> = s
        .machine_set_condition
        .iter()
        .flatten()
        .filter(|c| !matches!(c.type_, MachineSetConditionType::Other(_)))
        .map(|c| {
            condition_to_capi(
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_deref(),
                c.message.as_deref(),
                c.last_transition_time.as_ref(),
            )
        })
        .collect();
    capi::MachineSetStatus {
        conditions: (!conditions.is_empty()).then_some(conditions),
        selector: None,
        replicas: Some(s.replicas),
        ready_replicas: Some(s.ready_replicas),
        available_replicas: Some(s.available_replicas),
        up_to_date_replicas: Some(s.replicas),
        observed_generation: s.observed_generation,
        extra: Default::default(),
    }
}

/// The hub status for a CAPI status: counts, observed generation, and the conditions of MCM's types.
pub fn set_status_from_capi(s: &capi::MachineSetStatus) -> mcm::MachineSetStatus {
    let conditions: Vec<MachineSetCondition> = s
        .conditions
        .iter()
        .flatten()
        .filter_map(|c| {
            let type_ = MachineSetConditionType::from(c.type_.as_str());
            if matches!(type_, MachineSetConditionType::Other(_)) {
                return None;
            }
            let (status, reason, message, time) = condition_from_capi(c)?;
            Some(MachineSetCondition { type_, status, last_transition_time: time, reason, message })
        })
        .collect();
    mcm::MachineSetStatus {
        replicas: s.replicas.unwrap_or(0),
        fully_labeled_replicas: s.replicas.unwrap_or(0),
        ready_replicas: s.ready_replicas.unwrap_or(0),
        available_replicas: s.available_replicas.unwrap_or(0),
        observed_generation: s.observed_generation,
        machine_set_condition: (!conditions.is_empty()).then_some(conditions),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `convert_roundtrip` fuzz target: a condition of a type that is not MCM's (here a misspelt
    /// `ReplicaFailure`) crossed to CAPI but not back, so a second conversion differed from the first.
    #[test]
    fn a_condition_of_another_type_does_not_cross() {
        let hub: mcm::MachineSetStatus = serde_json::from_value(serde_json::json!({
            "replicas": 3,
            "machineSetCondition": [
                {"type": "ReplcaiFailure", "status": "True", "lastTransitionTime": "2026-11-30T09:05:00Z"},
                {"type": "Frozen", "status": "False", "lastTransitionTime": "2026-11-30T09:05:00Z"},
            ],
        }))
        .unwrap();
        let once = set_status_to_capi(&hub);
        let types: Vec<&str> = once.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Frozen"]);
        assert_eq!(set_status_to_capi(&set_status_from_capi(&once)), once);
    }
}
