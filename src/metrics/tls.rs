//! The serving certificate of the HTTPS metrics endpoint: from files (what OpenShift's
//! service-ca writes into the Secret named by the Service's
//! `service.beta.openshift.io/serving-cert-secret-name` annotation, mounted into the pod),
//! read again when they change; or, without files, a self-signed one generated at start.
//!
//! Expected flow: [`CertSource::from_args`] → [`server_config`] → every TLS handshake asks
//! the resolver, which looks at the files' modification times and reloads them when they
//! changed.
//!
//! Guarantees: a certificate that fails to load at start is an error naming the file; a
//! rotated pair that fails to load (half written) keeps the previous one serving, with a
//! warning, and is tried again at the next handshake. Only ring's provider is used.
//!
//! Caveats: the key file's content never appears in errors or logs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rustls::ServerConfig;
use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::{Error, LocalError, Result};

/// The file names service-ca (and cert-manager, and `kubernetes.io/tls` Secrets) use.
pub const CERT_FILE: &str = "tls.crt";
/// The key's file name in a certificate directory.
pub const KEY_FILE: &str = "tls.key";

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// A PEM certificate chain and its PEM private key.
    Files {
        /// The chain.
        cert: PathBuf,
        /// The key.
        key: PathBuf,
    },
    /// Generated at start for these names.
    SelfSigned(Vec<String>),
}

impl CertSource {
    /// From the flags: a directory with `tls.crt` and `tls.key`, or the two files, or
    /// neither (self-signed for `localhost` and `host`).
    pub fn from_args(
        dir: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
        host: &str,
    ) -> Self {
        match (dir, cert, key) {
            (_, Some(cert), Some(key)) => CertSource::Files {
                cert: cert.to_owned(),
                key: key.to_owned(),
            },
            (Some(dir), _, _) => CertSource::Files {
                cert: dir.join(CERT_FILE),
                key: dir.join(KEY_FILE),
            },
            _ => CertSource::SelfSigned(vec!["localhost".into(), host.to_owned()]),
        }
    }
}

fn bad(what: &'static str, path: &Path, reason: String) -> Error {
    LocalError::BadFile {
        what,
        path: path.to_owned(),
        reason,
    }
    .into()
}

fn certified(chain: Vec<CertificateDer<'static>>, key: &PrivateKeyDer<'_>) -> Result<CertifiedKey> {
    let signing = any_supported_type(key).map_err(|e| LocalError::Render {
        what: "the metrics serving key",
        reason: e.to_string(),
    })?;
    let certified = CertifiedKey::new(chain, signing);
    // A half-rotated pair (new key, old certificate) must not be served.
    certified.keys_match().map_err(|e| LocalError::Render {
        what: "the metrics serving certificate",
        reason: format!("the key does not belong to the certificate: {e}"),
    })?;
    Ok(certified)
}

/// Reads a PEM chain and key.
fn load(cert: &Path, key: &Path) -> Result<CertifiedKey> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|items| items.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| bad("metrics certificate", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(bad(
            "metrics certificate",
            cert,
            "no CERTIFICATE block".into(),
        ));
    }
    // The parser's error names the section, never the key material.
    let private =
        PrivateKeyDer::from_pem_file(key).map_err(|e| bad("metrics key", key, e.to_string()))?;
    certified(chain, &private).map_err(|e| bad("metrics key", key, e.to_string()))
}

fn self_signed(names: &[String]) -> Result<CertifiedKey> {
    let render = |e: rcgen::Error| LocalError::Render {
        what: "the self-signed metrics certificate",
        reason: e.to_string(),
    };
    let generated = rcgen::generate_simple_self_signed(names.to_vec()).map_err(render)?;
    let key = PrivateKeyDer::try_from(generated.signing_key.serialize_der()).map_err(|e| {
        LocalError::Render {
            what: "the self-signed metrics certificate",
            reason: e.to_string(),
        }
    })?;
    certified(vec![generated.cert.der().clone()], &key)
}

/// The files' modification times: a change to either means a reload.
type Stamp = (Option<SystemTime>, Option<SystemTime>);

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    (modified(cert), modified(key))
}

/// Serves the files' certificate, reloaded when they change.
#[derive(Debug)]
struct FileResolver {
    cert: PathBuf,
    key: PathBuf,
    current: Mutex<(Stamp, Arc<CertifiedKey>)>,
}

impl FileResolver {
    fn start(cert: PathBuf, key: PathBuf) -> Result<Self> {
        let stamped = stamp(&cert, &key);
        let loaded = Arc::new(load(&cert, &key)?);
        Ok(FileResolver {
            cert,
            key,
            current: Mutex::new((stamped, loaded)),
        })
    }

    fn current(&self) -> Arc<CertifiedKey> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let now = stamp(&self.cert, &self.key);
        if now != current.0 {
            match load(&self.cert, &self.key) {
                Ok(loaded) => {
                    tracing::info!(cert = %self.cert.display(), "reloaded the metrics serving certificate");
                    *current = (now, Arc::new(loaded));
                }
                Err(error) => {
                    tracing::warn!(%error, "the changed metrics certificate cannot be loaded (yet); serving the previous one");
                }
            }
        }
        current.1.clone()
    }
}

impl ResolvesServerCert for FileResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A resolver that always serves one certificate.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The TLS configuration of the metrics endpoint (HTTP/1.1, ring's provider).
pub fn server_config(source: &CertSource) -> Result<Arc<ServerConfig>> {
    let resolver: Arc<dyn ResolvesServerCert> = match source {
        CertSource::Files { cert, key } => {
            let resolver = FileResolver::start(cert.clone(), key.clone())?;
            tracing::info!(cert = %cert.display(), key = %key.display(), "serving /metrics with the certificate from files (reloaded when they change)");
            Arc::new(resolver)
        }
        CertSource::SelfSigned(names) => {
            tracing::info!(
                ?names,
                "no metrics certificate given: serving /metrics with a self-signed certificate generated at start"
            );
            Arc::new(Fixed(Arc::new(self_signed(names)?)))
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| LocalError::Render {
            what: "the metrics TLS configuration",
            reason: e.to_string(),
        })?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_pick_files_a_directory_or_a_generated_certificate() {
        let dir = Path::new("/certs");
        assert_eq!(
            CertSource::from_args(Some(dir), None, None, "pod"),
            CertSource::Files {
                cert: dir.join("tls.crt"),
                key: dir.join("tls.key")
            }
        );
        assert_eq!(
            CertSource::from_args(None, Some(Path::new("c")), Some(Path::new("k")), "pod"),
            CertSource::Files {
                cert: "c".into(),
                key: "k".into()
            }
        );
        assert_eq!(
            CertSource::from_args(None, None, None, "pod"),
            CertSource::SelfSigned(vec!["localhost".into(), "pod".into()])
        );
    }

    #[test]
    fn unusable_files_are_errors_that_name_the_file() {
        let dir = std::env::temp_dir().join(format!("baremend-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = dir.join("tls.crt");
        let key = dir.join("tls.key");
        std::fs::write(&cert, "not a certificate").unwrap();
        std::fs::write(&key, "not a key").unwrap();
        let source = CertSource::Files {
            cert: cert.clone(),
            key,
        };
        let error = server_config(&source).unwrap_err().to_string();
        assert!(error.contains(&cert.display().to_string()), "{error}");
        assert!(server_config(&CertSource::SelfSigned(vec!["localhost".into()])).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
