//! The Cluster API infrastructure provider (`docs/infrastructure-provider.md`): the MCMMachine, MCMCluster and
//! MCMMachineTemplate controllers, and orphan-VM collection for the VMs of MCMMachines.
//!
//! - [`machine`]: one VM per MCMMachine, made and removed with MCM's create and delete decisions run on the hub
//!   view of the MCMMachine ([`crate::convert::machine`]); CAPI's gates (owner, Cluster, pause, bootstrap data)
//!   and the `Ready` condition on top ([`crate::lifecycle::infra`]).
//! - [`cluster`]: publishes what an MCMCluster declares (endpoint, failure domains) as provisioned.
//! - [`template`]: publishes an MCMMachineTemplate's node capacity for scale-from-zero.
//! - [`orphans`]: deletes VMs no MCMMachine (nor MCM Machine) claims, with the MCM safety controller's rules.
//!
//! They run on their own watches ([`InfraControllers::start`]), so `mcm run` can start them with or without the
//! MCM-flavour controllers, and `mcm dev` runs both.

mod cluster;
mod machine;
mod orphans;
mod status;
mod template;
mod vm;

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::runtime::controller::Config as ControllerConfig;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::context::{RetryBook, key_of};
use super::driver_request::{ClassLookups, ClassProblem, mcm_machine_class};
use super::events::Recorder;
use super::informer::{Informer, Notice};
use super::tasks::{Tasks, controller, on_stop};
use super::triggers::{applied, refs, scoped};
use crate::api::capi;
use crate::api::infra::{MCMCluster, MCMClusterIdentity, MCMMachine, MCMMachineTemplate};
use crate::api::mcm::MachineClass;
use crate::api::mcm::names::MACHINE_CLASS_KIND;
use crate::lifecycle::MachineConfig;
use crate::lifecycle::safety::SafetyConfig;
use crate::providers::{ClassInfo, DriverRegistry, SecretData};

/// How the infrastructure controllers run.
#[derive(Clone, Debug, PartialEq)]
pub struct InfraOptions {
    /// Watch only this namespace (`None`: all).
    pub namespace: Option<String>,
    /// `--watch-filter`: reconcile only objects labelled `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    /// `--mcmmachine-concurrency`: MCMMachines reconciled at once.
    pub machine_concurrency: u16,
    /// `--mcmcluster-concurrency`: MCMClusters reconciled at once.
    pub cluster_concurrency: u16,
    /// `--mcmmachinetemplate-concurrency`: MCMMachineTemplates reconciled at once.
    pub template_concurrency: u16,
    /// MCM's machine settings: creation timeout, retry back-off, resync period.
    pub machine: MachineConfig,
    /// Orphan VM collection: its period and trigger cooldown.
    pub safety: SafetyConfig,
    /// How long [`InfraControllers::stop`] lets running reconciles finish.
    pub shutdown_grace: Duration,
    /// Where reconcile durations and errors are counted (`mcmmachine`, `mcmcluster`, `mcmmachinetemplate`).
    pub metrics: super::ReconcileMetrics,
}

impl Default for InfraOptions {
    fn default() -> Self {
        InfraOptions {
            namespace: None,
            watch_filter: None,
            machine_concurrency: 10,
            cluster_concurrency: 10,
            template_concurrency: 10,
            machine: MachineConfig::default(),
            safety: SafetyConfig::default(),
            shutdown_grace: Duration::from_secs(10),
            metrics: super::ReconcileMetrics::default(),
        }
    }
}

