//! `mcm run --controllers=infrastructure` as `clusterctl init` installs it: an API server with only the CRDs of
//! `config/crd` and CAPI core's, no machine.sapcloud.io kinds (not even MachineClass), no target cluster. The test plays
//! CAPI core's steps for one Machine; the process must get ready, provision the MCMMachine, collect an orphan VM of
//! its class, and make only the requests the install's RBAC (`config/rbac`) allows.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use mcm::api::capi;
use mcm::api::infra::MCMMachine;
use mcm::providers::inmemory::{self, InMemoryCloud, InMemoryDriver};
use mcm::providers::{Driver, MachineInfo, MachineRequest, SecretData};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{McmRun, WAIT, http_get};
use crate::machines::NS;
use crate::support::{TempDir, wait_until};

fn repo_file(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The CRDs `clusterctl init` installs (config/crd's bases) and CAPI core's (from crds/).
async fn install_provider_crds(client: &kube::Client) {
    let kustomization: Value = serde_yaml::from_str(&repo_file("config/crd/kustomization.yaml")).unwrap();
    let mut files: Vec<String> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("config/crd/{}", r.as_str().unwrap()))
        .collect();
    for entry in std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        if name.starts_with("cluster.x-k8s.io_") {
            files.push(format!("crds/{name}"));
        }
    }
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for file in files {
        let crd: CustomResourceDefinition = serde_yaml::from_str(&repo_file(&file)).unwrap();
        api.create(&PostParams::default(), &crd).await.unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    // A real kube-apiserver serves a CRD's kind only once it is Established, a moment after the create.
    wait_until("the CRDs to be established", WAIT, || async {
        let crds = api.list(&Default::default()).await.ok()?.items;
        crds.iter()
            .all(|crd| {
                crd.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Established" && c.status == "True"))
            })
            .then_some(())
    })
    .await;
}

async fn create<K>(client: &kube::Client, object: Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).unwrap();
    Api::<K>::namespaced(client.clone(), NS).create(&PostParams::default(), &object).await.unwrap();
}

/// What upstream CAPI core, a bootstrap provider and the user make for Machine `name` of Cluster `c1` (as
/// tests/integration/infra does it against `mcm dev`).
async fn play_capi_core(client: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap())
        .await
        .unwrap();
    create::<capi::Cluster>(
        client,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "c1"},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMCluster", "name": "c1"}},
        }),
    )
    .await;
    let provisioned = json!({"status": {"initialization": {"infrastructureProvisioned": true}}});
    let clusters: Api<capi::Cluster> = Api::namespaced(client.clone(), NS);
    clusters.patch_status("c1", &PatchParams::default(), &Patch::Merge(&provisioned)).await.unwrap();
    create::<Secret>(
        client,
        json!({
            "metadata": {"name": format!("{name}-bootstrap"), "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": "#!/bin/sh\necho bootstrap", "format": "cloud-config"},
        }),
    )
    .await;
    create::<capi::Machine>(
        client,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "spec": {
                "clusterName": "c1",
                "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachine", "name": name},
            },
        }),
    )
    .await;
    let machine = Api::<capi::Machine>::namespaced(client.clone(), NS).get(name).await.unwrap();
    create::<MCMMachine>(
        client,
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachine",
            "metadata": {
                "name": name,
                "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                "ownerReferences": [{
                    "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": name,
                    "uid": machine.metadata.uid, "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "spec": crate::infra::inline_class(json!({})),
        }),
    )
    .await;
}

