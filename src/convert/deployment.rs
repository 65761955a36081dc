//! MachineDeployments: hub (MCM) <-> CAPI v1beta2.
//!
//! | hub (MCM) | CAPI |
//! |---|---|
//! | metadata | metadata (plus the conversion annotation) |
//! | `spec.replicas` | `spec.replicas` (absent on the CAPI side: 0 on the hub, remembered) |
//! | `spec.selector` | `spec.selector` |
//! | `spec.template` | `spec.template` (see `template`) |
//! | `spec.strategy` `RollingUpdate {maxSurge, maxUnavailable}` | `spec.rollout.strategy` `RollingUpdate {maxSurge, maxUnavailable}` |
//! | `spec.strategy` `Recreate`, `InPlaceUpdate` (with its fenceposts and orchestration type) | annotation [`MCM_DATA`]; no `rollout.strategy`, and CAPI's defaults do not add one |
//! | `spec.paused` | `spec.paused` |
//! | `minReadySeconds`, `revisionHistoryLimit`, `rollbackTo`, `progressDeadlineSeconds`, `autoPreserveFailedMachineMax` | annotation [`MCM_DATA`] |
//! | `spec.strategy` of a type MCM does not know | `spec.rollout.strategy` of that type (`OnDelete`: run for CAPI deployments, refused on MCM's API) |
//! | annotation [`CAPI_DATA`] | `clusterName`, `rollout.after`, `deletion.order`, fields we do not model |
//! | status counts, observed generation | status counts (`updatedReplicas` is `upToDateReplicas`), observed generation |
//! | status conditions `Available`, `Progressing`, `ReplicaFailure`, `Frozen` | metav1 conditions of the same types |

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};

use super::data::{CAPI_DATA, MCM_DATA, is_false, is_zero, put, take};
use super::machine_set::{condition_from_capi, condition_to_capi};
use super::template::{template_from_capi, template_to_capi};
use crate::api::capi::{
    self, Extra, MachineDeploymentRollout, MachineDeploymentRolloutStrategy, MachineSetDeletionSpec, RollingUpdate,
};
use crate::api::mcm::{
    self, MachineDeploymentCondition, MachineDeploymentConditionType, MachineDeploymentStrategy,
    MachineDeploymentStrategyType, RollbackConfig, UpdateConfiguration,
};

/// The MCM-only fields of a MachineDeployment, kept on the CAPI side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct McmDeploymentData {
    /// The strategy, when CAPI cannot express it (Recreate, InPlaceUpdate, no type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    strategy: Option<MachineDeploymentStrategy>,
    #[serde(default, skip_serializing_if = "is_false")]
    selector_unset: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    min_ready_seconds: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revision_history_limit: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rollback_to: Option<RollbackConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    progress_deadline_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "is_zero")]
    auto_preserve_failed_machine_max: i32,
}

/// The CAPI-only fields of a MachineDeployment, kept on the hub side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CapiDeploymentData {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    cluster_name: String,
    #[serde(default, skip_serializing_if = "is_false")]
    replicas_unset: bool,
    /// The rollout settings; the strategy only when the hub cannot hold it (not RollingUpdate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rollout: Option<MachineDeploymentRollout>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deletion: Option<MachineSetDeletionSpec>,
    /// `paused: false` written explicitly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    paused: Option<bool>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    extra: Extra,
}

/// CAPI's `spec.rollout.after` of the CAPI MachineDeployment a hub deployment was converted from, parsed; `None`
/// when unset, unparsable, or the deployment is MCM's own.
pub fn capi_rollout_after(hub: &mcm::MachineDeployment) -> Option<jiff::Timestamp> {
    let mut annotations = hub.metadata.annotations.clone();
    annotations.as_ref()?.get(CAPI_DATA)?;
    let data: CapiDeploymentData = take(&mut annotations, CAPI_DATA);
    data.rollout?.after?.parse().ok()
}

