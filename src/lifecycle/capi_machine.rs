//! What CAPI core's Machine controller does, with MCM's semantics, as pure decisions: the phase, the status copied
//! from the infrastructure machine, the Node link by exact providerID, MCM's creation and health timeouts, and the
//! order of the deletion steps (pre-drain hooks, drain, pre-terminate hooks, the MCMMachine, the finalizer).
//!
//! Phases (`docs/infrastructure-provider.md`): Pending (no bootstrap data yet), Provisioning (waiting for the MCMMachine's
//! `status.initialization.provisioned`), Provisioned (providerID known, no Node), Running (Node linked), Deleting,
//! and Failed for MCM's timeouts (a machine without a Ready Node after `creationTimeout`, or whose Node stays not
//! Ready for `healthTimeout`); the MachineSet replaces a Failed machine as MCM does. Updating while the MCMMachine's
//! `status.currentStatus.phase` is one of MCM's in-place phases (`convert::machine_view::capi_phase_in_place`).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::capi::{self, MachineAddress, MachineInitializationStatus, MachineNodeReference};
use crate::api::infra::MCMMachine;
use crate::api::mcm::MachinePhase;
use crate::lifecycle::capi_bootstrap::BootstrapPlan;

/// The finalizer our Machine controller holds on CAPI Machines.
pub const MACHINE_FINALIZER: &str = "capi.machine.sapcloud.io/machine";
/// Annotations with this prefix hold the deletion before the drain.
pub const PRE_DRAIN_HOOK_PREFIX: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io";
/// Annotations with this prefix hold the deletion before the infrastructure machine is deleted.
pub const PRE_TERMINATE_HOOK_PREFIX: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io";
/// Annotation skipping the drain (CAPI's).
pub const EXCLUDE_DRAIN_ANNOTATION: &str = "machine.cluster.x-k8s.io/exclude-node-draining";

/// Phases.
pub use crate::convert::machine_view::phase;

/// What the decision reads.
#[derive(Clone, Copy, Debug)]
pub struct MachineObservation<'a> {
    /// The Machine.
    pub machine: &'a capi::Machine,
    /// Its MCMMachine (`spec.infrastructureRef`), if it exists.
    pub infra: Option<&'a MCMMachine>,
    /// The Node whose `spec.providerID` equals the machine's, if any.
    pub node: Option<&'a Node>,
    /// The current time.
    pub now: Timestamp,
    /// MCM's creation timeout for this machine.
    pub creation_timeout: Duration,
    /// MCM's health timeout for this machine (`None`: disabled).
    pub health_timeout: Option<Duration>,
    /// Whether its MachineSet's template is its MachineDeployment's ([`machine_set_up_to_date`]); `None` leaves
    /// the `UpToDate` condition alone (a machine no MachineSet controls, or owners not seen yet).
    pub up_to_date: Option<bool>,
    /// What its bootstrap config says (`lifecycle::capi_bootstrap`); `None` judges by `dataSecretName` alone.
    pub bootstrap: Option<&'a BootstrapPlan>,
    /// Why its Cluster's workload cluster cannot be read now (`None`: it can, or there is none). Its Node is then
    /// unknown, not missing: the Node conditions keep their last state (`Unknown`, `ConnectionDown` before any),
    /// and MCM's creation and health timeouts wait, as core's remote conditions do.
    pub connection_down: Option<&'a str>,
}

/// CAPI's `UpToDate` for the machines of a MachineSet: the owner is authoritative, and a MachineSet's machines are
/// up to date when its template is the MachineDeployment's, compared as the rollout compares them (the hub's
/// `equal_ignore_hash`, so what propagates in place does not make a machine outdated).
///
/// A set made before the deployment's `spec.rollout.after`, once that has passed at `now`, is outdated, as core
/// judges it.
pub fn machine_set_up_to_date(deployment: &capi::MachineDeployment, set: &capi::MachineSet, now: Timestamp) -> bool {
    let mut defaulted = deployment.clone();
    crate::convert::apply_capi_deployment_defaults(&mut defaulted);
    let hub_deployment = crate::convert::deployment_from_capi(&defaulted);
    let hub_set = crate::convert::machine_set_from_capi(set);
    let after = crate::convert::capi_rollout_after(&hub_deployment).filter(|a| *a <= now);
    if crate::lifecycle::machine_deployment::template::made_before(&hub_set, after) {
        return false;
    }
    hub_set.spec.template.as_ref().is_some_and(|t| {
        crate::lifecycle::machine_deployment::template::equal_ignore_hash(t, &hub_deployment.spec.template)
    })
}

/// What to write.
#[derive(Clone, Debug, PartialEq)]
pub struct MachinePlan {
    /// `spec.providerID` to set (copied from the MCMMachine), when it differs.
    pub provider_id: Option<String>,
    /// The status the Machine should have.
    pub status: capi::MachineStatus,
    /// Look again after this long (a timeout to watch).
    pub requeue_after: Option<Duration>,
}

fn ready_of(node: &Node) -> Option<&k8s_openapi::api::core::v1::NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")
}

fn infra_provisioned(infra: Option<&MCMMachine>) -> bool {
    infra
        .and_then(|i| i.status.as_ref())
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.provisioned)
        .unwrap_or(false)
}

fn infra_provider_id(infra: Option<&MCMMachine>) -> Option<&str> {
    infra.and_then(|i| i.spec.provider_id.as_deref()).filter(|p| !p.is_empty())
}

/// A condition with its transition time kept when the status did not change.
pub fn condition(
    old: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Condition {
    let status = if status { "True" } else { "False" };
    condition_with_status(old, type_, status, reason, message, now)
}

/// [`condition`] with any status (`True`, `False`, `Unknown`).
pub fn condition_with_status(
    old: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Condition {
    let previous = old.iter().find(|c| c.type_ == type_);
    let time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Time(now),
    };
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: time,
        observed_generation: None,
    }
}

/// Replaces (or adds) conditions of the same types in `list`.
pub fn merge_conditions(list: &mut Vec<Condition>, new: Vec<Condition>) {
    for c in new {
        match list.iter_mut().find(|o| o.type_ == c.type_) {
            Some(slot) => *slot = c,
            None => list.push(c),
        }
    }
}

/// Our change of a conditions list (`old` -> `new`, as read from our cache) carried onto `fresh`, the list as the
/// server holds it now: conditions we set or changed replace those of the same type, conditions we dropped go, and
/// every other condition in `fresh` (written meanwhile by someone else: a health check, a user's tool) stays. What
/// CAPI's patch helper does with conditions when a status write conflicts.
pub fn rebase_conditions(old: &[Condition], new: &[Condition], fresh: &[Condition]) -> Vec<Condition> {
    let removed = |c: &Condition| old.iter().any(|o| o.type_ == c.type_) && !new.iter().any(|n| n.type_ == c.type_);
    let mut out: Vec<Condition> = fresh.iter().filter(|c| !removed(c)).cloned().collect();
    let changed = new.iter().filter(|n| old.iter().find(|o| o.type_ == n.type_) != Some(*n)).cloned().collect();
    merge_conditions(&mut out, changed);
    out
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    now.duration_since(since).try_into().unwrap_or(Duration::ZERO)
}

