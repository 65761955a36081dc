//! The AWS driver under the real controllers, as `mcm dev` runs them: a MachineClass of provider `AWS` whose secret
//! points the driver at moto (`endpoint`), a MachineDeployment scaled up and down, instances the controllers do not
//! own left alone, a machine with MCM's region-form providerID kept, and an orphan tagged instance collected by the
//! safety controller.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{Filter, Instance};
use kube::Api;
use mcm::api::mcm::Machine;
use mcm::providers::grpc::{DriverEndpoint, DriverServe, GrpcDriver};
use mcm::providers::{Driver, ListMachinesRequest, SecretData};
use serde_json::json;

use super::aws::{ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, USER_DATA, World};
use crate::machines::{Env, NS};
use crate::support::wait_until;

const CLUSTER: &str = "shoot--aws";
const WAIT: Duration = Duration::from_secs(90);

/// The class `aws` (Gardener's AWS providerSpec, tagged for [`CLUSTER`]) and its secret, which names moto.
async fn aws_class(env: &Env, world: &World) {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "aws", "namespace": NS},
        "type": "Opaque",
        "stringData": {
            "providerAccessKeyId": ACCESS_KEY_ID,
            "providerSecretAccessKey": SECRET_ACCESS_KEY,
            "userData": USER_DATA,
            "endpoint": world.moto.url,
        },
    });
    let class = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "aws", "namespace": NS},
        "provider": "AWS",
        "providerSpec": world.spec(CLUSTER),
        "secretRef": {"name": "aws", "namespace": NS},
    });
    env.create("aws-secret.json", &secret.to_string()).await;
    env.create("aws-class.json", &class.to_string()).await;
}

fn deployment(replicas: i32) -> serde_json::Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": "pool", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"pool": "aws"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"pool": "aws"}},
                "spec": {"class": {"kind": "MachineClass", "name": "aws"}},
            },
        },
    })
}

/// Instances of [`CLUSTER`] moto reports as pending or running.
async fn live_cluster_instances(world: &World) -> Vec<Instance> {
    let out = world
        .ec2
        .describe_instances()
        .filters(Filter::builder().name("tag-key").values(format!("kubernetes.io/cluster/{CLUSTER}")).build())
        .filters(Filter::builder().name("instance-state-name").values("pending").values("running").build())
        .send()
        .await
        .unwrap();
    out.reservations().iter().flat_map(|r| r.instances()).cloned().collect()
}

fn tag<'a>(instance: &'a Instance, key: &str) -> Option<&'a str> {
    instance.tags().iter().find(|t| t.key() == Some(key)).and_then(|t| t.value())
}

