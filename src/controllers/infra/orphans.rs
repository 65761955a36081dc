//! Orphan VMs of MCMMachines, with the MCM safety controller's rules ([`crate::lifecycle::safety`]): the VMs of
//! every class MCMMachines use (referenced MachineClasses and inline classes) are listed; a VM neither an
//! MCMMachine nor an MCM Machine claims is deleted only after a second listing and a fresh read of both kinds
//! from the API server agree. At start (once the stores are synced), every `--machine-safety-orphan-vms-period`,
//! and after an MCMMachine is deleted (with a cooldown).
//!
//! A class is left alone while an MCMMachine using it, or that MCMMachine's Cluster, is paused or its Cluster is
//! not known ([`infra::orphan_collection_held`]): during `clusterctl move` neither management cluster has every
//! MCMMachine. That is decided on the caches before listing, and again on a fresh read before deleting.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::InfraContext;
use crate::api::capi::{self, Cluster};
use crate::api::infra::MCMMachine;
use crate::api::mcm::Machine;
use crate::api::mcm::names::MACHINE_CLASS_KIND;
use crate::controllers::context::key_of;
use crate::controllers::informer::Notice;
use crate::controllers::safety::schedule_orphan_collections;
use crate::convert::machine::to_hub;
use crate::lifecycle::infra::{self, ClassUser};
use crate::lifecycle::safety::{self, Claimant, Claims, Orphan, SafetyConfig};
use crate::providers::{ClassInfo, Code, ListMachinesRequest, MachineInfo, MachineRequest, SecretData};

/// Wake-ups from MCMMachine deletions.
pub(crate) fn triggers(
    notices: mpsc::UnboundedReceiver<Notice<MCMMachine>>,
) -> impl Stream<Item = String> + Send + Unpin {
    UnboundedReceiverStream::new(notices).filter_map(|notice| {
        futures::future::ready(match notice {
            Notice::Deleted(m) => Some(format!("MCMMachine {} was deleted", key_of(&*m))),
            Notice::Applied(_) => None,
        })
    })
}

/// The collection task's parts.
pub(crate) struct Collector {
    /// Stores, drivers, client.
    pub ctx: Arc<InfraContext>,
    /// Period and cooldown.
    pub config: SafetyConfig,
    /// MCMMachines, for fresh reads.
    pub machines: Api<MCMMachine>,
    /// MCM Machines, for fresh reads (their VMs may share a class's listing).
    pub hub_machines: Api<Machine>,
    /// CAPI Clusters, for fresh reads (a paused or missing Cluster holds its classes).
    pub clusters: Api<Cluster>,
    /// Turns `true` when the controllers stop.
    pub stop: watch::Receiver<bool>,
}

/// One class to list: the driver's view of it, where it lives, its credentials, and the MCMMachines using it.
struct ListedClass {
    key: String,
    namespace: String,
    class: ClassInfo,
    secret: SecretData,
    users: Vec<Arc<MCMMachine>>,
}

/// What identifies the class an MCMMachine uses (one listing per class): a referenced MachineClass by namespace
/// and name, an inline class by its content and credentials.
fn class_key(m: &MCMMachine) -> Option<String> {
    let namespace = m.namespace().unwrap_or_default();
    match (&m.spec.class, &m.spec.inline_class) {
        (Some(r), None) if r.kind == MACHINE_CLASS_KIND => Some(format!("MachineClass {namespace}/{}", r.name)),
        (None, Some(inline)) => {
            let credentials = inline.credentials_secret_ref.as_ref().map(|r| (&r.namespace, &r.name));
            let identity = m.spec.identity_ref.as_ref().map(|r| &r.name);
            Some(format!(
                "inline {namespace} {} {} {credentials:?} {identity:?}",
                inline.provider, inline.provider_spec
            ))
        }
        _ => None,
    }
}

