//! The in-memory cloud: simulated VMs behind the [`Driver`](crate::providers::Driver) contract, and a kubelet
//! simulator that turns booted VMs into Nodes of a target cluster. Used by `mcm dev`, integration tests and
//! benchmarks; always built (no cargo feature).
//!
//! - [`InMemoryCloud`]: a cloneable handle to the VMs and call counters; it outlives controllers and kubelets, so a
//!   test can restart either while VMs keep existing. Time is `tokio::time`, so `tokio::time::pause()` works.
//! - [`InMemoryDriver`]: provider `InMemory`; its providerSpec ([`ProviderSpec`]) sets machine type, capacity,
//!   boot time and jitter, injected failures, quota, death after boot and tags.
//! - [`Kubelet`]: registers a Ready Node per booted VM, keeps its heartbeat, sets it Unknown when the VM dies and
//!   re-posts it when the VM was updated in place.
//! - [`NodeAgent`]: plays Gardener's node agent for in-place updates (and the resource manager's removal of the
//!   critical-components taint).
//!
//! Nothing here imports controllers; the kubelet and the node agent only need a `kube::Client`.

mod cloud;
mod driver;
mod kubelet;
pub mod node;
pub mod node_agent;
pub mod plan;
pub mod remote;
pub(crate) mod spec;

use serde_json::json;

pub use cloud::{CloudStats, InMemoryCloud, Vm, VmState, VmUpdate, internal_ip};
pub use driver::{CSI_DRIVER, InMemoryDriver, PROVIDER};
pub use kubelet::{Kubelet, KubeletConfig, KubeletError, KubeletStats};
pub use node_agent::{NodeAgent, NodeAgentConfig, NodeAgentError, NodeAgentStats};
pub use spec::{FIELDS, ProviderSpec, boot_delay, create_verdict};

use crate::providers::conformance::Fixture;
use crate::providers::{ClassInfo, SecretData};

/// A class of the in-memory provider for `cluster` with role `node` and the given providerSpec fields on top of
/// the required tags.
pub fn class(name: &str, cluster: &str, extra: serde_json::Value) -> ClassInfo {
    let mut spec = json!({
        "tags": {
            format!("kubernetes.io/cluster/{cluster}"): "1",
            "kubernetes.io/role/node": "1",
        }
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    ClassInfo { name: name.to_string(), provider: PROVIDER.to_string(), provider_spec: spec, node_template: None }
}

/// The conformance fixture for the in-memory driver: cluster `conformance`, another cluster `elsewhere`, an
/// invalid class naming `bootJitter`, and an `AWS` class.
pub fn conformance_fixture() -> Fixture {
    let invalid = class("invalid", "conformance", json!({"bootJitter": 7}));
    let mut wrong_provider = class("wrong-provider", "conformance", json!({}));
    wrong_provider.provider = "AWS".to_string();
    Fixture {
        class: class("conformance", "conformance", json!({"bootSeconds": 0.01})),
        other_cluster_class: class("elsewhere", "elsewhere", json!({"bootSeconds": 0.01})),
        invalid_class: invalid,
        invalid_field: "bootJitter".to_string(),
        wrong_provider_class: wrong_provider,
        secret: SecretData(
            [
                ("userData".to_string(), b"#!/bin/sh\necho conformance-user-data".to_vec()),
                ("token".to_string(), b"conformance-secret-token".to_vec()),
            ]
            .into(),
        ),
        namespace: "default".to_string(),
        machine_prefix: "conformance".to_string(),
        absent_provider_id: Some("inmemory:///local-a/i-ffffffffffffffff".to_string()),
    }
}
