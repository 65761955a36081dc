//! The requeue policy of the machine flows: a pass's [`Next`] (from `lifecycle::create::next` or
//! `lifecycle::delete::next`) becomes a kube-runtime [`Action`], counting failures per flow in the [`RetryBook`] so
//! retries back off and a reconcile woken early (often by our own write) does not retry before its time.

use jiff::Timestamp;
use kube::runtime::controller::Action;

use super::context::RetryBook;
use crate::lifecycle::MachineConfig;
use crate::lifecycle::requeue::{Next, until_past};

/// The requeue for `next` at `now`; `gate` is the key whose failures are counted (`create:ns/name`, ...).
pub(crate) fn action(retries: &RetryBook, config: &MachineConfig, gate: &str, next: Next, now: Timestamp) -> Action {
    match next {
        Next::Done => Action::await_change(),
        Next::Sleep(d) => Action::requeue(d.min(config.resync)),
        Next::Poll(class) => Action::requeue(retries.fail(&format!("poll-{gate}"), class, config, None)),
        Next::Wake(at) => {
            retries.reset(gate);
            let delay = at.map_or(config.resync, |at| until_past(now, at));
            Action::requeue(delay.min(config.resync))
        }
        Next::Retry { class, deadline } => {
            let cap = deadline.map(|d| until_past(now, d));
            Action::requeue(retries.fail(gate, class, config, cap))
        }
    }
}

/// Forgets the polls of `gate` (the wait they counted is over).
pub(crate) fn poll_over(retries: &RetryBook, gate: &str) {
    retries.reset(&format!("poll-{gate}"));
}
