//! The embedded API server driven through kube-rs, as controllers use it.

mod crud;
mod custom;
mod input;
mod kubectl_get;
mod lease;
mod lifecycle;
mod watch;
