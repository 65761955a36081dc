//! The `mcm` binary's small commands, run as a user runs them.

use std::process::Command;

fn mcm(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcm")).args(args).output().expect("run mcm");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn version_names_the_contract_and_commit() {
    let (ok, stdout, _) = mcm(&["version"]);
    assert!(ok);
    assert!(stdout.starts_with(&format!("mcm {}\n", env!("CARGO_PKG_VERSION"))), "{stdout}");
    assert!(stdout.contains("git commit: "), "{stdout}");
    assert!(stdout.contains("cluster api contract: v1beta2"), "{stdout}");
}

#[test]
fn crds_prints_every_crd_as_yaml_documents() {
    let (ok, stdout, _) = mcm(&["crds"]);
    assert!(ok);
    let names: Vec<String> = serde_yaml::Deserializer::from_str(&stdout)
        .map(|doc| {
            let value: serde_json::Value = serde::Deserialize::deserialize(doc).expect("valid YAML");
            value["metadata"]["name"].as_str().expect("named CRD").to_string()
        })
        .collect();
    for expected in [
        "machines.machine.sapcloud.io",
        "machineclasses.machine.sapcloud.io",
        "machinesets.machine.sapcloud.io",
        "machinedeployments.machine.sapcloud.io",
        "mcmmachines.infrastructure.cluster.x-k8s.io",
        "mcmmachinetemplates.infrastructure.cluster.x-k8s.io",
        "mcmclusters.infrastructure.cluster.x-k8s.io",
        "mcmclustertemplates.infrastructure.cluster.x-k8s.io",
        "mcmclusteridentities.infrastructure.cluster.x-k8s.io",
        "machines.cluster.x-k8s.io",
        "clusters.cluster.x-k8s.io",
        "machinepools.cluster.x-k8s.io",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected} missing from {names:?}");
    }
    assert_eq!(names.len(), 15);
}

#[test]
fn crds_output_dir_writes_one_file_per_crd() {
    let dir = std::env::temp_dir().join(format!("mcm-crds-test-{}", std::process::id()));
    let (ok, _, stderr) = mcm(&["crds", "--output-dir", dir.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(files, 15);
    let infra = std::fs::read_to_string(dir.join("infrastructure.cluster.x-k8s.io_mcmmachines.yaml")).unwrap();
    assert!(infra.contains("cluster.x-k8s.io/v1beta2: v1alpha1"));
    assert!(infra.contains("- cluster-api"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn unwritable_output_dir_is_a_clear_error() {
    let (ok, _, stderr) = mcm(&["crds", "--output-dir", "/proc/mcm-cannot-write-here"]);
    assert!(!ok);
    assert!(stderr.starts_with("mcm: could not write /proc/mcm-cannot-write-here"), "{stderr}");
}
