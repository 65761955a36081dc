//! Draining a node before its machine is deleted: cordon, evict pods (those without volumes in parallel, those with
//! volumes one at a time, waiting for their volumes to detach), retry evictions a PodDisruptionBudget refuses, and
//! force-delete (grace period 0) when the drain is forced. The timeout is a hard deadline.
//!
//! Interface shared by the machine controller; the implementation lands with the drain work.

use std::time::Duration;

use crate::providers::Driver;

/// How to drain one node.
#[derive(Clone, Debug)]
pub struct DrainOptions {
    /// The node.
    pub node: String,
    /// A hard deadline for the whole drain (MCM `--machine-drain-timeout`, default 2h; per machine `drainTimeout`).
    pub timeout: Duration,
    /// How often an eviction a PodDisruptionBudget refused (429) is retried before the pod is deleted with grace
    /// period 0 (MCM: `min(maxEvictRetries, timeout / 20s)`).
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
    /// Pods deleted (forced drain, or evictions retried too often).
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
    /// An eviction failed with something other than a PodDisruptionBudget refusal.
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
    /// Not built yet (interface only).
    #[error("draining is not implemented yet")]
    NotImplemented,
}

/// Cordons the node (`spec.unschedulable = true`); a missing node is not an error.
pub async fn cordon(_client: &kube::Client, _node: &str) -> Result<(), DrainError> {
    Err(DrainError::NotImplemented)
}

/// Drains a node of the target cluster. `driver` maps persistent volumes to cloud volume IDs (to wait for their
/// detachment); without one, volumes are not waited for. A missing node counts as drained.
pub async fn drain(
    _client: &kube::Client,
    _driver: Option<&dyn Driver>,
    _options: &DrainOptions,
) -> Result<DrainOutcome, DrainError> {
    Err(DrainError::NotImplemented)
}
