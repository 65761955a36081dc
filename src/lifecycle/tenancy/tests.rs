use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::*;
use crate::api::infra::IdentitySecretReference;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn list(names: &[&str]) -> Option<AllowedNamespaces> {
    Some(AllowedNamespaces { list: Some(names.iter().map(|n| n.to_string()).collect()), selector: None })
}

fn selector(pairs: &[(&str, &str)]) -> Option<AllowedNamespaces> {
    Some(AllowedNamespaces {
        list: None,
        selector: Some(LabelSelector { match_labels: Some(labels(pairs)), match_expressions: None }),
    })
}

#[test]
fn allowed_namespaces_table() {
    let tenant = labels(&[("tenant", "a")]);
    let none = BTreeMap::new();
    let exists = Some(AllowedNamespaces {
        list: None,
        selector: Some(LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tenant".into(),
                operator: "Exists".into(),
                values: None,
            }]),
        }),
    });
    let both = Some(AllowedNamespaces {
        list: Some(vec!["x".into()]),
        selector: Some(LabelSelector { match_labels: Some(labels(&[("tenant", "a")])), match_expressions: None }),
    });
    // (case, allowedNamespaces, namespace, its labels, allowed)
    type Case<'a> = (&'a str, Option<AllowedNamespaces>, &'a str, Option<&'a BTreeMap<String, String>>, bool);
    let cases: Vec<Case<'_>> = vec![
        ("unset allows none", None, "a", Some(&tenant), false),
        ("{} allows every namespace", Some(AllowedNamespaces::default()), "a", None, true),
        ("listed", list(&["b", "a"]), "a", None, true),
        ("not listed", list(&["b"]), "a", Some(&tenant), false),
        ("empty list allows none", list(&[]), "a", Some(&tenant), false),
        ("selector matches", selector(&[("tenant", "a")]), "a", Some(&tenant), true),
        ("selector does not match", selector(&[("tenant", "b")]), "a", Some(&tenant), false),
        ("selector, namespace unknown", selector(&[("tenant", "a")]), "a", None, false),
        ("empty selector selects none", selector(&[]), "a", Some(&tenant), false),
        (
            "empty selector object selects none",
            Some(AllowedNamespaces { list: None, selector: Some(LabelSelector::default()) }),
            "a",
            Some(&tenant),
            false,
        ),
        ("expression Exists", exists.clone(), "a", Some(&tenant), true),
        ("expression Exists, no label", exists, "a", Some(&none), false),
        ("list or selector: by list", both.clone(), "x", None, true),
        ("list or selector: by selector", both.clone(), "a", Some(&tenant), true),
        ("list or selector: neither", both, "y", Some(&none), false),
    ];
    for (name, allowed, namespace, labels, expected) in cases {
        assert_eq!(namespace_allowed(allowed.as_ref(), namespace, labels), expected, "{name}");
    }
}

fn identity(secret_ns: &str, secret: &str, allowed: Option<AllowedNamespaces>) -> MCMClusterIdentitySpec {
    MCMClusterIdentitySpec {
        secret_ref: IdentitySecretReference { name: secret.into(), namespace: secret_ns.into() },
        allowed_namespaces: allowed,
    }
}

fn use_of<'a>(namespace: &'a str, name: &'a str) -> SecretUse<'a> {
    SecretUse { field: "spec.inlineClass.credentialsSecretRef".into(), namespace, name }
}

#[test]
fn check_table() {
    let provider = identity("mcm-system", "creds", list(&["tenant-b"]));
    let elsewhere = identity("mcm-system", "creds", list(&["tenant-c"]));
    let everyone = identity("mcm-system", "creds", Some(AllowedNamespaces::default()));
    let by_label = identity("mcm-system", "creds", selector(&[("team", "b")]));
    let team_b = labels(&[("team", "b")]);
    let named = IdentityReference { kind: IDENTITY_KIND.into(), name: "id".into() };
    let wrong_kind = IdentityReference { kind: "AWSClusterStaticIdentity".into(), name: "id".into() };
    let own = [use_of("tenant-b", "mine")];
    let foreign = [use_of("tenant-a", "theirs")];
    let providers = [use_of("mcm-system", "creds")];
    let granted = Ok(Some(("mcm-system".to_string(), "creds".to_string())));
    use reason::{CREDENTIALS_NOT_ALLOWED as CREDS, IDENTITY_NOT_ALLOWED as IDENT};
    type Expected = Result<Option<(String, String)>, &'static str>;
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        Option<&IdentityReference>,
        Option<&MCMClusterIdentitySpec>,
        &[SecretUse<'_>],
        Expected,
    )> = vec![
        ("own Secret, no identity", None, None, &own, Ok(None)),
        ("no Secret at all", None, None, &[], Ok(None)),
        ("another tenant's Secret", None, None, &foreign, Err(CREDS)),
        ("the provider's Secret without an identity", None, None, &providers, Err(CREDS)),
        (
            "the provider's Secret through an identity listing the namespace",
            Some(&named),
            Some(&provider),
            &providers,
            granted.clone(),
        ),
        ("through an identity allowing every namespace", Some(&named), Some(&everyone), &providers, granted.clone()),
        ("through an identity selecting the namespace", Some(&named), Some(&by_label), &providers, granted.clone()),
        ("no Secret named, the identity's is granted", Some(&named), Some(&provider), &[], granted.clone()),
        ("an identity that does not allow the namespace", Some(&named), Some(&elsewhere), &providers, Err(IDENT)),
        ("an identity that does not allow it, own Secret", Some(&named), Some(&elsewhere), &own, Err(IDENT)),
        ("an identity that does not exist", Some(&named), None, &providers, Err(IDENT)),
        ("an identity of another kind", Some(&wrong_kind), Some(&provider), &providers, Err(IDENT)),
        ("an allowed identity does not grant another Secret", Some(&named), Some(&provider), &foreign, Err(CREDS)),
    ];
    for (name, identity_ref, identity, uses, expected) in cases {
        let t = Tenancy { namespace: "tenant-b", namespace_labels: Some(&team_b), identity_ref, identity };
        let got = check(&t, uses).map_err(|r| r.reason);
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn a_refusal_names_the_objects_and_the_fix() {
    let t = Tenancy { namespace: "tenant-b", ..Default::default() };
    let refusal = check(&t, &[use_of("tenant-a", "theirs")]).unwrap_err();
    assert_eq!(refusal.reason, reason::CREDENTIALS_NOT_ALLOWED);
    assert!(refusal.message.contains("tenant-a/theirs"), "{}", refusal.message);
    assert!(refusal.message.contains("spec.identityRef"), "{}", refusal.message);
    let provider = identity("mcm-system", "creds", list(&["tenant-c"]));
    let named = IdentityReference { kind: IDENTITY_KIND.into(), name: "id".into() };
    let t =
        Tenancy { namespace: "tenant-b", identity_ref: Some(&named), identity: Some(&provider), ..Default::default() };
    let refusal = check(&t, &[]).unwrap_err();
    assert_eq!(refusal.message, "MCMClusterIdentity id does not allow namespace tenant-b (spec.allowedNamespaces)");
}
