//! The reusable driver conformance suite (filled in with the in-memory driver).
