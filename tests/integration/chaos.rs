//! A short `mcm chaos` run (issue #26): two trials of a small deployment with every kind of fault, every invariant
//! checked. The long run (20 trials of 100 machines) is the documented command in docs/reliability.md.

use std::time::Duration;

use mcm::chaos::{ChaosOptions, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_chaos_run_keeps_every_invariant() {
    needs_embedded_server!("fault injection, closed watches and pauses of the embedded API server");
    let mut options = ChaosOptions::new(env!("CARGO_BIN_EXE_mcm").into());
    options.seed = 26;
    options.trials = 2;
    options.machines = 12;
    options.window = Duration::from_secs(20);
    options.boot = Duration::from_millis(500);
    options.kills = 2;
    options.pause = Duration::from_secs(8);
    options.watch_close_every = Duration::from_secs(5);
    options.orphan_period = Duration::from_secs(10);
    options.converge_timeout = Duration::from_secs(180);
    let report = run(options, |line| eprintln!("mcm chaos: {line}")).await.unwrap();
    let text = report.text();
    eprintln!("{text}");

    assert_eq!(report.trials.len(), 2, "{text}");
    assert!(report.held(), "an invariant broke (logs in {:?}):\n{text}", report.logs);
    // The run proves something only if the faults fired.
    let sum = |f: fn(&mcm::chaos::TrialReport) -> u64| report.trials.iter().map(f).sum::<u64>();
    assert!(sum(|t| u64::from(t.kills)) >= 2, "leaders killed:\n{text}");
    assert!(sum(|t| u64::from(t.pauses)) >= 1, "API server pauses:\n{text}");
    assert!(sum(|t| u64::from(t.watch_closes)) >= 2, "watch closes:\n{text}");
    assert!(sum(|t| u64::from(t.planted)) >= 2, "planted VMs:\n{text}");
    assert!(sum(|t| t.api_failures) > 0, "API failures:\n{text}");
    assert!(sum(|t| t.cloud_faults.total()) > 0, "cloud faults:\n{text}");
    assert!(sum(|t| t.vms_created) >= 12, "VMs created:\n{text}");
}
