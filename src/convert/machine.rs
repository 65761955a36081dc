//! MCMMachine (with its owning CAPI Machine) <-> the hub MCM Machine (`machine.sapcloud.io/v1alpha1`).
//!
//! The infrastructure provider runs MCM's machine decisions ([`crate::lifecycle::create`],
//! [`crate::lifecycle::delete`]) on the hub view [`to_hub`] makes of an MCMMachine, and writes the outcome back in
//! the MCMMachine's shape. Both directions are pure and total:
//!
//! - [`to_hub`] then [`from_hub`] gives back the MCMMachine;
//! - [`from_hub`] then [`to_hub`] gives back the hub Machine.
//!
//! What one side cannot express travels in an annotation holding JSON (see `docs/infrastructure-provider.md`):
//! - [`INFRA_FIELDS_ANNOTATION`] on the hub Machine: the MCMMachine's `spec.failureDomain`, `spec.inlineClass`, `spec.identityRef`,
//!   `status.initialization`, `status.failureDomain` and `status.conditions` (metav1), which MCM has no field for;
//! - [`HUB_FIELDS_ANNOTATION`] on the MCMMachine: the hub's `status.conditions` (the Node's conditions), which an
//!   MCMMachine does not carry (CAPI core reads them from the Node).
//!
//! An MCMMachine with an inline class becomes a hub Machine whose `spec.class` is `{apiGroup:
//! infrastructure.cluster.x-k8s.io, kind: MCMMachine, name: <its name>}`: the class is the machine itself.
//!
//! Normal forms (the round trips hold on them): an empty `spec.class` reference counts as none, and an empty
//! annotation map as none. An annotation that is not valid JSON of the expected shape is ignored (and dropped on
//! the way back), so a hand-edited value never makes a conversion fail.
//!
//! From the owning CAPI Machine (one way: CAPI core owns that object) [`to_hub`] takes what MCM's decisions read:
//! `spec.deletion.nodeDrainTimeoutSeconds` as `drainTimeout` (unless the MCMMachine sets one) and
//! `cluster.x-k8s.io/delete-machine` as MCM's deletion priority `1`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::{Deserialize, Serialize};

use crate::api::capi::{self, MachineAddress};
use crate::api::infra::{
    self, IdentityReference, InitializationStatus, InlineMachineClass, MCMMachine, MCMMachineSpec, MCMMachineStatus,
};
use crate::api::mcm::names::PRIORITY_ANNOTATION;
use crate::api::mcm::{ClassSpec, Machine, MachineSpec, MachineStatus};

/// Hub Machine annotation: JSON of the MCMMachine fields MCM has no place for.
pub const INFRA_FIELDS_ANNOTATION: &str = "infrastructure.cluster.x-k8s.io/mcm-machine-fields";
/// MCMMachine annotation: JSON of the hub Machine fields an MCMMachine has no place for.
pub const HUB_FIELDS_ANNOTATION: &str = "machine.sapcloud.io/hub-fields";
/// `spec.class.kind` of a hub Machine converted from an MCMMachine with an inline class.
pub const INLINE_CLASS_KIND: &str = "MCMMachine";

/// The MCMMachine fields MCM cannot express.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InfraFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure_domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inline_class: Option<InlineMachineClass>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identity_ref: Option<IdentityReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    initialization: Option<InitializationStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status_failure_domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    conditions: Option<Vec<Condition>>,
}

/// The hub fields an MCMMachine cannot express.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HubFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node_conditions: Option<Vec<NodeCondition>>,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Takes `key` out of `annotations` (dropping an emptied map) and parses it; malformed JSON counts as absent.
fn take<T: for<'de> Deserialize<'de> + Default>(annotations: &mut Option<BTreeMap<String, String>>, key: &str) -> T {
    let value = annotations.as_mut().and_then(|a| a.remove(key));
    if annotations.as_ref().is_some_and(BTreeMap::is_empty) {
        *annotations = None;
    }
    value.and_then(|v| serde_json::from_str(&v).ok()).unwrap_or_default()
}

/// Puts `value` as JSON under `key` unless it is empty.
fn put<T: Serialize + Default + PartialEq>(annotations: &mut Option<BTreeMap<String, String>>, key: &str, value: &T) {
    if is_default(value) {
        return;
    }
    // Serializing these plain structs cannot fail (string keys, no custom serializers that error).
    if let Ok(json) = serde_json::to_string(value) {
        annotations.get_or_insert_with(BTreeMap::new).insert(key.to_string(), json);
    }
}

fn to_node_address(a: &MachineAddress) -> NodeAddress {
    NodeAddress { type_: a.type_.clone(), address: a.address.clone() }
}

fn to_machine_address(a: &NodeAddress) -> MachineAddress {
    MachineAddress { type_: a.type_.clone(), address: a.address.clone() }
}

