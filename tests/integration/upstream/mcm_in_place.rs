//! Upstream MCM (v0.62.1, the `mcm-peer` program of `hack/mcm-peer`: its controller manager and machine controller)
//! runs an InPlaceUpdate rollout against `mcm dev`'s building blocks, with our in-memory cloud and its node agent:
//! the agent answers upstream's `ReadyForUpdate` as gardener-node-agent does, and upstream moves the same VMs to
//! the new set. The same scenario then runs under our controllers, and both end in the same state: the contract
//! (labels, condition reasons, phases, the moved machines' labels) is upstream's, not our imitation of it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use mcm::api::mcm::names::{
    CANDIDATE_FOR_UPDATE, IN_PLACE_CONDITION, SELECTED_FOR_UPDATE, UPDATE_RESULT, in_place_reason,
};
use mcm::api::mcm::{Machine, MachineDeployment, MachinePhase};
use mcm::dev::{DevEnvironment, DevOptions};
use mcm::providers::grpc::{DriverEndpoint, DriverServe};
use mcm::providers::inmemory::{InMemoryDriver, NodeAgentConfig};
use serde_json::json;

use crate::support::{TempDir, wait_until};

const NS: &str = "upstream-in-place";
const WAIT: Duration = Duration::from_secs(120);

/// The mcm-peer program, or `None` (saying so loudly) when `make mcm-peer` has not built it.
fn peer_binary(test: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/adapters/bin/mcm-peer");
    if path.is_file() {
        return Some(path);
    }
    let message = format!("{} missing: run `make mcm-peer` (needs go; docs/testing.md)", path.display());
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{test}: {message}");
    eprintln!("\n*** SKIPPED {test}: {message} ***\n");
    None
}

/// Upstream MCM's two processes against `kubeconfig`, the machine controller calling the cloud at `driver`.
async fn start_upstream(
    peer: &Path,
    kubeconfig: &Path,
    driver: &DriverEndpoint,
    dir: &Path,
) -> Vec<tokio::process::Child> {
    let common = |port: u16| {
        vec![
            format!("--control-kubeconfig={}", kubeconfig.display()),
            format!("--target-kubeconfig={}", kubeconfig.display()),
            format!("--namespace={NS}"),
            "--leader-elect=false".to_string(),
            "--address=127.0.0.1".to_string(),
            format!("--port={port}"),
        ]
    };
    let port = crate::support::free_port;
    let mut manager = vec!["controller-manager".to_string()];
    manager.extend(common(port()));
    let mut machine = vec!["machine-controller".to_string(), format!("--driver-endpoint={driver}")];
    machine.extend(common(port()));
    machine.extend(
        [
            "--machine-creation-timeout=5m",
            "--machine-health-timeout=5m",
            "--machine-inplace-update-timeout=5m",
            "--machine-safety-apiserver-statuscheck-timeout=30s",
            "--machine-safety-apiserver-statuscheck-period=1m",
        ]
        .map(String::from),
    );
    let mut children = Vec::new();
    for (name, args) in [("controller-manager", manager), ("machine-controller", machine)] {
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = tokio::process::Command::new(peer)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        children.push(child);
    }
    children
}

/// The class, its secret and an InPlaceUpdate deployment of 3 (Auto, one at a time) in [`NS`].
async fn apply_scenario(env: &DevEnvironment) {
    let client = env.client.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap())
        .await
        .unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), NS);
    let secret = json!({"metadata": {"name": "small"}, "stringData": {"userData": "#!/bin/sh\n"}});
    secrets.create(&PostParams::default(), &serde_json::from_value(secret).unwrap()).await.unwrap();
    let classes: Api<mcm::api::mcm::MachineClass> = Api::namespaced(client.clone(), NS);
    for (name, kubelet) in [("small", "v1.37.0"), ("small-v2", "v1.38.0")] {
        let class = json!({
            "metadata": {"name": name},
            "provider": "InMemory",
            "providerSpec": {"machineType": "m.small", "bootSeconds": 0.2, "kubeletVersion": kubelet,
                "tags": {"kubernetes.io/cluster/dev": "1", "kubernetes.io/role/node": "1"}},
            "secretRef": {"name": "small", "namespace": NS},
        });
        classes.create(&PostParams::default(), &serde_json::from_value(class).unwrap()).await.unwrap();
    }
    let deployment = json!({
        "metadata": {"name": "ip"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"name": "ip"}},
            "strategy": {"type": "InPlaceUpdate", "inPlaceUpdate": {"maxSurge": 0, "maxUnavailable": 1, "orchestrationType": "Auto"}},
            "template": {"metadata": {"labels": {"name": "ip"}}, "spec": {"class": {"kind": "MachineClass", "name": "small"}}},
        },
    });
    let deployments: Api<MachineDeployment> = Api::namespaced(client, NS);
    deployments.create(&PostParams::default(), &serde_json::from_value(deployment).unwrap()).await.unwrap();
}

/// What both controllers must leave behind after the in-place rollout.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// The providerIDs before the update equal those after.
    same_vms: bool,
    /// Every machine Running in one set, the new one.
    running_in_new_set: bool,
    /// Kubelet versions of the Nodes.
    kubelets: BTreeSet<String>,
    /// Nodes still labelled candidate/selected/update-result.
    labelled_nodes: usize,
    /// Machines still labelled update-result.
    labelled_machines: usize,
    /// Reasons of the Nodes' `InPlaceUpdate` conditions.
    reasons: BTreeSet<String>,
}

