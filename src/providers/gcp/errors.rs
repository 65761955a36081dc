//! Compute Engine errors to MCM codes. The mapping is a pure function of what the API said: the HTTP status and
//! error reason of a failed call ([`code_for_http`]), or the error code of a finished operation
//! ([`code_for_operation`]). Messages keep the API's reason and text for operators, cut and scrubbed of every
//! secret value; authentication failures drop the API's text and name the secret keys to check.

use google_cloud_gax::error::Error as GaxError;
use google_cloud_gax::error::rpc::StatusDetails;

use crate::providers::secrets::scrub;
use crate::providers::{Code, DriverError, SecretData};

/// Operation error codes meaning the zone has no capacity for the instance.
pub const CAPACITY: &[&str] =
    &["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "RESOURCE_POOL_EXHAUSTED"];

/// Error reasons of a 403 meaning throttling (retried soon), not a refusal.
pub const RATE_LIMITED: &[&str] = &["rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"];

/// Capacity, and quota of any kind (`QUOTA_EXCEEDED`, `quotaExceeded`, `CPUS_QUOTA_EXCEEDED`, ...), and a machine
/// type the zone does not offer (Gardener's rule, so the autoscaler tries another zone).
fn exhausted(code_or_reason: &str, message: &str) -> bool {
    CAPACITY.contains(&code_or_reason)
        || code_or_reason.to_ascii_uppercase().contains("QUOTA")
        || message.contains("does not exist in zone")
}

/// The MCM code for a failed call: HTTP status, the first error reason, and the message.
pub fn code_for_http(status: Option<u16>, reason: &str, message: &str) -> Code {
    if exhausted(reason, message) {
        return Code::ResourceExhausted;
    }
    match status {
        Some(429) => Code::Unavailable,
        Some(403) if RATE_LIMITED.contains(&reason) => Code::Unavailable,
        Some(500 | 502 | 503 | 504) => Code::Unavailable,
        Some(401) => Code::Unauthenticated,
        Some(403) => Code::PermissionDenied,
        Some(404) => Code::NotFound,
        Some(409) => Code::AlreadyExists,
        _ => Code::Internal,
    }
}

/// The MCM code for the error code of a finished operation.
pub fn code_for_operation(code: &str, message: &str) -> Code {
    if exhausted(code, message) {
        Code::ResourceExhausted
    } else if code == "RESOURCE_NOT_FOUND" {
        Code::NotFound
    } else {
        Code::Internal
    }
}

/// How a Compute call failed, before it becomes a [`DriverError`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The API answered with an error.
    Service {
        /// The HTTP status.
        status: Option<u16>,
        /// The first error reason (`notFound`, `quotaExceeded`, `ZONE_RESOURCE_POOL_EXHAUSTED`, ...).
        reason: String,
        /// The API's message.
        message: String,
    },
    /// The operation finished with errors (code and message of each).
    Operation(Vec<(String, String)>),
    /// The credentials could not produce a token.
    Credentials(String),
    /// The call, or the wait for its operation, ran out of time.
    Timeout(String),
    /// The request never got an answer (connection refused, DNS, TLS ...).
    Unreachable(String),
    /// Anything else (an unreadable answer, a request that could not be built).
    Other(String),
}

