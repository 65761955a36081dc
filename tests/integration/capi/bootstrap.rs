//! A MachineDeployment whose Machines are bootstrapped by a bootstrap provider (`spec.bootstrap.configRef` to a
//! config template), on `mcm dev` with the real infrastructure controllers and the real kubectl. The test plays
//! the bootstrap provider with a minimal kind of its own (`TestConfig`, `TestConfigTemplate`): each Machine gets a
//! config cloned from the template and owned by it, stays Pending (no VM) while its config has no data secret,
//! takes the config's `status.dataSecretName` once `status.initialization.dataSecretCreated` is true and reaches
//! Running; a Machine scaled away takes its config with it.

use mcm::dev::DevOptions;

use super::WAIT;
use crate::support::{Kubectl, TempDir, wait_until};

const NS: &str = "capi-sample";

const CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: testconfigs.bootstrap.cluster.x-k8s.io
  labels: {cluster.x-k8s.io/v1beta2: v1beta2}
spec:
  group: bootstrap.cluster.x-k8s.io
  scope: Namespaced
  names: {kind: TestConfig, listKind: TestConfigList, plural: testconfigs, singular: testconfig}
  versions:
  - name: v1beta2
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: testconfigtemplates.bootstrap.cluster.x-k8s.io
  labels: {cluster.x-k8s.io/v1beta2: v1beta2}
spec:
  group: bootstrap.cluster.x-k8s.io
  scope: Namespaced
  names: {kind: TestConfigTemplate, listKind: TestConfigTemplateList, plural: testconfigtemplates, singular: testconfigtemplate}
  versions:
  - name: v1beta2
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

const OBJECTS: &str = r#"
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: TestConfigTemplate
metadata: {name: joiners, namespace: capi-sample}
spec:
  template:
    metadata: {labels: {role: joiner}}
    spec: {joinToken: abc}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: booted, namespace: capi-sample}
spec:
  clusterName: sample
  replicas: 2
  selector: {matchLabels: {pool: booted}}
  template:
    metadata: {labels: {pool: booted}}
    spec:
      clusterName: sample
      bootstrap:
        configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: TestConfigTemplate, name: joiners}
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: MCMMachineTemplate, name: workers-small}
"#;

/// `name phase dataSecretName BootstrapConfigReady-reason` of each Machine of the deployment.
async fn rows(kubectl: &Kubectl) -> Vec<Vec<String>> {
    let template = r#"{range .items[*]}{.metadata.name} {.status.phase} {.spec.bootstrap.dataSecretName} {.status.conditions[?(@.type=="BootstrapConfigReady")].reason}{"\n"}{end}"#;
    let (_, out, _) = kubectl
        .try_run(&[
            "-n",
            NS,
            "get",
            "machines.cluster.x-k8s.io",
            "-l",
            "pool=booted",
            "-o",
            &format!("jsonpath={template}"),
        ])
        .await;
    out.lines().map(|l| l.split(' ').map(str::to_string).collect()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_providers_config_gates_the_machine_and_gives_it_its_data_secret() {
    let dir = TempDir::new("mcm-capi-bootstrap");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        ..Default::default()
    };
    let (env, _kube) = crate::support::start_dev(options).await;
    let kubectl = Kubectl::new(&env.server);
    let crds = kubectl.file("crds.yaml", CRDS);
    kubectl.run(&["create", "-f", crds.to_str().unwrap()]).await;
    wait_until("the bootstrap kinds served", WAIT, || async {
        kubectl.try_run(&["-n", NS, "get", "testconfigtemplates"]).await.0.then_some(())
    })
    .await;
    let objects = kubectl.file("objects.yaml", OBJECTS);
    kubectl.run(&["create", "-f", objects.to_str().unwrap()]).await;

    // Each Machine gets a config of its own name, cloned from the template and owned by the Machine; without
    // data it stays Pending and its MCMMachine makes no VM.
    let names = wait_until("2 Machines waiting for their bootstrap configs", WAIT, || async {
        let rows = rows(&kubectl).await;
        let waiting = rows.len() == 2 && rows.iter().all(|r| r[1..] == ["Pending", "", "NotReady"]);
        waiting.then(|| rows.into_iter().map(|r| r[0].clone()).collect::<Vec<_>>())
    })
    .await;
    for name in &names {
        let config = kubectl
            .run(&[
                "-n",
                NS,
                "get",
                "testconfig",
                name,
                "-o",
                r#"jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}/{.metadata.ownerReferences[0].controller} {.metadata.labels.cluster\.x-k8s\.io/cluster-name} {.metadata.labels.role} {.metadata.annotations.cluster\.x-k8s\.io/cloned-from-name} {.spec.joinToken}"#,
            ])
            .await;
        assert_eq!(config, format!("Machine/{name}/true sample joiner joiners abc"));
        let machine_ref = kubectl
            .run(&[
                "-n",
                NS,
                "get",
                "machines.cluster.x-k8s.io",
                name,
                "-o",
                "jsonpath={.spec.bootstrap.configRef.kind}",
            ])
            .await;
        assert_eq!(machine_ref, "TestConfig");
        let provider_id =
            kubectl.run(&["-n", NS, "get", "mcmmachine", name, "-o", "jsonpath={.spec.providerID}"]).await;
        assert_eq!(provider_id, "", "no VM before the bootstrap data");
    }

    // The test's bootstrap provider writes the data secrets and reports them.
    for name in &names {
        kubectl
            .run(&["-n", NS, "create", "secret", "generic", &format!("{name}-data"), "--from-literal=value=#!/bin/sh"])
            .await;
        let status =
            format!(r#"{{"status":{{"initialization":{{"dataSecretCreated":true}},"dataSecretName":"{name}-data"}}}}"#);
        kubectl
            .run(&["-n", NS, "patch", "testconfig", name, "--subresource=status", "--type=merge", "-p", &status])
            .await;
    }
    wait_until("both Machines Running with their configs' data secrets", WAIT, || async {
        let rows = rows(&kubectl).await;
        let done = rows.len() == 2
            && rows.iter().all(|r| r[1] == "Running" && r[2] == format!("{}-data", r[0]) && r[3] == "Ready");
        done.then_some(())
    })
    .await;

    // Scaled to one: the Machine that goes takes its config along.
    kubectl.run(&["-n", NS, "scale", "machinedeployments.cluster.x-k8s.io", "booted", "--replicas=1"]).await;
    let gone = wait_until("one Machine and its config deleted", WAIT, || async {
        let rows = rows(&kubectl).await;
        let left: Vec<&String> = rows.iter().map(|r| &r[0]).collect();
        let gone: Vec<&String> = names.iter().filter(|n| !left.contains(n)).collect();
        (left.len() == 1 && gone.len() == 1).then(|| gone[0].clone())
    })
    .await;
    wait_until("the config of the deleted Machine gone", WAIT, || async {
        let (_, out, _) = kubectl.try_run(&["-n", NS, "get", "testconfigs", "-o", "name"]).await;
        (!out.contains(&gone) && out.lines().count() == 1).then_some(())
    })
    .await;
}
