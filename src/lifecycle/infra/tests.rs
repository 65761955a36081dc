use super::*;
use crate::api::capi::{ClusterInitializationStatus, ClusterSpec, ClusterStatus};
use crate::api::mcm::{LastOperation, MachineStatus};
use crate::lifecycle::status::entering;

fn t(s: &str) -> Timestamp {
    format!("2025-01-01T{s}Z").parse().unwrap()
}

fn cluster(paused: Option<bool>, provisioned: Option<bool>) -> Cluster {
    let mut c = Cluster::new("c1", ClusterSpec { paused, ..Default::default() });
    c.status = Some(ClusterStatus {
        initialization: Some(ClusterInitializationStatus {
            infrastructure_provisioned: provisioned,
            ..Default::default()
        }),
        ..Default::default()
    });
    c
}

#[test]
fn pause_and_watch_filter() {
    let annotated = BTreeMap::from([(PAUSED_ANNOTATION.to_string(), String::new())]);
    let cases = [
        ("nothing", None, None, false),
        ("cluster paused", Some(cluster(Some(true), None)), None, true),
        ("cluster not paused", Some(cluster(Some(false), None)), None, false),
        ("annotation", Some(cluster(None, None)), Some(&annotated), true),
        ("annotation without cluster", None, Some(&annotated), true),
    ];
    for (name, c, a, want) in cases {
        assert_eq!(paused(c.as_ref(), a), want, "{name}");
    }
    let labelled = BTreeMap::from([(WATCH_FILTER_LABEL.to_string(), "a".to_string())]);
    assert!(passes_filter(None, None));
    assert!(passes_filter(Some("a"), Some(&labelled)));
    assert!(!passes_filter(Some("b"), Some(&labelled)));
    assert!(!passes_filter(Some("a"), None));
}

#[test]
fn orphans_of_a_class_are_held_while_a_cluster_using_it_is_paused_or_unknown() {
    let annotated = BTreeMap::from([(PAUSED_ANNOTATION.to_string(), String::new())]);
    let running = cluster(Some(false), Some(true));
    let unset = cluster(None, Some(true));
    let paused_spec = cluster(Some(true), Some(true));
    let mut paused_annotation = cluster(None, Some(true));
    paused_annotation.metadata.annotations = Some(annotated.clone());
    let user = |machine, annotations, cluster_name, cluster| ClassUser { machine, annotations, cluster_name, cluster };
    let active = user("ns/a", None, Some("c1"), Some(&running));
    // name, the class's users, held (a part of the reason) or collected (None)
    let cases: Vec<(&str, Vec<ClassUser<'_>>, Option<&str>)> = vec![
        ("no user", vec![], None),
        ("every Cluster runs", vec![active, user("ns/b", None, Some("c1"), Some(&unset))], None),
        (
            "the Cluster is paused (spec.paused)",
            vec![user("ns/b", None, Some("c1"), Some(&paused_spec))],
            Some("paused"),
        ),
        (
            "the Cluster is paused (annotation)",
            vec![user("ns/b", None, Some("c1"), Some(&paused_annotation))],
            Some("is paused"),
        ),
        ("the MCMMachine is paused", vec![user("ns/b", Some(&annotated), Some("c1"), Some(&running))], Some("paused")),
        ("the Cluster is gone or not there yet", vec![user("ns/b", None, Some("c1"), None)], Some("not found")),
        ("no cluster-name label", vec![user("ns/b", None, None, None)], Some("names no Cluster")),
        ("an empty cluster-name label", vec![user("ns/b", None, Some(""), Some(&running))], Some("names no Cluster")),
        (
            "one paused Cluster among running ones holds the class",
            vec![active, user("ns/b", None, Some("c2"), Some(&paused_spec)), active],
            Some("ns/b"),
        ),
    ];
    for (name, users, want) in cases {
        let got = orphan_collection_held(&users);
        match want {
            None => assert_eq!(got, None, "{name}"),
            Some(part) => assert!(got.as_deref().is_some_and(|r| r.contains(part)), "{name}: {got:?}"),
        }
    }
}

