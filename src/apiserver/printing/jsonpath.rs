//! The JSONPath dialect of CRD printer columns, evaluated as kube-apiserver evaluates it (client-go's `jsonpath`
//! with missing keys allowed): a key that is absent yields no result rather than an error, while a type mistake
//! (indexing an object, filtering a string, comparing a string with a number) is an error, which the table turns
//! into an empty cell.
//!
//! Supported: `$` (optional), `.field` with `\.` escapes, `['field']`, `.*` and `[*]`, `[n]` and `[-n]`, slices
//! `[a:b]` and `[a:b:step]`, filters `[?(@.a.b == "x")]` with `==`, `!=`, `<`, `>`, `<=`, `>=` against strings,
//! numbers, booleans or another `@` path, and existence filters `[?(@.a)]`. Not supported: recursive descent
//! (`..`), unions (`[a,b]`), `range`/`end` templates.

use std::cmp::Ordering;

use serde_json::Value;

/// A parsed path, e.g. `.status.conditions[?(@.type=="Ready")].status`.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `.name`, `['name']`; the empty name (`.` alone) is the current value.
    Field(String),
    /// `.*`: every value of an object or element of an array.
    Wildcard,
    /// `[n]`, `[a:b]`, `[a:b:c]`, `[*]`.
    Slice { start: Option<i64>, end: Option<i64>, step: Option<i64>, index: bool },
    /// `[?(...)]`.
    Filter(Box<Filter>),
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    left: Operand,
    /// `None` for an existence test.
    compare: Option<(Op, Operand)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    /// `@...`, relative to the element under test.
    Path(JsonPath),
    /// A quoted string, a number or a boolean.
    Literal(Value),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

/// Why a path does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A construct outside the supported subset, or malformed input.
    #[error("invalid JSONPath {path:?}: {problem}")]
    Invalid {
        /// The path.
        path: String,
        /// What is wrong.
        problem: String,
    },
}

/// Why a path could not be evaluated against an object (client-go reports these; the cell stays empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// An index or slice outside the array.
    #[error("array index out of bounds: index {index}, length {length}")]
    OutOfBounds {
        /// The offending index.
        index: i64,
        /// The array's length.
        length: usize,
    },
    /// `[...]` applied to something that is not an array.
    #[error("{0} is not array or slice")]
    NotArray(&'static str),
    /// A filter comparison between values of different kinds, or of kinds that cannot be ordered.
    #[error("incompatible types for comparison")]
    Incompatible,
    /// A filter operand with several values.
    #[error("can only compare one element at a time")]
    Ambiguous,
}

