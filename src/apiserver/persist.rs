//! Persistence to a data directory: a snapshot of every object, written shortly after changes and at shutdown,
//! and read back at start, so a restarted `mcm dev --data-dir DIR` keeps its objects.
//!
//! The snapshot is written to a temporary file and renamed into place, so a crash never leaves a torn file; what
//! changed in the last moments before a crash (at most one save interval) is lost. Watch history is not kept:
//! clients resuming a watch after a restart get 410 and relist, as after etcd compaction.

use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::resources::{self, GroupResource};
use super::store::Store;
use super::stored::StoredObject;

const FILE: &str = "apiserver-state.json";

/// Why state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// The file system refused.
    #[error("could not {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The snapshot is not ours or is damaged.
    #[error("the state file {path} is unreadable: {source}")]
    Format {
        /// The path.
        path: String,
        /// The cause.
        source: serde_json::Error,
    },
}

#[derive(Deserialize)]
struct Entry {
    group: String,
    resource: String,
    object: Value,
}

#[derive(Deserialize)]
struct SnapshotIn {
    #[serde(rename = "resourceVersion")]
    resource_version: u64,
    objects: Vec<Entry>,
}

/// The snapshot file inside a data directory.
pub fn state_file(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Reads the store saved in `dir`; an empty store when nothing was saved yet.
pub fn load(dir: &Path, history_limit: usize) -> Result<Store, PersistError> {
    let path = state_file(dir);
    let mut store = Store::new(history_limit);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(store),
        Err(source) => return Err(PersistError::Io { action: "read", path: path.display().to_string(), source }),
    };
    let snapshot: SnapshotIn = serde_json::from_reader(BufReader::new(file))
        .map_err(|source| PersistError::Format { path: path.display().to_string(), source })?;
    // CRDs first: their types must be served before their objects are restored.
    let (crds, others): (Vec<Entry>, Vec<Entry>) = snapshot
        .objects
        .into_iter()
        .partition(|e| e.group == "apiextensions.k8s.io" && e.resource == "customresourcedefinitions");
    for entry in crds {
        match resources::from_crd(&entry.object) {
            Ok(t) => {
                store.registry.insert(t);
            }
            Err(problems) => tracing::warn!(?problems, "a saved CRD can no longer be served"),
        }
        store.restore(&GroupResource::new(&entry.group, &entry.resource), entry.object);
    }
    for entry in others {
        store.restore(&GroupResource::new(&entry.group, &entry.resource), entry.object);
    }
    store.advance_rv(snapshot.resource_version);
    Ok(store)
}

/// Writes a snapshot of `objects` at `rv` into `dir`.
pub fn save(dir: &Path, rv: u64, objects: &[(GroupResource, StoredObject)]) -> Result<(), PersistError> {
    let io = |action, path: &Path| {
        let path = path.display().to_string();
        move |source| PersistError::Io { action, path, source }
    };
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    let path = state_file(dir);
    let tmp = dir.join(format!("{FILE}.tmp"));
    // Secrets are among the objects: the file is the owner's only.
    let file = private_file(&tmp).map_err(io("write", &tmp))?;
    let mut out = BufWriter::new(file);
    write_snapshot(&mut out, rv, objects).map_err(io("write", &tmp))?;
    out.flush().map_err(io("write", &tmp))?;
    out.get_ref().sync_all().map_err(io("sync", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io("replace", &path))?;
    Ok(())
}

/// Writes `{"format":1,"resourceVersion":…,"objects":[{"group":…,"resource":…,"object":…},…]}` with each object's
/// stored JSON as it is, so a snapshot parses nothing.
fn write_snapshot(out: &mut impl Write, rv: u64, objects: &[(GroupResource, StoredObject)]) -> std::io::Result<()> {
    write!(out, "{{\"format\":1,\"resourceVersion\":{rv},\"objects\":[")?;
    for (i, (gr, obj)) in objects.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        out.write_all(b"{\"group\":")?;
        serde_json::to_writer(&mut *out, &gr.group)?;
        out.write_all(b",\"resource\":")?;
        serde_json::to_writer(&mut *out, &gr.resource)?;
        out.write_all(b",\"object\":")?;
        out.write_all(obj.json())?;
        out.write_all(b"}")?;
    }
    out.write_all(b"]}")
}

/// Creates (or truncates) `path` readable and writable by the owner only, before anything is written to it.
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let file = options.open(path)?;
    // A file that existed keeps its mode on open: narrow it before writing.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

/// Writes `bytes` (credentials: a kubeconfig, a token, a key) to `path`, creating parent directories, readable by
/// the owner only.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = private_file(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Takes what a snapshot needs under the lock (cheap: reference counts), to serialise outside it.
pub fn capture(store: &Store) -> (u64, Vec<(GroupResource, StoredObject)>) {
    (store.rv(), store.all_objects().map(|(gr, obj)| (gr.clone(), obj.clone())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_saved_store_loads_with_its_crds_objects_and_resource_version() {
        let dir = std::env::temp_dir().join(format!("mcm-persist-{}", uuid::Uuid::new_v4()));
        let mut store = Store::new(10);
        let crd: Value = serde_yaml::from_str(include_str!("../../crds/machine.sapcloud.io_machinesets.yaml")).unwrap();
        store.registry.insert(resources::from_crd(&crd).unwrap());
        store.insert(&GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions"), crd);
        let ms = GroupResource::new("machine.sapcloud.io", "machinesets");
        store.insert(&ms, json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "metadata": {"name": "a", "namespace": "default", "uid": "u1"}}));
        let (rv, objects) = capture(&store);
        save(&dir, rv, &objects).unwrap();

        let loaded = load(&dir, 10).unwrap();
        assert_eq!(loaded.rv(), rv);
        assert!(loaded.registry.lookup("machine.sapcloud.io", "v1alpha1", "machinesets").is_some());
        let key = ("default".to_string(), "a".to_string());
        let saved = store.stored(&ms, &key).unwrap().json();
        assert_eq!(loaded.stored(&ms, &key).unwrap().json(), saved, "restored byte for byte");
        let snapshot: Value = serde_json::from_slice(&std::fs::read(state_file(&dir)).unwrap()).unwrap();
        assert_eq!(snapshot["format"], 1);
        assert_eq!(snapshot["resourceVersion"], rv);
        assert_eq!(snapshot["objects"].as_array().unwrap().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_snapshot_is_an_empty_store_and_a_damaged_one_an_error() {
        let dir = std::env::temp_dir().join(format!("mcm-persist-{}", uuid::Uuid::new_v4()));
        assert_eq!(load(&dir, 10).unwrap().count(&GroupResource::new("", "configmaps")), 0);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(state_file(&dir), "{broken").unwrap();
        let Err(err) = load(&dir, 10) else { panic!("a damaged snapshot loaded") };
        let err = err.to_string();
        assert!(err.contains("unreadable"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
