//! CAPI Machines as the MachineSet and MachineDeployment decisions see them (hub Machines), and the CAPI Machine a
//! hub Machine made from a set's template becomes.
//!
//! This is the part of the Machine conversion the set logic needs: metadata, the template-derived spec, the phase
//! (`docs/capi-mode.md`: Provisioned ≈ Pending, Deleting ≈ Terminating) and the deletion priority. MCM-only
//! states (Failed, CrashLoopBackOff) come from the MCMMachine's `status.currentStatus`, where the infrastructure
//! provider records them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::template::{template_from_capi, template_to_capi};
use crate::api::capi::{self, DELETE_MACHINE_ANNOTATION, TemplateObjectMeta};
use crate::api::infra::MCMMachine;
use crate::api::mcm::names::{NODE_LABEL, PRIORITY_ANNOTATION};
use crate::api::mcm::{self, CurrentStatus, MachinePhase};

/// CAPI v1beta2 Machine phases.
pub mod phase {
    /// No infrastructure yet.
    pub const PENDING: &str = "Pending";
    /// Bootstrap data is there; the infrastructure is being provisioned.
    pub const PROVISIONING: &str = "Provisioning";
    /// The infrastructure exists (providerID known); no Node yet.
    pub const PROVISIONED: &str = "Provisioned";
    /// The Node is linked.
    pub const RUNNING: &str = "Running";
    /// Being deleted.
    pub const DELETING: &str = "Deleting";
    /// Deprecated in CAPI; kept for MCM's Failed (creation or health timeout).
    pub const FAILED: &str = "Failed";
    /// The state cannot be determined.
    pub const UNKNOWN: &str = "Unknown";
    /// An in-place update runs (CAPI v1.12+); MCM's three in-place phases ([`super::capi_phase_in_place`]).
    pub const UPDATING: &str = "Updating";
}

/// Whether a hub phase is one of MCM's in-place phases.
pub fn is_in_place(p: &MachinePhase) -> bool {
    matches!(
        p,
        MachinePhase::InPlaceUpdating | MachinePhase::InPlaceUpdateSuccessful | MachinePhase::InPlaceUpdateFailed
    )
}

/// The CAPI phase for one of MCM's in-place phases; `None` for the others, which `lifecycle::capi_machine` decides
/// from the Machine's own observations.
///
/// All three are `Updating`. CAPI has no phase for "updated, not yet rejoined": MCM's InPlaceUpdateSuccessful
/// becomes Running only when the health check sees the Node back, so `Updating` until then is closest. CAPI's
/// `Failed` is terminal (its MachineSet and health checks replace the machine), while MCM's InPlaceUpdateFailed can
/// still recover or turns Failed only after the health timeout; so it stays `Updating`, and the failure shows in
/// the `Updating` condition.
pub fn capi_phase_in_place(p: &MachinePhase) -> Option<&'static str> {
    is_in_place(p).then_some(phase::UPDATING)
}

/// MCM's phase for a CAPI phase. `None` is MCM's "being created".
pub fn hub_phase(capi_phase: Option<&str>) -> Option<MachinePhase> {
    match capi_phase? {
        // A VM whose Node has not joined: MCM's Pending. (MCM's Available is a machine with no target cluster to
        // watch, which counts as serving; a Provisioned Machine does not serve, and core does not count it.)
        phase::PROVISIONED => Some(MachinePhase::Pending),
        phase::RUNNING => Some(MachinePhase::Running),
        phase::DELETING | "Deleted" => Some(MachinePhase::Terminating),
        phase::FAILED => Some(MachinePhase::Failed),
        phase::UNKNOWN => Some(MachinePhase::Unknown),
        // Which in-place phase exactly is the MCMMachine's word (`machine_to_hub`).
        phase::UPDATING => Some(MachinePhase::InPlaceUpdating),
        // Pending, Provisioning, anything new: still being created.
        _ => None,
    }
}

