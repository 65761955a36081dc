//! `mcm migrate apply`: the hand-over as a resumable state machine per MachineDeployment ([`ApplyStep`]).
//!
//! Each step is idempotent and recorded in [`STEP_ANNOTATION`] once complete (on the MCM MachineDeployment while it
//! exists, and on the CAPI one once created), so a re-run skips what is done and redoes at most the step a crash
//! interrupted. Nothing is written while the plan has a blocker.

use std::time::Duration;

use kube::Client;
use serde_json::json;
use tokio::time::Instant;

use super::client::{self, api, create_if_absent, get, merge, merge_if_present, release_and_delete};
use super::objects::{controlled_by, controller_ref};
use super::plan::{DeploymentPlan, Plan, Target, plan};
use super::{ApplyStep, FROM_ANNOTATION, MigrateError, Progress, STEP_ANNOTATION, WAS_PAUSED_ANNOTATION};
use crate::api::mcm::names::PAUSED_ANNOTATION;
use crate::api::{capi, infra, mcm};
use crate::convert::machine_view::phase;

/// How `apply` and `rollback` run.
#[derive(Clone, Debug)]
pub struct ApplyOptions {
    /// Namespace and Cluster.
    pub target: Target,
    /// How long to wait for the machines to be Running under their new owners.
    pub timeout: Duration,
    /// How often to look while waiting.
    pub poll: Duration,
}

/// The value of the pause annotations the migration sets.
pub(super) const PAUSED_BY: &str = "mcm migrate";

/// A progress callback.
pub type Report<'a> = &'a (dyn Fn(Progress) + Send + Sync);

fn step_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<&str> {
    meta.annotations.as_ref()?.get(STEP_ANNOTATION).map(String::as_str)
}

/// Plans, refuses on any blocker, then runs the remaining steps of every MachineDeployment (and finishes
/// hand-overs whose MCM objects are already gone). Returns the plan it followed.
pub async fn apply(client: &Client, options: &ApplyOptions, report: Report<'_>) -> Result<Plan, MigrateError> {
    let target = &options.target;
    let mut inventory = client::inventory(client, target).await?;
    // Deployments whose machines are adopted only have their MCM objects to remove (perhaps half removed, which
    // the planner would read as a scale-down): they are not planned again.
    let adopted =
        |d: &mcm::MachineDeployment| step_of(&d.metadata).and_then(ApplyStep::parse) == Some(ApplyStep::Adopted);
    let finishing: Vec<String> =
        inventory.deployments.iter().filter(|d| adopted(d)).filter_map(|d| d.metadata.name.clone()).collect();
    inventory.deployments.retain(|d| !adopted(d));
    let plan = plan(&inventory, target);
    if !plan.summary.blockers.is_empty() {
        return Err(MigrateError::Blocked(plan.summary.blockers.clone()));
    }
    let ns = &target.namespace;
    for name in &finishing {
        let step = ApplyStep::Done;
        report(Progress::StepStarted { deployment: name.clone(), step: step.name(), what: step.describe() });
        release(client, ns, name, report).await?;
        record(client, ns, name, step).await?;
        report(Progress::StepDone { deployment: name.clone(), step: step.name() });
    }
    for d in &plan.deployments {
        let mcm_d = inventory.deployments.iter().find(|x| x.metadata.name.as_deref() == Some(d.name.as_str()));
        let done = mcm_d.and_then(|x| step_of(&x.metadata)).and_then(ApplyStep::parse);
        for step in ApplyStep::ALL.into_iter().filter(|s| done.is_none_or(|d| *s > d)) {
            report(Progress::StepStarted { deployment: d.name.clone(), step: step.name(), what: step.describe() });
            match step {
                ApplyStep::Paused => pause(client, ns, d, report).await?,
                ApplyStep::Created => create(client, ns, &plan, d, report).await?,
                ApplyStep::Adopted => wait_running(client, options, d, report).await?,
                ApplyStep::Done => release(client, ns, &d.name, report).await?,
            }
            record(client, ns, &d.name, step).await?;
            report(Progress::StepDone { deployment: d.name.clone(), step: step.name() });
        }
    }
    // Hand-overs interrupted after the MCM MachineDeployment went: only the record is missing.
    for c in &inventory.capi_deployments {
        let name = c.metadata.name.clone().unwrap_or_default();
        let ours = c.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(FROM_ANNOTATION));
        let step = step_of(&c.metadata).and_then(ApplyStep::parse);
        let mcm_gone = !inventory.deployments.iter().any(|x| x.metadata.name.as_deref() == Some(name.as_str()))
            && !finishing.contains(&name);
        if ours && mcm_gone && step.is_some_and(|s| s < ApplyStep::Done) {
            let step = ApplyStep::Done;
            report(Progress::StepStarted { deployment: name.clone(), step: step.name(), what: step.describe() });
            record(client, ns, &name, step).await?;
            report(Progress::StepDone { deployment: name.clone(), step: step.name() });
        }
    }
    Ok(plan)
}

