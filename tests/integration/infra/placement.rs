//! Placement and scale from zero for the cloud drivers (`docs/infrastructure-provider.md`, "Failure domains" and
//! "Scale from zero"): an MCMMachineTemplate of a cloud class without `nodeTemplate` publishes the capacity of its
//! instance type; an AWS MCMMachine lands in the subnet its class maps to the Machine's failure domain (in moto),
//! reports that zone, and a failure domain the class cannot honour makes no VM.

use std::collections::BTreeMap;

use kube::Api;
use mcm::api::infra::MCMMachineTemplate;
use serde_json::{Value, json};

use super::{Env, NS, WAIT};
use crate::support::wait_until;

/// The template `name`'s published capacity, once there.
async fn capacity(env: &Env, name: &str) -> (BTreeMap<String, String>, Option<String>) {
    let templates: Api<MCMMachineTemplate> = Api::namespaced(env.client(), NS);
    wait_until(&format!("MCMMachineTemplate {name}'s capacity"), WAIT, || async {
        let status = templates.get(name).await.ok()?.status?;
        let capacity = status.capacity?.into_iter().map(|(k, q)| (k, q.0)).collect();
        Some((capacity, status.node_info.and_then(|i| i.architecture)))
    })
    .await
}

fn template(name: &str, class: Value) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachineTemplate",
        "metadata": {"name": name},
        "spec": {"template": {"spec": class}},
    })
}

fn resources(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_of_a_cloud_class_publishes_the_capacity_of_its_type() {
    let env = Env::start().await;
    let inline = |provider: &str, spec: Value| json!({"inlineClass": {"provider": provider, "providerSpec": spec}});
    let cases = [
        (
            "aws",
            inline("AWS", json!({"machineType": "g4dn.xlarge", "blockDevices": [{"ebs": {"volumeSize": 80}}]})),
            resources(&[("cpu", "4"), ("memory", "16384Mi"), ("nvidia.com/gpu", "1"), ("ephemeral-storage", "80Gi")]),
            "amd64",
        ),
        (
            "gcp",
            inline("GCP", json!({"machineType": "t2a-standard-4", "disks": [{"boot": true, "sizeGb": 30}]})),
            resources(&[("cpu", "4"), ("memory", "16384Mi"), ("ephemeral-storage", "30Gi")]),
            "arm64",
        ),
        (
            "azure",
            inline("Azure", json!({"properties": {"hardwareProfile": {"vmSize": "Standard_D4s_v3"}}})),
            resources(&[("cpu", "4"), ("memory", "16384Mi")]),
            "amd64",
        ),
        (
            "override",
            json!({"inlineClass": {
                "provider": "AWS", "providerSpec": {"machineType": "m5.large"},
                "nodeTemplate": {"capacity": {"memory": "7Gi", "pods": "29"}, "instanceType": "m5.large",
                                 "region": "r", "zone": "r-a"},
            }}),
            resources(&[("cpu", "2"), ("memory", "7Gi"), ("pods", "29")]),
            "amd64",
        ),
    ];
    for (name, class, _, _) in &cases {
        env.create(&format!("template-{name}.json"), template(name, class.clone())).await;
    }
    // A referenced MachineClass is read the same way.
    env.create(
        "class-gcp.json",
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": "gpu"},
            "provider": "GCP",
            "providerSpec": {"machineType": "a2-highgpu-2g", "region": "r", "zone": "r-a"},
        }),
    )
    .await;
    env.create("template-ref.json", template("ref", json!({"class": {"kind": "MachineClass", "name": "gpu"}}))).await;
    for (name, _, want, arch) in cases {
        assert_eq!(capacity(&env, name).await, (want, Some(arch.to_string())), "{name}");
    }
    let (gpu, _) = capacity(&env, "ref").await;
    assert_eq!(gpu, resources(&[("cpu", "24"), ("memory", "174080Mi"), ("nvidia.com/gpu", "2")]));
    env.shutdown().await;
}

