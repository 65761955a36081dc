//! The kubectl workflow a user runs against `mcm dev`, end to end with the real kubectl: upstream CRDs applied and
//! awaited, label/annotate/patch/scale/wait, foreground deletion, cordon and drain under a PodDisruptionBudget,
//! api-resources and explain, server-side apply with its conflicts.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{Kubectl, start, wait_until};

fn root() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

const DEPLOYMENT: &str = r#"apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineDeployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {name: web}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
  template:
    metadata:
      labels: {name: web}
    spec:
      class: {kind: MachineClass, name: small}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_crds_apply_and_become_established() {
    let (server, _) = start().await;
    let kubectl = Kubectl::new(&server);
    let capi = format!("{}/third_party/cluster-api/crds/", root());
    let mcm = format!("{}/third_party/machine-controller-manager/crds/", root());
    let out = kubectl.run(&["apply", "-f", &capi, "-f", &mcm]).await;
    assert!(out.contains("customresourcedefinition.apiextensions.k8s.io/machines.cluster.x-k8s.io created"), "{out}");
    let waited = kubectl.run(&["wait", "--for", "condition=established", "crd", "--all", "--timeout=60s"]).await;
    assert_eq!(waited.lines().count(), 10, "{waited}");
    let resources = kubectl.run(&["api-resources", "--api-group=machine.sapcloud.io"]).await;
    assert!(resources.lines().any(|l| l.starts_with("machinedeployments") && l.contains(" mcd ")), "{resources}");
    let again = kubectl.run(&["apply", "-f", &mcm]).await;
    assert!(again.lines().all(|l| l.ends_with("unchanged")), "a second apply changes nothing: {again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_annotate_patch_scale_wait_and_explain() {
    let (server, client) = start().await;
    crate::support::install_crds(&client).await;
    let kubectl = Kubectl::new(&server);
    let manifest = kubectl.file("mcd.yaml", DEPLOYMENT);
    kubectl.run(&["create", "-f", manifest.to_str().unwrap()]).await;
    kubectl.run(&["label", "mcd", "web", "tier=gold"]).await;
    kubectl.run(&["annotate", "mcd", "web", "example.com/note=hello"]).await;
    kubectl.run(&["patch", "mcd", "web", "--type", "merge", "-p", r#"{"spec":{"minReadySeconds":5}}"#]).await;
    kubectl
        .run(&["patch", "mcd", "web", "--type", "json", "-p", r#"[{"op":"add","path":"/spec/paused","value":true}]"#])
        .await;
    let (ok, _, stderr) = kubectl
        .try_run(&[
            "patch",
            "mcd",
            "web",
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/spec/nope","value":1}]"#,
        ])
        .await;
    assert!(!ok && stderr.contains("could not be applied"), "a JSON patch of a missing path says why: {stderr}");
    let out = kubectl.run(&["scale", "mcd", "web", "--replicas=4"]).await;
    assert!(out.contains("scaled"), "{out}");
    let mcd: Value = serde_json::from_str(&kubectl.run(&["get", "mcd", "web", "-o", "json"]).await).unwrap();
    assert_eq!(mcd["metadata"]["labels"]["tier"], "gold");
    assert_eq!(mcd["metadata"]["annotations"]["example.com/note"], "hello");
    assert_eq!(mcd["spec"]["minReadySeconds"], 5);
    assert_eq!(mcd["spec"]["paused"], true);
    assert_eq!(mcd["spec"]["replicas"], 4);

    // A strategic merge patch on a built-in kind (kubectl's default patch type).
    let cm = kubectl.file("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: \"1\"}\n");
    kubectl.run(&["apply", "-f", cm.to_str().unwrap()]).await;
    // kubectl's imperative generators send protobuf, decoded for any built-in kind: a ConfigMap's (its empty
    // namespace is the request's) and a Deployment's.
    kubectl.run(&["create", "configmap", "other", "--from-literal=a=1"]).await;
    let other: Value = serde_json::from_str(&kubectl.run(&["get", "cm", "other", "-o", "json"]).await).unwrap();
    assert_eq!((other["metadata"]["namespace"].clone(), other["data"].clone()), (json!("default"), json!({"a": "1"})));
    kubectl.run(&["create", "deployment", "web", "--image=nginx"]).await;
    let web: Value = serde_json::from_str(&kubectl.run(&["get", "deploy", "web", "-o", "json"]).await).unwrap();
    assert_eq!(web["spec"]["template"]["spec"]["containers"][0]["image"], "nginx", "{web}");
    kubectl.run(&["patch", "configmap", "settings", "-p", r#"{"data":{"b":"2"}}"#]).await;
    let cm: Value = serde_json::from_str(&kubectl.run(&["get", "cm", "settings", "-o", "json"]).await).unwrap();
    assert_eq!(cm["data"], json!({"a": "1", "b": "2"}));

    // `kubectl wait --for=condition=` sees a condition written through the status subresource.
    let waiting = kubectl.command(&["wait", "--for=condition=Available", "mcd/web", "--timeout=30s"]).output();
    let writer = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let status = json!({"status": {"conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]}});
        let api: Api<mcm::api::mcm::MachineDeployment> = Api::namespaced(client.clone(), "default");
        api.patch_status("web", &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    };
    let (output, ()) = tokio::join!(waiting, writer);
    let output = output.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("condition met"));

    let explained = kubectl.run(&["explain", "mcd.spec.replicas"]).await;
    assert!(explained.contains("FIELD: replicas"), "{explained}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_deletion_and_server_side_apply() {
    let (server, client) = start().await;
    crate::support::install_crds(&client).await;
    let kubectl = Kubectl::new(&server);
    let sets: Api<mcm::api::mcm::MachineSet> = Api::namespaced(client.clone(), "default");
    let set = sets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": {"replicas": 1}})).unwrap(),
        )
        .await
        .unwrap();
    let machine = json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine", "metadata": {"name": "s-1",
        "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "name": "s",
                             "uid": set.metadata.uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"class": {"kind": "MachineClass", "name": "small"}}});
    let machines: Api<mcm::api::mcm::Machine> = Api::namespaced(client.clone(), "default");
    machines.create(&PostParams::default(), &serde_json::from_value(machine).unwrap()).await.unwrap();
    kubectl.run(&["delete", "mcs", "s", "--cascade=foreground", "--timeout=30s"]).await;
    assert!(machines.get_opt("s-1").await.unwrap().is_none() && sets.get_opt("s").await.unwrap().is_none());

    let manifest = kubectl.file("mcd.yaml", DEPLOYMENT);
    let first = kubectl.run(&["apply", "--server-side", "-f", manifest.to_str().unwrap()]).await;
    assert!(first.contains("serverside-applied"), "{first}");
    kubectl.run(&["apply", "--server-side", "-f", manifest.to_str().unwrap()]).await;
    let changed = kubectl.file("mcd2.yaml", &DEPLOYMENT.replace("replicas: 2", "replicas: 5"));
    let (ok, _, stderr) = kubectl
        .try_run(&["apply", "--server-side", "--field-manager=someone-else", "-f", changed.to_str().unwrap()])
        .await;
    assert!(!ok && stderr.contains("conflict"), "another manager's change conflicts: {stderr}");
    kubectl
        .run(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=someone-else",
            "-f",
            changed.to_str().unwrap(),
        ])
        .await;
    let replicas = kubectl.run(&["get", "mcd", "web", "-o", "jsonpath={.spec.replicas}"]).await;
    assert_eq!(replicas, "5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_and_drain_respect_a_pod_disruption_budget() {
    let (server, client) = start().await;
    let kubectl = Kubectl::new(&server);
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap())
        .await
        .unwrap();
    // A real owner: the garbage collector deletes Pods whose owner does not exist.
    let replica_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> = Api::namespaced(client.clone(), "default");
    let owner = json!({"metadata": {"name": "rs"}, "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
    let uid = replica_sets
        .create(&PostParams::default(), &serde_json::from_value(owner).unwrap())
        .await
        .unwrap()
        .metadata
        .uid;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["p1", "p2"] {
        let pod = json!({"metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "name": "rs", "uid": uid, "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}});
        pods.create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
        let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(ready)).await.unwrap();
    }
    let pdb = kubectl.file(
        "pdb.yaml",
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web}\nspec:\n  minAvailable: 2\n  selector:\n    matchLabels: {app: web}\n",
    );
    kubectl.run(&["apply", "-f", pdb.to_str().unwrap()]).await;

    kubectl.run(&["cordon", "n1"]).await;
    assert_eq!(nodes.get("n1").await.unwrap().spec.unwrap().unschedulable, Some(true));

    let mut drain = kubectl.command(&["drain", "n1", "--ignore-daemonsets", "--timeout=60s"]);
    drain.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let child = drain.spawn().unwrap();
    // While the budget needs both pods, evictions are refused and retried; both pods stay.
    wait_until("the budget to refuse an eviction", Duration::from_secs(20), || async {
        let status = Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(client.clone(), "default")
            .get("web")
            .await
            .unwrap()
            .status;
        status.is_some_and(|s| s.disruptions_allowed == Some(0)).then_some(())
    })
    .await;
    assert_eq!(pods.list(&Default::default()).await.unwrap().items.len(), 2);
    kubectl.run(&["patch", "pdb", "web", "--type", "merge", "-p", r#"{"spec":{"minAvailable":0}}"#]).await;
    let output = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("node/n1 drained"), "{stdout}");
    assert!(pods.list(&Default::default()).await.unwrap().items.is_empty(), "every pod was evicted");
}
