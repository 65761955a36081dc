//! MCM's own command lines start `mcm run` unchanged (docs/configuration.md, "MCM's command lines").

use super::{RunEnv, WAIT};
use crate::machines::NS;

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
