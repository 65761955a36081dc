//! What the driver gets as secret data (`docs/machine-lifecycle.md` "User data"): the class secrets merged
//! (credentials last; a missing secret is empty) and `userData` templated with the machine name and a bootstrap
//! token, in raw or URL-encoded (ignition) form. The bootstrap token is a Secret `bootstrap-token-<id>` in the target
//! cluster's `kube-system`, with MCM's id, a 16-character secret, TTL = the creation timeout.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::mcm::names::{BOOTSTRAP_TOKEN_PLACEHOLDER, MACHINE_NAME_PLACEHOLDER, USER_DATA_KEY};
use crate::providers::contract::SecretData;

/// Where bootstrap tokens live.
pub const BOOTSTRAP_TOKEN_NAMESPACE: &str = "kube-system";
/// The Secret type of bootstrap tokens.
pub const BOOTSTRAP_TOKEN_TYPE: &str = "bootstrap.kubernetes.io/token";
/// The characters of a token secret.
pub const TOKEN_SECRET_CHARSET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
/// The length of a token secret.
pub const TOKEN_SECRET_LEN: usize = 16;

/// The data of `primary` then `credentials` (later keys win); absent secrets add nothing. `stringData` is read
/// too, over `data`, as an API server that has not converted it yet would still hold it.
pub fn merge_secret_data(primary: Option<&Secret>, credentials: Option<&Secret>) -> SecretData {
    let mut out = BTreeMap::new();
    for secret in [primary, credentials].into_iter().flatten() {
        for (k, v) in secret.data.iter().flatten() {
            out.insert(k.clone(), v.0.clone());
        }
        for (k, v) in secret.string_data.iter().flatten() {
            out.insert(k.clone(), v.clone().into_bytes());
        }
    }
    SecretData(out)
}

/// Go's `url.QueryEscape`: unreserved characters kept, space as `+`, the rest `%XX`.
pub fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Replaces `placeholder` with `value`, or else its URL-encoded form with the URL-encoded value (as MCM: the raw
/// form wins when both occur). Returns whether anything was replaced.
fn replace(text: &mut String, placeholder: &str, value: &str) -> bool {
    if text.contains(placeholder) {
        *text = text.replace(placeholder, value);
        return true;
    }
    let encoded = query_escape(placeholder);
    if text.contains(&encoded) {
        *text = text.replace(&encoded, &query_escape(value));
        return true;
    }
    false
}

/// Why the user data could not be prepared.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    /// The merged class secrets have no `userData`.
    #[error(
        "the secret of machine class {class:?} has no {USER_DATA_KEY:?} key (the machine cannot be created without it)"
    )]
    Missing {
        /// The class.
        class: String,
    },
}

/// The secret data for the driver: `userData` with `<<MACHINE_NAME>>` and, when given, `<<BOOTSTRAP_TOKEN>>`
/// replaced. A missing placeholder is not an error (MCM only logs it).
pub fn template(
    data: &SecretData,
    class: &str,
    machine_name: &str,
    token: Option<&str>,
) -> Result<SecretData, UserDataError> {
    let raw = data.0.get(USER_DATA_KEY).ok_or_else(|| UserDataError::Missing { class: class.to_string() })?;
    let mut text = String::from_utf8_lossy(raw).into_owned();
    if let Some(token) = token {
        replace(&mut text, BOOTSTRAP_TOKEN_PLACEHOLDER, token);
    }
    replace(&mut text, MACHINE_NAME_PLACEHOLDER, machine_name);
    let mut out = data.clone();
    out.0.insert(USER_DATA_KEY.to_string(), text.into_bytes());
    Ok(out)
}

/// Whether the user data asks for a bootstrap token (`<<BOOTSTRAP_TOKEN>>`, also URL-encoded). Only then is a token
/// Secret made (MCM makes one for every machine): a token nothing refers to is a credential with no use.
pub fn wants_token(data: &SecretData) -> bool {
    data.0.get(USER_DATA_KEY).is_some_and(|raw| {
        let text = String::from_utf8_lossy(raw);
        text.contains(BOOTSTRAP_TOKEN_PLACEHOLDER) || text.contains(&query_escape(BOOTSTRAP_TOKEN_PLACEHOLDER))
    })
}

/// MCM's bootstrap token id: the hex of the machine name's last five bytes, cut to six characters (names
/// shorter than five bytes, which MCM cannot handle, are padded with `0`).
pub fn token_id(machine_name: &str) -> String {
    let bytes = machine_name.as_bytes();
    let tail = &bytes[bytes.len().saturating_sub(5)..];
    let hex: String = tail.iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex:0<6}").chars().take(6).collect()
}

/// The Secret name of a token id.
pub fn token_secret_name(id: &str) -> String {
    format!("bootstrap-token-{id}")
}

