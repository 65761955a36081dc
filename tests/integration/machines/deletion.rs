//! Deletion resumes at the step MCM's `lastOperation.description` names: machines an MCM (or we) left half-deleted
//! continue from there, skipping what was done.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use mcm::api::mcm::MachinePhase;
use mcm::api::mcm::names::NODE_FINALIZER;
use serde_json::json;

use super::{Env, WAIT, fast_options};
use crate::support::wait_until;

/// A machine seeded at a step, and what must be left once it is gone.
struct Case {
    name: &'static str,
    phase: &'static str,
    description: &'static str,
    vm_left: bool,
    node_left: bool,
}

const CASES: [Case; 8] = [
    Case {
        name: "at-start",
        phase: "Running",
        description: "Machine x successfully joined the cluster in 1s",
        vm_left: false,
        node_left: false,
    },
    Case {
        name: "at-get-vm-status",
        phase: "Terminating",
        description: "Set machine status to termination. Now, getting VM Status",
        vm_left: false,
        node_left: false,
    },
    Case {
        name: "at-drain",
        phase: "Terminating",
        description: "Drain failed due to - x. Will retry in next sync. Initiate node drain",
        vm_left: false,
        node_left: false,
    },
    Case {
        name: "at-volumes",
        phase: "Terminating",
        description: "Force Drain successful. Delete Volume Attachments",
        vm_left: false,
        node_left: false,
    },
    Case {
        name: "at-vm",
        phase: "Terminating",
        description: "Drain successful. Initiate VM deletion",
        vm_left: false,
        node_left: false,
    },
    Case {
        name: "at-node-finalizers",
        phase: "Terminating",
        description: "VM deletion was successful. Remove node finalizers",
        vm_left: true,
        node_left: false,
    },
    Case {
        name: "at-node",
        phase: "Terminating",
        description: "VM deletion was successful. Initiate node object deletion",
        vm_left: true,
        node_left: false,
    },
    Case {
        name: "at-finalizer",
        phase: "Terminating",
        description: "Deletion of Node Object \"x\" is successful. Initiate machine object finalizer removal",
        vm_left: true,
        node_left: true,
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_resumes_from_each_mcm_step() {
    let mut options = fast_options();
    // Three cases leave their VM behind on purpose; an orphan collection triggered by the deletions must not
    // take them before they are counted.
    options.safety.orphan_trigger_cooldown = std::time::Duration::from_secs(3600);
    let mut env = Env::start(options).await;
    env.class("small", json!({})).await;
    for case in &CASES {
        env.machine(case.name, "small").await;
    }
    for case in &CASES {
        env.wait_phase(case.name, MachinePhase::Running, WAIT).await;
    }
    // Node template sync must have happened before the controllers go (so nothing else is pending).
    env.dev.kill_controllers().await;

    let nodes: Api<Node> = env.nodes();
    let attachments: Api<VolumeAttachment> = Api::all(env.client());
    for case in &CASES {
        let status = json!({"status": {
            "currentStatus": {"phase": case.phase},
            "lastOperation": {"description": case.description, "state": "Processing", "type": "Delete"},
        }});
        env.machines().patch_status(case.name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
        env.machines().delete(case.name, &DeleteParams::default()).await.unwrap();
    }
    // MCM's node finalizer holds the Node of the node-deletion case; deletion removes it first.
    let finalizer = json!({"metadata": {"finalizers": [NODE_FINALIZER]}});
    nodes.patch("at-node", &PatchParams::default(), &Patch::Merge(&finalizer)).await.unwrap();
    // The forced-drain case has a volume attached: its VolumeAttachment is deleted before the VM.
    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": "va-at-volumes"},
        "spec": {"attacher": "inmemory.csi.mcm.dev", "nodeName": "at-volumes", "source": {"persistentVolumeName": "pv-1"}},
    }))
    .unwrap();
    attachments.create(&PostParams::default(), &va).await.unwrap();
    let attached =
        json!({"status": {"volumesAttached": [{"name": "kubernetes.io/csi/inmemory^vol-1", "devicePath": ""}]}});
    nodes.patch_status("at-volumes", &PatchParams::default(), &Patch::Merge(&attached)).await.unwrap();

    env.dev.start_controllers();
    for case in &CASES {
        env.wait_gone(case.name, WAIT).await;
    }
    for case in &CASES {
        assert_eq!(!env.vms_of(case.name).is_empty(), case.vm_left, "{}: VM left", case.name);
        let node = nodes.get_opt(case.name).await.unwrap();
        assert_eq!(node.is_some(), case.node_left, "{}: Node left", case.name);
    }
    wait_until("the VolumeAttachment to go", WAIT, || async {
        attachments.get_opt("va-at-volumes").await.unwrap().is_none().then_some(())
    })
    .await;
    env.shutdown().await;
}
