//! The MCM flavour's Machine (`machine.sapcloud.io`) behind the machine-flow seam: its class from the store, user
//! data with a bootstrap token, the `node` label and providerID recorded on the Machine, and the target cluster's
//! Nodes, drain and VolumeAttachments.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{DeleteParams, ListParams, Patch, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use rand::Rng;
use serde_json::json;

use super::{Cloud, NotPrepared, Stage, VmFlavour};
use crate::api::mcm::names::{
    MACHINE_FINALIZER, MACHINE_NAME_LABEL, NODE_FINALIZER, NODE_LABEL, TERMINATING_CONDITION,
};
use crate::api::mcm::{Machine, MachineClass};
use crate::controllers::context::{Context, key_of};
use crate::controllers::driver_request::{class_info, class_secrets, machine_info};
use crate::controllers::error::{Error, is_conflict, is_not_found};
use crate::controllers::writes;
use crate::drain::{self, DrainOptions, DrainOutcome};
use crate::lifecycle::create::{self, Vm};
use crate::lifecycle::delete::{self, ForceReason, NodeDeletion, VolumeAttachments};
use crate::lifecycle::requeue::Next;
use crate::lifecycle::status::{EventSpec, StatusPatch};
use crate::lifecycle::userdata::{self, BOOTSTRAP_TOKEN_NAMESPACE};
use crate::lifecycle::{Effective, MachineConfig, RetryClass, clock};
use crate::providers::{Code, DriverError, MachineRequest};

/// A Machine of the MCM flavour, for one pass of a flow.
pub(crate) struct MachineVm<'a> {
    /// The machine side's context.
    pub ctx: &'a Context,
    /// Machines of the object's namespace.
    pub api: Api<Machine>,
    /// The class, checked by the machine controller (the create flow's; the deletion flow reads the store).
    pub class: Option<&'a MachineClass>,
}

impl<'a> MachineVm<'a> {
    /// The flavour for `machine`.
    pub(crate) fn new(ctx: &'a Context, machine: &Machine, class: Option<&'a MachineClass>) -> Self {
        MachineVm { ctx, api: Api::namespaced(ctx.control.clone(), &machine.namespace().unwrap_or_default()), class }
    }

    fn secret(&self) -> impl Fn(&str, &str) -> Option<Arc<Secret>> + '_ {
        |namespace, name| self.ctx.secret(namespace, name)
    }

    /// The class's driver and the request without user data.
    fn request(&self, machine: &Machine, class: &MachineClass) -> Result<Cloud, DriverError> {
        let driver = self.ctx.drivers.get(class.spec.provider.as_deref().unwrap_or_default())?;
        let request = MachineRequest {
            machine: machine_info(machine),
            class: class_info(class),
            secret: class_secrets(class, &self.secret()),
            last_known_state: machine.status.as_ref().and_then(|s| s.last_known_state.clone()),
        };
        Ok(Cloud { driver, request })
    }

    /// The bootstrap token for a machine: a new one valid for the creation timeout, or the existing Secret's (the
    /// create comes first: a machine is prepared once in the common case).
    async fn bootstrap_token(&self, target: &kube::Client, machine: &Machine) -> Result<String, Error> {
        let secrets: Api<Secret> = Api::namespaced(target.clone(), BOOTSTRAP_TOKEN_NAMESPACE);
        let name = userdata::token_secret_name(&userdata::token_id(&machine.name_any()));
        let object = format!("Secret {BOOTSTRAP_TOKEN_NAMESPACE}/{name}");
        let secret: String = {
            let mut rng = rand::rng();
            let charset = userdata::TOKEN_SECRET_CHARSET;
            (0..userdata::TOKEN_SECRET_LEN).map(|_| charset[rng.random_range(0..charset.len())] as char).collect()
        };
        let effective = Effective::of(machine, &self.ctx.config);
        let expires = clock::plus(Timestamp::now(), effective.creation_timeout);
        let groups = &self.ctx.config.bootstrap_token_auth_extra_groups;
        let wanted = userdata::token_secret(&machine.name_any(), &secret, expires, groups);
        let stored = match secrets.create(&PostParams::default(), &wanted).await {
            Ok(created) => created,
            // An earlier pass made it (or another reconcile): the machine keeps the token it may already have.
            Err(e) if is_conflict(&e) => {
                secrets.get(&name).await.map_err(|e| Error::kube("get bootstrap token", object.clone(), e))?
            }
            Err(e) => return Err(Error::kube("create bootstrap token", object, e)),
        };
        // A token Secret someone left without id or secret cannot be fixed here; a driver error names it.
        Ok(userdata::token_of(&stored).unwrap_or_default())
    }

    /// The drain and what precedes it; `Ok(None)` when there was nothing to drain with. A forced drain goes on
    /// past a failed condition update or cordon (MCM).
    async fn prepare_and_drain(
        &self,
        machine: &Machine,
        target: &kube::Client,
        options: &DrainOptions,
        now: Timestamp,
    ) -> Result<Option<DrainOutcome>, String> {
        if let Some(node) = self.ctx.node(&options.node) {
            let existing = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == TERMINATING_CONDITION));
            let condition = delete::terminating_condition(machine, existing, now);
            let nodes: Api<Node> = Api::all(target.clone());
            let patch = json!({"status": {"conditions": [condition]}});
            match nodes.patch_status(&options.node, &writes::patch_params(), &Patch::Strategic(patch)).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) if options.force => {
                    tracing::warn!(node = %options.node, error = %e, "setting the Terminating condition failed; forced, going on")
                }
                Err(e) => return Err(format!("failure in update of node conditions - {e}")),
            }
        }
        match drain::cordon(target, &options.node).await {
            Ok(()) => {}
            Err(e) if options.force => {
                tracing::warn!(node = %options.node, error = %e, "cordon failed; forced, going on")
            }
            Err(e) => return Err(e.to_string()),
        }
        let driver = self.cloud_of(machine).ok().map(|c| c.driver);
        let drain_client = self.ctx.drain.as_ref().unwrap_or(target);
        drain::drain(drain_client, driver.as_deref(), options).await.map(Some).map_err(|e| e.to_string())
    }

    /// The driver and request of the machine's class in the store.
    pub(crate) fn cloud_of(&self, machine: &Machine) -> Result<Cloud, DriverError> {
        let namespace = machine.namespace().unwrap_or_default();
        let class =
            self.ctx.classes.get(&ObjectRef::new(&machine.spec.class.name).within(&namespace)).ok_or_else(|| {
                let message = format!("MachineClass {:?} does not exist", machine.spec.class.name);
                DriverError::new(Code::FailedPrecondition, message)
            })?;
        self.request(machine, &class).map_err(|e| DriverError::new(Code::FailedPrecondition, e.to_string()))
    }
}

