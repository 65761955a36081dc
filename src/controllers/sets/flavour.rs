//! The MCM flavour (`machine.sapcloud.io`) behind the shared executors' seam (`controllers::replicas`): the hub
//! types are its own, so conversions borrow and patches pass through.

use std::borrow::Cow;
use std::sync::Arc;

use crate::controllers::events::Recorder;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::SetsContext;
use super::machine_deployment::{report_invalid, write_status};
use crate::api::mcm::names::MACHINE_FINALIZER;
use crate::api::mcm::names::NODE_LABEL;
use crate::api::mcm::names::PRESERVE;
use crate::api::mcm::{
    ConditionStatus, Machine, MachineDeployment, MachineDeploymentCondition, MachineDeploymentConditionType,
    MachineDeploymentStatus, MachineSet, MachineSetCondition, MachineSetConditionType, MachineStatus,
};
use crate::controllers::context::RetryBook;
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::{Error, is_not_found};
use crate::controllers::replicas::Flavour;
use crate::controllers::replicas::settle::Unsettled;
use crate::controllers::sets::SetOptions;
use crate::controllers::workload::Connection;
use crate::controllers::writes::{MANAGER, patch_params};
use crate::lifecycle::MachineConfig;
use crate::lifecycle::claim::controller_ref;
use crate::lifecycle::freeze::replace_frozen;
use crate::lifecycle::machine_deployment::plan::{DeploymentOptions, create_failed};
use crate::lifecycle::machine_deployment::status::status_update_required;
use crate::lifecycle::machine_deployment::status::{remove_condition, set_condition};
use crate::lifecycle::machine_deployment::validation::ValidationError;
use crate::lifecycle::machine_set::machines::{deleting_status, machine_from_template};
use crate::lifecycle::machine_set::status::{self as set_status, ReplicaFailure, machine_set_status};
use crate::lifecycle::status::EventSpec;
use crate::lifecycle::status_patch;

impl Flavour for SetsContext {
    type Machine = Machine;
    type Set = MachineSet;
    type Deployment = MachineDeployment;
    type CreateContext = Machine;

    const DEPLOYMENT_FINALIZER: &'static str = MACHINE_FINALIZER;
    const RETRY_PREFIX: &'static str = "";
    const SET_FINALIZER: &'static str = MACHINE_FINALIZER;

    fn control(&self) -> &Client {
        &self.base.control
    }
    fn stale_machines(&self) -> Option<&prometheus_client::metrics::counter::Counter> {
        Some(&self.base.metrics.machines.stale)
    }
    fn retries(&self) -> &RetryBook {
        &self.base.retries
    }
    fn unsettled(&self) -> &Unsettled {
        &self.unsettled
    }
    fn config(&self) -> &MachineConfig {
        &self.base.config
    }
    fn deployment_options(&self) -> DeploymentOptions {
        self.options.deployment
    }
    fn set_options(&self) -> &SetOptions {
        &self.options
    }
    async fn ready(&self) {
        SetsContext::ready(self).await;
    }
    fn freeze_events(&self) -> &Recorder {
        &self.safety_events
    }
    fn machines(&self) -> &Store<Machine> {
        &self.base.machines
    }
    fn sets(&self) -> &Store<MachineSet> {
        &self.sets
    }
    fn deployments(&self) -> &Store<MachineDeployment> {
        &self.deployments
    }
    async fn workload(&self, _: &MachineDeployment) -> Option<Arc<Connection>> {
        self.base.workload()
    }
    fn set_events(&self) -> &Recorder {
        &self.set_events
    }
    fn deployment_events(&self) -> &Recorder {
        &self.deployment_events
    }

