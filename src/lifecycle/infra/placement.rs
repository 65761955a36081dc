//! Where an MCMMachine's VM goes (`docs/infrastructure-provider.md`, "Failure domains"): the Machine's failure
//! domain written into the field of the class's providerSpec that places the VM, or a refusal when the class
//! cannot honour it (then no VM is made: a VM silently placed elsewhere makes KubeadmControlPlane believe
//! machines are spread when they are not). And, once the VM exists, the zone it reports.
//!
//! | provider | failure domain | written to |
//! |---|---|---|
//! | InMemory | any name | `zone` |
//! | GCP | a zone of the class's `region` | `zone` |
//! | Azure | a zone number (`1`, `2`, `3`), the class in no availability set or scale set | `properties.zone` |
//! | AWS | a zone of the class's `subnetsByZone` | `networkInterfaces[].subnetID` |

use serde_json::Value;

use crate::providers::contract::identity;

/// The AWS providerSpec field mapping zones to subnets: `{<zone>: <subnet ID>}` (the first network interface's
/// subnet) or `{<zone>: [<subnet ID>, ...]}` (one per network interface, in order). Ours, not Gardener's: its AWS
/// provider decodes the providerSpec leniently and ignores it, so a class carrying it may still be shared.
pub const AWS_SUBNETS_BY_ZONE: &str = "subnetsByZone";

/// Azure's VM grouping fields that exclude a zone.
const AZURE_GROUPS: &[&str] = &["availabilitySet", "virtualMachineScaleSet", "machineSet"];

/// The providerSpec with the VM placed in `failure_domain` (see the module table), or why it cannot be: the
/// message names the failure domain and the class field at fault. No failure domain: the spec unchanged.
pub fn place(provider: &str, provider_spec: &Value, failure_domain: Option<&str>) -> Result<Value, String> {
    let mut spec = provider_spec.clone();
    let Some(fd) = failure_domain.filter(|f| !f.is_empty()) else {
        return Ok(spec);
    };
    if spec.is_null() {
        spec = Value::Object(Default::default());
    }
    match provider {
        "InMemory" => set(&mut spec, "zone", Value::String(fd.to_string())),
        "GCP" => {
            if let Some(region) = spec.get("region").and_then(Value::as_str).filter(|r| !r.is_empty())
                && !fd.starts_with(&format!("{region}-"))
            {
                return Err(format!("failure domain {fd:?} is not a zone of the class's region {region:?}"));
            }
            set(&mut spec, "zone", Value::String(fd.to_string()));
        }
        "Azure" => {
            let zone = fd.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                format!("failure domain {fd:?} is not an Azure zone number (1, 2, 3): Azure places VMs by zone number")
            })?;
            if let Some(group) =
                AZURE_GROUPS.iter().find(|k| spec.pointer(&format!("/properties/{k}")).is_some_and(|v| !v.is_null()))
            {
                return Err(format!(
                    "the class places its VMs in properties.{group}, which excludes a zone: failure domain {fd:?} \
                     cannot be honoured (use a class without {group} for machines with a failure domain)"
                ));
            }
            if let Some(properties) = spec.get_mut("properties") {
                set(properties, "zone", Value::from(zone));
            } else {
                set(&mut spec, "properties", serde_json::json!({ "zone": zone }));
            }
        }
        "AWS" => place_aws(&mut spec, fd)?,
        _ => {}
    }
    Ok(spec)
}

fn set(object: &mut Value, key: &str, value: Value) {
    if let Some(o) = object.as_object_mut() {
        o.insert(key.to_string(), value);
    }
}

/// AWS: the subnets `subnetsByZone` gives `fd`, into `networkInterfaces[].subnetID`.
fn place_aws(spec: &mut Value, fd: &str) -> Result<(), String> {
    let field = format!("providerSpec.{AWS_SUBNETS_BY_ZONE}");
    let Some(map) = spec.get(AWS_SUBNETS_BY_ZONE).filter(|m| !m.is_null()) else {
        return Err(format!(
            "the class maps no zones to subnets ({field}): failure domain {fd:?} cannot be honoured (AWS places a VM \
             by its subnet)"
        ));
    };
    let map = map.as_object().ok_or_else(|| format!("{field}: must be an object of zone to subnet ID"))?;
    let Some(entry) = map.get(fd) else {
        let zones: Vec<&str> = map.keys().map(String::as_str).collect();
        return Err(format!("{field} has no subnet for failure domain {fd:?} (it has: {})", zones.join(", ")));
    };
    let subnets: Vec<String> = match entry {
        Value::String(s) if !s.is_empty() => vec![s.clone()],
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| format!("{field}[{fd:?}]: must be a subnet ID or a list of subnet IDs"))?,
        _ => return Err(format!("{field}[{fd:?}]: must be a subnet ID or a list of subnet IDs")),
    };
    let interfaces = spec
        .get_mut("networkInterfaces")
        .and_then(Value::as_array_mut)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| "providerSpec.networkInterfaces: needs at least one network interface".to_string())?;
    if subnets.len() > 1 && subnets.len() != interfaces.len() {
        return Err(format!(
            "{field}[{fd:?}]: {} subnet IDs for {} network interfaces (give one per interface, or one for the first)",
            subnets.len(),
            interfaces.len()
        ));
    }
    for (nic, subnet) in interfaces.iter_mut().zip(subnets) {
        set(nic, "subnetID", Value::String(subnet));
    }
    Ok(())
}

