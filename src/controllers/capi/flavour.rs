//! The CAPI flavour (`cluster.x-k8s.io/v1beta2`) behind the shared executors' seam (`controllers::replicas`): CAPI
//! objects convert to hub values (`convert`), hub patches become CAPI patches (the object converted before and after
//! the patch, the difference written), statuses carry core's v1beta2 conditions (`lifecycle::capi_replicas`) next
//! to MCM's, and a new Machine comes with its MCMMachine clone (`clones`).
//!
//! Not carried over from the MCM flavour: auto-preservation and the in-place propagation of `nodeTemplate` and the
//! machine configuration (CAPI Machines do not hold them; the MCMMachine does), and the collision count (CAPI's
//! status has none, so a hash collision with a foreign set is a Warning event, docs/capi-mode.md).

use std::borrow::Cow;
use std::sync::Arc;

use crate::controllers::events::Recorder;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::clones::{clone_of, ensure_bootstrap_clones, ensure_clones, new_machine, post, template_of};
use super::{CapiContext, capi_controller_ref, capi_owner_refs};
use crate::api::capi::{
    CLUSTER_NAME_LABEL, DEPLOYMENT_NAME_LABEL, Machine, MachineDeployment, MachineDeploymentStatus, MachineSet,
    MachineSetStatus,
};
use crate::api::infra::{MCMMachine, MCMMachineTemplate};
use crate::api::mcm;
use crate::api::mcm::names::MACHINE_FINALIZER;
use crate::controllers::context::RetryBook;
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::{Error, is_conflict, is_not_found};
use crate::controllers::replicas::Flavour;
use crate::controllers::replicas::settle::Unsettled;
use crate::controllers::sets::SetOptions;
use crate::controllers::workload::Connection;
use crate::controllers::writes::{guarded, patch_params};
use crate::convert::machine_view::machine_to_hub;
use crate::convert::{
    apply_capi_deployment_defaults, deployment_from_capi, deployment_status_to_capi, deployment_to_capi,
    machine_set_from_capi, machine_set_to_capi, set_status_to_capi,
};
use crate::lifecycle::MachineConfig;
use crate::lifecycle::capi_machine::merge_conditions;
use crate::lifecycle::capi_replicas::{
    Availability, ReplicaObservation, machine_deployment_conditions, machine_set_conditions, replica_counts,
};
use crate::lifecycle::machine_deployment::plan::DeploymentOptions;
use crate::lifecycle::machine_deployment::rollout::max_unavailable;
use crate::lifecycle::machine_deployment::validation::ValidationError;
use crate::lifecycle::machine_set::status::{ReplicaFailure, machine_set_status};
use crate::lifecycle::merge_patch_of;
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::status_patch;

/// The finalizer our MachineDeployment controller holds on CAPI MachineDeployments.
pub const DEPLOYMENT_FINALIZER: &str = "capi.machine.sapcloud.io/machinedeployment";
/// The finalizer our MachineSet controller holds on CAPI MachineSets.
pub const SET_FINALIZER: &str = "capi.machine.sapcloud.io/machineset";

impl Flavour for CapiContext {
    type Machine = Machine;
    type Set = MachineSet;
    type Deployment = MachineDeployment;
    type CreateContext = MCMMachineTemplate;

    const DEPLOYMENT_FINALIZER: &'static str = DEPLOYMENT_FINALIZER;
    const RETRY_PREFIX: &'static str = "capi-";
    const SET_FINALIZER: &'static str = SET_FINALIZER;

