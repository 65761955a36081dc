//! The AWS driver under upstream core, against moto: the providerID our driver writes is the one the AWS
//! cloud-controller-manager writes on the Node (`aws:///<zone>/<instance-id>`), so upstream core links the Node.
//! The test plays the kubelet and the cloud-controller-manager: it registers each instance's Node with the
//! providerID built from moto's own description of the instance, not from anything our driver wrote.

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use super::{Cloud, Management, NS, Tools, capi, infra, list, text};
use crate::providers::aws::{ACCESS_KEY_ID, SECRET_ACCESS_KEY, World};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_core_links_the_nodes_of_aws_machines_by_the_cloud_controllers_provider_id() {
    let Some(tools) = Tools::find("upstream::aws") else { return };
    let world = World::start().await;
    let mut m = Management::start(tools, "aws").await;
    // No in-memory VM is made here; the cloud only satisfies `mcm run`'s flag.
    let cloud = Cloud::start(&m.client).await;
    m.init(&cloud.url).await;
    m.prepare_cluster("demo", &m.server).await;

    // The credentials Secret (with moto's endpoint) and a Cluster with two machines on the AWS driver.
    let secrets: Api<Secret> = Api::namespaced(m.client.clone(), NS);
    let credentials = serde_json::from_value(json!({
        "metadata": {"name": "aws-credentials", "labels": {"clusterctl.cluster.x-k8s.io/move": ""}},
        "stringData": {
            "providerAccessKeyId": ACCESS_KEY_ID, "providerSecretAccessKey": SECRET_ACCESS_KEY,
            "endpoint": world.moto.url, "userData": "#cloud-config\n",
        },
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &credentials).await.unwrap();
    let create = |resource: kube::discovery::ApiResource, object: Value| {
        let client = m.client.clone();
        async move {
            let api: Api<DynamicObject> = Api::namespaced_with(client, NS, &resource);
            api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
        }
    };
    create(
        infra("MCMCluster", "mcmclusters"),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMCluster", "metadata": {"name": "demo"},
               "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443}}}),
    )
    .await;
    create(
        capi("Cluster", "clusters"),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "demo"},
               "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMCluster", "name": "demo"}}}),
    )
    .await;
    let bootstrap = serde_json::from_value(json!({
        "metadata": {"name": "demo-bootstrap", "labels": {"cluster.x-k8s.io/cluster-name": "demo"}},
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": "#cloud-config\n", "format": "cloud-config"},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &bootstrap).await.unwrap();
    let names = ["demo-cp-0", "demo-worker-0"];
    for name in names {
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": "demo"});
        if name.contains("-cp-") {
            labels["cluster.x-k8s.io/control-plane"] = json!("");
        }
        create(
            infra("MCMMachine", "mcmmachines"),
            json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachine",
                "metadata": {"name": name, "labels": labels},
                "spec": {"inlineClass": {
                    "provider": "AWS", "providerSpec": world.spec("demo"),
                    "credentialsSecretRef": {"name": "aws-credentials", "namespace": NS},
                }},
            }),
        )
        .await;
        create(
            capi("Machine", "machines"),
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "clusterName": "demo", "version": "v1.34.1",
                    "bootstrap": {"dataSecretName": "demo-bootstrap"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachine", "name": name},
                },
            }),
        )
        .await;
    }

    // Each instance as moto describes it; its Node as the kubelet and the cloud-controller-manager make it.
    let instances = m
        .wait("an EC2 instance for each machine", || async {
            let answer = world.ec2.describe_instances().send().await.ok()?;
            let running: Vec<(String, String, String)> = answer
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .filter(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) != Some("terminated"))
                .map(|i| {
                    let zone = i.placement().and_then(|p| p.availability_zone()).unwrap_or_default().to_string();
                    let name = i.private_dns_name().unwrap_or_default().to_string();
                    (i.instance_id().unwrap_or_default().to_string(), zone, name)
                })
                .collect();
            (running.len() == names.len()).then_some(running)
        })
        .await;
    let nodes: Api<Node> = Api::all(m.client.clone());
    for (id, zone, name) in &instances {
        let node = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"providerID": format!("aws:///{zone}/{id}")},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }

    let machines = m
        .wait("upstream core linking every Machine to its Node", || async {
            let machines = list(&m.client, &capi("Machine", "machines"), "").await;
            (machines.len() == names.len() && machines.iter().all(|x| !text(x, "/status/nodeRef/name").is_empty()))
                .then_some(machines)
        })
        .await;
    for machine in &machines {
        let provider_id = text(machine, "/spec/providerID");
        let (id, zone, node) = instances.iter().find(|(id, _, _)| provider_id.ends_with(id.as_str())).unwrap();
        assert_eq!(provider_id, format!("aws:///{zone}/{id}"), "the cloud-controller-manager's form");
        assert_eq!(text(machine, "/status/nodeRef/name"), node);
    }
    cloud.stop().await;
}

