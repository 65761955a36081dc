//! Machine templates: the hub's `MachineTemplateSpec` (labels, annotations, an MCM Machine spec) and CAPI's
//! (labels, annotations, a CAPI Machine spec).
//!
//! | hub (MCM) | CAPI |
//! |---|---|
//! | `spec.class {apiGroup, kind, name}` | `spec.infrastructureRef {apiGroup, kind, name}` |
//! | `spec.providerID` | `spec.providerID` |
//! | `spec.drainTimeout` (whole seconds) | `spec.deletion.nodeDrainTimeoutSeconds` |
//! | `spec.nodeTemplate`, the other timeouts and health settings | annotation [`MCM_MACHINE_DATA`] |
//! | annotation [`CAPI_MACHINE_DATA`] | `clusterName`, `bootstrap`, `version`, `failureDomain`, `minReadySeconds`, the other deletion timeouts, fields we do not model |

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::data::{CAPI_MACHINE_DATA, MCM_MACHINE_DATA, is_false, put, take};
use crate::api::Duration;
use crate::api::capi::{
    self, Bootstrap, ContractVersionedObjectReference, Extra, MachineDeletionSpec, TemplateObjectMeta,
};
use crate::api::mcm::{self, ClassSpec, MachineConfiguration, NodeTemplateSpec};

/// The MCM-only fields of a machine template, kept on the CAPI side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct McmMachineData {
    /// The hub template had no spec at all.
    #[serde(default, skip_serializing_if = "is_false")]
    spec_unset: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node_template: Option<NodeTemplateSpec>,
    /// The timeouts and health settings; `drainTimeout` only when it is not a whole number of seconds.
    #[serde(default, skip_serializing_if = "is_default")]
    configuration: MachineConfiguration,
}

/// The CAPI-only fields of a Machine spec, kept on the hub side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CapiMachineData {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_name: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub bootstrap: Bootstrap,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// The deletion timeouts; `nodeDrainTimeoutSeconds` only when the hub cannot hold it (negative).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeletionSpec>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: Extra,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// The CAPI reference for a hub class: the same group, kind and name.
pub fn reference_of_class(class: &ClassSpec) -> ContractVersionedObjectReference {
    ContractVersionedObjectReference {
        api_group: class.api_group.clone().unwrap_or_default(),
        kind: class.kind.clone(),
        name: class.name.clone(),
    }
}

/// The hub class for a CAPI reference (an empty group is an absent one).
pub fn class_of_reference(reference: &ContractVersionedObjectReference) -> ClassSpec {
    ClassSpec {
        api_group: (!reference.api_group.is_empty()).then(|| reference.api_group.clone()),
        kind: reference.kind.clone(),
        name: reference.name.clone(),
    }
}

/// A duration as CAPI's `*Seconds` field, when it is a whole number of seconds that fits.
fn whole_seconds(d: Duration) -> Option<i32> {
    let d = d.as_std();
    (d.subsec_nanos() == 0).then(|| i32::try_from(d.as_secs()).ok()).flatten()
}

/// Labels or annotations, absent when empty.
type StringMap = Option<BTreeMap<String, String>>;

fn template_meta(labels: StringMap, annotations: StringMap) -> (StringMap, StringMap) {
    let empty = |m: Option<BTreeMap<String, String>>| m.filter(|m| !m.is_empty());
    (empty(labels), empty(annotations))
}

/// The CAPI machine template for a hub template.
pub fn template_to_capi(hub: &mcm::MachineTemplateSpec) -> capi::MachineTemplateSpec {
    let meta = hub.metadata.clone().unwrap_or_default();
    let (labels, mut annotations) = template_meta(meta.labels, meta.annotations);
    let capi_data: CapiMachineData = take(&mut annotations, CAPI_MACHINE_DATA);

    let spec_unset = hub.spec.is_none();
    let spec = hub.spec.clone().unwrap_or_default();
    let mut configuration = spec.configuration;
    let drain = configuration.drain_timeout.and_then(whole_seconds);
    if drain.is_some() {
        configuration.drain_timeout = None;
    }
    put(
        &mut annotations,
        MCM_MACHINE_DATA,
        &McmMachineData { spec_unset, node_template: spec.node_template, configuration },
    );

    let mut deletion = capi_data.deletion;
    if let Some(seconds) = drain {
        deletion.get_or_insert_with(MachineDeletionSpec::default).node_drain_timeout_seconds = Some(seconds);
    }
    let metadata = (labels.is_some() || annotations.is_some()).then_some(TemplateObjectMeta { labels, annotations });
    capi::MachineTemplateSpec {
        metadata,
        spec: capi::MachineSpec {
            cluster_name: capi_data.cluster_name,
            bootstrap: capi_data.bootstrap,
            infrastructure_ref: reference_of_class(&spec.class),
            version: capi_data.version,
            provider_id: spec.provider_id,
            failure_domain: capi_data.failure_domain,
            min_ready_seconds: capi_data.min_ready_seconds,
            deletion,
            extra: capi_data.extra,
        },
    }
}

