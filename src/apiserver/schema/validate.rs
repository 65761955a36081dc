//! Validation of a (defaulted, pruned) object against a compiled schema, with kube's messages.
//!
//! Details follow kube-openapi's wording (`<path> in body must be of type integer: "string"`) and kube's
//! conversion of those results into field errors (enum failures become `NotSupported`, `maxLength` `TooLong`,
//! `maxItems`/`maxProperties` `TooMany`, type and format failures `TypeInvalid`, the rest `Invalid`).

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::compile::{Additional, JsonType, ListType, Node};
use super::format::{go_float, go_number, go_quote};
use super::{FieldError, FieldErrorType};

/// One step of a field path; rendered only when an error is reported.
#[derive(Clone, Copy)]
enum Seg<'a> {
    /// `.name`
    Field(&'a str),
    /// `[3]`
    Index(usize),
    /// `[key]` of a map (`additionalProperties`).
    Key(&'a str),
}

struct Ctx<'a> {
    path: Vec<Seg<'a>>,
    errors: Vec<FieldError>,
}

impl<'a> Ctx<'a> {
    fn path(&self) -> String {
        let mut out = String::new();
        for seg in &self.path {
            match seg {
                Seg::Field(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                }
                Seg::Index(i) => {
                    let _ = write!(out, "[{i}]");
                }
                Seg::Key(key) => {
                    let _ = write!(out, "[{key}]");
                }
            }
        }
        out
    }

    /// Reports an error at the current path; `detail` gets the rendered path to mention it.
    fn report(&mut self, error_type: FieldErrorType, bad_value: Option<Value>, detail: impl FnOnce(&str) -> String) {
        let field = self.path();
        let detail = detail(&field);
        self.errors.push(FieldError { field, error_type, bad_value, detail });
    }

    /// Reports an error at a child of the current path.
    fn report_at(
        &mut self,
        seg: Seg<'a>,
        error_type: FieldErrorType,
        bad_value: Option<Value>,
        detail: impl FnOnce(&str) -> String,
    ) {
        self.path.push(seg);
        self.report(error_type, bad_value, detail);
        self.path.pop();
    }

    fn type_error(&mut self, expected: &str, value: &Value) {
        let actual = type_name(value);
        self.report(FieldErrorType::TypeInvalid, Some(Value::String(actual.to_owned())), |path| {
            format!("{path} in body must be of type {expected}: \"{actual}\"")
        });
    }

    /// Runs `f` with an empty error list and returns what it reported, leaving the context's errors as they were.
    fn collect(&mut self, f: impl FnOnce(&mut Self)) -> Vec<FieldError> {
        let saved = std::mem::take(&mut self.errors);
        f(self);
        std::mem::replace(&mut self.errors, saved)
    }
}

/// The JSON type of a value as kube-openapi names it in messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

pub(super) fn validate_root(node: &Node, object: &Value) -> Vec<FieldError> {
    let mut ctx = Ctx { path: Vec::new(), errors: Vec::new() };
    check(node, object, &mut ctx, true);
    ctx.errors
}

fn check<'a>(node: &Node, value: &'a Value, ctx: &mut Ctx<'a>, root: bool) {
    if value.is_null() && node.nullable {
        return;
    }
    match node.ty {
        Some(ty) if !ty.accepts(value) => return ctx.type_error(ty.name(), value),
        None if node.int_or_string && !(JsonType::Integer.accepts(value) || value.is_string()) => {
            return ctx.type_error("integer or string", value);
        }
        _ => {}
    }
    if let Some(allowed) = &node.enumeration
        && !allowed.iter().any(|a| json_eq(a, value))
    {
        ctx.report(FieldErrorType::NotSupported, Some(value.clone()), |_| supported_values(allowed));
    }
    match value {
        Value::String(s) => check_string(node, s, value, ctx),
        Value::Number(n) => check_number(node, n, value, ctx),
        Value::Array(items) => check_array(node, items, ctx),
        Value::Object(map) => check_object(node, map, ctx, root),
        Value::Null | Value::Bool(_) => {}
    }
    check_junctors(node, value, ctx);
}

fn supported_values(allowed: &[Value]) -> String {
    let mut out = String::new();
    for (i, value) in allowed.iter().enumerate() {
        if i == 0 {
            out.push_str("supported values: ");
        } else {
            out.push_str(", ");
        }
        match value {
            Value::String(s) => go_quote(s, &mut out),
            other => go_quote(&other.to_string(), &mut out),
        }
    }
    out
}