    fn control(&self) -> &Client {
        &self.control
    }
    fn retries(&self) -> &RetryBook {
        &self.retries
    }
    fn unsettled(&self) -> &Unsettled<Machine, MachineSet, MachineDeployment> {
        &self.unsettled
    }
    fn config(&self) -> &MachineConfig {
        &self.config
    }
    fn deployment_options(&self) -> DeploymentOptions {
        self.options.deployment
    }
    fn set_options(&self) -> &SetOptions {
        &self.options
    }
    async fn ready(&self) {
        CapiContext::ready(self).await;
    }
    fn freeze_events(&self) -> &Recorder {
        &self.set_events
    }
    fn machines(&self) -> &Store<Machine> {
        &self.machines
    }
    fn sets(&self) -> &Store<MachineSet> {
        &self.sets
    }
    fn deployments(&self) -> &Store<MachineDeployment> {
        &self.deployments
    }
    async fn workload(&self, d: &MachineDeployment) -> Option<Arc<Connection>> {
        self.workloads.get(&d.namespace().unwrap_or_default(), &d.spec.cluster_name).await.nodes().cloned()
    }
    fn set_events(&self) -> &Recorder {
        &self.set_events
    }
    fn deployment_events(&self) -> &Recorder {
        &self.deployment_events
    }

