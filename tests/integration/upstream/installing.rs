//! What `clusterctl init` and `clusterctl delete` do to a management cluster with the real clusterctl and
//! upstream core's components:
//! - next to Gardener's MCM, which owns MCM's MachineClass CRD, neither touches that CRD nor its MachineClasses, and
//!   our running manager's MachineClass webhook admits Gardener's classes unjudged;
//! - `--target-namespace` puts every namespaced component, and every namespace reference, into that namespace.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use super::{Management, Tools, machine_classes, text};
use crate::support::Kubectl;

const MACHINE_CLASS_CRD: &str = "machineclasses.machine.sapcloud.io";
const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";

/// Gardener's MCM as a management cluster may already run it: its MachineClass CRD (its own labels, none of
/// clusterctl's) and a MachineClass in a shoot's namespace. Returns the CRD as created.
async fn gardeners_mcm(m: &Management) -> CustomResourceDefinition {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/machine.sapcloud.io_machineclasses.yaml");
    let mut crd: CustomResourceDefinition = serde_yaml::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    crd.metadata.labels = Some([("app.kubernetes.io/managed-by".to_string(), "gardener".to_string())].into());
    let crds: Api<CustomResourceDefinition> = Api::all(m.client.clone());
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    let kubectl = Kubectl::for_kubeconfig(&m.kubeconfig);
    kubectl.run(&["create", "namespace", "shoot--dev--a"]).await;
    let classes: Api<DynamicObject> = Api::namespaced_with(m.client.clone(), "shoot--dev--a", &machine_classes());
    let class = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "worker-a"},
        "provider": "AWS",
        "providerSpec": {"region": "eu-west-1", "machineType": "m5.large"},
    }))
    .unwrap();
    m.wait("Gardener's MachineClass created", || async {
        classes.create(&PostParams::default(), &class).await.ok().map(drop)
    })
    .await;
    created
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_and_delete_leave_gardeners_machineclass_crd_and_classes_alone() {
    let Some(tools) = Tools::find("upstream::installing") else { return };
    let mut m = Management::start(tools, "gardener-neighbour").await;
    let gardener = gardeners_mcm(&m).await;
    let crds: Api<CustomResourceDefinition> = Api::all(m.client.clone());

    // clusterctl init, then core's and our manager as their Pods would run (our webhooks served).
    m.init("http://127.0.0.1:1").await;
    let after_init = crds.get(MACHINE_CLASS_CRD).await.unwrap();
    assert_eq!(after_init.metadata.labels, gardener.metadata.labels, "init left the CRD's labels (its owner) alone");
    assert_eq!(
        after_init.metadata.resource_version, gardener.metadata.resource_version,
        "init did not write Gardener's CRD at all"
    );
    let ours = crds.get("mcmmachines.infrastructure.cluster.x-k8s.io").await.unwrap();
    assert_eq!(
        ours.metadata.labels.unwrap_or_default().get(PROVIDER_LABEL).map(String::as_str),
        Some("infrastructure-mcm")
    );

    // Our MachineClass webhook sees Gardener's classes (same kind) but admits them unjudged: a field our strict
    // parser does not know (Gardener's providers ignore unknown fields) is not refused.
    let stderr = m.dir.0.join("mcm-infrastructure.stderr");
    m.wait("our manager to have read the MachineClass CRD", || async {
        std::fs::read_to_string(&stderr).ok()?.contains("MachineClass webhook: classes admitted unjudged").then_some(())
    })
    .await;
    let newer = m.dir.0.join("gardener-class-newer.yaml");
    std::fs::write(
        &newer,
        "apiVersion: machine.sapcloud.io/v1alpha1\nkind: MachineClass\nmetadata:\n  name: worker-b\n  namespace: shoot--dev--a\n\
         provider: AWS\nproviderSpec:\n  region: eu-west-1\n  machineType: m5.large\n  aFieldOfANewerGardener: true\n",
    )
    .unwrap();
    let kubectl = Kubectl::for_kubeconfig(&m.kubeconfig);
    let (ok, stdout, warned) = kubectl.try_run(&["create", "-f", newer.to_str().unwrap()]).await;
    assert!(ok, "Gardener's class was refused: {stdout}{warned}\n{}", m.logs());
    assert!(warned.contains("not validated: the MachineClass CRD is not the one this provider installs"), "{warned}");

    // --include-crd: our CRDs go, Gardener's CRD and its MachineClass stay.
    let (ok, stdout, stderr) = m.clusterctl(&["delete", "--infrastructure", "mcm", "--include-crd"]).await;
    assert!(ok, "clusterctl delete --include-crd failed:\n{stderr}\n{stdout}");
    for crd in ["mcmclusters", "mcmclustertemplates", "mcmmachines", "mcmmachinetemplates"] {
        let name = format!("{crd}.infrastructure.cluster.x-k8s.io");
        m.wait(&format!("CRD {name} deleted"), || async { crds.get_opt(&name).await.unwrap().is_none().then_some(()) })
            .await;
    }
    let after_delete = crds.get(MACHINE_CLASS_CRD).await.unwrap();
    assert!(after_delete.metadata.deletion_timestamp.is_none(), "Gardener's CRD is not being deleted");
    assert_eq!(after_delete.metadata.resource_version, gardener.metadata.resource_version, "nor written");
    let classes: Api<DynamicObject> = Api::namespaced_with(m.client.clone(), "shoot--dev--a", &machine_classes());
    let class = classes.get_opt("worker-a").await.unwrap().expect("Gardener's MachineClass is still there");
    assert!(class.metadata.deletion_timestamp.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_into_another_namespace_takes_every_namespace_reference_along() {
    let Some(tools) = Tools::find("upstream::installing") else { return };
    let m = Management::start(tools, "target-namespace").await;
    m.install(&["--core", &m.core()]).await;
    m.install(&["--infrastructure", "mcm", "--target-namespace", "other"]).await;

    let kubectl = Kubectl::for_kubeconfig(&m.kubeconfig);
    let selector = format!("{PROVIDER_LABEL}=infrastructure-mcm");
    let get = |kinds: &'static str| {
        let (kubectl, selector) = (&kubectl, &selector);
        async move {
            let listed = kubectl.run(&["get", kinds, "-A", "-l", selector, "-o", "json"]).await;
            serde_json::from_str::<Value>(&listed).unwrap()["items"].as_array().unwrap().clone()
        }
    };
    let namespaced =
        get("deployments,serviceaccounts,roles,rolebindings,secrets,services,certificates.cert-manager.io,issuers.cert-manager.io")
            .await;
    let kinds: Vec<&str> = namespaced.iter().map(|o| text(o, "/kind")).collect();
    for kind in ["Deployment", "ServiceAccount", "Role", "RoleBinding", "Secret", "Service", "Certificate", "Issuer"] {
        assert!(kinds.contains(&kind), "a {kind} of ours: {kinds:?}");
    }
    for object in &namespaced {
        assert_eq!(text(object, "/metadata/namespace"), "other", "{}", object["metadata"]);
    }
    let cluster_scoped = get(
        "namespaces,clusterroles,clusterrolebindings,validatingwebhookconfigurations,mutatingwebhookconfigurations",
    )
    .await;
    let cluster_kinds: Vec<&str> = cluster_scoped.iter().map(|o| text(o, "/kind")).collect();
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        assert!(cluster_kinds.contains(&kind), "a {kind} of ours: {cluster_kinds:?}");
    }
    let namespaces: Vec<&str> =
        cluster_scoped.iter().filter(|o| o["kind"] == "Namespace").map(|o| text(o, "/metadata/name")).collect();
    assert_eq!(namespaces, ["other"]);
    let (exists, _, _) = kubectl.try_run(&["get", "namespace", "mcm-system"]).await;
    assert!(!exists, "nothing of ours made mcm-system");
    // Every binding's ServiceAccount is the Deployment's, in `other`.
    let deployment = namespaced.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let account = text(deployment, "/spec/template/spec/serviceAccountName");
    for binding in namespaced.iter().chain(&cluster_scoped).filter(|o| text(o, "/kind").ends_with("Binding")) {
        let subjects = binding["subjects"].as_array().unwrap();
        assert_eq!(subjects.len(), 1, "{binding}");
        assert_eq!((text(&subjects[0], "/name"), text(&subjects[0], "/namespace")), (account, "other"), "{binding}");
    }
    // The leader-election namespace is the Pod's own.
    let args = deployment.pointer("/spec/template/spec/containers/0/args").unwrap();
    assert!(args.as_array().unwrap().iter().any(|a| a == "--leader-elect-resource-namespace=$(POD_NAMESPACE)"));
    // No object of ours names the default namespace anywhere: not the Certificate's DNS names, not the webhooks'
    // Service reference, not the CA injection annotation.
    for object in namespaced.iter().chain(&cluster_scoped) {
        let text = object.to_string();
        assert!(!text.contains("mcm-system"), "{text}");
    }
    let plan = m.clusterctl_ok(&["upgrade", "plan"]).await;
    let ours = plan.lines().find(|l| l.contains("infrastructure-mcm")).unwrap_or_else(|| panic!("{plan}"));
    assert!(ours.contains("other"), "{ours}");
}
