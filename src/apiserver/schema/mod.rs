//! Structural schemas of CustomResourceDefinitions: defaulting, pruning and validation of custom resources.
//!
//! kube-apiserver treats a CRD version's `schema.openAPIV3Schema` in three steps on every write; this module
//! does the same with a schema compiled once ([`StructuralSchema::compile`]) and shared between requests:
//!
//! 1. **Defaulting** ([`StructuralSchema::apply_defaults`]): a declared property that is missing, or `null` while
//!    not `nullable`, gets a deep copy of its `default`; defaulting continues inside the copied default and inside
//!    array items and `additionalProperties` values (a `null` item or map value that is not nullable gets the
//!    items'/values' default when there is one).
//! 2. **Pruning** ([`StructuralSchema::prune`]): fields the schema does not declare are dropped, honouring
//!    `x-kubernetes-preserve-unknown-fields`, `x-kubernetes-embedded-resource` and `additionalProperties`. At the
//!    root `apiVersion`, `kind` and `metadata` always stay and `metadata` is never looked into: the server owns it.
//! 3. **Validation** ([`StructuralSchema::validate`]): the OpenAPI v3 value validations of structural schemas plus
//!    the `x-kubernetes-*` extensions, reported as kube field errors ([`FieldError`]) with kube's paths
//!    (`spec.taints[0].effect`, `spec.labels[foo]`) and messages.
//!
//! **Nulls.** kube drops a `null` given for a declared, non-nullable property without a default while decoding
//! the request, and replaces it by the default when there is one, so validation never sees such nulls. Here both
//! [`StructuralSchema::apply_defaults`] and [`StructuralSchema::prune`] do it (whichever runs first); a `null`
//! left elsewhere (array item, map value, nullable-less property when neither step ran) fails validation as a
//! type error, as in kube.
//!
//! **Simplifications** (what kube does and this module does not):
//! - `x-kubernetes-validations` (CEL) rules are not evaluated; [`StructuralSchema::skipped_cel_rules`] counts them.
//! - `metadata` of embedded resources is kept as is: kube prunes it to `ObjectMeta` fields and validates names.
//! - The structural-schema rules themselves (no types inside `allOf`/`anyOf`/…, defaults pruned, list-map keys
//!   required…) are not enforced by [`StructuralSchema::compile`]: it only rejects schemas it cannot use.
//! - Formats: `int32`/`int64` (ranges; kube ignores them), `date-time`, `date`, `byte`, `uuid`, `uuid3`, `uuid4`,
//!   `uuid5`, `ipv4`, `ipv6`, `cidr` are checked; others (`hostname`, `email`, `duration`…) are ignored.
//! - `type: integer` accepts JSON integers only, where kube also takes integral floats such as `1.0` (they would
//!   round-trip as floats here and break typed clients).
//! - A failed `anyOf`/`oneOf`/`allOf`/`not` is reported at the value's path, where kube reports `<nil>`; a value
//!   of an `x-kubernetes-int-or-string` field that is neither gives one type error, not kube's `anyOf` pair.
//! - Patterns are Go RE2 compiled by the `regex` crate; `\d`, `\w`, `\s` are rewritten to their ASCII meaning as
//!   in Go, `\b` stays Unicode-aware, `\C` and `\Q…\E` are unsupported (the schema fails to compile).

mod compile;
mod format;
mod mutate;
mod unknown;
mod validate;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use compile::Node;

/// The schema itself is unusable: not an object, a keyword of the wrong shape, a pattern that does not compile.
///
/// `path` names the offending schema node from `openAPIV3Schema`, e.g.
/// `openAPIV3Schema.properties[spec].properties[name]`.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A schema node (or the root) is not a JSON object.
    #[error("{path}: must be a schema object")]
    NotAnObject {
        /// Path of the node in the schema.
        path: String,
    },
    /// A keyword has a value of the wrong kind or an unsupported value.
    #[error("{path}.{keyword}: {reason}")]
    InvalidKeyword {
        /// Path of the node in the schema.
        path: String,
        /// The keyword, e.g. `type` or `minLength`.
        keyword: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `pattern` is not a valid regular expression.
    #[error("{path}.pattern: invalid regular expression {pattern:?}: {source}")]
    InvalidPattern {
        /// Path of the node in the schema.
        path: String,
        /// The pattern as written in the schema.
        pattern: String,
        /// The regex crate's complaint.
        source: Box<regex::Error>,
    },
}

