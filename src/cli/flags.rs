//! The controllers' flags, with MCM's names and defaults, shared by `mcm dev` and (later) `mcm run`: the machine
//! controller's (`docs/machine-lifecycle.md`) and the machine-controller-manager's: the MachineSet and
//! MachineDeployment controllers and the overshoot freeze).

use crate::api::Duration;
use crate::controllers::{ControllerOptions, InfraOptions};
use crate::lifecycle::MachineConfig;
use crate::lifecycle::config::{DEFAULT_NODE_CONDITIONS, parse_node_conditions};
use crate::lifecycle::freeze::FreezeOptions;
use crate::lifecycle::safety::SafetyConfig;

/// Flags of the machine controllers.
#[derive(Clone, Debug, clap::Args)]
pub struct MachineControllerFlags {
    /// A machine still Pending or CrashLoopBackOff this long after its creation becomes Failed.
    #[arg(long, value_name = "DURATION", default_value = "20m")]
    pub machine_creation_timeout: Duration,
    /// A machine Unknown (unhealthy) this long becomes Failed.
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub machine_health_timeout: Duration,
    /// A drain running this long after the deletion request is forced.
    #[arg(long, value_name = "DURATION", default_value = "2h")]
    pub machine_drain_timeout: Duration,
    /// Eviction retries a PodDisruptionBudget may refuse before the pod is deleted.
    #[arg(long, value_name = "N", default_value_t = 360)]
    pub machine_max_evict_retries: u32,
    /// Node conditions that make a machine unhealthy unless False (comma-separated).
    #[arg(long, value_name = "LIST", default_value = DEFAULT_NODE_CONDITIONS)]
    pub node_conditions: String,
    /// The longest wait before creating again after a ResourceExhausted error (0 means 10m).
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub resource_exhausted_retry: Duration,
    /// Unknown machines of one MachineDeployment that may be replaced at a time (MCM hard-codes 1).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub max_replacements: u32,
    /// `auth-extra-groups` of the bootstrap tokens.
    #[arg(long, value_name = "GROUPS", default_value = "")]
    pub bootstrap_token_auth_extra_groups: String,
    /// How long a drain waits for a pod's volumes to detach.
    #[arg(long, value_name = "DURATION", default_value = "2m")]
    pub machine_pv_detach_timeout: Duration,
    /// How long a drain waits for a detached volume to attach elsewhere.
    #[arg(long, value_name = "DURATION", default_value = "90s")]
    pub machine_pv_reattach_timeout: Duration,
    /// How long a preserved machine stays preserved (`node.machine.sapcloud.io/preserve`).
    #[arg(long, value_name = "DURATION", default_value = "96h")]
    pub machine_preserve_timeout: Duration,
    /// How long an in-place update may run (InPlaceUpdating) before it is declared failed; per machine
    /// `spec.inPlaceUpdateTimeout` overrides it.
    #[arg(long = "machine-inplace-update-timeout", value_name = "DURATION", default_value = "20m")]
    pub machine_inplace_update_timeout: Duration,
    /// Reconciles at once per controller (the machine and termination controllers each get this many).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub concurrent_syncs: u16,
    /// How often cloud VMs that no Machine claims are looked for and deleted.
    #[arg(long, value_name = "DURATION", default_value = "15m")]
    pub machine_safety_orphan_vms_period: Duration,
    /// How often the control and target API servers are probed while they answer.
    #[arg(long, value_name = "DURATION", default_value = "1m")]
    pub machine_safety_apiserver_statuscheck_period: Duration,
    /// How long the API servers may fail to answer before machine reconciles freeze (deletions go on).
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub machine_safety_apiserver_statuscheck_timeout: Duration,
}

impl MachineControllerFlags {
    /// The controller options these flags describe.
    pub fn options(&self) -> ControllerOptions {
        let machine = MachineConfig {
            creation_timeout: self.machine_creation_timeout.0,
            health_timeout: self.machine_health_timeout.0,
            drain_timeout: self.machine_drain_timeout.0,
            max_evict_retries: self.machine_max_evict_retries,
            node_conditions: parse_node_conditions(&self.node_conditions),
            resource_exhausted_retry: self.resource_exhausted_retry.0,
            max_replacements: self.max_replacements,
            bootstrap_token_auth_extra_groups: self.bootstrap_token_auth_extra_groups.clone(),
            pv_detach_timeout: self.machine_pv_detach_timeout.0,
            pv_reattach_timeout: self.machine_pv_reattach_timeout.0,
            preserve_timeout: self.machine_preserve_timeout.0,
            in_place_update_timeout: self.machine_inplace_update_timeout.0,
            ..MachineConfig::default()
        };
        let safety = SafetyConfig {
            orphan_vms_period: self.machine_safety_orphan_vms_period.0,
            apiserver_statuscheck_period: self.machine_safety_apiserver_statuscheck_period.0,
            apiserver_statuscheck_timeout: self.machine_safety_apiserver_statuscheck_timeout.0,
            ..SafetyConfig::default()
        };
        ControllerOptions {
            machine,
            concurrent_syncs: self.concurrent_syncs.max(1),
            safety,
            ..ControllerOptions::default()
        }
    }
}

