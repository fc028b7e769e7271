//! Creates drivers from addresses and keeps BMCs from being flooded.

use std::sync::Arc;

use crate::address::DriverKind;
use crate::config::DriverConfig;
use crate::error::Result;
use crate::gate::Gates;
use crate::ipmi::IpmiDriver;
use crate::power::PowerDriver;
use crate::redfish::RedfishDriver;

/// Builds drivers and shares one request gate per BMC (see [`crate::BmcAddress::request_gate`])
/// among all of them, so that a
/// power-state poller and a remediation never hit the same BMC in parallel (many BMCs fail
/// under parallel load).
#[derive(Debug, Default)]
pub struct Connector {
    gates: Gates,
}

impl Connector {
    /// A connector with no drivers yet.
    pub fn new() -> Self {
        Connector::default()
    }

    /// Creates the driver the address asks for, giving it only the settings it uses.
    pub fn connect(&self, config: DriverConfig) -> Result<Arc<dyn PowerDriver>> {
        let gate = self.gates.gate(&config.address.request_gate());
        match config.address.kind() {
            DriverKind::Redfish => Ok(Arc::new(RedfishDriver::with_gate(
                config.into_redfish(),
                gate,
            )?)),
            DriverKind::Ipmi => Ok(Arc::new(IpmiDriver::with_gate(
                config.address,
                config.credentials,
                config.ipmi,
                gate,
            )?)),
        }
    }
}
