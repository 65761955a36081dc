//! Objects whose kind is only known from a reference (a Machine's bootstrap config, `spec.bootstrap.configRef`; a
//! MachineHealthCheck's remediation template and requests): read, taken, created and deleted through their resource,
//! found by discovery (the group's preferred version, as core resolves a contract-versioned reference) and
//! remembered per group and kind.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch};
use kube::{Api, Client};
use serde_json::Value;

use crate::api::capi::{ContractVersionedObjectReference, Machine};
use crate::controllers::context::key_of;
use crate::controllers::error::{Error, is_not_found};
use crate::controllers::writes::patch_params as params;
use crate::lifecycle::capi_bootstrap::{clone_of_template, config_kind_of_template};

/// The resources of referenced kinds found so far, by group and kind.
#[derive(Default)]
pub(crate) struct ReferencedKinds {
    found: Mutex<HashMap<(String, String), ApiResource>>,
}

impl ReferencedKinds {
    fn remembered(&self, key: &(String, String)) -> Option<ApiResource> {
        self.found.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key).cloned()
    }

    /// The API of the config's kind in `namespace`; `None` when the API server serves no such kind (the config
    /// cannot exist: a bootstrap provider not installed yet).
    async fn api(
        &self,
        client: &Client,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
    ) -> Result<Option<Api<DynamicObject>>, Error> {
        let key = (reference.api_group.clone(), reference.kind.clone());
        let resource = match self.remembered(&key) {
            Some(r) => r,
            None => {
                let group = match kube::discovery::group(client, &reference.api_group).await {
                    Ok(g) => g,
                    Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
                    Err(e) => {
                        return Err(Error::kube("discover", format!("API group {}", reference.api_group), e));
                    }
                };
                let Some((resource, _)) = group.recommended_kind(&reference.kind) else { return Ok(None) };
                self.found.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, resource.clone());
                resource
            }
        };
        Ok(Some(Api::namespaced_with(client.clone(), namespace, &resource)))
    }

    /// The config as JSON, or `None` when it does not exist.
    pub(crate) async fn get(
        &self,
        client: &Client,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
    ) -> Result<Option<Value>, Error> {
        let Some(api) = self.api(client, reference, namespace).await? else { return Ok(None) };
        match api.get_opt(&reference.name).await {
            Ok(Some(object)) => serde_json::to_value(&object)
                .map(Some)
                .map_err(|e| Error::kube("read", describe(reference), kube::Error::SerdeError(e))),
            Ok(None) => Ok(None),
            Err(e) => Err(Error::kube("get", describe(reference), e)),
        }
    }

    /// Applies `patch` (a merge patch of its metadata) to the config.
    pub(crate) async fn patch(
        &self,
        client: &Client,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
        patch: &Value,
    ) -> Result<(), Error> {
        let Some(api) = self.api(client, reference, namespace).await? else { return Ok(()) };
        api.patch(&reference.name, &params(), &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|e| Error::kube("take", describe(reference), e))
    }

    /// Creates `object` (there already is fine): whether it was created; `None` when the kind is not served.
    pub(crate) async fn create(
        &self,
        client: &Client,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
        object: Value,
    ) -> Result<Option<bool>, Error> {
        let Some(api) = self.api(client, reference, namespace).await? else { return Ok(None) };
        let object: DynamicObject = serde_json::from_value(object)
            .map_err(|e| Error::kube("make", describe(reference), kube::Error::SerdeError(e)))?;
        match api.create(&super::clones::post(), &object).await {
            Ok(_) => Ok(Some(true)),
            Err(e) if crate::controllers::error::is_conflict(&e) => Ok(Some(false)),
            Err(e) => Err(Error::kube("create", describe(reference), e)),
        }
    }

    /// Deletes the config (gone already is fine).
    pub(crate) async fn delete(
        &self,
        client: &Client,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
    ) -> Result<(), Error> {
        let Some(api) = self.api(client, reference, namespace).await? else { return Ok(()) };
        match api.delete(&reference.name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(Error::kube("delete", describe(reference), e)),
        }
    }
}

/// Creates the Machine's bootstrap config from the MachineSet's template `template` (a `…Template` kind), unless it
/// exists; a template that is missing or names no template kind is left to the Machine's bootstrap condition.
pub(crate) async fn create_clone(
    kinds: &ReferencedKinds,
    client: &Client,
    template: &ContractVersionedObjectReference,
    machine: &Machine,
) -> Result<(), Error> {
    let namespace = machine.metadata.namespace.clone().unwrap_or_default();
    let Some(kind) = config_kind_of_template(&template.kind) else { return Ok(()) };
    let Some(source) = kinds.get(client, template, &namespace).await? else {
        tracing::info!(machine = %key_of(machine), template = %describe(template), "bootstrap template not found");
        return Ok(());
    };
    let owner = super::capi_controller_ref("Machine", &machine.metadata);
    let Some(clone) = clone_of_template(&source, machine, &owner) else { return Ok(()) };
    let reference = ContractVersionedObjectReference {
        api_group: template.api_group.clone(),
        kind: kind.to_string(),
        name: machine.metadata.name.clone().unwrap_or_default(),
    };
    let Some(api) = kinds.api(client, &reference, &namespace).await? else { return Ok(()) };
    let object: DynamicObject = serde_json::from_value(clone)
        .map_err(|e| Error::kube("clone", describe(template), kube::Error::SerdeError(e)))?;
    match api.create(&super::clones::post(), &object).await {
        Ok(_) => {
            tracing::info!(machine = %key_of(machine), config = %describe(&reference), "created the bootstrap config");
            Ok(())
        }
        Err(e) if crate::controllers::error::is_conflict(&e) => Ok(()),
        Err(e) => Err(Error::kube("create", describe(&reference), e)),
    }
}

fn describe(reference: &ContractVersionedObjectReference) -> String {
    format!("{} {}", reference.kind, reference.name)
}
