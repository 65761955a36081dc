//! The MachineSet and MachineDeployment controllers end to end, on `mcm dev`'s building blocks (embedded API
//! server, in-memory cloud with short boot times, every controller): scaling, rolling updates with their
//! invariants checked on every watch event, in-place updates, Recreate, pause, rollback, the overshoot freeze, the autoscaler's
//! targeted scale-down, invalid specs, and the sample `mcm dev` applies.

mod autoscaler;
mod freeze;
mod in_place;
mod refused_class;
mod rollout;
mod sample;
mod scaling;
mod shared;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use mcm::api::mcm::{Machine, MachineDeployment, MachinePhase, MachineSet};
use mcm::controllers::ControllerOptions;
use serde_json::{Value, json};

use crate::machines::{Env, NS, fast_options, phase_of};
use crate::support::wait_until;

/// Long enough for anything these tests wait for.
pub const WAIT: Duration = Duration::from_secs(60);

/// Controller options for these tests: fast back-offs and a one-second overshoot sweep.
pub fn options() -> ControllerOptions {
    let mut options = fast_options();
    options.sets.overshooting_period = Duration::from_secs(1);
    options
}

/// Starts an environment with class `small` (boot `boot_seconds`).
pub async fn env_with_class(boot_seconds: f64) -> Env {
    let env = Env::start(options()).await;
    env.class("small", json!({"bootSeconds": boot_seconds})).await;
    env
}

/// A MachineDeployment `name` of class `small` selecting `name=<name>`, as JSON; `strategy` is its
/// `spec.strategy`.
pub fn deployment(name: &str, replicas: i32, strategy: Value) -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"name": name}},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {"class": {"kind": "MachineClass", "name": "small"}},
            },
        },
    })
}

/// `RollingUpdate` with the given fenceposts.
pub fn rolling(max_surge: Value, max_unavailable: Value) -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable}})
}

/// Machines, sets and deployments of the test namespace.
pub struct Apis {
    /// Machines.
    pub machines: Api<Machine>,
    /// MachineSets.
    pub sets: Api<MachineSet>,
    /// MachineDeployments.
    pub deployments: Api<MachineDeployment>,
}

/// The APIs of `env`'s test namespace.
pub fn apis(env: &Env) -> Apis {
    Apis {
        machines: Api::namespaced(env.client(), NS),
        sets: Api::namespaced(env.client(), NS),
        deployments: Api::namespaced(env.client(), NS),
    }
}

/// Creates an object from JSON.
pub async fn create<K>(api: &Api<K>, object: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap()
}

/// A merge patch.
pub async fn merge<K>(api: &Api<K>, name: &str, patch: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap()
}

/// The machines labelled `name=<deployment>`.
pub async fn machines_of(apis: &Apis, deployment: &str) -> Vec<Machine> {
    apis.machines.list(&ListParams::default().labels(&format!("name={deployment}"))).await.unwrap().items
}

/// The name of a machine's controller set.
pub fn set_of(m: &Machine) -> Option<String> {
    m.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true)).map(|o| o.name.clone())
}

/// Whether a machine counts as available: phase Running or Available, and not being deleted.
pub fn available(m: &Machine) -> bool {
    m.metadata.deletion_timestamp.is_none()
        && matches!(phase_of(m), Some(MachinePhase::Running | MachinePhase::Available))
}

/// Waits until deployment `name` has exactly `n` machines, all Running and in one set (not being deleted), and
/// its status says so; returns that set's name.
pub async fn wait_settled(apis: &Apis, name: &str, n: usize) -> String {
    wait_until(&format!("deployment {name} to settle at {n} running machines"), WAIT, || async {
        let machines = machines_of(apis, name).await;
        let running = machines.iter().filter(|m| available(m)).count();
        if machines.len() != n || running != n {
            return None;
        }
        let sets: std::collections::BTreeSet<Option<String>> = machines.iter().map(set_of).collect();
        let d = apis.deployments.get(name).await.ok()?;
        let status = d.status.clone()?;
        let complete = status.updated_replicas == n as i32
            && status.available_replicas == n as i32
            && status.replicas == n as i32
            && status.observed_generation == d.metadata.generation;
        match (sets.len(), n, complete) {
            (_, 0, true) => Some(String::new()),
            (1, _, true) => sets.into_iter().next().flatten(),
            _ => None,
        }
    })
    .await
}

/// The events recorded on object `name` of `kind`: (reason, note).
pub async fn events_of(env: &Env, kind: &str, name: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(env.client(), NS);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// How often event `reason` was recorded on object `name` of `kind` (the recorder folds repeats into one event
/// with a series count, keeping the first note).
pub async fn event_count(env: &Env, kind: &str, name: &str, reason: &str) -> i32 {
    let api: Api<Event> = Api::namespaced(env.client(), NS);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding
                    .as_ref()
                    .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .map(|e| e.series.map_or(1, |s| s.count))
        .sum()
}

/// A kube-runtime watcher on the test namespace's Machines that evaluates `check` on the whole set of machines
/// after every watch event and records what it returns (violations). Stop it with [`Watch::finish`].
pub struct Watch {
    violations: Arc<Mutex<Vec<String>>>,
    events: Arc<Mutex<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    /// Starts watching; `check` sees every machine after each event and returns a violation, if any.
    pub fn start(env: &Env, check: impl Fn(&[Arc<Machine>]) -> Option<String> + Send + 'static) -> Watch {
        let api: Api<Machine> = Api::namespaced(env.client(), NS);
        let (reader, writer) = reflector::store();
        let violations = Arc::new(Mutex::new(Vec::new()));
        let events = Arc::new(Mutex::new(0u64));
        let (v, e) = (violations.clone(), events.clone());
        let task = tokio::spawn(async move {
            let mut stream = reflector(writer, watcher(api, watcher::Config::default())).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                if matches!(event, Ok(watcher::Event::Init | watcher::Event::InitApply(_)) | Err(_)) {
                    continue;
                }
                *e.lock().unwrap() += 1;
                if let Some(violation) = check(&reader.state()) {
                    v.lock().unwrap().push(violation);
                }
            }
        });
        Watch { violations, events, task }
    }

    /// Stops the watch; returns the violations seen and the number of events evaluated.
    pub fn finish(self) -> (Vec<String>, u64) {
        self.task.abort();
        let violations = self.violations.lock().unwrap().clone();
        let events = *self.events.lock().unwrap();
        (violations, events)
    }
}

/// Counts machines per set (name → count).
pub fn per_set(machines: &[Arc<Machine>]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for m in machines {
        *counts.entry(set_of(m).unwrap_or_default()).or_insert(0) += 1;
    }
    counts
}
