use serde_json::{Value, json};

use super::*;
use crate::apiserver::resources::{Registry, from_crd};

const SECOND: i64 = 1_000_000_000;

fn now() -> jiff::Timestamp {
    "2025-01-10T12:00:00Z".parse().unwrap()
}

/// `now` minus `seconds`, as an RFC 3339 timestamp.
fn ago(seconds: i64) -> String {
    let t = now().checked_sub(jiff::SignedDuration::from_secs(seconds)).unwrap();
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn crd_printer(file: &str, version: &str) -> Printer {
    let text = std::fs::read_to_string(format!("{}/crds/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let crd: Value = serde_yaml::from_str(&text).unwrap();
    Printer::new(&from_crd(&crd).unwrap(), version)
}

fn builtin_printer(group: &str, version: &str, resource: &str) -> Printer {
    Printer::new(&Registry::builtin().lookup(group, version, resource).unwrap(), version)
}

fn headers(printer: &Printer) -> Vec<(String, i64)> {
    printer.columns().iter().map(|c| (c.name.clone(), c.priority)).collect()
}

fn cells(printer: &Printer, obj: &Value) -> Vec<Value> {
    printer.cells(obj, now()).cells
}

#[test]
fn accept_headers_negotiate_like_kube_apiserver() {
    let kubectl = concat!(
        "application/json;as=Table;v=v1;g=meta.k8s.io,",
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io,",
        "application/json"
    );
    let cases: &[(&str, Option<TableVersion>)] = &[
        (kubectl, Some(TableVersion::V1)),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json", Some(TableVersion::V1Beta1)),
        ("application/json; as=Table; g=meta.k8s.io; v=v1", Some(TableVersion::V1)),
        ("*/*;as=Table;v=v1;g=meta.k8s.io", Some(TableVersion::V1)),
        ("application/json", None),
        ("", None),
        ("*/*", None),
        // The first clause the server can satisfy wins; preference follows quality.
        ("application/json,application/json;as=Table;v=v1;g=meta.k8s.io", None),
        ("application/json;q=0.5,application/json;as=Table;v=v1;g=meta.k8s.io", Some(TableVersion::V1)),
        ("application/json;as=Table;v=v1;g=meta.k8s.io;q=0,application/json", None),
        // Tables this server cannot produce are skipped.
        (
            concat!(
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,",
                "application/json;as=Table;v=v1;g=meta.k8s.io"
            ),
            Some(TableVersion::V1),
        ),
        ("application/yaml;as=Table;v=v1;g=meta.k8s.io,application/json", None),
        ("application/json;as=Table;v=v2;g=meta.k8s.io,application/json", None),
        ("application/json;as=Table;v=v1;g=example.com", None),
        // Metadata-only answers are served too: a first metadata clause wins over a later Table.
        (
            concat!(
                "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,",
                "application/json;as=Table;v=v1;g=meta.k8s.io"
            ),
            None,
        ),
    ];
    for (accept, expected) in cases {
        assert_eq!(negotiate(accept), *expected, "{accept}");
        assert_eq!(wants_table(accept), expected.is_some(), "{accept}");
    }
}

#[test]
fn include_object_is_checked_only_for_tables() {
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let options = |accept, include| TableOptions::from_request(accept, include);
    assert_eq!(options(Some(table), None).unwrap().unwrap().include, IncludeObject::Metadata);
    assert_eq!(options(Some(table), Some("None")).unwrap().unwrap().include, IncludeObject::None);
    assert_eq!(options(Some(table), Some("Object")).unwrap().unwrap().include, IncludeObject::Object);
    assert_eq!(options(Some("application/json"), Some("Bogus")).unwrap(), None);
    assert_eq!(options(None, None).unwrap(), None);
    let err = options(Some(table), Some("Bogus")).unwrap_err();
    assert_eq!(
        err.to_string(),
        concat!(
            "Unable to convert to Table as requested: includeObject: Unsupported value: \"Bogus\": ",
            "supported values: \"Metadata\", \"None\", \"Object\""
        )
    );
}

#[test]
fn human_duration_follows_kubernetes() {
    let m = 60 * SECOND;
    let h = 60 * m;
    let d = 24 * h;
    let y = 365 * d;
    let cases: &[(i64, &str)] = &[
        (0, "0s"),
        (-SECOND, "0s"),
        (-SECOND - SECOND / 2, "0s"),
        (-2 * SECOND, "<invalid>"),
        (SECOND / 2, "0s"),
        (59 * SECOND, "59s"),
        (90 * SECOND, "90s"),
        (119 * SECOND, "119s"),
        (2 * m, "2m"),
        (2 * m + 30 * SECOND, "2m30s"),
        (5 * m + 30 * SECOND, "5m30s"),
        (9 * m + 59 * SECOND, "9m59s"),
        (10 * m, "10m"),
        (10 * m + 30 * SECOND, "10m"),
        (179 * m, "179m"),
        (3 * h, "3h"),
        (3 * h + 45 * m, "3h45m"),
        (7 * h + 59 * m + 59 * SECOND, "7h59m"),
        (8 * h, "8h"),
        (47 * h + 59 * m, "47h"),
        (48 * h, "2d"),
        (2 * d + 3 * h, "2d3h"),
        (7 * d + 23 * h, "7d23h"),
        (8 * d, "8d"),
        (729 * d, "729d"),
        (730 * d, "2y"),
        (2 * y + 5 * d, "2y5d"),
        (8 * y - d, "7y364d"),
        (8 * y, "8y"),
        (8 * y + 100 * d, "8y"),
        (i64::MAX, "292y"),
    ];
    for (nanos, expected) in cases {
        assert_eq!(human_duration(*nanos), *expected, "{nanos}ns");
    }
}

#[test]
fn floats_print_like_go() {
    let cases: &[(f64, &str)] = &[
        (1.5, "1.5"),
        (3.0, "3"),
        (-2.25, "-2.25"),
        (123_456.0, "123456"),
        (1e6, "1e+06"),
        (1_234_567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (0.0, "0"),
    ];
    for (f, expected) in cases {
        assert_eq!(go_float(*f), *expected, "{f}");
    }
}

#[test]
fn mcm_machine_columns_come_from_its_crd() {
    let printer = crd_printer("machine.sapcloud.io_machines.yaml", "v1alpha1");
    assert_eq!(
        headers(&printer),
        vec![("Name".into(), 0), ("Status".into(), 0), ("Age".into(), 0), ("Node".into(), 0), ("ProviderID".into(), 1)]
    );
    let first = &printer.columns()[0];
    assert_eq!((first.kind.as_str(), first.format.as_str()), ("string", "name"));
    assert_eq!(printer.columns()[2].kind, "date");
    assert_eq!(printer.columns()[1].description, "Current status of the machine.");
    let machine = json!({
        "metadata": {"name": "m1", "creationTimestamp": ago(330), "labels": {"node": "node-1"}},
        "spec": {"providerID": "aws:///eu-west-1/i-1"},
        "status": {"currentStatus": {"phase": "Running"}}
    });
    assert_eq!(
        cells(&printer, &machine),
        vec![json!("m1"), json!("Running"), json!("5m30s"), json!("node-1"), json!("aws:///eu-west-1/i-1")]
    );
    // Missing values are null cells, which kubectl prints empty.
    let bare = json!({"metadata": {"name": "m2", "creationTimestamp": ago(3)}, "spec": {}});
    assert_eq!(cells(&printer, &bare), vec![json!("m2"), Value::Null, json!("3s"), Value::Null, Value::Null]);
}

#[test]
fn capi_machine_columns_differ_per_version() {
    let v1beta2 = crd_printer("cluster.x-k8s.io_machines.yaml", "v1beta2");
    let names: Vec<String> = v1beta2.columns().iter().filter(|c| c.priority == 0).map(|c| c.name.clone()).collect();
    assert_eq!(
        names,
        [
            "Name",
            "Cluster",
            "Node Name",
            "Failure domain",
            "Ready",
            "Available",
            "Up-to-date",
            "Phase",
            "Age",
            "Version"
        ]
    );
    let wide: Vec<String> = v1beta2.columns().iter().filter(|c| c.priority > 0).map(|c| c.name.clone()).collect();
    assert_eq!(wide, ["Provider ID", "Internal-IP", "External-IP", "OS-Image", "Paused"]);
    let machine = json!({
        "metadata": {"name": "c1-md-0-abc", "creationTimestamp": ago(3 * 3600 + 45 * 60)},
        "spec": {"clusterName": "c1", "version": "v1.31.2", "providerID": "mcm://default/m1"},
        "status": {
            "phase": "Running",
            "nodeRef": {"name": "node-1"},
            "conditions": [
                {"type": "Available", "status": "True"},
                {"type": "Ready", "status": "True"},
                {"type": "UpToDate", "status": "False"},
                {"type": "Paused", "status": "False"}
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "InternalIP", "address": "10.0.0.2"}],
            "nodeInfo": {"osImage": "Garden Linux"}
        }
    });
    let row = cells(&v1beta2, &machine);
    let by_name = |name: &str| {
        let i = v1beta2.columns().iter().position(|c| c.name == name).unwrap();
        row[i].clone()
    };
    assert_eq!(row[0], json!("c1-md-0-abc"));
    assert_eq!(by_name("Cluster"), json!("c1"));
    assert_eq!(by_name("Node Name"), json!("node-1"));
    assert_eq!(by_name("Failure domain"), Value::Null);
    assert_eq!(by_name("Ready"), json!("True"));
    assert_eq!(by_name("Available"), json!("True"));
    assert_eq!(by_name("Up-to-date"), json!("False"));
    assert_eq!(by_name("Phase"), json!("Running"));
    assert_eq!(by_name("Age"), json!("3h45m"));
    assert_eq!(by_name("Version"), json!("v1.31.2"));
    assert_eq!(by_name("Provider ID"), json!("mcm://default/m1"));
    // Several matches: kube-apiserver keeps the first.
    assert_eq!(by_name("Internal-IP"), json!("10.0.0.1"));
    assert_eq!(by_name("External-IP"), Value::Null);
    assert_eq!(by_name("OS-Image"), json!("Garden Linux"));
    assert_eq!(by_name("Paused"), json!("False"));

    let v1beta1 = crd_printer("cluster.x-k8s.io_machines.yaml", "v1beta1");
    let names: Vec<String> = v1beta1.columns().iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, ["Name", "Cluster", "NodeName", "ProviderID", "Phase", "Age", "Version"]);
}

#[test]
fn crds_without_columns_print_name_and_age() {
    let printer = crd_printer("machine.sapcloud.io_machineclasses.yaml", "v1alpha1");
    assert_eq!(headers(&printer), vec![("Name".into(), 0), ("Age".into(), 0)]);
    assert_eq!(printer.columns()[1].kind, "date");
    let class = json!({"metadata": {"name": "c", "creationTimestamp": ago(2 * 86400 + 3 * 3600)}});
    assert_eq!(cells(&printer, &class), vec![json!("c"), json!("2d3h")]);
}

#[test]
fn custom_cells_are_typed_by_column_type() {
    let column = |kind: &str, path: &str| json!({"name": "X", "type": kind, "jsonPath": path});
    let obj = json!({
        "metadata": {"name": "o", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"n": 3, "f": 2.9, "b": true, "s": "text", "ts": "2025-01-10T11:00:00Z", "bad": "yesterday",
                 "empty": "", "obj": {"a": 1}, "list": [1, 2], "nil": null, "big": 1_234_567.5}
    });
    let cases: &[(Value, Value)] = &[
        (column("integer", ".spec.n"), json!(3)),
        (column("integer", ".spec.f"), json!(2)),
        (column("integer", ".spec.s"), Value::Null),
        (column("number", ".spec.n"), json!(3.0)),
        (column("number", ".spec.f"), json!(2.9)),
        (column("boolean", ".spec.b"), json!(true)),
        (column("boolean", ".spec.s"), Value::Null),
        (column("string", ".spec.s"), json!("text")),
        (column("string", ".spec.n"), json!("3")),
        (column("string", ".spec.f"), json!("2.9")),
        (column("string", ".spec.big"), json!("1.2345675e+06")),
        (column("string", ".spec.b"), json!("true")),
        (column("string", ".spec.obj"), json!("{\"a\":1}")),
        (column("string", ".spec.list"), json!("[1,2]")),
        (column("string", ".spec.nil"), json!("<no value>")),
        (column("string", ".spec.missing"), Value::Null),
        (column("string", r".metadata.labels.cluster\.x-k8s\.io/cluster-name"), json!("c1")),
        (column("string", ".spec.list[9]"), Value::Null),
        (column("string", ".spec["), Value::Null),
        (column("date", ".spec.ts"), json!("60m")),
        (column("date", ".spec.bad"), json!("<invalid>")),
        (column("date", ".spec.empty"), json!("<unknown>")),
        (column("date", ".spec.n"), Value::Null),
        (column("unknown", ".spec.s"), Value::Null),
    ];
    for (declared, expected) in cases {
        let printer = Printer::custom(std::slice::from_ref(declared));
        assert_eq!(cells(&printer, &obj)[1], *expected, "{declared}");
    }
}

fn node(ready: Option<&str>, unschedulable: bool, labels: Value) -> Value {
    let conditions: Vec<Value> = ready
        .map(|s| json!({"type": "Ready", "status": s}))
        .into_iter()
        .chain([json!({"type": "MemoryPressure", "status": "False"})])
        .collect();
    json!({
        "metadata": {"name": "n1", "creationTimestamp": ago(7200), "labels": labels},
        "spec": {"unschedulable": unschedulable},
        "status": {"conditions": conditions, "nodeInfo": {"kubeletVersion": "v1.31.2", "osImage": "Garden Linux"},
                   "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.5"}]}
    })
}