/// Records `step` on the MCM and the CAPI MachineDeployment `name` (whichever exist).
async fn record(client: &Client, ns: &str, name: &str, step: ApplyStep) -> Result<(), MigrateError> {
    let patch = json!({"metadata": {"annotations": {STEP_ANNOTATION: step.name()}}});
    // The MCM deployment is being deleted after step 4: a real API server keeps it until its garbage collector has
    // orphaned the sets, so it may go between a read and the write.
    merge_if_present(&api::<mcm::MachineDeployment>(client, ns), name, &patch).await?;
    merge_if_present(&api::<capi::MachineDeployment>(client, ns), name, &patch).await?;
    Ok(())
}

/// Step 1: the MCM deployment (pause annotation, `spec.paused`, its old `spec.paused` remembered), its sets and
/// machines (pause annotation): our MCM-flavour controllers stop acting on them.
async fn pause(client: &Client, ns: &str, d: &DeploymentPlan, report: Report<'_>) -> Result<(), MigrateError> {
    let deployments = api::<mcm::MachineDeployment>(client, ns);
    if let Some(current) = get(&deployments, &d.name).await? {
        let remembered = current.metadata.annotations.as_ref().and_then(|a| a.get(WAS_PAUSED_ANNOTATION)).cloned();
        let was = remembered.unwrap_or_else(|| current.spec.paused.to_string());
        let patch = json!({
            "metadata": {"annotations": {PAUSED_ANNOTATION: PAUSED_BY, WAS_PAUSED_ANNOTATION: was}},
            "spec": {"paused": true},
        });
        merge(&deployments, &d.name, &patch).await?;
        report(Progress::Object { deployment: d.name.clone(), note: format!("paused MachineDeployment {}", d.name) });
    }
    let sets = api::<mcm::MachineSet>(client, ns);
    for set in &d.mcm_sets {
        client::annotate(&sets, set, PAUSED_ANNOTATION, Some(PAUSED_BY)).await?;
        report(Progress::Object { deployment: d.name.clone(), note: format!("paused MachineSet {set}") });
    }
    let machines = api::<mcm::Machine>(client, ns);
    for pair in &d.machines {
        let name = pair.machine.metadata.name.clone().unwrap_or_default();
        client::annotate(&machines, &name, PAUSED_ANNOTATION, Some(PAUSED_BY)).await?;
        report(Progress::Object { deployment: d.name.clone(), note: format!("paused Machine {name}") });
    }
    Ok(())
}

