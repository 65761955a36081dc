//! Scenario tables shared by both API flavours: one definition of each rolling-update and deletion-order case,
//! run against MCM's `machine.sapcloud.io` objects (`sets::shared`) and CAPI's `cluster.x-k8s.io` objects
//! (`capi::shared`). A [`Flavour`] says only how to write a deployment and what a Running machine looks like;
//! everything observed goes through the same dynamic (untyped) watch and list, so the assertions are the same code.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::support::wait_until;

/// Long enough for anything these scenarios wait for.
const WAIT: std::time::Duration = std::time::Duration::from_secs(90);

/// How one API flavour writes and shows deployments and machines.
pub struct Flavour {
    /// The flavour's name, in messages.
    pub name: &'static str,
    /// The client of a running environment.
    pub client: Client,
    /// The namespace of the test objects.
    pub namespace: &'static str,
    /// The MachineDeployment resource.
    pub deployments: ApiResource,
    /// The Machine resource.
    pub machines: ApiResource,
    /// The label key a deployment's machines carry with the deployment's name as value.
    pub pool_label: &'static str,
    /// The deployment (name, replicas, maxSurge, maxUnavailable) as JSON.
    pub deployment: fn(&str, i32, i32, i32) -> Value,
    /// A merge patch of the deployment that changes its machine template (a rollout).
    pub template_change: Value,
    /// The annotation (key, value) that makes a machine the first to go on scale-down.
    pub delete_first: (&'static str, &'static str),
    /// Whether a machine counts as up (Running, and for CAPI with its Node).
    pub running: fn(&DynamicObject) -> bool,
}

/// A machine as the scenarios see it.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub name: String,
    pub set: Option<String>,
    pub running: bool,
    pub deleting: bool,
}

fn seen(m: &DynamicObject, running: fn(&DynamicObject) -> bool) -> Seen {
    Seen {
        name: m.name_any(),
        set: m.owner_references().iter().find(|o| o.controller == Some(true)).map(|o| o.name.clone()),
        running: running(m),
        deleting: m.metadata.deletion_timestamp.is_some(),
    }
}

impl Flavour {
    fn api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), self.namespace, resource)
    }

    fn selector(&self, deployment: &str) -> String {
        format!("{}={deployment}", self.pool_label)
    }

    /// The machines of `deployment`.
    pub async fn machines_of(&self, deployment: &str) -> Vec<Seen> {
        let list = self.api(&self.machines).list(&ListParams::default().labels(&self.selector(deployment))).await;
        list.map(|l| l.items.iter().map(|m| seen(m, self.running)).collect()).unwrap_or_default()
    }

    async fn create_deployment(&self, name: &str, replicas: i32, surge: i32, unavailable: i32) {
        let object: DynamicObject =
            serde_json::from_value((self.deployment)(name, replicas, surge, unavailable)).unwrap();
        self.api(&self.deployments).create(&PostParams::default(), &object).await.unwrap();
    }

    async fn patch(&self, resource: &ApiResource, name: &str, patch: &Value) {
        self.api(resource).patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    }

    /// Waits until `deployment` has exactly `n` machines, all up, none being deleted, all of one set other than
    /// `not_set`; returns that set and the machine names.
    async fn wait_settled(&self, deployment: &str, n: usize, not_set: Option<&str>) -> (String, BTreeSet<String>) {
        let what = format!("{}: {deployment} settled at {n} machines", self.name);
        wait_until(&what, WAIT, || async {
            let machines = self.machines_of(deployment).await;
            let sets: BTreeSet<Option<String>> = machines.iter().map(|m| m.set.clone()).collect();
            let all_up = machines.iter().all(|m| m.running && !m.deleting);
            let set = match sets.into_iter().collect::<Vec<_>>().as_slice() {
                [Some(set)] => set.clone(),
                [] if n == 0 => String::new(),
                _ => return None,
            };
            (machines.len() == n && all_up && Some(set.as_str()) != not_set)
                .then(|| (set, machines.into_iter().map(|m| m.name).collect()))
        })
        .await
    }
}

