//! Errors as kube-apiserver reports them: a `Status` object with code, reason, message and details.

use std::borrow::Cow;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A failed request, rendered as a `meta.k8s.io/v1` `Status` body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`, `Conflict`, `Invalid` (or whatever an admission webhook answered).
    pub reason: Cow<'static, str>,
    /// A sentence naming the problem.
    pub message: String,
    /// `Status.details`: name, group, kind and causes, when known.
    pub details: Option<Value>,
}

/// A field-level cause inside `Status.details.causes`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// e.g. `FieldValueInvalid`.
    pub reason: String,
    /// The problem without the field, e.g. `Required value`.
    pub message: String,
    /// The field path, e.g. `spec.replicas`.
    pub field: String,
}

/// What an error is about: `machines.machine.sapcloud.io "foo"` in messages and `details`.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// API group ("" for core).
    pub group: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
    /// Kind, for `details.kind` (kube uses the resource there).
    pub name: &'a str,
}

impl Subject<'_> {
    fn qualified_resource(&self) -> String {
        if self.group.is_empty() { self.resource.to_string() } else { format!("{}.{}", self.resource, self.group) }
    }

    fn details(&self) -> Value {
        json!({ "name": self.name, "group": self.group, "kind": self.resource })
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError { code, reason: Cow::Borrowed(reason), message: message.into(), details: None }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden.
    pub fn forbidden(subject: Subject<'_>, why: impl std::fmt::Display) -> Self {
        let mut e = Self::new(
            403,
            "Forbidden",
            format!("{} \"{}\" is forbidden: {why}", subject.qualified_resource(), subject.name),
        );
        e.details = Some(subject.details());
        e
    }

    /// 404 NotFound for a named object.
    pub fn not_found(subject: Subject<'_>) -> Self {
        let mut e =
            Self::new(404, "NotFound", format!("{} \"{}\" not found", subject.qualified_resource(), subject.name));
        e.details = Some(subject.details());
        e
    }

    /// 404 NotFound for a path the server does not serve.
    pub fn no_route(path: &str) -> Self {
        Self::new(404, "NotFound", format!("the server could not find the requested resource ({path})"))
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str, what: &str) -> Self {
        Self::new(405, "MethodNotAllowed", format!("{method} is not supported on {what}"))
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io (not {accept})"
            ),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(subject: Subject<'_>) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", subject.qualified_resource(), subject.name),
        );
        e.details = Some(subject.details());
        e
    }

    /// 409 Conflict on a stale resourceVersion or failed precondition.
    pub fn conflict(subject: Subject<'_>, why: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{}\": {why}", subject.qualified_resource(), subject.name),
        );
        e.details = Some(subject.details());
        e
    }

    /// 409 Conflict: the object changed since it was read.
    pub fn stale(subject: Subject<'_>) -> Self {
        Self::conflict(
            subject,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 410 Gone: a watch or list asked for a resourceVersion no longer kept.
    pub fn gone(requested: u64, oldest: u64) -> Self {
        Self::new(410, "Expired", format!("too old resource version: {requested} ({oldest})"))
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(413, "RequestEntityTooLarge", format!("the request body is larger than the limit of {limit} bytes"))
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str, supported: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type}); accepted media types: {}",
                supported.join(", ")
            ),
        )
    }

    /// 422 Invalid with field causes.
    pub fn invalid(subject: Subject<'_>, kind: &str, causes: Vec<Cause>) -> Self {
        let qualified_kind =
            if subject.group.is_empty() { kind.to_string() } else { format!("{kind}.{}", subject.group) };
        let summary: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        let listed = if summary.len() == 1 { summary.concat() } else { format!("[{}]", summary.join(", ")) };
        let message = format!("{qualified_kind} \"{}\" is invalid: {listed}", subject.name);
        let mut details = json!({ "name": subject.name, "group": subject.group, "kind": kind });
        details["causes"] =
            causes.iter().map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field })).collect();
        ApiError { code: 422, reason: Cow::Borrowed("Invalid"), message, details: Some(details) }
    }

    /// 429 TooManyRequests (fault injection).
    pub fn too_many_requests() -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        );
        e.details = Some(json!({ "retryAfterSeconds": 1 }));
        e
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// An error with any code and reason (fault injection).
    pub fn with_code(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(code, reason, message)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (code, axum::Json(self.to_status())).into_response();
        if self.code == 429 {
            response.headers_mut().insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}
