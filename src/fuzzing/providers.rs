//! Every driver's providerSpec parser (a MachineClass is user input), with the request pieces each driver builds
//! from a parsed spec, and the providerID parsers (a Machine's `spec.providerID` is user input too); and the
//! out-of-tree driver protocol's messages (`src/providers/grpc/wire.rs`), which carry the providerSpec as JSON
//! bytes to an out-of-tree driver and bring its answers back.

use prost::Message;
use serde_json::Value;

use crate::providers::grpc::{pb, wire};

/// Input: a header line naming the driver (`aws`, `azure`, `gcp`, `inmemory`), then the providerSpec as JSON.
/// The whole rest is also read as a providerID. Or the header `grpc`, then the bytes of a protocol message (see
/// [`grpc`]). Invariants: a providerID a driver parses prints back (through the driver's own `provider_id`) to
/// one that parses to the same instance. A driver left out of the build (cargo features) takes no input.
pub fn provider_spec(data: &[u8]) {
    if let Some(message) = data.strip_prefix(b"grpc\n") {
        grpc(message);
        return;
    }
    let Some((driver, rest)) = super::header(data) else { return };
    let spec = serde_json::from_str::<Value>(rest).ok();
    dispatch(driver.trim(), spec.as_ref(), rest);
}

/// The in-tree parsers of `driver` (header names, or `MachineClass.provider` values); `provider_id` goes to the
/// cloud drivers' providerID parsers.
#[cfg_attr(
    not(any(feature = "aws", feature = "azure", feature = "gcp")),
    expect(unused_variables, reason = "only the cloud drivers parse providerIDs")
)]
fn dispatch(driver: &str, spec: Option<&Value>, provider_id: &str) {
    match driver {
        #[cfg(feature = "aws")]
        "aws" | "AWS" => aws(spec, provider_id),
        #[cfg(feature = "azure")]
        "azure" | "Azure" => azure(spec, provider_id),
        #[cfg(feature = "gcp")]
        "gcp" | "GCP" => gcp(spec, provider_id),
        "inmemory" | "InMemory" => inmemory(spec),
        _ => {}
    }
}

/// The out-of-tree driver protocol: the bytes decoded as each message `mcm driver serve` reads (the requests)
/// and `mcm run`'s gRPC client reads (the answers), through the same conversions; a request's class goes on to
/// the in-tree parser its `provider` names, as `mcm driver serve` hands it to that driver. Invariant: a request
/// that converts re-encodes (`wire::machine_request`, `wire::list_request`) to one that converts to the same.
fn grpc(bytes: &[u8]) {
    if let Ok(message) = pb::MachineRequest::decode(bytes)
        && let Ok(request) = wire::from_machine_request(message)
    {
        let again = wire::from_machine_request(wire::machine_request(&request));
        assert!(
            again.as_ref().is_ok_and(|a| *a == request),
            "a MachineRequest {request:?} re-encoded reads back as {again:?}"
        );
        let provider_id = request.machine.provider_id.as_deref().unwrap_or_default();
        dispatch(&request.class.provider, Some(&request.class.provider_spec), provider_id);
    }
    if let Ok(message) = pb::ListMachinesRequest::decode(bytes)
        && let Ok(request) = wire::from_list_request(message)
    {
        let again = wire::from_list_request(wire::list_request(&request));
        assert!(
            again.as_ref().is_ok_and(|a| *a == request),
            "a ListMachinesRequest {request:?} re-encoded reads back as {again:?}"
        );
    }
    if let Ok(message) = pb::GetVolumeIDsRequest::decode(bytes) {
        let _ = wire::from_volume_ids_request(message);
    }
    if let Ok(message) = pb::CreateMachineResponse::decode(bytes) {
        let _ = crate::providers::CreateMachineResponse::from(message);
    }
    if let Ok(message) = pb::ListMachinesResponse::decode(bytes) {
        let _ = wire::machine_list(message);
    }
    // A failed call's status: the first byte as the gRPC code, the rest as the trailer naming MCM's code.
    if let Some((&code, trailer)) = bytes.split_first()
        && let Ok(trailer) = std::str::from_utf8(trailer)
        && let Ok(value) = tonic::metadata::MetadataValue::try_from(trailer)
    {
        let mut metadata = tonic::metadata::MetadataMap::new();
        metadata.insert(wire::MACHINE_CODE_TRAILER, value);
        let status = tonic::Status::with_metadata(tonic::Code::from(i32::from(code)), "failed", metadata);
        let _ = wire::error_of(&status, "unix:///fuzz.sock");
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
