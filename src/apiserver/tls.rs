//! A throw-away certificate authority and serving certificate for `127.0.0.1` / `localhost`.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// PEM-encoded CA certificate, serving certificate and its private key.
pub struct ServingCertificate {
    /// The CA certificate clients trust (`certificate-authority-data`).
    pub ca_pem: String,
    /// The serving certificate chain (leaf then CA), PEM.
    pub chain_pem: String,
    /// The serving certificate's private key, PEM.
    pub key_pem: String,
}

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
#[error("could not generate the API server's TLS certificate: {0}")]
pub struct TlsError(#[from] rcgen::Error);

/// Generates a new CA and a serving certificate for localhost, 127.0.0.1 and ::1.
pub fn generate() -> Result<ServingCertificate, TlsError> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.distinguished_name.push(DnType::CommonName, "mcm embedded API server CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

    let mut leaf_params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()])?;
    leaf_params.distinguished_name.push(DnType::CommonName, "mcm embedded API server");
    let leaf_key = KeyPair::generate()?;
    let leaf = leaf_params.signed_by(&leaf_key, &ca)?;
    Ok(ServingCertificate {
        ca_pem: ca.pem(),
        chain_pem: format!("{}{}", leaf.pem(), ca.pem()),
        key_pem: leaf_key.serialize_pem(),
    })
}
