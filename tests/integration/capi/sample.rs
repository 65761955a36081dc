//! `mcm dev`'s Cluster API sample, through `DevEnvironment` as the binary starts it (the real infrastructure
//! controllers and in-memory cloud, no stand-in): the real kubectl shows 3 Running machines with providerIDs and
//! nodeRefs; a new MCMMachineTemplate and a patch of `infrastructureRef` roll them.

use std::collections::BTreeSet;

use mcm::dev::DevOptions;

use super::WAIT;
use crate::support::{Kubectl, TempDir, wait_until};

const NS: &str = "capi-sample";

/// One row of `kubectl get machines.cluster.x-k8s.io` as custom columns.
#[derive(Debug)]
pub struct Row {
    pub name: String,
    pub phase: String,
    pub provider_id: String,
    pub node: String,
    pub template: String,
}

const COLUMNS: &str = "custom-columns=NAME:.metadata.name,PHASE:.status.phase,PROVIDERID:.spec.providerID,\
NODE:.status.nodeRef.name,DELETING:.metadata.deletionTimestamp";

/// The machines of `namespace` as kubectl prints them, with the template each one's MCMMachine was cloned from.
pub async fn machines(kubectl: &Kubectl, namespace: &str) -> Vec<Row> {
    let (ok, out, _) =
        kubectl.try_run(&["-n", namespace, "get", "machines.cluster.x-k8s.io", "-o", COLUMNS, "--no-headers"]).await;
    let (ok_infra, infra, _) = kubectl
        .try_run(&[
            "-n",
            namespace,
            "get",
            "mcmmachines",
            "-o",
            "custom-columns=NAME:.metadata.name,FROM:.metadata.annotations.cluster\\.x-k8s\\.io/cloned-from-name",
            "--no-headers",
        ])
        .await;
    if !ok || !ok_infra {
        return Vec::new();
    }
    let from: std::collections::BTreeMap<&str, &str> = infra
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?, f.next()?))
        })
        .collect();
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [name, phase, provider_id, node, deleting] = f.as_slice() else { return None };
            Some(Row {
                name: name.to_string(),
                phase: phase.to_string(),
                provider_id: provider_id.to_string(),
                node: node.to_string(),
                template: from.get(name).copied().unwrap_or("<none>").to_string(),
            })
            .filter(|_| *deleting == "<none>")
        })
        .collect()
}

