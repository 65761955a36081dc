//! `--controllers`, kube-controller-manager style: a comma-separated list where `*` means every controller that is
//! on by default, `foo` enables `foo` and `-foo` disables it (a disable wins). The MCM flavour's controllers are on
//! by default; the CAPI side's groups — `infrastructure` (MCMMachine, MCMCluster, MCMMachineTemplate) and `capi`
//! (MachineDeployment, MachineSet and Machine on `cluster.x-k8s.io`, MCM core) — run only when named, as
//! kube-controller-manager's off-by-default controllers do. [`KNOWN`] is the one list of names.

use std::collections::BTreeSet;

/// The CAPI infrastructure provider's controllers ([`crate::controllers::InfraControllers`]).
pub const INFRASTRUCTURE: &str = "infrastructure";
/// The CAPI core-mode controllers (`ControllerOptions::capi_core`).
pub const CAPI: &str = "capi";

/// Names `*` leaves out: each must be named to run.
pub const OFF_BY_DEFAULT: &[&str] = &[INFRASTRUCTURE, CAPI];

/// Every controller (or group) `mcm run` knows, by name: the MCM flavour's, then the CAPI side's.
pub const KNOWN: &[&str] = &[
    crate::controllers::CONTROLLER_NAMES[0],
    crate::controllers::CONTROLLER_NAMES[1],
    crate::controllers::CONTROLLER_NAMES[2],
    crate::controllers::CONTROLLER_NAMES[3],
    crate::controllers::CONTROLLER_NAMES[4],
    INFRASTRUCTURE,
    CAPI,
];

/// A `--controllers` value that cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// A name that is not a controller.
    #[error("--controllers: unknown controller {name:?} (known: {known})")]
    Unknown {
        /// The name.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// Nothing was listed.
    #[error("--controllers: the list is empty (use * for every controller on by default)")]
    Empty,
    /// Everything listed is disabled.
    #[error("--controllers: {list:?} leaves no controller to run")]
    Nothing {
        /// The list.
        list: String,
    },
}

/// The controllers of `known` that `list` leaves disabled; `*` enables those not in `off_by_default`.
pub fn disabled(list: &str, known: &[&str], off_by_default: &[&str]) -> Result<BTreeSet<String>, SelectionError> {
    let items: Vec<&str> = list.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if items.is_empty() {
        return Err(SelectionError::Empty);
    }
    let check = |name: &str| {
        if known.contains(&name) {
            Ok(name.to_string())
        } else {
            Err(SelectionError::Unknown { name: name.to_string(), known: known.join(", ") })
        }
    };
    let mut all = false;
    let mut on = BTreeSet::new();
    let mut off = BTreeSet::new();
    for item in items {
        if item == "*" {
            all = true;
        } else if let Some(name) = item.strip_prefix('-') {
            off.insert(check(name)?);
        } else {
            on.insert(check(item)?);
        }
    }
    let enabled = |k: &str| !off.contains(k) && (on.contains(k) || (all && !off_by_default.contains(&k)));
    let disabled: BTreeSet<String> = known.iter().filter(|k| !enabled(k)).map(|k| k.to_string()).collect();
    if disabled.len() == known.len() {
        return Err(SelectionError::Nothing { list: list.to_string() });
    }
    Ok(disabled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn lists_select_like_kube_controller_manager() {
        let known = ["a", "b", "c", "x"];
        let off_by_default = ["x"];
        let rows: [(&str, Result<BTreeSet<String>, SelectionError>); 11] = [
            ("*", Ok(set(&["x"]))),
            ("*,-b", Ok(set(&["b", "x"]))),
            ("a", Ok(set(&["b", "c", "x"]))),
            ("a, c", Ok(set(&["b", "x"]))),
            ("-a,*", Ok(set(&["a", "x"]))),
            ("x", Ok(set(&["a", "b", "c"]))),
            ("*,x", Ok(set(&[]))),
            ("x,-x,a", Ok(set(&["b", "c", "x"]))),
            ("", Err(SelectionError::Empty)),
            ("*,-y", Err(SelectionError::Unknown { name: "y".into(), known: "a, b, c, x".into() })),
            ("-a", Err(SelectionError::Nothing { list: "-a".into() })),
        ];
        for (list, expected) in rows {
            assert_eq!(disabled(list, &known, &off_by_default), expected, "{list:?}");
        }
    }

    #[test]
    fn the_default_is_the_mcm_flavour_and_capi_groups_are_named() {
        assert_eq!(disabled("*", KNOWN, OFF_BY_DEFAULT).unwrap(), set(&[INFRASTRUCTURE, CAPI]));
        assert_eq!(disabled("*,-safety", KNOWN, OFF_BY_DEFAULT).unwrap(), set(&["safety", INFRASTRUCTURE, CAPI]));
        let infra_only = disabled("infrastructure", KNOWN, OFF_BY_DEFAULT).unwrap();
        assert_eq!(infra_only.len(), KNOWN.len() - 1);
        assert!(!infra_only.contains(INFRASTRUCTURE));
        assert_eq!(disabled("*,infrastructure,capi", KNOWN, OFF_BY_DEFAULT).unwrap(), set(&[]));
        for name in crate::controllers::CONTROLLER_NAMES {
            assert!(KNOWN.contains(&name), "{name}");
        }
    }
}
