//! Gauges of the control cluster's objects, computed at scrape time from reflector stores: MCM's machine,
//! MachineSet and MachineDeployment families (counts, info, spec and status numbers, conditions, failed machines)
//! with MCM's names, labels and values, our `mcm_controller_machines_by_phase`, and the safety controller's frozen
//! gauge. Unlike MCM's gauge vectors, which keep a deleted object's series until a restart, a scrape shows the
//! objects that exist.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::mcm::{Machine, MachineDeployment, MachinePhase, MachineSet, MachineSummary};

/// Every phase a machine can be counted in; `Creating` stands for an absent phase.
pub const PHASES: [&str; 11] = [
    "Creating",
    "Pending",
    "Available",
    "Running",
    "Terminating",
    "Unknown",
    "Failed",
    "CrashLoopBackOff",
    "InPlaceUpdating",
    "InPlaceUpdateSuccessful",
    "InPlaceUpdateFailed",
];

/// MCM's numeric encoding of a phase in `mcm_machine_current_status_phase` (others are 0).
pub fn phase_value(phase: Option<&MachinePhase>) -> i64 {
    match phase {
        Some(MachinePhase::Terminating) => -4,
        Some(MachinePhase::Failed) => -3,
        Some(MachinePhase::CrashLoopBackOff) => -2,
        Some(MachinePhase::Unknown) => -1,
        Some(MachinePhase::Running) => 1,
        _ => 0,
    }
}

#[derive(Clone, Default)]
struct Stores {
    machines: Option<Store<Machine>>,
    sets: Option<Store<MachineSet>>,
    deployments: Option<Store<MachineDeployment>>,
}

/// The collector; clones share the stores and the frozen gauge slot.
#[derive(Clone, Default)]
pub struct ObjectMetrics {
    stores: Arc<Mutex<Stores>>,
    frozen: Arc<Mutex<Option<Gauge>>>,
}

impl std::fmt::Debug for ObjectMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectMetrics").finish_non_exhaustive()
    }
}

fn reflect<K>(api: Api<K>, ready: watch::Sender<bool>) -> (Store<K>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let store = reader.clone();
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).default_backoff().reflect(writer).applied_objects();
        futures::pin_mut!(stream);
        let ready_wait = async {
            if reader.wait_until_ready().await.is_ok() {
                ready.send_replace(true);
            }
            futures::future::pending::<()>().await
        };
        tokio::select! {
            _ = stream.for_each(|_| futures::future::ready(())) => {}
            _ = ready_wait => {}
        }
    });
    (store, task)
}

impl ObjectMetrics {
    /// Watches Machines, MachineSets and MachineDeployments (in `namespace`, or all) for the gauges; the returned
    /// receiver turns `true` once all three have their first list.
    pub fn watch(&self, client: &Client, namespace: Option<&str>) -> (watch::Receiver<bool>, Vec<JoinHandle<()>>) {
        fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
        where
            K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
        {
            match namespace {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            }
        }
        let (m_ready, mut m_rx) = watch::channel(false);
        let (s_ready, mut s_rx) = watch::channel(false);
        let (d_ready, mut d_rx) = watch::channel(false);
        let (machines, t1) = reflect(api::<Machine>(client, namespace), m_ready);
        let (sets, t2) = reflect(api::<MachineSet>(client, namespace), s_ready);
        let (deployments, t3) = reflect(api::<MachineDeployment>(client, namespace), d_ready);
        if let Ok(mut stores) = self.stores.lock() {
            *stores = Stores { machines: Some(machines), sets: Some(sets), deployments: Some(deployments) };
        }
        let (all_ready, all_rx) = watch::channel(false);
        let t4 = tokio::spawn(async move {
            let _ = m_rx.wait_for(|r| *r).await;
            let _ = s_rx.wait_for(|r| *r).await;
            let _ = d_rx.wait_for(|r| *r).await;
            all_ready.send_replace(true);
        });
        (all_rx, vec![t1, t2, t3, t4])
    }

