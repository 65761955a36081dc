//! The executors of the MachineDeployment and MachineSet plans, shared by both API flavours.
//!
//! `lifecycle::machine_deployment::plan` and `lifecycle::machine_set` decide over MCM's types (the hub). A
//! controller of either flavour observes its objects, and [`deployment::run`] or [`set::run`] claims the owned
//! objects, asks the decision and carries the plan out. What differs between `machine.sapcloud.io` and
//! `cluster.x-k8s.io` is behind [`Flavour`]: which objects are read and written, how they convert to the hub and
//! back, and the few writes whose shape the flavour's API decides (status, owner references, a new object).
//! A fix to how a plan is carried out is made here once.

pub(crate) mod deployment;
pub(crate) mod overshoot;
pub(crate) mod set;
pub(crate) mod settle;

pub(crate) use deployment::WrittenBy;
use settle::Unsettled;

use std::borrow::Cow;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use crate::controllers::events::Recorder;
use jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::runtime::reflector::{Lookup, Store};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use kube::runtime::controller::Action;

use super::context::{RetryBook, key_of};
use super::error::Error;
use super::sets::SetOptions;
use super::workload::Connection;
use crate::api::mcm;
use crate::lifecycle::machine_deployment::plan::DeploymentOptions;
use crate::lifecycle::machine_deployment::validation::ValidationError;
use crate::lifecycle::machine_set::status::ReplicaFailure;
use crate::lifecycle::{MachineConfig, RetryClass};

/// What the executors need of a stored object.
pub(crate) trait Object:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Lookup<DynamicType = ()>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<T> Object for T where
    T: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Lookup<DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// The seam between the shared executors and an API flavour: its objects, their stores and clients, the
/// conversion to and from the hub, and the writes whose shape is the flavour's.
pub(crate) trait Flavour: Send + Sync {
    /// The flavour's Machine.
    type Machine: Object;
    /// The flavour's MachineSet.
    type Set: Object;
    /// The flavour's MachineDeployment.
    type Deployment: Object;
    /// What creating machines needs once per pass (the CAPI flavour's infrastructure template).
    type CreateContext: Send + Sync;

    /// The finalizer the MachineDeployment controller holds.
    const DEPLOYMENT_FINALIZER: &'static str;
    /// The finalizer the MachineSet controller holds.
    const SET_FINALIZER: &'static str;
    /// Prefix of this flavour's back-off keys (`capi-`), so the two flavours' objects of one name count apart.
    const RETRY_PREFIX: &'static str;

    /// The control cluster.
    fn control(&self) -> &Client;
    /// The machine controller's configuration (resync period).
    fn config(&self) -> &MachineConfig;
    /// Back-off per object.
    fn retries(&self) -> &RetryBook;
    /// Writes of earlier passes the stores have not shown yet, per set and deployment.
    fn unsettled(&self) -> &Unsettled<Self::Machine, Self::Set, Self::Deployment>;
    /// The MachineDeployment decisions' options.
    fn deployment_options(&self) -> DeploymentOptions;
    /// How the set controllers and the overshoot freeze run.
    fn set_options(&self) -> &SetOptions;
    /// Resolves once every store has its first list.
    fn ready(&self) -> impl Future<Output = ()> + Send;
    /// Where the overshoot freeze's events go.
    fn freeze_events(&self) -> &Recorder;
    /// Machines.
    fn machines(&self) -> &Store<Self::Machine>;
    /// MachineSets.
    fn sets(&self) -> &Store<Self::Set>;
    /// MachineDeployments.
    fn deployments(&self) -> &Store<Self::Deployment>;
    /// Where the Nodes of deployment `d`'s machines are (`None`: nowhere reachable now).
    fn workload(&self, d: &Self::Deployment) -> impl Future<Output = Option<Arc<Connection>>> + Send;
    /// Events of the MachineSet controller.
    fn set_events(&self) -> &Recorder;
    /// Events of the MachineDeployment controller.
    fn deployment_events(&self) -> &Recorder;

    /// The controller reference to an owner of `kind` in this flavour's group.
    fn controller_ref(kind: &str, owner: &ObjectMeta) -> OwnerReference;
    /// A set's selector.
    fn set_selector(set: &Self::Set) -> Cow<'_, LabelSelector>;
    /// A deployment's selector.
    fn deployment_selector(d: &Self::Deployment) -> Cow<'_, LabelSelector>;