fn check_string(node: &Node, s: &str, value: &Value, ctx: &mut Ctx<'_>) {
    // Like kube-openapi, only the first of the length and pattern failures is reported.
    let chars = if node.max_length.is_some() || node.min_length.is_some() { s.chars().count() as u64 } else { 0 };
    let too_long = node.max_length.filter(|max| chars > *max);
    let too_short = node.min_length.filter(|min| chars < *min);
    if let Some(max) = too_long {
        let unit = if max == 1 { "byte" } else { "bytes" };
        ctx.report(FieldErrorType::TooLong, Some(value.clone()), |_| format!("may not be more than {max} {unit}"));
    } else if let Some(min) = too_short {
        ctx.report(FieldErrorType::Invalid, Some(value.clone()), |path| {
            format!("{path} in body should be at least {min} chars long")
        });
    } else if let Some(pattern) = &node.pattern
        && !pattern.regex.is_match(s)
    {
        ctx.report(FieldErrorType::Invalid, Some(value.clone()), |path| {
            format!("{path} in body should match '{}'", pattern.source)
        });
    }
    if let Some(format) = node.format
        && !format.check_str(s)
    {
        ctx.report(FieldErrorType::TypeInvalid, Some(value.clone()), |path| {
            let mut detail = format!("{path} in body must be of type {}: ", format.name());
            go_quote(s, &mut detail);
            detail
        });
    }
}

fn check_number(node: &Node, n: &serde_json::Number, value: &Value, ctx: &mut Ctx<'_>) {
    if let Some(format) = node.format
        && !format.check_number(n)
    {
        ctx.report(FieldErrorType::TypeInvalid, Some(value.clone()), |path| {
            format!("{path} in body must be of type {}: \"{}\"", format.name(), go_number(n))
        });
    }
    let Some(x) = n.as_f64() else { return };
    if let Some(factor) = node.multiple_of
        && !is_multiple(n, x, factor)
    {
        ctx.report(FieldErrorType::Invalid, Some(value.clone()), |path| {
            format!("{path} in body should be a multiple of {}", go_float(factor))
        });
    }
    if let Some(max) = node.maximum {
        let (fails, relation) =
            if node.exclusive_maximum { (x >= max, "less than") } else { (x > max, "less than or equal to") };
        if fails {
            ctx.report(FieldErrorType::Invalid, Some(value.clone()), |path| {
                format!("{path} in body should be {relation} {}", go_float(max))
            });
        }
    }
    if let Some(min) = node.minimum {
        let (fails, relation) =
            if node.exclusive_minimum { (x <= min, "greater than") } else { (x < min, "greater than or equal to") };
        if fails {
            ctx.report(FieldErrorType::Invalid, Some(value.clone()), |path| {
                format!("{path} in body should be {relation} {}", go_float(min))
            });
        }
    }
}

/// Exact for integers divided by an integral factor, within a relative 1e-9 otherwise (as kube-openapi).
fn is_multiple(n: &serde_json::Number, x: f64, factor: f64) -> bool {
    if let Some(i) = n.as_i64()
        && factor.fract() == 0.0
        && factor.abs() < 9.0e18
    {
        return i128::from(i) % (factor as i128) == 0;
    }
    let quotient = x / factor;
    let nearest = quotient.round();
    quotient == nearest || (quotient - nearest).abs() / (quotient.abs() + nearest.abs()) < 1e-9
}

fn check_array<'a>(node: &Node, items: &'a [Value], ctx: &mut Ctx<'a>) {
    let len = items.len() as u64;
    if let Some(max) = node.max_items
        && len > max
    {
        ctx.report(FieldErrorType::TooMany, Some(Value::from(len)), |_| at_most(max, "item"));
    }
    if let Some(min) = node.min_items
        && len < min
    {
        ctx.report(FieldErrorType::Invalid, Some(Value::from(len)), |path| {
            format!("{path} in body should have at least {min} items")
        });
    }
    if node.unique_items && first_duplicates(items.iter().map(Some)).next().is_some() {
        ctx.report(FieldErrorType::Invalid, None, |path| format!("{path} in body shouldn't contain duplicates"));
    }
    if let Some(item_node) = &node.items {
        for (i, item) in items.iter().enumerate() {
            ctx.path.push(Seg::Index(i));
            check(item_node, item, ctx, false);
            ctx.path.pop();
        }
    }
    match &node.list_type {
        Some(ListType::Set) => {
            for i in first_duplicates(items.iter().map(Some)) {
                ctx.report_at(Seg::Index(i), FieldErrorType::Duplicate, Some(items[i].clone()), |_| String::new());
            }
        }
        Some(ListType::Map(keys)) => check_list_map(node, keys, items, ctx),
        Some(ListType::Atomic) | None => {}
    }
}

