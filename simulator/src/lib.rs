//! Simulated bare-metal hosts and their BMCs, for baremend's tests and its `lab`.
//!
//! - [`host::SimHost`]: one host's power state machine. Power changes take a configured delay
//!   on an injected [`clock::Clock`], and fault knobs make it misbehave the way real BMCs do.
//! - [`redfish::RedfishSim`]: a Redfish service (DMTF Redfish 1.15 subset: service root, systems
//!   with the Reset action and its ActionInfo, sessions, accounts and roles) in front of a set
//!   of hosts, with a control API under `/control` to inject faults at runtime.
//!
//! Everything runs in-process (library) or as the `baremend-sim` binary.
#![forbid(unsafe_code)]

pub mod apiserver;
pub mod clock;
pub mod cluster;
pub mod host;
pub mod hostile;
pub mod ipmi;
pub mod lockout;
pub mod plane;
pub mod redfish;
mod server;
pub mod tls;

/// Errors of the simulator crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket could not be bound or read.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address.
        address: String,
        /// The cause.
        source: std::io::Error,
    },
    /// TLS material could not be generated or loaded.
    #[error("TLS set-up failed: {0}")]
    Tls(String),
    /// A configuration value is unusable.
    #[error("invalid simulator configuration: {0}")]
    Config(String),
}

/// Result alias of the simulator crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
