//! Round-trip properties: MCM -> CAPI -> MCM and CAPI -> MCM -> CAPI return the generated object, for objects in
//! canonical form (empty maps absent, no conversion annotations set by hand).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;

use super::*;
use crate::api::Duration;
use crate::api::capi::{self, Bootstrap, ContractVersionedObjectReference, MachineDeletionSpec, TemplateObjectMeta};
use crate::api::mcm::{self, ClassSpec, ConditionStatus, MachineConfiguration, NodeTemplateSpec};

fn word() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,6}"
}

fn map() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    prop::option::of(prop::collection::btree_map("[a-z]{1,4}(/[a-z]{1,4})?", "[a-z0-9]{0,5}", 1..3))
}

fn extra() -> impl Strategy<Value = capi::Extra> {
    prop::collection::btree_map("x[a-z]{1,4}", "[a-z0-9]{0,5}".prop_map(serde_json::Value::String), 0..2)
}

fn meta() -> impl Strategy<Value = ObjectMeta> {
    (word(), prop::option::of(word()), map(), map(), prop::option::of(0i64..50)).prop_map(
        |(name, namespace, labels, annotations, generation)| ObjectMeta {
            name: Some(name),
            namespace,
            labels,
            annotations,
            generation,
            ..Default::default()
        },
    )
}

fn selector() -> impl Strategy<Value = LabelSelector> {
    prop::collection::btree_map("[a-z]{1,4}", "[a-z0-9]{1,4}", 1..3)
        .prop_map(|m| LabelSelector { match_labels: Some(m), match_expressions: None })
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..5_000_000_000).prop_map(Duration::from_secs),
        (0u64..10_000_000).prop_map(|ms| Duration(std::time::Duration::from_millis(ms))),
    ]
}

fn configuration() -> impl Strategy<Value = MachineConfiguration> {
    (
        prop::option::of(duration()),
        prop::option::of(duration()),
        prop::option::of(duration()),
        prop::option::of(duration()),
        prop::option::of(any::<bool>()),
        prop::option::of(0i32..100),
        prop::option::of("[A-Za-z,]{0,12}"),
    )
        .prop_map(|(drain, health, creation, in_place, disable, retries, conditions)| MachineConfiguration {
            drain_timeout: drain,
            health_timeout: health,
            creation_timeout: creation,
            in_place_update_timeout: in_place,
            machine_preserve_timeout: None,
            disable_health_timeout: disable,
            max_evict_retries: retries,
            node_conditions: conditions,
        })
}

fn node_template() -> impl Strategy<Value = Option<NodeTemplateSpec>> {
    prop::option::of((map(), prop::option::of(word())).prop_map(|(labels, taint)| NodeTemplateSpec {
        metadata: labels.map(|l| ObjectMeta { labels: Some(l), ..Default::default() }),
        spec: taint.map(|key| NodeSpec {
            taints: Some(vec![Taint { key, effect: "NoSchedule".into(), ..Default::default() }]),
            ..Default::default()
        }),
    }))
}

fn class() -> impl Strategy<Value = ClassSpec> {
    (prop::option::of("[a-z.]{1,12}"), "[A-Za-z]{0,10}", "[a-z0-9-]{0,8}")
        .prop_map(|(api_group, kind, name)| ClassSpec { api_group, kind, name })
}

type StringMap = Option<BTreeMap<String, String>>;

fn template_meta<T: std::fmt::Debug>(build: fn(StringMap, StringMap) -> T) -> impl Strategy<Value = Option<T>> {
    (map(), map()).prop_map(move |(l, a)| (l.is_some() || a.is_some()).then(|| build(l, a)))
}

fn hub_template() -> impl Strategy<Value = mcm::MachineTemplateSpec> {
    let spec = (class(), prop::option::of(word()), node_template(), configuration()).prop_map(
        |(class, provider_id, node_template, configuration)| mcm::MachineSpec {
            class,
            provider_id,
            node_template,
            configuration,
        },
    );
    (
        template_meta(|labels, annotations| ObjectMeta { labels, annotations, ..Default::default() }),
        prop::option::of(spec),
    )
        .prop_map(|(metadata, spec)| mcm::MachineTemplateSpec { metadata, spec })
}

