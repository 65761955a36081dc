//! Building successful responses: a JSON body, and `Warning` headers (field validation and admission webhooks
//! both report through them). Failed requests are rendered by [`ApiError`]'s `IntoResponse` (`super::error`).
//!
//! Imports nothing of the server but `error`: handlers, subresources and routing all build on it.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::error::ApiError;

/// A JSON response from a value.
pub fn json_response(code: StatusCode, value: &Value) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => (code, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => ApiError::internal(format!("could not serialise the response: {e}")).into_response(),
    }
}

/// Adds one `Warning: 299 - "..."` header per warning.
pub fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let escaped = warning.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}