/// The zone a class places its VMs in, as a failure domain name (the inverse of [`place`]): `zone` of InMemory and
/// GCP, `properties.zone` of Azure. `None` for AWS (the subnet decides) and for a class without one.
pub fn zone_of(provider: &str, provider_spec: &Value) -> Option<String> {
    let zone = match provider {
        "InMemory" | "GCP" => provider_spec.get("zone")?,
        "Azure" => provider_spec.pointer("/properties/zone")?,
        _ => return None,
    };
    match zone {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The failure domain an MCMMachine reports in `status.failureDomain` once its VM exists: the zone the cloud put
/// the VM in, as its providerID says (AWS's zone form, GCE), or else where it was placed (`placed`: the
/// Machine's failure domain, or the zone its class names).
pub fn located(provider_id: Option<&str>, placed: Option<&str>) -> Option<String> {
    provider_id.and_then(identity::zone).or(placed).filter(|z| !z.is_empty()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn placement_in_the_failure_domain() {
        let aws = |map: Value| {
            json!({"region": "r", "subnetsByZone": map,
                   "networkInterfaces": [{"subnetID": "subnet-class", "securityGroupIDs": ["sg"]}]})
        };
        let two_nics =
            |map: Value| json!({"subnetsByZone": map, "networkInterfaces": [{"subnetID": "s-0"}, {"subnetID": "s-1"}]});
        let cases = [
            (
                "in-memory zone",
                "InMemory",
                json!({"cpu": "2"}),
                Some("zone-b"),
                Ok(json!({"cpu": "2", "zone": "zone-b"})),
            ),
            ("in-memory null spec", "InMemory", Value::Null, Some("zone-b"), Ok(json!({"zone": "zone-b"}))),
            ("no failure domain", "InMemory", json!({"zone": "z"}), None, Ok(json!({"zone": "z"}))),
            ("empty failure domain", "InMemory", json!({"zone": "z"}), Some(""), Ok(json!({"zone": "z"}))),
            ("no failure domain, AWS untouched", "AWS", json!({"region": "r"}), None, Ok(json!({"region": "r"}))),
            (
                "AWS: the zone's subnet",
                "AWS",
                aws(json!({"r-a": "subnet-a", "r-b": "subnet-b"})),
                Some("r-b"),
                Ok({
                    let mut s = aws(json!({"r-a": "subnet-a", "r-b": "subnet-b"}));
                    s["networkInterfaces"][0]["subnetID"] = json!("subnet-b");
                    s
                }),
            ),
            (
                "AWS: one subnet per interface",
                "AWS",
                two_nics(json!({"r-a": ["a-0", "a-1"]})),
                Some("r-a"),
                Ok(json!({"subnetsByZone": {"r-a": ["a-0", "a-1"]},
                          "networkInterfaces": [{"subnetID": "a-0"}, {"subnetID": "a-1"}]})),
            ),
            (
                "AWS: one subnet for the first of two interfaces",
                "AWS",
                two_nics(json!({"r-a": "a-0"})),
                Some("r-a"),
                Ok(json!({"subnetsByZone": {"r-a": "a-0"},
                          "networkInterfaces": [{"subnetID": "a-0"}, {"subnetID": "s-1"}]})),
            ),
            (
                "AWS: no map",
                "AWS",
                json!({"region": "r"}),
                Some("r-b"),
                Err("the class maps no zones to subnets (providerSpec.subnetsByZone): failure domain \"r-b\""),
            ),
            (
                "AWS: the zone is not mapped",
                "AWS",
                aws(json!({"r-a": "subnet-a"})),
                Some("r-b"),
                Err("providerSpec.subnetsByZone has no subnet for failure domain \"r-b\" (it has: r-a)"),
            ),
            ("AWS: not an object", "AWS", aws(json!(["x"])), Some("r-a"), Err("must be an object")),
            ("AWS: an empty subnet", "AWS", aws(json!({"r-a": ""})), Some("r-a"), Err("must be a subnet ID")),
            ("AWS: a number", "AWS", aws(json!({"r-a": [1]})), Some("r-a"), Err("must be a subnet ID")),
            (
                "AWS: subnets and interfaces do not pair",
                "AWS",
                two_nics(json!({"r-a": ["a", "b", "c"]})),
                Some("r-a"),
                Err("3 subnet IDs for 2 network interfaces"),
            ),
            (
                "AWS: no interface",
                "AWS",
                json!({"subnetsByZone": {"r-a": "a"}}),
                Some("r-a"),
                Err("needs at least one network interface"),
            ),
            (
                "GCP zone",
                "GCP",
                json!({"zone": "e1-b", "region": "e1"}),
                Some("e1-c"),
                Ok(json!({"zone": "e1-c", "region": "e1"})),
            ),
            (
                "GCP zone of another region",
                "GCP",
                json!({"zone": "e1-b", "region": "e1"}),
                Some("w2-a"),
                Err("failure domain \"w2-a\" is not a zone of the class's region \"e1\""),
            ),
            (
                "Azure zone number",
                "Azure",
                json!({"properties": {"zone": 1}}),
                Some("3"),
                Ok(json!({"properties": {"zone": 3}})),
            ),
            ("Azure without properties", "Azure", json!({}), Some("2"), Ok(json!({"properties": {"zone": 2}}))),
            (
                "Azure non-numeric",
                "Azure",
                json!({"properties": {"zone": 1}}),
                Some("x"),
                Err("failure domain \"x\" is not an Azure zone number"),
            ),
            ("Azure zone 0", "Azure", json!({"properties": {}}), Some("0"), Err("not an Azure zone number")),
            (
                "Azure availability set",
                "Azure",
                json!({"properties": {"availabilitySet": {"id": "a"}}}),
                Some("2"),
                Err("the class places its VMs in properties.availabilitySet, which excludes a zone"),
            ),
            (
                "Azure scale set",
                "Azure",
                json!({"properties": {"virtualMachineScaleSet": {"id": "a"}}}),
                Some("2"),
                Err("properties.virtualMachineScaleSet"),
            ),
        ];
        for (name, provider, spec, fd, want) in cases {
            match (place(provider, &spec, fd), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{name}: {got}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn the_zone_a_class_names_is_its_failure_domain() {
        let cases = [
            ("InMemory", json!({"zone": "local-a"}), Some("local-a")),
            ("GCP", json!({"zone": "europe-west1-b", "machineType": "n1"}), Some("europe-west1-b")),
            ("Azure", json!({"properties": {"zone": 2}}), Some("2")),
            ("Azure", json!({"properties": {}}), None),
            ("AWS", json!({"zone": "ignored"}), None),
            ("InMemory", json!({"zone": ""}), None),
            ("InMemory", json!(null), None),
        ];
        for (provider, spec, want) in cases {
            assert_eq!(zone_of(provider, &spec).as_deref(), want, "{provider} {spec}");
            // What `place` writes for a failure domain, `zone_of` reads back.
            if let Some(fd) = want {
                let base = if provider == "Azure" { json!({"properties": {}}) } else { json!({}) };
                assert_eq!(zone_of(provider, &place(provider, &base, Some(fd)).unwrap()).as_deref(), Some(fd));
            }
        }
    }

    #[test]
    fn the_reported_zone_is_the_clouds_first() {
        let cases = [
            ("AWS zone form", Some("aws:///eu-west-1b/i-1"), Some("eu-west-1a"), Some("eu-west-1b")),
            ("AWS region form: the placement", Some("aws:///eu-west-1/i-1"), Some("eu-west-1a"), Some("eu-west-1a")),
            ("GCE", Some("gce://p/europe-west1-c/m"), Some("europe-west1-b"), Some("europe-west1-c")),
            ("Azure: the placement", Some("azure:///subscriptions/s/virtualMachines/vm"), Some("2"), Some("2")),
            ("no VM yet", None, Some("z"), Some("z")),
            ("nothing known", Some("aws:///eu-west-1/i-1"), None, None),
            ("empty placement", None, Some(""), None),
        ];
        for (name, provider_id, placed, want) in cases {
            assert_eq!(located(provider_id, placed).as_deref(), want, "{name}");
        }
    }
}
