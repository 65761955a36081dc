//! `--controllers`, kube-controller-manager style: a comma-separated list where `*` means every controller, `foo`
//! enables `foo` and `-foo` disables it (a disable wins over `*`). [`KNOWN`] is the one list of names; the CAPI
//! infrastructure controllers join it when they land.

use std::collections::BTreeSet;

/// Every controller `mcm run` knows, by name.
pub const KNOWN: &[&str] = &crate::controllers::CONTROLLER_NAMES;

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
    #[error("--controllers: the list is empty (use * for every controller)")]
    Empty,
}

/// The controllers of `known` that `list` leaves disabled.
pub fn disabled(list: &str, known: &[&str]) -> Result<BTreeSet<String>, SelectionError> {
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
    Ok(known.iter().map(|k| k.to_string()).filter(|k| off.contains(k) || !(all || on.contains(k))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_select_like_kube_controller_manager() {
        let known = ["a", "b", "c"];
        let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let rows: [(&str, Result<BTreeSet<String>, SelectionError>); 7] = [
            ("*", Ok(set(&[]))),
            ("*,-b", Ok(set(&["b"]))),
            ("a", Ok(set(&["b", "c"]))),
            ("a, c", Ok(set(&["b"]))),
            ("-a,*", Ok(set(&["a"]))),
            ("", Err(SelectionError::Empty)),
            ("*,-x", Err(SelectionError::Unknown { name: "x".into(), known: "a, b, c".into() })),
        ];
        for (list, expected) in rows {
            assert_eq!(disabled(list, &known), expected, "{list:?}");
        }
    }

    #[test]
    fn known_names_are_the_controllers() {
        assert!(KNOWN.contains(&"machine") && KNOWN.contains(&"machinedeployment"));
        assert_eq!(disabled("*,-safety", KNOWN).unwrap(), BTreeSet::from(["safety".to_string()]));
    }
}
