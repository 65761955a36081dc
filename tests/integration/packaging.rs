//! The clusterctl packaging (`config/`, `clusterctl-metadata.yaml`, `templates/`, `hack/release-manifests.sh`)
//! checked against the clusterctl contract with the real `kubectl kustomize`, and applied to the embedded API server.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{Kubectl, TempDir, start};

/// Every variable the components use, and its default (`None`: required). docs/clusterctl.md lists the same.
const COMPONENT_VARIABLES: &[(&str, Option<&str>)] = &[
    ("AWS_B64ENCODED_ACCESS_KEY_ID", Some("\"\"")),
    ("AWS_B64ENCODED_SECRET_ACCESS_KEY", Some("\"\"")),
    ("AZURE_B64ENCODED_CLIENT_ID", Some("\"\"")),
    ("AZURE_B64ENCODED_CLIENT_SECRET", Some("\"\"")),
    ("AZURE_B64ENCODED_SUBSCRIPTION_ID", Some("\"\"")),
    ("AZURE_B64ENCODED_TENANT_ID", Some("\"\"")),
    ("GCP_B64ENCODED_CREDENTIALS", Some("\"\"")),
    ("MCM_KUBE_API_BURST", Some("30")),
    ("MCM_KUBE_API_QPS", Some("20")),
    ("MCM_LOG_LEVEL", Some("info")),
];

/// Kinds that are not namespaced among what the components contain.
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `kubectl kustomize config/default`.
fn kustomize_default() -> String {
    kustomize("config/default")
}