    /// A deployment as the hub sees it (the flavour's defaults applied).
    fn deployment_to_hub(d: &Self::Deployment) -> Cow<'_, mcm::MachineDeployment>;
    /// A set as the hub sees it.
    fn set_to_hub(set: &Self::Set) -> Cow<'_, mcm::MachineSet>;
    /// A machine as the hub sees it.
    fn machine_to_hub<'a>(&self, machine: &'a Self::Machine) -> Cow<'a, mcm::Machine>;
    /// The Node's preserve annotation for a machine (MCM's: it wins over the machine's own).
    fn node_preserve(&self, machine: &mcm::Machine) -> Option<String>;

    /// The flavour's patch for a merge patch of the hub deployment `hub` (`None`: nothing to write).
    fn deployment_patch(hub: &mcm::MachineDeployment, patch: &Value) -> Option<Value>;
    /// The flavour's patch of `set` for a merge patch of its hub view (`None`: nothing to write).
    fn set_patch(set: &Self::Set, hub: &mcm::MachineSet, patch: &Value) -> Option<Value>;
    /// The status merge patch that sets (`Some`) or removes (`None`) a set's `Frozen` condition, in the flavour's
    /// shape (`None`: nothing to change).
    fn set_frozen_patch(set: &Self::Set, frozen: Option<&mcm::MachineSetCondition>) -> Option<Value>;
    /// The same for a deployment's `Frozen` condition.
    fn deployment_frozen_patch(d: &Self::Deployment, frozen: Option<&mcm::MachineDeploymentCondition>)
    -> Option<Value>;
    /// The flavour's patch of a machine for a merge patch of its hub view (`None`: the flavour does not hold what
    /// the patch changes).
    fn machine_patch(patch: &Value) -> Option<Value>;
    /// What else a machine moved to `to` by an in-place update takes from it, added to `patch` (CAPI: the
    /// `set-name` label and the template's `spec.version`, as core's in-place moves do).
    fn complete_transfer(_to: &Self::Set, _patch: &mut Value) {}
    /// The set to create for a new hub set of `d`.
    fn new_set(d: &Self::Deployment, hub: &mcm::MachineSet) -> Self::Set;

    /// A plan found the deployment invalid: say so on it.
    fn report_invalid(
        &self,
        d: &Self::Deployment,
        errors: &[ValidationError],
        now: Timestamp,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// A new set's name collided with a foreign set: record it; returns when to look again.
    fn record_collision(
        &self,
        d: &Self::Deployment,
        name: &str,
        collision_count: i32,
    ) -> impl Future<Output = Result<Option<Self::Deployment>, Error>> + Send;
    /// Creating the new set failed with `error`: record it on the deployment.
    fn record_create_failed(
        &self,
        d: &Self::Deployment,
        name: &str,
        error: &str,
        now: Timestamp,
    ) -> impl Future<Output = Result<Option<Self::Deployment>, Error>> + Send;
    /// Writes the deployment's status from the plan's hub status (`None`: the plan left it) and its machines.
    fn write_deployment_status(
        &self,
        d: &Self::Deployment,
        hub: &mcm::MachineDeployment,
        status: Option<&mcm::MachineDeploymentStatus>,
        machines: &[Self::Machine],
    ) -> impl Future<Output = Result<Option<Self::Deployment>, Error>> + Send;

    /// Before the set's plan: repairs a pass cut short (the CAPI flavour's missing infrastructure clones).
    fn before_plan(&self, set: &Self::Set, machines: &[Self::Machine]) -> impl Future<Output = ()> + Send;
    /// What creating machines of `set` needs this pass; `Err`: no machine can be created (the message).
    fn create_context(&self, set: &Self::Set) -> impl Future<Output = Result<Self::CreateContext, String>> + Send;
    /// Creates one machine of `set`.
    fn create_machine(
        &self,
        api: &Api<Self::Machine>,
        set: &Self::Set,
        hub: &mcm::MachineSet,
        context: &Self::CreateContext,
    ) -> impl Future<Output = Result<Self::Machine, String>> + Send;
    /// Deletes one machine; returns it as it is afterwards (`None`: gone at once).
    fn delete_machine(
        &self,
        api: &Api<Self::Machine>,
        machine: &Self::Machine,
        now: Timestamp,
    ) -> impl Future<Output = Result<Option<Self::Machine>, kube::Error>> + Send;
    /// Where deleted stale machines are counted (MCM's `mcm_machine_stale_machines_total`; the MCM flavour's).
    fn stale_machines(&self) -> Option<&prometheus_client::metrics::counter::Counter> {
        None
    }
    /// Writes the set's status from its machines and the pass's failure.
    fn write_set_status(
        &self,
        set: &Self::Set,
        hub: &mcm::MachineSet,
        machines: &[Self::Machine],
        failure: Option<&ReplicaFailure>,
        now: Timestamp,
    ) -> impl Future<Output = Result<Option<Self::Set>, Error>> + Send;
}

