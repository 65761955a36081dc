//! Admission webhooks: the server calls MutatingWebhookConfigurations and ValidatingWebhookConfigurations (a small
//! HTTPS webhook runs inside the test, see `webhook_server.rs`).

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::webhook_server::HookServer;
use crate::support::{Kubectl, install_crds, start};

const MUTATED: &str = "webhook.test/mutated";

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
        "data": {"k": "v"},
    }))
    .unwrap()
}

fn mutated<K: Resource>(object: &K) -> Option<String> {
    object.meta().labels.as_ref().and_then(|l| l.get(MUTATED).cloned())
}

fn url(hooks: &HookServer, path: &str) -> Value {
    json!({"url": hooks.url(path), "caBundle": hooks.ca_bundle()})
}

/// A webhook on CREATE and UPDATE of core `v1` `resources`.
fn webhook(name: &str, client_config: Value, resources: &[&str]) -> Value {
    json!({
        "name": name,
        "clientConfig": client_config,
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": resources}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

/// `webhook` with more fields set.
fn with(mut webhook: Value, extra: Value) -> Value {
    json_patch::merge(&mut webhook, &extra);
    webhook
}

async fn mutating(client: &kube::Client, name: &str, webhooks: Vec<Value>) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let config = serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": webhooks})).unwrap();
    api.create(&PostParams::default(), &config).await.unwrap();
}

async fn validating(client: &kube::Client, name: &str, webhooks: Vec<Value>) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config = serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": webhooks})).unwrap();
    api.create(&PostParams::default(), &config).await.unwrap();
}

async fn remove_mutating(client: &kube::Client, name: &str) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    api.delete(name, &DeleteParams::default()).await.unwrap();
}

fn api_error(err: kube::Error) -> (u16, String, String) {
    match err {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("not an API error: {other}"),
    }
}

/// An https URL on 127.0.0.1 where nothing listens.
async fn nothing_listening(path: &str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("https://{addr}{path}")
}

#[tokio::test]
async fn webhooks_by_url_mutate_validate_and_deny() {
    let (_server, client) = start().await;
    let hooks = HookServer::start().await;
    mutating(&client, "label", vec![webhook("label.webhook.test", url(&hooks, "/mutate"), &["configmaps"])]).await;
    validating(&client, "names", vec![webhook("deny.webhook.test", url(&hooks, "/validate"), &["configmaps"])]).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let created = api.create(&PostParams::default(), &cm("a", &[("app", "x")])).await.unwrap();
    assert_eq!(mutated(&created).as_deref(), Some("CREATE"));
    assert_eq!(mutated(&api.get("a").await.unwrap()).as_deref(), Some("CREATE"), "the mutation is stored");
    // The mutating webhook sees the request before the server fills in uid and creationTimestamp ...
    let review = &hooks.reviews("/mutate")[0]["request"];
    assert_eq!(review["operation"], "CREATE");
    assert_eq!(review["kind"], json!({"group": "", "version": "v1", "kind": "ConfigMap"}));
    assert_eq!(review["resource"], json!({"group": "", "version": "v1", "resource": "configmaps"}));
    assert_eq!(review["requestKind"], review["kind"]);
    assert_eq!((review["name"].as_str(), review["namespace"].as_str()), (Some("a"), Some("default")));
    assert_eq!(review["userInfo"]["username"], "system:admin");
    assert_eq!(review["options"]["kind"], "CreateOptions");
    assert_eq!(review["dryRun"], false);
    assert!(review["object"]["metadata"]["uid"].is_null() && review["oldObject"].is_null(), "{review}");
    assert!(review["uid"].as_str().is_some_and(|u| !u.is_empty()));
    // ... the validating webhook the object about to be stored, mutation included.
    let review = &hooks.reviews("/validate")[0]["request"];
    assert!(review["object"]["metadata"]["uid"].is_string(), "{review}");
    assert_eq!(review["object"]["metadata"]["labels"][MUTATED], "CREATE");

    // A denial is the webhook's status, and nothing is stored.
    let (code, reason, message) =
        api_error(api.create(&PostParams::default(), &cm("forbidden-1", &[])).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        message,
        "admission webhook \"deny.webhook.test\" denied the request: the name forbidden-1 is not allowed"
    );
    let (code, _, _) = api_error(api.get("forbidden-1").await.unwrap_err());
    assert_eq!(code, 404);

    // An update without the label gets it back; the webhook sees the stored object as oldObject.
    let mut changed = created.clone();
    changed.metadata.labels = Some([("app".to_string(), "y".to_string())].into());
    let updated = api.replace("a", &PostParams::default(), &changed).await.unwrap();
    assert_eq!(mutated(&updated).as_deref(), Some("UPDATE"));
    let review = &hooks.reviews("/mutate").last().cloned().unwrap()["request"];
    assert_eq!(review["operation"], "UPDATE");
    assert_eq!(review["options"]["kind"], "UpdateOptions");
    assert_eq!(review["oldObject"]["metadata"]["labels"][MUTATED], "CREATE");
    // Patches are updates too.
    let patched = api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "w"}}))).await.unwrap();
    assert_eq!(patched.data.unwrap()["k"], "w");
    assert_eq!(hooks.reviews("/validate").len(), 4);
}