/// `kubectl kustomize <dir>` of the repository.
fn kustomize(dir: &str) -> String {
    let out =
        Command::new("kubectl").args(["kustomize", root().join(dir).to_str().unwrap()]).output().expect("kubectl runs");
    assert!(out.status.success(), "kubectl kustomize {dir}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `hack/release-manifests.sh <dir>`; returns the directory.
fn release_manifests(dir: &Path) -> PathBuf {
    let out = Command::new(root().join("hack/release-manifests.sh")).arg(dir).output().expect("script runs");
    assert!(
        out.status.success(),
        "release-manifests: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    dir.to_path_buf()
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("valid YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The variables of a clusterctl manifest: `${VAR}`, `${ VAR }` and the default forms `${VAR:=d}`, `${VAR=d}`,
/// `${VAR:-d}`, `${VAR-d}`, as drone/envsubst (clusterctl's substitution) reads them.
fn variables(text: &str) -> BTreeMap<String, Option<String>> {
    let mut found = BTreeMap::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let end = after.find('}').expect("closed ${");
        let inner = after[..end].trim();
        let (name, default) = match inner.find([':', '=', '-']) {
            Some(i) => {
                let op_len = if inner[i..].starts_with(":=") || inner[i..].starts_with(":-") { 2 } else { 1 };
                (&inner[..i], Some(inner[i + op_len..].to_string()))
            }
            None => (inner, None),
        };
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'),
            "variable names are UPPERCASE_WITH_UNDERSCORES: {inner:?}"
        );
        found.insert(name.to_string(), default);
        rest = &after[end + 1..];
    }
    found
}

/// Substitutes `${…}` as clusterctl would, with `values` over the defaults; a required variable without a value
/// panics.
pub fn substitute(text: &str, values: &BTreeMap<&str, &str>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').unwrap();
        let inner = after[..end].trim();
        let (name, default) = match inner.find([':', '=', '-']) {
            Some(i) => {
                let op_len = if inner[i..].starts_with(":=") || inner[i..].starts_with(":-") { 2 } else { 1 };
                (&inner[..i], Some(&inner[i + op_len..]))
            }
            None => (inner, None),
        };
        // clusterctl counts an empty default (`${VAR:=}`) as no default: the variable is then required.
        let default = default.filter(|d| !d.is_empty());
        let value = values.get(name).copied().or(default).unwrap_or_else(|| panic!("no value for ${{{name}}}"));
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_release_manifests_are_kustomize_output_and_a_local_clusterctl_repository() {
    let dir = TempDir::new("mcm-release");
    let out = release_manifests(&dir.0);
    let components = std::fs::read_to_string(out.join("infrastructure-components.yaml")).unwrap();
    assert_eq!(
        components,
        kustomize_default(),
        "out/infrastructure-components.yaml is `kubectl kustomize config/default`"
    );
    let crd = std::fs::read_to_string(out.join("machineclass-crd.yaml")).unwrap();
    assert_eq!(
        crd,
        kustomize("config/machineclass"),
        "out/machineclass-crd.yaml is `kubectl kustomize config/machineclass`"
    );
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let repo = out.join("repository/infrastructure-mcm").join(&version);
    for file in [
        "infrastructure-components.yaml",
        "metadata.yaml",
        "cluster-template.yaml",
        "cluster-template-azure.yaml",
        "cluster-template-gcp.yaml",
        "cluster-template-inmemory.yaml",
    ] {
        let released = std::fs::read_to_string(out.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let in_repo = std::fs::read_to_string(repo.join(file)).unwrap_or_else(|e| panic!("repository {file}: {e}"));
        assert_eq!(released, in_repo, "{file}");
    }
    let config: Value = serde_yaml::from_str(&std::fs::read_to_string(out.join("clusterctl.yaml")).unwrap()).unwrap();
    let provider = &config["providers"][0];
    assert_eq!(provider["name"], "mcm");
    assert_eq!(provider["type"], "InfrastructureProvider");
    let url = PathBuf::from(provider["url"].as_str().unwrap());
    assert!(url.is_absolute() && url.is_file(), "{url:?}");
    assert_eq!(url.parent().unwrap().file_name().unwrap().to_str(), Some(version.as_str()));
}

#[test]
fn the_components_obey_the_clusterctl_contract() {
    let yaml = kustomize_default();
    let docs = documents(&yaml);
    let namespaces: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Namespace").collect();
    assert_eq!(namespaces.len(), 1, "exactly one Namespace");
    let ns = namespaces[0]["metadata"]["name"].as_str().unwrap();
    assert_eq!(ns, "mcm-system");
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        assert_eq!(
            doc["metadata"]["labels"]["cluster.x-k8s.io/provider"], "infrastructure-mcm",
            "{kind} {name} carries the provider label"
        );
        if CLUSTER_SCOPED.contains(&kind) {
            assert!(doc["metadata"].get("namespace").is_none(), "{kind} {name} is cluster-scoped");
        } else {
            assert_eq!(doc["metadata"]["namespace"], ns, "{kind} {name} is in the provider namespace");
        }
        if kind == "CustomResourceDefinition" {
            let spec = &doc["spec"];
            let expected = format!("{}.{}", spec["names"]["plural"].as_str().unwrap(), spec["group"].as_str().unwrap());
            assert_eq!(name, expected, "clusterctl's CRD name check");
            if spec["group"] == "infrastructure.cluster.x-k8s.io" {
                let served: Vec<&str> = spec["versions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|v| v["served"] == true)
                    .map(|v| v["name"].as_str().unwrap())
                    .collect();
                assert_eq!(
                    doc["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"],
                    served.join("_"),
                    "{name}: contract label"
                );
            }
        }
    }
    let crds: BTreeSet<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    // Only CRDs of our own group: clusterctl labels every component as ours and `clusterctl delete --include-crd`
    // deletes every CRD so labelled, so a CRD another installation owns (Gardener MCM's MachineClass) must not be
    // one (upstream::installing runs both with the real clusterctl).
    let expected: BTreeSet<String> =
        ["mcmclusters", "mcmclustertemplates", "mcmclusteridentities", "mcmmachines", "mcmmachinetemplates"]
            .iter()
            .map(|crd| format!("{crd}.infrastructure.cluster.x-k8s.io"))
            .collect();
    let crds: BTreeSet<String> = crds.iter().map(|c| c.to_string()).collect();
    assert_eq!(crds, expected, "the components' CRDs");
    let deployments: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Deployment").collect();
    assert_eq!(deployments.len(), 1);
    // The Pods carry the provider label too (clusterctl labels only the objects it creates).
    assert_eq!(
        deployments[0]["spec"]["template"]["metadata"]["labels"]["cluster.x-k8s.io/provider"], "infrastructure-mcm",
        "the Pod template carries the provider label"
    );
    let pod = &deployments[0]["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    let manager = containers.iter().find(|c| c["name"] == "manager").expect("a container named manager");
    assert!(
        manager["image"].as_str().unwrap().ends_with(&format!(":v{}", env!("CARGO_PKG_VERSION"))),
        "the image of this release: {}",
        manager["image"]
    );
    assert_eq!(manager["args"][0], "run");
    assert_eq!(manager["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(manager["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(manager["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(manager["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(manager["resources"]["requests"]["memory"].is_string());
    let service_account = pod["serviceAccountName"].as_str().unwrap();
    assert!(docs.iter().any(|d| d["kind"] == "ServiceAccount" && d["metadata"]["name"] == service_account));

    let found = variables(&yaml);
    let expected: BTreeMap<String, Option<String>> =
        COMPONENT_VARIABLES.iter().map(|(k, v)| (k.to_string(), v.map(str::to_string))).collect();
    assert_eq!(found, expected, "the components' variables (update docs/clusterctl.md with this list)");
    let docs_page = std::fs::read_to_string(root().join("docs/clusterctl.md")).unwrap();
    for (name, _) in COMPONENT_VARIABLES {
        assert!(docs_page.contains(&format!("`{name}`")), "docs/clusterctl.md documents {name}");
    }
}

#[test]
fn the_metadata_is_what_clusterctl_validates() {
    let metadata: Value =
        serde_yaml::from_str(&std::fs::read_to_string(root().join("clusterctl-metadata.yaml")).unwrap()).unwrap();
    assert_eq!(metadata["apiVersion"], "clusterctl.cluster.x-k8s.io/v1alpha3");
    assert_eq!(metadata["kind"], "Metadata");
    let series = metadata["releaseSeries"].as_array().expect("releaseSeries");
    assert!(!series.is_empty());
    let mut seen = BTreeSet::new();
    for s in series {
        let key = (s["major"].as_u64().expect("major"), s["minor"].as_u64().expect("minor"));
        assert!(seen.insert(key), "one entry per series: {key:?}");
        assert_eq!(s["contract"], "v1beta2");
    }
    let major: u64 = env!("CARGO_PKG_VERSION_MAJOR").parse().unwrap();
    let minor: u64 = env!("CARGO_PKG_VERSION_MINOR").parse().unwrap();
    assert!(seen.contains(&(major, minor)), "this version's series {major}.{minor} is listed");
}

#[test]
fn the_provider_crds_are_the_generated_ones() {
    let bases = std::fs::read_dir(root().join("config/crd/bases")).unwrap().map(|e| e.unwrap().path());
    let machine_class = root().join("config/machineclass/machine.sapcloud.io_machineclasses.yaml");
    for path in bases.chain([machine_class]) {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let generated =
            std::fs::read_to_string(root().join("crds").join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), generated, "{} differs: run make crds", path.display());
    }
}

#[test]
fn every_template_variable_has_a_value_or_is_standard() {
    let standard =
        ["CLUSTER_NAME", "NAMESPACE", "KUBERNETES_VERSION", "CONTROL_PLANE_MACHINE_COUNT", "WORKER_MACHINE_COUNT"];
    let docs_page = std::fs::read_to_string(root().join("docs/clusterctl.md")).unwrap();
    for entry in std::fs::read_dir(root().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.file_name().unwrap().to_str().unwrap();
        assert!(file.starts_with("cluster-template") && file.ends_with(".yaml"), "{file}");
        for (name, default) in variables(&text) {
            assert!(
                standard.contains(&name.as_str()) || docs_page.contains(&format!("`{name}`")),
                "{file}: ${{{name}}} (default {default:?}) is documented in docs/clusterctl.md"
            );
        }
        // With the required variables set, every document is an object with kind and name, in the namespace.
        let values: BTreeMap<&str, &str> = variables(&text)
            .keys()
            .map(|k| (leak(k), "value"))
            .chain([("CLUSTER_NAME", "demo"), ("NAMESPACE", "default"), ("KUBERNETES_VERSION", "v1.34.1")])
            .collect();
        for doc in documents(&substitute(&text, &values)) {
            assert!(doc["kind"].is_string() && doc["metadata"]["name"].is_string(), "{file}: {doc}");
            assert_eq!(doc["metadata"]["namespace"], "default", "{file}: templates name the target namespace");
        }
    }
}

/// What `clusterctl move` takes along besides a Cluster's owner chain: MachineClasses (their CRD's
/// `clusterctl.cluster.x-k8s.io/move` label) and the Secrets the templates make in the cluster's namespace (the
/// label on each). The provider's own Secrets in `mcm-system` are discovered by move too, and must never carry it.
#[test]
fn clusterctl_move_takes_the_classes_and_the_clusters_secrets_not_the_providers() {
    const MOVE: &str = "clusterctl.cluster.x-k8s.io/move";
    let components = documents(&kustomize_default());
    let labelled = |doc: &Value, label: &str| doc["metadata"]["labels"].get(label).is_some();
    for doc in &components {
        let (kind, name) = (doc["kind"].as_str().unwrap(), doc["metadata"]["name"].as_str().unwrap());
        assert!(!labelled(doc, MOVE), "{kind} {name}: label {MOVE}");
        assert!(!labelled(doc, "clusterctl.cluster.x-k8s.io/move-hierarchy"), "{kind} {name}");
    }
    // MCM's MachineClass CRD, released apart: move finds it (`clusterctl.cluster.x-k8s.io`) and takes every
    // MachineClass (MOVE), but it is not the provider's (no provider label), so `clusterctl delete` leaves it.
    let crd = documents(&kustomize("config/machineclass"));
    assert_eq!(crd.len(), 1);
    assert_eq!(crd[0]["metadata"]["name"], "machineclasses.machine.sapcloud.io");
    assert!(labelled(&crd[0], MOVE) && labelled(&crd[0], "clusterctl.cluster.x-k8s.io"), "{}", crd[0]["metadata"]);
    assert!(!labelled(&crd[0], "cluster.x-k8s.io/provider"), "{}", crd[0]["metadata"]);
    let provider_secrets: BTreeSet<String> = components
        .iter()
        .filter(|d| d["kind"] == "Secret")
        .map(|d| {
            format!("{}/{}", d["metadata"]["namespace"].as_str().unwrap(), d["metadata"]["name"].as_str().unwrap())
        })
        .collect();
    for entry in std::fs::read_dir(root().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let values: BTreeMap<&str, &str> = variables(&text)
            .keys()
            .map(|k| (leak(k), "value"))
            .chain([("CLUSTER_NAME", "demo"), ("NAMESPACE", "demo-ns"), ("KUBERNETES_VERSION", "v1.34.1")])
            .collect();
        let docs = documents(&substitute(&text, &values));
        let mut own_secrets = BTreeSet::new();
        for doc in docs.iter().filter(|d| d["kind"] == "Secret") {
            let name = doc["metadata"]["name"].as_str().unwrap();
            assert!(labelled(doc, MOVE), "{file}: Secret {name} moves with its cluster (label {MOVE})");
            own_secrets.insert(format!("demo-ns/{name}"));
        }
        // Every Secret a class names is the template's own (moved); the provider's (installed on each side) only
        // through an identity: a template never names a Secret outside the cluster's namespace.
        let mut refs = Vec::new();
        secret_refs(&Value::Array(docs.clone()), &mut refs);
        for r in refs {
            let named = format!("{}/{}", r["namespace"].as_str().unwrap_or("demo-ns"), r["name"].as_str().unwrap());
            assert!(own_secrets.contains(&named), "{file}: {named} is not the template's own Secret");
            assert!(!provider_secrets.contains(&named), "{file}: names the provider's Secret {named}");
        }
        // A cloud class takes its credentials from an MCMClusterIdentity.
        for doc in docs.iter().filter(|d| d["kind"] == "MCMMachineTemplate") {
            let spec = &doc["spec"]["template"]["spec"];
            if spec["inlineClass"]["provider"] == "InMemory" {
                continue;
            }
            assert_eq!(spec["identityRef"]["kind"], "MCMClusterIdentity", "{file}: {}", doc["metadata"]["name"]);
            assert_eq!(spec["identityRef"]["name"], "value", "{file}: the identity is MCM_CLUSTER_IDENTITY_NAME");
        }
    }
}

/// Every `secretRef` and `credentialsSecretRef` object under `value`.
fn secret_refs(value: &Value, out: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if key == "secretRef" || key == "credentialsSecretRef" {
                    out.push(v.clone());
                } else {
                    secret_refs(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| secret_refs(v, out)),
        _ => {}
    }
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_components_apply_to_an_api_server() {
    let (server, _client) = start().await;
    let kubectl = Kubectl::new(&server);
    let values: BTreeMap<&str, &str> =
        [("AWS_B64ENCODED_ACCESS_KEY_ID", "QUtJQUVYQU1QTEU="), ("MCM_LOG_LEVEL", "debug")].into();
    let components = substitute(&kustomize_default(), &values);
    // cert-manager's API first, as clusterctl installs cert-manager before any provider.
    let cert_manager =
        std::process::Command::new("bash").arg(root().join("hack/cert-manager-api.sh")).output().unwrap();
    assert!(cert_manager.status.success());
    let cert_manager = kubectl.file("cert-manager.yaml", &String::from_utf8(cert_manager.stdout).unwrap());
    kubectl.run(&["apply", "-f", cert_manager.to_str().unwrap()]).await;
    let path = kubectl.file("components.yaml", &components);
    kubectl.run(&["apply", "-f", path.to_str().unwrap()]).await;
    // Applying again changes nothing and fails nothing.
    kubectl.run(&["apply", "-f", path.to_str().unwrap()]).await;
    let deployment =
        kubectl.run(&["-n", "mcm-system", "get", "deployment", "mcm-controller-manager", "-o", "json"]).await;
    let deployment: Value = serde_json::from_str(&deployment).unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].as_array().unwrap();
    assert!(args.iter().any(|a| a == "--log-level=debug"), "{args:?}");
    let crds = kubectl.run(&["get", "crds", "-o", "name"]).await;
    assert!(crds.contains("mcmmachines.infrastructure.cluster.x-k8s.io"), "{crds}");
    let secret = kubectl
        .run(&[
            "-n",
            "mcm-system",
            "get",
            "secret",
            "mcm-cloud-credentials",
            "-o",
            "jsonpath={.data.providerAccessKeyId}",
        ])
        .await;
    assert_eq!(secret.trim(), "QUtJQUVYQU1QTEU=");
    let roles = kubectl.run(&["get", "clusterrole", "mcm-manager-role", "-o", "name"]).await;
    assert_eq!(roles.trim(), "clusterrole.rbac.authorization.k8s.io/mcm-manager-role");
    let hooks =
        kubectl.run(&["get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "name"]).await;
    assert!(
        hooks.contains(
            "validatingwebhookconfiguration.admissionregistration.k8s.io/mcm-validating-webhook-configuration"
        ),
        "{hooks}"
    );
    // An MCMClusterTemplate keeps `spec.template.metadata` (CAPI's InfraClusterTemplate contract): not pruned.
    let template = serde_json::json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMClusterTemplate",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {"template": {
            "metadata": {"labels": {"team": "a"}, "annotations": {"note": "b"}},
            "spec": {"controlPlaneEndpoint": {"host": "api.demo.example", "port": 6443}},
        }},
    });
    kubectl.run(&["apply", "-f", kubectl.file("template.yaml", &template.to_string()).to_str().unwrap()]).await;
    let stored = kubectl.run(&["-n", "default", "get", "mcmclustertemplate", "demo", "-o", "json"]).await;
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored["spec"]["template"]["metadata"], template["spec"]["template"]["metadata"], "{stored}");
    server.shutdown().await;
}

/// The webhooks are wired as the kubebuilder scaffold CAPI providers use wires them: the configurations call the
/// Service, the Service reaches the manager's webhook port, cert-manager's Certificate names the Service and is
/// injected into the configurations, and its Secret is mounted where `--webhook-cert-dir` points.
#[test]
fn the_webhooks_are_wired_to_the_manager_and_cert_manager() {
    let docs = documents(&kustomize_default());
    let find = |kind: &str| -> Vec<&Value> { docs.iter().filter(|d| d["kind"] == kind).collect() };
    let service = find("Service");
    assert_eq!(service.len(), 1);
    let service = service[0];
    let (service_name, ns) = (service["metadata"]["name"].as_str().unwrap(), "mcm-system");
    let certificate = find("Certificate");
    let certificate = certificate[0];
    let cert_name = certificate["metadata"]["name"].as_str().unwrap();
    assert_eq!(certificate["spec"]["dnsNames"][0], format!("{service_name}.{ns}.svc"));
    let issuer = find("Issuer");
    assert_eq!(certificate["spec"]["issuerRef"]["name"], issuer[0]["metadata"]["name"]);
    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
        let configuration = find(kind)[0];
        assert_eq!(
            configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{ns}/{cert_name}"),
            "{kind}"
        );
        for webhook in configuration["webhooks"].as_array().unwrap() {
            assert_eq!(webhook["clientConfig"]["service"]["name"], service_name);
            assert_eq!(webhook["clientConfig"]["service"]["namespace"], ns);
        }
    }
    let pod = &find("Deployment")[0]["spec"]["template"]["spec"];
    let manager = &pod["containers"][0];
    let args: Vec<&str> = manager["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let port = manager["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == service["spec"]["ports"][0]["targetPort"])
        .expect("the Service's targetPort");
    assert!(args.contains(&format!("--webhook-port={}", port["containerPort"]).as_str()), "{args:?}");
    let dir = args.iter().find_map(|a| a.strip_prefix("--webhook-cert-dir=")).expect("--webhook-cert-dir");
    let mount = manager["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == dir)
        .expect("the cert dir is mounted");
    let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
    assert_eq!(volume["secret"]["secretName"], certificate["spec"]["secretName"]);
}

/// The manager Deployment's `--controllers` runs the infrastructure controllers and nothing else: config/rbac
/// grants what those need (audited by run::infra) and nothing for the MCM flavour's or the `capi` group's, so the
/// value is fixed, not a variable a user could widen at `clusterctl init`.
#[test]
fn the_manager_runs_only_the_controllers_its_rbac_serves() {
    let manager = std::fs::read_to_string(root().join("config/manager/manager.yaml")).unwrap();
    let deployment = documents(&manager).into_iter().find(|d| d["kind"] == "Deployment").unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].as_array().unwrap();
    let list = args.iter().filter_map(Value::as_str).find_map(|a| a.strip_prefix("--controllers=")).unwrap();
    assert!(variables(list).is_empty(), "--controllers={list} is not a clusterctl variable");
    use mcm::run::selection::{INFRASTRUCTURE, KNOWN, OFF_BY_DEFAULT, disabled};
    let disabled = disabled(list, KNOWN, OFF_BY_DEFAULT).unwrap_or_else(|e| panic!("--controllers={list}: {e}"));
    let enabled: Vec<&str> = KNOWN.iter().copied().filter(|k| !disabled.contains(*k)).collect();
    assert_eq!(enabled, [INFRASTRUCTURE], "--controllers={list}");
}

/// A MachineDeployment's selector names its cluster and itself (`cluster.x-k8s.io/deployment-name`), so it cannot
/// match the Machines of another deployment of the cluster, and its Machine template carries those labels.
#[test]
fn every_machine_deployment_selects_only_its_own_machines() {
    let mut checked = 0;
    for entry in std::fs::read_dir(root().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let values: BTreeMap<&str, &str> = variables(&text).keys().map(|k| (leak(k), sample(k))).collect();
        for doc in documents(&substitute(&text, &values)).iter().filter(|d| d["kind"] == "MachineDeployment") {
            let name = doc["metadata"]["name"].as_str().unwrap();
            let selector = doc["spec"]["selector"]["matchLabels"].as_object().expect("matchLabels");
            assert_eq!(selector.get("cluster.x-k8s.io/cluster-name"), Some(&Value::from("demo")), "{file} {name}");
            assert_eq!(selector.get("cluster.x-k8s.io/deployment-name"), Some(&Value::from(name)), "{file} {name}");
            let labels = &doc["spec"]["template"]["metadata"]["labels"];
            for (key, value) in selector {
                assert_eq!(&labels[key], value, "{file} {name}: the Machine template carries {key}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 4, "every template's MachineDeployment: {checked}");
}

/// Templates name no namespace of the provider's installation (`clusterctl init --target-namespace` may put it
/// anywhere): every object and reference is in `${NAMESPACE}`. Credentials references are left to their own
/// change (an identity replaces them) and skipped here.
#[test]
fn templates_name_no_provider_namespace() {
    for entry in std::fs::read_dir(root().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let values: BTreeMap<&str, &str> = variables(&text).keys().map(|k| (leak(k), sample(k))).collect();
        for mut doc in documents(&substitute(&text, &values)) {
            drop_credentials_refs(&mut doc);
            assert!(!doc.to_string().contains("mcm-system"), "{file}: {doc}");
        }
    }
}

fn drop_credentials_refs(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("credentialsSecretRef");
            map.values_mut().for_each(drop_credentials_refs);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_credentials_refs),
        _ => {}
    }
}

/// Every inline class of every cluster template, variables filled with their defaults (or a sample value), is a
/// providerSpec its driver accepts: a template cannot ship a field the driver refuses. And each class can place a VM
/// in every failure domain the template's MCMCluster lists (`lifecycle::infra::place`).
#[test]
fn every_template_class_is_accepted_by_its_driver() {
    let mut checked = BTreeMap::<String, usize>::new();
    for entry in std::fs::read_dir(root().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        let values: BTreeMap<&str, &str> = variables(&text)
            .into_iter()
            .filter(|(_, default)| default.is_none())
            .map(|(k, _)| (leak(&k), sample(&k)))
            .collect();
        let docs = documents(&substitute(&text, &values));
        let failure_domains: Vec<String> = docs
            .iter()
            .filter(|d| d["kind"] == "MCMCluster")
            .flat_map(|d| d["spec"]["failureDomains"].as_array().cloned().unwrap_or_default())
            .filter_map(|fd| fd["name"].as_str().map(str::to_string))
            .collect();
        for doc in docs {
            let class = &doc["spec"]["template"]["spec"]["inlineClass"];
            let (Some(provider), spec) = (class["provider"].as_str(), &class["providerSpec"]) else { continue };
            for fd in &failure_domains {
                let placed = mcm::lifecycle::infra::place(provider, spec, Some(fd));
                assert!(placed.is_ok(), "{file}: {} cannot be placed in {fd}: {placed:?}", doc["metadata"]["name"]);
            }
            let parsed: Result<(), String> = match provider {
                "InMemory" => mcm::providers::inmemory::ProviderSpec::parse(spec).map(drop).map_err(|e| e.to_string()),
                #[cfg(feature = "aws")]
                "AWS" => mcm::providers::aws::ProviderSpec::parse(spec).map(drop).map_err(|e| e.to_string()),
                #[cfg(feature = "azure")]
                "Azure" => mcm::providers::azure::ProviderSpec::parse(spec).map(drop).map_err(|e| e.to_string()),
                #[cfg(feature = "gcp")]
                "GCP" => mcm::providers::gcp::ProviderSpec::parse(spec).map(drop).map_err(|e| e.to_string()),
                _ => continue,
            };
            parsed.unwrap_or_else(|e| panic!("{file}: {} {provider}: {e}", doc["metadata"]["name"]));
            *checked.entry(file.clone()).or_default() += 1;
        }
    }
    assert!(checked.get("cluster-template-inmemory.yaml").is_some_and(|n| *n >= 1), "{checked:?}");
    #[cfg(all(feature = "aws", feature = "azure", feature = "gcp"))]
    for file in ["cluster-template.yaml", "cluster-template-azure.yaml", "cluster-template-gcp.yaml"] {
        assert_eq!(checked.get(file), Some(&2), "{file}: control plane and workers checked ({checked:?})");
    }
}

/// A plausible value for a required template variable, by its name.
fn sample(name: &str) -> &'static str {
    match name {
        "CLUSTER_NAME" => "demo",
        "NAMESPACE" => "default",
        "KUBERNETES_VERSION" => "v1.34.1",
        "AWS_REGION" => "eu-west-1",
        "AWS_ZONE" => "eu-west-1a",
        "AWS_AMI_ID" => "ami-0123456789abcdef0",
        "AWS_SUBNET_ID" => "subnet-0123456789abcdef0",
        "AWS_SECURITY_GROUP_ID" => "sg-0123456789abcdef0",
        "AZURE_LOCATION" => "westeurope",
        "GCP_REGION" => "europe-west1",
        "GCP_ZONE" => "europe-west1-b",
        "CONTROL_PLANE_ENDPOINT_HOST" => "api.demo.example",
        _ => "demo-value",
    }
}
