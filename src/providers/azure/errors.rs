//! Azure Resource Manager errors to MCM codes. The mapping is a pure function of the HTTP status, the ARM error
//! code and its message ([`code_for`]); messages keep the ARM code for operators, never a credential (auth failures
//! drop Azure's text, and everything is scrubbed of secret values). The SDK's own error `Display` is never used:
//! it prints the whole response body and headers.

use std::sync::LazyLock;

use regex::Regex;

use super::credentials::{CLIENT_ID_KEYS, CLIENT_SECRET_KEYS, TENANT_ID_KEYS, scrub};
use crate::providers::{Code, DriverError, SecretData};

/// ARM codes for capacity and quota: `ResourceExhausted`, so cluster-autoscaler backs off the pool.
pub const EXHAUSTED: &[&str] = &[
    "ZonalAllocationFailed",
    "AllocationFailed",
    "SkuNotAvailable",
    "ResourceQuotaExceeded",
    "QuotaExceeded",
    "OperationNotAllowedQuotaExceeded",
    "OverconstrainedAllocationRequest",
    "OverconstrainedZonalAllocationRequest",
    "NotAvailableForSubscription",
];

/// ARM codes for throttling and server-side failures a retry may cure: `Unavailable`.
pub const TRANSIENT: &[&str] = &[
    "TooManyRequests",
    "SubscriptionRequestsThrottled",
    "RetryableError",
    "InternalServerError",
    "InternalExecutionError",
    "ServerTimeout",
    "ServiceUnavailable",
    "GatewayTimeout",
    "Conflict",
    "AnotherOperationInProgress",
    "OperationPreempted",
];

/// The token was not accepted.
pub const UNAUTHENTICATED: &[&str] = &[
    "InvalidAuthenticationToken",
    "InvalidAuthenticationTokenTenant",
    "ExpiredAuthenticationToken",
    "AuthenticationFailed",
    "AuthenticationFailedMissingToken",
];

/// The principal may not do this.
pub const PERMISSION_DENIED: &[&str] = &["AuthorizationFailed", "LinkedAuthorizationFailed", "Forbidden"];

/// The resource is not there.
pub const NOT_FOUND: &[&str] = &["ResourceNotFound", "NotFound"];

static EXCEEDING_QUOTA: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"(?i)exceed\w*.*quota").ok());
static NOT_SUPPORTED: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"(?i)not\s+supported").ok());

fn matches(re: &LazyLock<Option<Regex>>, text: &str) -> bool {
    re.as_ref().is_some_and(|re| re.is_match(text))
}

/// The MCM code for an ARM answer: HTTP `status` (None for the result of an asynchronous operation), ARM error
/// `code` and `message`. Capacity and quota are `ResourceExhausted` (also `OperationNotAllowed` about exceeding a
/// quota and `BadRequest` about something not supported, as Gardener maps them); 429, 5xx and retryable codes are
/// `Unavailable`; 401 `Unauthenticated`; 403 `PermissionDenied`; 404 `NotFound`; the rest `Internal`.
pub fn code_for(status: Option<u16>, code: &str, message: &str) -> Code {
    if EXHAUSTED.contains(&code)
        || (code == "OperationNotAllowed" && matches(&EXCEEDING_QUOTA, message))
        || (code == "BadRequest" && matches(&NOT_SUPPORTED, message))
    {
        Code::ResourceExhausted
    } else if status == Some(429) || TRANSIENT.contains(&code) || status.is_some_and(|s| s >= 500 || s == 408) {
        Code::Unavailable
    } else if status == Some(401) || UNAUTHENTICATED.contains(&code) {
        Code::Unauthenticated
    } else if status == Some(403) || PERMISSION_DENIED.contains(&code) {
        Code::PermissionDenied
    } else if (status == Some(404) && !code.ends_with("GroupNotFound")) || NOT_FOUND.contains(&code) {
        Code::NotFound
    } else {
        Code::Internal
    }
}

