//! What a driver is asked with: the class as the driver sees it ([`ClassInfo`]), its merged credentials
//! ([`SecretData`]) and the machine ([`MachineInfo`]), built from a MachineClass, an MCMMachine's inline class and a
//! Machine's hub view. Every controller that calls a driver (machine, termination, safety, MCMMachine, orphan
//! collection) builds its requests here.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Secret, SecretReference};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::infra::MCMMachine;
use crate::api::mcm::names::{MACHINE_CLASS_KIND, USER_DATA_KEY};
use crate::api::mcm::{Machine, MachineClass};
use crate::lifecycle::create;
use crate::lifecycle::userdata::merge_secret_data;
use crate::providers::{ClassInfo, Code, DriverError, MachineInfo, SecretData};

/// Looks a Secret up by namespace and name (from a store).
pub(crate) type SecretLookup<'a> = dyn Fn(&str, &str) -> Option<Arc<Secret>> + 'a;

/// The class as the driver sees it.
pub(crate) fn class_info(class: &MachineClass) -> ClassInfo {
    ClassInfo {
        name: class.name_any(),
        provider: class.spec.provider.clone().unwrap_or_default(),
        provider_spec: class.spec.provider_spec.clone(),
        node_template: class.spec.node_template.clone(),
    }
}

/// The Secret a reference names (an empty namespace is `namespace`'s).
fn referenced(r: Option<&SecretReference>, namespace: &str, secrets: &SecretLookup<'_>) -> Option<Arc<Secret>> {
    let r = r?;
    secrets(r.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(namespace), r.name.as_deref()?)
}

/// The merged secret data of a class (missing secrets are empty).
pub(crate) fn class_secrets(class: &MachineClass, secrets: &SecretLookup<'_>) -> SecretData {
    let namespace = class.namespace().unwrap_or_default();
    let primary = referenced(class.spec.secret_ref.as_ref(), &namespace, secrets);
    let credentials = referenced(class.spec.credentials_secret_ref.as_ref(), &namespace, secrets);
    merge_secret_data(primary.as_deref(), credentials.as_deref())
}

/// The machine (its hub view) as the driver sees it.
pub(crate) fn machine_info(machine: &Machine) -> MachineInfo {
    MachineInfo {
        name: machine.name_any(),
        namespace: machine.namespace().unwrap_or_default(),
        provider_id: create::provider_id(machine).map(str::to_string),
        node_template: machine.spec.node_template.clone(),
        labels: machine.labels().clone(),
    }
}

/// The class of an MCMMachine: exactly one of a referenced MachineClass and an inline class, with its merged
/// credentials, without the class's own userData (CAPI's bootstrap data replaces it). `Err` says what is wrong:
/// `InvalidArgument` when the object names no class or two (no driver was ever asked for it),
/// `FailedPrecondition` when the class it names cannot be used.
pub(crate) fn mcm_machine_class(
    obj: &MCMMachine,
    classes: &Store<MachineClass>,
    secrets: &SecretLookup<'_>,
) -> Result<(ClassInfo, SecretData), DriverError> {
    let namespace = obj.namespace().unwrap_or_default();
    let (class, mut data) = match (&obj.spec.class, &obj.spec.inline_class) {
        (Some(_), Some(_)) => {
            return Err(DriverError::new(
                Code::InvalidArgument,
                "spec.class and spec.inlineClass are both set; set exactly one",
            ));
        }
        (None, None) => {
            return Err(DriverError::new(
                Code::InvalidArgument,
                "neither spec.class nor spec.inlineClass is set; set exactly one",
            ));
        }
        (Some(r), None) => {
            if r.kind != MACHINE_CLASS_KIND {
                let message = format!("spec.class.kind is {:?}; only {MACHINE_CLASS_KIND:?} is supported", r.kind);
                return Err(DriverError::new(Code::FailedPrecondition, message));
            }
            let Some(class) = classes.get(&ObjectRef::<MachineClass>::new(&r.name).within(&namespace)) else {
                // The provider's components do not install MCM's MachineClass CRD (docs/clusterctl.md).
                let message = format!(
                    "MachineClass {namespace}/{} does not exist (referenced classes need the CRD \
                     machineclasses.machine.sapcloud.io: Gardener's MCM or machineclass-crd.yaml of the release)",
                    r.name
                );
                return Err(DriverError::new(Code::FailedPrecondition, message));
            };
            (class_info(&class), class_secrets(&class, secrets))
        }
        (None, Some(inline)) => {
            let info = ClassInfo {
                name: obj.name_any(),
                provider: inline.provider.clone(),
                provider_spec: inline.provider_spec.clone(),
                node_template: inline.node_template.clone(),
            };
            let credentials = referenced(inline.credentials_secret_ref.as_ref(), &namespace, secrets);
            (info, merge_secret_data(None, credentials.as_deref()))
        }
    };
    data.0.remove(USER_DATA_KEY);
    Ok((class, data))
}
