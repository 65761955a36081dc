use serde_json::{Value, json};

use super::*;
use crate::api::infra::{MCMClusterSpec, MCMMachineTemplateSpec};

/// A parser for provider `Fake`: `machineType` must be a string.
fn check(provider: &str, spec: &Value) -> Option<Result<(), String>> {
    (provider == "Fake").then(|| match spec.get("machineType") {
        Some(Value::String(_)) => Ok(()),
        Some(other) => Err(format!("providerSpec.machineType: must be a string, got {other}")),
        None => Err("providerSpec.machineType: required".to_string()),
    })
}

fn machine(spec: Value) -> MCMMachine {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MCMMachine",
        "metadata": {"name": "m", "namespace": "ns"}, "spec": spec,
    }))
    .unwrap()
}

fn template(spec: Value) -> MCMMachineTemplate {
    let mut t = MCMMachineTemplate::new("t", MCMMachineTemplateSpec::default());
    t.spec.template.spec = machine(spec).spec;
    t
}

fn cluster(spec: Value) -> MCMCluster {
    MCMCluster::new("c", serde_json::from_value::<MCMClusterSpec>(spec).unwrap())
}

fn class(provider: Option<&str>, provider_spec: Value) -> MachineClass {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "c", "namespace": "ns"}, "provider": provider, "providerSpec": provider_spec,
    }))
    .unwrap()
}

fn inline(provider_spec: Value) -> Value {
    json!({"inlineClass": {"provider": "Fake", "providerSpec": provider_spec}})
}

fn shown(verdict: &Verdict) -> Vec<String> {
    verdict.errors.iter().map(ToString::to_string).collect()
}

#[test]
fn machine_specs() {
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("a class reference", json!({"class": {"kind": "MachineClass", "name": "small"}}), vec![]),
        ("an inline class", inline(json!({"machineType": "m5"})), vec![]),
        ("neither", json!({}), vec!["spec.class: Required value: set exactly one of class and inlineClass"]),
        (
            "both",
            json!({"class": {"kind": "MachineClass", "name": "s"}, "inlineClass": {"provider": "Fake", "providerSpec": {"machineType": "m"}}}),
            vec!["spec.inlineClass: Forbidden: spec.class and spec.inlineClass are both set; set exactly one"],
        ),
        (
            "another kind, no name",
            json!({"class": {"kind": "AWSMachineClass"}}),
            vec![
                "spec.class.kind: Invalid value: \"AWSMachineClass\": only \"MachineClass\" is supported",
                "spec.class.name: Required value: name the MachineClass",
            ],
        ),
        (
            "another group",
            json!({"class": {"apiGroup": "example.com", "kind": "MachineClass", "name": "s"}}),
            vec!["spec.class.apiGroup: Invalid value: \"example.com\": only \"machine.sapcloud.io\" is supported"],
        ),
        (
            "the parser refuses",
            inline(json!({"machineType": 5})),
            vec!["spec.inlineClass.providerSpec: Invalid value: providerSpec.machineType: must be a string, got 5"],
        ),
        (
            "no provider",
            json!({"inlineClass": {"provider": "", "providerSpec": {}}}),
            vec!["spec.inlineClass.provider: Required value: name the driver"],
        ),
        (
            "an incomplete node template",
            json!({"inlineClass": {"provider": "Fake", "providerSpec": {"machineType": "m"},
                   "nodeTemplate": {"capacity": {"cpu": "1", "gpu": "0", "memory": "1Gi"}, "instanceType": "m", "region": "r", "zone": ""}}}),
            vec![
                "spec.inlineClass.nodeTemplate: Invalid value: nodeTemplate.instanceType, region and zone must be set (missing: zone)",
            ],
        ),
        (
            "an identity",
            json!({"identityRef": {"kind": "MCMClusterIdentity", "name": "shared"}, "inlineClass": {"provider": "Fake", "providerSpec": {"machineType": "m"}}}),
            vec![],
        ),
        (
            "an identity of another kind, unnamed",
            json!({"identityRef": {"kind": "AWSClusterStaticIdentity", "name": ""}, "class": {"kind": "MachineClass", "name": "s"}}),
            vec![
                "spec.identityRef.kind: Invalid value: \"AWSClusterStaticIdentity\": only \"MCMClusterIdentity\" is supported",
                "spec.identityRef.name: Required value: name the MCMClusterIdentity",
            ],
        ),
        (
            "a preset providerID adopts a VM",
            json!({"providerID": "fake://vm", "class": {"kind": "MachineClass", "name": "s"}}),
            vec![],
        ),
    ];
    for (name, spec, expected) in cases {
        let verdict = validate_machine_create(&machine(spec.clone()), &check);
        assert_eq!(shown(&verdict), expected, "MCMMachine: {name}");
        // The template's spec.template.spec is checked alike, under its own path.
        let mut t = template(spec);
        t.spec.template.spec.provider_id = None;
        let templated: Vec<String> = expected.iter().map(|e| e.replacen("spec.", "spec.template.spec.", 1)).collect();
        assert_eq!(shown(&validate_template_create(&t, &check)), templated, "MCMMachineTemplate: {name}");
    }
}