struct Parser<'a> {
    path: &'a str,
    chars: Vec<char>,
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, problem: impl Into<String>) -> ParseError {
        ParseError::Invalid { path: self.path.to_string(), problem: problem.into() }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn rest_starts_with(&self, s: &str) -> bool {
        s.chars().enumerate().all(|(i, c)| self.chars.get(self.pos + i) == Some(&c))
    }

    fn steps(&mut self) -> Result<Vec<Step>, ParseError> {
        let mut steps = Vec::new();
        while let Some(c) = self.peek() {
            match c {
                '.' => {
                    self.pos += 1;
                    if self.peek() == Some('.') {
                        return Err(self.error("recursive descent (..) is not supported"));
                    }
                    let name = self.field_name();
                    steps.push(if name == "*" { Step::Wildcard } else { Step::Field(name) });
                }
                '[' if self.rest_starts_with("[?(") => {
                    self.pos += 3;
                    steps.push(Step::Filter(Box::new(self.filter()?)));
                }
                '[' => {
                    self.pos += 1;
                    steps.push(self.bracket()?);
                }
                c if c.is_whitespace() => self.pos += 1,
                other => return Err(self.error(format!("unexpected {other:?}"))),
            }
        }
        Ok(steps)
    }

    /// A field name up to the next unescaped terminator; a backslash keeps the next character literally.
    fn field_name(&mut self) -> String {
        let mut name = String::new();
        while let Some(c) = self.peek() {
            match c {
                '\\' => {
                    self.pos += 1;
                    if let Some(next) = self.peek() {
                        name.push(next);
                        self.pos += 1;
                    }
                }
                '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}' => break,
                c if c.is_whitespace() => break,
                c => {
                    name.push(c);
                    self.pos += 1;
                }
            }
        }
        name
    }

    /// The inside of `[...]` after the opening bracket: a quoted key, `*`, an index or a slice.
    fn bracket(&mut self) -> Result<Step, ParseError> {
        let start = self.pos;
        let mut quote = None;
        while let Some(c) = self.peek() {
            match (quote, c) {
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, ']') => break,
                _ => {}
            }
            self.pos += 1;
        }
        if self.peek() != Some(']') {
            return Err(self.error("unterminated ["));
        }
        let inner: String = self.chars[start..self.pos].iter().collect();
        self.pos += 1;
        let inner = inner.trim();
        if let Some(key) = unquote(inner) {
            return Ok(Step::Field(key));
        }
        if inner == "*" {
            return Ok(Step::Slice { start: None, end: None, step: None, index: false });
        }
        let parts: Vec<&str> = inner.split(':').map(str::trim).collect();
        let number = |s: &str| -> Result<Option<i64>, ParseError> {
            if s.is_empty() {
                return Ok(None);
            }
            s.parse().map(Some).map_err(|_| self.error(format!("invalid array index {s:?}")))
        };
        match parts.as_slice() {
            [one] => match number(one)? {
                Some(i) => Ok(Step::Slice { start: Some(i), end: None, step: None, index: true }),
                None => Err(self.error("empty array index")),
            },
            [a, b] => Ok(Step::Slice { start: number(a)?, end: number(b)?, step: None, index: false }),
            [a, b, c] => Ok(Step::Slice { start: number(a)?, end: number(b)?, step: number(c)?, index: false }),
            _ => Err(self.error(format!("invalid array index {inner:?}"))),
        }
    }

    /// A filter after `[?(`, up to the `)]` outside quotes.
    fn filter(&mut self) -> Result<Filter, ParseError> {
        let start = self.pos;
        let mut quote = None;
        loop {
            let Some(c) = self.peek() else { return Err(self.error("unterminated filter")) };
            match (quote, c) {
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), '\\') if q == '"' || q == '\'' => self.pos += 1,
                (Some(q), c) if c == q => quote = None,
                (None, ')') if self.chars.get(self.pos + 1) == Some(&']') => break,
                _ => {}
            }
            self.pos += 1;
        }
        let inner: String = self.chars[start..self.pos].iter().collect();
        self.pos += 2;
        // The operator is the first run of comparison characters outside quotes.
        let mut quote = None;
        let mut op_at = None;
        for (i, c) in inner.char_indices() {
            match (quote, c) {
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '!' | '<' | '>' | '=') => {
                    op_at = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(op_start) = op_at else {
            return Ok(Filter { left: self.operand(inner.trim())?, compare: None });
        };
        let op_len = inner[op_start..].chars().take_while(|c| matches!(c, '!' | '<' | '>' | '=')).count();
        let op = match &inner[op_start..op_start + op_len] {
            "==" => Op::Eq,
            "!=" => Op::Ne,
            "<" => Op::Lt,
            ">" => Op::Gt,
            "<=" => Op::Le,
            ">=" => Op::Ge,
            other => return Err(self.error(format!("unrecognized filter operator {other}"))),
        };
        let left = self.operand(inner[..op_start].trim())?;
        let right = self.operand(inner[op_start + op_len..].trim())?;
        Ok(Filter { left, compare: Some((op, right)) })
    }

    fn operand(&self, text: &str) -> Result<Operand, ParseError> {
        if let Some(relative) = text.strip_prefix('@') {
            let mut parser = Parser { path: self.path, chars: relative.chars().collect(), pos: 0 };
            return Ok(Operand::Path(JsonPath { steps: parser.steps()? }));
        }
        if let Some(s) = unquote(text) {
            return Ok(Operand::Literal(Value::String(s)));
        }
        match text {
            "true" => return Ok(Operand::Literal(Value::Bool(true))),
            "false" => return Ok(Operand::Literal(Value::Bool(false))),
            _ => {}
        }
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Operand::Literal(Value::from(i)));
        }
        if let Some(n) = text.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
            return Ok(Operand::Literal(Value::Number(n)));
        }
        Err(self.error(format!("unrecognized filter operand {text:?}")))
    }
}

/// The content of a single- or double-quoted string, with backslash escapes resolved.
fn unquote(text: &str) -> Option<String> {
    let quote = text.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let body = text.strip_prefix(quote)?.strip_suffix(quote)?;
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

impl JsonPath {
    /// Parses a printer column's `jsonPath` (with or without the `{...}` braces of a kubectl template).
    pub fn parse(path: &str) -> Result<Self, ParseError> {
        let trimmed = path.trim();
        let inner = trimmed.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(trimmed).trim();
        let inner = inner.strip_prefix('$').unwrap_or(inner);
        let mut parser = Parser { path, chars: inner.chars().collect(), pos: 0 };
        Ok(JsonPath { steps: parser.steps()? })
    }

    /// Every value the path selects in `root`, in document order (object wildcards in key order).
    pub fn find<'a>(&self, root: &'a Value) -> Result<Vec<&'a Value>, EvalError> {
        let mut current = vec![root];
        for step in &self.steps {
            current = apply(step, current)?;
        }
        Ok(current)
    }
}

