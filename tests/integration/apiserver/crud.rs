//! Create, read, update, patch, delete, selectors, pagination, conflicts.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use serde_json::json;

use crate::support::start;

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn create_get_update_delete_a_configmap() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some() && meta.resource_version.is_some());
    assert_eq!(meta.namespace.as_deref(), Some("default"));

    let mut fetched = api.get("a").await.unwrap();
    assert_eq!(fetched.metadata.uid, created.metadata.uid);
    fetched.data = Some([("k".to_string(), "w".to_string())].into());
    let updated = api.replace("a", &PostParams::default(), &fetched).await.unwrap();
    assert_ne!(updated.metadata.resource_version, created.metadata.resource_version);

    // A stale resourceVersion is a conflict.
    let err = api.replace("a", &PostParams::default(), &fetched).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"), "{err}");

    let err = api.create(&PostParams::default(), &cm("a", &[])).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"), "{err}");

    api.delete("a", &DeleteParams::default()).await.unwrap();
    let err = api.get("a").await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 404 && s.message == "configmaps \"a\" not found"), "{err}");
}

#[tokio::test]
async fn generate_name_and_missing_namespace() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut c = cm("", &[]);
    c.metadata.name = None;
    c.metadata.generate_name = Some("gen-".into());
    let created = api.create(&PostParams::default(), &c).await.unwrap();
    let name = created.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let missing: Api<ConfigMap> = Api::namespaced(client, "nope");
    let err = missing.create(&PostParams::default(), &cm("x", &[])).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404 && s.message.contains("namespaces \"nope\" not found")),
        "{err}"
    );
}

#[tokio::test]
async fn label_and_field_selectors_and_pagination() {
    let (_server, client) = start().await;
    let ns: Api<Namespace> = Api::all(client.clone());
    ns.create(
        &PostParams::default(),
        &Namespace { metadata: ObjectMeta { name: Some("other".into()), ..Default::default() }, ..Default::default() },
    )
    .await
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..7 {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        api.create(&PostParams::default(), &cm(&format!("c{i}"), &[("tier", tier), ("app", "x")])).await.unwrap();
    }
    Api::<ConfigMap>::namespaced(client.clone(), "other")
        .create(&PostParams::default(), &cm("c0", &[("tier", "even")]))
        .await
        .unwrap();

    let names =
        |l: kube::api::ObjectList<ConfigMap>| l.items.into_iter().map(|c| c.metadata.name.unwrap()).collect::<Vec<_>>();
    assert_eq!(names(api.list(&ListParams::default().labels("tier=even")).await.unwrap()), ["c0", "c2", "c4", "c6"]);
    assert_eq!(names(api.list(&ListParams::default().labels("tier in (odd),app")).await.unwrap()), ["c1", "c3", "c5"]);
    assert_eq!(
        names(api.list(&ListParams::default().labels("tier!=even,!missing")).await.unwrap()),
        ["c1", "c3", "c5"]
    );
    assert_eq!(names(api.list(&ListParams::default().fields("metadata.name=c3")).await.unwrap()), ["c3"]);
    let all: Api<ConfigMap> = Api::all(client.clone());
    assert_eq!(all.list(&ListParams::default().labels("tier=even")).await.unwrap().items.len(), 5);
    assert_eq!(all.list(&ListParams::default().fields("metadata.namespace=other")).await.unwrap().items.len(), 1);

    // Pages of 3: continue tokens walk the whole list exactly once.
    let mut seen = Vec::new();
    let mut params = ListParams::default().limit(3);
    loop {
        let page = api.list(&params).await.unwrap();
        let token = page.metadata.continue_.clone();
        seen.extend(names(page));
        match token {
            Some(t) if !t.is_empty() => params = params.continue_token(&t),
            _ => break,
        }
    }
    assert_eq!(seen, ["c0", "c1", "c2", "c3", "c4", "c5", "c6"]);

    // Bad selectors are 400s that name the problem.
    let err = api.list(&ListParams::default().labels("tier in (")).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 400 && s.message.contains("labelSelector")), "{err}");
    let err = api.list(&ListParams::default().fields("data.k=v")).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400 && s.message.contains("field label not supported: data.k")),
        "{err}"
    );
}

#[tokio::test]
async fn patches_merge_json_and_strategic() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &cm("p", &[("a", "1")])).await.unwrap();
    let pp = PatchParams::default();
    let merged =
        api.patch("p", &pp, &Patch::Merge(json!({"metadata": {"labels": {"b": "2", "a": null}}}))).await.unwrap();
    assert_eq!(merged.metadata.labels.unwrap(), [("b".to_string(), "2".to_string())].into());
    let json_patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "replace", "path": "/data/k", "value": "z"}
    ]))
    .unwrap();
    let patched = api.patch("p", &pp, &Patch::<()>::Json(json_patch)).await.unwrap();
    assert_eq!(patched.data.unwrap()["k"], "z");
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/k", "value": "nope"}])).unwrap();
    let err = api.patch("p", &pp, &Patch::<()>::Json(failing)).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 422), "{err}");
    let strategic = api.patch("p", &pp, &Patch::Strategic(json!({"data": {"x": "y"}}))).await.unwrap();
    assert_eq!(strategic.data.unwrap().len(), 2);
    // A merge patch carrying a stale resourceVersion is a conflict.
    let err = api
        .patch("p", &pp, &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"q": "r"}})))
        .await
        .unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 409), "{err}");
}

#[tokio::test]
async fn server_side_apply_creates_then_updates() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PatchParams::apply("test-manager").force();
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "1"}});
    let created = api.patch("ssa", &pp, &Patch::Apply(&body)).await.unwrap();
    assert_eq!(created.data.unwrap()["a"], "1");
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"b": "2"}});
    let updated = api.patch("ssa", &pp, &Patch::Apply(&body)).await.unwrap();
    assert_eq!(updated.data.unwrap()["b"], "2");
}

#[tokio::test]
async fn unchanged_writes_keep_the_resource_version() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api.create(&PostParams::default(), &cm("same", &[("a", "1")])).await.unwrap();
    let patched = api
        .patch("same", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": "1"}}})))
        .await
        .unwrap();
    assert_eq!(patched.metadata.resource_version, created.metadata.resource_version);
}

#[tokio::test]
async fn server_side_apply_detects_conflicts_between_managers() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let config =
        |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}, "data": {"k": v}});
    api.patch("owned", &PatchParams::apply("first"), &Patch::Apply(config("1"))).await.unwrap();
    // The same value is no conflict; another value is.
    api.patch("owned", &PatchParams::apply("second"), &Patch::Apply(config("1"))).await.unwrap();
    let err = api.patch("owned", &PatchParams::apply("second"), &Patch::Apply(config("2"))).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.message.contains("conflict with \"first\": .data.k")),
        "{err}"
    );
    let forced = api.patch("owned", &PatchParams::apply("second").force(), &Patch::Apply(config("2"))).await.unwrap();
    assert_eq!(forced.data.unwrap()["k"], "2");
    let managers: Vec<String> = forced.metadata.managed_fields.unwrap().into_iter().filter_map(|m| m.manager).collect();
    assert_eq!(managers, ["second"], "forcing took the field over");
}