/// CAPI's `Updating` condition (status, reason, message) for MCM's in-place phase and the machine's
/// `lastOperation.description`: True while the update runs; False with CAPI's `InPlaceUpdateFailed` and MCM's
/// message after it failed (CAPI's `Failed` phase would be terminal, see `machine_view::capi_phase_in_place`);
/// else `NotUpdating`, also once the update succeeded and the machine only waits to rejoin.
pub fn updating_condition<'a>(
    in_place: Option<&MachinePhase>,
    description: Option<&'a str>,
) -> (bool, &'static str, &'a str) {
    let message = description.unwrap_or_default();
    match in_place {
        Some(MachinePhase::InPlaceUpdating) => (true, "InPlaceUpdating", message),
        Some(MachinePhase::InPlaceUpdateFailed) => (false, "InPlaceUpdateFailed", message),
        _ => (false, "NotUpdating", ""),
    }
}

/// Decides the status of a Machine that is not being deleted.
pub fn plan_machine(obs: &MachineObservation<'_>) -> MachinePlan {
    let m = obs.machine;
    let old = m.status.clone().unwrap_or_default();
    let old_conditions = old.conditions.clone().unwrap_or_default();
    let now = obs.now;
    let given = m.spec.bootstrap.data_secret_name.as_ref().is_some_and(|s| !s.is_empty());
    let bootstrap = obs.bootstrap.map_or(given, |b| b.data_secret_created);
    let provisioned = infra_provisioned(obs.infra);
    let provider_id = infra_provider_id(obs.infra).map(str::to_string).or_else(|| m.spec.provider_id.clone());
    let node_ready = obs.node.and_then(ready_of);
    let last = |kind: &str| old_conditions.iter().find(|c| c.type_ == kind);
    let healthy = match obs.connection_down {
        None => node_ready.is_some_and(|c| c.status == "True"),
        Some(_) => last("NodeHealthy").is_some_and(|c| c.status == "True"),
    };
    // A Node known before the connection went down still counts.
    let has_node = obs.node.is_some() || (obs.connection_down.is_some() && old.node_ref.is_some());
    // MCM's in-place phase, recorded on the MCMMachine as its other MCM-only phases are.
    let in_place = obs
        .infra
        .and_then(|i| i.status.as_ref())
        .and_then(|s| s.current_status.as_ref())
        .and_then(|c| c.phase.as_ref())
        .filter(|p| crate::convert::machine_view::is_in_place(p));
    // A machine that was Running (or updating in place since) waits for the health timeout, not the creation one.
    let was_running = matches!(old.phase.as_deref(), Some(phase::RUNNING | phase::UPDATING));
    let created = m.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);

    let mut requeue_after = None;
    let was_failed = old.phase.as_deref() == Some(phase::FAILED);
    // MCM's timeouts: no Ready Node within the creation timeout; a Node not Ready for the health timeout.
    // A failed in-place update past its health timeout: MCM's Failed, recorded on the MCMMachine.
    let in_place_failed = obs.infra.and_then(|i| i.status.as_ref()).filter(|s| {
        s.current_status.as_ref().and_then(|c| c.phase.as_ref()) == Some(&MachinePhase::Failed)
            && s.last_operation.as_ref().and_then(|o| o.type_.as_ref())
                == Some(&crate::api::mcm::MachineOperationType::InPlaceUpdate)
    });
    let failure = if was_failed {
        Some(("Failed", "the machine failed earlier; the MachineSet replaces it".to_string()))
    } else if let Some(s) = in_place_failed {
        let description = s.last_operation.as_ref().and_then(|o| o.description.clone()).unwrap_or_default();
        Some(("InPlaceUpdateFailed", description))
    } else if obs.connection_down.is_some() {
        None
    } else if obs.node.is_none() || (!healthy && !was_running) {
        let age = elapsed(created, now);
        if age >= obs.creation_timeout {
            Some((
                "CreationTimeout",
                format!("no Ready Node within the creation timeout of {}s", obs.creation_timeout.as_secs()),
            ))
        } else {
            requeue_after = Some(obs.creation_timeout - age);
            None
        }
    } else if !healthy && let (Some(timeout), Some(ready)) = (obs.health_timeout, node_ready) {
        let since = ready.last_transition_time.as_ref().map_or(now, |t| t.0);
        let unhealthy_for = elapsed(since, now);
        if unhealthy_for >= timeout {
            Some(("HealthTimeout", format!("the Node was not Ready for the health timeout of {}s", timeout.as_secs())))
        } else {
            requeue_after = Some(timeout - unhealthy_for);
            None
        }
    } else {
        None
    };

    // CAPI's rule: Running needs the Node and `infrastructureProvisioned` (sticky); a Node can register before the
    // MCMMachine's status write lands.
    let was_provisioned = old.initialization.as_ref().and_then(|i| i.infrastructure_provisioned) == Some(true);
    let phase = if failure.is_some() {
        phase::FAILED
    } else if has_node && (provisioned || was_provisioned) {
        in_place.and_then(crate::convert::machine_view::capi_phase_in_place).unwrap_or(phase::RUNNING)
    } else if provisioned && provider_id.is_some() {
        phase::PROVISIONED
    } else if bootstrap {
        phase::PROVISIONING
    } else {
        phase::PENDING
    };

    let infra_ready = obs
        .infra
        .and_then(|i| i.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let infra_message = infra_ready.map(|c| c.message.clone()).unwrap_or_default();
    let mut conditions = vec![
        match obs.bootstrap {
            Some(b) => condition_with_status(
                &old_conditions,
                "BootstrapConfigReady",
                &b.condition.status,
                &b.condition.reason,
                &b.condition.message,
                now,
            ),
            None => condition(
                &old_conditions,
                "BootstrapConfigReady",
                bootstrap,
                if bootstrap { "DataSecretProvided" } else { "DataSecretNotAvailable" },
                "",
                now,
            ),
        },
        // Core mirrors the infrastructure machine's own `Ready`; without one it falls back on `provisioned`.
        match (obs.infra, infra_ready) {
            (Some(_), Some(r)) => condition_with_status(
                &old_conditions,
                "InfrastructureReady",
                &r.status,
                if r.reason.is_empty() && r.status == "True" { "Ready" } else { &r.reason },
                &r.message,
                now,
            ),
            (Some(_), None) => condition(
                &old_conditions,
                "InfrastructureReady",
                provisioned,
                if provisioned { "Ready" } else { "NotReady" },
                &if provisioned {
                    String::new()
                } else {
                    "MCMMachine status.initialization.provisioned is false".to_string()
                },
                now,
            ),
            (None, _) => condition(
                &old_conditions,
                "InfrastructureReady",
                false,
                "ObjectDoesNotExist",
                &format!(
                    "{} does not exist",
                    Some(m.spec.infrastructure_ref.kind.as_str()).filter(|k| !k.is_empty()).unwrap_or("MCMMachine")
                ),
                now,
            ),
        },
    ];
    match obs.connection_down {
        None => conditions.extend([
            condition(
                &old_conditions,
                "NodeReady",
                healthy,
                match (obs.node.is_some(), healthy) {
                    (false, _) => "NodeDoesNotExist",
                    (true, false) => "NodeNotReady",
                    (true, true) => "NodeReady",
                },
                "",
                now,
            ),
            condition(
                &old_conditions,
                "NodeHealthy",
                healthy && failure.is_none(),
                if healthy { "NodeHealthy" } else { "NodeNotHealthy" },
                "",
                now,
            ),
        ]),
        // As core: the last known state stays; without one, `ConnectionDown`.
        Some(why) if last("NodeReady").is_none() || last("NodeHealthy").is_none() => {
            for kind in ["NodeReady", "NodeHealthy"] {
                conditions.push(condition_with_status(&old_conditions, kind, "Unknown", "ConnectionDown", why, now));
            }
        }
        Some(_) => {}
    }
    let ready = healthy && failure.is_none() && phase == phase::RUNNING;
    let (reason, message) = match &failure {
        Some((reason, message)) => (reason.to_string(), message.clone()),
        // Core's summary keeps the infrastructure's word on a Ready machine (`clusterctl describe` shows it).
        None if ready && !infra_message.is_empty() => {
            ("Ready".to_string(), format!("* InfrastructureReady: {infra_message}"))
        }
        None if ready => ("Ready".to_string(), String::new()),
        None => ("NotReady".to_string(), format!("phase {phase}")),
    };
    conditions.push(condition(&old_conditions, "Ready", ready, &reason, &message, now));
    // Core's: Available once Ready has been True for `spec.minReadySeconds`.
    let ready_since = old_conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .map_or(now, |c| c.last_transition_time.0);
    let min_ready = Duration::from_secs(u64::try_from(m.spec.min_ready_seconds.unwrap_or(0)).unwrap_or(0));
    let ready_for = elapsed(ready_since, now);
    let (available, available_reason) = match (ready, ready_for >= min_ready) {
        (false, _) => (false, "NotReady"),
        (true, true) => (true, "Available"),
        (true, false) => {
            let left = min_ready - ready_for;
            requeue_after = Some(requeue_after.map_or(left, |r: Duration| r.min(left)));
            (false, "WaitingForMinReadySeconds")
        }
    };
    conditions.push(condition(&old_conditions, "Available", available, available_reason, "", now));
    conditions.push(condition(&old_conditions, "Deleting", false, "NotDeleting", "", now));
    let description = obs.infra.and_then(|i| i.status.as_ref()?.last_operation.as_ref()?.description.as_deref());
    let (updating, updating_reason, updating_message) = updating_condition(in_place, description);
    conditions.push(condition(&old_conditions, "Updating", updating, updating_reason, updating_message, now));
    // Core's: a paused Machine is not reconciled at all.
    conditions.push(condition(&old_conditions, "Paused", false, "NotPaused", "", now));
    if let Some(template_up_to_date) = obs.up_to_date {
        // As core: the template first, then a Node running another Kubernetes version than the Machine asks for
        // (core compares even without `spec.version`; we only when the Machine names one).
        let kubelet = obs.node.and_then(|n| n.status.as_ref()?.node_info.as_ref()).map(|i| i.kubelet_version.as_str());
        let wanted = m.spec.version.as_deref().filter(|v| !v.is_empty());
        let (up_to_date, reason, message) = match (template_up_to_date, kubelet, wanted) {
            (false, _, _) => {
                (false, "NotUpToDate", "* its MachineSet's template is not the MachineDeployment's".into())
            }
            (true, Some(kubelet), Some(wanted)) if !kubelet.is_empty() && kubelet != wanted => {
                (false, "Updating", format!("* Node.status.nodeInfo.kubeletVersion {kubelet}, {wanted} required"))
            }
            (true, _, _) => (true, "UpToDate", String::new()),
        };
        conditions.push(condition(&old_conditions, "UpToDate", up_to_date, reason, &message, now));
    }
    let mut all = old_conditions;
    merge_conditions(&mut all, conditions);

    let infra_status = obs.infra.and_then(|i| i.status.as_ref());
    let addresses: Option<Vec<MachineAddress>> =
        infra_status.and_then(|s| s.addresses.clone()).or(old.addresses.clone());
    let failure_domain = infra_status.and_then(|s| s.failure_domain.clone()).or(old.failure_domain.clone());
    let last_updated = if old.phase.as_deref() == Some(phase) { old.last_updated.clone() } else { Some(Time(now)) };
    let status = capi::MachineStatus {
        conditions: Some(all),
        node_ref: obs
            .node
            .and_then(|n| n.metadata.name.clone())
            .map(|name| MachineNodeReference { name })
            .or(old.node_ref.clone()),
        last_updated,
        failure_domain,
        addresses,
        phase: Some(phase.to_string()),
        observed_generation: m.metadata.generation,
        // Left out while empty: the schema wants at least one property in it (a 422 otherwise).
        initialization: Some(MachineInitializationStatus {
            infrastructure_provisioned: provisioned
                .then_some(true)
                .or(old.initialization.as_ref().and_then(|i| i.infrastructure_provisioned)),
            bootstrap_data_secret_created: bootstrap.then_some(true),
        })
        .filter(|i| i.infrastructure_provisioned.is_some() || i.bootstrap_data_secret_created.is_some()),
        extra: old.extra.clone(),
    };
    let provider_id = provider_id.filter(|p| m.spec.provider_id.as_deref() != Some(p.as_str()));
    MachinePlan { provider_id, status, requeue_after }
}