fn rolling_to_capi(u: &UpdateConfiguration) -> RollingUpdate {
    RollingUpdate { max_unavailable: u.max_unavailable.clone(), max_surge: u.max_surge.clone() }
}

fn rolling_from_capi(u: &RollingUpdate) -> UpdateConfiguration {
    UpdateConfiguration { max_unavailable: u.max_unavailable.clone(), max_surge: u.max_surge.clone() }
}

/// Whether a strategy type is one CAPI writes in `rollout.strategy` (RollingUpdate, or a type MCM does not know,
/// such as CAPI's OnDelete); MCM's Recreate and InPlaceUpdate are not.
fn capi_type(t: &MachineDeploymentStrategyType) -> bool {
    matches!(t, MachineDeploymentStrategyType::RollingUpdate | MachineDeploymentStrategyType::Other(_))
}

/// The strategy CAPI can express: RollingUpdate (or an unknown type) without in-place parameters.
fn capi_strategy(s: &MachineDeploymentStrategy) -> Option<MachineDeploymentRolloutStrategy> {
    match (&s.type_, &s.in_place_update) {
        (Some(t), None) if capi_type(t) => Some(MachineDeploymentRolloutStrategy {
            type_: t.as_str().to_string(),
            rolling_update: s.rolling_update.as_ref().map(rolling_to_capi),
        }),
        _ => None,
    }
}

/// The CAPI MachineDeployment for a hub one.
pub fn deployment_to_capi(hub: &mcm::MachineDeployment) -> capi::MachineDeployment {
    let mut metadata = hub.metadata.clone();
    let data: CapiDeploymentData = take(&mut metadata.annotations, CAPI_DATA);
    let s = &hub.spec;

    let mapped = s.strategy.as_ref().and_then(capi_strategy);
    let mcm_data = McmDeploymentData {
        strategy: if mapped.is_some() { None } else { s.strategy.clone() },
        selector_unset: s.selector.is_none(),
        min_ready_seconds: s.min_ready_seconds,
        revision_history_limit: s.revision_history_limit,
        rollback_to: s.rollback_to.clone(),
        progress_deadline_seconds: s.progress_deadline_seconds,
        auto_preserve_failed_machine_max: s.auto_preserve_failed_machine_max,
    };
    put(&mut metadata.annotations, MCM_DATA, &mcm_data);

    let mut rollout = data.rollout;
    if let Some(strategy) = mapped {
        rollout.get_or_insert_with(MachineDeploymentRollout::default).strategy = Some(strategy);
    }
    capi::MachineDeployment {
        metadata,
        spec: capi::MachineDeploymentSpec {
            cluster_name: data.cluster_name,
            replicas: (!data.replicas_unset || s.replicas != 0).then_some(s.replicas),
            selector: s.selector.clone().unwrap_or_default(),
            template: template_to_capi(&s.template),
            rollout,
            deletion: data.deletion,
            paused: if s.paused { Some(true) } else { data.paused },
            extra: data.extra,
        },
        status: hub.status.as_ref().map(deployment_status_to_capi),
    }
}

