//! Draining a node against the embedded API server: what is evicted, deleted and skipped, PodDisruptionBudgets,
//! volume detachment, the hard deadline, forced drains and missing nodes.
//!
//! The server deletes evicted pods at once (there is no kubelet), so "gone" is immediate; PDB refusals (429) are
//! real. Clients are built without kube-rs's own 429 retries, as the drain requires.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use mcm::apiserver::ApiServer;
use mcm::apiserver::faults::{Selector, Verb};
use mcm::drain::{DrainError, DrainOptions, DrainOutcome, client_for_drain, cordon, drain, uncordon};
use mcm::providers::inmemory::{CSI_DRIVER, InMemoryCloud, InMemoryDriver};
use serde_json::{Value, json};
use tokio::time::{Instant, timeout};

use crate::support::{start, wait_until};

async fn setup() -> (ApiServer, kube::Client) {
    let (server, _) = start().await;
    let client = client_for_drain(server.kube_config().await.unwrap()).unwrap();
    (server, client)
}

fn options(node: &str) -> DrainOptions {
    DrainOptions {
        node: node.into(),
        timeout: Duration::from_secs(30),
        max_evict_retries: 10_000,
        evict_retry_interval: Duration::from_millis(50),
        volume_detach_timeout: Duration::from_secs(20),
        volume_reattach_timeout: Duration::from_millis(300),
        force: false,
    }
}

async fn create<K>(api: &Api<K>, object: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap()
}

fn all<K: kube::Resource<DynamicType = ()>>(client: &kube::Client) -> Api<K> {
    Api::all(client.clone())
}

fn default_ns<K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>>(
    client: &kube::Client,
) -> Api<K> {
    Api::namespaced(client.clone(), "default")
}

const ATTACHED: &str = "kubernetes.io/csi/inmemory.csi.mcm.dev^vol-1";

async fn node(client: &kube::Client, name: &str, attached: &[&str]) {
    create::<Node>(&all(client), json!({"metadata": {"name": name}})).await;
    set_attached(client, name, attached).await;
}

async fn set_attached(client: &kube::Client, name: &str, attached: &[&str]) {
    let volumes: Vec<Value> = attached.iter().map(|n| json!({"name": n, "devicePath": ""})).collect();
    let nodes: Api<Node> = Api::all(client.clone());
    let status = json!({"status": {"volumesAttached": volumes}});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
}

/// A pod on `node`, Running, Ready or not; `extra` is merged into it.
async fn pod(client: &kube::Client, name: &str, node: &str, ready: bool, extra: Value) -> Pod {
    let mut object = json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
    });
    json_patch::merge(&mut object, &extra);
    let created: Pod = create(&default_ns(client), object).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let ready = if ready { "True" } else { "False" };
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    created
}

