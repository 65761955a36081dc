//! Label and field selectors, parsed and matched as kube-apiserver does.
//!
//! [`LabelSelector`] follows `k8s.io/apimachinery/pkg/labels`: the `labelSelector` query parameter grammar
//! (`a=b,c!=d,e in (x,y),f notin (z),g,!h,k>5`), the `metav1.LabelSelector` JSON form used by workload and
//! disruption-budget selectors, kube's key and value validation, its matching rules and its canonical string form.
//!
//! [`FieldSelector`] follows `k8s.io/apimachinery/pkg/fields`: comma-separated `field=value`, `field==value` and
//! `field!=value` terms with backslash escaping of `\`, `,` and `=` in values. Which fields a resource supports is
//! the server's business, not this module's: [`FieldSelector::fields`] lists them for it to check.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value};

/// Why a label or field selector could not be parsed or built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A requirement of a label selector string is malformed or invalid; kube wraps every such cause this way.
    #[error("unable to parse requirement: {0}")]
    Requirement(Box<SelectorError>),
    /// The label selector string has a token the grammar does not allow at that place.
    #[error("found '{found}', expected: {expected}")]
    Unexpected {
        /// The token found (empty at the end of the string).
        found: String,
        /// What the grammar allows there.
        expected: &'static str,
    },
    /// A label key is not a qualified name.
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey {
        /// The offending key.
        key: String,
        /// Every rule it breaks, joined by `; `.
        reason: String,
    },
    /// A label value is not valid (or not an integer where `>`/`<` need one).
    #[error("invalid label value {value:?} for key {key:?}: {reason}")]
    InvalidValue {
        /// The key the value belongs to.
        key: String,
        /// The offending value.
        value: String,
        /// Every rule it breaks, joined by `; `.
        reason: String,
    },
    /// A requirement has the wrong number of values for its operator.
    #[error("invalid values for key {key:?}: {reason}")]
    InvalidValues {
        /// The key of the requirement.
        key: String,
        /// The rule broken.
        reason: &'static str,
    },
    /// A `matchExpressions` operator other than `In`, `NotIn`, `Exists` or `DoesNotExist`.
    #[error("{operator:?} is not a valid label selector operator")]
    UnsupportedOperator {
        /// The operator as written.
        operator: String,
    },
    /// A null `metav1.LabelSelector`: kube reads it as "match nothing", which [`LabelSelector`] cannot express, so
    /// the caller decides what it means.
    #[error("label selector is null")]
    Null,
    /// A `metav1.LabelSelector` whose JSON does not have the expected shape.
    #[error("invalid label selector: {0}")]
    Malformed(String),
    /// A field selector term with no `=`, `==` or `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    InvalidFieldTerm {
        /// The whole selector.
        selector: String,
        /// The term not understood.
        term: String,
    },
    /// A backslash in a field selector value not followed by `\`, `,` or `=`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscape(String),
    /// A bare `,` or `=` in a field selector value.
    #[error("invalid field selector: unescaped character in value: {0}")]
    UnescapedCharacter(char),
}

/// A label selector: the conjunction of its requirements. No requirements selects everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    /// The requirements, all of which must hold; sorted by key when parsed or built from JSON.
    pub requirements: Vec<LabelRequirement>,
}

/// One requirement of a label selector: a key, an operator and the operator's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRequirement {
    /// The label key, a qualified name with an optional DNS subdomain prefix.
    pub key: String,
    /// How the label's value is compared with `values`.
    pub operator: LabelOperator,
    /// The values: one for `Equals`, `NotEquals`, `GreaterThan` and `LessThan`, at least one for `In` and `NotIn`,
    /// none for `Exists` and `DoesNotExist`.
    pub values: Vec<String>,
}

/// The operator of a label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOperator {
    /// `key=value` or `key==value`: the label is present with that value.
    Equals,
    /// `key!=value`: the label is absent or has another value.
    NotEquals,
    /// `key in (v1,v2)`: the label is present with one of the values.
    In,
    /// `key notin (v1,v2)`: the label is absent or has none of the values.
    NotIn,
    /// `key`: the label is present.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key>n`: the label is present and is an integer greater than `n`.
    GreaterThan,
    /// `key<n`: the label is present and is an integer less than `n`.
    LessThan,
}

