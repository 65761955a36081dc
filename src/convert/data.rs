//! The annotations that carry what one side cannot express, and how they are read and written.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// On a CAPI MachineDeployment or MachineSet: the MCM-only fields of the hub object (JSON).
pub const MCM_DATA: &str = "machine.sapcloud.io/conversion-data";
/// On a CAPI machine template (and so on the Machines created from it): the MCM-only machine fields (JSON).
pub const MCM_MACHINE_DATA: &str = "machine.sapcloud.io/machine-conversion-data";
/// On a hub MachineDeployment or MachineSet: the CAPI-only fields of the CAPI object (JSON).
pub const CAPI_DATA: &str = "capi.machine.sapcloud.io/conversion-data";
/// On a hub machine template (and so on the hub Machines): the CAPI-only Machine spec fields (JSON).
pub const CAPI_MACHINE_DATA: &str = "capi.machine.sapcloud.io/machine-conversion-data";

/// Whether `key` is one of the conversion annotations (the MachineDeployment decisions must not copy them from a
/// deployment to its sets: each object carries its own).
pub fn is_conversion_annotation(key: &str) -> bool {
    [MCM_DATA, MCM_MACHINE_DATA, CAPI_DATA, CAPI_MACHINE_DATA].contains(&key)
}

/// Removes annotation `key` and reads it as `T`. An annotation that does not parse is left in place (it is the
/// user's, or another version's) and reads as absent. An emptied map becomes `None`.
pub(crate) fn take<T: DeserializeOwned + Default>(annotations: &mut Option<BTreeMap<String, String>>, key: &str) -> T {
    let Some(map) = annotations.as_mut() else { return T::default() };
    let Some(parsed) = map.get(key).and_then(|raw| serde_json::from_str::<T>(raw).ok()) else {
        return T::default();
    };
    map.remove(key);
    if map.is_empty() {
        *annotations = None;
    }
    parsed
}

/// Writes `value` as JSON into annotation `key`, unless it equals its default (then nothing is written).
pub(crate) fn put<T: Serialize + Default + PartialEq>(
    annotations: &mut Option<BTreeMap<String, String>>,
    key: &str,
    value: &T,
) {
    if *value == T::default() {
        return;
    }
    // Serializing plain data with string keys cannot fail.
    if let Ok(json) = serde_json::to_string(value) {
        annotations.get_or_insert_with(BTreeMap::new).insert(key.to_string(), json);
    }
}

pub(crate) fn is_zero(v: &i32) -> bool {
    *v == 0
}

pub(crate) fn is_false(v: &bool) -> bool {
    !*v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployments_do_not_copy_their_conversion_data_to_their_sets() {
        use crate::lifecycle::machine_deployment::revision::skip_copy;
        assert!(skip_copy(MCM_DATA) && skip_copy(CAPI_DATA));
        assert!(!skip_copy(MCM_MACHINE_DATA) && !skip_copy(CAPI_MACHINE_DATA), "template data is not on deployments");
    }

    #[test]
    fn take_leaves_unparseable_annotations_alone() {
        let mut a = Some(BTreeMap::from([(MCM_DATA.to_string(), "{not json".to_string())]));
        let v: BTreeMap<String, i32> = take(&mut a, MCM_DATA);
        assert!(v.is_empty());
        assert_eq!(a.as_ref().map(BTreeMap::len), Some(1));
    }

    #[test]
    fn take_collapses_an_emptied_map() {
        let mut a = Some(BTreeMap::from([(MCM_DATA.to_string(), "{\"a\":1}".to_string())]));
        let v: BTreeMap<String, i32> = take(&mut a, MCM_DATA);
        assert_eq!(v.get("a"), Some(&1));
        assert_eq!(a, None);
    }

    #[test]
    fn put_skips_defaults() {
        let mut a = None;
        put(&mut a, MCM_DATA, &BTreeMap::<String, i32>::new());
        assert_eq!(a, None);
    }
}
