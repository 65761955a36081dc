//! `mcm migrate rollback`: the reverse hand-over ([`RollbackStep`]), also VM-preserving and resumable.
//!
//! It applies to every MachineDeployment the migration touched: CAPI MachineDeployments it made
//! ([`FROM_ANNOTATION`]) and MCM MachineDeployments an interrupted `apply` left paused. The MCM objects are made
//! again from the CAPI ones ([`reverse`]) unless they still exist, taken over by the MCM controllers (which adopt
//! each VM by its providerID), and the CAPI objects are removed with their finalizers released.

use std::collections::BTreeSet;

use kube::Client;
use kube::api::ListParams;
use serde_json::json;
use tokio::time::Instant;

use super::apply::{ApplyOptions, PAUSED_BY, Report};
use super::client::{self, api, create_if_absent, get, merge, release_and_delete};
use super::objects::{controlled_by, controller_ref};
use super::plan::Blocker;
use super::reverse::{RestoredDeployment, reverse};
use super::{ApplyStep, FROM_ANNOTATION, MigrateError, Progress, RollbackStep, STEP_ANNOTATION, WAS_PAUSED_ANNOTATION};
use crate::api::mcm::MachinePhase;
use crate::api::mcm::names::PAUSED_ANNOTATION;
use crate::api::{capi, infra, mcm};

fn step_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<&str> {
    meta.annotations.as_ref()?.get(STEP_ANNOTATION).map(String::as_str)
}

fn made_by_migration(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations.as_ref().is_some_and(|a| a.contains_key(FROM_ANNOTATION))
}

/// One deployment to roll back.
struct Target {
    name: String,
    done: Option<RollbackStep>,
    restore: Option<RestoredDeployment>,
}

/// The deployments the migration touched: CAPI ones it made, MCM ones carrying a step, and their names.
async fn touched(
    client: &Client,
    ns: &str,
) -> Result<(Vec<capi::MachineDeployment>, Vec<mcm::MachineDeployment>, BTreeSet<String>), MigrateError> {
    let capi_deployments: Vec<capi::MachineDeployment> = client::list(&api::<capi::MachineDeployment>(client, ns))
        .await?
        .into_iter()
        .filter(|d| made_by_migration(&d.metadata))
        .collect();
    let mcm_deployments: Vec<mcm::MachineDeployment> = client::list(&api::<mcm::MachineDeployment>(client, ns))
        .await?
        .into_iter()
        .filter(|d| step_of(&d.metadata).is_some())
        .collect();
    let names: BTreeSet<String> = capi_deployments
        .iter()
        .filter_map(|d| d.metadata.name.clone())
        .chain(mcm_deployments.iter().filter_map(|d| d.metadata.name.clone()))
        .collect();
    Ok((capi_deployments, mcm_deployments, names))
}

/// The MachineDeployments a rollback would act on (for `--dry-run`).
pub async fn rollback_candidates(client: &Client, ns: &str) -> Result<Vec<String>, MigrateError> {
    Ok(touched(client, ns).await?.2.into_iter().collect())
}

