//! Versions of objects that our own writes replaced. A reconcile woken by another object's event (a Node's, say)
//! can start from a store that has not yet seen the write of the pass before it; acting on that old version does
//! the same patch, driver call or event a second time. With this book, such a pass waits for its write's watch
//! event instead. Correctness never depends on it (every step is idempotent, and an entry is trusted for at most
//! [`TRUST`]); it saves the duplicate requests a store that lags behind would cost.
//!
//! A pass runs inside [`tracking`]; the writes module notes each successful write with the version it replaced and
//! the one it produced ([`note`]); the end of the pass folds them into [`Superseded`]. The last version a pass
//! produced of an object is never marked: it is the one the store is waiting to show.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::{Resource, ResourceExt};

/// How long a mark is trusted: a watch event normally arrives within milliseconds; past this the pass goes on.
const TRUST: Duration = Duration::from_secs(30);

tokio::task_local! {
    static PASS: RefCell<Vec<Written>>;
}

/// One successful write of a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Written {
    object: String,
    replaced: Option<String>,
    /// `None`: the object is gone (its last finalizer went, or it was not found).
    produced: Option<String>,
}

fn id<K: Resource<DynamicType = ()>>(object: &K) -> String {
    format!("{}/{}/{}", K::kind(&()), object.namespace().unwrap_or_default(), object.name_any())
}

/// Notes a successful write of `before` (as the writer read it) that produced `produced` (`None`: it is gone).
/// Outside [`tracking`] it does nothing.
pub(crate) fn note<K: Resource<DynamicType = ()>>(before: &K, produced: Option<&str>) {
    let written =
        Written { object: id(before), replaced: before.resource_version(), produced: produced.map(str::to_string) };
    let _ = PASS.try_with(|pass| pass.borrow_mut().push(written));
}

/// Runs `pass`, collecting the writes it notes.
pub(crate) async fn tracking<F: Future>(pass: F) -> (F::Output, Vec<Written>) {
    let (out, writes) = PASS
        .scope(RefCell::new(Vec::new()), async {
            let out = pass.await;
            (out, PASS.with(|p| std::mem::take(&mut *p.borrow_mut())))
        })
        .await;
    (out, writes)
}

/// The versions per object that a store showing them is behind on.
#[derive(Debug, Default)]
pub(crate) struct Superseded {
    marks: Mutex<HashMap<String, Mark>>,
}

#[derive(Debug)]
struct Mark {
    versions: HashSet<String>,
    at: Instant,
}

impl Superseded {
    /// Folds a pass's writes in.
    pub(crate) fn absorb(&self, writes: Vec<Written>) {
        self.absorb_at(writes, Instant::now());
    }

    fn absorb_at(&self, writes: Vec<Written>, now: Instant) {
        if writes.is_empty() {
            return;
        }
        let mut marks = self.marks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        marks.retain(|_, mark| now.duration_since(mark.at) < TRUST);
        let mut last: HashMap<&str, Option<&str>> = HashMap::new();
        for w in &writes {
            last.insert(&w.object, w.produced.as_deref());
        }
        for w in &writes {
            let mark = marks.entry(w.object.clone()).or_insert_with(|| Mark { versions: HashSet::new(), at: now });
            mark.at = now;
            mark.versions.extend(w.replaced.iter().cloned());
            let newest = last.get(w.object.as_str()).copied().flatten();
            if let Some(produced) = w.produced.as_deref().filter(|p| Some(*p) != newest) {
                mark.versions.insert(produced.to_string());
            }
        }
    }

    /// Whether the store's `object` is a version our own writes already replaced. An object seen in any other
    /// version clears its mark: the store has caught up.
    pub(crate) fn holds<K: Resource<DynamicType = ()>>(&self, object: &K) -> bool {
        self.holds_at(&id(object), object.resource_version().as_deref(), Instant::now())
    }

    fn holds_at(&self, object: &str, version: Option<&str>, now: Instant) -> bool {
        let mut marks = self.marks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(mark) = marks.get(object) else { return false };
        let stale = now.duration_since(mark.at) < TRUST && version.is_some_and(|v| mark.versions.contains(v));
        if !stale {
            marks.remove(object);
        }
        stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(object: &str, replaced: &str, produced: Option<&str>) -> Written {
        Written { object: object.into(), replaced: Some(replaced.into()), produced: produced.map(Into::into) }
    }

    #[test]
    fn a_store_behind_the_last_write_is_held_until_it_catches_up() {
        let book = Superseded::default();
        let t0 = Instant::now();
        // A pass read version 1, wrote 2, then wrote 3 (from 2).
        book.absorb_at(vec![w("Machine/ns/m", "1", Some("2")), w("Machine/ns/m", "2", Some("3"))], t0);
        assert!(book.holds_at("Machine/ns/m", Some("1"), t0));
        assert!(book.holds_at("Machine/ns/m", Some("2"), t0));
        // The version the pass produced last is what the store waits for: never held, and it clears the mark.
        assert!(!book.holds_at("Machine/ns/m", Some("3"), t0));
        assert!(!book.holds_at("Machine/ns/m", Some("1"), t0));
        assert!(!book.holds_at("Machine/other/m", Some("1"), t0));
    }

    #[test]
    fn a_version_written_by_someone_else_goes_through() {
        let book = Superseded::default();
        let t0 = Instant::now();
        book.absorb_at(vec![w("Machine/ns/m", "1", Some("2"))], t0);
        assert!(!book.holds_at("Machine/ns/m", Some("7"), t0));
    }

    #[test]
    fn a_gone_object_holds_every_version_the_pass_saw() {
        let book = Superseded::default();
        let t0 = Instant::now();
        book.absorb_at(vec![w("Machine/ns/m", "4", Some("5")), w("Machine/ns/m", "5", None)], t0);
        assert!(book.holds_at("Machine/ns/m", Some("4"), t0));
        assert!(book.holds_at("Machine/ns/m", Some("5"), t0));
    }

    #[test]
    fn marks_are_trusted_for_a_while_only() {
        let book = Superseded::default();
        let t0 = Instant::now();
        book.absorb_at(vec![w("Node//n", "1", Some("2"))], t0);
        assert!(!book.holds_at("Node//n", Some("1"), t0 + TRUST));
    }

    #[tokio::test]
    async fn writes_are_collected_inside_a_pass_only() {
        let mut before = k8s_openapi::api::core::v1::Node::default();
        before.metadata.name = Some("n".into());
        before.metadata.resource_version = Some("1".into());
        note(&before, Some("2"));
        let ((), writes) = tracking(async { note(&before, Some("3")) }).await;
        assert_eq!(writes, vec![w("Node//n", "1", Some("3"))]);
    }
}
