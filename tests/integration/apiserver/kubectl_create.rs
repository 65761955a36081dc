//! kubectl's imperative commands (`kubectl create <kind> ...`) with the real kubectl: they send protobuf bodies,
//! which the server decodes for every built-in kind (docs/apiserver.md#protobuf); and aggregated discovery, which
//! kubectl reads when offered.

use serde_json::{Value, json};

use crate::support::{Kubectl, install_crds, start};

/// A raw request through the kube client (its TLS and token): status, Content-Type and the JSON body.
async fn get(client: &kube::Client, path: &str, accept: &str) -> (u16, String, Value) {
    let request = http::Request::builder().method("GET").uri(path).header("accept", accept).body(Vec::new()).unwrap();
    let response = client.send(request.map(kube::client::Body::from)).await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    (status, content_type, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// The stored object, as the server serves it as JSON.
async fn stored(client: &kube::Client, path: &str) -> Value {
    let (status, _, object) = get(client, path, "application/json").await;
    assert_eq!(status, 200, "{path}: {object}");
    object
}

/// `metadata` without what the server sets.
fn client_metadata(object: &Value) -> Value {
    let mut metadata = object["metadata"].clone();
    for key in ["uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"] {
        metadata.as_object_mut().unwrap().remove(key);
    }
    metadata
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_sends_protobuf_for_every_kind_and_each_field_is_stored() {
    let (server, client) = start().await;
    let kubectl = Kubectl::new(&server);

    // The protobuf path is the one taken (kubectl logs its request headers at -v=8).
    let (ok, _, log) = kubectl.try_run(&["create", "namespace", "team", "-v=8"]).await;
    assert!(ok, "{log}");
    let headers: Vec<&str> = log.lines().filter(|l| l.contains("Content-Type") || l.contains("Accept:")).collect();
    // It prefers protobuf back but accepts JSON, which is what it gets (see docs/apiserver.md#protobuf).
    let sent = |header: &str| headers.iter().any(|l| l.trim_end().ends_with(header));
    assert!(sent("Content-Type: application/vnd.kubernetes.protobuf"), "kubectl sent protobuf: {headers:#?}");
    assert!(sent("Accept: application/vnd.kubernetes.protobuf,application/json"), "{headers:#?}");
    assert!(sent("Content-Type: application/json"), "the answer is JSON: {headers:#?}");
    let ns = stored(&client, "/api/v1/namespaces/team").await;
    assert_eq!(client_metadata(&ns), json!({"name": "team"}));
    assert_eq!(ns["status"]["phase"], "Active");

    in_team(&kubectl, &["create", "secret", "generic", "s", "--from-literal=k=v", "--from-literal=empty="]).await;
    let secret = stored(&client, "/api/v1/namespaces/team/secrets/s").await;
    assert_eq!(client_metadata(&secret), json!({"name": "s", "namespace": "team"}));
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(secret["data"], json!({"k": "dg==", "empty": ""}));

    in_team(
        &kubectl,
        &[
            "create",
            "secret",
            "docker-registry",
            "reg",
            "--docker-server=r.example",
            "--docker-username=u",
            "--docker-password=p",
        ],
    )
    .await;
    let registry = stored(&client, "/api/v1/namespaces/team/secrets/reg").await;
    assert_eq!(registry["type"], "kubernetes.io/dockerconfigjson");
    let config = registry["data"][".dockerconfigjson"].as_str().unwrap();
    let config: Value = serde_json::from_slice(&base64_decode(config)).unwrap();
    assert_eq!(config["auths"]["r.example"]["username"], "u");

    in_team(&kubectl, &["create", "configmap", "c", "--from-literal=a=1", "--from-literal=b="]).await;
    let map = stored(&client, "/api/v1/namespaces/team/configmaps/c").await;
    assert_eq!(client_metadata(&map), json!({"name": "c", "namespace": "team"}));
    assert_eq!(map["data"], json!({"a": "1", "b": ""}), "an empty value is kept");

    // Every other built-in kind goes through the same generic decoder.
    in_team(&kubectl, &["create", "deployment", "web", "--image=nginx", "--replicas=2", "--port=80"]).await;
    let web = stored(&client, "/apis/apps/v1/namespaces/team/deployments/web").await;
    assert_eq!(client_metadata(&web), json!({"name": "web", "namespace": "team", "labels": {"app": "web"}}));
    assert_eq!(web["spec"]["replicas"], 2);
    assert_eq!(web["spec"]["selector"], json!({"matchLabels": {"app": "web"}}));
    assert_eq!(web["spec"]["template"]["metadata"]["labels"], json!({"app": "web"}));
    let containers = &web["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers.as_array().map(Vec::len), Some(1), "{containers}");
    assert_eq!((containers[0]["name"].as_str(), containers[0]["image"].as_str()), (Some("nginx"), Some("nginx")));
    // A non-pointer int without omitempty (containerPort) and an enum-like string (protocol) survive.
    assert_eq!(containers[0]["ports"][0]["containerPort"], 80, "{containers}");

    in_team(&kubectl, &["create", "serviceaccount", "robot"]).await;
    let robot = stored(&client, "/api/v1/namespaces/team/serviceaccounts/robot").await;
    assert_eq!(client_metadata(&robot), json!({"name": "robot", "namespace": "team"}));

    in_team(&kubectl, &["create", "role", "reader", "--verb=get", "--verb=list", "--resource=pods"]).await;
    let role = stored(&client, "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles/reader").await;
    assert_eq!(role["rules"], json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]));

    in_team(&kubectl, &["create", "rolebinding", "read", "--role=reader", "--serviceaccount=team:robot"]).await;
    let binding = stored(&client, "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings/read").await;
    assert_eq!(binding["roleRef"], json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}));
    assert_eq!(binding["subjects"], json!([{"kind": "ServiceAccount", "name": "robot", "namespace": "team"}]));

    // (`-n` before `--`, which starts the container's command.)
    kubectl.run(&["create", "job", "once", "-n", "team", "--image=busybox", "--", "echo", "hi"]).await;
    let job = stored(&client, "/apis/batch/v1/namespaces/team/jobs/once").await;
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(
        (&pod["containers"][0]["image"], &pod["containers"][0]["command"]),
        (&json!("busybox"), &json!(["echo", "hi"]))
    );

    kubectl.run(&["create", "priorityclass", "high", "--value=1000", "--description=important"]).await;
    let class = stored(&client, "/apis/scheduling.k8s.io/v1/priorityclasses/high").await;
    assert_eq!((&class["value"], &class["description"]), (&json!(1000), &json!("important")));
    assert_eq!(class["preemptionPolicy"], "PreemptLowerPriority");

    in_team(&kubectl, &["create", "quota", "q", "--hard=pods=10,requests.cpu=500m,requests.memory=1Gi"]).await;
    let quota = stored(&client, "/api/v1/namespaces/team/resourcequotas/q").await;
    assert_eq!(quota["spec"]["hard"], json!({"pods": "10", "requests.cpu": "500m", "requests.memory": "1Gi"}));

    // IntOrString in both forms, a schedule, an ingress rule's inlined `http` value.
    in_team(&kubectl, &["create", "service", "clusterip", "web", "--tcp=80:8080"]).await;
    let service = stored(&client, "/api/v1/namespaces/team/services/web").await;
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert_eq!(service["spec"]["selector"], json!({"app": "web"}));
    let port = &service["spec"]["ports"][0];
    assert_eq!((&port["port"], &port["targetPort"], &port["protocol"]), (&json!(80), &json!(8080), &json!("TCP")));

    in_team(&kubectl, &["create", "poddisruptionbudget", "web", "--selector=app=web", "--min-available=50%"]).await;
    let pdb = stored(&client, "/apis/policy/v1/namespaces/team/poddisruptionbudgets/web").await;
    assert_eq!(pdb["spec"], json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}));

    in_team(&kubectl, &["create", "cronjob", "nightly", "--image=busybox", "--schedule=0 3 * * *"]).await;
    let cron = stored(&client, "/apis/batch/v1/namespaces/team/cronjobs/nightly").await;
    assert_eq!(cron["spec"]["schedule"], "0 3 * * *");
    assert_eq!(cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"], "busybox");

    in_team(&kubectl, &["create", "ingress", "web", "--rule=web.example/=web:80"]).await;
    let ingress = stored(&client, "/apis/networking.k8s.io/v1/namespaces/team/ingresses/web").await;
    assert_eq!(
        ingress["spec"]["rules"],
        json!([{"host": "web.example", "http": {"paths": [{"path": "/", "pathType": "Exact",
            "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}])
    );

    // And what kubectl created, it deletes.
    kubectl.run(&["delete", "configmap", "c", "-n", "team"]).await;
    let (status, _, _) = get(&client, "/api/v1/namespaces/team/configmaps/c", "application/json").await;
    assert_eq!(status, 404);
}

/// Runs kubectl in namespace `team`.
async fn in_team(kubectl: &Kubectl, args: &[&str]) -> String {
    let args: Vec<&str> = args.iter().chain(["-n", "team"].iter()).copied().collect();
    kubectl.run(&args).await
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).unwrap()
}

/// What kubectl 1.3x sends for `/api` and `/apis`.
const KUBECTL_DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
     application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_discovery_is_served_when_asked_for() {
    let (server, client) = start().await;
    install_crds(&client).await;
    let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

    let (status, content_type, core) = get(&client, "/api", KUBECTL_DISCOVERY).await;
    assert_eq!((status, content_type.as_str()), (200, aggregated));
    assert_eq!(
        (core["kind"].as_str(), core["apiVersion"].as_str()),
        (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io/v2"))
    );
    let v1 = &core["items"][0]["versions"][0];
    assert_eq!((v1["version"].as_str(), v1["freshness"].as_str()), (Some("v1"), Some("Current")));
    let resource = |version: &Value, name: &str| -> Value {
        version["resources"].as_array().unwrap().iter().find(|r| r["resource"] == name).cloned().unwrap()
    };
    assert_eq!(
        resource(v1, "pods"),
        json!({
            "resource": "pods", "responseKind": {"group": "", "version": "", "kind": "Pod"}, "scope": "Namespaced",
            "singularResource": "pod",
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "shortNames": ["po"], "categories": ["all"],
            "subresources": [
                {"subresource": "status", "responseKind": {"group": "", "version": "", "kind": "Pod"},
                 "verbs": ["get", "patch", "update"]},
                {"subresource": "eviction", "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                 "verbs": ["create"]},
            ],
        })
    );
    assert_eq!(resource(v1, "namespaces")["scope"], "Cluster");

    let (status, content_type, apis) = get(&client, "/apis", KUBECTL_DISCOVERY).await;
    assert_eq!((status, content_type.as_str()), (200, aggregated));
    let group = |name: &str| -> Value {
        apis["items"].as_array().unwrap().iter().find(|g| g["metadata"]["name"] == name).cloned().unwrap()
    };
    assert!(apis["items"].as_array().unwrap().iter().all(|g| g["metadata"]["name"] != ""), "no core group in /apis");
    let deployments = resource(&group("apps")["versions"][0], "deployments");
    assert_eq!(
        deployments["subresources"][1]["responseKind"],
        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    // CRDs are included, every served version, the preferred first, with their kinds' group and version named.
    let capi = group("cluster.x-k8s.io");
    let versions: Vec<&str> =
        capi["versions"].as_array().unwrap().iter().map(|v| v["version"].as_str().unwrap()).collect();
    assert_eq!(versions[0], "v1beta2");
    assert!(versions.contains(&"v1beta1"), "{versions:?}");
    let machines = resource(&capi["versions"][0], "machines");
    assert_eq!(machines["responseKind"], json!({"group": "cluster.x-k8s.io", "version": "v1beta2", "kind": "Machine"}));
    assert_eq!(machines["shortNames"], json!(["ma"]));
    assert!(machines["categories"].as_array().unwrap().contains(&json!("cluster-api")), "{machines}");
    let mcd = resource(&group("machine.sapcloud.io")["versions"][0], "machinedeployments");
    let subresources: Vec<&str> =
        mcd["subresources"].as_array().unwrap().iter().map(|s| s["subresource"].as_str().unwrap()).collect();
    assert_eq!(subresources, ["status", "scale"]);

    // Plain JSON still gets the plain documents.
    let (_, content_type, plain) = get(&client, "/apis", "application/json").await;
    assert_eq!((content_type.as_str(), plain["kind"].as_str()), ("application/json", Some("APIGroupList")));
    let (_, _, plain) = get(&client, "/api", "application/json").await;
    assert_eq!(plain["kind"], "APIVersions");

    // kubectl takes the aggregated documents: /api and /apis and no per-group-version requests.
    let kubectl = Kubectl::new(&server);
    let (ok, out, log) = kubectl.try_run(&["api-resources", "-v=6"]).await;
    assert!(ok, "{log}");
    assert!(
        out.lines().any(|l| l.starts_with("machinedeployments") && l.contains("machine.sapcloud.io/v1alpha1")),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("deployments") && l.contains("apps/v1")), "{out}");
    assert!(log.contains("/apis?timeout") || log.contains("/apis "), "{log}");
    assert!(!log.contains("/apis/apps/v1"), "kubectl used the aggregated documents: {log}");
}
