//! What the GCP driver reads from the class secret: the service-account key (or a workload-identity credentials
//! config), the project, `userData` and an optional endpoint. Secret values are held in [`Sensitive`], whose
//! `Debug` prints `<redacted>`, and no error built here quotes them.

use serde_json::{Map, Value};

use crate::providers::secrets::Sensitive;
use crate::providers::{Code, DriverError, SecretData};

/// Secret keys holding a service-account key (JSON), first match wins: Gardener's name, then its alias.
pub const SERVICE_ACCOUNT_KEYS: &[&str] = &["serviceAccountJSON", "serviceaccount.json"];
/// Secret key holding a workload-identity credentials config (`"type": "external_account"`), read when neither
/// service-account key is there.
pub const CREDENTIALS_CONFIG_KEY: &str = "credentialsConfig";
/// Secret key with the project, used when the JSON has no `project_id`.
pub const PROJECT_ID_KEY: &str = "projectID";
/// Secret keys holding the user data for new instances.
pub const USER_DATA_KEYS: &[&str] = &["userData", "userdata"];
/// Optional secret key overriding the Compute endpoint for this class (a test server, a private endpoint).
pub const ENDPOINT_KEY: &str = "endpoint";

/// The fields a service-account key may have (Gardener refuses keys with others).
pub const SERVICE_ACCOUNT_FIELDS: &[&str] = &[
    "type",
    "project_id",
    "client_email",
    "universe_domain",
    "auth_uri",
    "auth_provider_x509_cert_url",
    "client_x509_cert_url",
    "client_id",
    "private_key_id",
    "private_key",
    "token_uri",
];

/// The only token exchange a workload-identity config may use.
pub const STS_TOKEN_URL: &str = "https://sts.googleapis.com/v1/token";

/// How the driver authenticates to Compute Engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// A service-account key (JSON text); tokens are self-signed JWTs.
    ServiceAccount(Sensitive),
    /// A workload-identity federation config (JSON text): a token file exchanged at Google's STS.
    ExternalAccount(Sensitive),
}

impl Credentials {
    /// The JSON text, to hand to the auth library.
    pub fn json(&self) -> Result<Value, DriverError> {
        let (Credentials::ServiceAccount(text) | Credentials::ExternalAccount(text)) = self;
        serde_json::from_str(text.expose()).map_err(|_| invalid("the credentials JSON cannot be read"))
    }
}

/// The credentials and project of a class secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// How to authenticate.
    pub credentials: Credentials,
    /// The project VMs live in: the JSON's `project_id`, else the secret's `projectID`.
    pub project: String,
}

impl Account {
    /// The account in `secret`, or `InvalidArgument` naming what is missing or wrong (never a value).
    pub fn from_secret(secret: &SecretData) -> Result<Account, DriverError> {
        let found = SERVICE_ACCOUNT_KEYS
            .iter()
            .chain(std::iter::once(&CREDENTIALS_CONFIG_KEY))
            .find_map(|k| secret.text(k).map(|v| (*k, v.trim().to_string())));
        let Some((key, text)) = found else {
            return Err(invalid(&format!(
                "needs {} (a service-account key) or {CREDENTIALS_CONFIG_KEY} (workload identity)",
                SERVICE_ACCOUNT_KEYS.join(" or ")
            )));
        };
        let json: Map<String, Value> = serde_json::from_str(&text)
            .map_err(|e| invalid(&format!("{key} is not a JSON object (line {}, column {})", e.line(), e.column())))?;
        let kind = json.get("type").and_then(Value::as_str).unwrap_or_default();
        let credentials = match kind {
            "service_account" => {
                let mut unknown: Vec<&str> =
                    json.keys().map(String::as_str).filter(|k| !SERVICE_ACCOUNT_FIELDS.contains(k)).collect();
                unknown.sort_unstable();
                if !unknown.is_empty() {
                    return Err(invalid(&format!(
                        "{key} has fields a service-account key does not have: {} (allowed: {})",
                        unknown.join(", "),
                        SERVICE_ACCOUNT_FIELDS.join(", ")
                    )));
                }
                for field in ["client_email", "private_key"] {
                    if json.get(field).and_then(Value::as_str).is_none_or(|v| v.trim().is_empty()) {
                        return Err(invalid(&format!("{key} has no {field}")));
                    }
                }
                Credentials::ServiceAccount(Sensitive::new(text))
            }
            "external_account" => {
                check_external_account(key, &json)?;
                Credentials::ExternalAccount(Sensitive::new(text))
            }
            other => {
                return Err(invalid(&format!(
                    "{key} has type {other:?}; only \"service_account\" and \"external_account\" are allowed"
                )));
            }
        };
        let project = json
            .get("project_id")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .or_else(|| project_key(secret))
            .ok_or_else(|| invalid(&format!("{key} has no project_id and there is no {PROJECT_ID_KEY}")))?;
        Ok(Account { credentials, project })
    }
}

