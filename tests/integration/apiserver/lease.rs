//! Leader election over a Lease with two contenders (kube-lease-manager: server-side apply with conflicts).

use std::time::Duration;

use kube_lease_manager::LeaseManagerBuilder;

use crate::support::{start, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_a_standby_takes_over() {
    let (_server, client) = start().await;
    let contender = |identity: &str| {
        LeaseManagerBuilder::new(client.clone(), "mcm-leader")
            .with_namespace("kube-system")
            .with_identity(identity)
            .with_duration(6)
            .with_grace(3)
            .build()
    };
    let (a_leads, a_task) = contender("a").await.unwrap().watch().await;
    let (b_leads, b_task) = contender("b").await.unwrap().watch().await;

    let leader = wait_until("a leader", Duration::from_secs(15), || async {
        match (*a_leads.borrow(), *b_leads.borrow()) {
            (true, false) => Some("a"),
            (false, true) => Some("b"),
            (true, true) => panic!("two leaders"),
            (false, false) => None,
        }
    })
    .await;

    // Through several renewals, never two leaders and never a change of leader.
    let until = tokio::time::Instant::now() + Duration::from_secs(7);
    while tokio::time::Instant::now() < until {
        let now = (*a_leads.borrow(), *b_leads.borrow());
        assert_eq!(now, (leader == "a", leader == "b"), "leadership stays put while the leader renews");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The leader dies without releasing: the standby takes over once the lease expires.
    let (dead, survivor) = if leader == "a" { (a_task, &b_leads) } else { (b_task, &a_leads) };
    dead.abort();
    wait_until("the standby to take over", Duration::from_secs(40), || async { (*survivor.borrow()).then_some(()) })
        .await;
}
