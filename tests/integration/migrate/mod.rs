//! `mcm migrate` end to end (issue #9): an MCM MachineDeployment with Running machines on the in-memory cloud is
//! planned, handed over to CAPI objects (our CAPI core controllers and the infrastructure provider running), and
//! rolled back, with the cloud's counters proving that no VM was created or deleted; the hand-over is interrupted
//! after each step and resumed; a deployment in the middle of a rollout is refused with nothing changed.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Api;
use kube::api::ListParams;
use mcm::api::{capi, infra};
use mcm::migrate::{self, ApplyOptions, ApplyStep, MigrateError, Progress, Target};
use mcm::providers::inmemory::CloudStats;
use serde_json::json;

use crate::machines::{Env, NS, fast_options};
use crate::sets::{Apis, apis, create, deployment, merge, rolling, wait_settled};
use crate::support::{TempDir, wait_until};

const WAIT: Duration = Duration::from_secs(60);
const CLUSTER: &str = "prod";

fn target() -> Target {
    Target { namespace: NS.into(), cluster_name: CLUSTER.into() }
}

fn options() -> ApplyOptions {
    ApplyOptions { target: target(), timeout: WAIT, poll: Duration::from_millis(100) }
}

/// An environment running the MCM flavour, the infrastructure provider and our CAPI core controllers, with class
/// `small` (fast boot) and `slow` (boots in five minutes).
async fn env() -> Env {
    let mut options = fast_options();
    options.capi_core = true;
    let env = Env::start(options).await;
    env.class("small", json!({"bootSeconds": 0.1})).await;
    env.class("slow", json!({"bootSeconds": 300})).await;
    env
}

/// A settled MCM MachineDeployment `name` of `n` machines; returns providerID -> Node of its machines.
async fn settled(env: &Env, apis: &Apis, name: &str, n: usize) -> BTreeMap<String, String> {
    create(&apis.deployments, deployment(name, n as i32, rolling(json!(1), json!(0)))).await;
    wait_settled(apis, name, n).await;
    let machines = crate::sets::machines_of(apis, name).await;
    let nodes = env.nodes();
    let mut out = BTreeMap::new();
    for m in machines {
        let id = m.spec.provider_id.clone().unwrap();
        let node = m.metadata.labels.as_ref().unwrap()["node"].clone();
        assert!(nodes.get_opt(&node).await.unwrap().is_some(), "Node {node} exists");
        out.insert(id, node);
    }
    out
}

fn vm_calls(stats: &CloudStats) -> (u64, u64, u64) {
    (stats.creates, stats.deletes, stats.vms_created)
}

/// Waits until the CAPI deployment `name` has the machines of `expected` (providerID -> Node), all Running on
/// their Nodes, and its status counts them available.
async fn wait_capi(env: &Env, name: &str, expected: &BTreeMap<String, String>) {
    let machines: Api<capi::Machine> = Api::namespaced(env.client(), NS);
    let deployments: Api<capi::MachineDeployment> = Api::namespaced(env.client(), NS);
    let n = expected.len() as i32;
    wait_until(&format!("CAPI deployment {name} Running on the old VMs"), WAIT, || async {
        let list = machines.list(&ListParams::default()).await.ok()?.items;
        let running: BTreeMap<String, String> = list
            .iter()
            .filter(|m| m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|m| Some((m.spec.provider_id.clone()?, m.status.as_ref()?.node_ref.as_ref()?.name.clone())))
            .collect();
        let d = deployments.get_opt(name).await.ok()??;
        let available = d.status.as_ref().and_then(|s| s.available_replicas) == Some(n);
        (list.len() == expected.len() && &running == expected && available).then_some(())
    })
    .await;
}

/// Waits until the MCM deployment `name` has the machines of `expected`, Running, and its status settled.
async fn wait_mcm(apis: &Apis, name: &str, expected: &BTreeMap<String, String>) {
    wait_settled(apis, name, expected.len()).await;
    let machines = crate::sets::machines_of(apis, name).await;
    let got: BTreeMap<String, String> = machines
        .iter()
        .map(|m| (m.spec.provider_id.clone().unwrap(), m.metadata.labels.as_ref().unwrap()["node"].clone()))
        .collect();
    assert_eq!(&got, expected, "the same VMs on the same Nodes");
}

