//! Credentials stay in their tenant (`docs/infrastructure-provider.md`, "Multi-tenancy"): an MCMMachine may use a
//! Secret outside its namespace only through an MCMClusterIdentity that allows its namespace. A refusal is a
//! `Ready=False` condition and a Warning event on the MCMMachine, with no driver call and no VM.

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use mcm::api::infra::MCMClusterIdentity;
use mcm::lifecycle::tenancy::reason::{CREDENTIALS_NOT_ALLOWED, IDENTITY_NOT_ALLOWED};
use serde_json::{Value, json};

use super::{Env, NS, inline_class};

/// What a Secret holds; no message may contain it.
const SECRET_VALUE: &str = "s3cr3t-d0-not-print";

/// Namespace `name` with `labels`.
async fn namespace(env: &Env, name: &str, labels: Value) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    let api = Api::<Namespace>::all(env.client());
    // On a real kube-apiserver the shipped RBAC already made `mcm-system`: give it the labels instead.
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let patch = json!({"metadata": {"labels": labels}});
            api.patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        }
        Err(e) => panic!("namespace {name}: {e}"),
    }
}

/// A Secret of cloud credentials `namespace/name`.
async fn credentials(env: &Env, namespace: &str, name: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        "stringData": {"providerAccessKeyId": SECRET_VALUE, "providerSecretAccessKey": SECRET_VALUE},
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client(), namespace).create(&PostParams::default(), &secret).await.unwrap();
}

/// MCMClusterIdentity `name` granting the provider's Secret to `allowed_namespaces`.
async fn identity(env: &Env, name: &str, allowed_namespaces: Value) {
    let identity: MCMClusterIdentity = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMClusterIdentity",
        "metadata": {"name": name},
        "spec": {
            "secretRef": {"name": "mcm-cloud-credentials", "namespace": "mcm-system"},
            "allowedNamespaces": allowed_namespaces,
        },
    }))
    .unwrap();
    Api::<MCMClusterIdentity>::all(env.client()).create(&PostParams::default(), &identity).await.unwrap();
}

/// An inline class naming Secret `namespace/name`.
fn with_credentials(namespace: &str, name: &str) -> Value {
    let mut class = inline_class(json!({}));
    class["inlineClass"]["credentialsSecretRef"] = json!({"name": name, "namespace": namespace});
    class
}

/// An inline class taking its credentials from identity `name`.
fn with_identity(name: &str) -> Value {
    let mut class = inline_class(json!({}));
    class["identityRef"] = json!({"kind": "MCMClusterIdentity", "name": name});
    class
}

/// What core and a bootstrap provider make for machine `name` (Cluster `c1`), without waiting for its VM.
async fn machine(env: &Env, name: &str, class: Value) {
    env.bootstrap_secret(&format!("{name}-bootstrap")).await;
    env.capi_machine(name, "c1", Some(&format!("{name}-bootstrap")), None).await;
    env.mcm_machine(name, "c1", class).await;
    env.adopt(name).await;
}