/// How an ARM call failed, before it becomes a [`DriverError`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// ARM answered with an error (or an asynchronous operation ended `Failed`, `status` None).
    Service {
        /// The HTTP status.
        status: Option<u16>,
        /// The ARM error code (`AllocationFailed`, ...).
        code: String,
        /// ARM's message.
        message: String,
    },
    /// No token: the authority refused the credentials or could not be reached.
    Credential(String),
    /// The request never got an answer (connection refused, DNS, TLS, timeout ...).
    Unreachable(String),
    /// Anything else (an unreadable answer).
    Other(String),
}

impl Failure {
    /// The failure of an SDK call. Only the status, the ARM code and its message are read.
    pub fn of(err: &azure_core::Error) -> Failure {
        use azure_core::error::ErrorKind;
        match err.kind() {
            ErrorKind::HttpResponse { status, error_code } => {
                let http = err.as_http_error();
                Failure::Service {
                    status: Some(u16::from(*status)),
                    code: error_code
                        .clone()
                        .or_else(|| http.and_then(|h| h.error_code()).map(str::to_string))
                        .unwrap_or_else(|| format!("HTTP{}", u16::from(*status))),
                    message: http.and_then(|h| h.error_message()).unwrap_or_default().to_string(),
                }
            }
            ErrorKind::Credential => Failure::Credential(chain(err)),
            ErrorKind::Io => Failure::Unreachable(chain(err)),
            _ => Failure::Other(chain(err)),
        }
    }

