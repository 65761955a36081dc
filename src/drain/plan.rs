//! The pure half of a drain: which pods are left alone, deleted, evicted in parallel or one at a time, which
//! persistent volumes to wait for, which PodDisruptionBudgets can never let a pod go, and whether a volume still
//! shows as attached. No I/O here, so every rule is table-tested.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::core::{Selector, SelectorExt};

/// The annotation the kubelet puts on mirror pods (the API's view of static pods; deleting them does nothing).
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The termination grace period of a pod that sets none (the API server's default).
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(30);

/// Why a pod stays on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// Controlled by a DaemonSet, which would put it straight back (and tolerates the cordon).
    DaemonSet,
    /// A mirror pod: the kubelet owns the static pod behind it.
    Mirror,
}

/// A persistent volume a pod uses that the drain may wait for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlannedVolume {
    /// The PersistentVolume's name (what `VolumeAttachment.spec.source.persistentVolumeName` refers to).
    pub persistent_volume: String,
    /// Its spec, for the driver's `get_volume_ids`.
    pub spec: PersistentVolumeSpec,
    /// The cloud volume ID the driver gave; `None` when the volume is not the driver's (or not yet asked).
    pub volume_id: Option<String>,
}

/// A pod the drain acts on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlannedPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID: evictions and deletions are preconditioned on it, so a replacement with the same name is never hit.
    pub uid: Option<String>,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// `spec.terminationGracePeriodSeconds`, or [`DEFAULT_GRACE_PERIOD`].
    pub grace_period: Duration,
    /// Whether a controller owns it (so something will start a replacement elsewhere).
    pub controlled: bool,
    /// Persistent volumes only this pod uses on the node (shared ones are left out: they stay attached).
    pub volumes: Vec<PlannedVolume>,
}

impl PlannedPod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The cloud volume IDs to see detached before the next pod is evicted.
    pub fn volume_ids(&self) -> Vec<&str> {
        self.volumes.iter().filter_map(|v| v.volume_id.as_deref()).collect()
    }
}

/// What to do with each pod of a node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainPlan {
    /// Pods left alone (`namespace/name`).
    pub skipped: Vec<(String, SkipReason)>,
    /// Succeeded or Failed pods: deleted without eviction (no budget counts them).
    pub finished: Vec<PlannedPod>,
    /// Pods without persistent volume claims: evicted all at once.
    pub parallel: Vec<PlannedPod>,
    /// Pods with persistent volume claims: evicted one at a time, highest priority first.
    pub serial: Vec<PlannedPod>,
}

impl DrainPlan {
    /// Every pod the drain acts on.
    pub fn pods(&self) -> impl Iterator<Item = &PlannedPod> {
        self.finished.iter().chain(&self.parallel).chain(&self.serial)
    }
}

/// Why `pod` must stay, if it must.
pub fn skip_reason(pod: &Pod) -> Option<SkipReason> {
    let meta = &pod.metadata;
    if meta.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION)) {
        return Some(SkipReason::Mirror);
    }
    let by_daemon_set =
        meta.owner_references.iter().flatten().any(|owner| owner.controller == Some(true) && owner.kind == "DaemonSet");
    by_daemon_set.then_some(SkipReason::DaemonSet)
}

