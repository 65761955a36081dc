//! Where an out-of-tree driver listens: `unix:///path` or loopback TCP (`http://127.0.0.1:PORT`), and the
//! `PROVIDER=ENDPOINT` routes of `mcm run --driver`.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

/// A driver endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverEndpoint {
    /// A Unix domain socket (`unix:///run/driver.sock`).
    Unix(PathBuf),
    /// A loopback TCP address (`http://127.0.0.1:50051`, `127.0.0.1:50051`, `http://[::1]:50051`).
    Tcp(SocketAddr),
}

/// Why an endpoint or route was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("driver endpoint {given:?}: {reason}")]
pub struct EndpointError {
    /// What was given.
    pub given: String,
    /// Why it cannot be used.
    pub reason: String,
}

impl FromStr for DriverEndpoint {
    type Err = EndpointError;

    fn from_str(given: &str) -> Result<Self, Self::Err> {
        let refuse = |reason: &str| EndpointError { given: given.to_string(), reason: reason.to_string() };
        if let Some(path) = given.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(refuse("a unix endpoint needs an absolute path (unix:///run/driver.sock)"));
            }
            return Ok(DriverEndpoint::Unix(PathBuf::from(path)));
        }
        let rest = given.strip_prefix("http://").or_else(|| given.strip_prefix("tcp://")).unwrap_or(given);
        if given.contains("://") && rest == given {
            return Err(refuse("use unix:///path or http://127.0.0.1:PORT (the protocol has no TLS)"));
        }
        let addr: SocketAddr = rest
            .trim_end_matches('/')
            .parse()
            .map_err(|_| refuse("expected unix:///path or http://IP:PORT with a loopback IP"))?;
        // Secret data travels in every call without TLS: only this host may see it.
        if !addr.ip().is_loopback() {
            return Err(refuse(
                "only loopback addresses (127.0.0.1, ::1) are allowed: calls carry the class secret without TLS; \
                 run the driver beside mcm (a sidecar) or on a Unix socket",
            ));
        }
        Ok(DriverEndpoint::Tcp(addr))
    }
}

impl fmt::Display for DriverEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverEndpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            DriverEndpoint::Tcp(addr) => write!(f, "http://{addr}"),
        }
    }
}

/// `PROVIDER=ENDPOINT`: classes whose `provider` is `PROVIDER` go to the driver at `ENDPOINT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverRoute {
    /// The `MachineClass.provider` value.
    pub provider: String,
    /// Where its driver listens.
    pub endpoint: DriverEndpoint,
}

impl FromStr for DriverRoute {
    type Err = EndpointError;

    fn from_str(given: &str) -> Result<Self, Self::Err> {
        let Some((provider, endpoint)) = given.split_once('=') else {
            return Err(EndpointError {
                given: given.to_string(),
                reason: "expected PROVIDER=ENDPOINT (OpenStack=unix:///run/openstack-driver.sock)".to_string(),
            });
        };
        let provider = provider.trim();
        if provider.is_empty() {
            return Err(EndpointError { given: given.to_string(), reason: "the provider name is empty".to_string() });
        }
        Ok(DriverRoute { provider: provider.to_string(), endpoint: endpoint.trim().parse()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_print() {
        let table = [
            ("unix:///run/d.sock", Ok("unix:///run/d.sock")),
            ("http://127.0.0.1:50051", Ok("http://127.0.0.1:50051")),
            ("127.0.0.1:50051", Ok("http://127.0.0.1:50051")),
            ("tcp://127.0.0.1:7/", Ok("http://127.0.0.1:7")),
            ("http://[::1]:9", Ok("http://[::1]:9")),
            ("unix://run/d.sock", Err("absolute path")),
            ("http://10.0.0.1:50051", Err("only loopback")),
            ("https://127.0.0.1:1", Err("no TLS")),
            ("localhost:1", Err("loopback IP")),
        ];
        for (given, want) in table {
            match (given.parse::<DriverEndpoint>(), want) {
                (Ok(e), Ok(shown)) => assert_eq!(e.to_string(), shown, "{given}"),
                (Err(e), Err(why)) => assert!(e.to_string().contains(why), "{given}: {e}"),
                (got, want) => panic!("{given}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn routes_name_a_provider() {
        let route: DriverRoute = "OpenStack=unix:///run/os.sock".parse().unwrap();
        assert_eq!(route.provider, "OpenStack");
        assert_eq!(route.endpoint, DriverEndpoint::Unix("/run/os.sock".into()));
        assert!("unix:///run/os.sock".parse::<DriverRoute>().unwrap_err().reason.contains("PROVIDER=ENDPOINT"));
        assert!("=unix:///x".parse::<DriverRoute>().unwrap_err().reason.contains("empty"));
    }
}
