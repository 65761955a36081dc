//! The Machine's node template on its Node, as MCM's three-way merge (`docs/machine-lifecycle.md` "Node template
//! sync"): labels, annotations and taints the template lists are set; those applied before (recorded in the
//! `last-applied-anno-labels-taints` annotation) and no longer listed are removed; everything else on the Node is
//! left alone. Taints are keyed by key and effect. The Node also gets the machine-name label.
//!
//! The class's `nodeTemplate.virtualCapacity` (extended resources no device plugin reports) goes into the Node's
//! `status.capacity` the same way ([`virtual_capacity_patch`]), recorded in `last-applied-virtual-capacity`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Map, Value, json};

use crate::api::mcm::NodeTemplateSpec;
use crate::api::mcm::names::{
    LAST_APPLIED_ANNOTATION, LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION, MACHINE_NAME_LABEL, NODE_FINALIZER,
};

fn template_labels(t: &NodeTemplateSpec) -> BTreeMap<String, String> {
    t.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default()
}

fn template_annotations(t: &NodeTemplateSpec) -> BTreeMap<String, String> {
    t.metadata.as_ref().and_then(|m| m.annotations.clone()).unwrap_or_default()
}

fn template_taints(t: &NodeTemplateSpec) -> Vec<Taint> {
    t.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default()
}

/// What the three-way merge reads from a template.
fn content(t: &NodeTemplateSpec) -> (BTreeMap<String, String>, BTreeMap<String, String>, Vec<Taint>) {
    (template_labels(t), template_annotations(t), template_taints(t))
}

/// Desired keys over `current`, dropping keys applied before and no longer desired. Returns the merge-patch
/// entries (value or `null`) for what changes.
fn merge_map(
    current: &BTreeMap<String, String>,
    desired: &BTreeMap<String, String>,
    last_applied: &BTreeMap<String, String>,
) -> Map<String, Value> {
    let mut changes = Map::new();
    for key in last_applied.keys() {
        if !desired.contains_key(key) && current.contains_key(key) {
            changes.insert(key.clone(), Value::Null);
        }
    }
    for (key, value) in desired {
        if current.get(key) != Some(value) {
            changes.insert(key.clone(), Value::String(value.clone()));
        }
    }
    changes
}

/// The Node's taints after the merge (the Node's order kept, new taints appended in template order), or `None`
/// when they do not change.
fn merge_taints(current: &[Taint], desired: &[Taint], last_applied: &[Taint]) -> Option<Vec<Taint>> {
    let same_key = |a: &Taint, b: &Taint| a.key == b.key && a.effect == b.effect;
    let mut merged: Vec<Taint> = current
        .iter()
        .filter(|t| {
            let dropped = last_applied.iter().any(|l| same_key(l, t)) && !desired.iter().any(|d| same_key(d, t));
            !dropped
        })
        .map(|t| desired.iter().find(|d| same_key(d, t)).cloned().unwrap_or_else(|| t.clone()))
        .collect();
    for d in desired {
        if !merged.iter().any(|m| same_key(m, d)) {
            merged.push(d.clone());
        }
    }
    (merged != current).then_some(merged)
}

/// Whether the Node of a machine that is not being deleted still needs MCM's node finalizer: it holds a Node that
/// `kubectl delete node` removes until the deletion flow of its Machine has drained it and deleted the VM (MCM's
/// `addNodeFinalizers`). Never on a Node being deleted (the API server refuses new finalizers then).
pub fn needs_finalizer(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_none()
        && !node.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == NODE_FINALIZER))
}