/// The persistent volume claims `pod` mounts: named ones, and those generic ephemeral volumes create
/// (`<pod>-<volume>`).
pub fn claim_names(pod: &Pod) -> Vec<String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let mut names: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|spec| spec.volumes.iter().flatten())
        .filter_map(|volume| {
            if let Some(claim) = &volume.persistent_volume_claim {
                Some(claim.claim_name.clone())
            } else {
                volume.ephemeral.as_ref().map(|_| format!("{pod_name}-{}", volume.name))
            }
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

fn is_finished(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or_default()
}

/// Decides what to do with the pods of a node. `claims` and `volumes` are the claims the pods mount and the volumes
/// bound to them (those missing are simply not waited for).
pub fn plan(pods: &[Pod], claims: &[PersistentVolumeClaim], volumes: &[PersistentVolume]) -> DrainPlan {
    let bound: BTreeMap<(&str, &str), &str> = claims
        .iter()
        .filter_map(|c| {
            let ns = c.metadata.namespace.as_deref()?;
            let name = c.metadata.name.as_deref()?;
            let pv = c.spec.as_ref()?.volume_name.as_deref().filter(|v| !v.is_empty())?;
            Some(((ns, name), pv))
        })
        .collect();
    let volumes: BTreeMap<&str, &PersistentVolume> =
        volumes.iter().filter_map(|v| Some((v.metadata.name.as_deref()?, v))).collect();
    let pv_names = |pod: &Pod| -> BTreeSet<&str> {
        let ns = namespace(pod);
        claim_names(pod).iter().filter_map(|claim| bound.get(&(ns, claim.as_str())).copied()).collect()
    };

    // A volume another pod on the node keeps using (a skipped one included) stays attached: never wait for it.
    // Finished pods hold no attachment.
    let mut users: BTreeMap<&str, usize> = BTreeMap::new();
    for pod in pods.iter().filter(|p| !is_finished(p)) {
        for pv in pv_names(pod) {
            *users.entry(pv).or_default() += 1;
        }
    }

    let mut plan = DrainPlan::default();
    for pod in pods {
        let key = format!("{}/{}", namespace(pod), pod.metadata.name.as_deref().unwrap_or_default());
        if let Some(reason) = skip_reason(pod) {
            plan.skipped.push((key, reason));
            continue;
        }
        let spec = pod.spec.as_ref();
        let grace = spec
            .and_then(|s| s.termination_grace_period_seconds)
            .map_or(DEFAULT_GRACE_PERIOD, |s| Duration::from_secs(s.max(0).unsigned_abs()));
        let planned = PlannedPod {
            namespace: namespace(pod).to_string(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone(),
            priority: spec.and_then(|s| s.priority).unwrap_or(0),
            grace_period: grace,
            controlled: pod.metadata.owner_references.iter().flatten().any(|o| o.controller == Some(true)),
            volumes: pv_names(pod)
                .into_iter()
                .filter(|pv| users.get(pv) == Some(&1))
                .filter_map(|pv| volumes.get(pv))
                .map(|pv| PlannedVolume {
                    persistent_volume: pv.metadata.name.clone().unwrap_or_default(),
                    spec: pv.spec.clone().unwrap_or_default(),
                    volume_id: None,
                })
                .collect(),
        };
        if is_finished(pod) {
            plan.finished.push(planned);
        } else if claim_names(pod).is_empty() {
            plan.parallel.push(planned);
        } else {
            plan.serial.push(planned);
        }
    }
    plan.serial.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.key().cmp(&b.key())));
    plan
}

/// The cloud volume ID in a driver's answer for one persistent volume: the first non-empty one (empty means "not
/// mine").
pub fn volume_id(answer: Vec<String>) -> Option<String> {
    answer.into_iter().find(|id| !id.is_empty())
}

/// Whether the budget can never let a pod go: its status is current, it expects pods, all of them are healthy,
/// none is being disrupted, and still it allows no disruption (e.g. `minAvailable` equal to the replica count).
/// Retrying against it only loads the API server.
pub fn is_misconfigured(pdb: &PodDisruptionBudget) -> bool {
    let Some(status) = &pdb.status else { return false };
    let observed = matches!((pdb.metadata.generation, status.observed_generation), (Some(g), Some(o)) if g == o);
    let expected = status.expected_pods.unwrap_or(0);
    observed
        && expected > 0
        && status.current_healthy.unwrap_or(0) >= expected
        && status.disrupted_pods.as_ref().is_none_or(BTreeMap::is_empty)
        && status.disruptions_allowed.unwrap_or(0) == 0
}

/// Whether the budget selects the pod (policy/v1: an empty selector selects every pod of the namespace, a missing
/// one none).
pub fn covers(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    if pdb.metadata.namespace.as_deref().unwrap_or_default() != namespace(pod) {
        return false;
    }
    let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.clone()) else { return false };
    let Ok(selector) = Selector::try_from(selector) else { return false };
    selector.matches(pod.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
}

/// The first misconfigured budget (`namespace/name`) covering the pod, if any.
pub fn misconfigured_budget(pod: &Pod, budgets: &[PodDisruptionBudget]) -> Option<String> {
    budgets.iter().find(|pdb| covers(pdb, pod) && is_misconfigured(pdb)).map(|pdb| {
        format!(
            "{}/{}",
            pdb.metadata.namespace.as_deref().unwrap_or_default(),
            pdb.metadata.name.as_deref().unwrap_or_default()
        )
    })
}

/// The names in `node.status.volumesAttached`.
pub fn attached_volume_names(node: &Node) -> Vec<String> {
    node.status.iter().flat_map(|s| s.volumes_attached.iter().flatten()).map(|v| v.name.clone()).collect()
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// Whether an attached-volume name (`kubernetes.io/csi/<driver>^<handle>`, `kubernetes.io/aws-ebs/aws://zone/vol-1`
/// ...) names the volume ID. Like MCM a substring match, but only at boundaries, so `vol-1` does not match `vol-10`.
pub fn names_volume(attached_name: &str, volume_id: &str) -> bool {
    if volume_id.is_empty() {
        return false;
    }
    attached_name.match_indices(volume_id).any(|(at, _)| {
        let before = attached_name[..at].chars().next_back();
        let after = attached_name[at + volume_id.len()..].chars().next();
        !before.is_some_and(is_id_char) && !after.is_some_and(is_id_char)
    })
}

/// The volume IDs among `volume_ids` that `attached` (the node's attached-volume names) still names.
pub fn still_attached(attached: &[String], volume_ids: &[&str]) -> Vec<String> {
    volume_ids.iter().filter(|id| attached.iter().any(|name| names_volume(name, id))).map(|id| id.to_string()).collect()
}

/// Whether a VolumeAttachment shows the persistent volume attached to a node other than `node`.
pub fn attached_elsewhere(attachments: &[VolumeAttachment], persistent_volume: &str, node: &str) -> bool {
    attachments.iter().any(|va| {
        va.spec.node_name != node
            && va.spec.source.persistent_volume_name.as_deref() == Some(persistent_volume)
            && va.status.as_ref().is_some_and(|s| s.attached)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn pod(name: &str, extra: Value) -> Pod {
        let mut pod = json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"},
        });
        json_patch::merge(&mut pod, &extra);
        serde_json::from_value(pod).unwrap()
    }

    fn with_claims(name: &str, claims: &[&str], priority: Option<i32>) -> Pod {
        let volumes: Vec<Value> =
            claims.iter().map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}})).collect();
        pod(name, json!({"spec": {"volumes": volumes, "priority": priority}}))
    }

    fn claim(name: &str, pv: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"volumeName": pv}}))
            .unwrap()
    }

    fn volume(name: &str) -> PersistentVolume {
        serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"csi": {"driver": "d", "volumeHandle": name}}}),
        )
        .unwrap()
    }

    fn keys(pods: &[PlannedPod]) -> Vec<String> {
        pods.iter().map(PlannedPod::key).collect()
    }

    #[test]
    fn pods_are_sorted_into_skipped_finished_parallel_and_serial() {
        let daemon = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true}]}});
        let replica = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]}});
        // A DaemonSet that merely co-owns the pod does not make it a DaemonSet pod.
        let not_controller = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}]}});
        let pods = vec![
            pod("ds", daemon),
            pod("mirror", json!({"metadata": {"annotations": {MIRROR_POD_ANNOTATION: "x"}}})),
            pod("web", replica),
            pod("bare", json!({})),
            pod("co-owned", not_controller),
            pod("done", json!({"status": {"phase": "Succeeded"}})),
            pod("crashed", json!({"status": {"phase": "Failed"}})),
            with_claims("db", &["data"], None),
        ];
        let plan = plan(&pods, &[], &[]);
        assert_eq!(
            plan.skipped,
            vec![("default/ds".to_string(), SkipReason::DaemonSet), ("default/mirror".to_string(), SkipReason::Mirror)]
        );
        assert_eq!(keys(&plan.finished), ["default/done", "default/crashed"]);
        assert_eq!(keys(&plan.parallel), ["default/web", "default/bare", "default/co-owned"]);
        assert_eq!(keys(&plan.serial), ["default/db"]);
        assert!(plan.parallel[0].controlled && !plan.parallel[1].controlled && !plan.parallel[2].controlled);
        assert_eq!(plan.pods().count(), 6);
    }

    #[test]
    fn serial_pods_go_highest_priority_first() {
        let pods = vec![
            with_claims("low", &["a"], Some(-5)),
            with_claims("unset", &["b"], None),
            with_claims("high", &["c"], Some(1000)),
            with_claims("also-high", &["d"], Some(1000)),
        ];
        let plan = plan(&pods, &[], &[]);
        assert_eq!(keys(&plan.serial), ["default/also-high", "default/high", "default/unset", "default/low"]);
    }

    #[test]
    fn grace_periods_default_to_thirty_seconds() {
        let cases = [(json!({}), 30), (json!({"spec": {"terminationGracePeriodSeconds": 5}}), 5)];
        for (extra, seconds) in cases {
            let plan = plan(&[pod("p", extra)], &[], &[]);
            assert_eq!(plan.parallel[0].grace_period, Duration::from_secs(seconds));
        }
    }

    #[test]
    fn claims_include_generic_ephemeral_volumes() {
        let p = pod(
            "app",
            json!({"spec": {"volumes": [
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "cfg", "configMap": {"name": "cfg"}},
            ]}}),
        );
        assert_eq!(claim_names(&p), ["app-scratch", "data"]);
    }

    #[test]
    fn only_volumes_one_pod_uses_are_waited_for() {
        let pods = vec![
            with_claims("a", &["own-a", "shared"], None),
            with_claims("b", &["shared", "unbound", "missing-pv"], None),
            // The DaemonSet pod keeps its volume attached, so a's use of it is not waited for either.
            pod(
                "ds",
                json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d",
                    "uid": "u", "controller": true}]},
                    "spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "ds-vol"}}]}}),
            ),
            with_claims("c", &["ds-vol"], None),
            // A finished pod holds no attachment.
            pod(
                "old",
                json!({"status": {"phase": "Succeeded"},
                    "spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "own-b"}}]}}),
            ),
            with_claims("d", &["own-b"], None),
        ];
        let claims = vec![
            claim("own-a", "pv-a"),
            claim("shared", "pv-shared"),
            claim("ds-vol", "pv-ds"),
            claim("missing-pv", "pv-gone"),
            claim("own-b", "pv-b"),
            serde_json::from_value(json!({"metadata": {"name": "unbound", "namespace": "default"}, "spec": {}}))
                .unwrap(),
        ];
        let volumes = vec![volume("pv-a"), volume("pv-shared"), volume("pv-ds"), volume("pv-b")];
        let plan = plan(&pods, &claims, &volumes);
        let waited: Vec<(String, Vec<String>)> = plan
            .serial
            .iter()
            .map(|p| (p.name.clone(), p.volumes.iter().map(|v| v.persistent_volume.clone()).collect()))
            .collect();
        let expected: Vec<(String, Vec<String>)> = vec![
            ("a".into(), vec!["pv-a".into()]),
            ("b".into(), vec![]),
            ("c".into(), vec![]),
            ("d".into(), vec!["pv-b".into()]),
        ];
        assert_eq!(waited, expected);
        assert_eq!(plan.serial[0].volumes[0].spec.csi.as_ref().unwrap().volume_handle, "pv-a");
    }

    #[test]
    fn claims_are_looked_up_in_the_pods_namespace() {
        let mut other = claim("data", "pv-other");
        other.metadata.namespace = Some("other".into());
        let plan = plan(&[with_claims("a", &["data"], None)], &[other], &[volume("pv-other")]);
        assert!(plan.serial[0].volumes.is_empty());
    }

    #[test]
    fn driver_answers_map_to_one_volume_id() {
        let cases: [(Vec<&str>, Option<&str>); 4] =
            [(vec![], None), (vec![""], None), (vec!["vol-1"], Some("vol-1")), (vec!["", "vol-2"], Some("vol-2"))];
        for (answer, expected) in cases {
            let answer: Vec<String> = answer.into_iter().map(String::from).collect();
            assert_eq!(volume_id(answer.clone()).as_deref(), expected, "{answer:?}");
        }
    }

    fn pdb(extra: Value) -> PodDisruptionBudget {
        let mut pdb = json!({
            "metadata": {"name": "web", "namespace": "default", "generation": 2},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": 2, "expectedPods": 2, "currentHealthy": 2, "desiredHealthy": 2,
                "disruptionsAllowed": 0},
        });
        json_patch::merge(&mut pdb, &extra);
        serde_json::from_value(pdb).unwrap()
    }

    #[test]
    fn misconfigured_budgets_are_recognised() {
        let cases = [
            ("all healthy, none allowed", json!({}), true),
            ("more healthy than expected", json!({"status": {"currentHealthy": 3}}), true),
            ("an old status", json!({"status": {"observedGeneration": 1}}), false),
            ("no observed generation", json!({"status": {"observedGeneration": null}}), false),
            ("no pods expected", json!({"status": {"expectedPods": 0, "currentHealthy": 0}}), false),
            ("one unhealthy", json!({"status": {"currentHealthy": 1}}), false),
            ("a pod being disrupted", json!({"status": {"disruptedPods": {"p": "2024-01-01T00:00:00Z"}}}), false),
            ("a disruption allowed", json!({"status": {"disruptionsAllowed": 1}}), false),
            ("no status", json!({"status": null}), false),
        ];
        for (what, extra, expected) in cases {
            assert_eq!(is_misconfigured(&pdb(extra)), expected, "{what}");
        }
    }

    #[test]
    fn a_misconfigured_budget_counts_only_for_the_pods_it_covers() {
        let web = pod("w", json!({"metadata": {"labels": {"app": "web"}}}));
        let db = pod("d", json!({"metadata": {"labels": {"app": "db"}}}));
        let elsewhere = pdb(json!({"metadata": {"namespace": "other"}}));
        assert_eq!(misconfigured_budget(&web, std::slice::from_ref(&elsewhere)), None);
        assert_eq!(misconfigured_budget(&web, &[elsewhere, pdb(json!({}))]).as_deref(), Some("default/web"));
        assert_eq!(misconfigured_budget(&db, &[pdb(json!({}))]), None);
        let everything = pdb(json!({"spec": {"selector": {"matchLabels": null}}}));
        assert!(covers(&everything, &db), "an empty selector selects the whole namespace");
        let nothing = pdb(json!({"spec": {"selector": null}}));
        assert!(!covers(&nothing, &db), "a missing selector selects nothing");
        let expression = pdb(json!({"spec": {"selector": {"matchLabels": null, "matchExpressions": [
                {"key": "app", "operator": "In", "values": ["db", "cache"]}]}}}));
        assert!(covers(&expression, &db) && !covers(&expression, &web));
    }

    #[test]
    fn volume_ids_match_attached_names_at_boundaries() {
        let cases = [
            ("kubernetes.io/csi/inmemory.csi.mcm.dev^vol-1", "vol-1", true),
            ("kubernetes.io/csi/inmemory.csi.mcm.dev^vol-10", "vol-1", false),
            ("kubernetes.io/csi/inmemory.csi.mcm.dev^avol-1", "vol-1", false),
            ("kubernetes.io/aws-ebs/aws://eu-west-1a/vol-0abc", "vol-0abc", true),
            ("kubernetes.io/csi/disk.csi.azure.com^/subscriptions/s/disks/disk-7", "disk-7", true),
            ("vol-1", "vol-1", true),
            ("kubernetes.io/csi/d^vol-1x^vol-1", "vol-1", true),
            ("kubernetes.io/csi/d^vol-1", "", false),
        ];
        for (name, id, expected) in cases {
            assert_eq!(names_volume(name, id), expected, "{name} ~ {id}");
        }
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {"volumesAttached": [
            {"name": "kubernetes.io/csi/d^vol-1", "devicePath": ""},
            {"name": "kubernetes.io/csi/d^vol-3", "devicePath": ""},
        ]}}))
        .unwrap();
        let attached = attached_volume_names(&node);
        assert_eq!(still_attached(&attached, &["vol-1", "vol-2", "vol-3"]), ["vol-1", "vol-3"]);
        assert!(still_attached(&attached_volume_names(&Node::default()), &["vol-1"]).is_empty());
    }

    #[test]
    fn reattachment_needs_an_attached_volume_attachment_on_another_node() {
        let va = |node: &str, pv: &str, attached: Option<bool>| -> VolumeAttachment {
            serde_json::from_value(json!({
                "metadata": {"name": format!("{node}-{pv}")},
                "spec": {"attacher": "d", "nodeName": node, "source": {"persistentVolumeName": pv}},
                "status": attached.map(|a| json!({"attached": a})),
            }))
            .unwrap()
        };
        let cases = [
            (vec![va("n2", "pv-1", Some(true))], true),
            (vec![va("n1", "pv-1", Some(true))], false),
            (vec![va("n2", "pv-1", Some(false))], false),
            (vec![va("n2", "pv-1", None)], false),
            (vec![va("n2", "pv-2", Some(true))], false),
            (vec![va("n1", "pv-1", Some(true)), va("n3", "pv-1", Some(true))], true),
        ];
        for (attachments, expected) in cases {
            assert_eq!(attached_elsewhere(&attachments, "pv-1", "n1"), expected, "{attachments:?}");
        }
    }
}