#[tokio::test]
async fn webhook_configurations_are_never_sent_to_webhooks() {
    let (_server, client) = start().await;
    let hooks = HookServer::start().await;
    let everything =
        json!({"rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}]});
    let broken = with(
        webhook(
            "broken.webhook.test",
            json!({"url": nothing_listening("/").await, "caBundle": hooks.ca_bundle()}),
            &[],
        ),
        everything,
    );
    mutating(&client, "broken", vec![broken.clone()]).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (code, _, message) = api_error(api.create(&PostParams::default(), &cm("a", &[])).await.unwrap_err());
    assert_eq!(code, 500, "{message}");
    // The broken webhook names every resource, yet configurations can still be written and removed.
    validating(&client, "other", vec![with(broken, json!({"name": "other.webhook.test"}))]).await;
    let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    validating_api.delete("other", &DeleteParams::default()).await.unwrap();
    remove_mutating(&client, "broken").await;
    api.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
}

#[tokio::test]
async fn webhooks_by_service_reach_its_endpoint_slices_or_endpoints() {
    let (_server, client) = start().await;
    let hooks = HookServer::start().await;
    let port = hooks.addr.port();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "webhooks"}})).unwrap())
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "webhooks");
    let service =
        json!({"metadata": {"name": "hooks"}, "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 9443}]}});
    services.create(&PostParams::default(), &serde_json::from_value(service).unwrap()).await.unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "webhooks");
    let slice = json!({
        "metadata": {"name": "hooks-1", "labels": {"kubernetes.io/service-name": "hooks"}},
        "addressType": "IPv4",
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["10.255.255.1"], "conditions": {"ready": false}},
            {"addresses": ["127.0.0.1"], "conditions": {"ready": true}},
        ],
    });
    slices.create(&PostParams::default(), &serde_json::from_value(slice).unwrap()).await.unwrap();
    let by_service = json!({
        "service": {"namespace": "webhooks", "name": "hooks", "path": "/mutate"},
        "caBundle": hooks.ca_bundle(),
    });
    mutating(&client, "by-service", vec![webhook("svc.webhook.test", by_service, &["configmaps"])]).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = api.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    assert_eq!(mutated(&created).as_deref(), Some("CREATE"), "reached through the EndpointSlice");

    slices.delete("hooks-1", &DeleteParams::default()).await.unwrap();
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "webhooks");
    let legacy = json!({"metadata": {"name": "hooks"}, "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}]});
    endpoints.create(&PostParams::default(), &serde_json::from_value(legacy).unwrap()).await.unwrap();
    let created = api.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    assert_eq!(mutated(&created).as_deref(), Some("CREATE"), "reached through the Endpoints");

    endpoints.delete("hooks", &DeleteParams::default()).await.unwrap();
    let (code, reason, message) = api_error(api.create(&PostParams::default(), &cm("c", &[])).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (500, "InternalError"));
    assert_eq!(
        message,
        "Internal error occurred: failed calling webhook \"svc.webhook.test\": failed to call webhook: Post \
         \"https://hooks.webhooks.svc:443/mutate?timeout=10s\": no endpoints available for service \"hooks\""
    );
    assert_eq!(hooks.reviews("/mutate").len(), 2);
}

#[tokio::test]
async fn namespace_and_object_selectors_choose_what_is_sent() {
    let (_server, client) = start().await;
    let hooks = HookServer::start().await;
    let selective = with(
        webhook("selective.webhook.test", url(&hooks, "/mutate"), &["configmaps", "namespaces"]),
        json!({
            "namespaceSelector": {"matchLabels": {"webhooks": "enabled"}},
            "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
        }),
    );
    mutating(&client, "selective", vec![selective]).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = |name: &str, labels: Value| -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    };
    // A Namespace is matched by its own labels.
    let on = namespaces.create(&PostParams::default(), &namespace("on", json!({"webhooks": "enabled"}))).await.unwrap();
    let off = namespaces.create(&PostParams::default(), &namespace("off", json!({}))).await.unwrap();
    assert_eq!((mutated(&on).as_deref(), mutated(&off)), (Some("CREATE"), None));

    let create = |ns: &str, name: &str, labels: &'static [(&'static str, &'static str)]| {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let object = cm(name, labels);
        async move { api.create(&PostParams::default(), &object).await.unwrap() }
    };
    assert_eq!(mutated(&create("on", "a", &[]).await).as_deref(), Some("CREATE"));
    assert_eq!(mutated(&create("on", "skipped", &[("skip", "yes")]).await), None, "objectSelector");
    assert_eq!(mutated(&create("off", "a", &[]).await), None, "namespaceSelector");
    assert_eq!(hooks.reviews("/mutate").len(), 2);

    // The object selector takes the old object as well as the new one.
    let tracked = with(
        webhook("tracked.webhook.test", url(&hooks, "/validate"), &["configmaps"]),
        json!({"objectSelector": {"matchLabels": {"tracked": "yes"}}}),
    );
    validating(&client, "tracked", vec![tracked]).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "off");
    api.create(&PostParams::default(), &cm("t", &[("tracked", "yes")])).await.unwrap();
    let mut untracked = api.get("t").await.unwrap();
    untracked.metadata.labels = None;
    let untracked = api.replace("t", &PostParams::default(), &untracked).await.unwrap();
    assert_eq!(hooks.reviews("/validate").len(), 2, "the old object carried the label");
    api.replace("t", &PostParams::default(), &untracked).await.unwrap();
    assert_eq!(hooks.reviews("/validate").len(), 2, "neither object carries the label");
}

