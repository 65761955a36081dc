//! Columns and cells of built-in kinds, following kube's printers (`pkg/printers/internalversion`): the same
//! headers, the same cell formats (`1/2`, `Ready,SchedulingDisabled`, `80/TCP`, `<none>`), every wide column
//! included with priority 1 because kube-apiserver always prints wide and lets kubectl hide what it does not show.
//!
//! Objects are read as stored JSON, so fields the real server would have defaulted (a Service's type, a port's
//! protocol, a Deployment's replicas, a Secret's type) are defaulted here when absent.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{Column, NAME_DESCRIPTION, RowCells, age_of, name_column};

/// The built-in printers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// NAME STATUS AGE.
    Namespace,
    /// NAME STATUS ROLES AGE VERSION, wide: INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME.
    Node,
    /// NAME READY STATUS RESTARTS AGE, wide: IP NODE NOMINATED NODE READINESS GATES.
    Pod,
    /// NAME DATA AGE.
    ConfigMap,
    /// NAME TYPE DATA AGE.
    Secret,
    /// LAST SEEN TYPE REASON OBJECT MESSAGE, wide: SUBOBJECT SOURCE FIRST SEEN COUNT NAME.
    Event,
    /// NAME HOLDER AGE.
    Lease,
    /// NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE.
    PodDisruptionBudget,
    /// NAME READY UP-TO-DATE AVAILABLE AGE, wide: CONTAINERS IMAGES SELECTOR.
    Deployment,
    /// NAME SECRETS AGE.
    ServiceAccount,
    /// NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE, wide: SELECTOR.
    Service,
    /// Kinds kube serves with its default table convertor: `Name` and `Created At` (CRDs, RBAC roles).
    CreatedAt,
    /// Everything else: `Name` and `Age`.
    Default,
}

fn col(name: &str, kind: &str, priority: i64, description: &str) -> Column {
    Column::new(name, kind, "", priority, description)
}

fn age_column() -> Column {
    col("Age", "string", 0, super::AGE_DESCRIPTION)
}

impl Builtin {
    /// The printer for a built-in group and resource.
    pub fn of(group: &str, resource: &str) -> Self {
        match (group, resource) {
            ("", "namespaces") => Builtin::Namespace,
            ("", "nodes") => Builtin::Node,
            ("", "pods") => Builtin::Pod,
            ("", "configmaps") => Builtin::ConfigMap,
            ("", "secrets") => Builtin::Secret,
            ("", "events") | ("events.k8s.io", "events") => Builtin::Event,
            ("coordination.k8s.io", "leases") => Builtin::Lease,
            ("policy", "poddisruptionbudgets") => Builtin::PodDisruptionBudget,
            ("apps", "deployments") => Builtin::Deployment,
            ("", "serviceaccounts") => Builtin::ServiceAccount,
            ("", "services") => Builtin::Service,
            ("apiextensions.k8s.io", "customresourcedefinitions")
            | ("rbac.authorization.k8s.io", "roles" | "clusterroles") => Builtin::CreatedAt,
            _ => Builtin::Default,
        }
    }

