//! The test that `/metrics` shows MCM's families as `mcm_families.txt` lists them: every `filled` family with MCM's
//! name, type and label names once exercised, no `absent` one, and nothing else under an `mcm_` name but ours
//! (`mcm_controller_*`, `mcm_leader_election_master_status`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;

use super::{Metrics, ReconcileMetrics, ScrapeLabels, Step, metered};
use crate::api::mcm::{Machine, MachineDeployment, MachineSet};
use crate::providers::inmemory::{InMemoryCloud, InMemoryDriver, class};
use crate::providers::{DriverRegistry, MachineInfo, MachineRequest};

const LIST: &str = include_str!("mcm_families.txt");

/// One line of the list.
struct Listed {
    series: String,
    kind: String,
    labels: BTreeSet<String>,
    filled: bool,
}

fn listed() -> Vec<Listed> {
    LIST.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(cols.len(), 4, "four columns: {l}");
            let labels = if cols[2] == "-" { BTreeSet::new() } else { cols[2].split(',').map(String::from).collect() };
            assert!(matches!(cols[3], "filled" | "absent"), "{l}");
            Listed { series: cols[0].into(), kind: cols[1].into(), labels, filled: cols[3] == "filled" }
        })
        .collect()
}

/// A family as the exposition shows it: its type and the label names of its samples (`le` left out).
#[derive(Debug, Default)]
struct Shown {
    kind: String,
    labels: BTreeSet<BTreeSet<String>>,
}

/// The label names of a sample line's `{...}`.
fn label_names(labels: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let (mut name, mut in_value, mut escaped) = (String::new(), false, false);
    for c in labels.chars() {
        match (in_value, c) {
            (true, '\\') if !escaped => escaped = true,
            (true, '"') if !escaped => in_value = false,
            (true, _) => escaped = false,
            (false, '"') => in_value = true,
            (false, '=') => {
                names.insert(std::mem::take(&mut name));
            }
            (false, ',') => {}
            (false, c) => name.push(c),
        }
    }
    names.remove("le");
    names
}

/// The families of an OpenMetrics exposition, by the name a query uses (a counter's with `_total`).
fn parse(text: &str) -> BTreeMap<String, Shown> {
    let mut types = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            types.insert(name.to_string(), kind.to_string());
        }
    }
    let series = |name: &str, kind: &str| if kind == "counter" { format!("{name}_total") } else { name.to_string() };
    let mut shown: BTreeMap<String, Shown> = types
        .iter()
        .map(|(name, kind)| (series(name, kind), Shown { kind: kind.clone(), ..Default::default() }))
        .collect();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let end = line.find(['{', ' ']).unwrap();
        let sample = &line[..end];
        let labels = match line[end..].strip_prefix('{') {
            Some(rest) => label_names(&rest[..rest.rfind('}').unwrap()]),
            None => BTreeSet::new(),
        };
        // The family is the longest TYPE name the sample starts with.
        let family = types
            .iter()
            .filter(|(name, _)| sample.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(name, kind)| series(name, kind))
            .unwrap_or_else(|| panic!("a sample without a family: {line}"));
        shown.get_mut(&family).unwrap().labels.insert(labels);
    }
    shown
}

fn object<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).unwrap()
}

fn machine() -> Machine {
    object(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "shoot", "labels": {"name": "workers", "node": "n1"},
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"class": {"kind": "MachineClass", "name": "c"}, "providerID": "inmemory:///m1",
                 "nodeTemplate": {"metadata": {"labels": {"topology.kubernetes.io/zone": "zone-a"}}}},
        "status": {"currentStatus": {"phase": "Running"},
                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "Unknown"}]},
    }))
}

fn failed_machines() -> serde_json::Value {
    serde_json::json!([{"name": "m0", "providerID": "inmemory:///m0", "ownerRef": "workers-1",
                        "lastOperation": {"state": "Failed", "type": "Create", "description": "quota"}}])
}

fn machine_set() -> MachineSet {
    object(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "workers-1", "namespace": "shoot", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"replicas": 2, "minReadySeconds": 30,
                 "machineClass": {"kind": "MachineClass", "name": "c"}},
        "status": {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "fullyLabeledReplicas": 2,
                   "machineSetCondition": [{"type": "ReplicaFailure", "status": "True"}],
                   "failedMachines": failed_machines()},
    }))
}

fn machine_deployment() -> MachineDeployment {
    object(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": "workers", "namespace": "shoot", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"replicas": 2, "minReadySeconds": 30, "revisionHistoryLimit": 5, "progressDeadlineSeconds": 600,
                 "rollbackTo": {"revision": 3},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}},
                 "template": {"spec": {"class": {"kind": "MachineClass", "name": "c"}}}},
        "status": {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1,
                   "unavailableReplicas": 1, "collisionCount": 1,
                   "conditions": [{"type": "Available", "status": "False"}],
                   "failedMachines": failed_machines()},
    }))
}