fn at_most(max: u64, noun: &str) -> String {
    format!("must have at most {max} {noun}{}", if max == 1 { "" } else { "s" })
}

/// `x-kubernetes-list-type: map`: items are objects whose key fields (or their defaults) are unique.
fn check_list_map<'a>(node: &Node, keys: &[String], items: &'a [Value], ctx: &mut Ctx<'a>) {
    if let Some(i) = items.iter().position(|item| !(item.is_object() || item.is_null())) {
        let bad = items[i].clone();
        ctx.report_at(Seg::Index(i), FieldErrorType::Invalid, Some(bad), |_| {
            "must be an object for an array of list-type map".to_owned()
        });
        return;
    }
    let key_of = |item: &Value| -> Option<Map<String, Value>> {
        let item = item.as_object()?;
        let mut key = Map::new();
        for name in keys {
            let default = node.items.as_ref().and_then(|items| items.properties.get(name)?.default.as_ref());
            if let Some(v) = item.get(name).or(default) {
                key.insert(name.clone(), v.clone());
            }
        }
        Some(key)
    };
    let item_keys: Vec<Option<Value>> = items.iter().map(|item| key_of(item).map(Value::Object)).collect();
    for i in first_duplicates(item_keys.iter().map(Option::as_ref)) {
        let key = item_keys[i].clone();
        ctx.report_at(Seg::Index(i), FieldErrorType::Duplicate, key, |_| String::new());
    }
}

/// Indices of the second occurrence of every value seen more than once (as kube reports duplicates); `None`
/// entries are skipped.
fn first_duplicates<'v>(values: impl Iterator<Item = Option<&'v Value>>) -> impl Iterator<Item = usize> {
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut duplicates = Vec::new();
    for (i, value) in values.enumerate() {
        let Some(value) = value else { continue };
        let mut key = String::new();
        canonical(value, &mut key);
        let count = seen.entry(key).or_insert(0);
        *count += 1;
        if *count == 2 {
            duplicates.push(i);
        }
    }
    duplicates.into_iter()
}

/// A string equal for JSON-equal values: keys sorted, integral numbers written alike whatever their JSON form.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if !(n.is_i64() || n.is_u64()) && f.fract() == 0.0 && f.abs() < 9.0e15 => {
                let _ = write!(out, "{}", f as i64);
            }
            _ => {
                let _ = write!(out, "{n}");
            }
        },
        Value::Array(items) => {
            out.push('[');
            for item in items {
                canonical(item, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (k, v) in entries {
                let _ = write!(out, "{}:", Value::String(k.clone()));
                canonical(v, out);
                out.push(',');
            }
            out.push('}');
        }
        scalar => {
            let _ = write!(out, "{scalar}");
        }
    }
}

/// JSON equality where `1` and `1.0` are equal.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn check_object<'a>(node: &Node, map: &'a Map<String, Value>, ctx: &mut Ctx<'a>, root: bool) {
    for name in &node.required {
        if !map.contains_key(name) {
            // The path borrows from the object; a missing key is only rendered, so build the path by hand.
            let mut field = ctx.path();
            if !field.is_empty() {
                field.push('.');
            }
            field.push_str(name);
            ctx.errors.push(FieldError {
                field,
                error_type: FieldErrorType::Required,
                bad_value: None,
                detail: String::new(),
            });
        }
    }
    let len = map.len() as u64;
    if let Some(max) = node.max_properties
        && len > max
    {
        ctx.report(FieldErrorType::TooMany, Some(Value::from(len)), |_| at_most(max, "item"));
    }
    if let Some(min) = node.min_properties
        && len < min
    {
        ctx.report(FieldErrorType::Invalid, Some(Value::from(len)), |path| {
            format!("{path} in body should have at least {min} properties")
        });
    }
    if node.embedded && !root {
        check_embedded(node, map, ctx);
    }
    for (name, child) in map {
        if let Some(prop) = node.properties.get(name) {
            ctx.path.push(Seg::Field(name));
            check(prop, child, ctx, false);
            ctx.path.pop();
            continue;
        }
        match &node.additional {
            Additional::Schema(values) => {
                ctx.path.push(Seg::Key(name));
                check(values, child, ctx, false);
                ctx.path.pop();
            }
            Additional::Deny => ctx.report_at(Seg::Field(name), FieldErrorType::Forbidden, None, |path| {
                format!("{path} in body is a forbidden property")
            }),
            // Unknown fields are the pruner's business.
            Additional::Absent | Additional::Any => {}
        }
    }
}

