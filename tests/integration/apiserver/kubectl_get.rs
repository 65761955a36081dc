//! Server-side printing seen through the real `kubectl get`: the columns of CRDs' `additionalPrinterColumns` and
//! of kube's built-in printers, `-o wide`, `-A`, and `-w`; and the raw `Table` responses behind them.

use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use regex::Regex;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{Kubectl, install_crds, start};

const TABLE: &str =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// kubectl's table output as rows of cells: each line is cut at the offsets where the header's columns start
/// (tabwriter aligns every cell under its header), so empty cells stay empty strings.
fn parse_table(output: &str) -> Vec<Vec<String>> {
    let mut lines = output.lines();
    let Some(header) = lines.next() else { return Vec::new() };
    // Header names are words separated by single spaces; columns by at least three.
    let starts: Vec<usize> = Regex::new(r"\S+(?: \S+)*").unwrap().find_iter(header).map(|m| m.start()).collect();
    let cut = |line: &str| -> Vec<String> {
        starts
            .iter()
            .enumerate()
            .map(|(i, start)| {
                let end = starts.get(i + 1).copied().unwrap_or(usize::MAX).min(line.len());
                line.get((*start).min(end)..end).unwrap_or_default().trim().to_string()
            })
            .collect()
    };
    std::iter::once(header).chain(lines).map(cut).collect()
}

/// Asserts rows cell by cell; `~regex` cells match a regular expression (ages vary).
fn assert_rows(output: &str, expected: &[&[&str]]) {
    let rows = parse_table(output);
    assert_eq!(rows.len(), expected.len(), "row count of\n{output}");
    for (row, want) in rows.iter().zip(expected) {
        assert_eq!(row.len(), want.len(), "columns of {row:?} in\n{output}");
        for (cell, want) in row.iter().zip(want.iter()) {
            match want.strip_prefix('~') {
                Some(pattern) => {
                    let re = Regex::new(&format!("^(?:{pattern})$")).unwrap();
                    assert!(re.is_match(cell), "{cell:?} does not match {pattern:?} in {row:?} of\n{output}");
                }
                None => assert_eq!(cell, want, "in {row:?} of\n{output}"),
            }
        }
    }
}

/// A young age, as kubectl prints it.
const AGE: &str = "~[0-9]+s";

fn dynamic(client: &kube::Client, group: &str, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), "default", &resource)
}

/// Creates an object, then writes its status (the main endpoint drops status).
async fn create_with_status(api: &Api<DynamicObject>, body: Value, status: Option<Value>) {
    let obj: DynamicObject = serde_json::from_value(body).unwrap();
    let name = obj.metadata.name.clone().unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    if let Some(status) = status {
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({ "status": status }))).await.unwrap();
    }
}

fn machine_deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"class": {"kind": "MachineClass", "name": "c"}}}}
    })
}

