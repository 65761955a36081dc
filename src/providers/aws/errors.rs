//! EC2 errors to MCM codes. The mapping is a pure function of the AWS error code ([`code_for`]); messages keep the
//! AWS code for operators, never a credential (auth failures drop AWS's text, and everything is scrubbed of secret
//! values).

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use super::credentials::scrub;
use crate::providers::{Code, DriverError, SecretData};

/// Error codes EC2 (and the AWS query protocol) use for throttling: retried by the SDK with back-off, then
/// `Unavailable`.
pub const THROTTLING: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
    "BandwidthLimitExceeded",
];

/// Server-side failures that a retry may cure.
pub const TRANSIENT: &[&str] = &["InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"];

/// The credentials were not accepted.
pub const UNAUTHENTICATED: &[&str] = &[
    "AuthFailure",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "InvalidAccessKeyId",
    "ExpiredToken",
    "RequestExpired",
    "UnrecognizedClientException",
];

/// The credentials were accepted but may not do this.
pub const PERMISSION_DENIED: &[&str] =
    &["UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "OptInRequired", "Blocked"];

/// Codes meaning the instance is not there.
pub const NOT_FOUND: &[&str] = &["InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"];

/// The MCM code for an AWS error code. Capacity and quota (`Insufficient*Capacity`, `*LimitExceeded`,
/// `MaxSpotInstanceCountExceeded`, `Unsupported`) are `ResourceExhausted`, so cluster-autoscaler backs off the pool;
/// throttling and server-side failures are `Unavailable` (retried soon); auth failures are `Unauthenticated` or
/// `PermissionDenied`; a missing instance is `NotFound`; anything else is `Internal`.
pub fn code_for(aws_code: &str) -> Code {
    if THROTTLING.contains(&aws_code) || TRANSIENT.contains(&aws_code) {
        Code::Unavailable
    } else if UNAUTHENTICATED.contains(&aws_code) {
        Code::Unauthenticated
    } else if PERMISSION_DENIED.contains(&aws_code) {
        Code::PermissionDenied
    } else if NOT_FOUND.contains(&aws_code) {
        Code::NotFound
    } else if (aws_code.starts_with("Insufficient") && aws_code.ends_with("Capacity"))
        || aws_code.ends_with("LimitExceeded")
        || aws_code == "MaxSpotInstanceCountExceeded"
        || aws_code == "Unsupported"
    {
        Code::ResourceExhausted
    } else {
        Code::Internal
    }
}

/// How an EC2 call failed, before it becomes a [`DriverError`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// EC2 answered with an error code.
    Service {
        /// The AWS error code (`InsufficientInstanceCapacity`, ...).
        code: String,
        /// AWS's message.
        message: String,
    },
    /// The call ran out of time.
    Timeout(String),
    /// The request never got an answer (connection refused, DNS, TLS ...).
    Unreachable(String),
    /// Anything else (an unreadable answer, a request the SDK could not build).
    Other(String),
}