fn int_or_string() -> impl Strategy<Value = IntOrString> {
    prop_oneof![(0i32..10).prop_map(IntOrString::Int), (0i32..100).prop_map(|p| IntOrString::String(format!("{p}%")))]
}

fn update() -> impl Strategy<Value = mcm::UpdateConfiguration> {
    (prop::option::of(int_or_string()), prop::option::of(int_or_string()))
        .prop_map(|(max_unavailable, max_surge)| mcm::UpdateConfiguration { max_unavailable, max_surge })
}

fn hub_strategy() -> impl Strategy<Value = mcm::MachineDeploymentStrategy> {
    use mcm::MachineDeploymentStrategyType as T;
    let t = prop_oneof![
        Just(T::Recreate),
        Just(T::RollingUpdate),
        Just(T::InPlaceUpdate),
        Just(T::Other("OnDelete".into()))
    ];
    let in_place = (
        update(),
        prop::option::of(prop_oneof![Just(mcm::OrchestrationType::Auto), Just(mcm::OrchestrationType::Manual)]),
    )
        .prop_map(|(update, orchestration_type)| mcm::InPlaceUpdate { update, orchestration_type });
    (prop::option::of(t), prop::option::of(update()), prop::option::of(in_place)).prop_map(
        |(type_, rolling_update, in_place_update)| mcm::MachineDeploymentStrategy {
            type_,
            rolling_update,
            in_place_update,
        },
    )
}

fn hub_deployment() -> impl Strategy<Value = mcm::MachineDeployment> {
    (
        meta(),
        (0i32..50, prop::option::of(selector()), hub_template(), prop::option::of(hub_strategy())),
        (
            0i32..100,
            prop::option::of(0i32..10),
            any::<bool>(),
            prop::option::of(0i64..5),
            prop::option::of(0i32..900),
            0i32..3,
        ),
    )
        .prop_map(
            |(metadata, (replicas, selector, template, strategy), (mrs, rhl, paused, rollback, pds, apf))| {
                mcm::MachineDeployment {
                    metadata,
                    spec: mcm::MachineDeploymentSpec {
                        replicas,
                        selector,
                        template,
                        strategy,
                        min_ready_seconds: mrs,
                        revision_history_limit: rhl,
                        paused,
                        rollback_to: rollback.map(|revision| mcm::RollbackConfig { revision }),
                        progress_deadline_seconds: pds,
                        auto_preserve_failed_machine_max: apf,
                    },
                    status: None,
                }
            },
        )
}

fn hub_set() -> impl Strategy<Value = mcm::MachineSet> {
    (
        meta(),
        0i32..50,
        prop::option::of(selector()),
        prop::option::of(class()),
        prop::option::of(hub_template()),
        0i32..100,
        0i32..3,
    )
        .prop_map(|(metadata, replicas, selector, machine_class, template, mrs, apf)| mcm::MachineSet {
            metadata,
            spec: mcm::MachineSetSpec {
                replicas,
                selector,
                machine_class,
                template,
                min_ready_seconds: mrs,
                auto_preserve_failed_machine_max: apf,
            },
            status: None,
        })
}

fn reference() -> impl Strategy<Value = ContractVersionedObjectReference> {
    ("[a-z.]{0,12}", "[A-Za-z]{0,10}", "[a-z0-9-]{0,8}")
        .prop_map(|(api_group, kind, name)| ContractVersionedObjectReference { api_group, kind, name })
}

