//! The user's path with the real tools: `clusterctl init` installs upstream core and us, `clusterctl generate
//! cluster --flavor inmemory` makes a cluster, upstream core's controllers run it through our provider.

use serde_json::json;

use super::{Cloud, Management, NS, Tools, capi, control_plane_machine, infra, list, running_workers, text, workers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_init_then_a_generated_cluster_scales_rolls_heals_and_goes() {
    let Some(tools) = Tools::find("upstream::clusterctl") else { return };
    let mut m = Management::start(tools, "clusterctl").await;
    let cloud = Cloud::start(&m.client).await;

    // clusterctl init, then upgrade plan: our provider with its contract.
    let printed = m.init(&cloud.url).await;
    assert!(printed.contains("Your management cluster has been initialized successfully!"), "{printed}");
    let plan = m.clusterctl_ok(&["upgrade", "plan"]).await;
    assert!(plan.contains("v1beta2"), "{plan}");
    let ours = plan.lines().find(|l| l.contains("infrastructure-mcm")).unwrap_or_else(|| panic!("{plan}"));
    assert!(ours.contains("mcm-system") && ours.contains("InfrastructureProvider"), "{ours}");

    // generate cluster | kubectl apply: three workers Running with what upstream core set.
    m.prepare_cluster("demo", &m.server).await;
    control_plane_machine(&m.client, "demo", None).await;
    let kubectl = m.generate_and_apply("demo", 3).await;
    let first = running_workers(&m, &cloud, "demo-md-0", 3, 1).await;
    for machine in &first {
        let provider_id = text(machine, "/spec/providerID");
        let node = text(machine, "/status/nodeRef/name");
        let vm = cloud.cloud.vm(provider_id).unwrap_or_else(|| panic!("no VM {provider_id}"));
        assert_eq!(vm.machine_name, node, "core linked the Node of the VM");
    }
    m.wait("the MachineDeployment counting 3 available replicas", || async {
        let deployments = list(&m.client, &capi("MachineDeployment", "machinedeployments"), "").await;
        (deployments.len() == 1 && deployments[0].pointer("/status/availableReplicas") == Some(&json!(3))).then_some(())
    })
    .await;
    let describe = m.clusterctl_ok(&["describe", "cluster", "demo", "-n", NS, "--grouping=false"]).await;
    println!("{describe}");
    let deployment = describe
        .lines()
        .find(|l| l.contains("MachineDeployment demo/demo-md-0"))
        .unwrap_or_else(|| panic!("{describe}"));
    assert!(deployment.contains("3/3") && deployment.contains("True"), "{describe}");
    let machines: Vec<&str> = describe.lines().filter(|l| l.contains("Machine demo/demo-md-0-")).collect();
    assert_eq!(machines.len(), 3, "{describe}");
    assert!(machines.iter().all(|l| l.contains("True") && l.contains("Ready")), "{describe}");

    // kubectl scale 3 -> 5 -> 1.
    for replicas in [5, 1] {
        kubectl.run(&["scale", "-n", NS, "machinedeployment/demo-md-0", &format!("--replicas={replicas}")]).await;
        running_workers(&m, &cloud, "demo-md-0", replicas, 1).await;
    }

    // A template change rolls every machine: a new MCMMachineTemplate, the deployment pointed at it.
    let templates = list(&m.client, &infra("MCMMachineTemplate", "mcmmachinetemplates"), "").await;
    let mut template = templates.iter().find(|t| text(t, "/metadata/name") == "demo-md-0").unwrap().clone();
    template["metadata"] = json!({"name": "demo-md-1", "namespace": NS});
    template["spec"]["template"]["spec"]["inlineClass"]["providerSpec"]["machineType"] = json!("m.large");
    kubectl.run(&["apply", "-f", kubectl.file("template.yaml", &template.to_string()).to_str().unwrap()]).await;
    kubectl.run(&["scale", "-n", NS, "machinedeployment/demo-md-0", "--replicas=2"]).await;
    let before = running_workers(&m, &cloud, "demo-md-0", 2, 1).await;
    let patch = json!({"spec": {"template": {"spec": {"infrastructureRef": {"name": "demo-md-1"}}}}}).to_string();
    kubectl.run(&["patch", "-n", NS, "machinedeployment/demo-md-0", "--type=merge", "-p", &patch]).await;
    let after = m
        .wait("every worker replaced by one of template demo-md-1", || async {
            let machines = workers(&m, &cloud, "demo-md-0", 2, 1).await?;
            let old: Vec<&str> = before.iter().map(|b| text(b, "/metadata/name")).collect();
            machines.iter().all(|machine| !old.contains(&text(machine, "/metadata/name"))).then_some(machines)
        })
        .await;
    let mcm_machines =
        list(&m.client, &infra("MCMMachine", "mcmmachines"), "cluster.x-k8s.io/deployment-name=demo-md-0").await;
    assert_eq!(mcm_machines.len(), 2);
    for mm in &mcm_machines {
        assert_eq!(text(mm, "/metadata/annotations/cluster.x-k8s.io~1cloned-from-name"), "demo-md-1", "{mm}");
    }

    // An upstream MachineHealthCheck replaces a machine whose VM dies.
    let mhc = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
        "metadata": {"name": "demo-md-0", "namespace": NS},
        "spec": {
            "clusterName": "demo",
            "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": "demo-md-0"}},
            "checks": {"unhealthyNodeConditions": [
                {"type": "Ready", "status": "Unknown", "timeoutSeconds": 2},
                {"type": "Ready", "status": "False", "timeoutSeconds": 2},
            ]},
        },
    });
    kubectl.run(&["apply", "-f", kubectl.file("mhc.yaml", &mhc.to_string()).to_str().unwrap()]).await;
    let victim = text(&after[0], "/metadata/name").to_string();
    assert!(cloud.cloud.kill(text(&after[0], "/spec/providerID")), "the VM was live");
    m.wait(&format!("{victim} replaced after its VM died"), || async {
        let machines = workers(&m, &cloud, "demo-md-0", 2, 1).await?;
        machines.iter().all(|machine| text(machine, "/metadata/name") != victim).then_some(())
    })
    .await;

    // Deleting the Cluster leaves no VM and no object behind.
    kubectl.run(&["delete", "-n", NS, "cluster/demo", "--wait=false"]).await;
    m.wait("every VM deleted and every cluster object gone", || async {
        let left = list(&m.client, &capi("Machine", "machines"), "").await.len()
            + list(&m.client, &infra("MCMMachine", "mcmmachines"), "").await.len()
            + list(&m.client, &capi("Cluster", "clusters"), "").await.len();
        (left == 0 && cloud.cloud.live_vms().is_empty()).then_some(())
    })
    .await;
    cloud.stop().await;
}
