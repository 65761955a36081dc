//! Leaf helpers: `format` checks, Go-compatible printing of values and numbers, Go regex syntax.

use std::fmt::Write as _;
use std::net::IpAddr;

use base64::Engine as _;
use serde_json::{Number, Value};

/// The `format`s that are checked; any other format is ignored (as kube does with formats it does not know).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Int32,
    Int64,
    DateTime,
    Date,
    Byte,
    Uuid,
    Uuid3,
    Uuid4,
    Uuid5,
    Ipv4,
    Ipv6,
    Cidr,
}

impl Format {
    pub(super) fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "int32" => Self::Int32,
            "int64" => Self::Int64,
            // kube's format registry ignores dashes: `datetime` is the same format.
            "date-time" | "datetime" => Self::DateTime,
            "date" => Self::Date,
            "byte" => Self::Byte,
            "uuid" => Self::Uuid,
            "uuid3" => Self::Uuid3,
            "uuid4" => Self::Uuid4,
            "uuid5" => Self::Uuid5,
            "ipv4" => Self::Ipv4,
            "ipv6" => Self::Ipv6,
            "cidr" => Self::Cidr,
            _ => return None,
        })
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Int32 => "int32",
            Self::Int64 => "int64",
            Self::DateTime => "date-time",
            Self::Date => "date",
            Self::Byte => "byte",
            Self::Uuid => "uuid",
            Self::Uuid3 => "uuid3",
            Self::Uuid4 => "uuid4",
            Self::Uuid5 => "uuid5",
            Self::Ipv4 => "ipv4",
            Self::Ipv6 => "ipv6",
            Self::Cidr => "cidr",
        }
    }

    /// Whether a string value conforms; numeric formats do not constrain strings.
    pub(super) fn check_str(self, s: &str) -> bool {
        match self {
            Self::Int32 | Self::Int64 => true,
            Self::DateTime => is_date_time(s),
            Self::Date => is_date(s),
            Self::Byte => is_base64(s),
            Self::Uuid => is_uuid(s, None),
            Self::Uuid3 => is_uuid(s, Some(b'3')),
            Self::Uuid4 => is_uuid(s, Some(b'4')),
            Self::Uuid5 => is_uuid(s, Some(b'5')),
            Self::Ipv4 => s.contains('.') && s.parse::<IpAddr>().is_ok(),
            Self::Ipv6 => s.contains(':') && s.parse::<IpAddr>().is_ok(),
            Self::Cidr => is_cidr(s),
        }
    }

    /// Whether a number conforms: the integer formats bound the range; string formats do not constrain numbers.
    pub(super) fn check_number(self, n: &Number) -> bool {
        match (self, n.as_i64()) {
            (Self::Int32, Some(i)) => i32::try_from(i).is_ok(),
            // Beyond i64 only as u64; floats are the `type` keyword's business.
            (Self::Int32 | Self::Int64, None) => !n.is_u64(),
            _ => true,
        }
    }
}

/// `YYYY-MM-DD`, a real calendar day (Go's `time.Parse("2006-01-02", s)`).
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let (Some(year), Some(month), Some(day)) = (digits(&b[0..4]), digits(&b[5..7]), digits(&b[8..10])) else {
        return false;
    };
    // Both fit: at most 9999 and 99.
    let (Ok(year), Ok(month), Ok(day)) = (i16::try_from(year), i8::try_from(month), i8::try_from(day)) else {
        return false;
    };
    jiff::civil::Date::new(year, month, day).is_ok()
}

/// RFC 3339 as kube's `date-time` checker reads it: a date, `T`, `HH:MM:SS`, optional fraction, `Z` or
/// `±HH:MM`, case-insensitive.
fn is_date_time(s: &str) -> bool {
    let Some((date, time)) = s.split_once(['T', 't']) else { return false };
    if !is_date(date) {
        return false;
    }
    let b = time.as_bytes();
    if b.len() < 9 || b[2] != b':' || b[5] != b':' {
        return false;
    }
    let in_range = |digits_at: usize, max: u32| digits(&b[digits_at..digits_at + 2]).is_some_and(|v| v <= max);
    if !(in_range(0, 23) && in_range(3, 59) && in_range(6, 59)) {
        return false;
    }
    let mut rest = &b[8..];
    if let [b'.', fraction @ ..] = rest {
        let n = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return false;
        }
        rest = &fraction[n..];
    }
    match rest {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()),
        _ => false,
    }
}

