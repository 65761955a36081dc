//! MCM's own command lines start `mcm run` unchanged (docs/configuration.md, "MCM's command lines").

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use mcm::api::mcm::{Machine, MachinePhase};
use serde_json::{Value, json};

use super::{RunEnv, WAIT};
use crate::machines::{Env, NS, phase_of};
use crate::support::wait_until;

/// The arguments of both containers of MCM's sample out-of-tree deployment (upstream
/// `kubernetes/deployment/out-of-tree/deployment.yaml`: `machine-controller-manager`, then the provider's
/// `machine-controller`), their `$(…)` filled in as the kubelet would, with one change: its
/// `--machine-safety-overshooting-period=1`, which MCM's own flag parsing refuses (Go durations need a unit), as
/// `1m`.
fn mcm_command_lines(kubeconfig: &str) -> Vec<String> {
    let manager = [
        format!("--target-kubeconfig={kubeconfig}"),
        format!("--control-kubeconfig={kubeconfig}"),
        format!("--namespace={NS}"),
        "--safety-up=2".into(),
        "--safety-down=1".into(),
        "--machine-safety-overshooting-period=1m".into(),
        "--v=2".into(),
    ];
    let machine_controller = [
        format!("--control-kubeconfig={kubeconfig}"),
        format!("--target-kubeconfig={kubeconfig}"),
        format!("--namespace={NS}"),
        "--machine-drain-timeout=5m".into(),
        "--machine-health-timeout=10m".into(),
        "--machine-safety-orphan-vms-period=30m".into(),
        "--node-conditions=ReadonlyFilesystem,KernelDeadlock,DiskPressure,NetworkUnavailable".into(),
        "--v=3".into(),
    ];
    manager.into_iter().chain(machine_controller).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcm_run_starts_with_mcms_own_command_lines_and_reconciles() {
    let run_env = RunEnv::start(0.2).await;
    let lines = mcm_command_lines(run_env.kubeconfig.to_str().unwrap());
    let mut args: Vec<&str> = lines.iter().map(String::as_str).collect();
    // Flags Gardener's deployments add, which change nothing here.
    args.extend(["--leader-elect=false", "--kube-api-content-type=application/vnd.kubernetes.protobuf"]);
    let run = run_env.spawn("mcm-command-lines", &args);
    run.wait_line("controllers started", WAIT).await;

    run_env.deployment("web", 2).await;
    run_env.wait_running(2, WAIT).await;
    run_env.assert_one_vm_per_machine().await;
    let logs = run.logs();
    assert!(
        logs.contains("--kube-api-content-type is accepted for MCM's command lines and has no effect here"),
        "{logs}"
    );
}

/// MCM's preservation marks (MCM master), as `machines::preservation` uses them.
const PRESERVE: &str = "node.machine.sapcloud.io/preserve";
const LAST_APPLIED: &str = "node.machine.sapcloud.io/last-applied-node-preserve-value";
const CA: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
const CA_BY_MCM: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm";

/// The families a dashboard of MCM's reads that this run has something for, by their `# TYPE` names.
const DASHBOARD_FAMILIES: &[&str] = &[
    "mcm_machine_controller_frozen",
    "mcm_machine_items_total",
    "mcm_machine_current_status_phase",
    "mcm_machine_info",
    "mcm_machine_status_condition",
    "mcm_machine_create_duration_seconds",
    "mcm_machine_join_duration_seconds",
    "mcm_cloud_api_requests",
    "mcm_cloud_api_driver_request_duration_seconds",
    "mcm_machine_set_items_total",
    "mcm_machine_set_status_replicas",
    "mcm_machine_set_status_available_replicas",
    "mcm_machine_set_failed_machines",
    "mcm_machine_deployment_items_total",
    "mcm_machine_deployment_info_spec_replicas",
    "mcm_machine_deployment_status_available_replicas",
    "mcm_machine_deployment_status_condition",
    "mcm_workqueue_adds",
    "mcm_workqueue_work_duration_seconds",
];

/// A machine's providerID.
fn provider_id(m: &Machine) -> String {
    m.spec.provider_id.clone().unwrap_or_default()
}

/// Its status' preserve expiry.
fn expiry(m: &Machine) -> Option<jiff::Timestamp> {
    Some(m.status.as_ref()?.current_status.as_ref()?.preserve_expiry_time.as_ref()?.0)
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Writes `status` (merged) onto machine `name`.
async fn set_status(env: &Env, name: &str, status: Value) {
    env.machines()
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({ "status": status })))
        .await
        .unwrap();
}

