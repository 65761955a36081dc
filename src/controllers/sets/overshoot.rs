//! The overshoot freeze (`docs/machine-lifecycle.md`): a sweep over every MachineSet and MachineDeployment,
//! every `--machine-safety-overshooting-period` and whenever a Machine appears, that freezes a set owning far more
//! machines than it should (it then creates none) and unfreezes it once the count is back, as
//! `lifecycle::freeze::plan_freeze_sweep` decides.
//!
//! A sweep reads only the stores; it writes labels and annotations as merge patches and conditions through the
//! status (guarded by the resourceVersion: the set and deployment controllers write the same condition lists).
//! Machine additions arriving in a burst (a set creating a hundred machines) make one sweep, not a hundred.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use jiff::Timestamp;
use kube::api::Patch;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use super::SetsContext;
use crate::api::mcm::names::UNFREEZE;
use crate::api::mcm::names::{FREEZE_LABEL, FREEZE_VALUE};
use crate::api::mcm::{
    ConditionStatus, Machine, MachineDeployment, MachineDeploymentCondition, MachineDeploymentConditionType,
    MachineSet, MachineSetConditionType,
};
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::{Error, is_conflict};
use crate::controllers::informer::Notice;
use crate::controllers::replicas::settle::Written;
use crate::controllers::writes;
use crate::controllers::writes::patch_params as params;
use crate::lifecycle::claim::controller_of;
use crate::lifecycle::freeze::{
    FROZE_MACHINE_SET, FreezeAction, SetFreezeFacts, UNFROZE_MACHINE_SET, count_machines, frozen_set_condition,
    plan_freeze_sweep, thresholds,
};
use crate::lifecycle::machine_deployment::status::{new_condition, remove_condition, set_condition};
use crate::lifecycle::status::EventSpec;

/// Runs sweeps until `shutdown` resolves: every period, and after Machine additions.
pub(super) async fn run(
    ctx: Arc<SetsContext>,
    mut machines: mpsc::UnboundedReceiver<Notice<Machine>>,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut ticks = tokio::time::interval(ctx.options.overshooting_period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut known: HashSet<String> = HashSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = ticks.tick() => {}
            notice = machines.recv() => {
                let Some(notice) = notice else { return };
                // Drain what else is queued: a burst of additions is one sweep.
                let mut added = is_addition(&mut known, &notice);
                while let Ok(more) = machines.try_recv() {
                    added |= is_addition(&mut known, &more);
                }
                if !added {
                    continue;
                }
            }
        }
        ctx.ready().await;
        if let Err(e) = sweep(&ctx).await {
            tracing::warn!(error = %e, "overshoot sweep failed; next sweep");
        }
    }
}

/// Whether a notice is a Machine seen for the first time (and keeps track of the machines known).
fn is_addition(known: &mut HashSet<String>, notice: &Notice<Machine>) -> bool {
    let m = notice.object();
    let id = m.uid().unwrap_or_else(|| key_of(&**m));
    match notice {
        Notice::Applied(_) => known.insert(id),
        Notice::Deleted(_) => {
            known.remove(&id);
            false
        }
    }
}

