//! Scaling through the scale subresource (`kubectl scale`), what created machines look like, events, status,
//! finalizers, deletion; a MachineSet on its own: adoption, release, replacing a failed machine, in-place
//! propagation; invalid specs.

use std::time::Duration;

use mcm::api::mcm::names::MACHINE_FINALIZER;
use mcm::api::mcm::{MachineDeploymentConditionType, MachinePhase};
use serde_json::json;

use super::{
    Apis, WAIT, apis, available, create, deployment, env_with_class, events_of, machines_of, merge, options, rolling,
    set_of, wait_settled,
};
use crate::machines::{Env, NS, phase_of};
use crate::support::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_scales_from_0_to_10_to_3_with_kubectl_scale() {
    let env = env_with_class(0.1).await;
    let apis = apis(&env);
    create(&apis.deployments, deployment("web", 0, rolling(json!(1), json!(0)))).await;
    wait_settled(&apis, "web", 0).await;

    env.kubectl.run(&["-n", NS, "scale", "machinedeployment.machine.sapcloud.io/web", "--replicas=10"]).await;
    let set_name = wait_settled(&apis, "web", 10).await;
    assert!(set_name.starts_with("web-") && set_name.len() == "web-".len() + 5, "{set_name}");

    // Finalizers on the deployment and its set; the set's status as MCM writes it.
    let d = apis.deployments.get("web").await.unwrap();
    assert!(d.metadata.finalizers.unwrap().contains(&MACHINE_FINALIZER.to_string()));
    let set = apis.sets.get(&set_name).await.unwrap();
    assert!(set.metadata.finalizers.clone().unwrap().contains(&MACHINE_FINALIZER.to_string()));
    let status = set.status.clone().unwrap();
    assert_eq!(
        (status.replicas, status.fully_labeled_replicas, status.ready_replicas, status.available_replicas),
        (10, 10, 10, 10)
    );
    assert_eq!(status.observed_generation, set.metadata.generation);
    let hash = set.metadata.labels.as_ref().unwrap()["machine-template-hash"].clone();

    // The machines: generateName, the template's labels (and the hash), a controller reference.
    for m in machines_of(&apis, "web").await {
        assert_eq!(m.metadata.generate_name.as_deref(), Some(format!("{set_name}-").as_str()));
        assert_eq!(m.metadata.labels.as_ref().unwrap()["machine-template-hash"], hash);
        let owner = m.metadata.owner_references.unwrap().remove(0);
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("MachineSet", set_name.as_str()));
        assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
    }
    let events = events_of(&env, "MachineSet", &set_name).await;
    assert!(events.iter().any(|(r, n)| r == "SuccessfulCreate" && n.starts_with("Created machine")), "{events:?}");
    let d_events = events_of(&env, "MachineDeployment", "web").await;
    assert!(d_events.iter().any(|(r, n)| r == "ScalingMachineSet" && n.contains("to 10")), "{d_events:?}");

    env.kubectl.run(&["-n", NS, "scale", "mcd", "web", "--replicas=3"]).await;
    assert_eq!(wait_settled(&apis, "web", 3).await, set_name, "scaling keeps the set");
    let events = events_of(&env, "MachineSet", &set_name).await;
    assert!(events.iter().any(|(r, n)| r == "SuccessfulDelete" && n.starts_with("Deleted machine")), "{events:?}");
    wait_until("7 VMs to go", WAIT, || async { (live_vms(&env) == 3).then_some(()) }).await;
    let shown = env.kubectl.run(&["-n", NS, "get", "mcd", "web", "--no-headers"]).await;
    assert!(shown.split_whitespace().take(5).eq(["web", "3", "3", "3", "3"]), "{shown}");

    // Deleting the deployment deletes its set and machines, then the finalizers go.
    env.kubectl.run(&["-n", NS, "delete", "mcd", "web", "--timeout=60s"]).await;
    wait_until("everything to be gone", WAIT, || async {
        let sets = apis.sets.list(&Default::default()).await.ok()?.items;
        let machines = machines_of(&apis, "web").await;
        (sets.is_empty() && machines.is_empty() && live_vms(&env) == 0).then_some(())
    })
    .await;
    env.shutdown().await;
}

fn live_vms(env: &Env) -> usize {
    env.dev.cloud.live_vms().into_iter().filter(|vm| vm.namespace == NS).count()
}

fn machine_set(name: &str, replicas: i32) -> serde_json::Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"name": name}},
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {"class": {"kind": "MachineClass", "name": "small"}},
            },
        },
    })
}