#[tokio::test]
async fn failure_policy_decides_when_a_webhook_cannot_answer() {
    let (_server, client) = start().await;
    let hooks = HookServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let down = nothing_listening("/mutate").await;
    let cases = [
        ("down", json!({"url": down, "caBundle": hooks.ca_bundle()}), 10, "failed to call webhook: Post \""),
        ("garbage", url(&hooks, "/garbage"), 10, "failed to call webhook: invalid response body"),
        ("hang", url(&hooks, "/hang"), 1, "context deadline exceeded"),
    ];
    for (i, (name, client_config, timeout, expected)) in cases.into_iter().enumerate() {
        let hook = |policy: &str| {
            with(
                webhook(&format!("{name}.webhook.test"), client_config.clone(), &["configmaps"]),
                json!({"failurePolicy": policy, "timeoutSeconds": timeout}),
            )
        };
        mutating(&client, name, vec![hook("Fail")]).await;
        let (code, reason, message) =
            api_error(api.create(&PostParams::default(), &cm(&format!("fail-{i}"), &[])).await.unwrap_err());
        assert_eq!((code, reason.as_str()), (500, "InternalError"), "{name}: {message}");
        let prefix = format!("Internal error occurred: failed calling webhook \"{name}.webhook.test\": ");
        assert!(message.starts_with(&prefix) && message.contains(expected), "{name}: {message}");
        assert_eq!(api_error(api.get(&format!("fail-{i}")).await.unwrap_err()).0, 404, "{name}: nothing stored");
        remove_mutating(&client, name).await;

        mutating(&client, name, vec![hook("Ignore")]).await;
        let created = api.create(&PostParams::default(), &cm(&format!("ignore-{i}"), &[])).await.unwrap();
        assert_eq!(mutated(&created), None, "{name}");
        remove_mutating(&client, name).await;
    }
}

#[tokio::test]
async fn dry_runs_reach_only_webhooks_without_side_effects() {
    let (_server, client) = start().await;
    let hooks = HookServer::start().await;
    mutating(&client, "label", vec![webhook("label.webhook.test", url(&hooks, "/mutate"), &["configmaps"])]).await;
    validating(&client, "names", vec![webhook("deny.webhook.test", url(&hooks, "/validate"), &["configmaps"])]).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let dry = PostParams { dry_run: true, ..Default::default() };
    let answered = api.create(&dry, &cm("a", &[])).await.unwrap();
    assert_eq!(mutated(&answered).as_deref(), Some("CREATE"));
    assert_eq!(api_error(api.get("a").await.unwrap_err()).0, 404, "a dry run stores nothing");
    let review = &hooks.reviews("/mutate")[0]["request"];
    assert_eq!((review["dryRun"].clone(), review["options"]["dryRun"].clone()), (json!(true), json!(["All"])));
    let (code, _, _) = api_error(api.create(&dry, &cm("forbidden", &[])).await.unwrap_err());
    assert_eq!(code, 403, "validating webhooks deny dry runs too");

    let side_effects =
        with(webhook("effects.webhook.test", url(&hooks, "/mutate"), &["configmaps"]), json!({"sideEffects": "Some"}));
    mutating(&client, "effects", vec![side_effects]).await;
    let (code, _, message) = api_error(api.create(&dry, &cm("b", &[])).await.unwrap_err());
    assert_eq!((code, message.as_str()), (400, "admission webhook \"effects.webhook.test\" does not support dry run"));
    api.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
}