fn capi_template() -> impl Strategy<Value = capi::MachineTemplateSpec> {
    let deletion = (prop::option::of(-3i32..100_000), prop::option::of(0i32..100), prop::option::of(0i32..100))
        .prop_map(|(d, v, n)| MachineDeletionSpec {
            node_drain_timeout_seconds: d,
            node_volume_detach_timeout_seconds: v,
            node_deletion_timeout_seconds: n,
        });
    let spec = (
        (word(), prop::option::of(reference()), prop::option::of(word()), reference()),
        (prop::option::of("v1\\.[0-9]{2}\\.[0-9]"), prop::option::of(word()), prop::option::of(word())),
        (prop::option::of(0i32..100), prop::option::of(deletion), extra()),
    )
        .prop_map(
            |((cluster_name, config_ref, secret, infra), (version, provider_id, fd), (mrs, deletion, extra))| {
                capi::MachineSpec {
                    cluster_name,
                    bootstrap: Bootstrap { config_ref, data_secret_name: secret },
                    infrastructure_ref: infra,
                    version,
                    provider_id,
                    failure_domain: fd,
                    min_ready_seconds: mrs,
                    deletion,
                    extra,
                }
            },
        );
    (template_meta(|labels, annotations| TemplateObjectMeta { labels, annotations }), spec)
        .prop_map(|(metadata, spec)| capi::MachineTemplateSpec { metadata, spec })
}

fn capi_deployment() -> impl Strategy<Value = capi::MachineDeployment> {
    let strategy =
        (prop_oneof![Just("RollingUpdate"), Just("OnDelete"), Just("Recreate"), Just("")], prop::option::of(update()))
            .prop_map(|(t, u)| capi::MachineDeploymentRolloutStrategy {
                type_: t.to_string(),
                rolling_update: u
                    .map(|u| capi::RollingUpdate { max_unavailable: u.max_unavailable, max_surge: u.max_surge }),
            });
    let rollout = (prop::option::of(word()), prop::option::of(strategy), extra())
        .prop_map(|(after, strategy, extra)| capi::MachineDeploymentRollout { after, strategy, extra });
    let deletion = prop::option::of(prop_oneof![Just("Random"), Just("Oldest"), Just("Newest")])
        .prop_map(|o| capi::MachineSetDeletionSpec { order: o.map(str::to_string) });
    (
        meta(),
        (word(), prop::option::of(0i32..50), selector(), capi_template()),
        (prop::option::of(rollout), prop::option::of(deletion), prop::option::of(any::<bool>()), extra()),
    )
        .prop_map(
            |(metadata, (cluster_name, replicas, selector, template), (rollout, deletion, paused, extra))| {
                capi::MachineDeployment {
                    metadata,
                    spec: capi::MachineDeploymentSpec {
                        cluster_name,
                        replicas,
                        selector,
                        template,
                        rollout,
                        deletion,
                        paused,
                        extra,
                    },
                    status: None,
                }
            },
        )
}

fn capi_set() -> impl Strategy<Value = capi::MachineSet> {
    let deletion = prop::option::of(prop_oneof![Just("Random"), Just("Oldest"), Just("Newest")])
        .prop_map(|o| capi::MachineSetDeletionSpec { order: o.map(str::to_string) });
    (meta(), word(), prop::option::of(0i32..50), selector(), capi_template(), prop::option::of(deletion), extra())
        .prop_map(|(metadata, cluster_name, replicas, selector, template, deletion, extra)| capi::MachineSet {
            metadata,
            spec: capi::MachineSetSpec { cluster_name, replicas, selector, template, deletion, extra },
            status: None,
        })
}

fn time() -> impl Strategy<Value = Time> {
    (0i64..2_000_000_000).prop_map(|s| Time(jiff::Timestamp::from_second(s).unwrap_or(jiff::Timestamp::UNIX_EPOCH)))
}

fn status_word() -> impl Strategy<Value = ConditionStatus> {
    prop_oneof![Just(ConditionStatus::True), Just(ConditionStatus::False), Just(ConditionStatus::Unknown)]
}

