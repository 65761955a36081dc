//! Go-style durations (`metav1.Duration`): `90s`, `10m`, `1h30m`, `1.5h`, `300ms`.
//!
//! MCM's objects and flags carry durations in Go's `time.Duration` text form. We parse every form Go's
//! `time.ParseDuration` accepts (negative values excepted: no timeout of ours can be negative) and write
//! Go's canonical form (`10m0s`), so objects we write read the same to MCM's own tooling.

use std::fmt;
use std::str::FromStr;

/// A non-negative duration that reads and writes Go's `time.Duration` text form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub std::time::Duration);

/// Why a duration text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (expected a Go-style duration such as 90s, 10m or 1h30m)")]
pub struct ParseDurationError {
    input: String,
    reason: &'static str,
}

impl Duration {
    /// A duration of `secs` seconds.
    pub const fn from_secs(secs: u64) -> Self {
        Duration(std::time::Duration::from_secs(secs))
    }

    /// The standard library value.
    pub const fn as_std(&self) -> std::time::Duration {
        self.0
    }
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Self {
        Duration(d)
    }
}

impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> Self {
        d.0
    }
}

const NANOS_PER: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

impl FromStr for Duration {
    type Err = ParseDurationError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason| ParseDurationError { input: input.to_string(), reason };
        let mut rest = input.strip_prefix('+').unwrap_or(input);
        if let Some(negative) = rest.strip_prefix('-') {
            return if !negative.is_empty() && negative.chars().all(|c| c == '0') {
                Ok(Duration::default())
            } else {
                Err(err("negative durations are not allowed"))
            };
        }
        if rest == "0" {
            return Ok(Duration::default());
        }
        if rest.is_empty() {
            return Err(err("empty"));
        }
        let mut total: u128 = 0;
        while !rest.is_empty() {
            let int_len = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            let (int_part, after_int) = rest.split_at(int_len);
            let (frac_part, after_num) = match after_int.strip_prefix('.') {
                Some(f) => {
                    let frac_len = f.find(|c: char| !c.is_ascii_digit()).unwrap_or(f.len());
                    f.split_at(frac_len)
                }
                None => ("", after_int),
            };
            if int_part.is_empty() && frac_part.is_empty() {
                return Err(err("a number is missing"));
            }
            let unit_len = after_num.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after_num.len());
            let (unit, after_unit) = after_num.split_at(unit_len);
            if unit.is_empty() {
                return Err(err("a unit is missing (ns, us, ms, s, m or h)"));
            }
            let per = NANOS_PER
                .iter()
                .find(|(name, _)| *name == unit)
                .map(|(_, n)| *n)
                .ok_or_else(|| err("unknown unit (expected ns, us, ms, s, m or h)"))?;
            let int: u128 =
                if int_part.is_empty() { 0 } else { int_part.parse().map_err(|_| err("number too large"))? };
            let mut value = int.checked_mul(per).ok_or_else(|| err("number too large"))?;
            // Fractions: scale digit by digit so that `1.5h` is exact.
            let mut scale = per;
            for digit in frac_part.bytes() {
                scale /= 10;
                if scale == 0 {
                    break;
                }
                value += u128::from(digit - b'0') * scale;
            }
            total = total.checked_add(value).ok_or_else(|| err("number too large"))?;
            rest = after_unit;
        }
        if total > u128::from(u64::MAX) {
            return Err(err("number too large"));
        }
        let secs = (total / 1_000_000_000) as u64;
        let nanos = (total % 1_000_000_000) as u32;
        Ok(Duration(std::time::Duration::new(secs, nanos)))
    }
}

/// Writes `frac` (< 10^digits) as a decimal fraction without trailing zeros, like Go does.
fn write_fraction(f: &mut fmt::Formatter<'_>, mut frac: u64, digits: u32) -> fmt::Result {
    if frac == 0 {
        return Ok(());
    }
    let mut width = digits as usize;
    while frac.is_multiple_of(10) {
        frac /= 10;
        width -= 1;
    }
    write!(f, ".{frac:0width$}")
}

impl fmt::Display for Duration {
    /// Go's `time.Duration.String()`: `0s`, `1.5ms`, `1m30s`, `2h0m0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        if nanos < 1_000_000_000 {
            let (unit, per, digits) = if nanos < 1_000 {
                ("ns", 1u128, 0)
            } else if nanos < 1_000_000 {
                ("µs", 1_000, 3)
            } else {
                ("ms", 1_000_000, 6)
            };
            write!(f, "{}", nanos / per)?;
            write_fraction(f, (nanos % per) as u64, digits)?;
            return f.write_str(unit);
        }
        let total_secs = self.0.as_secs();
        let (hours, minutes, secs) = (total_secs / 3600, (total_secs % 3600) / 60, total_secs % 60);
        if hours > 0 {
            write!(f, "{hours}h{minutes}m")?;
        } else if minutes > 0 {
            write!(f, "{minutes}m")?;
        }
        write!(f, "{secs}")?;
        write_fraction(f, u64::from(self.0.subsec_nanos()), 9)?;
        f.write_str("s")
    }
}

impl serde::Serialize for Duration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Duration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> std::time::Duration {
        s.parse::<Duration>().unwrap().0
    }

    #[test]
    fn parses_go_forms() {
        let cases = [
            ("0", 0),
            ("0s", 0),
            ("90s", 90_000),
            ("10m", 600_000),
            ("1h30m", 5_400_000),
            ("1.5h", 5_400_000),
            ("2h45m30s", 9_930_000),
            ("300ms", 300),
            ("+5s", 5_000),
            (".5s", 500),
            ("1m0.25s", 60_250),
            ("-0", 0),
        ];
        for (text, millis) in cases {
            assert_eq!(d(text).as_millis(), millis, "{text}");
        }
        assert_eq!(d("1500us"), std::time::Duration::from_micros(1500));
        assert_eq!(d("7ns"), std::time::Duration::from_nanos(7));
    }

    #[test]
    fn rejects_bad_input_with_a_clear_message() {
        for text in ["", "10", "5x", "-5s", "h", "1.2.3s", "s"] {
            let err = text.parse::<Duration>().unwrap_err().to_string();
            assert!(err.contains(&format!("{text:?}")), "{err}");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (std::time::Duration::ZERO, "0s"),
            (std::time::Duration::from_secs(90), "1m30s"),
            (std::time::Duration::from_secs(600), "10m0s"),
            (std::time::Duration::from_secs(7200), "2h0m0s"),
            (std::time::Duration::from_millis(1500), "1.5s"),
            (std::time::Duration::from_millis(300), "300ms"),
            (std::time::Duration::from_micros(1500), "1.5ms"),
            (std::time::Duration::from_nanos(7), "7ns"),
            (std::time::Duration::from_millis(60_250), "1m0.25s"),
        ];
        for (value, text) in cases {
            assert_eq!(Duration(value).to_string(), text);
            assert_eq!(d(text), value, "parse back {text}");
        }
    }

    #[test]
    fn serde_uses_text_form() {
        let v: Duration = serde_json::from_str("\"20m\"").unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"20m0s\"");
        assert!(serde_json::from_str::<Duration>("\"soon\"").is_err());
    }
}