impl VmFlavour for MachineVm<'_> {
    type Object = Machine;
    const KIND: &'static str = "machine";

    fn config(&self) -> &MachineConfig {
        &self.ctx.config
    }
    fn machine_metrics(&self) -> Option<&crate::metrics::MachineMetrics> {
        Some(&self.ctx.metrics.machines)
    }
    fn refusals(&self) -> &super::refusals::ClassRefusals {
        &self.ctx.refusals
    }
    async fn publish_class(&self, _: &Machine, event: EventSpec) {
        if let Some(class) = self.class {
            self.ctx.publish(class, event).await;
        }
    }
    async fn publish(&self, obj: &Machine, event: EventSpec) {
        self.ctx.publish(obj, event).await;
    }
    fn target(&self) -> bool {
        self.ctx.target.is_some()
    }

    async fn cloud(&self, _: &Machine, hub: &Machine) -> Result<Cloud, DriverError> {
        self.cloud_of(hub)
    }
    async fn prepare(&self, _: &Machine, hub: &Machine) -> Result<Cloud, NotPrepared> {
        let Some(class) = self.class else {
            return self.cloud_of(hub).map_err(NotPrepared::Driver);
        };
        let mut cloud = self.request(hub, class).map_err(NotPrepared::Driver)?;
        let token = match &self.ctx.target {
            Some(target) if userdata::wants_token(&cloud.request.secret) => {
                Some(self.bootstrap_token(target, hub).await.map_err(NotPrepared::Api)?)
            }
            _ => None,
        };
        cloud.request.secret = userdata::template(
            &cloud.request.secret,
            &class.name_any(),
            &hub.name_any(),
            token.as_deref(),
        )
        .map_err(|e| {
            NotPrepared::Wait(EventSpec::warning("MissingUserData", e.to_string()), Next::Poll(RetryClass::Other))
        })?;
        Ok(cloud)
    }
    fn deleting_now(&self, obj: &Machine) -> bool {
        let latest = self.ctx.machines.get(&ObjectRef::from_obj(obj));
        latest.is_none_or(|m| m.metadata.deletion_timestamp.is_some())
    }
    fn node_exists(&self, name: &str) -> bool {
        self.ctx.node(name).is_some()
    }
    async fn record(&self, obj: &Machine, hub: &Machine, vm: &Vm) -> Result<Option<Machine>, Error> {
        let Some(patch) = create::adoption_patch(hub, &vm.node_name, &vm.provider_id, self.target()) else {
            return Ok(None);
        };
        writes::merge(&self.api, obj, &patch, "record the VM on").await.map(Some)
    }
    async fn write_status(
        &self,
        _: &Machine,
        hub: &Machine,
        patch: StatusPatch,
        _: Stage<'_>,
    ) -> Result<Option<Machine>, Error> {
        writes::machine_status(self.ctx, &self.api, hub, patch).await.map(|()| None)
    }

    fn node_of_machine(&self, hub: &Machine) -> Option<String> {
        let name = hub.name_any();
        let nodes = self.ctx.nodes.as_ref()?;
        nodes.find(|n| n.labels().get(MACHINE_NAME_LABEL) == Some(&name)).map(|n| n.name_any())
    }
    async fn label(&self, obj: &Machine, node: &str) -> Result<Machine, Error> {
        let patch = json!({"metadata": {"labels": {NODE_LABEL: node}}});
        writes::merge(&self.api, obj, &patch, "label").await
    }
    async fn drain(
        &self,
        _: &Machine,
        hub: &Machine,
        options: &DrainOptions,
        force: Option<ForceReason>,
        now: Timestamp,
    ) -> Result<(), String> {
        // A plan to drain implies a target cluster.
        let Some(target) = &self.ctx.target else { return Ok(()) };
        if let Some(reason) = force {
            tracing::info!(machine = %key_of(hub), ?reason, node = %options.node, "forcing the drain");
        }
        let started = std::time::Instant::now();
        let result = self.prepare_and_drain(hub, target, options, now).await;
        match &result {
            Ok(Some(done)) => {
                self.ctx.metrics.drained(hub, started.elapsed());
                let note = format!(
                    "Drained node {}: {} pods evicted, {} deleted",
                    options.node,
                    done.evicted.len(),
                    done.deleted.len()
                );
                self.ctx.publish(hub, EventSpec::normal("Drained", note)).await;
            }
            Ok(None) => {}
            Err(e) => {
                let note = format!("Draining node {} failed: {e}", options.node);
                self.ctx.publish(hub, EventSpec::warning("FailedDrain", note)).await;
            }
        }
        result.map(|_| ())
    }
    async fn volume_attachments(&self, node: &str) -> Result<VolumeAttachments, Error> {
        let (Some(target), Some(found)) = (&self.ctx.target, self.ctx.node(node)) else {
            return Ok(VolumeAttachments::NoNode);
        };
        let attached = found.status.as_ref().and_then(|s| s.volumes_attached.as_ref()).is_some_and(|v| !v.is_empty());
        if !attached {
            return Ok(VolumeAttachments::NoneAttached);
        }
        let api: Api<VolumeAttachment> = Api::all(target.clone());
        let all = api.list(&ListParams::default()).await.map_err(|e| Error::kube("list", "VolumeAttachments", e))?;
        Ok(VolumeAttachments::Live(
            all.items
                .iter()
                .filter(|va| va.spec.node_name == node && va.metadata.deletion_timestamp.is_none())
                .map(|va| va.name_any())
                .collect(),
        ))
    }
    async fn delete_volume_attachments(&self, names: &[String]) -> Result<(), Error> {
        let Some(target) = &self.ctx.target else { return Ok(()) };
        let api: Api<VolumeAttachment> = Api::all(target.clone());
        for name in names {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(Error::kube("delete", format!("VolumeAttachment {name}"), e)),
            }
        }
        Ok(())
    }
    async fn delete_node(&self, node: &str) -> NodeDeletion {
        let Some(target) = &self.ctx.target else { return NodeDeletion::NoTarget };
        let nodes: Api<Node> = Api::all(target.clone());
        if let Some(found) = self.ctx.node(node)
            && let Err(e) = writes::remove_finalizer(&nodes, &*found, NODE_FINALIZER).await
        {
            return NodeDeletion::Failed(node.to_string(), e.to_string());
        }
        match nodes.delete(node, &DeleteParams::default()).await {
            Ok(_) => NodeDeletion::Deleted(node.to_string()),
            Err(e) if is_not_found(&e) => NodeDeletion::NotFound(node.to_string()),
            Err(e) => NodeDeletion::Failed(node.to_string(), e.to_string()),
        }
    }
    async fn remove_finalizer(&self, obj: &Machine) -> Result<(), Error> {
        writes::remove_finalizer(&self.api, obj, MACHINE_FINALIZER).await
    }
}