/// The machines of the namespace with a providerID: name -> providerID.
async fn machines_with_ids(env: &Env) -> Vec<(String, String)> {
    let machines: Api<Machine> = Api::namespaced(env.client(), NS);
    let list = machines.list(&Default::default()).await.unwrap();
    list.items
        .into_iter()
        .filter_map(|m| {
            let id = m.spec.provider_id.clone()?;
            Some((m.metadata.name.clone().unwrap_or_default(), id))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_on_aws_scales_up_and_down_and_orphans_are_collected() {
    let world = World::start().await;
    let env = Env::start(super::controller_options()).await;
    scale_up_down_and_collect_orphans(&env, &world).await;
    env.shutdown().await;
}

/// The same scenario with the AWS driver out of tree: our controllers call `mcm-driver-relay` (MCM's Go types,
/// adapters/mcm-go) over the driver protocol, which calls our AWS driver served by `DriverServe`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_on_aws_behaves_the_same_through_the_go_adapter() {
    let test = "a_deployment_on_aws_behaves_the_same_through_the_go_adapter";
    let Some(relay_bin) = super::grpc::relay_binary(test) else { return };
    let world = World::start().await;
    let dir = crate::support::TempDir::new("mcm-aws-grpc");
    let counted = super::grpc::Counted::new(Arc::new(world.driver()));
    let endpoint = DriverEndpoint::Unix(dir.0.join("aws.sock"));
    let server = DriverServe::start(Arc::new(counted.clone()), &endpoint).await.unwrap();
    let relay = super::grpc::Relay::start(&relay_bin, &server.endpoint).await;

    let mut env = Env::start(super::controller_options()).await;
    env.dev.stop_controllers().await;
    env.dev.drivers.register(Arc::new(GrpcDriver::new("AWS", relay.endpoint.clone())));
    env.dev.start_controllers();
    scale_up_down_and_collect_orphans(&env, &world).await;
    let calls = counted.calls();
    // Every AWS call of the controllers went through the relay: three creates at least, two deletes, lists.
    assert!(calls.create_machine >= 3 && calls.delete_machine >= 2 && calls.list_machines >= 1, "{calls:?}");
    env.shutdown().await;
    relay.stop().await;
    server.stop().await.unwrap();
}

/// A MachineDeployment of 3 on moto, scaled to 1; instances of others left alone, MCM's region-form providerID
/// kept, orphans collected.
async fn scale_up_down_and_collect_orphans(env: &Env, world: &World) {
    // Instances the controllers must never list or touch: one without tags, one of another cluster (both keys).
    let untagged = world.launch(&[("Name", "pool-lookalike")]).await;
    let foreign = world
        .launch(&[("kubernetes.io/cluster/other", "1"), ("kubernetes.io/role/node", "1"), ("Name", "theirs")])
        .await;

    aws_class(env, world).await;
    env.create("pool.yaml", &deployment(3).to_string()).await;

    // Three machines, each backed by one instance tagged for the cluster, the role and the machine's name.
    let machines = wait_until("3 machines with providerIDs and 3 cluster instances", WAIT, || async {
        let machines = machines_with_ids(env).await;
        let instances = live_cluster_instances(world).await;
        (machines.len() == 3 && instances.len() == 3).then_some(machines)
    })
    .await;
    let instances = live_cluster_instances(world).await;
    for (name, provider_id) in &machines {
        let instance = instances
            .iter()
            .find(|i| tag(i, "Name") == Some(name.as_str()))
            .unwrap_or_else(|| panic!("no instance named {name}: {instances:?}"));
        let id = instance.instance_id().unwrap();
        let zone = instance.placement().and_then(|p| p.availability_zone()).unwrap();
        assert!(zone.starts_with(REGION) && zone != REGION, "{zone}");
        assert_eq!(provider_id, &format!("aws:///{zone}/{id}"), "the cloud-controller's form");
        assert_eq!(tag(instance, &format!("kubernetes.io/cluster/{CLUSTER}")), Some("1"));
        assert_eq!(tag(instance, "kubernetes.io/role/node"), Some("1"));
        assert_eq!(tag(instance, "team"), Some("mcm"));
    }

    // Scale to 1: two machines go, and exactly their two instances are terminated.
    env.kubectl.run(&["-n", NS, "scale", "mcd", "pool", "--replicas=1"]).await;
    let kept = wait_until("1 machine and 1 cluster instance left", WAIT, || async {
        let machines = machines_with_ids(env).await;
        let instances = live_cluster_instances(world).await;
        (machines.len() == 1 && instances.len() == 1).then_some(machines)
    })
    .await;
    let gone: Vec<&(String, String)> = machines.iter().filter(|m| !kept.contains(m)).collect();
    assert_eq!(gone.len(), 2, "the survivor is one of the first three: {kept:?} of {machines:?}");
    for (name, provider_id) in gone {
        let id = provider_id.rsplit('/').next().unwrap();
        assert_eq!(world.state(id).await, "terminated", "instance of {name}");
    }

    // A machine MCM's AWS provider made: its providerID has the region form, the driver lists the zone form. It
    // is the same instance, which the machine keeps (and the orphan collection below must not take). The machine
    // is made here by the driver and then given the region form MCM would have written: an instance launched
    // beside it would be an orphan (and collected) until its Machine is seen.
    let machine = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": "legacy", "namespace": NS},
        "spec": {"class": {"kind": "MachineClass", "name": "aws"}},
    });
    env.create("legacy.json", &machine.to_string()).await;
    let machines: Api<Machine> = Api::namespaced(env.client(), NS);
    let legacy = wait_until("machine legacy to get its instance and a phase", WAIT, || async {
        let m = machines.get_opt("legacy").await.ok().flatten()?;
        let id = m.spec.provider_id.as_deref()?.rsplit('/').next()?.to_string();
        m.status?.current_status?.phase.map(|_| id)
    })
    .await;
    let region_form = format!("aws:///{REGION}/{legacy}");
    let patch = json!({"spec": {"providerID": region_form}});
    machines.patch("legacy", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();

    // An instance tagged for this cluster and role that no Machine claims is an orphan: the safety controller
    // deletes it.
    let orphan = world
        .launch(&[
            (&format!("kubernetes.io/cluster/{CLUSTER}"), "1"),
            ("kubernetes.io/role/node", "1"),
            ("Name", "forgotten"),
        ])
        .await;
    // One without a `Name` tag too: nothing names its machine, its providerID is enough.
    let nameless =
        world.launch(&[(&format!("kubernetes.io/cluster/{CLUSTER}"), "1"), ("kubernetes.io/role/node", "1")]).await;
    wait_until("the orphan instance to be terminated", WAIT, || async {
        (world.state(&orphan).await == "terminated").then_some(())
    })
    .await;
    wait_until("the orphan instance without a Name tag to be terminated", WAIT, || async {
        (world.state(&nameless).await == "terminated").then_some(())
    })
    .await;

    // The foreign and untagged instances are still running, the class's listing never showed them, and the
    // survivor's instance is untouched.
    assert_eq!(world.state(&untagged).await, "running");
    assert_eq!(world.state(&foreign).await, "running");
    let survivor = kept[0].1.rsplit('/').next().unwrap().to_string();
    assert_eq!(world.state(&survivor).await, "running");
    assert_eq!(world.state(&legacy).await, "running", "the region-form machine's instance is not an orphan");
    let m = machines.get("legacy").await.unwrap();
    assert_eq!(m.spec.provider_id.as_deref(), Some(region_form.as_str()), "kept as MCM wrote it");
    let mut secret = SecretData::default();
    for (k, v) in [
        ("providerAccessKeyId", ACCESS_KEY_ID),
        ("providerSecretAccessKey", SECRET_ACCESS_KEY),
        ("userData", USER_DATA),
        ("endpoint", world.moto.url.as_str()),
    ] {
        secret.0.insert(k.to_string(), v.as_bytes().to_vec());
    }
    let listed = world
        .driver()
        .list_machines(&ListMachinesRequest { class: world.class("aws", CLUSTER), secret })
        .await
        .unwrap();
    let listed: BTreeSet<&str> = listed.keys().map(|id| id.rsplit('/').next().unwrap_or_default()).collect();
    assert_eq!(listed, BTreeSet::from([survivor.as_str(), legacy.as_str()]), "only the machines' instances are listed");
}