/// What the infrastructure reconciles share.
pub(crate) struct InfraContext {
    /// The management cluster.
    pub client: Client,
    /// Drivers by provider.
    pub drivers: DriverRegistry,
    /// MCM's machine settings.
    pub config: MachineConfig,
    /// `--watch-filter`.
    pub filter: Option<String>,
    /// MCMMachines.
    pub machines: Store<MCMMachine>,
    /// CAPI Machines (the owners).
    pub owners: Store<capi::Machine>,
    /// CAPI Clusters.
    pub clusters: Store<capi::Cluster>,
    /// MCM MachineClasses (referenced by `spec.class`).
    pub classes: Store<MachineClass>,
    /// Secrets: bootstrap data and credentials.
    pub secrets: Store<Secret>,
    /// MCMClusterIdentities (cluster-scoped): which namespaces may use a Secret outside their own.
    pub identities: Store<MCMClusterIdentity>,
    /// Namespaces (their labels, for an identity's `allowedNamespaces.selector`).
    pub namespaces: Store<Namespace>,
    /// Each store's readiness.
    pub ready: Vec<watch::Receiver<bool>>,
    /// Events.
    pub recorder: Recorder,
    /// Back-off per MCMMachine and flow.
    pub retries: RetryBook,
    /// The classes the cloud refused.
    pub refusals: crate::controllers::vm::refusals::ClassRefusals,
}

impl InfraContext {
    /// Waits until every store has its first list.
    pub(crate) async fn ready(&self) {
        super::informer::wait_all(self.ready.clone()).await;
    }

    /// Whether every store has its first list.
    pub(crate) fn synced(&self) -> bool {
        self.ready.iter().all(|r| *r.borrow())
    }

    /// The Secret `namespace/name`.
    pub(crate) fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.secrets.get(&ObjectRef::new(name).within(namespace))
    }

    /// The class of an MCMMachine with its credentials, from the stores; refused when it names a Secret outside
    /// its namespace that no identity grants it ([`crate::lifecycle::tenancy`]).
    pub(crate) fn class_of(&self, obj: &MCMMachine) -> Result<(ClassInfo, SecretData), ClassProblem> {
        let lookups = ClassLookups {
            classes: &self.classes,
            identities: &self.identities,
            namespaces: &self.namespaces,
            secrets: &|ns, name| self.secret(ns, name),
        };
        mcm_machine_class(obj, &lookups)
    }
}

/// The running infrastructure controllers. Dropping this cancels them; [`InfraControllers::stop`] lets them
/// finish first.
pub struct InfraControllers {
    tasks: Tasks,
    ready: Vec<watch::Receiver<bool>>,
}

