//! Carries out the create flow (`lifecycle::create::next`) for either object: prepare the request, look the VM up,
//! create or initialize it, record it, write the status — one action at a time, each answer fed back. The hub view
//! stays as observed: what the pass learned is in its progress, and the recorded object is the flavour's.

use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;

use super::{Cloud, NotPrepared, Stage, VmFlavour};
use crate::api::mcm::Machine;
use crate::controllers::context::key_of;
use crate::controllers::error::Error;
use crate::lifecycle::Effective;
use crate::lifecycle::create::refusal::{self, Fingerprint, Refusal};
use crate::lifecycle::create::{self, CreateAction, CreateObservation, CreateProgress};
use crate::lifecycle::requeue::Next;
use crate::lifecycle::status::Severity;
use crate::metrics::{Step, since};
use crate::providers::DriverError;

/// How a pass of the create flow ended.
pub(crate) enum Created {
    /// The machine has its VM (or failed for good): nothing was done.
    Provisioned,
    /// The flow ran; look again then.
    Next(Next),
}

/// The actions one pass takes at most (the flow has eight).
const MAX_ACTIONS: usize = 16;

/// One pass of the create flow over `obj` (whose hub view is `hub`); `backing_off` is the time an earlier
/// failure's back-off still runs.
pub(crate) async fn run<F: VmFlavour>(
    f: &F,
    obj: &F::Object,
    hub: &Machine,
    now: Timestamp,
    backing_off: Option<Duration>,
) -> Result<Created, Error> {
    let effective = Effective::of(hub, f.config());
    let mut obj = obj.clone();
    let mut progress = CreateProgress::default();
    let mut cloud: Option<Cloud> = None;
    let mut fingerprint: Option<Fingerprint> = None;
    for _ in 0..MAX_ACTIONS {
        let action = create::next(&CreateObservation {
            machine: hub,
            kind: F::KIND,
            now,
            effective: &effective,
            target: f.target(),
            backing_off,
            deleting: f.deleting_now(&obj),
            node_exists: &|name| f.node_exists(name),
            progress: &progress,
        });
        tracing::debug!(object = %key_of(&obj), ?action, "create flow");
        match action {
            CreateAction::Provisioned => return Ok(Created::Provisioned),
            CreateAction::Finish(finish) => {
                if let Some(event) = finish.event {
                    if event.severity == Severity::Warning {
                        tracing::info!(object = %key_of(&obj), "{}: {}", event.reason, event.note);
                    }
                    f.publish(&obj, event).await;
                }
                let stage = if finish.provisioned { Stage::Provisioned } else { Stage::Creating };
                f.write_status(&obj, hub, finish.patch, stage).await?;
                return Ok(Created::Next(finish.next));
            }
            CreateAction::Prepare => match f.prepare(&obj, hub).await {
                Ok(prepared) => {
                    let class = refusal::fingerprint(
                        &obj.namespace().unwrap_or_default(),
                        &prepared.request.class,
                        &prepared.request.secret,
                    );
                    progress.class_refused = f.refusals().holding(class, now);
                    fingerprint = Some(class);
                    cloud = Some(prepared);
                    progress.prepared = Some(Ok(()));
                }
                Err(NotPrepared::Driver(e)) => progress.prepared = Some(Err(e)),
                Err(NotPrepared::Wait(event, next)) => {
                    f.publish(&obj, event).await;
                    return Ok(Created::Next(next));
                }
                Err(NotPrepared::Api(e)) => return Err(e),
            },
            CreateAction::Record { vm, event } => {
                if let Some(event) = event {
                    tracing::info!(object = %key_of(&obj), provider_id = %vm.provider_id, "created a VM");
                    f.publish(&obj, event).await;
                }
                if vm.trusted {
                    tracing::info!(object = %key_of(&obj), provider_id = %vm.provider_id, "VM not found by the driver; trusting the one the object names");
                }
                if let Some(updated) = f.record(&obj, hub, &vm).await? {
                    obj = updated;
                }
                if let Some(c) = &mut cloud {
                    c.request.machine.provider_id = Some(vm.provider_id);
                }
                progress.recorded = true;
            }
            driver_action => {
                // Every driver action follows `Prepare`; without a request the flow prepares again.
                let Some(c) = &cloud else {
                    progress.prepared = None;
                    continue;
                };
                match driver_action {
                    CreateAction::GetStatus => {
                        let result = c.driver.get_machine_status(&c.request).await;
                        if let (Err(e), Some(class)) = (&result, fingerprint) {
                            progress.class_refused = class_refused(f, &obj, hub, class, e, now).await;
                        }
                        progress.status = Some(result);
                    }
                    CreateAction::InitializeFound => {
                        let started = std::time::Instant::now();
                        let result = c.driver.initialize_machine(&c.request).await;
                        if result.is_ok() {
                            record(f, Step::Initialize, hub, c, started.elapsed());
                        }
                        progress.initialized_found = Some(result);
                    }
                    CreateAction::Create => {
                        let result = c.driver.create_machine(&c.request).await;
                        if result.is_ok() {
                            let created = hub.metadata.creation_timestamp.as_ref().map(|t| since(t.0));
                            record(f, Step::Create, hub, c, created.unwrap_or_default());
                        }
                        match (&result, fingerprint) {
                            (Err(e), Some(class)) => {
                                progress.class_refused = class_refused(f, &obj, hub, class, e, now).await;
                            }
                            (Ok(_), Some(class)) => f.refusals().accepted(class),
                            (_, None) => {}
                        }
                        progress.created = Some(result);
                    }
                    CreateAction::DeleteStaleVm { provider_id } => {
                        let mut stale = c.request.clone();
                        stale.machine.provider_id = Some(provider_id);
                        if let Err(e) = c.driver.delete_machine(&stale).await {
                            tracing::warn!(object = %key_of(&obj), error = %e, "deleting the VM of a stale node failed; will be retried");
                        }
                        progress.stale_deleted = true;
                    }
                    CreateAction::Initialize { provider_id } => {
                        let mut request = c.request.clone();
                        request.machine.provider_id = Some(provider_id);
                        let started = std::time::Instant::now();
                        let result = c.driver.initialize_machine(&request).await.map(|_| ());
                        if result.is_ok() {
                            record(f, Step::Initialize, hub, c, started.elapsed());
                        }
                        progress.initialized = Some(result);
                    }
                    _ => {}
                }
            }
        }
    }
    tracing::warn!(object = %key_of(&obj), "the create flow did not end within {MAX_ACTIONS} actions");
    Ok(Created::Next(Next::Wake(None)))
}

/// Marks the class when the cloud's `error` to a lookup or create refuses it, telling the class the first time;
/// the mark while it holds, for the flow (`None`: the error is this machine's own).
async fn class_refused<F: VmFlavour>(
    f: &F,
    obj: &F::Object,
    hub: &Machine,
    class: Fingerprint,
    error: &DriverError,
    now: Timestamp,
) -> Option<(Refusal, Duration)> {
    if !refusal::refuses_class(error) {
        return None;
    }
    let backoff = f.config().retry_policy().other;
    let (mark, wait, first) = f.refusals().refused(class, error, now, &backoff);
    if first {
        f.publish_class(obj, refusal::class_event(&mark, F::KIND, &hub.name_any())).await;
    }
    Some((mark, wait))
}

/// Sets MCM's `step` duration of the machine (the MCM flavour only), labelled with the class's instance type.
fn record<F: VmFlavour>(f: &F, step: Step, hub: &Machine, c: &Cloud, took: Duration) {
    if let Some(metrics) = f.machine_metrics() {
        let instance_type = c.request.class.node_template.as_ref().map(|t| t.instance_type.as_str());
        metrics.record(step, hub, instance_type, took);
    }
}
