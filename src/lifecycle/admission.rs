//! What the admission webhooks decide (`docs/infrastructure-provider.md#security`): validation of MCMMachine,
//! MCMMachineTemplate, MCMCluster and MachineClass, and the defaulting of MCMMachine and MCMMachineTemplate. Pure
//! functions on the API types; `crate::webhooks` turns their answers into AdmissionReview responses.
//!
//! A providerSpec is checked by the parser of the driver that claims the provider name; this module does not know
//! the drivers and is handed that parser as a [`ProviderSpecCheck`].

use serde_json::Value;

use crate::api::infra::{IDENTITY_KIND, MCMCluster, MCMMachine, MCMMachineSpec, MCMMachineTemplate};
use crate::api::mcm::MachineClass;
use crate::api::mcm::names::MACHINE_CLASS_KIND;

use super::class::validate_node_template;

/// The API group of MachineClass, the default of `spec.class.apiGroup`.
pub const MACHINE_CLASS_GROUP: &str = "machine.sapcloud.io";

/// The parser of a provider's providerSpec: `None` when no driver of this binary claims the provider name,
/// otherwise the parser's verdict (its message names the field).
pub type ProviderSpecCheck<'a> = &'a dyn Fn(&str, &Value) -> Option<Result<(), String>>;

/// How a field is wrong, with Kubernetes' cause types (`FieldValueRequired` ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// A required value is missing.
    Required,
    /// The value is not acceptable.
    Invalid,
    /// The field may not be set (or changed).
    Forbidden,
    /// The value is a duplicate of another in the list.
    Duplicate,
}

impl FieldErrorKind {
    /// The `reason` of a `StatusCause`.
    pub fn reason(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
        }
    }

    fn text(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Invalid => "Invalid value",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::Duplicate => "Duplicate value",
        }
    }
}

/// One wrong field, as apimachinery's `field.Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Its path (`spec.template.spec.providerID`).
    pub field: String,
    /// How it is wrong.
    pub kind: FieldErrorKind,
    /// Why.
    pub detail: String,
}

impl FieldError {
    fn new(kind: FieldErrorKind, field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError { field: field.into(), kind, detail: detail.into() }
    }

    /// The cause's message without the field: `Forbidden: cannot be set in a template`.
    pub fn message(&self) -> String {
        if self.detail.is_empty() {
            self.kind.text().to_string()
        } else {
            format!("{}: {}", self.kind.text(), self.detail)
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message())
    }
}

/// A validator's answer: the field errors (none: allowed) and warnings for the client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// What is wrong; the request is denied when this is not empty.
    pub errors: Vec<FieldError>,
    /// What the user should know although the object is allowed.
    pub warnings: Vec<String>,
}

impl Verdict {
    fn of(errors: Vec<FieldError>) -> Self {
        Verdict { errors, warnings: Vec::new() }
    }

    /// Whether the object is allowed.
    pub fn allowed(&self) -> bool {
        self.errors.is_empty()
    }
}

fn immutable(field: String) -> FieldError {
    FieldError::new(FieldErrorKind::Forbidden, field, "field is immutable")
}

fn is_empty(s: Option<&String>) -> bool {
    s.is_none_or(|s| s.is_empty())
}

/// The providerSpec of `provider` at `path`: the driver's parser runs when a driver claims the name; otherwise a
/// warning says the providerSpec was not checked (an out-of-tree driver may serve it).
fn check_provider_spec(provider: &str, spec: &Value, path: &str, check: ProviderSpecCheck<'_>, verdict: &mut Verdict) {
    match check(provider, spec) {
        Some(Ok(())) => {}
        Some(Err(why)) => {
            verdict.errors.push(FieldError::new(FieldErrorKind::Invalid, format!("{path}.providerSpec"), why))
        }
        None => verdict.warnings.push(format!(
            "{path}.provider: no driver of this provider claims {provider:?}; its providerSpec was not checked"
        )),
    }
}

