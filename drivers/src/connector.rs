//! Creates drivers from addresses and keeps BMCs from being flooded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::address::{BmcAddress, DriverKind};
use crate::credentials::Credentials;
use crate::error::Result;
use crate::ipmi::{IpmiDriver, IpmiOptions};
use crate::power::PowerDriver;
use crate::redfish::RedfishDriver;
use crate::tls::TlsOptions;

/// Everything needed to talk to one BMC.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Where the BMC is and which protocol it speaks.
    pub address: BmcAddress,
    /// The account to use.
    pub credentials: Credentials,
    /// Certificate verification.
    pub tls: TlsOptions,
    /// The limit for one request, connection set-up included.
    pub request_timeout: Duration,
    /// The limit for an asynchronous BMC task (a Redfish task monitor) to finish.
    pub task_timeout: Duration,
    /// IPMI settings (ignored for Redfish).
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
}

/// The lock that keeps at most one request in flight to a BMC (per system of a Redfish
/// service that serves several: see [`crate::BmcAddress::request_gate`]).
pub(crate) type EndpointGate = Arc<tokio::sync::Mutex<()>>;

/// Builds drivers and shares one request gate per BMC (see [`crate::BmcAddress::request_gate`])
/// among all of them, so that a
/// power-state poller and a remediation never hit the same BMC in parallel (many BMCs fail
/// under parallel load).
#[derive(Debug, Default)]
pub struct Connector {
    gates: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Connector {
    /// A connector with no drivers yet.
    pub fn new() -> Self {
        Connector::default()
    }

    /// Creates the driver the address asks for.
    pub fn connect(&self, config: DriverConfig) -> Result<Arc<dyn PowerDriver>> {
        match config.address.kind() {
            DriverKind::Redfish => {
                let gate = self.gate(&config.address.request_gate());
                Ok(Arc::new(RedfishDriver::with_gate(config, gate)?))
            }
            DriverKind::Ipmi => {
                let gate = self.gate(&config.address.request_gate());
                Ok(Arc::new(IpmiDriver::with_gate(config, gate)?))
            }
        }
    }

    fn gate(&self, endpoint: &str) -> EndpointGate {
        // A poisoned map only means another thread panicked while inserting; the map itself
        // is still consistent, so keep using it.
        let mut gates = self
            .gates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        gates.retain(|_, gate| gate.strong_count() > 0);
        if let Some(gate) = gates.get(endpoint).and_then(Weak::upgrade) {
            return gate;
        }
        let gate = EndpointGate::default();
        gates.insert(endpoint.to_owned(), Arc::downgrade(&gate));
        gate
    }
}