/// `x-kubernetes-embedded-resource`: a full object with `apiVersion` and `kind` (unless unknown fields are
/// preserved, where the object may be partial), both well-formed.
fn check_embedded<'a>(node: &Node, map: &'a Map<String, Value>, ctx: &mut Ctx<'a>) {
    if !node.preserve_unknown {
        for name in ["apiVersion", "kind"] {
            if !map.contains_key(name) {
                ctx.report_at(Seg::Field(name), FieldErrorType::Required, None, |_| "must not be empty".to_owned());
            }
        }
    }
    if let Some((name, value)) = map.get_key_value("apiVersion") {
        let problem = match value.as_str() {
            None => Some("must be a string".to_owned()),
            Some("") => Some("must not be empty".to_owned()),
            Some(s) if s.matches('/').count() > 1 => Some(format!("unexpected GroupVersion string: {s}")),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            ctx.report_at(Seg::Field(name), FieldErrorType::Invalid, Some(value.clone()), |_| problem);
        }
    }
    if let Some((name, value)) = map.get_key_value("kind") {
        let problem = match value.as_str() {
            None => Some("must be a string".to_owned()),
            Some("") => Some("must not be empty".to_owned()),
            Some(kind) => dns1035_label_errors(&kind.to_ascii_lowercase())
                .map(|errors| format!("may have mixed case, but should otherwise match: {errors}")),
        };
        if let Some(problem) = problem {
            ctx.report_at(Seg::Field(name), FieldErrorType::Invalid, Some(value.clone()), |_| problem);
        }
    }
}

/// kube's `IsDNS1035Label` messages, comma-joined, or `None` when `s` is one.
fn dns1035_label_errors(s: &str) -> Option<String> {
    let mut errors = Vec::new();
    if s.len() > 63 {
        errors.push("must be no more than 63 characters");
    }
    let b = s.as_bytes();
    let well_formed = b.first().is_some_and(u8::is_ascii_lowercase)
        && b.last().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if !well_formed {
        errors.push(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic \
             character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for \
             validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
        );
    }
    (!errors.is_empty()).then(|| errors.join(","))
}

/// `allOf`, `anyOf`, `oneOf`, `not`: value validation against sub-schemas.
fn check_junctors<'a>(node: &Node, value: &'a Value, ctx: &mut Ctx<'a>) {
    if !node.all_of.is_empty() {
        let mut failures = Vec::new();
        let mut failed = 0;
        for sub in &node.all_of {
            let errors = ctx.collect(|ctx| check(sub, value, ctx, false));
            failed += usize::from(!errors.is_empty());
            failures.extend(errors);
        }
        if failed > 0 {
            let none = if failed == node.all_of.len() { ". None validated" } else { "" };
            report_junctor(ctx, &format!("must validate all the schemas (allOf){none}"));
            ctx.errors.extend(failures);
        }
    }
    if !node.any_of.is_empty() {
        let mut best: Option<Vec<FieldError>> = None;
        for sub in &node.any_of {
            let errors = ctx.collect(|ctx| check(sub, value, ctx, false));
            if errors.is_empty() {
                best = None;
                break;
            }
            if best.as_ref().is_none_or(|b| errors.len() < b.len()) {
                best = Some(errors);
            }
        }
        if let Some(best) = best {
            report_junctor(ctx, "must validate at least one schema (anyOf)");
            ctx.errors.extend(best);
        }
    }
    if !node.one_of.is_empty() {
        let mut valid = 0;
        let mut best: Option<Vec<FieldError>> = None;
        for sub in &node.one_of {
            let errors = ctx.collect(|ctx| check(sub, value, ctx, false));
            if errors.is_empty() {
                valid += 1;
            } else if best.as_ref().is_none_or(|b| errors.len() < b.len()) {
                best = Some(errors);
            }
        }
        if valid == 0 {
            report_junctor(ctx, "must validate one and only one schema (oneOf). Found none valid");
            ctx.errors.extend(best.unwrap_or_default());
        } else if valid > 1 {
            let detail = format!("must validate one and only one schema (oneOf). Found {valid} valid alternatives");
            report_junctor(ctx, &detail);
        }
    }
    if let Some(not) = &node.not
        && ctx.collect(|ctx| check(not, value, ctx, false)).is_empty()
    {
        report_junctor(ctx, "must not validate the schema (not)");
    }
}

/// A failed junctor, worded as kube-openapi: `"spec.x" must validate at least one schema (anyOf)`.
fn report_junctor(ctx: &mut Ctx<'_>, message: &str) {
    ctx.report(FieldErrorType::Invalid, None, |path| {
        let mut detail = String::new();
        go_quote(path, &mut detail);
        detail.push(' ');
        detail.push_str(message);
        detail
    });
}