#[tokio::test]
async fn kubectl_get_prints_custom_resource_columns() {
    let (server, client) = start().await;
    install_crds(&client).await;
    let kubectl = Kubectl::new(&server);

    let mcd = dynamic(&client, "machine.sapcloud.io", "v1alpha1", "MachineDeployment", "machinedeployments");
    let status = json!({"readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1, "replicas": 2});
    create_with_status(&mcd, machine_deployment("web", 2), Some(status)).await;
    let out = kubectl.run(&["get", "mcd"]).await;
    assert_rows(
        &out,
        &[&["NAME", "READY", "DESIRED", "UP-TO-DATE", "AVAILABLE", "AGE"], &["web", "1", "2", "2", "1", AGE]],
    );
    let out = kubectl.run(&["get", "mcd", "web"]).await;
    assert_rows(
        &out,
        &[&["NAME", "READY", "DESIRED", "UP-TO-DATE", "AVAILABLE", "AGE"], &["web", "1", "2", "2", "1", AGE]],
    );

    let machines = dynamic(&client, "machine.sapcloud.io", "v1alpha1", "Machine", "machines");
    let m1 = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": "web-m1", "labels": {"node": "node-1"}},
        "spec": {"class": {"kind": "MachineClass", "name": "c"}, "providerID": "aws:///eu-west-1/i-1"}
    });
    create_with_status(&machines, m1, Some(json!({"currentStatus": {"phase": "Running"}}))).await;
    let m2 = json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine", "metadata": {"name": "web-m2"},
                    "spec": {"class": {"kind": "MachineClass", "name": "c"}}});
    create_with_status(&machines, m2, None).await;
    let out = kubectl.run(&["get", "machines.machine.sapcloud.io", "-o", "wide"]).await;
    assert_rows(
        &out,
        &[
            &["NAME", "STATUS", "AGE", "NODE", "PROVIDERID"],
            &["web-m1", "Running", AGE, "node-1", "aws:///eu-west-1/i-1"],
            // Missing values are empty cells, as on a real cluster.
            &["web-m2", "", AGE, "", ""],
        ],
    );
    let out = kubectl.run(&["get", "mc"]).await;
    assert_rows(
        &out,
        &[&["NAME", "STATUS", "AGE", "NODE"], &["web-m1", "Running", AGE, "node-1"], &["web-m2", "", AGE, ""]],
    );
    // --sort-by asks for whole objects in the rows (includeObject=Object).
    let out = kubectl.run(&["get", "mc", "--sort-by=.metadata.labels.node", "--no-headers"]).await;
    assert_eq!(out.lines().map(|l| words(l)[0]).collect::<Vec<_>>(), ["web-m2", "web-m1"], "{out}");
    // -A adds the namespace from each row's PartialObjectMetadata.
    let out = kubectl.run(&["get", "mc", "-A"]).await;
    assert_rows(
        &out,
        &[
            &["NAMESPACE", "NAME", "STATUS", "AGE", "NODE"],
            &["default", "web-m1", "Running", AGE, "node-1"],
            &["default", "web-m2", "", AGE, ""],
        ],
    );

    let capi = dynamic(&client, "cluster.x-k8s.io", "v1beta2", "Machine", "machines");
    let machine = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": {"name": "c1-md-0-x"},
        "spec": {"clusterName": "c1", "version": "v1.31.2", "bootstrap": {"dataSecretName": "boot"},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachine",
                                       "name": "c1-md-0-x"}}
    });
    let condition = |kind: &str, status: &str| {
        json!({"type": kind, "status": status, "reason": "Test", "message": "",
               "lastTransitionTime": "2025-01-01T00:00:00Z"})
    };
    let conditions = [condition("Ready", "True"), condition("Available", "False"), condition("UpToDate", "True")];
    let status = json!({"phase": "Running", "nodeRef": {"name": "node-1"}, "conditions": conditions});
    create_with_status(&capi, machine, Some(status)).await;
    let out = kubectl.run(&["get", "machines.cluster.x-k8s.io"]).await;
    assert_rows(
        &out,
        &[
            &[
                "NAME",
                "CLUSTER",
                "NODE NAME",
                "FAILURE DOMAIN",
                "READY",
                "AVAILABLE",
                "UP-TO-DATE",
                "PHASE",
                "AGE",
                "VERSION",
            ],
            &["c1-md-0-x", "c1", "node-1", "", "True", "False", "True", "Running", AGE, "v1.31.2"],
        ],
    );
    // The older served version has its own columns.
    let out = kubectl.run(&["get", "machines.v1beta1.cluster.x-k8s.io"]).await;
    assert_rows(
        &out,
        &[
            &["NAME", "CLUSTER", "NODENAME", "PROVIDERID", "PHASE", "AGE", "VERSION"],
            &["c1-md-0-x", "c1", "node-1", "", "Running", AGE, "v1.31.2"],
        ],
    );
}

