//! Scaling and rolling updates of CAPI MachineDeployments through the MCM decisions.

use std::collections::BTreeSet;

use kube::ResourceExt;
use mcm::api::capi::Machine;
use serde_json::json;

use super::{Capi, WAIT, create_deployment, deployment, env, patch_deployment, rolling, wait_running};
use crate::support::wait_until;

fn names(machines: &[Machine]) -> BTreeSet<String> {
    machines.iter().map(|m| m.name_any()).collect()
}

async fn infra_names(capi: &Capi) -> BTreeSet<String> {
    capi.infra.list(&Default::default()).await.unwrap().items.iter().map(|m| m.name_any()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_0_to_3_to_1_with_cloned_mcm_machines() {
    let (env, capi, _provider) = env().await;
    create_deployment(&capi, deployment("pool", 0, "small", rolling(1, 0))).await;
    let set = wait_until("the machine set", WAIT, || async {
        capi.sets.list(&Default::default()).await.ok()?.items.into_iter().next()
    })
    .await;
    assert_eq!(set.spec.cluster_name, "dev");
    assert_eq!(set.spec.replicas, Some(0));

    patch_deployment(&capi, "pool", json!({"spec": {"replicas": 3}})).await;
    let machines = wait_running(&capi, "pool", 3).await;
    for m in &machines {
        assert_eq!(m.spec.bootstrap.data_secret_name.as_deref(), Some("bootstrap"));
        assert_eq!(m.spec.infrastructure_ref.kind, "MCMMachine");
        assert_eq!(m.spec.provider_id.as_deref(), Some(format!("inmemory:///{}", m.name_any()).as_str()));
        let status = m.status.clone().unwrap();
        assert_eq!(status.node_ref.unwrap().name, format!("node-{}", m.name_any()));
        assert_eq!(status.initialization.unwrap().infrastructure_provisioned, Some(true));
        let ready = status.conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
        // The clone: same name, owned by the Machine, cloned-from annotations.
        let clone = capi.infra.get(&m.name_any()).await.unwrap();
        let a = clone.annotations();
        assert_eq!(a["cluster.x-k8s.io/cloned-from-name"], "small");
        assert_eq!(a["cluster.x-k8s.io/cloned-from-groupkind"], "MCMMachineTemplate.infrastructure.cluster.x-k8s.io");
        let owner = clone.owner_references().iter().find(|o| o.controller == Some(true)).unwrap().clone();
        assert_eq!(
            (owner.kind.as_str(), owner.name.clone(), owner.uid.clone()),
            ("Machine", m.name_any(), m.uid().unwrap())
        );
        assert_eq!(clone.labels()["cluster.x-k8s.io/cluster-name"], "dev");
    }

    patch_deployment(&capi, "pool", json!({"spec": {"replicas": 1}})).await;
    let left = wait_running(&capi, "pool", 1).await;
    // The deleted machines' MCMMachines and Nodes went with them.
    wait_until("only the remaining MCMMachine", WAIT, || async {
        (infra_names(&capi).await == names(&left)).then_some(())
    })
    .await;
    let nodes: BTreeSet<String> =
        capi.nodes.list(&Default::default()).await.unwrap().items.iter().map(|n| n.name_any()).collect();
    for m in &machines {
        assert_eq!(nodes.contains(&format!("node-{}", m.name_any())), names(&left).contains(&m.name_any()));
    }

    // kubectl shows them.
    let out = env.kubectl.run(&["-n", super::NS, "get", "machines.cluster.x-k8s.io"]).await;
    assert!(out.contains(&left[0].name_any()), "{out}");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_change_clones_the_new_template_and_keeps_the_old_set() {
    // The rollout's bounds are checked by the shared tables (`capi::shared`); this checks what is CAPI's own.
    let (env, capi, _provider) = env().await;
    create_deployment(&capi, deployment("roll", 3, "small", rolling(1, 0))).await;
    let old = names(&wait_running(&capi, "roll", 3).await);
    patch_deployment(
        &capi,
        "roll",
        json!({"spec": {"template": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachineTemplate", "name": "large"}}}}}),
    )
    .await;
    let new = wait_until("3 Running machines from the new template", WAIT, || async {
        let machines = wait_running(&capi, "roll", 3).await;
        names(&machines).is_disjoint(&old).then_some(machines)
    })
    .await;
    for m in &new {
        let clone = capi.infra.get(&m.name_any()).await.unwrap();
        assert_eq!(clone.annotations()["cluster.x-k8s.io/cloned-from-name"], "large");
    }
    let sets = capi.sets.list(&Default::default()).await.unwrap().items;
    assert_eq!(sets.len(), 2, "the old set is kept at 0 for rollbacks");
    let replicas: BTreeSet<i32> = sets.iter().map(|s| s.spec.replicas.unwrap_or(-1)).collect();
    assert_eq!(replicas, BTreeSet::from([0, 3]));
    env.shutdown().await;
}

fn up_to_date(m: &Machine) -> Option<String> {
    let conditions = m.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == "UpToDate").map(|c| c.status.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_of_an_old_template_are_not_up_to_date() {
    let (env, capi, _provider) = env().await;
    create_deployment(&capi, deployment("held", 2, "small", rolling(1, 0))).await;
    let old = wait_running(&capi, "held", 2).await;
    assert!(old.iter().all(|m| up_to_date(m).as_deref() == Some("True")), "{old:?}");
    // Paused, a template change rolls nothing: the machines stay, outdated, and their set counts none up to date.
    patch_deployment(&capi, "held", json!({"spec": {"paused": true}})).await;
    let large = json!({"spec": {"template": {"spec": {"infrastructureRef": {
        "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MCMMachineTemplate", "name": "large"}}}}});
    patch_deployment(&capi, "held", large).await;
    wait_until("both machines NotUpToDate and the set counting none", WAIT, || async {
        let machines = capi.machines_of("held").await;
        let outdated = machines.len() == 2 && machines.iter().all(|m| up_to_date(m).as_deref() == Some("False"));
        let sets = capi.sets.list(&Default::default()).await.ok()?.items;
        let counted = sets.len() == 1 && sets[0].status.as_ref()?.up_to_date_replicas == Some(0);
        (outdated && counted).then_some(())
    })
    .await;
    assert_eq!(names(&capi.machines_of("held").await), names(&old), "paused: nothing replaced");
    let out = env.kubectl.run(&["-n", super::NS, "get", "machines.cluster.x-k8s.io"]).await;
    let row = out.lines().find(|l| l.starts_with(&old[0].name_any())).unwrap_or_default().to_string();
    assert!(row.split_whitespace().any(|c| c == "False"), "the UP-TO-DATE column: {out}");

    // Resumed, the rollout replaces them with up-to-date machines.
    patch_deployment(&capi, "held", json!({"spec": {"paused": false}})).await;
    let new = wait_until("2 up-to-date machines from the new template", WAIT, || async {
        let machines = wait_running(&capi, "held", 2).await;
        (names(&machines).is_disjoint(&names(&old))
            && machines.iter().all(|m| up_to_date(m).as_deref() == Some("True")))
        .then_some(machines)
    })
    .await;
    assert_eq!(new.len(), 2);
    env.shutdown().await;
}

/// The MCMMachineTemplate each live Machine of `pool` was cloned from, by Machine name.
async fn templates_of(capi: &Capi, pool: &str) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for m in capi.machines_of(pool).await.iter().filter(|m| m.metadata.deletion_timestamp.is_none()) {
        if let Ok(infra) = capi.infra.get(&m.name_any()).await {
            let from = infra.annotations().get("cluster.x-k8s.io/cloned-from-name").cloned().unwrap_or_default();
            out.insert(m.name_any(), from);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_delete_replaces_a_machine_only_once_the_user_deletes_it() {
    let (env, capi, _provider) = env().await;
    create_deployment(&capi, deployment("od", 2, "small", json!({"strategy": {"type": "OnDelete"}}))).await;
    let first = names(&wait_running(&capi, "od", 2).await);

    // A template change makes the new set, at 0: no machine is touched.
    patch_deployment(&capi, "od", json!({"spec": {"template": {"spec": {"infrastructureRef": {"name": "large"}}}}}))
        .await;
    let sets = wait_until("the new set at 0 and the old one marked", WAIT, || async {
        let sets = capi.sets.list(&Default::default()).await.ok()?.items;
        let od: Vec<_> = sets
            .into_iter()
            .filter(|s| s.labels().get("cluster.x-k8s.io/deployment-name").map(String::as_str) == Some("od"))
            .collect();
        let disabled =
            |s: &mcm::api::capi::MachineSet| s.annotations().get("cluster.x-k8s.io/disable-machine-create").cloned();
        let old = od.iter().find(|s| disabled(s).as_deref() == Some("true"))?;
        let new = od.iter().find(|s| disabled(s).as_deref() == Some("false"))?;
        (od.len() == 2 && new.spec.replicas == Some(0) && old.spec.replicas == Some(2)).then_some(od)
    })
    .await;
    assert_eq!(sets.len(), 2);
    wait_until("RollingOut while outdated machines are left", WAIT, || async {
        let d = capi.deployments.get("od").await.ok()?;
        let conditions = d.status?.conditions?;
        conditions.iter().any(|c| c.type_ == "RollingOut" && c.status == "True").then_some(())
    })
    .await;
    assert_eq!(names(&wait_running(&capi, "od", 2).await), first, "OnDelete deletes nothing by itself");

    // The user deletes one old machine: exactly one new machine from the new template takes its place.
    let victim = first.iter().next().unwrap().clone();
    capi.machines.delete(&victim, &Default::default()).await.unwrap();
    let after = wait_until("one new machine from the new template", WAIT, || async {
        let t = templates_of(&capi, "od").await;
        let large = t.values().filter(|v| *v == "large").count();
        let small = t.values().filter(|v| *v == "small").count();
        (t.len() == 2 && large == 1 && small == 1 && !t.contains_key(&victim)).then_some(t)
    })
    .await;
    let running = names(&wait_running(&capi, "od", 2).await);
    assert_eq!(running, after.keys().cloned().collect(), "still 2 machines");
    let kept: Vec<&String> = first.iter().filter(|n| **n != victim).collect();
    assert!(running.contains(kept[0]), "the other old machine stays until it is deleted: {running:?}");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_after_replaces_machines_made_before_it() {
    let (env, capi, _provider) = env().await;
    create_deployment(&capi, deployment("ra", 2, "small", rolling(1, 0))).await;
    let first = names(&wait_running(&capi, "ra", 2).await);
    // Once the clock passes the machines' creation second, ask for a rollout from now on.
    let created = capi.machines_of("ra").await[0].metadata.creation_timestamp.clone().unwrap().0;
    let after = wait_until("a later second", WAIT, || async {
        let now = jiff::Timestamp::now();
        (now.as_second() > created.as_second()).then_some(now)
    })
    .await;
    let after = after.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    patch_deployment(&capi, "ra", json!({"spec": {"rollout": {"after": after}}})).await;
    let second = wait_until("2 new machines, none made before rollout.after", WAIT, || async {
        let running = names(&wait_running(&capi, "ra", 2).await);
        running.is_disjoint(&first).then_some(running)
    })
    .await;
    assert_eq!(second.len(), 2);
    let sets: Vec<_> = capi
        .sets
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.labels().get("cluster.x-k8s.io/deployment-name").map(String::as_str) == Some("ra"))
        .collect();
    assert_eq!(sets.len(), 2, "a fresh set for the same template");
    assert!(sets.iter().any(|s| s.spec.replicas == Some(0)), "the old set scaled to 0");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_place_rollout_keeps_every_machine_and_vm_of_a_capi_deployment() {
    let (env, capi, _provider) = env().await;
    // MCM's InPlaceUpdate has no CAPI field: it is carried in the conversion annotation (no `rollout`).
    let mut d = deployment("ipc", 3, "small", json!(null));
    d["spec"].as_object_mut().unwrap().remove("rollout");
    let strategy = json!({"strategy": {"type": "InPlaceUpdate",
        "inPlaceUpdate": {"maxSurge": 0, "maxUnavailable": 1, "orchestrationType": "Auto"}}});
    d["metadata"]["annotations"] = json!({mcm::convert::MCM_DATA: strategy.to_string()});
    create_deployment(&capi, d).await;
    let before = wait_running(&capi, "ipc", 3).await;
    let ids = |ms: &[Machine]| ms.iter().filter_map(|m| m.spec.provider_id.clone()).collect::<BTreeSet<_>>();
    let old_set = before[0].owner_references().iter().find(|o| o.controller == Some(true)).unwrap().name.clone();

    patch_deployment(&capi, "ipc", json!({"spec": {"template": {"metadata": {"labels": {"os": "v2"}}}}})).await;
    let after = wait_until("the same 3 machines moved to the new set", WAIT, || async {
        let machines = wait_running(&capi, "ipc", 3).await;
        let moved = machines.iter().all(|m| {
            m.labels().get("os").map(String::as_str) == Some("v2")
                && m.owner_references().iter().any(|o| o.controller == Some(true) && o.name != old_set)
        });
        moved.then_some(machines)
    })
    .await;
    assert_eq!(names(&after), names(&before), "no Machine replaced");
    assert_eq!(ids(&after), ids(&before), "no VM replaced");
    for m in &after {
        let infra = capi.infra.get(&m.name_any()).await.unwrap();
        let phase = infra.status.and_then(|s| s.current_status).and_then(|c| c.phase);
        assert_eq!(phase, Some(mcm::api::mcm::MachinePhase::Running), "{}: updated and rejoined", m.name_any());
        assert_eq!(m.labels().get(mcm::api::capi::SET_NAME_LABEL), m.owner_references().first().map(|o| &o.name));
    }
    let old = capi.sets.get(&old_set).await.unwrap();
    assert_eq!(old.spec.replicas, Some(0));
    env.shutdown().await;
}
