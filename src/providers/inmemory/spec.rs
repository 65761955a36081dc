//! The in-memory providerSpec: strict parsing (every field checked and named) and the pure create-time decisions
//! (boot delay, injected failures, quota).

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use serde_json::{Map, Value};

use crate::providers::{Code, DriverError, tags};

/// Every field the providerSpec accepts, in documentation order.
pub const FIELDS: [&str; 15] = [
    "machineType",
    "cpu",
    "memory",
    "region",
    "zone",
    "bootSeconds",
    "bootJitter",
    "failCreate",
    "failCreateRate",
    "dieAfterSeconds",
    "quota",
    "tags",
    "requireInitialize",
    "failDelete",
    "kubeletVersion",
];

/// Default `machineType`.
pub const DEFAULT_MACHINE_TYPE: &str = "m.medium";
/// Default `cpu`.
pub const DEFAULT_CPU: &str = "2";
/// Default `memory`.
pub const DEFAULT_MEMORY: &str = "4Gi";
/// Default `region` (the default zone is `<region>-a`).
pub const DEFAULT_REGION: &str = "local";
/// Default `bootSeconds`.
pub const DEFAULT_BOOT_SECONDS: f64 = 2.0;

/// A parsed, validated in-memory providerSpec. See `docs/adding-a-provider.md` for the YAML shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderSpec {
    /// `machineType`: free text, the Node's `node.kubernetes.io/instance-type` (default `m.medium`).
    pub machine_type: String,
    /// `cpu`: the Node's cpu capacity, a quantity (default `2`).
    pub cpu: String,
    /// `memory`: the Node's memory capacity, a quantity (default `4Gi`).
    pub memory: String,
    /// `region` (default `local`).
    pub region: String,
    /// `zone` (default `<region>-a`).
    pub zone: String,
    /// `bootSeconds`: time from create to a Ready Node (default 2).
    pub boot_seconds: f64,
    /// `bootJitter`: +- share of `bootSeconds`, 0..=1 (default 0: every VM boots in exactly `bootSeconds`).
    pub boot_jitter: f64,
    /// `failCreate`: every create fails with this code (default none).
    pub fail_create: Option<Code>,
    /// `failCreateRate`: share of creates failing with `Internal`, 0..=1 (default 0).
    pub fail_create_rate: f64,
    /// `dieAfterSeconds`: >0 makes the VM die that long after boot (default 0: never).
    pub die_after_seconds: f64,
    /// `quota`: >0 caps the VMs of this cluster; creates beyond it are `ResourceExhausted` (default 0: no cap).
    pub quota: u64,
    /// `tags`: put on every VM; must hold a cluster and a role key.
    pub tags: BTreeMap<String, String>,
    /// The cluster tag key among `tags` (`kubernetes.io/cluster/<name>`).
    pub cluster_tag: String,
    /// The role tag key among `tags` (`kubernetes.io/role/<role>`).
    pub role_tag: String,
    /// `requireInitialize` (extra): VMs wait for `initialize_machine` before their Node registers (default false).
    pub require_initialize: bool,
    /// `failDelete` (extra): every delete fails with this code (default none).
    pub fail_delete: Option<Code>,
    /// `kubeletVersion` (extra): what the VM's kubelet reports in `status.nodeInfo.kubeletVersion`, as an image of
    /// that Kubernetes version would (default [`super::node::KUBELET_VERSION`]). CAPI core compares it with the
    /// Machine's `spec.version`: a Machine whose Node runs another version is not up to date.
    pub kubelet_version: String,
}

impl ProviderSpec {
    /// Parses a providerSpec strictly: unknown fields, wrong types and out-of-range values are `InvalidArgument`
    /// naming the field. `null` counts as an empty object (so the missing `tags` are named).
    pub fn parse(value: &Value) -> Result<Self, DriverError> {
        let empty = Map::new();
        let object = match value {
            Value::Null => &empty,
            Value::Object(map) => map,
            other => {
                return Err(DriverError::new(
                    Code::InvalidArgument,
                    format!("providerSpec: must be an object, got {}", kind(other)),
                ));
            }
        };
        if let Some(unknown) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(DriverError::new(Code::InvalidArgument, format!("providerSpec: unknown field {unknown:?}")));
        }
        let get = |field: &str| object.get(field).filter(|v| !v.is_null());