#[tokio::test]
async fn kubectl_get_prints_builtin_columns() {
    let (server, client) = start().await;
    install_crds(&client).await;
    let kubectl = Kubectl::new(&server);

    let nodes: Api<Node> = Api::all(client.clone());
    let n1: Node = serde_json::from_value(
        json!({"metadata": {"name": "node-1", "labels": {"node-role.kubernetes.io/worker": ""}}}),
    )
    .unwrap();
    nodes.create(&PostParams::default(), &n1).await.unwrap();
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}],
                                   "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                                   "nodeInfo": {"kubeletVersion": "v1.31.2", "osImage": "Garden Linux",
                                                "kernelVersion": "6.6", "containerRuntimeVersion": "containerd://1.7",
                                                "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": "",
                                                "operatingSystem": "linux", "architecture": "amd64"}}});
    nodes.patch_status("node-1", &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    let n2: Node =
        serde_json::from_value(json!({"metadata": {"name": "node-2"}, "spec": {"unschedulable": true}})).unwrap();
    nodes.create(&PostParams::default(), &n2).await.unwrap();
    let out = kubectl.run(&["get", "nodes"]).await;
    assert_rows(
        &out,
        &[
            &["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
            &["node-1", "Ready", "worker", AGE, "v1.31.2"],
            &["node-2", "Unknown,SchedulingDisabled", "<none>", AGE, ""],
        ],
    );
    let out = kubectl.run(&["get", "nodes", "-o", "wide"]).await;
    assert_rows(
        &out,
        &[
            &[
                "NAME",
                "STATUS",
                "ROLES",
                "AGE",
                "VERSION",
                "INTERNAL-IP",
                "EXTERNAL-IP",
                "OS-IMAGE",
                "KERNEL-VERSION",
                "CONTAINER-RUNTIME",
            ],
            &[
                "node-1",
                "Ready",
                "worker",
                AGE,
                "v1.31.2",
                "10.0.0.1",
                "<none>",
                "Garden Linux",
                "6.6",
                "containerd://1.7",
            ],
            &[
                "node-2",
                "Unknown,SchedulingDisabled",
                "<none>",
                AGE,
                "",
                "<none>",
                "<none>",
                "<unknown>",
                "<unknown>",
                "<unknown>",
            ],
        ],
    );

    let out = kubectl.run(&["get", "ns"]).await;
    assert_rows(
        &out,
        &[
            &["NAME", "STATUS", "AGE"],
            &["default", "Active", AGE],
            &["kube-node-lease", "Active", AGE],
            &["kube-public", "Active", AGE],
            &["kube-system", "Active", AGE],
        ],
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "app:1"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let out = kubectl.run(&["get", "pods", "-o", "wide"]).await;
    assert_rows(
        &out,
        &[
            &["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"],
            &["p", "0/1", "Pending", "0", AGE, "<none>", "<none>", "<none>", "<none>"],
        ],
    );

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"a": "1", "b": "2"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let out = kubectl.run(&["get", "cm"]).await;
    assert_rows(&out, &[&["NAME", "DATA", "AGE"], &["settings", "2", AGE]]);

    let out = kubectl.run(&["get", "crd", "machines.machine.sapcloud.io"]).await;
    assert_rows(
        &out,
        &[&["NAME", "CREATED AT"], &["machines.machine.sapcloud.io", r"~\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"]],
    );
}

/// Reads kubectl's output lines until `done` holds for the lines read so far, or fails after ten seconds.
async fn read_until<R: tokio::io::AsyncBufRead + Unpin>(
    lines: &mut tokio::io::Lines<R>,
    seen: &mut Vec<String>,
    done: impl Fn(&[String]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done(seen) {
        match tokio::time::timeout_at(deadline, lines.next_line()).await {
            Ok(Ok(Some(line))) => seen.push(line),
            Ok(Ok(None)) => panic!("kubectl ended; it printed {seen:#?}"),
            Ok(Err(e)) => panic!("reading kubectl's output: {e}"),
            Err(_) => panic!("timed out; kubectl printed {seen:#?}"),
        }
    }
}

fn words(line: &str) -> Vec<&str> {
    Regex::new(r"\s{2,}").unwrap().split(line.trim()).collect::<Vec<_>>()
}

#[tokio::test]
async fn kubectl_get_watch_prints_rows_then_changes() {
    let (server, client) = start().await;
    install_crds(&client).await;
    let kubectl = Kubectl::new(&server);
    let mcd = dynamic(&client, "machine.sapcloud.io", "v1alpha1", "MachineDeployment", "machinedeployments");
    create_with_status(&mcd, machine_deployment("web", 2), Some(json!({"readyReplicas": 2}))).await;

    let mut child =
        kubectl.command(&["get", "mcd", "-w"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    read_until(&mut lines, &mut seen, |seen| seen.len() >= 2).await;
    assert_eq!(words(&seen[0]), ["NAME", "READY", "DESIRED", "UP-TO-DATE", "AVAILABLE", "AGE"]);
    let first = words(&seen[1]);
    assert_eq!(first[..3], ["web", "2", "2"], "{seen:#?}");

    // A change to the watched object prints a new row, without a second header.
    mcd.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await.unwrap();
    read_until(&mut lines, &mut seen, |seen| seen.len() >= 3).await;
    assert_eq!(words(&seen[2])[..3], ["web", "2", "5"], "{seen:#?}");

    // So does a new object.
    create_with_status(&mcd, machine_deployment("api", 1), None).await;
    read_until(&mut lines, &mut seen, |seen| seen.len() >= 4).await;
    assert_eq!(words(&seen[3])[0], "api", "{seen:#?}");
    assert!(Regex::new(r"^\d+s$").unwrap().is_match(words(&seen[3]).last().unwrap()), "{seen:#?}");

    child.kill().await.unwrap();

    // Watching one object: kubectl gets it, then skips the watch's initial ADDED event and prints changes.
    let mut child =
        kubectl.command(&["get", "mcd", "api", "-w"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    read_until(&mut lines, &mut seen, |seen| seen.len() >= 2).await;
    assert_eq!(words(&seen[0])[0], "NAME");
    assert_eq!(words(&seen[1])[..2], ["api", "1"], "{seen:#?}");
    mcd.patch("api", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await.unwrap();
    read_until(&mut lines, &mut seen, |seen| seen.len() >= 3).await;
    assert_eq!(words(&seen[2])[..2], ["api", "4"], "{seen:#?}");
    child.kill().await.unwrap();
}

/// A GET with an Accept header; the status code and the body as JSON.
async fn get(client: &kube::Client, path: &str, accept: &str) -> (u16, Value) {
    let request = http::Request::builder().uri(path).header("accept", accept).body(Vec::new()).unwrap();
    let response = client.send(request.map(kube::client::Body::from)).await.unwrap();
    let status = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn column_names(table: &Value) -> Vec<&str> {
    table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn table_responses_have_the_shape_of_kube_apiserver() {
    let (_server, client) = start().await;

    let (code, list) = get(&client, "/api/v1/namespaces", TABLE).await;
    assert_eq!(code, 200);
    assert_eq!((list["kind"].as_str(), list["apiVersion"].as_str()), (Some("Table"), Some("meta.k8s.io/v1")));
    assert!(list["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()));
    assert_eq!(column_names(&list), ["Name", "Status", "Age"]);
    assert_eq!(list["columnDefinitions"][0]["format"], "name");
    let rows = list["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0]["cells"].as_array().unwrap()[0..2], [json!("default"), json!("Active")]);
    assert_eq!(rows[0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(rows[0]["object"]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(rows[0]["object"]["metadata"]["name"], "default");

    let (_, none) = get(&client, "/api/v1/namespaces?includeObject=None", TABLE).await;
    assert_eq!(none["rows"][0]["object"], Value::Null);
    let (_, full) = get(&client, "/api/v1/namespaces?includeObject=Object", TABLE).await;
    assert_eq!(full["rows"][0]["object"]["kind"], "Namespace");
    assert_eq!(full["rows"][0]["object"]["status"]["phase"], "Active");
    let (code, bad) = get(&client, "/api/v1/namespaces?includeObject=Everything", TABLE).await;
    assert_eq!(code, 400);
    assert!(bad["message"].as_str().unwrap().contains("includeObject: Unsupported value: \"Everything\""), "{bad}");
    // Without a table in the Accept header, includeObject means nothing.
    let (code, plain) = get(&client, "/api/v1/namespaces?includeObject=Everything", "application/json").await;
    assert_eq!((code, plain["kind"].as_str()), (200, Some("NamespaceList")));

    let (_, beta) = get(&client, "/api/v1/namespaces", "application/json;as=Table;v=v1beta1;g=meta.k8s.io").await;
    assert_eq!(beta["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(beta["rows"][0]["object"]["apiVersion"], "meta.k8s.io/v1beta1");

    let (_, page) = get(&client, "/api/v1/namespaces?limit=3", TABLE).await;
    assert_eq!(page["rows"].as_array().unwrap().len(), 3);
    assert_eq!(page["metadata"]["remainingItemCount"], 1);
    assert!(page["metadata"]["continue"].is_string());

    let (code, one) = get(&client, "/api/v1/namespaces/kube-system", TABLE).await;
    assert_eq!(code, 200);
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
    assert_eq!(one["rows"][0]["cells"][0], "kube-system");
    assert!(one["metadata"]["resourceVersion"].is_string());
    let (code, _) = get(&client, "/api/v1/namespaces/nope", TABLE).await;
    assert_eq!(code, 404);

    // A watch: every event's object is a one-row table; only the first carries the column definitions.
    let request = http::Request::builder()
        .uri("/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=10")
        .header("accept", TABLE)
        .body(Vec::new())
        .unwrap();
    let response = client.send(request.map(kube::client::Body::from)).await.unwrap();
    let mut body = http_body_util::BodyStream::new(response.into_body());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["a", "b"] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let mut buffer = Vec::new();
    let mut events: Vec<Value> = Vec::new();
    while events.len() < 2 {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.next()).await.unwrap().unwrap().unwrap();
        if let Ok(data) = frame.into_data() {
            buffer.extend_from_slice(&data);
        }
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            events.push(serde_json::from_slice(&line).unwrap());
        }
    }
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[0]["object"]["kind"], "Table");
    assert_eq!(column_names(&events[0]["object"]), ["Name", "Data", "Age"]);
    assert_eq!(events[0]["object"]["rows"][0]["cells"].as_array().unwrap()[0..2], [json!("a"), json!(1)]);
    assert_eq!(events[1]["object"]["columnDefinitions"], Value::Null);
    assert_eq!(events[1]["object"]["rows"][0]["cells"][0], "b");
    assert_eq!(events[1]["object"]["rows"][0]["object"]["kind"], "PartialObjectMetadata");
}
