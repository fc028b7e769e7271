//! TLS settings for a BMC connection.

use std::fmt;

/// How to verify a BMC's TLS certificate. Verification is on by default.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM certificates to trust instead of the system roots (BMCs usually have certificates
    /// from a private CA, or self-signed ones that the operator exports).
    pub ca_bundle_pem: Option<Vec<u8>>,
    /// Accept any certificate. An explicit, per-BMC opt-in; never a default.
    pub insecure: bool,
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsOptions")
            .field(
                "ca_bundle_pem",
                &self
                    .ca_bundle_pem
                    .as_ref()
                    .map(|pem| format!("{} bytes", pem.len())),
            )
            .field("insecure", &self.insecure)
            .finish()
    }
}