/// Step 2: the CAPI objects, bottom-up so that no controller ever sees a Machine without its MCMMachine (it would
/// clone one without a providerID, i.e. a new VM): Cluster and MCMCluster, the template, each Machine and then its
/// MCMMachine (owned by it, naming the VM), the MachineSet (owning the Machines), the MachineDeployment (owning the
/// set).
async fn create(
    client: &Client,
    ns: &str,
    plan: &Plan,
    d: &DeploymentPlan,
    report: Report<'_>,
) -> Result<(), MigrateError> {
    let note = |note: String| report(Progress::Object { deployment: d.name.clone(), note });
    if let Some(cluster) = &plan.cluster
        && create_if_absent(&api::<capi::Cluster>(client, ns), cluster).await?.1
    {
        note(format!("created Cluster {}", cluster.metadata.name.as_deref().unwrap_or_default()));
    }
    if let Some(cluster) = &plan.mcm_cluster
        && create_if_absent(&api::<infra::MCMCluster>(client, ns), cluster).await?.1
    {
        note(format!("created MCMCluster {}", cluster.metadata.name.as_deref().unwrap_or_default()));
    }
    if create_if_absent(&api::<infra::MCMMachineTemplate>(client, ns), &d.template).await?.1 {
        note(format!("created MCMMachineTemplate {}", d.name));
    }
    let machines = api::<capi::Machine>(client, ns);
    let infra_machines = api::<infra::MCMMachine>(client, ns);
    let mut created_machines = Vec::new();
    for pair in &d.machines {
        let name = pair.machine.metadata.name.clone().unwrap_or_default();
        let (machine, new) = create_if_absent(&machines, &pair.machine).await?;
        let mut infra_machine = pair.infra.clone();
        let api_version = format!("{}/{}", capi::GROUP, capi::VERSION);
        infra_machine.metadata.owner_references =
            Some(vec![controller_ref(&api_version, "Machine", &machine.metadata)]);
        let (_, new_infra) = create_if_absent(&infra_machines, &infra_machine).await?;
        if new || new_infra {
            note(format!(
                "created Machine and MCMMachine {name} (providerID {}, Node {})",
                pair.provider_id, pair.node
            ));
        }
        created_machines.push(machine);
    }
    // The set and the deployment start paused: their controllers act only once every Machine is Running under
    // them (step 3), never on a cache that has not seen all the adopted Machines yet (it would scale).
    let mut paused_set = d.set.clone();
    super::objects::annotate(&mut paused_set.metadata.annotations, capi::PAUSED_ANNOTATION, PAUSED_BY);
    let sets = api::<capi::MachineSet>(client, ns);
    let (set, new) = create_if_absent(&sets, &paused_set).await?;
    let set_name = set.metadata.name.clone().unwrap_or_default();
    if new {
        note(format!("created MachineSet {set_name}"));
    }
    let api_version = format!("{}/{}", capi::GROUP, capi::VERSION);
    for m in &created_machines {
        if super::objects::controller_name(&m.metadata, "MachineSet").is_none() {
            let owner = controller_ref(&api_version, "MachineSet", &set.metadata);
            merge(
                &machines,
                m.metadata.name.as_deref().unwrap_or_default(),
                &json!({"metadata": {"ownerReferences": [owner]}}),
            )
            .await?;
        }
    }
    let deployments = api::<capi::MachineDeployment>(client, ns);
    let mut paused_deployment = d.deployment.clone();
    super::objects::annotate(&mut paused_deployment.metadata.annotations, capi::PAUSED_ANNOTATION, PAUSED_BY);
    let (deployment, new) = create_if_absent(&deployments, &paused_deployment).await?;
    if new {
        note(format!("created MachineDeployment {}", d.name));
    }
    let current = get(&sets, &set_name).await?;
    if current.is_some_and(|s| super::objects::controller_name(&s.metadata, "MachineDeployment").is_none()) {
        let owner = controller_ref(&api_version, "MachineDeployment", &deployment.metadata);
        merge(&sets, &set_name, &json!({"metadata": {"ownerReferences": [owner]}})).await?;
    }
    Ok(())
}