/// Why the VMs of a class are left alone, given its users and a Cluster lookup by namespace and name.
fn held<'a>(
    users: impl IntoIterator<Item = &'a MCMMachine>,
    cluster: impl Fn(&str, &str) -> Option<Arc<Cluster>>,
) -> Option<String> {
    let users: Vec<(&MCMMachine, String, Option<Arc<Cluster>>)> = users
        .into_iter()
        .map(|m| {
            let ns = m.namespace().unwrap_or_default();
            let found = m.labels().get(capi::CLUSTER_NAME_LABEL).and_then(|name| cluster(&ns, name));
            (m, format!("{ns}/{}", m.name_any()), found)
        })
        .collect();
    let views: Vec<ClassUser<'_>> = users
        .iter()
        .map(|(m, key, found)| ClassUser {
            machine: key,
            annotations: m.metadata.annotations.as_ref(),
            cluster_name: m.labels().get(capi::CLUSTER_NAME_LABEL).map(String::as_str),
            cluster: found.as_deref(),
        })
        .collect();
    infra::orphan_collection_held(&views)
}

impl Collector {
    /// Collects at start, every period, and on triggers.
    pub(crate) async fn run(self: Arc<Self>, triggers: impl Stream<Item = String> + Send + Unpin) {
        let collect = |reason: String| {
            let this = self.clone();
            async move { this.collect(&reason).await }
        };
        schedule_orphan_collections(self.ctx.ready(), &self.stop, &self.config, triggers, collect).await;
    }

    /// The classes MCMMachines use, each once, with their users.
    fn classes(&self) -> Vec<ListedClass> {
        let mut out: Vec<ListedClass> = Vec::new();
        let mut index: BTreeMap<String, usize> = BTreeMap::new();
        for m in self.ctx.machines.state() {
            let Some(key) = class_key(&m) else { continue };
            if let Some(&i) = index.get(&key) {
                out[i].users.push(m);
                continue;
            }
            let namespace = m.namespace().unwrap_or_default();
            // A class whose Secrets the machine may not use is not listed (no call with a refused Secret).
            let listed = self.ctx.class_of(&m).ok();
            if let Some((class, secret)) = listed {
                index.insert(key.clone(), out.len());
                out.push(ListedClass { key, namespace: namespace.clone(), class, secret, users: vec![m] });
            }
        }
        out
    }

    /// Why the class is left alone, from the caches.
    fn held_by_cache(&self, listed: &ListedClass) -> Option<String> {
        held(listed.users.iter().map(|m| &**m), |ns, name| {
            self.ctx.clusters.get(&kube::runtime::reflector::ObjectRef::new(name).within(ns))
        })
    }

    /// Why the class is left alone, from a fresh read: its users in the cache and in `fresh` (the MCMMachines as
    /// the API server has them now), their Clusters as `clusters` has them.
    fn held_by_fresh_read(&self, listed: &ListedClass, fresh: &[MCMMachine], clusters: &[Cluster]) -> Option<String> {
        let fresh_users = fresh.iter().filter(|m| class_key(m).as_deref() == Some(listed.key.as_str()));
        let users = listed.users.iter().map(|m| &**m).chain(fresh_users);
        held(users, |ns, name| {
            clusters
                .iter()
                .find(|c| c.namespace().as_deref() == Some(ns) && c.name_any() == name)
                .map(|c| Arc::new(c.clone()))
        })
    }

    /// Claims of the cached MCMMachines.
    fn cached_claims(&self) -> Claims {
        Claims::new(self.ctx.machines.state().iter().map(|m| Claimant::of(&to_hub(m, None))), Vec::new())
    }

