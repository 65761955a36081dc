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
}