    /// The column definitions.
    pub fn columns(self) -> Vec<Column> {
        let mut columns = match self {
            Builtin::Event => Vec::new(),
            _ => vec![name_column()],
        };
        match self {
            Builtin::Namespace => {
                columns.push(col("Status", "string", 0, "The namespace's phase: Active or Terminating."));
                columns.push(age_column());
            }
            Builtin::Node => columns.extend([
                col("Status", "string", 0, "Ready, NotReady or Unknown, and SchedulingDisabled when cordoned."),
                col("Roles", "string", 0, "Roles from the node-role.kubernetes.io/<role> labels."),
                age_column(),
                col("Version", "string", 0, "The kubelet's version."),
                col("Internal-IP", "string", 1, "The first InternalIP address."),
                col("External-IP", "string", 1, "The first ExternalIP address."),
                col("OS-Image", "string", 1, "The operating system image the node reports."),
                col("Kernel-Version", "string", 1, "The kernel version the node reports."),
                col("Container-Runtime", "string", 1, "The container runtime and its version."),
            ]),
            Builtin::Pod => columns.extend([
                col("Ready", "string", 0, "Ready containers out of all containers (sidecars included)."),
                col("Status", "string", 0, "The pod's phase, or why it is not running."),
                col("Restarts", "string", 0, "Container restarts, with the time since the last one."),
                age_column(),
                col("IP", "string", 1, "The pod's first IP address."),
                col("Node", "string", 1, "The node the pod is bound to."),
                col("Nominated Node", "string", 1, "The node the scheduler nominated for preemption."),
                col("Readiness Gates", "string", 1, "Readiness gates that are true, out of all of them."),
            ]),
            Builtin::ConfigMap => {
                columns.push(col("Data", "string", 0, "Number of keys in data and binaryData."));
                columns.push(age_column());
            }
            Builtin::Secret => {
                columns.push(col("Type", "string", 0, "The secret's type."));
                columns.push(col("Data", "string", 0, "Number of keys in data."));
                columns.push(age_column());
            }
            Builtin::Event => columns.extend([
                col("Last Seen", "string", 0, "Time since the event was last observed."),
                col("Type", "string", 0, "Normal or Warning."),
                col("Reason", "string", 0, "Why the event happened, in CamelCase."),
                col("Object", "string", 0, "The object the event is about, as kind/name."),
                col("Subobject", "string", 1, "The field path within the object, if any."),
                col("Source", "string", 1, "The component (and host) that reported the event."),
                col("Message", "string", 0, "What happened."),
                col("First Seen", "string", 1, "Time since the event was first observed."),
                col("Count", "string", 1, "How many times the event was observed."),
                Column::new("Name", "string", "name", 1, NAME_DESCRIPTION),
            ]),
            Builtin::Lease => {
                columns.push(col("Holder", "string", 0, "The identity holding the lease."));
                columns.push(age_column());
            }
            Builtin::PodDisruptionBudget => columns.extend([
                col("Min Available", "string", 0, "Pods that must stay available, or N/A."),
                col("Max Unavailable", "string", 0, "Pods that may be unavailable, or N/A."),
                col("Allowed Disruptions", "integer", 0, "Evictions allowed at the moment."),
                age_column(),
            ]),
            Builtin::Deployment => columns.extend([
                col("Ready", "string", 0, "Ready replicas out of desired replicas."),
                col("Up-to-date", "string", 0, "Replicas running the current template."),
                col("Available", "string", 0, "Replicas available to serve."),
                age_column(),
                col("Containers", "string", 1, "Containers of the pod template."),
                col("Images", "string", 1, "Images of the pod template's containers."),
                col("Selector", "string", 1, "The label selector of the deployment's pods."),
            ]),
            Builtin::ServiceAccount => {
                columns.push(col("Secrets", "string", 0, "Number of secrets listed in the service account."));
                columns.push(age_column());
            }
            Builtin::Service => columns.extend([
                col("Type", "string", 0, "ClusterIP, NodePort, LoadBalancer or ExternalName."),
                col("Cluster-IP", "string", 0, "The service's cluster IP."),
                col("External-IP", "string", 0, "External IPs, load-balancer ingress or external name."),
                col("Port(s)", "string", 0, "Ports as port[:nodePort]/protocol."),
                age_column(),
                col("Selector", "string", 1, "The pod selector."),
            ]),
            Builtin::CreatedAt => columns.push(col("Created At", "date", 0, "When the object was created.")),
            Builtin::Default => columns.push(age_column()),
        }
        columns
    }