/// The next step of a Machine's deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeletionStep {
    /// A `pre-drain.delete.hook…` annotation holds the deletion.
    WaitForPreDrainHooks(Vec<String>),
    /// Cordon and drain the Node, with what is left of the drain timeout (`None`: no limit).
    Drain {
        /// The Node.
        node: String,
        /// What is left of `spec.deletion.nodeDrainTimeoutSeconds`, counted from the drain's start.
        timeout: Option<Duration>,
    },
    /// A `pre-terminate.delete.hook…` annotation holds the deletion.
    WaitForPreTerminateHooks(Vec<String>),
    /// Delete the MCMMachine.
    DeleteInfrastructure,
    /// The MCMMachine is being deleted: wait until it is gone.
    WaitForInfrastructure,
    /// Delete the bootstrap config (`spec.bootstrap.configRef`), after the infrastructure, as core does.
    DeleteBootstrap,
    /// The bootstrap config is being deleted: wait until it is gone (core's `WaitingForBootstrapDeletion`).
    WaitForBootstrap,
    /// Delete the Node (CAPI deletes the Node of a deleted Machine).
    DeleteNode(String),
    /// The Node must be drained but its workload cluster cannot be read: wait (why).
    WaitForWorkloadCluster(String),
    /// Everything is gone: remove the finalizer.
    RemoveFinalizer,
}