/// Waits until the flavour's stores show every write of a pass (see [`settle::Written::settle`]); what they do
/// not show in time is returned.
pub(crate) async fn settle<F: Flavour>(f: &F, written: WrittenBy<F>, what: &str) -> Option<WrittenBy<F>> {
    written.settle(f.machines(), f.sets(), f.deployments(), what).await
}

/// A set's or deployment's pass, settled: what the stores did not show in time is carried to `key`'s next pass.
async fn settle_pass<F: Flavour>(f: &F, written: WrittenBy<F>, key: &str) {
    if let Some(unseen) = settle(f, written, key).await {
        f.unsettled().carry(key, unseen);
    }
}

/// Whether `key`'s pass must wait for an earlier one's writes first (when to look again).
fn held<F: Flavour>(f: &F, key: &str) -> Option<Action> {
    let again = f.unsettled().hold(key, f.machines(), f.sets(), f.deployments())?;
    tracing::debug!(object = %key, "waiting for the watches to show an earlier pass's writes");
    Some(Action::requeue(again))
}

/// One MachineDeployment pass with its bookkeeping: the pass, the stores settled (also after an error, so the
/// retry starts from what this pass did), the back-off forgotten; the requeue.
pub(crate) async fn deployment_pass<F: Flavour>(
    f: &F,
    d: &F::Deployment,
    hub: &mcm::MachineDeployment,
    now: Timestamp,
) -> Result<Action, Error> {
    let key = key_of(d);
    let carried = format!("deployment:{key}");
    if let Some(later) = held(f, &carried) {
        return Ok(later);
    }
    let mut written = WrittenBy::<F>::default();
    let result = deployment::run(f, d, hub, now, &mut written).await;
    settle_pass(f, written, &carried).await;
    let next = result?;
    f.retries().reset(&format!("{}deployment:{key}", F::RETRY_PREFIX));
    let resync = f.config().resync;
    Ok(next.map_or_else(Action::await_change, |after| Action::requeue(after.min(resync))))
}

/// One MachineSet pass with its bookkeeping: the pass, the stores settled (also after an error: a pass that created
/// machines and then failed must not create them again); a failed creation or deletion backs off.
pub(crate) async fn set_pass<F: Flavour>(f: &F, set: &F::Set) -> Result<Action, Error> {
    let key = key_of(set);
    let carried = format!("set:{key}");
    if let Some(later) = held(f, &carried) {
        return Ok(later);
    }
    let mut written = WrittenBy::<F>::default();
    let result = set::run(f, set, &mut written).await;
    settle_pass(f, written, &carried).await;
    let gate = format!("{}set-create:{key}", F::RETRY_PREFIX);
    Ok(if result? {
        // Creating or deleting machines failed: the condition says so; try again with back-off.
        Action::requeue(f.retries().fail(&gate, RetryClass::Api, f.config(), None))
    } else {
        f.retries().reset(&gate);
        f.retries().reset(&format!("{}set:{key}", F::RETRY_PREFIX));
        Action::requeue(f.config().resync)
    })
}

/// After an API error in a pass over `object` (`set` or `deployment`): back off per object.
pub(crate) fn error_policy<F: Flavour, K: Object>(f: &F, what: &str, object: &K, error: &Error) -> Action {
    let key = key_of(object);
    crate::controllers::error::log_reconcile_failure!(error, object = %key);
    Action::requeue(f.retries().fail(
        &format!("{}{what}:{key}", F::RETRY_PREFIX),
        error.retry_class(),
        f.config(),
        None,
    ))
}
