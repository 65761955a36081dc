//! A class the cloud refuses (`InvalidArgument`): its machines wait in CrashLoopBackOff as in MCM (never Failed at
//! once, so the MachineSet does not replace them over and over), the cloud is asked once per back-off for the whole
//! class rather than once per machine, the class gets one Warning event, and fixing the class brings the same
//! machines up.

use std::collections::BTreeSet;
use std::time::Duration;

use mcm::api::mcm::MachinePhase;
use mcm::lifecycle::Backoff;
use serde_json::json;

use super::{WAIT, apis, create, deployment, event_count, machines_of, options, rolling, wait_settled};
use crate::machines::{Env, phase_of};
use crate::support::wait_until;

/// The description of a machine's last operation.
fn description(m: &mcm::api::mcm::Machine) -> String {
    m.status.as_ref().and_then(|s| s.last_operation.as_ref()).and_then(|o| o.description.clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_class_backs_off_once_for_all_its_machines_and_recovers_when_fixed() {
    let mut options = options();
    options.machine.retry.other = Backoff::new(Duration::from_secs(1), Duration::from_secs(2));
    let env = Env::start(options).await;
    // bootJitter is a share (0..=1): the in-memory cloud refuses the class with InvalidArgument.
    env.class("small", json!({"bootJitter": 7})).await;
    let apis = apis(&env);
    create(&apis.deployments, deployment("web", 3, rolling(json!(1), json!(0)))).await;

    // The three machines wait in CrashLoopBackOff with the cloud's message, and the class's mark shows up in them.
    let names = wait_until("3 machines held by the refused class", WAIT, || async {
        let machines = machines_of(&apis, "web").await;
        let held = machines.iter().all(|m| {
            phase_of(m) == Some(MachinePhase::CrashLoopBackOff) && description(m).contains("providerSpec.bootJitter")
        });
        let marked = machines.iter().any(|m| description(m).contains("class small was refused"));
        (machines.len() == 3 && held && marked)
            .then(|| machines.iter().map(|m| m.metadata.name.clone().unwrap_or_default()).collect::<BTreeSet<_>>())
    })
    .await;
    // The in-memory cloud refuses the class's lookups as well as its creates (it validates the spec first).
    let asked = || {
        let stats = env.dev.cloud.stats();
        stats.creates + stats.status_gets
    };
    let asked_then = asked();

    // Three refusals in a row (back-offs of 1 s and 2 s in between): the class is asked about once per back-off.
    wait_until("the class to be refused 3 times", WAIT, || async {
        machines_of(&apis, "web").await.iter().any(|m| description(m).contains("refused 3 time(s)")).then_some(())
    })
    .await;
    let machines = machines_of(&apis, "web").await;
    let now: BTreeSet<_> = machines.iter().map(|m| m.metadata.name.clone().unwrap_or_default()).collect();
    assert_eq!(now, names, "no machine was failed and replaced");
    assert!(machines.iter().all(|m| phase_of(m) == Some(MachinePhase::CrashLoopBackOff)));
    // Per machine, three machines would have asked about 6 times in this window; one probe per back-off is 2 (a
    // call already under way when the class was marked may add one).
    let calls = asked() - asked_then;
    assert!(calls <= 3, "the cloud was asked {calls} times while the class was marked");
    assert_eq!(env.dev.cloud.stats().vms_created, 0);
    assert_eq!(event_count(&env, "MachineClass", "small", "InvalidClass").await, 1, "the class is told once");

    // Fixing the class (a new fingerprint) brings the same machines up.
    let classes: kube::Api<mcm::api::mcm::MachineClass> = kube::Api::namespaced(env.client(), crate::machines::NS);
    let patch = json!({"providerSpec": {"bootJitter": null}});
    classes.patch("small", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
    wait_settled(&apis, "web", 3).await;
    let running: BTreeSet<_> =
        machines_of(&apis, "web").await.iter().map(|m| m.metadata.name.clone().unwrap_or_default()).collect();
    assert_eq!(running, names, "the held machines themselves came up");
    assert_eq!(env.dev.cloud.stats().vms_created, 3);
    env.shutdown().await;
}
