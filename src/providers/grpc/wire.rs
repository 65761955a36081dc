//! The driver contract's types to and from the protocol's messages (proto/mcm/driver/v1/driver.proto), and
//! [`DriverError`] to and from a gRPC status carrying MCM's machine code.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{NodeAddress, PersistentVolumeSpec};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::pb;
use crate::providers::{
    ClassInfo, Code, CreateMachineResponse, DeleteMachineResponse, DriverError, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineInfo, MachineRequest, MachineStatusResponse, SecretData,
};

/// The trailer naming MCM's machine code of a failed call (the protocol's header comment says why).
pub const MACHINE_CODE_TRAILER: &str = "mcm-machine-code";

// The requests carrying secret data print their keys only, like `SecretData`.
impl fmt::Debug for pb::MachineRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MachineRequest")
            .field("machine", &self.machine)
            .field("machine_class", &self.machine_class)
            .field("secret_data", &RedactedKeys(&self.secret_data))
            .field("last_known_state", &self.last_known_state)
            .finish()
    }
}

impl fmt::Debug for pb::ListMachinesRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListMachinesRequest")
            .field("machine_class", &self.machine_class)
            .field("secret_data", &RedactedKeys(&self.secret_data))
            .finish()
    }
}

struct RedactedKeys<'a, V>(&'a std::collections::HashMap<String, V>);

impl<V> fmt::Debug for RedactedKeys<'_, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys: Vec<&String> = self.0.keys().collect();
        keys.sort();
        f.debug_map().entries(keys.into_iter().map(|k| (k, "<redacted>"))).finish()
    }
}

/// A gRPC status for `error`: MCM's code as the status code (gRPC's own for 0 to 16; UNKNOWN for
/// `Uninitialized`, which gRPC libraries cannot all carry) and its name in [`MACHINE_CODE_TRAILER`].
pub fn status_of(error: &DriverError) -> tonic::Status {
    let code = match error.code {
        Code::Uninitialized => tonic::Code::Unknown,
        other => tonic::Code::from_i32(other.number() as i32),
    };
    let mut metadata = tonic::metadata::MetadataMap::new();
    metadata.insert(MACHINE_CODE_TRAILER, tonic::metadata::MetadataValue::from_static(error.code.as_str()));
    tonic::Status::with_metadata(code, error.message.clone(), metadata)
}

/// The driver error a failed call's status stands for: the trailer's code when it names one of MCM's, else the
/// status code. Transport failures (no server at the endpoint, a broken connection) arrive as `Unavailable`.
pub fn error_of(status: &tonic::Status, endpoint: &str) -> DriverError {
    let named = status.metadata().get(MACHINE_CODE_TRAILER).and_then(|v| v.to_str().ok()).and_then(Code::from_name);
    let code = named.unwrap_or_else(|| {
        let number = status.code() as usize;
        Code::ALL.get(number).copied().unwrap_or(Code::Unknown)
    });
    let message = match named {
        // The driver's own message, shown as an in-tree driver's would be.
        Some(_) => status.message().to_string(),
        // Not from a driver (the transport, a proxy): say where it came from.
        None => format!("driver at {endpoint}: {}", status.message()),
    };
    DriverError::new(code, message)
}

fn json_bytes<T: Serialize>(value: Option<&T>) -> Vec<u8> {
    value.and_then(|v| serde_json::to_vec(v).ok()).unwrap_or_default()
}

fn from_json<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<Option<T>, DriverError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(bytes)
        .map(Some)
        .map_err(|e| DriverError::new(Code::InvalidArgument, format!("{what} is not valid JSON: {e}")))
}