/// A compiled `openAPIV3Schema`: regexes compiled, keywords parsed. Cheap to clone (shared internally).
#[derive(Debug, Clone)]
pub struct StructuralSchema {
    root: Arc<Node>,
    cel_rules: usize,
}

impl StructuralSchema {
    /// Compiles `openAPIV3Schema` given as JSON.
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        let mut cel_rules = 0;
        let root = Node::compile(schema, "openAPIV3Schema", &mut cel_rules)?;
        Ok(Self { root: Arc::new(root), cel_rules })
    }

    /// Applies `default` values as kube does before validation: a missing property with a `default` gets it (also
    /// inside defaults just applied, array items and `additionalProperties` values), a `null` for a non-nullable
    /// property gets its default or, without one, is removed.
    pub fn apply_defaults(&self, object: &mut Value) {
        mutate::apply_defaults(&self.root, object);
    }

    /// Removes fields the schema does not declare (and non-nullable `null`s without a default). At the root
    /// `apiVersion`, `kind` and `metadata` are always kept and `metadata` is left untouched.
    pub fn prune(&self, object: &mut Value) {
        mutate::prune_root(&self.root, object);
    }

    /// The paths of the fields [`StructuralSchema::prune`] would remove (sorted, kube's form: `spec.foo`,
    /// `spec.list[0].bar`), for server-side field validation. `metadata` is not looked into.
    pub fn unknown_fields(&self, object: &Value) -> Vec<String> {
        unknown::unknown_fields_root(&self.root, object)
    }

    /// Defaulting then pruning: what the server does to a decoded custom resource before validating it.
    pub fn normalize(&self, object: &mut Value) {
        self.apply_defaults(object);
        self.prune(object);
    }

    /// Validates `object`, returning every violation (empty: valid).
    pub fn validate(&self, object: &Value) -> Vec<FieldError> {
        validate::validate_root(&self.root, object)
    }

    /// How many `x-kubernetes-validations` (CEL) rules the schema declares: they are not evaluated.
    pub fn skipped_cel_rules(&self) -> usize {
        self.cel_rules
    }
}

/// One violation, as kube's `field.Error`: becomes a `StatusCause` of a 422 `Invalid` status.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Path of the offending field, e.g. `spec.taints[0].effect` (empty: the object itself).
    pub field: String,
    /// Kind of violation.
    pub error_type: FieldErrorType,
    /// The offending value when it is shown (not for `Required`, `Forbidden`, `TooLong`).
    pub bad_value: Option<Value>,
    /// Human-readable detail, e.g. `supported values: "Always", "Never"`.
    pub detail: String,
}

/// Kinds of field errors, as kube's `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorType {
    /// The value is not valid.
    Invalid,
    /// A required value is missing.
    Required,
    /// The value is not one of the supported (enumerated) values.
    NotSupported,
    /// The value is too long.
    TooLong,
    /// The list or map has too many items.
    TooMany,
    /// The value duplicates another one of the same list.
    Duplicate,
    /// The value is not allowed here.
    Forbidden,
    /// The value has the wrong type.
    TypeInvalid,
}

impl FieldErrorType {
    /// The `reason` of the `StatusCause`, e.g. `FieldValueInvalid`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Invalid => "FieldValueInvalid",
            Self::Required => "FieldValueRequired",
            Self::NotSupported => "FieldValueNotSupported",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Forbidden => "FieldValueForbidden",
            Self::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The words kube prints for the type, e.g. `Unsupported value`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Invalid | Self::TypeInvalid => "Invalid value",
            Self::Required => "Required value",
            Self::NotSupported => "Unsupported value",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
            Self::Duplicate => "Duplicate value",
            Self::Forbidden => "Forbidden",
        }
    }
}

impl FieldError {
    /// The message without the field, as kube's `ErrorBody()`: the `message` of a `StatusCause`.
    pub fn body(&self) -> String {
        let mut out = String::from(self.error_type.label());
        let shows_value =
            !matches!(self.error_type, FieldErrorType::Required | FieldErrorType::Forbidden | FieldErrorType::TooLong);
        if shows_value && let Some(value) = &self.bad_value {
            out.push_str(": ");
            format::go_value(value, &mut out);
        }
        if !self.detail.is_empty() {
            out.push_str(": ");
            out.push_str(&self.detail);
        }
        out
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // kube prints a nil field path as `<nil>`.
        let field = if self.field.is_empty() { "<nil>" } else { &self.field };
        write!(f, "{field}: {}", self.body())
    }
}
