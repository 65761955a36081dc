//! The compiled form of a schema node and how it is built from JSON.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::SchemaError;
use super::format::{Format, go_pattern_to_rust};

/// The `type` keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JsonType {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl JsonType {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Array => "array",
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }

    pub(super) fn accepts(self, value: &Value) -> bool {
        match (self, value) {
            (Self::Object, Value::Object(_))
            | (Self::Array, Value::Array(_))
            | (Self::String, Value::String(_))
            | (Self::Number, Value::Number(_))
            | (Self::Boolean, Value::Bool(_)) => true,
            (Self::Integer, Value::Number(n)) => n.is_i64() || n.is_u64(),
            _ => false,
        }
    }
}

/// `additionalProperties`.
#[derive(Debug, Default)]
pub(super) enum Additional {
    /// Absent: undeclared keys are unknown fields.
    #[default]
    Absent,
    /// `true`: any key, values without a schema (kube prunes their object contents).
    Any,
    /// `false`: undeclared keys are forbidden.
    Deny,
    /// A schema for every undeclared key's value (a map).
    Schema(Box<Node>),
}

/// `x-kubernetes-list-type`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ListType {
    Atomic,
    Set,
    /// With its `x-kubernetes-list-map-keys`.
    Map(Vec<String>),
}

/// A compiled `pattern`: the source for messages, the regex for matching.
#[derive(Debug)]
pub(super) struct Pattern {
    pub(super) source: String,
    pub(super) regex: Regex,
}

/// One compiled schema node. Value-validation keywords are kept as parsed; absent keywords are `None`/empty.
#[derive(Debug, Default)]
pub(super) struct Node {
    pub(super) ty: Option<JsonType>,
    pub(super) nullable: bool,
    /// `default`; a `null` default counts as none, as in kube.
    pub(super) default: Option<Value>,
    pub(super) properties: BTreeMap<String, Node>,
    /// Names of the properties that have a `default`: defaulting looks only at these for missing fields.
    pub(super) defaulted_properties: Vec<String>,
    pub(super) additional: Additional,
    pub(super) items: Option<Box<Node>>,
    pub(super) required: Vec<String>,
    pub(super) enumeration: Option<Vec<Value>>,
    pub(super) pattern: Option<Pattern>,
    pub(super) format: Option<Format>,
    pub(super) minimum: Option<f64>,
    pub(super) exclusive_minimum: bool,
    pub(super) maximum: Option<f64>,
    pub(super) exclusive_maximum: bool,
    pub(super) multiple_of: Option<f64>,
    pub(super) min_length: Option<u64>,
    pub(super) max_length: Option<u64>,
    pub(super) min_items: Option<u64>,
    pub(super) max_items: Option<u64>,
    pub(super) unique_items: bool,
    pub(super) min_properties: Option<u64>,
    pub(super) max_properties: Option<u64>,
    pub(super) all_of: Vec<Node>,
    pub(super) any_of: Vec<Node>,
    pub(super) one_of: Vec<Node>,
    pub(super) not: Option<Box<Node>>,
    pub(super) int_or_string: bool,
    pub(super) preserve_unknown: bool,
    pub(super) embedded: bool,
    pub(super) list_type: Option<ListType>,
}

