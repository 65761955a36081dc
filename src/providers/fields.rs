//! Strict reading of a providerSpec's JSON, shared by the cloud drivers: every error is `InvalidArgument` naming the
//! field by its path (`providerSpec.blockDevices[1].ebs.volumeType: ...`), and unknown keys are refused.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::providers::{Code, DriverError};

pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A JSON object of the providerSpec: knows its path (for messages) and refuses keys it does not know.
pub(crate) struct Obj<'a> {
    path: String,
    map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    /// `value` as an object at `path` (`""` for the providerSpec itself) whose keys are all in `known`.
    pub(crate) fn new(path: &str, value: &'a Value, known: &[&str]) -> Result<Self, DriverError> {
        let shown = if path.is_empty() { "providerSpec".to_string() } else { format!("providerSpec.{path}") };
        let map = value.as_object().ok_or_else(|| {
            DriverError::new(Code::InvalidArgument, format!("{shown}: must be an object, got {}", kind(value)))
        })?;
        let unknown: Vec<String> =
            map.keys().filter(|k| !known.contains(&k.as_str())).map(|k| format!("{k:?}")).collect();
        if !unknown.is_empty() {
            let s = if unknown.len() == 1 { "" } else { "s" };
            return Err(DriverError::new(
                Code::InvalidArgument,
                format!("{shown}: unknown field{s} {} (known: {})", unknown.join(", "), known.join(", ")),
            ));
        }
        Ok(Obj { path: path.to_string(), map })
    }

    /// The path of `key` below this object.
    pub(crate) fn field(&self, key: &str) -> String {
        if self.path.is_empty() { key.to_string() } else { format!("{}.{key}", self.path) }
    }

    pub(crate) fn invalid(&self, key: &str, why: impl std::fmt::Display) -> DriverError {
        DriverError::invalid_field(&self.field(key), why)
    }

    /// The value of `key`; `null` counts as absent.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub(crate) fn text(&self, key: &str, v: &'a Value) -> Result<String, DriverError> {
        v.as_str().map(str::to_string).ok_or_else(|| self.invalid(key, format!("must be a string, got {}", kind(v))))
    }

    /// An optional string; `""` counts as absent (Gardener's fields are `omitempty`).
    pub(crate) fn string(&self, key: &str) -> Result<Option<String>, DriverError> {
        Ok(self.get(key).map(|v| self.text(key, v)).transpose()?.filter(|s| !s.is_empty()))
    }

    pub(crate) fn required_string(&self, key: &str) -> Result<String, DriverError> {
        self.string(key)?.ok_or_else(|| self.invalid(key, "is required"))
    }

    /// An optional string that must be one of `allowed`.
    pub(crate) fn one_of(&self, key: &str, allowed: &[&str]) -> Result<Option<String>, DriverError> {
        match self.string(key)? {
            Some(s) if !allowed.contains(&s.as_str()) => {
                Err(self.invalid(key, format!("{s:?} is not one of {}", allowed.join(", "))))
            }
            other => Ok(other),
        }
    }

    pub(crate) fn required_one_of(&self, key: &str, allowed: &[&str]) -> Result<String, DriverError> {
        self.one_of(key, allowed)?.ok_or_else(|| self.invalid(key, format!("is required ({})", allowed.join(", "))))
    }

    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>, DriverError> {
        self.get(key)
            .map(|v| v.as_bool().ok_or_else(|| self.invalid(key, format!("must be true or false, got {}", kind(v)))))
            .transpose()
    }

    /// An optional whole number in `min..=max`.
    pub(crate) fn int(&self, key: &str, min: i32, max: i32) -> Result<Option<i32>, DriverError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let n = v.as_i64().ok_or_else(|| self.invalid(key, format!("must be a whole number, got {v}")))?;
        match i32::try_from(n) {
            Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ if max == i32::MAX => Err(self.invalid(key, format!("{n} must be at least {min}"))),
            _ => Err(self.invalid(key, format!("{n} must be between {min} and {max}"))),
        }
    }

    #[cfg_attr(not(feature = "aws"), allow(dead_code))]
    pub(crate) fn strings(&self, key: &str) -> Result<Option<Vec<String>>, DriverError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let items = v.as_array().ok_or_else(|| self.invalid(key, format!("must be a list, got {}", kind(v))))?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| self.text(&format!("{key}[{i}]"), item))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    pub(crate) fn string_map(&self, key: &str) -> Result<Option<BTreeMap<String, String>>, DriverError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let map =
            v.as_object().ok_or_else(|| self.invalid(key, format!("must be a map of strings, got {}", kind(v))))?;
        map.iter()
            .map(|(k, item)| Ok((k.clone(), self.text(&format!("{key}[{k:?}]"), item)?)))
            .collect::<Result<BTreeMap<_, _>, _>>()
            .map(Some)
    }

    pub(crate) fn object(&self, key: &str, known: &[&str]) -> Result<Option<Obj<'a>>, DriverError> {
        self.get(key).map(|v| Obj::new(&self.field(key), v, known)).transpose()
    }

    /// A list of objects (absent: empty), each checked against `known`.
    pub(crate) fn list(&self, key: &str, known: &[&str]) -> Result<Vec<Obj<'a>>, DriverError> {
        let Some(v) = self.get(key) else { return Ok(Vec::new()) };
        let items = v.as_array().ok_or_else(|| self.invalid(key, format!("must be a list, got {}", kind(v))))?;
        items.iter().enumerate().map(|(i, item)| Obj::new(&self.field(&format!("{key}[{i}]")), item, known)).collect()
    }
}
