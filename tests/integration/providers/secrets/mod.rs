//! Secrets never shown (issue #26, point 4): a full run of the built `mcm run` on each cloud's local fake (moto
//! for AWS, the ARM fake for Azure, the Compute fake for GCP), with known, distinctive values in every secret field
//! the driver reads. The run creates a MachineDeployment of 3, drains and deletes 2 of them, collects an orphan VM,
//! and fails machines of a class whose credentials the cloud rejects, of a class whose secret is invalid, and of a
//! class whose cloud echoes the credentials and user data in its error message (on GCP, the rejected one). Then
//! every log line (`RUST_LOG=trace`, the process's whole standard error and output), every event, every object the
//! controllers write status to (Machines, MachineSets, MachineDeployments, MachineClasses, MCMMachines, Nodes) and
//! the `/metrics` text is searched for every secret value in every encoding ([`scan`]).
//!
//! `mcm run` runs as a child process: its controllers work on tokio worker threads, which a test's thread-local
//! subscriber would not see; a process's standard error sees every thread.

#[cfg(feature = "aws")]
mod aws;
#[cfg(feature = "azure")]
mod azure;
#[cfg(feature = "gcp")]
mod gcp;
mod scan;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use mcm::api::mcm::{MachinePhase, MachineState};
use serde_json::json;

use crate::machines::{NS, phase_of};
use crate::run::RunEnv;
use crate::support::wait_until;
pub(crate) use scan::Secrets;

/// Long enough for anything these tests wait for (three clouds' operations with `mcm run`'s default polls).
const WAIT: Duration = Duration::from_secs(120);

/// The MachineDeployment of every run.
const POOL: &str = "pool";

/// What a cloud's run needs of its fake: the cluster's live VMs, and an orphan to plant.
pub(crate) trait Cloud {
    /// The tracing target of the cloud's driver (its lines prove the capture sees the driver).
    const TARGET: &'static str;
    /// Names (or IDs) of the live VMs tagged for the run's cluster.
    async fn instances(&self) -> BTreeSet<String>;
    /// Plants a VM tagged for the cluster that no Machine claims; returns its name or ID.
    async fn plant_orphan(&self) -> String;
    /// Whether the orphan is gone (deleted, or terminated).
    async fn orphan_gone(&self, orphan: &str) -> bool;
}

/// The MachineDeployment `pool` of class `class`.
fn deployment(class: &str, replicas: i32) -> serde_json::Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"pool": POOL}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"pool": POOL}},
                "spec": {"class": {"kind": "MachineClass", "name": class}},
            },
        },
    })
}

/// A Secret of `data` (string values) and a MachineClass of `provider` using it, both named `name`.
pub(crate) async fn class_with_secret(
    env: &RunEnv,
    name: &str,
    provider: &str,
    spec: serde_json::Value,
    data: &[(&str, &str)],
) {
    let data: serde_json::Map<String, serde_json::Value> =
        data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
        "type": "Opaque", "stringData": data,
    });
    let class = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": name, "namespace": NS},
        "provider": provider, "providerSpec": spec, "secretRef": {"name": name, "namespace": NS},
    });
    env.env.create(&format!("{name}-secret.json"), &secret.to_string()).await;
    env.env.create(&format!("{name}-class.json"), &class.to_string()).await;
}

/// The pool's machines: name -> (providerID, node label), for those that have both.
async fn pool_machines(env: &RunEnv) -> Vec<(String, String, String)> {
    let list = env.env.machines().list(&ListParams::default().labels(&format!("pool={POOL}"))).await.unwrap().items;
    let all = list.len();
    let ready: Vec<(String, String, String)> = list
        .into_iter()
        .filter_map(|m| {
            let node = m.labels().get("node").cloned()?;
            Some((m.name_any(), m.spec.provider_id.clone()?, node))
        })
        .collect();
    if ready.len() == all { ready } else { Vec::new() }
}

