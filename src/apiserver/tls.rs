//! The server's own certificate authority and the serving certificate it signs for `localhost`, `127.0.0.1`, `::1`
//! and the listen address; the CA is what a kubeconfig's `certificate-authority-data` carries. A CA is made fresh for
//! each server, or kept in a directory ([`CertificateAuthority::load_or_create`]) so that a restarted server is
//! still trusted by the kubeconfigs it handed out.

use std::net::IpAddr;
use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

const CA_NAME: &str = "mcm embedded API server CA";

/// A CA certificate and its private key, PEM. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct CertificateAuthority {
    cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority").finish_non_exhaustive()
    }
}

/// PEM-encoded serving certificate chain and its private key.
pub struct ServingCertificate {
    /// The serving certificate chain (leaf then CA), PEM.
    pub chain_pem: String,
    /// The serving certificate's private key, PEM.
    pub key_pem: String,
}

/// Why certificates could not be made, read or kept.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen refused.
    #[error("could not generate the API server's TLS certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A CA file could not be read or written.
    #[error("could not {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Only one of the CA's two files is there.
    #[error("{present} exists but {missing} does not; remove {present} to have a new CA generated")]
    HalfCa {
        /// The file found.
        present: String,
        /// The file missing.
        missing: String,
    },
}

fn ca_params() -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    Ok(params)
}

impl CertificateAuthority {
    /// A new CA (ECDSA P-256).
    pub fn generate() -> Result<Self, TlsError> {
        let key = KeyPair::generate()?;
        let cert = ca_params()?.self_signed(&key)?;
        Ok(CertificateAuthority { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// The CA kept in `dir` (`ca.crt`, and `ca.key` readable by the owner only), or a new one written there.
    pub fn load_or_create(dir: &Path) -> Result<Self, TlsError> {
        let cert_path = dir.join("ca.crt");
        let key_path = dir.join("ca.key");
        let read = |path: &Path| match std::fs::read_to_string(path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(TlsError::Io { action: "read", path: path.display().to_string(), source }),
        };
        match (read(&cert_path)?, read(&key_path)?) {
            (Some(cert_pem), Some(key_pem)) => {
                let ca = CertificateAuthority { cert_pem, key_pem };
                // Fail now, not at the first connection, if the files do not make a CA.
                ca.issuer()?;
                Ok(ca)
            }
            (None, None) => {
                let ca = CertificateAuthority::generate()?;
                let write = |path: &Path, text: &str| {
                    super::persist::write_private(path, text.as_bytes()).map_err(|source| TlsError::Io {
                        action: "write",
                        path: path.display().to_string(),
                        source,
                    })
                };
                // The key first: a crash in between leaves only the key, which is reported, never a lone certificate
                // that would be trusted with no key behind it.
                write(&key_path, &ca.key_pem)?;
                write(&cert_path, &ca.cert_pem)?;
                Ok(ca)
            }
            (Some(_), None) => Err(TlsError::HalfCa {
                present: cert_path.display().to_string(),
                missing: key_path.display().to_string(),
            }),
            (None, Some(_)) => Err(TlsError::HalfCa {
                present: key_path.display().to_string(),
                missing: cert_path.display().to_string(),
            }),
        }
    }

    /// The CA certificate, PEM: what clients trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    fn issuer(&self) -> Result<Issuer<'static, KeyPair>, TlsError> {
        let key = KeyPair::from_pem(&self.key_pem)?;
        Ok(Issuer::new(ca_params()?, key))
    }

    /// A serving certificate for `localhost`, `127.0.0.1`, `::1` and `listen_ip` (unless it is unspecified, e.g.
    /// `0.0.0.0`), signed by this CA.
    pub fn serving_certificate(&self, listen_ip: IpAddr) -> Result<ServingCertificate, TlsError> {
        let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
        if !listen_ip.is_unspecified() && !listen_ip.is_loopback() {
            names.push(listen_ip.to_string());
        }
        let mut params = CertificateParams::new(names)?;
        params.distinguished_name.push(DnType::CommonName, "mcm embedded API server");
        let key = KeyPair::generate()?;
        let leaf = params.signed_by(&key, &self.issuer()?)?;
        Ok(ServingCertificate { chain_pem: format!("{}{}", leaf.pem(), self.cert_pem), key_pem: key.serialize_pem() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_ca_is_read_back_and_its_key_is_the_owners_only() {
        let dir = std::env::temp_dir().join(format!("mcm-ca-{}", uuid::Uuid::new_v4()));
        let first = CertificateAuthority::load_or_create(&dir).unwrap();
        let again = CertificateAuthority::load_or_create(&dir).unwrap();
        assert_eq!(first.cert_pem(), again.cert_pem());
        assert!(again.serving_certificate("10.1.2.3".parse().unwrap()).is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(dir.join("ca.key")).unwrap().permissions().mode() & 0o777, 0o600);
        }
        assert!(!format!("{first:?}").contains("PRIVATE KEY"));
        std::fs::remove_file(dir.join("ca.crt")).unwrap();
        let err = CertificateAuthority::load_or_create(&dir).unwrap_err().to_string();
        assert!(err.contains("ca.key exists but") && err.contains("ca.crt does not"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