/// The project of `secret` without credentials (a driver with anonymous credentials, for tests): the JSON's
/// `project_id` if there is a key, else `projectID`.
pub fn project_only(secret: &SecretData) -> Result<String, DriverError> {
    if let Ok(account) = Account::from_secret(secret) {
        return Ok(account.project);
    }
    project_key(secret).ok_or_else(|| invalid(&format!("needs {PROJECT_ID_KEY} (or a service-account key)")))
}

fn project_key(secret: &SecretData) -> Option<String> {
    secret.text(PROJECT_ID_KEY).map(|p| p.trim().to_string()).filter(|p| !p.is_empty())
}

/// Workload identity as Gardener allows it: Google's STS, a JWT subject token read from a file.
fn check_external_account(key: &str, json: &Map<String, Value>) -> Result<(), DriverError> {
    let text = |field: &str| json.get(field).and_then(Value::as_str).map(str::trim).unwrap_or_default();
    if text("token_url") != STS_TOKEN_URL {
        return Err(invalid(&format!("{key}: token_url must be {STS_TOKEN_URL}")));
    }
    if text("subject_token_type") != "urn:ietf:params:oauth:token-type:jwt" {
        return Err(invalid(&format!("{key}: subject_token_type must be urn:ietf:params:oauth:token-type:jwt")));
    }
    let source = json.get("credential_source").and_then(Value::as_object);
    let file_only = source.is_some_and(|s| {
        s.get("file").and_then(Value::as_str).is_some_and(|f| !f.trim().is_empty())
            && s.keys().all(|k| k == "file" || k == "format")
    });
    if !file_only {
        return Err(invalid(&format!("{key}: credential_source must name a token file (and nothing else)")));
    }
    Ok(())
}

fn invalid(what: &str) -> DriverError {
    DriverError::new(Code::InvalidArgument, format!("secret: {what}"))
}

/// The user data for a new instance, as text (GCE metadata values are strings), or `InvalidArgument` when the
/// secret has none.
pub fn user_data(secret: &SecretData) -> Result<Sensitive, DriverError> {
    USER_DATA_KEYS
        .iter()
        .find_map(|k| secret.0.get(*k))
        .filter(|v| !v.is_empty())
        .map(|v| Sensitive::new(String::from_utf8_lossy(v).into_owned()))
        .ok_or_else(|| invalid(&format!("needs {} (the cloud-init for new instances)", USER_DATA_KEYS[0])))
}