/// What the deletion decision reads.
#[derive(Clone, Debug)]
pub struct DeletionObservation<'a> {
    /// The Machine (being deleted).
    pub machine: &'a capi::Machine,
    /// Whether its MCMMachine exists, and whether it is being deleted.
    pub infra: Option<&'a MCMMachine>,
    /// Its Node, if any.
    pub node: Option<&'a Node>,
    /// The drain finished (or was skipped, or timed out) in an earlier pass: recorded in `status.deletion`.
    pub drained: bool,
    /// When the drain started (`status.deletion.nodeDrainStartTime`).
    pub drain_started: Option<Timestamp>,
    /// The current time.
    pub now: Timestamp,
    /// Its bootstrap config: `None` when it names none or it is gone, else whether it is being deleted.
    pub bootstrap_deleting: Option<bool>,
    /// Why its workload cluster cannot be read now (`None`: it can, or there is none): a Machine with a Node waits
    /// for it to drain, as core retries; the Node's deletion is skipped.
    pub connection_down: Option<&'a str>,
    /// Its Cluster is being deleted: as core, no drain and no Node deletion (the whole cluster goes).
    pub cluster_deleting: bool,
}

/// The merge patch by which a Machine takes its infrastructure machine, as core's Machine controller does with
/// whatever `spec.infrastructureRef` names: a controller reference to the Machine (`owner`) and the
/// `cluster.x-k8s.io/cluster-name` label. The MCMMachine controller waits for that owner, so a Machine made by
/// hand (a control-plane Machine, say) next to its MCMMachine gets a VM only once taken. `None` when nothing is
/// missing, or when another controller holds the object: that is not ours to take (core refuses it as well).
pub fn infra_adoption(
    infra: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    cluster_name: &str,
) -> Option<serde_json::Value> {
    let controller = crate::lifecycle::claim::controller_of(infra);
    if controller.is_some_and(|c| c.uid != owner.uid) {
        return None;
    }
    let label = super::capi_cluster::cluster_label_patch(infra, cluster_name);
    if controller.is_some() && label.is_none() {
        return None;
    }
    let mut patch = crate::lifecycle::claim::adopt_patch(infra, owner);
    if let Some(label) = label {
        patch["metadata"]["labels"] = label["metadata"]["labels"].clone();
    }
    Some(patch)
}

fn hooks(m: &capi::Machine, prefix: &str) -> Vec<String> {
    m.metadata.annotations.iter().flatten().filter(|(k, _)| k.starts_with(prefix)).map(|(k, _)| k.clone()).collect()
}