impl Node {
    /// Compiles `schema` found at `path`, counting CEL rules into `cel_rules`.
    pub(super) fn compile(schema: &Value, path: &str, cel_rules: &mut usize) -> Result<Self, SchemaError> {
        let Value::Object(map) = schema else {
            return Err(SchemaError::NotAnObject { path: path.to_owned() });
        };
        let kw = Keywords { map, path };
        let mut node = Node {
            ty: kw.str("type")?.map(|t| parse_type(t, &kw)).transpose()?,
            nullable: kw.bool("nullable")?,
            default: map.get("default").filter(|d| !d.is_null()).cloned(),
            required: kw.strings("required")?.unwrap_or_default(),
            enumeration: kw.array("enum")?.cloned(),
            format: kw.str("format")?.and_then(Format::parse),
            minimum: kw.number("minimum")?,
            exclusive_minimum: kw.bool("exclusiveMinimum")?,
            maximum: kw.number("maximum")?,
            exclusive_maximum: kw.bool("exclusiveMaximum")?,
            multiple_of: kw.number("multipleOf")?,
            min_length: kw.count("minLength")?,
            max_length: kw.count("maxLength")?,
            min_items: kw.count("minItems")?,
            max_items: kw.count("maxItems")?,
            unique_items: kw.bool("uniqueItems")?,
            min_properties: kw.count("minProperties")?,
            max_properties: kw.count("maxProperties")?,
            int_or_string: kw.bool("x-kubernetes-int-or-string")?,
            preserve_unknown: kw.bool("x-kubernetes-preserve-unknown-fields")?,
            embedded: kw.bool("x-kubernetes-embedded-resource")?,
            ..Node::default()
        };
        // An embedded resource is an object even when the schema leaves `type` out.
        if node.embedded && node.ty.is_none() {
            node.ty = Some(JsonType::Object);
        }
        if let Some(factor) = node.multiple_of
            && factor <= 0.0
        {
            return Err(kw.invalid("multipleOf", "must be greater than 0"));
        }
        if let Some(source) = kw.str("pattern")? {
            let regex = Regex::new(&go_pattern_to_rust(source)).map_err(|e| SchemaError::InvalidPattern {
                path: path.to_owned(),
                pattern: source.to_owned(),
                source: Box::new(e),
            })?;
            node.pattern = Some(Pattern { source: source.to_owned(), regex });
        }
        node.list_type = match kw.str("x-kubernetes-list-type")? {
            None => None,
            Some("atomic") => Some(ListType::Atomic),
            Some("set") => Some(ListType::Set),
            Some("map") => match kw.strings("x-kubernetes-list-map-keys")? {
                Some(keys) if !keys.is_empty() => Some(ListType::Map(keys)),
                _ => return Err(kw.invalid("x-kubernetes-list-map-keys", "must be non-empty for list-type map")),
            },
            Some(other) => {
                return Err(kw.invalid("x-kubernetes-list-type", &format!("unsupported value {other:?}")));
            }
        };
        if let Some(rules) = kw.array("x-kubernetes-validations")? {
            *cel_rules += rules.len();
        }

        if let Some(properties) = map.get("properties") {
            let Value::Object(properties) = properties else {
                return Err(kw.invalid("properties", "must be an object"));
            };
            for (name, sub) in properties {
                let sub = Node::compile(sub, &format!("{path}.properties[{name}]"), cel_rules)?;
                if sub.default.is_some() {
                    node.defaulted_properties.push(name.clone());
                }
                node.properties.insert(name.clone(), sub);
            }
        }
        node.additional = match map.get("additionalProperties") {
            None => Additional::Absent,
            Some(Value::Bool(true)) => Additional::Any,
            Some(Value::Bool(false)) => Additional::Deny,
            Some(sub) => {
                Additional::Schema(Box::new(Node::compile(sub, &format!("{path}.additionalProperties"), cel_rules)?))
            }
        };
        if let Some(items) = map.get("items") {
            if !items.is_object() {
                return Err(kw.invalid("items", "must be a schema object (tuples are not structural)"));
            }
            node.items = Some(Box::new(Node::compile(items, &format!("{path}.items"), cel_rules)?));
        }
        node.all_of = kw.schemas("allOf", cel_rules)?;
        node.any_of = kw.schemas("anyOf", cel_rules)?;
        node.one_of = kw.schemas("oneOf", cel_rules)?;
        if let Some(not) = map.get("not") {
            node.not = Some(Box::new(Node::compile(not, &format!("{path}.not"), cel_rules)?));
        }
        Ok(node)
    }
}

fn parse_type(name: &str, kw: &Keywords<'_>) -> Result<JsonType, SchemaError> {
    Ok(match name {
        "object" => JsonType::Object,
        "array" => JsonType::Array,
        "string" => JsonType::String,
        "integer" => JsonType::Integer,
        "number" => JsonType::Number,
        "boolean" => JsonType::Boolean,
        other => return Err(kw.invalid("type", &format!("unsupported type {other:?}"))),
    })
}

/// Typed access to the keywords of one schema node, with errors naming the node.
struct Keywords<'a> {
    map: &'a Map<String, Value>,
    path: &'a str,
}

impl<'a> Keywords<'a> {
    fn invalid(&self, keyword: &str, reason: &str) -> SchemaError {
        SchemaError::InvalidKeyword {
            path: self.path.to_owned(),
            keyword: keyword.to_owned(),
            reason: reason.to_owned(),
        }
    }

    fn str(&self, keyword: &str) -> Result<Option<&'a str>, SchemaError> {
        match self.map.get(keyword) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.invalid(keyword, "must be a string")),
        }
    }

    fn bool(&self, keyword: &str) -> Result<bool, SchemaError> {
        match self.map.get(keyword) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(self.invalid(keyword, "must be a boolean")),
        }
    }

    fn number(&self, keyword: &str) -> Result<Option<f64>, SchemaError> {
        match self.map.get(keyword) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(_) => Err(self.invalid(keyword, "must be a number")),
        }
    }

    fn count(&self, keyword: &str) -> Result<Option<u64>, SchemaError> {
        match self.map.get(keyword) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(count) => Ok(Some(count)),
                None => Err(self.invalid(keyword, "must be a non-negative integer")),
            },
            Some(_) => Err(self.invalid(keyword, "must be a non-negative integer")),
        }
    }

    fn array(&self, keyword: &str) -> Result<Option<&'a Vec<Value>>, SchemaError> {
        match self.map.get(keyword) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(_) => Err(self.invalid(keyword, "must be an array")),
        }
    }

    fn strings(&self, keyword: &str) -> Result<Option<Vec<String>>, SchemaError> {
        let Some(items) = self.array(keyword)? else { return Ok(None) };
        items
            .iter()
            .map(|item| item.as_str().map(str::to_owned).ok_or_else(|| self.invalid(keyword, "must hold strings only")))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    fn schemas(&self, keyword: &str, cel_rules: &mut usize) -> Result<Vec<Node>, SchemaError> {
        let Some(items) = self.array(keyword)? else { return Ok(Vec::new()) };
        items
            .iter()
            .enumerate()
            .map(|(i, sub)| Node::compile(sub, &format!("{}.{keyword}[{i}]", self.path), cel_rules))
            .collect()
    }
}