/// A controller of kind `kind` (apps/v1) and an ownerReference to it, so pods are really owned.
async fn controller(client: &kube::Client, kind: &str, name: &str) -> Value {
    let template =
        json!({"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    let spec = json!({"selector": {"matchLabels": {"app": name}}, "template": template});
    let meta = json!({"name": name, "namespace": "default"});
    let object = json!({"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec});
    let uid = match kind {
        "DaemonSet" => create::<DaemonSet>(&default_ns(client), object).await.metadata.uid,
        _ => create::<StatefulSet>(&default_ns(client), object).await.metadata.uid,
    };
    json!({"metadata": {"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid.unwrap(), "controller": true}]}})
}

async fn budget(client: &kube::Client, min_available: i32) {
    let pdb = json!({"metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "web"}}}});
    create::<PodDisruptionBudget>(&default_ns(client), pdb).await;
}

/// Pod `a` on n1 (Ready) and pod `b` on n2 (not Ready), both `app=web`, under a budget wanting one available: `a`'s
/// eviction is refused, and the budget is not misconfigured (not every pod it covers is healthy).
async fn blocked_by_budget(client: &kube::Client) {
    node(client, "n1", &[]).await;
    let web = json!({"metadata": {"labels": {"app": "web"}}});
    pod(client, "a", "n1", true, web.clone()).await;
    pod(client, "b", "n2", false, web).await;
    budget(client, 1).await;
}

async fn pod_names(client: &kube::Client) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut names: Vec<String> =
        pods.list(&Default::default()).await.unwrap().items.into_iter().filter_map(|p| p.metadata.name).collect();
    names.sort();
    names
}

fn sorted(mut keys: Vec<String>) -> Vec<String> {
    keys.sort();
    keys
}

fn evictions(server: &ApiServer) -> u64 {
    server.faults().request_count(Verb::Create, "pods/eviction")
}

#[tokio::test]
async fn plain_pods_are_evicted_and_daemon_set_and_mirror_pods_stay() {
    let (server, client) = setup().await;
    node(&client, "n1", &[]).await;
    let owned = controller(&client, "DaemonSet", "agent").await;
    pod(&client, "web-1", "n1", true, json!({})).await;
    pod(&client, "web-2", "n1", true, json!({})).await;
    pod(&client, "agent-x", "n1", true, owned).await;
    pod(&client, "static-n1", "n1", true, json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "h"}}}))
        .await;
    pod(&client, "job", "n1", false, json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.patch_status("job", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Succeeded"}})))
        .await
        .unwrap();
    pod(&client, "elsewhere", "n2", true, json!({})).await;

    let outcome = drain(&client, None, &options("n1")).await.unwrap();

    assert_eq!(sorted(outcome.evicted), ["default/web-1", "default/web-2"]);
    assert_eq!(outcome.deleted, ["default/job"], "finished pods are deleted, not evicted");
    assert_eq!(sorted(outcome.skipped), ["default/agent-x", "default/static-n1"]);
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    assert_eq!(pod_names(&client).await, ["agent-x", "elsewhere", "static-n1"]);
    assert_eq!(evictions(&server), 2);
}

#[tokio::test]
async fn a_refused_eviction_is_retried_until_the_budget_relents() {
    let (server, client) = setup().await;
    blocked_by_budget(&client).await;
    let drain_client = client.clone();
    let running = tokio::spawn(async move { drain(&drain_client, None, &options("n1")).await });

    wait_until("three refused evictions", Duration::from_secs(10), || async {
        (evictions(&server) >= 3).then_some(())
    })
    .await;
    assert!(!running.is_finished());
    assert!(pod_names(&client).await.contains(&"a".to_string()));

    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    pdbs.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"minAvailable": 0}}))).await.unwrap();
    let outcome = timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    assert_eq!(outcome.evicted, ["default/a"]);
    assert!(outcome.deleted.is_empty());
    assert_eq!(pod_names(&client).await, ["b"]);
}

#[tokio::test]
async fn a_budget_that_never_relents_ends_in_deletion_after_the_retries() {
    let (server, client) = setup().await;
    blocked_by_budget(&client).await;
    let outcome = drain(&client, None, &DrainOptions { max_evict_retries: 3, ..options("n1") }).await.unwrap();
    assert_eq!(outcome.deleted, ["default/a"]);
    assert!(outcome.evicted.is_empty());
    assert_eq!(evictions(&server), 3, "three attempts in all, then the deletion");
    assert_eq!(pod_names(&client).await, ["b"]);
}

#[tokio::test]
async fn a_misconfigured_budget_fails_the_drain_at_once() {
    let (server, client) = setup().await;
    node(&client, "n1", &[]).await;
    pod(&client, "a", "n1", true, json!({"metadata": {"labels": {"app": "web"}}})).await;
    // One pod, one required: every covered pod is healthy and still nothing may go.
    budget(&client, 1).await;
    let slow_retries = DrainOptions { evict_retry_interval: Duration::from_secs(20), ..options("n1") };

    let started = Instant::now();
    let err = drain(&client, None, &slow_retries).await.unwrap_err();

    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    match &err {
        DrainError::MisconfiguredBudget { node, pod, pdb } => {
            assert_eq!((node.as_str(), pod.as_str(), pdb.as_str()), ("n1", "default/a", "default/web"));
        }
        other => panic!("expected MisconfiguredBudget, got {other:?}"),
    }
    assert!(err.to_string().contains("misconfigured"), "{err}");
    assert_eq!(evictions(&server), 1);
    assert_eq!(pod_names(&client).await, ["a"]);
}

/// n1 with volume vol-1 attached (or not), used by StatefulSet pod db-0 through claim `data` and volume `pv-1`.
async fn pod_with_volume(client: &kube::Client, attached: &[&str], grace_seconds: Option<i64>) {
    node(client, "n1", attached).await;
    let pv = json!({"metadata": {"name": "pv-1"}, "spec": {"capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"], "csi": {"driver": CSI_DRIVER, "volumeHandle": "vol-1"}}});
    create::<PersistentVolume>(&all(client), pv).await;
    let claim = json!({"metadata": {"name": "data", "namespace": "default"}, "spec": {"volumeName": "pv-1",
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    create::<PersistentVolumeClaim>(&default_ns(client), claim).await;
    let mut extra = controller(client, "StatefulSet", "db").await;
    extra["spec"] = json!({"terminationGracePeriodSeconds": grace_seconds,
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]});
    pod(client, "db-0", "n1", true, extra).await;
}

#[tokio::test]
async fn a_pod_with_a_volume_waits_for_its_detachment() {
    let (_server, client) = setup().await;
    pod_with_volume(&client, &[ATTACHED], None).await;
    // The replacement already runs elsewhere: nothing to warn about.
    let vas: Api<VolumeAttachment> = all(&client);
    let va = json!({"metadata": {"name": "va-n2"},
        "spec": {"attacher": CSI_DRIVER, "nodeName": "n2", "source": {"persistentVolumeName": "pv-1"}}});
    create(&vas, va).await;
    let attached = Patch::Merge(json!({"status": {"attached": true}}));
    vas.patch_status("va-n2", &PatchParams::default(), &attached).await.unwrap();
    let cloud = InMemoryCloud::new();
    let driver = InMemoryDriver::new(cloud.clone());
    let options = options("n1");
    let running = drain(&client, Some(&driver), &options);
    tokio::pin!(running);

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    tokio::select! {
        result = &mut running => panic!("the drain finished while vol-1 was attached: {result:?}"),
        () = wait_until("db-0 evicted", Duration::from_secs(10), || async {
            pods.get_opt("db-0").await.unwrap().is_none().then_some(())
        }) => {}
    }
    // The node is read every second: two readings later the drain still waits.
    assert!(timeout(Duration::from_millis(2500), &mut running).await.is_err(), "the drain waits for vol-1");

    set_attached(&client, "n1", &[]).await;
    let outcome = timeout(Duration::from_secs(10), running).await.unwrap().unwrap();
    assert_eq!(outcome, DrainOutcome { evicted: vec!["default/db-0".into()], ..Default::default() });
    assert_eq!(cloud.stats().volume_id_gets, 1);
}

#[tokio::test]
async fn a_volume_that_does_not_reattach_is_only_a_warning() {
    let (_server, client) = setup().await;
    pod_with_volume(&client, &[], None).await;
    let driver = InMemoryDriver::new(InMemoryCloud::new());
    let outcome = drain(&client, Some(&driver), &options("n1")).await.unwrap();
    assert_eq!(outcome.evicted, ["default/db-0"]);
    assert_eq!(outcome.warnings.len(), 1, "{:?}", outcome.warnings);
    assert!(
        outcome.warnings[0].contains("pv-1") && outcome.warnings[0].contains("did not attach"),
        "{:?}",
        outcome.warnings
    );
}

#[tokio::test]
async fn a_deadline_during_the_reattach_wait_is_only_a_warning() {
    let (_server, client) = setup().await;
    pod_with_volume(&client, &[], None).await;
    let driver = InMemoryDriver::new(InMemoryCloud::new());
    let options = DrainOptions {
        timeout: Duration::from_secs(1),
        volume_reattach_timeout: Duration::from_secs(60),
        ..options("n1")
    };
    let started = Instant::now();
    let outcome = drain(&client, Some(&driver), &options).await.unwrap();
    // Bounded by the 1 s drain timeout, not the 60 s reattach wait (the margin is for a loaded machine).
    assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
    assert_eq!(outcome.evicted, ["default/db-0"]);
    assert!(outcome.warnings.iter().any(|w| w.contains("deadline passed after every pod had left")), "{outcome:?}");
}

#[tokio::test]
async fn a_volume_that_never_detaches_fails_the_drain_after_the_detach_timeout() {
    let (_server, client) = setup().await;
    // The detach limit is the grace period plus the detach timeout: 1 s + 1 s.
    pod_with_volume(&client, &[ATTACHED], Some(1)).await;
    let driver = InMemoryDriver::new(InMemoryCloud::new());
    let options = DrainOptions { volume_detach_timeout: Duration::from_secs(1), ..options("n1") };

    let started = Instant::now();
    let err = drain(&client, Some(&driver), &options).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(6), "took {:?}", started.elapsed());
    match &err {
        DrainError::Eviction { pod, reason, .. } => {
            assert_eq!(pod, "default/db-0");
            assert!(reason.contains("vol-1") && reason.contains("still attached"), "{reason}");
        }
        other => panic!("expected an eviction failure, got {other:?}"),
    }
}

#[tokio::test]
async fn the_timeout_is_a_hard_deadline() {
    let (_server, client) = setup().await;
    blocked_by_budget(&client).await;
    let options = DrainOptions { timeout: Duration::from_secs(1), ..options("n1") };
    let started = Instant::now();
    let err = drain(&client, None, &options).await.unwrap_err();
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(4), "took {took:?}");
    assert!(matches!(err, DrainError::Timeout { pending: 1, .. }), "{err:?}");
    assert!(err.to_string().contains("n1"), "{err}");
}

