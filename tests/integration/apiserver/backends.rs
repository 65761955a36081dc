//! The embedded API server next to a real kube-apiserver (`make upstream-tools` builds it; crate::kube): the same
//! requests to both, the same answers expected. Each difference the real server showed is a test here, fixed in the
//! embedded server (docs/testing.md lists them).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::kube::{KubeCluster, Roles};
use crate::support::{Kubectl, install_crds, start, wait_until};

/// Both servers with our CRDs, an administrator's client and kubectl for each: `[embedded, kube]`.
struct Both {
    clients: [kube::Client; 2],
    kubectl: [Kubectl; 2],
    _embedded: mcm::apiserver::ApiServer,
    _kube: KubeCluster,
}

impl Both {
    /// Starts both, or `None` (saying so) when the real one has not been built.
    async fn start(test: &str) -> Option<Both> {
        if !KubeCluster::built(test) {
            return None;
        }
        let (embedded, embedded_client) = start().await;
        install_crds(&embedded_client).await;
        let kube = KubeCluster::start(Roles::Shipped).await;
        let kube_client = kube.admin_client().await;
        let kubectl = [Kubectl::new(&embedded), Kubectl::for_kubeconfig(&kube.admin_kubeconfig_file())];
        Some(Both { clients: [embedded_client, kube_client], kubectl, _embedded: embedded, _kube: kube })
    }
}