fn hub_set_status() -> impl Strategy<Value = mcm::MachineSetStatus> {
    use mcm::MachineSetConditionType as T;
    let condition = (
        prop_oneof![Just(T::ReplicaFailure), Just(T::Frozen)],
        status_word(),
        "[A-Z][a-zA-Z]{0,8}",
        "[a-z ]{1,10}",
        time(),
    )
        .prop_map(|(type_, status, reason, message, t)| mcm::MachineSetCondition {
            type_,
            status,
            last_transition_time: Some(t),
            reason: Some(reason),
            message: Some(message),
        });
    (0i32..20, 0i32..20, 0i32..20, prop::option::of(0i64..9), prop::option::of(prop::collection::vec(condition, 1..3)))
        .prop_map(|(replicas, ready, available, generation, conditions)| mcm::MachineSetStatus {
            replicas,
            fully_labeled_replicas: replicas,
            ready_replicas: ready,
            available_replicas: available,
            observed_generation: generation,
            machine_set_condition: conditions,
            ..Default::default()
        })
}

fn hub_deployment_status() -> impl Strategy<Value = mcm::MachineDeploymentStatus> {
    use mcm::MachineDeploymentConditionType as T;
    let types = prop_oneof![Just(T::Available), Just(T::Progressing), Just(T::ReplicaFailure), Just(T::Frozen)];
    let condition = (types, status_word(), "[A-Z][a-zA-Z]{0,8}", "[a-z ]{1,10}", time()).prop_map(
        |(type_, status, reason, message, t)| mcm::MachineDeploymentCondition {
            type_,
            status,
            last_update_time: Some(t.clone()),
            last_transition_time: Some(t),
            reason: Some(reason),
            message: Some(message),
        },
    );
    (
        0i32..20,
        0i32..20,
        0i32..20,
        0i32..20,
        prop::option::of(0i64..9),
        prop::option::of(prop::collection::vec(condition, 1..3)),
    )
        .prop_map(|(replicas, updated, ready, available, generation, conditions)| mcm::MachineDeploymentStatus {
            observed_generation: generation,
            replicas,
            updated_replicas: updated,
            ready_replicas: ready,
            available_replicas: available,
            unavailable_replicas: (replicas - available).max(0),
            conditions,
            ..Default::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn hub_template_round_trips(t in hub_template()) {
        prop_assert_eq!(template_from_capi(&template_to_capi(&t)), t);
    }

    #[test]
    fn capi_template_round_trips(t in capi_template()) {
        prop_assert_eq!(template_to_capi(&template_from_capi(&t)), t);
    }

    #[test]
    fn hub_deployment_round_trips(d in hub_deployment()) {
        let back = deployment_from_capi(&deployment_to_capi(&d));
        prop_assert_eq!((&back.metadata, &back.spec, &back.status), (&d.metadata, &d.spec, &d.status));
    }

    #[test]
    fn capi_deployment_round_trips(d in capi_deployment()) {
        let back = deployment_to_capi(&deployment_from_capi(&d));
        prop_assert_eq!((&back.metadata, &back.spec, &back.status), (&d.metadata, &d.spec, &d.status));
    }

    #[test]
    fn hub_machine_set_round_trips(s in hub_set()) {
        let back = machine_set_from_capi(&machine_set_to_capi(&s));
        prop_assert_eq!((&back.metadata, &back.spec, &back.status), (&s.metadata, &s.spec, &s.status));
    }

    #[test]
    fn capi_machine_set_round_trips(s in capi_set()) {
        let back = machine_set_to_capi(&machine_set_from_capi(&s));
        prop_assert_eq!((&back.metadata, &back.spec, &back.status), (&s.metadata, &s.spec, &s.status));
    }

    #[test]
    fn hub_set_status_round_trips(s in hub_set_status()) {
        prop_assert_eq!(set_status_from_capi(&set_status_to_capi(&s)), s);
    }

    #[test]
    fn hub_deployment_status_round_trips(s in hub_deployment_status()) {
        prop_assert_eq!(deployment_status_from_capi(&deployment_status_to_capi(&s)), s);
    }
}