    /// The cells of one object.
    pub fn cells(self, obj: &Value, now: jiff::Timestamp) -> RowCells {
        let name = json!(super::super::object::name(obj));
        let age = json!(age_of(obj.pointer("/metadata/creationTimestamp").and_then(Value::as_str), now));
        let mut conditions = Vec::new();
        let cells = match self {
            Builtin::Namespace => vec![name, json!(text(obj, "/status/phase")), age],
            Builtin::Node => node(obj, name, age),
            Builtin::Pod => {
                let (cells, row_conditions) = pod(obj, name, age, now);
                conditions = row_conditions;
                cells
            }
            Builtin::ConfigMap => vec![name, json!(count(obj, "/data") + count(obj, "/binaryData")), age],
            Builtin::Secret => {
                let kind = text(obj, "/type");
                vec![name, json!(if kind.is_empty() { "Opaque" } else { kind }), json!(count(obj, "/data")), age]
            }
            Builtin::Event => event(obj, now),
            Builtin::Lease => vec![name, json!(text(obj, "/spec/holderIdentity")), age],
            Builtin::PodDisruptionBudget => vec![
                name,
                json!(int_or_string(obj.pointer("/spec/minAvailable"))),
                json!(int_or_string(obj.pointer("/spec/maxUnavailable"))),
                json!(int(obj, "/status/disruptionsAllowed")),
                age,
            ],
            Builtin::Deployment => deployment(obj, name, age),
            Builtin::ServiceAccount => vec![name, json!(items(obj, "/secrets").len()), age],
            Builtin::Service => service(obj, name, age),
            Builtin::CreatedAt => vec![name, json!(created_at(obj))],
            Builtin::Default => vec![name, age],
        };
        RowCells { cells, conditions }
    }
}

/// A string field ("" when absent or not a string).
fn text<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// An integer field (0 when absent).
fn int(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or_default()
}

/// An array field (empty when absent).
fn items<'a>(obj: &'a Value, pointer: &str) -> &'a [Value] {
    obj.pointer(pointer).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// Number of keys of an object field.
fn count(obj: &Value, pointer: &str) -> usize {
    obj.pointer(pointer).and_then(Value::as_object).map_or(0, serde_json::Map::len)
}

fn or_none(s: &str) -> String {
    if s.is_empty() { "<none>".to_string() } else { s.to_string() }
}

fn or_unknown(s: &str) -> String {
    if s.is_empty() { "<unknown>".to_string() } else { s.to_string() }
}

fn timestamp(value: Option<&Value>) -> Option<jiff::Timestamp> {
    value.and_then(Value::as_str).and_then(|s| s.parse().ok())
}

/// `creationTimestamp` as kube's default table convertor prints it: RFC 3339 in UTC, whole seconds.
fn created_at(obj: &Value) -> String {
    match timestamp(obj.pointer("/metadata/creationTimestamp")) {
        Some(t) => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        // Go's zero time.
        None => "0001-01-01T00:00:00Z".to_string(),
    }
}

fn int_or_string(value: Option<&Value>) -> String {
    match value {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "N/A".to_string(),
    }
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    items(obj, "/status/conditions").iter().find(|c| c["type"] == kind)
}

