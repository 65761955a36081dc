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
    /// How long before the lease's expiry the leader renews it at the latest (`--leader-elect-renew-deadline`,
    /// 10s: the lease is renewed when `lease_duration - renew_deadline` of it is left... see `grace`).
    pub renew_deadline: Duration,
    /// How long to wait before trying again after an error (`--leader-elect-retry-period`, 2s).
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// kube-lease-manager's lease duration and grace (renew this long before expiry), in whole seconds: the grace
    /// is `lease_duration - renew_deadline`, at least 1 s and less than the duration.
    pub fn seconds(&self) -> (u64, u64) {
        let duration = self.lease_duration.as_secs().max(2);
        let grace = self.lease_duration.saturating_sub(self.renew_deadline).as_secs().clamp(1, duration - 1);
        (duration, grace)
    }
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
                result = manager.changed() => match result {
                    Ok(true) => {
                        set(Leadership::Leading);
                        became_leader(&client, &leases, &config).await;
                    }
                    Ok(false) => set(Leadership::Following),
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

    fn config(duration: u64, renew: u64) -> LeaderConfig {
        LeaderConfig {
            lease_name: "l".into(),
            namespace: "default".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(duration),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(2),
        }
    }

    #[test]
    fn grace_is_duration_minus_renew_deadline() {
        assert_eq!(config(15, 10).seconds(), (15, 5));
        assert_eq!(config(15, 15).seconds(), (15, 1));
        assert_eq!(config(1, 0).seconds(), (2, 1));
        assert_eq!(config(4, 1).seconds(), (4, 3));
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