/// The rules of the install's roles: (apiGroup, resource, verb).
fn allowed_by_rbac() -> BTreeSet<(String, String, String)> {
    let mut allowed = BTreeSet::new();
    for file in ["config/rbac/role.yaml", "config/rbac/leader_election_role.yaml"] {
        let role: Value = serde_yaml::from_str(&repo_file(file)).unwrap();
        for rule in role["rules"].as_array().unwrap() {
            let list = |key: &str| -> Vec<String> {
                rule[key].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
            };
            for group in list("apiGroups") {
                for resource in list("resources") {
                    for verb in list("verbs") {
                        allowed.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_infrastructure_install_comes_up_and_provisions_an_mcmmachine() {
    // On the real kube-apiserver the process runs as the install's ServiceAccount and the real authorizer checks
    // every request (crate::kube); on the embedded server, the request counters are compared with config/rbac.
    let (server, kube, client) = if crate::kube::enabled() {
        let cluster = crate::kube::KubeCluster::start_with(crate::kube::Roles::Shipped, false).await;
        let client = cluster.admin_client().await;
        (None, Some(cluster), client)
    } else {
        let (server, client) = crate::support::start().await;
        (Some(server), None, client)
    };
    install_provider_crds(&client).await;
    let cloud = InMemoryCloud::with_seed(12);
    let (cloud_addr, cloud_server) =
        mcm::providers::inmemory::remote::serve(cloud.clone(), SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    play_capi_core(&client, "m1").await;
    // A VM of m1's class that no MCMMachine claims: the orphan collection at start must delete it, which reads
    // MCMMachines, MCM Machines and Clusters from the API server first.
    let orphan = InMemoryDriver::new(cloud.clone())
        .create_machine(&MachineRequest {
            machine: MachineInfo { name: "forgotten".into(), namespace: NS.into(), ..Default::default() },
            class: inmemory::class("behind", "test", json!({"bootSeconds": 3600})),
            secret: SecretData::default(),
            last_known_state: None,
        })
        .await
        .unwrap()
        .provider_id;
    let dir = TempDir::new("mcm-run-infra");
    let kubeconfig = dir.0.join("kubeconfig");
    match (&server, &kube) {
        (Some(server), _) => {
            server.write_kubeconfig(&kubeconfig).unwrap();
            // From here on, every request the API server counts is the process's.
            server.faults().reset_counts();
        }
        (None, Some(cluster)) => {
            std::fs::write(&kubeconfig, cluster.external.infrastructure_controllers.as_ref().unwrap()).unwrap()
        }
        (None, None) => unreachable!(),
    }

    // The install's arguments (config/manager/manager.yaml). The Lease is in the install's namespace on the real
    // server, the only one its Role covers; the embedded server has no such namespace (nor an authorizer), so there
    // it is in the test namespace.
    let mut args = vec!["--controllers=infrastructure", "--target-kubeconfig=none", "--leader-elect=true"];
    if kube.is_some() {
        args.push("--leader-elect-resource-namespace=mcm-system");
    }
    let run = McmRun::spawn("infra", &kubeconfig, &format!("http://{cloud_addr}"), &dir.0, &args);
    run.wait_line("leading: controllers started", WAIT).await;
    let readyz = run.readyz_url().await;
    wait_until("/readyz to answer 200", WAIT, || async { (http_get(&readyz).await.0 == 200).then_some(()) }).await;

    let machines: Api<MCMMachine> = Api::namespaced(client.clone(), NS);
    let provisioned = wait_until("MCMMachine m1 to be provisioned", WAIT, || async {
        let m = machines.get_opt("m1").await.ok().flatten()?;
        (m.status.as_ref()?.initialization.as_ref()?.provisioned == Some(true)).then_some(m)
    })
    .await;
    let provider_id = provisioned.spec.provider_id.clone().expect("a providerID");
    let live = |id: &str| cloud.vm(id).is_some_and(|vm| vm.exists());
    wait_until("the orphan VM to be collected", WAIT, || async { (!live(&orphan)).then_some(()) }).await;
    let vms = cloud.live_vms();
    assert_eq!(vms.len(), 1, "{vms:?}");
    assert_eq!((vms[0].machine_name.as_str(), vms[0].provider_id.as_str()), ("m1", provider_id.as_str()));

    // Only what the install's RBAC allows (the test's own GETs of MCMMachines are allowed too).
    let allowed = allowed_by_rbac();
    let counts = server.as_ref().map(|s| s.faults().request_counts_by_group()).unwrap_or_default();
    for ((verb, group, resource), count) in counts {
        let key = (group.clone(), resource.clone(), verb.clone());
        assert!(allowed.contains(&key), "{count} {verb} of {group}/{resource}, which config/rbac does not allow");
    }
    // The reconcile that provisioned m1 records its duration only once it returns, after the status write.
    let reconciled = r#"mcm_controller_reconcile_duration_seconds_count{controller="mcmmachine"}"#;
    let metrics = wait_until("a recorded mcmmachine reconcile", WAIT, || async {
        let metrics = run.scrape().await;
        (metrics.get(reconciled) > 0.0).then_some(metrics)
    })
    .await;
    assert_eq!(metrics.get("mcm_leader_election_master_status"), 1.0);
    assert_eq!(metrics.sum("mcm_controller_driver_calls_total", &[r#"operation="create_machine""#]), 1.0);
    assert!(!metrics.0.keys().any(|k| k.starts_with("mcm_machine_items")), "no machine.sapcloud.io gauges");

    run.signal("TERM");
    let mut run = run;
    assert!(run.wait_exit(WAIT).await, "a clean exit on SIGTERM");
    cloud_server.abort();
    if let Some(server) = server {
        server.shutdown().await;
    }
    if let Some(cluster) = kube {
        cluster.assert_nothing_forbidden();
    }
}
