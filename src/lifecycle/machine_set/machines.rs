//! What a MachineSet writes on its machines (`docs/machine-lifecycle.md` `manageReplicas`, `GetMachineFromTemplate`):
//! the Machine it creates from its template, and the status of a machine it deletes.
//!
//! A created Machine has `generateName: <set>-`, the template's labels, annotations and finalizers, the
//! template's spec, a controller reference to the set with `blockOwnerDeletion`, and the set's
//! `node.machine.sapcloud.io/effective-creation-timeout` annotation when it has one. MCM also overwrites
//! `spec.creationTimeout` with that value; we do not: the annotation already wins over the spec for the machine
//! controller, and a rewritten spec would differ from the template, which the in-place propagation would then
//! put back.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::super::claim::controller_ref;
use super::super::object_meta::annotation;
use super::super::status::{self, StatusPatch};
use crate::api::mcm::names::EFFECTIVE_CREATION_TIMEOUT_ANNOTATION;
use crate::api::mcm::{Machine, MachineOperationType, MachinePhase, MachineSet, MachineState};

/// The `lastOperation.description` of a machine the MachineSet controller deletes (MCM's text).
pub const DELETING_DESCRIPTION: &str = "Deleting machine from cloud provider";

/// The Machine to create for `set`.
pub fn machine_from_template(set: &MachineSet) -> Machine {
    let template = set.spec.template.clone().unwrap_or_default();
    let template_meta = template.metadata.unwrap_or_default();
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let mut annotations = template_meta.annotations.unwrap_or_default();
    if let Some(timeout) = annotation(&set.metadata, EFFECTIVE_CREATION_TIMEOUT_ANNOTATION) {
        annotations.insert(EFFECTIVE_CREATION_TIMEOUT_ANNOTATION.to_string(), timeout.to_string());
    }
    let mut machine = Machine::new("", template.spec.unwrap_or_default());
    machine.metadata = ObjectMeta {
        generate_name: Some(format!("{set_name}-")),
        namespace: set.metadata.namespace.clone(),
        labels: template_meta.labels.filter(|l| !l.is_empty()),
        annotations: (!annotations.is_empty()).then_some(annotations),
        finalizers: template_meta.finalizers.filter(|f| !f.is_empty()),
        owner_references: Some(vec![controller_ref("MachineSet", &set.metadata)]),
        ..ObjectMeta::default()
    };
    machine
}

/// The status written on a machine right after its deletion was requested: phase Terminating, lastOperation
/// Delete/Processing "Deleting machine from cloud provider". The termination controller takes over from there.
pub fn deleting_status(now: Timestamp) -> StatusPatch {
    let op = status::operation(MachineOperationType::Delete, MachineState::Processing, DELETING_DESCRIPTION, None, now);
    StatusPatch::phase(MachinePhase::Terminating, op, now)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::mcm::{ClassSpec, MachineSetSpec, MachineSpec, MachineTemplateSpec};

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn set(set_annotations: &[(&str, &str)]) -> MachineSet {
        let mut s = MachineSet::new(
            "pool-abcde",
            MachineSetSpec {
                replicas: 1,
                template: Some(MachineTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(map(&[("name", "pool")])),
                        annotations: Some(map(&[("note", "x")])),
                        finalizers: Some(vec!["example.com/hold".into()]),
                        ..Default::default()
                    }),
                    spec: Some(MachineSpec {
                        class: ClassSpec { kind: "MachineClass".into(), name: "small".into(), api_group: None },
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            },
        );
        s.metadata.namespace = Some("ns".into());
        s.metadata.uid = Some("uid-set".into());
        s.metadata.annotations = Some(map(set_annotations));
        s
    }

    #[test]
    fn machine_from_template_table() {
        let cases: Vec<(&str, MachineSet, Option<&str>)> = vec![
            ("plain", set(&[]), None),
            ("creation timeout copied", set(&[(EFFECTIVE_CREATION_TIMEOUT_ANNOTATION, "30m")]), Some("30m")),
        ];
        for (name, s, timeout) in cases {
            let m = machine_from_template(&s);
            assert_eq!(m.metadata.name, None, "{name}");
            assert_eq!(m.metadata.generate_name.as_deref(), Some("pool-abcde-"), "{name}");
            assert_eq!(m.metadata.namespace.as_deref(), Some("ns"), "{name}");
            assert_eq!(m.metadata.labels, Some(map(&[("name", "pool")])), "{name}");
            let annotations = m.metadata.annotations.clone().unwrap();
            assert_eq!(annotations.get("note").map(String::as_str), Some("x"), "{name}");
            assert_eq!(annotations.get(EFFECTIVE_CREATION_TIMEOUT_ANNOTATION).map(String::as_str), timeout, "{name}");
            assert_eq!(m.metadata.finalizers, Some(vec!["example.com/hold".to_string()]), "{name}");
            let owner = &m.metadata.owner_references.as_ref().unwrap()[0];
            assert_eq!(
                (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
                ("MachineSet", "pool-abcde", "uid-set")
            );
            assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)), "{name}");
            assert_eq!(m.spec.class.name, "small", "{name}");
            assert_eq!(m.spec.configuration.creation_timeout, None, "the spec stays the template's: {name}");
        }
    }

    #[test]
    fn deleting_status_is_mcms() {
        let now: Timestamp = "2026-03-01T12:00:00Z".parse().unwrap();
        let patch = deleting_status(now);
        assert_eq!(patch.new_phase(), Some(&MachinePhase::Terminating));
        let op = patch.last_operation.unwrap();
        assert_eq!(op.description.as_deref(), Some(DELETING_DESCRIPTION));
        assert_eq!((op.type_, op.state), (Some(MachineOperationType::Delete), Some(MachineState::Processing)));
    }
}