/// The next deletion step: hooks, drain (skipped without a Node or with `exclude-node-draining`; after the drain
/// timeout, CAPI goes on without it), hooks, the MCMMachine, the bootstrap config, the Node, the finalizer.
pub fn deletion_step(obs: &DeletionObservation<'_>) -> DeletionStep {
    let m = obs.machine;
    let pre_drain = hooks(m, PRE_DRAIN_HOOK_PREFIX);
    let infra_gone = obs.infra.is_none();
    if !pre_drain.is_empty() && !infra_gone {
        return DeletionStep::WaitForPreDrainHooks(pre_drain);
    }
    let excluded = m.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(EXCLUDE_DRAIN_ANNOTATION));
    let known_node = m.status.as_ref().and_then(|s| s.node_ref.as_ref()).is_some();
    if !obs.drained && !excluded && !infra_gone && !obs.cluster_deleting {
        let limit = m
            .spec
            .deletion
            .as_ref()
            .and_then(|d| d.node_drain_timeout_seconds)
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(u64::from(s.unsigned_abs())));
        let timeout =
            limit.map(|l| l.saturating_sub(obs.drain_started.map_or(Duration::ZERO, |s| elapsed(s, obs.now))));
        if timeout != Some(Duration::ZERO) {
            if let Some(node) = obs.node.and_then(|n| n.metadata.name.clone()) {
                return DeletionStep::Drain { node, timeout };
            }
            if let Some(why) = obs.connection_down.filter(|_| known_node) {
                return DeletionStep::WaitForWorkloadCluster(why.to_string());
            }
        }
    }
    let pre_terminate = hooks(m, PRE_TERMINATE_HOOK_PREFIX);
    if !pre_terminate.is_empty() && !infra_gone {
        return DeletionStep::WaitForPreTerminateHooks(pre_terminate);
    }
    match obs.infra {
        Some(i) if i.metadata.deletion_timestamp.is_none() => return DeletionStep::DeleteInfrastructure,
        Some(_) => return DeletionStep::WaitForInfrastructure,
        None => {}
    }
    match obs.bootstrap_deleting {
        Some(false) => return DeletionStep::DeleteBootstrap,
        Some(true) => return DeletionStep::WaitForBootstrap,
        None => {}
    }
    if let Some(node) = obs.node.and_then(|n| n.metadata.name.clone()).filter(|_| !obs.cluster_deleting) {
        return DeletionStep::DeleteNode(node);
    }
    DeletionStep::RemoveFinalizer
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // the case tables read best as rows of tuples
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::api::capi::{Bootstrap, MachineDeletionSpec};
    use crate::api::infra::{InitializationStatus, MCMMachineSpec, MCMMachineStatus};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn machine(bootstrap: bool, annotations: &[&str]) -> capi::Machine {
        let mut m = capi::Machine::new(
            "m",
            capi::MachineSpec {
                bootstrap: Bootstrap { config_ref: None, data_secret_name: bootstrap.then(|| "boot".to_string()) },
                deletion: Some(MachineDeletionSpec { node_drain_timeout_seconds: Some(60), ..Default::default() }),
                ..Default::default()
            },
        );
        m.metadata.creation_timestamp = Some(Time(t(0)));
        m.metadata.annotations =
            Some(annotations.iter().map(|a| (a.to_string(), String::new())).collect::<BTreeMap<_, _>>());
        m
    }

    fn infra(provisioned: bool, deleting: bool) -> MCMMachine {
        let mut i = MCMMachine::new(
            "m",
            MCMMachineSpec { provider_id: provisioned.then(|| "inmemory:///vm-1".to_string()), ..Default::default() },
        );
        i.status = Some(MCMMachineStatus {
            initialization: Some(InitializationStatus { provisioned: Some(provisioned) }),
            ..Default::default()
        });
        if deleting {
            i.metadata.deletion_timestamp = Some(Time(t(0)));
        }
        i
    }

    fn node(ready: bool, since: i64) -> Node {
        Node {
            metadata: ObjectMeta { name: Some("n1".into()), ..Default::default() },
            spec: Some(NodeSpec { provider_id: Some("inmemory:///vm-1".into()), ..Default::default() }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    last_transition_time: Some(Time(t(since))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn phases_table() {
        let (ip, inp) = (infra(true, false), infra(false, false));
        let (ready, not_ready) = (node(true, 10), node(false, 10));
        let ten_min = Duration::from_secs(600);
        // (case, bootstrap, infra, node, now, previous phase, expected phase, provider id to copy)
        type Row<'a> =
            (&'a str, bool, Option<&'a MCMMachine>, Option<&'a Node>, i64, Option<&'a str>, &'a str, Option<&'a str>);
        let cases: Vec<Row<'_>> = vec![
            ("no bootstrap data", false, None, None, 5, None, phase::PENDING, None),
            ("bootstrap data, no MCMMachine", true, None, None, 5, None, phase::PROVISIONING, None),
            ("not provisioned", true, Some(&inp), None, 5, None, phase::PROVISIONING, None),
            ("provisioned, no node", true, Some(&ip), None, 5, None, phase::PROVISIONED, Some("inmemory:///vm-1")),
            ("node", true, Some(&ip), Some(&ready), 5, None, phase::RUNNING, Some("inmemory:///vm-1")),
            (
                "node before the MCMMachine is provisioned",
                true,
                Some(&inp),
                Some(&ready),
                5,
                None,
                phase::PROVISIONING,
                None,
            ),
            ("creation timeout", true, Some(&ip), None, 601, None, phase::FAILED, Some("inmemory:///vm-1")),
            (
                "never-ready node, creation timeout",
                true,
                Some(&ip),
                Some(&not_ready),
                601,
                None,
                phase::FAILED,
                Some("inmemory:///vm-1"),
            ),
            (
                "running node not ready a while",
                true,
                Some(&ip),
                Some(&not_ready),
                100,
                Some(phase::RUNNING),
                phase::RUNNING,
                Some("inmemory:///vm-1"),
            ),
            (
                "health timeout",
                true,
                Some(&ip),
                Some(&not_ready),
                611,
                Some(phase::RUNNING),
                phase::FAILED,
                Some("inmemory:///vm-1"),
            ),
            (
                "failed stays failed",
                true,
                Some(&ip),
                Some(&ready),
                5,
                Some(phase::FAILED),
                phase::FAILED,
                Some("inmemory:///vm-1"),
            ),
        ];
        for (name, bootstrap, infra, node, now, previous, expected, provider_id) in cases {
            let mut m = machine(bootstrap, &[]);
            m.status = previous.map(|p| capi::MachineStatus { phase: Some(p.into()), ..Default::default() });
            let plan = plan_machine(&MachineObservation {
                machine: &m,
                infra,
                node,
                now: t(now),
                creation_timeout: ten_min,
                health_timeout: Some(ten_min),
                up_to_date: None,
                bootstrap: None,
                connection_down: None,
            });
            assert_eq!(plan.status.phase.as_deref(), Some(expected), "{name}");
            assert_eq!(plan.provider_id.as_deref(), provider_id, "{name}");
            let ready = plan.status.conditions.iter().flatten().find(|c| c.type_ == "Ready").map(|c| c.status.as_str());
            let healthy = node.is_some_and(|n| n.status == ready_node().status);
            let want = if expected == phase::RUNNING && healthy { "True" } else { "False" };
            assert_eq!(ready, Some(want), "{name}");
        }
    }

    /// MCM's in-place phases on the MCMMachine: CAPI phase `Updating` and the `Updating` condition.
    #[test]
    fn in_place_phases_table() {
        use crate::api::mcm::{CurrentStatus, LastOperation};
        let ten_min = Duration::from_secs(600);
        let ready = ready_node();
        let not_ready = node(false, 10);
        // (case, MCM phase, node, now, expected phase, Updating (status, reason, message))
        type Row<'a> = (&'a str, Option<MachinePhase>, &'a Node, i64, &'a str, (&'a str, &'a str, &'a str));
        let rows: Vec<Row<'_>> = vec![
            ("running", None, &ready, 5, phase::RUNNING, ("False", "NotUpdating", "")),
            (
                "updating",
                Some(MachinePhase::InPlaceUpdating),
                &ready,
                5,
                phase::UPDATING,
                ("True", "InPlaceUpdating", "op"),
            ),
            (
                "updated, not rejoined yet",
                Some(MachinePhase::InPlaceUpdateSuccessful),
                &ready,
                5,
                phase::UPDATING,
                ("False", "NotUpdating", ""),
            ),
            (
                "failed",
                Some(MachinePhase::InPlaceUpdateFailed),
                &ready,
                5,
                phase::UPDATING,
                ("False", "InPlaceUpdateFailed", "op"),
            ),
            (
                "a not-Ready node while updating waits for the health timeout, not the creation one",
                Some(MachinePhase::InPlaceUpdating),
                &not_ready,
                605,
                phase::UPDATING,
                ("True", "InPlaceUpdating", "op"),
            ),
            (
                "health timeout while updating",
                Some(MachinePhase::InPlaceUpdateFailed),
                &not_ready,
                611,
                phase::FAILED,
                ("False", "InPlaceUpdateFailed", "op"),
            ),
        ];
        for (name, mcm_phase, node, now, expected, updating) in rows {
            let mut m = machine(true, &[]);
            m.status = Some(capi::MachineStatus { phase: Some(phase::UPDATING.into()), ..Default::default() });
            let mut i = infra(true, false);
            if let Some(s) = i.status.as_mut() {
                s.current_status = Some(CurrentStatus { phase: mcm_phase, ..Default::default() });
                s.last_operation = Some(LastOperation { description: Some("op".into()), ..Default::default() });
            }
            let plan = plan_machine(&MachineObservation {
                machine: &m,
                infra: Some(&i),
                node: Some(node),
                now: t(now),
                creation_timeout: ten_min,
                health_timeout: Some(ten_min),
                up_to_date: None,
                bootstrap: None,
                connection_down: None,
            });
            assert_eq!(plan.status.phase.as_deref(), Some(expected), "{name}");
            let (status, reason, message) = condition_of(&plan, "Updating");
            assert_eq!((status.as_str(), reason.as_str(), message.as_str()), updating, "{name}");
        }
    }

    #[test]
    fn an_unreachable_workload_cluster_neither_fails_nor_forgets_a_machine() {
        let ip = infra(true, false);
        let ten_min = Duration::from_secs(600);
        let plan_at = |m: &capi::Machine, now: i64| {
            plan_machine(&MachineObservation {
                machine: m,
                infra: Some(&ip),
                node: None,
                now: t(now),
                creation_timeout: ten_min,
                health_timeout: Some(ten_min),
                up_to_date: None,
                bootstrap: None,
                connection_down: Some("Secret ns/c-kubeconfig not found"),
            })
        };
        // Never connected, long past the creation timeout: waiting, not failed; core's ConnectionDown.
        let fresh = machine(true, &[]);
        let plan = plan_at(&fresh, 5_000);
        assert_eq!(plan.status.phase.as_deref(), Some(phase::PROVISIONED));
        for kind in ["NodeReady", "NodeHealthy"] {
            let (status, reason, message) = condition_of(&plan, kind);
            assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "ConnectionDown"), "{kind}");
            assert!(message.contains("not found"), "{message}");
        }
        // A Running machine keeps its phase and its last known Node conditions.
        let mut running = machine(true, &[]);
        let known = plan_machine(&MachineObservation {
            machine: &running,
            infra: Some(&ip),
            node: Some(&ready_node()),
            now: t(20),
            creation_timeout: ten_min,
            health_timeout: Some(ten_min),
            up_to_date: None,
            bootstrap: None,
            connection_down: None,
        });
        running.status = Some(known.status);
        let plan = plan_at(&running, 5_000);
        assert_eq!(plan.status.phase.as_deref(), Some(phase::RUNNING));
        assert_eq!(condition_of(&plan, "NodeHealthy").0, "True");
        assert_eq!(condition_of(&plan, "Ready").0, "True");
        assert_eq!(plan.status.node_ref.map(|r| r.name), Some("n1".to_string()));
    }

    #[test]
    fn deletion_waits_for_an_unreachable_workload_cluster_and_skips_the_node_of_a_deleted_cluster() {
        let i = infra(true, false);
        let n = ready_node();
        let mut with_node = machine(true, &[]);
        with_node.status = Some(capi::MachineStatus {
            node_ref: Some(MachineNodeReference { name: "n1".into() }),
            ..Default::default()
        });
        let without_node = machine(true, &[]);
        // (case, machine, node seen, connection down, cluster deleting, infra, expected)
        type Row<'a> = (&'a str, &'a capi::Machine, Option<&'a Node>, bool, bool, Option<&'a MCMMachine>, DeletionStep);
        let rows: Vec<Row<'_>> = vec![
            (
                "down, a Node to drain: wait",
                &with_node,
                None,
                true,
                false,
                Some(&i),
                DeletionStep::WaitForWorkloadCluster("down".into()),
            ),
            (
                "down, never had a Node: go on",
                &without_node,
                None,
                true,
                false,
                Some(&i),
                DeletionStep::DeleteInfrastructure,
            ),
            (
                "cluster deleting: no drain",
                &with_node,
                Some(&n),
                false,
                true,
                Some(&i),
                DeletionStep::DeleteInfrastructure,
            ),
            (
                "cluster deleting: no Node deletion",
                &with_node,
                Some(&n),
                false,
                true,
                None,
                DeletionStep::RemoveFinalizer,
            ),
            (
                "down at the Node's deletion: skipped",
                &with_node,
                None,
                true,
                false,
                None,
                DeletionStep::RemoveFinalizer,
            ),
        ];
        for (name, m, node, down, cluster_deleting, infra, expected) in rows {
            let step = deletion_step(&DeletionObservation {
                machine: m,
                infra,
                node,
                drained: false,
                drain_started: None,
                now: t(0),
                bootstrap_deleting: None,
                connection_down: down.then_some("down"),
                cluster_deleting,
            });
            assert_eq!(step, expected, "{name}");
        }
    }

    fn ready_node() -> Node {
        node(true, 10)
    }

    fn condition_of(plan: &MachinePlan, type_: &str) -> (String, String, String) {
        let c = plan.status.conditions.iter().flatten().find(|c| c.type_ == type_).unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    #[test]
    fn infrastructure_ready_mirrors_the_mcm_machines_ready() {
        let m = machine(true, &[]);
        let plan_with = |infra: Option<&MCMMachine>| {
            plan_machine(&MachineObservation {
                machine: &m,
                infra,
                node: None,
                now: t(5),
                creation_timeout: Duration::from_secs(600),
                health_timeout: None,
                up_to_date: None,
                bootstrap: None,
                connection_down: None,
            })
        };
        let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        assert_eq!(
            condition_of(&plan_with(None), "InfrastructureReady"),
            s("False", "ObjectDoesNotExist", "MCMMachine does not exist")
        );
        assert_eq!(
            condition_of(&plan_with(Some(&infra(false, false))), "InfrastructureReady"),
            s("False", "NotReady", "MCMMachine status.initialization.provisioned is false")
        );
        assert_eq!(condition_of(&plan_with(Some(&infra(true, false))), "InfrastructureReady"), s("True", "Ready", ""));
        let mut reporting = infra(false, false);
        reporting.status.as_mut().unwrap().conditions = Some(vec![Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: "WaitingForCluster".into(),
            message: "Cluster not provisioned".into(),
            last_transition_time: Time(t(0)),
            observed_generation: None,
        }]);
        assert_eq!(
            condition_of(&plan_with(Some(&reporting)), "InfrastructureReady"),
            s("False", "WaitingForCluster", "Cluster not provisioned")
        );
    }

    #[test]
    fn available_waits_for_min_ready_seconds() {
        let mut m = machine(true, &[]);
        m.spec.min_ready_seconds = Some(30);
        let i = infra(true, false);
        let n = ready_node();
        let plan_at = |m: &capi::Machine, now: i64| {
            plan_machine(&MachineObservation {
                machine: m,
                infra: Some(&i),
                node: Some(&n),
                now: t(now),
                creation_timeout: Duration::from_secs(600),
                health_timeout: None,
                up_to_date: None,
                bootstrap: None,
                connection_down: None,
            })
        };
        let first = plan_at(&m, 20);
        assert_eq!(condition_of(&first, "Ready").0, "True");
        assert_eq!(condition_of(&first, "Available").1, "WaitingForMinReadySeconds");
        assert!(first.requeue_after.is_some_and(|d| d <= Duration::from_secs(30)), "{:?}", first.requeue_after);
        m.status = Some(first.status);
        assert_eq!(condition_of(&plan_at(&m, 49), "Available").0, "False");
        assert_eq!(condition_of(&plan_at(&m, 50), "Available"), ("True".into(), "Available".into(), String::new()));
    }

    #[test]
    fn an_empty_initialization_is_never_written() {
        // The CRD wants at least one property in `status.initialization`: a new machine without bootstrap data or
        // a provisioned MCMMachine has none to write, so it writes none.
        let m = machine(false, &[]);
        let plan = plan_machine(&MachineObservation {
            machine: &m,
            infra: None,
            node: None,
            now: t(5),
            creation_timeout: Duration::from_secs(600),
            health_timeout: None,
            up_to_date: None,
            bootstrap: None,
            connection_down: None,
        });
        assert_eq!(plan.status.initialization, None);
        assert!(serde_json::to_value(&plan.status).unwrap().get("initialization").is_none());
        let m = machine(true, &[]);
        let plan = plan_machine(&MachineObservation {
            machine: &m,
            infra: None,
            node: None,
            now: t(5),
            creation_timeout: Duration::from_secs(600),
            health_timeout: None,
            up_to_date: None,
            bootstrap: None,
            connection_down: None,
        });
        assert_eq!(plan.status.initialization.and_then(|i| i.bootstrap_data_secret_created), Some(true));
    }

    #[test]
    fn conditions_keep_their_transition_time() {
        let m = machine(true, &[]);
        let n = node(true, 10);
        let i = infra(true, false);
        let obs = |m: &capi::Machine, now| {
            plan_machine(&MachineObservation {
                machine: m,
                infra: Some(&i),
                node: Some(&n),
                now: t(now),
                creation_timeout: Duration::from_secs(600),
                health_timeout: None,
                up_to_date: Some(true),
                bootstrap: None,
                connection_down: None,
            })
        };
        let first = obs(&m, 5);
        let mut m2 = m.clone();
        m2.status = Some(first.status.clone());
        let second = obs(&m2, 50);
        assert_eq!(first.status, second.status, "nothing changed: nothing to write");
    }

    fn template(class: &str, labels: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "metadata": {"labels": labels},
            "spec": {
                "clusterName": "c1",
                "bootstrap": {"dataSecretName": "boot"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachineTemplate", "name": class},
            },
        })
    }

    /// A MachineDeployment or MachineSet (`kind`) of `template`: the two share their spec's shape.
    fn replicated<T: serde::de::DeserializeOwned>(kind: &str, name: &str, template: serde_json::Value) -> T {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind,
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"clusterName": "c1", "replicas": 1, "selector": {"matchLabels": {"pool": "a"}}, "template": template},
        }))
        .unwrap()
    }

    fn deployment(template: serde_json::Value) -> capi::MachineDeployment {
        replicated("MachineDeployment", "pool", template)
    }

    fn set(template: serde_json::Value) -> capi::MachineSet {
        replicated("MachineSet", "pool-x", template)
    }

    #[test]
    fn machines_are_up_to_date_while_their_set_has_the_deployments_template() {
        let labels = serde_json::json!({"pool": "a"});
        let current = deployment(template("small", labels.clone()));
        assert!(machine_set_up_to_date(&current, &set(template("small", labels.clone())), t(0)));
        // The hash label the deployment adds to its sets does not count.
        let hashed = serde_json::json!({"pool": "a", "machine-template-hash": "123"});
        assert!(machine_set_up_to_date(&current, &set(template("small", hashed)), t(0)));
        // Another infrastructure template or other template labels roll: the old set's machines are outdated.
        assert!(!machine_set_up_to_date(&current, &set(template("large", labels.clone())), t(0)));
        let relabelled = serde_json::json!({"pool": "a", "tier": "x"});
        assert!(!machine_set_up_to_date(&current, &set(template("small", relabelled)), t(0)));
    }

    #[test]
    fn the_up_to_date_condition_follows_the_observation() {
        let m = machine(true, &[]);
        let (n, i) = (node(true, 10), infra(true, false));
        let plan = |up_to_date| {
            plan_machine(&MachineObservation {
                machine: &m,
                infra: Some(&i),
                node: Some(&n),
                now: t(20),
                creation_timeout: Duration::from_secs(600),
                health_timeout: None,
                up_to_date,
                bootstrap: None,
                connection_down: None,
            })
        };
        let up_to_date = |p: &MachinePlan| {
            p.status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "UpToDate")
                .map(|c| (c.status.clone(), c.reason.clone()))
        };
        assert_eq!(up_to_date(&plan(Some(true))), Some(("True".into(), "UpToDate".into())));
        assert_eq!(up_to_date(&plan(Some(false))), Some(("False".into(), "NotUpToDate".into())));
        assert_eq!(up_to_date(&plan(None)), None, "no owner seen: left alone");

        // The Node's kubelet against the Machine's version, as core compares them.
        let with_kubelet = |version: &str| {
            let mut n = node(true, 10);
            n.status.get_or_insert_with(Default::default).node_info =
                Some(k8s_openapi::api::core::v1::NodeSystemInfo {
                    kubelet_version: version.into(),
                    ..Default::default()
                });
            n
        };
        let versioned = |version: Option<&str>| {
            let mut m = machine(true, &[]);
            m.spec.version = version.map(str::to_string);
            m
        };
        // (machine version, kubelet version, template up to date, expected status and reason)
        let cases = [
            (Some("v1.34.1"), "v1.34.1", true, ("True", "UpToDate")),
            (Some("v1.34.1"), "v1.37.0", true, ("False", "Updating")),
            (Some("v1.34.1"), "v1.37.0", false, ("False", "NotUpToDate")),
            (Some("v1.34.1"), "", true, ("True", "UpToDate")),
            (None, "v1.37.0", true, ("True", "UpToDate")),
        ];
        for (case, (version, kubelet, template, (status, reason))) in cases.into_iter().enumerate() {
            let (m, n) = (versioned(version), with_kubelet(kubelet));
            let p = plan_machine(&MachineObservation {
                machine: &m,
                infra: Some(&i),
                node: Some(&n),
                now: t(20),
                creation_timeout: Duration::from_secs(600),
                health_timeout: None,
                up_to_date: Some(template),
                bootstrap: None,
                connection_down: None,
            });
            assert_eq!(up_to_date(&p), Some((status.into(), reason.into())), "case {case}");
        }
    }

    #[test]
    fn a_machine_takes_its_infrastructure_machine_unless_another_controller_holds_it() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let reference = |uid: &str, controller: bool| OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Machine".into(),
            name: "m".into(),
            uid: uid.into(),
            controller: Some(controller),
            block_owner_deletion: Some(true),
        };
        let mine = reference("mine", true);
        let meta = |owners: Vec<OwnerReference>, label: Option<&str>| ObjectMeta {
            owner_references: Some(owners),
            labels: label.map(|l| BTreeMap::from([(capi::CLUSTER_NAME_LABEL.to_string(), l.to_string())])),
            resource_version: Some("7".into()),
            ..Default::default()
        };
        let labelled = serde_json::json!({capi::CLUSTER_NAME_LABEL: "demo"});
        // (infra metadata, cluster name, expected owner references and labels of the patch; None: no patch)
        let cases = [
            (meta(vec![], None), "demo", Some((vec![mine.clone()], Some(labelled.clone())))),
            (meta(vec![], Some("demo")), "demo", Some((vec![mine.clone()], None))),
            (
                meta(vec![reference("other", false)], None),
                "",
                Some((vec![reference("other", false), mine.clone()], None)),
            ),
            (meta(vec![mine.clone()], None), "demo", Some((vec![mine.clone()], Some(labelled.clone())))),
            (meta(vec![mine.clone()], Some("demo")), "demo", None),
            (meta(vec![mine.clone()], None), "", None),
            (meta(vec![reference("other", true)], None), "demo", None),
        ];
        for (i, (infra, cluster, expected)) in cases.into_iter().enumerate() {
            let patch = infra_adoption(&infra, &mine, cluster);
            let got = patch.as_ref().map(|p| {
                let owners: Vec<OwnerReference> =
                    serde_json::from_value(p["metadata"]["ownerReferences"].clone()).unwrap();
                (owners, p["metadata"].get("labels").cloned())
            });
            assert_eq!(got, expected, "case {i}");
            if let Some(p) = patch {
                assert_eq!(p["metadata"]["resourceVersion"], "7", "case {i}: guarded by the resourceVersion");
            }
        }
    }

    #[test]
    fn deletion_steps_table() {
        let n = node(true, 0);
        let (i, gone) = (infra(true, false), infra(true, true));
        // (case, annotations, infra, node, drained, drain started, now, step)
        type Row<'a> =
            (&'a str, Vec<&'a str>, Option<&'a MCMMachine>, Option<&'a Node>, bool, Option<i64>, i64, DeletionStep);
        let cases: Vec<Row<'_>> = vec![
            (
                "pre-drain hook",
                vec!["pre-drain.delete.hook.machine.cluster.x-k8s.io/x"],
                Some(&i),
                Some(&n),
                false,
                None,
                0,
                DeletionStep::WaitForPreDrainHooks(vec!["pre-drain.delete.hook.machine.cluster.x-k8s.io/x".into()]),
            ),
            (
                "drain",
                vec![],
                Some(&i),
                Some(&n),
                false,
                None,
                0,
                DeletionStep::Drain { node: "n1".into(), timeout: Some(Duration::from_secs(60)) },
            ),
            (
                "drain, time left",
                vec![],
                Some(&i),
                Some(&n),
                false,
                Some(0),
                45,
                DeletionStep::Drain { node: "n1".into(), timeout: Some(Duration::from_secs(15)) },
            ),
            (
                "drain timed out: go on",
                vec![],
                Some(&i),
                Some(&n),
                false,
                Some(0),
                61,
                DeletionStep::DeleteInfrastructure,
            ),
            (
                "excluded from draining",
                vec![EXCLUDE_DRAIN_ANNOTATION],
                Some(&i),
                Some(&n),
                false,
                None,
                0,
                DeletionStep::DeleteInfrastructure,
            ),
            (
                "drained, pre-terminate hook",
                vec!["pre-terminate.delete.hook.machine.cluster.x-k8s.io/y"],
                Some(&i),
                Some(&n),
                true,
                None,
                0,
                DeletionStep::WaitForPreTerminateHooks(vec![
                    "pre-terminate.delete.hook.machine.cluster.x-k8s.io/y".into(),
                ]),
            ),
            ("drained", vec![], Some(&i), Some(&n), true, None, 0, DeletionStep::DeleteInfrastructure),
            ("no node", vec![], Some(&i), None, false, None, 0, DeletionStep::DeleteInfrastructure),
            ("infra deleting", vec![], Some(&gone), Some(&n), true, None, 0, DeletionStep::WaitForInfrastructure),
            ("infra gone, node left", vec![], None, Some(&n), false, None, 0, DeletionStep::DeleteNode("n1".into())),
            ("all gone", vec![], None, None, false, None, 0, DeletionStep::RemoveFinalizer),
            (
                "hooks do not hold a machine whose infra is gone",
                vec!["pre-terminate.delete.hook.machine.cluster.x-k8s.io/y"],
                None,
                None,
                false,
                None,
                0,
                DeletionStep::RemoveFinalizer,
            ),
        ];
        for (name, annotations, infra, node, drained, started, now, expected) in cases {
            let m = machine(true, &annotations);
            let step = deletion_step(&DeletionObservation {
                machine: &m,
                infra,
                node,
                drained,
                drain_started: started.map(t),
                now: t(now),
                bootstrap_deleting: None,
                connection_down: None,
                cluster_deleting: false,
            });
            assert_eq!(step, expected, "{name}");
        }
        // The bootstrap config goes after the infrastructure and before the Node, as in core.
        for (name, infra, bootstrap, expected) in [
            ("infra first", Some(&i), Some(false), DeletionStep::DeleteInfrastructure),
            ("then the bootstrap config", None, Some(false), DeletionStep::DeleteBootstrap),
            ("waited for", None, Some(true), DeletionStep::WaitForBootstrap),
            ("then the Node", None, None, DeletionStep::DeleteNode("n1".into())),
        ] {
            let m = machine(true, &[]);
            let step = deletion_step(&DeletionObservation {
                machine: &m,
                infra,
                node: Some(&n),
                drained: true,
                drain_started: None,
                now: t(0),
                bootstrap_deleting: bootstrap,
                connection_down: None,
                cluster_deleting: false,
            });
            assert_eq!(step, expected, "{name}");
        }
    }

    #[test]
    fn a_conflicting_status_write_keeps_conditions_others_wrote() {
        let now = Timestamp::UNIX_EPOCH;
        let c = |type_: &str, status: bool| condition(&[], type_, status, "R", "", now);
        // (name, old as cached, new as decided, fresh from the server, expected types with their statuses)
        let cases: Vec<(&str, Vec<Condition>, Vec<Condition>, Vec<Condition>, Vec<(&str, &str)>)> = vec![
            (
                "a foreign condition written meanwhile stays beside ours",
                vec![c("Ready", false)],
                vec![c("Ready", true)],
                vec![c("Ready", false), c("DiskHealthy", false)],
                vec![("Ready", "True"), ("DiskHealthy", "False")],
            ),
            (
                "a condition we did not change keeps the server's newer value",
                vec![c("Ready", true), c("HealthCheckSucceeded", true)],
                vec![c("Ready", false), c("HealthCheckSucceeded", true)],
                vec![c("Ready", true), c("HealthCheckSucceeded", false)],
                vec![("Ready", "False"), ("HealthCheckSucceeded", "False")],
            ),
            (
                "a condition we dropped goes, one we never knew stays",
                vec![c("Deleting", true), c("Ready", true)],
                vec![c("Ready", true)],
                vec![c("Deleting", true), c("Ready", true), c("OwnerRemediated", false)],
                vec![("Ready", "True"), ("OwnerRemediated", "False")],
            ),
            (
                "nothing changed: the server's list as it is",
                vec![c("Ready", true)],
                vec![c("Ready", true)],
                vec![c("X", true)],
                vec![("X", "True")],
            ),
        ];
        for (name, old, new, fresh, expected) in cases {
            let got = rebase_conditions(&old, &new, &fresh);
            let got: Vec<(&str, &str)> = got.iter().map(|c| (c.type_.as_str(), c.status.as_str())).collect();
            assert_eq!(got, expected, "{name}");
        }
    }
}
