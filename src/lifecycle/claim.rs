//! Controller references (`docs/machine-lifecycle.md` step 5 step 3): which objects a MachineSet or a
//! MachineDeployment controls, which orphans it adopts and which objects it lets go, as Kubernetes'
//! `ControllerRefManager` decides:
//! - an object whose controller reference is the owner's: kept while the owner's selector matches its labels;
//!   released otherwise, unless the owner is being deleted (then it is left alone);
//! - an object controlled by someone else: never touched;
//! - an orphan (no controller reference) that the selector matches: adopted, unless the owner or the object is
//!   being deleted.
//!
//! Adoption and release are merge patches of `metadata.ownerReferences` carrying the object's
//! `resourceVersion`: the list is replaced whole, so a concurrent change must fail the write rather than be lost.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use serde_json::{Value, json};

use super::machine_deployment::validation::selector_matches;

/// What an owner does with one candidate object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// It is the owner's: keep it.
    Owned,
    /// An orphan the owner's selector matches: adopt it (then it is the owner's).
    Adopt,
    /// The owner's, but its labels no longer match: release it (it is not the owner's any more).
    Release,
    /// Not the owner's business.
    Ignore,
}

impl Claim {
    /// Whether the owner counts the object as its own in this pass (owned or being adopted).
    pub fn counts(self) -> bool {
        matches!(self, Claim::Owned | Claim::Adopt)
    }
}

/// The owner as the claim sees it.
#[derive(Clone, Copy, Debug)]
pub struct Owner<'a> {
    /// `metadata.uid`.
    pub uid: &'a str,
    /// `spec.selector`.
    pub selector: &'a LabelSelector,
    /// The owner has a deletion timestamp.
    pub deleting: bool,
}

/// The controller reference of an object, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.iter().flatten().find(|o| o.controller == Some(true))
}

/// Decides about one object.
pub fn claim(owner: Owner<'_>, object: &ObjectMeta) -> Claim {
    let empty = BTreeMap::new();
    let matches = selector_matches(owner.selector, object.labels.as_ref().unwrap_or(&empty));
    match controller_of(object) {
        Some(r) if r.uid == owner.uid => match (matches, owner.deleting) {
            (true, _) => Claim::Owned,
            // An owner being deleted does not release anything (Kubernetes' rule).
            (false, true) => Claim::Ignore,
            (false, false) => Claim::Release,
        },
        Some(_) => Claim::Ignore,
        None if matches && !owner.deleting && object.deletion_timestamp.is_none() => Claim::Adopt,
        None => Claim::Ignore,
    }
}

/// A controller reference (with `blockOwnerDeletion`) to an owner of `kind` in MCM's API group.
pub fn controller_ref(kind: &str, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: format!("{}/{}", crate::api::mcm::GROUP, crate::api::mcm::VERSION),
        kind: kind.to_string(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The merge patch adopting `object`: its owner references plus `owner`, guarded by its resourceVersion.
pub fn adopt_patch(object: &ObjectMeta, owner: &OwnerReference) -> Value {
    let mut refs: Vec<OwnerReference> =
        object.owner_references.iter().flatten().filter(|o| o.uid != owner.uid).cloned().collect();
    refs.push(owner.clone());
    json!({"metadata": {"ownerReferences": refs, "resourceVersion": object.resource_version}})
}

/// The merge patch releasing `object` from the owner `owner_uid`, guarded by its resourceVersion.
pub fn release_patch(object: &ObjectMeta, owner_uid: &str) -> Value {
    let refs: Vec<OwnerReference> =
        object.owner_references.iter().flatten().filter(|o| o.uid != owner_uid).cloned().collect();
    json!({"metadata": {"ownerReferences": refs, "resourceVersion": object.resource_version}})
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn selector() -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([("name".to_string(), "pool".to_string())])),
            match_expressions: None,
        }
    }

    fn object(labels: &[(&str, &str)], controller: Option<&str>, deleting: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some("m".into()),
            resource_version: Some("7".into()),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            owner_references: controller.map(|uid| {
                vec![OwnerReference {
                    kind: "MachineSet".into(),
                    name: "s".into(),
                    uid: uid.into(),
                    controller: Some(true),
                    ..Default::default()
                }]
            }),
            deletion_timestamp: deleting.then(|| Time("2026-03-01T12:00:00Z".parse().unwrap())),
            ..Default::default()
        }
    }

    #[test]
    fn claim_table() {
        let pool = [("name", "pool")];
        let other = [("name", "other")];
        // (case, object, owner deleting, expected)
        let cases = [
            ("ours and matching", object(&pool, Some("me"), false), false, Claim::Owned),
            ("ours, labels changed", object(&other, Some("me"), false), false, Claim::Release),
            ("ours, labels changed, owner going", object(&other, Some("me"), false), true, Claim::Ignore),
            ("ours while the owner goes", object(&pool, Some("me"), false), true, Claim::Owned),
            ("someone else's", object(&pool, Some("them"), false), false, Claim::Ignore),
            ("orphan matching", object(&pool, None, false), false, Claim::Adopt),
            ("orphan not matching", object(&other, None, false), false, Claim::Ignore),
            ("orphan, owner going", object(&pool, None, false), true, Claim::Ignore),
            ("orphan going", object(&pool, None, true), false, Claim::Ignore),
        ];
        for (name, meta, deleting, expected) in cases {
            let owner = Owner { uid: "me", selector: &selector(), deleting };
            assert_eq!(claim(owner, &meta), expected, "{name}");
        }
    }

    #[test]
    fn patches_keep_other_references_and_carry_the_resource_version() {
        let mut meta = object(&[("name", "pool")], None, false);
        meta.owner_references = Some(vec![OwnerReference { uid: "gc".into(), name: "x".into(), ..Default::default() }]);
        let owner = controller_ref(
            "MachineSet",
            &ObjectMeta { name: Some("s".into()), uid: Some("me".into()), ..Default::default() },
        );
        let adopted = adopt_patch(&meta, &owner);
        assert_eq!(adopted["metadata"]["resourceVersion"], "7");
        let refs = adopted["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[1]["uid"], "me");
        assert_eq!(refs[1]["blockOwnerDeletion"], true);
        assert_eq!(refs[1]["apiVersion"], "machine.sapcloud.io/v1alpha1");

        meta.owner_references.as_mut().unwrap().push(owner);
        let released = release_patch(&meta, "me");
        assert_eq!(released["metadata"]["ownerReferences"].as_array().unwrap().len(), 1);
        assert_eq!(released["metadata"]["resourceVersion"], "7");
    }
}
