//! The same MachineDeployment scenario (create, scale, roll to a new template, delete one Machine) under upstream
//! CAPI core and under our mode "CAPI with MCM core" (`mcm dev`'s controllers), compared as a user sees it: phases,
//! replica counters, v1beta2 condition types and `clusterctl describe` rows. Each difference that stays is listed in
//! [`KEPT`] and explained in docs/capi-mode.md; any other difference, or a listed one that went away, fails.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use mcm::dev::{DevEnvironment, DevOptions};
use mcm::providers::inmemory::InMemoryCloud;
use serde_json::{Value, json};

use super::{
    Cloud, Management, NS, Tools, WAIT, capi, clusterctl, control_plane_machine, list, running_machines, text,
};
use crate::support::{Kubectl, TempDir};

const CLUSTER: &str = "demo";
const MD: &str = "demo-md-0";

/// What a user sees of the deployment: fact -> value.
type Snapshot = BTreeMap<String, String>;

/// Differences that stay, as `(step, fact)` (`*`: every step); docs/capi-mode.md ("Differences from upstream
/// core") says why.
const KEPT: &[(&str, &str)] = &[
    // MCM's own MachineDeployment condition, next to core's.
    ("*", "MachineDeployment condition Progressing"),
    // MCM keeps old MachineSets at 0 replicas for rollbacks (revisionHistoryLimit); core deletes them.
    ("rolled to a new template", "MachineSets scaled to 0"),
    ("one Machine deleted", "MachineSets scaled to 0"),
    // The Cluster's Available summary is not written in our mode (its replica counters are).
    ("*", "describe Cluster demo/demo #1 STATUS"),
    ("*", "describe Cluster demo/demo #1 REASON"),
    ("*", "describe Cluster demo/demo #1 MESSAGE"),
];