    /// Shows these objects (a test's stand-in for [`ObjectMetrics::watch`]).
    #[cfg(test)]
    pub(crate) fn show(&self, machines: Vec<Machine>, sets: Vec<MachineSet>, deployments: Vec<MachineDeployment>) {
        fn store<K>(objects: Vec<K>) -> Store<K>
        where
            K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
        {
            let (reader, mut writer) = reflector::store();
            for o in objects {
                writer.apply_watcher_event(&watcher::Event::Apply(o));
            }
            reader
        }
        if let Ok(mut stores) = self.stores.lock() {
            *stores = Stores {
                machines: Some(store(machines)),
                sets: Some(store(sets)),
                deployments: Some(store(deployments)),
            };
        }
    }

    /// Shows `gauge` as `mcm_machine_controller_frozen` (the running controllers' freeze flag); `None` shows 0.
    pub fn set_frozen_gauge(&self, gauge: Option<Gauge>) {
        if let Ok(mut slot) = self.frozen.lock() {
            *slot = gauge;
        }
    }
}

type Labels = Vec<(&'static str, String)>;

/// One number of a MachineDeployment (a gauge's value).
type DeploymentValue<'a> = dyn Fn(&MachineDeployment) -> i64 + 'a;

/// A number a MachineDeployment may not set (no series then).
type OptionalValue<'a> = dyn Fn(&MachineDeployment) -> Option<i64> + 'a;

fn gauge_family(encoder: &mut DescriptorEncoder, name: &str, help: &str, rows: &[(Labels, i64)]) -> std::fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in rows {
        let family = metric.encode_family(labels)?;
        ConstGauge::new(*value).encode(family)?;
    }
    Ok(())
}

fn single(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> std::fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

fn key(namespace: Option<String>, name: String) -> Labels {
    vec![("name", name), ("namespace", namespace.unwrap_or_default())]
}

/// A string enum's or struct's JSON text (`RollingUpdate`, `Running`), empty when it has none.
fn text<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// A creation timestamp in Unix seconds, as MCM's `createdAt` label.
fn created_at(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.creation_timestamp.as_ref().map(|t| t.0.as_second()).unwrap_or_default().to_string()
}

/// MCM's value of a condition status: True 1, False 0, Unknown 2.
fn condition_value(status: &str) -> i64 {
    match status {
        "True" => 1,
        "Unknown" => 2,
        _ => 0,
    }
}

/// The rows of a condition family: one per condition of each object.
fn condition_rows<'a>(items: impl Iterator<Item = (Labels, Vec<(String, String)>)> + 'a) -> Vec<(Labels, i64)> {
    let mut rows = Vec::new();
    for (key, conditions) in items {
        for (type_, status) in conditions {
            let mut labels = key.clone();
            labels.push(("condition", type_));
            rows.push((labels, condition_value(&status)));
        }
    }
    rows
}

/// The rows of a failed-machines family: 1 per failed machine of each object.
fn failed_rows(key: &Labels, failed: Option<&Vec<MachineSummary>>) -> Vec<(Labels, i64)> {
    failed
        .into_iter()
        .flatten()
        .map(|m| {
            let op = m.last_operation.clone().unwrap_or_default();
            let mut labels = key.clone();
            labels.extend([
                ("failed_machine_name", m.name.clone().unwrap_or_default()),
                ("failed_machine_provider_id", m.provider_id.clone().unwrap_or_default()),
                ("failed_machine_owner_ref", m.owner_ref.clone().unwrap_or_default()),
                ("failed_machine_last_operation_state", op.state.as_ref().map(text).unwrap_or_default()),
                (
                    "failed_machine_last_operation_machine_operation_type",
                    op.type_.as_ref().map(text).unwrap_or_default(),
                ),
            ]);
            (labels, 1)
        })
        .collect()
}

/// An `IntOrString` as Kubernetes' `IntValue`: the number, or a string's integer parse (0 for a percentage).
fn int_value(value: Option<&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>) -> i64 {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match value {
        Some(IntOrString::Int(i)) => i64::from(*i),
        Some(IntOrString::String(s)) => s.parse().unwrap_or(0),
        None => 0,
    }
}