/// The hub MachineDeployment for a CAPI one.
pub fn deployment_from_capi(capi: &capi::MachineDeployment) -> mcm::MachineDeployment {
    let mut metadata = capi.metadata.clone();
    let mcm_data: McmDeploymentData = take(&mut metadata.annotations, MCM_DATA);
    let s = &capi.spec;

    let mut rollout = s.rollout.clone();
    let mut strategy = mcm_data.strategy;
    if let Some(r) = rollout.as_mut()
        && let Some(st) =
            r.strategy.as_ref().filter(|st| capi_type(&MachineDeploymentStrategyType::from(st.type_.as_str())))
    {
        strategy = Some(MachineDeploymentStrategy {
            type_: Some(MachineDeploymentStrategyType::from(st.type_.as_str())),
            rolling_update: st.rolling_update.as_ref().map(rolling_from_capi),
            in_place_update: None,
        });
        r.strategy = None;
        if *r == MachineDeploymentRollout::default() {
            rollout = None;
        }
    }
    let data = CapiDeploymentData {
        cluster_name: s.cluster_name.clone(),
        replicas_unset: s.replicas.is_none(),
        rollout,
        deletion: s.deletion.clone(),
        paused: s.paused.filter(|p| !p),
        extra: s.extra.clone(),
    };
    put(&mut metadata.annotations, CAPI_DATA, &data);
    let selector = (!mcm_data.selector_unset || s.selector != Default::default()).then(|| s.selector.clone());
    mcm::MachineDeployment {
        metadata,
        spec: mcm::MachineDeploymentSpec {
            replicas: s.replicas.unwrap_or(0),
            selector,
            template: template_from_capi(&s.template),
            strategy,
            min_ready_seconds: mcm_data.min_ready_seconds,
            revision_history_limit: mcm_data.revision_history_limit,
            paused: s.paused.unwrap_or(false),
            rollback_to: mcm_data.rollback_to,
            progress_deadline_seconds: mcm_data.progress_deadline_seconds,
            auto_preserve_failed_machine_max: mcm_data.auto_preserve_failed_machine_max,
        },
        status: capi.status.as_ref().map(deployment_status_from_capi),
    }
}

/// What CAPI's defaulting webhook does to a MachineDeployment before anyone reads it: one replica when none is
/// given, and a RollingUpdate with maxSurge 1 and maxUnavailable 0 when no strategy is given. The controllers
/// apply it before converting (our embedded API server has no CAPI webhook).
///
/// A strategy CAPI cannot express (Recreate, InPlaceUpdate) lives only in the [`MCM_DATA`] annotation, and
/// [`deployment_from_capi`] prefers CAPI's field, so defaulting that field would silently turn it into
/// RollingUpdate. The strategy is therefore only defaulted when the annotation carries none. An explicit CAPI
/// strategy still wins over the annotation (it is the user's newer edit); [`deployment_to_capi`] never writes both.
pub fn apply_capi_deployment_defaults(d: &mut capi::MachineDeployment) {
    if d.spec.replicas.is_none() {
        d.spec.replicas = Some(1);
    }
    let carried = annotation_strategy(&d.metadata.annotations).is_some();
    if carried && d.spec.rollout.as_ref().is_none_or(|r| r.strategy.is_none()) {
        return;
    }
    let rollout = d.spec.rollout.get_or_insert_with(MachineDeploymentRollout::default);
    let strategy = rollout.strategy.get_or_insert_with(|| MachineDeploymentRolloutStrategy {
        type_: MachineDeploymentStrategyType::RollingUpdate.as_str().to_string(),
        rolling_update: None,
    });
    if strategy.type_.is_empty() {
        strategy.type_ = MachineDeploymentStrategyType::RollingUpdate.as_str().to_string();
    }
    if strategy.type_ == MachineDeploymentStrategyType::RollingUpdate.as_str() {
        let r = strategy.rolling_update.get_or_insert_with(RollingUpdate::default);
        r.max_surge.get_or_insert(IntOrString::Int(1));
        r.max_unavailable.get_or_insert(IntOrString::Int(0));
    }
}

/// The strategy carried in the [`MCM_DATA`] annotation, if any (read without removing it).
fn annotation_strategy(
    annotations: &Option<std::collections::BTreeMap<String, String>>,
) -> Option<MachineDeploymentStrategy> {
    let mut copy = annotations.clone();
    take::<McmDeploymentData>(&mut copy, MCM_DATA).strategy
}

