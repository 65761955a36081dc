//! The controllers' errors: what failed, on which object, and why.

use crate::lifecycle::RetryClass;

/// A reconcile that could not finish; it is retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("{action} {object}: {source}")]
    Kube {
        /// What was being done (`patch status of`, `delete node` ...).
        action: &'static str,
        /// `Kind namespace/name`.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// An API error while doing `action` on `object`.
    pub fn kube(action: &'static str, object: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube { action, object: object.into(), source }
    }

    /// How to retry it.
    pub fn retry_class(&self) -> RetryClass {
        match self {
            Error::Kube { .. } => RetryClass::Api,
        }
    }

    /// Whether this is a 404 for `object` itself (`Kind namespace/name`), i.e. the object is gone.
    pub(crate) fn is_gone(&self, object: &str) -> bool {
        match self {
            Error::Kube { object: o, source, .. } => o == object && is_not_found(source),
        }
    }

    /// Whether the API server answered 409: a write based on a stale read (an optimistic-concurrency conflict or
    /// a create that raced another). The retry reads afresh; nothing is wrong.
    pub(crate) fn is_conflict(&self) -> bool {
        match self {
            Error::Kube { source, .. } => is_conflict(source),
        }
    }

    /// A short stable label (for logs and metrics).
    pub fn label(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "kube",
        }
    }
}

/// Whether `e` is the API server's 404.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether `e` is the API server's 409.
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Logs a failed reconcile: a 409 (a stale read racing a write; the retry converges) at debug, anything else at
/// warn. The leading arguments are the object's key fields, as for `tracing::warn!`.
macro_rules! log_reconcile_failure {
    ($error:expr, $($key:tt)+) => {
        if $error.is_conflict() {
            tracing::debug!($($key)+, error = %$error, "reconcile raced another write; retrying");
        } else {
            tracing::warn!($($key)+, error = %$error, "reconcile failed");
        }
    };
}
pub(crate) use log_reconcile_failure;

#[cfg(test)]
mod tests {
    use super::*;

    fn not_found() -> kube::Error {
        kube::Error::Api(kube::core::Status::failure("gone", "NotFound").with_code(404).boxed())
    }

    #[test]
    fn gone_only_for_its_own_object() {
        let e = Error::kube("patch status of", "Machine ns/a", not_found());
        assert!(e.is_gone("Machine ns/a"));
        assert!(!e.is_gone("Machine ns/b"));
        assert!(!e.is_gone("Node a"));
    }

    #[test]
    fn only_a_409_is_a_conflict() {
        let conflict = kube::Error::Api(kube::core::Status::failure("stale", "Conflict").with_code(409).boxed());
        assert!(Error::kube("patch", "MachineSet ns/a", conflict).is_conflict());
        assert!(!Error::kube("patch", "MachineSet ns/a", not_found()).is_conflict());
    }
}
