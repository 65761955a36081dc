//! The MCMMachine behind the machine-flow seam (`controllers::vm`): its class resolved before the flow, the VM's
//! identity in `spec.providerID` (and `spec.failureDomain`), and one status patch per write with MCM's fields, the
//! contract fields and the conditions. No target cluster: the Machine's Node is CAPI core's (or our CAPI mode's).

use jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::{Map, json};

use super::InfraContext;
use super::status::{Write, write_status};
use crate::api::infra::MCMMachine;
use crate::api::mcm::Machine;
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::Error;
use crate::controllers::vm::{Cloud, NotPrepared, Stage, VmFlavour};
use crate::controllers::writes;
use crate::lifecycle::MachineConfig;
use crate::lifecycle::create::{self, Vm};
use crate::lifecycle::infra::{self, MACHINE_FINALIZER};
use crate::lifecycle::status::{EventSpec, StatusPatch};
use crate::providers::DriverError;

/// An MCMMachine, for one pass of a flow.
pub(crate) struct InfraVm<'a> {
    /// The provider's context.
    pub ctx: &'a InfraContext,
    /// MCMMachines of the object's namespace.
    pub api: &'a Api<MCMMachine>,
    /// The class's driver and request, resolved by the controller.
    pub cloud: Result<Cloud, DriverError>,
    /// The failure domain to record in `spec.failureDomain` (the owner's).
    pub failure_domain: Option<String>,
    /// Where the VM was placed (the owner's failure domain, or the zone the class names): reported in status once
    /// provisioned, unless the providerID names the zone ([`infra::located`]).
    pub located: Option<String>,
    /// Now (condition times).
    pub now: Timestamp,
}

impl VmFlavour for InfraVm<'_> {
    type Object = MCMMachine;
    const KIND: &'static str = "MCMMachine";

    fn config(&self) -> &MachineConfig {
        &self.ctx.config
    }
    async fn publish(&self, obj: &MCMMachine, event: EventSpec) {
        publish_to(&self.ctx.recorder, obj, event).await;
    }
    fn target(&self) -> bool {
        false
    }
    fn refusals(&self) -> &crate::controllers::vm::refusals::ClassRefusals {
        &self.ctx.refusals
    }

    async fn cloud(&self, _: &MCMMachine, _: &Machine) -> Result<Cloud, DriverError> {
        self.cloud.clone()
    }
    async fn prepare(&self, _: &MCMMachine, _: &Machine) -> Result<Cloud, NotPrepared> {
        self.cloud.clone().map_err(NotPrepared::Driver)
    }
    fn deleting_now(&self, obj: &MCMMachine) -> bool {
        let latest = self.ctx.machines.get(&ObjectRef::from_obj(obj));
        latest.is_none_or(|m| m.metadata.deletion_timestamp.is_some())
    }
    fn node_exists(&self, _: &str) -> bool {
        false
    }
    /// Identity in spec first (clusterctl move drops status): a restart from here adopts the VM.
    async fn record(&self, obj: &MCMMachine, _: &Machine, vm: &Vm) -> Result<Option<MCMMachine>, Error> {
        let mut spec = Map::new();
        if obj.spec.provider_id.as_deref() != Some(vm.provider_id.as_str()) {
            spec.insert("providerID".into(), json!(vm.provider_id));
        }
        if obj.spec.failure_domain.is_none()
            && let Some(fd) = &self.failure_domain
        {
            spec.insert("failureDomain".into(), json!(fd));
        }
        if spec.is_empty() {
            return Ok(None);
        }
        // The spec write bumps the generation: the conditions written next observe the new one.
        writes::merge(self.api, obj, &json!({ "spec": spec }), "record the VM on").await.map(Some)
    }
    async fn write_status(
        &self,
        obj: &MCMMachine,
        hub: &Machine,
        patch: StatusPatch,
        stage: Stage<'_>,
    ) -> Result<Option<MCMMachine>, Error> {
        let write = match stage {
            Stage::Creating => Write { ready: Some(infra::ready(&patch.applied(hub))), patch, ..Default::default() },
            Stage::Provisioned => {
                let now = provisioned(obj, patch.applied(hub));
                Write {
                    ready: Some(infra::ready(&now)),
                    provisioned: Some(true),
                    failure_domain: infra::located(create::provider_id(&now), self.located.as_deref()),
                    patch,
                    ..Default::default()
                }
            }
            Stage::Deleting(failure) => Write { ready: Some(infra::deleting(failure)), patch, ..Default::default() },
        };
        write_status(self.ctx, self.api, obj, hub, write, self.now).await.map(|()| None)
    }

    async fn remove_finalizer(&self, obj: &MCMMachine) -> Result<(), Error> {
        writes::remove_finalizer(self.api, obj, MACHINE_FINALIZER).await?;
        self.ctx.retries.forget(&key_of(obj));
        tracing::debug!(mcmmachine = %obj.name_any(), "finalizer removed");
        Ok(())
    }
}

/// The hub view of a provisioned MCMMachine: the providerID its spec now names.
fn provisioned(obj: &MCMMachine, mut hub: Machine) -> Machine {
    if obj.spec.provider_id.is_some() {
        hub.spec.provider_id = obj.spec.provider_id.clone();
    }
    hub
}