#[tokio::test]
async fn a_hanging_api_server_does_not_stretch_the_deadline() {
    let (server, client) = setup().await;
    node(&client, "n1", &[]).await;
    pod(&client, "a", "n1", true, json!({})).await;
    // Like client-side throttling (MCM #785): every eviction takes far longer than the drain may.
    server.faults().add_latency(Selector::new(Some(Verb::Create), Some("pods/eviction")), Duration::from_secs(60));
    let options = DrainOptions { timeout: Duration::from_secs(1), ..options("n1") };
    let started = Instant::now();
    let err = drain(&client, None, &options).await.unwrap_err();
    // 1 s, not the 60 s each eviction hangs.
    assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
    assert!(matches!(err, DrainError::Timeout { pending: 1, .. }), "{err:?}");
}

#[tokio::test]
async fn a_forced_drain_deletes_everything_at_once() {
    let (server, client) = setup().await;
    node(&client, "n1", &[ATTACHED]).await;
    let owned = controller(&client, "DaemonSet", "agent").await;
    let web = json!({"metadata": {"labels": {"app": "web"}}});
    pod(&client, "a", "n1", true, web.clone()).await;
    pod(&client, "b", "n1", true, web).await;
    pod(&client, "agent-x", "n1", true, owned).await;
    // A budget that refuses everything does not matter: nothing is evicted.
    budget(&client, 2).await;
    let driver = InMemoryDriver::new(InMemoryCloud::new());

    let started = Instant::now();
    let outcome = drain(&client, Some(&driver), &DrainOptions { force: true, ..options("n1") }).await.unwrap();

    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(sorted(outcome.deleted), ["default/a", "default/b"]);
    assert_eq!(outcome.skipped, ["default/agent-x"]);
    assert!(outcome.evicted.is_empty());
    assert_eq!(evictions(&server), 0);
    assert_eq!(pod_names(&client).await, ["agent-x"]);
}