impl InfraControllers {
    /// Starts the MCMMachine, MCMCluster and MCMMachineTemplate controllers and orphan-VM collection for
    /// MCMMachines, against the management cluster `client`.
    pub fn start(client: Client, drivers: DriverRegistry, options: InfraOptions) -> InfraControllers {
        let ns = options.namespace.as_deref();
        let config = watcher::Config::default();
        let mut machines: Informer<MCMMachine> = Informer::new(scoped(&client, ns), config.clone());
        let mut owners: Informer<capi::Machine> = Informer::new(scoped(&client, ns), config.clone());
        let mut clusters: Informer<capi::Cluster> = Informer::new(scoped(&client, ns), config.clone());
        // MCM's MachineClass CRD is not part of the provider's components (docs/clusterctl.md): without it, only
        // MCMMachines that reference a MachineClass wait (the class does not exist).
        let mut classes: Informer<MachineClass> = Informer::new(scoped(&client, ns), config.clone()).optional();
        let mut secrets: Informer<Secret> = Informer::new(scoped(&client, ns), config.clone());
        let mut infra_clusters: Informer<MCMCluster> = Informer::new(scoped(&client, ns), config.clone());
        let mut templates: Informer<MCMMachineTemplate> = Informer::new(scoped(&client, ns), config.clone());
        let mut identities: Informer<MCMClusterIdentity> = Informer::new(Api::all(client.clone()), config.clone());
        // Watching one namespace: only that Namespace's labels matter.
        let namespace_config = match ns {
            Some(ns) => config.fields(&format!("metadata.name={ns}")),
            None => config,
        };
        let mut namespaces: Informer<Namespace> = Informer::new(Api::all(client.clone()), namespace_config);

        let ctx = Arc::new(InfraContext {
            client: client.clone(),
            drivers,
            config: options.machine.clone(),
            filter: options.watch_filter.clone(),
            machines: machines.store(),
            owners: owners.store(),
            clusters: clusters.store(),
            classes: classes.store(),
            secrets: secrets.store(),
            identities: identities.store(),
            namespaces: namespaces.store(),
            ready: vec![
                machines.ready(),
                owners.ready(),
                clusters.ready(),
                classes.ready(),
                secrets.ready(),
                identities.ready(),
                namespaces.ready(),
            ],
            recorder: Recorder::new(client.clone(), "mcm-infrastructure-controller"),
            retries: RetryBook::default(),
            refusals: Default::default(),
        });
        let (stop, stopped) = watch::channel(false);
        let shutdown = || on_stop(&stopped);

        let machine_triggers = machine_triggers(
            &mut machines,
            &mut owners,
            &mut clusters,
            &mut classes,
            &mut secrets,
            ctx.machines.clone(),
            ctx.owners.clone(),
        );
        let machine_triggers = stream::select(
            machine_triggers.boxed(),
            tenancy_triggers(&mut identities, &mut namespaces, ctx.machines.clone()).boxed(),
        );
        let orphan_notices = machines.subscribe();
        let machine_controller = controller(
            ctx.machines.clone(),
            machine_triggers,
            ControllerConfig::default().concurrency(options.machine_concurrency.max(1)),
            shutdown(),
            crate::metrics::timed(&options.metrics, "mcmmachine", machine::reconcile),
            machine::error_policy,
            ctx.clone(),
        );

        let cluster_store = infra_clusters.store();
        let cluster_ctx = Arc::new(cluster::ClusterContext {
            client: client.clone(),
            filter: options.watch_filter.clone(),
            clusters: ctx.clusters.clone(),
            ready: vec![infra_clusters.ready(), clusters.ready()],
            resync: options.machine.resync,
        });
        let cluster_triggers = cluster_triggers(&mut infra_clusters, &mut clusters, cluster_store.clone());
        let cluster_controller = controller(
            cluster_store,
            cluster_triggers,
            ControllerConfig::default().concurrency(options.cluster_concurrency.max(1)),
            shutdown(),
            crate::metrics::timed(&options.metrics, "mcmcluster", cluster::reconcile),
            cluster::error_policy,
            cluster_ctx,
        );

        let template_store = templates.store();
        let template_ctx = Arc::new(template::TemplateContext {
            client: client.clone(),
            drivers: ctx.drivers.clone(),
            filter: options.watch_filter.clone(),
            classes: ctx.classes.clone(),
            ready: vec![templates.ready(), classes.ready()],
            resync: options.machine.resync,
        });
        let template_triggers = template_triggers(&mut templates, &mut classes, template_store.clone());
        let template_controller = controller(
            template_store,
            template_triggers,
            ControllerConfig::default().concurrency(options.template_concurrency.max(1)),
            shutdown(),
            crate::metrics::timed(&options.metrics, "mcmmachinetemplate", template::reconcile),
            template::error_policy,
            template_ctx,
        );

        let collector = Arc::new(orphans::Collector {
            ctx: ctx.clone(),
            config: options.safety.clone(),
            machines: scoped(&client, ns),
            hub_machines: scoped(&client, ns),
            clusters: scoped(&client, ns),
            stop: stop.subscribe(),
        });

        let ready = vec![
            machines.ready(),
            owners.ready(),
            clusters.ready(),
            classes.ready(),
            secrets.ready(),
            infra_clusters.ready(),
            templates.ready(),
            identities.ready(),
            namespaces.ready(),
        ];
        let informers = vec![
            tokio::spawn(machines.run()),
            tokio::spawn(owners.run()),
            tokio::spawn(clusters.run()),
            tokio::spawn(classes.run()),
            tokio::spawn(secrets.run()),
            tokio::spawn(infra_clusters.run()),
            tokio::spawn(templates.run()),
            tokio::spawn(identities.run()),
            tokio::spawn(namespaces.run()),
        ];
        let controllers = vec![
            tokio::spawn(machine_controller),
            tokio::spawn(cluster_controller),
            tokio::spawn(template_controller),
            tokio::spawn(collector.run(orphans::triggers(orphan_notices))),
        ];
        tracing::info!(namespace = ?options.namespace, watch_filter = ?options.watch_filter, "infrastructure controllers started");
        let overran = "infrastructure reconciles still running after the shutdown grace; cancelling them";
        let tasks = Tasks { stop, controllers, informers, grace: options.shutdown_grace, overran };
        InfraControllers { tasks, ready }
    }