const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";
const NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an \
                         alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc', regex used for validation \
                         is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or \
                          '.', and must start and end with an alphanumeric character (e.g. 'MyValue', or 'my_value', \
                          or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const SUBDOMAIN_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' \
                              or '.', and must start and end with an alphanumeric character (e.g. 'example.com', \
                              regex used for validation is \
                              '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const NAME_MAX_LENGTH: usize = 63;
const SUBDOMAIN_MAX_LENGTH: usize = 253;

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the name part of a qualified name and a non-empty label value.
fn is_qualified_name_part(text: &str) -> bool {
    let bytes = text.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`: dot-separated lowercase DNS labels.
fn is_dns1123_subdomain(text: &str) -> bool {
    let is_alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    text.split('.').all(|label| {
        let bytes = label.as_bytes();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                is_alnum(first) && is_alnum(last) && bytes.iter().all(|b| is_alnum(b) || *b == b'-')
            }
            _ => false,
        }
    })
}

/// Kube's `IsQualifiedName`, collecting every broken rule as it does (also used for annotation keys).
pub fn validate_label_key(key: &str) -> Result<(), SelectorError> {
    let mut problems = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > SUBDOMAIN_MAX_LENGTH {
                    problems.push(format!("prefix part must be no more than {SUBDOMAIN_MAX_LENGTH} characters"));
                }
                if !is_dns1123_subdomain(prefix) {
                    problems.push(format!("prefix part {SUBDOMAIN_RULE}"));
                }
            }
            *name
        }
        _ => {
            return Err(SelectorError::InvalidKey {
                key: key.to_owned(),
                reason: format!(
                    "a qualified name {NAME_RULE} with an optional DNS subdomain prefix and '/' (e.g. \
                     'example.com/MyName')"
                ),
            });
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_owned());
    } else if name.len() > NAME_MAX_LENGTH {
        problems.push(format!("name part must be no more than {NAME_MAX_LENGTH} characters"));
    }
    if !is_qualified_name_part(name) {
        problems.push(format!("name part {NAME_RULE}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SelectorError::InvalidKey { key: key.to_owned(), reason: problems.join("; ") })
    }
}

/// Kube's `IsValidLabelValue`.
pub fn validate_label_value(key: &str, value: &str) -> Result<(), SelectorError> {
    let mut problems = Vec::new();
    if value.len() > NAME_MAX_LENGTH {
        problems.push(format!("must be no more than {NAME_MAX_LENGTH} characters"));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        problems.push(VALUE_RULE.to_owned());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SelectorError::InvalidValue { key: key.to_owned(), value: value.to_owned(), reason: problems.join("; ") })
    }
}

impl LabelRequirement {
    /// Builds a requirement, validating it as kube's `labels.NewRequirement` does: the key, the number of values
    /// for the operator, integer values for `GreaterThan`/`LessThan`, and every value.
    pub fn new(key: impl Into<String>, operator: LabelOperator, values: Vec<String>) -> Result<Self, SelectorError> {
        let key = key.into();
        validate_label_key(&key)?;
        let count_error = |reason| Err(SelectorError::InvalidValues { key: key.clone(), reason });
        match operator {
            LabelOperator::In | LabelOperator::NotIn if values.is_empty() => {
                return count_error("for 'in', 'notin' operators, values set can't be empty");
            }
            LabelOperator::Equals | LabelOperator::NotEquals if values.len() != 1 => {
                return count_error("exact-match compatibility requires one single value");
            }
            LabelOperator::Exists | LabelOperator::DoesNotExist if !values.is_empty() => {
                return count_error("values set must be empty for exists and does not exist");
            }
            LabelOperator::GreaterThan | LabelOperator::LessThan => {
                if values.len() != 1 {
                    return count_error("for 'Gt', 'Lt' operators, exactly one value is required");
                }
                if let Some(value) = values.iter().find(|value| value.parse::<i64>().is_err()) {
                    return Err(SelectorError::InvalidValue {
                        key,
                        value: value.clone(),
                        reason: "for 'Gt', 'Lt' operators, the value must be an integer".to_owned(),
                    });
                }
            }
            _ => {}
        }
        for value in &values {
            validate_label_value(&key, value)?;
        }
        Ok(Self { key, operator, values })
    }

    /// Whether a set of labels (an object's `metadata.labels`, `None` when absent) satisfies this requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let value = labels.and_then(|labels| labels.get(&self.key)).map(label_text);
        self.matches_text(value.as_deref())
    }

    /// Whether a label's value as text (`None` when the object lacks the label) satisfies this requirement.
    fn matches_text(&self, value: Option<&str>) -> bool {
        let has_value = |value: &str| self.values.iter().any(|candidate| candidate == value);
        match (self.operator, value) {
            (LabelOperator::Equals | LabelOperator::In, Some(value)) => has_value(value),
            (LabelOperator::Equals | LabelOperator::In, None) => false,
            // Negative operators hold for objects without the label, as kube's do.
            (LabelOperator::NotEquals | LabelOperator::NotIn, Some(value)) => !has_value(value),
            (LabelOperator::NotEquals | LabelOperator::NotIn, None) => true,
            (LabelOperator::Exists, value) => value.is_some(),
            (LabelOperator::DoesNotExist, value) => value.is_none(),
            (LabelOperator::GreaterThan | LabelOperator::LessThan, Some(value)) => {
                // A label or requirement value that is not an integer never matches, rather than being an error.
                let (Ok(actual), [wanted]) = (value.parse::<i64>(), self.values.as_slice()) else {
                    return false;
                };
                let Ok(wanted) = wanted.parse::<i64>() else {
                    return false;
                };
                if self.operator == LabelOperator::GreaterThan { actual > wanted } else { actual < wanted }
            }
            (LabelOperator::GreaterThan | LabelOperator::LessThan, None) => false,
        }
    }
}

/// A label's value as text. The server only stores string labels; anything else is read as its JSON text (and a
/// null as empty, as Go decodes it into a `map[string]string`) rather than rejected here.
pub fn label_text(value: &Value) -> Cow<'_, str> {
    match value {
        Value::String(text) => Cow::Borrowed(text),
        Value::Null => Cow::Borrowed(""),
        other => Cow::Owned(other.to_string()),
    }
}

impl fmt::Display for LabelRequirement {
    /// Kube's `Requirement.String()`: `!key`, `key`, `key=v`, `key!=v`, `key in (a,b)`, `key notin (a,b)`, `key>n`,
    /// `key<n`, with the values sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (operator, close) = match self.operator {
            LabelOperator::Exists => return f.write_str(&self.key),
            LabelOperator::DoesNotExist => return write!(f, "!{}", self.key),
            LabelOperator::Equals => ("=", ""),
            LabelOperator::NotEquals => ("!=", ""),
            LabelOperator::In => (" in (", ")"),
            LabelOperator::NotIn => (" notin (", ")"),
            LabelOperator::GreaterThan => (">", ""),
            LabelOperator::LessThan => ("<", ""),
        };
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        write!(f, "{}{operator}{}{close}", self.key, values.join(","))
    }
}

/// A token of kube's label selector lexer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// Any run of characters that are neither whitespace nor special; `in` and `notin` are keywords only where an
    /// operator is expected, so they stay identifiers here.
    Identifier(String),
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    OpenParen,
    CloseParen,
    Comma,
    End,
}

impl Token {
    fn literal(&self) -> &str {
        match self {
            Token::Identifier(text) => text,
            Token::Bang => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::GreaterThan => ">",
            Token::LessThan => "<",
            Token::OpenParen => "(",
            Token::CloseParen => ")",
            Token::Comma => ",",
            Token::End => "",
        }
    }
}

fn is_selector_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_special_symbol(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

/// Splits a label selector into tokens; every character belongs to some token, so lexing cannot fail.
fn lex(text: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if is_selector_whitespace(c) {
            continue;
        }
        if is_special_symbol(c) {
            // Longest match: the only two-character symbols are `!=` and `==`.
            let token = match (c, chars.peek()) {
                ('!', Some('=')) | ('=', Some('=')) => {
                    chars.next();
                    if c == '!' { Token::NotEquals } else { Token::DoubleEquals }
                }
                ('!', _) => Token::Bang,
                ('=', _) => Token::Equals,
                ('>', _) => Token::GreaterThan,
                ('<', _) => Token::LessThan,
                ('(', _) => Token::OpenParen,
                (')', _) => Token::CloseParen,
                // The only special symbol left is `,`.
                _ => Token::Comma,
            };
            tokens.push(token);
            continue;
        }
        let mut identifier = String::from(c);
        while let Some(&next) = chars.peek() {
            if is_selector_whitespace(next) || is_special_symbol(next) {
                break;
            }
            identifier.push(next);
            chars.next();
        }
        tokens.push(Token::Identifier(identifier));
    }
    tokens.push(Token::End);
    tokens
}

/// A recursive-descent parser over the tokens, following the structure (and so the error cases) of kube's.
struct Parser {
    tokens: Vec<Token>,
    position: usize,
}

static END: Token = Token::End;

fn unexpected(found: &Token, expected: &'static str) -> SelectorError {
    SelectorError::Unexpected { found: found.literal().to_owned(), expected }
}

impl Parser {
    fn peek(&self) -> &Token {
        self.tokens.get(self.position).unwrap_or(&END)
    }

    fn next(&mut self) -> Token {
        let token = self.peek().clone();
        self.position += 1;
        token
    }

    fn parse(&mut self) -> Result<Vec<LabelRequirement>, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            match self.peek() {
                Token::Identifier(_) | Token::Bang => {}
                Token::End => return Ok(requirements),
                other => return Err(unexpected(other, "!, identifier, or 'end of string'")),
            }
            let requirement = self.parse_requirement().map_err(|error| SelectorError::Requirement(Box::new(error)))?;
            requirements.push(requirement);
            match self.next() {
                Token::End => return Ok(requirements),
                Token::Comma => match self.peek() {
                    Token::Identifier(_) | Token::Bang => {}
                    other => return Err(unexpected(other, "identifier after ','")),
                },
                other => return Err(unexpected(&other, "',' or 'end of string'")),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<LabelRequirement, SelectorError> {
        let mut token = self.next();
        let negated = token == Token::Bang;
        if negated {
            token = self.next();
        }
        let Token::Identifier(key) = token else {
            return Err(unexpected(&token, "identifier"));
        };
        validate_label_key(&key)?;
        // A key alone (optionally after `!`) is a whole requirement.
        match self.peek() {
            Token::End | Token::Comma => {
                let operator = if negated { LabelOperator::DoesNotExist } else { LabelOperator::Exists };
                return LabelRequirement::new(key, operator, Vec::new());
            }
            other if negated => return Err(unexpected(other, "',' or 'end of string'")),
            _ => {}
        }
        let operator = match self.next() {
            Token::Identifier(word) if word == "in" => LabelOperator::In,
            Token::Identifier(word) if word == "notin" => LabelOperator::NotIn,
            Token::Equals | Token::DoubleEquals => LabelOperator::Equals,
            Token::NotEquals => LabelOperator::NotEquals,
            Token::GreaterThan => LabelOperator::GreaterThan,
            Token::LessThan => LabelOperator::LessThan,
            other => return Err(unexpected(&other, BINARY_OPERATORS)),
        };
        let values = match operator {
            LabelOperator::In | LabelOperator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        LabelRequirement::new(key, operator, values.into_iter().collect())
    }

    /// `(v1, v2, ...)`. Kube reads the values into a set, so they come out sorted and deduplicated, and an empty
    /// slot (`()`, `(,a)`, `(a,)`, `(a,,b)`) stands for the empty value.
    fn parse_values(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        let open = self.next();
        if open != Token::OpenParen {
            return Err(unexpected(&open, "'('"));
        }
        match self.peek() {
            Token::Identifier(_) | Token::Comma => {}
            Token::CloseParen => {
                self.next();
                return Ok(BTreeSet::from([String::new()]));
            }
            other => return Err(unexpected(other, "',', ')' or identifier")),
        }
        let mut values = BTreeSet::new();
        loop {
            match self.next() {
                Token::Identifier(value) => {
                    values.insert(value);
                    match self.peek() {
                        Token::Comma => {}
                        Token::CloseParen => break,
                        other => return Err(unexpected(other, "',' or ')'")),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.insert(String::new());
                    }
                    match self.peek() {
                        Token::CloseParen => {
                            values.insert(String::new());
                            break;
                        }
                        Token::Comma => {
                            self.next();
                            values.insert(String::new());
                        }
                        _ => {}
                    }
                }
                other => return Err(unexpected(&other, "',', or identifier")),
            }
        }
        // The loop only breaks with `)` ahead.
        self.next();
        Ok(values)
    }

    /// The single value after `=`, `==`, `!=`, `>` or `<`; nothing before `,` or the end is the empty value.
    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        match self.next() {
            Token::Identifier(value) => Ok(BTreeSet::from([value])),
            other => Err(unexpected(&other, "identifier")),
        }
    }
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter form: `a=b,c!=d,e in (x,y),f notin (z),g,!h,i==j,k>5,l<3`. Empty
    /// string = everything. Requirements come out sorted by key, as kube sorts them.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser { tokens: lex(text), position: 0 };
        let mut requirements = parser.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// From a `metav1.LabelSelector` as JSON
    /// (`{"matchLabels":{...},"matchExpressions":[{"key","operator","values"}]}`), as kube's
    /// `LabelSelectorAsSelector` converts it. `{}` selects everything. A null selector is [`SelectorError::Null`]:
    /// kube reads it as "nothing", which callers must decide on themselves. Values come out sorted and deduplicated.
    pub fn from_json(selector: &Value) -> Result<Self, SelectorError> {
        let malformed = |message: &str| SelectorError::Malformed(message.to_owned());
        let object = match selector {
            Value::Null => return Err(SelectorError::Null),
            Value::Object(object) => object,
            _ => return Err(malformed("expected an object")),
        };
        let mut requirements = Vec::new();
        match object.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (key, value) in labels {
                    let Value::String(value) = value else {
                        return Err(malformed(&format!("matchLabels.{key} must be a string")));
                    };
                    requirements.push(LabelRequirement::new(key.clone(), LabelOperator::Equals, vec![value.clone()])?);
                }
            }
            Some(_) => return Err(malformed("matchLabels must be an object")),
        }
        match object.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(expressions)) => {
                for expression in expressions {
                    requirements.push(requirement_from_json(expression)?);
                }
            }
            Some(_) => return Err(malformed("matchExpressions must be an array")),
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// Whether the selector has no requirements, and so selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// `labels` is the object's `metadata.labels` (None when absent).
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.requirements.iter().all(|requirement| requirement.matches(labels))
    }

    /// Matches with each label's value as text supplied by the caller (`None` when absent), for objects whose
    /// labels are indexed rather than parsed.
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|requirement| requirement.matches_text(label(&requirement.key)))
    }

    /// Convenience: matches against the object's metadata.labels.
    pub fn matches_object(&self, object: &Value) -> bool {
        self.matches(object.get("metadata").and_then(|metadata| metadata.get("labels")).and_then(Value::as_object))
    }
}

/// One `matchExpressions` entry. Absent fields read as Go's zero values, so that the errors are kube's.
fn requirement_from_json(expression: &Value) -> Result<LabelRequirement, SelectorError> {
    let malformed = |message: &str| SelectorError::Malformed(format!("matchExpressions: {message}"));
    let Value::Object(expression) = expression else {
        return Err(malformed("each expression must be an object"));
    };
    let text = |field: &str| match expression.get(field) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(text)) => Ok(text.as_str()),
        Some(_) => Err(malformed(&format!("{field} must be a string"))),
    };
    let key = text("key")?;
    let operator = match text("operator")? {
        "In" => LabelOperator::In,
        "NotIn" => LabelOperator::NotIn,
        "Exists" => LabelOperator::Exists,
        "DoesNotExist" => LabelOperator::DoesNotExist,
        other => return Err(SelectorError::UnsupportedOperator { operator: other.to_owned() }),
    };
    let values = match expression.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(values)) => values
            .iter()
            .map(|value| value.as_str().map(str::to_owned).ok_or_else(|| malformed("values must be strings")))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(malformed("values must be an array")),
    };
    let mut requirement = LabelRequirement::new(key, operator, values)?;
    // Kube keeps the values as written; order and repeats mean nothing to matching or to the string form, and
    // normalizing them makes a selector from JSON equal to the same selector parsed from its string.
    requirement.values.sort_unstable();
    requirement.values.dedup();
    Ok(requirement)
}

impl fmt::Display for LabelSelector {
    /// Kube's `Selector.String()`: the requirements sorted by key and joined by `,`; parses back to the same selector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut requirements: Vec<&LabelRequirement> = self.requirements.iter().collect();
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        for (index, requirement) in requirements.into_iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

/// A field selector: the conjunction of its requirements. No requirements selects everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    /// The requirements, all of which must hold; in the order of their sorted terms, as kube orders them.
    pub requirements: Vec<FieldRequirement>,
}

/// One requirement of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field, a dotted path such as `spec.nodeName`.
    pub field: String,
    /// Whether the field must equal the value or differ from it.
    pub operator: FieldOperator,
    /// The value, unescaped.
    pub value: String,
}

/// The operator of a field requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOperator {
    /// `field=value` or `field==value`.
    Equals,
    /// `field!=value`.
    NotEquals,
}

/// Splits on commas not escaped by a backslash, keeping escapes for [`unescape_field_value`].
fn split_field_terms(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (index, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            terms.push(&text[start..index]);
            start = index + 1;
        }
    }
    terms.push(&text[start..]);
    terms
}

/// Splits a term at its first operator. Field names cannot be escaped, so the first `!=`, `==` or `=` wins; `==` is
/// tried before `=` so that it does not leave a `=` at the start of the value.
fn split_field_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    const OPERATORS: [(&str, FieldOperator); 3] =
        [("!=", FieldOperator::NotEquals), ("==", FieldOperator::Equals), ("=", FieldOperator::Equals)];
    term.char_indices().find_map(|(index, _)| {
        let rest = &term[index..];
        OPERATORS
            .iter()
            .find(|(symbol, _)| rest.starts_with(symbol))
            .map(|(symbol, operator)| (&term[..index], *operator, &rest[symbol.len()..]))
    })
}

/// Kube's `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes, and `,` and `=` must be escaped.
fn unescape_field_value(raw: &str) -> Result<String, SelectorError> {
    let mut value = String::with_capacity(raw.len());
    let mut escaped = false;
    for c in raw.chars() {
        if escaped {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(SelectorError::InvalidEscape(format!("\\{c}")));
            }
            value.push(c);
            escaped = false;
        } else {
            match c {
                '\\' => escaped = true,
                ',' | '=' => return Err(SelectorError::UnescapedCharacter(c)),
                _ => value.push(c),
            }
        }
    }
    if escaped {
        return Err(SelectorError::InvalidEscape("\\".to_owned()));
    }
    Ok(value)
}