#[test]
fn an_unknown_provider_is_allowed_with_a_warning() {
    let verdict = validate_machine_create(
        &machine(json!({"inlineClass": {"provider": "OutOfTree", "providerSpec": {"x": 1}}})),
        &check,
    );
    assert!(verdict.allowed());
    assert_eq!(
        verdict.warnings,
        [
            "spec.inlineClass.provider: no driver of this provider claims \"OutOfTree\"; its providerSpec was not checked"
        ]
    );
}

#[test]
fn a_template_names_no_provider_id() {
    let t = template(json!({"providerID": "fake://vm-1", "class": {"kind": "MachineClass", "name": "s"}}));
    let verdict = validate_template_create(&t, &check);
    assert_eq!(verdict.errors.len(), 1);
    assert_eq!(verdict.errors[0].field, "spec.template.spec.providerID");
    assert_eq!(verdict.errors[0].kind, FieldErrorKind::Forbidden);
    assert!(verdict.errors[0].detail.contains("every Machine cloned from it would claim the same VM"));
    let empty = template(json!({"providerID": "", "class": {"kind": "MachineClass", "name": "s"}}));
    assert!(validate_template_create(&empty, &check).allowed(), "an empty providerID is no providerID");
}

#[test]
fn machine_updates() {
    let base = json!({"class": {"kind": "MachineClass", "name": "s"}, "failureDomain": "a"});
    let with = |patch: Value| {
        let mut spec = base.clone();
        json_patch::merge(&mut spec, &patch);
        machine(spec)
    };
    let cases: Vec<(&str, MCMMachine, MCMMachine, Vec<&str>)> = vec![
        ("unchanged", with(json!({})), with(json!({})), vec![]),
        ("providerID set once", with(json!({})), with(json!({"providerID": "fake://a"})), vec![]),
        (
            "providerID changed",
            with(json!({"providerID": "fake://a"})),
            with(json!({"providerID": "fake://b"})),
            vec!["spec.providerID: Forbidden: field is immutable once set"],
        ),
        (
            "providerID removed",
            with(json!({"providerID": "fake://a"})),
            with(json!({})),
            vec!["spec.providerID: Forbidden: field is immutable once set"],
        ),
        (
            "timeouts and node template change",
            with(json!({})),
            with(json!({"creationTimeout": "5m", "nodeTemplate": {"metadata": {"labels": {"a": "b"}}}})),
            vec![],
        ),
        (
            "class and failure domain are immutable",
            with(json!({})),
            with(json!({"class": {"name": "other"}, "failureDomain": "b"})),
            vec![
                "spec.failureDomain: Forbidden: field is immutable once set",
                "spec.class: Forbidden: field is immutable",
            ],
        ),
        (
            "a failure domain set once (the controller records the VM's zone)",
            with(json!({"failureDomain": null})),
            with(json!({"failureDomain": "b"})),
            vec![],
        ),
        (
            "an inline class is immutable",
            with(json!({"class": null, "inlineClass": {"provider": "Fake", "providerSpec": {"machineType": "a"}}})),
            with(json!({"class": null, "inlineClass": {"provider": "Fake", "providerSpec": {"machineType": "b"}}})),
            vec!["spec.inlineClass: Forbidden: field is immutable"],
        ),
    ];
    for (name, old, new, expected) in cases {
        assert_eq!(shown(&validate_machine_update(&old, &new)), expected, "{name}");
    }
}

#[test]
fn template_updates() {
    let old = template(json!({"class": {"kind": "MachineClass", "name": "s"}}));
    let mut metadata_only = old.clone();
    metadata_only.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    assert!(validate_template_update(&old, &metadata_only).allowed());
    let changed = template(json!({"class": {"kind": "MachineClass", "name": "bigger"}}));
    let verdict = validate_template_update(&old, &changed);
    assert_eq!(verdict.errors.len(), 1);
    assert_eq!(verdict.errors[0].field, "spec.template.spec");
    assert!(verdict.errors[0].detail.contains("immutable"), "{}", verdict.errors[0]);
}

