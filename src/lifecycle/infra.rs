//! The CAPI infrastructure provider's decisions (`docs/infrastructure-provider.md`): when an MCMMachine may go ahead, what
//! its `Ready` and `Paused` conditions say, where the VM goes, what an MCMCluster and an MCMMachineTemplate
//! publish.
//!
//! The VM's life itself is MCM's: the controller runs [`super::create`] and [`super::delete`] on the hub view of
//! the MCMMachine ([`crate::convert::machine::to_hub`]); this module only adds what CAPI asks on top.
//!
//! Imports `api`, `providers::contract` (codes) and sibling modules only.

use std::collections::BTreeMap;

use super::create;
use super::status;
use crate::api::capi::{Cluster, FailureDomain, PAUSED_ANNOTATION};
use crate::api::infra::{MCMClusterSpec, NodeInfo};
use crate::api::mcm::{Machine, MachinePhase, NodeTemplate};
use crate::providers::contract::{Code, DriverError, NodeCapacity};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Finalizer on MCMMachines: the VM goes before the object does.
pub const MACHINE_FINALIZER: &str = "mcmmachine.infrastructure.cluster.x-k8s.io";
/// Label selecting the objects of one controller instance (`--watch-filter`).
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";
/// The key of the bootstrap data in CAPI's bootstrap Secret.
pub const BOOTSTRAP_DATA_KEY: &str = "value";

/// Condition types.
pub mod condition {
    /// Mirrored by CAPI core into the Machine's (or Cluster's) `InfrastructureReady`.
    pub const READY: &str = "Ready";
    /// Whether reconciliation is paused.
    pub const PAUSED: &str = "Paused";
}

/// Condition reasons (documented in `docs/infrastructure-provider.md`).
pub mod reason {
    /// Paused: `Cluster.spec.paused` or the `cluster.x-k8s.io/paused` annotation.
    pub const PAUSED: &str = "Paused";
    /// Not paused.
    pub const NOT_PAUSED: &str = "NotPaused";
    /// No owning Machine (or Cluster) reference yet.
    pub const WAITING_FOR_OWNER: &str = "WaitingForOwner";
    /// The Cluster named by the `cluster.x-k8s.io/cluster-name` label does not exist.
    pub const WAITING_FOR_CLUSTER: &str = "WaitingForCluster";
    /// `Cluster.status.initialization.infrastructureProvisioned` is not true yet.
    pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
    /// `Machine.spec.bootstrap.dataSecretName` is unset, or the Secret has no `value`.
    pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
    /// Neither or both of `class` and `inlineClass`, a missing MachineClass, a wrong kind, or no driver.
    pub const INVALID_CLASS: &str = "InvalidClass";
    /// The Machine's failure domain cannot be honoured by its class (no subnet for the zone on AWS, not a zone
    /// number or an availability set on Azure, a zone of another region on GCP): no VM is made.
    pub const INVALID_FAILURE_DOMAIN: &str = "InvalidFailureDomain";
    /// The VM is being created.
    pub const PROVISIONING: &str = "Provisioning";
    /// The VM exists.
    pub const PROVISIONED: &str = "Provisioned";
    /// Creating the VM failed; it is retried with back-off until the creation timeout (MCM's CrashLoopBackOff).
    pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
    /// Creating the VM failed for good: the creation timeout passed or the class is invalid (MCM's Failed).
    pub const FAILED: &str = "Failed";
    /// The cloud refused the credentials (`Unauthenticated`, `PermissionDenied`).
    pub const INVALID_CREDENTIALS: &str = "InvalidCredentials";
    /// The VM is being deleted.
    pub const DELETING: &str = "Deleting";
    /// Deleting the VM failed; retried with back-off.
    pub const DELETION_FAILED: &str = "DeletionFailed";
    /// The MCMCluster's infrastructure is what its spec declares.
    pub const CLUSTER_PROVISIONED: &str = "Provisioned";
}

/// Whether the object is paused: its Cluster's `spec.paused`, or the paused annotation on the object.
pub fn paused(cluster: Option<&Cluster>, annotations: Option<&BTreeMap<String, String>>) -> bool {
    cluster.and_then(|c| c.spec.paused).unwrap_or(false)
        || annotations.is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
}

/// What the orphan collector knows of one MCMMachine that uses a class.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClassUser<'a> {
    /// The MCMMachine, as `namespace/name` (for the reason given).
    pub machine: &'a str,
    /// Its annotations.
    pub annotations: Option<&'a BTreeMap<String, String>>,
    /// Its `cluster.x-k8s.io/cluster-name` label.
    pub cluster_name: Option<&'a str>,
    /// That Cluster, if it was found.
    pub cluster: Option<&'a Cluster>,
}

