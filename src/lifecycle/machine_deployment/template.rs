//! New-MachineSet identity (`docs/machine-lifecycle.md` "New-MachineSet identity", "In-place propagation").
//!
//! What rolls: template labels (except `machine-template-hash`), template annotations, `class.name` and the rest
//! of the machine spec. What does not: `nodeTemplate`, the machine configuration (timeouts, health settings) and
//! `class.kind`; those are copied in place into the new set ([`sync_in_place`]) and from there into its machines.
//!
//! Existing MachineSets, including those MCM created, are found by comparing templates, never by hash, so our
//! hash need not reproduce Go's: FNV-1a (32 bit) over a canonical JSON of exactly the compared fields, then the
//! collision count; the label value is the decimal hash and the name suffix its first five characters in
//! Kubernetes' "safe" alphabet.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

use crate::api::mcm::names::TEMPLATE_HASH_LABEL;
use crate::api::mcm::{MachineDeployment, MachineSet, MachineSetSpec, MachineTemplateSpec};
use crate::lifecycle::machine_set::propagation::node_templates_equal;
use crate::lifecycle::object_meta::{canonical_json, normalized_json, semantically_equal};

/// The characters Kubernetes uses for generated name suffixes: no vowels, no confusable digits.
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The template fields that decide whether a MachineSet is the deployment's current one: everything except the
/// hash label, `nodeTemplate`, the machine configuration and `class.kind`.
fn identity(template: &MachineTemplateSpec) -> Value {
    let mut t = template.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(TEMPLATE_HASH_LABEL);
    }
    if let Some(spec) = t.spec.as_mut() {
        spec.node_template = None;
        spec.configuration = Default::default();
        spec.class.kind = String::new();
    }
    normalized_json(&t)
}

/// Whether two templates describe the same machines for rollout purposes (MCM `EqualIgnoreHash`).
pub fn equal_ignore_hash(a: &MachineTemplateSpec, b: &MachineTemplateSpec) -> bool {
    identity(a) == identity(b)
}

/// The deployment's current MachineSet: the oldest whose template equals the deployment's (ignoring the hash).
/// Several can match after upgrades (kubernetes#40415); the oldest wins so the choice is stable.
///
/// `rollout_after` (CAPI's `spec.rollout.after`, once passed): a set made before it is not new, whatever its
/// template, so the deployment rolls onto a fresh set (its name comes from the next collision count).
pub fn find_new_machine_set<'a>(
    d: &MachineDeployment,
    sets: &'a [MachineSet],
    rollout_after: Option<jiff::Timestamp>,
) -> Option<&'a MachineSet> {
    let mut matching: Vec<&MachineSet> = sets
        .iter()
        .filter(|s| s.spec.template.as_ref().is_some_and(|t| equal_ignore_hash(t, &d.spec.template)))
        .filter(|s| !made_before(s, rollout_after))
        .collect();
    matching.sort_by(|a, b| super::by_creation(a, b));
    matching.first().copied()
}

/// Whether the set was made before `after` (a set not created yet is not).
pub fn made_before(set: &MachineSet, after: Option<jiff::Timestamp>) -> bool {
    match (after, set.metadata.creation_timestamp.as_ref()) {
        (Some(after), Some(created)) => created.0 < after,
        _ => false,
    }
}

/// FNV-1a, 32 bit.
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

/// The template hash: FNV-1a over the canonical JSON of the compared fields, then the collision count's four
/// little-endian bytes when there is one.
pub fn template_hash(template: &MachineTemplateSpec, collision_count: Option<i32>) -> u32 {
    let mut bytes = canonical_json(&identity(template)).into_bytes();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(&c.to_le_bytes());
    }
    fnv1a32(&bytes)
}

/// The hash of the deployment's next MachineSet: [`template_hash`] with its collision count, and for a CAPI
/// deployment with `spec.rollout.after` that time too, so that the set a passed `rollout.after` asks for gets a
/// name of its own (CAPI's status has no collision count to move the name on).
pub fn deployment_hash(d: &MachineDeployment) -> u32 {
    let collision_count = d.status.as_ref().and_then(|s| s.collision_count);
    let hash = template_hash(&d.spec.template, collision_count);
    match crate::convert::capi_rollout_after(d) {
        Some(after) => {
            let mut bytes = hash.to_le_bytes().to_vec();
            bytes.extend_from_slice(&after.as_second().to_le_bytes());
            fnv1a32(&bytes)
        }
        None => hash,
    }
}