/// The decimal value of ASCII digits (`None` if any byte is not a digit).
fn digits(b: &[u8]) -> Option<u32> {
    b.iter().try_fold(0u32, |acc, c| c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0')))
}

/// Standard base64 with padding; like Go's decoder, line breaks are skipped and non-zero trailing bits accepted.
fn is_base64(s: &str) -> bool {
    const ENGINE: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
    );
    if s.contains(['\r', '\n']) {
        let cleaned: String = s.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
        ENGINE.decode(cleaned).is_ok()
    } else {
        ENGINE.decode(s).is_ok()
    }
}

/// `8-4-4-4-12` hex digits in any case, or 32 hex digits; with `version`, also the version digit and variant.
fn is_uuid(s: &str, version: Option<u8>) -> bool {
    let b = s.as_bytes();
    match version {
        None if b.len() == 32 => b.iter().all(u8::is_ascii_hexdigit),
        _ => {
            let hyphenated = b.len() == 36
                && b.iter().enumerate().all(|(i, c)| match i {
                    8 | 13 | 18 | 23 => *c == b'-',
                    _ => c.is_ascii_hexdigit(),
                });
            hyphenated && version.is_none_or(|v| b[14] == v && matches!(b[19], b'8' | b'9' | b'a' | b'b' | b'A' | b'B'))
        }
    }
}

/// `address/prefix`, the prefix within the address family's width.
fn is_cidr(s: &str) -> bool {
    let Some((ip, prefix)) = s.split_once('/') else { return false };
    let Ok(ip) = ip.parse::<IpAddr>() else { return false };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    !prefix.is_empty() && prefix.len() <= 3 && digits(prefix.as_bytes()).is_some_and(|p| p <= max)
}

/// Appends `value` as kube's `field.Error` prints a bad value: Go's `%q` for strings, `%v` for numbers and bools,
/// `null` for null, JSON for lists and maps.
pub(super) fn go_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number(n)),
        Value::String(s) => go_quote(s, out),
        Value::Array(_) | Value::Object(_) => out.push_str(&value.to_string()),
    }
}

/// A JSON number as Go prints an `int64` or `float64` with `%v`.
pub(super) fn go_number(n: &Number) -> String {
    if n.is_i64() || n.is_u64() { n.to_string() } else { go_float(n.as_f64().unwrap_or(f64::NAN)) }
}

/// A float as Go's `%v` prints it: the shortest representation, in exponent form (`1e+06`, `1.5e-05`) when the
/// decimal exponent is below -4 or at least 6, as Go's `%g` with the shortest precision does.
pub(super) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // Rust's `{:e}` gives the shortest round-tripping digits, e.g. `-2.147483647e9`.
    let sci = format!("{f:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else { return sci };
    let Ok(exp) = exp.parse::<i32>() else { return sci };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.unsigned_abs());
    }
    // Plain notation; Rust's `Display` is also shortest-round-trip and never uses exponents.
    f.to_string()
}

/// Appends `s` quoted as Go's `strconv.Quote` does.
pub(super) fn go_quote(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() || c == '\u{feff}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Rewrites a Go (RE2) pattern for the `regex` crate where the two read the same text differently: Perl classes
/// are ASCII in Go and Unicode in Rust, `[` inside a class is a literal in Go and a nested class in Rust, and `&&`,
/// `--`, `~~` inside a class are set operations in Rust only.
pub(super) fn go_pattern_to_rust(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(escaped) = chars.next() else {
                    out.push('\\');
                    break;
                };
                let ascii = match (escaped, in_class) {
                    ('d', false) => "[0-9]",
                    ('D', false) => "[^0-9]",
                    ('w', false) => "[0-9A-Za-z_]",
                    ('W', false) => "[^0-9A-Za-z_]",
                    ('s', false) => r"[\t\n\f\r ]",
                    ('S', false) => r"[^\t\n\f\r ]",
                    ('d', true) => "0-9",
                    ('w', true) => "0-9A-Za-z_",
                    ('s', true) => r"\t\n\f\r ",
                    _ => {
                        out.push('\\');
                        out.push(escaped);
                        continue;
                    }
                };
                out.push_str(ascii);
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
                // A `]` right after the opening bracket is a literal in both syntaxes.
                if chars.peek() == Some(&']') {
                    chars.next();
                    out.push_str(r"\]");
                }
            }
            '[' => {
                if chars.peek() == Some(&':') {
                    // A POSIX class such as `[:alpha:]`: copy it through.
                    out.push('[');
                    for c in chars.by_ref() {
                        out.push(c);
                        if c == ']' {
                            break;
                        }
                    }
                } else {
                    out.push_str(r"\[");
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            '-' if in_class && chars.peek() == Some(&'-') => out.push_str(r"\-"),
            c => out.push(c),
        }
    }
    out
}