#[tokio::test]
async fn a_missing_node_is_drained() {
    let (_server, client) = setup().await;
    let outcome = drain(&client, None, &options("gone")).await.unwrap();
    assert_eq!(outcome, DrainOutcome::default());
    cordon(&client, "gone").await.unwrap();
    uncordon(&client, "gone").await.unwrap();
}

#[tokio::test]
async fn a_node_deleted_during_the_drain_ends_it_successfully() {
    let (server, client) = setup().await;
    blocked_by_budget(&client).await;
    let drain_client = client.clone();
    let running = tokio::spawn(async move { drain(&drain_client, None, &options("n1")).await });
    wait_until("a refused eviction", Duration::from_secs(10), || async { (evictions(&server) >= 1).then_some(()) })
        .await;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    let outcome = timeout(Duration::from_secs(5), running).await.unwrap().unwrap().unwrap();
    assert!(outcome.evicted.is_empty() && outcome.deleted.is_empty(), "{outcome:?}");
}

#[tokio::test]
async fn cordon_and_uncordon_flip_unschedulable() {
    let (_server, client) = setup().await;
    node(&client, "n1", &[]).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let unschedulable = |n: Node| n.spec.and_then(|s| s.unschedulable).unwrap_or(false);
    cordon(&client, "n1").await.unwrap();
    assert!(unschedulable(nodes.get("n1").await.unwrap()));
    cordon(&client, "n1").await.unwrap();
    uncordon(&client, "n1").await.unwrap();
    assert!(!unschedulable(nodes.get("n1").await.unwrap()));
}