/// Kube's `fields.EscapeValue`, the inverse of [`unescape_field_value`].
fn escape_field_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The value of a dotted field path in an object, as field selectors compare it: strings as they are, numbers and
/// booleans as their JSON text (`3`, `true`), an absent or null field (or one under a non-object) as `""`, and
/// objects and arrays, which kube never selects on, as their compact JSON text.
pub fn field_value(object: &Value, path: &str) -> String {
    let mut current = object;
    for segment in path.split('.') {
        match current.get(segment) {
            Some(next) => current = next,
            None => return String::new(),
        }
    }
    match current {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl FieldSelector {
    /// `fieldSelector` query form: `metadata.name=foo,spec.nodeName!=bar,status.phase==Running`; supports kube's
    /// escaping (`\,` `\=` `\\`). Empty = everything. As in kube, empty terms are skipped, nothing is trimmed and
    /// field names are not checked.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut terms = split_field_terms(text);
        // Kube sorts the raw terms, which fixes the order of the requirements.
        terms.sort_unstable();
        let mut requirements = Vec::with_capacity(terms.len());
        for term in terms.into_iter().filter(|term| !term.is_empty()) {
            let Some((field, operator, raw)) = split_field_term(term) else {
                return Err(SelectorError::InvalidFieldTerm { selector: text.to_owned(), term: term.to_owned() });
            };
            requirements.push(FieldRequirement {
                field: field.to_owned(),
                operator,
                value: unescape_field_value(raw)?,
            });
        }
        Ok(Self { requirements })
    }

    /// Whether the selector has no requirements, and so selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Field names used (the server rejects unsupported ones).
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().map(|requirement| requirement.field.as_str())
    }

    /// Matches by walking the dotted path into the object; an absent field reads as "" ; numbers and booleans
    /// compare by their JSON text (e.g. `true`, `3`). See [`field_value`].
    pub fn matches(&self, object: &Value) -> bool {
        self.matches_with(|field| field_value(object, field))
    }

    /// Matches with the field values supplied by the caller, for kinds whose selectable fields are not plain paths
    /// into the object (kube defaults some, such as a pod's `spec.hostNetwork` to `false`).
    pub fn matches_with(&self, mut value_of: impl FnMut(&str) -> String) -> bool {
        self.requirements.iter().all(|requirement| {
            let equal = value_of(&requirement.field) == requirement.value;
            match requirement.operator {
                FieldOperator::Equals => equal,
                FieldOperator::NotEquals => !equal,
            }
        })
    }
}

