use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::json;

use super::*;

fn now() -> Timestamp {
    "2025-01-01T00:00:00Z".parse().unwrap()
}

fn cluster(extra: serde_json::Value) -> Cluster {
    let mut value = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "dev", "namespace": "ns", "uid": "cluster-uid", "generation": 2},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMCluster", "name": "dev"}},
    });
    json_patch::merge(&mut value, &extra);
    serde_json::from_value(value).unwrap()
}

fn infra(extra: serde_json::Value) -> MCMCluster {
    let mut value = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "MCMCluster",
        "metadata": {"name": "dev", "namespace": "ns"},
        "spec": {"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}},
    });
    json_patch::merge(&mut value, &extra);
    serde_json::from_value(value).unwrap()
}

fn ready(status: &str, reason: &str) -> serde_json::Value {
    json!({"type": "Ready", "status": status, "reason": reason, "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"})
}

fn cond<'a>(plan: &'a ClusterPlan, type_: &str) -> &'a Condition {
    plan.status.conditions.as_ref().unwrap().iter().find(|c| c.type_ == type_).unwrap()
}

#[test]
fn phases_follow_the_infrastructure_cluster() {
    let provisioned = infra(json!({"status": {
        "initialization": {"provisioned": true},
        "failureDomains": [{"name": "local-a"}],
        "conditions": [ready("True", "Provisioned")],
    }}));
    let waiting = infra(json!({"status": {"conditions": [ready("False", "WaitingForOwner")]}}));
    let fresh = infra(json!({}));
    let deleting = cluster(json!({"metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z", "finalizers": ["x"]}}));
    // (name, cluster, infra, phase, infrastructureProvisioned, InfrastructureReady (status, reason))
    type Row<'a> = (&'a str, Cluster, Option<&'a MCMCluster>, &'a str, Option<bool>, (&'a str, &'a str));
    let rows: [Row<'_>; 5] = [
        (
            "no MCMCluster",
            cluster(json!({})),
            None,
            phase::PENDING,
            None,
            ("False", reason::INFRASTRUCTURE_DOES_NOT_EXIST),
        ),
        (
            "fresh MCMCluster",
            cluster(json!({})),
            Some(&fresh),
            phase::PROVISIONING,
            None,
            ("False", reason::INFRASTRUCTURE_NOT_READY),
        ),
        (
            "waiting MCMCluster",
            cluster(json!({})),
            Some(&waiting),
            phase::PROVISIONING,
            None,
            ("False", "WaitingForOwner"),
        ),
        (
            "provisioned",
            cluster(json!({})),
            Some(&provisioned),
            phase::PROVISIONED,
            Some(true),
            ("True", "Provisioned"),
        ),
        ("deleting", deleting, Some(&provisioned), phase::DELETING, Some(true), ("True", "Provisioned")),
    ];
    for (name, c, i, want_phase, want_provisioned, (status, reason)) in rows {
        let plan = plan_cluster(&ClusterObservation { cluster: &c, infra: i, now: now() });
        assert_eq!(plan.status.phase.as_deref(), Some(want_phase), "{name}");
        let init = plan.status.initialization.as_ref().and_then(|i| i.infrastructure_provisioned);
        assert_eq!(init, want_provisioned, "{name}");
        let r = cond(&plan, condition_type::INFRASTRUCTURE_READY);
        assert_eq!((r.status.as_str(), r.reason.as_str()), (status, reason), "{name}");
        assert_eq!(cond(&plan, condition_type::PAUSED).status, "False", "{name}");
        assert_eq!(plan.status.observed_generation, Some(2), "{name}");
    }
    let plan =
        plan_cluster(&ClusterObservation { cluster: &cluster(json!({})), infra: Some(&provisioned), now: now() });
    assert_eq!(plan.status.failure_domains.unwrap()[0].name, "local-a");
}