/// MCM master's objects taken over by `mcm run` started with MCM's own command lines: a Running machine with MCM's
/// texts, a Running machine preserved through its Node, an Unknown one, a Pending one, a CrashLoopBackOff one without
/// a VM and a Failed one. Only what MCM would do happens (the crash-looping machine gets its VM, the Unknown and the
/// Pending one whose Nodes are Ready re-join and join); no VM is deleted, no other VM is made, the preserved machine keeps every mark until its expiry,
/// and a dashboard's MCM families are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcm_run_takes_over_mcm_masters_objects_touching_only_what_mcm_would() {
    let mut run_env = RunEnv::start(0.2).await;
    // A deployment's VMs and Nodes, made here; then the objects rewritten as MCM master leaves them.
    run_env.env.dev.start_controllers();
    run_env.deployment("web", 4).await;
    let machines = run_env.wait_running(4, WAIT).await;
    run_env.env.dev.stop_controllers().await;
    let env = &run_env.env;
    let mut names: Vec<String> = machines.iter().map(|m| m.metadata.name.clone().unwrap()).collect();
    names.sort();
    let ids: BTreeMap<String, String> =
        machines.iter().map(|m| (m.metadata.name.clone().unwrap(), provider_id(m))).collect();
    let (steady, kept, unknown, pending) = (&names[0], &names[1], &names[2], &names[3]);
    let now = jiff::Timestamp::now();
    let operation = |type_: &str, state: &str, description: String, code: Option<&str>| {
        json!({"type": type_, "state": state, "description": description, "errorCode": code,
               "lastUpdateTime": now.to_string()})
    };
    set_status(env, steady, json!({
        "lastOperation": operation("Create", "Successful", format!("Machine {steady} successfully joined the cluster in 1m2.5s"), None),
    }))
    .await;
    // Preserved by the user through its Node until ten minutes from now.
    let until = now + jiff::SignedDuration::from_secs(600);
    let node = env.machines().get(kept).await.unwrap().metadata.labels.unwrap()["node"].clone();
    let node_patch = json!({"metadata": {"annotations": {PRESERVE: "now", CA: "true", CA_BY_MCM: "true"}}});
    env.nodes().patch(&node, &PatchParams::default(), &Patch::Merge(&node_patch)).await.unwrap();
    let condition = json!({"status": {"conditions": [{
        "type": "Preserved", "status": "True", "reason": "Preserved by user.",
        "message": format!("Machine preserved until {until}."), "lastTransitionTime": now.to_string(),
    }]}});
    env.nodes().patch_status(&node, &PatchParams::default(), &Patch::Strategic(&condition)).await.unwrap();
    let machine_patch = json!({"metadata": {"annotations": {LAST_APPLIED: "now"}}});
    env.machines().patch(kept, &PatchParams::default(), &Patch::Merge(&machine_patch)).await.unwrap();
    set_status(env, kept, json!({"currentStatus": {"phase": "Running", "lastUpdateTime": now.to_string(), "preserveExpiryTime": until.to_string()}})).await;
    set_status(env, unknown, json!({
        "currentStatus": {"phase": "Unknown", "lastUpdateTime": now.to_string()},
        "lastOperation": operation("HealthCheck", "Processing", format!("Machine {unknown} is unhealthy - changing MachinePhase to Unknown. Node conditions: []"), None),
    }))
    .await;
    // Pending: MCM made the VM and waits for its Node (which is Ready by now).
    set_status(
        env,
        pending,
        json!({
            "currentStatus": {"phase": "Pending", "lastUpdateTime": now.to_string(), "timeoutActive": true},
            "lastOperation": operation("Create", "Processing", "Creating machine on cloud provider".into(), None),
        }),
    )
    .await;
    // Bare machines without VMs: one crash-looping on a full quota, one Failed at its creation timeout.
    env.machine("crash", "small").await;
    // MCM labels its lifecycle durations by the machine's `name` label (its deployment's); none selects "batch".
    let labels = json!({"metadata": {"labels": {"name": "batch"}}});
    env.machines().patch("crash", &PatchParams::default(), &Patch::Merge(&labels)).await.unwrap();
    set_status(env, "crash", json!({
        "currentStatus": {"phase": "CrashLoopBackOff", "lastUpdateTime": now.to_string()},
        "lastOperation": operation("Create", "Failed", "Cloud provider message - machine codes error: code = [ResourceExhausted] message = [quota exceeded]".into(), Some("ResourceExhausted")),
    }))
    .await;
    env.machine("gave-up", "small").await;
    set_status(env, "gave-up", json!({
        "currentStatus": {"phase": "Failed", "lastUpdateTime": now.to_string()},
        "lastOperation": operation("Create", "Failed", "Machine gave-up failed to join the cluster in 20m0s minutes.".into(), None),
    }))
    .await;
    let before = env.dev.cloud.stats();

    let lines = mcm_command_lines(run_env.kubeconfig.to_str().unwrap());
    let args: Vec<&str> = lines.iter().map(String::as_str).collect();
    let run = run_env.spawn("mcm-master-objects", &args);
    run.wait_line("controllers started", WAIT).await;

    // What MCM would do: the crash-looping machine gets its VM, the Unknown one with a Ready Node re-joins.
    wait_until("crash to run, the Unknown machine to re-join and the Pending one to join", WAIT, || async {
        let running = |m: Option<Machine>| m.is_some_and(|m| phase_of(&m) == Some(MachinePhase::Running));
        let all = running(env.machines().get_opt("crash").await.ok()?)
            && running(env.machines().get_opt(unknown).await.ok()?)
            && running(env.machines().get_opt(pending).await.ok()?);
        all.then_some(())
    })
    .await;
    let joined = env.machines().get(pending).await.unwrap();
    let op = joined.status.and_then(|s| s.last_operation).unwrap();
    let description = op.description.unwrap_or_default();
    assert!(
        description.starts_with(&format!("Machine {pending} successfully joined the cluster in ")),
        "{description}"
    );
    let rejoined = env.machines().get(unknown).await.unwrap();
    let op = rejoined.status.and_then(|s| s.last_operation).unwrap();
    assert_eq!(
        op.description.as_deref(),
        Some(format!("Machine {unknown} successfully re-joined the cluster").as_str())
    );

    // Nothing else: no VM deleted, one made, every machine of the deployment keeps its VM, the Failed one stays.
    let after = env.dev.cloud.stats();
    assert_eq!(after.vms_deleted, before.vms_deleted, "no VM deleted");
    assert_eq!(after.vms_created, before.vms_created + 1, "only the crash-looping machine's VM");
    let machines = crate::sets::machines_of(&crate::sets::apis(env), "web").await;
    let now_ids: BTreeMap<String, String> =
        machines.iter().map(|m| (m.metadata.name.clone().unwrap(), provider_id(m))).collect();
    assert_eq!(now_ids, ids, "the deployment's machines and their VMs are the ones MCM left");
    let gave_up = env.machines().get("gave-up").await.unwrap();
    assert_eq!(phase_of(&gave_up), Some(MachinePhase::Failed));
    assert!(env.vms_of("gave-up").is_empty(), "a Failed machine is not created again");
    let steady = env.machines().get(steady).await.unwrap();
    let op = steady.status.as_ref().and_then(|s| s.last_operation.clone()).unwrap();
    assert_eq!(phase_of(&steady), Some(MachinePhase::Running));
    assert!(op.description.unwrap().ends_with("successfully joined the cluster in 1m2.5s"), "MCM's status left alone");

    // The preserved machine keeps every mark (its expiry is ten minutes away).
    let m = env.machines().get(kept).await.unwrap();
    let n = env.nodes().get(&node).await.unwrap();
    assert_eq!(expiry(&m).map(|t| t.as_second()), Some(until.as_second()));
    assert_eq!(annotation(&m.metadata, LAST_APPLIED), Some("now"));
    assert_eq!(annotation(&n.metadata, PRESERVE), Some("now"));
    assert_eq!((annotation(&n.metadata, CA), annotation(&n.metadata, CA_BY_MCM)), (Some("true"), Some("true")));
    let condition =
        n.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "Preserved");
    assert_eq!(condition.map(|c| c.status), Some("True".into()));

    // A dashboard's families, under MCM's names.
    let missing = |text: &str| -> Vec<&str> {
        DASHBOARD_FAMILIES.iter().copied().filter(|f| !text.contains(&format!("# TYPE {f} "))).collect()
    };
    // The join is counted right after the status write that made the machine Running.
    let served = wait_until("a dashboard's families", WAIT, || async {
        let text = run.scrape_text().await;
        missing(&text).is_empty().then_some(text)
    })
    .await;
    assert!(served.contains("mcm_machine_current_status_phase{"), "{served}");
}
