//! MCM's machine lifecycle families, filled by the machine controllers where MCM fills them: gauges holding the last
//! duration (whole seconds) per MachineDeployment, instance type and zone, the failed-join counter, and the count of
//! stale machines the MachineSet controller replaced.
//!
//! Like MCM, a machine without the label `name` (its MachineDeployment, as Gardener sets it) is not recorded.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::reconcile::DrainLabels;
use super::{LifecycleLabels, SecondsGauge, Untyped};
use crate::api::mcm::Machine;

/// The Node label MCM takes a machine's zone from (on the Machine's nodeTemplate).
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The families; clones share them.
#[derive(Clone, Debug, Default)]
pub struct MachineMetrics {
    /// `mcm_machine_create_duration_seconds`: from the Machine's creation to the driver's successful create.
    pub create: Family<LifecycleLabels, SecondsGauge>,
    /// `mcm_machine_initialize_duration_seconds`: the driver's successful initialize call.
    pub initialize: Family<LifecycleLabels, SecondsGauge>,
    /// `mcm_machine_join_duration_seconds`: from the Machine's creation to its first Running (the Node joined).
    pub join: Family<LifecycleLabels, SecondsGauge>,
    /// `mcm_machine_drain_duration_seconds`: a finished drain of the machine's Node.
    pub drain: Family<DrainLabels, SecondsGauge>,
    /// `mcm_machine_delete_duration_seconds`: from the Machine's deletion timestamp to the driver's successful
    /// delete.
    pub delete: Family<LifecycleLabels, SecondsGauge>,
    /// `mcm_machine_num_failed_join`: machines that went Pending -> Failed at the creation timeout.
    /// (A gauge only counting up, shown untyped: an OpenMetrics counter would add `_total` to MCM's name.)
    pub failed_join: Untyped<Family<LifecycleLabels, prometheus_client::metrics::gauge::Gauge>>,
    /// `mcm_machine_stale_machines_total`: Failed machines the MachineSet controller deleted to replace them.
    pub stale: Counter,
}

/// Which duration a lifecycle step sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The VM was created.
    Create,
    /// The VM was initialized.
    Initialize,
    /// The Node joined.
    Join,
    /// The VM was deleted.
    Delete,
}

/// MCM's labels of `machine` with the class's `instance_type`; `None` without the label `name`.
pub fn lifecycle_labels(machine: &Machine, instance_type: Option<&str>) -> Option<LifecycleLabels> {
    let drain = drain_labels(machine)?;
    let zone = machine
        .spec
        .node_template
        .as_ref()
        .and_then(|t| t.metadata.as_ref()?.labels.as_ref()?.get(ZONE_LABEL).cloned())
        .unwrap_or_default();
    Some(LifecycleLabels {
        namespace: drain.namespace,
        machine_deployment: drain.machine_deployment,
        instance_type: instance_type.unwrap_or_default().to_string(),
        zone,
    })
}

fn drain_labels(machine: &Machine) -> Option<DrainLabels> {
    let meta = &machine.metadata;
    let deployment = meta.labels.as_ref()?.get("name").filter(|n| !n.is_empty())?;
    Some(DrainLabels { namespace: meta.namespace.clone().unwrap_or_default(), machine_deployment: deployment.clone() })
}

/// Whether deleting `machine` replaces a stale one, as MCM counts them: Failed after its health check timed out.
pub fn stale(machine: &Machine) -> bool {
    use crate::api::mcm::{MachineOperationType, MachinePhase};
    use crate::lifecycle::status;
    status::phase(machine) == Some(&MachinePhase::Failed)
        && status::last_operation(machine).and_then(|o| o.type_.as_ref()) == Some(&MachineOperationType::HealthCheck)
}

/// Whole seconds, as MCM rounds them.
fn seconds(took: Duration) -> f64 {
    took.as_secs_f64().round()
}

/// The time since `at`, or zero when `at` lies ahead.
pub fn since(at: jiff::Timestamp) -> Duration {
    Duration::try_from(jiff::Timestamp::now().duration_since(at)).unwrap_or_default()
}