/// Upstream core spreads by `Machine.spec.failureDomain`: a MachineDeployment pinned to one zone of the MCMCluster
/// gets its instances in the subnet the AWS class maps to that zone (not the class's own subnet), and core's
/// Cluster lists the MCMCluster's zones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_core_places_aws_machines_in_the_subnet_of_their_failure_domain() {
    let Some(tools) = Tools::find("upstream::aws placement") else { return };
    let world = World::start().await;
    let subnets = world.ec2.describe_subnets().send().await.unwrap();
    let mut by_zone = std::collections::BTreeMap::<String, String>::new();
    for s in subnets.subnets() {
        by_zone.entry(s.availability_zone().unwrap().to_string()).or_insert_with(|| s.subnet_id().unwrap().into());
    }
    let zones: Vec<(String, String)> = by_zone.into_iter().take(2).collect();
    let ((zone_a, subnet_a), (zone_b, subnet_b)) = (zones[0].clone(), zones[1].clone());

    let mut m = Management::start(tools, "aws-placement").await;
    let cloud = Cloud::start(&m.client).await;
    m.init(&cloud.url).await;
    m.prepare_cluster("zoned", &m.server).await;
    let secrets: Api<Secret> = Api::namespaced(m.client.clone(), NS);
    let credentials = serde_json::from_value(json!({
        "metadata": {"name": "aws-credentials"},
        "stringData": {"providerAccessKeyId": ACCESS_KEY_ID, "providerSecretAccessKey": SECRET_ACCESS_KEY,
                       "endpoint": world.moto.url},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &credentials).await.unwrap();
    let bootstrap = serde_json::from_value(json!({
        "metadata": {"name": "zoned-bootstrap", "labels": {"cluster.x-k8s.io/cluster-name": "zoned"}},
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": "#cloud-config\n", "format": "cloud-config"},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &bootstrap).await.unwrap();
    let create = |resource: kube::discovery::ApiResource, object: Value| {
        let client = m.client.clone();
        async move {
            let api: Api<DynamicObject> = Api::namespaced_with(client, NS, &resource);
            api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
        }
    };
    create(
        infra("MCMCluster", "mcmclusters"),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMCluster", "metadata": {"name": "zoned"},
               "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443},
                        "failureDomains": [{"name": zone_a, "controlPlane": true}, {"name": zone_b, "controlPlane": true}]}}),
    )
    .await;
    create(
        capi("Cluster", "clusters"),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "zoned"},
               "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMCluster", "name": "zoned"}}}),
    )
    .await;
    let mut spec = world.spec("zoned");
    spec["networkInterfaces"][0]["subnetID"] = json!(subnet_a);
    spec["subnetsByZone"] = json!({&zone_a: &subnet_a, &zone_b: &subnet_b});
    create(
        infra("MCMMachineTemplate", "mcmmachinetemplates"),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachineTemplate",
               "metadata": {"name": "zoned-md"},
               "spec": {"template": {"spec": {"inlineClass": {
                   "provider": "AWS", "providerSpec": spec,
                   "credentialsSecretRef": {"name": "aws-credentials", "namespace": NS}}}}}}),
    )
    .await;
    create(
        capi("MachineDeployment", "machinedeployments"),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment", "metadata": {"name": "zoned-md"},
               "spec": {"clusterName": "zoned", "replicas": 2,
                        "selector": {"matchLabels": {"pool": "zoned"}},
                        "template": {"metadata": {"labels": {"pool": "zoned"}},
                                     "spec": {"clusterName": "zoned", "version": "v1.34.1", "failureDomain": zone_b,
                                              "bootstrap": {"dataSecretName": "zoned-bootstrap"},
                                              "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                                    "kind": "MCMMachineTemplate", "name": "zoned-md"}}}}}),
    )
    .await;

    // Core lists the MCMCluster's zones on the Cluster, where KubeadmControlPlane picks from.
    let listed = m
        .wait("Cluster.status.failureDomains from the MCMCluster", || async {
            let clusters = list(&m.client, &capi("Cluster", "clusters"), "").await;
            let fds = clusters.first()?.pointer("/status/failureDomains")?.as_array()?.clone();
            let names: Vec<String> = fds.iter().map(|f| text(f, "/name").to_string()).collect();
            (names.len() == 2).then_some(names)
        })
        .await;
    assert_eq!(listed, [zone_a.clone(), zone_b.clone()]);
    // Both instances of the MachineDeployment in zone B's subnet.
    let instances = m
        .wait("an EC2 instance for each Machine of the MachineDeployment", || async {
            let answer = world.ec2.describe_instances().send().await.ok()?;
            let all: Vec<(String, String)> = answer
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .map(|i| {
                    let zone = i.placement().and_then(|p| p.availability_zone()).unwrap_or_default();
                    (i.subnet_id().unwrap_or_default().to_string(), zone.to_string())
                })
                .collect();
            (all.len() == 2).then_some(all)
        })
        .await;
    for (subnet, zone) in &instances {
        assert_eq!((subnet, zone), (&subnet_b, &zone_b), "{instances:?}");
    }
    let machines = m
        .wait("both MCMMachines to report their zone", || async {
            let machines = list(&m.client, &infra("MCMMachine", "mcmmachines"), "").await;
            (machines.len() == 2 && machines.iter().all(|x| !text(x, "/status/failureDomain").is_empty()))
                .then_some(machines)
        })
        .await;
    for machine in &machines {
        assert_eq!(text(machine, "/status/failureDomain"), zone_b);
        assert!(text(machine, "/spec/providerID").starts_with(&format!("aws:///{zone_b}/")), "{machine}");
    }
    let core_machines =
        list(&m.client, &capi("Machine", "machines"), "cluster.x-k8s.io/deployment-name=zoned-md").await;
    assert!(core_machines.iter().all(|x| text(x, "/spec/failureDomain") == zone_b), "{core_machines:?}");
    cloud.stop().await;
}
