//! The tasks one start of a controller group spawns (controllers and watches), and how they end: a graceful stop
//! (stop signal, running reconciles finish within the grace, then the watches end), a kill (everything cancelled
//! at once), or a drop (cancelled). Shared by the machine side ([`super::Controllers`]) and the infrastructure
//! provider ([`super::InfraControllers`]).

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt, TryFuture, stream};
use kube::Resource;
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use serde::de::DeserializeOwned;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Resolves once `stop` turns `true` (or its sender is gone); owns what it waits on.
pub(crate) fn on_stop(stop: &watch::Receiver<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut stop = stop.clone();
    async move {
        let _ = stop.wait_for(|s| *s).await;
    }
}

/// Spawned controllers and watches with their stop signal. Dropping this cancels them.
pub(crate) struct Tasks {
    pub stop: watch::Sender<bool>,
    pub controllers: Vec<JoinHandle<()>>,
    pub informers: Vec<JoinHandle<()>>,
    pub grace: Duration,
    /// Logged when reconciles outlive the grace.
    pub overran: &'static str,
}

impl Tasks {
    /// Stops taking new work, lets running reconciles finish (up to the grace), then ends the watches.
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.send(true);
        let mut controllers = std::mem::take(&mut self.controllers);
        let all = futures::future::join_all(controllers.iter_mut());
        if tokio::time::timeout(self.grace, all).await.is_err() {
            tracing::warn!("{}", self.overran);
        }
        for handle in &controllers {
            handle.abort();
        }
        self.abort_all();
    }

    /// Cancels everything at once, mid-reconcile (as a crash would), and waits until it has ended.
    pub(crate) async fn kill(mut self) {
        let handles: Vec<JoinHandle<()>> =
            std::mem::take(&mut self.controllers).into_iter().chain(std::mem::take(&mut self.informers)).collect();
        for handle in &handles {
            handle.abort();
        }
        for handle in handles {
            let _ = handle.await;
        }
    }

    fn abort_all(&mut self) {
        for handle in self.controllers.iter().chain(&self.informers) {
            handle.abort();
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// A controller over a store whose watch runs elsewhere (one shared [`super::informer::Informer`]), woken only by
/// `triggers`, taking no new work once `stop` resolves; the future drives it to its end.
pub(crate) fn controller<K, Fut, Ctx>(
    store: Store<K>,
    triggers: impl Stream<Item = ObjectRef<K>> + Send + 'static,
    config: ControllerConfig,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
    reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> Fut,
    error_policy: impl Fn(Arc<K>, &Fut::Error, Arc<Ctx>) -> Action,
    ctx: Arc<Ctx>,
) -> impl Future<Output = ()>
where
    K: Clone + Resource<DynamicType = ()> + DeserializeOwned + Debug + Send + Sync + 'static,
    Fut: TryFuture<Ok = Action> + Send + 'static,
    Fut::Error: std::error::Error + Send + 'static,
{
    Controller::for_stream(stream::empty::<Result<_, watcher::Error>>(), store)
        .reconcile_on(triggers)
        .with_config(config)
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
}
