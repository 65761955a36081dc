//! Draining a node before its machine is deleted: cordon, evict pods (those without volumes in parallel, those with
//! volumes one at a time, waiting for their volumes to detach), retry evictions a PodDisruptionBudget refuses, and
//! force-delete (grace period 0) when the drain is forced. The timeout is a hard deadline.
//!
//! [`plan`] decides what happens to each pod (pure), [`force`] decides whether a drain is forced (pure), and
//! [`drain`] carries the plan out against the API server. `docs/drain.md` describes the behaviour and how it differs
//! from MCM's.
//!
//! **The client must not retry 429s itself.** kube-rs clients do by default (up to 15 times, backing off to minutes),
//! which would hide PodDisruptionBudget refusals and stretch every retry interval; build the client with
//! `default_retry = false`, e.g. with [`client_for_drain`]. With a retrying client an eviction attempt is cut after
//! 30 s and counted as refused, so the drain still keeps its deadline, only with slower retries.

use std::time::Duration;

use crate::providers::contract::Driver;

mod executor;
pub mod force;
pub mod plan;

pub use force::{ForceReason, should_force};

/// How to drain one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainOptions {
    /// The node.
    pub node: String,
    /// A hard deadline for the whole drain (MCM `--machine-drain-timeout`, default 2h; per machine `drainTimeout`).
    pub timeout: Duration,
    /// How often a pod's eviction is attempted while a PodDisruptionBudget refuses it (429), counting the first
    /// attempt as MCM does (0 counts as 1), before the pod is deleted with grace period 0 (MCM:
    /// `min(maxEvictRetries, timeout / 20s)`).
    pub max_evict_retries: u32,
    /// The pause between eviction retries (MCM: 20 s).
    pub evict_retry_interval: Duration,
    /// How long to wait for a pod's volumes to leave `node.status.volumesAttached` after its eviction (MCM
    /// `--machine-pv-detach-timeout`, 2 m, plus the pod's termination grace period).
    pub volume_detach_timeout: Duration,
    /// How long to wait for a detached volume to attach elsewhere (MCM `--machine-pv-reattach-timeout`, 90 s; a
    /// timeout is only a warning).
    pub volume_reattach_timeout: Duration,
    /// Forced drain: delete every pod with grace period 0, in parallel, without waiting for volumes.
    pub force: bool,
}

/// What a drain did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainOutcome {
    /// Pods evicted (`namespace/name`).
    pub evicted: Vec<String>,
    /// Pods deleted (forced drain, Succeeded/Failed pods, or evictions refused too often).
    pub deleted: Vec<String>,
    /// Pods left alone (DaemonSet and mirror pods).
    pub skipped: Vec<String>,
    /// Warnings (a volume that did not reattach elsewhere in time ...).
    pub warnings: Vec<String>,
}

/// Why a drain did not finish. Every message names the node and, where there is one, the pod.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// The deadline passed.
    #[error("draining node {node} did not finish within {timeout:?}: {pending} pods left")]
    Timeout {
        /// The node.
        node: String,
        /// The deadline.
        timeout: Duration,
        /// Pods not yet gone.
        pending: usize,
    },
    /// An eviction failed with something other than a PodDisruptionBudget refusal, or did not complete: the pod was
    /// still there after its grace period plus 30 s, or its volumes were still attached to the node after the pod's
    /// grace period plus `volume_detach_timeout`.
    #[error("evicting pod {pod} from node {node} failed: {reason}")]
    Eviction {
        /// The node.
        node: String,
        /// `namespace/name`.
        pod: String,
        /// The API server's message.
        reason: String,
    },
    /// A PodDisruptionBudget that allows no disruption while every pod it covers is healthy (it can never let a
    /// drain through).
    #[error(
        "pod {pod} on node {node} is covered by PodDisruptionBudget {pdb}, which is misconfigured and requires zero voluntary evictions"
    )]
    MisconfiguredBudget {
        /// The node.
        node: String,
        /// `namespace/name`.
        pod: String,
        /// The budget.
        pdb: String,
    },
    /// Talking to the API server failed.
    #[error("draining node {node}: {source}")]
    Api {
        /// The node.
        node: String,
        /// The cause.
        source: kube::Error,
    },
}

/// A client for draining: `config` without kube-rs's own retries of 429/503/504, so PodDisruptionBudget refusals
/// reach the drain at once (see the module documentation).
pub fn client_for_drain(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    kube::Client::try_from(config)
}

/// Cordons the node (`spec.unschedulable = true`); a missing node is not an error.
pub async fn cordon(client: &kube::Client, node: &str) -> Result<(), DrainError> {
    set_unschedulable(client, node, true).await
}

/// Makes the node schedulable again (`spec.unschedulable = false`); a missing node is not an error.
pub async fn uncordon(client: &kube::Client, node: &str) -> Result<(), DrainError> {
    set_unschedulable(client, node, false).await
}

async fn set_unschedulable(client: &kube::Client, node: &str, unschedulable: bool) -> Result<(), DrainError> {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let patch = kube::api::Patch::Merge(serde_json::json!({"spec": {"unschedulable": unschedulable}}));
    match nodes.patch(node, &kube::api::PatchParams::default(), &patch).await {
        Ok(_) => {
            tracing::info!(node, unschedulable, "set node schedulability");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(DrainError::Api { node: node.to_string(), source }),
    }
}

/// Drains a node of the target cluster (call [`cordon`] first, so evicted pods are not scheduled back). `driver`
/// maps persistent volumes to cloud volume IDs (to wait for their detachment); without one, volumes are not waited
/// for. A missing node, or one deleted during the drain, counts as drained. `client` must not retry 429s (see the
/// module documentation). Never takes longer than `options.timeout` (plus the time to notice it passed).
pub async fn drain(
    client: &kube::Client,
    driver: Option<&dyn Driver>,
    options: &DrainOptions,
) -> Result<DrainOutcome, DrainError> {
    executor::drain(client, driver, options).await
}
