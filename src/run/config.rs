//! `mcm run --config FILE`: a YAML (or JSON) mapping whose keys are the long flag names of `mcm run` (without the
//! dashes: `kube-api-qps: 50`, `leader-elect: false`, `controllers: ["*", "-safety"]`). The file's settings are
//! turned into flags placed before the command line's, so a flag given on the command line wins, and a key that
//! is not a flag is refused as clap refuses an unknown flag.

use std::ffi::OsString;
use std::path::Path;

use serde_yaml::Value;

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// It could not be read.
    #[error("could not read the config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// It is not YAML.
    #[error("the config file {path} is not valid YAML: {source}")]
    Parse {
        /// The file.
        path: String,
        /// The cause.
        source: serde_yaml::Error,
    },
    /// Its content is not a mapping of flag names to values.
    #[error("the config file {path}: {reason}")]
    Shape {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// The flags a config file's text stands for, in the file's order.
pub fn flags_from_text(path: &str, text: &str) -> Result<Vec<OsString>, ConfigError> {
    let shape = |reason: String| ConfigError::Shape { path: path.to_string(), reason };
    let value: Value =
        serde_yaml::from_str(text).map_err(|source| ConfigError::Parse { path: path.to_string(), source })?;
    let map = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Mapping(map) => map,
        _ => return Err(shape("must be a mapping of flag names to values".into())),
    };
    let mut flags = Vec::new();
    for (key, value) in map {
        let key = key.as_str().ok_or_else(|| shape(format!("key {key:?} is not a string")))?.to_string();
        let key = key.trim_start_matches('-').to_string();
        if key == "config" {
            return Err(shape("a config file cannot name another (config)".into()));
        }
        let text = match &value {
            Value::Sequence(items) => items
                .iter()
                .map(|v| scalar(v).ok_or_else(|| shape(format!("{key}: list items must be scalars"))))
                .collect::<Result<Vec<_>, _>>()?
                .join(","),
            Value::Null => return Err(shape(format!("{key} has no value"))),
            other => scalar(other).ok_or_else(|| shape(format!("{key}: value must be a scalar or a list")))?,
        };
        flags.push(OsString::from(format!("--{key}={text}")));
    }
    Ok(flags)
}

/// The path given with `--config PATH` or `--config=PATH` after the `run` subcommand, if any.
fn config_path(args: &[OsString]) -> Option<String> {
    let run = args.iter().position(|a| a == "run")?;
    let mut iter = args[run + 1..].iter();
    while let Some(arg) = iter.next() {
        let arg = arg.to_string_lossy();
        if arg == "--" {
            break;
        }
        if arg == "--config" {
            return iter.next().map(|p| p.to_string_lossy().into_owned());
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(path.to_string());
        }
    }
    None
}

/// The arguments with a `run --config FILE`'s settings inserted right after `run` (so later command-line flags
/// override them); other commands' arguments come back unchanged.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, ConfigError> {
    let Some(path) = config_path(&args) else { return Ok(args) };
    let text =
        std::fs::read_to_string(Path::new(&path)).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
    let flags = flags_from_text(&path, &text)?;
    let run = args.iter().position(|a| a == "run").unwrap_or(0);
    let mut out = args[..=run].to_vec();
    out.extend(flags);
    out.extend(args[run + 1..].iter().cloned());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn keys_become_flags() {
        let text = "kube-api-qps: 50\nleader-elect: false\ncontrollers: ['*', '-safety']\nnamespace: shoot--a\n";
        assert_eq!(
            flags_from_text("f", text).unwrap(),
            os(&["--kube-api-qps=50", "--leader-elect=false", "--controllers=*,-safety", "--namespace=shoot--a"])
        );
        assert!(flags_from_text("f", "").unwrap().is_empty());
        assert!(flags_from_text("f", "[1, 2]").unwrap_err().to_string().contains("mapping"));
        assert!(flags_from_text("f", "config: other.yaml").is_err());
        assert!(flags_from_text("f", "a: {b: 1}").is_err());
        assert!(flags_from_text("f", "a: [").is_err());
    }

    #[test]
    fn file_flags_go_before_the_command_lines() {
        let dir = std::env::temp_dir().join(format!("mcm-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("run.yaml");
        std::fs::write(&file, "kube-api-qps: 5\n").unwrap();
        let path = file.to_string_lossy().to_string();
        let args = os(&["mcm", "run", "--config", &path, "--kube-api-qps=7"]);
        assert_eq!(
            expand(args).unwrap(),
            os(&["mcm", "run", "--kube-api-qps=5", "--config", &path, "--kube-api-qps=7"])
        );
        let unchanged = os(&["mcm", "dev", "--config", "x"]);
        assert_eq!(expand(unchanged.clone()).unwrap(), unchanged);
        assert!(expand(os(&["mcm", "run", "--config=/nonexistent/x.yaml"])).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
