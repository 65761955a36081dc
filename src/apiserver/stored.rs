//! An object as the store keeps it: its compact JSON, which lists and watches send as it is, and beside it the
//! metadata the store, the garbage collector and selectors consult, so that none of them parses the object.
//!
//! A parsed `serde_json::Value` costs about nine times its JSON text in memory; the text plus this index costs
//! well under twice. Requests that change or reshape an object (update, patch, conversion, tables) parse it.

use std::sync::Arc;

use serde_json::Value;

use super::object;
use super::selectors::{self, FieldSelector, LabelSelector};

/// A stored object's JSON no longer parses. Cannot happen for text serde_json wrote from a `Value`, except for
/// an object nested deeper than serde_json reads (128 levels).
#[derive(Debug, thiserror::Error)]
#[error("a stored object does not parse back: {0}")]
pub struct Unreadable(#[from] serde_json::Error);

/// One stored object; cloning shares it.
#[derive(Clone, Debug)]
pub struct StoredObject(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Compact JSON, keys sorted: exactly what serde_json writes for the object.
    json: Box<[u8]>,
    index: Index,
}

/// The metadata read without parsing the object.
#[derive(Debug, Default, PartialEq, Eq)]
struct Index {
    namespace: Box<str>,
    name: Box<str>,
    uid: Box<str>,
    /// `metadata.labels` as selectors read them (see [`selectors::label_text`]), in key order.
    labels: Box<[(Box<str>, Box<str>)]>,
    owner_uids: Box<[Box<str>]>,
    finalizers: Box<[Box<str>]>,
    deleting: bool,
}

/// Field selectors the index answers; others need the object.
const INDEXED_FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

impl StoredObject {
    /// Serialises `object` and indexes its metadata.
    pub fn new(object: &Value) -> Self {
        let mut labels: Vec<(Box<str>, Box<str>)> = object::labels(object)
            .map(|labels| labels.iter().map(|(k, v)| (k.as_str().into(), selectors::label_text(v).into())).collect())
            .unwrap_or_default();
        // serde_json's maps are sorted already; sorting again keeps `label`'s binary search right regardless.
        labels.sort_unstable();
        let index = Index {
            namespace: object::namespace(object).into(),
            name: object::name(object).into(),
            uid: object::uid(object).into(),
            labels: labels.into_boxed_slice(),
            owner_uids: object::owner_uids(object).into_iter().map(String::into_boxed_str).collect(),
            finalizers: object::finalizers(object).into_iter().map(String::into_boxed_str).collect(),
            deleting: object::is_deleting(object),
        };
        // `Value`'s Display is serde_json's compact writer, which cannot fail for a `Value`.
        StoredObject(Arc::new(Inner { json: object.to_string().into_bytes().into_boxed_slice(), index }))
    }

    /// The object's JSON, as clients receive it.
    pub fn json(&self) -> &[u8] {
        &self.0.json
    }

    /// The object, parsed.
    pub fn try_value(&self) -> Result<Value, Unreadable> {
        Ok(serde_json::from_slice(&self.0.json)?)
    }

    /// The object, parsed; should that ever fail, its indexed metadata stands in for it (logged), so a request
    /// still sees the object exist rather than the server failing.
    pub fn to_value(&self) -> Value {
        self.try_value().unwrap_or_else(|error| {
            tracing::error!(namespace = self.namespace(), name = self.name(), %error, "stored object unreadable");
            let mut metadata = serde_json::Map::new();
            for (field, text) in [("namespace", self.namespace()), ("name", self.name()), ("uid", self.uid())] {
                if !text.is_empty() {
                    metadata.insert(field.into(), Value::String(text.into()));
                }
            }
            serde_json::json!({ "metadata": metadata })
        })
    }

    /// `metadata.namespace` ("" when absent).
    pub fn namespace(&self) -> &str {
        &self.0.index.namespace
    }

    /// `metadata.name` ("" when absent).
    pub fn name(&self) -> &str {
        &self.0.index.name
    }

    /// `metadata.uid` ("" when absent).
    pub fn uid(&self) -> &str {
        &self.0.index.uid
    }

    /// The `uid`s of `metadata.ownerReferences`.
    pub fn owner_uids(&self) -> impl Iterator<Item = &str> {
        self.0.index.owner_uids.iter().map(|uid| &**uid)
    }

    /// `metadata.finalizers`.
    pub fn finalizers(&self) -> impl Iterator<Item = &str> {
        self.0.index.finalizers.iter().map(|f| &**f)
    }

    /// Whether `metadata.deletionTimestamp` is set.
    pub fn is_deleting(&self) -> bool {
        self.0.index.deleting
    }

    /// A label's value as selectors read it.
    pub fn label(&self, key: &str) -> Option<&str> {
        let labels = &self.0.index.labels;
        labels.binary_search_by(|(k, _)| (**k).cmp(key)).ok().map(|i| &*labels[i].1)
    }

    /// Whether the object matches the selectors, when the index can tell (labels, name and namespace only);
    /// `None` when a field selector reads anything else.
    pub fn matches_indexed(&self, labels: &LabelSelector, fields: &FieldSelector) -> Option<bool> {
        if !fields.fields().all(|field| INDEXED_FIELDS.contains(&field)) {
            return None;
        }
        let labels_match = labels.is_empty() || labels.matches_with(|key| self.label(key));
        let fields_match = fields.is_empty()
            || fields.matches_with(|field| {
                if field == "metadata.name" { self.name().to_string() } else { self.namespace().to_string() }
            });
        Some(labels_match && fields_match)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine() -> Value {
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "Machine",
            "metadata": {
                "name": "m1", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                "labels": {"pool": "a", "zone": "z1"},
                "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "name": "s", "uid": "o1"}],
                "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
            },
            "spec": {"class": {"kind": "MachineClass", "name": "c"}, "providerID": "x:///1", "replicas": 3, "weight": 0.5},
        })
    }

    #[test]
    fn round_trips_byte_for_byte_as_serde_json_writes() {
        let value = machine();
        let stored = StoredObject::new(&value);
        assert_eq!(stored.json(), serde_json::to_vec(&value).unwrap().as_slice());
        assert_eq!(stored.try_value().unwrap(), value);
        assert_eq!(stored.to_value(), value);
    }

    #[test]
    fn indexes_the_metadata() {
        let stored = StoredObject::new(&machine());
        assert_eq!((stored.namespace(), stored.name(), stored.uid()), ("default", "m1", "u1"));
        assert_eq!(stored.owner_uids().collect::<Vec<_>>(), ["o1"]);
        assert_eq!(stored.finalizers().collect::<Vec<_>>(), ["machine.sapcloud.io/machine-controller-manager"]);
        assert_eq!((stored.label("pool"), stored.label("zone"), stored.label("x")), (Some("a"), Some("z1"), None));
        assert!(!stored.is_deleting());
    }

    #[test]
    fn indexes_follow_updates() {
        let mut value = machine();
        let before = StoredObject::new(&value);
        value["metadata"]["labels"] = json!({"pool": "b"});
        value["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        value["metadata"]["finalizers"] = json!([]);
        object::metadata_mut(&mut value).remove("ownerReferences");
        let after = StoredObject::new(&value);
        assert_eq!(after.label("pool"), Some("b"));
        assert_eq!(after.label("zone"), None);
        assert!(after.is_deleting());
        assert_eq!(after.finalizers().count(), 0);
        assert_eq!(after.owner_uids().count(), 0);
        // The earlier version is unchanged (watch events keep it as the previous state).
        assert_eq!(before.label("pool"), Some("a"));
        assert_eq!(before.to_value(), machine());
    }

    #[test]
    fn selectors_on_the_index_agree_with_the_object() {
        let value = machine();
        let stored = StoredObject::new(&value);
        for (labels, fields) in [
            ("", ""),
            ("pool=a", ""),
            ("pool=b", ""),
            ("pool in (a,b),zone", "metadata.name=m1"),
            ("!missing", "metadata.namespace!=default"),
            ("zone notin (z2)", "metadata.name=m1,metadata.namespace=default"),
        ] {
            let labels = LabelSelector::parse(labels).unwrap();
            let fields = FieldSelector::parse(fields).unwrap();
            assert_eq!(stored.matches_indexed(&labels, &fields), Some(selectors::matches(&labels, &fields, &value)));
        }
        let other_field = FieldSelector::parse("spec.providerID=x:///1").unwrap();
        assert_eq!(stored.matches_indexed(&LabelSelector::default(), &other_field), None);
    }

    #[test]
    fn non_string_labels_read_as_selectors_read_them() {
        let stored = StoredObject::new(&json!({"metadata": {"labels": {"n": 3, "z": null}}}));
        assert_eq!((stored.label("n"), stored.label("z")), (Some("3"), Some("")));
    }

    #[test]
    fn an_unreadable_object_falls_back_to_its_metadata() {
        let mut deep = json!("leaf");
        for _ in 0..200 {
            deep = json!([deep]);
        }
        let stored = StoredObject::new(&json!({"metadata": {"name": "deep", "uid": "u"}, "spec": deep}));
        assert!(stored.try_value().is_err());
        assert_eq!(stored.to_value(), json!({"metadata": {"name": "deep", "uid": "u"}}));
    }
}
