//! In-place propagation (`docs/machine-lifecycle.md` "In-place propagation" step 4): the node template, the
//! machine configuration (the inlined timeouts and health settings) and `class.kind` of a MachineSet's template
//! are copied into every active machine (not Failed, not terminating) without replacing it. A change to any of
//! them does not roll the MachineDeployment.
//!
//! MCM mutates its informer cache and then updates with a no-op function; we plan one merge patch per machine
//! that differs, and none for the others. MCM copies `class.kind` into every machine, failed and terminating
//! ones included; we skip those as for the other two fields (nothing reads the class of a machine that is going
//! away).

use serde_json::{Value, json};

use crate::api::mcm::{Machine, MachineConfiguration, MachinePhase, MachineSet, NodeTemplateSpec};
use crate::lifecycle::object_meta::{merge_patch_of, semantically_equal};

/// Which template fields a patch brings in line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PropagatedField {
    /// `spec.nodeTemplate`.
    NodeTemplate,
    /// The inlined `MachineConfiguration` fields (`drainTimeout`, `healthTimeout`, …).
    Configuration,
    /// `spec.class.kind`.
    ClassKind,
}

/// A merge patch for one machine.
#[derive(Clone, Debug, PartialEq)]
pub struct MachinePatch {
    /// The machine name.
    pub machine: String,
    /// What differed.
    pub fields: Vec<PropagatedField>,
    /// The JSON merge patch (`{"spec": {...}}`) to apply to the Machine.
    pub patch: Value,
}

/// Plans the patches that bring every active machine in line with the set's template.
pub fn plan_propagation<'a>(set: &MachineSet, machines: impl IntoIterator<Item = &'a Machine>) -> Vec<MachinePatch> {
    let Some(template) = set.spec.template.as_ref().and_then(|t| t.spec.as_ref()) else {
        return Vec::new();
    };
    machines
        .into_iter()
        .filter(|m| active(m))
        .filter_map(|m| {
            let mut desired = m.spec.clone();
            let mut fields = Vec::new();
            if !node_templates_equal(m.spec.node_template.as_ref(), template.node_template.as_ref()) {
                desired.node_template = template.node_template.clone();
                fields.push(PropagatedField::NodeTemplate);
            }
            if !semantically_equal::<MachineConfiguration>(&m.spec.configuration, &template.configuration) {
                desired.configuration = template.configuration.clone();
                fields.push(PropagatedField::Configuration);
            }
            if m.spec.class.kind != template.class.kind {
                desired.class.kind = template.class.kind.clone();
                fields.push(PropagatedField::ClassKind);
            }
            if fields.is_empty() {
                return None;
            }
            let spec_patch = merge_patch_of(&m.spec, &desired)?;
            Some(MachinePatch {
                machine: m.metadata.name.clone().unwrap_or_default(),
                fields,
                patch: json!({ "spec": spec_patch }),
            })
        })
        .collect()
}

/// Active for propagation: not Failed, not Terminating, not being deleted.
fn active(m: &Machine) -> bool {
    let phase = m.status.as_ref().and_then(|s| s.current_status.as_ref()).and_then(|c| c.phase.as_ref());
    m.metadata.deletion_timestamp.is_none() && !matches!(phase, Some(MachinePhase::Failed | MachinePhase::Terminating))
}