#[test]
fn clusters() {
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("empty", json!({}), vec![]),
        ("an endpoint", json!({"controlPlaneEndpoint": {"host": "h", "port": 6443}}), vec![]),
        (
            "an endpoint without port",
            json!({"controlPlaneEndpoint": {"host": "h"}}),
            vec!["spec.controlPlaneEndpoint.port: Invalid value: 0: must be between 1 and 65535"],
        ),
        (
            "failure domains",
            json!({"failureDomains": [{"name": "a"}, {"name": ""}, {"name": "a"}]}),
            vec![
                "spec.failureDomains[1].name: Required value: name the failure domain",
                "spec.failureDomains[2].name: Duplicate value: \"a\"",
            ],
        ),
    ];
    for (name, spec, expected) in cases {
        assert_eq!(shown(&validate_cluster_create(&cluster(spec))), expected, "{name}");
    }
    let old = cluster(json!({"controlPlaneEndpoint": {"host": "h", "port": 6443}}));
    let moved = cluster(json!({"controlPlaneEndpoint": {"host": "other", "port": 6443}}));
    assert_eq!(
        shown(&validate_cluster_update(&old, &moved)),
        ["spec.controlPlaneEndpoint: Forbidden: field is immutable"]
    );
    let unset = cluster(json!({}));
    assert!(validate_cluster_update(&unset, &old).allowed(), "an endpoint may be set later");
    let more = cluster(json!({"controlPlaneEndpoint": {"host": "h", "port": 6443}, "failureDomains": [{"name": "b"}]}));
    assert!(validate_cluster_update(&old, &more).allowed());
}

#[test]
fn machine_classes() {
    let good = class(Some("Fake"), json!({"machineType": "m5"}));
    assert_eq!(validate_machine_class(None, &good, &check), Verdict::default());
    let typo = class(Some("Fake"), json!({"machineType": 5}));
    assert_eq!(
        shown(&validate_machine_class(None, &typo, &check)),
        ["providerSpec: Invalid value: providerSpec.machineType: must be a string, got 5"]
    );
    assert_eq!(
        shown(&validate_machine_class(Some(&good), &typo, &check)).len(),
        1,
        "a changed providerSpec is checked"
    );
    let mut finalized = typo.clone();
    finalized.metadata.finalizers = Some(vec!["machine.sapcloud.io/machine-controller-manager".into()]);
    assert!(
        validate_machine_class(Some(&typo), &finalized, &check).allowed(),
        "a stored invalid class can still change its metadata"
    );
    let unknown = validate_machine_class(None, &class(Some("OutOfTree"), json!({"anything": 1})), &check);
    assert!(unknown.allowed());
    assert_eq!(
        unknown.warnings,
        ["provider: no driver of this provider claims \"OutOfTree\"; its providerSpec was not checked"]
    );
    let none = validate_machine_class(None, &class(None, json!({})), &check);
    assert!(none.allowed() && none.warnings.len() == 1, "{none:?}");
    let mut template = good.clone();
    template.spec.node_template =
        Some(serde_json::from_value(json!({"capacity": {}, "instanceType": "m", "region": "r", "zone": "z"})).unwrap());
    assert_eq!(
        shown(&validate_machine_class(None, &template, &check)),
        [
            "nodeTemplate: Invalid value: nodeTemplate.capacity must contain cpu, gpu and memory (missing: cpu, gpu, memory)"
        ]
    );
}

#[test]
fn defaults() {
    let mut m = machine(json!({"class": {"name": "small"}}));
    default_machine(&mut m);
    let class = m.spec.class.clone().unwrap();
    assert_eq!((class.api_group.as_deref(), class.kind.as_str()), (Some("machine.sapcloud.io"), "MachineClass"));
    assert!(validate_machine_create(&m, &check).allowed(), "the defaults validate");
    let mut other = machine(json!({"class": {"apiGroup": "example.com", "kind": "Other", "name": "x"}}));
    let before = other.clone();
    default_machine(&mut other);
    assert_eq!(other.spec, before.spec, "set values are kept");
    let mut inline_only = machine(inline(json!({"machineType": "m"})));
    let before = inline_only.clone();
    default_machine(&mut inline_only);
    assert_eq!(inline_only.spec, before.spec, "an inline class has nothing to default");
    let mut t = template(json!({"class": {"name": "small"}}));
    default_template(&mut t);
    assert_eq!(t.spec.template.spec.class.unwrap().kind, "MachineClass");
}

#[test]
fn classes_are_judged_only_while_the_crd_is_ours() {
    use std::collections::BTreeMap;
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let ours =
        labels(&[("app.kubernetes.io/part-of", "cluster-api-provider-mcm"), ("clusterctl.cluster.x-k8s.io", "")]);
    // Gardener's CRD, even when labelled for clusterctl move as docs/clusterctl.md suggests.
    let gardeners = labels(&[("clusterctl.cluster.x-k8s.io/move", "")]);
    let someone_elses = labels(&[("app.kubernetes.io/part-of", "gardener")]);
    let cases = [
        ("no CRD", None, true),
        ("ours", Some(&ours), true),
        ("Gardener's", Some(&gardeners), false),
        ("part of something else", Some(&someone_elses), false),
    ];
    for (name, crd, want) in cases {
        assert_eq!(validates_classes(crd), want, "{name}");
    }
}