    fn controller_ref(kind: &str, owner: &ObjectMeta) -> OwnerReference {
        capi_controller_ref(kind, owner)
    }
    fn set_selector(set: &MachineSet) -> Cow<'_, LabelSelector> {
        Cow::Borrowed(&set.spec.selector)
    }
    fn deployment_selector(d: &MachineDeployment) -> Cow<'_, LabelSelector> {
        Cow::Borrowed(&d.spec.selector)
    }
    fn deployment_to_hub(d: &MachineDeployment) -> Cow<'_, mcm::MachineDeployment> {
        let mut defaulted = d.clone();
        apply_capi_deployment_defaults(&mut defaulted);
        let mut hub = deployment_from_capi(&defaulted);
        hub_finalizer(&mut hub.metadata, DEPLOYMENT_FINALIZER);
        Cow::Owned(hub)
    }
    fn set_to_hub(set: &MachineSet) -> Cow<'_, mcm::MachineSet> {
        let mut hub = machine_set_from_capi(set);
        hub_finalizer(&mut hub.metadata, SET_FINALIZER);
        Cow::Owned(hub)
    }
    fn machine_to_hub<'a>(&self, machine: &'a Machine) -> Cow<'a, mcm::Machine> {
        Cow::Owned(machine_to_hub(machine, self.infra_of(machine).as_deref()))
    }
    fn node_preserve(&self, _: &mcm::Machine) -> Option<String> {
        None
    }

    fn deployment_patch(hub: &mcm::MachineDeployment, patch: &Value) -> Option<Value> {
        capi_patch(hub, patch, deployment_to_capi)
    }
    fn set_frozen_patch(set: &MachineSet, frozen: Option<&mcm::MachineSetCondition>) -> Option<Value> {
        let old = set.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        let frozen = frozen.map(|c| {
            frozen_condition(&c.status, c.reason.as_deref(), c.message.as_deref(), c.last_transition_time.as_ref())
        });
        frozen_conditions_patch(&old, frozen)
    }
    fn deployment_frozen_patch(
        d: &MachineDeployment,
        frozen: Option<&mcm::MachineDeploymentCondition>,
    ) -> Option<Value> {
        let old = d.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        let frozen = frozen.map(|c| {
            frozen_condition(&c.status, c.reason.as_deref(), c.message.as_deref(), c.last_transition_time.as_ref())
        });
        frozen_conditions_patch(&old, frozen)
    }
    fn set_patch(set: &MachineSet, hub: &mcm::MachineSet, patch: &Value) -> Option<Value> {
        let capi = capi_patch(hub, patch, machine_set_to_capi)?;
        // The hub patch's guard is on the hub's version, which is the CAPI object's.
        Some(if patch["metadata"].get("resourceVersion").is_some() {
            guarded(capi, set.resource_version())
        } else {
            capi
        })
    }
    fn machine_patch(_: &Value) -> Option<Value> {
        None
    }
    fn complete_transfer(to: &MachineSet, patch: &mut Value) {
        patch["metadata"]["labels"][crate::api::capi::SET_NAME_LABEL] = Value::from(to.name_any());
        if let Some(version) = &to.spec.template.spec.version {
            patch["spec"]["version"] = Value::from(version.clone());
        }
    }
    fn new_set(d: &MachineDeployment, hub: &mcm::MachineSet) -> MachineSet {
        let mut s = machine_set_to_capi(hub);
        s.status = None;
        s.spec.cluster_name = d.spec.cluster_name.clone();
        s.spec.deletion = d.spec.deletion.clone();
        if s.spec.template.spec.cluster_name.is_empty() {
            s.spec.template.spec.cluster_name = d.spec.cluster_name.clone();
        }
        capi_owner_refs(&mut s.metadata);
        let labels = s.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(CLUSTER_NAME_LABEL.to_string(), d.spec.cluster_name.clone());
        labels.insert(DEPLOYMENT_NAME_LABEL.to_string(), d.name_any());
        s
    }

    async fn report_invalid(
        &self,
        d: &MachineDeployment,
        errors: &[ValidationError],
        _: Timestamp,
    ) -> Result<(), Error> {
        if self.reported.first(&key_of(d), d.metadata.generation.unwrap_or(0)) {
            let note = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            tracing::warn!(machine_deployment = %key_of(d), "not reconciled: {note}");
            publish_to(&self.deployment_events, d, EventSpec::warning("InvalidSpec", note)).await;
        }
        Ok(())
    }
    async fn record_collision(
        &self,
        d: &MachineDeployment,
        name: &str,
        _: i32,
    ) -> Result<Option<MachineDeployment>, Error> {
        // CAPI's status has no collisionCount: the hash cannot move on (docs/capi-mode.md).
        tracing::warn!(machine_deployment = %key_of(d), machine_set = %name, "template hash collision with a foreign MachineSet");
        let note = format!("MachineSet {name} exists with another template; rename or delete it");
        publish_to(&self.deployment_events, d, EventSpec::warning("HashCollision", note)).await;
        Ok(None)
    }
    async fn record_create_failed(
        &self,
        d: &MachineDeployment,
        _: &str,
        error: &str,
        _: Timestamp,
    ) -> Result<Option<MachineDeployment>, Error> {
        publish_to(&self.deployment_events, d, EventSpec::warning("FailedCreate", error.to_string())).await;
        Ok(None)
    }
    /// Core's conditions follow the Machines even when MCM's status did not move.
    async fn write_deployment_status(
        &self,
        d: &MachineDeployment,
        hub: &mcm::MachineDeployment,
        status: Option<&mcm::MachineDeploymentStatus>,
        machines: &[Machine],
    ) -> Result<Option<MachineDeployment>, Error> {
        let Some(status) = status.or(hub.status.as_ref()) else { return Ok(None) };
        let old = d.status.clone().unwrap_or_default();
        let mut new = deployment_status(&old, d, status);
        let deleting = d.metadata.deletion_timestamp.is_some();
        let observation = ReplicaObservation {
            desired: if deleting { 0 } else { d.spec.replicas.unwrap_or(1) },
            current: new.replicas.unwrap_or(0),
            machines,
            deleting,
            now: Timestamp::now(),
        };
        let availability = Availability {
            replicas: d.spec.replicas.unwrap_or(1),
            available: new.available_replicas.unwrap_or(0),
            max_unavailable: max_unavailable(hub),
        };
        let core = machine_deployment_conditions(&observation, availability, old.conditions.as_deref().unwrap_or(&[]));
        let mut conditions = new.conditions.take().unwrap_or_default();
        merge_conditions(&mut conditions, core);
        new.conditions = Some(conditions);
        let Some(mut patch) = status_patch(&old, &new) else { return Ok(None) };
        if patch["status"].get("conditions").is_some() {
            patch["metadata"] = json!({"resourceVersion": d.resource_version()});
        }
        let api: Api<MachineDeployment> = Api::namespaced(self.control.clone(), &d.namespace().unwrap_or_default());
        api.patch_status(&d.name_any(), &patch_params(), &Patch::Merge(&patch))
            .await
            .map(Some)
            .map_err(|e| Error::kube("patch status of", format!("MachineDeployment {}", key_of(d)), e))
    }

    async fn before_plan(&self, set: &MachineSet, machines: &[Machine]) {
        ensure_clones(self, set, machines).await;
        ensure_bootstrap_clones(self, set, machines).await;
    }
    async fn create_context(&self, set: &MachineSet) -> Result<MCMMachineTemplate, String> {
        template_of(self, set).await
    }
    /// Creates the Machine, then its MCMMachine clone (a failed clone comes on the next pass: `ensure_clones`).
    async fn create_machine(
        &self,
        api: &Api<Machine>,
        set: &MachineSet,
        hub: &mcm::MachineSet,
        template: &MCMMachineTemplate,
    ) -> Result<Machine, String> {
        let m = api.create(&post(), &new_machine(set, hub)).await.map_err(|e| format!("Error creating: {e}"))?;
        let clones: Api<MCMMachine> = Api::namespaced(self.control.clone(), &set.namespace().unwrap_or_default());
        match clones.create(&post(), &clone_of(template, &m)).await {
            Ok(_) => {}
            Err(e) if is_conflict(&e) => {}
            Err(e) => tracing::info!(machine = %key_of(&m), error = %e, "creating the MCMMachine failed; next pass"),
        }
        if let Some(template) = &set.spec.template.spec.bootstrap.config_ref
            && let Err(e) = super::bootstrap::create_clone(&self.kinds, &self.control, template, &m).await
        {
            tracing::info!(machine = %key_of(&m), error = %e, "creating the bootstrap config failed; next pass");
        }
        Ok(m)
    }
    /// Deletes the Machine; our Machine controller drains and has the MCMMachine deleted.
    async fn delete_machine(
        &self,
        api: &Api<Machine>,
        machine: &Machine,
        _: Timestamp,
    ) -> Result<Option<Machine>, kube::Error> {
        match api.delete(&machine.name_any(), &DeleteParams::default()).await {
            Ok(either) => Ok(either.left()),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }
    async fn write_set_status(
        &self,
        set: &MachineSet,
        hub: &mcm::MachineSet,
        machines: &[Machine],
        failure: Option<&ReplicaFailure>,
        now: Timestamp,
    ) -> Result<Option<MachineSet>, Error> {
        let views: Vec<mcm::Machine> = machines.iter().map(|m| self.machine_to_hub(m).into_owned()).collect();
        let hub_status = machine_set_status(hub, &views, failure, now);
        let old = set.status.clone().unwrap_or_default();
        let mut new = set_status(&old, set, &hub_status);
        // Core counts Machines by their conditions, not MCM's phases: a Machine without its Node is not available.
        let counts = replica_counts(machines);
        new.ready_replicas = Some(counts.ready);
        new.available_replicas = Some(counts.available);
        new.up_to_date_replicas = Some(counts.up_to_date);
        let deleting = set.metadata.deletion_timestamp.is_some();
        let observation = ReplicaObservation {
            desired: if deleting { 0 } else { set.spec.replicas.unwrap_or(1) },
            current: new.replicas.unwrap_or(0),
            machines,
            deleting,
            now,
        };
        let core = machine_set_conditions(&observation, old.conditions.as_deref().unwrap_or(&[]));
        let mut conditions = new.conditions.take().unwrap_or_default();
        merge_conditions(&mut conditions, core);
        new.conditions = Some(conditions);
        let Some(mut patch) = status_patch(&old, &new) else { return Ok(None) };
        // The overshoot freeze and the health check's marks race this list: never overwrite their change.
        if patch["status"].get("conditions").is_some() {
            patch["metadata"] = json!({"resourceVersion": set.resource_version()});
        }
        let api: Api<MachineSet> = Api::namespaced(self.control.clone(), &set.namespace().unwrap_or_default());
        api.patch_status(&set.name_any(), &patch_params(), &Patch::Merge(&patch))
            .await
            .map(Some)
            .map_err(|e| Error::kube("patch status of", format!("MachineSet {}", key_of(set)), e))
    }
}

