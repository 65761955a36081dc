//! The shared rolling-update and deletion-order tables (`crate::scenarios`) on CAPI's objects, through our
//! MachineDeployment, MachineSet and Machine controllers.

use kube::api::{ApiResource, DynamicObject};
use mcm::api::capi::{DELETE_MACHINE_ANNOTATION, Machine, MachineDeployment};
use serde_json::json;

use super::{NS, deployment, env, rolling};
use crate::machines::Env;
use crate::scenarios::{self, Flavour};

fn running(m: &DynamicObject) -> bool {
    m.data["status"]["phase"].as_str() == Some("Running") && m.data["status"]["nodeRef"]["name"].is_string()
}

fn flavour(env: &Env) -> Flavour {
    Flavour {
        name: "CAPI",
        client: env.client(),
        namespace: NS,
        deployments: ApiResource::erase::<MachineDeployment>(&()),
        machines: ApiResource::erase::<Machine>(&()),
        pool_label: "pool",
        deployment: |name, replicas, surge, unavailable| {
            deployment(name, replicas, "small", rolling(surge, unavailable))
        },
        template_change: json!({"spec": {"template": {"spec": {"infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachineTemplate", "name": "large",
        }}}}}),
        delete_first: (DELETE_MACHINE_ANNOTATION, "yes"),
        running,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_rolling_updates_on_capi_objects() {
    let (env, _capi, _provider) = env().await;
    scenarios::rolling_updates(&flavour(&env)).await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_deletion_order_on_capi_objects() {
    let (env, _capi, _provider) = env().await;
    scenarios::deletion_order(&flavour(&env)).await;
    env.shutdown().await;
}
