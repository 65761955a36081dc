//! Mode "CAPI with MCM core" end to end: our MachineDeployment, MachineSet and Machine controllers on
//! `cluster.x-k8s.io/v1beta2` objects (embedded API server, real kube-rs client, real kubectl). The infrastructure
//! provider's part (the MCMMachine controller) is played by [`Provider`]: it answers each MCMMachine as the
//! contract says (`spec.providerID`, `status.initialization.provisioned`, a `Ready` condition) and registers a
//! Ready Node carrying the providerID, as a kubelet would.

mod autoscaler;
mod bootstrap;
mod cluster_deletion;
mod deletion;
mod health_check;
mod mcm_extras;
mod membership;
mod pause;
mod rollout;
mod sample;
mod shared;
mod template;
mod upstream;
mod workload_cluster;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use mcm::api::capi::{Machine, MachineDeployment, MachineSet};
use mcm::api::infra::{MCMMachine, MCMMachineTemplate};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

pub use crate::machines::NS;
use crate::machines::{Env, fast_options};
use crate::support::wait_until;

/// Long enough for anything these tests wait for.
pub const WAIT: Duration = Duration::from_secs(60);

/// The CAPI objects of the test namespace.
pub struct Capi {
    pub deployments: Api<MachineDeployment>,
    pub sets: Api<MachineSet>,
    pub machines: Api<Machine>,
    pub infra: Api<MCMMachine>,
    pub templates: Api<MCMMachineTemplate>,
    pub nodes: Api<Node>,
}

impl Capi {
    pub fn of(env: &Env) -> Capi {
        let c = env.client();
        Capi {
            deployments: Api::namespaced(c.clone(), NS),
            sets: Api::namespaced(c.clone(), NS),
            machines: Api::namespaced(c.clone(), NS),
            infra: Api::namespaced(c.clone(), NS),
            templates: Api::namespaced(c.clone(), NS),
            nodes: Api::all(c),
        }
    }

    /// The machines of deployment `name` (label `cluster.x-k8s.io/deployment-name` on their sets; selected by
    /// `pool=<name>`).
    pub async fn machines_of(&self, name: &str) -> Vec<Machine> {
        self.machines.list(&ListParams::default().labels(&format!("pool={name}"))).await.unwrap().items
    }
}

/// How long after its VM is provisioned a stand-in Node registers (a boot, shortened).
const NODE_JOIN_DELAY: Duration = Duration::from_millis(500);

/// Plays the infrastructure provider and the kubelet.
pub struct Provider(JoinHandle<()>);

impl Provider {
    pub fn start(env: &Env) -> Provider {
        let client = env.client();
        let infra: Api<MCMMachine> = Api::namespaced(client.clone(), NS);
        let nodes: Api<Node> = Api::all(client);
        Provider(tokio::spawn(async move {
            let mut events = watcher(infra.clone(), watcher::Config::default()).applied_objects().boxed();
            while let Some(Ok(m)) = events.next().await {
                if m.metadata.deletion_timestamp.is_some() || m.spec.provider_id.is_some() {
                    continue;
                }
                let name = m.name_any();
                let provider_id = format!("inmemory:///{name}");
                let pp = PatchParams::default();
                let _ = infra.patch(&name, &pp, &Patch::Merge(json!({"spec": {"providerID": provider_id}}))).await;
                let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
                let status = json!({"status": {
                    "initialization": {"provisioned": true},
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned", "message": "", "lastTransitionTime": now}],
                }});
                let _ = infra.patch_status(&name, &pp, &Patch::Merge(status)).await;
                // The VM boots before its Node registers: meanwhile the Machine is `Provisioned`, which must not
                // count as available (a rolling update would take an old machine away for it).
                let nodes = nodes.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(NODE_JOIN_DELAY).await;
                    let node: Node = serde_json::from_value(json!({
                        "metadata": {"name": format!("node-{name}")},
                        "spec": {"providerID": provider_id},
                    }))
                    .unwrap();
                    let _ = nodes.create(&PostParams::default(), &node).await;
                    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": now, "lastHeartbeatTime": now}]}});
                    let _ = nodes.patch_status(&format!("node-{name}"), &pp, &Patch::Merge(ready)).await;
                });
            }
        }))
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts an environment with the CAPI core controllers, the bootstrap Secret, templates `small` and `large`,
/// and the provider stand-in.
pub async fn env() -> (Env, Capi, Provider) {
    let mut options = fast_options();
    options.capi_core = true;
    // The overshoot sweep also runs on Machine additions; a short period lets it see deletions soon.
    options.sets.overshooting_period = Duration::from_secs(1);
    let env = Env::start(options).await;
    let capi = Capi::of(&env);
    let secrets: Api<Secret> = Api::namespaced(env.client(), NS);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "bootstrap"},
        "stringData": {"value": "#!/bin/sh\necho hello\n"},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    for name in ["small", "large"] {
        let template: MCMMachineTemplate = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "inlineClass": {"provider": "InMemory", "providerSpec": {"bootSeconds": 0.1}},
            }}},
        }))
        .unwrap();
        capi.templates.create(&PostParams::default(), &template).await.unwrap();
    }
    let provider = Provider::start(&env);
    (env, capi, provider)
}

