//! The flags of MCM's two binaries (`machine-controller-manager` and `machine-controller`) that `mcm run` has no
//! flag of its own for, so that MCM's command lines start unchanged (docs/configuration.md, "MCM's command lines").
//!
//! `--port`, `--address` and `--v` take effect; the others are accepted, and each one given is named in a warning
//! at start with the reason it changes nothing here. A value MCM itself would refuse (a duration without a unit, a
//! lock type other than `leases`) is refused too.

use std::net::IpAddr;

use crate::api::Duration;

/// The port MCM's `machine-controller-manager` serves `/metrics` and `/healthz` on, ours' default.
pub const DEFAULT_PORT: u16 = 10258;

/// The only lock type client-go's leader election still has, and the one `mcm run` uses.
const LEASES: &str = "leases";

/// MCM's flags without an `mcm run` flag of the same name.
#[derive(Debug, Default, clap::Args)]
pub struct McmFlags {
    /// MCM's port for `/metrics` and the probes (its `machine-controller-manager` uses 10258, its
    /// `machine-controller` 10259): with `--address`, where both are served unless `--metrics-bind-address` or
    /// `--health-probe-bind-address` say otherwise.
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// MCM's address for `/metrics` and the probes (default `0.0.0.0`); see `--port`.
    #[arg(long, value_name = "IP")]
    pub address: Option<IpAddr>,
    /// klog's verbosity, for MCM's command lines: 0-3 log at `info`, 4-5 at `debug`, 6 and more at `trace`.
    /// `--log-level` wins when both are given.
    #[arg(long = "v", short = 'v', value_name = "LEVEL")]
    pub verbosity: Option<u8>,
    /// Accepted for MCM's command lines; no effect: every class names its provider and each has a driver.
    #[arg(long, value_name = "NAME")]
    pub cloud_provider: Option<String>,
    /// Accepted for MCM's command lines; no effect: the controllers requeue what needs a later look themselves and
    /// never resync whole caches.
    #[arg(long, value_name = "DURATION")]
    pub min_resync_period: Option<Duration>,
    /// Accepted for MCM's command lines; no effect: there is no pprof endpoint.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub profiling: Option<bool>,
    /// Accepted for MCM's command lines; no effect: there is no pprof endpoint.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub contention_profiling: Option<bool>,
    /// Accepted for MCM's command lines; no effect: requests to the API server are JSON.
    #[arg(long, value_name = "TYPE")]
    pub kube_api_content_type: Option<String>,
    /// Accepted for MCM's command lines; no effect: the controllers start together once the caches are synced.
    #[arg(long, value_name = "DURATION")]
    pub controller_start_interval: Option<Duration>,
    /// The leader election lock: `leases`, the only type client-go still has (and ours).
    #[arg(long, value_name = "TYPE")]
    pub leader_elect_resource_lock: Option<String>,
    /// Accepted for MCM's command lines; no effect: `--log-level` takes per-module filters
    /// (`info,mcm::controllers=debug`).
    #[arg(long, value_name = "PATTERN")]
    pub vmodule: Option<String>,
    /// Accepted for MCM's command lines; no effect: log lines are written as they come.
    #[arg(long, value_name = "DURATION")]
    pub log_flush_frequency: Option<Duration>,
}

/// An MCM flag value MCM itself refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--leader-elect-resource-lock: {0:?} is not supported; only \"leases\" is (as in client-go)")]
pub struct LockTypeError(pub String);

impl McmFlags {
    /// Refuses what MCM would refuse at start.
    pub fn validate(&self) -> Result<(), LockTypeError> {
        match self.leader_elect_resource_lock.as_deref() {
            None | Some(LEASES) => Ok(()),
            Some(other) => Err(LockTypeError(other.to_string())),
        }
    }

    /// Where `/metrics` and the probes go when only MCM's flags say so: `--address` and `--port`.
    pub fn bind_address(&self) -> String {
        let ip = self.address.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        std::net::SocketAddr::new(ip, self.port.unwrap_or(DEFAULT_PORT)).to_string()
    }

    /// The log filter `--v` asks for.
    pub fn log_level(&self) -> Option<&'static str> {
        self.verbosity.map(|v| match v {
            0..=3 => "info",
            4..=5 => "debug",
            _ => "trace",
        })
    }

    /// The flags given that change nothing here, each with the reason (for one warning each at start).
    pub fn without_effect(&self) -> Vec<(&'static str, &'static str)> {
        let given = [
            ("--cloud-provider", self.cloud_provider.is_some(), "every class names its provider"),
            ("--min-resync-period", self.min_resync_period.is_some(), "caches are never resynced as a whole"),
            ("--profiling", self.profiling.is_some(), "there is no pprof endpoint"),
            ("--contention-profiling", self.contention_profiling.is_some(), "there is no pprof endpoint"),
            ("--kube-api-content-type", self.kube_api_content_type.is_some(), "requests are JSON"),
            (
                "--controller-start-interval",
                self.controller_start_interval.is_some(),
                "controllers start together once the caches are synced",
            ),
            ("--vmodule", self.vmodule.is_some(), "use --log-level with per-module filters"),
            ("--log-flush-frequency", self.log_flush_frequency.is_some(), "log lines are written as they come"),
        ];
        given.into_iter().filter(|(_, set, _)| *set).map(|(flag, _, why)| (flag, why)).collect()
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: McmFlags,
    }

    fn parse(args: &[&str]) -> McmFlags {
        Cli::try_parse_from(std::iter::once("mcm").chain(args.iter().copied())).unwrap().flags
    }

    #[test]
    fn verbosity_maps_to_a_level() {
        for (args, level) in [
            (&["--v=2"][..], Some("info")),
            (&["-v", "3"][..], Some("info")),
            (&["-v=4"][..], Some("debug")),
            (&["--v", "6"][..], Some("trace")),
            (&[][..], None),
        ] {
            assert_eq!(parse(args).log_level(), level, "{args:?}");
        }
    }

    #[test]
    fn port_and_address_make_a_bind_address() {
        assert_eq!(parse(&[]).bind_address(), "0.0.0.0:10258");
        assert_eq!(parse(&["--port=10259"]).bind_address(), "0.0.0.0:10259");
        assert_eq!(parse(&["--address=127.0.0.1", "--port=9000"]).bind_address(), "127.0.0.1:9000");
        assert_eq!(parse(&["--address=::1"]).bind_address(), "[::1]:10258");
    }

    #[test]
    fn flags_without_effect_are_named_and_bad_values_refused() {
        let flags = parse(&["--cloud-provider=aws", "--profiling", "--min-resync-period=12h", "--v=2"]);
        let named: Vec<&str> = flags.without_effect().into_iter().map(|(f, _)| f).collect();
        assert_eq!(named, ["--cloud-provider", "--min-resync-period", "--profiling"]);
        assert!(parse(&[]).without_effect().is_empty());
        assert_eq!(parse(&["--leader-elect-resource-lock=leases"]).validate(), Ok(()));
        assert_eq!(
            parse(&["--leader-elect-resource-lock=endpoints"]).validate(),
            Err(LockTypeError("endpoints".into()))
        );
        // As Go's time.ParseDuration: a number without a unit is not a duration.
        let cli = Cli::try_parse_from(["mcm", "--min-resync-period=1"]);
        assert!(cli.is_err());
    }
}
