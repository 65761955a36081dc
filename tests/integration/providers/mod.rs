//! Cloud drivers through the `Driver` trait: the conformance suite, and each driver against its local fake.

#[cfg(feature = "aws")]
pub(crate) mod aws;
#[cfg(feature = "aws")]
mod aws_machines;
#[cfg(feature = "azure")]
mod azure;
#[cfg(feature = "gcp")]
mod gcp;
#[cfg(feature = "gcp")]
mod gcp_fake;
#[cfg(feature = "gcp")]
mod gcp_machines;
mod grpc;
mod inmemory;
#[cfg(any(feature = "aws", feature = "azure", feature = "gcp"))]
mod secrets;

/// The sets tests' controller options, with the safety controller looking for orphan VMs every second: cloud
/// drivers under the real controllers.
#[cfg(any(feature = "aws", feature = "azure", feature = "gcp"))]
fn controller_options() -> mcm::controllers::ControllerOptions {
    mcm::controllers::ControllerOptions {
        safety: mcm::lifecycle::safety::SafetyConfig {
            orphan_vms_period: std::time::Duration::from_secs(1),
            orphan_trigger_cooldown: std::time::Duration::from_millis(100),
            ..Default::default()
        },
        ..crate::sets::options()
    }
}
