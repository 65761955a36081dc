//! The conversion layer: hub (MCM) and CAPI objects converted both ways.

use std::fmt::Debug;

use serde::de::DeserializeOwned;

use crate::api::{capi, infra, mcm};
use crate::convert::{self, machine};

/// `to`, then `from`, then `to` again gives what `to` gave (compared by `parts`, what the conversion promises to
/// keep). The round trips hold on objects in normal form (no empty maps, no conversion annotations set by hand:
/// `crate::convert`), and what `to` makes is in normal form, whatever the input was.
fn settles<A, B, K: PartialEq + Debug>(
    what: &str,
    start: &A,
    to: impl Fn(&A) -> B,
    from: impl Fn(&B) -> A,
    parts: impl Fn(&B) -> K,
) {
    let once = to(start);
    let twice = to(&from(&once));
    let (once, twice) = (parts(&once), parts(&twice));
    assert!(twice == once, "{what}: a converted object does not round-trip:\nonce:  {once:?}\ntwice: {twice:?}");
}

/// Machines have no `PartialEq`: compared as JSON.
fn json<T: serde::Serialize>(value: &T) -> Option<serde_json::Value> {
    serde_json::to_value(value).ok()
}

fn decode<T: DeserializeOwned>(body: &str) -> Option<T> {
    serde_json::from_str(body).ok()
}

/// Input: a header line `<hub|capi> <deployment|machineset|template|deployment-status|set-status|machine>`, then
/// the object as JSON (for `machine`: a hub Machine, or an MCMMachine on the CAPI side). Invariant: see
/// [`settles`], from either side.
pub fn convert_roundtrip(data: &[u8]) {
    let Some((line, body)) = super::header(data) else { return };
    let mut words = line.split_whitespace();
    let (Some(side), Some(kind)) = (words.next(), words.next()) else { return };
    let what = format!("{side} {kind}");
    match (side, kind) {
        ("hub", "deployment") => {
            let Some(d) = decode::<mcm::MachineDeployment>(body) else { return };
            settles(&what, &d, convert::deployment_to_capi, convert::deployment_from_capi, |c| {
                (c.metadata.clone(), c.spec.clone(), c.status.clone())
            });
        }
        ("capi", "deployment") => {
            let Some(d) = decode::<capi::MachineDeployment>(body) else { return };
            settles(&what, &d, convert::deployment_from_capi, convert::deployment_to_capi, |h| {
                (h.metadata.clone(), h.spec.clone(), h.status.clone())
            });
        }
        ("hub", "machineset") => {
            let Some(s) = decode::<mcm::MachineSet>(body) else { return };
            settles(&what, &s, convert::machine_set_to_capi, convert::machine_set_from_capi, |c| {
                (c.metadata.clone(), c.spec.clone(), c.status.clone())
            });
        }
        ("capi", "machineset") => {
            let Some(s) = decode::<capi::MachineSet>(body) else { return };
            settles(&what, &s, convert::machine_set_from_capi, convert::machine_set_to_capi, |h| {
                (h.metadata.clone(), h.spec.clone(), h.status.clone())
            });
        }
        ("hub", "template") => {
            let Some(t) = decode::<mcm::MachineTemplateSpec>(body) else { return };
            settles(&what, &t, convert::template_to_capi, convert::template_from_capi, Clone::clone);
        }
        ("capi", "template") => {
            let Some(t) = decode::<capi::MachineTemplateSpec>(body) else { return };
            settles(&what, &t, convert::template_from_capi, convert::template_to_capi, Clone::clone);
        }
        ("hub", "deployment-status") => {
            let Some(s) = decode::<mcm::MachineDeploymentStatus>(body) else { return };
            settles(&what, &s, convert::deployment_status_to_capi, convert::deployment_status_from_capi, Clone::clone);
        }
        ("capi", "deployment-status") => {
            let Some(s) = decode::<capi::MachineDeploymentStatus>(body) else { return };
            settles(&what, &s, convert::deployment_status_from_capi, convert::deployment_status_to_capi, Clone::clone);
        }
        ("hub", "set-status") => {
            let Some(s) = decode::<mcm::MachineSetStatus>(body) else { return };
            settles(&what, &s, convert::set_status_to_capi, convert::set_status_from_capi, Clone::clone);
        }
        ("capi", "set-status") => {
            let Some(s) = decode::<capi::MachineSetStatus>(body) else { return };
            settles(&what, &s, convert::set_status_from_capi, convert::set_status_to_capi, Clone::clone);
        }
        ("hub", "machine") => {
            let Some(m) = decode::<mcm::Machine>(body) else { return };
            settles(&what, &m, machine::from_hub, |i| machine::to_hub(i, None), json);
        }
        ("capi", "machine") => {
            let Some(m) = decode::<infra::MCMMachine>(body) else { return };
            settles(&what, &m, |i| machine::to_hub(i, None), machine::from_hub, json);
        }
        _ => {}
    }
}