    /// The HTTP status of a service error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Failure::Service { status, .. } => *status,
            _ => None,
        }
    }

    /// The ARM error code, for service errors.
    pub fn arm_code(&self) -> Option<&str> {
        match self {
            Failure::Service { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether ARM said the resource does not exist.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// The driver error for `operation` (e.g. `PUT virtualMachines/m1`, shown in the message), with every value of
    /// `secret` scrubbed from the text.
    pub fn into_driver_error(self, operation: &str, secret: &SecretData) -> DriverError {
        let keys = format!(
            "{}, {} and {} (or workloadIdentityTokenFile)",
            CLIENT_ID_KEYS[0], CLIENT_SECRET_KEYS[0], TENANT_ID_KEYS[0]
        );
        let (code, message) = match self {
            Failure::Service { status, code: arm, message } => {
                let code = code_for(status, &arm, &message);
                let http = status.map(|s| format!("HTTP {s} ")).unwrap_or_default();
                let message = match code {
                    // Azure's text adds nothing for a refused token, and nothing of the credentials may show.
                    Code::Unauthenticated => format!(
                        "ARM {operation}: Azure did not accept the token ({http}{arm}); check the class secret's {keys}"
                    ),
                    Code::PermissionDenied => {
                        format!(
                            "ARM {operation}: the service principal may not do this ({http}{arm}): {}",
                            short(&message)
                        )
                    }
                    Code::Unavailable if status == Some(429) => format!(
                        "ARM {operation}: throttled ({http}{arm}) after the driver's retries, which honour Retry-After; \
                         try again later: {}",
                        short(&message)
                    ),
                    _ => format!("ARM {operation}: {http}{arm}: {}", short(&message)),
                };
                (code, message)
            }
            // The authority's answer can quote the request; only say what to check.
            Failure::Credential(_) => (
                Code::Unauthenticated,
                format!("ARM {operation}: no token from the authority for the class secret's {keys}"),
            ),
            Failure::Unreachable(why) => {
                (Code::Unavailable, format!("ARM {operation}: cannot reach the endpoint: {}", short(&why)))
            }
            Failure::Other(why) => (Code::Internal, format!("ARM {operation}: {}", short(&why))),
        };
        DriverError::new(code, scrub(&message, secret))
    }
}

/// The messages of an error's source chain (no response bodies: those live in `HttpError`, which is not read).
fn chain(err: &azure_core::Error) -> String {
    let mut parts = Vec::new();
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if e.downcast_ref::<azure_core::error::HttpError>().is_some() {
            break;
        }
        let text = e.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

/// ARM messages can be long: keep the first 400 characters.
fn short(text: &str) -> String {
    const MAX: usize = 400;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_answers_map_to_mcm_codes() {
        let cases = [
            (Some(409), "ZonalAllocationFailed", "", Code::ResourceExhausted),
            (None, "AllocationFailed", "", Code::ResourceExhausted),
            (Some(409), "SkuNotAvailable", "", Code::ResourceExhausted),
            (Some(409), "OverconstrainedAllocationRequest", "", Code::ResourceExhausted),
            (Some(400), "QuotaExceeded", "", Code::ResourceExhausted),
            (Some(403), "ResourceQuotaExceeded", "", Code::ResourceExhausted),
            (
                Some(409),
                "OperationNotAllowed",
                "Operation could not be completed as it results in exceeding approved standardDSv3Family Cores quota",
                Code::ResourceExhausted,
            ),
            (Some(409), "OperationNotAllowed", "The VM is being deallocated", Code::Internal),
            (Some(400), "BadRequest", "Premium storage is not supported for this VM size", Code::ResourceExhausted),
            (Some(400), "BadRequest", "bad", Code::Internal),
            (Some(429), "TooManyRequests", "", Code::Unavailable),
            (Some(429), "", "", Code::Unavailable),
            (Some(500), "InternalServerError", "", Code::Unavailable),
            (Some(503), "ServiceUnavailable", "", Code::Unavailable),
            (None, "RetryableError", "", Code::Unavailable),
            (Some(409), "Conflict", "", Code::Unavailable),
            (Some(401), "InvalidAuthenticationToken", "", Code::Unauthenticated),
            (Some(401), "ExpiredAuthenticationToken", "", Code::Unauthenticated),
            (Some(403), "AuthorizationFailed", "", Code::PermissionDenied),
            (Some(404), "ResourceNotFound", "", Code::NotFound),
            (Some(404), "NotFound", "", Code::NotFound),
            (Some(404), "ResourceGroupNotFound", "", Code::Internal),
            (Some(400), "InvalidParameter", "", Code::Internal),
            (Some(400), "InvalidResourceReference", "", Code::Internal),
            (None, "OSProvisioningTimedOut", "", Code::Internal),
        ];
        for (status, arm, message, want) in cases {
            assert_eq!(code_for(status, arm, message), want, "{status:?} {arm} {message}");
        }
    }

    fn secret() -> SecretData {
        SecretData(
            [
                ("clientID".to_string(), b"00000000-client-id".to_vec()),
                ("clientSecret".to_string(), b"Very~Secret.Client.Secret".to_vec()),
                ("userData".to_string(), b"#cloud-config\npassword: very-secret-password".to_vec()),
            ]
            .into(),
        )
    }

    #[test]
    fn messages_keep_the_arm_code_and_never_a_secret() {
        let s = secret();
        let echo = "00000000-client-id Very~Secret.Client.Secret #cloud-config\npassword: very-secret-password";
        let service = |status, code: &str| Failure::Service { status, code: code.into(), message: echo.into() };
        let failures = [
            service(Some(401), "InvalidAuthenticationToken"),
            service(Some(403), "AuthorizationFailed"),
            service(None, "AllocationFailed"),
            service(Some(429), "TooManyRequests"),
            service(Some(400), "InvalidParameter"),
            Failure::Credential(echo.into()),
            Failure::Unreachable(echo.into()),
            Failure::Other(echo.into()),
        ];
        let mut codes = Vec::new();
        for failure in failures {
            let err = failure.clone().into_driver_error("PUT virtualMachines/m1", &s);
            let shown = format!("{err} {err:?}");
            for (key, value) in &s.0 {
                let value = String::from_utf8_lossy(value);
                assert!(!shown.contains(value.as_ref()), "{failure:?} shows {key}: {shown}");
            }
            assert!(err.message.starts_with("ARM PUT virtualMachines/m1: "), "{err}");
            if let Some(arm) = failure.arm_code() {
                assert!(err.message.contains(arm), "{err}");
            }
            codes.push(err.code);
        }
        assert_eq!(
            codes,
            [
                Code::Unauthenticated,
                Code::PermissionDenied,
                Code::ResourceExhausted,
                Code::Unavailable,
                Code::Internal,
                Code::Unauthenticated,
                Code::Unavailable,
                Code::Internal
            ]
        );
        let auth = service(Some(401), "InvalidAuthenticationToken").into_driver_error("GET x", &s);
        assert!(!auth.message.contains("password") && auth.message.contains("clientSecret"), "{auth}");
    }
}