#[test]
fn the_gate_follows_the_contract_order() {
    let ready_cluster = cluster(None, Some(true));
    let pending_cluster = cluster(None, None);
    let all = Gate {
        owner_name: Some("m1"),
        owner_found: true,
        cluster_name: Some("c1"),
        cluster: Some(&ready_cluster),
        data_secret_name: Some("m1-bootstrap"),
        data_found: true,
        class_problem: None,
        has_vm: false,
    };
    let cases: Vec<(&str, Gate<'_>, Option<&str>)> = vec![
        ("all there", all.clone(), None),
        ("no owner reference", Gate { owner_name: None, ..all.clone() }, Some(reason::WAITING_FOR_OWNER)),
        ("owner not found", Gate { owner_found: false, ..all.clone() }, Some(reason::WAITING_FOR_OWNER)),
        ("no cluster label", Gate { cluster_name: None, ..all.clone() }, Some(reason::WAITING_FOR_CLUSTER)),
        ("no cluster", Gate { cluster: None, ..all.clone() }, Some(reason::WAITING_FOR_CLUSTER)),
        (
            "cluster infrastructure not provisioned",
            Gate { cluster: Some(&pending_cluster), ..all.clone() },
            Some(reason::WAITING_FOR_CLUSTER_INFRASTRUCTURE),
        ),
        (
            "no data secret name",
            Gate { data_secret_name: None, ..all.clone() },
            Some(reason::WAITING_FOR_BOOTSTRAP_DATA),
        ),
        (
            "empty data secret name",
            Gate { data_secret_name: Some(""), ..all.clone() },
            Some(reason::WAITING_FOR_BOOTSTRAP_DATA),
        ),
        ("no data secret", Gate { data_found: false, ..all.clone() }, Some(reason::WAITING_FOR_BOOTSTRAP_DATA)),
        ("class problem", Gate { class_problem: Some("x".into()), ..all.clone() }, Some(reason::INVALID_CLASS)),
        (
            "a VM exists: no more waiting for bootstrap data",
            Gate { has_vm: true, data_secret_name: None, cluster: Some(&pending_cluster), ..all.clone() },
            None,
        ),
        (
            "a VM exists, the owner still counts",
            Gate { has_vm: true, owner_name: None, ..all.clone() },
            Some(reason::WAITING_FOR_OWNER),
        ),
    ];
    for (name, g, want) in cases {
        assert_eq!(gate(&g).err().map(|w| w.reason), want, "{name}");
    }
}

fn hub(phase: Option<MachinePhase>, provider_id: Option<&str>, code: Option<&str>) -> Machine {
    let mut m = Machine::new("m1", Default::default());
    m.spec.provider_id = provider_id.map(str::to_string);
    m.status = Some(MachineStatus {
        current_status: phase.map(|p| entering(p, t("00:00:00"))),
        last_operation: Some(LastOperation {
            description: Some("Cloud provider message - boom".into()),
            error_code: code.map(str::to_string),
            ..Default::default()
        }),
        ..Default::default()
    });
    m
}

#[test]
fn ready_over_the_life_cycle() {
    let cases = [
        ("new", hub(None, None, None), false, reason::PROVISIONING),
        ("available", hub(Some(MachinePhase::Available), Some("p"), None), true, reason::PROVISIONED),
        (
            "crash loop",
            hub(Some(MachinePhase::CrashLoopBackOff), None, Some("ResourceExhausted")),
            false,
            reason::CRASH_LOOP_BACK_OFF,
        ),
        ("failed", hub(Some(MachinePhase::Failed), None, Some("InvalidArgument")), false, reason::FAILED),
        (
            "bad credentials",
            hub(Some(MachinePhase::CrashLoopBackOff), None, Some("Unauthenticated")),
            false,
            reason::INVALID_CREDENTIALS,
        ),
        ("denied", hub(Some(MachinePhase::Failed), None, Some("PermissionDenied")), false, reason::INVALID_CREDENTIALS),
        (
            "crash loop with a providerID",
            hub(Some(MachinePhase::CrashLoopBackOff), Some("p"), None),
            false,
            reason::CRASH_LOOP_BACK_OFF,
        ),
    ];
    for (name, m, ok, why) in cases {
        let (got_ok, got_reason, _) = ready(&m);
        assert_eq!((got_ok, got_reason), (ok, why), "{name}");
    }
    assert_eq!(deleting(None).1, reason::DELETING);
    assert_eq!(deleting(Some(&DriverError::new(Code::Unauthenticated, "no"))).1, reason::INVALID_CREDENTIALS);
    assert_eq!(deleting(Some(&DriverError::new(Code::Unavailable, "later"))).1, reason::DELETION_FAILED);
}

