//! Small pure helpers both directions share: fresh metadata for an object made from another one, owner
//! references, and the autoscaler annotations of MCM and of CAPI's `clusterapi` provider.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{FROM_ANNOTATION, STEP_ANNOTATION, WAS_PAUSED_ANNOTATION};
use crate::api::capi;
use crate::api::mcm::names::PAUSED_ANNOTATION;

/// MCM's per-node-group autoscaler options (on a MachineDeployment) and the CAPI `clusterapi` provider's
/// equivalents (`docs/machine-lifecycle.md`, `docs/infrastructure-provider.md`). Values keep their format (numbers, durations).
pub const AUTOSCALER_OPTIONS: [(&str, &str); 5] = [
    (
        "autoscaler.gardener.cloud/scale-down-utilization-threshold",
        "cluster.x-k8s.io/autoscaling-options-scaledownutilizationthreshold",
    ),
    (
        "autoscaler.gardener.cloud/scale-down-gpu-utilization-threshold",
        "cluster.x-k8s.io/autoscaling-options-scaledowngpuutilizationthreshold",
    ),
    (
        "autoscaler.gardener.cloud/scale-down-unneeded-time",
        "cluster.x-k8s.io/autoscaling-options-scaledownunneededtime",
    ),
    ("autoscaler.gardener.cloud/scale-down-unready-time", "cluster.x-k8s.io/autoscaling-options-scaledownunreadytime"),
    ("autoscaler.gardener.cloud/max-node-provision-time", "cluster.x-k8s.io/autoscaling-options-maxnodeprovisiontime"),
];

/// Whether `key` is one of the annotations only the migration or a pause writes (never carried across).
fn is_migration_annotation(key: &str) -> bool {
    [STEP_ANNOTATION, FROM_ANNOTATION, WAS_PAUSED_ANNOTATION, PAUSED_ANNOTATION, capi::PAUSED_ANNOTATION].contains(&key)
}

/// The name, namespace, labels and annotations of `meta` (without the migration's own annotations): what an object
/// made from another keeps. Identity, owners, finalizers and server-set fields stay behind.
pub fn carried_meta(meta: &ObjectMeta) -> ObjectMeta {
    let annotations: BTreeMap<String, String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !is_migration_annotation(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        labels: meta.labels.clone().filter(|l| !l.is_empty()),
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..ObjectMeta::default()
    }
}

/// Sets `key` to `value` in an annotation map.
pub fn annotate(annotations: &mut Option<BTreeMap<String, String>>, key: &str, value: &str) {
    annotations.get_or_insert_with(BTreeMap::new).insert(key.to_string(), value.to_string());
}

/// Sets `key` to `value` in a label map.
pub fn label(labels: &mut Option<BTreeMap<String, String>>, key: &str, value: &str) {
    labels.get_or_insert_with(BTreeMap::new).insert(key.to_string(), value.to_string());
}

/// A controller owner reference to `owner` (`api_version`, `kind`, its name and uid).
pub fn controller_ref(api_version: &str, kind: &str, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether `meta` is owned (as controller) by an object of `kind` named `name`.
pub fn controlled_by(meta: &ObjectMeta, kind: &str, name: &str) -> bool {
    meta.owner_references.iter().flatten().any(|r| r.controller == Some(true) && r.kind == kind && r.name == name)
}

/// The name of the controller owner of kind `kind`, if any.
pub fn controller_name<'a>(meta: &'a ObjectMeta, kind: &str) -> Option<&'a str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == kind)
        .map(|r| r.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carried_meta_keeps_names_labels_and_user_annotations_only() {
        let meta = ObjectMeta {
            name: Some("a".into()),
            namespace: Some("ns".into()),
            uid: Some("u".into()),
            resource_version: Some("7".into()),
            finalizers: Some(vec!["f".into()]),
            labels: Some([("k".to_string(), "v".to_string())].into()),
            annotations: Some(
                [
                    ("user".to_string(), "1".to_string()),
                    (STEP_ANNOTATION.to_string(), "paused".to_string()),
                    (PAUSED_ANNOTATION.to_string(), "mcm migrate".to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        };
        let carried = carried_meta(&meta);
        assert_eq!(carried.name.as_deref(), Some("a"));
        assert_eq!(carried.namespace.as_deref(), Some("ns"));
        assert_eq!(carried.uid, None);
        assert_eq!(carried.resource_version, None);
        assert_eq!(carried.finalizers, None);
        assert_eq!(carried.labels, meta.labels);
        assert_eq!(carried.annotations, Some([("user".to_string(), "1".to_string())].into()));
    }
}