/// Rolls back every MachineDeployment the migration touched in the namespace; returns their names. Refuses, changing
/// nothing, while any of them cannot be restored.
pub async fn rollback(
    client: &Client,
    options: &ApplyOptions,
    report: Report<'_>,
) -> Result<Vec<String>, MigrateError> {
    let ns = &options.target.namespace;
    let (capi_deployments, mcm_deployments, names) = touched(client, ns).await?;
    let capi = client::capi_inventory(client, ns).await?;
    let mut targets = Vec::new();
    let mut blockers = Vec::new();
    for name in names {
        let capi_d = capi_deployments.iter().find(|d| d.metadata.name.as_deref() == Some(name.as_str()));
        let mcm_d = mcm_deployments.iter().find(|d| d.metadata.name.as_deref() == Some(name.as_str()));
        let recorded = |meta: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>| {
            meta.and_then(step_of).and_then(RollbackStep::parse)
        };
        let done = recorded(mcm_d.map(|d| &d.metadata)).max(recorded(capi_d.map(|d| &d.metadata)));
        // The MCM objects are intact while `apply` has not begun removing them.
        let apply_step = mcm_d.and_then(|d| step_of(&d.metadata)).and_then(ApplyStep::parse);
        let mcm_intact = mcm_d.is_some() && apply_step.is_none_or(|s| s < ApplyStep::Adopted);
        let needs_restore = done.is_none_or(|d| d < RollbackStep::Restored) && !mcm_intact;
        let restore = match (capi_d, needs_restore) {
            (Some(d), true) => match reverse(d, &capi) {
                Ok(r) => Some(r),
                Err(b) => {
                    blockers.extend(b);
                    None
                }
            },
            (None, true) if mcm_d.is_none() => {
                blockers.push(Blocker {
                    object: format!("MachineDeployment {ns}/{name}"),
                    reason: "nothing to restore from".into(),
                });
                None
            }
            _ => None,
        };
        targets.push(Target { name, done, restore });
    }
    if !blockers.is_empty() {
        return Err(MigrateError::Blocked(blockers));
    }
    for t in &targets {
        for step in RollbackStep::ALL.into_iter().filter(|s| t.done.is_none_or(|d| *s > d)) {
            report(Progress::StepStarted { deployment: t.name.clone(), step: step.name(), what: step.describe() });
            match step {
                RollbackStep::Paused => pause_capi(client, ns, &t.name, report).await?,
                RollbackStep::Restored => {
                    if let Some(r) = &t.restore {
                        restore(client, ns, r, report).await?;
                    }
                }
                RollbackStep::Adopted => hand_back(client, options, &t.name, report).await?,
                RollbackStep::Done => remove_capi(client, ns, &t.name, report).await?,
            }
            record(client, ns, &t.name, step).await?;
            report(Progress::StepDone { deployment: t.name.clone(), step: step.name() });
        }
    }
    Ok(targets.into_iter().map(|t| t.name).collect())
}

/// Records `step` on the MCM and CAPI MachineDeployments `name` (whichever exist); the last step clears the record
/// from the MCM one, which is then as before the migration.
async fn record(client: &Client, ns: &str, name: &str, step: RollbackStep) -> Result<(), MigrateError> {
    let value = (step != RollbackStep::Done).then_some(step.name());
    let patch = json!({"metadata": {"annotations": {STEP_ANNOTATION: value}}});
    let mcm_api = api::<mcm::MachineDeployment>(client, ns);
    if get(&mcm_api, name).await?.is_some() {
        merge(&mcm_api, name, &patch).await?;
    }
    let capi_api = api::<capi::MachineDeployment>(client, ns);
    if get(&capi_api, name).await?.is_some_and(|d| made_by_migration(&d.metadata)) {
        merge(&capi_api, name, &patch).await?;
    }
    Ok(())
}

fn by_deployment(name: &str) -> ListParams {
    ListParams::default().labels(&format!("{}={name}", capi::DEPLOYMENT_NAME_LABEL))
}

async fn listed<K>(api: &kube::Api<K>, params: &ListParams) -> Result<Vec<K>, MigrateError>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(params)
        .await
        .map(|l| l.items.into_iter().filter(|o| made_by_migration(o.meta())).collect())
        .map_err(|e| MigrateError::kube("list", format!("{}s", K::kind(&())), e))
}

/// Step 1: `cluster.x-k8s.io/paused` on the CAPI deployment, its sets, Machines and MCMMachines.
async fn pause_capi(client: &Client, ns: &str, name: &str, report: Report<'_>) -> Result<(), MigrateError> {
    let note = |note: String| report(Progress::Object { deployment: name.to_string(), note });
    let deployments = api::<capi::MachineDeployment>(client, ns);
    if get(&deployments, name).await?.is_some_and(|d| made_by_migration(&d.metadata)) {
        client::annotate(&deployments, name, capi::PAUSED_ANNOTATION, Some(PAUSED_BY)).await?;
        note(format!("paused CAPI MachineDeployment {name}"));
    }
    let sets = api::<capi::MachineSet>(client, ns);
    for s in listed(&sets, &by_deployment(name)).await? {
        let set = s.metadata.name.clone().unwrap_or_default();
        client::annotate(&sets, &set, capi::PAUSED_ANNOTATION, Some(PAUSED_BY)).await?;
        note(format!("paused CAPI MachineSet {set}"));
    }
    let machines = api::<capi::Machine>(client, ns);
    for m in listed(&machines, &by_deployment(name)).await? {
        let machine = m.metadata.name.clone().unwrap_or_default();
        client::annotate(&machines, &machine, capi::PAUSED_ANNOTATION, Some(PAUSED_BY)).await?;
        note(format!("paused CAPI Machine {machine}"));
    }
    let infra_machines = api::<infra::MCMMachine>(client, ns);
    for m in listed(&infra_machines, &by_deployment(name)).await? {
        let machine = m.metadata.name.clone().unwrap_or_default();
        client::annotate(&infra_machines, &machine, capi::PAUSED_ANNOTATION, Some(PAUSED_BY)).await?;
        note(format!("paused MCMMachine {machine}"));
    }
    Ok(())
}

