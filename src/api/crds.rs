//! Every CRD this project ships: generated from our types, plus CAPI core's own (verbatim, `third_party/`).
//!
//! `mcm crds` prints them; `crds/` holds them in git and a test fails when the two drift.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::{infra, mcm};

/// One CRD file: its conventional name (`<group>_<plural>.yaml`) and its YAML text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrdFile {
    /// File name, e.g. `machine.sapcloud.io_machines.yaml`.
    pub file_name: String,
    /// The YAML document, starting with `---`.
    pub yaml: String,
}

/// Why the CRDs could not be produced (a bug: the inputs are compiled in).
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// Serialising a generated CRD failed.
    #[error("could not serialise the CRD {name} to YAML: {source}")]
    Serialize {
        /// The CRD name.
        name: String,
        /// The cause.
        source: serde_yaml::Error,
    },
}

/// CAPI core's CRDs, shipped unmodified for the CAPI-with-MCM-core mode.
const CAPI_CORE: &[(&str, &str)] = &[
    (
        "cluster.x-k8s.io_clusters.yaml",
        include_str!("../../third_party/cluster-api/crds/cluster.x-k8s.io_clusters.yaml"),
    ),
    (
        "cluster.x-k8s.io_machinedeployments.yaml",
        include_str!("../../third_party/cluster-api/crds/cluster.x-k8s.io_machinedeployments.yaml"),
    ),
    (
        "cluster.x-k8s.io_machinehealthchecks.yaml",
        include_str!("../../third_party/cluster-api/crds/cluster.x-k8s.io_machinehealthchecks.yaml"),
    ),
    (
        "cluster.x-k8s.io_machinepools.yaml",
        include_str!("../../third_party/cluster-api/crds/cluster.x-k8s.io_machinepools.yaml"),
    ),
    (
        "cluster.x-k8s.io_machines.yaml",
        include_str!("../../third_party/cluster-api/crds/cluster.x-k8s.io_machines.yaml"),
    ),
    (
        "cluster.x-k8s.io_machinesets.yaml",
        include_str!("../../third_party/cluster-api/crds/cluster.x-k8s.io_machinesets.yaml"),
    ),
];

/// The CRDs generated from our types: MCM's four kinds and our infrastructure kinds.
pub fn generated() -> Vec<CustomResourceDefinition> {
    vec![
        mcm::MachineClass::crd(),
        mcm::Machine::crd(),
        mcm::MachineSet::crd(),
        mcm::MachineDeployment::crd(),
        infra::MCMCluster::crd(),
        infra::MCMClusterIdentity::crd(),
        infra::MCMClusterTemplate::crd(),
        infra::MCMMachine::crd(),
        infra::MCMMachineTemplate::crd(),
    ]
    .into_iter()
    .map(finish)
    .collect()
}

/// Adds what every CRD schema carries but the derive leaves out: `apiVersion`, `kind` and `metadata`.
fn finish(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) else {
            continue;
        };
        let props = schema.properties.get_or_insert_with(Default::default);
        let string =
            |description: &str| k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps {
                type_: Some("string".into()),
                description: Some(description.into()),
                ..Default::default()
            };
        props
            .entry("apiVersion".into())
            .or_insert_with(|| string("APIVersion defines the versioned schema of this representation of an object."));
        props
            .entry("kind".into())
            .or_insert_with(|| string("Kind is a string value representing the REST resource this object represents."));
        props.entry("metadata".into()).or_insert_with(|| {
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps {
                type_: Some("object".into()),
                ..Default::default()
            }
        });
    }
    crd
}

