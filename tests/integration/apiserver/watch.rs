//! Watches: kube-runtime watchers see every change, across closed watches and expired resourceVersions.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use mcm::apiserver::ServerConfig;
use serde_json::json;

use crate::support::{start, start_with, wait_until};

fn cm(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": value}})).unwrap()
}

/// The reflector's view: name -> value of `data.v`.
fn view(store: &reflector::Store<ConfigMap>) -> BTreeMap<String, String> {
    store
        .state()
        .iter()
        .map(|c| {
            (c.metadata.name.clone().unwrap(), c.data.as_ref().and_then(|d| d.get("v").cloned()).unwrap_or_default())
        })
        .collect()
}

#[tokio::test]
async fn raw_watch_streams_added_modified_deleted_and_bookmarks() {
    let config = ServerConfig { bookmark_interval: Duration::from_millis(50), ..Default::default() };
    let (_server, client) = start_with(config).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut stream = api.watch(&WatchParams::default().timeout(10), &rv).await.unwrap().boxed();
    api.create(&PostParams::default(), &cm("w", "1")).await.unwrap();
    api.patch("w", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}}))).await.unwrap();
    api.delete("w", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    let mut bookmarks = 0;
    while seen.len() < 3 || bookmarks == 0 {
        match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await.unwrap().unwrap().unwrap() {
            WatchEvent::Added(c) => seen.push(format!("ADDED {}", c.data.unwrap()["v"])),
            WatchEvent::Modified(c) => seen.push(format!("MODIFIED {}", c.data.unwrap()["v"])),
            WatchEvent::Deleted(c) => seen.push(format!("DELETED {}", c.data.unwrap()["v"])),
            WatchEvent::Bookmark(b) => {
                assert!(!b.metadata.resource_version.is_empty());
                bookmarks += 1;
            }
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(seen, ["ADDED 1", "MODIFIED 2", "DELETED 2"]);
}

#[tokio::test]
async fn watching_from_an_expired_version_reports_410() {
    let config = ServerConfig { history_limit: 2, ..Default::default() };
    let (_server, client) = start_with(config).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let first = api.create(&PostParams::default(), &cm("a", "1")).await.unwrap();
    for i in 0..5 {
        api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": i.to_string()}}))).await.unwrap();
    }
    let rv = first.metadata.resource_version.unwrap();
    let mut stream = api.watch(&WatchParams::default().timeout(5), &rv).await.unwrap().boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert!(e.message.starts_with("too old resource version"), "{}", e.message);
        }
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

#[tokio::test]
async fn selector_transitions_become_added_and_deleted() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = api.watch(&WatchParams::default().labels("pick=yes").timeout(10), &rv).await.unwrap().boxed();
    api.create(&PostParams::default(), &cm("s", "1")).await.unwrap();
    api.patch("s", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"pick": "yes"}}})))
        .await
        .unwrap();
    api.patch("s", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"pick": "no"}}})))
        .await
        .unwrap();
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await.unwrap().unwrap().unwrap() {
            WatchEvent::Added(_) => kinds.push("ADDED"),
            WatchEvent::Deleted(_) => kinds.push("DELETED"),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(kinds, ["ADDED", "DELETED"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reflector_survives_closed_watches_and_expired_versions() {
    let config = ServerConfig { history_limit: 3, ..Default::default() };
    let (server, client) = start_with(config).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let (reader, writer) = reflector::store();
    let relists = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = relists.clone();
    let stream = watcher(api.clone(), watcher::Config::default())
        .inspect_ok(move |e| {
            if matches!(e, watcher::Event::Init) {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();

    let mut expected = BTreeMap::new();
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), "0")).await.unwrap();
        expected.insert(format!("c{i}"), "0".to_string());
    }
    wait_until("the first objects", Duration::from_secs(10), || async { (view(&reader) == expected).then_some(()) })
        .await;

    // A dropped connection: the watcher resumes from its last resourceVersion.
    server.close_watches();
    api.patch("c0", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "1"}}))).await.unwrap();
    expected.insert("c0".into(), "1".into());
    wait_until("the change after a closed watch", Duration::from_secs(10), || async {
        (view(&reader) == expected).then_some(())
    })
    .await;

    // Drop the watch and make more changes than the history keeps before it can resume: it must relist. The
    // writes go straight into the store while the lock keeps the watcher from reconnecting in between.
    let before = relists.load(std::sync::atomic::Ordering::SeqCst);
    let shared = server.shared().clone();
    tokio::task::spawn_blocking(move || {
        let mut store = shared.lock();
        shared.close_watches.send_modify(|n| *n += 1);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while shared.open_watches() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(shared.open_watches(), 0, "the old watch ended");
        let gr = mcm::apiserver::resources::GroupResource::new("", "configmaps");
        for i in 0..6 {
            let key = ("default".to_string(), format!("c{}", i % 5));
            let mut obj = (*store.get(&gr, &key).unwrap()).clone();
            obj["data"]["v"] = json!(format!("x{i}"));
            store.replace(&gr, &key, obj);
        }
    })
    .await
    .unwrap();
    for i in 0..6 {
        expected.insert(format!("c{}", i % 5), format!("x{i}"));
    }
    wait_until("every change after an expired watch", Duration::from_secs(10), || async {
        (view(&reader) == expected).then_some(())
    })
    .await;
    assert!(relists.load(std::sync::atomic::Ordering::SeqCst) > before, "the watcher relisted after a 410");
    api.delete("c4", &DeleteParams::default()).await.unwrap();
    expected.remove("c4");
    server.close_watches();
    api.patch("c1", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "last"}}))).await.unwrap();
    expected.insert("c1".into(), "last".into());
    wait_until("every change after an expired watch", Duration::from_secs(10), || async {
        (view(&reader) == expected).then_some(())
    })
    .await;
    task.abort();
}
