//! What the Azure driver reads from the class secret: the service principal (client secret or workload identity),
//! the subscription, `userData`, and optional endpoint overrides. Secret values are held in [`Sensitive`].

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

pub use crate::providers::secrets::{Sensitive, scrub};
use crate::providers::{Code, DriverError, SecretData};

/// Secret keys holding the client (application) ID, first match wins: Gardener's name, then its older alias.
pub const CLIENT_ID_KEYS: &[&str] = &["clientID", "azureClientId"];
/// Secret keys holding the client secret.
pub const CLIENT_SECRET_KEYS: &[&str] = &["clientSecret", "azureClientSecret"];
/// Secret keys holding the tenant ID.
pub const TENANT_ID_KEYS: &[&str] = &["tenantID", "azureTenantId"];
/// Secret keys holding the subscription ID.
pub const SUBSCRIPTION_ID_KEYS: &[&str] = &["subscriptionID", "azureSubscriptionId"];
/// Secret key with a path to a projected service-account token (workload identity; excludes a client secret).
pub const TOKEN_FILE_KEY: &str = "workloadIdentityTokenFile";
/// Secret keys holding the user data (cloud-init), sent as the VM's custom data.
pub const USER_DATA_KEYS: &[&str] = &["userData", "userdata"];
/// Optional secret key overriding the Azure Resource Manager base URL (a sovereign cloud, a test server).
pub const ENDPOINT_KEY: &str = "endpoint";
/// Optional secret key overriding the token authority (Microsoft Entra ID) base URL.
pub const AUTHORITY_KEY: &str = "authorityHost";

/// How the driver proves who it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// A service principal's client secret.
    ClientSecret(Sensitive),
    /// A federated token read from this file (workload identity).
    WorkloadIdentity(String),
}

/// The service principal and subscription of a class secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The tenant (directory) ID.
    pub tenant_id: Sensitive,
    /// The client (application) ID.
    pub client_id: Sensitive,
    /// The secret or token file.
    pub credential: Credential,
    /// The subscription the resource group belongs to.
    pub subscription_id: Sensitive,
}

impl Credentials {
    /// The credentials in `secret`, or `InvalidArgument` naming the keys that are missing (never their values).
    pub fn from_secret(secret: &SecretData) -> Result<Credentials, DriverError> {
        let text = |keys: &[&str]| secret.first_text(keys).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let need = |keys: &[&str]| {
            text(keys).map(Sensitive::new).ok_or_else(|| missing(&format!("needs {}", keys.join(" or "))))
        };
        let client_id = need(CLIENT_ID_KEYS)?;
        let tenant_id = need(TENANT_ID_KEYS)?;
        let subscription_id = need(SUBSCRIPTION_ID_KEYS)?;
        let credential = match (text(CLIENT_SECRET_KEYS), text(&[TOKEN_FILE_KEY])) {
            (Some(s), None) => Credential::ClientSecret(Sensitive::new(s)),
            (None, Some(file)) => Credential::WorkloadIdentity(file),
            (Some(_), Some(_)) => {
                return Err(missing(&format!("{} and {TOKEN_FILE_KEY} exclude each other", CLIENT_SECRET_KEYS[0])));
            }
            (None, None) => {
                return Err(missing(&format!("needs {} or {TOKEN_FILE_KEY}", CLIENT_SECRET_KEYS.join(" or "))));
            }
        };
        Ok(Credentials { tenant_id, client_id, credential, subscription_id })
    }
}

fn missing(what: &str) -> DriverError {
    DriverError::new(Code::InvalidArgument, format!("secret: {what}"))
}

/// The VM's custom data: the user data base64-encoded as ARM takes it (bytes as they are, so gzip-ed cloud-init
/// stays intact), or `InvalidArgument` when the secret has none.
pub fn custom_data(secret: &SecretData) -> Result<Sensitive, DriverError> {
    USER_DATA_KEYS
        .iter()
        .find_map(|k| secret.0.get(*k))
        .filter(|v| !v.is_empty())
        .map(|v| Sensitive::new(BASE64.encode(v)))
        .ok_or_else(|| missing(&format!("needs {} (the cloud-init for new VMs)", USER_DATA_KEYS[0])))
}

/// The two URLs the driver talks to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// Azure Resource Manager, e.g. `https://management.azure.com/`.
    pub arm: String,
    /// The token authority, e.g. `https://login.microsoftonline.com/`.
    pub authority: String,
}

/// ARM and authority per `cloudConfiguration.name`.
pub fn cloud_endpoints(cloud: &str) -> Endpoints {
    let (arm, authority) = match cloud {
        "AzureChina" => ("https://management.chinacloudapi.cn/", "https://login.chinacloudapi.cn/"),
        "AzureGovernment" => ("https://management.usgovcloudapi.net/", "https://login.microsoftonline.us/"),
        _ => ("https://management.azure.com/", "https://login.microsoftonline.com/"),
    };
    Endpoints { arm: arm.to_string(), authority: authority.to_string() }
}