impl Collector for ObjectMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let stores = self.stores.lock().map(|s| s.clone()).unwrap_or_default();
        let frozen = self.frozen.lock().ok().and_then(|g| g.as_ref().map(Gauge::get)).unwrap_or(0);
        single(&mut encoder, super::FROZEN_METRIC, "1 while machine reconciles are frozen", frozen)?;

        if let Some(machines) = stores.machines {
            let machines = machines.state();
            let mut by_phase: BTreeMap<&str, i64> = PHASES.iter().map(|p| (*p, 0)).collect();
            let mut each = Vec::with_capacity(machines.len());
            for m in &machines {
                let phase = m.status.as_ref().and_then(|s| s.current_status.as_ref()).and_then(|c| c.phase.as_ref());
                let name = phase.map_or("Creating", |p| p.as_str());
                *by_phase.entry(name).or_insert(0) += 1;
                each.push((key(m.namespace(), m.name_any()), phase_value(phase)));
            }
            single(&mut encoder, "mcm_machine_items_total", "Machines", machines.len() as i64)?;
            let rows: Vec<(Labels, i64)> =
                by_phase.into_iter().map(|(phase, n)| (vec![("phase", phase.to_string())], n)).collect();
            gauge_family(
                &mut encoder,
                "mcm_controller_machines_by_phase",
                "Machines by status.currentStatus.phase (Creating: none yet)",
                &rows,
            )?;
            let info: Vec<(Labels, i64)> = machines
                .iter()
                .map(|m| {
                    let class = &m.spec.class;
                    let mut labels = key(m.namespace(), m.name_any());
                    labels.extend([
                        ("createdAt", created_at(&m.metadata)),
                        ("spec_provider_id", m.spec.provider_id.clone().unwrap_or_default()),
                        ("spec_class_api_group", class.api_group.clone().unwrap_or_default()),
                        ("spec_class_kind", class.kind.clone()),
                        ("spec_class_name", class.name.clone()),
                        ("node_name", m.labels().get("node").cloned().unwrap_or_default()),
                    ]);
                    (labels, 1)
                })
                .collect();
            gauge_family(&mut encoder, "mcm_machine_info", "Each machine (1) with its identity as labels", &info)?;
            let conditions = condition_rows(machines.iter().map(|m| {
                let each = m.status.as_ref().and_then(|s| s.conditions.as_ref());
                let each = each.into_iter().flatten().map(|c| (c.type_.clone(), c.status.clone())).collect();
                (key(m.namespace(), m.name_any()), each)
            }));
            gauge_family(
                &mut encoder,
                "mcm_machine_status_condition",
                "Each machine's Node conditions: True 1, False 0, Unknown 2",
                &conditions,
            )?;
            gauge_family(
                &mut encoder,
                "mcm_machine_current_status_phase",
                "Each machine's phase: Terminating -4, Failed -3, CrashLoopBackOff -2, Unknown -1, Pending 0, Running 1",
                &each,
            )?;
        }
        if let Some(sets) = stores.sets {
            let sets = sets.state();
            single(&mut encoder, "mcm_machine_set_items_total", "MachineSets", sets.len() as i64)?;
            let rows = |f: &dyn Fn(&MachineSet) -> i64| -> Vec<(Labels, i64)> {
                sets.iter().map(|s| (key(s.namespace(), s.name_any()), f(s))).collect()
            };
            let status = |s: &MachineSet| s.status.clone().unwrap_or_default();
            let info: Vec<(Labels, i64)> = sets
                .iter()
                .map(|s| {
                    let class = s.spec.machine_class.clone().unwrap_or_default();
                    let mut labels = key(s.namespace(), s.name_any());
                    labels.extend([
                        ("createdAt", created_at(&s.metadata)),
                        ("spec_machine_class_api_group", class.api_group.unwrap_or_default()),
                        ("spec_machine_class_kind", class.kind),
                        ("spec_machine_class_name", class.name),
                    ]);
                    (labels, 1)
                })
                .collect();
            gauge_family(&mut encoder, "mcm_machine_set_info", "Each MachineSet (1) with its class as labels", &info)?;
            gauge_family(
                &mut encoder,
                "mcm_machine_set_info_spec_replicas",
                "spec.replicas",
                &rows(&|s| i64::from(s.spec.replicas)),
            )?;
            gauge_family(
                &mut encoder,
                "mcm_machine_set_info_spec_min_ready_seconds",
                "spec.minReadySeconds",
                &rows(&|s| i64::from(s.spec.min_ready_seconds)),
            )?;
            let conditions = condition_rows(sets.iter().map(|s| {
                let each = status(s).machine_set_condition.unwrap_or_default();
                let each = each.iter().map(|c| (text(&c.type_), text(&c.status))).collect();
                (key(s.namespace(), s.name_any()), each)
            }));
            gauge_family(
                &mut encoder,
                "mcm_machine_set_status_condition",
                "Each MachineSet's conditions: True 1, False 0, Unknown 2",
                &conditions,
            )?;
            let failed: Vec<(Labels, i64)> = sets
                .iter()
                .flat_map(|s| failed_rows(&key(s.namespace(), s.name_any()), status(s).failed_machines.as_ref()))
                .collect();
            gauge_family(
                &mut encoder,
                "mcm_machine_set_failed_machines",
                "Each MachineSet's failed machines (1) from status.failedMachines",
                &failed,
            )?;
            gauge_family(
                &mut encoder,
                "mcm_machine_set_status_replicas",
                "status.replicas",
                &rows(&|s| i64::from(status(s).replicas)),
            )?;
            gauge_family(
                &mut encoder,
                "mcm_machine_set_status_ready_replicas",
                "status.readyReplicas",
                &rows(&|s| i64::from(status(s).ready_replicas)),
            )?;
            gauge_family(
                &mut encoder,
                "mcm_machine_set_status_available_replicas",
                "status.availableReplicas",
                &rows(&|s| i64::from(status(s).available_replicas)),
            )?;
            gauge_family(
                &mut encoder,
                "mcm_machine_set_status_fully_labelled_replicas",
                "status.fullyLabeledReplicas",
                &rows(&|s| i64::from(status(s).fully_labeled_replicas)),
            )?;
        }
        if let Some(deployments) = stores.deployments {
            let deployments = deployments.state();
            single(&mut encoder, "mcm_machine_deployment_items_total", "MachineDeployments", deployments.len() as i64)?;
            let rows = |f: &dyn Fn(&MachineDeployment) -> i64| -> Vec<(Labels, i64)> {
                deployments.iter().map(|d| (key(d.namespace(), d.name_any()), f(d))).collect()
            };
            let status = |d: &MachineDeployment| d.status.clone().unwrap_or_default();
            let families: [(&str, &str, &DeploymentValue<'_>); 7] = [
                ("mcm_machine_deployment_info_spec_replicas", "spec.replicas", &|d| i64::from(d.spec.replicas)),
                ("mcm_machine_deployment_info_spec_paused", "spec.paused (1 or 0)", &|d| i64::from(d.spec.paused)),
                ("mcm_machine_deployment_status_replicas", "status.replicas", &|d| i64::from(status(d).replicas)),
                ("mcm_machine_deployment_status_updated_replicas", "status.updatedReplicas", &|d| {
                    i64::from(status(d).updated_replicas)
                }),
                ("mcm_machine_deployment_status_ready_replicas", "status.readyReplicas", &|d| {
                    i64::from(status(d).ready_replicas)
                }),
                ("mcm_machine_deployment_status_available_replicas", "status.availableReplicas", &|d| {
                    i64::from(status(d).available_replicas)
                }),
                ("mcm_machine_deployment_status_unavailable_replicas", "status.unavailableReplicas", &|d| {
                    i64::from(status(d).unavailable_replicas)
                }),
            ];
            for (name, help, f) in families {
                gauge_family(&mut encoder, name, help, &rows(f))?;
            }
            let info: Vec<(Labels, i64)> = deployments
                .iter()
                .map(|d| {
                    let strategy = d.spec.strategy.as_ref().and_then(|s| s.type_.as_ref()).map(text);
                    let mut labels = key(d.namespace(), d.name_any());
                    labels.extend([
                        ("createdAt", created_at(&d.metadata)),
                        ("spec_strategy_type", strategy.unwrap_or_default()),
                    ]);
                    (labels, 1)
                })
                .collect();
            gauge_family(
                &mut encoder,
                "mcm_machine_deployment_info",
                "Each MachineDeployment (1) with its strategy",
                &info,
            )?;
            gauge_family(
                &mut encoder,
                "mcm_machine_deployment_info_spec_min_ready_seconds",
                "spec.minReadySeconds",
                &rows(&|d| i64::from(d.spec.min_ready_seconds)),
            )?;
            // Like MCM: the optional numbers only for the objects that set them.
            let some_rows = |f: &dyn Fn(&MachineDeployment) -> Option<i64>| -> Vec<(Labels, i64)> {
                deployments.iter().filter_map(|d| Some((key(d.namespace(), d.name_any()), f(d)?))).collect()
            };
            let rolling = |d: &MachineDeployment| {
                let strategy = d.spec.strategy.as_ref()?;
                let rolling = strategy.type_.as_ref().map(text).is_none_or(|t| t == "RollingUpdate");
                strategy.rolling_update.clone().filter(|_| rolling)
            };
            let optional: [(&str, &str, &OptionalValue<'_>); 6] = [
                (
                    "mcm_machine_deployment_info_spec_rolling_update_max_surge",
                    "spec.strategy.rollingUpdate.maxSurge (a percentage shows 0)",
                    &|d| rolling(d).map(|r| int_value(r.max_surge.as_ref())),
                ),
                (
                    "mcm_machine_deployment_info_spec_rolling_update_max_unavailable",
                    "spec.strategy.rollingUpdate.maxUnavailable (a percentage shows 0)",
                    &|d| rolling(d).map(|r| int_value(r.max_unavailable.as_ref())),
                ),
                ("mcm_machine_deployment_info_spec_revision_history_limit", "spec.revisionHistoryLimit", &|d| {
                    d.spec.revision_history_limit.map(i64::from)
                }),
                ("mcm_machine_deployment_info_spec_progress_deadline_seconds", "spec.progressDeadlineSeconds", &|d| {
                    d.spec.progress_deadline_seconds.map(i64::from)
                }),
                ("mcm_machine_deployment_info_spec_rollback_to_revision", "spec.rollbackTo.revision", &|d| {
                    d.spec.rollback_to.as_ref().map(|r| r.revision)
                }),
                ("mcm_machine_deployment_status_collision_count", "status.collisionCount", &|d| {
                    status(d).collision_count.map(i64::from)
                }),
            ];
            for (name, help, f) in optional {
                gauge_family(&mut encoder, name, help, &some_rows(f))?;
            }
            let conditions = condition_rows(deployments.iter().map(|d| {
                let each = status(d).conditions.unwrap_or_default();
                let each = each.iter().map(|c| (text(&c.type_), text(&c.status))).collect();
                (key(d.namespace(), d.name_any()), each)
            }));
            gauge_family(
                &mut encoder,
                "mcm_machine_deployment_status_condition",
                "Each MachineDeployment's conditions: True 1, False 0, Unknown 2",
                &conditions,
            )?;
            let failed: Vec<(Labels, i64)> = deployments
                .iter()
                .flat_map(|d| failed_rows(&key(d.namespace(), d.name_any()), status(d).failed_machines.as_ref()))
                .collect();
            gauge_family(
                &mut encoder,
                "mcm_machine_deployment_failed_machines",
                "Each MachineDeployment's failed machines (1) from status.failedMachines",
                &failed,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_values_are_mcms() {
        let rows = [
            (Some(MachinePhase::Terminating), -4),
            (Some(MachinePhase::Failed), -3),
            (Some(MachinePhase::CrashLoopBackOff), -2),
            (Some(MachinePhase::Unknown), -1),
            (Some(MachinePhase::Pending), 0),
            (Some(MachinePhase::Running), 1),
            (Some(MachinePhase::Available), 0),
            (None, 0),
        ];
        for (phase, value) in rows {
            assert_eq!(phase_value(phase.as_ref()), value, "{phase:?}");
        }
    }

    #[test]
    fn frozen_gauge_shows_the_slot() {
        let metrics = crate::metrics::Metrics::new();
        assert!(metrics.encode().contains("mcm_machine_controller_frozen 0"));
        let gauge = Gauge::default();
        gauge.set(1);
        metrics.objects.set_frozen_gauge(Some(gauge));
        assert!(metrics.encode().contains("mcm_machine_controller_frozen 1"));
    }
}