impl Failure {
    /// The failure of an SDK call.
    pub fn of<E, R>(err: &SdkError<E, R>) -> Failure
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        match err {
            SdkError::ServiceError(service) => {
                let e = service.err();
                Failure::Service {
                    code: e.code().unwrap_or("Unknown").to_string(),
                    message: e.message().unwrap_or_default().to_string(),
                }
            }
            SdkError::TimeoutError(_) => Failure::Timeout(DisplayErrorContext(err).to_string()),
            SdkError::DispatchFailure(d) if d.is_timeout() => Failure::Timeout(DisplayErrorContext(err).to_string()),
            SdkError::DispatchFailure(_) => Failure::Unreachable(DisplayErrorContext(err).to_string()),
            _ => Failure::Other(DisplayErrorContext(err).to_string()),
        }
    }

    /// The AWS error code, for service errors.
    pub fn aws_code(&self) -> Option<&str> {
        match self {
            Failure::Service { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The driver error for `operation` (an EC2 action name, shown in the message), with every value of `secret`
    /// scrubbed from the text.
    pub fn into_driver_error(self, operation: &str, secret: &SecretData) -> DriverError {
        let (code, message) = match self {
            Failure::Service { code: aws, message } => {
                let code = code_for(&aws);
                let message = match code {
                    // AWS's text adds nothing for bad credentials, and the key must never show.
                    Code::Unauthenticated => format!(
                        "EC2 {operation}: AWS did not accept the credentials from the class secret ({aws}); check \
                         providerAccessKeyId/providerSecretAccessKey (or workloadIdentityTokenFile/roleARN)"
                    ),
                    Code::PermissionDenied => {
                        format!("EC2 {operation}: the credentials may not do this ({aws}): {}", short(&message))
                    }
                    _ => format!("EC2 {operation}: {aws}: {}", short(&message)),
                };
                (code, message)
            }
            Failure::Timeout(why) => (Code::DeadlineExceeded, format!("EC2 {operation}: timed out: {}", short(&why))),
            Failure::Unreachable(why) => {
                (Code::Unavailable, format!("EC2 {operation}: cannot reach the endpoint: {}", short(&why)))
            }
            Failure::Other(why) => (Code::Internal, format!("EC2 {operation}: {}", short(&why))),
        };
        DriverError::new(code, scrub(&message, secret))
    }
}

/// AWS messages can be long (encoded authorization failures): keep the first 400 characters.
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
    fn aws_codes_map_to_mcm_codes() {
        let cases = [
            ("InsufficientInstanceCapacity", Code::ResourceExhausted),
            ("InsufficientCapacity", Code::ResourceExhausted),
            ("InsufficientAddressCapacity", Code::ResourceExhausted),
            ("InsufficientVolumeCapacity", Code::ResourceExhausted),
            ("InsufficientHostCapacity", Code::ResourceExhausted),
            ("InstanceLimitExceeded", Code::ResourceExhausted),
            ("VcpuLimitExceeded", Code::ResourceExhausted),
            ("VolumeLimitExceeded", Code::ResourceExhausted),
            ("MaxIOPSLimitExceeded", Code::ResourceExhausted),
            ("RouteLimitExceeded", Code::ResourceExhausted),
            ("MaxSpotInstanceCountExceeded", Code::ResourceExhausted),
            ("Unsupported", Code::ResourceExhausted),
            ("RequestLimitExceeded", Code::Unavailable),
            ("Throttling", Code::Unavailable),
            ("ThrottlingException", Code::Unavailable),
            ("InternalError", Code::Unavailable),
            ("ServiceUnavailable", Code::Unavailable),
            ("AuthFailure", Code::Unauthenticated),
            ("InvalidClientTokenId", Code::Unauthenticated),
            ("SignatureDoesNotMatch", Code::Unauthenticated),
            ("UnauthorizedOperation", Code::PermissionDenied),
            ("OptInRequired", Code::PermissionDenied),
            ("InvalidInstanceID.NotFound", Code::NotFound),
            ("InvalidInstanceID.Malformed", Code::NotFound),
            ("InvalidAMIID.NotFound", Code::Internal),
            ("InvalidParameterValue", Code::Internal),
            ("InvalidSubnetID.NotFound", Code::Internal),
            ("UnsupportedOperation", Code::Internal),
            ("IdempotentParameterMismatch", Code::Internal),
            ("", Code::Internal),
        ];
        for (aws, want) in cases {
            assert_eq!(code_for(aws), want, "{aws}");
        }
    }

    fn secret() -> SecretData {
        SecretData(
            [
                ("providerAccessKeyId".to_string(), b"AKIAIOSFODNN7EXAMPLE".to_vec()),
                ("providerSecretAccessKey".to_string(), b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_vec()),
                ("userData".to_string(), b"#cloud-config\npassword: very-secret-password".to_vec()),
            ]
            .into(),
        )
    }

    #[test]
    fn messages_keep_the_aws_code_and_never_a_secret() {
        let s = secret();
        let echo = "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY #cloud-config\npassword: very-secret-password";
        let failures = [
            Failure::Service { code: "AuthFailure".into(), message: echo.into() },
            Failure::Service { code: "UnauthorizedOperation".into(), message: echo.into() },
            Failure::Service { code: "InsufficientInstanceCapacity".into(), message: echo.into() },
            Failure::Service { code: "InvalidParameterValue".into(), message: echo.into() },
            Failure::Timeout(echo.into()),
            Failure::Unreachable(echo.into()),
            Failure::Other(echo.into()),
        ];
        let mut codes = Vec::new();
        for failure in failures {
            let err = failure.clone().into_driver_error("RunInstances", &s);
            let shown = format!("{err} {err:?}");
            for (key, value) in &s.0 {
                let value = String::from_utf8_lossy(value);
                assert!(!shown.contains(value.as_ref()), "{failure:?} shows {key}: {shown}");
            }
            assert!(err.message.starts_with("EC2 RunInstances: "), "{err}");
            if let Some(aws) = failure.aws_code() {
                assert!(err.message.contains(aws), "{err}");
            }
            codes.push(err.code);
        }
        assert_eq!(
            codes,
            [
                Code::Unauthenticated,
                Code::PermissionDenied,
                Code::ResourceExhausted,
                Code::Internal,
                Code::DeadlineExceeded,
                Code::Unavailable,
                Code::Internal
            ]
        );
        let auth = Failure::Service { code: "AuthFailure".into(), message: "whatever AWS says".into() };
        let err = auth.into_driver_error("DescribeInstances", &s);
        assert!(!err.message.contains("whatever AWS says") && err.message.contains("providerAccessKeyId"), "{err}");
    }

    #[test]
    fn long_messages_are_cut() {
        let err = Failure::Service { code: "UnauthorizedOperation".into(), message: "x".repeat(5000) }
            .into_driver_error("RunInstances", &SecretData::default());
        assert!(err.message.len() < 600 && err.message.ends_with("..."), "{}", err.message.len());
    }
}
