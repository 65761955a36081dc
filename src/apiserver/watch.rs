//! Watches: newline-delimited JSON events streamed over a chunked response.
//!
//! A watch starts from a resourceVersion (events after it are replayed from the type's bounded history, or an
//! `ERROR` event with a 410 `Expired` status tells the client to relist), or from "now" with synthetic `ADDED`
//! events for every existing object. Bookmarks carry the newest resourceVersion this watch has seen.
//!
//! Called by `handlers`, which it must not import: it works from the request context (`context`) and the shared
//! state (`state`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::context::Ctx;
use super::convert;
use super::error::ApiError;
use super::printing;
use super::resources::{GroupResource, ResourceType};
use super::selectors::{self, FieldSelector, LabelSelector};
use super::state::Shared;
use super::store::{EventType, WatchEvent};
use super::stored::StoredObject;

/// Which events a watch wants, and in which form.
struct Filter {
    rt: Arc<ResourceType>,
    gr: GroupResource,
    version: String,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    convert: bool,
    /// Server-side printing: each event's object is a one-row Table.
    table: Option<printing::TableBuilder>,
    /// Only the first table carries column definitions, as kube-apiserver sends them (kubectl reuses them).
    headers_sent: AtomicBool,
    /// Metadata only: each event's object is a `PartialObjectMetadata` of this version.
    metadata_only: Option<printing::TableVersion>,
}

impl Filter {
    /// The object as this watch serves it: parsed, and converted when its version asks.
    fn served(&self, stored: &StoredObject) -> Value {
        let object = stored.to_value();
        if self.convert { convert::to_version(&self.rt, &self.version, &object) } else { object }
    }

    fn matches(&self, stored: &StoredObject) -> bool {
        if self.namespace.as_deref().is_some_and(|ns| stored.namespace() != ns) {
            return false;
        }
        // Most watches select by labels, name or namespace at most: the index answers without parsing.
        match stored.matches_indexed(&self.labels, &self.fields).filter(|_| !self.convert) {
            Some(matched) => matched,
            None => selectors::matches(&self.labels, &self.fields, &self.served(stored)),
        }
    }

    /// The event type this watch sees for a change, if any: selector transitions become ADDED or DELETED.
    fn event_type(&self, event: &WatchEvent) -> Option<&'static str> {
        if event.gr != self.gr {
            return None;
        }
        let now = self.matches(&event.object);
        match event.kind {
            EventType::Added => now.then_some("ADDED"),
            EventType::Deleted => now.then_some("DELETED"),
            EventType::Modified => {
                let before = event.previous.as_ref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
        }
    }

    fn encode(&self, kind: &str, object: &StoredObject) -> Bytes {
        let mut out = Vec::with_capacity(object.json().len() + 32);
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"object\":");
        if let Some(table) = &self.table {
            let headers = !self.headers_sent.swap(true, Ordering::Relaxed);
            let table = table.object_table(&self.served(object), headers);
            out.extend_from_slice(&serde_json::to_vec(&table).unwrap_or_default());
        } else if let Some(version) = self.metadata_only {
            let metadata = printing::partial_metadata(&object.to_value(), version);
            out.extend_from_slice(&serde_json::to_vec(&metadata).unwrap_or_default());
        } else if self.convert {
            out.extend_from_slice(&serde_json::to_vec(&self.served(object)).unwrap_or_default());
        } else {
            // As stored: what serde_json would write for the parsed object, without parsing it.
            out.extend_from_slice(object.json());
        }
        out.extend_from_slice(b"}\n");
        Bytes::from(out)
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({ "resourceVersion": rv.to_string() });
        if initial_events_end {
            metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        let object = match (&self.table, self.metadata_only) {
            // A table without rows: kubectl prints nothing for it.
            (Some(table), _) => table.table(Vec::new(), json!({ "resourceVersion": rv.to_string() }), false),
            (None, Some(version)) => printing::partial_metadata(&json!({ "metadata": metadata }), version),
            (None, None) => {
                json!({ "kind": self.rt.kind, "apiVersion": self.rt.api_version(&self.version), "metadata": metadata })
            }
        };
        let event = json!({ "type": "BOOKMARK", "object": object });
        let mut bytes = serde_json::to_vec(&event).unwrap_or_default();
        bytes.push(b'\n');
        Bytes::from(bytes)
    }
}

