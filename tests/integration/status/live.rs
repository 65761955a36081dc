//! `mcm status` against the embedded API server: the same trees as from the fixture files, `--watch` printing a new
//! tree when a Machine changes, and `kubectl mcm status` through a `kubectl-mcm` link the real kubectl finds.

use std::collections::HashMap;
use std::fmt::Debug;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use mcm::api::{capi, infra, mcm as mcm_api};
use mcm::status::Inventory;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::io::AsyncReadExt;

use super::{NOW, check_golden, fixture, golden, mcm_status_async as mcm_status};
use crate::support::{TempDir, install_crds, start, wait_until};

const WAIT: Duration = Duration::from_secs(60);

/// Creates `object` as the fixture has it: owner references pointing at the owners' new UIDs (`uids`: fixture UID
/// -> server UID), then its status through the status subresource.
async fn put<K>(api: &Api<K>, mut object: K, uids: &mut HashMap<String, String>)
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug,
{
    let meta = object.meta_mut();
    let fixture_uid = meta.uid.take();
    meta.resource_version = None;
    meta.deletion_timestamp = None;
    meta.creation_timestamp = None;
    for owner in meta.owner_references.iter_mut().flatten() {
        owner.uid = uids.get(&owner.uid).cloned().unwrap_or_else(|| panic!("owner {} created first", owner.name));
    }
    let status = serde_json::to_value(&object).unwrap()["status"].clone();
    let created = api.create(&PostParams::default(), &object).await.unwrap();
    if let Some(uid) = fixture_uid {
        uids.insert(uid, created.uid().unwrap());
    }
    if !status.is_null() {
        let patch = Patch::Merge(json!({ "status": status }));
        api.patch_status(&created.name_any(), &PatchParams::default(), &patch).await.unwrap();
    }
}

/// The API of `object`'s namespace.
fn namespaced<K>(client: &Client, object: &K) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(client.clone(), object.meta().namespace.as_deref().unwrap())
}

/// Loads fixture `name` into the server, owners first.
async fn load(client: &Client, name: &str) {
    let inventory = Inventory::from_documents(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap();
    let mut namespaces: Vec<String> = Vec::new();
    let mut note = |ns: Option<String>| namespaces.extend(ns.filter(|ns| !namespaces.contains(ns)));
    inventory.mcm_deployments.iter().for_each(|o| note(o.namespace()));
    inventory.capi_deployments.iter().for_each(|o| note(o.namespace()));
    let namespace_api: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces.iter() {
        if namespace_api.get_opt(ns).await.unwrap().is_none() {
            let object = Namespace {
                metadata: kube::api::ObjectMeta { name: Some(ns.clone()), ..Default::default() },
                ..Default::default()
            };
            namespace_api.create(&PostParams::default(), &object).await.unwrap();
        }
    }
    let mut uids = HashMap::new();
    for o in inventory.machine_classes.clone().unwrap_or_default() {
        put(&namespaced::<mcm_api::MachineClass>(client, &o), o, &mut uids).await;
    }
    for o in inventory.nodes.clone().unwrap_or_default() {
        put(&Api::<Node>::all(client.clone()), o, &mut uids).await;
    }
    for o in inventory.mcm_deployments {
        put(&namespaced::<mcm_api::MachineDeployment>(client, &o), o, &mut uids).await;
    }
    for o in inventory.mcm_sets {
        put(&namespaced::<mcm_api::MachineSet>(client, &o), o, &mut uids).await;
    }
    for o in inventory.mcm_machines {
        put(&namespaced::<mcm_api::Machine>(client, &o), o, &mut uids).await;
    }
    for o in inventory.capi_deployments {
        put(&namespaced::<capi::MachineDeployment>(client, &o), o, &mut uids).await;
    }
    for o in inventory.capi_sets {
        put(&namespaced::<capi::MachineSet>(client, &o), o, &mut uids).await;
    }
    for o in inventory.capi_machines {
        put(&namespaced::<capi::Machine>(client, &o), o, &mut uids).await;
    }
    for o in inventory.infra_machines {
        put(&namespaced::<infra::MCMMachine>(client, &o), o, &mut uids).await;
    }
}

/// An embedded API server with every CRD and the healthy fixtures of both flavours; its kubeconfig in `dir`.
async fn server_with_fixtures(dir: &TempDir) -> (mcm::apiserver::ApiServer, Client, std::path::PathBuf) {
    let (server, client) = start().await;
    install_crds(&client).await;
    load(&client, "mcm-healthy").await;
    load(&client, "capi-healthy").await;
    let kubeconfig = dir.0.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    (server, client, kubeconfig)
}

#[tokio::test]
async fn a_cluster_shows_the_same_trees_as_the_files() {
    let dir = TempDir::new("mcm-status-live");
    let (_server, _client, kubeconfig) = server_with_fixtures(&dir).await;
    let k = kubeconfig.to_str().unwrap();
    let (ok, stdout, stderr) = mcm_status(&["--kubeconfig", k, "-n", "shop", "--now", NOW]).await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout, golden("mcm-healthy.txt"));
    let (ok, stdout, stderr) = mcm_status(&["--kubeconfig", k, "--namespace", "prod", "--now", NOW]).await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout, golden("capi-healthy.txt"));
    let (ok, stdout, stderr) = mcm_status(&["--kubeconfig", k, "-A", "--now", NOW, "-o", "json"]).await;
    assert!(ok, "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let groups: Vec<&str> =
        value["groups"].as_array().unwrap().iter().map(|g| g["apiGroup"].as_str().unwrap()).collect();
    assert_eq!(groups, ["cluster.x-k8s.io", "machine.sapcloud.io"], "prod, then shop");
    let (ok, _, stderr) = mcm_status(&["--kubeconfig", k, "-n", "shop", "nope"]).await;
    assert!(!ok);
    assert!(stderr.contains("no MachineDeployment \"nope\" in namespace shop"), "{stderr}");
}

