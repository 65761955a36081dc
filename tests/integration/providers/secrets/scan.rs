//! Looking for known secret values in captured text, in every form a log line, an error, a URL or an object could
//! carry them: as they are, JSON- and Debug-escaped, percent- and form-encoded, and base64 (standard and URL-safe,
//! with and without padding). A finding names the secret's key, the form and the place, never the value.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

/// The shortest value looked for: shorter ones would match ordinary text.
const MIN_LEN: usize = 8;

/// One searchable form of one secret value.
struct Pattern {
    key: String,
    form: &'static str,
    text: String,
}

/// The secret values of one run, each under a name (the secret key, or the key and the part of its value).
#[derive(Default)]
pub(crate) struct Secrets {
    patterns: Vec<Pattern>,
    values: usize,
}

/// One occurrence of a secret.
#[derive(Debug)]
pub(crate) struct Finding {
    /// The secret key (and part) whose value was found.
    pub key: String,
    /// How it was encoded.
    pub form: &'static str,
    /// Where: the log, an object, the metrics.
    pub place: String,
    /// 1-based line and column (in characters) of the place's text.
    pub line: usize,
    pub column: usize,
    /// The text around it with every secret form replaced.
    pub context: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "secret {} ({}) in {}, line {} column {}: …{}…",
            self.key, self.form, self.place, self.line, self.column, self.context
        )
    }
}

/// Every form `value` is looked for in, the first name of each distinct text kept.
fn forms(value: &str) -> Vec<(&'static str, String)> {
    let bytes = value.as_bytes();
    let json = serde_json::to_string(value).unwrap_or_default();
    let debug = format!("{value:?}");
    let all = [
        ("raw", value.to_string()),
        ("JSON-escaped", json.trim_matches('"').to_string()),
        ("Debug-escaped", debug.trim_matches('"').to_string()),
        ("percent-encoded", percent(bytes, false, true)),
        ("percent-encoded, lower-case hex", percent(bytes, false, false)),
        ("form-encoded", percent(bytes, true, true)),
        ("base64", STANDARD.encode(bytes)),
        ("base64 without padding", STANDARD_NO_PAD.encode(bytes)),
        ("URL-safe base64", URL_SAFE.encode(bytes)),
        ("URL-safe base64 without padding", URL_SAFE_NO_PAD.encode(bytes)),
        ("percent-encoded base64", percent(STANDARD.encode(bytes).as_bytes(), false, true)),
        (
            "JSON-escaped base64",
            serde_json::to_string(&STANDARD.encode(bytes)).unwrap_or_default().trim_matches('"').to_string(),
        ),
    ];
    let mut out: Vec<(&'static str, String)> = Vec::new();
    for (name, text) in all {
        if !text.is_empty() && !out.iter().any(|(_, t)| *t == text) {
            out.push((name, text));
        }
    }
    out
}

/// RFC 3986 percent-encoding of everything but the unreserved characters; `form` writes a space as `+`.
fn percent(bytes: &[u8], form: bool, upper: bool) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &b in bytes {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(b as char),
            b' ' if form => out.push('+'),
            _ if upper => out.push_str(&format!("%{b:02X}")),
            _ => out.push_str(&format!("%{b:02x}")),
        }
    }
    out
}

impl Secrets {
    /// Looks for `value` (at least 8 bytes: shorter ones are a test mistake) under `key`.
    pub(crate) fn add(&mut self, key: impl Into<String>, value: &str) {
        let key = key.into();
        assert!(value.len() >= MIN_LEN, "secret {key} is too short to look for");
        self.values += 1;
        for (form, text) in forms(value) {
            self.patterns.push(Pattern { key: key.clone(), form, text });
        }
        // Longest first: a value that contains another is reported (and redacted) whole.
        self.patterns.sort_by_key(|p| std::cmp::Reverse(p.text.len()));
    }

    /// Looks for `value`, and for each of its lines of 16 characters or more on its own (a PEM key's lines, a
    /// line of user data): a line may be logged without the rest.
    pub(crate) fn add_with_lines(&mut self, key: &str, value: &str) {
        self.add(key, value);
        for (i, line) in value.lines().enumerate() {
            let line = line.trim();
            if line.len() >= 16 && line != value.trim() && !line.starts_with("-----") {
                self.add(format!("{key} (line {})", i + 1), line);
            }
        }
    }

    /// How many values (and how many forms) are looked for.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.values, self.patterns.len())
    }

    /// `text` with every form of every secret replaced by `<key>`.
    fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for p in &self.patterns {
            if out.contains(&p.text) {
                out = out.replace(&p.text, &format!("<{}>", p.key));
            }
        }
        out
    }

    /// Every occurrence of every form in `text`, found at `place`.
    pub(crate) fn scan(&self, place: &str, text: &str) -> Vec<Finding> {
        let mut findings = Vec::new();
        // Spans already reported under a longer pattern (a value's line inside the whole value).
        let mut covered: Vec<(usize, usize)> = Vec::new();
        for p in &self.patterns {
            for (at, _) in text.match_indices(&p.text) {
                let end = at + p.text.len();
                if covered.iter().any(|&(s, e)| s <= at && end <= e) {
                    continue;
                }
                covered.push((at, end));
                let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
                let line_end = text[end..].find('\n').map_or(text.len(), |i| end + i);
                let line = text[..at].matches('\n').count() + 1;
                let column = text[line_start..at].chars().count() + 1;
                // The whole line with this occurrence marked and every secret replaced, then cut around the mark.
                let marked =
                    format!("{}\u{1}{}", self.redact(&text[line_start..at]), self.redact(&text[end..line_end]));
                let mark = marked.find('\u{1}').unwrap_or(0);
                let before: String =
                    marked[..mark].chars().rev().take(60).collect::<Vec<_>>().into_iter().rev().collect();
                let after: String = marked[mark + 1..].chars().take(60).collect();
                findings.push(Finding {
                    key: p.key.clone(),
                    form: p.form,
                    place: place.to_string(),
                    line,
                    column,
                    context: format!("{before}<<{}>>{after}", p.key),
                });
            }
        }
        findings
    }
}

/// `text` without ANSI colour sequences (`ESC [ ... m`), as the text log format writes them.
pub(crate) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The scanner finds each form, names the key and place, and never shows the value.
#[test]
fn every_form_is_found_and_no_finding_shows_the_value() {
    let mut secrets = Secrets::default();
    let value = "s3cr3t/value with space+plus\n#line two of the value";
    secrets.add_with_lines("providerSecretAccessKey", value);
    for (form, text) in forms(value) {
        let haystack = format!("first line\nprefix {text} suffix");
        let found = secrets.scan("the log", &haystack);
        assert!(found.iter().any(|f| f.form == form && f.line == 2), "{form}: {found:?}");
        for f in &found {
            let shown = f.to_string();
            assert!(shown.contains("providerSecretAccessKey") && shown.contains("the log"), "{shown}");
            assert!(!shown.contains("s3cr3t") && !shown.contains(&text), "{form} shows the value: {shown}");
        }
    }
    let line = secrets.scan("x", "only #line two of the value here");
    assert!(line.iter().any(|f| f.key == "providerSecretAccessKey (line 2)" && f.form == "raw"), "{line:?}");
    assert!(secrets.scan("x", "nothing secret here, s3cr3t alone is too short").is_empty());
    assert_eq!(percent(b"a/b c", true, true), "a%2Fb+c");
    assert_eq!(strip_ansi("\u{1b}[2mx\u{1b}[0m=1"), "x=1");
}