/// Waits until set `name` has `n` machines, all available; returns their names.
async fn wait_set(apis: &Apis, name: &str, n: usize) -> Vec<String> {
    wait_until(&format!("set {name} at {n} running machines"), WAIT, || async {
        let machines = machines_of(apis, name).await;
        let owned: Vec<_> = machines.iter().filter(|m| set_of(m).as_deref() == Some(name)).collect();
        let set = apis.sets.get(name).await.ok()?;
        let status = set.status?;
        (owned.len() == n
            && machines.len() == n
            && owned.iter().all(|m| available(m))
            && status.replicas == n as i32
            && status.available_replicas == n as i32)
            .then(|| owned.iter().map(|m| m.metadata.name.clone().unwrap()).collect())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_set_adopts_releases_replaces_failed_machines_and_propagates_in_place() {
    let mut options = options();
    options.machine.health_timeout = Duration::from_secs(2);
    let env = Env::start(options).await;
    env.class("small", json!({"bootSeconds": 0.1})).await;
    let apis = apis(&env);
    create(&apis.sets, machine_set("solo", 2)).await;
    wait_set(&apis, "solo", 2).await;
    env.kubectl.run(&["-n", NS, "scale", "mcs", "solo", "--replicas=3"]).await;
    let names = wait_set(&apis, "solo", 3).await;

    // An orphan with the set's labels is adopted; the set now has one too many and deletes one.
    let orphan = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": "orphan", "namespace": NS, "labels": {"name": "solo"}},
        "spec": {"class": {"kind": "MachineClass", "name": "small"}},
    });
    create(&apis.machines, orphan).await;
    wait_until("the orphan to be adopted", WAIT, || async {
        let m = apis.machines.get_opt("orphan").await.ok()?;
        // Adopted, or already deleted as the surplus (it is the least advanced machine).
        m.is_none_or(|m| set_of(&m).as_deref() == Some("solo")).then_some(())
    })
    .await;
    wait_set(&apis, "solo", 3).await;

    // A machine whose labels stop matching is released, and replaced.
    let released = names[0].clone();
    merge(&apis.machines, &released, json!({"metadata": {"labels": {"name": "elsewhere"}}})).await;
    wait_until("the machine to be released", WAIT, || async {
        let m = apis.machines.get(&released).await.ok()?;
        set_of(&m).is_none().then_some(())
    })
    .await;
    let names = wait_set(&apis, "solo", 3).await;
    assert!(!names.contains(&released));

    // A failed machine is deleted and replaced.
    let victim = apis.machines.get(&names[1]).await.unwrap();
    assert!(env.dev.cloud.kill(victim.spec.provider_id.as_deref().unwrap()));
    let victim_name = names[1].clone();
    wait_until("the failed machine to go", WAIT, || async {
        apis.machines.get_opt(&victim_name).await.ok()?.is_none().then_some(())
    })
    .await;
    let after = wait_set(&apis, "solo", 3).await;
    assert!(!after.contains(&victim_name));
    // (The recorder aggregates repeats of a reason into one event, which keeps its first note.)
    let events = events_of(&env, "MachineSet", "solo").await;
    assert!(events.iter().any(|(r, _)| r == "SuccessfulDelete"), "{events:?}");

    // The node template changes in place: same machines, new Node label.
    merge(
        &apis.sets,
        "solo",
        json!({"spec": {"template": {"spec": {"nodeTemplate": {"metadata": {"labels": {"tier": "gold"}}}}}}}),
    )
    .await;
    wait_until("the node template on every Node", WAIT, || async {
        for name in &after {
            let node = env.nodes().get(name).await.ok()?;
            if node.metadata.labels?.get("tier").map(String::as_str) != Some("gold") {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert_eq!(wait_set(&apis, "solo", 3).await, after, "no machine was replaced");

    // Deleting the set deletes its machines first.
    env.kubectl.run(&["-n", NS, "delete", "mcs", "solo", "--timeout=60s"]).await;
    wait_until("the set's machines to be gone", WAIT, || async {
        let left = machines_of(&apis, "solo").await;
        left.is_empty().then_some(())
    })
    .await;
    assert_eq!(phase_of(&apis.machines.get(&released).await.unwrap()), Some(MachinePhase::Running), "released stays");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_deployments_get_a_condition_and_an_event() {
    let env = env_with_class(0.1).await;
    let apis = apis(&env);
    let mut no_strategy = deployment("bad", 1, json!({}));
    no_strategy["spec"]["strategy"] = json!(null);
    create(&apis.deployments, no_strategy).await;
    let in_place = deployment(
        "inplace",
        1,
        json!({"type": "InPlaceUpdate", "inPlaceUpdate": {"maxSurge": 1, "maxUnavailable": 0, "orchestrationType": "Sometimes"}}),
    );
    create(&apis.deployments, in_place).await;

    for (name, text) in [
        ("bad", "spec.strategy.type is missing"),
        ("inplace", "orchestrationType is \"Sometimes\"; set it to Auto or Manual"),
    ] {
        let condition = wait_until(&format!("{name}'s InvalidSpec condition"), WAIT, || async {
            let d = apis.deployments.get(name).await.ok()?;
            d.status?.conditions?.into_iter().find(|c| {
                c.type_ == MachineDeploymentConditionType::Progressing && c.reason.as_deref() == Some("InvalidSpec")
            })
        })
        .await;
        assert!(condition.message.as_deref().unwrap().contains(text), "{condition:?}");
        wait_until(&format!("{name}'s InvalidSpec event"), WAIT, || async {
            let events = events_of(&env, "MachineDeployment", name).await;
            events.iter().any(|(r, n)| r == "InvalidSpec" && n.contains(text)).then_some(())
        })
        .await;
    }
    assert!(apis.sets.list(&Default::default()).await.unwrap().items.is_empty(), "nothing was reconciled");

    // Fixed, it is reconciled and the condition goes.
    merge(&apis.deployments, "bad", json!({"spec": {"strategy": rolling(json!(1), json!(0))}})).await;
    wait_settled(&apis, "bad", 1).await;
    let d = apis.deployments.get("bad").await.unwrap();
    let reasons: Vec<_> = d.status.unwrap().conditions.unwrap().into_iter().filter_map(|c| c.reason).collect();
    assert!(!reasons.iter().any(|r| r == "InvalidSpec"), "{reasons:?}");
    env.shutdown().await;
}
