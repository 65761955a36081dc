//! The Azure driver under the real controllers, as `mcm dev` runs them: a MachineClass of provider `Azure` whose
//! secret points the driver at the ARM fake (`endpoint`, `authorityHost`), a MachineDeployment scaled up and down
//! with nothing left behind, VMs the controllers do not own left alone, and an orphan tagged VM collected by the
//! safety controller.

use std::time::Duration;

use kube::Api;
use mcm::api::mcm::Machine;
use serde_json::json;

use super::fake::{ArmFake, CLIENT_ID, CLIENT_SECRET, Kind, SUBSCRIPTION, TENANT};
use super::{USER_DATA, provider_id, spec};
use crate::machines::{Env, NS};
use crate::support::wait_until;

const CLUSTER: &str = "shoot--azure";
const WAIT: Duration = Duration::from_secs(90);

/// The class `azure` (Gardener's Azure providerSpec, tagged for [`CLUSTER`]) and its secret, which names the fake.
pub(crate) async fn azure_class(env: &Env, arm: &ArmFake) {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "azure", "namespace": NS},
        "type": "Opaque",
        "stringData": {
            "clientID": CLIENT_ID,
            "clientSecret": CLIENT_SECRET,
            "tenantID": TENANT,
            "subscriptionID": SUBSCRIPTION,
            "userData": USER_DATA,
            "endpoint": arm.url,
            "authorityHost": arm.url,
        },
    });
    let class = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "azure", "namespace": NS},
        "provider": "Azure",
        "providerSpec": spec(CLUSTER),
        "secretRef": {"name": "azure", "namespace": NS},
    });
    env.create("azure-secret.json", &secret.to_string()).await;
    env.create("azure-class.json", &class.to_string()).await;
}

fn deployment(replicas: i32) -> serde_json::Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": "pool", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"pool": "azure"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"pool": "azure"}},
                "spec": {"class": {"kind": "MachineClass", "name": "azure"}},
            },
        },
    })
}

/// The machines of the namespace with a providerID: (name, providerID), sorted.
async fn machines_with_ids(env: &Env) -> Vec<(String, String)> {
    let machines: Api<Machine> = Api::namespaced(env.client(), NS);
    let list = machines.list(&Default::default()).await.unwrap();
    let mut out: Vec<(String, String)> = list
        .items
        .into_iter()
        .filter_map(|m| Some((m.metadata.name.clone().unwrap_or_default(), m.spec.provider_id.clone()?)))
        .collect();
    out.sort();
    out
}

/// VMs of the fake carrying [`CLUSTER`]'s tag.
fn cluster_vms(arm: &ArmFake) -> Vec<String> {
    let key = format!("kubernetes.io-cluster-{CLUSTER}");
    arm.names(Kind::Vm)
        .into_iter()
        .filter(|name| arm.get(Kind::Vm, name).is_some_and(|vm| vm["tags"].get(&key).is_some()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_on_azure_scales_up_and_down_and_orphans_are_collected() {
    let arm = ArmFake::start().await;
    // VMs the controllers must never list or touch: one without tags, one of another cluster (both keys).
    arm.insert(Kind::Vm, "pool-lookalike", json!({}), json!({}));
    arm.insert(
        Kind::Vm,
        "theirs",
        json!({"kubernetes.io-cluster-other": "1", "kubernetes.io-role-node": "1"}),
        json!({}),
    );

    let env = Env::start(super::super::controller_options()).await;
    azure_class(&env, &arm).await;
    env.create("pool.yaml", &deployment(3).to_string()).await;

    // Three machines, each backed by a VM of its name with its NIC and disks, and the providerID naming it.
    let machines = wait_until("3 machines with providerIDs and 3 cluster VMs", WAIT, || async {
        let machines = machines_with_ids(&env).await;
        (machines.len() == 3 && cluster_vms(&arm).len() == 3).then_some(machines)
    })
    .await;
    for (name, id) in &machines {
        assert_eq!(id, &provider_id(name), "{name}");
        let vm = arm.get(Kind::Vm, name).unwrap_or_else(|| panic!("no VM {name}"));
        assert_eq!(vm["tags"]["kubernetes.io-role-node"], "1");
        assert!(arm.get(Kind::Nic, &format!("{name}-nic")).is_some(), "{name}-nic");
        assert!(arm.get(Kind::Disk, &format!("{name}-os-disk")).is_some(), "{name}-os-disk");
    }

    // Scale to 1: two machines go, and exactly their VMs, NICs and disks with them.
    env.kubectl.run(&["-n", NS, "scale", "mcd", "pool", "--replicas=1"]).await;
    let kept = wait_until("1 machine and 1 cluster VM left", WAIT, || async {
        let machines = machines_with_ids(&env).await;
        (machines.len() == 1 && cluster_vms(&arm).len() == 1).then_some(machines)
    })
    .await;
    let survivor = &kept[0].0;
    assert!(machines.contains(&kept[0]), "the survivor is one of the first three");
    let mut nics = arm.names(Kind::Nic);
    nics.sort();
    assert_eq!(nics, [format!("{survivor}-nic")]);
    let mut disks = arm.names(Kind::Disk);
    disks.sort();
    assert_eq!(disks, [format!("{survivor}-etcd-0-data-disk"), format!("{survivor}-os-disk")]);

    // A VM tagged for this cluster and role that no Machine claims is an orphan: the safety controller deletes it.
    arm.insert(
        Kind::Vm,
        "forgotten",
        json!({format!("kubernetes.io-cluster-{CLUSTER}"): "1", "kubernetes.io-role-node": "1"}),
        json!({}),
    );
    wait_until("the orphan VM to be deleted", WAIT, || async {
        arm.get(Kind::Vm, "forgotten").is_none().then_some(())
    })
    .await;

    // The foreign and untagged VMs were never deleted, and the survivor's VM is untouched.
    assert!(arm.get(Kind::Vm, "pool-lookalike").is_some() && arm.get(Kind::Vm, "theirs").is_some());
    assert!(arm.requests_to("DELETE", "virtualMachines/theirs").is_empty());
    assert!(arm.requests_to("DELETE", "virtualMachines/pool-lookalike").is_empty());
    assert_eq!(cluster_vms(&arm), std::slice::from_ref(survivor));
    env.shutdown().await;
}
