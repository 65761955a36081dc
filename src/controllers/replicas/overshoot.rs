//! The overshoot freeze (`docs/machine-lifecycle.md`), for either flavour: a sweep over every MachineSet and
//! MachineDeployment, every `--machine-safety-overshooting-period` and whenever a Machine appears, that freezes a set
//! owning far more machines than it should (it then creates none) and unfreezes it once the count is back, as
//! `lifecycle::freeze::plan_freeze_sweep` decides over the hub views.
//!
//! A sweep reads only the stores; it writes labels and annotations as merge patches and conditions through the
//! status (guarded by the resourceVersion: the set and deployment controllers write the same condition lists).
//! Machine additions arriving in a burst (a set creating a hundred machines) make one sweep, not a hundred.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use jiff::Timestamp;
use kube::api::Patch;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use super::{Flavour, Object, WrittenBy};
use crate::api::mcm;
use crate::api::mcm::names::UNFREEZE;
use crate::api::mcm::names::{FREEZE_LABEL, FREEZE_VALUE};
use crate::api::mcm::{ConditionStatus, MachineDeploymentConditionType};
use crate::controllers::context::{key_of, publish_to};
use crate::controllers::error::{Error, is_conflict};
use crate::controllers::informer::Notice;
use crate::controllers::writes;
use crate::controllers::writes::patch_params as params;
use crate::lifecycle::claim::controller_of;
use crate::lifecycle::freeze::{
    FROZE_MACHINE_SET, FreezeAction, SetFreezeFacts, UNFROZE_MACHINE_SET, count_machines, frozen_set_condition,
    plan_freeze_sweep, thresholds,
};
use crate::lifecycle::machine_deployment::status::new_condition;
use crate::lifecycle::status::EventSpec;

/// Runs sweeps until `shutdown` resolves: every period, and after Machine additions.
pub(crate) async fn run<F: Flavour>(
    f: Arc<F>,
    mut machines: mpsc::UnboundedReceiver<Notice<F::Machine>>,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut ticks = tokio::time::interval(f.set_options().overshooting_period);
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
        f.ready().await;
        if let Err(e) = sweep(&*f).await {
            tracing::warn!(error = %e, "overshoot sweep failed; next sweep");
        }
    }
}

/// Whether a notice is a Machine seen for the first time (and keeps track of the machines known).
fn is_addition<K: Object>(known: &mut HashSet<String>, notice: &Notice<K>) -> bool {
    let m = notice.object();
    let id = m.meta().uid.clone().unwrap_or_else(|| key_of(&**m));
    match notice {
        Notice::Applied(_) => known.insert(id),
        Notice::Deleted(_) => {
            known.remove(&id);
            false
        }
    }
}

/// One sweep over every namespace.
async fn sweep<F: Flavour>(f: &F) -> Result<(), Error> {
    let mut written = WrittenBy::<F>::default();
    let mut failure = None;
    let now = Timestamp::now();
    // Views borrowed from the stores (the MCM flavour's are the cached objects themselves): a sweep runs after
    // every burst of additions, and copying every Machine each time was a tenth of a 1,000-machine run's CPU.
    let (stored_sets, stored_deployments, stored_machines) =
        (f.sets().state(), f.deployments().state(), f.machines().state());
    let sets: Vec<Cow<'_, mcm::MachineSet>> = stored_sets.iter().map(|s| F::set_to_hub(s)).collect();
    let deployments: Vec<Cow<'_, mcm::MachineDeployment>> =
        stored_deployments.iter().map(|d| F::deployment_to_hub(d)).collect();
    let machines: Vec<Cow<'_, mcm::Machine>> = stored_machines.iter().map(|m| f.machine_to_hub(m)).collect();
    let namespaces: BTreeMap<String, ()> = sets
        .iter()
        .map(|s| (s.namespace().unwrap_or_default(), ()))
        .chain(deployments.iter().map(|d| (d.namespace().unwrap_or_default(), ())))
        .collect();
    let options = f.set_options().freeze;
    for namespace in namespaces.keys() {
        let in_ns = |ns: Option<String>| ns.as_deref() == Some(namespace.as_str());
        let ns_sets: Vec<&mcm::MachineSet> = sets.iter().map(|s| s.as_ref()).filter(|s| in_ns(s.namespace())).collect();
        let ns_deployments: Vec<&mcm::MachineDeployment> =
            deployments.iter().map(|d| d.as_ref()).filter(|d| in_ns(d.namespace())).collect();
        let ns_machines: Vec<&mcm::Machine> =
            machines.iter().map(|m| m.as_ref()).filter(|m| in_ns(m.namespace())).collect();
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
        for fact in &facts {
            let t = thresholds(fact.set, fact.parent, options);
            tracing::debug!(machine_set = %key_of(fact.set), count = fact.machine_count, upper = t.upper, lower = t.lower, "overshoot check");
        }
        for action in plan_freeze_sweep(&facts, &ns_deployments, options) {
            if let Err(e) = apply(f, namespace, action, now, &mut written).await {
                failure.get_or_insert(e);
            }
        }
    }
    // The next sweep (often a few milliseconds later, on the next Machine) must see these writes, or it would
    // find a deployment it just froze unfrozen and freeze it again under another reason.
    // A sweep is not a pass over one object: the next one goes on regardless (it looks at every set again).
    let _unseen = super::settle(f, written, "overshoot sweep").await;
    failure.map_or(Ok(()), Err)
}