    /// Resolves once every watch has its first list (the future owns what it waits on).
    pub fn caches_synced(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        super::informer::wait_all(self.ready.clone())
    }

    /// Stops taking new work, lets running reconciles finish (up to the shutdown grace), then ends the watches.
    pub async fn stop(self) {
        self.tasks.stop().await;
    }

    /// Cancels everything at once, mid-reconcile (as a crash would; tests use it).
    pub async fn kill(self) {
        self.tasks.kill().await;
    }
}

/// The MCMMachine named by a CAPI Machine's `spec.infrastructureRef`, if it is one.
fn infra_ref(m: &capi::Machine) -> Option<ObjectRef<MCMMachine>> {
    let r = &m.spec.infrastructure_ref;
    (r.kind == "MCMMachine" && r.api_group == crate::api::infra::GROUP)
        .then(|| ObjectRef::new(&r.name).within(&m.namespace().unwrap_or_default()))
}

/// The MCMMachine controller's triggers: MCMMachines; their owning Machines; their Clusters; the classes and
/// Secrets (bootstrap data, credentials) they use.
fn machine_triggers(
    machines: &mut Informer<MCMMachine>,
    owners: &mut Informer<capi::Machine>,
    clusters: &mut Informer<capi::Cluster>,
    classes: &mut Informer<MachineClass>,
    secrets: &mut Informer<Secret>,
    store: Store<MCMMachine>,
    owner_store: Store<capi::Machine>,
) -> impl Stream<Item = ObjectRef<MCMMachine>> + Send + 'static {
    let own = applied(machines);
    let by_owner = refs(owners.subscribe(), |n: Notice<capi::Machine>| infra_ref(n.object()));
    let in_cluster = store.clone();
    let by_cluster = refs(clusters.subscribe(), move |n: Notice<capi::Cluster>| {
        let c = n.object();
        let (ns, name) = (c.namespace().unwrap_or_default(), c.name_any());
        in_cluster
            .state()
            .iter()
            .filter(|m| {
                m.namespace().as_deref() == Some(ns.as_str()) && m.labels().get(capi::CLUSTER_NAME_LABEL) == Some(&name)
            })
            .map(|m| ObjectRef::from_obj(&**m))
            .collect::<Vec<_>>()
    });
    let by_class_store = store.clone();
    let by_class = refs(classes.subscribe(), move |n: Notice<MachineClass>| {
        let c = n.object();
        let (ns, name) = (c.namespace().unwrap_or_default(), c.name_any());
        by_class_store
            .state()
            .iter()
            .filter(|m| {
                m.namespace().as_deref() == Some(ns.as_str())
                    && m.spec.class.as_ref().is_some_and(|r| r.kind == MACHINE_CLASS_KIND && r.name == name)
            })
            .map(|m| ObjectRef::from_obj(&**m))
            .collect::<Vec<_>>()
    });
    let by_secret = refs(secrets.subscribe(), move |n: Notice<Secret>| {
        let s = n.object();
        let (ns, name) = (s.namespace().unwrap_or_default(), s.name_any());
        let bootstrap = owner_store
            .state()
            .into_iter()
            .filter(|m| {
                m.namespace().as_deref() == Some(ns.as_str())
                    && m.spec.bootstrap.data_secret_name.as_deref() == Some(name.as_str())
            })
            .filter_map(|m| infra_ref(&m));
        let credentials = store
            .state()
            .into_iter()
            .filter(|m| {
                m.namespace().as_deref() == Some(ns.as_str())
                    && m.spec
                        .inline_class
                        .as_ref()
                        .and_then(|c| c.credentials_secret_ref.as_ref())
                        .is_some_and(|r| r.name.as_deref() == Some(name.as_str()))
            })
            .map(|m| ObjectRef::from_obj(&*m));
        bootstrap.chain(credentials).collect::<Vec<_>>()
    });
    stream::select_all([own.boxed(), by_owner.boxed(), by_cluster.boxed(), by_class.boxed(), by_secret.boxed()])
}