#[test]
fn node_status_and_roles_cells() {
    let printer = builtin_printer("", "v1", "nodes");
    let names: Vec<String> = printer.columns().iter().filter(|c| c.priority == 0).map(|c| c.name.clone()).collect();
    assert_eq!(names, ["Name", "Status", "Roles", "Age", "Version"]);
    let cases: &[(Value, &str, &str)] = &[
        (node(Some("True"), false, json!({})), "Ready", "<none>"),
        (node(Some("False"), false, json!({})), "NotReady", "<none>"),
        (node(Some("Unknown"), false, json!({})), "NotReady", "<none>"),
        (node(None, false, json!({})), "Unknown", "<none>"),
        (node(Some("True"), true, json!({})), "Ready,SchedulingDisabled", "<none>"),
        (node(None, true, json!({})), "Unknown,SchedulingDisabled", "<none>"),
        (
            node(
                Some("True"),
                false,
                json!({"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": ""}),
            ),
            "Ready",
            "control-plane,worker",
        ),
        (
            node(Some("True"), false, json!({"kubernetes.io/role": "infra", "node-role.kubernetes.io/": ""})),
            "Ready",
            "infra",
        ),
    ];
    for (obj, status, roles) in cases {
        let row = cells(&printer, obj);
        assert_eq!((row[1].as_str().unwrap(), row[2].as_str().unwrap()), (*status, *roles), "{obj}");
        assert_eq!(row[3], json!("120m"));
        assert_eq!(row[4], json!("v1.31.2"));
        assert_eq!(
            &row[5..],
            &[json!("10.0.0.5"), json!("<none>"), json!("Garden Linux"), json!("<unknown>"), json!("<unknown>")]
        );
    }
}