/// Waits until `namespace` has exactly `n` Machines (none being deleted), all Running with a providerID and a
/// nodeRef, all from template `template`; returns their names.
pub async fn wait_running_from(kubectl: &Kubectl, namespace: &str, n: usize, template: &str) -> BTreeSet<String> {
    wait_until(&format!("{n} Running machines from {template} in {namespace}"), WAIT, || async {
        let rows = machines(kubectl, namespace).await;
        let good = rows.len() == n
            && rows.iter().all(|r| {
                r.phase == "Running"
                    && r.provider_id.starts_with("inmemory://")
                    && r.node != "<none>"
                    && r.template == template
            });
        // Counted after the rows: every listed machine is live, and nothing is being deleted any more.
        let (_, names, _) = kubectl.try_run(&["-n", namespace, "get", "machines.cluster.x-k8s.io", "-o", "name"]).await;
        (good && names.lines().count() == n).then(|| rows.into_iter().map(|r| r.name).collect())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_capi_sample_reaches_3_running_machines_and_a_template_change_rolls() {
    let dir = TempDir::new("mcm-dev-capi-sample");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        ..Default::default()
    };
    assert!(options.sample && options.controllers.capi_core, "mcm dev applies the samples and runs CAPI core");
    let (env, _kube) = crate::support::start_dev(options).await;
    assert!(env.sample.iter().any(|s| s == "MachineDeployment capi-sample/workers"), "{:?}", env.sample);
    let kubectl = Kubectl::new(&env.server);

    let first = wait_running_from(&kubectl, NS, 3, "workers-small").await;
    // The default columns a user sees.
    let table = kubectl.run(&["-n", NS, "get", "machines.cluster.x-k8s.io"]).await;
    assert_eq!(table.matches("Running").count(), 3, "{table}");
    // No failure domain was asked for: each reports the zone its class names, through MCMMachine to Machine.
    wait_until("the class's zone as every machine's failure domain", WAIT, || async {
        let (_, zones, _) = kubectl
            .try_run(&["-n", NS, "get", "machines.cluster.x-k8s.io", "-o", "jsonpath={.items[*].status.failureDomain}"])
            .await;
        (zones.split_whitespace().collect::<Vec<_>>() == ["local-a"; 3]).then_some(())
    })
    .await;
    // The Cluster is provisioned and owns its MCMCluster.
    let cluster = kubectl
        .run(&[
            "-n",
            NS,
            "get",
            "clusters.cluster.x-k8s.io",
            "sample",
            "-o",
            "jsonpath={.status.phase} {.status.initialization.infrastructureProvisioned}",
        ])
        .await;
    assert_eq!(cluster, "Provisioned true");
    let owner = kubectl
        .run(&["-n", NS, "get", "mcmcluster", "sample", "-o", "jsonpath={.metadata.ownerReferences[0].kind}"])
        .await;
    assert_eq!(owner, "Cluster");
    // Labelled with its Cluster's name as core labels what a Cluster references: the CLUSTER column.
    let labelled = wait_until("the MCMCluster's cluster-name label", WAIT, || async {
        let (_, out, _) = kubectl.try_run(&["-n", NS, "get", "mcmclusters", "--no-headers"]).await;
        let row: Vec<String> = out.split_whitespace().map(str::to_string).collect();
        (row.len() > 1 && row[1] == "sample").then_some(row)
    })
    .await;
    assert_eq!(labelled[0], "sample", "{labelled:?}");
    // Every Machine's Node exists, with the Machine's providerID.
    for row in machines(&kubectl, NS).await {
        let pid = kubectl.run(&["get", "node", &row.node, "-o", "jsonpath={.spec.providerID}"]).await;
        assert_eq!(pid, row.provider_id, "{row:?}");
    }

    // The infrastructure objects in one table each, and everything under the cluster-api category.
    let infra = kubectl.run(&["-n", NS, "get", "mcmmachines,mcmmachinetemplates,mcmclusters"]).await;
    for column in ["CLUSTER", "PROVIDERID", "PROVISIONED", "READY", "CLASS", "PROVIDER", "CPU"] {
        assert!(infra.contains(column), "{column} missing in:\n{infra}");
    }
    assert_eq!(infra.matches("inmemory://").count(), 3, "{infra}");
    let all = kubectl.run(&["-n", NS, "get", "cluster-api", "-o", "name"]).await;
    for object in [
        "cluster.cluster.x-k8s.io/sample",
        "machinedeployment.cluster.x-k8s.io/workers",
        "mcmcluster.infrastructure.cluster.x-k8s.io/sample",
        "mcmmachinetemplate.infrastructure.cluster.x-k8s.io/workers-small",
    ] {
        assert!(all.lines().any(|l| l == object), "{object} missing in:\n{all}");
    }
    assert_eq!(all.lines().filter(|l| l.starts_with("machine.cluster.x-k8s.io/")).count(), 3, "{all}");
    assert_eq!(all.lines().filter(|l| l.starts_with("mcmmachine.infrastructure")).count(), 3, "{all}");

    // A template change: a new MCMMachineTemplate, then the MachineDeployment pointed at it.
    let small = kubectl.run(&["-n", NS, "get", "mcmmachinetemplate", "workers-small", "-o", "json"]).await;
    let mut large: serde_json::Value = serde_json::from_str(&small).unwrap();
    large["metadata"] = serde_json::json!({"name": "workers-large", "namespace": NS});
    large["spec"]["template"]["spec"]["inlineClass"]["providerSpec"]["machineType"] = "m.large".into();
    let file = kubectl.file("workers-large.json", &large.to_string());
    kubectl.run(&["apply", "-f", file.to_str().unwrap()]).await;
    let patch = r#"{"spec":{"template":{"spec":{"infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"MCMMachineTemplate","name":"workers-large"}}}}}"#;
    kubectl
        .run(&["-n", NS, "patch", "machinedeployments.cluster.x-k8s.io", "workers", "--type", "merge", "-p", patch])
        .await;
    let second = wait_running_from(&kubectl, NS, 3, "workers-large").await;
    assert!(second.is_disjoint(&first), "every machine was replaced: {first:?} -> {second:?}");
    let vms = env.cloud.live_vms();
    assert_eq!(vms.iter().filter(|vm| first.contains(&vm.machine_name)).count(), 0, "the old VMs are gone");
    env.shutdown().await;
}
