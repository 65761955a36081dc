//! Secret values shared by the cloud drivers: [`Sensitive`] (redacted in `Debug` and `Display`) and [`scrub`], which
//! removes every value of a class secret from a message before it leaves a driver.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::providers::SecretData;

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
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Sensitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Replaces every secret value of `secret` (4 bytes or longer), as it is and base64-encoded, found in `text` with
/// `<redacted>`: messages from a cloud or its SDK can echo request data, and error text must never carry credentials
/// or user data.
pub fn scrub(text: &str, secret: &SecretData) -> String {
    let mut values: Vec<String> = secret
        .0
        .values()
        .flat_map(|v| [String::from_utf8_lossy(v).trim().to_string(), BASE64.encode(v)])
        .filter(|v| v.len() >= 4)
        .collect();
    // Longest first, so a value containing another is replaced whole.
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    let mut out = text.to_string();
    for value in values {
        if out.contains(&value) {
            out = out.replace(&value, "<redacted>");
        }
    }
    out
}