fn apply<'a>(step: &Step, input: Vec<&'a Value>) -> Result<Vec<&'a Value>, EvalError> {
    let mut out = Vec::new();
    for value in input {
        // client-go skips nil values before every step.
        if value.is_null() {
            continue;
        }
        match step {
            Step::Field(name) if name.is_empty() => out.push(value),
            Step::Field(name) => out.extend(value.as_object().and_then(|m| m.get(name))),
            Step::Wildcard => match value {
                Value::Object(map) => out.extend(map.values()),
                Value::Array(items) => out.extend(items.iter()),
                _ => {}
            },
            Step::Slice { start, end, step, index } => {
                let Value::Array(items) = value else { return Err(EvalError::NotArray(kind_name(value))) };
                out.extend(slice(items, *start, *end, *step, *index)?);
            }
            Step::Filter(filter) => {
                let Value::Array(items) = value else { return Err(EvalError::NotArray(kind_name(value))) };
                for item in items {
                    if filter.matches(item)? {
                        out.push(item);
                    }
                }
            }
        }
    }
    Ok(out)
}

fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "map",
    }
}

fn slice(
    items: &[Value],
    start: Option<i64>,
    end: Option<i64>,
    step: Option<i64>,
    index: bool,
) -> Result<Vec<&Value>, EvalError> {
    let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
    let mut from = start.unwrap_or(0);
    if from < 0 {
        from += len;
    }
    // `[n]` is the slice `[n:n+1]`.
    let mut to = if index { start.unwrap_or(0) + 1 } else { end.unwrap_or(len) };
    if to < 0 || (index && to == 0) {
        to += len;
    }
    if from == to {
        return Ok(Vec::new());
    }
    if from < 0 || from >= len {
        return Err(EvalError::OutOfBounds { index: from, length: items.len() });
    }
    if to < 0 || to > len {
        return Err(EvalError::OutOfBounds { index: to - 1, length: items.len() });
    }
    if from > to {
        return Ok(Vec::new());
    }
    let step = usize::try_from(step.unwrap_or(1).max(1)).unwrap_or(1);
    let (from, to) = (usize::try_from(from).unwrap_or(0), usize::try_from(to).unwrap_or(0));
    Ok(items[from..to].iter().step_by(step).collect())
}

impl Filter {
    fn matches(&self, item: &Value) -> Result<bool, EvalError> {
        let left = operand_values(&self.left, item)?;
        let Some((op, right)) = &self.compare else { return Ok(!left.is_empty()) };
        let left = match left.as_slice() {
            [] => return Ok(false),
            [one] => *one,
            _ => return Err(EvalError::Ambiguous),
        };
        let right = operand_values(right, item)?;
        let right = match right.as_slice() {
            [] => return Ok(false),
            [one] => *one,
            _ => return Err(EvalError::Ambiguous),
        };
        compare(left, *op, right)
    }
}

fn operand_values<'a>(operand: &'a Operand, item: &'a Value) -> Result<Vec<&'a Value>, EvalError> {
    match operand {
        Operand::Path(path) => path.find(item),
        Operand::Literal(value) => Ok(vec![value]),
    }
}

