//! The machine controllers end to end: `mcm dev`'s building blocks (embedded API server, in-memory cloud and its
//! kubelet, the controllers) driven through kube-rs and the real kubectl, with short timeouts so tests are fast.

mod classes;
mod deletion;
mod drain;
mod failures;
mod lifecycle;
mod preservation;
mod resilience;
mod safety;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use mcm::api::mcm::{Machine, MachineClass, MachinePhase};
use mcm::controllers::ControllerOptions;
use mcm::dev::{DevEnvironment, DevOptions};
use mcm::lifecycle::{MachineConfig, RetryPolicy};
use mcm::providers::inmemory::Vm;
use serde_json::{Value, json};

use crate::support::{Kubectl, TempDir, wait_until};

/// The namespace every test's objects live in.
pub const NS: &str = "machines";

/// Controller options for tests: millisecond back-offs, timeouts long enough not to fire unless a test shortens
/// them.
pub fn fast_options() -> ControllerOptions {
    ControllerOptions {
        machine: MachineConfig {
            creation_timeout: Duration::from_secs(120),
            health_timeout: Duration::from_secs(120),
            retry: RetryPolicy::uniform(Duration::from_millis(50), Duration::from_millis(500)),
            resync: Duration::from_secs(5),
            ..MachineConfig::default()
        },
        concurrent_syncs: 8,
        shutdown_grace: Duration::from_secs(2),
        ..ControllerOptions::default()
    }
}

/// A running dev environment with the test namespace, and kubectl for it.
pub struct Env {
    /// The environment (its controllers may be stopped and started).
    pub dev: DevEnvironment,
    /// kubectl against it.
    pub kubectl: Kubectl,
    /// The real cluster under `MCM_TEST_APISERVER=kube` (its processes stop when this goes).
    _kube: Option<crate::kube::KubeCluster>,
    _dir: TempDir,
}

impl Env {
    /// Starts an environment whose controllers run with `options`. `RUST_LOG` turns on the controllers' logs
    /// (shown for failing tests).
    pub async fn start(options: ControllerOptions) -> Env {
        if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
            let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
        }
        let dir = TempDir::new("mcm-machines");
        let dev_options = DevOptions {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            kubeconfig_out: dir.0.join("kubeconfig"),
            sample: false,
            controllers: options,
            ..Default::default()
        };
        let (dev, kube) = crate::support::start_dev(dev_options).await;
        let namespaces: Api<Namespace> = Api::all(dev.client.clone());
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
        namespaces.create(&PostParams::default(), &ns).await.unwrap();
        let kubectl = Kubectl::new(&dev.server);
        Env { dev, kubectl, _kube: kube, _dir: dir }
    }

    /// The client.
    pub fn client(&self) -> kube::Client {
        self.dev.client.clone()
    }

    /// The embedded API server, for tests that start with `needs_embedded_server!`.
    pub fn embedded(&self) -> &mcm::apiserver::ApiServer {
        self.dev.server.embedded().expect("the test says needs_embedded_server! first")
    }

    /// Machines of the test namespace.
    pub fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.client(), NS)
    }

    /// Nodes.
    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client())
    }

    /// Applies YAML with kubectl (`create -f`).
    pub async fn create(&self, file: &str, yaml: &str) {
        let path = self.kubectl.file(file, yaml);
        self.kubectl.run(&["-n", NS, "create", "-f", path.to_str().unwrap()]).await;
    }

    /// Creates a class `name` (InMemory, fast boot, `extra` fields on its providerSpec) and its Secret.
    pub async fn class(&self, name: &str, extra: Value) {
        self.create(&format!("class-{name}.yaml"), &class_yaml(name, extra)).await;
    }

    /// Creates a bare machine of class `class` with kubectl.
    pub async fn machine(&self, name: &str, class: &str) {
        self.create(&format!("machine-{name}.yaml"), &machine_yaml(name, class, "")).await;
    }

    /// Waits until machine `name` is in `phase`; returns it.
    pub async fn wait_phase(&self, name: &str, phase: MachinePhase, timeout: Duration) -> Machine {
        let api = self.machines();
        let what = format!("machine {name} to be {phase}");
        wait_until(&what, timeout, || async {
            let m = api.get_opt(name).await.ok().flatten()?;
            (phase_of(&m) == Some(phase.clone())).then_some(m)
        })
        .await
    }

    /// Waits until machine `name` is gone.
    pub async fn wait_gone(&self, name: &str, timeout: Duration) {
        let api = self.machines();
        wait_until(&format!("machine {name} to be gone"), timeout, || async {
            matches!(api.get_opt(name).await, Ok(None)).then_some(())
        })
        .await;
    }

    /// The live VMs of machine `name`.
    pub fn vms_of(&self, name: &str) -> Vec<Vm> {
        self.dev.cloud.live_vms().into_iter().filter(|vm| vm.machine_name == name).collect()
    }

    /// The events recorded on machine `name`: (type, reason, note).
    pub async fn events_of(&self, name: &str) -> Vec<(String, String, String)> {
        let api: Api<Event> = Api::namespaced(self.client(), NS);
        let list = api.list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }

    /// The class `name`.
    pub async fn get_class(&self, name: &str) -> MachineClass {
        Api::<MachineClass>::namespaced(self.client(), NS).get(name).await.unwrap()
    }

    /// Stops the environment.
    pub async fn shutdown(self) {
        self.dev.shutdown().await;
    }
}

/// The phase of a machine.
pub fn phase_of(m: &Machine) -> Option<MachinePhase> {
    m.status.as_ref()?.current_status.as_ref()?.phase.clone()
}

/// A class of the in-memory provider and its Secret, as YAML.
pub fn class_yaml(name: &str, extra: Value) -> String {
    let mut spec = json!({
        "bootSeconds": 0.2,
        "tags": {"kubernetes.io/cluster/test": "1", "kubernetes.io/role/node": "1"},
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        spec[k] = v;
    }
    let class = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": name},
        "provider": "InMemory",
        "providerSpec": spec,
        "secretRef": {"name": name, "namespace": NS},
        "nodeTemplate": {
            "capacity": {"cpu": "2", "gpu": "0", "memory": "4Gi"},
            "instanceType": "m.medium", "region": "local", "zone": "local-a",
        },
    });
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\ntype: Opaque\nstringData:\n  userData: |\n    #!/bin/sh\n    echo <<MACHINE_NAME>> <<BOOTSTRAP_TOKEN>>\n---\n{}",
        serde_json::to_string(&class).unwrap()
    )
}

/// A bare Machine as YAML; `extra` is appended to its spec (indented YAML lines).
pub fn machine_yaml(name: &str, class: &str, extra: &str) -> String {
    format!(
        "apiVersion: machine.sapcloud.io/v1alpha1\nkind: Machine\nmetadata:\n  name: {name}\nspec:\n  class:\n    kind: MachineClass\n    name: {class}\n{extra}"
    )
}

/// Long enough for anything the tests wait for.
pub const WAIT: Duration = Duration::from_secs(60);