fn error_event(error: &ApiError) -> Bytes {
    let mut bytes = serde_json::to_vec(&json!({ "type": "ERROR", "object": error.to_status() })).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// What the watch sends before live events.
struct Start {
    initial: Vec<StoredObject>,
    replay: Vec<Arc<WatchEvent>>,
    rx: broadcast::Receiver<Arc<WatchEvent>>,
    cursor: u64,
}

/// Serves a watch request.
pub async fn serve(shared: Arc<Shared>, ctx: &Ctx<'_>) -> Result<Response, ApiError> {
    let labels = LabelSelector::parse(&ctx.query.label_selector)
        .map_err(|e| ApiError::bad_request(format!("unable to parse labelSelector: {e}")))?;
    let fields = FieldSelector::parse(&ctx.query.field_selector)
        .map_err(|e| ApiError::bad_request(format!("unable to parse fieldSelector: {e}")))?;
    if let Some(field) = fields.fields().find(|f| !ctx.rt.supports_field(ctx.version, f)) {
        return Err(ApiError::bad_request(format!("field label not supported: {field}")));
    }
    let filter = Filter {
        rt: ctx.rt.clone(),
        gr: ctx.rt.storage_gr(),
        version: ctx.version.to_string(),
        namespace: if ctx.rt.namespaced { ctx.path.namespace.clone() } else { None },
        labels,
        fields,
        convert: convert::needs_output_conversion(&ctx.rt, ctx.version),
        table: ctx.table.map(|options| printing::TableBuilder::new(&ctx.rt, ctx.version, options)),
        headers_sent: AtomicBool::new(false),
        metadata_only: ctx.metadata_only,
    };
    let from = match ctx.query.resource_version.as_deref() {
        None | Some("0") => None,
        Some(rv) => {
            Some(rv.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?)
        }
    };
    let send_initial = ctx.query.send_initial_events;
    let start = {
        let store = shared.lock();
        match from {
            Some(rv) if !send_initial => match store.watch_from(&filter.gr, rv) {
                Ok((replay, rx)) => Ok(Start { initial: Vec::new(), replay, rx, cursor: rv.max(1) }),
                Err(expired) => Err(ApiError::gone(expired.requested, expired.oldest)),
            },
            _ => {
                let namespace = filter.namespace.as_deref();
                let initial = store
                    .list(&filter.gr, namespace, None)
                    .filter(|(_, o)| filter.matches(o))
                    .map(|(_, o)| o.clone())
                    .collect();
                Ok(Start { initial, replay: Vec::new(), rx: store.subscribe(), cursor: store.rv() })
            }
        }
    };
    let timeout =
        Duration::from_secs(ctx.query.timeout_seconds.unwrap_or(shared.config.default_watch_timeout.as_secs()));
    let bookmarks = ctx.query.allow_bookmarks;
    let (tx, rx_body) = mpsc::channel::<Result<Bytes, std::convert::Infallible>>(64);
    let interval = shared.config.bookmark_interval;
    let mut closing = shared.close_watches.subscribe();
    shared.watch_opened();
    let guard = WatchGuard(shared.clone());
    tokio::spawn(async move {
        let _guard = guard;
        let mut start = match start {
            Ok(start) => start,
            Err(error) => {
                let _ = tx.send(Ok(error_event(&error))).await;
                return;
            }
        };
        for obj in &start.initial {
            if tx.send(Ok(filter.encode("ADDED", obj))).await.is_err() {
                return;
            }
        }
        if send_initial && bookmarks && tx.send(Ok(filter.bookmark(start.cursor, true))).await.is_err() {
            return;
        }
        for event in &start.replay {
            start.cursor = event.rv;
            if let Some(kind) = filter.event_type(event)
                && tx.send(Ok(filter.encode(kind, &event.object))).await.is_err()
            {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(interval);
        ticker.reset();
        loop {
            tokio::select! {
                received = start.rx.recv() => match received {
                    Ok(event) => {
                        start.cursor = start.cursor.max(event.rv);
                        let lag = shared.faults.watch_lag(&filter.gr.resource);
                        if !lag.is_zero() && filter.event_type(&event).is_some() {
                            tokio::time::sleep(lag).await;
                        }
                        if let Some(kind) = filter.event_type(&event)
                            && tx.send(Ok(filter.encode(kind, &event.object))).await.is_err()
                        {
                            return;
                        }
                    }
                    // Too slow a reader, or the server is going away: end the watch; the client resumes from
                    // its last resourceVersion (and relists on 410).
                    Err(_) => return,
                },
                _ = ticker.tick(), if bookmarks => {
                    if tx.send(Ok(filter.bookmark(start.cursor, false))).await.is_err() {
                        return;
                    }
                }
                _ = &mut deadline => return,
                _ = closing.changed() => return,
                _ = tx.closed() => return,
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx_body));
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// Counts open watches for the server's metrics; decrements when the watch task ends.
struct WatchGuard(Arc<Shared>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.watch_closed();
    }
}