/// The class reference of an MCMMachine whose class is inline.
pub fn inline_class_ref(name: &str) -> ClassSpec {
    ClassSpec { api_group: Some(infra::GROUP.to_string()), kind: INLINE_CLASS_KIND.to_string(), name: name.to_string() }
}

/// The hub view of an MCMMachine; `owner` (the CAPI Machine owning it, if known) contributes its drain timeout and
/// deletion mark.
pub fn to_hub(infra: &MCMMachine, owner: Option<&capi::Machine>) -> Machine {
    let mut metadata = infra.metadata.clone();
    let hub_fields: HubFields = take(&mut metadata.annotations, HUB_FIELDS_ANNOTATION);
    let spec = &infra.spec;
    let status = infra.status.as_ref();
    let fields = InfraFields {
        failure_domain: spec.failure_domain.clone(),
        inline_class: spec.inline_class.clone(),
        identity_ref: spec.identity_ref.clone(),
        initialization: status.and_then(|s| s.initialization.clone()),
        status_failure_domain: status.and_then(|s| s.failure_domain.clone()),
        conditions: status.and_then(|s| s.conditions.clone()),
    };
    put(&mut metadata.annotations, INFRA_FIELDS_ANNOTATION, &fields);
    let class = match (&spec.class, &spec.inline_class) {
        (Some(class), _) => class.clone(),
        (None, Some(_)) => inline_class_ref(infra.metadata.name.as_deref().unwrap_or_default()),
        (None, None) => ClassSpec::default(),
    };
    let mut hub = Machine {
        metadata,
        spec: MachineSpec {
            class,
            provider_id: spec.provider_id.clone(),
            node_template: spec.node_template.clone(),
            configuration: spec.configuration.clone(),
        },
        status: status.map(|s| MachineStatus {
            conditions: hub_fields.node_conditions.clone(),
            last_operation: s.last_operation.clone(),
            current_status: s.current_status.clone(),
            last_known_state: s.last_known_state.clone(),
            addresses: s.addresses.as_ref().map(|a| a.iter().map(to_node_address).collect()),
        }),
    };
    if let Some(owner) = owner {
        apply_owner(&mut hub, owner);
    }
    hub
}

/// What the owning CAPI Machine adds to the hub view (one way).
fn apply_owner(hub: &mut Machine, owner: &capi::Machine) {
    let drain = owner.spec.deletion.as_ref().and_then(|d| d.node_drain_timeout_seconds).filter(|s| *s > 0);
    if let (None, Some(seconds)) = (&hub.spec.configuration.drain_timeout, drain) {
        let seconds = u64::try_from(seconds).unwrap_or_default();
        hub.spec.configuration.drain_timeout = Some(std::time::Duration::from_secs(seconds).into());
    }
    let marked = owner.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(capi::DELETE_MACHINE_ANNOTATION));
    if marked {
        hub.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(PRIORITY_ANNOTATION.into(), "1".into());
    }
}

/// The MCMMachine a hub Machine describes.
pub fn from_hub(hub: &Machine) -> MCMMachine {
    let mut metadata = hub.metadata.clone();
    let fields: InfraFields = take(&mut metadata.annotations, INFRA_FIELDS_ANNOTATION);
    let hub_fields = HubFields { node_conditions: hub.status.as_ref().and_then(|s| s.conditions.clone()) };
    put(&mut metadata.annotations, HUB_FIELDS_ANNOTATION, &hub_fields);
    let class = &hub.spec.class;
    let inline_marker = class.kind == INLINE_CLASS_KIND
        && class.api_group.as_deref() == Some(infra::GROUP)
        && fields.inline_class.is_some();
    let class = (!is_default(class) && !inline_marker).then(|| class.clone());
    let status = hub.status.as_ref().map(|s| MCMMachineStatus {
        initialization: fields.initialization.clone(),
        addresses: s.addresses.as_ref().map(|a| a.iter().map(to_machine_address).collect()),
        failure_domain: fields.status_failure_domain.clone(),
        conditions: fields.conditions.clone(),
        last_operation: s.last_operation.clone(),
        current_status: s.current_status.clone(),
        last_known_state: s.last_known_state.clone(),
    });
    // A hub Machine without status, but with MCMMachine status fields in its annotation: keep them.
    let status = status.or_else(|| {
        let only = MCMMachineStatus {
            initialization: fields.initialization.clone(),
            failure_domain: fields.status_failure_domain.clone(),
            conditions: fields.conditions.clone(),
            ..Default::default()
        };
        (!is_default(&only)).then_some(only)
    });
    MCMMachine {
        metadata,
        spec: MCMMachineSpec {
            provider_id: hub.spec.provider_id.clone(),
            failure_domain: fields.failure_domain,
            class,
            inline_class: fields.inline_class,
            identity_ref: fields.identity_ref,
            node_template: hub.spec.node_template.clone(),
            configuration: hub.spec.configuration.clone(),
        },
        status,
    }
}

#[cfg(test)]
mod tests;
