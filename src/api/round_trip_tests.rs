//! Hand-written objects in the upstream shapes (`testdata/objects/`) load into our types and serialise back
//! unchanged, and every field they use exists in the upstream schema (so the fixtures are honest).

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{capi, mcm};

fn load(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/objects").join(name);
    serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn schema(crd_file: &str, version: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(crd_file);
    let crd: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    crd["spec"]["versions"].as_array().unwrap().iter().find(|v| v["name"] == version).unwrap()["schema"]
        ["openAPIV3Schema"]
        .clone()
}

/// Paths of `object` that `schema` does not declare.
fn undeclared(object: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) || path == ".metadata" {
        return;
    }
    match object {
        Value::Object(map) => {
            for (key, value) in map {
                let sub = schema
                    .get("properties")
                    .and_then(|p| p.get(key))
                    .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
                match sub {
                    Some(sub) => undeclared(value, sub, &format!("{path}.{key}"), out),
                    None => out.push(format!("{path}.{key}")),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                undeclared(item, &schema["items"], &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

fn assert_round_trip<K: Serialize + DeserializeOwned>(fixture: &str, crd_file: &str, version: &str) {
    let original = load(fixture);
    let mut missing = Vec::new();
    undeclared(&original, &schema(crd_file, version), "", &mut missing);
    assert!(missing.is_empty(), "{fixture} uses fields the upstream schema lacks: {missing:?}");

    let typed: K = serde_json::from_value(original.clone()).unwrap_or_else(|e| panic!("{fixture}: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    pretty_assertions::assert_eq!(original, back, "{fixture} changed in a round trip");
}

const MCM_CRDS: &str = "third_party/machine-controller-manager/crds";
const CAPI_CRDS: &str = "third_party/cluster-api/crds";

#[test]
fn mcm_machine_class() {
    assert_round_trip::<mcm::MachineClass>(
        "mcm-machineclass.yaml",
        &format!("{MCM_CRDS}/machine.sapcloud.io_machineclasses.yaml"),
        "v1alpha1",
    );
}

#[test]
fn mcm_machine() {
    assert_round_trip::<mcm::Machine>(
        "mcm-machine.yaml",
        &format!("{MCM_CRDS}/machine.sapcloud.io_machines.yaml"),
        "v1alpha1",
    );
}

#[test]
fn mcm_machine_set() {
    assert_round_trip::<mcm::MachineSet>(
        "mcm-machineset.yaml",
        &format!("{MCM_CRDS}/machine.sapcloud.io_machinesets.yaml"),
        "v1alpha1",
    );
}

#[test]
fn mcm_machine_deployment() {
    assert_round_trip::<mcm::MachineDeployment>(
        "mcm-machinedeployment.yaml",
        &format!("{MCM_CRDS}/machine.sapcloud.io_machinedeployments.yaml"),
        "v1alpha1",
    );
}

#[test]
fn capi_cluster() {
    assert_round_trip::<capi::Cluster>(
        "capi-cluster.yaml",
        &format!("{CAPI_CRDS}/cluster.x-k8s.io_clusters.yaml"),
        "v1beta2",
    );
}

#[test]
fn capi_machine_deployment() {
    assert_round_trip::<capi::MachineDeployment>(
        "capi-machinedeployment.yaml",
        &format!("{CAPI_CRDS}/cluster.x-k8s.io_machinedeployments.yaml"),
        "v1beta2",
    );
}

#[test]
fn capi_machine() {
    assert_round_trip::<capi::Machine>(
        "capi-machine.yaml",
        &format!("{CAPI_CRDS}/cluster.x-k8s.io_machines.yaml"),
        "v1beta2",
    );
}

#[test]
fn durations_written_by_hand_are_read_and_normalised() {
    let mut machine = load("mcm-machine.yaml");
    machine["spec"]["creationTimeout"] = "20m".into();
    machine["spec"]["drainTimeout"] = "90s".into();
    let typed: mcm::Machine = serde_json::from_value(machine).unwrap();
    let config = &typed.spec.configuration;
    assert_eq!(config.creation_timeout.unwrap().as_std().as_secs(), 1200);
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(back["spec"]["drainTimeout"], "1m30s");
}

#[test]
fn unknown_phases_survive() {
    let mut machine = load("mcm-machine.yaml");
    machine["status"]["currentStatus"]["phase"] = "SomethingNew".into();
    let typed: mcm::Machine = serde_json::from_value(machine).unwrap();
    let phase = typed.status.as_ref().unwrap().current_status.as_ref().unwrap().phase.clone();
    assert_eq!(phase, Some(mcm::MachinePhase::Other("SomethingNew".into())));
    assert_eq!(serde_json::to_value(&typed).unwrap()["status"]["currentStatus"]["phase"], "SomethingNew");
}
