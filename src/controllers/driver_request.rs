//! What a driver is asked with: the class as the driver sees it ([`ClassInfo`]), its merged credentials
//! ([`SecretData`]) and the machine ([`MachineInfo`]), built from a MachineClass, an MCMMachine's inline class and a
//! Machine's hub view, and whether an MCMMachine may use the Secrets its class names ([`tenancy`]). Every
//! controller that calls a driver (machine, termination, safety, MCMMachine, orphan collection) builds its requests
//! here.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Secret, SecretReference};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::infra::{MCMClusterIdentity, MCMMachine};
use crate::api::mcm::names::{MACHINE_CLASS_KIND, USER_DATA_KEY};
use crate::api::mcm::{Machine, MachineClass};
use crate::lifecycle::userdata::merge_secret_data;
use crate::lifecycle::{create, infra, tenancy};
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

/// What resolving an MCMMachine's class looks up besides the object: MachineClasses, identities and Namespaces
/// (stores), and Secrets.
pub(crate) struct ClassLookups<'a> {
    /// MachineClasses (`spec.class`).
    pub classes: &'a Store<MachineClass>,
    /// MCMClusterIdentities (`spec.identityRef`).
    pub identities: &'a Store<MCMClusterIdentity>,
    /// Namespaces (an identity's `allowedNamespaces.selector` matches their labels).
    pub namespaces: &'a Store<Namespace>,
    /// Secrets.
    pub secrets: &'a SecretLookup<'a>,
}

/// Why an MCMMachine's class cannot be used: the `Ready` condition's reason, and the error a driver call would
/// have had (`InvalidArgument` for a refusal of credentials: no driver is asked, no VM was made for it).
#[derive(Clone, Debug)]
pub(crate) struct ClassProblem {
    /// [`infra::reason::INVALID_CLASS`] or one of [`tenancy::reason`].
    pub reason: &'static str,
    /// What is wrong.
    pub error: DriverError,
}

impl From<DriverError> for ClassProblem {
    fn from(error: DriverError) -> Self {
        ClassProblem { reason: infra::reason::INVALID_CLASS, error }
    }
}

impl From<tenancy::Refusal> for ClassProblem {
    fn from(refusal: tenancy::Refusal) -> Self {
        ClassProblem { reason: refusal.reason, error: DriverError::new(Code::InvalidArgument, refusal.message) }
    }
}

/// A Secret reference as a [`tenancy::SecretUse`] (an empty namespace is `namespace`'s); `None` without a name.
fn secret_use<'a>(field: String, r: Option<&'a SecretReference>, namespace: &'a str) -> Option<tenancy::SecretUse<'a>> {
    let r = r?;
    Some(tenancy::SecretUse {
        field,
        namespace: r.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(namespace),
        name: r.name.as_deref()?,
    })
}

/// Whether the MCMMachine may use the Secrets `uses` ([`tenancy::check`] on what the stores hold).
fn tenancy_check(
    obj: &MCMMachine,
    namespace: &str,
    uses: &[tenancy::SecretUse<'_>],
    lookups: &ClassLookups<'_>,
) -> Result<Option<(String, String)>, tenancy::Refusal> {
    let identity_ref = obj.spec.identity_ref.as_ref();
    let identity = identity_ref.and_then(|r| lookups.identities.get(&ObjectRef::new(&r.name)));
    let ns = lookups.namespaces.get(&ObjectRef::new(namespace));
    let t = tenancy::Tenancy {
        namespace,
        namespace_labels: ns.as_ref().map(|n| n.labels()),
        identity_ref,
        identity: identity.as_ref().map(|i| &i.spec),
    };
    tenancy::check(&t, uses)
}

/// The class of an MCMMachine: exactly one of a referenced MachineClass and an inline class, with its merged
/// credentials, without the class's own userData (CAPI's bootstrap data replaces it). `Err` says what is wrong:
/// `InvalidArgument` when the object names no class or two (no driver was ever asked for it),
/// `FailedPrecondition` when the class it names cannot be used, and a refusal ([`tenancy`]) when a Secret it
/// names is outside its namespace and no identity grants it; then no Secret outside its namespace is read.
pub(crate) fn mcm_machine_class(
    obj: &MCMMachine,
    lookups: &ClassLookups<'_>,
) -> Result<(ClassInfo, SecretData), ClassProblem> {
    let namespace = obj.namespace().unwrap_or_default();
    let secrets = lookups.secrets;
    let (class, mut data) = match (&obj.spec.class, &obj.spec.inline_class) {
        (Some(_), Some(_)) => {
            return Err(DriverError::new(
                Code::InvalidArgument,
                "spec.class and spec.inlineClass are both set; set exactly one",
            )
            .into());
        }
        (None, None) => {
            return Err(DriverError::new(
                Code::InvalidArgument,
                "neither spec.class nor spec.inlineClass is set; set exactly one",
            )
            .into());
        }
        (Some(r), None) => {
            if r.kind != MACHINE_CLASS_KIND {
                let message = format!("spec.class.kind is {:?}; only {MACHINE_CLASS_KIND:?} is supported", r.kind);
                return Err(DriverError::new(Code::FailedPrecondition, message).into());
            }
            let Some(class) = lookups.classes.get(&ObjectRef::<MachineClass>::new(&r.name).within(&namespace)) else {
                // The provider's components do not install MCM's MachineClass CRD (docs/clusterctl.md).
                let message = format!(
                    "MachineClass {namespace}/{} does not exist (referenced classes need the CRD \
                     machineclasses.machine.sapcloud.io: Gardener's MCM or machineclass-crd.yaml of the release)",
                    r.name
                );
                return Err(DriverError::new(Code::FailedPrecondition, message).into());
            };
            let class_ns = class.namespace().unwrap_or_default();
            let uses: Vec<_> = [
                secret_use(format!("MachineClass {}'s secretRef", r.name), class.spec.secret_ref.as_ref(), &class_ns),
                secret_use(
                    format!("MachineClass {}'s credentialsSecretRef", r.name),
                    class.spec.credentials_secret_ref.as_ref(),
                    &class_ns,
                ),
            ]
            .into_iter()
            .flatten()
            .collect();
            tenancy_check(obj, &namespace, &uses, lookups)?;
            (class_info(&class), class_secrets(&class, secrets))
        }
        (None, Some(inline)) => {
            let info = ClassInfo {
                name: obj.name_any(),
                provider: inline.provider.clone(),
                provider_spec: inline.provider_spec.clone(),
                node_template: inline.node_template.clone(),
            };
            let field = "spec.inlineClass.credentialsSecretRef".to_string();
            let uses: Vec<_> =
                secret_use(field, inline.credentials_secret_ref.as_ref(), &namespace).into_iter().collect();
            let granted = tenancy_check(obj, &namespace, &uses, lookups)?;
            let credentials = match (&inline.credentials_secret_ref, granted) {
                (Some(r), _) => referenced(Some(r), &namespace, secrets),
                (None, Some((ns, name))) => secrets(&ns, &name),
                (None, None) => None,
            };
            (info, merge_secret_data(None, credentials.as_deref()))
        }
    };
    data.0.remove(USER_DATA_KEY);
    Ok((class, data))
}