        let region = get("region").map(|v| name("region", v)).transpose()?.unwrap_or_else(|| DEFAULT_REGION.into());
        let zone = get("zone").map(|v| name("zone", v)).transpose()?.unwrap_or_else(|| format!("{region}-a"));
        let tags = match get("tags") {
            Some(v) => string_map("tags", v)?,
            None => BTreeMap::new(),
        };
        let (cluster_tag, role_tag) =
            tags::ownership(tags.keys()).map_err(|why| DriverError::invalid_field("tags", why))?;
        Ok(ProviderSpec {
            machine_type: get("machineType")
                .map(|v| name("machineType", v))
                .transpose()?
                .unwrap_or_else(|| DEFAULT_MACHINE_TYPE.into()),
            cpu: get("cpu").map(|v| quantity("cpu", v)).transpose()?.unwrap_or_else(|| DEFAULT_CPU.into()),
            memory: get("memory").map(|v| quantity("memory", v)).transpose()?.unwrap_or_else(|| DEFAULT_MEMORY.into()),
            region,
            zone,
            boot_seconds: get("bootSeconds")
                .map(|v| seconds("bootSeconds", v))
                .transpose()?
                .unwrap_or(DEFAULT_BOOT_SECONDS),
            boot_jitter: get("bootJitter").map(|v| share("bootJitter", v)).transpose()?.unwrap_or(0.0),
            fail_create: get("failCreate").map(|v| code("failCreate", v)).transpose()?.flatten(),
            fail_create_rate: get("failCreateRate").map(|v| share("failCreateRate", v)).transpose()?.unwrap_or(0.0),
            die_after_seconds: get("dieAfterSeconds")
                .map(|v| seconds("dieAfterSeconds", v))
                .transpose()?
                .unwrap_or(0.0),
            quota: get("quota").map(|v| count("quota", v)).transpose()?.unwrap_or(0),
            tags,
            cluster_tag,
            role_tag,
            require_initialize: get("requireInitialize")
                .map(|v| boolean("requireInitialize", v))
                .transpose()?
                .unwrap_or(false),
            fail_delete: get("failDelete").map(|v| code("failDelete", v)).transpose()?.flatten(),
            kubelet_version: get("kubeletVersion")
                .map(|v| version("kubeletVersion", v))
                .transpose()?
                .unwrap_or_else(|| super::node::KUBELET_VERSION.into()),
        })
    }

    /// How long after booting a VM with this spec dies (`None`: never).
    pub fn life_after_boot(&self) -> Option<Duration> {
        (self.die_after_seconds > 0.0).then(|| Duration::from_secs_f64(self.die_after_seconds))
    }
}

/// How long a VM takes to boot: `boot_seconds` moved by up to `jitter` of itself, `sample` (0..1) choosing where.
pub fn boot_delay(boot_seconds: f64, jitter: f64, sample: f64) -> Duration {
    let factor = 1.0 + jitter * (2.0 * sample.clamp(0.0, 1.0) - 1.0);
    Duration::from_secs_f64((boot_seconds * factor).max(0.0))
}

/// Whether a create of a new VM may go ahead: `failCreate`, then the quota over the cluster's `existing` VMs,
/// then `failCreateRate` (`sample` in 0..1 decides).
pub fn create_verdict(spec: &ProviderSpec, existing: usize, sample: f64) -> Result<(), DriverError> {
    if let Some(code) = spec.fail_create {
        return Err(DriverError::new(code, "injected failure (providerSpec.failCreate)"));
    }
    if spec.quota > 0 && existing as u64 >= spec.quota {
        return Err(DriverError::new(
            Code::ResourceExhausted,
            format!("quota of {} VMs for {} reached (providerSpec.quota)", spec.quota, spec.cluster_tag),
        ));
    }
    if sample < spec.fail_create_rate {
        return Err(DriverError::new(Code::Internal, "injected failure (providerSpec.failCreateRate)"));
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn text<'a>(field: &str, v: &'a Value) -> Result<&'a str, DriverError> {
    v.as_str().ok_or_else(|| DriverError::invalid_field(field, format!("must be a string, got {}", kind(v))))
}

