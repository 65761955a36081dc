//! A strict reader for providerSpec JSON: every value is read through an [`Obj`] that knows its path, so errors
//! name the field (`providerSpec.disks[1].encryption.kmsKeyName: is required`), and refuses keys it does not know.
//!
//! Shared by the cloud drivers' `spec` modules; imports nothing but [`DriverError`].

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

use super::{Code, DriverError};

/// What kind of JSON value `v` is, for messages (`a number`, `a list`, ...).
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

    /// `InvalidArgument` naming `key` below this object.
    pub(crate) fn invalid(&self, key: &str, why: impl fmt::Display) -> DriverError {
        DriverError::invalid_field(&self.field(key), why)
    }

    /// The value of `key`; `null` counts as absent.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// `v` (the value of `key`) as a string.
    pub(crate) fn text(&self, key: &str, v: &'a Value) -> Result<String, DriverError> {
        v.as_str().map(str::to_string).ok_or_else(|| self.invalid(key, format!("must be a string, got {}", kind(v))))
    }

    /// An optional string; `""` counts as absent (Gardener's fields are `omitempty`).
    pub(crate) fn string(&self, key: &str) -> Result<Option<String>, DriverError> {
        Ok(self.get(key).map(|v| self.text(key, v)).transpose()?.filter(|s| !s.is_empty()))
    }

    /// A string that must be there and not empty.
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

    /// A string that must be there and one of `allowed`.
    pub(crate) fn required_one_of(&self, key: &str, allowed: &[&str]) -> Result<String, DriverError> {
        self.one_of(key, allowed)?.ok_or_else(|| self.invalid(key, format!("is required ({})", allowed.join(", "))))
    }

    /// An optional boolean.
    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>, DriverError> {
        self.get(key)
            .map(|v| v.as_bool().ok_or_else(|| self.invalid(key, format!("must be true or false, got {}", kind(v)))))
            .transpose()
    }

    /// An optional whole number in `min..=max`.
    pub(crate) fn int(&self, key: &str, min: i32, max: i32) -> Result<Option<i32>, DriverError> {
        self.int64(key, i64::from(min), i64::from(max))?
            .map(|n| i32::try_from(n).map_err(|_| self.invalid(key, format!("{n} is out of range"))))
            .transpose()
    }

    /// An optional whole number in `min..=max` (64-bit).
    pub(crate) fn int64(&self, key: &str, min: i64, max: i64) -> Result<Option<i64>, DriverError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let n = v.as_i64().ok_or_else(|| self.invalid(key, format!("must be a whole number, got {v}")))?;
        match n {
            n if (min..=max).contains(&n) => Ok(Some(n)),
            _ if max == i64::MAX || max == i64::from(i32::MAX) => {
                Err(self.invalid(key, format!("{n} must be at least {min}")))
            }
            _ => Err(self.invalid(key, format!("{n} must be between {min} and {max}"))),
        }
    }

    /// An optional list of strings.
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

    /// An optional map of strings.
    pub(crate) fn string_map(&self, key: &str) -> Result<Option<BTreeMap<String, String>>, DriverError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let map =
            v.as_object().ok_or_else(|| self.invalid(key, format!("must be a map of strings, got {}", kind(v))))?;
        map.iter()
            .map(|(k, item)| Ok((k.clone(), self.text(&format!("{key}[{k:?}]"), item)?)))
            .collect::<Result<BTreeMap<_, _>, _>>()
            .map(Some)
    }

    /// An optional nested object whose keys are all in `known`.
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_are_read_with_their_path() {
        let v = json!({"a": {"n": 5, "s": "", "b": true, "l": ["x", 1], "m": {"k": "v"}}, "z": null});
        let top = Obj::new("", &v, &["a", "z"]).unwrap();
        assert_eq!(top.get("z"), None);
        let a = top.object("a", &["n", "s", "b", "l", "m"]).unwrap().unwrap();
        assert_eq!(a.int64("n", 0, 10).unwrap(), Some(5));
        assert_eq!(a.int("n", 0, 10).unwrap(), Some(5));
        assert_eq!(a.string("s").unwrap(), None);
        assert_eq!(a.boolean("b").unwrap(), Some(true));
        assert_eq!(a.string_map("m").unwrap().unwrap()["k"], "v");
        let cases = [
            (a.int64("n", 6, 10).unwrap_err(), "providerSpec.a.n: 5 must be between 6 and 10"),
            (a.int64("n", 6, i64::MAX).unwrap_err(), "providerSpec.a.n: 5 must be at least 6"),
            (a.required_string("s").unwrap_err(), "providerSpec.a.s: is required"),
            (a.strings("l").unwrap_err(), "providerSpec.a.l[1]: must be a string, got a number"),
            (a.boolean("n").unwrap_err(), "providerSpec.a.n: must be true or false, got a number"),
            (a.one_of("b", &["x"]).unwrap_err(), "providerSpec.a.b: must be a string, got a boolean"),
            (Obj::new("", &v, &["a"]).err().unwrap(), "providerSpec: unknown field \"z\" (known: a)"),
            (Obj::new("p", &json!(1), &[]).err().unwrap(), "providerSpec.p: must be an object, got a number"),
        ];
        for (err, want) in cases {
            assert_eq!((err.code, err.message.as_str()), (Code::InvalidArgument, want));
        }
    }
}