impl Failure {
    /// The failure of an SDK call.
    pub fn of(err: &GaxError) -> Failure {
        if err.is_authentication() {
            return Failure::Credentials(err.to_string());
        }
        if err.is_timeout() {
            return Failure::Timeout(err.to_string());
        }
        // Compute answers errors in its own shape; read reason and message from the body when it has them.
        if let (Some(code), Some((reason, message))) =
            (err.http_status_code(), err.http_payload().and_then(|b| error_body(b)))
        {
            return Failure::Service { status: Some(code), reason, message };
        }
        if let Some(status) = err.status() {
            let reason = status
                .details
                .iter()
                .find_map(|d| match d {
                    StatusDetails::ErrorInfo(info) if !info.reason.is_empty() => Some(info.reason.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            return Failure::Service { status: err.http_status_code(), reason, message: status.message.clone() };
        }
        if let Some(code) = err.http_status_code() {
            let body = err.http_payload().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
            return Failure::Service { status: Some(code), reason: String::new(), message: body };
        }
        if err.is_connect() || err.is_io() || err.is_transport() {
            return Failure::Unreachable(err.to_string());
        }
        Failure::Other(err.to_string())
    }

    /// The HTTP status of a service error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Failure::Service { status, .. } => *status,
            _ => None,
        }
    }

    /// The code the controllers get.
    pub fn code(&self) -> Code {
        match self {
            Failure::Service { status, reason, message } => code_for_http(*status, reason, message),
            Failure::Operation(errors) => {
                let codes: Vec<Code> = errors.iter().map(|(c, m)| code_for_operation(c, m)).collect();
                // Capacity wins: the autoscaler must hear it even when other errors come with it.
                if codes.contains(&Code::ResourceExhausted) {
                    Code::ResourceExhausted
                } else {
                    codes.first().copied().unwrap_or(Code::Internal)
                }
            }
            Failure::Credentials(_) => Code::Unauthenticated,
            Failure::Timeout(_) => Code::DeadlineExceeded,
            Failure::Unreachable(_) => Code::Unavailable,
            Failure::Other(_) => Code::Internal,
        }
    }

    /// The driver error for `operation` (a Compute method, shown in the message), with every value of `secret`
    /// scrubbed from the text.
    pub fn into_driver_error(self, operation: &str, secret: &SecretData) -> DriverError {
        let code = self.code();
        let message = match (&self, code) {
            // The API's text adds nothing for bad credentials, and the key must never show.
            (_, Code::Unauthenticated) => format!(
                "Compute {operation}: Google did not accept the credentials from the class secret; check \
                 serviceAccountJSON (or serviceaccount.json, credentialsConfig) and that the key is not disabled"
            ),
            (Failure::Service { status, reason, message }, _) => {
                let status = status.map(|s| s.to_string()).unwrap_or_else(|| "?".into());
                let reason = if reason.is_empty() { String::new() } else { format!(" {reason}") };
                let permission =
                    if code == Code::PermissionDenied { " (the service account may not do this)" } else { "" };
                format!("Compute {operation}: HTTP {status}{reason}{permission}: {}", short(message))
            }
            (Failure::Operation(errors), _) => {
                let shown: Vec<String> = errors.iter().map(|(c, m)| format!("{c}: {m}")).collect();
                format!("Compute {operation}: the operation failed: {}", short(&shown.join("; ")))
            }
            (Failure::Timeout(why), _) => format!("Compute {operation}: timed out: {}", short(why)),
            (Failure::Unreachable(why), _) => format!("Compute {operation}: cannot reach the endpoint: {}", short(why)),
            (Failure::Credentials(_) | Failure::Other(_), _) => {
                let why = match &self {
                    Failure::Other(why) | Failure::Credentials(why) => why.as_str(),
                    _ => "",
                };
                format!("Compute {operation}: {}", short(why))
            }
        };
        DriverError::new(code, scrub(&message, secret))
    }
}

/// The first reason and the message of a Compute error body:
/// `{"error": {"code": 403, "message": "...", "errors": [{"reason": "quotaExceeded", ...}], "details": [...]}}`.
/// The reason comes from `errors[]`, else from an `ErrorInfo` in `details[]`. `None` for other bodies.
pub fn error_body(payload: &[u8]) -> Option<(String, String)> {
    let body: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let error = body.get("error")?.as_object()?;
    let message = error.get("message").and_then(|m| m.as_str()).unwrap_or_default().to_string();
    let from_errors = error.get("errors").and_then(|e| e.as_array()).and_then(|errors| {
        errors.iter().find_map(|e| e.get("reason").and_then(|r| r.as_str()).filter(|r| !r.is_empty()))
    });
    let from_details = || {
        error.get("details").and_then(|d| d.as_array()).and_then(|details| {
            details.iter().find_map(|d| {
                let is_info =
                    d.get("@type").and_then(|t| t.as_str()).is_some_and(|t| t.ends_with("google.rpc.ErrorInfo"));
                d.get("reason").and_then(|r| r.as_str()).filter(|r| is_info && !r.is_empty())
            })
        })
    };
    let reason = from_errors.or_else(from_details).unwrap_or_default().to_string();
    Some((reason, message))
}

/// API messages can be long: keep the first 400 characters.
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
    fn http_errors_map_to_mcm_codes() {
        let cases = [
            (Some(403), "quotaExceeded", "Quota 'CPUS' exceeded.", Code::ResourceExhausted),
            (Some(403), "QUOTA_EXCEEDED", "", Code::ResourceExhausted),
            (
                Some(400),
                "",
                "Invalid value for field 'resource.machineType': machine type n2-standard-2 does not exist in zone",
                Code::ResourceExhausted,
            ),
            (Some(503), "ZONE_RESOURCE_POOL_EXHAUSTED", "", Code::ResourceExhausted),
            (Some(429), "rateLimitExceeded", "", Code::Unavailable),
            (Some(429), "", "", Code::Unavailable),
            (Some(403), "rateLimitExceeded", "", Code::Unavailable),
            (Some(403), "userRateLimitExceeded", "", Code::Unavailable),
            (Some(500), "backendError", "", Code::Unavailable),
            (Some(502), "", "", Code::Unavailable),
            (Some(503), "", "", Code::Unavailable),
            (Some(504), "", "", Code::Unavailable),
            (Some(401), "authError", "Invalid Credentials", Code::Unauthenticated),
            (Some(403), "forbidden", "Required 'compute.instances.create' permission", Code::PermissionDenied),
            (Some(404), "notFound", "The resource 'projects/p/zones/z/instances/m' was not found", Code::NotFound),
            (Some(409), "alreadyExists", "", Code::AlreadyExists),
            (Some(400), "invalid", "Invalid value for field 'resource.name'", Code::Internal),
            (Some(400), "resourceInUseByAnotherResource", "", Code::Internal),
            (Some(412), "conditionNotMet", "", Code::Internal),
            (None, "", "", Code::Internal),
        ];
        for (status, reason, message, want) in cases {
            assert_eq!(code_for_http(status, reason, message), want, "{status:?} {reason} {message}");
        }
    }