const BACKENDS: [&str; 2] = ["embedded", "kube-apiserver"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_whose_owners_do_not_exist_is_collected() {
    let Some(both) = Both::start("an_object_whose_owners_do_not_exist_is_collected").await else { return };
    for (client, backend) in both.clients.iter().zip(BACKENDS) {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let owner = api
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap())
            .await
            .unwrap();
        let owner_uid = owner.metadata.uid.unwrap();
        let reference =
            |name: &str, uid: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid});
        let missing = "00000000-0000-0000-0000-000000000001";
        for (name, owners) in [
            ("orphan", json!([reference("gone", missing)])),
            ("half", json!([reference("owner", &owner_uid), reference("gone", missing)])),
        ] {
            let object = json!({"metadata": {"name": name, "ownerReferences": owners}});
            api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
        }
        wait_until(&format!("{backend}: the orphan to be collected"), Duration::from_secs(60), || async {
            api.get_opt("orphan").await.unwrap().is_none().then_some(())
        })
        .await;
        wait_until(&format!("{backend}: the missing owner's reference to go"), Duration::from_secs(60), || async {
            let half = api.get("half").await.unwrap();
            let uids: Vec<String> = half.metadata.owner_references?.into_iter().map(|r| r.uid).collect();
            (uids == [owner_uid.clone()]).then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_crds_are_structural_and_kubectl_explains_and_prints_them_alike() {
    let Some(both) = Both::start("our_crds_are_structural_and_kubectl_explains_and_prints_them_alike").await else {
        return;
    };
    // The real server publishes a CRD only with a structural schema; it says so in the conditions otherwise.
    let crds: Api<CustomResourceDefinition> = Api::all(both.clients[1].clone());
    for crd in crds.list(&Default::default()).await.unwrap() {
        let name = crd.metadata.name.clone().unwrap();
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        let status = |t: &str| conditions.iter().find(|c| c.type_ == t).map(|c| c.status.clone());
        assert_eq!(status("Established").as_deref(), Some("True"), "{name}: {conditions:?}");
        assert_eq!(status("NonStructuralSchema"), None, "{name}: {conditions:?}");
    }

    let objects = "apiVersion: v1\nkind: Namespace\nmetadata: {name: same}\n---\n\
        apiVersion: machine.sapcloud.io/v1alpha1\nkind: MachineDeployment\nmetadata: {name: web, namespace: same}\n\
        spec:\n  replicas: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n\
        \x20   spec: {class: {kind: MachineClass, name: small}}\n---\n\
        apiVersion: machine.sapcloud.io/v1alpha1\nkind: Machine\nmetadata: {name: m1, namespace: same}\n\
        spec: {class: {kind: MachineClass, name: small}}\n";
    let mut seen: Vec<Vec<String>> = Vec::new();
    for kubectl in &both.kubectl {
        let file = kubectl.file("objects.yaml", objects);
        kubectl.run(&["apply", "-f", file.to_str().unwrap()]).await;
        let mut outputs = Vec::new();
        for args in [
            &["explain", "machinedeployments.machine.sapcloud.io.spec.strategy"][..],
            &["explain", "machines.machine.sapcloud.io.spec.class"],
            &["explain", "mcmmachines.spec", "--api-version=infrastructure.cluster.x-k8s.io/v1alpha1"],
            &["explain", "machineclasses.machine.sapcloud.io", "--recursive"],
        ] {
            outputs.push(kubectl.run(args).await);
        }
        // Tables: the header and the names (AGE differs, empty cells make the rest ambiguous to split).
        for args in [
            &["get", "-n", "same", "machinedeployments.machine.sapcloud.io"][..],
            &["get", "-n", "same", "machines.machine.sapcloud.io", "-o", "wide"],
        ] {
            let table = kubectl.run(args).await;
            let mut lines = table.lines();
            let mut rows = vec![lines.next().unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" ")];
            rows.extend(lines.map(|line| line.split_whitespace().next().unwrap_or_default().to_string()));
            outputs.push(rows.join("\n"));
        }
        seen.push(outputs);
    }
    for (embedded, real) in seen[0].iter().zip(&seen[1]) {
        pretty_assertions::assert_eq!(embedded, real, "the embedded server answers as kube-apiserver does");
    }
}

/// Every field the embedded server stored is stored alike by kube-apiserver (which also fills in its defaults, so
/// the real object may have more).
fn assert_stored_alike(embedded: &serde_json::Value, real: &serde_json::Value, path: &str) {
    match (embedded, real) {
        (serde_json::Value::Object(e), serde_json::Value::Object(r)) => {
            for (key, value) in e {
                let real =
                    r.get(key).unwrap_or_else(|| panic!("{path}.{key}: only the embedded server stored {value}"));
                assert_stored_alike(value, real, &format!("{path}.{key}"));
            }
        }
        (serde_json::Value::Array(e), serde_json::Value::Array(r)) => {
            assert_eq!(e.len(), r.len(), "{path}: {embedded} vs {real}");
            for (i, (e, r)) in e.iter().zip(r).enumerate() {
                assert_stored_alike(e, r, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(embedded, real, "{path}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_sends_protobuf_that_both_servers_store_alike() {
    let Some(both) = Both::start("kubectl_create_sends_protobuf_that_both_servers_store_alike").await else {
        return;
    };
    let commands: [&[&str]; 8] = [
        &["create", "deployment", "web", "--image=nginx:1.27", "--replicas=2", "--port=80"],
        &["create", "serviceaccount", "robot"],
        &["create", "role", "reader", "--verb=get,list", "--resource=pods,configmaps"],
        &["create", "job", "once", "--image=busybox", "--", "echo", "hi"],
        &["create", "secret", "generic", "s", "--from-literal=k=v", "--from-literal=empty="],
        &["create", "configmap", "c", "--from-literal=a=1"],
        &["create", "service", "clusterip", "web", "--tcp=80:8080"],
        &["create", "poddisruptionbudget", "web", "--selector=app=web", "--min-available=50%"],
    ];
    let kinds = [
        "deployment/web",
        "serviceaccount/robot",
        "role/reader",
        "job/once",
        "secret/s",
        "configmap/c",
        "service/web",
        "pdb/web",
    ];
    let mut stored: Vec<Vec<serde_json::Value>> = Vec::new();
    for kubectl in &both.kubectl {
        for args in commands {
            kubectl.run(args).await;
        }
        let mut objects = Vec::new();
        for kind in kinds {
            let mut object: serde_json::Value =
                serde_json::from_str(&kubectl.run(&["get", kind, "-o", "json"]).await).unwrap();
            // What each server makes up itself.
            for generated in ["uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"] {
                object["metadata"].as_object_mut().unwrap().remove(generated);
            }
            object.as_object_mut().unwrap().remove("status");
            // The real server assigns cluster IPs; the embedded one does not.
            if kind.starts_with("service/") {
                for field in ["clusterIP", "clusterIPs"] {
                    object["spec"].as_object_mut().unwrap().remove(field);
                }
            }
            objects.push(object);
        }
        stored.push(objects);
    }
    for ((embedded, real), kind) in stored[0].iter().zip(&stored[1]).zip(kinds) {
        assert_stored_alike(embedded, real, kind);
    }
}