/// The bootstrap token Secret for a machine: usable for authentication and signing until `expires`.
pub fn token_secret(machine_name: &str, secret: &str, expires: Timestamp, extra_groups: &str) -> Secret {
    let id = token_id(machine_name);
    let mut data: BTreeMap<String, ByteString> = [
        (
            "description",
            format!("A bootstrap token for machine {machine_name:?} generated by MachineControllerManager."),
        ),
        ("token-id", id.clone()),
        ("token-secret", secret.to_string()),
        ("expiration", expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        ("usage-bootstrap-authentication", "true".to_string()),
        ("usage-bootstrap-signing", "true".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
    .collect();
    data.insert("auth-extra-groups".to_string(), ByteString(extra_groups.as_bytes().to_vec()));
    Secret {
        metadata: ObjectMeta {
            name: Some(token_secret_name(&id)),
            namespace: Some(BOOTSTRAP_TOKEN_NAMESPACE.to_string()),
            ..Default::default()
        },
        type_: Some(BOOTSTRAP_TOKEN_TYPE.to_string()),
        data: Some(data),
        ..Default::default()
    }
}

/// The token (`<id>.<secret>`) a bootstrap token Secret carries, if complete.
pub fn token_of(secret: &Secret) -> Option<String> {
    let data = secret.data.as_ref()?;
    let text = |k: &str| data.get(k).map(|v| String::from_utf8_lossy(&v.0).into_owned()).filter(|s| !s.is_empty());
    Some(format!("{}.{}", text("token-id")?, text("token-secret")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(data: &[(&str, &str)], string_data: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(data.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()),
            string_data: (!string_data.is_empty())
                .then(|| string_data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn credentials_merge_last() {
        let primary = secret(&[("userData", "u"), ("key", "primary")], &[]);
        let creds = secret(&[("key", "creds")], &[("extra", "s")]);
        let merged = merge_secret_data(Some(&primary), Some(&creds));
        assert_eq!(merged.text("key").as_deref(), Some("creds"));
        assert_eq!(merged.text("userData").as_deref(), Some("u"));
        assert_eq!(merged.text("extra").as_deref(), Some("s"));
        assert_eq!(merge_secret_data(None, None), SecretData::default());
        assert_eq!(merge_secret_data(None, Some(&creds)).0.len(), 2);
    }

    #[test]
    fn a_token_is_wanted_only_where_the_user_data_names_it() {
        let data = |text: &str| SecretData([("userData".to_string(), text.as_bytes().to_vec())].into());
        assert!(wants_token(&data("token=<<BOOTSTRAP_TOKEN>>")));
        assert!(wants_token(&data("https://x?t=%3C%3CBOOTSTRAP_TOKEN%3E%3E")));
        assert!(!wants_token(&data("#!/bin/sh")));
        assert!(!wants_token(&SecretData::default()));
    }

    #[test]
    fn templating() {
        let data = |text: &str| SecretData([("userData".to_string(), text.as_bytes().to_vec())].into());
        let cases = [
            (
                "raw",
                "name=<<MACHINE_NAME>> token=<<BOOTSTRAP_TOKEN>>",
                Some("abcdef.0123456789abcdef"),
                "name=m-1 token=abcdef.0123456789abcdef",
            ),
            (
                "url-encoded",
                "n=%3C%3CMACHINE_NAME%3E%3E&t=%3C%3CBOOTSTRAP_TOKEN%3E%3E",
                Some("abcdef.x"),
                "n=m-1&t=abcdef.x",
            ),
            (
                "raw wins over encoded",
                "<<MACHINE_NAME>> %3C%3CMACHINE_NAME%3E%3E",
                None,
                "m-1 %3C%3CMACHINE_NAME%3E%3E",
            ),
            ("no token without a target cluster", "<<BOOTSTRAP_TOKEN>>", None, "<<BOOTSTRAP_TOKEN>>"),
            ("no placeholders", "#!/bin/sh", Some("t"), "#!/bin/sh"),
        ];
        for (name, text, token, want) in cases {
            let out = template(&data(text), "c", "m-1", token).unwrap();
            assert_eq!(out.text("userData").as_deref(), Some(want), "{name}");
        }
        assert_eq!(
            template(&SecretData::default(), "c", "m", None).unwrap_err().to_string(),
            "the secret of machine class \"c\" has no \"userData\" key (the machine cannot be created without it)"
        );
        assert_eq!(query_escape("a b<>/~"), "a+b%3C%3E%2F~");
    }

    #[test]
    fn token_ids_as_mcm_derives_them() {
        let cases = [
            // last five bytes "abc12" -> 6162633132 -> "616263"
            ("workers-abc12", "616263"),
            ("m-x7k2p", "78376b"),
            ("ab", "61620000".get(..6).unwrap()),
        ];
        for (name, want) in cases {
            assert_eq!(token_id(name), want, "{name}");
        }
        assert_eq!(token_secret_name("616263"), "bootstrap-token-616263");
    }

    #[test]
    fn token_secret_shape() {
        let expires: Timestamp = "2025-01-01T00:20:00Z".parse().unwrap();
        let s = token_secret("workers-abc12", "0123456789abcdef", expires, "system:bootstrappers:x");
        assert_eq!(s.metadata.name.as_deref(), Some("bootstrap-token-616263"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(s.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
        let d = s.data.as_ref().unwrap();
        let text = |k: &str| String::from_utf8(d[k].0.clone()).unwrap();
        assert_eq!(text("expiration"), "2025-01-01T00:20:00Z");
        assert_eq!(
            (text("usage-bootstrap-authentication"), text("usage-bootstrap-signing")),
            ("true".into(), "true".into())
        );
        assert_eq!(text("auth-extra-groups"), "system:bootstrappers:x");
        assert_eq!(token_of(&s).as_deref(), Some("616263.0123456789abcdef"));
    }
}
