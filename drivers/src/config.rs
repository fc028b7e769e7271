//! The configuration of one BMC connection, and how it splits into what each driver takes.
//!
//! Expected flow: a caller fills a [`DriverConfig`] and gives it to [`crate::Connector::connect`],
//! which hands the Redfish driver a [`RedfishConfig`] and the IPMI driver the address, the
//! credentials and the [`IpmiOptions`].
//!
//! Guarantees: each driver receives only the settings it uses; the drivers do not import this
//! module, so the factory and the drivers do not depend on each other in a circle.
//!
//! Caveats: settings of the other protocol in a [`DriverConfig`] are dropped, not checked.

use std::time::Duration;

use crate::address::BmcAddress;
use crate::credentials::Credentials;
use crate::ipmi::IpmiOptions;
use crate::redfish::RedfishConfig;
use crate::tls::TlsOptions;

/// Everything needed to talk to one BMC, whichever protocol its address names.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Where the BMC is and which protocol it speaks.
    pub address: BmcAddress,
    /// The account to use.
    pub credentials: Credentials,
    /// Certificate verification (Redfish).
    pub tls: TlsOptions,
    /// The limit for one request, connection set-up included (Redfish).
    pub request_timeout: Duration,
    /// The limit for an asynchronous BMC task (a Redfish task monitor) to finish.
    pub task_timeout: Duration,
    /// IPMI settings (not given to the Redfish driver).
    pub ipmi: IpmiOptions,
}

impl DriverConfig {
    /// A configuration with default timeouts (20 s per request, 120 s per BMC task).
    pub fn new(address: BmcAddress, credentials: Credentials, tls: TlsOptions) -> Self {
        DriverConfig {
            address,
            credentials,
            tls,
            request_timeout: Duration::from_secs(20),
            task_timeout: Duration::from_secs(120),
            ipmi: IpmiOptions::default(),
        }
    }

    /// The part the Redfish driver uses; the IPMI options are dropped.
    pub fn into_redfish(self) -> RedfishConfig {
        RedfishConfig {
            address: self.address,
            credentials: self.credentials,
            tls: self.tls,
            request_timeout: self.request_timeout,
            task_timeout: self.task_timeout,
        }
    }
}
