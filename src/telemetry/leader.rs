//! Leader election on a `coordination.k8s.io/v1` Lease with kube-lease-manager: one process of several leads
//! (runs the controllers); the others stand by and take over within the lease duration when the leader dies. A
//! leader whose renewal fails steps down at once (it stops reconciling before its lease can expire), and the lease
//! is released on shutdown so a standby need not wait for it to expire.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;

/// Where this process stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// Not known yet (starting, or the Lease could not be read or renewed).
    Unknown,
    /// This process holds the lease: run the controllers.
    Leading,
    /// Another process holds the lease.
    Following,
}

/// How to elect (MCM's `--leader-elect-*` flags).
#[derive(Clone, Debug, PartialEq)]
pub struct LeaderConfig {
    /// The Lease's name.
    pub lease_name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This process's identity (hostname and a random suffix).
    pub identity: String,
    /// How long a lease lasts without renewal (`--leader-elect-lease-duration`, 15s).
    pub lease_duration: Duration,
    /// How long a leader may go without a successful renewal before it steps down (`--leader-elect-renew-deadline`,
    /// 10s); shorter than the lease duration, so it stops before another process can take the lease.
    pub renew_deadline: Duration,
    /// How long to wait before trying again after an error (`--leader-elect-retry-period`, 2s).
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// kube-lease-manager's lease duration and grace (renew this long before expiry), in whole seconds. As in
    /// client-go the leader renews every retry period, so the grace is `lease_duration - retry_period`, at least
    /// 1 s and less than the duration: a renewal that fails has the rest of the renew deadline to succeed.
    pub fn seconds(&self) -> (u64, u64) {
        let duration = self.lease_duration.as_secs().max(2);
        let grace = self.lease_duration.saturating_sub(self.retry_period).as_secs().clamp(1, duration - 1);
        (duration, grace)
    }
}

/// Whether a leader whose last successful renewal was at `renewed` must step down at `now`: it has gone longer
/// than the renew deadline without one. kube-lease-manager keeps reporting leadership while it retries a renewal
/// that met a conflict (backing off up to 5 s) or waits for a slow answer, which can outlast the lease; a standby
/// may then take over while this process still runs its controllers. client-go's leader stops at the renew
/// deadline, before the lease can expire; this check gives ours the same bound.
pub fn renewal_overdue(renewed: jiff::Timestamp, now: jiff::Timestamp, renew_deadline: Duration) -> bool {
    let deadline = jiff::SignedDuration::try_from(renew_deadline).unwrap_or(jiff::SignedDuration::MAX);
    now.duration_since(renewed) > deadline
}

/// The renewal time of the Lease when `identity` holds it.
fn own_renewal(lease: &Lease, identity: &str) -> Option<jiff::Timestamp> {
    let spec = lease.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    spec.renew_time.as_ref().or(spec.acquire_time.as_ref()).map(|t| t.0)
}

/// An identity unique to this process: the host name and a random suffix.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "mcm".to_string());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// Whether the Lease is held by someone else whose renewal has not expired.
fn held_by_other(lease: &Lease, identity: &str, now: jiff::Timestamp) -> bool {
    let Some(spec) = lease.spec.as_ref() else { return false };
    let Some(holder) = spec.holder_identity.as_deref().filter(|h| !h.is_empty()) else { return false };
    if holder == identity {
        return false;
    }
    let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    match spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) {
        Some(renewed) => renewed.0 + jiff::SignedDuration::from_secs(seconds) > now,
        None => false,
    }
}

/// Records MCM's `LeaderElection` event on the Lease (`<identity> became leader`), as client-go does.
async fn became_leader(client: &Client, leases: &Api<Lease>, config: &LeaderConfig) {
    use kube::Resource;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let Ok(lease) = leases.get(&config.lease_name).await else { return };
    let reporter =
        Reporter { controller: "machine-controller-manager".into(), instance: Some(config.identity.clone()) };
    let event = Event {
        type_: EventType::Normal,
        reason: "LeaderElection".into(),
        note: Some(format!("{} became leader", config.identity)),
        action: "Elect".into(),
        secondary: None,
    };
    if let Err(e) = Recorder::new(client.clone(), reporter).publish(&event, &lease.object_ref(&())).await {
        tracing::debug!(error = %e, "could not record the leader election event");
    }
}

fn stopped(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow()
}

