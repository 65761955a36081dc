//! Structured logs on standard error: `--log-format json|text` and `--log-level` (a `tracing` filter such as
//! `info` or `info,mcm::controllers=debug`; `RUST_LOG` wins when set).

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
#[error("invalid --log-level {level:?}: {reason}")]
pub struct LogLevelError {
    /// What was given.
    pub level: String,
    /// Why it is invalid.
    pub reason: String,
}

/// Installs the global subscriber (a second call does nothing). `RUST_LOG`, when set, overrides `level`.
pub fn init(format: LogFormat, level: &str) -> Result<(), LogLevelError> {
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty());
    let spec = from_env.clone().unwrap_or_else(|| level.to_string());
    let filter = tracing_subscriber::EnvFilter::try_new(&spec)
        .map_err(|e| LogLevelError { level: spec.clone(), reason: e.to_string() })?;
    // The AWS SDK logs the access key ID at debug level; a broad filter must not print it.
    #[cfg(feature = "aws")]
    let filter = crate::providers::aws::quiet_sdk_logs(filter, &spec);
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
}