/// The hub machine template for a CAPI template.
pub fn template_from_capi(capi: &capi::MachineTemplateSpec) -> mcm::MachineTemplateSpec {
    let meta = capi.metadata.clone().unwrap_or_default();
    let (labels, mut annotations) = template_meta(meta.labels, meta.annotations);
    let mcm_data: McmMachineData = take(&mut annotations, MCM_MACHINE_DATA);

    let s = &capi.spec;
    let mut deletion = s.deletion.clone();
    let mut drain = None;
    if let Some(d) = deletion.as_mut()
        && let Some(seconds) = d.node_drain_timeout_seconds.filter(|s| *s >= 0)
    {
        drain = Some(seconds);
        d.node_drain_timeout_seconds = None;
    }
    if drain.is_some() && deletion.as_ref().is_some_and(is_default) {
        deletion = None;
    }
    let capi_data = CapiMachineData {
        cluster_name: s.cluster_name.clone(),
        bootstrap: s.bootstrap.clone(),
        version: s.version.clone(),
        failure_domain: s.failure_domain.clone(),
        min_ready_seconds: s.min_ready_seconds,
        deletion,
        extra: s.extra.clone(),
    };
    put(&mut annotations, CAPI_MACHINE_DATA, &capi_data);

    let mut configuration = mcm_data.configuration;
    if let Some(seconds) = drain {
        configuration.drain_timeout = Some(Duration::from_secs(u64::from(seconds.unsigned_abs())));
    }
    let spec = mcm::MachineSpec {
        class: class_of_reference(&s.infrastructure_ref),
        provider_id: s.provider_id.clone(),
        node_template: mcm_data.node_template,
        configuration,
    };
    let spec = (!(mcm_data.spec_unset && spec == mcm::MachineSpec::default())).then_some(spec);
    let metadata = (labels.is_some() || annotations.is_some()).then(|| ObjectMeta {
        labels,
        annotations,
        ..ObjectMeta::default()
    });
    mcm::MachineTemplateSpec { metadata, spec }
}

/// The CAPI-only Machine spec fields a hub template carries (cluster name, bootstrap, version, ...).
#[cfg(test)]
pub(crate) fn capi_machine_data(hub: &mcm::MachineTemplateSpec) -> CapiMachineData {
    let mut annotations = hub.metadata.as_ref().and_then(|m| m.annotations.clone());
    take(&mut annotations, CAPI_MACHINE_DATA)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_timeout_maps_to_seconds_and_back() {
        let mut hub = mcm::MachineTemplateSpec::default();
        let mut spec = mcm::MachineSpec::default();
        spec.configuration.drain_timeout = Some(Duration::from_secs(90));
        spec.configuration.health_timeout = Some(Duration::from_secs(600));
        hub.spec = Some(spec);
        let capi = template_to_capi(&hub);
        assert_eq!(capi.spec.deletion.as_ref().and_then(|d| d.node_drain_timeout_seconds), Some(90));
        let annotations = capi.metadata.as_ref().and_then(|m| m.annotations.as_ref());
        assert!(annotations.is_some_and(|a| a[MCM_MACHINE_DATA].contains("healthTimeout")));
        assert_eq!(template_from_capi(&capi), hub);
    }

    #[test]
    fn a_sub_second_drain_timeout_stays_in_the_annotation() {
        let mut spec = mcm::MachineSpec::default();
        spec.configuration.drain_timeout = Some(Duration(std::time::Duration::from_millis(1500)));
        let hub = mcm::MachineTemplateSpec { metadata: None, spec: Some(spec) };
        let capi = template_to_capi(&hub);
        assert_eq!(capi.spec.deletion, None);
        assert_eq!(template_from_capi(&capi), hub);
    }

    #[test]
    fn the_infrastructure_ref_is_the_class() {
        let capi = capi::MachineTemplateSpec {
            metadata: None,
            spec: capi::MachineSpec {
                cluster_name: "c1".into(),
                infrastructure_ref: ContractVersionedObjectReference {
                    api_group: "infrastructure.cluster.x-k8s.io".into(),
                    kind: "MCMMachineTemplate".into(),
                    name: "workers-v2".into(),
                },
                bootstrap: Bootstrap { config_ref: None, data_secret_name: Some("boot".into()) },
                ..Default::default()
            },
        };
        let hub = template_from_capi(&capi);
        let spec = hub.spec.clone().unwrap_or_default();
        assert_eq!(spec.class.name, "workers-v2");
        assert_eq!(spec.class.kind, "MCMMachineTemplate");
        assert_eq!(capi_machine_data(&hub).bootstrap.data_secret_name.as_deref(), Some("boot"));
        assert_eq!(template_to_capi(&hub), capi);
    }
}