fn node(obj: &Value, name: Value, age: Value) -> Vec<Value> {
    let mut status = vec![match condition(obj, "Ready") {
        Some(c) if c["status"] == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if obj.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled");
    }
    let mut roles = BTreeSet::new();
    for (key, value) in super::super::object::labels(obj).into_iter().flatten() {
        if let Some(role) = key.strip_prefix("node-role.kubernetes.io/").filter(|r| !r.is_empty()) {
            roles.insert(role.to_string());
        } else if key == "kubernetes.io/role"
            && let Some(role) = value.as_str().filter(|r| !r.is_empty())
        {
            roles.insert(role.to_string());
        }
    }
    let roles = roles.into_iter().collect::<Vec<_>>().join(",");
    let address = |kind: &str| {
        let found = items(obj, "/status/addresses").iter().find(|a| a["type"] == kind);
        or_none(found.and_then(|a| a["address"].as_str()).unwrap_or_default())
    };
    vec![
        name,
        json!(status.join(",")),
        json!(or_none(&roles)),
        age,
        json!(text(obj, "/status/nodeInfo/kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(or_unknown(text(obj, "/status/nodeInfo/osImage"))),
        json!(or_unknown(text(obj, "/status/nodeInfo/kernelVersion"))),
        json!(or_unknown(text(obj, "/status/nodeInfo/containerRuntimeVersion"))),
    ]
}

/// The latest of two optional instants.
fn latest(a: Option<jiff::Timestamp>, b: Option<jiff::Timestamp>) -> Option<jiff::Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The status and restart cells of a pod, as kubectl users know them (`Init:0/1`, `CrashLoopBackOff`,
/// `Terminating`, `3 (5m ago)`).
fn pod(obj: &Value, name: Value, age: Value, now: jiff::Timestamp) -> (Vec<Value>, Vec<Value>) {
    let phase = text(obj, "/status/phase");
    let mut reason = match text(obj, "/status/reason") {
        "" => phase.to_string(),
        r => r.to_string(),
    };
    if items(obj, "/status/conditions").iter().any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".to_string();
    }
    let init_specs = items(obj, "/spec/initContainers");
    // Init containers with restartPolicy Always are sidecars: they count as containers and keep running.
    let sidecar = |name: &Value| init_specs.iter().any(|c| c["name"] == *name && c["restartPolicy"] == "Always");
    let sidecars = init_specs.iter().filter(|c| c["restartPolicy"] == "Always").count();
    let total = items(obj, "/spec/containers").len() + sidecars;
    let mut ready = 0usize;
    let mut restarts = 0i64;
    let mut last_restart = None;
    let mut sidecar_restarts = 0i64;
    let mut sidecar_last_restart = None;
    let mut initializing = false;
    let finished = |c: &Value| timestamp(c.pointer("/lastState/terminated/finishedAt"));
    for (i, c) in items(obj, "/status/initContainerStatuses").iter().enumerate() {
        let count = c["restartCount"].as_i64().unwrap_or_default();
        restarts += count;
        last_restart = latest(last_restart, finished(c));
        let is_sidecar = sidecar(&c["name"]);
        if is_sidecar {
            sidecar_restarts += count;
            sidecar_last_restart = latest(sidecar_last_restart, finished(c));
        }
        let terminated = c.pointer("/state/terminated").filter(|t| t.is_object());
        let waiting_reason = c.pointer("/state/waiting/reason").and_then(Value::as_str).unwrap_or_default();
        if terminated.is_some_and(|t| t["exitCode"].as_i64().unwrap_or_default() == 0) {
            continue;
        }
        if is_sidecar && c["started"].as_bool() == Some(true) {
            if c["ready"].as_bool() == Some(true) {
                ready += 1;
            }
            continue;
        }
        reason = if let Some(t) = terminated {
            match t["reason"].as_str().unwrap_or_default() {
                "" => match t["signal"].as_i64().unwrap_or_default() {
                    0 => format!("Init:ExitCode:{}", t["exitCode"].as_i64().unwrap_or_default()),
                    signal => format!("Init:Signal:{signal}"),
                },
                r => format!("Init:{r}"),
            }
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            format!("Init:{waiting_reason}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }
    let initialized = condition(obj, "Initialized").is_some_and(|c| c["status"] == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = sidecar_last_restart;
        let mut running = false;
        // From the last container to the first, so that the first container's problem wins.
        for c in items(obj, "/status/containerStatuses").iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or_default();
            last_restart = latest(last_restart, finished(c));
            let waiting_reason = c.pointer("/state/waiting/reason").and_then(Value::as_str).unwrap_or_default();
            let terminated = c.pointer("/state/terminated").filter(|t| t.is_object());
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_string();
            } else if let Some(t) = terminated {
                reason = match t["reason"].as_str().unwrap_or_default() {
                    "" => match t["signal"].as_i64().unwrap_or_default() {
                        0 => format!("ExitCode:{}", t["exitCode"].as_i64().unwrap_or_default()),
                        signal => format!("Signal:{signal}"),
                    },
                    r => r.to_string(),
                };
            } else if c["ready"].as_bool() == Some(true) && c.pointer("/state/running").is_some_and(Value::is_object) {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            let pod_ready = condition(obj, "Ready").is_some_and(|c| c["status"] == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.to_string();
        }
    }
    if super::super::object::is_deleting(obj) {
        if text(obj, "/status/reason") == "NodeLost" {
            reason = "Unknown".to_string();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_string();
        }
    }
    let restarts = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", super::since(t, now)),
        _ => restarts.to_string(),
    };
    let ip = items(obj, "/status/podIPs")
        .first()
        .and_then(|p| p["ip"].as_str())
        .unwrap_or_else(|| text(obj, "/status/podIP"));
    let gates = items(obj, "/spec/readinessGates");
    let gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let passing = gates
            .iter()
            .filter(|g| {
                condition(obj, g["conditionType"].as_str().unwrap_or_default()).is_some_and(|c| c["status"] == "True")
            })
            .count();
        format!("{passing}/{}", gates.len())
    };
    let cells = vec![
        name,
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts),
        age,
        json!(or_none(ip)),
        json!(or_none(text(obj, "/spec/nodeName"))),
        json!(or_none(text(obj, "/status/nominatedNodeName"))),
        json!(gates),
    ];
    // Finished pods carry a Completed row condition, which kubectl may use to filter them.
    let conditions = match phase {
        "Succeeded" => vec![json!({"type": "Completed", "status": "True", "reason": "Succeeded",
                                   "message": "All containers of the pod finished successfully."})],
        "Failed" => vec![json!({"type": "Completed", "status": "True", "reason": "Failed",
                                "message": "The pod finished and at least one container failed."})],
        _ => Vec::new(),
    };
    (cells, conditions)
}

/// Field of a core v1 Event, or its events.k8s.io/v1 name (both are printed alike).
fn event_field<'a>(obj: &'a Value, core: &str, v1: &str) -> &'a Value {
    match obj.get(core) {
        Some(v) if !v.is_null() => v,
        _ => &obj[v1],
    }
}

fn event(obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let since = |value: &Value| timestamp(Some(value)).map(|t| super::since(t, now));
    let unknown = || "<unknown>".to_string();
    let first = since(event_field(obj, "firstTimestamp", "deprecatedFirstTimestamp"))
        .or_else(|| since(&obj["eventTime"]))
        .unwrap_or_else(unknown);
    let mut last = since(event_field(obj, "lastTimestamp", "deprecatedLastTimestamp")).unwrap_or_else(|| first.clone());
    let mut count = event_field(obj, "count", "deprecatedCount").as_i64().unwrap_or_default();
    if obj["series"].is_object() {
        last = since(&obj["series"]["lastObservedTime"]).unwrap_or_else(unknown);
        count = obj["series"]["count"].as_i64().unwrap_or_default();
    } else if count == 0 {
        // Events of the events.k8s.io API seen once carry no count.
        count = 1;
    }
    let involved = event_field(obj, "involvedObject", "regarding");
    let kind = involved["kind"].as_str().unwrap_or_default().to_lowercase();
    let target = match involved["name"].as_str().unwrap_or_default() {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let source = event_field(obj, "source", "deprecatedSource");
    let non_empty = |a: &str, b: &str| if a.is_empty() { b.to_string() } else { a.to_string() };
    let component = non_empty(
        source["component"].as_str().unwrap_or_default(),
        event_field(obj, "reportingComponent", "reportingController").as_str().unwrap_or_default(),
    );
    let host = non_empty(source["host"].as_str().unwrap_or_default(), text(obj, "/reportingInstance"));
    let source = if host.is_empty() { component } else { format!("{component}, {host}") };
    vec![
        json!(last),
        json!(text(obj, "/type")),
        json!(text(obj, "/reason")),
        json!(target),
        json!(involved["fieldPath"].as_str().unwrap_or_default()),
        json!(source),
        json!(event_field(obj, "message", "note").as_str().unwrap_or_default().trim()),
        json!(first),
        json!(count),
        json!(super::super::object::name(obj)),
    ]
}

/// A label selector (`matchLabels`, `matchExpressions`) as kube's `labels.Selector` prints it: requirements sorted
/// by key, `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`.
fn selector_string(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector["matchLabels"].as_object() {
        for (key, value) in labels {
            requirements.push((key.clone(), format!("{key}={}", value.as_str().unwrap_or_default())));
        }
    }
    for expression in selector["matchExpressions"].as_array().into_iter().flatten() {
        let key = expression["key"].as_str().unwrap_or_default();
        let mut values: Vec<&str> =
            expression["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        values.sort_unstable();
        let printed = match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return "<invalid>".to_string(),
        };
        requirements.push((key.to_string(), printed));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    requirements.into_iter().map(|(_, r)| r).collect::<Vec<_>>().join(",")
}

fn deployment(obj: &Value, name: Value, age: Value) -> Vec<Value> {
    // kube-apiserver defaults spec.replicas to 1.
    let desired = obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
    let containers = items(obj, "/spec/template/spec/containers");
    let join = |field: &str| containers.iter().filter_map(|c| c[field].as_str()).collect::<Vec<_>>().join(",");
    vec![
        name,
        json!(format!("{}/{desired}", int(obj, "/status/readyReplicas"))),
        json!(int(obj, "/status/updatedReplicas")),
        json!(int(obj, "/status/availableReplicas")),
        age,
        json!(join("name")),
        json!(join("image")),
        json!(selector_string(&obj["spec"]["selector"])),
    ]
}

fn service(obj: &Value, name: Value, age: Value) -> Vec<Value> {
    let kind = match text(obj, "/spec/type") {
        "" => "ClusterIP",
        kind => kind,
    };
    let cluster_ip =
        items(obj, "/spec/clusterIPs").first().and_then(Value::as_str).unwrap_or_else(|| text(obj, "/spec/clusterIP"));
    let external_ips: Vec<&str> = items(obj, "/spec/externalIPs").iter().filter_map(Value::as_str).collect();
    let external = match kind {
        "ClusterIP" | "NodePort" => or_none(&external_ips.join(",")),
        "LoadBalancer" => {
            let mut all: Vec<&str> = items(obj, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| {
                    i["ip"]
                        .as_str()
                        .filter(|s| !s.is_empty())
                        .or_else(|| i["hostname"].as_str().filter(|s| !s.is_empty()))
                })
                .collect();
            all.extend(&external_ips);
            if all.is_empty() { "<pending>".to_string() } else { all.join(",") }
        }
        "ExternalName" => text(obj, "/spec/externalName").to_string(),
        _ => "<unknown>".to_string(),
    };
    let ports: Vec<String> = items(obj, "/spec/ports")
        .iter()
        .map(|p| {
            let protocol = p["protocol"].as_str().unwrap_or("TCP");
            let port = p["port"].as_i64().unwrap_or_default();
            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                Some(node_port) => format!("{port}:{node_port}/{protocol}"),
                None => format!("{port}/{protocol}"),
            }
        })
        .collect();
    // Sorted by key, as kube's labels.FormatLabels prints them.
    let mut selector: Vec<(&String, &str)> = obj["spec"]["selector"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k, v.as_str().unwrap_or_default()))
        .collect();
    selector.sort_unstable();
    let selector = selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    vec![
        name,
        json!(kind),
        json!(or_none(cluster_ip)),
        json!(external),
        json!(or_none(&ports.join(","))),
        age,
        json!(or_none(&selector)),
    ]
}