/// One sweep over every namespace.
async fn sweep(ctx: &SetsContext) -> Result<(), Error> {
    let mut written = Written::default();
    let mut failure = None;
    let now = Timestamp::now();
    let sets = ctx.sets.state();
    let deployments = ctx.deployments.state();
    let machines = ctx.base.machines.state();
    let namespaces: BTreeMap<String, ()> = sets
        .iter()
        .map(|s| (s.namespace().unwrap_or_default(), ()))
        .chain(deployments.iter().map(|d| (d.namespace().unwrap_or_default(), ())))
        .collect();
    for namespace in namespaces.keys() {
        let in_ns = |ns: Option<String>| ns.as_deref() == Some(namespace.as_str());
        let ns_sets: Vec<&MachineSet> = sets.iter().filter(|s| in_ns(s.namespace())).map(|s| &**s).collect();
        let ns_deployments: Vec<&MachineDeployment> =
            deployments.iter().filter(|d| in_ns(d.namespace())).map(|d| &**d).collect();
        let ns_machines: Vec<&Machine> = machines.iter().filter(|m| in_ns(m.namespace())).map(|m| &**m).collect();
        let facts: Vec<SetFreezeFacts<'_>> = ns_sets
            .iter()
            .map(|s| SetFreezeFacts {
                set: s,
                parent: controller_of(&s.metadata)
                    .filter(|r| r.kind == "MachineDeployment")
                    .and_then(|r| ns_deployments.iter().copied().find(|d| d.uid().as_deref() == Some(r.uid.as_str()))),
                machine_count: count_machines(s, ns_machines.iter().copied()),
            })
            .collect();
        for f in &facts {
            let t = thresholds(f.set, f.parent, ctx.options.freeze);
            tracing::debug!(machine_set = %key_of(f.set), count = f.machine_count, upper = t.upper, lower = t.lower, "overshoot check");
        }
        for action in plan_freeze_sweep(&facts, &ns_deployments, ctx.options.freeze) {
            if let Err(e) = apply(ctx, namespace, action, now, &mut written).await {
                failure.get_or_insert(e);
            }
        }
    }
    // The next sweep (often a few milliseconds later, on the next Machine) must see these writes, or it would
    // find a deployment it just froze unfrozen and freeze it again under another reason.
    crate::controllers::replicas::settle(ctx, written, "overshoot sweep").await;
    failure.map_or(Ok(()), Err)
}

async fn apply(
    ctx: &SetsContext,
    namespace: &str,
    action: FreezeAction,
    now: Timestamp,
    written: &mut Written,
) -> Result<(), Error> {
    let sets: Api<MachineSet> = Api::namespaced(ctx.base.control.clone(), namespace);
    let deployments: Api<MachineDeployment> = Api::namespaced(ctx.base.control.clone(), namespace);
    let get_set = |name: &str| ctx.set(namespace, name);
    let get_deployment =
        |name: &str| ctx.deployments.get(&kube::runtime::reflector::ObjectRef::new(name).within(namespace));
    match action {
        FreezeAction::FreezeMachineSet { set, message } => {
            let Some(s) = get_set(&set) else { return Ok(()) };
            tracing::info!(machine_set = %key_of(&*s), "freezing: {message}");
            let before = s.clone();
            let s = label(&sets, &s, true).await?;
            let s = update_status(&sets, s, |s: &MachineSet| {
                let old = set_conditions(s);
                if old.iter().any(|c| c.type_ == MachineSetConditionType::Frozen && c.status == ConditionStatus::True) {
                    return None;
                }
                let mut conditions = old;
                conditions.retain(|c| c.type_ != MachineSetConditionType::Frozen);
                conditions.push(frozen_set_condition(&message, now));
                Some(json!({"machineSetCondition": conditions}))
            })
            .await?;
            written.set_changed(&before, &s);
            let note = format!("Froze MachineSet {set} due to replica overshooting: {message}");
            publish_to(&ctx.safety_events, &s, EventSpec::normal(FROZE_MACHINE_SET, note)).await;
        }
        FreezeAction::UnfreezeMachineSet { set, reason } => {
            let Some(s) = get_set(&set) else { return Ok(()) };
            tracing::info!(machine_set = %key_of(&*s), reason, "unfreezing");
            let before = s.clone();
            let s = label(&sets, &s, false).await?;
            let s = update_status(&sets, s, |s: &MachineSet| {
                let old = set_conditions(s);
                if !old.iter().any(|c| c.type_ == MachineSetConditionType::Frozen) {
                    return None;
                }
                let kept: Vec<_> = old.into_iter().filter(|c| c.type_ != MachineSetConditionType::Frozen).collect();
                Some(json!({"machineSetCondition": if kept.is_empty() { json!(null) } else { json!(kept) }}))
            })
            .await?;
            written.set_changed(&before, &s);
            let note = format!("Unfroze MachineSet {set} ({reason})");
            publish_to(&ctx.safety_events, &s, EventSpec::normal(UNFROZE_MACHINE_SET, note)).await;
        }
        FreezeAction::FreezeMachineDeployment { deployment, reason, message } => {
            let Some(d) = get_deployment(&deployment) else { return Ok(()) };
            tracing::info!(machine_deployment = %key_of(&*d), reason, "freezing");
            let before = d.clone();
            let d = label(&deployments, &d, true).await?;
            let d = update_status(&deployments, d, |d: &MachineDeployment| {
                let old = deployment_conditions(d);
                let mut conditions = old.clone();
                let frozen = new_condition(
                    MachineDeploymentConditionType::Frozen,
                    ConditionStatus::True,
                    reason,
                    message.clone(),
                    now,
                );
                set_condition(&mut conditions, frozen);
                (conditions != old).then(|| json!({"conditions": conditions}))
            })
            .await?;
            written.deployment_changed(&before, &d);
        }
        FreezeAction::UnfreezeMachineDeployment { deployment, reason } => {
            let Some(d) = get_deployment(&deployment) else { return Ok(()) };
            tracing::info!(machine_deployment = %key_of(&*d), reason, "unfreezing");
            let before = d.clone();
            let d = label(&deployments, &d, false).await?;
            let d = update_status(&deployments, d, |d: &MachineDeployment| {
                let old = deployment_conditions(d);
                let mut conditions = old.clone();
                remove_condition(&mut conditions, MachineDeploymentConditionType::Frozen);
                (conditions != old).then(|| json!({"conditions": conditions}))
            })
            .await?;
            written.deployment_changed(&before, &d);
        }
    }
    Ok(())
}