/// Our CAPI finalizer shown under the hub's name, so the shared decisions see the object held (without this
/// they planned to add it on every pass).
fn hub_finalizer(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, ours: &str) {
    if let Some(list) = meta.finalizers.as_mut()
        && list.iter().any(|f| f == ours)
    {
        list.retain(|f| f != ours && f != MACHINE_FINALIZER);
        list.push(MACHINE_FINALIZER.to_string());
    }
}

/// The CAPI patch for a hub patch: the hub object patched, both converted, the difference (status left out).
fn capi_patch<H, C>(hub: &H, patch: &Value, convert: fn(&H) -> C) -> Option<Value>
where
    H: Serialize + DeserializeOwned,
    C: Serialize,
{
    let mut value = serde_json::to_value(hub).ok()?;
    json_patch::merge(&mut value, patch);
    let after: H = serde_json::from_value(value).ok()?;
    let strip = |c: &C| {
        let mut v = serde_json::to_value(c).ok()?;
        if let Some(map) = v.as_object_mut() {
            map.remove("status");
        }
        Some(v)
    };
    merge_patch_of(&strip(&convert(hub))?, &strip(&convert(&after))?)
}

/// `key=value,...` of a selector's labels (`status.selector`, for the scale subresource).
pub(super) fn selector_string(s: &LabelSelector) -> String {
    s.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// The CAPI set status from the hub's: counts and MCM's conditions converted, CAPI's own conditions kept.
fn set_status(old: &MachineSetStatus, set: &MachineSet, hub: &mcm::MachineSetStatus) -> MachineSetStatus {
    let mut new = set_status_to_capi(hub);
    let mut conditions: Vec<_> = old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !matches!(c.type_.as_str(), "ReplicaFailure" | "Frozen"))
        .cloned()
        .collect();
    merge_conditions(&mut conditions, new.conditions.take().unwrap_or_default());
    new.conditions = (!conditions.is_empty()).then_some(conditions);
    new.selector = Some(selector_string(&set.spec.selector));
    new.extra = old.extra.clone();
    new
}

