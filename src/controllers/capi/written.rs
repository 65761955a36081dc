//! Read-your-writes for the CAPI flavour's reconciles (see `sets::settle`): what a pass wrote, and the wait until
//! the stores show it.

use kube::runtime::reflector::Store;

use crate::api::capi::{Machine, MachineDeployment, MachineSet};
use crate::controllers::sets::settle::{Entry, Expect, changed, entry, wait};

/// The writes of one pass, per kind.
#[derive(Debug, Default)]
pub(super) struct Written {
    machines: Vec<Entry>,
    sets: Vec<Entry>,
    deployments: Vec<Entry>,
}

impl Written {
    pub(super) fn machine_created(&mut self, m: &Machine) {
        self.machines.push(entry(m, Expect::Exists));
    }
    pub(super) fn machine_deleted(&mut self, m: &Machine) {
        self.machines.push(entry(m, Expect::Deleting));
    }
    pub(super) fn machine_changed(&mut self, before: &Machine, after: &Machine) {
        self.machines.extend(changed(before, after));
    }
    pub(super) fn set_created(&mut self, s: &MachineSet) {
        self.sets.push(entry(s, Expect::Exists));
    }
    pub(super) fn set_deleted(&mut self, s: &MachineSet) {
        self.sets.push(entry(s, Expect::Deleting));
    }
    pub(super) fn set_changed(&mut self, before: &MachineSet, after: &MachineSet) {
        self.sets.extend(changed(before, after));
    }
    pub(super) fn deployment_changed(&mut self, before: &MachineDeployment, after: &MachineDeployment) {
        self.deployments.extend(changed(before, after));
    }

    /// Waits (bounded) until the stores show every write.
    pub(super) async fn settle(
        self,
        machines: &Store<Machine>,
        sets: &Store<MachineSet>,
        deployments: &Store<MachineDeployment>,
        what: &str,
    ) {
        if self.machines.is_empty() && self.sets.is_empty() && self.deployments.is_empty() {
            return;
        }
        wait(what, || {
            self.machines.iter().all(|e| e.seen(machines))
                && self.sets.iter().all(|e| e.seen(sets))
                && self.deployments.iter().all(|e| e.seen(deployments))
        })
        .await;
    }
}
