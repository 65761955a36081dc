//! What the AWS driver reads from the class secret: credentials (static keys or workload identity), `userData`
//! and an optional endpoint. Secret values are held in [`Sensitive`], whose `Debug` prints `<redacted>`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

pub use crate::providers::secrets::{Sensitive, scrub};
use crate::providers::{Code, DriverError, SecretData};

/// Secret keys holding the access key ID, first match wins (Gardener's name, then its documented aliases).
pub const ACCESS_KEY_ID_KEYS: &[&str] = &["providerAccessKeyId", "accessKeyID", "accessKeyId"];
/// Secret keys holding the secret access key, first match wins.
pub const SECRET_ACCESS_KEY_KEYS: &[&str] = &["providerSecretAccessKey", "secretAccessKey"];
/// Secret keys holding the user data (cloud-init) for new instances.
pub const USER_DATA_KEYS: &[&str] = &["userData", "userdata"];
/// Secret key with a path to a projected service-account token (workload identity, as in Gardener).
pub const TOKEN_FILE_KEY: &str = "workloadIdentityTokenFile";
/// Secret key with the role to assume with that token.
pub const ROLE_ARN_KEY: &str = "roleARN";
/// Optional secret key overriding the EC2 endpoint for this class (an AWS-compatible cloud, a test server).
pub const ENDPOINT_KEY: &str = "endpoint";

/// How the driver authenticates to EC2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// An access key pair.
    Static {
        /// The access key ID.
        access_key_id: Sensitive,
        /// The secret access key.
        secret_access_key: Sensitive,
    },
    /// A web identity token file and the role to assume with it (STS AssumeRoleWithWebIdentity).
    WebIdentity {
        /// Path to the token file.
        token_file: String,
        /// The role's ARN.
        role_arn: String,
    },
}

impl Credentials {
    /// The credentials in `secret`, or `InvalidArgument` naming the keys that are missing (never their values).
    pub fn from_secret(secret: &SecretData) -> Result<Credentials, DriverError> {
        let text = |keys: &[&str]| secret.first_text(keys).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        if secret.0.contains_key(TOKEN_FILE_KEY) {
            let token_file = text(&[TOKEN_FILE_KEY])
                .ok_or_else(|| missing(&format!("{TOKEN_FILE_KEY} is empty (workload identity)")))?;
            let role_arn = text(&[ROLE_ARN_KEY])
                .ok_or_else(|| missing(&format!("{ROLE_ARN_KEY} is required with {TOKEN_FILE_KEY}")))?;
            return Ok(Credentials::WebIdentity { token_file, role_arn });
        }
        match (text(ACCESS_KEY_ID_KEYS), text(SECRET_ACCESS_KEY_KEYS)) {
            (Some(id), Some(key)) => {
                Ok(Credentials::Static { access_key_id: Sensitive::new(id), secret_access_key: Sensitive::new(key) })
            }
            (id, _) => {
                let keys = if id.is_none() { ACCESS_KEY_ID_KEYS } else { SECRET_ACCESS_KEY_KEYS };
                Err(missing(&format!("needs {} (or {TOKEN_FILE_KEY} and {ROLE_ARN_KEY})", keys.join(" or "))))
            }
        }
    }
}

fn missing(what: &str) -> DriverError {
    DriverError::new(Code::InvalidArgument, format!("secret: {what}"))
}

/// The user data for a new instance, base64-encoded as RunInstances takes it (the bytes as they are: gzip-ed
/// cloud-init stays intact), or `InvalidArgument` when the secret has none.
pub fn user_data(secret: &SecretData) -> Result<Sensitive, DriverError> {
    USER_DATA_KEYS
        .iter()
        .find_map(|k| secret.0.get(*k))
        .filter(|v| !v.is_empty())
        .map(|v| Sensitive::new(BASE64.encode(v)))
        .ok_or_else(|| missing(&format!("needs {} (the cloud-init for new instances)", USER_DATA_KEYS[0])))
}