/// The Compute endpoint to use: the secret's `endpoint`, else the driver's own override; `None`: Google's.
pub fn endpoint(secret: &SecretData, driver_default: Option<&str>) -> Result<Option<String>, DriverError> {
    let chosen = secret
        .text(ENDPOINT_KEY)
        .map(|e| (format!("secret key {ENDPOINT_KEY}"), e))
        .or_else(|| driver_default.map(|e| ("the driver's endpoint".to_string(), e.to_string())));
    let Some((source, url)) = chosen else { return Ok(None) };
    let url = url.trim().trim_end_matches('/').to_string();
    if url.is_empty() {
        return Ok(None);
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.contains(char::is_whitespace) {
        return Err(DriverError::new(
            Code::InvalidArgument,
            format!("{source}: the Compute endpoint must be an http:// or https:// URL"),
        ));
    }
    Ok(Some(url))
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    /// A service-account key with a made-up private key (never used to sign in unit tests).
    pub(crate) fn key_json(project: &str) -> String {
        json!({
            "type": "service_account",
            "project_id": project,
            "private_key_id": "0123456789abcdef",
            "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEunittestunittestunittestunittestunittest\n-----END PRIVATE KEY-----\n",
            "client_email": "mcm@unit.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": "https://oauth2.googleapis.com/token"
        })
        .to_string()
    }

    fn secret(pairs: &[(&str, &str)]) -> SecretData {
        SecretData(pairs.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect())
    }

    #[test]
    fn keys_aliases_and_the_project() {
        let key = key_json("p1");
        for name in ["serviceAccountJSON", "serviceaccount.json"] {
            let account = Account::from_secret(&secret(&[(name, &key)])).unwrap();
            assert_eq!(account.project, "p1", "{name}");
            assert!(matches!(account.credentials, Credentials::ServiceAccount(_)));
            assert_eq!(account.credentials.json().unwrap()["client_email"], "mcm@unit.iam.gserviceaccount.com");
        }
        // serviceAccountJSON wins over its alias; projectID fills in a missing project_id.
        let mut no_project: Value = serde_json::from_str(&key).unwrap();
        no_project.as_object_mut().unwrap().remove("project_id");
        let s = secret(&[
            ("serviceAccountJSON", &no_project.to_string()),
            ("serviceaccount.json", "not json"),
            ("projectID", " p2\n"),
        ]);
        assert_eq!(Account::from_secret(&s).unwrap().project, "p2");
        assert_eq!(project_only(&secret(&[("projectID", "p3")])).unwrap(), "p3");
        assert_eq!(project_only(&secret(&[("serviceAccountJSON", &key)])).unwrap(), "p1");
    }

    #[test]
    fn workload_identity_configs_are_checked() {
        let good = json!({
            "type": "external_account",
            "audience": "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/x",
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "token_url": STS_TOKEN_URL,
            "credential_source": {"file": "/var/run/secrets/gardener.cloud/workload-identity/token"},
        });
        let s = secret(&[("credentialsConfig", &good.to_string()), ("projectID", "p")]);
        let account = Account::from_secret(&s).unwrap();
        assert!(matches!(account.credentials, Credentials::ExternalAccount(_)));
        let mut url_source = good.clone();
        url_source["credential_source"] = json!({"url": "http://169.254.169.254/token"});
        let mut executable = good.clone();
        executable["credential_source"] = json!({"file": "/t", "executable": {"command": "/bin/sh"}});
        let mut other_sts = good.clone();
        other_sts["token_url"] = json!("https://evil.example/token");
        for (bad, want) in
            [(url_source, "credential_source"), (executable, "credential_source"), (other_sts, "token_url")]
        {
            let err = Account::from_secret(&secret(&[("credentialsConfig", &bad.to_string())])).unwrap_err();
            assert!(err.message.contains(want), "{err}");
        }
    }

    #[test]
    fn bad_secrets_are_named_and_values_never_shown() {
        let key = key_json("p1");
        let mut extra: Value = serde_json::from_str(&key).unwrap();
        extra["credential_source"] = json!({"file": "/etc/shadow"});
        let mut no_key: Value = serde_json::from_str(&key).unwrap();
        no_key["private_key"] = json!("");
        let mut user: Value = serde_json::from_str(&key).unwrap();
        user["type"] = json!("authorized_user");
        let mut no_project: Value = serde_json::from_str(&key).unwrap();
        no_project.as_object_mut().unwrap().remove("project_id");
        let cases = [
            (
                secret(&[("userData", "x")]),
                "secret: needs serviceAccountJSON or serviceaccount.json (a service-account key) or credentialsConfig",
            ),
            (
                secret(&[("serviceAccountJSON", "{\"private_key\": \"MIIEsecret\"")]),
                "secret: serviceAccountJSON is not a JSON object (line 1",
            ),
            (secret(&[("serviceAccountJSON", "\"MIIEsecret\"")]), "secret: serviceAccountJSON is not a JSON object"),
            (
                secret(&[("serviceAccountJSON", &extra.to_string())]),
                "secret: serviceAccountJSON has fields a service-account key does not have: credential_source",
            ),
            (secret(&[("serviceAccountJSON", &no_key.to_string())]), "secret: serviceAccountJSON has no private_key"),
            (
                secret(&[("serviceAccountJSON", &user.to_string())]),
                "secret: serviceAccountJSON has type \"authorized_user\"",
            ),
            (
                secret(&[("serviceAccountJSON", &no_project.to_string())]),
                "secret: serviceAccountJSON has no project_id and there is no projectID",
            ),
        ];
        for (s, want) in cases {
            let err = Account::from_secret(&s).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument);
            assert!(err.message.starts_with(want), "{:?} should start with {want:?}", err.message);
            assert!(!err.message.contains("MIIE"), "{err}");
        }
        let account = Account::from_secret(&secret(&[("serviceAccountJSON", &key)])).unwrap();
        let shown = format!("{account:?}");
        assert!(!shown.contains("MIIE") && !shown.contains("client_email") && shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn user_data_and_endpoint() {
        assert_eq!(user_data(&secret(&[("userdata", "#!/bin/sh")])).unwrap().expose(), "#!/bin/sh");
        let err = user_data(&secret(&[("userData", "")])).unwrap_err();
        assert_eq!(err.message, "secret: needs userData (the cloud-init for new instances)");
        let with_key = secret(&[("endpoint", "http://127.0.0.1:8080/")]);
        assert_eq!(endpoint(&with_key, Some("http://d:1")).unwrap().as_deref(), Some("http://127.0.0.1:8080"));
        assert_eq!(endpoint(&SecretData::default(), Some("http://d:1")).unwrap().as_deref(), Some("http://d:1"));
        assert_eq!(endpoint(&SecretData::default(), None).unwrap(), None);
        let err = endpoint(&secret(&[("endpoint", "compute.local")]), None).unwrap_err();
        assert!(err.message.starts_with("secret key endpoint: "), "{err}");
    }
}
