//! The cloud drivers (`aws`, `azure`, `gcp`, `inmemory`), each implementing the driver contract of [`contract`]
//! (the [`Driver`] trait, its requests and responses, [`DriverError`] with MCM's [`Code`]s), and the
//! [`DriverRegistry`] that picks a driver by `MachineClass.provider`.
//!
//! `lifecycle` imports [`contract`] only, never this module's root or a cloud module; the contract's items are
//! re-exported here for the drivers, controllers and CLI.

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "azure")]
pub mod azure;
pub mod conformance;
pub mod contract;
#[cfg(any(feature = "aws", feature = "azure", feature = "gcp"))]
#[allow(dead_code)] // each cloud driver reads a part of it
mod fields;
#[cfg(feature = "gcp")]
pub mod gcp;
pub mod grpc;
pub mod inmemory;
pub mod limit;
#[cfg(any(feature = "aws", feature = "azure", feature = "gcp"))]
pub mod secrets;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use contract::*;

/// Drivers by provider name.
#[derive(Clone, Default)]
pub struct DriverRegistry {
    drivers: BTreeMap<String, Arc<dyn Driver>>,
}

impl DriverRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a driver under its provider name.
    pub fn register(&mut self, driver: Arc<dyn Driver>) {
        self.drivers.insert(driver.provider().to_string(), driver);
    }

    /// Adds every cloud driver compiled into this binary (the cargo features `aws`, `azure`, `gcp`), each with its
    /// endpoints from the environment or the class secret. `mcm run` and `mcm dev` share this list.
    pub fn register_cloud_drivers(&mut self) {
        #[cfg(feature = "aws")]
        self.register(Arc::new(aws::AwsDriver::new()));
        #[cfg(feature = "azure")]
        self.register(Arc::new(azure::AzureDriver::new()));
        #[cfg(feature = "gcp")]
        self.register(Arc::new(gcp::GcpDriver::new()));
    }

    /// The driver for `provider`, or `InvalidArgument` naming the providers that exist.
    pub fn get(&self, provider: &str) -> Result<Arc<dyn Driver>, DriverError> {
        self.drivers.get(provider).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.drivers.keys().map(String::as_str).collect();
            DriverError::new(
                Code::InvalidArgument,
                format!("no driver for provider {provider:?} (this binary has: {})", known.join(", ")),
            )
        })
    }

    /// What a node of a class of `provider` offers, as its driver knows it ([`Driver::capacity_of`]); `None`
    /// without a driver or when the driver does not know.
    pub fn capacity_of(&self, provider: &str, provider_spec: &serde_json::Value) -> Option<NodeCapacity> {
        self.drivers.get(provider)?.capacity_of(provider_spec)
    }

    /// The provider names served.
    pub fn providers(&self) -> Vec<String> {
        self.drivers.keys().cloned().collect()
    }
}

/// Runs the providerSpec parser of the in-tree driver named `provider` (`AWS`, `Azure`, `GCP` as compiled in, and
/// `InMemory`) on `spec`, as the driver does before each call: `None` when no in-tree driver claims the name, else
/// the parser's message (naming the field) on failure. The admission webhooks run it, so a typo is refused at
/// `kubectl apply`.
pub fn check_provider_spec(provider: &str, spec: &serde_json::Value) -> Option<Result<(), String>> {
    let parsed = match provider {
        #[cfg(feature = "aws")]
        aws::PROVIDER => aws::ProviderSpec::parse(spec).map(drop),
        #[cfg(feature = "azure")]
        azure::PROVIDER => azure::ProviderSpec::parse(spec).map(drop),
        #[cfg(feature = "gcp")]
        gcp::PROVIDER => gcp::ProviderSpec::parse(spec).map(drop),
        inmemory::PROVIDER => inmemory::ProviderSpec::parse(spec).map(drop),
        _ => return None,
    };
    Some(parsed.map_err(|e| e.message))
}

/// The log targets of every cloud SDK compiled into this binary (each driver's `QUIET_SDK_TARGETS`, behind its
/// cargo feature) that print credentials, tokens or user data below `info`. A new driver adds its list here, next
/// to [`DriverRegistry::register_cloud_drivers`].
pub fn quiet_sdk_targets() -> Vec<&'static str> {
    let per_sdk: &[&[&str]] = &[
        #[cfg(feature = "aws")]
        aws::QUIET_SDK_TARGETS,
        #[cfg(feature = "azure")]
        azure::QUIET_SDK_TARGETS,
        #[cfg(feature = "gcp")]
        gcp::QUIET_SDK_TARGETS,
    ];
    per_sdk.concat()
}

/// `target=info` for each of [`quiet_sdk_targets`] that `filter` (the log filter in use, `RUST_LOG` or
/// `--log-level`) does not mention: added to that filter, they hold the SDKs at `info` however broad it is, while
/// naming a target (`RUST_LOG=debug,aws_smithy_runtime=debug`) still shows its output.
pub fn quiet_sdk_directives(filter: &str) -> Vec<tracing_subscriber::filter::Directive> {
    quiet_directives(&quiet_sdk_targets(), filter).collect()
}

/// `target=info` for each of `targets` that `filter` does not mention.
fn quiet_directives<'a>(
    targets: &'a [&'a str],
    filter: &'a str,
) -> impl Iterator<Item = tracing_subscriber::filter::Directive> + 'a {
    targets
        .iter()
        .filter(move |target| !filter.contains(**target))
        .filter_map(|target| format!("{target}=info").parse().ok())
}

#[cfg(test)]
mod tests {
    use super::{DriverRegistry, quiet_sdk_directives, quiet_sdk_targets};

    #[test]
    fn the_cloud_drivers_of_the_build_are_registered() {
        let mut registry = DriverRegistry::new();
        registry.register_cloud_drivers();
        let compiled =
            [(cfg!(feature = "aws"), "AWS"), (cfg!(feature = "azure"), "Azure"), (cfg!(feature = "gcp"), "GCP")];
        for (on, provider) in compiled {
            assert_eq!(registry.get(provider).is_ok(), on, "{provider}");
        }
        assert!(registry.get("InMemory").is_err(), "the in-memory cloud is registered by whoever owns one");
    }

    #[test]
    fn every_compiled_sdk_is_held_at_info_unless_named() {
        let targets = quiet_sdk_targets();
        let expected: Vec<String> = targets.iter().map(|t| format!("{t}=info")).collect();
        let all: Vec<String> = quiet_sdk_directives("trace").iter().map(ToString::to_string).collect();
        assert_eq!(all, expected, "every target parses as a directive");
        for (on, target) in [
            (cfg!(feature = "aws"), "aws_smithy_runtime"),
            (cfg!(feature = "aws"), "aws_sigv4"),
            (cfg!(feature = "azure"), "azure_core"),
            (cfg!(feature = "gcp"), "google_cloud_compute_v1"),
        ] {
            assert_eq!(targets.contains(&target), on, "{target}");
            if on {
                let named: Vec<String> =
                    quiet_sdk_directives(&format!("info,{target}=trace")).iter().map(ToString::to_string).collect();
                assert!(!named.contains(&format!("{target}=info")), "{target} named: {named:?}");
                assert_eq!(named.len(), expected.len() - 1, "only {target} is let through: {named:?}");
            }
        }
    }
}
