//! Reading and writing the standard parts of an object held as JSON (`metadata`, `apiVersion`, `kind`).

use serde_json::{Map, Value, json};

/// `metadata.<field>` as a string.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// `metadata.name` ("" when absent).
pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or_default()
}

/// `metadata.namespace` ("" when absent).
pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or_default()
}

/// `metadata.uid` ("" when absent).
pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or_default()
}

/// Whether two states of a stored object are the same write: every write gives a new resourceVersion (the store
/// parses objects afresh on each read, so identity of the parsed values says nothing).
pub fn same_resource_version(a: &Value, b: &Value) -> bool {
    meta_str(a, "resourceVersion").is_some_and(|rv| meta_str(b, "resourceVersion") == Some(rv))
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn is_deleting(obj: &Value) -> bool {
    meta_str(obj, "deletionTimestamp").is_some()
}

/// `metadata.finalizers`.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Replaces `metadata.finalizers` (removing the field when empty).
pub fn set_finalizers(obj: &mut Value, finalizers: &[String]) {
    let meta = metadata_mut(obj);
    if finalizers.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert("finalizers".into(), json!(finalizers));
    }
}

/// `metadata.labels`.
pub fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.get("labels")?.as_object()
}

/// The `uid`s of `metadata.ownerReferences`.
pub fn owner_uids(obj: &Value) -> Vec<String> {
    owner_refs(obj).iter().filter_map(|r| r["uid"].as_str().map(str::to_string)).collect()
}

/// `metadata.ownerReferences`.
pub fn owner_refs(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/ownerReferences").and_then(Value::as_array).cloned().unwrap_or_default()
}

/// `metadata` as a mutable map, created when missing or not an object.
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let Some(map) = obj.as_object_mut() else { unreachable!("made an object above") };
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    match meta.as_object_mut() {
        Some(m) => m,
        None => unreachable!("made an object above"),
    }
}

/// Sets `metadata.<field>`.
pub fn set_meta(obj: &mut Value, field: &str, value: Value) {
    metadata_mut(obj).insert(field.to_string(), value);
}

/// The current time as Kubernetes writes timestamps (RFC 3339, seconds, UTC).
pub fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A random suffix as `generateName` uses: 5 characters from kube's alphabet (no vowels, no look-alikes).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes.iter().take(5).map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char).collect()
}

/// Checks a name against kube's DNS-1123 subdomain rule (most kinds) or label rule (namespaces).
pub fn validate_name(name: &str, dns_label: bool) -> Result<(), String> {
    let max = if dns_label { 63 } else { 253 };
    if name.is_empty() {
        return Err("name or generateName is required".into());
    }
    if name.len() > max {
        return Err(format!("must be no more than {max} characters"));
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (!dns_label && c == '.');
    let starts_ends = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
    };
    let parts_ok = if dns_label { starts_ends(name) } else { name.split('.').all(starts_ends) };
    if !name.chars().all(ok_char) || !parts_ok {
        return Err(if dns_label {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into()
        } else {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into()
        });
    }
    Ok(())
}

/// Reads a JSON path like `.spec.replicas` (dots only, as scale subresource paths are).
pub fn get_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.trim_start_matches('.').split('.').filter(|s| !s.is_empty()).try_fold(obj, |v, key| v.get(key))
}

/// Writes a JSON path like `.spec.replicas`, creating objects on the way.
pub fn set_path(obj: &mut Value, path: &str, value: Value) {
    let keys: Vec<&str> = path.trim_start_matches('.').split('.').filter(|s| !s.is_empty()).collect();
    let mut cur = obj;
    for (i, key) in keys.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(map) = cur.as_object_mut() else { return };
        if i + 1 == keys.len() {
            map.insert(key.to_string(), value);
            return;
        }
        cur = map.entry(key.to_string()).or_insert_with(|| json!({}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated_like_kubernetes() {
        for ok in ["a", "my-name", "123-abc", "machine.sapcloud.io"] {
            assert!(validate_name(ok, false).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a..b", &"x".repeat(254)] {
            assert!(validate_name(bad, false).is_err(), "{bad}");
        }
        assert!(validate_name("a.b", true).is_err());
    }

    #[test]
    fn paths_read_and_write() {
        let mut obj = json!({"spec": {"replicas": 3}});
        assert_eq!(get_path(&obj, ".spec.replicas"), Some(&json!(3)));
        set_path(&mut obj, ".status.replicas", json!(2));
        assert_eq!(obj["status"]["replicas"], 2);
    }

    #[test]
    fn random_suffixes_use_kube_alphabet() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }
}