/// A non-empty string without whitespace (it ends up in labels and providerIDs).
fn name(field: &str, v: &Value) -> Result<String, DriverError> {
    let s = text(field, v)?;
    if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(DriverError::invalid_field(field, format!("{s:?} must be non-empty, without spaces or '/'")));
    }
    Ok(s.to_string())
}

static VERSION: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$").ok());

/// A Kubernetes version as Machines carry it (`v1.34.1`, `v1.35.0-rc.1`).
fn version(field: &str, v: &Value) -> Result<String, DriverError> {
    let s = text(field, v)?;
    match VERSION.as_ref() {
        Some(re) if re.is_match(s) => Ok(s.to_string()),
        _ => Err(DriverError::invalid_field(field, format!("{s:?} is not a Kubernetes version (e.g. \"v1.34.1\")"))),
    }
}

static QUANTITY: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$").ok()
});

/// A Kubernetes quantity, as a string or a plain number (YAML authors write `cpu: 4`).
fn quantity(field: &str, v: &Value) -> Result<String, DriverError> {
    let s = match v {
        Value::Number(n) => n.to_string(),
        _ => text(field, v)?.to_string(),
    };
    match QUANTITY.as_ref() {
        Some(re) if re.is_match(&s) => Ok(s),
        _ => Err(DriverError::invalid_field(field, format!("{s:?} is not a quantity (e.g. \"4\", \"16Gi\")"))),
    }
}

fn number(field: &str, v: &Value) -> Result<f64, DriverError> {
    v.as_f64()
        .filter(|n| n.is_finite())
        .ok_or_else(|| DriverError::invalid_field(field, format!("must be a number, got {}", kind(v))))
}

/// Seconds: a number >= 0 (at most a year, so `Duration` never overflows).
fn seconds(field: &str, v: &Value) -> Result<f64, DriverError> {
    let n = number(field, v)?;
    if !(0.0..=31_536_000.0).contains(&n) {
        return Err(DriverError::invalid_field(field, format!("{n} must be between 0 and 31536000 seconds")));
    }
    Ok(n)
}

/// A share: a number in 0..=1.
fn share(field: &str, v: &Value) -> Result<f64, DriverError> {
    let n = number(field, v)?;
    if !(0.0..=1.0).contains(&n) {
        return Err(DriverError::invalid_field(field, format!("{n} must be between 0 and 1")));
    }
    Ok(n)
}

fn count(field: &str, v: &Value) -> Result<u64, DriverError> {
    v.as_u64().ok_or_else(|| DriverError::invalid_field(field, format!("must be a whole number >= 0, got {v}")))
}

fn boolean(field: &str, v: &Value) -> Result<bool, DriverError> {
    v.as_bool().ok_or_else(|| DriverError::invalid_field(field, format!("must be true or false, got {}", kind(v))))
}

/// A driver code name; `""` means none. `OK` is refused: it is not a failure.
fn code(field: &str, v: &Value) -> Result<Option<Code>, DriverError> {
    let s = text(field, v)?;
    if s.is_empty() {
        return Ok(None);
    }
    match Code::from_name(s) {
        Some(code) if code != Code::Ok => Ok(Some(code)),
        _ => Err(DriverError::invalid_field(
            field,
            format!("{s:?} is not a driver error code (e.g. ResourceExhausted, Internal, Unavailable)"),
        )),
    }
}