/// An MCMMachine's spec (or a template's `spec.template.spec`) at `path`: exactly one of `class` and
/// `inlineClass`; a class reference of kind MachineClass with a name; an inline class with a provider, a
/// providerSpec its driver parses, and a complete nodeTemplate.
fn validate_spec(spec: &MCMMachineSpec, path: &str, check: ProviderSpecCheck<'_>) -> Verdict {
    let mut verdict = Verdict::default();
    let errors = &mut verdict.errors;
    match (&spec.class, &spec.inline_class) {
        (Some(_), Some(_)) => errors.push(FieldError::new(
            FieldErrorKind::Forbidden,
            format!("{path}.inlineClass"),
            "spec.class and spec.inlineClass are both set; set exactly one",
        )),
        (None, None) => errors.push(FieldError::new(
            FieldErrorKind::Required,
            format!("{path}.class"),
            "set exactly one of class and inlineClass",
        )),
        (Some(class), None) => {
            if class.kind != MACHINE_CLASS_KIND {
                errors.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    format!("{path}.class.kind"),
                    format!("{:?}: only {MACHINE_CLASS_KIND:?} is supported", class.kind),
                ));
            }
            if class.api_group.as_deref().is_some_and(|g| !g.is_empty() && g != MACHINE_CLASS_GROUP) {
                errors.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    format!("{path}.class.apiGroup"),
                    format!(
                        "{:?}: only {MACHINE_CLASS_GROUP:?} is supported",
                        class.api_group.as_deref().unwrap_or("")
                    ),
                ));
            }
            if class.name.is_empty() {
                errors.push(FieldError::new(
                    FieldErrorKind::Required,
                    format!("{path}.class.name"),
                    "name the MachineClass",
                ));
            }
        }
        (None, Some(inline)) => {
            let at = format!("{path}.inlineClass");
            if inline.provider.is_empty() {
                errors.push(FieldError::new(FieldErrorKind::Required, format!("{at}.provider"), "name the driver"));
            } else {
                check_provider_spec(&inline.provider, &inline.provider_spec, &at, check, &mut verdict);
            }
            if let Err(why) = validate_node_template(inline.node_template.as_ref()) {
                verdict.errors.push(FieldError::new(FieldErrorKind::Invalid, format!("{at}.nodeTemplate"), why));
            }
        }
    }
    // The identity whose Secret the class may use (`lifecycle::tenancy`); whether it allows the namespace is the
    // controller's question, asked again whenever the identity changes.
    if let Some(identity) = &spec.identity_ref {
        if identity.kind != IDENTITY_KIND {
            verdict.errors.push(FieldError::new(
                FieldErrorKind::Invalid,
                format!("{path}.identityRef.kind"),
                format!("{:?}: only {IDENTITY_KIND:?} is supported", identity.kind),
            ));
        }
        if identity.name.is_empty() {
            verdict.errors.push(FieldError::new(
                FieldErrorKind::Required,
                format!("{path}.identityRef.name"),
                "name the MCMClusterIdentity",
            ));
        }
    }
    verdict
}

/// A new MCMMachine. A preset `providerID` is allowed: it adopts an existing VM (`clusterctl move`).
pub fn validate_machine_create(machine: &MCMMachine, check: ProviderSpecCheck<'_>) -> Verdict {
    validate_spec(&machine.spec, "spec", check)
}

/// A changed MCMMachine: the spec is immutable except `providerID` and `failureDomain`, which may be set once, and the Node's
/// `nodeTemplate` and the per-machine timeouts, which change no VM (as CAPA lets tags and security groups change).
pub fn validate_machine_update(old: &MCMMachine, new: &MCMMachine) -> Verdict {
    let (old, new) = (&old.spec, &new.spec);
    let mut errors = Vec::new();
    if !is_empty(old.provider_id.as_ref()) && old.provider_id != new.provider_id {
        errors.push(FieldError::new(FieldErrorKind::Forbidden, "spec.providerID", "field is immutable once set"));
    }
    // Set once: the controller records the zone the VM went to (CAPI core copies the Machine's failure domain only
    // into what it clones, so an MCMMachine may start without one); never changed or removed after.
    if !is_empty(old.failure_domain.as_ref()) && old.failure_domain != new.failure_domain {
        errors.push(FieldError::new(FieldErrorKind::Forbidden, "spec.failureDomain", "field is immutable once set"));
    }
    if old.class != new.class {
        errors.push(immutable("spec.class".into()));
    }
    if old.inline_class != new.inline_class {
        errors.push(immutable("spec.inlineClass".into()));
    }
    Verdict::of(errors)
}

/// A new MCMMachineTemplate: a valid machine spec, without `providerID` (core clones the template for every
/// Machine: several would claim one VM).
pub fn validate_template_create(template: &MCMMachineTemplate, check: ProviderSpecCheck<'_>) -> Verdict {
    let spec = &template.spec.template.spec;
    let mut verdict = validate_spec(spec, "spec.template.spec", check);
    if !is_empty(spec.provider_id.as_ref()) {
        verdict.errors.insert(
            0,
            FieldError::new(
                FieldErrorKind::Forbidden,
                "spec.template.spec.providerID",
                "cannot be set in a template: every Machine cloned from it would claim the same VM",
            ),
        );
    }
    verdict
}

/// A changed MCMMachineTemplate: its spec is immutable (a rollout uses a new template, as with every CAPI
/// provider).
pub fn validate_template_update(old: &MCMMachineTemplate, new: &MCMMachineTemplate) -> Verdict {
    if old.spec == new.spec {
        return Verdict::default();
    }
    Verdict::of(vec![FieldError::new(
        FieldErrorKind::Forbidden,
        "spec.template.spec",
        "MCMMachineTemplate spec is immutable; create a new template and point the MachineDeployment at it",
    )])
}