/// A Ready Node for a machine, as a kubelet would register it, with a pod bound to it (owned by a ReplicaSet, so
/// the drain evicts it).
async fn join(env: &RunEnv, node: &str, provider_id: &str, owner_uid: &str) {
    let nodes: Api<Node> = Api::all(env.env.client());
    let object = json!({"metadata": {"name": node}, "spec": {"providerID": provider_id}});
    nodes.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
    nodes.patch_status(node, &PatchParams::default(), &Patch::Merge(ready)).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(env.env.client(), NS);
    let pod = json!({"metadata": {"name": format!("web-{node}"), "labels": {"app": "web"}, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": owner_uid, "controller": true}]},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": "x"}]}});
    pods.create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
    let running = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(&format!("web-{node}"), &PatchParams::default(), &Patch::Merge(running)).await.unwrap();
}

/// Every object whose status, conditions or messages the controllers write, and every event, as JSON text with
/// a place name: `(place, text)`.
async fn api_texts(client: &kube::Client) -> Vec<(String, String)> {
    let kinds = [
        ("", "v1", "Event", "events"),
        ("events.k8s.io", "v1", "Event", "events"),
        ("", "v1", "Node", "nodes"),
        ("machine.sapcloud.io", "v1alpha1", "Machine", "machines"),
        ("machine.sapcloud.io", "v1alpha1", "MachineSet", "machinesets"),
        ("machine.sapcloud.io", "v1alpha1", "MachineDeployment", "machinedeployments"),
        ("machine.sapcloud.io", "v1alpha1", "MachineClass", "machineclasses"),
        ("infrastructure.cluster.x-k8s.io", "v1alpha1", "MCMMachine", "mcmmachines"),
    ];
    let mut out = Vec::new();
    for (group, version, kind, plural) in kinds {
        let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let list = api.list(&ListParams::default()).await.unwrap_or_else(|e| panic!("listing {plural}: {e}"));
        let group = if group.is_empty() { "core".to_string() } else { group.to_string() };
        for item in list.items {
            let place = format!("{kind}.{group} {}/{}", item.namespace().unwrap_or_default(), item.name_any());
            out.push((place, serde_json::to_string(&item).unwrap()));
        }
    }
    out
}

/// What one run showed.
pub(crate) struct Captured {
    /// Each text searched: (place, text).
    pub texts: Vec<(String, String)>,
    /// The failed machines' `lastOperation.description`s.
    pub failures: Vec<(String, String)>,
}

