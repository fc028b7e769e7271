//! The per-endpoint request gate: at most one request in flight to a BMC.
//!
//! Expected flow: the [`crate::Connector`] asks [`Gates::gate`] for the gate of an endpoint
//! (see [`crate::BmcAddress::request_gate`]) and hands it to the driver it builds; the driver
//! holds the lock for each request.
//!
//! Guarantees: every driver of one endpoint made by the same registry shares one gate, so a
//! power-state poller and a remediation never hit the same BMC in parallel (many BMCs fail
//! under parallel load).
//!
//! Caveats: the registry keeps weak references only; a gate lives as long as a driver holds
//! it, and a later driver of the same endpoint gets a new one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// The lock that keeps at most one request in flight to a BMC (per system of a Redfish
/// service that serves several: see [`crate::BmcAddress::request_gate`]).
pub(crate) type EndpointGate = Arc<tokio::sync::Mutex<()>>;

/// The gates handed out so far, by endpoint.
#[derive(Debug, Default)]
pub(crate) struct Gates {
    gates: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Gates {
    /// The gate of `endpoint`: the one a live driver already holds, or a new one.
    pub(crate) fn gate(&self, endpoint: &str) -> EndpointGate {
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
