//! MachineClass decisions (`docs/machine-lifecycle.md` "Other MC duties"): when a class and the Secrets it
//! references carry their finalizers, whether a class's `nodeTemplate` is valid, and whether a class is ready for
//! machines.

use crate::api::mcm::names::{MACHINE_CLASS_KIND, MACHINE_FINALIZER, SECRET_FINALIZER};
use crate::api::mcm::{Machine, MachineClass, NodeTemplate};

/// A change to an object's finalizers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerChange {
    /// Add ours.
    Add,
    /// Remove ours.
    Remove,
}

/// Our finalizer on an object that is `referenced`: present while referenced, gone once not (which lets a
/// requested deletion finish). None is added to an object being deleted (the API server refuses it).
pub fn finalizer_change(has: bool, referenced: bool, deleting: bool) -> Option<FinalizerChange> {
    match (has, referenced) {
        (false, true) if !deleting => Some(FinalizerChange::Add),
        (true, false) => Some(FinalizerChange::Remove),
        _ => None,
    }
}

/// Whether `finalizers` holds `name`.
pub fn has_finalizer(finalizers: Option<&Vec<String>>, name: &str) -> bool {
    finalizers.is_some_and(|f| f.iter().any(|x| x == name))
}

/// Whether `machine` uses the MachineClass `namespace/name`.
pub fn uses_class(machine: &Machine, namespace: &str, name: &str) -> bool {
    machine.spec.class.kind == MACHINE_CLASS_KIND
        && machine.spec.class.name == name
        && machine.metadata.namespace.as_deref() == Some(namespace)
}

/// The Secrets (`namespace`, `name`) a class references; a reference without a namespace means the class's own.
pub fn secret_refs(class: &MachineClass) -> Vec<(String, String)> {
    let own = class.metadata.namespace.clone().unwrap_or_default();
    [&class.spec.secret_ref, &class.spec.credentials_secret_ref]
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let name = r.name.clone().filter(|n| !n.is_empty())?;
            let namespace = r.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| own.clone());
            Some((namespace, name))
        })
        .collect()
}

/// Checks a class's `nodeTemplate` as MCM does: when present, its capacity holds `cpu`, `gpu` and `memory`, and
/// `instanceType`, `region` and `zone` are set. The error names what is missing.
pub fn validate_node_template(template: Option<&NodeTemplate>) -> Result<(), String> {
    let Some(t) = template else { return Ok(()) };
    let mut problems = Vec::new();
    let missing: Vec<&str> = ["cpu", "gpu", "memory"].into_iter().filter(|k| !t.capacity.contains_key(*k)).collect();
    if !missing.is_empty() {
        problems
            .push(format!("nodeTemplate.capacity must contain cpu, gpu and memory (missing: {})", missing.join(", ")));
    }
    let unset: Vec<&str> = [("instanceType", &t.instance_type), ("region", &t.region), ("zone", &t.zone)]
        .into_iter()
        .filter(|(_, v)| v.is_empty())
        .map(|(k, _)| k)
        .collect();
    if !unset.is_empty() {
        problems
            .push(format!("nodeTemplate.instanceType, region and zone must be set (missing: {})", unset.join(", ")));
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}

/// Why a class cannot serve machines yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassProblem {
    /// The machine's class kind is not `MachineClass`.
    WrongKind(String),
    /// No such class.
    Missing(String),
    /// The class controller has not added its finalizer yet (MCM waits for it).
    NoFinalizer(String),
    /// Its node template is invalid.
    InvalidNodeTemplate(String, String),
}

impl std::fmt::Display for ClassProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClassProblem::WrongKind(kind) => {
                write!(f, "spec.class.kind is {kind:?}; only {MACHINE_CLASS_KIND:?} is supported")
            }
            ClassProblem::Missing(name) => write!(f, "MachineClass {name:?} does not exist"),
            ClassProblem::NoFinalizer(name) => {
                write!(f, "MachineClass {name:?} does not carry its finalizer yet; waiting for the class controller")
            }
            ClassProblem::InvalidNodeTemplate(name, why) => write!(f, "MachineClass {name:?} is invalid: {why}"),
        }
    }
}