#[test]
fn the_infrastructure_cluster_is_owned_once_and_its_endpoint_copied() {
    let c = cluster(json!({}));
    let plan = plan_cluster(&ClusterObservation { cluster: &c, infra: Some(&infra(json!({}))), now: now() });
    let owner = plan.own_infra.unwrap();
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("Cluster", "dev", "cluster-uid"));
    assert_eq!(owner.controller, Some(true));
    let endpoint = plan.control_plane_endpoint.unwrap();
    assert_eq!((endpoint.host.as_deref(), endpoint.port), (Some("10.0.0.1"), Some(6443)));

    let owned = infra(json!({"metadata": {"ownerReferences": [
        {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "dev", "uid": "cluster-uid", "controller": true}
    ]}}));
    let with_endpoint = cluster(json!({"spec": {"controlPlaneEndpoint": {"host": "1.2.3.4", "port": 443}}}));
    let plan = plan_cluster(&ClusterObservation { cluster: &with_endpoint, infra: Some(&owned), now: now() });
    assert_eq!(plan.own_infra, None, "already owned");
    assert_eq!(plan.control_plane_endpoint, None, "the Cluster's own endpoint wins");
}

#[test]
fn the_infrastructure_cluster_carries_the_cluster_name_label() {
    let c = cluster(json!({}));
    let plan = plan_cluster(&ClusterObservation { cluster: &c, infra: Some(&infra(json!({}))), now: now() });
    assert_eq!(plan.label_infra.as_deref(), Some("dev"));
    let labelled = infra(json!({"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "dev"}}}));
    let plan = plan_cluster(&ClusterObservation { cluster: &c, infra: Some(&labelled), now: now() });
    assert_eq!(plan.label_infra, None, "already labelled");
    let other = infra(json!({"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "old"}}}));
    let plan = plan_cluster(&ClusterObservation { cluster: &c, infra: Some(&other), now: now() });
    assert_eq!(plan.label_infra.as_deref(), Some("dev"), "the referencing Cluster's name wins");
}

#[test]
fn a_paused_cluster_only_reports_the_pause() {
    let c = cluster(json!({"spec": {"paused": true}}));
    let plan = plan_cluster(&ClusterObservation { cluster: &c, infra: Some(&infra(json!({}))), now: now() });
    assert_eq!(plan.own_infra, None);
    assert_eq!(plan.status.phase, None);
    assert_eq!(cond(&plan, condition_type::PAUSED).status, "True");
    let annotated = cluster(json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}}));
    assert!(paused(&annotated));
}

#[test]
fn provisioned_is_sticky_and_transition_times_are_kept() {
    let earlier = Time("2024-01-01T00:00:00Z".parse().unwrap());
    let c = cluster(json!({"status": {
        "initialization": {"infrastructureProvisioned": true},
        "conditions": [{"type": "Paused", "status": "False", "reason": "NotPaused", "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}],
    }}));
    let plan = plan_cluster(&ClusterObservation { cluster: &c, infra: Some(&infra(json!({}))), now: now() });
    assert_eq!(plan.status.phase.as_deref(), Some(phase::PROVISIONED));
    assert_eq!(cond(&plan, condition_type::PAUSED).last_transition_time, earlier);
}

#[test]
fn only_mcm_clusters_are_mirrored() {
    let other = cluster(
        json!({"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "dev"}}}),
    );
    assert_eq!(infra_name(&other), None);
    assert_eq!(infra_name(&cluster(json!({}))), Some("dev"));
}

#[test]
fn objects_of_a_cluster_get_its_name_label_once() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let meta = |label: Option<&str>| ObjectMeta {
        labels: label.map(|l| [(capi::CLUSTER_NAME_LABEL.to_string(), l.to_string())].into()),
        ..Default::default()
    };
    let patch = json!({"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "dev"}}});
    assert_eq!(cluster_label_patch(&meta(None), "dev"), Some(patch.clone()));
    assert_eq!(cluster_label_patch(&meta(Some("old")), "dev"), Some(patch));
    assert_eq!(cluster_label_patch(&meta(Some("dev")), "dev"), None);
    assert_eq!(cluster_label_patch(&meta(None), ""), None, "no cluster named");
}

#[test]
fn replica_counters_sum_deployments_standalone_workers_and_control_plane_machines() {
    let deployment = |replicas: i32, ready: i32| -> capi::MachineDeployment {
        serde_json::from_value(json!({
            "metadata": {"name": "md", "namespace": "ns"},
            "spec": {"clusterName": "dev", "replicas": replicas, "selector": {}, "template": {"spec": {
                "clusterName": "dev", "bootstrap": {}, "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "t"}}}},
            "status": {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready, "upToDateReplicas": replicas},
        }))
        .unwrap()
    };
    let machine = |name: &str, labels: serde_json::Value, owner: Option<&str>, ready: bool| -> capi::Machine {
        let status = if ready { "True" } else { "False" };
        let conditions: Vec<_> = ["Ready", "Available", "UpToDate"]
            .iter()
            .map(|t| json!({"type": t, "status": status, "reason": "R", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}))
            .collect();
        let owners: Vec<_> = owner
            .map(|kind| json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "name": "o", "uid": "u", "controller": true}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels, "ownerReferences": owners},
            "spec": {"clusterName": "dev", "bootstrap": {}, "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": name}},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    };
    let c = cluster(json!({}));
    let cp = json!({CONTROL_PLANE_LABEL: ""});
    let (d1, d2) = (deployment(3, 2), deployment(1, 1));
    let machines = [
        machine("cp-0", cp.clone(), None, true),
        machine("cp-1", cp, None, false),
        machine("lone", json!({}), None, true),
        machine("owned-by-cluster", json!({}), Some("Cluster"), false),
        machine("in-a-set", json!({}), Some("MachineSet"), true),
    ];
    let set = |owner: Option<&str>| -> capi::MachineSet {
        let owners: Vec<_> = owner
            .map(|kind| json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "name": "o", "uid": "u", "controller": true}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "ms", "namespace": "ns", "ownerReferences": owners},
            "spec": {"clusterName": "dev", "replicas": 2, "selector": {}, "template": {"spec": {
                "clusterName": "dev", "bootstrap": {}, "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "t"}}}},
            "status": {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "upToDateReplicas": 2},
        }))
        .unwrap()
    };
    // A stand-alone MachineSet counts; one of a MachineDeployment is already in the deployment's counters.
    let (alone, of_deployment) = (set(None), set(Some("MachineDeployment")));
    let counters: BTreeMap<_, _> =
        replica_counters(&c, &[&d1, &d2], &[&alone, &of_deployment], &machines.iter().collect::<Vec<_>>())
            .into_iter()
            .collect();
    assert_eq!(
        counters["workers"],
        json!({"desiredReplicas": 8, "replicas": 8, "readyReplicas": 5, "availableReplicas": 5, "upToDateReplicas": 7})
    );
    assert_eq!(
        counters["controlPlane"],
        json!({"desiredReplicas": 2, "replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "upToDateReplicas": 1})
    );
    // Nothing counted: no counters at all (describe shows empty columns, as for core).
    let empty: BTreeMap<_, _> = replica_counters(&c, &[], &[], &[]).into_iter().collect();
    assert_eq!((empty["workers"].clone(), empty["controlPlane"].clone()), (json!({}), json!({})));
    // A control plane provider reports its own counters.
    let provided = cluster(json!({"spec": {"controlPlaneRef": {"apiGroup": "g", "kind": "KCP", "name": "cp"}}}));
    assert!(replica_counters(&provided, &[], &[], &[]).iter().all(|(key, _)| *key != "controlPlane"));
}

#[test]
fn objects_are_paused_by_their_cluster_or_their_own_annotation() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let annotated = ObjectMeta {
        annotations: Some([(capi::PAUSED_ANNOTATION.to_string(), String::new())].into()),
        ..Default::default()
    };
    let plain = ObjectMeta::default();
    let (running, paused) = (cluster(json!({})), cluster(json!({"spec": {"paused": true}})));
    assert_eq!(paused_message(Some(&running), "Machine", &plain), None);
    assert_eq!(paused_message(None, "Machine", &plain), None);
    assert_eq!(paused_message(Some(&paused), "Machine", &plain).as_deref(), Some("Cluster spec.paused is set to true"));
    assert_eq!(
        paused_message(Some(&running), "MachineSet", &annotated).as_deref(),
        Some("MachineSet has the cluster.x-k8s.io/paused annotation")
    );
    assert_eq!(
        paused_message(Some(&paused), "Machine", &annotated).as_deref(),
        Some("Cluster spec.paused is set to true, Machine has the cluster.x-k8s.io/paused annotation")
    );
    // The Cluster's own annotation pauses the Cluster, not its objects (as core).
    let annotated_cluster = cluster(json!({"metadata": {"annotations": {capi::PAUSED_ANNOTATION: ""}}}));
    assert_eq!(paused_message(Some(&annotated_cluster), "Machine", &plain), None);
}

#[test]
fn no_empty_initialization_is_written_before_the_infrastructure_is_provisioned() {
    // The CRD wants at least one property in status.initialization; kube-apiserver and ours refuse `{}` with 422.
    for old in [json!({}), json!({"status": {"initialization": {}}})] {
        let c = cluster(old);
        let plan = plan_cluster(&ClusterObservation { cluster: &c, infra: None, now: now() });
        assert_eq!(plan.status.initialization, None);
        let written = serde_json::to_value(&plan.status).unwrap();
        assert!(written.get("initialization").is_none(), "{written}");
    }
}

#[test]
fn a_deployment_belongs_to_its_cluster_by_label_and_owner_reference() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    let dev = cluster(json!({}));
    let owner = |uid: &str| OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        name: "dev".into(),
        uid: uid.into(),
        controller: None,
        block_owner_deletion: None,
    };
    let meta = |labelled: bool, owners: Vec<OwnerReference>| ObjectMeta {
        labels: labelled.then(|| [(capi::CLUSTER_NAME_LABEL.to_string(), "dev".to_string())].into()),
        owner_references: Some(owners),
        resource_version: Some("5".into()),
        ..Default::default()
    };
    let owners_of = |p: &serde_json::Value| -> Option<Vec<String>> {
        let refs: Vec<OwnerReference> = serde_json::from_value(p["metadata"].get("ownerReferences")?.clone()).ok()?;
        Some(refs.into_iter().map(|r| r.uid).collect())
    };
    // Neither label nor owner: both, guarded.
    let p = deployment_membership_patch(&meta(false, vec![]), "dev", Some(&dev)).unwrap();
    assert_eq!(owners_of(&p), Some(vec!["cluster-uid".to_string()]));
    assert_eq!(p["metadata"]["labels"][capi::CLUSTER_NAME_LABEL], "dev");
    assert_eq!(p["metadata"]["resourceVersion"], "5");
    // An owner reference to an older Cluster of that name is replaced.
    let p = deployment_membership_patch(&meta(true, vec![owner("old")]), "dev", Some(&dev)).unwrap();
    assert_eq!(owners_of(&p), Some(vec!["cluster-uid".to_string()]));
    // Everything there: nothing to write.
    assert_eq!(deployment_membership_patch(&meta(true, vec![owner("cluster-uid")]), "dev", Some(&dev)), None);
    // No Cluster (yet): the label only.
    let p = deployment_membership_patch(&meta(false, vec![]), "dev", None).unwrap();
    assert_eq!(owners_of(&p), None);
    assert_eq!(deployment_membership_patch(&meta(true, vec![]), "dev", None), None);
}