#[tokio::test]
async fn watch_prints_the_tree_again_when_a_machine_changes() {
    let dir = TempDir::new("mcm-status-watch");
    let (_server, client, kubeconfig) = server_with_fixtures(&dir).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcm"))
        .args(["status", "--watch", "-n", "shop", "--now", NOW, "--kubeconfig"])
        .arg(&kubeconfig)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = Arc::new(Mutex::new(String::new()));
    let mut stdout = child.stdout.take().unwrap();
    let sink = output.clone();
    tokio::spawn(async move {
        let mut buffer = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buffer).await {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    });
    let first = golden("mcm-healthy.txt");
    let seen = || output.lock().unwrap().clone();
    wait_until("the first tree", WAIT, || async { (seen() == first).then_some(()) }).await;

    // One write: machine b turns Unknown (the health check's status), so the health timeout counts down.
    let machines: Api<mcm_api::Machine> = Api::namespaced(client.clone(), "shop");
    let patch = json!({"status": {
        "conditions": [{"type": "Ready", "status": "False"}],
        "currentStatus": {"phase": "Unknown", "lastUpdateTime": "2025-06-01T11:56:00Z"},
        "lastOperation": {"type": "HealthCheck", "state": "Processing", "lastUpdateTime": "2025-06-01T11:56:00Z",
            "description": "Machine workers-6b7d9-b is unhealthy - changing MachinePhase to Unknown. Node conditions: [Ready=False]"},
    }});
    machines.patch_status("workers-6b7d9-b", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let complete = |text: &str| {
        text.split_once("---\n")
            .is_some_and(|(_, second)| second.ends_with("MachineSets at 0 replicas  0/0    Empty\n"))
    };
    wait_until("the second tree", WAIT, || async { complete(&seen()).then_some(()) }).await;
    child.start_kill().unwrap();
    let _ = child.wait().await;
    let all = seen();
    assert!(all.starts_with(&first));
    assert!(all.contains("Failed in 6m (health timeout)"), "{all}");
    check_golden("watch.txt", &all);
}

/// The real kubectl with `dir` first on `PATH` and `KUBECONFIG` set.
async fn kubectl(dir: &std::path::Path, kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let out = tokio::process::Command::new("kubectl")
        .args(args)
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("kubectl is installed (.ci/run installs Debian's kubernetes-client)");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[tokio::test]
async fn kubectl_finds_the_plugin_and_runs_status_with_kubectls_config_rules() {
    let dir = TempDir::new("mcm-status-plugin");
    let (_server, _client, kubeconfig) = server_with_fixtures(&dir).await;
    let bin = dir.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("kubectl-mcm");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_mcm"), &link).unwrap();

    let (ok, stdout, stderr) = kubectl(&bin, &kubeconfig, &["plugin", "list"]).await;
    assert!(stdout.lines().any(|l| l.trim() == link.to_str().unwrap()), "kubectl plugin list: {ok} {stdout} {stderr}");

    // KUBECONFIG and -n.
    let (ok, stdout, stderr) = kubectl(&bin, &kubeconfig, &["mcm", "status", "-n", "shop", "--now", NOW]).await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout, golden("mcm-healthy.txt"));

    // --context picks a context, whose namespace is the default; without it, the current context's (none: default).
    let mut config: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    let mut context = config["contexts"][0].clone();
    context["name"] = "prod-ctx".into();
    context["context"]["namespace"] = "prod".into();
    config["contexts"].as_sequence_mut().unwrap().push(context);
    let with_context = dir.0.join("kubeconfig-contexts");
    std::fs::write(&with_context, serde_yaml::to_string(&config).unwrap()).unwrap();
    let (ok, stdout, stderr) =
        kubectl(&bin, &with_context, &["mcm", "status", "--context", "prod-ctx", "--now", NOW]).await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout, golden("capi-healthy.txt"));
    let (ok, stdout, stderr) = kubectl(&bin, &with_context, &["mcm", "status", "--now", NOW]).await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "No MachineDeployments, MachineSets or Machines in namespace default.\n");

    // Help and errors name the plugin as kubectl users type it.
    let (ok, _, stderr) = kubectl(&bin, &kubeconfig, &["mcm", "status", "--no-such-flag"]).await;
    assert!(!ok);
    assert!(stderr.contains("kubectl mcm status"), "{stderr}");
}