/// Every CRD file, in a stable order: generated ones first, then CAPI core's.
pub fn files() -> Result<Vec<CrdFile>, CrdError> {
    let mut files = Vec::new();
    for crd in generated() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let yaml = serde_yaml::to_string(&crd).map_err(|source| CrdError::Serialize { name: name.clone(), source })?;
        let file_name = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
        files.push(CrdFile { file_name, yaml: format!("---\n{yaml}") });
    }
    for (file_name, yaml) in CAPI_CORE {
        let yaml = if yaml.starts_with("---") { yaml.to_string() } else { format!("---\n{yaml}") };
        files.push(CrdFile { file_name: file_name.to_string(), yaml });
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use serde_json::Value;

    use super::*;

    fn manifest_dir() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    /// Every property path of a schema with its `type` (`None` for int-or-string and untyped nodes).
    fn paths(schema: &Value, path: String, out: &mut BTreeMap<String, Option<String>>) {
        out.insert(path.clone(), schema.get("type").and_then(Value::as_str).map(str::to_string));
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (name, sub) in props {
                paths(sub, format!("{path}.{name}"), out);
            }
        }
        if let Some(items) = schema.get("items") {
            paths(items, format!("{path}[]"), out);
        }
        if let Some(additional) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            paths(additional, format!("{path}{{}}"), out);
        }
    }

    fn schema_of(crd: &Value, version: &str) -> Value {
        crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == version)
            .unwrap_or_else(|| panic!("version {version} missing"))["schema"]["openAPIV3Schema"]
            .clone()
    }

    #[test]
    fn mcm_crds_admit_every_field_of_upstream_mcm() {
        let ours: BTreeMap<String, Value> = generated()
            .into_iter()
            .map(|crd| (crd.metadata.name.clone().unwrap(), serde_json::to_value(crd).unwrap()))
            .collect();
        let dir = manifest_dir().join("third_party/machine-controller-manager/crds");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let upstream: Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let name = upstream["metadata"]["name"].as_str().unwrap();
            let our_crd = ours.get(name).unwrap_or_else(|| panic!("we generate no CRD {name}"));
            let (mut theirs_paths, mut our_paths) = (BTreeMap::new(), BTreeMap::new());
            paths(&schema_of(&upstream, "v1alpha1"), String::new(), &mut theirs_paths);
            paths(&schema_of(our_crd, "v1alpha1"), String::new(), &mut our_paths);
            let problems: Vec<String> = theirs_paths
                .iter()
                .filter_map(|(path, ty)| match our_paths.get(path) {
                    None => Some(format!("{name}: {path} ({ty:?}) is missing")),
                    Some(ours) if ours != ty => Some(format!("{name}: {path} is {ours:?}, upstream {ty:?}")),
                    Some(_) => None,
                })
                .collect();
            assert!(problems.is_empty(), "schema differences:\n{}", problems.join("\n"));
            // Names, scope, subresources and printer columns must match too.
            assert_eq!(our_crd["spec"]["names"]["shortNames"], upstream["spec"]["names"]["shortNames"], "{name}");
            assert_eq!(our_crd["spec"]["scope"], upstream["spec"]["scope"], "{name}");
            let version = |crd: &Value| crd["spec"]["versions"][0].clone();
            assert_eq!(version(our_crd)["subresources"], version(&upstream)["subresources"], "{name}");
            let columns = |crd: &Value| -> Vec<(Value, Value, Value, Value)> {
                version(crd)["additionalPrinterColumns"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| (c["name"].clone(), c["type"].clone(), c["jsonPath"].clone(), c["priority"].clone()))
                    .collect()
            };
            assert_eq!(columns(our_crd), columns(&upstream), "{name} printer columns");
            checked += 1;
        }
        assert_eq!(checked, 4, "expected the four MCM CRDs in {}", dir.display());
    }

    #[test]
    fn crds_directory_matches_generated() {
        let dir = manifest_dir().join("crds");
        let expected = files().unwrap();
        let mut stale = Vec::new();
        for file in &expected {
            match std::fs::read_to_string(dir.join(&file.file_name)) {
                Ok(text) if text == file.yaml => {}
                Ok(_) => stale.push(format!("{} differs", file.file_name)),
                Err(_) => stale.push(format!("{} is missing", file.file_name)),
            }
        }
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().to_string();
            if name.ends_with(".yaml") && !expected.iter().any(|f| f.file_name == name) {
                stale.push(format!("{name} is not generated any more"));
            }
        }
        assert!(stale.is_empty(), "crds/ has drifted from the types; run `make crds`:\n{}", stale.join("\n"));
    }
}
