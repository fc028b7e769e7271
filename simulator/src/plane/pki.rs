//! The certificates and keys a test control plane needs, made fresh for each one: a cluster
//! CA, the API server's serving certificate, client certificates for the admin and
//! kube-controller-manager, and the ServiceAccount token signing key.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::tls::TlsIdentity;
use crate::{Error, Result};

fn pki_error(context: &'static str) -> impl Fn(rcgen::Error) -> Error {
    move |e| Error::Tls(format!("control plane {context}: {e}"))
}

/// The cluster's CA: it signs the serving certificate and the client certificates (the API
/// server trusts it as `--client-ca-file`, kube-controller-manager signs CSRs with it).
pub struct ClusterCa {
    /// The CA certificate and key, PEM.
    pub identity: TlsIdentity,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCa").finish_non_exhaustive()
    }
}

impl ClusterCa {
    /// A new CA.
    pub fn generate() -> Result<Self> {
        let key = KeyPair::generate().map_err(pki_error("CA key"))?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(pki_error("CA"))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "baremend-test-plane-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).map_err(pki_error("CA signing"))?;
        Ok(ClusterCa {
            identity: TlsIdentity {
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            },
            issuer: Issuer::new(params, key),
        })
    }

    /// The API server's serving certificate: loopback by name and address, and the in-cluster
    /// names and Service address (`10.0.0.1` in the plane's service range) pods use.
    pub fn serving(&self) -> Result<TlsIdentity> {
        let mut params = CertificateParams::new(vec![
            "localhost".to_owned(),
            "kubernetes".to_owned(),
            "kubernetes.default".to_owned(),
            "kubernetes.default.svc".to_owned(),
        ])
        .map_err(pki_error("serving certificate names"))?;
        for ip in ["127.0.0.1", "10.0.0.1"] {
            let ip = ip
                .parse()
                .map_err(|_| Error::Tls(format!("address {ip}")))?;
            params.subject_alt_names.push(SanType::IpAddress(ip));
        }
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate: the API server reads the user from the common name and the
    /// groups from the organisations.
    pub fn client(&self, user: &str, groups: &[&str]) -> Result<TlsIdentity> {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(pki_error("client"))?;
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Result<TlsIdentity> {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().map_err(pki_error("key"))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(pki_error("signing"))?;
        Ok(TlsIdentity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The ServiceAccount token signing key (ECDSA P-256), PEM: the private key (PKCS#8), with
/// which the API server signs tokens and kube-controller-manager's token controller the legacy
/// token Secrets, and the public key the API server verifies with (it reads no public key out
/// of a PKCS#8 private key file).
pub fn service_account_key() -> Result<(String, String)> {
    KeyPair::generate()
        .map(|key| (key.serialize_pem(), key.public_key_pem()))
        .map_err(pki_error("ServiceAccount key"))
}