/// The EC2 endpoint to use, first found: the secret's `endpoint`, the driver's own override, then the SDK's
/// standard environment variables `AWS_ENDPOINT_URL_EC2` and `AWS_ENDPOINT_URL`. `None`: AWS's regional endpoint.
pub fn endpoint(
    secret: &SecretData,
    driver_default: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, DriverError> {
    let chosen = secret
        .text(ENDPOINT_KEY)
        .map(|e| (format!("secret key {ENDPOINT_KEY}"), e))
        .or_else(|| driver_default.map(|e| ("the driver's endpoint".to_string(), e.to_string())))
        .or_else(|| {
            ["AWS_ENDPOINT_URL_EC2", "AWS_ENDPOINT_URL"].iter().find_map(|k| env(k).map(|e| (k.to_string(), e)))
        });
    let Some((source, url)) = chosen else { return Ok(None) };
    let url = url.trim().to_string();
    if url.is_empty() {
        return Ok(None);
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.contains(char::is_whitespace) {
        return Err(DriverError::new(
            Code::InvalidArgument,
            format!("{source}: the EC2 endpoint must be an http:// or https:// URL"),
        ));
    }
    Ok(Some(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(pairs: &[(&str, &str)]) -> SecretData {
        SecretData(pairs.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect())
    }

    #[test]
    fn static_keys_and_their_aliases() {
        let cases = [
            (secret(&[("providerAccessKeyId", "AKIA1"), ("providerSecretAccessKey", "s1")]), "AKIA1", "s1"),
            (secret(&[("accessKeyID", " AKIA2\n"), ("secretAccessKey", "s2\n")]), "AKIA2", "s2"),
            (secret(&[("accessKeyId", "AKIA3"), ("secretAccessKey", "s3")]), "AKIA3", "s3"),
            (
                secret(&[
                    ("providerAccessKeyId", "AKIA4"),
                    ("accessKeyID", "other"),
                    ("providerSecretAccessKey", "s4"),
                ]),
                "AKIA4",
                "s4",
            ),
        ];
        for (s, id, key) in cases {
            match Credentials::from_secret(&s).unwrap() {
                Credentials::Static { access_key_id, secret_access_key } => {
                    assert_eq!((access_key_id.expose(), secret_access_key.expose()), (id, key));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn missing_keys_are_named_and_values_never_shown() {
        let err = Credentials::from_secret(&secret(&[("providerSecretAccessKey", "hunter2-secret")])).unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
        assert!(err.message.contains("providerAccessKeyId or accessKeyID"), "{err}");
        assert!(!err.message.contains("hunter2"), "{err}");
        let err = Credentials::from_secret(&secret(&[("providerAccessKeyId", "AKIA-secret-id")])).unwrap_err();
        assert!(err.message.contains("providerSecretAccessKey or secretAccessKey"), "{err}");
        assert!(!err.message.contains("AKIA-secret-id"), "{err}");
        let err = Credentials::from_secret(&secret(&[("workloadIdentityTokenFile", "/var/run/token")])).unwrap_err();
        assert!(err.message.contains("roleARN is required"), "{err}");
    }

    #[test]
    fn workload_identity_wins_over_keys() {
        let s = secret(&[
            ("workloadIdentityTokenFile", "/var/run/secrets/token"),
            ("roleARN", "arn:aws:iam::1:role/r"),
            ("providerAccessKeyId", "AKIA"),
            ("providerSecretAccessKey", "s"),
        ]);
        assert_eq!(
            Credentials::from_secret(&s).unwrap(),
            Credentials::WebIdentity {
                token_file: "/var/run/secrets/token".into(),
                role_arn: "arn:aws:iam::1:role/r".into()
            }
        );
    }

    #[test]
    fn debug_never_shows_secret_values() {
        let creds = Credentials::from_secret(&secret(&[
            ("providerAccessKeyId", "AKIAEXAMPLEKEYID"),
            ("providerSecretAccessKey", "wJalrXUtnFEMI/K7MDENG"),
        ]))
        .unwrap();
        let shown = format!("{creds:?} {:?}", user_data(&secret(&[("userData", "#cloud-config secret")])).unwrap());
        for value in ["AKIAEXAMPLEKEYID", "wJalrXUtnFEMI", "cloud-config"] {
            assert!(!shown.contains(value), "{shown}");
        }
        assert!(shown.contains("<redacted>"));
        assert_eq!(Sensitive::new("x").to_string(), "<redacted>");
    }

    #[test]
    fn user_data_is_required_for_create() {
        assert_eq!(user_data(&secret(&[("userdata", "#!/bin/sh")])).unwrap().expose(), "IyEvYmluL3No");
        let gzip = SecretData([("userData".to_string(), vec![0x1f, 0x8b, 0xff, 0x00])].into());
        assert_eq!(user_data(&gzip).unwrap().expose(), "H4v/AA==");
        let err = user_data(&secret(&[("userData", "")])).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (Code::InvalidArgument, "secret: needs userData (the cloud-init for new instances)")
        );
    }

    #[test]
    fn endpoint_precedence() {
        let env = |k: &str| match k {
            "AWS_ENDPOINT_URL_EC2" => Some("http://ec2-env:1".to_string()),
            "AWS_ENDPOINT_URL" => Some("http://global-env:2".to_string()),
            _ => None,
        };
        let global_only = |k: &str| (k == "AWS_ENDPOINT_URL").then(|| "http://global-env:2".to_string());
        let none = |_: &str| None;
        let with_key = secret(&[("endpoint", "http://127.0.0.1:5000")]);
        let empty = SecretData::default();
        assert_eq!(
            endpoint(&with_key, Some("http://driver:3"), env).unwrap().as_deref(),
            Some("http://127.0.0.1:5000")
        );
        assert_eq!(endpoint(&empty, Some("http://driver:3"), env).unwrap().as_deref(), Some("http://driver:3"));
        assert_eq!(endpoint(&empty, None, env).unwrap().as_deref(), Some("http://ec2-env:1"));
        assert_eq!(endpoint(&empty, None, global_only).unwrap().as_deref(), Some("http://global-env:2"));
        assert_eq!(endpoint(&empty, None, none).unwrap(), None);
        let err = endpoint(&secret(&[("endpoint", "ec2.local")]), None, none).unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
        assert!(err.message.starts_with("secret key endpoint: "), "{err}");
    }

    #[test]
    fn scrub_removes_every_secret_value() {
        let s = secret(&[
            ("providerSecretAccessKey", "topsecretkey"),
            ("userData", "#!/bin/sh\nexport T=topsecretkey-2"),
            ("x", "abc"),
        ]);
        let text = "echo: topsecretkey and #!/bin/sh\nexport T=topsecretkey-2 and abc";
        assert_eq!(scrub(text, &s), "echo: <redacted> and <redacted> and abc");
        let encoded = format!("UserData={}", BASE64.encode("#!/bin/sh\nexport T=topsecretkey-2"));
        assert_eq!(scrub(&encoded, &s), "UserData=<redacted>");
    }
}
