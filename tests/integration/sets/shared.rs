//! The shared rolling-update and deletion-order tables (`crate::scenarios`) on MCM's objects.

use kube::api::{ApiResource, DynamicObject};
use mcm::api::mcm::names::PRIORITY_ANNOTATION;
use mcm::api::mcm::{Machine, MachineDeployment};
use serde_json::json;

use super::{deployment, env_with_class, rolling};
use crate::machines::{Env, NS};
use crate::scenarios::{self, Flavour};

fn running(m: &DynamicObject) -> bool {
    let phase = m.data["status"]["currentStatus"]["phase"].as_str();
    matches!(phase, Some("Running" | "Available"))
}

fn flavour(env: &Env) -> Flavour {
    Flavour {
        name: "MCM",
        client: env.client(),
        namespace: NS,
        deployments: ApiResource::erase::<MachineDeployment>(&()),
        machines: ApiResource::erase::<Machine>(&()),
        pool_label: "name",
        deployment: |name, replicas, surge, unavailable| {
            deployment(name, replicas, rolling(json!(surge), json!(unavailable)))
        },
        template_change: json!({"spec": {"template": {"metadata": {"labels": {"tier": "b"}}}}}),
        delete_first: (PRIORITY_ANNOTATION, "1"),
        running,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_rolling_updates_on_mcm_objects() {
    let env = env_with_class(0.2).await;
    scenarios::rolling_updates(&flavour(&env)).await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_deletion_order_on_mcm_objects() {
    let env = env_with_class(0.1).await;
    scenarios::deletion_order(&flavour(&env)).await;
    env.shutdown().await;
}
