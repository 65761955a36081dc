//! Golden renderings of the fixtures, read with `mcm status -f`.

use super::{NOW, check_golden, fixture, mcm_status};

const FIXTURES: [&str; 10] = [
    "mcm-healthy",
    "mcm-frozen",
    "mcm-stuck-drain",
    "mcm-failed-class",
    "mcm-rolling-update",
    "capi-healthy",
    "capi-frozen",
    "capi-stuck-drain",
    "capi-failed-class",
    "capi-rolling-update",
];

fn status_of(name: &str, extra: &[&str]) -> String {
    let file = fixture(name);
    let mut args = vec!["-f", file.to_str().unwrap(), "--now", NOW];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = mcm_status(&args);
    assert!(ok, "mcm status {args:?} failed: {stderr}");
    assert!(!stdout.contains('\x1b'), "no colours into a pipe");
    stdout
}

#[test]
fn every_fixture_renders_as_its_golden_tree() {
    for name in FIXTURES {
        check_golden(&format!("{name}.txt"), &status_of(name, &[]));
    }
}

#[test]
fn show_all_unfolds_every_machine_with_its_vm_and_node() {
    for name in ["mcm-rolling-update", "capi-rolling-update", "mcm-healthy"] {
        check_golden(&format!("{name}.show-all.txt"), &status_of(name, &["--show-all"]));
    }
}

#[test]
fn json_and_yaml_carry_the_whole_tree_for_scripts() {
    let json = status_of("mcm-stuck-drain", &["-o", "json"]);
    let value: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let machines = &value["groups"][0]["machineDeployments"][0]["machineSets"][0]["machines"];
    assert_eq!(machines.as_array().map(Vec::len), Some(3), "nothing folded");
    assert_eq!(machines[2]["explanation"]["reason"], "DrainBlocked");
    check_golden("mcm-stuck-drain.json", &json);
    let yaml = status_of("capi-failed-class", &["-o", "yaml"]);
    let value: serde_json::Value = serde_yaml::from_str(&yaml).expect("valid YAML");
    assert_eq!(value["groups"][0]["cluster"], "prod");
    check_golden("capi-failed-class.yaml", &yaml);
}

#[test]
fn a_named_deployment_shows_only_its_tree() {
    check_golden("mcm-failed-class.big.txt", &status_of("mcm-failed-class", &["big"]));
}

#[test]
fn a_missing_deployment_or_an_empty_namespace_says_so() {
    let file = fixture("mcm-healthy");
    let (ok, stdout, stderr) = mcm_status(&["-f", file.to_str().unwrap(), "--now", NOW, "nope"]);
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("no MachineDeployment \"nope\" in "), "{stderr}");
    let (ok, stdout, _) = mcm_status(&["-f", file.to_str().unwrap(), "-n", "elsewhere"]);
    assert!(ok);
    assert!(
        stdout.starts_with("No MachineDeployments, MachineSets or Machines in namespace elsewhere of "),
        "{stdout}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = crate::support::TempDir::new("mcm-status-bad");
    let bad = dir.0.join("bad.yaml");
    std::fs::write(&bad, "apiVersion: machine.sapcloud.io/v1alpha1\nkind: Machine\nmetadata: {name: m}\nspec: 3\n")
        .unwrap();
    let (ok, _, stderr) = mcm_status(&["-f", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("document 1: machine.sapcloud.io/v1alpha1/Machine \"m\" cannot be read"), "{stderr}");
    let (ok, _, stderr) = mcm_status(&["-f", "/nonexistent/objects.yaml"]);
    assert!(!ok);
    assert!(stderr.starts_with("mcm: could not read /nonexistent/objects.yaml"), "{stderr}");
    let (ok, _, stderr) = mcm_status(&["-n", "a", "-A"]);
    assert!(!ok, "-n and -A together are refused");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}