/// A new MCMCluster: a control-plane endpoint with a host has a port in 1..=65535; failure domains have unique,
/// non-empty names.
pub fn validate_cluster_create(cluster: &MCMCluster) -> Verdict {
    let mut errors = Vec::new();
    if let Some(endpoint) = &cluster.spec.control_plane_endpoint {
        let port = endpoint.port.unwrap_or(0);
        if !is_empty(endpoint.host.as_ref()) && !(1..=65535).contains(&port) {
            errors.push(FieldError::new(
                FieldErrorKind::Invalid,
                "spec.controlPlaneEndpoint.port",
                format!("{port}: must be between 1 and 65535"),
            ));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, domain) in cluster.spec.failure_domains.iter().flatten().enumerate() {
        let field = format!("spec.failureDomains[{i}].name");
        if domain.name.is_empty() {
            errors.push(FieldError::new(FieldErrorKind::Required, field, "name the failure domain"));
        } else if !seen.insert(domain.name.as_str()) {
            errors.push(FieldError::new(FieldErrorKind::Duplicate, field, format!("{:?}", domain.name)));
        }
    }
    Verdict::of(errors)
}

/// A changed MCMCluster: as a new one when its spec changed, and the control-plane endpoint cannot change once it
/// has a host (CAPA's rule: clusters and their kubeconfigs point at it).
pub fn validate_cluster_update(old: &MCMCluster, new: &MCMCluster) -> Verdict {
    if old.spec == new.spec {
        return Verdict::default();
    }
    let mut verdict = validate_cluster_create(new);
    let set = old.spec.control_plane_endpoint.as_ref().is_some_and(|e| !is_empty(e.host.as_ref()));
    if set && old.spec.control_plane_endpoint != new.spec.control_plane_endpoint {
        verdict.errors.push(immutable("spec.controlPlaneEndpoint".into()));
    }
    verdict
}

/// The label (and value) our MachineClass CRD carries (crds/, config/machineclass) and Gardener's does not.
pub const OUR_CLASS_CRD_LABEL: (&str, &str) = ("app.kubernetes.io/part-of", "cluster-api-provider-mcm");

/// Whether the MachineClass webhook judges classes, given the labels of the `machineclasses.machine.sapcloud.io`
/// CRD (`None`: no such CRD). Next to Gardener's MCM the CRD is Gardener's and so are its classes: refusing them
/// (our parsers are strict, Gardener's providers are not) would break that MCM, so they are admitted unjudged.
pub fn validates_classes(crd_labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    let (key, value) = OUR_CLASS_CRD_LABEL;
    crd_labels.is_none_or(|labels| labels.get(key).is_some_and(|v| v == value))
}

/// A MachineClass: its provider's parser accepts the providerSpec and the nodeTemplate is complete. On an update
/// only a changed provider, providerSpec or nodeTemplate is checked, so a class stored before the webhook existed
/// can still lose its finalizer.
pub fn validate_machine_class(old: Option<&MachineClass>, new: &MachineClass, check: ProviderSpecCheck<'_>) -> Verdict {
    let (n, mut verdict) = (&new.spec, Verdict::default());
    if let Some(o) = old.map(|o| &o.spec)
        && o.provider == n.provider
        && o.provider_spec == n.provider_spec
        && o.node_template == n.node_template
    {
        return verdict;
    }
    match n.provider.as_deref().filter(|p| !p.is_empty()) {
        Some(provider) => check_provider_spec(provider, &n.provider_spec, "", check, &mut verdict),
        None => verdict.warnings.push("provider is not set; the providerSpec was not checked".to_string()),
    }
    // The class's fields sit at the top level: the paths have no `spec.` (nor a leading dot).
    for error in &mut verdict.errors {
        error.field = error.field.trim_start_matches('.').to_string();
    }
    for warning in &mut verdict.warnings {
        *warning = warning.trim_start_matches('.').to_string();
    }
    if let Err(why) = validate_node_template(n.node_template.as_ref()) {
        verdict.errors.push(FieldError::new(FieldErrorKind::Invalid, "nodeTemplate", why));
    }
    verdict
}

/// The defaults of a machine spec: a class reference without kind or apiGroup names a MachineClass of
/// `machine.sapcloud.io` (the only kind the controllers serve). Nothing else is defaulted.
pub fn default_spec(spec: &mut MCMMachineSpec) {
    if let Some(class) = spec.class.as_mut() {
        if class.kind.is_empty() {
            class.kind = MACHINE_CLASS_KIND.to_string();
        }
        if is_empty(class.api_group.as_ref()) {
            class.api_group = Some(MACHINE_CLASS_GROUP.to_string());
        }
    }
}

/// The defaults of an MCMMachine ([`default_spec`]).
pub fn default_machine(machine: &mut MCMMachine) {
    default_spec(&mut machine.spec);
}

/// The defaults of an MCMMachineTemplate ([`default_spec`] on `spec.template.spec`).
pub fn default_template(template: &mut MCMMachineTemplate) {
    default_spec(&mut template.spec.template.spec);
}

#[cfg(test)]
mod tests;
