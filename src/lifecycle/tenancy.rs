//! Credentials stay in their tenant (`docs/infrastructure-provider.md`, "Multi-tenancy"): may an MCMMachine in a
//! namespace use the Secrets its class names?
//!
//! A Secret in the MCMMachine's own namespace is always usable. A Secret anywhere else is usable only when it is
//! the `secretRef` of the MCMClusterIdentity the machine's `spec.identityRef` names, and that identity's
//! `allowedNamespaces` admits the machine's namespace, with the semantics of CAPA's cluster identities:
//!
//! - `allowedNamespaces` unset: no namespace;
//! - `allowedNamespaces: {}` (neither `list` nor `selector`): every namespace;
//! - otherwise a namespace named in `list`, or whose labels match `selector` (an empty selector matches none).
//!
//! A machine that names an identity must be admitted by it even if all its Secrets are its own. The MCM flavour
//! (Machines and MachineClasses of `machine.sapcloud.io`) does not use this module: it keeps MCM's behaviour.
//!
//! Imports `api` and sibling modules only.

use std::collections::BTreeMap;

use crate::api::infra::{AllowedNamespaces, IDENTITY_KIND, IdentityReference, MCMClusterIdentitySpec};

use super::machine_deployment::validation::selector_matches;

/// Condition reasons of a refusal (`Ready=False` on the MCMMachine, and the Warning event's reason).
pub mod reason {
    /// A Secret outside the machine's namespace, not granted by the identity the machine names (or it names none).
    pub const CREDENTIALS_NOT_ALLOWED: &str = "CredentialsNotAllowed";
    /// The named identity does not exist, is of a kind we do not know, or does not allow the machine's namespace.
    pub const IDENTITY_NOT_ALLOWED: &str = "IdentityNotAllowed";
}

/// Whether `allowed` admits namespace `namespace`, whose labels are `labels` (`None`: not known).
pub fn namespace_allowed(
    allowed: Option<&AllowedNamespaces>,
    namespace: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(allowed) = allowed else { return false };
    if allowed.list.is_none() && allowed.selector.is_none() {
        return true;
    }
    if allowed.list.iter().flatten().any(|n| n == namespace) {
        return true;
    }
    let Some(selector) = &allowed.selector else { return false };
    let empty = selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty);
    !empty && labels.is_some_and(|l| selector_matches(selector, l))
}

/// One Secret reference of a class: the field that holds it, and the Secret's namespace (already defaulted to
/// the referring object's) and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretUse<'a> {
    /// The field, for the message (`spec.inlineClass.credentialsSecretRef`, `MachineClass x secretRef`).
    pub field: String,
    /// The Secret's namespace.
    pub namespace: &'a str,
    /// The Secret's name.
    pub name: &'a str,
}

/// What the decision looks at.
#[derive(Clone, Debug, Default)]
pub struct Tenancy<'a> {
    /// The machine's namespace.
    pub namespace: &'a str,
    /// Its labels (for an identity's selector); `None` if the namespace is not known.
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
    /// The machine's `spec.identityRef`.
    pub identity_ref: Option<&'a IdentityReference>,
    /// The spec of the identity it names, if that exists.
    pub identity: Option<&'a MCMClusterIdentitySpec>,
}

/// Why the credentials may not be used: a condition reason and a message naming objects, never Secret content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// One of [`reason`].
    pub reason: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Whether the machine may use the Secrets `uses`. `Ok` carries the Secret (namespace, name) of the identity the
/// machine names and is admitted by, if any (an inline class without its own credentials uses it).
pub fn check(t: &Tenancy<'_>, uses: &[SecretUse<'_>]) -> Result<Option<(String, String)>, Refusal> {
    let namespace = t.namespace;
    let granted = match t.identity_ref {
        None => None,
        Some(r) => {
            let refuse = |message: String| Refusal { reason: reason::IDENTITY_NOT_ALLOWED, message };
            if r.kind != IDENTITY_KIND {
                return Err(refuse(format!(
                    "spec.identityRef.kind is {:?}; only {IDENTITY_KIND:?} is supported",
                    r.kind
                )));
            }
            let Some(identity) = t.identity else {
                return Err(refuse(format!("{IDENTITY_KIND} {} does not exist", r.name)));
            };
            if !namespace_allowed(identity.allowed_namespaces.as_ref(), namespace, t.namespace_labels) {
                return Err(refuse(format!(
                    "{IDENTITY_KIND} {} does not allow namespace {namespace} (spec.allowedNamespaces)",
                    r.name
                )));
            }
            Some((r.name.as_str(), &identity.secret_ref))
        }
    };
    for u in uses {
        if u.namespace == namespace {
            continue;
        }
        if granted.is_some_and(|(_, s)| s.namespace == u.namespace && s.name == u.name) {
            continue;
        }
        let how = match granted {
            Some((name, _)) => format!("it is not the Secret of {IDENTITY_KIND} {name} (spec.identityRef)"),
            None => format!(
                "only an {IDENTITY_KIND} named in spec.identityRef, whose secretRef is that Secret and whose \
                 allowedNamespaces admit {namespace}, grants it"
            ),
        };
        return Err(Refusal {
            reason: reason::CREDENTIALS_NOT_ALLOWED,
            message: format!(
                "{} names Secret {}/{} outside namespace {namespace}; {how}",
                u.field, u.namespace, u.name
            ),
        });
    }
    Ok(granted.map(|(_, s)| (s.namespace.clone(), s.name.clone())))
}

#[cfg(test)]
mod tests;
