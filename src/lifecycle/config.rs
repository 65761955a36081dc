//! The machine controller's settings (MCM's flags and defaults, `docs/machine-lifecycle.md`) and their per-machine
//! overrides (`MachineConfiguration` in the Machine spec, the effective-creation-timeout annotation).

use std::time::Duration;

use super::retry::RetryPolicy;
use crate::api::mcm::Machine;
use crate::api::mcm::names::EFFECTIVE_CREATION_TIMEOUT_ANNOTATION;

/// MCM's default `--node-conditions`.
pub const DEFAULT_NODE_CONDITIONS: &str = "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable";

/// Settings of the machine controller. Defaults are MCM's.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineConfig {
    /// `--machine-creation-timeout` (20m): Pending or CrashLoopBackOff this long after creation -> Failed.
    pub creation_timeout: Duration,
    /// `--machine-health-timeout` (10m): Unknown this long -> Failed.
    pub health_timeout: Duration,
    /// `--machine-drain-timeout` (2h): after this long since the deletion request the drain is forced.
    pub drain_timeout: Duration,
    /// `--machine-max-evict-retries` (360): eviction retries a PodDisruptionBudget may refuse.
    pub max_evict_retries: u32,
    /// `--node-conditions`: conditions that make a node unhealthy when not `False`.
    pub node_conditions: Vec<String>,
    /// `--resource-exhausted-retry` (10m): the longest wait after a `ResourceExhausted` create error.
    pub resource_exhausted_retry: Duration,
    /// `--max-replacements` (1): Unknown machines of one MachineDeployment (label `name`) that may be replaced at
    /// a time. MCM hard-codes 1 (issue #688 asks to make it configurable).
    pub max_replacements: u32,
    /// `--bootstrap-token-auth-extra-groups`: the bootstrap token's `auth-extra-groups`.
    pub bootstrap_token_auth_extra_groups: String,
    /// `--machine-pv-detach-timeout` (2m): how long the drain waits for a volume to detach.
    pub pv_detach_timeout: Duration,
    /// `--machine-pv-reattach-timeout` (90s): how long the drain waits for a volume to attach elsewhere.
    pub pv_reattach_timeout: Duration,
    /// The pause between eviction retries (MCM: 20 s, not configurable).
    pub evict_retry_interval: Duration,
    /// How long a node may be NotReady (or read-only) before its drain is forced (MCM: 5 m, not configurable).
    pub unhealthy_node_force_after: Duration,
    /// `--machine-inplace-update-timeout` (20m): InPlaceUpdating this long -> InPlaceUpdateFailed.
    pub in_place_update_timeout: Duration,
    /// The drain timeout of a forced drain (MCM: 1 m).
    pub forced_drain_timeout: Duration,
    /// `--machine-preserve-timeout` (96h): how long a machine stays preserved (`docs/machine-lifecycle.md`
    /// "Preservation").
    pub preserve_timeout: Duration,
    /// Back-off of failed steps.
    pub retry: RetryPolicy,
    /// The longest a machine goes unreconciled (MCM's LongRetry, 10m): a backstop for missed events.
    pub resync: Duration,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            creation_timeout: Duration::from_secs(20 * 60),
            health_timeout: Duration::from_secs(10 * 60),
            drain_timeout: Duration::from_secs(2 * 3600),
            max_evict_retries: 360,
            node_conditions: parse_node_conditions(DEFAULT_NODE_CONDITIONS),
            resource_exhausted_retry: Duration::from_secs(600),
            max_replacements: 1,
            bootstrap_token_auth_extra_groups: String::new(),
            pv_detach_timeout: Duration::from_secs(120),
            pv_reattach_timeout: Duration::from_secs(90),
            evict_retry_interval: Duration::from_secs(20),
            unhealthy_node_force_after: Duration::from_secs(300),
            forced_drain_timeout: Duration::from_secs(60),
            in_place_update_timeout: Duration::from_secs(20 * 60),
            preserve_timeout: Duration::from_secs(96 * 3600),
            retry: RetryPolicy::default(),
            resync: Duration::from_secs(600),
        }
    }
}

impl MachineConfig {
    /// The retry policy with the `ResourceExhausted` cap taken from `resource_exhausted_retry` (0 means 10m, as
    /// in MCM).
    pub fn retry_policy(&self) -> RetryPolicy {
        let mut policy = self.retry;
        let cap = if self.resource_exhausted_retry.is_zero() {
            Duration::from_secs(600)
        } else {
            self.resource_exhausted_retry
        };
        policy.exhausted.max = cap;
        policy
    }
}

