//! Fuzz target bodies: one function per `cargo fuzz` target in `fuzz/fuzz_targets/`, each taking the fuzzer's raw
//! bytes (`docs/reliability.md#fuzzing`).
//!
//! They live in the library, not in the fuzz crate, so that stable `cargo test` replays the committed corpora
//! (`tests/integration/fuzz_corpora.rs`) and so that they reach crate-private modules. Each function must return
//! normally on any input. The only panics are the checked invariants (a round trip that does not round-trip, a
//! result that contradicts the function that made it): each one is an `assert!` whose message names the
//! invariant, so that libFuzzer reports it as a crash.
//!
//! Inputs that carry a choice (which resource, patch type, driver or kind) start with one header line naming it in
//! words, so that the corpora stay readable; the rest of the input is the document.

mod apiserver;
mod convert;
mod migrate;
mod providers;

pub use apiserver::{apiserver_patch, apiserver_request, field_validation};
pub use convert::convert_roundtrip;
pub use migrate::migrate_plan;
pub use providers::provider_spec;

/// A fuzz target: its name (the directory of its corpus under `fuzz/corpus/`) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, for the corpus replay test and the fuzz crate.
pub const TARGETS: [Target; 6] = [
    ("apiserver_request", apiserver_request),
    ("apiserver_patch", apiserver_patch),
    ("field_validation", field_validation),
    ("provider_spec", provider_spec),
    ("migrate_plan", migrate_plan),
    ("convert_roundtrip", convert_roundtrip),
];

/// Splits off the header line: `(header, rest)`; `None` when the input is not UTF-8 or has no newline.
fn header(data: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(data).ok()?;
    text.split_once('\n')
}
