//! Builders for the MachineDeployment tables.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::mcm::names::{DESIRED_REPLICAS, MAX_REPLICAS, REVISION, TEMPLATE_HASH_LABEL};
use crate::api::mcm::{
    ClassSpec, MachineDeployment, MachineDeploymentSpec, MachineDeploymentStrategy, MachineDeploymentStrategyType,
    MachineSet, MachineSetSpec, MachineSetStatus, MachineSpec, MachineTemplateSpec, UpdateConfiguration,
};

/// The reference instant of the tables.
pub(crate) const NOW: &str = "2026-03-01T12:00:00Z";

pub(crate) fn now() -> Timestamp {
    NOW.parse().unwrap()
}

/// `base + minutes` from 2026-03-01T10:00:00Z.
pub(crate) fn at_minute(min: u32) -> Timestamp {
    Timestamp::from_second(1_772_359_200 + i64::from(min) * 60).unwrap()
}

pub(crate) fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn ios(s: &str) -> IntOrString {
    if let Ok(i) = s.parse() { IntOrString::Int(i) } else { IntOrString::String(s.into()) }
}

/// A RollingUpdate strategy; numbers are absolute, `N%` are percentages, anything else an invalid string.
pub(crate) fn rolling(surge: &str, unavailable: &str) -> MachineDeploymentStrategy {
    MachineDeploymentStrategy {
        type_: Some(MachineDeploymentStrategyType::RollingUpdate),
        rolling_update: Some(UpdateConfiguration {
            max_surge: Some(ios(surge)),
            max_unavailable: Some(ios(unavailable)),
        }),
        in_place_update: None,
    }
}

/// An InPlaceUpdate strategy with `orchestration` `Auto` or `Manual` (anything else is carried as written).
pub(crate) fn in_place(surge: &str, unavailable: &str, orchestration: &str) -> MachineDeploymentStrategy {
    MachineDeploymentStrategy {
        type_: Some(MachineDeploymentStrategyType::InPlaceUpdate),
        rolling_update: None,
        in_place_update: Some(crate::api::mcm::InPlaceUpdate {
            update: UpdateConfiguration { max_surge: Some(ios(surge)), max_unavailable: Some(ios(unavailable)) },
            orchestration_type: Some(orchestration.into()),
        }),
    }
}

/// A Recreate strategy.
pub(crate) fn recreate() -> MachineDeploymentStrategy {
    MachineDeploymentStrategy { type_: Some(MachineDeploymentStrategyType::Recreate), ..Default::default() }
}

/// CAPI's OnDelete strategy, as the conversion carries it.
pub(crate) fn on_delete() -> MachineDeploymentStrategy {
    MachineDeploymentStrategy {
        type_: Some(MachineDeploymentStrategyType::Other(super::rollout::ON_DELETE.into())),
        ..Default::default()
    }
}

/// The template of the tables: labels `name=pool`, class `class-a`.
pub(crate) fn template(class: &str) -> MachineTemplateSpec {
    MachineTemplateSpec {
        metadata: Some(ObjectMeta { labels: Some(map(&[("name", "pool")])), ..Default::default() }),
        spec: Some(MachineSpec {
            class: ClassSpec { kind: "MachineClass".into(), name: class.into(), api_group: None },
            ..Default::default()
        }),
    }
}

/// A valid MachineDeployment `name` selecting `name=pool`, generation 1, observed 1.
pub(crate) fn deployment(name: &str, replicas: i32, strategy: MachineDeploymentStrategy) -> MachineDeployment {
    let mut d = MachineDeployment::new(
        name,
        MachineDeploymentSpec {
            replicas,
            selector: Some(LabelSelector { match_labels: Some(map(&[("name", "pool")])), match_expressions: None }),
            template: template("class-a"),
            strategy: Some(strategy),
            ..Default::default()
        },
    );
    d.metadata.namespace = Some("ns".into());
    d.metadata.uid = Some(format!("uid-{name}"));
    d.metadata.generation = Some(1);
    d.status = Some(crate::api::mcm::MachineDeploymentStatus { observed_generation: Some(1), ..Default::default() });
    d
}

/// A MachineSet of deployment `d` created at `created` minutes, with `spec.replicas`, `status.replicas` and
/// `status.availableReplicas` (ready = available), template class `class-a`.
pub(crate) fn ms(name: &str, created: u32, spec: i32, actual: i32, available: i32) -> MachineSet {
    let mut s = MachineSet::new(
        name,
        MachineSetSpec {
            replicas: spec,
            selector: Some(LabelSelector {
                match_labels: Some(map(&[("name", "pool"), (TEMPLATE_HASH_LABEL, name)])),
                match_expressions: None,
            }),
            template: Some(template("class-a")),
            ..Default::default()
        },
    );
    s.metadata.namespace = Some("ns".into());
    s.metadata.uid = Some(format!("uid-{name}"));
    s.metadata.creation_timestamp = Some(Time(at_minute(created)));
    s.metadata.generation = Some(1);
    s.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "machine.sapcloud.io/v1alpha1".into(),
        kind: "MachineDeployment".into(),
        name: "d".into(),
        uid: "uid-d".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    s.status = Some(MachineSetStatus {
        replicas: actual,
        fully_labeled_replicas: actual,
        ready_replicas: available,
        available_replicas: available,
        observed_generation: Some(1),
        ..Default::default()
    });
    s
}

/// Builder-style edits of a MachineSet for the tables.
pub(crate) trait SetExt {
    fn class(self, class: &str) -> Self;
    fn revision(self, rev: &str) -> Self;
    fn replicas_annotations(self, desired: i32, max: i32) -> Self;
    fn annotate(self, k: &str, v: &str) -> Self;
    fn label_set(self, k: &str, v: &str) -> Self;
}

impl SetExt for MachineSet {
    fn class(mut self, class: &str) -> Self {
        let mut t = template(class);
        if let Some(meta) = t.metadata.as_mut() {
            meta.labels
                .get_or_insert_with(BTreeMap::new)
                .insert(TEMPLATE_HASH_LABEL.into(), self.metadata.name.clone().unwrap_or_default());
        }
        self.spec.template = Some(t);
        self
    }
    fn revision(self, rev: &str) -> Self {
        self.annotate(REVISION, rev)
    }
    fn replicas_annotations(self, desired: i32, max: i32) -> Self {
        self.annotate(DESIRED_REPLICAS, &desired.to_string()).annotate(MAX_REPLICAS, &max.to_string())
    }
    fn annotate(mut self, k: &str, v: &str) -> Self {
        self.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
    fn label_set(mut self, k: &str, v: &str) -> Self {
        self.metadata.labels.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
}
