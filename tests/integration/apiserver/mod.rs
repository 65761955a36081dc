//! The embedded API server driven through kube-rs, as controllers use it.

mod crud;
mod custom;
mod input;
mod kubectl_openapi;
mod lease;
mod lifecycle;
mod watch;
