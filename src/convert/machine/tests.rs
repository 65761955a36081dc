use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::api::capi::{MachineDeletionSpec, MachineSpec as CapiMachineSpec};
use crate::api::mcm::{
    CurrentStatus, LastOperation, MachineConfiguration, MachineOperationType, MachinePhase, MachineState,
    NodeTemplateSpec,
};

fn time(seconds: i64) -> Time {
    // Whole seconds: Kubernetes times are written with second precision.
    Time(Timestamp::from_second(seconds).unwrap())
}

fn word() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,8}"
}

fn map() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    proptest::option::of(proptest::collection::btree_map("[a-z]{1,6}(/[a-z]{1,4})?", "[a-zA-Z0-9 ]{0,6}", 1..4))
}

fn metadata() -> impl Strategy<Value = ObjectMeta> {
    (word(), map(), map(), proptest::option::of(0i64..2_000_000_000), proptest::option::of(word())).prop_map(
        |(name, labels, annotations, created, uid)| ObjectMeta {
            name: Some(name),
            namespace: Some("ns".into()),
            labels,
            annotations,
            creation_timestamp: created.map(time),
            uid,
            ..Default::default()
        },
    )
}

fn phase() -> impl Strategy<Value = MachinePhase> {
    prop_oneof![
        Just(MachinePhase::Pending),
        Just(MachinePhase::Available),
        Just(MachinePhase::Running),
        Just(MachinePhase::CrashLoopBackOff),
        Just(MachinePhase::Failed),
        Just(MachinePhase::Terminating),
    ]
}

fn current_status() -> impl Strategy<Value = Option<CurrentStatus>> {
    proptest::option::of((proptest::option::of(phase()), any::<bool>(), proptest::option::of(0i64..2_000_000_000)))
        .prop_map(|c| {
            c.map(|(phase, timeout_active, at)| CurrentStatus {
                phase,
                timeout_active,
                last_update_time: at.map(time),
                preserve_expiry_time: None,
            })
        })
}

fn last_operation() -> impl Strategy<Value = Option<LastOperation>> {
    proptest::option::of((word(), proptest::option::of(word()), any::<bool>())).prop_map(|o| {
        o.map(|(description, error_code, failed)| LastOperation {
            description: Some(description),
            error_code,
            last_update_time: Some(time(1_700_000_000)),
            state: Some(if failed { MachineState::Failed } else { MachineState::Successful }),
            type_: Some(MachineOperationType::Create),
        })
    })
}

fn addresses() -> impl Strategy<Value = Option<Vec<(String, String)>>> {
    proptest::option::of(proptest::collection::vec(
        (prop_oneof![Just("InternalIP".to_string()), Just("Hostname".to_string())], word()),
        0..3,
    ))
}

fn configuration() -> impl Strategy<Value = MachineConfiguration> {
    (proptest::option::of(1u64..100_000), proptest::option::of(any::<bool>()), proptest::option::of(word())).prop_map(
        |(seconds, disable, conditions)| MachineConfiguration {
            creation_timeout: seconds.map(|s| std::time::Duration::from_secs(s).into()),
            disable_health_timeout: disable,
            node_conditions: conditions,
            ..Default::default()
        },
    )
}

fn class_ref() -> impl Strategy<Value = ClassSpec> {
    word().prop_map(|name| ClassSpec { api_group: None, kind: "MachineClass".into(), name })
}

fn inline_class() -> impl Strategy<Value = InlineMachineClass> {
    (word(), word()).prop_map(|(provider, zone)| InlineMachineClass {
        provider,
        provider_spec: json!({"zone": zone}),
        credentials_secret_ref: None,
        node_template: None,
    })
}

fn conditions() -> impl Strategy<Value = Option<Vec<Condition>>> {
    proptest::option::of(proptest::collection::vec(
        (word(), any::<bool>(), word()).prop_map(|(type_, ok, reason)| Condition {
            type_,
            status: if ok { "True".into() } else { "False".into() },
            reason,
            message: String::new(),
            last_transition_time: time(1_700_000_000),
            observed_generation: Some(1),
        }),
        0..3,
    ))
}

fn node_template() -> impl Strategy<Value = Option<NodeTemplateSpec>> {
    proptest::option::of(map().prop_map(|labels| NodeTemplateSpec {
        metadata: Some(ObjectMeta { labels, ..Default::default() }),
        spec: None,
    }))
}

prop_compose! {
    fn mcm_machine()(
        metadata in metadata(),
        provider_id in proptest::option::of(word()),
        failure_domain in proptest::option::of(word()),
        class in proptest::option::of(class_ref()),
        inline in proptest::option::of(inline_class()),
        identity in proptest::option::of((word(), word())),
        node_template in node_template(),
        configuration in configuration(),
        status in proptest::option::of((
            proptest::option::of(proptest::option::of(any::<bool>())),
            addresses(),
            proptest::option::of(word()),
            conditions(),
            last_operation(),
            current_status(),
            proptest::option::of(word()),
        )),
    ) -> MCMMachine {
        MCMMachine {
            metadata,
            spec: MCMMachineSpec {
                provider_id,
                failure_domain,
                class,
                inline_class: inline,
                identity_ref: identity.map(|(kind, name)| IdentityReference { kind, name }),
                node_template,
                configuration,
            },
            status: status.map(|(init, addresses, fd, conditions, op, current, state)| MCMMachineStatus {
                initialization: init.map(|provisioned| InitializationStatus { provisioned }),
                addresses: addresses.map(|a| {
                    a.into_iter().map(|(type_, address)| MachineAddress { type_, address }).collect()
                }),
                failure_domain: fd,
                conditions,
                last_operation: op,
                current_status: current,
                last_known_state: state,
            }),
        }
    }
}