/// Flags of the MachineSet and MachineDeployment controllers and the overshoot freeze (MCM's
/// machine-controller-manager binary).
#[derive(Clone, Debug, clap::Args)]
pub struct MachineControllerManagerFlags {
    /// Machines a MachineSet may own above its expected maximum (replicas + maxSurge) before it is frozen.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(i32).range(0..))]
    pub safety_up: i32,
    /// How far below the freeze threshold the machine count must fall before a frozen MachineSet is unfrozen.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(i32).range(0..))]
    pub safety_down: i32,
    /// How often the overshoot check runs (it also runs whenever a Machine appears).
    #[arg(long, value_name = "DURATION", default_value = "1m")]
    pub machine_safety_overshooting_period: Duration,
    /// Protect every node of a rolling MachineDeployment from cluster-autoscaler scale-down.
    #[arg(
        long,
        value_name = "BOOL",
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub autoscaler_scaledown_annotation_during_rollout: bool,
}

impl MachineControllerManagerFlags {
    /// Sets what these flags describe on `options`.
    pub fn apply(&self, options: &mut ControllerOptions) {
        options.sets.freeze = FreezeOptions { safety_up: self.safety_up, safety_down: self.safety_down };
        // A zero period would spin; MCM's default is a minute.
        options.sets.overshooting_period =
            self.machine_safety_overshooting_period.0.max(std::time::Duration::from_millis(100));
        options.sets.deployment.autoscaler_scale_down_annotation_during_rollout =
            self.autoscaler_scaledown_annotation_during_rollout;
    }
}

/// Flags of the CAPI infrastructure controllers (MCMMachine, MCMCluster, MCMMachineTemplate), with the names
/// CAPI providers use.
#[derive(Clone, Debug, clap::Args)]
pub struct InfraControllerFlags {
    /// Reconcile only objects labelled cluster.x-k8s.io/watch-filter=<VALUE> (several instances side by side).
    #[arg(long, value_name = "VALUE")]
    pub watch_filter: Option<String>,
    /// MCMMachines reconciled at once.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub mcmmachine_concurrency: u16,
    /// MCMClusters reconciled at once.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub mcmcluster_concurrency: u16,
    /// MCMMachineTemplates reconciled at once.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub mcmmachinetemplate_concurrency: u16,
}

impl InfraControllerFlags {
    /// The infrastructure controllers' options: these flags, plus the namespace, machine settings (creation
    /// timeout, back-off) and orphan collection of the machine controllers' options.
    pub fn options(&self, machine: &ControllerOptions) -> InfraOptions {
        InfraOptions {
            namespace: machine.namespace.clone(),
            watch_filter: self.watch_filter.clone().filter(|f| !f.is_empty()),
            machine_concurrency: self.mcmmachine_concurrency,
            cluster_concurrency: self.mcmcluster_concurrency,
            template_concurrency: self.mcmmachinetemplate_concurrency,
            machine: machine.machine.clone(),
            safety: machine.safety.clone(),
            shutdown_grace: machine.shutdown_grace,
            metrics: machine.metrics.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: MachineControllerFlags,
        #[command(flatten)]
        manager: MachineControllerManagerFlags,
    }

    #[test]
    fn defaults_are_mcms() {
        let options = Cli::parse_from(["mcm"]).flags.options();
        assert_eq!(options.machine, MachineConfig::default());
        assert_eq!(options.safety, SafetyConfig::default());
        assert_eq!(options.concurrent_syncs, 50);
    }

    #[test]
    fn flags_set_the_config() {
        let cli = Cli::parse_from([
            "mcm",
            "--machine-creation-timeout=90s",
            "--machine-health-timeout",
            "1m",
            "--node-conditions=Ready,DiskPressure",
            "--max-replacements=3",
            "--machine-preserve-timeout=3h",
            "--machine-safety-orphan-vms-period=30m",
            "--machine-safety-apiserver-statuscheck-period=2m",
            "--machine-safety-apiserver-statuscheck-timeout=45s",
        ]);
        let options = cli.flags.options();
        assert_eq!(options.machine.creation_timeout, std::time::Duration::from_secs(90));
        assert_eq!(options.machine.health_timeout, std::time::Duration::from_secs(60));
        assert_eq!(options.machine.node_conditions, ["Ready", "DiskPressure"]);
        assert_eq!(options.machine.max_replacements, 3);
        assert_eq!(options.machine.preserve_timeout, std::time::Duration::from_secs(3 * 3600));
        assert_eq!(options.safety.orphan_vms_period, std::time::Duration::from_secs(1800));
        assert_eq!(options.safety.apiserver_statuscheck_period, std::time::Duration::from_secs(120));
        assert_eq!(options.safety.apiserver_statuscheck_timeout, std::time::Duration::from_secs(45));
        assert!(Cli::try_parse_from(["mcm", "--machine-drain-timeout=soon"]).is_err());
    }

    #[test]
    fn manager_flags_are_mcms() {
        let cli = Cli::parse_from(["mcm"]);
        let mut options = cli.flags.options();
        cli.manager.apply(&mut options);
        assert_eq!(options.sets, crate::controllers::SetOptions::default());

        let cli = Cli::parse_from([
            "mcm",
            "--safety-up=5",
            "--safety-down",
            "3",
            "--machine-safety-overshooting-period=10s",
            "--autoscaler-scaledown-annotation-during-rollout=false",
        ]);
        let mut options = cli.flags.options();
        cli.manager.apply(&mut options);
        assert_eq!(options.sets.freeze, FreezeOptions { safety_up: 5, safety_down: 3 });
        assert_eq!(options.sets.overshooting_period, std::time::Duration::from_secs(10));
        assert!(!options.sets.deployment.autoscaler_scale_down_annotation_during_rollout);
        let bare = Cli::parse_from(["mcm", "--autoscaler-scaledown-annotation-during-rollout"]);
        assert!(bare.manager.autoscaler_scaledown_annotation_during_rollout, "a bare flag means true, as in Go");
        assert!(Cli::try_parse_from(["mcm", "--safety-up=-1"]).is_err());
    }
}