#[tokio::test]
async fn writes_through_webhooks_keep_resource_version_semantics() {
    let (_server, client) = start().await;
    let hooks = HookServer::start().await;
    mutating(&client, "hold", vec![webhook("hold.webhook.test", url(&hooks, "/hold"), &["configmaps"])]).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = api.create(&PostParams::default(), &cm("r", &[])).await.unwrap();

    // A stale update is a conflict, as without webhooks.
    let fresh = api.replace("r", &PostParams::default(), &created).await.unwrap();
    assert_ne!(fresh.resource_version(), created.resource_version());
    let (code, reason, _) = api_error(api.replace("r", &PostParams::default(), &created).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (409, "Conflict"));

    // A patch whose webhook call overlaps another write is computed again from the new state.
    let (holding, release) = hooks.hold_next();
    let held = {
        let api = api.clone();
        let patch = json!({"metadata": {"labels": {"hold": "yes"}}, "data": {"a": "1"}});
        tokio::spawn(async move { api.patch("r", &PatchParams::default(), &Patch::Merge(&patch)).await })
    };
    holding.await.unwrap();
    api.patch("r", &PatchParams::default(), &Patch::Merge(json!({"data": {"b": "2"}}))).await.unwrap();
    release.send(()).unwrap();
    let patched = held.await.unwrap().unwrap();
    let data = patched.data.clone().unwrap();
    assert_eq!((data.get("a").map(String::as_str), data.get("b").map(String::as_str)), (Some("1"), Some("2")));

    // An update carrying the resourceVersion it read fails when another write lands during its webhook call.
    let mut put = patched.clone();
    put.data.as_mut().unwrap().insert("c".into(), "3".into());
    let (holding, release) = hooks.hold_next();
    let held = {
        let api = api.clone();
        tokio::spawn(async move { api.replace("r", &PostParams::default(), &put).await })
    };
    holding.await.unwrap();
    api.patch("r", &PatchParams::default(), &Patch::Merge(json!({"data": {"d": "4"}}))).await.unwrap();
    release.send(()).unwrap();
    let (code, reason, _) = api_error(held.await.unwrap().unwrap_err());
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(!api.get("r").await.unwrap().data.unwrap().contains_key("c"));
}

#[tokio::test]
async fn deletes_are_reviewed_with_the_old_object() {
    let (_server, client) = start().await;
    let hooks = HookServer::start().await;
    let on_delete = json!({"rules": [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]});
    validating(&client, "names", vec![with(webhook("deny.webhook.test", url(&hooks, "/validate"), &[]), on_delete)])
        .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("forbidden", &[])).await.unwrap();
    api.create(&PostParams::default(), &cm("fine", &[])).await.unwrap();
    assert!(hooks.reviews("/validate").is_empty(), "the webhook names DELETE only");
    let (code, _, _) = api_error(api.delete("forbidden", &DeleteParams::default()).await.unwrap_err());
    assert_eq!(code, 403);
    api.get("forbidden").await.unwrap();
    api.delete("fine", &DeleteParams::default()).await.unwrap();
    let review = &hooks.reviews("/validate")[1]["request"];
    assert_eq!((review["operation"].as_str(), review["name"].as_str()), (Some("DELETE"), Some("fine")));
    assert!(review["object"].is_null() && review["oldObject"]["metadata"]["name"] == "fine", "{review}");
    assert_eq!(review["options"]["kind"], "DeleteOptions");
    // A collection delete asks for each object.
    let (code, _, _) =
        api_error(api.delete_collection(&DeleteParams::default(), &Default::default()).await.unwrap_err());
    assert_eq!(code, 403);
}

