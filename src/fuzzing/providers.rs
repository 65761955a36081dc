//! Every driver's providerSpec parser (a MachineClass is user input), with the request pieces each driver builds
//! from a parsed spec, and the providerID parsers (a Machine's `spec.providerID` is user input too).

use serde_json::Value;

/// Input: a header line naming the driver (`aws`, `azure`, `gcp`, `inmemory`), then the providerSpec as JSON.
/// The whole rest is also read as a providerID. Invariants: a providerID a driver parses prints back (through
/// the driver's own `provider_id`) to one that parses to the same instance. A driver left out of the build
/// (cargo features) takes no input.
pub fn provider_spec(data: &[u8]) {
    let Some((driver, rest)) = super::header(data) else { return };
    let spec = serde_json::from_str::<Value>(rest).ok();
    match driver.trim() {
        #[cfg(feature = "aws")]
        "aws" => aws(spec.as_ref(), rest),
        #[cfg(feature = "azure")]
        "azure" => azure(spec.as_ref(), rest),
        #[cfg(feature = "gcp")]
        "gcp" => gcp(spec.as_ref(), rest),
        "inmemory" => inmemory(spec.as_ref()),
        _ => {}
    }
}

#[cfg(feature = "aws")]
fn aws(spec: Option<&Value>, provider_id: &str) {
    use crate::providers::aws::{request, spec::ProviderSpec};
    if let Ok(id) = request::instance_id(provider_id) {
        let printed = request::provider_id(Some("zone-a"), "region", &id);
        let back = request::instance_id(&printed);
        assert!(
            back.as_ref().is_ok_and(|b| *b == id),
            "AWS providerID {provider_id:?} names {id:?}, printed as {printed:?}, which reads back as {back:?}"
        );
    }
    let Some(Ok(spec)) = spec.map(ProviderSpec::parse) else { return };
    let _ = spec.needs_initialization();
    let _ = request::tag_specifications(&spec, "machine");
    let _ = request::block_device_mappings(&spec, Some("/dev/xvda"));
    let _ = request::block_device_mappings(&spec, None);
    let _ = request::network_interfaces(&spec);
    let _ = request::iam_profile(&spec);
    let _ = request::metadata_options(&spec);
    let _ = request::market_options(&spec);
    let _ = request::placement(&spec);
    let _ = request::capacity_reservation(&spec);
    let _ = request::cpu_options(&spec);
    let _ = request::owner_filters(&spec, Some("machine"));
}

#[cfg(feature = "azure")]
fn azure(spec: Option<&Value>, provider_id: &str) {
    use crate::providers::azure::{request, spec::ProviderSpec};
    if let Ok(parsed) = request::parse_provider_id(provider_id)
        && let Some(group) = &parsed.resource_group
    {
        let printed = request::provider_id("subscription", group, &parsed.vm);
        let back = request::parse_provider_id(&printed);
        assert!(
            back.as_ref().is_ok_and(|b| *b == parsed),
            "Azure providerID {provider_id:?} names {parsed:?}, printed as {printed:?}, which reads back as {back:?}"
        );
    }
    let Some(Ok(spec)) = spec.map(ProviderSpec::parse) else { return };
    let vm = request::vm_name("machine");
    let disks = request::disk_names(&spec, &vm);
    let _ = request::subnet_id("subscription", &spec);
    let _ = request::nic_body(&spec, "subscription", &request::nic_name(&vm));
    let _ = request::vm_body(&spec, "subscription", &vm, "#!/bin/sh", "ssh-rsa AAAA");
    let _ = request::machine_names(&spec, std::slice::from_ref(&vm), &[request::nic_name(&vm)], &disks);
}

#[cfg(feature = "gcp")]
fn gcp(spec: Option<&Value>, provider_id: &str) {
    use crate::providers::gcp::{request, spec::ProviderSpec};
    if let Ok(parsed) = request::parse_provider_id(provider_id) {
        let printed = request::provider_id(&parsed.project, &parsed.zone, &parsed.name);
        let back = request::parse_provider_id(&printed);
        assert!(
            back.as_ref().is_ok_and(|b| *b == parsed),
            "GCP providerID {provider_id:?} names {parsed:?}, printed as {printed:?}, which reads back as {back:?}"
        );
    }
    let Some(Ok(spec)) = spec.map(ProviderSpec::parse) else { return };
    let _ = spec.owns(["kubernetes-io-cluster-x", "kubernetes-io-role-node"]);
    for user_data in ["#!/bin/sh", "#cloud-config"] {
        let _ = request::instance_body(&spec, "project", "machine", user_data);
    }
}

fn inmemory(spec: Option<&Value>) {
    use crate::providers::inmemory::spec::{ProviderSpec, boot_delay, create_verdict};
    let Some(Ok(spec)) = spec.map(ProviderSpec::parse) else { return };
    for sample in [0.0, 0.5, 1.0] {
        let _ = boot_delay(spec.boot_seconds, spec.boot_jitter, sample);
        let _ = create_verdict(&spec, 3, sample);
    }
    let _ = spec.life_after_boot();
}
