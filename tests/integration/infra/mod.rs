//! The CAPI infrastructure provider end to end: the tests play upstream CAPI core's part (a Cluster with its
//! MCMCluster, a Machine with its MCMMachine, ownerRefs and a bootstrap data Secret, as core's controllers make
//! them) against the embedded API server, with the in-memory cloud, and check every field core reads
//! (`docs/infrastructure-provider.md` at each step.

mod contract;
mod placement;
mod safety;
mod tenancy;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use mcm::api::capi;
use mcm::api::infra::{MCMCluster, MCMMachine};
use mcm::controllers::{ControllerOptions, InfraOptions};
use mcm::dev::{DevEnvironment, DevOptions};
use mcm::lifecycle::safety::SafetyConfig;
use serde_json::{Value, json};

use crate::support::{Kubectl, TempDir, wait_until};

/// The namespace every test's objects live in.
pub const NS: &str = "infra";
/// Long enough for anything the tests wait for.
pub const WAIT: Duration = Duration::from_secs(60);

/// A running dev environment (MCM controllers and infrastructure controllers) with the test namespace.
pub struct Env {
    /// The environment.
    pub dev: DevEnvironment,
    /// kubectl against it.
    pub kubectl: Kubectl,
    /// The real cluster under `MCM_TEST_APISERVER=kube` (its processes stop when this goes).
    _kube: Option<crate::kube::KubeCluster>,
    _dir: TempDir,
}

/// Fast settings: millisecond back-offs, orphan collection every 100 ms.
fn options() -> (ControllerOptions, InfraOptions) {
    let controllers = crate::machines::fast_options();
    let safety = SafetyConfig {
        orphan_vms_period: Duration::from_millis(100),
        orphan_trigger_cooldown: Duration::from_millis(20),
        ..SafetyConfig::default()
    };
    let infra = InfraOptions {
        machine: controllers.machine.clone(),
        safety: safety.clone(),
        shutdown_grace: Duration::from_secs(2),
        ..InfraOptions::default()
    };
    (ControllerOptions { safety, ..controllers }, infra)
}