/// Go templates compare values of the same basic kind only: integers with integers, floats with floats.
fn compare(left: &Value, op: Op, right: &Value) -> Result<bool, EvalError> {
    let ordering = match (left, right) {
        (Value::String(a), Value::String(b)) => a.cmp(b),
        (Value::Bool(a), Value::Bool(b)) => match op {
            Op::Eq => return Ok(a == b),
            Op::Ne => return Ok(a != b),
            _ => return Err(EvalError::Incompatible),
        },
        (Value::Number(a), Value::Number(b)) => {
            let integral = |n: &serde_json::Number| n.is_i64() || n.is_u64();
            match (integral(a), integral(b)) {
                (true, true) => match (a.as_i64(), b.as_i64()) {
                    (Some(x), Some(y)) => x.cmp(&y),
                    _ => a.as_u64().cmp(&b.as_u64()),
                },
                (false, false) => {
                    let (x, y) = (a.as_f64().unwrap_or(f64::NAN), b.as_f64().unwrap_or(f64::NAN));
                    x.partial_cmp(&y).ok_or(EvalError::Incompatible)?
                }
                _ => return Err(EvalError::Incompatible),
            }
        }
        _ => return Err(EvalError::Incompatible),
    };
    Ok(match op {
        Op::Eq => ordering == Ordering::Equal,
        Op::Ne => ordering != Ordering::Equal,
        Op::Lt => ordering == Ordering::Less,
        Op::Gt => ordering == Ordering::Greater,
        Op::Le => ordering != Ordering::Greater,
        Op::Ge => ordering != Ordering::Less,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn machine() -> Value {
        json!({
            "metadata": {"name": "m1", "labels": {"cluster.x-k8s.io/cluster-name": "c1", "node": "n1"},
                         "ownerReferences": [{"kind": "MachineSet", "name": "ms"},
                                             {"kind": "Machine", "name": "owner"}]},
            "spec": {"replicas": 3, "ratio": 1.5, "paused": false, "tags": ["a", "b", "c"], "empty": null},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "observedGeneration": 2},
                    {"type": "Available", "status": "False", "observedGeneration": 1},
                    {"type": "Paused", "status": "False", "observedGeneration": 2}
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.1"},
                    {"type": "InternalIP", "address": "10.0.0.2"}
                ],
                "flags": {"x": true, "y": false}
            }
        })
    }

    #[test]
    fn paths_select_like_client_go() {
        let obj = machine();
        let cases: &[(&str, Vec<Value>)] = &[
            (".metadata.name", vec![json!("m1")]),
            ("{.metadata.name}", vec![json!("m1")]),
            ("$.metadata.name", vec![json!("m1")]),
            (r".metadata.labels.cluster\.x-k8s\.io/cluster-name", vec![json!("c1")]),
            (".metadata.labels['cluster.x-k8s.io/cluster-name']", vec![json!("c1")]),
            (".metadata.missing.deeper", vec![]),
            (".spec.replicas", vec![json!(3)]),
            (".spec.tags[0]", vec![json!("a")]),
            (".spec.tags[-1]", vec![json!("c")]),
            (".spec.tags[*]", vec![json!("a"), json!("b"), json!("c")]),
            (".spec.tags[0:2]", vec![json!("a"), json!("b")]),
            (".spec.tags[::2]", vec![json!("a"), json!("c")]),
            (".spec.tags.*", vec![json!("a"), json!("b"), json!("c")]),
            (".status.flags.*", vec![json!(true), json!(false)]),
            (".spec.empty", vec![Value::Null]),
            (".spec.empty.x", vec![]),
            (r#".status.conditions[?(@.type=="Ready")].status"#, vec![json!("True")]),
            (r#".status.conditions[?(@.type == 'Available')].status"#, vec![json!("False")]),
            (r#".status.conditions[?(@.type!="Ready")].type"#, vec![json!("Available"), json!("Paused")]),
            (".status.conditions[?(@.observedGeneration==2)].type", vec![json!("Ready"), json!("Paused")]),
            (".status.conditions[?(@.observedGeneration>1)].type", vec![json!("Ready"), json!("Paused")]),
            (".status.conditions[?(@.observedGeneration<=1)].type", vec![json!("Available")]),
            (r#".status.conditions[?(@.type=="Missing")].status"#, vec![]),
            (".status.conditions[?(@.type)].type", vec![json!("Ready"), json!("Available"), json!("Paused")]),
            (".status.conditions[?(@.reason)].type", vec![]),
            (r#".status.addresses[?(@.type=="InternalIP")].address"#, vec![json!("10.0.0.1"), json!("10.0.0.2")]),
            (r#".metadata.ownerReferences[?(@.kind=="Machine")].name"#, vec![json!("owner")]),
            (".spec.paused", vec![json!(false)]),
            (".status.missing[0]", vec![]),
        ];
        for (path, expected) in cases {
            let parsed = JsonPath::parse(path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let found: Vec<Value> =
                parsed.find(&obj).unwrap_or_else(|e| panic!("{path}: {e}")).into_iter().cloned().collect();
            assert_eq!(&found, expected, "{path}");
        }
    }

    #[test]
    fn type_mistakes_are_errors() {
        let obj = machine();
        let cases: &[(&str, EvalError)] = &[
            (".spec.tags[5]", EvalError::OutOfBounds { index: 5, length: 3 }),
            (".metadata.name[0]", EvalError::NotArray("string")),
            (".metadata.labels[?(@.x)]", EvalError::NotArray("map")),
            (r#".status.conditions[?(@.observedGeneration=="2")].type"#, EvalError::Incompatible),
            (".status.conditions[?(@.observedGeneration==2.0)].type", EvalError::Incompatible),
            (".status.conditions[?(@.type>true)].type", EvalError::Incompatible),
        ];
        for (path, expected) in cases {
            let parsed = JsonPath::parse(path).unwrap();
            assert_eq!(parsed.find(&obj).unwrap_err(), *expected, "{path}");
        }
    }

    #[test]
    fn unsupported_syntax_is_rejected() {
        for path in ["..name", ".a[", ".a[?(@.x==\"y\"]", ".a[x]", ".a[?(@.x=~\"y\")]", ".a[?(@.x==y)]"] {
            assert!(JsonPath::parse(path).is_err(), "{path}");
        }
    }
}
