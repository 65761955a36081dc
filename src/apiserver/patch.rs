//! Patch documents: the patch types a PATCH may carry (by Content-Type) and applying one to an object as served
//! (JSON merge patch, JSON patch, strategic merge patch, and server-side apply's simplified merge).
//!
//! Used by `handlers` (PATCH of an object or its status) and `subresources` (PATCH of `scale`); it must not
//! import either, nor the server's state.

use serde_json::Value;

use super::context::Ctx;
use super::error::ApiError;
use super::strategic_merge;

/// The patch types we accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/strategic-merge-patch+json` (built-in kinds only).
    Strategic,
    /// `application/apply-patch+yaml` (or `+json`): server-side apply.
    Apply,
}

/// The patch type a request's Content-Type names (415 for any other).
pub fn patch_type(content_type: &str) -> Result<PatchType, ApiError> {
    match content_type {
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchType::Apply),
        other => Err(ApiError::unsupported_media_type(
            other,
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml",
            ],
        )),
    }
}

/// Applies a patch document to a served object.
pub fn apply_patch(ctx: &Ctx<'_>, kind: PatchKind<'_>, target: &Value, raw: &[u8]) -> Result<Value, ApiError> {
    let name = ctx.path.name.clone().unwrap_or_default();
    // Like kube-apiserver: a 422 without object details, so clients print the reason itself.
    let invalid_patch = |e: String| {
        ApiError::with_code(422, "Invalid", format!("the patch to {} \"{name}\" could not be applied: {e}", ctx.rt.gr))
    };
    let parse_json = |raw: &[u8]| -> Result<Value, ApiError> {
        serde_json::from_slice(raw).map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))
    };
    match kind.0 {
        PatchType::Merge => {
            let patch = parse_json(raw)?;
            if !patch.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            let mut out = target.clone();
            json_patch::merge(&mut out, &patch);
            Ok(out)
        }
        PatchType::Json => {
            let mut ops = parse_json(raw)?;
            // kube-apiserver's JSON patch treats `test` against null as passing for an absent path (the finalizer
            // helper of kube-runtime relies on it); the json-patch crate would fail it.
            if let Some(list) = ops.as_array_mut() {
                list.retain(|op| {
                    !(op["op"] == "test"
                        && op["value"].is_null()
                        && op["path"].as_str().is_some_and(|p| target.pointer(p).is_none_or(Value::is_null)))
                });
            }
            let ops: json_patch::Patch = serde_json::from_value(ops)
                .map_err(|e| ApiError::bad_request(format!("the JSON patch is malformed: {e}")))?;
            let mut out = target.clone();
            json_patch::patch(&mut out, &ops).map_err(|e| invalid_patch(e.to_string()))?;
            Ok(out)
        }
        PatchType::Strategic => {
            let patch = parse_json(raw)?;
            strategic_merge::apply(target, &patch, kind.1).map_err(|e| invalid_patch(e.to_string()))
        }
        PatchType::Apply => {
            // Simplified server-side apply: the applied configuration is merged like a JSON merge patch;
            // field ownership (managedFields) and conflicts are not tracked.
            let patch: Value = serde_yaml::from_slice(raw)
                .map_err(|e| ApiError::bad_request(format!("the apply configuration is not valid YAML: {e}")))?;
            if patch.get("apiVersion").is_none() || patch.get("kind").is_none() {
                return Err(ApiError::bad_request("apply configurations must set apiVersion and kind"));
            }
            let mut out = target.clone();
            json_patch::merge(&mut out, &patch);
            Ok(out)
        }
    }
}

/// A patch type with the kind it applies to.
#[derive(Clone, Copy)]
pub struct PatchKind<'a>(pub PatchType, pub &'a str);