    fn controller_ref(kind: &str, owner: &ObjectMeta) -> OwnerReference {
        controller_ref(kind, owner)
    }
    fn set_selector(set: &MachineSet) -> Cow<'_, LabelSelector> {
        set.spec.selector.as_ref().map_or_else(|| Cow::Owned(LabelSelector::default()), Cow::Borrowed)
    }
    fn deployment_selector(d: &MachineDeployment) -> Cow<'_, LabelSelector> {
        d.spec.selector.as_ref().map_or_else(|| Cow::Owned(LabelSelector::default()), Cow::Borrowed)
    }
    fn deployment_to_hub(d: &MachineDeployment) -> Cow<'_, MachineDeployment> {
        Cow::Borrowed(d)
    }
    fn set_to_hub(set: &MachineSet) -> Cow<'_, MachineSet> {
        Cow::Borrowed(set)
    }
    fn machine_to_hub<'a>(&self, machine: &'a Machine) -> Cow<'a, Machine> {
        Cow::Borrowed(machine)
    }
    fn node_preserve(&self, machine: &Machine) -> Option<String> {
        let node = self.base.node(machine.labels().get(NODE_LABEL)?)?;
        node.annotations().get(PRESERVE).cloned()
    }

    fn deployment_patch(_: &MachineDeployment, patch: &Value) -> Option<Value> {
        Some(patch.clone())
    }
    fn set_frozen_patch(set: &MachineSet, frozen: Option<&MachineSetCondition>) -> Option<Value> {
        let old = set.status.as_ref().and_then(|s| s.machine_set_condition.clone()).unwrap_or_default();
        // A set frozen already stays as it is.
        let kept = replace_frozen(
            &old,
            frozen.cloned(),
            |c| c.type_ == MachineSetConditionType::Frozen,
            |current, _| current.status == ConditionStatus::True,
        )?;
        Some(json!({"machineSetCondition": if kept.is_empty() { json!(null) } else { json!(kept) }}))
    }
    fn deployment_frozen_patch(d: &MachineDeployment, frozen: Option<&MachineDeploymentCondition>) -> Option<Value> {
        let old = d.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        let mut conditions = old.clone();
        match frozen {
            Some(frozen) => set_condition(&mut conditions, frozen.clone()),
            None => remove_condition(&mut conditions, MachineDeploymentConditionType::Frozen),
        }
        (conditions != old).then(|| json!({"conditions": conditions}))
    }
    fn set_patch(_: &MachineSet, _: &MachineSet, patch: &Value) -> Option<Value> {
        Some(patch.clone())
    }
    fn machine_patch(patch: &Value) -> Option<Value> {
        Some(patch.clone())
    }
    fn new_set(_: &MachineDeployment, hub: &MachineSet) -> MachineSet {
        hub.clone()
    }

    async fn report_invalid(
        &self,
        d: &MachineDeployment,
        errors: &[ValidationError],
        now: Timestamp,
    ) -> Result<(), Error> {
        report_invalid(self, d, errors, now).await
    }
    async fn record_collision(
        &self,
        d: &MachineDeployment,
        _: &str,
        collision_count: i32,
    ) -> Result<Option<MachineDeployment>, Error> {
        let old = d.status.clone().unwrap_or_default();
        let new = MachineDeploymentStatus { collision_count: Some(collision_count), ..old.clone() };
        write_status(self, d, &old, &new).await
    }
    async fn record_create_failed(
        &self,
        d: &MachineDeployment,
        name: &str,
        error: &str,
        now: Timestamp,
    ) -> Result<Option<MachineDeployment>, Error> {
        let (status, event) = create_failed(d, name, error, now);
        let old = d.status.clone().unwrap_or_default();
        let updated =
            if status_update_required(&old, &status) { write_status(self, d, &old, &status).await? } else { None };
        publish_to(&self.deployment_events, d, EventSpec::warning(event.reason, event.note)).await;
        Ok(updated)
    }
    async fn write_deployment_status(
        &self,
        d: &MachineDeployment,
        _: &MachineDeployment,
        status: Option<&MachineDeploymentStatus>,
        _: &[Machine],
    ) -> Result<Option<MachineDeployment>, Error> {
        let Some(status) = status else { return Ok(None) };
        write_status(self, d, &d.status.clone().unwrap_or_default(), status).await
    }

    async fn before_plan(&self, _: &MachineSet, _: &[Machine]) {}
    async fn create_context(&self, set: &MachineSet) -> Result<Machine, String> {
        Ok(machine_from_template(set))
    }
    async fn create_machine(
        &self,
        api: &Api<Machine>,
        _: &MachineSet,
        _: &MachineSet,
        template: &Machine,
    ) -> Result<Machine, String> {
        let post = PostParams { field_manager: Some(MANAGER.to_string()), ..Default::default() };
        api.create(&post, template).await.map_err(|e| format!("Error creating: {e}"))
    }
    /// Deletes the machine. MCM's MachineSet controller also writes its status (Terminating, "Deleting machine
    /// from cloud provider"); we only note it on the copy we return, for this pass's counts: the termination
    /// controller writes Terminating with the first step of the deletion flow at once, and a second write per
    /// machine would change nothing a reader could act on.
    async fn delete_machine(
        &self,
        api: &Api<Machine>,
        machine: &Machine,
        now: Timestamp,
    ) -> Result<Option<Machine>, kube::Error> {
        let after = match api.delete(&machine.name_any(), &DeleteParams::default()).await {
            Ok(either) => either.left(),
            Err(e) if is_not_found(&e) => None,
            Err(e) => return Err(e),
        };
        let Some(mut after) = after else { return Ok(None) };
        deleting_status(now).apply_to(after.status.get_or_insert_with(MachineStatus::default));
        Ok(Some(after))
    }
    async fn write_set_status(
        &self,
        set: &MachineSet,
        _: &MachineSet,
        machines: &[Machine],
        failure: Option<&ReplicaFailure>,
        now: Timestamp,
    ) -> Result<Option<MachineSet>, Error> {
        let status = machine_set_status(set, machines, failure, now);
        if !set_status::status_update_required(set, &status) {
            return Ok(None);
        }
        let Some(mut patch) = status_patch(&set.status.clone().unwrap_or_default(), &status) else {
            return Ok(None);
        };
        // The freeze also writes `machineSetCondition`: when this patch replaces that list, it must not overwrite
        // the freeze's change. Counts alone need no guard (and the deployment's patches of the spec would make
        // every guarded write conflict during a rollout).
        if patch["status"].get("machineSetCondition").is_some() {
            patch["metadata"] = json!({"resourceVersion": set.resource_version()});
        }
        let api: Api<MachineSet> = Api::namespaced(self.base.control.clone(), &set.namespace().unwrap_or_default());
        api.patch_status(&set.name_any(), &patch_params(), &Patch::Merge(&patch))
            .await
            .map(Some)
            .map_err(|e| Error::kube("patch status of", format!("MachineSet {}", key_of(set)), e))
    }
}