/// Step 3: waits until every CAPI Machine is Running on the Node its MCM Machine had, with the same providerID;
/// then unpauses the CAPI MachineSet and MachineDeployment.
async fn wait_running(
    client: &Client,
    options: &ApplyOptions,
    d: &DeploymentPlan,
    report: Report<'_>,
) -> Result<(), MigrateError> {
    let machines = api::<capi::Machine>(client, &options.target.namespace);
    let deadline = Instant::now() + options.timeout;
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let mut waiting = Vec::new();
        // One list a look, not one read per machine.
        let current: std::collections::BTreeMap<String, capi::Machine> =
            client::list(&machines).await?.into_iter().filter_map(|m| Some((m.metadata.name.clone()?, m))).collect();
        for pair in &d.machines {
            let name = pair.machine.metadata.name.clone().unwrap_or_default();
            let m = current.get(&name);
            let status = m.and_then(|m| m.status.as_ref());
            let running = status.and_then(|s| s.phase.as_deref()) == Some(phase::RUNNING)
                && status.and_then(|s| s.node_ref.as_ref()).map(|r| r.name.as_str()) == Some(pair.node.as_str())
                && m.and_then(|m| m.spec.provider_id.as_deref()) == Some(pair.provider_id.as_str());
            if running {
                if seen.insert(name.clone()) {
                    report(Progress::Object {
                        deployment: d.name.clone(),
                        note: format!("Machine {name} is Running on Node {} ({})", pair.node, pair.provider_id),
                    });
                }
            } else {
                waiting.push(name);
            }
        }
        if waiting.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(MigrateError::Timeout {
                deployment: d.name.clone(),
                waiting: waiting.len(),
                names: waiting.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                timeout: options.timeout,
            });
        }
        tokio::time::sleep(options.poll).await;
    }
    let ns = &options.target.namespace;
    let set = d.set.metadata.name.clone().unwrap_or_default();
    client::annotate(&api::<capi::MachineSet>(client, ns), &set, capi::PAUSED_ANNOTATION, None).await?;
    client::annotate(&api::<capi::MachineDeployment>(client, ns), &d.name, capi::PAUSED_ANNOTATION, None).await?;
    report(Progress::Object {
        deployment: d.name.clone(),
        note: format!("unpaused CAPI MachineSet {set} and MachineDeployment {}", d.name),
    });
    Ok(())
}

/// Step 4: the MCM Machines, MachineSets and the MachineDeployment go, each with its finalizers released first and
/// its dependents orphaned: the VMs and Nodes stay with their CAPI owners.
async fn release(client: &Client, ns: &str, name: &str, report: Report<'_>) -> Result<(), MigrateError> {
    let note = |note: String| report(Progress::Object { deployment: name.to_string(), note });
    let sets_api = api::<mcm::MachineSet>(client, ns);
    let machines_api = api::<mcm::Machine>(client, ns);
    let sets: Vec<mcm::MachineSet> = client::list(&sets_api)
        .await?
        .into_iter()
        .filter(|s| controlled_by(&s.metadata, "MachineDeployment", name))
        .collect();
    let machines = client::list(&machines_api).await?;
    for set in &sets {
        let set_name = set.metadata.name.clone().unwrap_or_default();
        for m in machines.iter().filter(|m| controlled_by(&m.metadata, "MachineSet", &set_name)) {
            let machine_name = m.metadata.name.clone().unwrap_or_default();
            let paused = crate::lifecycle::names::paused(&m.metadata);
            if !paused {
                // Never release a machine the migration did not pause: its controller may be acting on it.
                client::annotate(&machines_api, &machine_name, PAUSED_ANNOTATION, Some(PAUSED_BY)).await?;
            }
            if release_and_delete(&machines_api, &machine_name).await? {
                note(format!("removed MCM Machine {machine_name} (finalizers released; VM and Node kept)"));
            }
        }
        if release_and_delete(&sets_api, &set_name).await? {
            note(format!("removed MCM MachineSet {set_name}"));
        }
    }
    if release_and_delete(&api::<mcm::MachineDeployment>(client, ns), name).await? {
        note(format!("removed MCM MachineDeployment {name}"));
    }
    Ok(())
}