fn string_map(field: &str, v: &Value) -> Result<BTreeMap<String, String>, DriverError> {
    let map = v
        .as_object()
        .ok_or_else(|| DriverError::invalid_field(field, format!("must be a map of strings, got {}", kind(v))))?;
    map.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            other => Err(DriverError::invalid_field(
                &format!("{field}[{k:?}]"),
                format!("must be a string, got {}", kind(other)),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn base() -> Value {
        json!({"tags": {"kubernetes.io/cluster/dev": "1", "kubernetes.io/role/node": "1"}})
    }

    fn with(field: &str, value: Value) -> Value {
        let mut v = base();
        v[field] = value;
        v
    }

    #[test]
    fn defaults_fill_omitted_fields() {
        let spec = ProviderSpec::parse(&base()).unwrap();
        assert_eq!(spec.machine_type, "m.medium");
        assert_eq!((spec.cpu.as_str(), spec.memory.as_str()), ("2", "4Gi"));
        assert_eq!((spec.region.as_str(), spec.zone.as_str()), ("local", "local-a"));
        assert_eq!(
            (spec.boot_seconds, spec.boot_jitter, spec.fail_create_rate, spec.die_after_seconds),
            (2.0, 0.0, 0.0, 0.0)
        );
        assert_eq!((spec.fail_create, spec.fail_delete, spec.quota, spec.require_initialize), (None, None, 0, false));
        assert_eq!(
            (spec.cluster_tag.as_str(), spec.role_tag.as_str()),
            ("kubernetes.io/cluster/dev", "kubernetes.io/role/node")
        );
        assert_eq!(spec.life_after_boot(), None);
        assert_eq!(spec.kubelet_version, crate::providers::inmemory::node::KUBELET_VERSION);
        assert_eq!(ProviderSpec::parse(&with("region", json!("eu"))).unwrap().zone, "eu-a");
    }

    #[test]
    fn every_field_parses() {
        let v = json!({
            "machineType": "m.large", "cpu": "4", "memory": "16Gi", "region": "r", "zone": "r-b",
            "bootSeconds": 2, "bootJitter": 0.2, "failCreate": "ResourceExhausted", "failCreateRate": 0.5,
            "dieAfterSeconds": 30.5, "quota": 3, "requireInitialize": true, "failDelete": "Unavailable",
            "kubeletVersion": "v1.34.1",
            "tags": {"kubernetes.io/cluster/dev": "1", "kubernetes.io/role/node": "1", "team": "a"}
        });
        let spec = ProviderSpec::parse(&v).unwrap();
        assert_eq!(spec.machine_type, "m.large");
        assert_eq!(spec.zone, "r-b");
        assert_eq!(spec.fail_create, Some(Code::ResourceExhausted));
        assert_eq!(spec.fail_delete, Some(Code::Unavailable));
        assert_eq!((spec.quota, spec.require_initialize, spec.tags.len()), (3, true, 3));
        assert_eq!(spec.life_after_boot(), Some(Duration::from_millis(30_500)));
        assert_eq!(spec.kubelet_version, "v1.34.1");
        // Plain numbers are quantities too.
        assert_eq!(ProviderSpec::parse(&with("cpu", json!(8))).unwrap().cpu, "8");
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases: &[(&str, Value, &str)] = &[
            ("unknown field", with("foo", json!(1)), "providerSpec: unknown field \"foo\""),
            ("not an object", json!([1]), "providerSpec: must be an object"),
            ("no tags", json!({}), "providerSpec.tags: must contain a tag key kubernetes.io/cluster/"),
            (
                "no role tag",
                json!({"tags": {"kubernetes.io/cluster/dev": "1"}}),
                "providerSpec.tags: must contain a tag key kubernetes.io/role/",
            ),
            (
                "tag value",
                json!({"tags": {"kubernetes.io/cluster/dev": 1}}),
                "providerSpec.tags[\"kubernetes.io/cluster/dev\"]",
            ),
            ("cpu", with("cpu", json!("four")), "providerSpec.cpu: \"four\" is not a quantity"),
            ("memory", with("memory", json!("16 GB")), "providerSpec.memory"),
            ("bootSeconds type", with("bootSeconds", json!("2")), "providerSpec.bootSeconds: must be a number"),
            ("bootSeconds range", with("bootSeconds", json!(-1)), "providerSpec.bootSeconds"),
            ("bootJitter", with("bootJitter", json!(1.5)), "providerSpec.bootJitter: 1.5 must be between 0 and 1"),
            (
                "failCreate",
                with("failCreate", json!("Boom")),
                "providerSpec.failCreate: \"Boom\" is not a driver error code",
            ),
            ("failCreate OK", with("failCreate", json!("OK")), "providerSpec.failCreate"),
            ("failCreateRate", with("failCreateRate", json!(2)), "providerSpec.failCreateRate"),
            ("dieAfterSeconds", with("dieAfterSeconds", json!(true)), "providerSpec.dieAfterSeconds"),
            ("quota", with("quota", json!(-1)), "providerSpec.quota: must be a whole number"),
            ("quota float", with("quota", json!(1.5)), "providerSpec.quota"),
            ("zone", with("zone", json!("a b")), "providerSpec.zone"),
            ("machineType", with("machineType", json!("")), "providerSpec.machineType"),
            ("requireInitialize", with("requireInitialize", json!("yes")), "providerSpec.requireInitialize"),
            ("failDelete", with("failDelete", json!(5)), "providerSpec.failDelete: must be a string"),
            ("kubeletVersion", with("kubeletVersion", json!("1.34")), "providerSpec.kubeletVersion: \"1.34\" is not"),
            (
                "kubeletVersion type",
                with("kubeletVersion", json!(1.34)),
                "providerSpec.kubeletVersion: must be a string",
            ),
        ];
        for (name, value, want) in cases {
            let err = ProviderSpec::parse(value).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument, "{name}");
            assert!(err.message.starts_with(want), "{name}: {:?} should start with {want:?}", err.message);
        }
    }

    #[test]
    fn null_fields_take_defaults() {
        let spec = ProviderSpec::parse(&with("cpu", Value::Null)).unwrap();
        assert_eq!(spec.cpu, "2");
        assert_eq!(ProviderSpec::parse(&with("failCreate", json!(""))).unwrap().fail_create, None);
    }

    #[test]
    fn boot_delay_stays_within_jitter() {
        let cases = [
            (2.0, 0.0, 0.0, 2.0),
            (2.0, 0.0, 0.99, 2.0),
            (2.0, 0.2, 0.0, 1.6),
            (2.0, 0.2, 0.5, 2.0),
            (2.0, 0.2, 1.0, 2.4),
            (0.0, 0.5, 1.0, 0.0),
            (1.0, 1.0, 0.0, 0.0),
        ];
        for (secs, jitter, sample, want) in cases {
            let got = boot_delay(secs, jitter, sample).as_secs_f64();
            assert!((got - want).abs() < 1e-9, "boot_delay({secs}, {jitter}, {sample}) = {got}, want {want}");
        }
        for i in 0..100 {
            let got = boot_delay(10.0, 0.3, f64::from(i) / 100.0).as_secs_f64();
            assert!((7.0..=13.0).contains(&got), "{got}");
        }
    }

    #[test]
    fn create_verdict_table() {
        let spec = ProviderSpec::parse(&base()).unwrap();
        let quota2 = ProviderSpec { quota: 2, ..spec.clone() };
        let fail = ProviderSpec { fail_create: Some(Code::Unavailable), ..spec.clone() };
        let rate = ProviderSpec { fail_create_rate: 0.3, ..spec.clone() };
        let all = ProviderSpec { fail_create_rate: 1.0, ..spec.clone() };
        let cases: &[(&str, &ProviderSpec, usize, f64, Option<Code>)] = &[
            ("plain", &spec, 1000, 0.0, None),
            ("under quota", &quota2, 1, 0.0, None),
            ("at quota", &quota2, 2, 0.9, Some(Code::ResourceExhausted)),
            ("over quota", &quota2, 5, 0.9, Some(Code::ResourceExhausted)),
            ("failCreate wins", &fail, 0, 0.9, Some(Code::Unavailable)),
            ("rate hit", &rate, 0, 0.29, Some(Code::Internal)),
            ("rate miss", &rate, 0, 0.3, None),
            ("rate 1 always", &all, 0, 0.999, Some(Code::Internal)),
        ];
        for (name, spec, existing, sample, want) in cases {
            let got = create_verdict(spec, *existing, *sample).err().map(|e| e.code);
            assert_eq!(got, *want, "{name}");
        }
    }
}