/// One side of the comparison: an API server with a cloud, a controller set and the tools to look at it.
struct Side {
    name: &'static str,
    client: kube::Client,
    cloud: InMemoryCloud,
    kubectl: Kubectl,
    kubeconfig: std::path::PathBuf,
    home: TempDir,
    tools: Tools,
    /// For failure messages: upstream core's and our manager's last log lines.
    logs: Box<dyn Fn() -> String + Send + Sync>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deployment_looks_the_same_under_upstream_core_and_ours() {
    let Some(tools) = Tools::find("upstream::differential") else { return };

    // Upstream core with our infrastructure provider, installed by clusterctl.
    let mut m = Management::start(tools.clone(), "differential").await;
    let cloud = Cloud::start(&m.client).await;
    m.init(&cloud.url).await;
    m.prepare_cluster(CLUSTER, &m.server).await;
    let manifest = m.generate(CLUSTER, 2).await;
    let m = std::sync::Arc::new(m);
    let logs = m.clone();
    let upstream = Side {
        name: "upstream core",
        client: m.client.clone(),
        cloud: cloud.cloud.clone(),
        kubectl: Kubectl::for_kubeconfig(&m.kubeconfig),
        kubeconfig: m.kubeconfig.clone(),
        home: TempDir::new("mcm-differential-upstream"),
        tools: tools.clone(),
        logs: Box::new(move || logs.logs()),
    };

    // Ours: what `mcm dev` runs (no sample).
    let home = TempDir::new("mcm-differential-ours");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: home.0.join("kubeconfig"),
        sample: false,
        ..DevOptions::default()
    };
    let dev = DevEnvironment::start(&options, |_| {}).await.expect("mcm dev starts");
    let namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(dev.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    let ours = Side {
        name: "ours",
        client: dev.client.clone(),
        cloud: dev.cloud.clone(),
        kubectl: Kubectl::for_kubeconfig(&options.kubeconfig_out),
        kubeconfig: options.kubeconfig_out.clone(),
        home,
        tools,
        logs: Box::new(String::new),
    };

    let (theirs, mine) = tokio::join!(scenario(&upstream, &manifest), scenario(&ours, &manifest));
    let mut found = BTreeSet::new();
    let mut report = String::new();
    for ((step, theirs), (_, mine)) in theirs.iter().zip(&mine) {
        for fact in theirs.keys().chain(mine.keys()).collect::<BTreeSet<_>>() {
            let (a, b) = (theirs.get(fact), mine.get(fact));
            if a != b {
                found.insert((step.to_string(), fact.clone()));
                report.push_str(&format!("[{step}] {fact}\n  upstream: {a:?}\n  ours:     {b:?}\n"));
            }
        }
    }
    println!("{report}");
    let steps: Vec<&str> = theirs.iter().map(|(step, _)| *step).collect();
    let kept: BTreeSet<(String, String)> = KEPT
        .iter()
        .flat_map(|(step, fact)| {
            let all = if *step == "*" { steps.clone() } else { vec![*step] };
            all.into_iter().map(|s| (s.to_string(), fact.to_string()))
        })
        .collect();
    let new: Vec<_> = found.difference(&kept).collect();
    let gone: Vec<_> = kept.difference(&found).collect();
    assert!(new.is_empty() && gone.is_empty(), "differences not in KEPT: {new:?}\nKEPT but gone: {gone:?}\n{report}");

    dev.shutdown().await;
    cloud.stop().await;
}

/// The scenario on one side: (step, what the user sees once it settled).
async fn scenario(side: &Side, manifest: &str) -> Vec<(&'static str, Snapshot)> {
    let mut seen = Vec::new();
    control_plane_machine(&side.client, CLUSTER, None).await;
    side.kubectl.run(&["apply", "-f", side.kubectl.file("demo.yaml", manifest).to_str().unwrap()]).await;
    seen.push(("created with 2 replicas", settled(side, 2, &[]).await));

    side.kubectl.run(&["scale", "-n", NS, &format!("machinedeployment/{MD}"), "--replicas=3"]).await;
    seen.push(("scaled to 3", settled(side, 3, &[]).await));

    // A new template, the deployment pointed at it: every machine replaced.
    let before = names(&machines(side).await);
    let templates = list(&side.client, &super::infra("MCMMachineTemplate", "mcmmachinetemplates"), "").await;
    let mut template = templates.into_iter().find(|t| text(t, "/metadata/name") == MD).unwrap();
    template["metadata"] = json!({"name": "demo-md-1", "namespace": NS});
    template["spec"]["template"]["spec"]["inlineClass"]["providerSpec"]["machineType"] = json!("m.large");
    side.kubectl
        .run(&["apply", "-f", side.kubectl.file("template.yaml", &template.to_string()).to_str().unwrap()])
        .await;
    let patch = json!({"spec": {"template": {"spec": {"infrastructureRef": {"name": "demo-md-1"}}}}}).to_string();
    side.kubectl.run(&["patch", "-n", NS, &format!("machinedeployment/{MD}"), "--type=merge", "-p", &patch]).await;
    seen.push(("rolled to a new template", settled(side, 3, &before).await));

    // One Machine deleted: replaced.
    let victim = names(&machines(side).await).into_iter().next().unwrap();
    side.kubectl.run(&["delete", "-n", NS, &format!("machine/{victim}"), "--wait=false"]).await;
    seen.push(("one Machine deleted", settled(side, 3, &[victim]).await));
    seen
}

async fn machines(side: &Side) -> Vec<Value> {
    list(&side.client, &capi("Machine", "machines"), &format!("cluster.x-k8s.io/deployment-name={MD}")).await
}

fn names(machines: &[Value]) -> Vec<String> {
    machines.iter().map(|m| text(m, "/metadata/name").to_string()).collect()
}

/// Waits until the deployment has `n` Running machines (none of `gone`), counts them in every counter, and what a
/// user sees stayed the same for a few polls; then adds `clusterctl describe`'s rows.
async fn settled(side: &Side, n: usize, gone: &[String]) -> Snapshot {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last: Option<Snapshot> = None;
    let mut same = 0;
    loop {
        let running = running_machines(&side.client, &side.cloud, MD, n, 1).await;
        let fresh = running.as_ref().is_some_and(|m| names(m).iter().all(|name| !gone.contains(name)));
        if fresh {
            let snapshot = snapshot(side).await;
            let counted = ["replicas", "readyReplicas", "availableReplicas", "upToDateReplicas"]
                .iter()
                .all(|c| snapshot.get(&format!("MachineDeployment status.{c}")) == Some(&n.to_string()));
            if counted && last.as_ref() == Some(&snapshot) {
                same += 1;
                if same == 3 {
                    let mut snapshot = snapshot;
                    snapshot.extend(describe(side).await);
                    return snapshot;
                }
            } else {
                same = 0;
            }
            last = Some(snapshot);
        }
        if tokio::time::Instant::now() > deadline {
            let now = snapshot(side).await;
            let vms = side.cloud.live_vms().len();
            let detail: Vec<String> =
                machines(side).await.iter().map(|m| m["status"]["conditions"].to_string()).collect();
            panic!(
                "{}: timed out waiting for {n} settled machines; now {now:#?}, {vms} VMs, machine conditions \
                 {detail:#?}\n{}",
                side.name,
                (side.logs)()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Each condition of `object` as a fact `<what> condition <Type>` = its status.
fn conditions(seen: &mut Snapshot, what: &str, object: &Value) {
    for c in object.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten() {
        seen.insert(format!("{what} condition {}", text(c, "/type")), text(c, "/status").to_string());
    }
}

fn number(object: &Value, pointer: &str) -> String {
    object.pointer(pointer).map(Value::to_string).unwrap_or_else(|| "-".into())
}

/// The deployment, its MachineSets and Machines, without names. Facts of several objects (the Machines, the sets
/// with replicas) are counted: `True x3`.
async fn snapshot(side: &Side) -> Snapshot {
    let mut seen = Snapshot::new();
    let deployments = list(&side.client, &capi("MachineDeployment", "machinedeployments"), "").await;
    let md = deployments.iter().find(|d| text(d, "/metadata/name") == MD).cloned().unwrap_or_default();
    for counter in ["replicas", "readyReplicas", "availableReplicas", "upToDateReplicas"] {
        seen.insert(format!("MachineDeployment status.{counter}"), number(&md, &format!("/status/{counter}")));
    }
    seen.insert("MachineDeployment status.phase".into(), text(&md, "/status/phase").into());
    conditions(&mut seen, "MachineDeployment", &md);

    let selector = format!("cluster.x-k8s.io/deployment-name={MD}");
    let sets = list(&side.client, &capi("MachineSet", "machinesets"), &selector).await;
    let (active, idle): (Vec<&Value>, Vec<&Value>) = sets.iter().partition(|s| number(s, "/spec/replicas") != "0");
    seen.insert("MachineSets with replicas".into(), active.len().to_string());
    seen.insert("MachineSets scaled to 0".into(), idle.len().to_string());
    let mut facts: Vec<Snapshot> = Vec::new();
    for set in active {
        let mut one = Snapshot::new();
        for c in ["replicas", "readyReplicas", "availableReplicas", "upToDateReplicas"] {
            one.insert(format!("MachineSet status.{c}"), number(set, &format!("/status/{c}")));
        }
        one.insert("MachineSet spec.replicas".into(), number(set, "/spec/replicas"));
        conditions(&mut one, "MachineSet", set);
        facts.push(one);
    }
    for machine in machines(side).await {
        let mut one = Snapshot::new();
        one.insert("Machine status.phase".into(), text(&machine, "/status/phase").into());
        conditions(&mut one, "Machine", &machine);
        facts.push(one);
    }
    let mut counted: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for one in facts {
        for (fact, value) in one {
            *counted.entry(fact).or_default().entry(value).or_default() += 1;
        }
    }
    for (fact, values) in counted {
        let values: Vec<String> = values.into_iter().map(|(v, n)| format!("{v} x{n}")).collect();
        seen.insert(fact, values.join(", "));
    }
    seen
}

/// `clusterctl describe cluster demo --grouping=false`: its rows, names of generated objects and the SINCE column
/// left out.
async fn describe(side: &Side) -> Snapshot {
    let args = ["describe", "cluster", CLUSTER, "-n", NS, "--grouping=false"];
    let (ok, out, err) = clusterctl(&side.tools, &side.home.0, &side.kubeconfig, None, &args)
        .await
        .unwrap_or_else(|e| panic!("{}: clusterctl describe timed out: {e}", side.name));
    assert!(ok, "{}: clusterctl describe failed:\n{err}\n{out}", side.name);
    let lines: Vec<Vec<char>> = out.lines().map(|l| l.chars().collect()).collect();
    let header = lines.iter().position(|l| l.iter().collect::<String>().starts_with("NAME")).unwrap_or_default();
    let head: String = lines.get(header).map(|l| l.iter().collect()).unwrap_or_default();
    let columns = ["NAME", "REPLICAS", "AVAILABLE", "READY", "UP TO DATE", "STATUS", "REASON", "SINCE", "MESSAGE"];
    let starts: Vec<usize> =
        columns.iter().map(|c| head.find(c).map(|b| head[..b].chars().count()).unwrap_or(usize::MAX)).collect();
    let generated = regex::Regex::new(&format!("{MD}-[a-z0-9]+(-[a-z0-9]+)?")).unwrap();
    let vm = regex::Regex::new("i-[0-9a-f]{16}").unwrap();
    let normal = |text: &str| vm.replace_all(&generated.replace_all(text, format!("{MD}-*")), "i-*").to_string();
    // Each row: its normalised name, then (column, value) with a message's continuation lines joined.
    let mut rows: Vec<(String, Vec<(&str, String)>)> = Vec::new();
    for line in &lines[header + 1..] {
        let cell = |i: usize| -> String {
            let (from, to) = (starts[i], starts.get(i + 1).copied().unwrap_or(usize::MAX));
            if from >= line.len() {
                return String::new();
            }
            line[from..to.min(line.len())].iter().collect::<String>().trim().to_string()
        };
        let name = cell(0);
        let continued = name.chars().all(|c| "│ ".contains(c));
        if !continued {
            let kind_and_name = name.trim_start_matches(|c: char| "│├└─ ".contains(c));
            rows.push((normal(kind_and_name), Vec::new()));
        }
        let Some((_, cells)) = rows.last_mut() else { continue };
        for (i, column) in columns.iter().enumerate().skip(1).filter(|(_, c)| **c != "SINCE") {
            let value = normal(&cell(i));
            match cells.iter_mut().find(|(c, _)| c == column) {
                Some((_, text)) if !value.is_empty() => *text = format!("{text} {value}"),
                Some(_) => {}
                None => cells.push((column, value)),
            }
        }
    }
    rows.sort();
    let mut seen = Snapshot::new();
    for (name, cells) in rows {
        let row = (1..).map(|i| format!("describe {name} #{i}")).find(|k| !seen.contains_key(&format!("{k} REPLICAS")));
        let row = row.unwrap_or_default();
        for (column, value) in cells {
            seen.insert(format!("{row} {column}"), value);
        }
    }
    seen
}