fn set_conditions(s: &MachineSet) -> Vec<crate::api::mcm::MachineSetCondition> {
    s.status.as_ref().and_then(|st| st.machine_set_condition.clone()).unwrap_or_default()
}

fn deployment_conditions(d: &MachineDeployment) -> Vec<MachineDeploymentCondition> {
    d.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default()
}

/// Sets (`frozen`) or removes the `freeze=True` label; unfreezing also removes the unfreeze annotation. Writes
/// only what differs; returns the object as it is afterwards.
async fn label<K>(api: &Api<K>, object: &Arc<K>, frozen: bool) -> Result<K, Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let labelled = object.labels().get(FREEZE_LABEL).map(String::as_str) == Some(FREEZE_VALUE);
    let annotated = object.annotations().contains_key(UNFREEZE);
    let patch = match (frozen, labelled, annotated) {
        (true, false, _) => json!({"metadata": {"labels": {FREEZE_LABEL: FREEZE_VALUE}}}),
        (false, true, _) | (false, _, true) => {
            json!({"metadata": {"labels": {FREEZE_LABEL: null}, "annotations": {UNFREEZE: null}}})
        }
        _ => return Ok((**object).clone()),
    };
    writes::merge(api, &**object, &patch, "freeze or unfreeze").await
}

/// Writes the status fields `change` computes from the object (nothing when it returns `None`), guarded by the
/// object's resourceVersion. On a conflict (a controller wrote the status meanwhile) the object is read again and
/// the change computed anew, a few times: the label is already written, and a later sweep would not redo the
/// condition of a set it sees labelled.
async fn update_status<K>(
    api: &Api<K>,
    mut object: K,
    change: impl Fn(&K) -> Option<serde_json::Value>,
) -> Result<K, Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let describe = |o: &K| format!("{} {}", K::kind(&()), key_of(o));
    for _ in 0..5 {
        let Some(status) = change(&object) else { return Ok(object) };
        let patch = json!({"metadata": {"resourceVersion": object.resource_version()}, "status": status});
        match api.patch_status(&object.name_any(), &params(), &Patch::Merge(&patch)).await {
            Ok(updated) => return Ok(updated),
            Err(e) if is_conflict(&e) => {
                object = api.get(&object.name_any()).await.map_err(|e| Error::kube("get", describe(&object), e))?;
            }
            Err(e) => return Err(Error::kube("patch status of", describe(&object), e)),
        }
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(uid: &str, deleted: bool) -> Notice<Machine> {
        let mut m = Machine::new("m", Default::default());
        m.metadata.uid = Some(uid.into());
        if deleted { Notice::Deleted(Arc::new(m)) } else { Notice::Applied(Arc::new(m)) }
    }

    #[test]
    fn additions_are_first_sightings() {
        let mut known = HashSet::new();
        let cases = [
            ("new machine", notice("a", false), true),
            ("a change of it", notice("a", false), false),
            ("another machine", notice("b", false), true),
            ("deleted", notice("a", true), false),
            ("back again", notice("a", false), true),
        ];
        for (name, n, expected) in cases {
            assert_eq!(is_addition(&mut known, &n), expected, "{name}");
        }
    }
}