fn secret_map(secret: &SecretData) -> std::collections::HashMap<String, Vec<u8>> {
    secret.0.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn secret_data(map: std::collections::HashMap<String, Vec<u8>>) -> SecretData {
    SecretData(map.into_iter().collect())
}

fn class_message(class: &ClassInfo) -> pb::MachineClass {
    pb::MachineClass {
        name: class.name.clone(),
        provider: class.provider.clone(),
        provider_spec_json: if class.provider_spec.is_null() {
            Vec::new()
        } else {
            json_bytes(Some(&class.provider_spec))
        },
        node_template_json: json_bytes(class.node_template.as_ref()),
    }
}

fn class_info(class: Option<pb::MachineClass>) -> Result<ClassInfo, DriverError> {
    let class = class.ok_or_else(|| DriverError::new(Code::InvalidArgument, "the request names no machine class"))?;
    Ok(ClassInfo {
        provider_spec: from_json(&class.provider_spec_json, "providerSpec")?.unwrap_or_default(),
        node_template: from_json(&class.node_template_json, "the class's nodeTemplate")?,
        name: class.name,
        provider: class.provider,
    })
}

/// The message for `request`.
pub fn machine_request(request: &MachineRequest) -> pb::MachineRequest {
    let machine = &request.machine;
    pb::MachineRequest {
        machine: Some(pb::Machine {
            name: machine.name.clone(),
            namespace: machine.namespace.clone(),
            provider_id: machine.provider_id.clone().unwrap_or_default(),
            labels: machine.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            node_template_json: json_bytes(machine.node_template.as_ref()),
        }),
        machine_class: Some(class_message(&request.class)),
        secret_data: secret_map(&request.secret),
        last_known_state: request.last_known_state.clone().unwrap_or_default(),
    }
}

/// The request a message stands for; `InvalidArgument` when it lacks the machine or class or carries bad JSON.
pub fn from_machine_request(message: pb::MachineRequest) -> Result<MachineRequest, DriverError> {
    let machine =
        message.machine.ok_or_else(|| DriverError::new(Code::InvalidArgument, "the request names no machine"))?;
    Ok(MachineRequest {
        machine: MachineInfo {
            node_template: from_json(&machine.node_template_json, "the machine's nodeTemplate")?,
            name: machine.name,
            namespace: machine.namespace,
            provider_id: Some(machine.provider_id).filter(|p| !p.is_empty()),
            labels: machine.labels.into_iter().collect(),
        },
        class: class_info(message.machine_class)?,
        secret: secret_data(message.secret_data),
        last_known_state: Some(message.last_known_state).filter(|s| !s.is_empty()),
    })
}

/// The message for a list request.
pub fn list_request(request: &ListMachinesRequest) -> pb::ListMachinesRequest {
    pb::ListMachinesRequest {
        machine_class: Some(class_message(&request.class)),
        secret_data: secret_map(&request.secret),
    }
}

/// The list request a message stands for.
pub fn from_list_request(message: pb::ListMachinesRequest) -> Result<ListMachinesRequest, DriverError> {
    Ok(ListMachinesRequest { class: class_info(message.machine_class)?, secret: secret_data(message.secret_data) })
}

/// The message for a volume-IDs request.
pub fn volume_ids_request(request: &GetVolumeIdsRequest) -> pb::GetVolumeIDsRequest {
    pb::GetVolumeIDsRequest { pv_specs_json: request.pv_specs.iter().map(|s| json_bytes(Some(s))).collect() }
}

/// The volume-IDs request a message stands for.
pub fn from_volume_ids_request(message: pb::GetVolumeIDsRequest) -> Result<GetVolumeIdsRequest, DriverError> {
    let pv_specs = message
        .pv_specs_json
        .iter()
        .map(|b| from_json::<PersistentVolumeSpec>(b, "a PersistentVolumeSpec").map(Option::unwrap_or_default))
        .collect::<Result<_, _>>()?;
    Ok(GetVolumeIdsRequest { pv_specs })
}

fn addresses(list: &[NodeAddress]) -> Vec<pb::NodeAddress> {
    list.iter().map(|a| pb::NodeAddress { r#type: a.type_.clone(), address: a.address.clone() }).collect()
}

fn node_addresses(list: Vec<pb::NodeAddress>) -> Vec<NodeAddress> {
    list.into_iter().map(|a| NodeAddress { type_: a.r#type, address: a.address }).collect()
}

impl From<CreateMachineResponse> for pb::CreateMachineResponse {
    fn from(r: CreateMachineResponse) -> Self {
        pb::CreateMachineResponse {
            addresses: addresses(&r.addresses),
            provider_id: r.provider_id,
            node_name: r.node_name,
            last_known_state: r.last_known_state.unwrap_or_default(),
        }
    }
}

impl From<pb::CreateMachineResponse> for CreateMachineResponse {
    fn from(r: pb::CreateMachineResponse) -> Self {
        CreateMachineResponse {
            provider_id: r.provider_id,
            node_name: r.node_name,
            last_known_state: Some(r.last_known_state).filter(|s| !s.is_empty()),
            addresses: node_addresses(r.addresses),
        }
    }
}

impl From<InitializeMachineResponse> for pb::InitializeMachineResponse {
    fn from(r: InitializeMachineResponse) -> Self {
        pb::InitializeMachineResponse {
            addresses: addresses(&r.addresses),
            provider_id: r.provider_id,
            node_name: r.node_name,
        }
    }
}

impl From<pb::InitializeMachineResponse> for InitializeMachineResponse {
    fn from(r: pb::InitializeMachineResponse) -> Self {
        InitializeMachineResponse {
            provider_id: r.provider_id,
            node_name: r.node_name,
            addresses: node_addresses(r.addresses),
        }
    }
}

impl From<DeleteMachineResponse> for pb::DeleteMachineResponse {
    fn from(r: DeleteMachineResponse) -> Self {
        pb::DeleteMachineResponse { last_known_state: r.last_known_state.unwrap_or_default() }
    }
}

impl From<pb::DeleteMachineResponse> for DeleteMachineResponse {
    fn from(r: pb::DeleteMachineResponse) -> Self {
        DeleteMachineResponse { last_known_state: Some(r.last_known_state).filter(|s| !s.is_empty()) }
    }
}

impl From<MachineStatusResponse> for pb::GetMachineStatusResponse {
    fn from(r: MachineStatusResponse) -> Self {
        pb::GetMachineStatusResponse {
            addresses: addresses(&r.addresses),
            provider_id: r.provider_id,
            node_name: r.node_name,
        }
    }
}

impl From<pb::GetMachineStatusResponse> for MachineStatusResponse {
    fn from(r: pb::GetMachineStatusResponse) -> Self {
        MachineStatusResponse {
            provider_id: r.provider_id,
            node_name: r.node_name,
            addresses: node_addresses(r.addresses),
        }
    }
}

/// The list answer as the contract has it (providerID -> machine name).
pub fn machine_list(r: pb::ListMachinesResponse) -> BTreeMap<String, String> {
    r.machines.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::mcm::{NodeTemplate, NodeTemplateSpec};
    use serde_json::json;

    fn request() -> MachineRequest {
        MachineRequest {
            machine: MachineInfo {
                name: "m-1".into(),
                namespace: "ns".into(),
                provider_id: Some("aws:///eu-west-1/i-1".into()),
                node_template: Some(NodeTemplateSpec::default()),
                labels: [("a".to_string(), "b".to_string())].into(),
            },
            class: ClassInfo {
                name: "c".into(),
                provider: "AWS".into(),
                provider_spec: json!({"machineType": "m5.large", "tags": {"k": "v"}}),
                node_template: Some(NodeTemplate { instance_type: "m5.large".into(), ..Default::default() }),
            },
            secret: SecretData([("userData".to_string(), b"#!/bin/sh".to_vec())].into()),
            last_known_state: Some("state".into()),
        }
    }

    #[test]
    fn requests_survive_the_wire() {
        let original = request();
        assert_eq!(from_machine_request(machine_request(&original)).unwrap(), original);
        let bare = MachineRequest::default();
        assert_eq!(from_machine_request(machine_request(&bare)).unwrap(), bare);
        let list = ListMachinesRequest { class: original.class.clone(), secret: original.secret.clone() };
        let back = from_list_request(list_request(&list)).unwrap();
        assert_eq!((back.class, back.secret), (list.class, list.secret));
    }

    #[test]
    fn a_request_without_machine_or_class_is_invalid() {
        let mut message = machine_request(&request());
        message.machine_class = None;
        assert_eq!(from_machine_request(message).unwrap_err().code, Code::InvalidArgument);
        let mut message = machine_request(&request());
        message.machine = None;
        assert_eq!(from_machine_request(message).unwrap_err().code, Code::InvalidArgument);
        let mut message = machine_request(&request());
        if let Some(class) = message.machine_class.as_mut() {
            class.provider_spec_json = b"{not json".to_vec();
        }
        let err = from_machine_request(message).unwrap_err();
        assert!(err.message.contains("providerSpec"), "{err}");
    }

    #[test]
    fn every_machine_code_survives_a_status() {
        for code in Code::ALL.into_iter().filter(|c| *c != Code::Ok) {
            let status = status_of(&DriverError::new(code, "why"));
            assert_eq!(error_of(&status, "unix:///x"), DriverError::new(code, "why"), "{code}");
        }
        assert_eq!(status_of(&DriverError::new(Code::ResourceExhausted, "q")).code(), tonic::Code::ResourceExhausted);
        assert_eq!(status_of(&DriverError::new(Code::Uninitialized, "q")).code(), tonic::Code::Unknown);
        // A status from something that is not a driver (the transport): its gRPC code, and where it came from.
        let err = error_of(&tonic::Status::unavailable("connection refused"), "unix:///run/d.sock");
        assert_eq!(err.code, Code::Unavailable);
        assert_eq!(err.message, "driver at unix:///run/d.sock: connection refused");
    }

    #[test]
    fn debug_never_prints_secret_values() {
        let shown = format!(
            "{:?} {:?}",
            machine_request(&request()),
            list_request(&ListMachinesRequest { class: request().class, secret: request().secret })
        );
        assert!(shown.contains("userData") && !shown.contains("#!/bin/sh"), "{shown}");
    }
}