/// The hub Machine for a CAPI Machine (and its MCMMachine, when known).
pub fn machine_to_hub(m: &capi::Machine, infra: Option<&MCMMachine>) -> mcm::Machine {
    let mut metadata = m.metadata.clone();
    let template = template_from_capi(&capi::MachineTemplateSpec {
        metadata: Some(TemplateObjectMeta { labels: None, annotations: metadata.annotations.clone() }),
        spec: m.spec.clone(),
    });
    metadata.annotations = template.metadata.and_then(|t| t.annotations);
    let annotations = metadata.annotations.get_or_insert_with(Default::default);
    if annotations.contains_key(DELETE_MACHINE_ANNOTATION) && !annotations.contains_key(PRIORITY_ANNOTATION) {
        annotations.insert(PRIORITY_ANNOTATION.to_string(), "1".to_string());
    }
    if let Some(node) = m.status.as_ref().and_then(|s| s.node_ref.as_ref()) {
        metadata.labels.get_or_insert_with(Default::default).insert(NODE_LABEL.to_string(), node.name.clone());
    }
    let infra_status = infra.and_then(|i| i.status.as_ref());
    let mcm_phase = infra_status.and_then(|s| s.current_status.as_ref()).and_then(|c| c.phase.clone());
    let phase = match mcm_phase {
        Some(p @ (MachinePhase::Failed | MachinePhase::CrashLoopBackOff)) => Some(p),
        // CAPI's `Updating` stands for all three in-place phases; the MCMMachine says which one.
        Some(p) if is_in_place(&p) => Some(p),
        _ => hub_phase(m.status.as_ref().and_then(|s| s.phase.as_deref())),
    };
    // A MachineHealthCheck asked its owner to remediate it: to MCM's MachineSet that is a Failed machine, which it
    // deletes and replaces (core's MachineSet deletes it too).
    let phase = match phase {
        Some(MachinePhase::Terminating) => phase,
        _ if owner_remediation_requested(m) => Some(MachinePhase::Failed),
        _ => phase,
    };
    let last_update_time = m.status.as_ref().and_then(|s| s.last_updated.clone());
    mcm::Machine {
        metadata,
        spec: template.spec.unwrap_or_default(),
        status: Some(mcm::MachineStatus {
            current_status: Some(CurrentStatus { phase, last_update_time, ..Default::default() }),
            last_operation: infra_status.and_then(|s| s.last_operation.clone()),
            ..Default::default()
        }),
    }
}

/// Whether a MachineHealthCheck marked the Machine for remediation by its owner (`OwnerRemediated` False).
pub fn owner_remediation_requested(m: &capi::Machine) -> bool {
    m.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "OwnerRemediated" && c.status == "False"))
}