/// The merge patch that brings `node` in line with `template` and names `machine_name` on it, or `None` when it
/// already is. A taint change carries the Node's resourceVersion: taints are one list, so a concurrent change
/// must fail (409) rather than be overwritten.
pub fn node_patch(node: &Node, machine_name: &str, template: Option<&NodeTemplateSpec>) -> Option<Value> {
    let empty = NodeTemplateSpec::default();
    let template = template.unwrap_or(&empty);
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    let recorded = annotations.get(LAST_APPLIED_ANNOTATION);
    // An unreadable record is treated as empty (MCM retries forever on it); it is rewritten below.
    let parsed: Option<NodeTemplateSpec> = recorded.and_then(|text| serde_json::from_str(text).ok());
    // Compared by content: MCM's record (`creationTimestamp: null`, `spec: {}`) reads the same as ours.
    let recorded_matches = parsed.as_ref().is_some_and(|last| content(last) == content(template));
    let last = parsed.unwrap_or_default();

    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut desired_labels = template_labels(template);
    desired_labels.insert(MACHINE_NAME_LABEL.to_string(), machine_name.to_string());
    let label_changes = merge_map(&labels, &desired_labels, &template_labels(&last));

    let mut annotation_changes = merge_map(&annotations, &template_annotations(template), &template_annotations(&last));
    if !recorded_matches {
        let text = serde_json::to_string(template).unwrap_or_else(|_| "{}".to_string());
        annotation_changes.insert(LAST_APPLIED_ANNOTATION.to_string(), Value::String(text));
    }

    let current_taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let taints = merge_taints(&current_taints, &template_taints(template), &template_taints(&last));

    if label_changes.is_empty() && annotation_changes.is_empty() && taints.is_none() {
        return None;
    }
    let mut metadata = Map::new();
    if !label_changes.is_empty() {
        metadata.insert("labels".into(), Value::Object(label_changes));
    }
    if !annotation_changes.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotation_changes));
    }
    let mut patch = Map::new();
    if let Some(taints) = taints {
        if let Some(rv) = &node.metadata.resource_version {
            metadata.insert("resourceVersion".into(), json!(rv));
        }
        patch.insert("spec".into(), json!({ "taints": taints }));
    }
    patch.insert("metadata".into(), Value::Object(metadata));
    Some(Value::Object(patch))
}

/// The one write of the Node's main resource, as a strategic merge patch: MCM's node finalizer when it is missing
/// (`metadata.finalizers` merges as a set there, so no other finalizer is touched and no resourceVersion is needed),
/// with [`node_patch`] (maps merge and taints replace, as in a JSON merge patch).
pub fn node_write(node: &Node, machine_name: &str, template: Option<&NodeTemplateSpec>) -> Option<Value> {
    let patch = node_patch(node, machine_name, template);
    if !needs_finalizer(node) {
        return patch;
    }
    let mut patch = patch.unwrap_or_else(|| json!({ "metadata": {} }));
    if let Some(metadata) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert("finalizers".into(), json!([NODE_FINALIZER]));
    }
    Some(patch)
}

/// The two writes that put a class's virtual capacity on a Node: first `status` (a merge patch of the Node's
/// status subresource), then `record` (a merge patch of its annotations), as MCM orders them.
#[derive(Clone, Debug, PartialEq)]
pub struct VirtualCapacityPatch {
    /// Sets the desired resources in `status.capacity` and removes those applied before and no longer desired.
    pub status: Value,
    /// Records what is applied now (removed when nothing is).
    pub record: Value,
}

