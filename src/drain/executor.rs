//! The half of a drain that talks to the API server. Everything runs in one task under one hard deadline
//! (`DrainOptions::timeout`); the waits inside have their own, shorter limits.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::try_join_all;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Preconditions};
use tokio::sync::watch;
use tokio::time::{Instant, sleep, timeout, timeout_at};
use tracing::{debug, info, warn};

use super::plan::{self, PlannedPod};
use super::{DrainError, DrainOptions, DrainOutcome};
use crate::providers::contract::{Driver, GetVolumeIdsRequest};

/// Added to a pod's termination grace period when waiting for it to be gone (time for the kubelet to report).
const POD_GONE_SLACK: Duration = Duration::from_secs(30);
/// How often the node is read: to notice it is gone, and for `status.volumesAttached`.
const NODE_POLL: Duration = Duration::from_secs(1);
/// Polls for pods and VolumeAttachments start this fast and slow down to [`POLL_MAX`].
const POLL_MIN: Duration = Duration::from_millis(50);
/// The slowest poll.
const POLL_MAX: Duration = Duration::from_secs(1);
/// An eviction not answered within this counts as refused: a client that retries 429s itself (kube-rs does unless
/// `default_retry = false`) would otherwise hold one attempt for minutes.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// A poll interval that doubles from [`POLL_MIN`] up to [`POLL_MAX`].
struct Poll(Duration);

impl Poll {
    fn new() -> Self {
        Poll(POLL_MIN)
    }

    async fn wait(&mut self) {
        sleep(self.0).await;
        self.0 = (self.0 * 2).min(POLL_MAX);
    }
}

#[derive(Default)]
struct Progress {
    outcome: DrainOutcome,
    /// Pods not yet done with, once the plan is made (`None` before).
    pending: Option<BTreeSet<String>>,
}

/// How a pod left.
enum Removal {
    Evicted,
    Deleted,
    /// It was gone (or replaced) before we got to it.
    Gone,
}

fn code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

fn reason(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

struct Drainer<'a> {
    client: &'a kube::Client,
    driver: Option<&'a dyn Driver>,
    options: &'a DrainOptions,
    deadline: Instant,
    progress: Mutex<Progress>,
}

/// Runs one drain; see [`super::drain`].
pub(super) async fn drain(
    client: &kube::Client,
    driver: Option<&dyn Driver>,
    options: &DrainOptions,
) -> Result<DrainOutcome, DrainError> {
    let started = Instant::now();
    // A timeout too large to add is as good as none.
    let deadline =
        started.checked_add(options.timeout).unwrap_or_else(|| started + Duration::from_secs(100 * 365 * 86_400));
    let drainer = Drainer { client, driver, options, deadline, progress: Mutex::default() };
    info!(node = %options.node, timeout = ?options.timeout, force = options.force, "draining node");
    let result = match timeout_at(deadline, drainer.run()).await {
        Ok(result) => result,
        Err(_) => drainer.deadline_passed(),
    };
    match &result {
        Ok(outcome) => info!(
            node = %options.node,
            evicted = outcome.evicted.len(),
            deleted = outcome.deleted.len(),
            skipped = outcome.skipped.len(),
            warnings = outcome.warnings.len(),
            elapsed = ?started.elapsed(),
            "node drained"
        ),
        Err(error) => warn!(node = %options.node, %error, elapsed = ?started.elapsed(), "drain failed"),
    }
    result
}