impl fmt::Display for FieldSelector {
    /// Kube's form: `field=value` and `field!=value` terms, values escaped, joined by `,`; parses back to the same
    /// selector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, requirement) in self.requirements.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            let operator = match requirement.operator {
                FieldOperator::Equals => "=",
                FieldOperator::NotEquals => "!=",
            };
            write!(f, "{}{operator}{}", requirement.field, escape_field_value(&requirement.value))?;
        }
        Ok(())
    }
}

/// Whether a served object matches the request's selectors.
pub fn matches(labels: &LabelSelector, fields: &FieldSelector, served: &Value) -> bool {
    (labels.is_empty() || labels.matches_object(served)) && (fields.is_empty() || fields.matches(served))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn requirement(key: &str, operator: LabelOperator, values: &[&str]) -> LabelRequirement {
        LabelRequirement { key: key.to_owned(), operator, values: values.iter().map(|v| (*v).to_owned()).collect() }
    }

    #[test]
    fn label_parse_structure() {
        use LabelOperator::*;
        let cases: Vec<(&str, Vec<LabelRequirement>)> = vec![
            ("", vec![]),
            (" \t\r\n", vec![]),
            ("a=b", vec![requirement("a", Equals, &["b"])]),
            ("a==b", vec![requirement("a", Equals, &["b"])]),
            ("a!=b", vec![requirement("a", NotEquals, &["b"])]),
            ("a in (y, x, y)", vec![requirement("a", In, &["x", "y"])]),
            ("a notin (z)", vec![requirement("a", NotIn, &["z"])]),
            ("a", vec![requirement("a", Exists, &[])]),
            ("!a", vec![requirement("a", DoesNotExist, &[])]),
            ("k>5", vec![requirement("k", GreaterThan, &["5"])]),
            ("k<3", vec![requirement("k", LessThan, &["3"])]),
            ("a=", vec![requirement("a", Equals, &[""])]),
            ("a=,b", vec![requirement("a", Equals, &[""]), requirement("b", Exists, &[])]),
            ("a in ()", vec![requirement("a", In, &[""])]),
            ("a in (,x)", vec![requirement("a", In, &["", "x"])]),
            ("a in (x,)", vec![requirement("a", In, &["", "x"])]),
            ("a in (x,,y)", vec![requirement("a", In, &["", "x", "y"])]),
            // `in` and `notin` are keywords only where an operator is expected.
            ("in in (notin)", vec![requirement("in", In, &["notin"])]),
            ("a=in", vec![requirement("a", Equals, &["in"])]),
            ("example.com/a-b_c.d=X_y.z-1", vec![requirement("example.com/a-b_c.d", Equals, &["X_y.z-1"])]),
            ("c=d,a=b", vec![requirement("a", Equals, &["b"]), requirement("c", Equals, &["d"])]),
            // Sorting by key is stable, so requirements on one key keep their order.
            (
                "b,a!=x,a=y",
                vec![
                    requirement("a", NotEquals, &["x"]),
                    requirement("a", Equals, &["y"]),
                    requirement("b", Exists, &[]),
                ],
            ),
            ("  ! a , b\t=\nc ", vec![requirement("a", DoesNotExist, &[]), requirement("b", Equals, &["c"])]),
        ];
        for (input, expected) in cases {
            assert_eq!(LabelSelector::parse(input), Ok(LabelSelector { requirements: expected }), "{input:?}");
        }
    }

    #[test]
    fn label_parse_canonical_form() {
        let cases = [
            ("", ""),
            ("a=b,c!=d,e in (y,x),f notin (z),g,!h,i==j,k>5,l<3", "a=b,c!=d,e in (x,y),f notin (z),g,!h,i=j,k>5,l<3"),
            ("l<3,k>5,!h,g", "g,!h,k>5,l<3"),
            ("a in ( y , x )", "a in (x,y)"),
            ("a in (x,x)", "a in (x)"),
            ("a in ()", "a in ()"),
            ("a notin (b,)", "a notin (,b)"),
            ("a=", "a="),
            ("x/y==z", "x/y=z"),
        ];
        for (input, expected) in cases {
            let selector = LabelSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(selector.to_string(), expected, "{input:?}");
            // The canonical form parses back to the same selector.
            assert_eq!(LabelSelector::parse(expected), Ok(selector), "{input:?}");
        }
    }

    #[test]
    fn label_parse_errors_between_requirements() {
        let cases = [
            ("a=b c", "found 'c', expected: ',' or 'end of string'"),
            ("a=b=c", "found '=', expected: ',' or 'end of string'"),
            ("a=b)", "found ')', expected: ',' or 'end of string'"),
            ("a=b,", "found '', expected: identifier after ','"),
            ("a,,b", "found ',', expected: identifier after ','"),
            (",a", "found ',', expected: !, identifier, or 'end of string'"),
            ("=b", "found '=', expected: !, identifier, or 'end of string'"),
            ("(a)", "found '(', expected: !, identifier, or 'end of string'"),
        ];
        for (input, expected) in cases {
            let error = LabelSelector::parse(input).map(|s| s.to_string()).expect_err(input);
            assert_eq!(error.to_string(), expected, "{input:?}");
        }
    }

    #[test]
    fn label_parse_errors_in_requirements() {
        let long = "a".repeat(64);
        let long_key = format!("{long}=b");
        let long_value = format!("a={long}");
        let long_prefix = format!("{}/a", "a".repeat(254));
        let not_integer = "for 'Gt', 'Lt' operators, the value must be an integer";
        // Each row: input, and the start of the message after kube's "unable to parse requirement: ".
        let cases: Vec<(&str, String)> = vec![
            ("a b", format!("found 'b', expected: {BINARY_OPERATORS}")),
            ("a b=c", format!("found 'b', expected: {BINARY_OPERATORS}")),
            ("a in x", "found 'x', expected: '('".into()),
            ("a in", "found '', expected: '('".into()),
            ("a in (x y)", "found 'y', expected: ',' or ')'".into()),
            ("a in (x", "found '', expected: ',' or ')'".into()),
            ("a in (=)", "found '=', expected: ',', ')' or identifier".into()),
            ("a in (,,)", "found ')', expected: ',', or identifier".into()),
            ("a=(b)", "found '(', expected: identifier".into()),
            ("a==!b", "found '!', expected: identifier".into()),
            ("!", "found '', expected: identifier".into()),
            ("!!a", "found '!', expected: identifier".into()),
            ("!a=b", "found '=', expected: ',' or 'end of string'".into()),
            ("a/b/c", r#"invalid label key "a/b/c": a qualified name must consist of"#.into()),
            ("/a", r#"invalid label key "/a": prefix part must be non-empty"#.into()),
            ("a/", r#"invalid label key "a/": name part must be non-empty; name part must consist"#.into()),
            ("-a", r#"invalid label key "-a": name part must consist of alphanumeric"#.into()),
            ("a.", r#"invalid label key "a.": name part must consist"#.into()),
            ("é=b", r#"invalid label key "é": name part must consist"#.into()),
            (
                "Example.com/a",
                r#"invalid label key "Example.com/a": prefix part a lowercase RFC 1123 subdomain"#.into(),
            ),
            ("a..b/c", r#"invalid label key "a..b/c": prefix part a lowercase RFC 1123"#.into()),
            (
                &long_prefix,
                format!("invalid label key {long_prefix:?}: prefix part must be no more than 253 characters"),
            ),
            (&long_key, format!("invalid label key {long:?}: name part must be no more than 63 characters")),
            ("a=-b", r#"invalid label value "-b" for key "a": a valid label must be an empty string"#.into()),
            ("a in (x,b_)", r#"invalid label value "b_" for key "a": a valid label"#.into()),
            (&long_value, format!("invalid label value {long:?} for key \"a\": must be no more than 63 characters")),
            ("k>x", format!(r#"invalid label value "x" for key "k": {not_integer}"#)),
            ("k<", format!(r#"invalid label value "" for key "k": {not_integer}"#)),
            (
                "k>99999999999999999999",
                format!(r#"invalid label value "99999999999999999999" for key "k": {not_integer}"#),
            ),
            // Go's ParseInt takes the sign, but the label value rules then reject it, as in kube.
            ("k>+5", r#"invalid label value "+5" for key "k": a valid label"#.into()),
        ];
        for (input, expected) in cases {
            let error = LabelSelector::parse(input).map(|s| s.to_string()).expect_err(input);
            assert!(matches!(error, SelectorError::Requirement(_)), "{input:?}: {error:?}");
            let message = error.to_string();
            let expected = format!("unable to parse requirement: {expected}");
            assert!(message.starts_with(&expected), "{input:?}:\n got: {message}\nwant: {expected}");
        }
    }

    #[test]
    fn label_requirement_new_checks_value_counts() {
        use LabelOperator::*;
        let values = |v: &[&str]| v.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>();
        let cases: Vec<(LabelOperator, Vec<String>, Option<&str>)> = vec![
            (In, values(&[]), Some("for 'in', 'notin' operators, values set can't be empty")),
            (NotIn, values(&[]), Some("for 'in', 'notin' operators, values set can't be empty")),
            (Equals, values(&["a", "b"]), Some("exact-match compatibility requires one single value")),
            (NotEquals, values(&[]), Some("exact-match compatibility requires one single value")),
            (Exists, values(&["a"]), Some("values set must be empty for exists and does not exist")),
            (DoesNotExist, values(&["a"]), Some("values set must be empty for exists and does not exist")),
            (GreaterThan, values(&["1", "2"]), Some("for 'Gt', 'Lt' operators, exactly one value is required")),
            (LessThan, values(&[]), Some("for 'Gt', 'Lt' operators, exactly one value is required")),
            (In, values(&["a", "b"]), None),
            (Exists, values(&[]), None),
            (LessThan, values(&["7"]), None),
        ];
        for (operator, values, expected) in cases {
            let result = LabelRequirement::new("k", operator, values.clone());
            match expected {
                Some(reason) => assert_eq!(
                    result,
                    Err(SelectorError::InvalidValues { key: "k".into(), reason }),
                    "{operator:?} {values:?}"
                ),
                None => assert!(result.is_ok(), "{operator:?} {values:?}: {result:?}"),
            }
        }
    }

    #[test]
    fn label_matching() {
        let labels = json!({"a": "b", "n": "10", "e": "", "t": "text", "neg": "-4"});
        let cases = [
            ("", true, true),
            ("a=b", true, false),
            ("a==b", true, false),
            ("a=c", false, false),
            ("x=b", false, false),
            ("e=", true, false),
            ("a!=c", true, true),
            ("a!=b", false, true),
            ("x!=b", true, true),
            ("a in (b,c)", true, false),
            ("a in (c,d)", false, false),
            ("x in (b)", false, false),
            ("e in ()", true, false),
            ("a notin (c,d)", true, true),
            ("a notin (b,c)", false, true),
            ("x notin (b)", true, true),
            ("a", true, false),
            ("x", false, false),
            ("e", true, false),
            ("!a", false, true),
            ("!x", true, true),
            ("n>9", true, false),
            ("n>10", false, false),
            ("n<11", true, false),
            ("n<10", false, false),
            ("neg<0", true, false),
            ("neg>0", false, false),
            ("t>0", false, false),
            ("t<0", false, false),
            ("e>0", false, false),
            ("x>0", false, false),
            ("x<0", false, false),
            ("a=b,n>5,!x", true, false),
            ("a=b,n>50", false, false),
        ];
        let empty = Map::new();
        for (selector, with_labels, without_labels) in cases {
            let parsed = LabelSelector::parse(selector).unwrap_or_else(|e| panic!("{selector:?}: {e}"));
            assert_eq!(parsed.matches(labels.as_object()), with_labels, "{selector:?} with labels");
            assert_eq!(parsed.matches(None), without_labels, "{selector:?} without labels");
            assert_eq!(parsed.matches(Some(&empty)), without_labels, "{selector:?} with empty labels");
            let object = json!({"metadata": {"name": "x", "labels": labels}});
            assert_eq!(parsed.matches_object(&object), with_labels, "{selector:?} object");
            assert_eq!(parsed.matches_object(&json!({"metadata": {"name": "x"}})), without_labels, "{selector:?}");
            assert_eq!(parsed.matches_object(&json!({})), without_labels, "{selector:?} no metadata");
        }
    }

    #[test]
    fn label_matching_on_unusual_label_values() {
        // Not reachable through the server's validation, but must not panic and should read sensibly.
        let labels = json!({"nul": null, "num": 5, "flag": true});
        let cases = [("nul=", true), ("nul", true), ("num=5", true), ("num>4", true), ("flag=true", true)];
        for (selector, expected) in cases {
            let parsed = LabelSelector::parse(selector).unwrap_or_else(|e| panic!("{selector:?}: {e}"));
            assert_eq!(parsed.matches(labels.as_object()), expected, "{selector:?}");
        }
    }

    #[test]
    fn label_selector_from_json() {
        let cases: Vec<(Value, Result<&str, &str>)> = vec![
            (json!({}), Ok("")),
            (json!({"matchLabels": null, "matchExpressions": null}), Ok("")),
            (json!({"matchLabels": {}, "matchExpressions": []}), Ok("")),
            (json!({"matchLabels": {"b": "2", "a": "1"}}), Ok("a=1,b=2")),
            (json!({"matchLabels": {"a": ""}}), Ok("a=")),
            (json!({"matchExpressions": [{"key": "x", "operator": "In", "values": ["b", "a"]}]}), Ok("x in (a,b)")),
            (json!({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["a"]}]}), Ok("x notin (a)")),
            (json!({"matchExpressions": [{"key": "x", "operator": "Exists"}]}), Ok("x")),
            (json!({"matchExpressions": [{"key": "x", "operator": "DoesNotExist", "values": null}]}), Ok("!x")),
            (json!({"matchExpressions": [{"key": "x", "operator": "Exists", "values": []}]}), Ok("x")),
            (
                json!({"matchLabels": {"m": "1"}, "matchExpressions": [
                    {"key": "z", "operator": "Exists"},
                    {"key": "a", "operator": "NotIn", "values": ["q"]},
                ], "unknownField": 1}),
                Ok("a notin (q),m=1,z"),
            ),
            (Value::Null, Err("label selector is null")),
            (json!("a=b"), Err("invalid label selector: expected an object")),
            (json!({"matchLabels": ["a"]}), Err("invalid label selector: matchLabels must be an object")),
            (json!({"matchLabels": {"a": 1}}), Err("invalid label selector: matchLabels.a must be a string")),
            (json!({"matchExpressions": {}}), Err("invalid label selector: matchExpressions must be an array")),
            (
                json!({"matchExpressions": ["x"]}),
                Err("invalid label selector: matchExpressions: each expression must be an object"),
            ),
            (
                json!({"matchExpressions": [{"key": 1, "operator": "Exists"}]}),
                Err("invalid label selector: matchExpressions: key must be a string"),
            ),
            (
                json!({"matchExpressions": [{"key": "x", "operator": "In", "values": "a"}]}),
                Err("invalid label selector: matchExpressions: values must be an array"),
            ),
            (
                json!({"matchExpressions": [{"key": "x", "operator": "In", "values": [1]}]}),
                Err("invalid label selector: matchExpressions: values must be strings"),
            ),
            (
                json!({"matchExpressions": [{"key": "x", "operator": "Gt", "values": ["1"]}]}),
                Err(r#""Gt" is not a valid label selector operator"#),
            ),
            (
                json!({"matchExpressions": [{"key": "x", "operator": "in", "values": ["1"]}]}),
                Err(r#""in" is not a valid label selector operator"#),
            ),
            (json!({"matchExpressions": [{"key": "x"}]}), Err(r#""" is not a valid label selector operator"#)),
            (
                json!({"matchExpressions": [{"key": "x", "operator": "In"}]}),
                Err(r#"invalid values for key "x": for 'in', 'notin' operators, values set can't be empty"#),
            ),
            (
                json!({"matchExpressions": [{"key": "x", "operator": "Exists", "values": ["a"]}]}),
                Err(r#"invalid values for key "x": values set must be empty for exists and does not exist"#),
            ),
            (
                json!({"matchExpressions": [{"operator": "Exists"}]}),
                Err(r#"invalid label key "": name part must be non-empty"#),
            ),
            (json!({"matchLabels": {"a b": "c"}}), Err(r#"invalid label key "a b": name part must consist"#)),
            (json!({"matchLabels": {"a": "c d"}}), Err(r#"invalid label value "c d" for key "a": a valid label"#)),
        ];
        for (input, expected) in cases {
            match (LabelSelector::from_json(&input), expected) {
                (Ok(selector), Ok(display)) => assert_eq!(selector.to_string(), display, "{input}"),
                (Err(error), Err(message)) => {
                    assert!(error.to_string().starts_with(message), "{input}:\n got: {error}\nwant: {message}")
                }
                (got, want) => panic!("{input}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn label_selector_from_json_matches_like_parsed() {
        let selector = json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["front", "back"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ]});
        let from_json = LabelSelector::from_json(&selector).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(LabelSelector::parse("app=web,tier in (back,front),!canary"), Ok(from_json.clone()));
        let cases = [
            (json!({"app": "web", "tier": "front"}), true),
            (json!({"app": "web", "tier": "back"}), true),
            (json!({"app": "web", "tier": "middle"}), false),
            (json!({"app": "web", "tier": "front", "canary": "yes"}), false),
            (json!({"app": "db", "tier": "front"}), false),
        ];
        for (labels, expected) in cases {
            assert_eq!(from_json.matches(labels.as_object()), expected, "{labels}");
        }
    }

    #[test]
    fn label_display_sorts_hand_built_selectors() {
        use LabelOperator::*;
        let cases = [
            (vec![requirement("b", In, &["z", "y"]), requirement("a", Exists, &[])], "a,b in (y,z)"),
            (vec![requirement("b", NotIn, &["2", "1"]), requirement("a", DoesNotExist, &[])], "!a,b notin (1,2)"),
            (vec![requirement("k", GreaterThan, &["1"]), requirement("j", LessThan, &["2"])], "j<2,k>1"),
            (vec![requirement("x", NotEquals, &["y"])], "x!=y"),
        ];
        for (requirements, expected) in cases {
            let selector = LabelSelector { requirements };
            assert_eq!(selector.to_string(), expected);
            assert!(!selector.is_empty());
            let reparsed = LabelSelector::parse(expected).unwrap_or_else(|e| panic!("{expected}: {e}"));
            assert_eq!(reparsed.to_string(), expected);
        }
        assert!(LabelSelector::default().is_empty());
        assert_eq!(LabelSelector::default().to_string(), "");
    }

    fn field(field: &str, operator: FieldOperator, value: &str) -> FieldRequirement {
        FieldRequirement { field: field.to_owned(), operator, value: value.to_owned() }
    }

    #[test]
    fn field_parse() {
        use FieldOperator::*;
        let cases: Vec<(&str, Vec<FieldRequirement>)> = vec![
            ("", vec![]),
            (",", vec![]),
            ("metadata.name=foo", vec![field("metadata.name", Equals, "foo")]),
            ("metadata.name==foo", vec![field("metadata.name", Equals, "foo")]),
            ("spec.nodeName!=bar", vec![field("spec.nodeName", NotEquals, "bar")]),
            ("metadata.name=", vec![field("metadata.name", Equals, "")]),
            ("metadata.name!=", vec![field("metadata.name", NotEquals, "")]),
            ("=x", vec![field("", Equals, "x")]),
            // Terms are sorted, as kube sorts them.
            ("b=1,a=2", vec![field("a", Equals, "2"), field("b", Equals, "1")]),
            ("a=1,,b=2,", vec![field("a", Equals, "1"), field("b", Equals, "2")]),
            // Nothing is trimmed: the server will reject the field name.
            ("a =b", vec![field("a ", Equals, "b")]),
            (r"a=x\,y", vec![field("a", Equals, "x,y")]),
            (r"a=x\=y", vec![field("a", Equals, "x=y")]),
            (r"a==\=y", vec![field("a", Equals, "=y")]),
            (r"a=x\\y", vec![field("a", Equals, r"x\y")]),
            (r"a=x\\,b=y", vec![field("a", Equals, r"x\"), field("b", Equals, "y")]),
            (r"a!=\,\=\\", vec![field("a", NotEquals, r",=\")]),
            (
                "status.phase==Running,spec.nodeName!=n1",
                vec![field("spec.nodeName", NotEquals, "n1"), field("status.phase", Equals, "Running")],
            ),
            ("a=é", vec![field("a", Equals, "é")]),
        ];
        for (input, expected) in cases {
            assert_eq!(FieldSelector::parse(input), Ok(FieldSelector { requirements: expected }), "{input:?}");
        }
    }

    #[test]
    fn field_parse_errors() {
        let cases = [
            ("foo", "invalid selector: 'foo'; can't understand 'foo'"),
            ("a=b,foo", "invalid selector: 'a=b,foo'; can't understand 'foo'"),
            ("a!b", "invalid selector: 'a!b'; can't understand 'a!b'"),
            (" ", "invalid selector: ' '; can't understand ' '"),
            ("a=b=c", "invalid field selector: unescaped character in value: ="),
            ("a===c", "invalid field selector: unescaped character in value: ="),
            (r"a=b\x", r"invalid field selector: invalid escape sequence: \x"),
            (r"a=b\", r"invalid field selector: invalid escape sequence: \"),
            (r"a=b\\\", r"invalid field selector: invalid escape sequence: \"),
        ];
        for (input, expected) in cases {
            let error = FieldSelector::parse(input).expect_err(input);
            assert_eq!(error.to_string(), expected, "{input:?}");
        }
    }

    #[test]
    fn field_display_round_trip() {
        let cases = [
            ("", ""),
            ("metadata.name==foo", "metadata.name=foo"),
            ("b!=1,a=2", "a=2,b!=1"),
            (r"a=x\,y\=z\\", r"a=x\,y\=z\\"),
            ("a=", "a="),
        ];
        for (input, expected) in cases {
            let selector = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(selector.to_string(), expected, "{input:?}");
            assert_eq!(FieldSelector::parse(expected), Ok(selector), "{input:?}");
        }
    }

    #[test]
    fn field_names() {
        let cases: [(&str, &[&str]); 3] = [
            ("", &[]),
            ("metadata.name=a", &["metadata.name"]),
            ("spec.nodeName!=x,metadata.namespace=y", &["metadata.namespace", "spec.nodeName"]),
        ];
        for (input, expected) in cases {
            let selector = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(selector.fields().collect::<Vec<_>>(), expected, "{input:?}");
            assert_eq!(selector.is_empty(), expected.is_empty(), "{input:?}");
        }
    }

    #[test]
    fn field_matching() {
        let pod = json!({
            "metadata": {"name": "web-1", "namespace": "default", "generateName": null},
            "spec": {
                "nodeName": "node-a",
                "hostNetwork": true,
                "priority": 3,
                "weight": 1.5,
                "template": {"spec": {"schedulerName": "custom"}},
                "tags": ["x"],
                "scalar": "text",
            },
            "status": {"phase": "Running", "ready": false},
            "type": "kubernetes.io/tls",
            "odd": "a,b=c\\d",
        });
        let cases = [
            ("", true),
            ("metadata.name=web-1", true),
            ("metadata.name==web-1", true),
            ("metadata.name=web-2", false),
            ("metadata.name!=web-2", true),
            ("metadata.name!=web-1", false),
            ("metadata.name=web-1,metadata.namespace=default", true),
            ("metadata.name=web-1,metadata.namespace=other", false),
            ("metadata.name=web-1,status.phase!=Running", false),
            ("spec.template.spec.schedulerName=custom", true),
            ("type=kubernetes.io/tls", true),
            (r"odd=a\,b\=c\\d", true),
            // Absent and null fields read as "".
            ("spec.missing=", true),
            ("spec.missing!=", false),
            ("spec.missing=x", false),
            ("spec.missing!=x", true),
            ("missing.deeper.still=", true),
            ("metadata.generateName=", true),
            // A path through a non-object is absent too.
            ("spec.scalar.deeper=", true),
            ("spec.nodeName.x!=", false),
            // Numbers and booleans compare by their JSON text.
            ("spec.hostNetwork=true", true),
            ("spec.hostNetwork=false", false),
            ("spec.hostNetwork!=true", false),
            ("status.ready=false", true),
            ("spec.priority=3", true),
            ("spec.priority=03", false),
            ("spec.priority!=4", true),
            ("spec.weight=1.5", true),
            // Objects and arrays read as their JSON text: present, so not "".
            ("spec.tags!=", true),
            (r#"spec.tags=["x"]"#, true),
            ("spec.template!=", true),
        ];
        for (selector, expected) in cases {
            let parsed = FieldSelector::parse(selector).unwrap_or_else(|e| panic!("{selector:?}: {e}"));
            assert_eq!(parsed.matches(&pod), expected, "{selector:?}");
        }
    }

    #[test]
    fn field_matching_with_supplied_values() {
        // A server that defaults a pod's spec.hostNetwork to "false" when absent, as kube does.
        let value_of = |field: &str| match field {
            "spec.hostNetwork" => "false".to_owned(),
            _ => String::new(),
        };
        let cases = [("spec.hostNetwork=false", true), ("spec.hostNetwork=true", false), ("spec.nodeName=", true)];
        for (selector, expected) in cases {
            let parsed = FieldSelector::parse(selector).unwrap_or_else(|e| panic!("{selector:?}: {e}"));
            assert_eq!(parsed.matches_with(value_of), expected, "{selector:?}");
        }
    }

    #[test]
    fn field_values_by_path() {
        let object = json!({"a": {"b": {"c": "deep"}, "n": 7, "t": true, "z": null, "l": [1, 2]}});
        let cases = [
            ("a.b.c", "deep"),
            ("a.n", "7"),
            ("a.t", "true"),
            ("a.z", ""),
            ("a.l", "[1,2]"),
            ("a.b", r#"{"c":"deep"}"#),
            ("a.missing", ""),
            ("a.b.c.d", ""),
            ("", ""),
        ];
        for (path, expected) in cases {
            assert_eq!(field_value(&object, path), expected, "{path:?}");
        }
    }
}
