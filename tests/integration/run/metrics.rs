//! `/metrics` during a scale-up and a scale-down (MCM's families under MCM's names), and `/readyz` before and after
//! the caches sync.

use std::time::Duration;

use super::{RunEnv, WAIT, http_get};
use crate::support::{install_crds, wait_until};

#[tokio::test]
async fn metrics_follow_a_scale_up_and_match_the_clouds_counters() {
    let env = RunEnv::start(1.0).await;
    let run = env.spawn("run", &["--leader-elect=false"]);
    run.wait_line("leading: controllers started", WAIT).await;
    let before = run.scrape().await;
    assert_eq!(before.get("mcm_machine_items_total"), 0.0, "{before:?}");
    assert_eq!(before.get("mcm_machine_controller_frozen"), 0.0);

    env.deployment("workers", 3).await;
    // Scrape until all three are Running; remember every Running count seen on the way.
    let mut seen_running = Vec::new();
    let mut seen_not_running = false;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let m = run.scrape().await;
        let running = m.phase("Running");
        if m.get("mcm_machine_items_total") > running {
            seen_not_running = true;
        }
        seen_running.push(running);
        let ready = m.get("mcm_machine_deployment_status_ready_replicas{name=\"workers\",namespace=\"machines\"}");
        if running == 3.0 && ready == 3.0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "3 Running machines in the metrics: {seen_running:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen_not_running, "a scrape saw machines not yet Running: {seen_running:?}");
    assert!(seen_running.windows(2).all(|w| w[0] <= w[1]), "Running only grew: {seen_running:?}");
    let m = run.scrape().await;
    assert_eq!(m.get("mcm_machine_set_items_total"), 1.0);
    assert_eq!(m.sum("mcm_machine_set_status_ready_replicas", &[]), 3.0);
    assert_eq!(m.get("mcm_machine_deployment_info_spec_replicas{name=\"workers\",namespace=\"machines\"}"), 3.0);
    assert_eq!(m.sum("mcm_machine_current_status_phase", &[]), 3.0, "Running is 1 each");

    // The process's counters of driver calls match the cloud's own, operation by operation (read at a quiet
    // moment: the cloud counts a call on arrival, the process once it has the answer).
    let cloud = env.env.dev.cloud.clone();
    wait_until("the metrics to match the cloud's counters", WAIT, || async {
        let before = cloud.stats();
        let m = run.scrape().await;
        let after = cloud.stats();
        let op = |name: &str| m.sum("mcm_controller_driver_calls_total", &[&format!("operation=\"{name}\"")]) as u64;
        let counted = [op("create_machine"), op("get_machine_status"), op("list_machines"), op("delete_machine")];
        let expected = [before.creates, before.status_gets, before.lists, before.deletes];
        (before == after && counted == expected).then_some(())
    })
    .await;
    let stats = cloud.stats();
    assert_eq!((stats.creates, stats.vms_created), (3, 3), "{stats:?}");
    let m = run.scrape().await;
    assert_eq!(
        m.get(
            "mcm_cloud_api_driver_request_duration_seconds_count{provider=\"InMemory\",operation=\"create_machine\"}"
        ),
        3.0
    );
    assert_eq!(m.get("mcm_cloud_api_requests_total{provider=\"InMemory\",service=\"create_machine\"}"), 3.0);
    // MCM's durations are gauges of the last value, one series per MachineDeployment, instance type and zone.
    let workers = [r#"namespace="machines""#, r#"machine_deployment="workers""#];
    assert_eq!(m.series("mcm_machine_create_duration_seconds", &workers), 1, "{m:?}");
    assert_eq!(m.series("mcm_machine_join_duration_seconds", &workers), 1, "{m:?}");
    assert_eq!(m.series("mcm_machine_info", &[r#"spec_class_name="small""#]), 3, "{m:?}");
    assert_eq!(
        m.get("mcm_machine_deployment_info_spec_rolling_update_max_surge{name=\"workers\",namespace=\"machines\"}"),
        1.0
    );
    for controller in ["machine", "machineset", "machinedeployment"] {
        let series = format!("mcm_controller_reconcile_duration_seconds_count{{controller=\"{controller}\"}}");
        assert!(m.get(&series) > 0.0, "{series}: {m:?}");
        let adds = format!("mcm_workqueue_adds_total{{name=\"{controller}\"}}");
        assert!(m.get(&adds) > 0.0, "{adds}: {m:?}");
    }
    assert_eq!(m.series("mcm_machine_drain_duration_seconds", &[]), 0, "no drain yet");

    // A scale-down drains one Node and deletes one VM: MCM's drain and delete durations count them.
    env.scale("workers", 2).await;
    env.wait_running(2, WAIT).await;
    let m = wait_until("the drain and the deletion in the metrics", WAIT, || async {
        let m = run.scrape().await;
        (m.series("mcm_machine_delete_duration_seconds", &workers) == 1 && m.phase("Running") == 2.0).then_some(m)
    })
    .await;
    assert_eq!(m.series("mcm_machine_drain_duration_seconds", &workers), 1, "{m:?}");
    // Every family of MCM's this run has something for is there, under MCM's name; the old names are gone.
    // Not here: initialize (the in-memory cloud's VMs need none) and scrape failures (none happen).
    let text = run.scrape_text().await;
    let nothing_to_show = ["mcm_machine_initialize_duration_seconds", "mcm_misc_scrape_failure"];
    for family in filled_families().iter().filter(|f| !nothing_to_show.contains(&f.as_str())) {
        assert!(text.contains(&format!("# TYPE {family} ")), "MCM's {family} in {text}");
    }
    for old in ["mcm_cloud_driver_request_duration_seconds", "mcm_machine_items_by_phase"] {
        assert!(!text.contains(old), "{old} is gone");
    }
    assert_eq!(m.phase("Running"), 2.0);
    assert!(
        m.0.keys().any(|k| k.starts_with("mcm_controller_reconciles_in_flight{controller=\"machine-termination\""))
    );
    env.env.shutdown().await;
}

#[tokio::test]
async fn readyz_is_503_until_the_caches_sync() {
    // An API server without the CRDs: the watches cannot list, so the caches cannot sync.
    let (server, client) = crate::support::start().await;
    let dir = crate::support::TempDir::new("mcm-run-readyz");
    let kubeconfig = dir.0.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let run = super::McmRun::spawn("run", &kubeconfig, "http://127.0.0.1:1", &dir.0, &["--leader-elect=false"]);
    let readyz = run.readyz_url().await;
    let healthz = readyz.replace("/readyz", "/healthz");
    assert_eq!(http_get(&healthz).await.0, 200, "alive from the start");
    run.wait_line("leading: controllers started", WAIT).await;
    let (status, body) = http_get(&readyz).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("caches not synced"), "{body}");

    install_crds(&client).await;
    wait_until("/readyz to answer 200", WAIT, || async { (http_get(&readyz).await.0 == 200).then_some(()) }).await;
    run.wait_line("caches synced", Duration::from_secs(5)).await;
    server.shutdown().await;
}

/// The families `src/metrics/mcm_families.txt` marks filled, by the name their `# TYPE` line carries (a counter's
/// without `_total`, as OpenMetrics declares it).
fn filled_families() -> Vec<String> {
    include_str!("../../../src/metrics/mcm_families.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && l.ends_with("filled"))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let name = cols[0];
            if cols[1] == "counter" {
                name.strip_suffix("_total").unwrap_or(name).to_string()
            } else {
                name.to_string()
            }
        })
        .collect()
}
