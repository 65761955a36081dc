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
