//! The documented way to try `mcm run` locally: `mcm dev --no-controllers` for the API server, CRDs, sample and
//! in-memory cloud, and one `mcm run` process that does all the reconciling.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use super::{McmRun, WAIT};
use crate::support::{Kubectl, TempDir, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcm_run_alone_brings_up_the_sample_of_mcm_dev_without_controllers() {
    let dir = TempDir::new("mcm-dev-no-controllers");
    let kubeconfig = dir.0.join("kubeconfig");
    let mut dev = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .args(["dev", "--no-controllers", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Read up to the ready line on a blocking thread; the rest of stdout is drained there too.
    let stdout = dev.stdout.take().unwrap();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        let mut seen = Vec::new();
        for line in lines.by_ref() {
            let ready = line.starts_with("mcm dev ready:");
            seen.push(line);
            if ready {
                break;
            }
        }
        let _ = ready_tx.send(seen);
        lines.for_each(drop);
    });
    let printed = tokio::time::timeout(WAIT, ready_rx).await.expect("mcm dev got ready").unwrap();
    assert!(printed.iter().any(|l| l.contains("controllers left out (--no-controllers)")), "{printed:#?}");
    assert!(!printed.iter().any(|l| l.contains("started the controllers")), "{printed:#?}");
    let cloud_url = std::fs::read_to_string(dir.0.join("inmemory-cloud-url")).unwrap().trim().to_string();

    let run = McmRun::spawn_in("mcm-sample", "run", &kubeconfig, &cloud_url, &dir.0, &["--leader-elect=false"]);
    run.wait_line("leading: controllers started", WAIT).await;
    let kubectl = Kubectl::for_kubeconfig(&kubeconfig);
    wait_until("the sample's 3 machines Running", WAIT, || async {
        let (_, phases, _) = kubectl
            .try_run(&[
                "-n",
                "mcm-sample",
                "get",
                "machines.machine.sapcloud.io",
                "-o",
                "jsonpath={.items[*].status.currentStatus.phase}",
            ])
            .await;
        (phases.split_whitespace().filter(|p| *p == "Running").count() == 3).then_some(())
    })
    .await;
    // mcm run made every VM: no controller in mcm dev competed with it.
    let metrics = run.scrape().await;
    assert_eq!(metrics.sum("mcm_controller_driver_calls_total", &[r#"operation="create_machine""#]), 3.0);

    run.signal("TERM");
    let mut run = run;
    assert!(run.wait_exit(WAIT).await, "mcm run exits cleanly");
    assert!(Command::new("kill").args(["-INT", &dev.id().to_string()]).status().unwrap().success());
    assert!(dev.wait().unwrap().success(), "mcm dev exits cleanly");
}