/// What brings `node`'s capacity in line with the class's `virtualCapacity` (`desired`; none: empty), or `None`
/// when it already is. Resources the Node has that were never applied from a class are left alone.
pub fn virtual_capacity_patch(
    node: &Node,
    desired: Option<&BTreeMap<String, Quantity>>,
) -> Option<VirtualCapacityPatch> {
    let empty = BTreeMap::new();
    let desired = desired.unwrap_or(&empty);
    let recorded = node.metadata.annotations.as_ref().and_then(|a| a.get(LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION));
    // An unreadable record is treated as empty; it is rewritten below.
    let last: BTreeMap<String, Quantity> =
        recorded.and_then(|text| serde_json::from_str(text).ok()).unwrap_or_default();
    let capacity = node.status.as_ref().and_then(|s| s.capacity.clone()).unwrap_or_default();
    let mut changes = Map::new();
    for key in last.keys() {
        if !desired.contains_key(key) && capacity.contains_key(key) {
            changes.insert(key.clone(), Value::Null);
        }
    }
    for (key, quantity) in desired {
        if capacity.get(key).map(|q| &q.0) != Some(&quantity.0) {
            changes.insert(key.clone(), Value::String(quantity.0.clone()));
        }
    }
    if changes.is_empty() {
        return None;
    }
    let record = if desired.is_empty() {
        Value::Null
    } else {
        Value::String(serde_json::to_string(desired).unwrap_or_else(|_| "{}".to_string()))
    };
    Some(VirtualCapacityPatch {
        status: json!({"status": {"capacity": changes}}),
        record: json!({"metadata": {"annotations": {LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION: record}}}),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()).filter(|v: &String| !v.is_empty()),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn template(labels: &[(&str, &str)], annotations: &[(&str, &str)], taints: Vec<Taint>) -> NodeTemplateSpec {
        let map = |kv: &[(&str, &str)]| Some(kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        NodeTemplateSpec {
            metadata: Some(ObjectMeta { labels: map(labels), annotations: map(annotations), ..Default::default() }),
            spec: Some(NodeSpec { taints: Some(taints), ..Default::default() }),
        }
    }

    fn node(
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
        taints: Vec<Taint>,
        last: Option<&NodeTemplateSpec>,
    ) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.resource_version = Some("7".into());
        let mut a: BTreeMap<String, String> = annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        if let Some(last) = last {
            a.insert(LAST_APPLIED_ANNOTATION.into(), serde_json::to_string(last).unwrap());
        }
        n.metadata.annotations = Some(a);
        n.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        n.spec = Some(NodeSpec { taints: Some(taints), ..Default::default() });
        n
    }

    const NAME: (&str, &str) = (MACHINE_NAME_LABEL, "m1");

    #[test]
    fn the_node_finalizer_is_added_once_and_never_to_a_deleting_node() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let with = |finalizers: Option<Vec<&str>>, deleting: bool| Node {
            metadata: ObjectMeta {
                finalizers: finalizers.map(|f| f.into_iter().map(String::from).collect()),
                deletion_timestamp: deleting.then(|| Time("2025-01-01T00:00:00Z".parse().unwrap())),
                ..Default::default()
            },
            ..Default::default()
        };
        let cases = [
            ("no finalizers", with(None, false), true),
            ("another's finalizer", with(Some(vec!["other"]), false), true),
            ("ours already", with(Some(vec!["other", NODE_FINALIZER]), false), false),
            ("being deleted", with(None, true), false),
        ];
        for (name, node, want) in cases {
            assert_eq!(needs_finalizer(&node), want, "{name}");
        }
    }

    #[test]
    fn the_finalizer_goes_with_the_template_in_one_write() {
        let mut node = Node::default();
        node.metadata.name = Some("n".into());
        node.metadata.resource_version = Some("7".into());
        node.metadata.finalizers = Some(vec!["other".into()]);
        let patch = node_write(&node, "m", None).unwrap();
        assert_eq!(patch["metadata"]["finalizers"], json!([NODE_FINALIZER]));
        assert!(patch["metadata"].get("resourceVersion").is_none());
        assert_eq!(patch["metadata"]["labels"][MACHINE_NAME_LABEL], json!("m"));

        // With the finalizer and the template in place, nothing is written.
        node.metadata.finalizers = Some(vec!["other".into(), NODE_FINALIZER.into()]);
        node.metadata.labels = Some([(MACHINE_NAME_LABEL.to_string(), "m".to_string())].into());
        node.metadata.annotations = Some([(LAST_APPLIED_ANNOTATION.to_string(), "{}".to_string())].into());
        assert_eq!(node_write(&node, "m", None), None);

        // A template change alone carries no finalizer.
        let patch = node_write(&node, "other-machine", None).unwrap();
        assert!(patch["metadata"].get("finalizers").is_none());

        // A deleting Node gets no finalizer.
        node.metadata.finalizers = None;
        node.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2025-01-01T00:00:00Z".parse().unwrap()));
        assert!(node_write(&node, "other-machine", None).unwrap()["metadata"].get("finalizers").is_none());
    }

    #[test]
    fn three_way_merge() {
        let old =
            template(&[("pool", "a"), ("gone", "x")], &[("note", "1")], vec![taint("dedicated", "a", "NoSchedule")]);
        let new =
            template(&[("pool", "b")], &[], vec![taint("dedicated", "b", "NoSchedule"), taint("gpu", "", "NoExecute")]);
        let cases: Vec<(&str, Node, Option<&NodeTemplateSpec>, Option<Value>)> = vec![
            (
                "in sync",
                node(
                    &[("pool", "b"), NAME, ("kubelet", "k")],
                    &[("user", "u")],
                    vec![taint("dedicated", "b", "NoSchedule"), taint("gpu", "", "NoExecute")],
                    Some(&new),
                ),
                Some(&new),
                None,
            ),
            (
                "template changed: set, remove what was applied, keep the rest",
                node(
                    &[("pool", "a"), ("gone", "x"), NAME, ("kubelet", "k")],
                    &[("note", "1"), ("user", "u")],
                    vec![taint("user", "", "NoSchedule"), taint("dedicated", "a", "NoSchedule")],
                    Some(&old),
                ),
                Some(&new),
                Some(json!({
                    "metadata": {
                        "labels": {"pool": "b", "gone": null},
                        "annotations": {"note": null, LAST_APPLIED_ANNOTATION: serde_json::to_string(&new).unwrap()},
                        "resourceVersion": "7",
                    },
                    "spec": {"taints": [
                        {"key": "user", "effect": "NoSchedule"},
                        {"key": "dedicated", "value": "b", "effect": "NoSchedule"},
                        {"key": "gpu", "effect": "NoExecute"},
                    ]},
                })),
            ),
            (
                "fresh node, no template: machine name and an empty record",
                node(&[("kubelet", "k")], &[], vec![], None),
                None,
                Some(json!({"metadata": {
                    "labels": {MACHINE_NAME_LABEL: "m1"},
                    "annotations": {LAST_APPLIED_ANNOTATION: "{}"},
                }})),
            ),
            (
                "a key set by someone else is not removed",
                node(
                    &[("pool", "b"), NAME, ("gone", "mine")],
                    &[],
                    vec![taint("dedicated", "b", "NoSchedule"), taint("gpu", "", "NoExecute")],
                    Some(&new),
                ),
                Some(&new),
                None,
            ),
        ];
        for (name, n, t, want) in cases {
            assert_eq!(node_patch(&n, "m1", t), want, "{name}");
        }
    }

    #[test]
    fn mcm_written_record_is_read() {
        // MCM (Go) writes `creationTimestamp: null` and an empty spec object.
        let mut n = node(&[("pool", "a"), NAME], &[], vec![], None);
        n.metadata.annotations.as_mut().unwrap().insert(
            LAST_APPLIED_ANNOTATION.into(),
            r#"{"metadata":{"creationTimestamp":null,"labels":{"pool":"a"}},"spec":{}}"#.into(),
        );
        let t = NodeTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("pool".to_string(), "a".to_string())].into()),
                ..Default::default()
            }),
            spec: None,
        };
        assert_eq!(node_patch(&n, "m1", Some(&t)), None);
    }

    fn node_with_capacity(capacity: &[(&str, &str)], record: Option<&str>) -> Node {
        let mut node = Node {
            status: Some(k8s_openapi::api::core::v1::NodeStatus {
                capacity: Some(capacity.iter().map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect()),
                ..Default::default()
            }),
            ..Default::default()
        };
        if let Some(record) = record {
            node.metadata.annotations =
                Some(BTreeMap::from([(LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION.to_string(), record.to_string())]));
        }
        node
    }

    #[test]
    fn virtual_capacity() {
        let q = |pairs: &[(&str, &str)]| -> BTreeMap<String, Quantity> {
            pairs.iter().map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect()
        };
        // (case, node, the class's virtual capacity, the expected status and record patches)
        type Case<'a> = (&'a str, Node, Option<BTreeMap<String, Quantity>>, Option<(Value, Value)>);
        let cases: Vec<Case<'_>> = vec![
            ("nothing wanted, nothing applied", node_with_capacity(&[("cpu", "2")], None), None, None),
            (
                "added",
                node_with_capacity(&[("cpu", "2")], None),
                Some(q(&[("example.com/gpu", "4")])),
                Some((
                    json!({"status": {"capacity": {"example.com/gpu": "4"}}}),
                    json!({"metadata": {"annotations": {LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION: "{\"example.com/gpu\":\"4\"}"}}}),
                )),
            ),
            (
                "already there",
                node_with_capacity(&[("cpu", "2"), ("example.com/gpu", "4")], Some("{\"example.com/gpu\":\"4\"}")),
                Some(q(&[("example.com/gpu", "4")])),
                None,
            ),
            (
                "changed, one dropped, the kubelet's own left alone",
                node_with_capacity(&[("cpu", "2"), ("a", "1"), ("b", "1")], Some("{\"a\":\"1\",\"b\":\"1\"}")),
                Some(q(&[("a", "2")])),
                Some((
                    json!({"status": {"capacity": {"a": "2", "b": null}}}),
                    json!({"metadata": {"annotations": {LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION: "{\"a\":\"2\"}"}}}),
                )),
            ),
            (
                "all dropped: the record goes",
                node_with_capacity(&[("cpu", "2"), ("a", "1")], Some("{\"a\":\"1\"}")),
                None,
                Some((
                    json!({"status": {"capacity": {"a": null}}}),
                    json!({"metadata": {"annotations": {LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION: null}}}),
                )),
            ),
        ];
        for (name, node, desired, expected) in cases {
            let got = virtual_capacity_patch(&node, desired.as_ref()).map(|p| (p.status, p.record));
            assert_eq!(got, expected, "{name}");
        }
    }
}