#[test]
fn pod_cells_follow_kubectl() {
    let printer = builtin_printer("", "v1", "pods");
    let pod = |status: Value, extra_spec: Value, deleting: bool| {
        let mut spec = json!({"containers": [{"name": "app"}, {"name": "sidecar"}], "nodeName": "n1"});
        json_patch::merge(&mut spec, &extra_spec);
        let mut metadata = json!({"name": "p", "creationTimestamp": ago(600)});
        if deleting {
            metadata["deletionTimestamp"] = json!(ago(1));
        }
        json!({"metadata": metadata, "spec": spec, "status": status})
    };
    let running = |name: &str, restarts: i64, finished: Option<i64>| {
        let mut c = json!({"name": name, "ready": true, "restartCount": restarts, "state": {"running": {}}});
        if let Some(s) = finished {
            c["lastState"] = json!({"terminated": {"exitCode": 1, "finishedAt": ago(s)}});
        }
        c
    };
    let cases: Vec<(Value, [&str; 3])> = vec![
        (pod(json!({"phase": "Pending"}), json!({}), false), ["0/2", "Pending", "0"]),
        (
            pod(
                json!({"phase": "Running", "podIPs": [{"ip": "10.1.0.4"}],
                       "containerStatuses": [running("app", 0, None), running("sidecar", 0, None)]}),
                json!({}),
                false,
            ),
            ["2/2", "Running", "0"],
        ),
        (
            pod(
                json!({"phase": "Running", "containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(300)}}},
                running("sidecar", 1, Some(900))]}),
                json!({}),
                false,
            ),
            ["1/2", "CrashLoopBackOff", "4 (5m ago)"],
        ),
        (
            pod(
                json!({"phase": "Pending", "initContainerStatuses": [{"name": "init", "state": {"running": {}}}]}),
                json!({"initContainers": [{"name": "init"}]}),
                false,
            ),
            ["0/2", "Init:0/1", "0"],
        ),
        (
            pod(
                json!({"phase": "Pending",
                       "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 2}}}]}),
                json!({"initContainers": [{"name": "init"}]}),
                false,
            ),
            ["0/2", "Init:ExitCode:2", "0"],
        ),
        (
            pod(
                json!({"phase": "Running",
                       "containerStatuses": [running("app", 0, None), running("sidecar", 0, None)]}),
                json!({}),
                true,
            ),
            ["2/2", "Terminating", "0"],
        ),
        (
            pod(
                json!({"phase": "Succeeded", "containerStatuses": [
                {"name": "app", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "sidecar", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
                json!({}),
                false,
            ),
            ["0/2", "Completed", "0"],
        ),
        (
            pod(
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": [
                {"name": "app", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                running("sidecar", 0, None)]}),
                json!({}),
                false,
            ),
            ["1/2", "Running", "0"],
        ),
        (
            pod(
                json!({"phase": "Pending",
                       "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
                json!({}),
                false,
            ),
            ["0/2", "SchedulingGated", "0"],
        ),
    ];
    for (obj, [ready, status, restarts]) in &cases {
        let row = cells(&printer, obj);
        assert_eq!(
            [row[1].as_str().unwrap(), row[2].as_str().unwrap(), row[3].as_str().unwrap()],
            [*ready, *status, *restarts],
            "{obj}"
        );
        assert_eq!(row[4], json!("10m"));
    }
    let row = cells(&printer, &cases[1].0);
    assert_eq!(&row[5..], &[json!("10.1.0.4"), json!("n1"), json!("<none>"), json!("<none>")]);
    assert_eq!(printer.cells(&cases[6].0, now()).conditions[0]["type"], "Completed");
}

#[test]
fn other_builtin_kinds_print_kube_columns() {
    let names = |printer: &Printer| -> Vec<String> {
        printer.columns().iter().filter(|c| c.priority == 0).map(|c| c.name.to_uppercase()).collect()
    };
    let created = ago(45);
    let cases: Vec<(Printer, Value, Vec<&str>, Vec<Value>)> = vec![
        (
            builtin_printer("", "v1", "namespaces"),
            json!({"metadata": {"name": "default", "creationTimestamp": created}, "status": {"phase": "Active"}}),
            vec!["NAME", "STATUS", "AGE"],
            vec![json!("default"), json!("Active"), json!("45s")],
        ),
        (
            builtin_printer("", "v1", "configmaps"),
            json!({"metadata": {"name": "cm", "creationTimestamp": created},
                   "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}}),
            vec!["NAME", "DATA", "AGE"],
            vec![json!("cm"), json!(3), json!("45s")],
        ),
        (
            builtin_printer("", "v1", "secrets"),
            json!({"metadata": {"name": "s", "creationTimestamp": created}, "data": {"a": "MQ=="}}),
            vec!["NAME", "TYPE", "DATA", "AGE"],
            vec![json!("s"), json!("Opaque"), json!(1), json!("45s")],
        ),
        (
            builtin_printer("coordination.k8s.io", "v1", "leases"),
            json!({"metadata": {"name": "l", "creationTimestamp": created}, "spec": {"holderIdentity": "mcm-0"}}),
            vec!["NAME", "HOLDER", "AGE"],
            vec![json!("l"), json!("mcm-0"), json!("45s")],
        ),
        (
            builtin_printer("policy", "v1", "poddisruptionbudgets"),
            json!({"metadata": {"name": "pdb", "creationTimestamp": created}, "spec": {"minAvailable": "50%"},
                   "status": {"disruptionsAllowed": 1}}),
            vec!["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"],
            vec![json!("pdb"), json!("50%"), json!("N/A"), json!(1), json!("45s")],
        ),
        (
            builtin_printer("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            json!({"metadata": {"name": "machines.machine.sapcloud.io", "creationTimestamp": "2025-01-02T03:04:05Z"}}),
            vec!["NAME", "CREATED AT"],
            vec![json!("machines.machine.sapcloud.io"), json!("2025-01-02T03:04:05Z")],
        ),
        (
            builtin_printer("", "v1", "serviceaccounts"),
            json!({"metadata": {"name": "default", "creationTimestamp": created}}),
            vec!["NAME", "SECRETS", "AGE"],
            vec![json!("default"), json!(0), json!("45s")],
        ),
        (
            builtin_printer("apps", "v1", "deployments"),
            json!({"metadata": {"name": "mcm", "creationTimestamp": created},
                   "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "mcm"},
                            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]},
                                                 {"key": "canary", "operator": "DoesNotExist"}]},
                            "template": {"spec": {"containers": [{"name": "manager", "image": "mcm:1"},
                                                                 {"name": "proxy", "image": "proxy:2"}]}}},
                   "status": {"readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1}}),
            vec!["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
            vec![
                json!("mcm"),
                json!("1/2"),
                json!(2),
                json!(1),
                json!("45s"),
                json!("manager,proxy"),
                json!("mcm:1,proxy:2"),
                json!("app=mcm,!canary,tier in (a,b)"),
            ],
        ),
        (
            builtin_printer("", "v1", "services"),
            json!({"metadata": {"name": "web", "creationTimestamp": created},
                   "spec": {"clusterIP": "10.96.0.10",
                            "ports": [{"port": 80}, {"port": 443, "nodePort": 30443, "protocol": "TCP"}],
                            "selector": {"app": "web", "app.kubernetes.io/name": "web"}}}),
            vec!["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"],
            vec![
                json!("web"),
                json!("ClusterIP"),
                json!("10.96.0.10"),
                json!("<none>"),
                json!("80/TCP,443:30443/TCP"),
                json!("45s"),
                json!("app=web,app.kubernetes.io/name=web"),
            ],
        ),
        (
            builtin_printer("", "v1", "services"),
            json!({"metadata": {"name": "lb", "creationTimestamp": created},
                   "spec": {"type": "LoadBalancer", "clusterIPs": ["10.96.0.11"]},
                   "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}}}),
            vec!["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"],
            vec![
                json!("lb"),
                json!("LoadBalancer"),
                json!("10.96.0.11"),
                json!("lb.example.com"),
                json!("<none>"),
                json!("45s"),
                json!("<none>"),
            ],
        ),
        (
            builtin_printer("apps", "v1", "replicasets"),
            json!({"metadata": {"name": "rs", "creationTimestamp": created}}),
            vec!["NAME", "AGE"],
            vec![json!("rs"), json!("45s")],
        ),
    ];
    for (printer, obj, expected_headers, expected_cells) in cases {
        assert_eq!(names(&printer), expected_headers, "{obj}");
        assert_eq!(cells(&printer, &obj), expected_cells, "{obj}");
    }
}

#[test]
fn events_print_in_both_apis() {
    let core = builtin_printer("", "v1", "events");
    let names: Vec<String> = core.columns().iter().filter(|c| c.priority == 0).map(|c| c.name.to_uppercase()).collect();
    assert_eq!(names, ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
    assert_eq!(core.columns().last().unwrap().format, "name");
    let event = json!({
        "metadata": {"name": "m1.17a", "creationTimestamp": ago(600)},
        "involvedObject": {"kind": "Machine", "name": "m1", "fieldPath": "spec"},
        "reason": "Created", "message": " machine created\n", "type": "Normal", "count": 3,
        "firstTimestamp": ago(600), "lastTimestamp": ago(60), "source": {"component": "mcm"}
    });
    assert_eq!(
        cells(&core, &event),
        vec![
            json!("60s"),
            json!("Normal"),
            json!("Created"),
            json!("machine/m1"),
            json!("spec"),
            json!("mcm"),
            json!("machine created"),
            json!("10m"),
            json!(3),
            json!("m1.17a")
        ]
    );
    let v1 = builtin_printer("events.k8s.io", "v1", "events");
    let event = json!({
        "metadata": {"name": "e"}, "regarding": {"kind": "Node", "name": "n1"}, "note": "drained", "reason": "Drain",
        "type": "Warning", "eventTime": "2025-01-10T11:58:00.000000Z",
        "reportingController": "mcm", "reportingInstance": "mcm-0"
    });
    assert_eq!(
        cells(&v1, &event),
        vec![
            json!("2m"),
            json!("Warning"),
            json!("Drain"),
            json!("node/n1"),
            json!(""),
            json!("mcm, mcm-0"),
            json!("drained"),
            json!("2m"),
            json!(1),
            json!("e")
        ]
    );
}

#[test]
fn tables_carry_rows_objects_and_metadata() {
    let printer = Printer::custom(&[]);
    let obj = json!({"apiVersion": "example.com/v1", "kind": "Foo",
                     "metadata": {"name": "f", "namespace": "default", "resourceVersion": "42",
                                  "creationTimestamp": ago(1)},
                     "spec": {"x": 1}});
    let builder = |include| {
        TableBuilder::with_printer(printer.clone(), TableOptions { version: TableVersion::V1, include }, Some(now()))
    };
    let table = builder(IncludeObject::Metadata).object_table(&obj, true);
    assert_eq!(
        table,
        json!({
            "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "42"},
            "columnDefinitions": [
                {"name": "Name", "type": "string", "format": "name", "description": NAME_DESCRIPTION, "priority": 0},
                {"name": "Age", "type": "date", "format": "", "description": AGE_DESCRIPTION, "priority": 0}
            ],
            "rows": [{"cells": ["f", "1s"], "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                      "metadata": obj["metadata"]}}]
        })
    );
    let without_headers = builder(IncludeObject::None).object_table(&obj, false);
    assert_eq!(without_headers["columnDefinitions"], Value::Null);
    assert_eq!(without_headers["rows"][0]["object"], Value::Null);
    assert_eq!(builder(IncludeObject::Object).row(&obj)["object"], obj);
    let beta = TableBuilder::with_printer(
        printer,
        TableOptions { version: TableVersion::V1Beta1, include: IncludeObject::Metadata },
        Some(now()),
    );
    let list = beta.table(
        vec![beta.row(&obj)],
        json!({"resourceVersion": "50", "continue": "abc", "remainingItemCount": 3}),
        true,
    );
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(list["rows"][0]["object"]["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(list["metadata"]["remainingItemCount"], 3);
}