/// A watch of one deployment's machines that checks `check` on the whole set after every event.
struct Invariant {
    violations: Arc<Mutex<Vec<String>>>,
    events: Arc<Mutex<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Invariant {
    fn start(flavour: &Flavour, deployment: &str, check: impl Fn(&[Seen]) -> Option<String> + Send + 'static) -> Self {
        let api = flavour.api(&flavour.machines);
        let config = watcher::Config::default().labels(&flavour.selector(deployment));
        let running = flavour.running;
        let violations = Arc::new(Mutex::new(Vec::new()));
        let events = Arc::new(Mutex::new(0u64));
        let (v, e) = (violations.clone(), events.clone());
        let task = tokio::spawn(async move {
            let mut known: BTreeMap<String, Seen> = BTreeMap::new();
            let mut listing: BTreeMap<String, Seen> = BTreeMap::new();
            let mut stream = watcher(api, config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                // A (re)list arrives as Init, InitApply per object, InitDone: the set is checked once it is whole.
                match event {
                    Ok(watcher::Event::Apply(m)) => {
                        known.insert(m.name_any(), seen(&m, running));
                    }
                    Ok(watcher::Event::Delete(m)) => {
                        known.remove(&m.name_any());
                    }
                    Ok(watcher::Event::InitApply(m)) => {
                        listing.insert(m.name_any(), seen(&m, running));
                        continue;
                    }
                    Ok(watcher::Event::Init) => {
                        listing.clear();
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => known = std::mem::take(&mut listing),
                    Err(_) => continue,
                }
                *e.lock().unwrap() += 1;
                let all: Vec<Seen> = known.values().cloned().collect();
                if let Some(violation) = check(&all) {
                    v.lock().unwrap().push(violation);
                }
            }
        });
        Invariant { violations, events, task }
    }

    /// Waits until the first list is in, so every later event is checked.
    async fn listed(&self) {
        wait_until("the invariant watch to list", WAIT, || async { (*self.events.lock().unwrap() >= 1).then_some(()) })
            .await;
    }

    fn finish(self) -> (Vec<String>, u64) {
        self.task.abort();
        let violations = self.violations.lock().unwrap().clone();
        let events = *self.events.lock().unwrap();
        (violations, events)
    }
}

/// A rolling update: replicas, maxSurge, maxUnavailable.
pub struct RollingCase {
    pub name: &'static str,
    pub replicas: i32,
    pub max_surge: i32,
    pub max_unavailable: i32,
}

/// The rolling updates both flavours must get right.
pub const ROLLING_UPDATES: [RollingCase; 3] = [
    RollingCase { name: "surge-only", replicas: 3, max_surge: 1, max_unavailable: 0 },
    RollingCase { name: "unavailable-only", replicas: 3, max_surge: 0, max_unavailable: 1 },
    RollingCase { name: "both", replicas: 5, max_surge: 2, max_unavailable: 1 },
];

/// Runs every [`ROLLING_UPDATES`] case (each its own deployment, concurrently): the template change replaces every
/// machine, and while it does, never more than replicas + maxSurge machines live and never fewer than
/// replicas − maxUnavailable up (checked on every watch event).
pub async fn rolling_updates(flavour: &Flavour) {
    let runs = ROLLING_UPDATES.iter().map(|case| async move {
        flavour.create_deployment(case.name, case.replicas, case.max_surge, case.max_unavailable).await;
        let n = case.replicas as usize;
        let (old_set, old) = flavour.wait_settled(case.name, n, None).await;
        let (most, least) =
            ((case.replicas + case.max_surge) as usize, (case.replicas - case.max_unavailable) as usize);
        let invariant = Invariant::start(flavour, case.name, move |all| {
            let live = all.iter().filter(|m| !m.deleting).count();
            let up = all.iter().filter(|m| m.running && !m.deleting).count();
            (live > most || up < least).then(|| format!("{live} live machines, {up} up: {all:?}"))
        });
        invariant.listed().await;
        flavour.patch(&flavour.deployments, case.name, &flavour.template_change).await;
        let (new_set, new) = flavour.wait_settled(case.name, n, Some(&old_set)).await;
        let (violations, events) = invariant.finish();
        let label = format!("{} {}", flavour.name, case.name);
        assert!(violations.is_empty(), "{label}: {} violations in {events} events: {violations:?}", violations.len());
        assert!(events as usize >= 2 * n, "{label}: the invariant was checked on every event ({events})");
        assert!(new.is_disjoint(&old), "{label}: every machine replaced ({old:?} -> {new:?} in {new_set})");
    });
    futures::future::join_all(runs).await;
}

/// A scale-down with machines marked to go first: replicas, the indexes (in name order) marked, the new size.
pub struct DeletionCase {
    pub name: &'static str,
    pub replicas: i32,
    pub marked: &'static [usize],
    pub scale_to: i32,
}

/// The deletion-order cases both flavours must get right.
pub const DELETION_ORDER: [DeletionCase; 3] = [
    DeletionCase { name: "one-marked", replicas: 3, marked: &[1], scale_to: 2 },
    DeletionCase { name: "two-marked", replicas: 4, marked: &[0, 2], scale_to: 2 },
    DeletionCase { name: "marked-and-one-more", replicas: 4, marked: &[3], scale_to: 2 },
];

/// Runs every [`DELETION_ORDER`] case (concurrently): on scale-down, the marked machines go first, and only the
/// machines beyond them are chosen by the default order; no unmarked machine is deleted while a marked one is left.
pub async fn deletion_order(flavour: &Flavour) {
    let runs = DELETION_ORDER.iter().map(|case| async move {
        flavour.create_deployment(case.name, case.replicas, 1, 0).await;
        let (_, names) = flavour.wait_settled(case.name, case.replicas as usize, None).await;
        let names: Vec<String> = names.into_iter().collect();
        let marked: BTreeSet<String> = case.marked.iter().map(|i| names[*i].clone()).collect();
        let (key, value) = flavour.delete_first;
        for name in &marked {
            flavour.patch(&flavour.machines, name, &json!({"metadata": {"annotations": {key: value}}})).await;
        }
        let must_go = marked.clone();
        let leaving = (case.replicas - case.scale_to) as usize;
        let invariant = Invariant::start(flavour, case.name, move |all| {
            let deleting: BTreeSet<&String> = all.iter().filter(|m| m.deleting).map(|m| &m.name).collect();
            let unmarked_first = deleting.iter().any(|n| !must_go.contains(*n))
                && must_go.iter().any(|n| all.iter().any(|m| &m.name == n && !m.deleting))
                && leaving <= must_go.len();
            unmarked_first.then(|| format!("an unmarked machine goes while a marked one stays: {all:?}"))
        });
        invariant.listed().await;
        flavour.patch(&flavour.deployments, case.name, &json!({"spec": {"replicas": case.scale_to}})).await;
        let (_, left) = flavour.wait_settled(case.name, case.scale_to as usize, None).await;
        let (violations, _) = invariant.finish();
        let label = format!("{} {}", flavour.name, case.name);
        assert!(violations.is_empty(), "{label}: {violations:?}");
        assert!(left.is_disjoint(&marked), "{label}: the marked machines went first: {marked:?}, left {left:?}");
        assert_eq!(left.len(), case.scale_to as usize, "{label}");
    });
    futures::future::join_all(runs).await;
}