/// A CAPI MachineDeployment `name` of template `template`, selecting `pool=<name>`.
pub fn deployment(name: &str, replicas: i32, template: &str, rollout: Value) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "clusterName": "dev",
            "replicas": replicas,
            "selector": {"matchLabels": {"pool": name}},
            "rollout": rollout,
            "template": {
                "metadata": {"labels": {"pool": name}},
                "spec": {
                    "clusterName": "dev",
                    "bootstrap": {"dataSecretName": "bootstrap"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachineTemplate", "name": template},
                    "deletion": {"nodeDrainTimeoutSeconds": 30},
                },
            },
        },
    })
}

/// Creates a deployment.
pub async fn create_deployment(capi: &Capi, object: Value) -> MachineDeployment {
    let d: MachineDeployment = serde_json::from_value(object).unwrap();
    capi.deployments.create(&PostParams::default(), &d).await.unwrap()
}

/// A merge patch of a deployment.
pub async fn patch_deployment(capi: &Capi, name: &str, patch: Value) {
    capi.deployments.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

/// Status and reason of a Machine's condition `kind`.
pub fn condition(m: &Machine, kind: &str) -> Option<(String, String)> {
    let c = m.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == kind)?;
    Some((c.status.clone(), c.reason.clone()))
}

fn running(m: &Machine) -> bool {
    m.metadata.deletion_timestamp.is_none() && m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Waits until deployment `name` has exactly `n` machines, all Running with a providerID and a nodeRef, and
/// reports `n` ready replicas; returns the machines.
pub async fn wait_running(capi: &Capi, name: &str, n: usize) -> Vec<Machine> {
    wait_until(&format!("{n} Running machines of {name}"), WAIT, || async {
        let machines = capi.machines_of(name).await;
        let d = capi.deployments.get(name).await.ok()?;
        let ready = d.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(-1);
        let all = machines.len() == n
            && machines.iter().all(|m| {
                running(m)
                    && m.spec.provider_id.is_some()
                    && m.status.as_ref().and_then(|s| s.node_ref.as_ref()).is_some()
                    // Phase, provisioned and Ready can land in different writes: wait for all of them.
                    && m.status.as_ref().and_then(|s| s.initialization.as_ref()?.infrastructure_provisioned)
                        == Some(true)
                    && m.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
                        c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                    })
            });
        (all && ready == i32::try_from(n).ok()?).then_some(machines)
    })
    .await
}

/// `RollingUpdate` with the given fenceposts, as a CAPI `rollout`.
pub fn rolling(max_surge: i32, max_unavailable: i32) -> Value {
    json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable}}})
}