/// Splits a `--node-conditions` value (`A,B,C`) into names, dropping blanks.
pub fn parse_node_conditions(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

/// The settings that apply to one machine: the controller's, overridden by the machine's own.
#[derive(Clone, Debug, PartialEq)]
pub struct Effective {
    /// Creation timeout: annotation, then `spec.creationTimeout`, then the flag.
    pub creation_timeout: Duration,
    /// Health timeout: `spec.healthTimeout`, then the flag.
    pub health_timeout: Duration,
    /// Drain timeout: `spec.drainTimeout`, then the flag.
    pub drain_timeout: Duration,
    /// Eviction retries: `spec.maxEvictRetries`, then the flag.
    pub max_evict_retries: u32,
    /// Health conditions: `spec.nodeConditions`, then the flag.
    pub node_conditions: Vec<String>,
    /// `spec.disableHealthTimeout`.
    pub disable_health_timeout: bool,
    /// Preserve timeout: `spec.machinePreserveTimeout`, then the flag.
    pub preserve_timeout: Duration,
    /// In-place update timeout: `spec.inPlaceUpdateTimeout`, then the flag.
    pub in_place_update_timeout: Duration,
}

impl Effective {
    /// The settings for `machine` under `config`. An unparsable creation-timeout annotation is ignored (the
    /// next setting applies), as is a negative `maxEvictRetries`.
    pub fn of(machine: &Machine, config: &MachineConfig) -> Effective {
        let c = &machine.spec.configuration;
        let annotated = machine
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(EFFECTIVE_CREATION_TIMEOUT_ANNOTATION))
            .and_then(|v| v.parse::<crate::api::Duration>().ok())
            .map(|d| d.0);
        Effective {
            creation_timeout: annotated.or(c.creation_timeout.map(|d| d.0)).unwrap_or(config.creation_timeout),
            health_timeout: c.health_timeout.map(|d| d.0).unwrap_or(config.health_timeout),
            drain_timeout: c.drain_timeout.map(|d| d.0).unwrap_or(config.drain_timeout),
            max_evict_retries: c
                .max_evict_retries
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(config.max_evict_retries),
            node_conditions: c
                .node_conditions
                .as_deref()
                .map(parse_node_conditions)
                .unwrap_or_else(|| config.node_conditions.clone()),
            disable_health_timeout: c.disable_health_timeout.unwrap_or(false),
            preserve_timeout: c.machine_preserve_timeout.map(|d| d.0).unwrap_or(config.preserve_timeout),
            in_place_update_timeout: c.in_place_update_timeout.map(|d| d.0).unwrap_or(config.in_place_update_timeout),
        }
    }
}

/// How a machine's Node is drained: forced (the forced-drain timeout, one eviction attempt), or within `left` of
/// its drain timeout with as many eviction retries as fit in that time (at most the machine's).
pub fn drain_options(
    node: String,
    force: bool,
    left: Duration,
    effective: &Effective,
    config: &MachineConfig,
) -> crate::drain::DrainOptions {
    let (timeout, max_evict_retries) = if force {
        (config.forced_drain_timeout, 1)
    } else {
        let interval = config.evict_retry_interval.as_secs().max(1);
        let by_time = u32::try_from(left.as_secs() / interval).unwrap_or(u32::MAX);
        (left, effective.max_evict_retries.min(by_time))
    };
    crate::drain::DrainOptions {
        node,
        timeout,
        max_evict_retries,
        evict_retry_interval: config.evict_retry_interval,
        volume_detach_timeout: config.pv_detach_timeout,
        volume_reattach_timeout: config.pv_reattach_timeout,
        force,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::Duration as GoDuration;
    use crate::api::mcm::MachineConfiguration;

    fn machine(configuration: MachineConfiguration, annotation: Option<&str>) -> Machine {
        let mut m = Machine::new("m", Default::default());
        m.spec.configuration = configuration;
        if let Some(value) = annotation {
            m.metadata.annotations =
                Some(BTreeMap::from([(EFFECTIVE_CREATION_TIMEOUT_ANNOTATION.to_string(), value.to_string())]));
        }
        m
    }

    fn mins(m: u64) -> Duration {
        Duration::from_secs(60 * m)
    }

    #[test]
    fn overrides_win_over_flags() {
        let config = MachineConfig::default();
        let spec = MachineConfiguration {
            creation_timeout: Some(GoDuration(mins(5))),
            health_timeout: Some(GoDuration(mins(3))),
            drain_timeout: Some(GoDuration(mins(7))),
            max_evict_retries: Some(9),
            node_conditions: Some("Ready, DiskPressure,".into()),
            disable_health_timeout: Some(true),
            machine_preserve_timeout: Some(GoDuration(mins(30))),
            ..Default::default()
        };
        let cases = [
            ("flags", machine(MachineConfiguration::default(), None), mins(20), mins(10), mins(120), 360, 4, false),
            ("spec", machine(spec.clone(), None), mins(5), mins(3), mins(7), 9, 2, true),
            ("annotation beats spec", machine(spec.clone(), Some("2m")), mins(2), mins(3), mins(7), 9, 2, true),
            ("bad annotation ignored", machine(spec, Some("soon")), mins(5), mins(3), mins(7), 9, 2, true),
            (
                "negative retries ignored",
                machine(MachineConfiguration { max_evict_retries: Some(-1), ..Default::default() }, None),
                mins(20),
                mins(10),
                mins(120),
                360,
                4,
                false,
            ),
        ];
        for (name, m, creation, health, drain, retries, conditions, disabled) in cases {
            let e = Effective::of(&m, &config);
            assert_eq!(
                (e.creation_timeout, e.health_timeout, e.drain_timeout, e.max_evict_retries),
                (creation, health, drain, retries),
                "{name}"
            );
            assert_eq!((e.node_conditions.len(), e.disable_health_timeout), (conditions, disabled), "{name}");
        }
    }

    #[test]
    fn preserve_timeout_is_the_machines_then_the_flags() {
        let config = MachineConfig::default();
        assert_eq!(
            Effective::of(&machine(MachineConfiguration::default(), None), &config).preserve_timeout,
            mins(96 * 60)
        );
        let own = MachineConfiguration { machine_preserve_timeout: Some(GoDuration(mins(30))), ..Default::default() };
        assert_eq!(Effective::of(&machine(own, None), &config).preserve_timeout, mins(30));
    }

    #[test]
    fn resource_exhausted_retry_caps_the_exhausted_backoff() {
        let mut config = MachineConfig { resource_exhausted_retry: mins(2), ..Default::default() };
        assert_eq!(config.retry_policy().exhausted.max, mins(2));
        config.resource_exhausted_retry = Duration::ZERO;
        assert_eq!(config.retry_policy().exhausted.max, mins(10));
    }
}