/// The full run: `mcm run` at trace level creates the pool of class `class` (3 machines), whose Nodes join and
/// carry a pod each; scaling to 1 drains and deletes two; an orphan VM is collected; each of `failing` (machine,
/// class) fails its creation. Returns what it showed.
pub(crate) async fn full_run<C: Cloud>(env: &RunEnv, cloud: &C, class: &str, failing: &[(&str, &str)]) -> Captured {
    let started = Instant::now();
    let mut run = env.spawn_with_env(
        "secrets",
        &["--log-level", "trace", "--machine-safety-orphan-vms-period=1s"],
        &[("RUST_LOG", "trace")],
    );
    env.env.create("pool.json", &deployment(class, 3).to_string()).await;
    for (machine, class) in failing {
        env.env.machine(machine, class).await;
    }

    // Three machines with their VMs; their Nodes join, each with a pod, and the machines run.
    let machines = wait_until("3 pool machines with providerIDs and nodes, and 3 cluster VMs", WAIT, || async {
        let machines = pool_machines(env).await;
        (machines.len() == 3 && cloud.instances().await.len() == 3).then_some(machines)
    })
    .await;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(env.env.client(), NS);
    let owner = json!({"metadata": {"name": "web"}, "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
    let owner = replica_sets.create(&PostParams::default(), &serde_json::from_value(owner).unwrap()).await.unwrap();
    let uid = owner.metadata.uid.unwrap();
    for (_, provider_id, node) in &machines {
        join(env, node, provider_id, &uid).await;
    }
    let api = env.env.machines();
    wait_until("the 3 pool machines to run", WAIT, || async {
        let list = api.list(&ListParams::default().labels(&format!("pool={POOL}"))).await.ok()?.items;
        (list.len() == 3 && list.iter().all(|m| phase_of(m) == Some(MachinePhase::Running))).then_some(())
    })
    .await;

    // Scale to 1: two machines are drained (their pods evicted) and deleted with their VMs and Nodes.
    env.scale(POOL, 1).await;
    let kept = wait_until("1 pool machine and 1 cluster VM left", WAIT, || async {
        let machines = pool_machines(env).await;
        (machines.len() == 1 && cloud.instances().await.len() == 1).then_some(machines)
    })
    .await;
    let gone: Vec<&String> = machines.iter().filter(|m| !kept.contains(m)).map(|(_, _, node)| node).collect();
    assert_eq!(gone.len(), 2, "{kept:?} of {machines:?}");
    let pods: Api<Pod> = Api::namespaced(env.env.client(), NS);
    let nodes: Api<Node> = Api::all(env.env.client());
    wait_until("the drained nodes' pods and the nodes to be gone", WAIT, || async {
        for node in &gone {
            if pods.get_opt(&format!("web-{node}")).await.ok()?.is_some() || nodes.get_opt(node).await.ok()?.is_some() {
                return None;
            }
        }
        Some(())
    })
    .await;

    // An orphan VM is collected by the safety controller.
    let orphan = cloud.plant_orphan().await;
    wait_until("the orphan VM to be collected", WAIT, || async { cloud.orphan_gone(&orphan).await.then_some(()) })
        .await;

    // The machines whose class's credentials are rejected, or whose secret is invalid, fail their creation.
    let mut failures = Vec::new();
    for (machine, _) in failing {
        let description = wait_until(&format!("machine {machine} to fail its creation"), WAIT, || async {
            let m = api.get_opt(machine).await.ok()??;
            let last = m.status?.last_operation?;
            (last.state == Some(MachineState::Failed)).then_some(last.description.unwrap_or_default())
        })
        .await;
        failures.push((machine.to_string(), description));
    }

    let metrics = run.scrape_text().await;
    let mut texts = api_texts(&env.env.client()).await;
    run.signal("TERM");
    assert!(run.wait_exit(WAIT).await, "mcm run exits 0 on SIGTERM");
    let logs = scan::strip_ansi(&run.logs());
    texts.push(("mcm run's standard error".to_string(), logs.clone()));
    texts.push(("mcm run's standard output".to_string(), run.lines().join("\n")));
    texts.push(("/metrics".to_string(), metrics));

    // The capture is the whole run: trace lines of the controllers, the kube client and the driver.
    let traced = logs.lines().filter(|l| l.split_whitespace().nth(1) == Some("TRACE")).count();
    assert!(traced > 0, "no TRACE line with RUST_LOG=trace");
    for want in [C::TARGET, "mcm::controllers", "kube_client"] {
        assert!(logs.contains(want), "the log has no {want:?} line: the capture misses part of the run");
    }
    assert!(
        texts.iter().any(|(place, text)| place.starts_with("Event.events.k8s.io") && text.contains("\"Drained\"")),
        "no Drained event: the run did not drain"
    );
    eprintln!(
        "{} log lines ({traced} at TRACE), {} objects and events, /metrics, in {:.1} s",
        logs.lines().count(),
        texts.len() - 3,
        started.elapsed().as_secs_f64()
    );
    Captured { texts, failures }
}

/// Fails with every finding of a secret in what the run showed (key, form, place; never the value).
pub(crate) fn assert_never_shown(secrets: &Secrets, captured: &Captured) {
    let findings: Vec<scan::Finding> =
        captured.texts.iter().flat_map(|(place, text)| secrets.scan(place, text)).collect();
    let (values, forms) = secrets.counts();
    if !findings.is_empty() {
        let shown: Vec<String> = findings.iter().take(20).map(|f| format!("  {f}")).collect();
        panic!(
            "{} occurrence(s) of secret values ({values} values, {forms} forms looked for in {} texts):\n{}",
            findings.len(),
            captured.texts.len(),
            shown.join("\n")
        );
    }
    eprintln!("no secret shown: {values} values in {forms} forms, {} texts", captured.texts.len());
    for (machine, description) in &captured.failures {
        eprintln!("machine {machine} failed: {description}");
    }
}
