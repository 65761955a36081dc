//! Driver errors with MCM's codes (gRPC's 0–16 plus `Uninitialized` = 17).

use std::fmt;

/// MCM's driver error codes (`pkg/util/provider/machinecodes/codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// Not an error.
    Ok,
    /// The operation was cancelled.
    Canceled,
    /// Unknown error.
    Unknown,
    /// The request is invalid (bad providerSpec, provider mismatch ...).
    InvalidArgument,
    /// The deadline expired.
    DeadlineExceeded,
    /// The VM does not exist.
    NotFound,
    /// It exists already.
    AlreadyExists,
    /// Permission denied.
    PermissionDenied,
    /// Quota or capacity exhausted (cluster-autoscaler backs off on this).
    ResourceExhausted,
    /// The system is not in a state for the operation.
    FailedPrecondition,
    /// Aborted, usually by a concurrency conflict.
    Aborted,
    /// Out of range; MCM uses it for "several VMs claim one machine".
    OutOfRange,
    /// Not implemented by this driver.
    Unimplemented,
    /// Internal error.
    Internal,
    /// Temporarily unavailable; retry.
    Unavailable,
    /// Data loss.
    DataLoss,
    /// No valid credentials.
    Unauthenticated,
    /// The VM exists but is not initialized yet.
    Uninitialized,
}

impl Code {
    /// Every code, in numeric order.
    pub const ALL: [Code; 18] = [
        Code::Ok,
        Code::Canceled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
        Code::Uninitialized,
    ];

    /// The name MCM writes into `lastOperation.errorCode` (e.g. `ResourceExhausted`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Canceled => "Canceled",
            Code::Unknown => "Unknown",
            Code::InvalidArgument => "InvalidArgument",
            Code::DeadlineExceeded => "DeadlineExceeded",
            Code::NotFound => "NotFound",
            Code::AlreadyExists => "AlreadyExists",
            Code::PermissionDenied => "PermissionDenied",
            Code::ResourceExhausted => "ResourceExhausted",
            Code::FailedPrecondition => "FailedPrecondition",
            Code::Aborted => "Aborted",
            Code::OutOfRange => "OutOfRange",
            Code::Unimplemented => "Unimplemented",
            Code::Internal => "Internal",
            Code::Unavailable => "Unavailable",
            Code::DataLoss => "DataLoss",
            Code::Unauthenticated => "Unauthenticated",
            Code::Uninitialized => "Uninitialized",
        }
    }

    /// The numeric value (gRPC's, and 17 for `Uninitialized`).
    pub fn number(self) -> u32 {
        Code::ALL.iter().position(|c| *c == self).map_or(2, |i| i as u32)
    }

    /// The code named `name` (as `as_str` writes it).
    pub fn from_name(name: &str) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| c.as_str() == name)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A driver error: a code and a message safe to show users (never a credential).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct DriverError {
    /// The code the controllers react to.
    pub code: Code,
    /// What went wrong, for status descriptions and events.
    pub message: String,
}

impl DriverError {
    /// An error with a code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        DriverError { code, message: message.into() }
    }

    /// The error as MCM's machine-codes status prints it (`machine codes error: code = [NotFound] message = [...]`),
    /// for the status descriptions MCM builds from `err.Error()`: tools that parse them read the same text.
    pub fn machine_codes(&self) -> String {
        format!("machine codes error: code = [{}] message = [{}]", self.code, self.message)
    }

    /// `InvalidArgument` for a field of the providerSpec.
    pub fn invalid_field(field: &str, why: impl fmt::Display) -> Self {
        DriverError::new(Code::InvalidArgument, format!("providerSpec.{field}: {why}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_mcm_numbers_and_names() {
        assert_eq!(Code::ResourceExhausted.number(), 8);
        assert_eq!(Code::Uninitialized.number(), 17);
        assert_eq!(Code::OutOfRange.number(), 11);
        for code in Code::ALL {
            assert_eq!(Code::from_name(code.as_str()), Some(code));
        }
        assert_eq!(DriverError::new(Code::NotFound, "no VM").to_string(), "NotFound: no VM");
    }
}
