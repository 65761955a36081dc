//! The tasks one start of a controller group spawns (controllers and watches), and how they end: a graceful stop
//! (stop signal, running reconciles finish within the grace, then the watches end), a kill (everything cancelled
//! at once), or a drop (cancelled). Shared by the machine side ([`super::Controllers`]) and the infrastructure
//! provider ([`super::InfraControllers`]).

use std::future::Future;
use std::time::Duration;

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
