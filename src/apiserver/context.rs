//! The request context: one request resolved against the resource type it addresses ([`Ctx`]) — the type, the
//! requested version, path and query, who writes, and the form a read is answered in — with what every handler
//! asks of it (error subjects, the object's key, output in the requested version, the object or a 404).
//!
//! Built by `handlers` and passed down to `watch`, `subresources`, `field_validation` and `patch`; it must not
//! import any of them, nor the server's state (`state`), so they can all depend on it.

use std::sync::Arc;

use serde_json::Value;

use super::convert;
use super::error::{ApiError, Subject};
use super::printing;
use super::request::{Query, ResourcePath};
use super::resources::ResourceType;
use super::store::{ObjectKey, Store};

/// One resolved request against a resource type.
pub struct Ctx<'a> {
    /// The served type.
    pub rt: Arc<ResourceType>,
    /// The requested version.
    pub version: &'a str,
    /// The path.
    pub path: &'a ResourcePath,
    /// Query parameters.
    pub query: &'a Query,
    /// Who writes: `fieldManager`, or the client's user agent.
    pub manager: String,
    /// Set when a read asked for a server-side printed `Table` (Accept `as=Table`).
    pub table: Option<printing::TableOptions>,
    /// Set when a read asked for metadata only (Accept `as=PartialObjectMetadata[List]`), in this version.
    pub metadata_only: Option<printing::TableVersion>,
}

impl Ctx<'_> {
    /// The error subject for `name`.
    pub fn subject<'b>(&'b self, name: &'b str) -> Subject<'b> {
        Subject { group: &self.rt.gr.group, resource: &self.rt.gr.resource, name }
    }

    /// The key of the named object.
    pub fn key(&self) -> ObjectKey {
        let ns = if self.rt.namespaced { self.path.namespace.clone().unwrap_or_default() } else { String::new() };
        (ns, self.path.name.clone().unwrap_or_default())
    }

    /// A stored object as served in the requested version.
    pub fn output(&self, stored: &Value) -> Value {
        if convert::needs_output_conversion(&self.rt, self.version) {
            convert::to_version(&self.rt, self.version, stored)
        } else {
            stored.clone()
        }
    }

    /// The object or a 404.
    pub fn require(&self, store: &Store) -> Result<Arc<Value>, ApiError> {
        let key = self.key();
        store.get(&self.rt.storage_gr(), &key).ok_or_else(|| ApiError::not_found(self.subject(&key.1)))
    }
}