async fn apply<F: Flavour>(
    f: &F,
    namespace: &str,
    action: FreezeAction,
    now: Timestamp,
    written: &mut WrittenBy<F>,
) -> Result<(), Error> {
    let sets: Api<F::Set> = Api::namespaced(f.control().clone(), namespace);
    let deployments: Api<F::Deployment> = Api::namespaced(f.control().clone(), namespace);
    let get_set = |name: &str| f.sets().get(&ObjectRef::new(name).within(namespace));
    let get_deployment = |name: &str| f.deployments().get(&ObjectRef::new(name).within(namespace));
    match action {
        FreezeAction::FreezeMachineSet { set, message } => {
            let Some(s) = get_set(&set) else { return Ok(()) };
            tracing::info!(machine_set = %key_of(&*s), "freezing: {message}");
            let before = (*s).clone();
            let s = label(&sets, &s, true).await?;
            let frozen = frozen_set_condition(&message, now);
            let s = update_status(&sets, s, |s: &F::Set| F::set_frozen_patch(s, Some(&frozen))).await?;
            written.set_changed(&before, &s);
            let note = format!("Froze MachineSet {set} due to replica overshooting: {message}");
            publish_to(f.freeze_events(), &s, EventSpec::normal(FROZE_MACHINE_SET, note)).await;
        }
        FreezeAction::UnfreezeMachineSet { set, reason } => {
            let Some(s) = get_set(&set) else { return Ok(()) };
            tracing::info!(machine_set = %key_of(&*s), reason, "unfreezing");
            let before = (*s).clone();
            let s = label(&sets, &s, false).await?;
            let s = update_status(&sets, s, |s: &F::Set| F::set_frozen_patch(s, None)).await?;
            written.set_changed(&before, &s);
            let note = format!("Unfroze MachineSet {set} ({reason})");
            publish_to(f.freeze_events(), &s, EventSpec::normal(UNFROZE_MACHINE_SET, note)).await;
        }
        FreezeAction::FreezeMachineDeployment { deployment, reason, message } => {
            let Some(d) = get_deployment(&deployment) else { return Ok(()) };
            tracing::info!(machine_deployment = %key_of(&*d), reason, "freezing");
            let before = (*d).clone();
            let d = label(&deployments, &d, true).await?;
            let frozen =
                new_condition(MachineDeploymentConditionType::Frozen, ConditionStatus::True, reason, message, now);
            let d = update_status(&deployments, d, |d: &F::Deployment| F::deployment_frozen_patch(d, Some(&frozen)))
                .await?;
            written.deployment_changed(&before, &d);
        }
        FreezeAction::UnfreezeMachineDeployment { deployment, reason } => {
            let Some(d) = get_deployment(&deployment) else { return Ok(()) };
            tracing::info!(machine_deployment = %key_of(&*d), reason, "unfreezing");
            let before = (*d).clone();
            let d = label(&deployments, &d, false).await?;
            let d = update_status(&deployments, d, |d: &F::Deployment| F::deployment_frozen_patch(d, None)).await?;
            written.deployment_changed(&before, &d);
        }
    }
    Ok(())
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

    fn notice(uid: &str, deleted: bool) -> Notice<mcm::Machine> {
        let mut m = mcm::Machine::new("m", Default::default());
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