/// The endpoints to use, each first found: the secret's key, the driver's own override, the cloud's default.
pub fn endpoints(secret: &SecretData, driver: &Endpoints, cloud_default: Endpoints) -> Result<Endpoints, DriverError> {
    let pick = |key: &str, driver: &str, default: String| -> Result<String, DriverError> {
        let (source, url) = match secret.text(key).map(|u| u.trim().to_string()).filter(|u| !u.is_empty()) {
            Some(url) => (format!("secret key {key}"), url),
            None if !driver.is_empty() => ("the driver's endpoint".to_string(), driver.to_string()),
            None => return Ok(default),
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.contains(char::is_whitespace) {
            return Err(DriverError::new(
                Code::InvalidArgument,
                format!("{source}: must be an http:// or https:// URL"),
            ));
        }
        Ok(if url.ends_with('/') { url } else { format!("{url}/") })
    };
    Ok(Endpoints {
        arm: pick(ENDPOINT_KEY, &driver.arm, cloud_default.arm)?,
        authority: pick(AUTHORITY_KEY, &driver.authority, cloud_default.authority)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(pairs: &[(&str, &str)]) -> SecretData {
        SecretData(pairs.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect())
    }

    const FULL: &[(&str, &str)] = &[
        ("clientID", "client-1"),
        ("clientSecret", "very-secret"),
        ("tenantID", "tenant-1"),
        ("subscriptionID", "sub-1"),
    ];

    #[test]
    fn keys_and_their_aliases() {
        let c = Credentials::from_secret(&secret(FULL)).unwrap();
        assert_eq!(
            (c.client_id.expose(), c.tenant_id.expose(), c.subscription_id.expose()),
            ("client-1", "tenant-1", "sub-1")
        );
        assert_eq!(c.credential, Credential::ClientSecret(Sensitive::new("very-secret")));
        let old = secret(&[
            ("azureClientId", "c2"),
            ("azureClientSecret", "s2\n"),
            ("azureTenantId", "t2"),
            ("azureSubscriptionId", " sub2 "),
        ]);
        let c = Credentials::from_secret(&old).unwrap();
        assert_eq!((c.client_id.expose(), c.subscription_id.expose()), ("c2", "sub2"));
        assert_eq!(c.credential, Credential::ClientSecret(Sensitive::new("s2")));
        // Gardener's name wins over the alias.
        let both = secret(&[FULL, &[("azureClientId", "other")]].concat());
        assert_eq!(Credentials::from_secret(&both).unwrap().client_id.expose(), "client-1");
        let wi = secret(&[
            ("clientID", "c"),
            ("tenantID", "t"),
            ("subscriptionID", "s"),
            ("workloadIdentityTokenFile", "/var/run/token"),
        ]);
        assert_eq!(
            Credentials::from_secret(&wi).unwrap().credential,
            Credential::WorkloadIdentity("/var/run/token".into())
        );
    }

    #[test]
    fn missing_keys_are_named_and_values_never_shown() {
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (
                FULL.iter().copied().filter(|(k, _)| *k != "clientID").collect(),
                "secret: needs clientID or azureClientId",
            ),
            (
                FULL.iter().copied().filter(|(k, _)| *k != "tenantID").collect(),
                "secret: needs tenantID or azureTenantId",
            ),
            (
                FULL.iter().copied().filter(|(k, _)| *k != "subscriptionID").collect(),
                "secret: needs subscriptionID or azureSubscriptionId",
            ),
            (
                FULL.iter().copied().filter(|(k, _)| *k != "clientSecret").collect(),
                "secret: needs clientSecret or azureClientSecret or workloadIdentityTokenFile",
            ),
            (
                [FULL, &[("workloadIdentityTokenFile", "/t")]].concat(),
                "secret: clientSecret and workloadIdentityTokenFile exclude",
            ),
        ];
        for (pairs, want) in cases {
            let err = Credentials::from_secret(&secret(&pairs)).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument);
            assert!(err.message.starts_with(want), "{err}");
            assert!(!err.message.contains("very-secret"), "{err}");
        }
    }

    #[test]
    fn debug_never_shows_secret_values() {
        let c = Credentials::from_secret(&secret(FULL)).unwrap();
        let shown = format!("{c:?} {:?}", custom_data(&secret(&[("userData", "#cloud-config secret")])).unwrap());
        for value in ["client-1", "very-secret", "tenant-1", "sub-1", "cloud-config"] {
            assert!(!shown.contains(value), "{shown}");
        }
    }

    #[test]
    fn custom_data_is_the_user_data_in_base64() {
        assert_eq!(custom_data(&secret(&[("userdata", "#!/bin/sh")])).unwrap().expose(), "IyEvYmluL3No");
        let gzip = SecretData([("userData".to_string(), vec![0x1f, 0x8b, 0xff, 0x00])].into());
        assert_eq!(custom_data(&gzip).unwrap().expose(), "H4v/AA==");
        let err = custom_data(&secret(&[("userData", "")])).unwrap_err();
        assert_eq!(err.message, "secret: needs userData (the cloud-init for new VMs)");
    }

    #[test]
    fn endpoint_precedence() {
        let none = Endpoints { arm: String::new(), authority: String::new() };
        let driver = Endpoints { arm: "http://127.0.0.1:1".into(), authority: "http://127.0.0.1:2/".into() };
        let public = || cloud_endpoints("AzurePublic");
        assert_eq!(endpoints(&SecretData::default(), &none, public()).unwrap(), public());
        assert_eq!(
            endpoints(&SecretData::default(), &none, cloud_endpoints("AzureChina")).unwrap().arm,
            "https://management.chinacloudapi.cn/"
        );
        let got = endpoints(&SecretData::default(), &driver, public()).unwrap();
        assert_eq!((got.arm.as_str(), got.authority.as_str()), ("http://127.0.0.1:1/", "http://127.0.0.1:2/"));
        let s = secret(&[("endpoint", "http://127.0.0.1:9"), ("authorityHost", "https://login.example/")]);
        let got = endpoints(&s, &driver, public()).unwrap();
        assert_eq!((got.arm.as_str(), got.authority.as_str()), ("http://127.0.0.1:9/", "https://login.example/"));
        let err = endpoints(&secret(&[("endpoint", "management.local")]), &none, public()).unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
        assert!(err.message.starts_with("secret key endpoint: "), "{err}");
    }
}
