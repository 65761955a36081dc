//! Keeping secret values out of `Debug`, `Display` and error text: [`Sensitive`] holds one, [`scrub`] removes every
//! value of the class secret from a message a cloud (or its SDK) wrote. Shared by the cloud drivers.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::providers::SecretData;

/// The text every redacted value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// A secret string: `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Sensitive(String);

impl Sensitive {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Sensitive(value.into())
    }

    /// The value itself; only to hand to the SDK.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Sensitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// `text` with every value of `secret` (4 bytes or longer), as it is, trimmed, and base64-encoded, replaced by
/// `<redacted>`; also each line of a multi-line value (a PEM key's lines, also inside a one-line JSON key where they
/// are joined by `\n` escapes), where a line is long or a single word, so that short prose lines of, say, user data
/// do not blank out ordinary words.
pub fn scrub(text: &str, secret: &SecretData) -> String {
    let mut values = std::collections::BTreeSet::new();
    for v in secret.0.values() {
        let plain = String::from_utf8_lossy(v).into_owned();
        values.extend([plain.trim().to_string(), BASE64.encode(v)].into_iter().filter(|v| v.len() >= 4));
        values.extend(
            plain
                .split('\n')
                .flat_map(|l| l.split("\\n"))
                .map(|l| l.trim().to_string())
                .filter(|l| l.len() >= 16 || (l.len() >= 4 && !l.contains(char::is_whitespace) && !is_common(l))),
        );
    }
    // Longest first, so a value containing another is replaced whole.
    let mut values: Vec<String> = values.into_iter().collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    let mut out = text.to_string();
    for value in values {
        if out.contains(&value) {
            out = out.replace(&value, REDACTED);
        }
    }
    out
}

/// Short lines of structured secrets that carry nothing secret and would blank out ordinary words (`{`, `}`,
/// PEM armour lines are longer than 16 and are secret-adjacent enough to drop).
fn is_common(v: &str) -> bool {
    v.chars().all(|c| matches!(c, '{' | '}' | '[' | ']' | ',' | '"' | ':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(pairs: &[(&str, &str)]) -> SecretData {
        SecretData(pairs.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect())
    }

    #[test]
    fn sensitive_never_shows() {
        let s = Sensitive::new("hunter2-value");
        assert_eq!(format!("{s} {s:?}"), "<redacted> <redacted>");
        assert_eq!(s.expose(), "hunter2-value");
    }

    #[test]
    fn scrub_removes_values_their_lines_and_base64() {
        let key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n";
        let s = secret(&[("serviceAccountJSON", key), ("userData", "#cloud-config\nsecret: x"), ("a", "abc")]);
        let text =
            format!("got MIIEvQIBADANBgkqhkiG9w0BAQEFAASC and {} and abc", BASE64.encode("#cloud-config\nsecret: x"));
        assert_eq!(scrub(&text, &s), "got <redacted> and <redacted> and abc");
        assert_eq!(scrub("#cloud-config\nsecret: x", &s), "<redacted>");
        assert_eq!(scrub("plain {", &secret(&[("k", "{\n\"x\": \"1\"\n}")])), "plain {");
        let json =
            secret(&[("k", r#"{"private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"}"#)]);
        assert_eq!(scrub("x MIIEvQIBADANBgkqhkiG9w0BAQEFAASC y", &json), "x <redacted> y");
    }
}