/// Why no VM of a class may be collected as an orphan now, given the MCMMachines that use the class; `None` when
/// collection may go ahead.
///
/// `clusterctl move` pauses the Cluster, copies its objects to the target management cluster and deletes them
/// from the source. Meanwhile the providers on both sides list VMs whose MCMMachines are not there yet (target)
/// or not any more (source). So a class is held while any MCMMachine using it is paused (the
/// `cluster.x-k8s.io/paused` annotation), or its Cluster is paused (`spec.paused`, or the annotation on the
/// Cluster), or its Cluster is not known (no cluster-name label, or no such Cluster: during a move it may be gone
/// already or not there yet). Collection never acts on uncertainty.
pub fn orphan_collection_held(users: &[ClassUser<'_>]) -> Option<String> {
    users.iter().find_map(|u| {
        let machine = u.machine;
        if u.annotations.is_some_and(|a| a.contains_key(PAUSED_ANNOTATION)) {
            return Some(format!("MCMMachine {machine} is paused ({PAUSED_ANNOTATION})"));
        }
        let Some(name) = u.cluster_name.filter(|n| !n.is_empty()) else {
            return Some(format!("MCMMachine {machine} names no Cluster (label cluster.x-k8s.io/cluster-name)"));
        };
        let Some(cluster) = u.cluster else {
            return Some(format!("the Cluster {name} of MCMMachine {machine} is not found"));
        };
        paused(Some(cluster), cluster.metadata.annotations.as_ref())
            .then(|| format!("the Cluster {name} of MCMMachine {machine} is paused"))
    })
}

/// Whether an object passes `--watch-filter`: without a filter everything does; with one, only objects labelled
/// `cluster.x-k8s.io/watch-filter=<value>`.
pub fn passes_filter(filter: Option<&str>, labels: Option<&BTreeMap<String, String>>) -> bool {
    filter.is_none_or(|f| labels.and_then(|l| l.get(WATCH_FILTER_LABEL)).map(String::as_str) == Some(f))
}

/// Why an MCMMachine cannot go ahead yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    /// The `Ready` condition's reason.
    pub reason: &'static str,
    /// The message.
    pub message: String,
}

impl Wait {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Wait { reason, message: message.into() }
    }
}

/// What the gate of a live MCMMachine looks at.
#[derive(Clone, Debug, Default)]
pub struct Gate<'a> {
    /// The name of the owning Machine, from the ownerReferences.
    pub owner_name: Option<&'a str>,
    /// Whether that Machine exists.
    pub owner_found: bool,
    /// The Cluster's name, from the `cluster.x-k8s.io/cluster-name` label.
    pub cluster_name: Option<&'a str>,
    /// The Cluster, if it exists.
    pub cluster: Option<&'a Cluster>,
    /// `Machine.spec.bootstrap.dataSecretName`.
    pub data_secret_name: Option<&'a str>,
    /// Whether that Secret exists with a `value`.
    pub data_found: bool,
    /// The class problem, if any.
    pub class_problem: Option<String>,
    /// Whether the VM exists already (a provisioned machine no longer waits for bootstrap data).
    pub has_vm: bool,
}

/// Whether a live MCMMachine may create its VM (`docs/infrastructure-provider.md` steps 1–4, then the class).
pub fn gate(g: &Gate<'_>) -> Result<(), Wait> {
    let Some(owner) = g.owner_name else {
        return Err(Wait::new(
            reason::WAITING_FOR_OWNER,
            "Waiting for the Machine controller to set the owner reference",
        ));
    };
    if !g.owner_found {
        return Err(Wait::new(reason::WAITING_FOR_OWNER, format!("Waiting for the owning Machine {owner} to exist")));
    }
    let Some(cluster_name) = g.cluster_name else {
        return Err(Wait::new(
            reason::WAITING_FOR_CLUSTER,
            "Waiting for the cluster.x-k8s.io/cluster-name label naming the Cluster",
        ));
    };
    let Some(cluster) = g.cluster else {
        return Err(Wait::new(reason::WAITING_FOR_CLUSTER, format!("Waiting for the Cluster {cluster_name} to exist")));
    };
    if g.has_vm {
        return Ok(());
    }
    let provisioned = cluster.status.as_ref().and_then(|s| s.initialization.as_ref()?.infrastructure_provisioned);
    if provisioned != Some(true) {
        return Err(Wait::new(
            reason::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            format!("Waiting for the infrastructure of Cluster {cluster_name} to be provisioned"),
        ));
    }
    match g.data_secret_name.filter(|n| !n.is_empty()) {
        None => {
            return Err(Wait::new(
                reason::WAITING_FOR_BOOTSTRAP_DATA,
                "Waiting for the bootstrap provider to set Machine.spec.bootstrap.dataSecretName",
            ));
        }
        Some(name) if !g.data_found => {
            return Err(Wait::new(
                reason::WAITING_FOR_BOOTSTRAP_DATA,
                format!("Waiting for the bootstrap data Secret {name} with key {BOOTSTRAP_DATA_KEY:?}"),
            ));
        }
        Some(_) => {}
    }
    if let Some(problem) = &g.class_problem {
        return Err(Wait::new(reason::INVALID_CLASS, problem.clone()));
    }
    Ok(())
}