prop_compose! {
    fn hub_machine()(
        metadata in metadata(),
        class in proptest::option::of(class_ref()),
        provider_id in proptest::option::of(word()),
        node_template in node_template(),
        configuration in configuration(),
        status in proptest::option::of((
            proptest::option::of(proptest::collection::vec((word(), any::<bool>()), 0..3)),
            last_operation(),
            current_status(),
            proptest::option::of(word()),
            addresses(),
        )),
    ) -> Machine {
        Machine {
            metadata,
            spec: MachineSpec { class: class.unwrap_or_default(), provider_id, node_template, configuration },
            status: status.map(|(conditions, op, current, state, addresses)| MachineStatus {
                conditions: conditions.map(|c| {
                    c.into_iter()
                        .map(|(type_, ok)| NodeCondition {
                            type_,
                            status: if ok { "True".into() } else { "False".into() },
                            ..Default::default()
                        })
                        .collect()
                }),
                last_operation: op,
                current_status: current,
                last_known_state: state,
                addresses: addresses.map(|a| {
                    a.into_iter().map(|(type_, address)| NodeAddress { type_, address }).collect()
                }),
            }),
        }
    }
}

/// The parts of an object (the root types implement no `PartialEq`).
fn parts_infra(m: &MCMMachine) -> (ObjectMeta, MCMMachineSpec, Option<MCMMachineStatus>) {
    (m.metadata.clone(), m.spec.clone(), m.status.clone())
}

fn parts_hub(m: &Machine) -> (ObjectMeta, MachineSpec, Option<MachineStatus>) {
    (m.metadata.clone(), m.spec.clone(), m.status.clone())
}

proptest! {
    #[test]
    fn mcm_machine_to_hub_and_back_is_the_identity(infra in mcm_machine()) {
        prop_assert_eq!(parts_infra(&from_hub(&to_hub(&infra, None))), parts_infra(&infra));
    }

    #[test]
    fn hub_to_mcm_machine_and_back_is_the_identity(hub in hub_machine()) {
        prop_assert_eq!(parts_hub(&to_hub(&from_hub(&hub), None)), parts_hub(&hub));
    }

    #[test]
    fn the_round_trip_survives_serialization(infra in mcm_machine()) {
        // What a controller writes and reads back: the hub view through JSON.
        let hub = to_hub(&infra, None);
        let text = serde_json::to_string(&hub).unwrap();
        let read: Machine = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(parts_infra(&from_hub(&read)), parts_infra(&infra));
    }
}

fn infra(name: &str) -> MCMMachine {
    MCMMachine::new(name, MCMMachineSpec::default())
}

#[test]
fn an_inline_class_is_the_machine_itself() {
    let mut m = infra("m1");
    m.spec.inline_class = Some(InlineMachineClass { provider: "InMemory".into(), ..Default::default() });
    let hub = to_hub(&m, None);
    assert_eq!(hub.spec.class, inline_class_ref("m1"));
    assert!(hub.metadata.annotations.unwrap()[INFRA_FIELDS_ANNOTATION].contains("InMemory"));
    let referenced = to_hub(&infra("m2"), None);
    assert_eq!(referenced.spec.class, ClassSpec::default());
    assert_eq!(referenced.metadata.annotations, None, "nothing to carry, no annotation");
}

#[test]
fn a_malformed_annotation_is_ignored() {
    let mut hub = to_hub(&infra("m1"), None);
    hub.metadata.annotations = Some(BTreeMap::from([(INFRA_FIELDS_ANNOTATION.to_string(), "{not json".to_string())]));
    let back = from_hub(&hub);
    assert_eq!(back.metadata.annotations, None);
    assert_eq!(back.spec, MCMMachineSpec::default());
}

#[test]
fn the_owner_contributes_drain_timeout_and_deletion_mark() {
    let owner = |drain: Option<i32>, marked: bool| {
        let mut m = capi::Machine::new("m1", CapiMachineSpec::default());
        m.spec.deletion = Some(MachineDeletionSpec { node_drain_timeout_seconds: drain, ..Default::default() });
        if marked {
            m.metadata.annotations =
                Some(BTreeMap::from([(capi::DELETE_MACHINE_ANNOTATION.to_string(), String::new())]));
        }
        m
    };
    let mut own_drain = infra("m1");
    own_drain.spec.configuration.drain_timeout = Some(std::time::Duration::from_secs(7).into());
    let secs = |m: &Machine| m.spec.configuration.drain_timeout.map(|d| d.0.as_secs());
    let priority = |m: &Machine| m.metadata.annotations.as_ref().and_then(|a| a.get(PRIORITY_ANNOTATION).cloned());
    let cases = [
        ("no owner", infra("m1"), None, None, None),
        ("owner drain timeout", infra("m1"), Some(owner(Some(600), false)), Some(600), None),
        ("zero means unlimited: MCM's default applies", infra("m1"), Some(owner(Some(0), false)), None, None),
        ("the MCMMachine's own wins", own_drain, Some(owner(Some(600), false)), Some(7), None),
        ("delete-machine is priority 1", infra("m1"), Some(owner(None, true)), None, Some("1".to_string())),
    ];
    for (name, m, owner, drain, prio) in cases {
        let hub = to_hub(&m, owner.as_ref());
        assert_eq!((secs(&hub), priority(&hub)), (drain, prio), "{name}");
    }
}