/// More MCMMachine triggers: the identity an MCMMachine names (created, changed, deleted), and its Namespace
/// (labels an identity's selector matches), for the MCMMachines that name an identity.
fn tenancy_triggers(
    identities: &mut Informer<MCMClusterIdentity>,
    namespaces: &mut Informer<Namespace>,
    store: Store<MCMMachine>,
) -> impl Stream<Item = ObjectRef<MCMMachine>> + Send + 'static {
    let by_identity_store = store.clone();
    let by_identity = refs(identities.subscribe(), move |n: Notice<MCMClusterIdentity>| {
        let name = n.object().name_any();
        by_identity_store
            .state()
            .iter()
            .filter(|m| m.spec.identity_ref.as_ref().is_some_and(|r| r.name == name))
            .map(|m| ObjectRef::from_obj(&**m))
            .collect::<Vec<_>>()
    });
    let by_namespace = refs(namespaces.subscribe(), move |n: Notice<Namespace>| {
        let name = n.object().name_any();
        store
            .state()
            .iter()
            .filter(|m| m.namespace().as_deref() == Some(name.as_str()) && m.spec.identity_ref.is_some())
            .map(|m| ObjectRef::from_obj(&**m))
            .collect::<Vec<_>>()
    });
    stream::select(by_identity, by_namespace)
}

/// The MCMCluster controller's triggers: MCMClusters, and the Clusters they belong to (pause, deletion).
fn cluster_triggers(
    infra_clusters: &mut Informer<MCMCluster>,
    clusters: &mut Informer<capi::Cluster>,
    store: Store<MCMCluster>,
) -> impl Stream<Item = ObjectRef<MCMCluster>> + Send + 'static {
    let own = applied(infra_clusters);
    let by_cluster = refs(clusters.subscribe(), move |n: Notice<capi::Cluster>| {
        let c = n.object();
        let ns = c.namespace().unwrap_or_default();
        let named = c.spec.infrastructure_ref.as_ref().filter(|r| r.kind == "MCMCluster").map(|r| r.name.clone());
        let name = c.name_any();
        store
            .state()
            .iter()
            .filter(|m| m.namespace().as_deref() == Some(ns.as_str()))
            .filter(|m| {
                named.as_deref() == Some(m.name_any().as_str())
                    || m.labels().get(capi::CLUSTER_NAME_LABEL) == Some(&name)
            })
            .map(|m| ObjectRef::from_obj(&**m))
            .collect::<Vec<_>>()
    });
    stream::select_all([own.boxed(), by_cluster.boxed()])
}

/// The MCMMachineTemplate controller's triggers: templates, and the MachineClasses they reference.
fn template_triggers(
    templates: &mut Informer<MCMMachineTemplate>,
    classes: &mut Informer<MachineClass>,
    store: Store<MCMMachineTemplate>,
) -> impl Stream<Item = ObjectRef<MCMMachineTemplate>> + Send + 'static {
    let own = applied(templates);
    let by_class = refs(classes.subscribe(), move |n: Notice<MachineClass>| {
        let c = n.object();
        let (ns, name) = (c.namespace().unwrap_or_default(), c.name_any());
        store
            .state()
            .iter()
            .filter(|t| {
                t.namespace().as_deref() == Some(ns.as_str())
                    && t.spec.template.spec.class.as_ref().is_some_and(|r| r.name == name)
            })
            .map(|t| ObjectRef::from_obj(&**t))
            .collect::<Vec<_>>()
    });
    stream::select_all([own.boxed(), by_class.boxed()])
}

/// Writes a merge patch to an object's status subresource.
pub(crate) async fn patch_status<K>(api: &Api<K>, object: &K, status: serde_json::Value) -> Result<(), super::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params =
        kube::api::PatchParams { field_manager: Some(super::writes::MANAGER.to_string()), ..Default::default() };
    api.patch_status(&object.name_any(), &params, &kube::api::Patch::Merge(serde_json::json!({ "status": status })))
        .await
        .map(|_| ())
        .map_err(|e| super::Error::kube("patch status of", format!("{} {}", K::kind(&()), key_of(object)), e))
}
