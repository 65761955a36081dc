//! The GCP driver under the real controllers, as `mcm dev` runs them: a MachineClass of provider `GCP` whose secret
//! holds a service-account key and points the driver at the Compute fake (`endpoint`), a MachineDeployment scaled
//! up and down, instances the controllers do not own left alone, and an orphan tagged instance collected.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::Api;
use mcm::api::mcm::Machine;
use serde_json::json;

use super::gcp::{PROJECT, USER_DATA, ZONE, service_account_key, spec};
use super::gcp_fake::ComputeFake;
use crate::machines::{Env, NS};
use crate::support::wait_until;

const CLUSTER: &str = "shoot--gcp";
const WAIT: Duration = Duration::from_secs(90);

/// The sets tests' options, with the safety controller looking for orphans every second (as `aws_machines.rs`).
fn deployment(replicas: i32) -> serde_json::Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": "pool", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"pool": "gcp"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"pool": "gcp"}},
                "spec": {"class": {"kind": "MachineClass", "name": "gcp"}},
            },
        },
    })
}

/// The machines of the namespace with a providerID: (name, providerID).
async fn machines_with_ids(env: &Env) -> BTreeSet<(String, String)> {
    let machines: Api<Machine> = Api::namespaced(env.client(), NS);
    let list = machines.list(&Default::default()).await.unwrap();
    list.items
        .into_iter()
        .filter_map(|m| Some((m.metadata.name.clone().unwrap_or_default(), m.spec.provider_id.clone()?)))
        .collect()
}

/// The names of the fake's instances carrying the cluster's tag.
fn cluster_instances(fake: &ComputeFake) -> BTreeSet<String> {
    let tag = format!("kubernetes-io-cluster-{CLUSTER}");
    fake.instances(PROJECT, ZONE)
        .into_iter()
        .filter(|(_, i)| i["tags"]["items"].as_array().is_some_and(|t| t.iter().any(|t| t == tag.as_str())))
        .map(|(name, _)| name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_on_gcp_scales_up_and_down_and_orphans_are_collected() {
    let fake = ComputeFake::start(1).await;
    fake.seed_instance(PROJECT, ZONE, "untagged", &[]);
    fake.seed_instance(PROJECT, ZONE, "theirs", &["kubernetes-io-cluster-other", "kubernetes-io-role-node"]);

    let env = Env::start(super::controller_options()).await;
    let (key, _) = service_account_key(&fake);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "gcp", "namespace": NS},
        "type": "Opaque",
        "stringData": {"serviceAccountJSON": key, "userData": USER_DATA, "endpoint": fake.url},
    });
    let class = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "gcp", "namespace": NS},
        "provider": "GCP",
        "providerSpec": spec(CLUSTER),
        "secretRef": {"name": "gcp", "namespace": NS},
    });
    env.create("gcp-secret.json", &secret.to_string()).await;
    env.create("gcp-class.json", &class.to_string()).await;
    env.create("pool.json", &deployment(3).to_string()).await;

    // Three machines, each backed by the instance of its name, with gce://project/zone/name.
    let machines = wait_until("3 machines with providerIDs and 3 cluster instances", WAIT, || async {
        let machines = machines_with_ids(&env).await;
        (machines.len() == 3 && cluster_instances(&fake).len() == 3).then_some(machines)
    })
    .await;
    let names: BTreeSet<String> = machines.iter().map(|(name, _)| name.clone()).collect();
    assert_eq!(cluster_instances(&fake), names);
    for (name, provider_id) in &machines {
        assert_eq!(provider_id, &format!("gce://{PROJECT}/{ZONE}/{name}"));
    }
    assert!(fake.requests().iter().all(|r| r.authorization.as_deref().is_some_and(|a| a.starts_with("Bearer "))));

    // Scale to 1: two machines go, with their instances and disks.
    env.kubectl.run(&["-n", NS, "scale", "mcd", "pool", "--replicas=1"]).await;
    let kept = wait_until("1 machine and 1 cluster instance left", WAIT, || async {
        let machines = machines_with_ids(&env).await;
        (machines.len() == 1 && cluster_instances(&fake).len() == 1).then_some(machines)
    })
    .await;
    let survivor = kept.iter().next().unwrap().0.clone();
    assert!(names.contains(&survivor));
    assert_eq!(cluster_instances(&fake), BTreeSet::from([survivor.clone()]));
    let disks: BTreeSet<String> = fake.disks().into_iter().collect();
    assert_eq!(disks, BTreeSet::from([survivor.clone(), format!("{survivor}-disk-1")]), "the others' disks went");

    // A tagged instance no Machine claims is an orphan: the safety controller deletes it.
    fake.seed_instance(
        PROJECT,
        ZONE,
        "forgotten",
        &[&format!("kubernetes-io-cluster-{CLUSTER}"), "kubernetes-io-role-node"],
    );
    wait_until("the orphan instance to be deleted", WAIT, || async {
        (!fake.instances(PROJECT, ZONE).contains_key("forgotten")).then_some(())
    })
    .await;
    let left: BTreeSet<String> = fake.instances(PROJECT, ZONE).into_keys().collect();
    assert_eq!(left, BTreeSet::from([survivor, "theirs".to_string(), "untagged".to_string()]));
    env.shutdown().await;
}