async fn build(client: &Client, config: &LeaderConfig) -> Result<LeaseManager, kube_lease_manager::LeaseManagerError> {
    let (duration, grace) = config.seconds();
    LeaseManagerBuilder::new(client.clone(), &config.lease_name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(duration)
        .with_grace(grace)
        .with_field_manager("mcm-leader-election")
        .build()
        .await
}

/// Takes part in the election until `stop` turns true, publishing where this process stands on `state`; then
/// releases the lease if held.
pub async fn run(
    client: Client,
    config: LeaderConfig,
    state: watch::Sender<Leadership>,
    mut stop: watch::Receiver<bool>,
) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let set = |s: Leadership| {
        state.send_if_modified(|current| {
            let changed = *current != s;
            if changed {
                tracing::info!(identity = %config.identity, lease = %config.lease_name, from = ?*current, to = ?s, "leadership changed");
            }
            *current = s;
            changed
        });
    };
    loop {
        if stopped(&stop) {
            return;
        }
        let manager = match build(&client, &config).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, lease = %config.lease_name, "could not join the leader election; retrying");
                set(Leadership::Unknown);
                tokio::select! {
                    _ = async { let _ = stop.wait_for(|s| *s).await; } => return,
                    _ = tokio::time::sleep(config.retry_period) => continue,
                }
            }
        };
        // A fresh manager starts as "not leader"; if another live holder has the lease, that is known now.
        if let Ok(lease) = leases.get(&config.lease_name).await
            && held_by_other(&lease, &config.identity, jiff::Timestamp::now())
        {
            set(Leadership::Following);
        }
        // While leading: when the lease was last seen renewed by us (see `renewal_overdue`).
        let mut renewed: Option<jiff::Timestamp> = None;
        let mut check = tokio::time::interval(config.retry_period.max(Duration::from_millis(100)));
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let mut stop_here = stop.clone();
            tokio::select! {
                biased;
                _ = async { let _ = stop_here.wait_for(|s| *s).await; } => {
                    set(Leadership::Unknown);
                    if let Err(e) = manager.release().await {
                        tracing::warn!(error = %e, "could not release the leader lease");
                    } else {
                        tracing::info!(lease = %config.lease_name, "released the leader lease");
                    }
                    return;
                }
                _ = check.tick(), if renewed.is_some() => {
                    // A read that fails or hangs leaves the last renewal seen; time runs on regardless.
                    let read = tokio::time::timeout(config.retry_period.max(Duration::from_secs(1)), leases.get(&config.lease_name)).await;
                    if let Ok(Ok(lease)) = read
                        && let Some(at) = own_renewal(&lease, &config.identity)
                    {
                        renewed = renewed.max(Some(at));
                    }
                    if renewed.is_some_and(|at| renewal_overdue(at, jiff::Timestamp::now(), config.renew_deadline)) {
                        tracing::warn!(
                            lease = %config.lease_name,
                            renew_deadline = ?config.renew_deadline,
                            "the lease was not renewed within the renew deadline; stepping down"
                        );
                        set(Leadership::Unknown);
                        break;
                    }
                }
                result = manager.changed() => match result {
                    Ok(true) => {
                        renewed = Some(jiff::Timestamp::now());
                        set(Leadership::Leading);
                        became_leader(&client, &leases, &config).await;
                    }
                    Ok(false) => {
                        renewed = None;
                        set(Leadership::Following);
                    }
                    Err(e) => {
                        // Renewal or reading failed: stop leading now rather than when the lease has expired and
                        // another process may already lead.
                        tracing::warn!(error = %e, "leader election failed; stepping down and trying again");
                        set(Leadership::Unknown);
                        break;
                    }
                }
            }
        }
        tokio::select! {
            _ = async { let _ = stop.wait_for(|s| *s).await; } => return,
            _ = tokio::time::sleep(config.retry_period) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    use super::*;

    fn config(duration: u64, retry_ms: u64) -> LeaderConfig {
        LeaderConfig {
            lease_name: "l".into(),
            namespace: "default".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(duration),
            renew_deadline: Duration::from_secs(duration * 2 / 3),
            retry_period: Duration::from_millis(retry_ms),
        }
    }

    #[test]
    fn the_leader_renews_every_retry_period() {
        // (duration, grace): kube-lease-manager renews `grace` before expiry, i.e. a retry period after a renewal.
        assert_eq!(config(15, 2000).seconds(), (15, 13));
        assert_eq!(config(3, 500).seconds(), (3, 2));
        assert_eq!(config(2, 2000).seconds(), (2, 1));
        assert_eq!(config(1, 0).seconds(), (2, 1));
    }

    #[test]
    fn a_renewal_is_overdue_after_the_renew_deadline() {
        let at = |s: i64| jiff::Timestamp::from_second(s).unwrap();
        let deadline = Duration::from_secs(10);
        assert!(!renewal_overdue(at(100), at(105), deadline));
        assert!(!renewal_overdue(at(100), at(110), deadline));
        assert!(renewal_overdue(at(100), at(111), deadline));
        // A renewal seen "in the future" (clock steps) is not overdue.
        assert!(!renewal_overdue(at(100), at(99), deadline));
    }

    #[test]
    fn only_our_own_renewals_count() {
        let lease = |holder: &str| Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(jiff::Timestamp::from_second(7).unwrap())),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(own_renewal(&lease("me"), "me"), Some(jiff::Timestamp::from_second(7).unwrap()));
        assert_eq!(own_renewal(&lease("other"), "me"), None);
        assert_eq!(own_renewal(&Lease::default(), "me"), None);
    }

    #[test]
    fn other_holders_count_until_expiry() {
        let now = jiff::Timestamp::from_second(1_000).unwrap();
        let lease = |holder: Option<&str>, renewed: i64| Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(jiff::Timestamp::from_second(renewed).unwrap())),
                ..Default::default()
            }),
            ..Default::default()
        };
        let rows = [
            ("live other", lease(Some("other"), 990), true),
            ("expired other", lease(Some("other"), 980), false),
            ("me", lease(Some("me"), 999), false),
            ("nobody", lease(None, 999), false),
            ("empty", Lease::default(), false),
        ];
        for (name, lease, expected) in rows {
            assert_eq!(held_by_other(&lease, "me", now), expected, "{name}");
        }
    }
}
