//! Carries out the deletion flow (`lifecycle::delete::next`) for either object: each step's action, its answer fed
//! back, its record folded into the next status write. A record is written before an action the flow marks
//! ([`DeleteAction::records_first`]: every call to the cloud and the drain) and when the pass stops, so the status
//! names the step a restart resumes at (or one before it, which is idempotent); it is not written before the
//! finalizer goes (the object goes with it).

use jiff::Timestamp;

use super::{Stage, VmFlavour};
use crate::api::mcm::Machine;
use crate::api::mcm::names::NODE_LABEL;
use crate::controllers::context::key_of;
use crate::controllers::error::Error;
use crate::lifecycle::Effective;
use crate::lifecycle::delete::{self, DeleteAction, DeleteAnswer, DeleteObservation};
use crate::lifecycle::requeue::Next;
use crate::lifecycle::status::StatusPatch;
use crate::metrics::{Step, since};
use crate::providers::DriverError;

/// The actions one pass takes at most (seven steps, most with an action and a record).
const MAX_ACTIONS: usize = 24;

/// The records not written yet, and the hub view as last written.
struct Pending {
    patch: StatusPatch,
    written: Machine,
}

impl Pending {
    /// Writes what is pending; the object as written replaces `obj`.
    async fn flush<F: VmFlavour>(
        &mut self,
        f: &F,
        obj: &mut F::Object,
        hub: &Machine,
        failure: Option<&DriverError>,
    ) -> Result<(), Error> {
        if self.patch == StatusPatch::default() {
            return Ok(());
        }
        let patch = std::mem::take(&mut self.patch);
        if let Some(updated) = f.write_status(obj, &self.written, patch, Stage::Deleting(failure)).await? {
            *obj = updated;
        }
        self.written = hub.clone();
        Ok(())
    }
}

/// One pass of the deletion flow over `obj` (whose hub view is `hub`); returns when to look again.
pub(crate) async fn run<F: VmFlavour>(f: &F, obj: &F::Object, hub: &Machine, now: Timestamp) -> Result<Next, Error> {
    let effective = Effective::of(hub, f.config());
    let mut obj = obj.clone();
    let mut hub = hub.clone();
    let mut pending = Pending { patch: StatusPatch::default(), written: hub.clone() };
    let mut answer: Option<DeleteAnswer> = None;
    let mut failure: Option<DriverError> = None;
    for _ in 0..MAX_ACTIONS {
        let node_of_machine = f.node_of_machine(&hub);
        let action = delete::next(&DeleteObservation {
            machine: &hub,
            now,
            effective: &effective,
            config: f.config(),
            target: f.target(),
            node_of_machine: node_of_machine.as_deref(),
            answer: answer.as_ref(),
        });
        answer = None;
        tracing::debug!(object = %key_of(&obj), ?action, "deletion flow");
        if let DeleteAction::Advance(advance) = action {
            if let Some(node) = advance.label {
                obj = f.label(&obj, &node).await?;
                hub.metadata.labels.get_or_insert_with(Default::default).insert(NODE_LABEL.into(), node);
            }
            if let Some(event) = advance.event {
                f.publish(&obj, event).await;
            }
            advance.patch.apply_to(hub.status.get_or_insert_with(Default::default));
            pending.patch = std::mem::take(&mut pending.patch).and(advance.patch);
            if let Some(next) = advance.stop {
                pending.flush(f, &mut obj, &hub, failure.as_ref()).await?;
                return Ok(next);
            }
            continue;
        }
        if action == DeleteAction::RemoveFinalizer {
            f.remove_finalizer(&obj).await?;
            tracing::info!(object = %key_of(&obj), "deleted");
            return Ok(Next::Done);
        }
        // Everything else reaches outside: the status names this step first where the flow says so.
        if action.records_first() {
            pending.flush(f, &mut obj, &hub, failure.as_ref()).await?;
        }
        answer = Some(match action {
            DeleteAction::FindVm => {
                let result = match f.cloud(&obj, &hub).await {
                    Ok(c) => c.driver.get_machine_status(&c.request).await.map(|r| r.node_name),
                    Err(e) => Err(e),
                };
                failure = result.as_ref().err().cloned();
                DeleteAnswer::VmStatus(result)
            }
            DeleteAction::Drain { options, force } => {
                let result = f.drain(&obj, &hub, &options, force, now).await;
                DeleteAnswer::Drained { forced: options.force, result }
            }
            DeleteAction::ListVolumeAttachments { node } => {
                DeleteAnswer::VolumeAttachments(f.volume_attachments(&node).await?)
            }
            DeleteAction::DeleteVolumeAttachments { names, next } => {
                f.delete_volume_attachments(&names).await?;
                return Ok(next);
            }
            DeleteAction::DeleteVm => {
                let result = match f.cloud(&obj, &hub).await {
                    Ok(c) => {
                        let result = c.driver.delete_machine(&c.request).await.map(|r| r.last_known_state);
                        if let (Ok(_), Some(metrics), Some(deleted)) =
                            (&result, f.machine_metrics(), hub.metadata.deletion_timestamp.as_ref())
                        {
                            let instance_type =
                                c.request.class.node_template.as_ref().map(|t| t.instance_type.as_str());
                            metrics.record(Step::Delete, &hub, instance_type, since(deleted.0));
                        }
                        result
                    }
                    Err(e) => Err(e),
                };
                failure = result.as_ref().err().cloned();
                DeleteAnswer::VmDeleted(result)
            }
            DeleteAction::DeleteNode { node } => DeleteAnswer::NodeDeleted(f.delete_node(&node).await),
            DeleteAction::Advance(_) | DeleteAction::RemoveFinalizer => continue,
        });
    }
    pending.flush(f, &mut obj, &hub, failure.as_ref()).await?;
    Ok(Next::Wake(None))
}
