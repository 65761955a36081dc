//! Structured logs on standard error, for every command: `--log-format json|text` and `--log-level` (a `tracing`
//! filter such as `info` or `info,mcm::controllers=debug`; `RUST_LOG` wins when set). Every compiled cloud SDK is
//! held at `info` ([`crate::providers::quiet_sdk_directives`]) unless the filter names its target: below that the
//! SDKs print access key IDs, session and bearer tokens, or user data.

use std::str::FromStr;

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One JSON object a line, with the span fields (the object key of a reconcile) on every line.
    Json,
    /// Human-readable lines.
    #[default]
    Text,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "json" => Ok(LogFormat::Json),
            "text" => Ok(LogFormat::Text),
            other => Err(format!("unknown log format {other:?} (json or text)")),
        }
    }
}

/// A log filter that could not be parsed.
#[derive(Debug, thiserror::Error)]
#[error("invalid {origin} {level:?}: {reason}")]
pub struct LogLevelError {
    /// What was given.
    pub level: String,
    /// Why it is invalid.
    pub reason: String,
    /// Where it came from: `--log-level` or `RUST_LOG`.
    pub origin: &'static str,
}

/// The filter [`init`] installs: `rust_log` (the `RUST_LOG` value) when set and not empty, else `level`, with every
/// compiled cloud SDK's targets held at `info` unless that filter text names them.
pub fn filter(rust_log: Option<&str>, level: &str) -> Result<tracing_subscriber::EnvFilter, LogLevelError> {
    let (spec, origin) = match rust_log.filter(|v| !v.is_empty()) {
        Some(from_env) => (from_env, "RUST_LOG"),
        None => (level, "--log-level"),
    };
    let filter = tracing_subscriber::EnvFilter::try_new(spec).map_err(|e| LogLevelError {
        level: spec.to_string(),
        reason: e.to_string(),
        origin,
    })?;
    Ok(crate::providers::quiet_sdk_directives(spec)
        .into_iter()
        .fold(filter, tracing_subscriber::EnvFilter::add_directive))
}

/// Installs the global subscriber on standard error (a second call does nothing). `RUST_LOG`, when set, overrides
/// `level`; see [`filter`].
pub fn init(format: LogFormat, level: &str) -> Result<(), LogLevelError> {
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref(), level)?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert!("xml".parse::<LogFormat>().is_err());
    }

    #[test]
    fn rust_log_wins_over_the_level_when_set() {
        assert_eq!(filter(None, "debug").unwrap().max_level_hint(), Some(tracing::level_filters::LevelFilter::DEBUG));
        let from_env = filter(Some("warn"), "trace").unwrap();
        // WARN, or INFO where cloud SDKs are compiled in (their targets are held at `info`): never the level's trace.
        assert!(from_env.max_level_hint() <= Some(tracing::level_filters::LevelFilter::INFO), "{from_env}");
        assert!(!from_env.to_string().contains("trace"), "{from_env}");
        let empty = filter(Some(""), "debug").unwrap();
        assert_eq!(empty.max_level_hint(), Some(tracing::level_filters::LevelFilter::DEBUG), "{empty}");
    }

    #[test]
    fn bad_filters_name_their_source() {
        let err = filter(None, "info,mcm=lots").unwrap_err();
        assert_eq!((err.origin, err.level.as_str()), ("--log-level", "info,mcm=lots"));
        assert!(err.to_string().starts_with("invalid --log-level"), "{err}");
        let err = filter(Some("mcm=lots"), "info").unwrap_err();
        assert!(err.to_string().starts_with("invalid RUST_LOG \"mcm=lots\""), "{err}");
    }

    #[test]
    fn the_sdks_are_held_at_info_unless_named() {
        let broad = filter(None, "trace").unwrap().to_string();
        for target in crate::providers::quiet_sdk_targets() {
            assert!(broad.contains(&format!("{target}=info")), "{target} in {broad}");
        }
        #[cfg(feature = "azure")]
        {
            let named = filter(Some("trace,azure_core=trace"), "info").unwrap().to_string();
            assert!(!named.contains("azure_core=info") && named.contains("azure_identity=info"), "{named}");
        }
        #[cfg(feature = "aws")]
        assert!(filter(None, "debug").unwrap().to_string().contains("aws_sigv4=info"));
        #[cfg(feature = "gcp")]
        assert!(filter(None, "debug").unwrap().to_string().contains("google_cloud_compute_v1=info"));
    }
}