/// The CAPI Machine for a hub Machine made from a set's template (`lifecycle::machine_set::machines`): its
/// metadata, and the spec from the template's conversion data (cluster name, bootstrap, version...).
pub fn machine_from_hub(hub: &mcm::Machine) -> capi::Machine {
    let template = template_to_capi(&mcm::MachineTemplateSpec {
        metadata: Some(ObjectMeta { annotations: hub.metadata.annotations.clone(), ..Default::default() }),
        spec: Some(hub.spec.clone()),
    });
    let mut metadata = hub.metadata.clone();
    metadata.annotations = template.metadata.and_then(|t| t.annotations);
    capi::Machine { metadata, spec: template.spec, status: None }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::capi::{Bootstrap, ContractVersionedObjectReference, MachineNodeReference};

    fn capi_machine(phase: Option<&str>, annotations: &[(&str, &str)]) -> capi::Machine {
        let mut m = capi::Machine::new(
            "m1",
            capi::MachineSpec {
                cluster_name: "c".into(),
                bootstrap: Bootstrap { config_ref: None, data_secret_name: Some("boot".into()) },
                infrastructure_ref: ContractVersionedObjectReference {
                    api_group: "infrastructure.cluster.x-k8s.io".into(),
                    kind: "MCMMachine".into(),
                    name: "m1".into(),
                },
                ..Default::default()
            },
        );
        m.metadata.annotations =
            Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>())
                .filter(|a| !a.is_empty());
        m.status = Some(capi::MachineStatus {
            phase: phase.map(str::to_string),
            node_ref: Some(MachineNodeReference { name: "node-1".into() }),
            ..Default::default()
        });
        m
    }

    #[test]
    fn phases() {
        let cases = [
            (None, None),
            (Some("Pending"), None),
            (Some("Provisioning"), None),
            (Some("Provisioned"), Some(MachinePhase::Pending)),
            (Some("Running"), Some(MachinePhase::Running)),
            (Some("Deleting"), Some(MachinePhase::Terminating)),
            (Some("Failed"), Some(MachinePhase::Failed)),
            (Some("Unknown"), Some(MachinePhase::Unknown)),
        ];
        for (capi, hub) in cases {
            assert_eq!(hub_phase(capi), hub, "{capi:?}");
        }
    }

    #[test]
    fn delete_machine_is_priority_one() {
        let hub = machine_to_hub(&capi_machine(Some("Running"), &[(DELETE_MACHINE_ANNOTATION, "")]), None);
        assert_eq!(
            hub.metadata.annotations.as_ref().and_then(|a| a.get(PRIORITY_ANNOTATION)).map(String::as_str),
            Some("1")
        );
        let own =
            machine_to_hub(&capi_machine(None, &[(DELETE_MACHINE_ANNOTATION, ""), (PRIORITY_ANNOTATION, "2")]), None);
        assert_eq!(
            own.metadata.annotations.as_ref().and_then(|a| a.get(PRIORITY_ANNOTATION)).map(String::as_str),
            Some("2")
        );
    }

    #[test]
    fn the_node_ref_is_the_node_label() {
        let hub = machine_to_hub(&capi_machine(Some("Running"), &[]), None);
        assert_eq!(hub.metadata.labels.as_ref().and_then(|l| l.get(NODE_LABEL)).map(String::as_str), Some("node-1"));
    }

    #[test]
    fn mcm_failed_wins_over_the_capi_phase() {
        let mut infra = MCMMachine::new("m1", Default::default());
        infra.status = Some(crate::api::infra::MCMMachineStatus {
            current_status: Some(CurrentStatus { phase: Some(MachinePhase::CrashLoopBackOff), ..Default::default() }),
            ..Default::default()
        });
        let hub = machine_to_hub(&capi_machine(Some("Provisioned"), &[]), Some(&infra));
        let phase = hub.status.and_then(|s| s.current_status).and_then(|c| c.phase);
        assert_eq!(phase, Some(MachinePhase::CrashLoopBackOff));
    }

    /// MCM's in-place phases are CAPI's `Updating` one way; back, the MCMMachine's phase says which one.
    #[test]
    fn in_place_phases_are_capis_updating_both_ways() {
        use MachinePhase::*;
        // (hub phase, CAPI phase, hub phase read back through the MCMMachine)
        let rows = [
            (InPlaceUpdating, Some(phase::UPDATING), InPlaceUpdating),
            (InPlaceUpdateSuccessful, Some(phase::UPDATING), InPlaceUpdateSuccessful),
            (InPlaceUpdateFailed, Some(phase::UPDATING), InPlaceUpdateFailed),
            (Running, None, Running),
            (Failed, None, Failed),
        ];
        for (hub, capi_phase, back) in rows {
            assert_eq!(capi_phase_in_place(&hub), capi_phase, "{hub:?}");
            let mut infra = MCMMachine::new("m1", Default::default());
            infra.status = Some(crate::api::infra::MCMMachineStatus {
                current_status: Some(CurrentStatus { phase: Some(hub.clone()), ..Default::default() }),
                ..Default::default()
            });
            let shown = capi_phase.unwrap_or(if hub == Failed { phase::FAILED } else { phase::RUNNING });
            let read = machine_to_hub(&capi_machine(Some(shown), &[]), Some(&infra));
            assert_eq!(read.status.and_then(|s| s.current_status).and_then(|c| c.phase), Some(back), "{hub:?}");
        }
        assert_eq!(hub_phase(Some(phase::UPDATING)), Some(InPlaceUpdating), "without an MCMMachine");
    }

    #[test]
    fn a_machine_from_a_set_template_gets_the_capi_spec_back() {
        let m = capi_machine(None, &[("keep", "me")]);
        let mut hub = machine_to_hub(&m, None);
        hub.status = None;
        let back = machine_from_hub(&hub);
        assert_eq!(back.spec, m.spec);
        assert_eq!(back.metadata.annotations, m.metadata.annotations);
    }
}