/// The CAPI deployment status from the hub's: counts and MCM's conditions, CAPI's own conditions kept, the phase.
fn deployment_status(
    old: &MachineDeploymentStatus,
    d: &MachineDeployment,
    hub: &mcm::MachineDeploymentStatus,
) -> MachineDeploymentStatus {
    let mut new = deployment_status_to_capi(hub);
    let mut conditions: Vec<_> = old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !matches!(c.type_.as_str(), "Available" | "Progressing" | "ReplicaFailure" | "Frozen"))
        .cloned()
        .collect();
    merge_conditions(&mut conditions, new.conditions.take().unwrap_or_default());
    new.conditions = (!conditions.is_empty()).then_some(conditions);
    new.selector = Some(selector_string(&d.spec.selector));
    let desired = d.spec.replicas.unwrap_or(1);
    let replicas = new.replicas.unwrap_or(0);
    new.phase = Some(
        match replicas.cmp(&desired) {
            std::cmp::Ordering::Less => "ScalingUp",
            std::cmp::Ordering::Greater => "ScalingDown",
            std::cmp::Ordering::Equal => "Running",
        }
        .to_string(),
    );
    new.extra = old.extra.clone();
    new
}

/// MCM's `Frozen` condition as a metav1 condition.
fn frozen_condition(
    status: &mcm::ConditionStatus,
    reason: Option<&str>,
    message: Option<&str>,
    time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let status = serde_json::to_value(status).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
    crate::convert::condition_to_capi("Frozen", &status, reason, message, time)
}

/// The status patch putting `frozen` in place of the `Frozen` condition among `old` (`None`: removing it); `None`
/// when that changes nothing (a current one of the same status and reason is kept as it is).
fn frozen_conditions_patch(
    old: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    frozen: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
) -> Option<Value> {
    let kept = crate::lifecycle::freeze::replace_frozen(
        old,
        frozen,
        |c| c.type_ == "Frozen",
        |current, new| current.status == new.status && current.reason == new.reason,
    )?;
    Some(json!({"conditions": kept}))
}
