//! Events (`events.k8s.io/v1`) with client-go's bounded aggregation: a repeat of the same reason on the same object
//! within a few minutes patches the first event's `series` instead of creating another, and the recorder remembers
//! at most [`REMEMBERED`] events, least recently used first out.
//!
//! kube-runtime's `Recorder` does the same folding but keeps every event of the last six minutes and sweeps that
//! whole map under one lock on each publish: with thousands of machines each getting a few events, that is tens of
//! megabytes held and a sweep over all of them per event. client-go's correlator bounds its cache at 4,096 entries
//! instead; so does this one, and it keeps only the name and count of each event, not the event.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use lru::LruCache;

use super::context::lock;
use crate::lifecycle::status::{EventSpec, Severity};

/// Events remembered for folding repeats (client-go's `maxLruCacheEntries`).
pub(crate) const REMEMBERED: usize = 4096;

/// How long after its last occurrence a repeat still folds into an event (kube-runtime's window).
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// What makes two events the same: the object, the reason and the type (the note may differ; the first one stays).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Key {
    regarding: String,
    reason: &'static str,
    warning: bool,
}

/// An event created earlier: where it is, how often it happened, when last.
#[derive(Clone, Debug)]
struct Seen {
    namespace: String,
    name: String,
    count: i32,
    last: Timestamp,
}

/// What to send for an event, given the one remembered under its key.
#[derive(Debug, PartialEq)]
enum Publish {
    /// A new event.
    Create,
    /// A patch of event `name`'s series to `count` occurrences.
    Repeat { namespace: String, name: String, count: i32 },
}

fn decide(seen: Option<&Seen>, now: Timestamp) -> Publish {
    match seen {
        Some(s) if s.last + SERIES_WINDOW > now => {
            Publish::Repeat { namespace: s.namespace.clone(), name: s.name.clone(), count: s.count + 1 }
        }
        _ => Publish::Create,
    }
}

/// Records events as one controller (`reportingController`); clones share the memory of past events.
#[derive(Clone)]
pub(crate) struct Recorder {
    client: Client,
    controller: Arc<str>,
    seen: Arc<Mutex<LruCache<Key, Seen>>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("controller", &self.controller).finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder reporting as `controller`.
    pub(crate) fn new(client: Client, controller: &str) -> Self {
        let capacity = NonZeroUsize::new(REMEMBERED).unwrap_or(NonZeroUsize::MIN);
        Recorder { client, controller: controller.into(), seen: Arc::new(Mutex::new(LruCache::new(capacity))) }
    }

    /// Records `event` on the object `regarding` refers to: a new Event, or one more occurrence of a recent one.
    pub(crate) async fn publish(&self, event: EventSpec, regarding: ObjectReference) -> kube::Result<()> {
        let key = Key {
            regarding: regarding
                .uid
                .clone()
                .unwrap_or_else(|| format!("{:?}/{:?}/{:?}", regarding.kind, regarding.namespace, regarding.name)),
            reason: event.reason,
            warning: event.severity == Severity::Warning,
        };
        let now = Timestamp::now();
        let publish = decide(lock(&self.seen).get(&key), now);
        if let Publish::Repeat { namespace, name, count } = publish {
            let series = serde_json::json!({ "series": { "count": count, "lastObservedTime": MicroTime(now) } });
            let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
            match events.patch(&name, &PatchParams::default(), &Patch::Merge(&series)).await {
                Ok(_) => {
                    lock(&self.seen).put(key, Seen { namespace, name, count, last: now });
                    return Ok(());
                }
                // Gone (the server's event TTL): record it afresh.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(err),
            }
        }
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".to_string());
        let created = self.event(event, regarding, &namespace, now);
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let created = events.create(&PostParams::default(), &created).await?;
        let name = created.metadata.name.unwrap_or_default();
        lock(&self.seen).put(key, Seen { namespace, name, count: 1, last: now });
        Ok(())
    }

    /// A new Event as kube-runtime writes one (name `<object>.<nanoseconds in hex>`, the controller as instance).
    fn event(&self, event: EventSpec, regarding: ObjectReference, namespace: &str, now: Timestamp) -> Event {
        let controller = self.controller.to_string();
        Event {
            metadata: ObjectMeta {
                namespace: Some(namespace.to_string()),
                name: Some(format!("{}.{:x}", regarding.name.as_deref().unwrap_or(&controller), now.as_nanosecond())),
                ..ObjectMeta::default()
            },
            action: Some(event.reason.to_string()),
            reason: Some(event.reason.to_string()),
            note: Some(event.note),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            reporting_instance: Some(controller.clone()),
            reporting_controller: Some(controller),
            type_: Some(if event.severity == Severity::Warning { "Warning" } else { "Normal" }.to_string()),
            ..Event::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(count: i32, last: Timestamp) -> Seen {
        Seen { namespace: "ns".into(), name: "m.1f".into(), count, last }
    }

    #[test]
    fn repeats_fold_into_a_recent_event_only() {
        let now = Timestamp::now();
        let cases = [
            (None, Publish::Create),
            (
                Some(seen(1, now - SignedDuration::from_secs(10))),
                Publish::Repeat { namespace: "ns".into(), name: "m.1f".into(), count: 2 },
            ),
            (
                Some(seen(7, now - SignedDuration::from_mins(5))),
                Publish::Repeat { namespace: "ns".into(), name: "m.1f".into(), count: 8 },
            ),
            (Some(seen(7, now - SignedDuration::from_mins(6))), Publish::Create),
            (Some(seen(3, now - SignedDuration::from_hours(2))), Publish::Create),
        ];
        for (remembered, want) in cases {
            assert_eq!(decide(remembered.as_ref(), now), want, "{remembered:?}");
        }
    }

    #[tokio::test]
    async fn the_memory_of_past_events_is_bounded() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let recorder = Recorder::new(Client::try_from(config).unwrap(), "machine-controller");
        let mut cache = lock(&recorder.seen);
        assert_eq!(cache.cap().get(), REMEMBERED);
        for i in 0..REMEMBERED + 10 {
            cache.put(
                Key { regarding: format!("uid-{i}"), reason: "Running", warning: false },
                seen(1, Timestamp::now()),
            );
        }
        assert_eq!(cache.len(), REMEMBERED);
    }
}