async fn assert_no_capi_objects(env: &Env) {
    let c = env.client();
    assert!(
        Api::<capi::Machine>::namespaced(c.clone(), NS).list(&ListParams::default()).await.unwrap().items.is_empty()
    );
    assert!(
        Api::<capi::MachineSet>::namespaced(c.clone(), NS).list(&ListParams::default()).await.unwrap().items.is_empty()
    );
    assert!(
        Api::<capi::MachineDeployment>::namespaced(c.clone(), NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        Api::<infra::MCMMachine>::namespaced(c.clone(), NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

async fn assert_no_mcm_objects(apis: &Apis) {
    assert!(apis.machines.list(&ListParams::default()).await.unwrap().items.is_empty(), "MCM Machines removed");
    assert!(apis.sets.list(&ListParams::default()).await.unwrap().items.is_empty(), "MCM MachineSets removed");
    assert!(apis.deployments.list(&ListParams::default()).await.unwrap().items.is_empty(), "MCM deployment removed");
}

fn lines() -> (Arc<Mutex<Vec<String>>>, impl Fn(Progress) + Send + Sync + 'static) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    (lines, move |p: Progress| sink.lock().unwrap().push(p.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plan_apply_and_rollback_keep_every_vm() {
    let env = env().await;
    let apis = apis(&env);
    let expected = settled(&env, &apis, "pool", 5).await;
    let before = vm_calls(&env.dev.cloud.stats());

    let inventory = migrate::client_inventory(&env.client(), &target()).await.unwrap();
    let plan = migrate::plan(&inventory, &target());
    assert_eq!(plan.summary.blockers, vec![], "{}", plan.summary.render());
    assert_eq!(plan.deployments.len(), 1);
    let planned: BTreeMap<String, String> =
        plan.deployments[0].machines.iter().map(|p| (p.provider_id.clone(), p.node.clone())).collect();
    assert_eq!(planned, expected);

    let (progress, report) = lines();
    migrate::apply(&env.client(), &options(), &report).await.unwrap();
    let progress = progress.lock().unwrap().clone();
    for step in ApplyStep::ALL {
        assert!(progress.contains(&format!("pool: step {}: done", step.name())), "{progress:#?}");
    }
    assert_eq!(progress.iter().filter(|l| l.contains("is Running on Node")).count(), 5, "{progress:#?}");
    wait_capi(&env, "pool", &expected).await;
    assert_no_mcm_objects(&apis).await;
    let d: Api<capi::MachineDeployment> = Api::namespaced(env.client(), NS);
    let recorded = d.get("pool").await.unwrap().metadata.annotations.unwrap()[migrate::STEP_ANNOTATION].clone();
    assert_eq!(recorded, "done");
    assert_eq!(vm_calls(&env.dev.cloud.stats()), before, "no VM created or deleted by the hand-over");
    assert_eq!(env.dev.cloud.live_vms().len(), 5);

    // Apply again: nothing left to do, nothing changes.
    migrate::apply(&env.client(), &options(), &|_| {}).await.unwrap();

    let (progress, report) = lines();
    let names = migrate::rollback(&env.client(), &options(), &report).await.unwrap();
    assert_eq!(names, vec!["pool".to_string()]);
    assert!(progress.lock().unwrap().iter().any(|l| l.contains("pool: step rollback-done: done")));
    wait_mcm(&apis, "pool", &expected).await;
    assert_no_capi_objects(&env).await;
    let mcm_d = apis.deployments.get("pool").await.unwrap();
    let annotations = mcm_d.metadata.annotations.clone().unwrap_or_default();
    assert!(!annotations.contains_key(migrate::STEP_ANNOTATION), "{annotations:?}");
    assert!(!annotations.contains_key("machine.sapcloud.io/paused"), "{annotations:?}");
    assert!(!mcm_d.spec.paused, "the user's spec.paused is back");
    assert_eq!(vm_calls(&env.dev.cloud.stats()), before, "no VM created or deleted by the rollback");
    assert_eq!(env.dev.cloud.live_vms().len(), 5);

    // MCM is in charge again: a scale-up creates exactly one VM.
    merge(&apis.deployments, "pool", json!({"spec": {"replicas": 6}})).await;
    wait_settled(&apis, "pool", 6).await;
    assert_eq!(env.dev.cloud.stats().creates, before.0 + 1);
    env.shutdown().await;
}

/// Runs `apply` in a task and aborts it (a crash) once a progress line satisfies `crash_when`; returns whether it
/// crashed before finishing.
async fn apply_until(env: &Env, crash_when: fn(&str) -> bool) -> bool {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let tx = Mutex::new(Some(tx));
    let client = env.client();
    let task = tokio::spawn(async move {
        let report = move |p: Progress| {
            if crash_when(&p.to_string())
                && let Some(tx) = tx.lock().unwrap().take()
            {
                let _ = tx.send(());
            }
        };
        migrate::apply(&client, &options(), &report).await
    });
    let _ = tokio::time::timeout(WAIT, rx).await.expect("apply neither crashed nor finished");
    task.abort();
    match task.await {
        Err(e) if e.is_cancelled() => true,
        // The run finished before the abort landed: it did not crash.
        Ok(result) => {
            result.unwrap();
            false
        }
        Err(e) => panic!("apply panicked: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apply_resumes_after_a_crash_at_every_step() {
    let env = env().await;
    let apis = apis(&env);
    let expected = settled(&env, &apis, "pool", 5).await;
    let before = vm_calls(&env.dev.cloud.stats());

    // Crash points: after each step, and in the middle of creating and of releasing.
    let crashes: [fn(&str) -> bool; 5] = [
        |l| l == "pool: step paused: done",
        |l| l.starts_with("pool:   created Machine and MCMMachine"),
        |l| l == "pool: step created: done",
        |l| l == "pool: step adopted: done",
        |l| l.starts_with("pool:   removed MCM Machine"),
    ];
    let mut crashed = 0;
    for crash_when in crashes {
        if apply_until(&env, crash_when).await {
            crashed += 1;
        }
        assert_eq!(vm_calls(&env.dev.cloud.stats()), before, "no VM created or deleted after crash {crashed}");
    }
    assert!(crashed >= 3, "most runs were cut short ({crashed} of 5)");
    migrate::apply(&env.client(), &options(), &|_| {}).await.unwrap();
    wait_capi(&env, "pool", &expected).await;
    assert_no_mcm_objects(&apis).await;
    assert_eq!(vm_calls(&env.dev.cloud.stats()), before);

    // A rollback cut short after its first step, then finished.
    let client = env.client();
    let task = tokio::spawn(async move {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let tx = Mutex::new(Some(tx));
        let report = move |p: Progress| {
            if p.to_string() == "pool: step rollback-restored: done"
                && let Some(tx) = tx.lock().unwrap().take()
            {
                let _ = tx.send(());
            }
        };
        let options = options();
        tokio::select! {
            r = migrate::rollback(&client, &options, &report) => r.map(|_| ()),
            _ = rx => Ok(()),
        }
    });
    task.await.unwrap().unwrap();
    migrate::rollback(&env.client(), &options(), &|_| {}).await.unwrap();
    wait_mcm(&apis, "pool", &expected).await;
    assert_no_capi_objects(&env).await;
    assert_eq!(vm_calls(&env.dev.cloud.stats()), before, "no VM created or deleted by crashed runs");
    env.shutdown().await;
}

fn mcm_binary(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcm")).args(args).output().expect("run mcm");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollout_in_progress_blocks_and_nothing_changes() {
    let env = env().await;
    let apis = apis(&env);
    settled(&env, &apis, "pool", 3).await;
    // Roll to the slow class: the surge machine stays Pending for minutes.
    merge(&apis.deployments, "pool", json!({"spec": {"template": {"spec": {"class": {"name": "slow"}}}}})).await;
    wait_until("a second MachineSet", WAIT, || async {
        (apis.sets.list(&ListParams::default()).await.ok()?.items.len() == 2).then_some(())
    })
    .await;

    let error = migrate::apply(&env.client(), &options(), &|_| {}).await.unwrap_err();
    assert!(matches!(error, MigrateError::Blocked(_)));
    assert_eq!(error.exit_code(), migrate::exit::BLOCKED);
    let message = error.to_string();
    assert!(message.contains("rollout in progress"), "{message}");
    assert!(message.contains("nothing was changed"), "{message}");

    assert_no_capi_objects(&env).await;
    let cluster: Api<capi::Cluster> = Api::namespaced(env.client(), NS);
    assert!(cluster.get_opt(CLUSTER).await.unwrap().is_none());
    let d = apis.deployments.get("pool").await.unwrap();
    let annotations = d.metadata.annotations.unwrap_or_default();
    for key in [migrate::STEP_ANNOTATION, migrate::WAS_PAUSED_ANNOTATION, "machine.sapcloud.io/paused"] {
        assert!(!annotations.contains_key(key), "{key} not set: {annotations:?}");
    }
    assert!(!d.spec.paused, "not paused");
    for m in apis.machines.list(&ListParams::default()).await.unwrap().items {
        assert!(!m.metadata.annotations.unwrap_or_default().contains_key("machine.sapcloud.io/paused"));
    }

    // The command line says the same with exit code 3, and --dry-run writes nothing either.
    let dir = TempDir::new("mcm-migrate");
    let kubeconfig = dir.0.join("kubeconfig");
    env.dev.server.write_kubeconfig(&kubeconfig).unwrap();
    let kc = kubeconfig.to_str().unwrap();
    let (code, stdout, stderr) =
        mcm_binary(&["migrate", "plan", "--kubeconfig", kc, "--namespace", NS, "--cluster-name", CLUSTER]);
    assert_eq!(code, 3, "{stdout}\n{stderr}");
    assert!(stdout.contains("# blockers:") && stdout.contains("rollout in progress"), "{stdout}");
    let (code, _, stderr) =
        mcm_binary(&["migrate", "apply", "--kubeconfig", kc, "--namespace", NS, "--cluster-name", CLUSTER]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("migration blocked, nothing was changed"), "{stderr}");
    assert_no_capi_objects(&env).await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_command_line_plans_applies_and_rolls_back() {
    let env = env().await;
    let apis = apis(&env);
    let expected = settled(&env, &apis, "pool", 2).await;
    let before = vm_calls(&env.dev.cloud.stats());
    let dir = TempDir::new("mcm-migrate");
    let kubeconfig = dir.0.join("kubeconfig");
    env.dev.server.write_kubeconfig(&kubeconfig).unwrap();
    let kc = kubeconfig.to_str().unwrap();
    let out = dir.0.join("plan");
    let common = ["--kubeconfig", kc, "--namespace", NS, "--cluster-name", CLUSTER];
    let with = |action: &str, extra: &[&str]| {
        let mut args = vec!["migrate", action];
        args.extend_from_slice(&common);
        args.extend_from_slice(extra);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| mcm_binary(&args.iter().map(String::as_str).collect::<Vec<_>>());

    let (code, stdout, stderr) = run(with("plan", &["--out", out.to_str().unwrap()]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.matches("\nkind: MCMMachine\n").count(), 2, "{stdout}");
    assert!(stdout.contains("# maps 1:1:"), "{stdout}");
    for file in ["cluster.yaml", "pool.yaml", "summary.txt"] {
        assert!(out.join(file).exists(), "{file} written");
    }
    let (code, stdout, _) = run(with("apply", &["--dry-run"]));
    assert_eq!(code, 0);
    assert!(stdout.contains("dry run: pool: step created: would"), "{stdout}");
    assert_no_capi_objects(&env).await;

    let (code, stdout, stderr) = run(with("apply", &["--timeout", "60s"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("pool: step done: done") && stdout.ends_with("mcm migrate apply: done\n"), "{stdout}");
    wait_capi(&env, "pool", &expected).await;
    let (code, stdout, stderr) = run(with("rollback", &["--timeout", "60s"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    wait_mcm(&apis, "pool", &expected).await;
    assert_eq!(vm_calls(&env.dev.cloud.stats()), before);
    env.shutdown().await;
}

/// The infrastructure provider's side of adoption: an MCMMachine that names its VM by `spec.providerID` (as
/// `mcm migrate` makes them, or as clusterctl move leaves them, without status) is asked about first, and when the
/// driver cannot find that VM it is trusted, never given a second VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_mcm_machine_naming_a_missing_vm_is_not_given_a_new_one() {
    let env = crate::infra::Env::start().await;
    env.cluster("c1", true).await;
    env.capi_machine("gone", "c1", None, None).await;
    let mut spec = crate::infra::inline_class(json!({}));
    spec["providerID"] = json!("inmemory:///local-a/i-gone");
    env.mcm_machine("gone", "c1", spec).await;
    env.adopt("gone").await;
    let m = env.wait_provisioned("gone").await;
    assert_eq!(m.spec.provider_id.as_deref(), Some("inmemory:///local-a/i-gone"));
    let stats = env.dev.cloud.stats();
    assert!(stats.status_gets >= 1, "the driver was asked first");
    assert_eq!((stats.creates, stats.vms_created), (0, 0), "no second VM");
    env.shutdown().await;
}

/// A hand-over cut short half-way is rolled back: the MCM objects (still there, paused) take over again and the
/// CAPI objects made so far go, without a VM created or deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupted_apply_rolls_back() {
    let env = env().await;
    let apis = apis(&env);
    let expected = settled(&env, &apis, "pool", 2).await;
    let before = vm_calls(&env.dev.cloud.stats());
    apply_until(&env, |l| l == "pool: step created: done").await;
    let capi_machines: Api<capi::Machine> = Api::namespaced(env.client(), NS);
    assert!(!capi_machines.list(&ListParams::default()).await.unwrap().items.is_empty(), "CAPI objects were made");

    let names = migrate::rollback(&env.client(), &options(), &|_| {}).await.unwrap();
    assert_eq!(names, vec!["pool".to_string()]);
    wait_mcm(&apis, "pool", &expected).await;
    assert_no_capi_objects(&env).await;
    let d = apis.deployments.get("pool").await.unwrap();
    let annotations = d.metadata.annotations.unwrap_or_default();
    for key in [migrate::STEP_ANNOTATION, migrate::WAS_PAUSED_ANNOTATION, "machine.sapcloud.io/paused"] {
        assert!(!annotations.contains_key(key), "{key} removed: {annotations:?}");
    }
    for m in apis.machines.list(&ListParams::default()).await.unwrap().items {
        assert!(!m.metadata.annotations.unwrap_or_default().contains_key("machine.sapcloud.io/paused"));
    }
    assert!(!d.spec.paused);
    assert_eq!(vm_calls(&env.dev.cloud.stats()), before);
    env.shutdown().await;
}
