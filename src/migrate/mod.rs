//! `mcm migrate`: hands MCM MachineDeployments (`machine.sapcloud.io`) over to Cluster API objects
//! (`cluster.x-k8s.io` + our `infrastructure.cluster.x-k8s.io`) and back, without creating or deleting a VM or a
//! Node (`docs/migration.md`, issue #9).
//!
//! - [`plan`] (pure): MCM objects in, the CAPI objects and a [`Summary`] (what maps 1:1, what maps with loss and
//!   where the value is kept, what blocks the hand-over) out. [`reverse`] (pure) is the way back for a rollback.
//! - [`apply`] and [`rollback`] (I/O at the edge): the hand-over as steps, each idempotent, whose progress is
//!   recorded on the objects ([`STEP_ANNOTATION`]), so a re-run after a crash resumes where the last one stopped.
//!
//! MCM objects are paused with [`crate::api::mcm::names::PAUSED_ANNOTATION`] (our MCM-flavour controllers keep
//! their hands off), CAPI objects with CAPI's `cluster.x-k8s.io/paused`; finalizers are removed by the tool
//! before an object is deleted, so no controller runs a deletion flow for a VM that lives on.
//!
//! Imports `api` (with MCM's names), `convert`, `lifecycle` (pure helpers) and `providers::contract` (providerID
//! identity); the I/O half uses a kube client only.

mod apply;
mod client;
mod objects;
pub mod plan;
pub mod reverse;
mod rollback;

pub use apply::{ApplyOptions, Report, apply};
pub use client::inventory as client_inventory;
pub use plan::{Blocker, DeploymentPlan, Inventory, Lossy, MachinePair, Plan, Summary, Target, plan};
pub use reverse::{CapiInventory, RestoredDeployment, reverse};
pub use rollback::{rollback, rollback_candidates};

use std::time::Duration;

/// Annotation recording the last finished step of a hand-over (on the MCM MachineDeployment while it exists,
/// and on the CAPI MachineDeployment once created). Values: [`ApplyStep`] and [`RollbackStep`] names.
pub const STEP_ANNOTATION: &str = "migrate.machine.sapcloud.io/step";
/// Annotation on every CAPI object `mcm migrate` created: the MCM kind and name it came from.
pub const FROM_ANNOTATION: &str = "migrate.machine.sapcloud.io/from";
/// Annotation on a paused MCM MachineDeployment: its `spec.paused` before the migration paused it.
pub const WAS_PAUSED_ANNOTATION: &str = "migrate.machine.sapcloud.io/was-paused";

/// Exit codes of `mcm migrate` (documented in `docs/migration.md`).
pub mod exit {
    /// Done (plan: nothing blocks).
    pub const OK: u8 = 0;
    /// An error: the API server, a file, a conflict; re-run to resume.
    pub const ERROR: u8 = 1;
    /// Bad arguments (clap's code).
    pub const USAGE: u8 = 2;
    /// Blocked: the plan found blockers; apply or rollback changed nothing.
    pub const BLOCKED: u8 = 3;
    /// Machines did not reach Running within `--timeout`; re-run to resume.
    pub const TIMEOUT: u8 = 4;
}

/// The steps of `apply`, in order. Each is recorded once its work is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApplyStep {
    /// The MCM MachineDeployment, its MachineSets and Machines carry the pause annotation.
    Paused,
    /// Every CAPI object exists (Cluster, MCMCluster, template, Machines, MCMMachines, MachineSet, deployment).
    Created,
    /// Every CAPI Machine is Running on its old Node; the CAPI set and deployment (created paused) are unpaused.
    Adopted,
    /// The MCM objects are gone (finalizers released first); the CAPI objects carry the hand-over.
    Done,
}

impl ApplyStep {
    /// Every step, in order.
    pub const ALL: [ApplyStep; 4] = [ApplyStep::Paused, ApplyStep::Created, ApplyStep::Adopted, ApplyStep::Done];

    /// The name recorded in [`STEP_ANNOTATION`].
    pub fn name(self) -> &'static str {
        match self {
            ApplyStep::Paused => "paused",
            ApplyStep::Created => "created",
            ApplyStep::Adopted => "adopted",
            ApplyStep::Done => "done",
        }
    }

    /// What the step does, for progress lines.
    pub fn describe(self) -> &'static str {
        match self {
            ApplyStep::Paused => "pause the MCM objects",
            ApplyStep::Created => "create the CAPI objects (adopting the VMs)",
            ApplyStep::Adopted => {
                "wait until every CAPI Machine is Running on its Node, then unpause the set and deployment"
            }
            ApplyStep::Done => "release the MCM finalizers and remove the MCM objects",
        }
    }

    /// The step a recorded name stands for.
    pub fn parse(name: &str) -> Option<ApplyStep> {
        ApplyStep::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// The steps of `rollback`, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RollbackStep {
    /// The CAPI objects carry `cluster.x-k8s.io/paused`.
    Paused,
    /// The MCM objects exist again (paused).
    Restored,
    /// The MCM objects are unpaused and every MCM Machine is Running with its old providerID.
    Adopted,
    /// The CAPI objects are gone (finalizers released first).
    Done,
}