#[cfg(feature = "aws")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aws_machine_lands_in_the_subnet_of_its_failure_domain() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Patch, PatchParams, PostParams};
    use mcm::lifecycle::infra::reason;

    use crate::providers::aws::{ACCESS_KEY_ID, SECRET_ACCESS_KEY, World};

    let world = World::start().await;
    // Two of moto's default subnets, in two zones.
    let subnets = world.ec2.describe_subnets().send().await.unwrap();
    let mut by_zone: BTreeMap<String, String> = BTreeMap::new();
    for s in subnets.subnets() {
        by_zone.entry(s.availability_zone().unwrap().to_string()).or_insert_with(|| s.subnet_id().unwrap().into());
    }
    let zones: Vec<(String, String)> = by_zone.into_iter().take(2).collect();
    assert_eq!(zones.len(), 2, "moto has a default subnet per zone");
    let ((zone_a, subnet_a), (zone_b, subnet_b)) = (zones[0].clone(), zones[1].clone());

    let env = Env::start().await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "aws"},
        "stringData": {"providerAccessKeyId": ACCESS_KEY_ID, "providerSecretAccessKey": SECRET_ACCESS_KEY,
                       "endpoint": world.moto.url},
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client(), NS).create(&PostParams::default(), &secret).await.unwrap();
    env.create(
        "mcmcluster.json",
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMCluster",
            "metadata": {"name": "c1"},
            "spec": {"failureDomains": [{"name": zone_a, "controlPlane": true}, {"name": zone_b, "controlPlane": true}]},
        }),
    )
    .await;
    env.cluster("c1", true).await;

    // The class's own subnet is zone A's; the map sends a machine of zone B to zone B's subnet.
    let mut spec = world.spec("c1");
    spec["subnetsByZone"] = json!({&zone_a: &subnet_a, &zone_b: &subnet_b});
    spec["networkInterfaces"][0]["subnetID"] = json!(subnet_a);
    let class = json!({"inlineClass": {"provider": "AWS", "providerSpec": spec,
                                       "credentialsSecretRef": {"name": "aws", "namespace": NS}}});
    for (name, fd) in [("in-b", zone_b.as_str()), ("nowhere", "moon-1a")] {
        env.bootstrap_secret(&format!("{name}-bootstrap")).await;
        env.capi_machine(name, "c1", Some(&format!("{name}-bootstrap")), Some(fd)).await;
        env.mcm_machine(name, "c1", class.clone()).await;
        env.adopt(name).await;
    }

    let placed = env.wait_provisioned("in-b").await;
    let provider_id = placed.spec.provider_id.clone().unwrap();
    let id = provider_id.rsplit('/').next().unwrap();
    let described = world.ec2.describe_instances().instance_ids(id).send().await.unwrap();
    let instance = described.reservations()[0].instances()[0].clone();
    assert_eq!(instance.subnet_id(), Some(subnet_b.as_str()), "the subnet of the Machine's failure domain");
    assert_eq!(instance.placement().and_then(|p| p.availability_zone()), Some(zone_b.as_str()));
    assert_eq!(provider_id, format!("aws:///{zone_b}/{id}"));
    assert_eq!(placed.status.as_ref().unwrap().failure_domain.as_deref(), Some(zone_b.as_str()));
    assert_eq!(placed.spec.failure_domain.as_deref(), Some(zone_b.as_str()));

    // A failure domain the class maps no subnet to: a clear condition and no VM.
    let refused = env.wait_condition("nowhere", "Ready", "False", reason::INVALID_FAILURE_DOMAIN).await;
    let message = &super::condition(refused.status.as_ref().unwrap().conditions.as_deref(), "Ready").unwrap().message;
    assert!(message.contains("no subnet for failure domain \"moon-1a\""), "{message}");
    assert_eq!(refused.status.as_ref().unwrap().initialization.as_ref().and_then(|i| i.provisioned), None);
    assert!(refused.spec.provider_id.is_none());
    let all = world.ec2.describe_instances().send().await.unwrap();
    let count = all.reservations().iter().flat_map(|r| r.instances()).count();
    assert_eq!(count, 1, "only the placed machine has an instance");
    assert!(env.events_of("nowhere").await.iter().any(|(t, r, _)| t == "Warning" && r == "InvalidFailureDomain"));

    // The MCMCluster, once core's Cluster controller owns it, lists the zones as failure domains (v1beta2 list
    // form); core copies them into Cluster.status.failureDomains, where KubeadmControlPlane picks from.
    let owner = env.clusters().get("c1").await.unwrap();
    let patch = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1",
        "uid": owner.metadata.uid, "controller": true, "blockOwnerDeletion": true,
    }]}});
    env.mcm_clusters().patch("c1", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let cluster = wait_until("the MCMCluster's failure domains", WAIT, || async {
        let c = env.mcm_clusters().get("c1").await.ok()?;
        c.status.as_ref()?.failure_domains.as_ref()?;
        Some(c)
    })
    .await;
    let listed: Vec<(String, Option<bool>)> =
        cluster.status.unwrap().failure_domains.unwrap().into_iter().map(|fd| (fd.name, fd.control_plane)).collect();
    assert_eq!(listed, [(zone_a, Some(true)), (zone_b, Some(true))]);
    env.shutdown().await;
}
