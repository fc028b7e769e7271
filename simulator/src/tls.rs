//! Certificates for the simulated BMCs: self-signed ones for quick runs, and a throw-away CA
//! for tests that check certificate verification the way an operator would set it up.

use std::fmt;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::{Error, Result};

/// The names every simulator certificate is valid for.
pub const LOCAL_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];

/// A certificate chain and its private key, both PEM.
#[derive(Clone)]
pub struct TlsIdentity {
    /// The certificate (chain), PEM.
    pub cert_pem: String,
    /// The private key, PEM.
    pub key_pem: String,
}

impl fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("cert_pem", &format!("{} bytes", self.cert_pem.len()))
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

fn tls_error(context: &str) -> impl Fn(rcgen::Error) -> Error + '_ {
    move |e| Error::Tls(format!("{context}: {e}"))
}

/// A self-signed certificate for `names`; trust it by adding the certificate itself as CA.
pub fn self_signed(names: &[&str]) -> Result<TlsIdentity> {
    let key = KeyPair::generate().map_err(tls_error("key generation"))?;
    let params = leaf_params(names)?;
    let cert = params
        .self_signed(&key)
        .map_err(tls_error("self-signing"))?;
    Ok(TlsIdentity {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn leaf_params(names: &[&str]) -> Result<CertificateParams> {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).map_err(tls_error("certificate names"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "baremend-sim BMC");
    Ok(params)
}

/// A certificate authority that lives only as long as a test.
pub struct TestCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for TestCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// Generates a CA.
    pub fn generate(name: &str) -> Result<Self> {
        let key = KeyPair::generate().map_err(tls_error("CA key generation"))?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(tls_error("CA parameters"))?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).map_err(tls_error("CA signing"))?;
        Ok(TestCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM: what a client must trust.
    pub fn ca_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Issues a server certificate for `names`.
    pub fn issue(&self, names: &[&str]) -> Result<TlsIdentity> {
        let key = KeyPair::generate().map_err(tls_error("key generation"))?;
        let cert = leaf_params(names)?
            .signed_by(&key, &self.issuer)
            .map_err(tls_error("certificate signing"))?;
        Ok(TlsIdentity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A PEM certificate signing request for `name` with a new key, base64-encoded as a
/// CertificateSigningRequest's `spec.request` holds it (for clients of the simulated API
/// server and its tests).
pub fn signing_request(name: &str) -> Result<String> {
    use base64::Engine;
    let key = KeyPair::generate().map_err(|e| Error::Tls(format!("key generation: {e}")))?;
    let pem = CertificateParams::new(vec![name.to_owned()])
        .and_then(|params| params.serialize_request(&key))
        .and_then(|request| request.pem())
        .map_err(|e| Error::Tls(format!("certificate signing request: {e}")))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(pem))
}

/// A TLS acceptor for `identity`, with the ring provider set explicitly (never the process
/// default, so that the simulator works whatever the host program installed).
pub fn acceptor(identity: &TlsIdentity) -> Result<TlsAcceptor> {
    let certs = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Tls(format!("certificate PEM: {e}")))?;
    if certs.is_empty() {
        return Err(Error::Tls(
            "the certificate PEM holds no certificate".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes())
        .map_err(|e| Error::Tls(format!("private key PEM: {e}")))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Tls(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| Error::Tls(format!("certificate and key do not match: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