/// `/metrics` after every family has had something to show.
async fn exercised() -> String {
    let metrics = Metrics::new();
    let reconcile = ReconcileMetrics::default();
    metrics.register_with(|registry| reconcile.register(registry));

    let mut drivers = DriverRegistry::new();
    drivers.register(Arc::new(InMemoryDriver::new(InMemoryCloud::with_seed(1))));
    let driver = metered(&drivers, &metrics.cloud).get("InMemory").unwrap();
    let request = MachineRequest {
        machine: MachineInfo { name: "m1".into(), namespace: "shoot".into(), ..Default::default() },
        class: class("c", "dev", serde_json::json!({})),
        ..Default::default()
    };
    driver.create_machine(&request).await.unwrap();
    let absent = MachineInfo { name: "absent".into(), namespace: "shoot".into(), ..Default::default() };
    driver.get_machine_status(&MachineRequest { machine: absent, ..request.clone() }).await.unwrap_err();

    let m = machine();
    for step in [Step::Create, Step::Initialize, Step::Join, Step::Delete] {
        reconcile.machines.record(step, &m, Some("m5.large"), Duration::from_secs(42));
    }
    reconcile.drained(&m, Duration::from_secs(7));
    reconcile.machines.failed_to_join(&m, Some("m5.large"));
    reconcile.machines.stale.inc();
    let kind = "Machine-count".to_string();
    metrics
        .scrape_failures
        .get_or_create(&ScrapeLabels { binary: "machine-controller-manager-provider".into(), kind })
        .inc();

    let mut ok = super::timed(&reconcile, "machine", |_: Arc<Machine>, fail: Arc<bool>| async move {
        if *fail { Err(()) } else { Ok(Action::await_change()) }
    });
    ok(Arc::new(m.clone()), Arc::new(false)).await.unwrap();
    ok(Arc::new(m.clone()), Arc::new(true)).await.unwrap_err();

    metrics.objects.show(vec![m], vec![machine_set()], vec![machine_deployment()]);
    metrics.encode()
}

#[tokio::test]
async fn metrics_show_mcms_families_as_listed() {
    let text = exercised().await;
    let shown = parse(&text);
    let mut problems = Vec::new();
    let list = listed();
    for l in &list {
        let Some(s) = shown.get(&l.series) else {
            if l.filled {
                problems.push(format!("{}: not shown", l.series));
            }
            continue;
        };
        if !l.filled {
            problems.push(format!("{}: listed absent but shown", l.series));
            continue;
        }
        // OpenMetrics counters end in `_total`: MCM's counter without it is shown untyped under MCM's name.
        let kind_ok = s.kind == l.kind || (l.kind == "counter" && !l.series.ends_with("_total") && s.kind == "unknown");
        if !kind_ok {
            problems.push(format!("{}: type {} (MCM's {})", l.series, s.kind, l.kind));
        }
        let expected: BTreeSet<BTreeSet<String>> = [l.labels.clone()].into();
        if s.labels != expected {
            problems.push(format!("{}: labels {:?} (MCM's {:?})", l.series, s.labels, l.labels));
        }
    }
    let listed_names: BTreeSet<&str> = list.iter().map(|l| l.series.as_str()).collect();
    for name in shown.keys() {
        let ours = name.starts_with("mcm_controller_") || name == "mcm_leader_election_master_status";
        if name.starts_with("mcm_") && !ours && !listed_names.contains(name.as_str()) {
            problems.push(format!("{name}: an mcm_ name that is neither MCM's nor ours"));
        }
    }
    assert!(problems.is_empty(), "{}\n\n{text}", problems.join("\n"));
}

#[tokio::test]
async fn object_families_carry_mcms_values() {
    let text = exercised().await;
    for series in [
        r#"mcm_machine_info{name="m1",namespace="shoot",createdAt="1767225600",spec_provider_id="inmemory:///m1",spec_class_api_group="",spec_class_kind="MachineClass",spec_class_name="c",node_name="n1"} 1"#,
        r#"mcm_machine_status_condition{name="m1",namespace="shoot",condition="DiskPressure"} 2"#,
        r#"mcm_machine_current_status_phase{name="m1",namespace="shoot"} 1"#,
        r#"mcm_machine_set_status_condition{name="workers-1",namespace="shoot",condition="ReplicaFailure"} 1"#,
        r#"mcm_machine_set_info_spec_min_ready_seconds{name="workers-1",namespace="shoot"} 30"#,
        r#"mcm_machine_deployment_info{name="workers",namespace="shoot",createdAt="1767225600",spec_strategy_type="RollingUpdate"} 1"#,
        r#"mcm_machine_deployment_info_spec_rolling_update_max_surge{name="workers",namespace="shoot"} 1"#,
        r#"mcm_machine_deployment_info_spec_rolling_update_max_unavailable{name="workers",namespace="shoot"} 0"#,
        r#"mcm_machine_deployment_info_spec_rollback_to_revision{name="workers",namespace="shoot"} 3"#,
        r#"mcm_machine_deployment_status_condition{name="workers",namespace="shoot",condition="Available"} 0"#,
        r#"mcm_machine_deployment_failed_machines{name="workers",namespace="shoot",failed_machine_name="m0",failed_machine_provider_id="inmemory:///m0",failed_machine_owner_ref="workers-1",failed_machine_last_operation_state="Failed",failed_machine_last_operation_machine_operation_type="Create"} 1"#,
        r#"mcm_machine_join_duration_seconds{namespace="shoot",machine_deployment="workers",instance_type="m5.large",zone="zone-a"} 42.0"#,
        "mcm_machine_stale_machines_total 1",
    ] {
        assert!(text.contains(series), "{series}\n\n{text}");
    }
}

#[test]
fn the_list_is_well_formed() {
    let list = listed();
    let names: BTreeSet<&str> = list.iter().map(|l| l.series.as_str()).collect();
    assert_eq!(names.len(), list.len(), "no family twice");
    assert!(list.iter().all(|l| matches!(l.kind.as_str(), "counter" | "gauge" | "histogram")));
    assert!(names.contains("mcm_cloud_api_driver_request_duration_seconds"));
}