/// Whether `class` (looked up by the machine's `spec.class`) can serve `machine`.
pub fn check_class<'a>(machine: &Machine, class: Option<&'a MachineClass>) -> Result<&'a MachineClass, ClassProblem> {
    let wanted = &machine.spec.class;
    if wanted.kind != MACHINE_CLASS_KIND {
        return Err(ClassProblem::WrongKind(wanted.kind.clone()));
    }
    let class = class.ok_or_else(|| ClassProblem::Missing(wanted.name.clone()))?;
    if !has_finalizer(class.metadata.finalizers.as_ref(), MACHINE_FINALIZER) {
        return Err(ClassProblem::NoFinalizer(wanted.name.clone()));
    }
    validate_node_template(class.spec.node_template.as_ref())
        .map_err(|why| ClassProblem::InvalidNodeTemplate(wanted.name.clone(), why))?;
    Ok(class)
}

/// The finalizer a referenced Secret carries.
pub const fn secret_finalizer() -> &'static str {
    SECRET_FINALIZER
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::SecretReference;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::api::mcm::{ClassSpec, MachineClassFields};

    fn template(capacity: &[&str], zone: &str) -> NodeTemplate {
        NodeTemplate {
            capacity: capacity.iter().map(|k| (k.to_string(), Quantity("1".into()))).collect::<BTreeMap<_, _>>(),
            instance_type: "m.small".into(),
            region: "local".into(),
            zone: zone.into(),
            ..Default::default()
        }
    }

    #[test]
    fn finalizer_follows_references() {
        let cases = [
            (false, true, false, Some(FinalizerChange::Add)),
            (true, true, false, None),
            (true, false, false, Some(FinalizerChange::Remove)),
            (true, false, true, Some(FinalizerChange::Remove)),
            (false, true, true, None),
            (false, false, false, None),
        ];
        for (has, referenced, deleting, want) in cases {
            assert_eq!(finalizer_change(has, referenced, deleting), want, "{has} {referenced} {deleting}");
        }
    }

    #[test]
    fn node_template_validation() {
        let cases = [
            ("none", None, Ok(())),
            ("complete", Some(template(&["cpu", "gpu", "memory"], "a")), Ok(())),
            (
                "no gpu",
                Some(template(&["cpu", "memory"], "a")),
                Err("nodeTemplate.capacity must contain cpu, gpu and memory (missing: gpu)".to_string()),
            ),
            (
                "no zone, no memory",
                Some(template(&["cpu", "gpu"], "")),
                Err("nodeTemplate.capacity must contain cpu, gpu and memory (missing: memory); nodeTemplate.instanceType, \
                     region and zone must be set (missing: zone)"
                    .to_string()),
            ),
        ];
        for (name, t, want) in cases {
            assert_eq!(validate_node_template(t.as_ref()), want, "{name}");
        }
    }

    #[test]
    fn class_readiness() {
        let mut m = Machine::new("m", Default::default());
        m.metadata.namespace = Some("ns".into());
        m.spec.class = ClassSpec { kind: "MachineClass".into(), name: "c".into(), api_group: None };
        let mut class = MachineClass::new("c", MachineClassFields::default());
        class.metadata.namespace = Some("ns".into());
        let problem = |c: Option<&MachineClass>, m: &Machine| check_class(m, c).err();
        assert_eq!(problem(None, &m), Some(ClassProblem::Missing("c".into())));
        assert_eq!(problem(Some(&class), &m), Some(ClassProblem::NoFinalizer("c".into())));
        class.metadata.finalizers = Some(vec![MACHINE_FINALIZER.into()]);
        assert!(check_class(&m, Some(&class)).is_ok());
        class.spec.node_template = Some(template(&["cpu"], "a"));
        assert!(matches!(check_class(&m, Some(&class)), Err(ClassProblem::InvalidNodeTemplate(..))));
        m.spec.class.kind = "AWSMachineClass".into();
        assert_eq!(problem(Some(&class), &m), Some(ClassProblem::WrongKind("AWSMachineClass".into())));
        assert!(!uses_class(&m, "ns", "c"));
        m.spec.class.kind = "MachineClass".into();
        assert!(uses_class(&m, "ns", "c") && !uses_class(&m, "other", "c"));
    }

    #[test]
    fn secret_references() {
        let mut class = MachineClass::new("c", MachineClassFields::default());
        class.metadata.namespace = Some("ns".into());
        class.spec.secret_ref = Some(SecretReference { name: Some("s".into()), namespace: None });
        class.spec.credentials_secret_ref =
            Some(SecretReference { name: Some("creds".into()), namespace: Some("other".into()) });
        assert_eq!(secret_refs(&class), vec![("ns".into(), "s".into()), ("other".into(), "creds".into())]);
    }
}