/// A missing node template equals an empty one (Go keeps it as a struct, not a pointer).
pub(crate) fn node_templates_equal(a: Option<&NodeTemplateSpec>, b: Option<&NodeTemplateSpec>) -> bool {
    let empty = NodeTemplateSpec::default();
    semantically_equal(a.unwrap_or(&empty), b.unwrap_or(&empty))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;
    use crate::api::Duration;
    use crate::api::mcm::{ClassSpec, CurrentStatus, MachineSetSpec, MachineSpec, MachineStatus, MachineTemplateSpec};

    fn node_template(label: &str) -> NodeTemplateSpec {
        NodeTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(BTreeMap::from([("role".to_string(), label.to_string())])),
                ..Default::default()
            }),
            spec: Some(NodeSpec {
                taints: Some(vec![Taint { key: "k".into(), effect: "NoSchedule".into(), ..Default::default() }]),
                ..Default::default()
            }),
        }
    }

    fn spec(nt: Option<NodeTemplateSpec>, drain: Option<u64>, kind: &str) -> MachineSpec {
        MachineSpec {
            class: ClassSpec { kind: kind.into(), name: "class-a".into(), api_group: None },
            node_template: nt,
            configuration: MachineConfiguration { drain_timeout: drain.map(Duration::from_secs), ..Default::default() },
            ..Default::default()
        }
    }

    fn set(s: MachineSpec) -> MachineSet {
        MachineSet::new(
            "ms",
            MachineSetSpec {
                template: Some(MachineTemplateSpec { metadata: None, spec: Some(s) }),
                ..Default::default()
            },
        )
    }

    fn machine(name: &str, s: MachineSpec, phase: Option<MachinePhase>, deleting: bool) -> Machine {
        let mut m = Machine::new(name, s);
        if deleting {
            m.metadata.deletion_timestamp = Some(Time("2026-03-01T12:00:00Z".parse().unwrap()));
        }
        m.status = Some(MachineStatus {
            current_status: Some(CurrentStatus { phase, ..Default::default() }),
            ..Default::default()
        });
        m
    }

    #[test]
    fn propagation_table() {
        use MachinePhase::*;
        use PropagatedField::*;
        let target = spec(Some(node_template("new")), Some(600), "MachineClass");
        let cases: Vec<(&str, Machine, Vec<PropagatedField>)> = vec![
            ("in line: nothing to do", machine("m", target.clone(), Some(Running), false), vec![]),
            (
                "node template differs",
                machine("m", spec(Some(node_template("old")), Some(600), "MachineClass"), Some(Running), false),
                vec![NodeTemplate],
            ),
            (
                "configuration differs",
                machine("m", spec(Some(node_template("new")), Some(60), "MachineClass"), Some(Pending), false),
                vec![Configuration],
            ),
            (
                "class kind differs",
                machine("m", spec(Some(node_template("new")), Some(600), "AWSMachineClass"), None, false),
                vec![ClassKind],
            ),
            (
                "all three differ",
                machine("m", spec(None, None, ""), Some(Unknown), false),
                vec![NodeTemplate, Configuration, ClassKind],
            ),
            ("failed machines are left alone", machine("m", spec(None, None, ""), Some(Failed), false), vec![]),
            (
                "terminating machines are left alone",
                machine("m", spec(None, None, ""), Some(Terminating), false),
                vec![],
            ),
            ("machines being deleted are left alone", machine("m", spec(None, None, ""), Some(Running), true), vec![]),
        ];
        for (name, m, expected) in cases {
            let patches = plan_propagation(&set(target.clone()), &[m]);
            let got: Vec<PropagatedField> = patches.into_iter().flat_map(|p| p.fields).collect();
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn missing_and_empty_node_templates_are_equal() {
        let s = set(spec(Some(NodeTemplateSpec::default()), None, "MachineClass"));
        let m = machine("m", spec(None, None, "MachineClass"), Some(MachinePhase::Running), false);
        assert!(plan_propagation(&s, &[m]).is_empty());
    }

    #[test]
    fn patch_replaces_the_fields_and_nulls_removed_ones() {
        let mut old = spec(Some(node_template("old")), Some(60), "MachineClass");
        old.configuration.max_evict_retries = Some(3);
        let s = set(spec(Some(node_template("new")), Some(600), "MachineClass"));
        let patches = plan_propagation(&s, &[machine("m", old, Some(MachinePhase::Running), false)]);
        assert_eq!(
            patches[0].patch,
            json!({"spec": {
                "nodeTemplate": {"metadata": {"labels": {"role": "new"}}},
                "drainTimeout": "10m0s",
                "maxEvictRetries": null
            }})
        );
    }
}
