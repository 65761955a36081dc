//! The embedded API server driven through kube-rs, as controllers use it.

mod backends;
mod builtins;
mod crud;
mod custom;
mod faults;
mod input;
mod kubectl_create;
mod kubectl_get;
mod kubectl_openapi;
mod kubectl_workflow;
mod lease;
mod lifecycle;
mod watch;
mod webhook_server;
mod webhooks;
