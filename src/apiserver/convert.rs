//! Between the stored form and the form of the requested version: `apiVersion` rewriting (kube's `None`
//! conversion strategy) and core `v1` <-> `events.k8s.io/v1` Events, which share one storage.

use serde_json::{Map, Value, json};

use super::resources::{ResourceType, Special};

/// Field renames between core v1 Event (left) and events.k8s.io/v1 Event (right).
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &Value, to_events_v1: bool) -> Value {
    let Some(map) = obj.as_object() else { return obj.clone() };
    let mut out = Map::with_capacity(map.len());
    for (key, value) in map {
        let renamed = EVENT_FIELDS
            .iter()
            .find(|(core, v1)| if to_events_v1 { key == core } else { key == v1 })
            .map(|(core, v1)| if to_events_v1 { *v1 } else { *core })
            .unwrap_or(key);
        out.insert(renamed.to_string(), value.clone());
    }
    Value::Object(out)
}

/// Whether objects of this type need changes before being served in `version`.
pub fn needs_output_conversion(rt: &ResourceType, version: &str) -> bool {
    rt.special == Special::EventsV1 || version != rt.storage_version
}

/// The stored object as served in `version` of `rt`.
pub fn to_version(rt: &ResourceType, version: &str, stored: &Value) -> Value {
    let mut out = if rt.special == Special::EventsV1 { rename(stored, true) } else { stored.clone() };
    if let Some(map) = out.as_object_mut() {
        map.insert("apiVersion".into(), json!(rt.api_version(version)));
        map.insert("kind".into(), json!(rt.kind));
    }
    out
}

/// A request body in `version` of `rt` as it is stored.
pub fn to_storage(rt: &ResourceType, body: Value) -> Value {
    let (api_version, kind) = match rt.special {
        Special::EventsV1 => ("v1".to_string(), "Event".to_string()),
        _ => (rt.api_version(&rt.storage_version), rt.kind.clone()),
    };
    let mut stored = if rt.special == Special::EventsV1 { rename(&body, false) } else { body };
    if let Some(map) = stored.as_object_mut() {
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(kind));
    }
    stored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources::Registry;

    #[test]
    fn events_convert_both_ways() {
        let r = Registry::builtin();
        let v1 = r.lookup("events.k8s.io", "v1", "events").unwrap();
        let body = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default"},
            "regarding": {"kind": "Machine", "name": "m"}, "note": "created", "reason": "Created",
            "reportingController": "mcm", "reportingInstance": "mcm-0", "type": "Normal", "action": "Create"
        });
        let stored = to_storage(&v1, body.clone());
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["involvedObject"]["name"], "m");
        assert_eq!(stored["message"], "created");
        assert_eq!(stored["reportingComponent"], "mcm");
        assert_eq!(to_version(&v1, "v1", &stored), body);
    }
}