/// Kubernetes' `SafeEncodeString`: each byte mapped into [`SAFE_ALPHABET`].
pub fn safe_encode(s: &str) -> String {
    s.bytes().map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()])).collect()
}

/// The name of the MachineSet for a hash: `<deployment>-<first 5 safe-encoded characters of the decimal hash>`.
pub fn machine_set_name(deployment: &str, hash: u32) -> String {
    let encoded: String = safe_encode(&hash.to_string()).chars().take(5).collect();
    format!("{deployment}-{encoded}")
}

/// A controller reference to the deployment.
pub fn controller_ref(d: &MachineDeployment) -> OwnerReference {
    OwnerReference {
        api_version: format!("{}/{}", crate::api::mcm::GROUP, crate::api::mcm::VERSION),
        kind: "MachineDeployment".into(),
        name: d.metadata.name.clone().unwrap_or_default(),
        uid: d.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The MachineSet to create for the deployment's template: name and hash from [`deployment_hash`], hash label on the set, its selector and its template, a controller reference,
/// `replicas`, and `annotations` (the caller passes the copied deployment annotations and the revision and
/// replica annotations).
pub fn new_machine_set(d: &MachineDeployment, replicas: i32, annotations: BTreeMap<String, String>) -> MachineSet {
    let hash = deployment_hash(d);
    let hash_text = hash.to_string();
    let mut template = d.spec.template.clone();
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    meta.labels.get_or_insert_with(BTreeMap::new).insert(TEMPLATE_HASH_LABEL.into(), hash_text.clone());
    let labels = meta.labels.clone();
    let mut selector = d.spec.selector.clone().unwrap_or_default();
    selector.match_labels.get_or_insert_with(BTreeMap::new).insert(TEMPLATE_HASH_LABEL.into(), hash_text);
    let d_name = d.metadata.name.clone().unwrap_or_default();
    let mut set = MachineSet::new(
        &machine_set_name(&d_name, hash),
        MachineSetSpec {
            replicas,
            selector: Some(selector),
            machine_class: None,
            template: Some(template),
            min_ready_seconds: d.spec.min_ready_seconds,
            auto_preserve_failed_machine_max: d.spec.auto_preserve_failed_machine_max,
        },
    );
    set.metadata.namespace = d.metadata.namespace.clone();
    set.metadata.labels = labels;
    set.metadata.owner_references = Some(vec![controller_ref(d)]);
    set.metadata.annotations = Some(annotations);
    set
}

/// Copies into the new set what changes in place: `nodeTemplate`, the machine configuration, `class.kind`,
/// `minReadySeconds` and `autoPreserveFailedMachineMax`. Returns whether anything changed.
pub fn sync_in_place(d: &MachineDeployment, set: &mut MachineSet) -> bool {
    let mut changed = false;
    if set.spec.min_ready_seconds != d.spec.min_ready_seconds {
        set.spec.min_ready_seconds = d.spec.min_ready_seconds;
        changed = true;
    }
    if set.spec.auto_preserve_failed_machine_max != d.spec.auto_preserve_failed_machine_max {
        set.spec.auto_preserve_failed_machine_max = d.spec.auto_preserve_failed_machine_max;
        changed = true;
    }
    let Some(wanted) = d.spec.template.spec.as_ref() else {
        return changed;
    };
    let spec = set.spec.template.get_or_insert_with(Default::default).spec.get_or_insert_with(Default::default);
    if !node_templates_equal(spec.node_template.as_ref(), wanted.node_template.as_ref()) {
        spec.node_template = wanted.node_template.clone();
        changed = true;
    }
    if !semantically_equal(&spec.configuration, &wanted.configuration) {
        spec.configuration = wanted.configuration.clone();
        changed = true;
    }
    if spec.class.kind != wanted.class.kind {
        spec.class.kind = wanted.class.kind.clone();
        changed = true;
    }
    changed
}

/// What to do when creating the new MachineSet failed because the name exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateConflict {
    /// The existing set is ours and has our template: use it as the new set.
    Adopt,
    /// A hash collision: write this `status.collisionCount` and retry (the next name differs).
    Collision {
        /// The new collision count.
        collision_count: i32,
    },
}

/// Decides about an `AlreadyExists` on creating the new MachineSet, given the set that holds the name.
pub fn on_create_conflict(d: &MachineDeployment, existing: &MachineSet) -> CreateConflict {
    let ours = existing
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == d.metadata.uid.as_ref());
    if ours && existing.spec.template.as_ref().is_some_and(|t| equal_ignore_hash(t, &d.spec.template)) {
        return CreateConflict::Adopt;
    }
    let current = d.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0);
    CreateConflict::Collision { collision_count: current.saturating_add(1) }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSpec;

    use super::*;
    use crate::api::Duration;
    use crate::api::mcm::NodeTemplateSpec;
    use crate::lifecycle::machine_deployment::test_support::{SetExt, deployment, map, ms, rolling, template};

    fn edit(f: impl FnOnce(&mut MachineTemplateSpec)) -> MachineTemplateSpec {
        let mut t = template("class-a");
        f(&mut t);
        t
    }

    #[test]
    fn equal_ignore_hash_table() {
        let base = template("class-a");
        let cases: Vec<(&str, MachineTemplateSpec, bool)> = vec![
            ("identical", base.clone(), true),
            (
                "hash label ignored",
                edit(|t| {
                    t.metadata
                        .as_mut()
                        .unwrap()
                        .labels
                        .as_mut()
                        .unwrap()
                        .insert(TEMPLATE_HASH_LABEL.into(), "123".into());
                }),
                true,
            ),
            (
                "node template ignored (propagates in place)",
                edit(|t| {
                    t.spec.as_mut().unwrap().node_template = Some(NodeTemplateSpec {
                        metadata: None,
                        spec: Some(NodeSpec { unschedulable: Some(true), ..Default::default() }),
                    })
                }),
                true,
            ),
            (
                "machine configuration ignored (propagates in place)",
                edit(|t| t.spec.as_mut().unwrap().configuration.drain_timeout = Some(Duration::from_secs(60))),
                true,
            ),
            ("class kind ignored", edit(|t| t.spec.as_mut().unwrap().class.kind = "AWSMachineClass".into()), true),
            ("class name rolls", template("class-b"), false),
            (
                "a new template label rolls",
                edit(|t| {
                    t.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert("tier".into(), "x".into());
                }),
                false,
            ),
            (
                "a changed template label rolls",
                edit(|t| t.metadata.as_mut().unwrap().labels = Some(map(&[("name", "other")]))),
                false,
            ),
            (
                "a template annotation rolls",
                edit(|t| t.metadata.as_mut().unwrap().annotations = Some(map(&[("a", "b")]))),
                false,
            ),
            (
                "a providerID rolls (the rest of the spec is compared)",
                edit(|t| t.spec.as_mut().unwrap().provider_id = Some("x".into())),
                false,
            ),
            (
                "an empty annotations map equals none",
                edit(|t| t.metadata.as_mut().unwrap().annotations = Some(BTreeMap::new())),
                true,
            ),
        ];
        for (name, other, expected) in cases {
            assert_eq!(equal_ignore_hash(&base, &other), expected, "{name}");
            assert_eq!(equal_ignore_hash(&other, &base), expected, "{name} (reversed)");
            assert_eq!(template_hash(&base, None) == template_hash(&other, None), expected, "{name}: hash");
        }
    }

    #[test]
    fn find_new_machine_set_table() {
        let d = deployment("d", 3, rolling("1", "0"));
        let cases: Vec<(&str, Vec<MachineSet>, Option<&str>)> = vec![
            ("none", vec![], None),
            ("only other templates", vec![ms("a", 0, 1, 1, 1).class("class-b")], None),
            ("the matching one", vec![ms("a", 0, 1, 1, 1).class("class-b"), ms("b", 1, 1, 1, 1)], Some("b")),
            ("the oldest of several matching", vec![ms("late", 5, 1, 1, 1), ms("early", 2, 1, 1, 1)], Some("early")),
        ];
        for (name, sets, expected) in cases {
            assert_eq!(
                find_new_machine_set(&d, &sets, None).and_then(|s| s.metadata.name.as_deref()),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn hash_and_name() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
        let t = template("class-a");
        let h0 = template_hash(&t, None);
        assert_ne!(h0, template_hash(&t, Some(1)), "the collision count changes the hash");
        assert_ne!(template_hash(&t, Some(1)), template_hash(&t, Some(2)));
        assert_eq!(h0, template_hash(&t.clone(), None), "deterministic");
        let name = machine_set_name("pool", h0);
        assert!(name.starts_with("pool-") && name.len() == "pool-".len() + 5, "{name}");
        assert!(name["pool-".len()..].bytes().all(|b| SAFE_ALPHABET.contains(&b)), "{name}");
    }

    #[test]
    fn new_machine_set_shape() {
        let mut d = deployment("d", 3, rolling("1", "0"));
        d.spec.min_ready_seconds = 7;
        d.spec.auto_preserve_failed_machine_max = 2;
        let set = new_machine_set(&d, 2, map(&[("k", "v")]));
        let hash = template_hash(&d.spec.template, None).to_string();
        assert_eq!(
            set.metadata.name.as_deref(),
            Some(machine_set_name("d", template_hash(&d.spec.template, None)).as_str())
        );
        assert_eq!(set.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(set.metadata.labels, Some(map(&[("name", "pool"), (TEMPLATE_HASH_LABEL, &hash)])));
        assert_eq!(
            set.spec.selector.as_ref().unwrap().match_labels,
            Some(map(&[("name", "pool"), (TEMPLATE_HASH_LABEL, &hash)]))
        );
        let template_labels = set.spec.template.as_ref().unwrap().metadata.as_ref().unwrap().labels.clone();
        assert_eq!(template_labels, Some(map(&[("name", "pool"), (TEMPLATE_HASH_LABEL, &hash)])));
        assert_eq!(
            (set.spec.replicas, set.spec.min_ready_seconds, set.spec.auto_preserve_failed_machine_max),
            (2, 7, 2)
        );
        let owner = &set.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("MachineDeployment", "uid-d", Some(true))
        );
        assert_eq!(set.metadata.annotations, Some(map(&[("k", "v")])));
        assert!(equal_ignore_hash(set.spec.template.as_ref().unwrap(), &d.spec.template));

        d.status.as_mut().unwrap().collision_count = Some(1);
        let other = new_machine_set(&d, 2, BTreeMap::new());
        assert_ne!(other.metadata.name, set.metadata.name, "a collision count gives another name");
    }

    #[test]
    fn sync_in_place_table() {
        let d = {
            let mut d = deployment("d", 3, rolling("1", "0"));
            d.spec.min_ready_seconds = 5;
            let spec = d.spec.template.spec.as_mut().unwrap();
            spec.configuration.health_timeout = Some(Duration::from_secs(600));
            spec.node_template = Some(NodeTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(map(&[("role", "worker")])), ..Default::default() }),
                spec: None,
            });
            d
        };
        let in_line = {
            let mut s = ms("s", 0, 3, 3, 3);
            sync_in_place(&d, &mut s);
            s
        };
        let cases: Vec<(&str, MachineSet, bool)> = vec![
            ("out of date", ms("s", 0, 3, 3, 3), true),
            ("already in line", in_line.clone(), false),
            (
                "class kind differs",
                {
                    let mut s = in_line.clone();
                    s.spec.template.as_mut().unwrap().spec.as_mut().unwrap().class.kind = "Other".into();
                    s
                },
                true,
            ),
        ];
        for (name, mut set, expected) in cases {
            assert_eq!(sync_in_place(&d, &mut set), expected, "{name}");
            assert!(!sync_in_place(&d, &mut set), "{name}: idempotent");
            let spec = set.spec.template.as_ref().unwrap().spec.as_ref().unwrap();
            assert_eq!(spec.configuration.health_timeout, Some(Duration::from_secs(600)), "{name}");
            assert_eq!(set.spec.min_ready_seconds, 5, "{name}");
        }
    }

    #[test]
    fn create_conflict_table() {
        let d = deployment("d", 3, rolling("1", "0"));
        let mut foreign = ms("x", 0, 1, 1, 1);
        foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
        let mut counted = d.clone();
        counted.status.as_mut().unwrap().collision_count = Some(4);
        let cases: Vec<(&str, &MachineDeployment, MachineSet, CreateConflict)> = vec![
            ("ours with our template: adopt", &d, ms("x", 0, 1, 1, 1), CreateConflict::Adopt),
            (
                "ours with another template: collision",
                &d,
                ms("x", 0, 1, 1, 1).class("class-b"),
                CreateConflict::Collision { collision_count: 1 },
            ),
            ("someone else's: collision", &d, foreign, CreateConflict::Collision { collision_count: 1 }),
            (
                "the count goes up from its current value",
                &counted,
                ms("x", 0, 1, 1, 1).class("class-b"),
                CreateConflict::Collision { collision_count: 5 },
            ),
        ];
        for (name, d, existing, expected) in cases {
            assert_eq!(on_create_conflict(d, &existing), expected, "{name}");
        }
    }
}