    /// Claims of MCMMachines and MCM Machines as the API server has them now, with the MCMMachines and the
    /// Clusters read; `None` if it did not answer. An absent kind (its CRD not installed) claims nothing.
    async fn fresh_read(&self) -> Option<(Claims, Vec<MCMMachine>, Vec<Cluster>)> {
        let infra = match self.machines.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the MCMMachines from the API server; no VM is deleted");
                return None;
            }
        };
        let hub = match self.hub_machines.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the Machines from the API server; no VM is deleted");
                return None;
            }
        };
        let clusters = match self.clusters.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the Clusters from the API server; no VM is deleted");
                return None;
            }
        };
        let mut claimants: Vec<Claimant> = infra.iter().map(|m| Claimant::of(&to_hub(m, None))).collect();
        claimants.extend(hub.iter().map(Claimant::of));
        claimants.extend(self.ctx.machines.state().iter().map(|m| Claimant::of(&to_hub(m, None))));
        Some((Claims::new(claimants, Vec::new()), infra, clusters))
    }

    async fn collect(&self, reason: &str) {
        if !self.ctx.synced() {
            return;
        }
        tracing::debug!(reason, "looking for orphan VMs of MCMMachines");
        let mut handled = BTreeSet::new();
        for listed in self.classes() {
            if let Some(problem) = safety::class_tags_problem(&listed.class.provider_spec) {
                tracing::warn!(class = %listed.key, problem = %problem, "not looking for orphan VMs of this class");
                continue;
            }
            if let Some(why) = self.held_by_cache(&listed) {
                tracing::info!(class = %listed.key, reason = %why, "not looking for orphan VMs of this class now");
                continue;
            }
            let Ok(driver) = self.ctx.drivers.get(&listed.class.provider) else { continue };
            let request = ListMachinesRequest { class: listed.class.clone(), secret: listed.secret.clone() };
            let Some(first) = list(&listed.key, &*driver, &request).await else { continue };
            let suspects: Vec<Orphan> = safety::suspects(&first, &self.cached_claims())
                .into_iter()
                .filter(|o| !handled.contains(&o.provider_id))
                .collect();
            if suspects.is_empty() {
                continue;
            }
            let Some((fresh, fresh_machines, clusters)) = self.fresh_read().await else { return };
            if let Some(why) = self.held_by_fresh_read(&listed, &fresh_machines, &clusters) {
                tracing::info!(class = %listed.key, reason = %why, "not deleting orphan VMs of this class now");
                continue;
            }
            let Some(relisted) = list(&listed.key, &*driver, &request).await else { continue };
            let orphans = safety::confirm(&suspects, &relisted, &fresh);
            handled.extend(suspects.into_iter().map(|o| o.provider_id));
            for orphan in orphans {
                self.delete_orphan(&listed, &*driver, &orphan).await;
            }
        }
    }

    async fn delete_orphan(&self, listed: &ListedClass, driver: &dyn crate::providers::Driver, orphan: &Orphan) {
        let request = MachineRequest {
            machine: MachineInfo {
                name: orphan.machine_name.clone(),
                namespace: listed.namespace.clone(),
                provider_id: Some(orphan.provider_id.clone()),
                ..Default::default()
            },
            class: listed.class.clone(),
            secret: listed.secret.clone(),
            last_known_state: None,
        };
        let (id, name) = (&orphan.provider_id, &orphan.machine_name);
        match driver.delete_machine(&request).await {
            Ok(_) => tracing::info!(class = %listed.key, provider_id = %id, machine = %name, "deleted an orphan VM"),
            Err(e) if e.code == Code::NotFound => {}
            Err(e) => {
                tracing::warn!(class = %listed.key, provider_id = %id, machine = %name, error = %e, "deleting an orphan VM failed")
            }
        }
    }
}

async fn list(
    key: &str,
    driver: &dyn crate::providers::Driver,
    request: &ListMachinesRequest,
) -> Option<BTreeMap<String, String>> {
    match driver.list_machines(request).await {
        Ok(listing) => Some(listing),
        Err(e) => {
            tracing::warn!(class = %key, error = %e, "listing the class's VMs failed; retried at the next collection");
            None
        }
    }
}
