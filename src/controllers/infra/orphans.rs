//! Orphan VMs of MCMMachines, with the MCM safety controller's rules ([`crate::lifecycle::safety`]): the VMs of
//! every class MCMMachines use (referenced MachineClasses and inline classes) are listed; a VM neither an
//! MCMMachine nor an MCM Machine claims is deleted only after a second listing and a fresh read of both kinds
//! from the API server agree. At start (once the stores are synced), every `--machine-safety-orphan-vms-period`,
//! and after an MCMMachine is deleted (with a cooldown).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::InfraContext;
use crate::api::infra::MCMMachine;
use crate::api::mcm::{Machine, MachineClass};
use crate::controllers::context::key_of;
use crate::controllers::informer::Notice;
use crate::controllers::safety::schedule_orphan_collections;
use crate::convert::machine::to_hub;
use crate::lifecycle::names::MACHINE_CLASS_KIND;
use crate::lifecycle::safety::{self, Claimant, Claims, Orphan, SafetyConfig};
use crate::lifecycle::userdata::merge_secret_data;
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
    /// Turns `true` when the controllers stop.
    pub stop: watch::Receiver<bool>,
}

/// One class to list: the driver's view of it, where it lives, and its credentials.
struct ListedClass {
    key: String,
    namespace: String,
    class: ClassInfo,
    secret: SecretData,
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

    /// The classes MCMMachines use, each once.
    fn classes(&self) -> Vec<ListedClass> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for m in self.ctx.machines.state() {
            let namespace = m.namespace().unwrap_or_default();
            let secret = |r: Option<&k8s_openapi::api::core::v1::SecretReference>| {
                let r = r?;
                let ns = r.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(&namespace);
                self.ctx.secret(ns, r.name.as_deref()?)
            };
            let listed = match (&m.spec.class, &m.spec.inline_class) {
                (Some(r), None) if r.kind == MACHINE_CLASS_KIND => {
                    let key = format!("MachineClass {namespace}/{}", r.name);
                    let found = self
                        .ctx
                        .classes
                        .get(&kube::runtime::reflector::ObjectRef::<MachineClass>::new(&r.name).within(&namespace));
                    found.map(|c| ListedClass {
                        key,
                        namespace: namespace.clone(),
                        class: crate::controllers::machine::class_info(&c),
                        secret: merge_secret_data(
                            secret(c.spec.secret_ref.as_ref()).as_deref(),
                            secret(c.spec.credentials_secret_ref.as_ref()).as_deref(),
                        ),
                    })
                }
                (None, Some(inline)) => {
                    let credentials = inline.credentials_secret_ref.as_ref().and_then(|r| r.name.clone());
                    let key =
                        format!("inline {namespace} {} {} {credentials:?}", inline.provider, inline.provider_spec);
                    Some(ListedClass {
                        key,
                        namespace: namespace.clone(),
                        class: ClassInfo {
                            name: m.name_any(),
                            provider: inline.provider.clone(),
                            provider_spec: inline.provider_spec.clone(),
                            node_template: inline.node_template.clone(),
                        },
                        secret: merge_secret_data(None, secret(inline.credentials_secret_ref.as_ref()).as_deref()),
                    })
                }
                _ => None,
            };
            if let Some(l) = listed
                && seen.insert(l.key.clone())
            {
                out.push(l);
            }
        }
        out
    }

    /// Claims of the cached MCMMachines.
    fn cached_claims(&self) -> Claims {
        Claims::new(self.ctx.machines.state().iter().map(|m| Claimant::of(&to_hub(m, None))), Vec::new())
    }

    /// Claims of MCMMachines and MCM Machines as the API server has them now; `None` if it did not answer. An
    /// absent kind (its CRD not installed) claims nothing.
    async fn fresh_claims(&self) -> Option<Claims> {
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
        let mut claimants: Vec<Claimant> = infra.iter().map(|m| Claimant::of(&to_hub(m, None))).collect();
        claimants.extend(hub.iter().map(Claimant::of));
        claimants.extend(self.ctx.machines.state().iter().map(|m| Claimant::of(&to_hub(m, None))));
        Some(Claims::new(claimants, Vec::new()))
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
            let Some(fresh) = self.fresh_claims().await else { return };
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