#[test]
fn conditions_move_their_transition_time_only_on_a_status_change() {
    let first = set_condition(None, "Ready", (false, "Provisioning", "m".into()), Some(1), t("00:00:01")).unwrap();
    assert_eq!(first[0].last_transition_time, Time(t("00:00:01")));
    assert_eq!(set_condition(Some(&first), "Ready", (false, "Provisioning", "m".into()), Some(1), t("00:00:02")), None);
    let reason_only =
        set_condition(Some(&first), "Ready", (false, "CrashLoopBackOff", "x".into()), Some(1), t("00:00:03")).unwrap();
    assert_eq!(reason_only[0].last_transition_time, Time(t("00:00:01")), "same status keeps the time");
    let flipped =
        set_condition(Some(&reason_only), "Ready", (true, "Provisioned", "".into()), Some(1), t("00:00:04")).unwrap();
    assert_eq!((flipped[0].status.as_str(), flipped[0].last_transition_time.clone()), ("True", Time(t("00:00:04"))));
    let both = set_condition(Some(&flipped), "Paused", paused_condition(false), Some(1), t("00:00:05")).unwrap();
    assert_eq!(both.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(), ["Ready", "Paused"]);
    let regenerated = set_condition(Some(&both), "Paused", paused_condition(false), Some(2), t("00:00:06")).unwrap();
    assert_eq!(regenerated[1].observed_generation, Some(2));
}

#[test]
fn template_status_from_the_type_and_the_node_template() {
    let q = |s: &str| Quantity(s.into());
    let derived = NodeCapacity::new(4, 16384, 1, "arm64").with_root_disk_gib(Some(50));
    let (capacity, info) = template_status(None, Some(&derived)).unwrap();
    assert_eq!(
        capacity,
        BTreeMap::from([
            ("cpu".to_string(), q("4")),
            ("ephemeral-storage".to_string(), q("50Gi")),
            ("memory".to_string(), q("16384Mi")),
            ("nvidia.com/gpu".to_string(), q("1")),
        ])
    );
    assert_eq!(info.architecture.as_deref(), Some("arm64"), "the type's architecture");
    // The node template overrides key by key, and its architecture wins.
    let t = NodeTemplate {
        capacity: BTreeMap::from([("memory".to_string(), q("15Gi")), ("pods".to_string(), q("58"))]),
        architecture: Some("amd64".into()),
        ..Default::default()
    };
    let (capacity, info) = template_status(Some(&t), Some(&derived)).unwrap();
    assert_eq!(capacity.get("memory"), Some(&q("15Gi")));
    assert_eq!(capacity.get("pods"), Some(&q("58")));
    assert_eq!(capacity.get("cpu"), Some(&q("4")));
    assert_eq!(info.architecture.as_deref(), Some("amd64"));
    assert_eq!(template_status(None, None), None);
}

#[test]
fn template_status_from_the_node_template() {
    assert_eq!(template_status(None, None), None);
    let t = NodeTemplate {
        capacity: BTreeMap::from([("cpu".to_string(), Quantity("4".into()))]),
        virtual_capacity: Some(BTreeMap::from([("example.com/gpu".to_string(), Quantity("1".into()))])),
        architecture: Some("arm64".into()),
        ..Default::default()
    };
    let (capacity, info) = template_status(Some(&t), None).unwrap();
    assert_eq!(capacity.keys().collect::<Vec<_>>(), ["cpu", "example.com/gpu"]);
    assert_eq!((info.architecture.as_deref(), info.operating_system.as_deref()), (Some("arm64"), Some("linux")));
    let (_, default_arch) = template_status(Some(&NodeTemplate::default()), None).unwrap();
    assert_eq!(default_arch.architecture.as_deref(), Some("amd64"));
}