impl RollbackStep {
    /// Every step, in order.
    pub const ALL: [RollbackStep; 4] =
        [RollbackStep::Paused, RollbackStep::Restored, RollbackStep::Adopted, RollbackStep::Done];

    /// The name recorded in [`STEP_ANNOTATION`].
    pub fn name(self) -> &'static str {
        match self {
            RollbackStep::Paused => "rollback-paused",
            RollbackStep::Restored => "rollback-restored",
            RollbackStep::Adopted => "rollback-adopted",
            RollbackStep::Done => "rollback-done",
        }
    }

    /// What the step does, for progress lines.
    pub fn describe(self) -> &'static str {
        match self {
            RollbackStep::Paused => "pause the CAPI objects",
            RollbackStep::Restored => "re-create the MCM objects (paused)",
            RollbackStep::Adopted => "unpause the MCM objects and wait until every MCM Machine is Running",
            RollbackStep::Done => "release the CAPI finalizers and remove the CAPI objects",
        }
    }

    /// The step a recorded name stands for.
    pub fn parse(name: &str) -> Option<RollbackStep> {
        RollbackStep::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// What `apply` and `rollback` report as they go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A step of a deployment starts.
    StepStarted {
        /// The MachineDeployment.
        deployment: String,
        /// The step's name.
        step: &'static str,
        /// What it does.
        what: &'static str,
    },
    /// A step of a deployment is done and recorded.
    StepDone {
        /// The MachineDeployment.
        deployment: String,
        /// The step's name.
        step: &'static str,
    },
    /// Something happened to one machine (or another object).
    Object {
        /// The MachineDeployment.
        deployment: String,
        /// What happened, e.g. `created Machine m-1 (providerID …)`.
        note: String,
    },
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Progress::StepStarted { deployment, step, what } => write!(f, "{deployment}: step {step}: {what}"),
            Progress::StepDone { deployment, step } => write!(f, "{deployment}: step {step}: done"),
            Progress::Object { deployment, note } => write!(f, "{deployment}:   {note}"),
        }
    }
}

/// Errors of `apply` and `rollback`, each a sentence for the user.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// Something blocks the hand-over; nothing was changed.
    #[error("migration blocked, nothing was changed:\n{}", .0.iter().map(|b| format!("  - {b}")).collect::<Vec<_>>().join("\n"))]
    Blocked(Vec<Blocker>),
    /// A call to the API server failed.
    #[error("could not {action} {object}: {source}; re-run the command to resume")]
    Kube {
        /// What was being done.
        action: &'static str,
        /// Which object.
        object: String,
        /// The cause.
        source: kube::Error,
    },
    /// Machines did not reach Running in time.
    #[error("{deployment}: {waiting} machine(s) not Running after {timeout:?} ({names}); re-run the command to resume")]
    Timeout {
        /// The MachineDeployment.
        deployment: String,
        /// How many machines are not there yet.
        waiting: usize,
        /// Their names (the first few).
        names: String,
        /// The wait.
        timeout: Duration,
    },
}

impl MigrateError {
    /// The exit code for this error ([`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            MigrateError::Blocked(_) => exit::BLOCKED,
            MigrateError::Kube { .. } => exit::ERROR,
            MigrateError::Timeout { .. } => exit::TIMEOUT,
        }
    }

    pub(crate) fn kube(action: &'static str, object: impl Into<String>, source: kube::Error) -> MigrateError {
        MigrateError::Kube { action, object: object.into(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names_round_trip_and_are_ordered() {
        for step in ApplyStep::ALL {
            assert_eq!(ApplyStep::parse(step.name()), Some(step));
        }
        for step in RollbackStep::ALL {
            assert_eq!(RollbackStep::parse(step.name()), Some(step));
            assert_eq!(ApplyStep::parse(step.name()), None, "apply and rollback names differ");
        }
        assert!(ApplyStep::Paused < ApplyStep::Done);
        assert_eq!(ApplyStep::parse("nonsense"), None);
    }

    #[test]
    fn exit_codes_follow_the_error() {
        let blocked = MigrateError::Blocked(vec![Blocker { object: "a".into(), reason: "b".into() }]);
        assert_eq!(blocked.exit_code(), exit::BLOCKED);
        assert!(blocked.to_string().contains("nothing was changed"), "{blocked}");
        let timeout = MigrateError::Timeout {
            deployment: "d".into(),
            waiting: 1,
            names: "m".into(),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(timeout.exit_code(), exit::TIMEOUT);
    }
}
