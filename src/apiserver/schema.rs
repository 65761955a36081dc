//! Structural schemas of CustomResourceDefinitions: validation, pruning and defaulting.
//! TEMPORARY STUB: replaced by the real module.
#![allow(missing_docs, dead_code)]
use serde_json::Value;
#[derive(Debug, thiserror::Error)]
#[error("bad schema")]
pub struct SchemaError;
#[derive(Debug, Clone)]
pub struct StructuralSchema;
impl StructuralSchema {
    pub fn compile(_schema: &Value) -> Result<Self, SchemaError> {
        Ok(StructuralSchema)
    }
    pub fn apply_defaults(&self, _object: &mut Value) {}
    pub fn prune(&self, _object: &mut Value) {}
    pub fn validate(&self, _object: &Value) -> Vec<FieldError> {
        Vec::new()
    }
    pub fn skipped_cel_rules(&self) -> usize {
        0
    }
}
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub field: String,
    pub error_type: FieldErrorType,
    pub bad_value: Option<Value>,
    pub detail: String,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorType {
    Invalid,
}
impl FieldErrorType {
    pub fn reason(&self) -> &'static str {
        "FieldValueInvalid"
    }
}
impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.detail)
    }
}