/// Step 2: the MCM MachineDeployment, MachineSet and Machines, paused, top-down with owner references.
async fn restore(client: &Client, ns: &str, r: &RestoredDeployment, report: Report<'_>) -> Result<(), MigrateError> {
    let name = r.deployment.metadata.name.clone().unwrap_or_default();
    let note = |note: String| report(Progress::Object { deployment: name.clone(), note });
    let api_version = format!("{}/{}", mcm::GROUP, mcm::VERSION);
    let mut d = r.deployment.clone();
    d.metadata.namespace = Some(ns.to_string());
    let was = d.spec.paused.to_string();
    d.spec.paused = true;
    super::objects::annotate(&mut d.metadata.annotations, PAUSED_ANNOTATION, PAUSED_BY);
    super::objects::annotate(&mut d.metadata.annotations, WAS_PAUSED_ANNOTATION, &was);
    super::objects::annotate(&mut d.metadata.annotations, STEP_ANNOTATION, RollbackStep::Paused.name());
    let (d, new) = create_if_absent(&api::<mcm::MachineDeployment>(client, ns), &d).await?;
    if new {
        note(format!("created MCM MachineDeployment {name} (paused)"));
    }
    let mut set = r.set.clone();
    set.metadata.namespace = Some(ns.to_string());
    set.metadata.owner_references = Some(vec![controller_ref(&api_version, "MachineDeployment", &d.metadata)]);
    super::objects::annotate(&mut set.metadata.annotations, PAUSED_ANNOTATION, PAUSED_BY);
    let (set, new) = create_if_absent(&api::<mcm::MachineSet>(client, ns), &set).await?;
    if new {
        note(format!("created MCM MachineSet {} (paused)", set.metadata.name.as_deref().unwrap_or_default()));
    }
    let machines = api::<mcm::Machine>(client, ns);
    for m in &r.machines {
        let mut m = m.clone();
        m.metadata.namespace = Some(ns.to_string());
        m.metadata.owner_references = Some(vec![controller_ref(&api_version, "MachineSet", &set.metadata)]);
        super::objects::annotate(&mut m.metadata.annotations, PAUSED_ANNOTATION, PAUSED_BY);
        let (created, new) = create_if_absent(&machines, &m).await?;
        if new {
            note(format!(
                "created MCM Machine {} (providerID {}, paused)",
                created.metadata.name.as_deref().unwrap_or_default(),
                created.spec.provider_id.as_deref().unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// Step 3: the MCM Machines, sets and the deployment unpaused (bottom-up; the deployment's own `spec.paused` back),
/// then a wait until every MCM Machine of the deployment is Running.
async fn hand_back(
    client: &Client,
    options: &ApplyOptions,
    name: &str,
    report: Report<'_>,
) -> Result<(), MigrateError> {
    let ns = &options.target.namespace;
    let note = |note: String| report(Progress::Object { deployment: name.to_string(), note });
    let sets_api = api::<mcm::MachineSet>(client, ns);
    let machines_api = api::<mcm::Machine>(client, ns);
    let sets: Vec<String> = client::list(&sets_api)
        .await?
        .into_iter()
        .filter(|s| controlled_by(&s.metadata, "MachineDeployment", name))
        .filter_map(|s| s.metadata.name)
        .collect();
    let mine = |m: &mcm::Machine| sets.iter().any(|s| controlled_by(&m.metadata, "MachineSet", s));
    for m in client::list(&machines_api).await?.into_iter().filter(|m| mine(m)) {
        if crate::lifecycle::names::paused(&m.metadata) {
            let machine = m.metadata.name.clone().unwrap_or_default();
            client::annotate(&machines_api, &machine, PAUSED_ANNOTATION, None).await?;
            note(format!("unpaused MCM Machine {machine}"));
        }
    }
    for set in &sets {
        client::annotate(&sets_api, set, PAUSED_ANNOTATION, None).await?;
    }
    let deployments = api::<mcm::MachineDeployment>(client, ns);
    if let Some(d) = get(&deployments, name).await? {
        let was = d.metadata.annotations.as_ref().and_then(|a| a.get(WAS_PAUSED_ANNOTATION)).cloned();
        let paused = was.as_deref().map_or(d.spec.paused, |w| w == "true");
        let patch = json!({
            "metadata": {"annotations": {PAUSED_ANNOTATION: null, WAS_PAUSED_ANNOTATION: null}},
            "spec": {"paused": paused},
        });
        merge(&deployments, name, &patch).await?;
        note(format!("unpaused MCM MachineDeployment {name}"));
    }
    let deadline = Instant::now() + options.timeout;
    let mut seen = BTreeSet::new();
    loop {
        let machines: Vec<mcm::Machine> = client::list(&machines_api).await?.into_iter().filter(|m| mine(m)).collect();
        let mut waiting = Vec::new();
        for m in &machines {
            let machine = m.metadata.name.clone().unwrap_or_default();
            let phase = m.status.as_ref().and_then(|s| s.current_status.as_ref()).and_then(|c| c.phase.as_ref());
            if phase == Some(&MachinePhase::Running) {
                if seen.insert(machine.clone()) {
                    note(format!(
                        "MCM Machine {machine} is Running ({})",
                        m.spec.provider_id.as_deref().unwrap_or_default()
                    ));
                }
            } else {
                waiting.push(machine);
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(MigrateError::Timeout {
                deployment: name.to_string(),
                waiting: waiting.len(),
                names: waiting.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                timeout: options.timeout,
            });
        }
        tokio::time::sleep(options.poll).await;
    }
}

/// Step 4: the CAPI objects the migration made for the deployment, finalizers released, dependents orphaned.
async fn remove_capi(client: &Client, ns: &str, name: &str, report: Report<'_>) -> Result<(), MigrateError> {
    let note = |note: String| report(Progress::Object { deployment: name.to_string(), note });
    let infra_machines = api::<infra::MCMMachine>(client, ns);
    for m in listed(&infra_machines, &by_deployment(name)).await? {
        let machine = m.metadata.name.clone().unwrap_or_default();
        if release_and_delete(&infra_machines, &machine).await? {
            note(format!("removed MCMMachine {machine} (finalizers released; VM kept)"));
        }
    }
    let machines = api::<capi::Machine>(client, ns);
    for m in listed(&machines, &by_deployment(name)).await? {
        let machine = m.metadata.name.clone().unwrap_or_default();
        if release_and_delete(&machines, &machine).await? {
            note(format!("removed CAPI Machine {machine} (Node kept)"));
        }
    }
    let sets = api::<capi::MachineSet>(client, ns);
    for s in listed(&sets, &by_deployment(name)).await? {
        let set = s.metadata.name.clone().unwrap_or_default();
        if release_and_delete(&sets, &set).await? {
            note(format!("removed CAPI MachineSet {set}"));
        }
    }
    let deployments = api::<capi::MachineDeployment>(client, ns);
    if get(&deployments, name).await?.is_some_and(|d| made_by_migration(&d.metadata))
        && release_and_delete(&deployments, name).await?
    {
        note(format!("removed CAPI MachineDeployment {name}"));
    }
    let templates = api::<infra::MCMMachineTemplate>(client, ns);
    for t in listed(&templates, &by_deployment(name)).await? {
        let template = t.metadata.name.clone().unwrap_or_default();
        if release_and_delete(&templates, &template).await? {
            note(format!("removed MCMMachineTemplate {template}"));
        }
    }
    Ok(())
}