impl Drainer<'_> {
    fn node(&self) -> &str {
        &self.options.node
    }

    fn progress(&self) -> MutexGuard<'_, Progress> {
        // Nothing panics while holding the lock; a poisoned one still holds consistent lists.
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn api_error(&self, source: kube::Error) -> DrainError {
        DrainError::Api { node: self.node().to_string(), source }
    }

    fn eviction_error(&self, pod: &PlannedPod, reason: String) -> DrainError {
        DrainError::Eviction { node: self.node().to_string(), pod: pod.key(), reason }
    }

    fn outcome(&self) -> DrainOutcome {
        self.progress().outcome.clone()
    }

    fn done(&self, pod: &PlannedPod) {
        if let Some(pending) = &mut self.progress().pending {
            pending.remove(&pod.key());
        }
    }

    fn warn(&self, warning: String) {
        warn!(node = %self.node(), "{warning}");
        self.progress().outcome.warnings.push(warning);
    }

    /// The deadline passed: a failure if any pod is left; otherwise only a best-effort wait (volumes reattaching
    /// elsewhere) was cut short, and the node is drained.
    fn deadline_passed(&self) -> Result<DrainOutcome, DrainError> {
        let mut progress = self.progress();
        match &progress.pending {
            Some(pending) if pending.is_empty() => {
                let warning = format!(
                    "the {:?} deadline passed after every pod had left, while waiting for volumes to attach elsewhere",
                    self.options.timeout
                );
                progress.outcome.warnings.push(warning);
                Ok(progress.outcome.clone())
            }
            pending => Err(DrainError::Timeout {
                node: self.node().to_string(),
                timeout: self.options.timeout,
                pending: pending.as_ref().map_or(0, BTreeSet::len),
            }),
        }
    }

    async fn run(&self) -> Result<DrainOutcome, DrainError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let Some(node) = nodes.get_opt(self.node()).await.map_err(|e| self.api_error(e))? else {
            info!(node = %self.node(), "node not found: nothing to drain");
            return Ok(DrainOutcome::default());
        };
        let (attached_tx, attached_rx) = watch::channel(plan::attached_volume_names(&node));
        tokio::select! {
            result = self.drain_pods(attached_rx) => result,
            () = self.watch_node(&nodes, attached_tx) => {
                info!(node = %self.node(), "node deleted during the drain: counts as drained");
                Ok(self.outcome())
            }
        }
    }

    /// Reads the node every [`NODE_POLL`], publishing its attached volumes; returns once it is gone.
    async fn watch_node(&self, nodes: &Api<Node>, attached: watch::Sender<Vec<String>>) {
        loop {
            sleep(NODE_POLL).await;
            match nodes.get_opt(self.node()).await {
                Ok(None) => return,
                Ok(Some(node)) => {
                    let names = plan::attached_volume_names(&node);
                    attached.send_if_modified(|current| {
                        let changed = *current != names;
                        *current = names;
                        changed
                    });
                }
                Err(error) => debug!(node = %self.node(), %error, "reading the node failed; will retry"),
            }
        }
    }

    async fn drain_pods(&self, attached: watch::Receiver<Vec<String>>) -> Result<DrainOutcome, DrainError> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let on_node = ListParams::default().fields(&format!("spec.nodeName={}", self.node()));
        let listed = pods.list(&on_node).await.map_err(|e| self.api_error(e))?.items;
        let mut plan = if self.options.force {
            // Nothing is waited for, so volumes do not matter.
            plan::plan(&listed, &[], &[])
        } else {
            let (claims, volumes) = self.read_volumes(&listed).await?;
            plan::plan(&listed, &claims, &volumes)
        };
        {
            let mut progress = self.progress();
            progress.outcome.skipped = plan.skipped.iter().map(|(key, _)| key.clone()).collect();
            progress.pending = Some(plan.pods().map(PlannedPod::key).collect());
        }
        for (pod, reason) in &plan.skipped {
            debug!(node = %self.node(), %pod, ?reason, "leaving pod on the node");
        }
        if self.options.force {
            self.delete_all(&plan).await?;
            return Ok(self.outcome());
        }
        self.resolve_volume_ids(&mut plan.serial).await;
        info!(
            node = %self.node(),
            finished = plan.finished.len(),
            parallel = plan.parallel.len(),
            serial = plan.serial.len(),
            skipped = plan.skipped.len(),
            "evicting pods"
        );
        let finished = try_join_all(plan.finished.iter().map(|pod| self.delete_finished(pod)));
        let parallel = try_join_all(plan.parallel.iter().map(|pod| self.evict_and_wait(pod)));
        let serial = self.evict_one_by_one(&plan.serial, attached);
        futures::try_join!(finished, parallel, serial)?;
        Ok(self.outcome())
    }

    /// The claims the pods mount and the volumes bound to them; nothing when there is no driver to map volumes to
    /// cloud IDs (then volumes are not waited for).
    async fn read_volumes(
        &self,
        pods: &[Pod],
    ) -> Result<(Vec<PersistentVolumeClaim>, Vec<PersistentVolume>), DrainError> {
        if self.driver.is_none() {
            return Ok((Vec::new(), Vec::new()));
        }
        let wanted: BTreeSet<(String, String)> = pods
            .iter()
            // Skipped pods too: a volume they share stays attached, and the plan must know.
            .flat_map(|p| {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                plan::claim_names(p).into_iter().map(move |c| (ns.clone(), c))
            })
            .collect();
        let mut claims = Vec::new();
        let mut bound = BTreeSet::new();
        for (ns, name) in wanted {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
            if let Some(claim) = api.get_opt(&name).await.map_err(|e| self.api_error(e))? {
                if let Some(pv) = claim.spec.as_ref().and_then(|s| s.volume_name.clone()).filter(|v| !v.is_empty()) {
                    bound.insert(pv);
                }
                claims.push(claim);
            }
        }
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let mut volumes = Vec::new();
        for name in bound {
            volumes.extend(api.get_opt(&name).await.map_err(|e| self.api_error(e))?);
        }
        Ok((claims, volumes))
    }

    /// Asks the driver for each volume's cloud ID (one volume per call, so the answer maps back to it). A driver error
    /// leaves that volume un-waited-for, with a warning, as MCM does.
    async fn resolve_volume_ids(&self, pods: &mut [PlannedPod]) {
        let Some(driver) = self.driver else { return };
        let mut failures = Vec::new();
        for pod in pods.iter_mut() {
            let key = pod.key();
            for volume in &mut pod.volumes {
                let request = GetVolumeIdsRequest { pv_specs: vec![volume.spec.clone()] };
                match driver.get_volume_ids(&request).await {
                    Ok(ids) => volume.volume_id = plan::volume_id(ids),
                    Err(error) => failures.push(format!(
                        "cannot map volume {} of pod {} to a cloud volume ({error}); not waiting for its detachment",
                        volume.persistent_volume, key
                    )),
                }
            }
        }
        for failure in failures {
            self.warn(failure);
        }
    }

    /// Forced drain: every pod deleted with grace period 0, at once; nothing waited for.
    async fn delete_all(&self, plan: &plan::DrainPlan) -> Result<(), DrainError> {
        let results = futures::future::join_all(plan.pods().map(|pod| async move {
            let result = self.delete(pod).await;
            if result.is_ok() {
                self.done(pod);
            }
            result
        }))
        .await;
        // Attempt every pod before reporting the first failure: a forced drain should leave as little as possible.
        results.into_iter().find_map(Result::err).map_or(Ok(()), Err)
    }

    /// Deletes a pod with grace period 0 (preconditioned on its UID); an absent or replaced pod counts as deleted.
    async fn delete(&self, pod: &PlannedPod) -> Result<Removal, DrainError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params =
            DeleteParams { grace_period_seconds: Some(0), preconditions: preconditions(pod), ..Default::default() };
        match api.delete(&pod.name, &params).await {
            Ok(_) => {
                info!(node = %self.node(), pod = %pod.key(), "deleted pod");
                self.progress().outcome.deleted.push(pod.key());
                Ok(Removal::Deleted)
            }
            Err(error) if matches!(code(&error), Some(404 | 409)) => Ok(Removal::Gone),
            Err(error) => Err(self.api_error(error)),
        }
    }

    async fn delete_finished(&self, pod: &PlannedPod) -> Result<(), DrainError> {
        if let Removal::Deleted = self.delete(pod).await? {
            self.wait_gone(pod).await?;
        }
        self.done(pod);
        Ok(())
    }

    async fn evict_and_wait(&self, pod: &PlannedPod) -> Result<(), DrainError> {
        if !matches!(self.evict(pod).await?, Removal::Gone) {
            self.wait_gone(pod).await?;
        }
        self.done(pod);
        Ok(())
    }

    /// Pods with volumes, one after the other: evict, wait until gone, wait until its volumes leave the node, then
    /// give them a while to attach elsewhere before the next pod goes.
    async fn evict_one_by_one(
        &self,
        pods: &[PlannedPod],
        mut attached: watch::Receiver<Vec<String>>,
    ) -> Result<(), DrainError> {
        for pod in pods {
            if !matches!(self.evict(pod).await?, Removal::Gone) {
                self.wait_gone(pod).await?;
            }
            self.wait_detached(pod, &mut attached).await?;
            self.done(pod);
            self.wait_reattached(pod).await;
        }
        Ok(())
    }

    /// Evicts a pod. A PodDisruptionBudget refusal (429) is retried every `evict_retry_interval`, `max_evict_retries`
    /// attempts in all (MCM's counting), then the pod is deleted with grace period 0; a misconfigured budget fails at
    /// once. Any other error fails the drain.
    async fn evict(&self, pod: &PlannedPod) -> Result<Removal, DrainError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params = EvictParams {
            delete_options: Some(DeleteParams { preconditions: preconditions(pod), ..Default::default() }),
            ..Default::default()
        };
        let attempts = self.options.max_evict_retries.max(1);
        for attempt in 1..=attempts {
            match timeout(ATTEMPT_TIMEOUT, api.evict(&pod.name, &params)).await {
                Ok(Ok(_)) => {
                    info!(node = %self.node(), pod = %pod.key(), "evicted pod");
                    self.progress().outcome.evicted.push(pod.key());
                    return Ok(Removal::Evicted);
                }
                // 409: the UID precondition failed, so the pod we meant is gone and another took its name.
                Ok(Err(error)) if matches!(code(&error), Some(404 | 409)) => return Ok(Removal::Gone),
                Ok(Err(error)) if code(&error) == Some(429) => {
                    if let Some(pdb) = self.misconfigured_budget(pod).await {
                        return Err(DrainError::MisconfiguredBudget {
                            node: self.node().to_string(),
                            pod: pod.key(),
                            pdb,
                        });
                    }
                    let reason = reason(&error);
                    debug!(node = %self.node(), pod = %pod.key(), attempt, attempts, %reason, "eviction refused");
                }
                Ok(Err(error)) => return Err(self.eviction_error(pod, reason(&error))),
                Err(_) => {
                    let pod = pod.key();
                    warn!(node = %self.node(), %pod, attempt, "eviction not answered in {ATTEMPT_TIMEOUT:?}: refused")
                }
            }
            if attempt < attempts {
                sleep(self.options.evict_retry_interval).await;
            }
        }
        warn!(node = %self.node(), pod = %pod.key(), attempts, "eviction refused every time; deleting the pod");
        self.delete(pod).await.map_err(|error| match error {
            DrainError::Api { source, .. } => {
                self.eviction_error(pod, format!("deleting it after {attempts} refused evictions: {}", reason(&source)))
            }
            other => other,
        })
    }

    /// The misconfigured budget covering the pod, judged on the budgets' current status.
    async fn misconfigured_budget(&self, pod: &PlannedPod) -> Option<String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let budgets: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), &pod.namespace);
        // The budgets select by the live pod's labels; failing to read either only delays the verdict to the next
        // refusal.
        let live = pods.get_opt(&pod.name).await.ok().flatten()?;
        let listed = budgets.list(&ListParams::default()).await.ok()?;
        plan::misconfigured_budget(&live, &listed.items)
    }

    /// Waits until the pod is gone (404, or a new pod with another UID under its name), for
    /// `min(grace period, time left) + 30 s`.
    async fn wait_gone(&self, pod: &PlannedPod) -> Result<(), DrainError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let left = self.deadline.saturating_duration_since(Instant::now());
        let limit = pod.grace_period.min(left) + POD_GONE_SLACK;
        let gone = timeout(limit, async {
            let mut poll = Poll::new();
            loop {
                match api.get_opt(&pod.name).await {
                    Ok(None) => return,
                    Ok(Some(live)) if live.metadata.uid != pod.uid => return,
                    Ok(Some(_)) => {}
                    Err(error) => {
                        debug!(node = %self.node(), pod = %pod.key(), %error, "reading the pod failed; will retry")
                    }
                }
                poll.wait().await;
            }
        })
        .await;
        gone.map_err(|_| {
            self.eviction_error(pod, format!("the pod was still there {limit:?} after it was asked to go"))
        })
    }

    /// Waits until none of the pod's cloud volumes is in `node.status.volumesAttached`, for its grace period plus
    /// `volume_detach_timeout`.
    async fn wait_detached(
        &self,
        pod: &PlannedPod,
        attached: &mut watch::Receiver<Vec<String>>,
    ) -> Result<(), DrainError> {
        let ids = pod.volume_ids();
        if ids.is_empty() {
            return Ok(());
        }
        let limit = pod.grace_period + self.options.volume_detach_timeout;
        debug!(node = %self.node(), pod = %pod.key(), volumes = ?ids, "waiting for volumes to detach");
        // The sender only goes away with the node, which ends the drain anyway.
        let detached =
            timeout(limit, attached.wait_for(|names| plan::still_attached(names, &ids).is_empty())).await.is_ok();
        if detached {
            info!(node = %self.node(), pod = %pod.key(), volumes = ?ids, "volumes detached");
            return Ok(());
        }
        let still = plan::still_attached(&attached.borrow(), &ids);
        Err(self.eviction_error(
            pod,
            format!("volumes {still:?} were still attached to the node {limit:?} after the pod was gone"),
        ))
    }

    /// Best effort: waits up to `volume_reattach_timeout` for the pod's volumes to attach to another node (its
    /// replacement starting); a timeout is only a warning. A pod nothing controls gets no replacement, so it is not
    /// waited for.
    async fn wait_reattached(&self, pod: &PlannedPod) {
        let volumes: Vec<&str> =
            pod.volumes.iter().filter(|v| v.volume_id.is_some()).map(|v| v.persistent_volume.as_str()).collect();
        if volumes.is_empty() || !pod.controlled {
            return;
        }
        let api: Api<VolumeAttachment> = Api::all(self.client.clone());
        let limit = self.options.volume_reattach_timeout;
        let waited = timeout(limit, async {
            let mut poll = Poll::new();
            loop {
                match api.list(&ListParams::default()).await {
                    Ok(list) if volumes.iter().all(|pv| plan::attached_elsewhere(&list.items, pv, self.node())) => {
                        return Ok(());
                    }
                    Ok(_) => {}
                    // Not served or not allowed: waiting longer will not help.
                    Err(error) if matches!(code(&error), Some(403 | 404)) => return Err(error),
                    Err(error) => debug!(node = %self.node(), %error, "listing volume attachments failed; will retry"),
                }
                poll.wait().await;
            }
        })
        .await;
        match waited {
            Ok(Ok(())) => info!(node = %self.node(), pod = %pod.key(), ?volumes, "volumes attached elsewhere"),
            Ok(Err(error)) => self.warn(format!(
                "cannot see whether volumes {volumes:?} of pod {} attached elsewhere: {}",
                pod.key(),
                reason(&error)
            )),
            Err(_) => self.warn(format!(
                "volumes {volumes:?} of pod {} did not attach to another node within {limit:?}",
                pod.key()
            )),
        }
    }
}

fn preconditions(pod: &PlannedPod) -> Option<Preconditions> {
    pod.uid.as_ref().map(|uid| Preconditions { uid: Some(uid.clone()), resource_version: None })
}