async fn running_ids(
    machines: &Api<Machine>,
    deployment: &MachineDeployment,
) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    let list = machines.list(&ListParams::default().labels("name=ip")).await.ok()?.items;
    let running = list.iter().all(|m| {
        m.status.as_ref().and_then(|s| s.current_status.as_ref()).and_then(|c| c.phase.clone())
            == Some(MachinePhase::Running)
    });
    (list.len() == 3 && running && deployment.status.as_ref()?.updated_replicas == 3).then(|| {
        let ids = list.iter().filter_map(|m| m.spec.provider_id.clone()).collect();
        let sets = list.iter().filter_map(|m| m.owner_references().first().map(|o| o.name.clone())).collect();
        (ids, sets)
    })
}

/// Whose controllers run the scenario.
enum Side {
    /// Upstream MCM: the mcm-peer program.
    Upstream(PathBuf),
    /// Ours, in process.
    Ours,
}

/// Runs the scenario under `side`'s controllers; returns the outcome.
async fn scenario(side: Side) -> Outcome {
    let label = match side {
        Side::Upstream(_) => "upstream MCM",
        Side::Ours => "ours",
    };
    let dir = TempDir::new("mcm-upstream-in-place");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        run_controllers: false,
        sample: false,
        node_agent: Some(NodeAgentConfig { update_duration: Duration::from_millis(500), ..Default::default() }),
        ..Default::default()
    };
    let (mut env, _cluster) = crate::support::start_dev(options).await;
    apply_scenario(&env).await;
    let mut held = None;
    match side {
        Side::Upstream(peer) => {
            let socket = dir.0.join("driver.sock");
            let driver = Arc::new(InMemoryDriver::new(env.cloud.clone()));
            let serve = DriverServe::start(driver, &DriverEndpoint::Unix(socket)).await.unwrap();
            let children = start_upstream(&peer, &dir.0.join("kubeconfig"), &serve.endpoint, &dir.0).await;
            held = Some((serve, children));
        }
        Side::Ours => env.start_controllers(),
    }
    let client = env.client.clone();
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    let deployments: Api<MachineDeployment> = Api::namespaced(client.clone(), NS);
    let (before, old_sets) = wait_until(&format!("{label}: 3 Running machines"), WAIT, || async {
        running_ids(&machines, &deployments.get("ip").await.ok()?).await
    })
    .await;
    let patch = json!({"spec": {"template": {"spec": {"class": {"name": "small-v2"}}}}});
    deployments.patch("ip", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let nodes: Api<Node> = Api::all(client);
    let outcome = wait_until(&format!("{label}: the in-place rollout to end"), WAIT, || async {
        let d = deployments.get("ip").await.ok()?;
        let (after, sets) = running_ids(&machines, &d).await?;
        if sets == old_sets || sets.len() != 1 {
            return None;
        }
        let list = machines.list(&ListParams::default().labels("name=ip")).await.ok()?.items;
        let mut kubelets = BTreeSet::new();
        let mut reasons = BTreeSet::new();
        let mut labelled_nodes = 0;
        for m in &list {
            let node = nodes.get(&m.name_any()).await.ok()?;
            let labels = node.labels();
            if [CANDIDATE_FOR_UPDATE, SELECTED_FOR_UPDATE, UPDATE_RESULT].iter().any(|k| labels.contains_key(*k)) {
                labelled_nodes += 1;
            }
            kubelets.insert(node.status.as_ref()?.node_info.as_ref()?.kubelet_version.clone());
            let conditions = node.status.as_ref()?.conditions.clone().unwrap_or_default();
            if let Some(c) = conditions.iter().find(|c| c.type_ == IN_PLACE_CONDITION) {
                reasons.insert(c.reason.clone().unwrap_or_default());
            }
        }
        let labelled_machines = list.iter().filter(|m| m.labels().contains_key(UPDATE_RESULT)).count();
        // Upstream removes the machines' label one pass after the move: wait for the settled state.
        (labelled_machines == 0 && labelled_nodes == 0).then_some(Outcome {
            same_vms: after == before,
            running_in_new_set: true,
            kubelets,
            labelled_nodes,
            labelled_machines,
            reasons,
        })
    })
    .await;
    if let Some((serve, children)) = held {
        for mut child in children {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        drop(serve);
    }
    env.shutdown().await;
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_mcm_and_ours_update_in_place_alike_with_our_node_agent() {
    let Some(peer) = peer_binary("upstream_mcm_and_ours_update_in_place_alike_with_our_node_agent") else { return };
    let upstream = scenario(Side::Upstream(peer)).await;
    let ours = scenario(Side::Ours).await;
    let expected = Outcome {
        same_vms: true,
        running_in_new_set: true,
        kubelets: BTreeSet::from(["v1.38.0".to_string()]),
        labelled_nodes: 0,
        labelled_machines: 0,
        reasons: BTreeSet::from([in_place_reason::SUCCESSFUL.to_string()]),
    };
    assert_eq!(upstream, expected, "upstream MCM with our node agent");
    assert_eq!(ours, expected, "ours, the same");
}
