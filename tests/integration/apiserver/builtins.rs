//! Built-in kinds with behaviour: Events in both APIs, Pod eviction under a PodDisruptionBudget.

use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Pod};
use k8s_openapi::api::events::v1::Event as EventsV1;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;

use crate::support::start;

#[tokio::test]
async fn recorder_events_are_listed_in_both_event_apis() {
    let (_server, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = cms
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "target"}})).unwrap())
        .await
        .unwrap();
    let recorder = Recorder::new(client.clone(), Reporter { controller: "mcm-test".into(), instance: None });
    recorder
        .publish(
            &Event {
                type_: EventType::Warning,
                reason: "FailedCreate".into(),
                note: Some("no capacity".into()),
                action: "Create".into(),
                secondary: None,
            },
            &cm.object_ref(&()),
        )
        .await
        .unwrap();
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let listed = core
        .list(&ListParams::default().fields("involvedObject.name=target,involvedObject.kind=ConfigMap"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let event = &listed.items[0];
    assert_eq!(event.reason.as_deref(), Some("FailedCreate"));
    assert_eq!(event.message.as_deref(), Some("no capacity"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let v1: Api<EventsV1> = Api::namespaced(client, "default");
    let listed = v1.list(&ListParams::default().fields("regarding.name=target")).await.unwrap();
    assert_eq!(listed.items[0].note.as_deref(), Some("no capacity"));
    assert_eq!(listed.items[0].reporting_controller.as_deref(), Some("mcm-test"));
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}))
        .unwrap()
}

#[tokio::test]
async fn eviction_honours_pod_disruption_budgets() {
    let (server, _) = start().await;
    // kube-rs retries 429s on its own for minutes; a drain, like this test, wants to see them.
    let mut config = server.kube_config().await.unwrap();
    config.default_retry = false;
    let client = kube::Client::try_from(config).unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["a", "b"] {
        pods.create(&PostParams::default(), &pod(name)).await.unwrap();
        let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb =
        json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}});
    pdbs.create(&PostParams::default(), &serde_json::from_value(pdb).unwrap()).await.unwrap();

    let err = pods.evict("a", &EvictParams::default()).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 429 && s.message.contains("disruption budget")), "{err}");
    let status = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(
        (status.current_healthy, status.desired_healthy, status.disruptions_allowed),
        (Some(2), Some(2), Some(0))
    );

    pdbs.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"minAvailable": 1}}))).await.unwrap();
    pods.evict("a", &EvictParams::default()).await.unwrap();
    assert!(pods.get_opt("a").await.unwrap().is_none(), "the evicted pod is gone");
    let err = pods.evict("b", &EvictParams::default()).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 429), "the budget now protects the last pod: {err}");
}
