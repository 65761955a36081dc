//! Authentication: the one bearer token every request must carry, compared in constant time, and the few paths
//! anyone may read without it (kube-apiserver's `system:public-info-viewer`: `/healthz`, `/livez`, `/readyz`,
//! `/version`).
//!
//! Below `server` (which calls [`authenticate`]) and `state` (which holds the token); imports nothing of the server.

use std::path::Path;

use axum::http::{HeaderMap, header};
use rand::RngCore;
use subtle::ConstantTimeEq;

/// The secret a client presents as `Authorization: Bearer <token>`. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(String);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

/// Why a token could not be used or kept.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The text is not a token this server accepts (it goes into a kubeconfig and an HTTP header).
    #[error("a bearer token must be 16 to 256 characters of A-Z, a-z, 0-9, '-', '_', '.' or '~'")]
    Malformed,
    /// The token file held something else.
    #[error("the token file {path} does not hold a token; remove it to have a new one generated")]
    MalformedFile {
        /// The file.
        path: String,
    },
    /// The token file could not be read or written.
    #[error("could not {action} the token file {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

impl BearerToken {
    /// A new token: 32 bytes from a cryptographically secure generator (rand's thread RNG, seeded by the OS), in
    /// hex.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        BearerToken(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// A token chosen by the caller (tests, a token file).
    pub fn new(token: impl Into<String>) -> Result<Self, TokenError> {
        let token = token.into();
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~');
        if (16..=256).contains(&token.len()) && token.chars().all(allowed) {
            Ok(BearerToken(token))
        } else {
            Err(TokenError::Malformed)
        }
    }

    /// The secret itself, for a kubeconfig or a client's header. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this token, in time independent of where they differ.
    pub fn matches(&self, given: &str) -> bool {
        bool::from(self.0.as_bytes().ct_eq(given.as_bytes()))
    }

    /// The token kept in `path` (written owner-only), or a new one written there when the file is missing, so a
    /// restarted server keeps accepting the kubeconfigs it handed out.
    pub fn load_or_create(path: &Path) -> Result<Self, TokenError> {
        let io = |action| {
            let path = path.display().to_string();
            move |source| TokenError::Io { action, path, source }
        };
        match std::fs::read_to_string(path) {
            Ok(text) => BearerToken::new(text.trim())
                .map_err(|_| TokenError::MalformedFile { path: path.display().to_string() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let token = BearerToken::generate();
                super::persist::write_private(path, format!("{}\n", token.0).as_bytes()).map_err(io("write"))?;
                Ok(token)
            }
            Err(e) => Err(io("read")(e)),
        }
    }
}

impl Default for BearerToken {
    fn default() -> Self {
        BearerToken::generate()
    }
}

/// Who a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// It presented the token.
    Authenticated,
    /// It presented no bearer token: it may read only the public paths.
    Anonymous,
    /// It presented a bearer token that is not ours (401 everywhere, as kube-apiserver: a failed authentication
    /// does not fall back to anonymous).
    Rejected,
}

/// Who the request with these headers is. An `Authorization` header of another scheme counts as no token (as in
/// kube-apiserver, whose bearer-token authenticator ignores it).
pub fn authenticate(token: &BearerToken, headers: &HeaderMap) -> Caller {
    let Some(value) = headers.get(header::AUTHORIZATION) else { return Caller::Anonymous };
    let Ok(value) = value.to_str() else { return Caller::Rejected };
    let mut parts = value.trim().splitn(2, ' ');
    let (Some(scheme), Some(given)) = (parts.next(), parts.next()) else { return Caller::Anonymous };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Caller::Anonymous;
    }
    if token.matches(given.trim()) { Caller::Authenticated } else { Caller::Rejected }
}

/// Whether an anonymous caller may read `path`: the health checks and the version, as kube-apiserver's
/// `system:public-info-viewer` role allows by default (load balancers and probes carry no credentials).
pub fn public_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/livez" | "/readyz" | "/version" | "/version/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(authorization: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = authorization {
            headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn callers_are_told_apart_by_their_authorization_header() {
        let token = BearerToken::new("0123456789abcdef-token").unwrap();
        let cases = [
            (None, Caller::Anonymous),
            (Some("Bearer 0123456789abcdef-token"), Caller::Authenticated),
            (Some("bearer 0123456789abcdef-token "), Caller::Authenticated),
            (Some("Bearer 0123456789abcdef-tokeN"), Caller::Rejected),
            (Some("Bearer 0123456789abcdef-token-and-more"), Caller::Rejected),
            (Some("Bearer "), Caller::Anonymous),
            (Some("Bearer x"), Caller::Rejected),
            (Some("Basic dXNlcjpwYXNz"), Caller::Anonymous),
            (Some("Bearer"), Caller::Anonymous),
        ];
        for (header, want) in cases {
            assert_eq!(authenticate(&token, &headers(header)), want, "{header:?}");
        }
    }

    #[test]
    fn generated_tokens_differ_and_are_accepted_by_their_own_rules() {
        let a = BearerToken::generate();
        let b = BearerToken::generate();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 64);
        assert!(BearerToken::new(a.expose()).is_ok());
        assert!(BearerToken::new("short").is_err());
        assert!(BearerToken::new("has a space in it, too long").is_err());
        assert!(BearerToken::new("0123456789abcdef\"quote").is_err());
        assert!(!format!("{a:?}").contains(a.expose()));
    }

    #[test]
    fn only_health_and_version_are_public() {
        for path in ["/healthz", "/livez", "/readyz", "/version"] {
            assert!(public_path(path), "{path}");
        }
        for path in ["/", "/api", "/apis", "/metrics", "/openapi/v2", "/api/v1/secrets", "/healthz/etcd"] {
            assert!(!public_path(path), "{path}");
        }
    }

    #[test]
    fn a_token_file_is_created_owner_only_and_read_back() {
        let dir = std::env::temp_dir().join(format!("mcm-token-{}", uuid::Uuid::new_v4()));
        let path = dir.join("token");
        let first = BearerToken::load_or_create(&path).unwrap();
        assert_eq!(BearerToken::load_or_create(&path).unwrap(), first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        std::fs::write(&path, "not a token\n").unwrap();
        let err = BearerToken::load_or_create(&path).unwrap_err().to_string();
        assert!(err.contains("does not hold a token") && !err.contains("not a token\n"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