/// The CAPI status for a hub status. Lost on the way (the hub recomputes them): `unavailableReplicas`,
/// `collisionCount`, `failedMachines`, `preservedFailedReplicas`, `lastUpdateTime` of conditions; and conditions
/// of types that are not MCM's, which [`deployment_status_from_capi`] would not bring back.
pub fn deployment_status_to_capi(s: &mcm::MachineDeploymentStatus) -> capi::MachineDeploymentStatus {
    let conditions: Vec<Condition> = s
        .conditions
        .iter()
        .flatten()
        .filter(|c| !matches!(c.type_, MachineDeploymentConditionType::Other(_)))
        .map(|c| {
            condition_to_capi(
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_deref(),
                c.message.as_deref(),
                c.last_transition_time.as_ref().or(c.last_update_time.as_ref()),
            )
        })
        .collect();
    capi::MachineDeploymentStatus {
        conditions: (!conditions.is_empty()).then_some(conditions),
        selector: None,
        replicas: Some(s.replicas),
        ready_replicas: Some(s.ready_replicas),
        available_replicas: Some(s.available_replicas),
        up_to_date_replicas: Some(s.updated_replicas),
        phase: None,
        observed_generation: s.observed_generation,
        extra: Default::default(),
    }
}

/// The hub status for a CAPI status: the counts, the observed generation and the conditions of MCM's types
/// (CAPI's own condition types are not the hub's business).
pub fn deployment_status_from_capi(s: &capi::MachineDeploymentStatus) -> mcm::MachineDeploymentStatus {
    let conditions: Vec<MachineDeploymentCondition> = s
        .conditions
        .iter()
        .flatten()
        .filter_map(|c| {
            let type_ = MachineDeploymentConditionType::from(c.type_.as_str());
            if matches!(type_, MachineDeploymentConditionType::Other(_)) {
                return None;
            }
            let (status, reason, message, time) = condition_from_capi(c)?;
            Some(MachineDeploymentCondition {
                type_,
                status,
                last_update_time: time.clone(),
                last_transition_time: time,
                reason,
                message,
            })
        })
        .collect();
    let replicas = s.replicas.unwrap_or(0);
    let available = s.available_replicas.unwrap_or(0);
    mcm::MachineDeploymentStatus {
        observed_generation: s.observed_generation,
        replicas,
        updated_replicas: s.up_to_date_replicas.unwrap_or(0),
        ready_replicas: s.ready_replicas.unwrap_or(0),
        available_replicas: available,
        unavailable_replicas: (replicas - available).max(0),
        conditions: (!conditions.is_empty()).then_some(conditions),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As `machine_set::tests::a_condition_of_another_type_does_not_cross` (found by the `convert_roundtrip` fuzz
    /// target there): only conditions of MCM's types cross to CAPI, the ones that come back.
    #[test]
    fn a_condition_of_another_type_does_not_cross() {
        let hub: mcm::MachineDeploymentStatus = serde_json::from_value(serde_json::json!({
            "replicas": 2,
            "conditions": [
                {"type": "Availabel", "status": "True", "lastTransitionTime": "2026-11-30T09:05:00Z"},
                {"type": "Progressing", "status": "True", "lastTransitionTime": "2026-11-30T09:05:00Z"},
            ],
        }))
        .unwrap();
        let once = deployment_status_to_capi(&hub);
        let types: Vec<&str> = once.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Progressing"]);
        assert_eq!(deployment_status_to_capi(&deployment_status_from_capi(&once)), once);
    }

    #[test]
    fn defaults_are_capis() {
        let mut d = capi::MachineDeployment::new("d", capi::MachineDeploymentSpec::default());
        apply_capi_deployment_defaults(&mut d);
        let hub = deployment_from_capi(&d);
        assert_eq!(hub.spec.replicas, 1);
        let strategy = hub.spec.strategy.unwrap_or_default();
        assert_eq!(strategy.type_, Some(MachineDeploymentStrategyType::RollingUpdate));
        let ru = strategy.rolling_update.unwrap_or_default();
        assert_eq!((ru.max_surge, ru.max_unavailable), (Some(IntOrString::Int(1)), Some(IntOrString::Int(0))));
    }

    #[test]
    fn recreate_survives_in_the_annotation() {
        let mut hub = mcm::MachineDeployment::new("d", Default::default());
        hub.spec.strategy = Some(MachineDeploymentStrategy {
            type_: Some(MachineDeploymentStrategyType::Recreate),
            ..Default::default()
        });
        let c = deployment_to_capi(&hub);
        assert_eq!(c.spec.rollout, None);
        assert!(c.metadata.annotations.as_ref().is_some_and(|a| a[MCM_DATA].contains("Recreate")));
        let back = deployment_from_capi(&c);
        assert_eq!((back.metadata, back.spec), (hub.metadata, hub.spec));
    }

    fn hub_with(strategy: MachineDeploymentStrategy) -> mcm::MachineDeployment {
        let mut hub = mcm::MachineDeployment::new("d", Default::default());
        hub.spec.replicas = 3;
        hub.spec.strategy = Some(strategy);
        hub
    }

    /// The strategies CAPI cannot express travel in the annotation; CAPI's defaults (applied by the controllers
    /// before converting) must not replace them with RollingUpdate.
    #[test]
    fn defaults_keep_the_annotations_strategy() {
        let fenceposts = UpdateConfiguration {
            max_surge: Some(IntOrString::Int(1)),
            max_unavailable: Some(IntOrString::String("25%".into())),
        };
        let in_place = MachineDeploymentStrategy {
            type_: Some(MachineDeploymentStrategyType::InPlaceUpdate),
            rolling_update: None,
            in_place_update: Some(mcm::InPlaceUpdate {
                update: fenceposts,
                orchestration_type: Some(mcm::OrchestrationType::Manual),
            }),
        };
        let recreate =
            MachineDeploymentStrategy { type_: Some(MachineDeploymentStrategyType::Recreate), ..Default::default() };
        for strategy in [in_place, recreate] {
            let hub = hub_with(strategy.clone());
            let mut c = deployment_to_capi(&hub);
            apply_capi_deployment_defaults(&mut c);
            assert_eq!(c.spec.rollout, None, "no CAPI strategy next to the annotation's");
            let back = deployment_from_capi(&c);
            assert_eq!(back.spec.strategy, Some(strategy));
            assert_eq!((back.metadata, back.spec), (hub.metadata, hub.spec));
        }
    }

    /// A strategy the user writes in CAPI's field wins over the annotation's: it is the newer intent.
    #[test]
    fn an_explicit_capi_strategy_wins_over_the_annotation() {
        let hub = hub_with(MachineDeploymentStrategy {
            type_: Some(MachineDeploymentStrategyType::Recreate),
            ..Default::default()
        });
        let mut c = deployment_to_capi(&hub);
        c.spec.rollout = Some(MachineDeploymentRollout {
            strategy: Some(MachineDeploymentRolloutStrategy { type_: "RollingUpdate".into(), rolling_update: None }),
            ..Default::default()
        });
        apply_capi_deployment_defaults(&mut c);
        let t = deployment_from_capi(&c).spec.strategy.and_then(|s| s.type_);
        assert_eq!(t, Some(MachineDeploymentStrategyType::RollingUpdate));
    }

    #[test]
    fn on_delete_is_an_unknown_hub_strategy() {
        let mut c = capi::MachineDeployment::new("d", capi::MachineDeploymentSpec::default());
        c.spec.rollout = Some(MachineDeploymentRollout {
            strategy: Some(MachineDeploymentRolloutStrategy { type_: "OnDelete".into(), rolling_update: None }),
            ..Default::default()
        });
        let hub = deployment_from_capi(&c);
        let t = hub.spec.strategy.as_ref().and_then(|s| s.type_.clone());
        assert_eq!(t, Some(MachineDeploymentStrategyType::Other("OnDelete".into())), "carried as an unknown MCM type");
        let back = deployment_to_capi(&hub);
        assert_eq!((back.metadata, back.spec), (c.metadata, c.spec));
    }
}