impl MachineMetrics {
    /// Adds the families to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let gauges = [
            ("mcm_machine_create_duration_seconds", "Seconds from a Machine's creation to its VM's", &self.create),
            ("mcm_machine_initialize_duration_seconds", "Seconds a Machine's VM initialization took", &self.initialize),
            ("mcm_machine_join_duration_seconds", "Seconds from a Machine's creation to its Node joining", &self.join),
            ("mcm_machine_delete_duration_seconds", "Seconds from a Machine's deletion to its VM's", &self.delete),
        ];
        for (name, help, family) in gauges {
            registry.register(name, help, family.clone());
        }
        registry.register("mcm_machine_drain_duration_seconds", "Seconds a Machine's drain took", self.drain.clone());
        registry.register(
            "mcm_machine_num_failed_join",
            "Machines that failed to join the cluster before the creation timeout",
            self.failed_join.clone(),
        );
        registry.register(
            "mcm_machine_stale_machines",
            "Failed machines deleted by their MachineSet to be replaced",
            self.stale.clone(),
        );
    }

    /// Sets `step`'s gauge of `machine` to `took`.
    pub fn record(&self, step: Step, machine: &Machine, instance_type: Option<&str>, took: Duration) {
        let Some(labels) = lifecycle_labels(machine, instance_type) else { return };
        let family = match step {
            Step::Create => &self.create,
            Step::Initialize => &self.initialize,
            Step::Join => &self.join,
            Step::Delete => &self.delete,
        };
        family.get_or_create(&labels).set(seconds(took));
    }

    /// Sets the drain gauge of `machine` to `took`.
    pub fn drained(&self, machine: &Machine, took: Duration) {
        if let Some(labels) = drain_labels(machine) {
            self.drain.get_or_create(&labels).set(seconds(took));
        }
    }

    /// Counts `machine` failing to join.
    pub fn failed_to_join(&self, machine: &Machine, instance_type: Option<&str>) {
        if let Some(labels) = lifecycle_labels(machine, instance_type) {
            self.failed_join.0.get_or_create(&labels).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(labels: serde_json::Value) -> Machine {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m1", "namespace": "shoot", "labels": labels},
            "spec": {"class": {"kind": "MachineClass", "name": "c"},
                     "nodeTemplate": {"metadata": {"labels": {"topology.kubernetes.io/zone": "zone-a"}}}},
        }))
        .unwrap()
    }

    fn text(metrics: &MachineMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn gauges_hold_the_last_whole_seconds_under_mcms_labels() {
        let metrics = MachineMetrics::default();
        let m = machine(serde_json::json!({"name": "workers"}));
        metrics.record(Step::Create, &m, Some("m5.large"), Duration::from_millis(61_600));
        metrics.record(Step::Create, &m, Some("m5.large"), Duration::from_millis(30_200));
        metrics.drained(&m, Duration::from_millis(1_500));
        metrics.failed_to_join(&m, Some("m5.large"));
        let text = text(&metrics);
        let labels = r#"{namespace="shoot",machine_deployment="workers",instance_type="m5.large",zone="zone-a"}"#;
        for series in [
            format!("mcm_machine_create_duration_seconds{labels} 30.0"),
            r#"mcm_machine_drain_duration_seconds{namespace="shoot",machine_deployment="workers"} 2.0"#.to_string(),
            format!("mcm_machine_num_failed_join{labels} 1"),
            "# TYPE mcm_machine_create_duration_seconds gauge".to_string(),
        ] {
            assert!(text.contains(&series), "{series} in {text}");
        }
    }

    #[test]
    fn machines_without_a_deployment_are_not_recorded() {
        let metrics = MachineMetrics::default();
        let m = machine(serde_json::json!({}));
        metrics.record(Step::Join, &m, None, Duration::from_secs(5));
        metrics.drained(&m, Duration::from_secs(5));
        let text = text(&metrics);
        assert!(!text.contains("mcm_machine_join_duration_seconds{"), "{text}");
        assert!(!text.contains("mcm_machine_drain_duration_seconds{"), "{text}");
    }

    #[test]
    fn stale_is_failed_by_the_health_check() {
        let with = |phase: &str, op: &str| {
            let mut m = machine(serde_json::json!({"name": "workers"}));
            m.status = serde_json::from_value(serde_json::json!({
                "currentStatus": {"phase": phase}, "lastOperation": {"type": op, "state": "Failed"},
            }))
            .unwrap();
            stale(&m)
        };
        assert!(with("Failed", "HealthCheck"));
        assert!(!with("Failed", "Create"), "a failed creation is not stale");
        assert!(!with("Unknown", "HealthCheck"));
    }
}
