//! The API-server freeze as the controllers see it (MCM's safety controller): one flag the probe task of
//! [`super::safety`] sets and every machine reconcile reads first, with the gauge that mirrors it.

use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::metrics::gauge::Gauge;

/// The freeze as the controllers see it: set by the probe task, read by every machine reconcile.
#[derive(Default)]
pub(crate) struct FreezeFlag {
    frozen: AtomicBool,
    /// A probe failed and no probe has succeeded since: not frozen yet, but no time for orphan collection.
    suspect: AtomicBool,
    gauge: Gauge,
}

impl FreezeFlag {
    /// Whether machine reconciles are held.
    pub(crate) fn frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// The gauge mirroring [`FreezeFlag::frozen`].
    pub(crate) fn gauge(&self) -> Gauge {
        self.gauge.clone()
    }

    pub(crate) fn set_frozen(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::SeqCst);
        self.gauge.set(i64::from(frozen));
    }

    pub(crate) fn set_suspect(&self, suspect: bool) {
        self.suspect.store(suspect, Ordering::SeqCst);
    }

    /// Whether the API servers looked fine at the last probe (always, without probes).
    pub(crate) fn calm(&self) -> bool {
        !self.frozen() && !self.suspect.load(Ordering::SeqCst)
    }
}