impl Env {
    /// Starts an environment; `RUST_LOG` turns on the controllers' logs.
    pub async fn start() -> Env {
        if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
            let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
        }
        let dir = TempDir::new("mcm-infra");
        let (controllers, infra) = options();
        let dev_options = DevOptions {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            kubeconfig_out: dir.0.join("kubeconfig"),
            sample: false,
            controllers,
            infra,
            ..Default::default()
        };
        let (dev, kube) = crate::support::start_dev(dev_options).await;
        let namespaces: Api<Namespace> = Api::all(dev.client.clone());
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
        namespaces.create(&PostParams::default(), &ns).await.unwrap();
        let kubectl = Kubectl::new(&dev.server);
        Env { dev, kubectl, _kube: kube, _dir: dir }
    }

    pub fn client(&self) -> kube::Client {
        self.dev.client.clone()
    }

    pub fn mcm_machines(&self) -> Api<MCMMachine> {
        Api::namespaced(self.client(), NS)
    }

    pub fn mcm_clusters(&self) -> Api<MCMCluster> {
        Api::namespaced(self.client(), NS)
    }

    pub fn machines(&self) -> Api<capi::Machine> {
        Api::namespaced(self.client(), NS)
    }

    pub fn clusters(&self) -> Api<capi::Cluster> {
        Api::namespaced(self.client(), NS)
    }

    /// Creates any object from JSON through kubectl (so the real kubectl's create path is exercised too).
    pub async fn create(&self, file: &str, object: Value) {
        let path = self.kubectl.file(file, &serde_json::to_string(&object).unwrap());
        self.kubectl.run(&["-n", NS, "create", "-f", path.to_str().unwrap()]).await;
    }

    /// A Cluster `name` as CAPI core's user creates it, pointing at MCMCluster `name`; `provisioned` sets
    /// `status.initialization.infrastructureProvisioned` as core's Cluster controller would.
    pub async fn cluster(&self, name: &str, provisioned: bool) {
        self.create(
            &format!("cluster-{name}.json"),
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": name},
                "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMCluster", "name": name}},
            }),
        )
        .await;
        if provisioned {
            self.set_cluster_provisioned(name).await;
        }
    }

    /// What core's Cluster controller does once the MCMCluster is provisioned.
    pub async fn set_cluster_provisioned(&self, name: &str) {
        let patch = json!({"status": {"initialization": {"infrastructureProvisioned": true}}});
        self.clusters().patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }

    /// Sets `Cluster.spec.paused`.
    pub async fn pause_cluster(&self, name: &str, paused: bool) {
        let patch = json!({"spec": {"paused": paused}});
        self.clusters().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }

    /// A CAPI Machine `name` of cluster `cluster` whose infrastructure is MCMMachine `name`.
    pub async fn capi_machine(
        &self,
        name: &str,
        cluster: &str,
        data_secret: Option<&str>,
        failure_domain: Option<&str>,
    ) {
        let mut bootstrap = json!({});
        if let Some(secret) = data_secret {
            bootstrap["dataSecretName"] = json!(secret);
        }
        let mut spec = json!({
            "clusterName": cluster,
            "bootstrap": bootstrap,
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachine", "name": name},
        });
        if let Some(fd) = failure_domain {
            spec["failureDomain"] = json!(fd);
        }
        self.create(
            &format!("machine-{name}.json"),
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
                "spec": spec,
            }),
        )
        .await;
    }

    /// The bootstrap data Secret a bootstrap provider writes (key `value`).
    pub async fn bootstrap_secret(&self, name: &str) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": "#!/bin/sh\necho bootstrap", "format": "cloud-config"},
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.client(), NS).create(&PostParams::default(), &secret).await.unwrap();
    }

    /// An MCMMachine `name` of cluster `cluster` with `class` (an MCMMachine spec fragment: `class` or
    /// `inlineClass`), without owner (core's Machine controller adds it: [`Env::adopt`]).
    pub async fn mcm_machine(&self, name: &str, cluster: &str, class: Value) {
        self.create(
            &format!("mcmmachine-{name}.json"),
            json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachine",
                "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
                "spec": class,
            }),
        )
        .await;
    }

    /// What core's Machine controller does: the controller ownerReference from MCMMachine `name` to Machine
    /// `name`.
    pub async fn adopt(&self, name: &str) {
        let machine = self.machines().get(name).await.unwrap();
        let patch = json!({"metadata": {"ownerReferences": [{
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": name,
            "uid": machine.metadata.uid, "controller": true, "blockOwnerDeletion": true,
        }]}});
        self.mcm_machines().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }

    /// Everything core and a bootstrap provider make for one machine (Cluster `c1` must exist, provisioned).
    pub async fn provision(&self, name: &str, class: Value) -> MCMMachine {
        self.provision_in(name, "c1", class).await
    }

    /// [`Env::provision`] in Cluster `cluster` (which must exist, provisioned).
    pub async fn provision_in(&self, name: &str, cluster: &str, class: Value) -> MCMMachine {
        self.bootstrap_secret(&format!("{name}-bootstrap")).await;
        self.capi_machine(name, cluster, Some(&format!("{name}-bootstrap")), None).await;
        self.mcm_machine(name, cluster, class).await;
        self.adopt(name).await;
        self.wait_provisioned(name).await
    }

    /// Waits until MCMMachine `name` reports `status.initialization.provisioned: true`.
    pub async fn wait_provisioned(&self, name: &str) -> MCMMachine {
        let api = self.mcm_machines();
        wait_until(&format!("MCMMachine {name} to be provisioned"), WAIT, || async {
            let m = api.get_opt(name).await.ok().flatten()?;
            let provisioned = m.status.as_ref()?.initialization.as_ref()?.provisioned;
            (provisioned == Some(true)).then_some(m)
        })
        .await
    }

    /// Waits until MCMMachine `name`'s condition `type_` has `status` and `reason`; returns the machine.
    pub async fn wait_condition(&self, name: &str, type_: &str, status: &str, reason: &str) -> MCMMachine {
        let api = self.mcm_machines();
        let what = format!("MCMMachine {name} condition {type_}={status} ({reason})");
        wait_until(&what, WAIT, || async {
            let m = api.get_opt(name).await.ok().flatten()?;
            let c = condition(m.status.as_ref()?.conditions.as_deref(), type_)?;
            (c.status == status && c.reason == reason).then_some(m)
        })
        .await
    }

    /// Waits until MCMMachine `name` is gone.
    pub async fn wait_gone(&self, name: &str) {
        let api = self.mcm_machines();
        wait_until(&format!("MCMMachine {name} to be gone"), WAIT, || async {
            matches!(api.get_opt(name).await, Ok(None)).then_some(())
        })
        .await;
    }

    /// Whether the VM `provider_id` exists.
    pub fn live(&self, provider_id: &str) -> bool {
        self.dev.cloud.vm(provider_id).is_some_and(|vm| vm.exists())
    }

    /// The events recorded on object `name`: (type, reason, note).
    pub async fn events_of(&self, name: &str) -> Vec<(String, String, String)> {
        let api: Api<Event> = Api::namespaced(self.client(), NS);
        let list = api.list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }

    pub async fn shutdown(self) {
        self.dev.shutdown().await;
    }
}

/// The condition `type_` among `conditions`.
pub fn condition<'a>(conditions: Option<&'a [Condition]>, type_: &str) -> Option<&'a Condition> {
    conditions?.iter().find(|c| c.type_ == type_)
}

/// An inline in-memory class of cluster `test`, with `extra` providerSpec fields.
pub fn inline_class(extra: Value) -> Value {
    let mut spec = json!({
        "bootSeconds": 0.2,
        "tags": {"kubernetes.io/cluster/test": "1", "kubernetes.io/role/node": "1"},
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        spec[k] = v;
    }
    json!({"inlineClass": {"provider": "InMemory", "providerSpec": spec}})
}
