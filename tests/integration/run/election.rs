//! Two `mcm run` processes, one Lease: exactly one reconciles; when it dies the other takes over and finishes a
//! scale-up, and no machine or VM is created twice.

use std::time::Duration;

use super::{RunEnv, WAIT};

const FAST_LEASE: [&str; 3] =
    ["--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=500ms"];

#[tokio::test]
async fn a_standby_takes_over_when_the_leader_dies_and_nothing_is_created_twice() {
    let env = RunEnv::start(0.5).await;
    let mut a = env.spawn("a", &FAST_LEASE);
    a.wait_line("leading: controllers started", WAIT).await;
    let b = env.spawn("b", &FAST_LEASE);
    b.wait_line("standing by: another process leads", WAIT).await;

    env.deployment("workers", 2).await;
    env.wait_running(2, WAIT).await;
    env.assert_one_vm_per_machine().await;

    // Only the leader called the cloud; the standby's counters are empty.
    let (from_a, from_b) = (a.scrape().await, b.scrape().await);
    assert!(from_a.sum("mcm_controller_driver_calls_total", &[r#"operation="create_machine""#]) >= 2.0, "{from_a:?}");
    assert_eq!(from_b.sum("mcm_controller_driver_calls_total", &[]), 0.0, "{from_b:?}");
    assert_eq!(from_a.get("mcm_leader_election_master_status"), 1.0);
    assert_eq!(from_b.get("mcm_leader_election_master_status"), 0.0);
    assert!(!b.printed("leading"), "{:?}", b.lines());

    // The leader dies without releasing its lease; the standby waits for it to expire, then leads.
    a.signal("KILL");
    a.wait_exit(WAIT).await;
    env.scale("workers", 4).await;
    b.wait_line("leading: controllers started", Duration::from_secs(30)).await;
    env.wait_running(4, WAIT).await;
    env.assert_one_vm_per_machine().await;
    let stats = env.env.dev.cloud.stats();
    assert_eq!(stats.vms_created, 4, "every VM was created once: {stats:?}");
    assert_eq!(stats.vms_deleted, 0, "{stats:?}");
    let from_b = b.scrape().await;
    assert_eq!(
        from_b.sum("mcm_controller_driver_calls_total", &[r#"operation="create_machine""#, r#"code="OK""#]),
        2.0
    );
    env.env.shutdown().await;
}

/// A leader whose renewals all meet conflicts steps down before its lease can expire. kube-lease-manager alone
/// keeps reporting leadership while it backs off (up to 5 s) after a conflict, long enough for a standby to take
/// the expired lease while the old leader still runs its controllers: `mcm chaos` saw two leaders create machines
/// for the same MachineSet at once. Fails without `leader::renewal_overdue`'s check.
#[tokio::test]
async fn a_leader_that_cannot_renew_steps_down_before_its_lease_expires() {
    use k8s_openapi::api::coordination::v1::Lease;
    use mcm::apiserver::faults::{Selector, Verb};
    use mcm::telemetry::leader::{self, LeaderConfig, Leadership};
    use tokio::sync::watch;

    needs_embedded_server!("fault injection");
    let (server, client) = crate::support::start().await;
    let config = LeaderConfig {
        lease_name: "split-brain".into(),
        namespace: "default".into(),
        identity: "a_1".into(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
    };
    let (state, mut leadership) = watch::channel(Leadership::Unknown);
    let (stop, stopped) = watch::channel(false);
    let election = tokio::spawn(leader::run(client.clone(), config, state, stopped));
    tokio::time::timeout(WAIT, leadership.wait_for(|s| *s == Leadership::Leading)).await.unwrap().unwrap();
    // A leader whose renewals succeed stays leader past several renew deadlines.
    let changed = tokio::time::timeout(Duration::from_secs(7), leadership.changed()).await;
    let lease = kube::Api::<Lease>::namespaced(client.clone(), "default").get("split-brain").await.unwrap();
    assert!(
        changed.is_err(),
        "leadership changed to {:?} without faults; lease {:?}",
        *leadership.borrow(),
        lease.spec
    );

    // From now on every write to the Lease is answered 409 Conflict.
    for verb in [Verb::Update, Verb::Patch] {
        server.faults().fail_share(Selector::new(Some(verb), Some("leases.coordination.k8s.io")), 1.0, 409);
    }
    tokio::time::timeout(WAIT, leadership.wait_for(|s| *s != Leadership::Leading)).await.unwrap().unwrap();
    let stepped_down = jiff::Timestamp::now();
    let lease = kube::Api::<Lease>::namespaced(client, "default").get("split-brain").await.unwrap();
    let spec = lease.spec.unwrap();
    let expiry =
        spec.renew_time.unwrap().0 + jiff::SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap()));
    assert!(stepped_down < expiry, "stepped down at {stepped_down}, after the lease expired at {expiry}");
    assert!(server.faults().injected_failures() > 0);

    stop.send(true).unwrap();
    server.faults().clear();
    tokio::time::timeout(WAIT, election).await.unwrap().unwrap();
}
