//! Pure decisions: observed state in, actions out. No client, no clock, no randomness.

pub mod deletion_order;
pub mod freeze;
pub mod machine_deployment;
pub mod machine_set;
mod object_meta;