    #[test]
    fn operation_errors_map_to_mcm_codes() {
        let cases = [
            ("ZONE_RESOURCE_POOL_EXHAUSTED", "", Code::ResourceExhausted),
            ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "", Code::ResourceExhausted),
            ("RESOURCE_POOL_EXHAUSTED", "", Code::ResourceExhausted),
            ("QUOTA_EXCEEDED", "Quota 'SSD_TOTAL_GB' exceeded", Code::ResourceExhausted),
            ("CPUS_QUOTA_EXCEEDED", "", Code::ResourceExhausted),
            ("RESOURCE_NOT_FOUND", "image x not found", Code::NotFound),
            ("INVALID_FIELD_VALUE", "machine type n9 does not exist in zone europe-west1-b", Code::ResourceExhausted),
            ("INVALID_FIELD_VALUE", "", Code::Internal),
            ("UNSUPPORTED_OPERATION", "", Code::Internal),
        ];
        for (code, message, want) in cases {
            assert_eq!(code_for_operation(code, message), want, "{code}");
        }
        let mixed =
            Failure::Operation(vec![("INVALID_FIELD_VALUE".into(), "x".into()), ("QUOTA_EXCEEDED".into(), "y".into())]);
        assert_eq!(mixed.code(), Code::ResourceExhausted);
        assert_eq!(Failure::Operation(vec![]).code(), Code::Internal);
    }

    #[test]
    fn compute_error_bodies_are_read() {
        let legacy = br#"{"error": {"code": 403, "message": "Quota 'CPUS' exceeded.", "errors": [{"message": "Quota 'CPUS' exceeded.", "domain": "usageLimits", "reason": "quotaExceeded"}]}}"#;
        assert_eq!(error_body(legacy), Some(("quotaExceeded".into(), "Quota 'CPUS' exceeded.".into())));
        let details = br#"{"error": {"code": 503, "message": "no capacity", "details": [{"@type": "type.googleapis.com/google.rpc.Help"}, {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "ZONE_RESOURCE_POOL_EXHAUSTED", "domain": "compute.googleapis.com"}]}}"#;
        assert_eq!(error_body(details), Some(("ZONE_RESOURCE_POOL_EXHAUSTED".into(), "no capacity".into())));
        assert_eq!(error_body(br#"{"error": {"message": "m"}}"#), Some((String::new(), "m".into())));
        assert_eq!(error_body(b"<html>Bad Gateway</html>"), None);
        assert_eq!(error_body(br#"{"items": []}"#), None);
    }

    fn secret() -> SecretData {
        SecretData(
            [
                (
                    "serviceAccountJSON".to_string(),
                    b"{\"private_key\": \"-----BEGIN PRIVATE KEY-----\\nMIIEsecretkeymaterial0123\\n\"}".to_vec(),
                ),
                ("userData".to_string(), b"#cloud-config\npassword: very-secret-password".to_vec()),
            ]
            .into(),
        )
    }

    #[test]
    fn messages_keep_the_reason_and_never_a_secret() {
        let s = secret();
        let echo = "MIIEsecretkeymaterial0123 and #cloud-config\npassword: very-secret-password";
        let failures = [
            Failure::Service { status: Some(401), reason: "authError".into(), message: echo.into() },
            Failure::Service { status: Some(403), reason: "forbidden".into(), message: echo.into() },
            Failure::Service { status: Some(403), reason: "quotaExceeded".into(), message: echo.into() },
            Failure::Service { status: Some(400), reason: "invalid".into(), message: echo.into() },
            Failure::Operation(vec![("ZONE_RESOURCE_POOL_EXHAUSTED".into(), echo.into())]),
            Failure::Credentials(echo.into()),
            Failure::Timeout(echo.into()),
            Failure::Unreachable(echo.into()),
            Failure::Other(echo.into()),
        ];
        let mut codes = Vec::new();
        for failure in failures {
            let err = failure.clone().into_driver_error("instances.insert", &s);
            let shown = format!("{err} {err:?}");
            assert!(
                !shown.contains("MIIEsecretkeymaterial0123") && !shown.contains("very-secret-password"),
                "{failure:?}: {shown}"
            );
            assert!(err.message.starts_with("Compute instances.insert: "), "{err}");
            codes.push(err.code);
        }
        assert_eq!(
            codes,
            [
                Code::Unauthenticated,
                Code::PermissionDenied,
                Code::ResourceExhausted,
                Code::Internal,
                Code::ResourceExhausted,
                Code::Unauthenticated,
                Code::DeadlineExceeded,
                Code::Unavailable,
                Code::Internal
            ]
        );
        let err = Failure::Service {
            status: Some(404),
            reason: "notFound".into(),
            message: "The resource was not found".into(),
        }
        .into_driver_error("instances.get", &s);
        assert_eq!(err.message, "Compute instances.get: HTTP 404 notFound: The resource was not found");
        let auth =
            Failure::Service { status: Some(401), reason: "authError".into(), message: "whatever Google says".into() };
        let err = auth.into_driver_error("instances.list", &s);
        assert!(!err.message.contains("whatever Google says") && err.message.contains("serviceAccountJSON"), "{err}");
        let long = Failure::Service { status: Some(400), reason: String::new(), message: "x".repeat(5000) };
        assert!(long.into_driver_error("instances.insert", &s).message.ends_with("..."));
    }
}