/// Whether the VM exists as far as CAPI is concerned: a providerID, and a phase past creation.
pub fn provisioned(hub: &Machine) -> bool {
    create::provider_id(hub).is_some()
        && !matches!(status::phase(hub), None | Some(MachinePhase::CrashLoopBackOff | MachinePhase::Failed))
}

/// Whether a driver error means the credentials are wrong.
pub fn bad_credentials(code: Code) -> bool {
    matches!(code, Code::Unauthenticated | Code::PermissionDenied)
}

/// The `Ready` condition of a live MCMMachine from its hub view (after the decisions of this reconcile).
pub fn ready(hub: &Machine) -> (bool, &'static str, String) {
    let op = status::last_operation(hub);
    let description = status::description(hub).to_string();
    let credentials = op.and_then(|o| o.error_code.as_deref()).and_then(Code::from_name).is_some_and(bad_credentials);
    match status::phase(hub) {
        _ if provisioned(hub) => {
            (true, reason::PROVISIONED, format!("VM {} exists", create::provider_id(hub).unwrap_or_default()))
        }
        Some(MachinePhase::CrashLoopBackOff | MachinePhase::Failed) if credentials => {
            (false, reason::INVALID_CREDENTIALS, description)
        }
        Some(MachinePhase::CrashLoopBackOff) => (false, reason::CRASH_LOOP_BACK_OFF, description),
        Some(MachinePhase::Failed) => (false, reason::FAILED, description),
        _ => (false, reason::PROVISIONING, "Creating the VM".to_string()),
    }
}

/// The `Ready` condition while the VM is being deleted: `error` is the last failure of the deletion.
pub fn deleting(error: Option<&DriverError>) -> (bool, &'static str, String) {
    match error {
        None => (false, reason::DELETING, "Deleting the VM".to_string()),
        Some(e) if bad_credentials(e.code) => (
            false,
            reason::INVALID_CREDENTIALS,
            format!("Deleting the VM failed, the cloud refused the credentials: {e}"),
        ),
        Some(e) => (false, reason::DELETION_FAILED, format!("Deleting the VM failed; retrying: {e}")),
    }
}

/// `conditions` with one condition set: its `lastTransitionTime` moves only when its status changes; `None` when
/// nothing changes (so nothing is written).
pub fn set_condition(
    conditions: Option<&[Condition]>,
    type_: &str,
    (ok, reason, message): (bool, &str, String),
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Vec<Condition>> {
    let mut all: Vec<Condition> = conditions.map(<[Condition]>::to_vec).unwrap_or_default();
    let status = if ok { "True" } else { "False" };
    let existing = all.iter().position(|c| c.type_ == type_);
    if let Some(i) = existing {
        let old = &all[i];
        if old.status == status
            && old.reason == reason
            && old.message == message
            && old.observed_generation == generation
        {
            return None;
        }
    }
    let last_transition_time = match existing {
        Some(i) if all[i].status == status => all[i].last_transition_time.clone(),
        _ => Time(now),
    };
    let new = Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time,
        observed_generation: generation,
    };
    match existing {
        Some(i) => all[i] = new,
        None => all.push(new),
    }
    Some(all)
}

/// The `Paused` condition.
pub fn paused_condition(is_paused: bool) -> (bool, &'static str, String) {
    if is_paused {
        (true, reason::PAUSED, "Reconciliation is paused (Cluster.spec.paused or cluster.x-k8s.io/paused)".into())
    } else {
        (false, reason::NOT_PAUSED, String::new())
    }
}

/// What an MCMMachineTemplate publishes for scale-from-zero: what the driver knows a node of the class offers
/// (`derived`, from its instance type or size: [`crate::providers::contract::Driver::capacity_of`]), overridden key
/// by key by the class's `nodeTemplate` capacity and virtual capacity; the architecture of the node template, or
/// else the type's, or `amd64` (operating system `linux`). `None` when neither says anything.
pub fn template_status(
    node_template: Option<&NodeTemplate>,
    derived: Option<&NodeCapacity>,
) -> Option<(BTreeMap<String, Quantity>, NodeInfo)> {
    let mut capacity = derived.map(|d| d.resources.clone()).unwrap_or_default();
    if let Some(t) = node_template {
        capacity.extend(t.capacity.clone());
        capacity.extend(t.virtual_capacity.clone().unwrap_or_default());
    }
    if capacity.is_empty() && node_template.is_none() {
        return None;
    }
    let architecture = node_template
        .and_then(|t| t.architecture.clone())
        .filter(|a| !a.is_empty())
        .or_else(|| derived.and_then(|d| d.architecture.clone()))
        .unwrap_or_else(|| "amd64".into());
    let info = NodeInfo { architecture: Some(architecture), operating_system: Some("linux".into()) };
    Some((capacity, info))
}

/// The failure domains an MCMCluster publishes: its spec's, unchanged (v1beta2 list form).
pub fn failure_domains(spec: &MCMClusterSpec) -> Option<Vec<FailureDomain>> {
    spec.failure_domains.clone()
}

mod placement;

pub use placement::{AWS_SUBNETS_BY_ZONE, located, place, zone_of};

#[cfg(test)]
mod tests;