#[tokio::test]
async fn scale_subresource_webhooks_see_a_scale() {
    let (_server, client) = start().await;
    let hooks = HookServer::start().await;
    let scale_rule = json!({"rules": [{"operations": ["UPDATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments/scale"]}]});
    mutating(&client, "cap", vec![with(webhook("cap.webhook.test", url(&hooks, "/cap"), &[]), scale_rule)]).await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let deployment = json!({"metadata": {"name": "d"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}}}});
    api.create(&PostParams::default(), &serde_json::from_value(deployment).unwrap()).await.unwrap();
    api.patch("d", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 7}}))).await.unwrap();
    assert!(hooks.reviews("/cap").is_empty(), "the main resource is not the scale subresource");
    let scale =
        api.patch_scale("d", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 10}}))).await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    assert_eq!(api.get("d").await.unwrap().spec.replicas, Some(3));
    let review = &hooks.reviews("/cap")[0]["request"];
    assert_eq!(review["kind"], json!({"group": "autoscaling", "version": "v1", "kind": "Scale"}));
    assert_eq!(review["resource"], json!({"group": "apps", "version": "v1", "resource": "deployments"}));
    assert_eq!(review["subResource"], "scale");
    assert_eq!(review["oldObject"]["spec"]["replicas"], 7);
}

const MACHINE_DEPLOYMENT: &str = r#"apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata:
  name: NAME
  namespace: default
spec:
  clusterName: dev
  replicas: REPLICAS
  selector:
    matchLabels: {pool: workers}
  template:
    metadata:
      labels: {pool: workers}
    spec:
      clusterName: dev
      bootstrap: {dataSecretName: bootstrap}
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: MCMMachineTemplate, name: small}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_a_machine_deployment_goes_through_its_webhooks() {
    let (server, client) = start().await;
    install_crds(&client).await;
    let hooks = HookServer::start().await;
    // The mutating rule names v1beta1 only: matchPolicy Equivalent still sends the v1beta2 request, as v1beta1.
    let md_rule = |version: &str| json!({"rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["cluster.x-k8s.io"], "apiVersions": [version], "resources": ["machinedeployments"]}]});
    mutating(
        &client,
        "capi",
        vec![with(webhook("default.md.webhook.test", url(&hooks, "/mutate"), &[]), md_rule("v1beta1"))],
    )
    .await;
    validating(
        &client,
        "capi",
        vec![with(webhook("validate.md.webhook.test", url(&hooks, "/validate"), &[]), md_rule("v1beta2"))],
    )
    .await;
    let kubectl = Kubectl::new(&server);
    let manifest = |name: &str, replicas: u32| {
        kubectl.file(
            &format!("{name}-{replicas}.yaml"),
            &MACHINE_DEPLOYMENT.replace("NAME", name).replace("REPLICAS", &replicas.to_string()),
        )
    };
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();

    let out = kubectl.run(&["apply", "-f", &path(&manifest("workers", 2))]).await;
    assert!(out.contains("machinedeployment.cluster.x-k8s.io/workers created"), "{out}");
    let got = kubectl.run(&["get", "machinedeployments.cluster.x-k8s.io", "workers", "-o", "json"]).await;
    let got: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(got["metadata"]["labels"][MUTATED], "CREATE");
    let review = &hooks.reviews("/mutate")[0]["request"];
    assert_eq!(review["kind"], json!({"group": "cluster.x-k8s.io", "version": "v1beta1", "kind": "MachineDeployment"}));
    assert_eq!(review["requestKind"]["version"], "v1beta2");
    assert_eq!(review["object"]["apiVersion"], "cluster.x-k8s.io/v1beta1");
    let validated = &hooks.reviews("/validate")[0]["request"];
    assert_eq!(validated["object"]["apiVersion"], "cluster.x-k8s.io/v1beta2");

    // A changed manifest is a patch: an UPDATE for the webhooks; the label the webhook added stays.
    let out = kubectl.run(&["apply", "-f", &path(&manifest("workers", 3))]).await;
    assert!(out.contains("configured"), "{out}");
    let got = kubectl.run(&["get", "machinedeployments.cluster.x-k8s.io", "workers", "-o", "json"]).await;
    let got: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(
        (got["spec"]["replicas"].clone(), got["metadata"]["labels"][MUTATED].clone()),
        (json!(3), json!("UPDATE"))
    );

    let (ok, _, stderr) = kubectl.try_run(&["apply", "-f", &path(&manifest("forbidden-md", 1))]).await;
    assert!(!ok);
    assert!(
        stderr.contains(
            "admission webhook \"validate.md.webhook.test\" denied the request: the name forbidden-md is not allowed"
        ),
        "{stderr}"
    );
}