/// Waits for the refusal of MCMMachine `name` with `reason`; checks its Warning event, that neither names the
/// Secret's content, and that it has no VM.
async fn refused(env: &Env, name: &str, reason: &str, mentions: &str) {
    let m = env.wait_condition(name, "Ready", "False", reason).await;
    let ready = super::condition(m.status.as_ref().unwrap().conditions.as_deref(), "Ready").unwrap();
    assert!(ready.message.contains(mentions), "{name}: {}", ready.message);
    assert!(!ready.message.contains(SECRET_VALUE));
    assert_eq!(m.spec.provider_id, None, "{name}: no VM");
    let events = env.events_of(name).await;
    assert!(events.iter().any(|(t, r, note)| t == "Warning" && r == reason && note.contains(mentions)), "{events:?}");
    assert!(events.iter().all(|(_, _, note)| !note.contains(SECRET_VALUE)), "{events:?}");
    assert!(env.dev.cloud.vms().iter().all(|vm| vm.machine_name != name), "{name}: no VM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_use_another_tenants_secret_or_the_providers() {
    let env = Env::start().await;
    namespace(&env, "tenant-a", json!({})).await;
    namespace(&env, "mcm-system", json!({})).await;
    credentials(&env, "tenant-a", "theirs").await;
    credentials(&env, "mcm-system", "mcm-cloud-credentials").await;
    env.cluster("c1", true).await;

    // Tenant "infra" names tenant-a's Secret, then the provider's: both refused, without any driver call.
    machine(&env, "foreign", with_credentials("tenant-a", "theirs")).await;
    refused(&env, "foreign", CREDENTIALS_NOT_ALLOWED, "tenant-a/theirs").await;
    machine(&env, "provider", with_credentials("mcm-system", "mcm-cloud-credentials")).await;
    refused(&env, "provider", CREDENTIALS_NOT_ALLOWED, "mcm-system/mcm-cloud-credentials").await;
    let stats = env.dev.cloud.stats();
    assert_eq!(
        (stats.creates, stats.status_gets, stats.lists, stats.deletes),
        (0, 0, 0, 0),
        "no driver call with a refused Secret (orphan collection included): {stats:?}"
    );

    // Naming an identity that does not exist grants nothing.
    let mut named = with_credentials("mcm-system", "mcm-cloud-credentials");
    named["identityRef"] = json!({"kind": "MCMClusterIdentity", "name": "missing"});
    machine(&env, "missing", named).await;
    refused(&env, "missing", IDENTITY_NOT_ALLOWED, "missing does not exist").await;

    // A referenced MachineClass of the tenant's namespace whose secretRef points at another tenant's Secret.
    env.create(
        "class.json",
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": "borrowed"},
            "provider": "InMemory",
            "providerSpec": {"bootSeconds": 0.2, "tags": {"kubernetes.io/cluster/test": "1", "kubernetes.io/role/node": "1"}},
            "secretRef": {"name": "theirs", "namespace": "tenant-a"},
        }),
    )
    .await;
    machine(&env, "by-class", json!({"class": {"kind": "MachineClass", "name": "borrowed"}})).await;
    refused(&env, "by-class", CREDENTIALS_NOT_ALLOWED, "tenant-a/theirs").await;
    assert_eq!(env.dev.cloud.stats().creates, 0, "no VM for any of them");

    // A refused machine is deleted without a driver call: it never had a VM.
    for name in ["foreign", "provider", "missing", "by-class"] {
        env.mcm_machines().delete(name, &DeleteParams::default()).await.unwrap();
        env.wait_gone(name).await;
    }
    let stats = env.dev.cloud.stats();
    assert_eq!((stats.creates, stats.deletes), (0, 0), "{stats:?}");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_grants_the_providers_secret_to_the_namespaces_it_allows() {
    let env = Env::start().await;
    namespace(&env, "mcm-system", json!({})).await;
    credentials(&env, "mcm-system", "mcm-cloud-credentials").await;
    env.cluster("c1", true).await;
    identity(&env, "by-list", json!({"list": [NS]})).await;
    identity(&env, "by-label", json!({"selector": {"matchLabels": {"mcm-credentials": "provider"}}})).await;
    identity(&env, "others", json!({"list": ["tenant-c"]})).await;
    identity(&env, "nobody", json!(null)).await;

    // Allowed by the list: the identity's Secret is the machine's credentials, or the one it names.
    env.provision("listed", with_identity("by-list")).await;
    let mut explicit = with_credentials("mcm-system", "mcm-cloud-credentials");
    explicit["identityRef"] = json!({"kind": "MCMClusterIdentity", "name": "by-list"});
    env.provision("explicit", explicit).await;

    // Identities that do not allow the namespace: refused, no VM.
    machine(&env, "other", with_identity("others")).await;
    refused(&env, "other", IDENTITY_NOT_ALLOWED, &format!("does not allow namespace {NS}")).await;
    machine(&env, "unset", with_identity("nobody")).await;
    refused(&env, "unset", IDENTITY_NOT_ALLOWED, &format!("does not allow namespace {NS}")).await;

    // An allowed identity grants its own Secret, not another one outside the namespace.
    namespace(&env, "tenant-a", json!({})).await;
    credentials(&env, "tenant-a", "theirs").await;
    let mut other_secret = with_credentials("tenant-a", "theirs");
    other_secret["identityRef"] = json!({"kind": "MCMClusterIdentity", "name": "by-list"});
    machine(&env, "other-secret", other_secret).await;
    refused(&env, "other-secret", CREDENTIALS_NOT_ALLOWED, "tenant-a/theirs").await;

    // By label: refused until the namespace carries the label the selector asks for, then the VM is made.
    machine(&env, "labelled", with_identity("by-label")).await;
    refused(&env, "labelled", IDENTITY_NOT_ALLOWED, "by-label does not allow").await;
    let label = json!({"metadata": {"labels": {"mcm-credentials": "provider"}}});
    Api::<Namespace>::all(env.client()).patch(NS, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    let m = env.wait_provisioned("labelled").await;
    assert!(env.live(m.spec.provider_id.as_deref().unwrap()));

    // The admin widens an identity: the refused machine goes ahead.
    let widen = json!({"spec": {"allowedNamespaces": {"list": ["tenant-c", NS]}}});
    Api::<MCMClusterIdentity>::all(env.client())
        .patch("others", &PatchParams::default(), &Patch::Merge(&widen))
        .await
        .unwrap();
    env.wait_provisioned("other").await;
    assert_eq!(env.dev.cloud.vms().iter().filter(|vm| vm.machine_name == "unset").count(), 0);
    env.shutdown().await;
}
