//! Power drivers for baremend.
//!
//! A [`PowerDriver`] reads and changes the power state of one bare-metal host through its BMC. The
//! remediation controller fences hosts only through this API, so its guarantees matter:
//!
//! - A power state is only ever reported from a fresh read of the BMC; nothing is cached or assumed
//!   after a command was accepted. [`wait_for_power_state`] is how a caller learns that a command
//!   took effect.
//! - Every error says whether retrying can help ([`Error::is_retryable`]); authentication and TLS
//!   failures are permanent so callers do not lock BMC accounts with retry storms. [`retry`] is
//!   the one way to try again: it honours the BMC's `Retry-After` and a deadline.
//! - A [`Credentials`] may hold the previous password of a rotation: a login tries the one that
//!   worked last, then the other once, and only after a refusal of the password itself;
//!   [`PowerDriver::credential_used`] tells which one the BMC accepted.
//! - Credentials and session tokens never appear in `Debug`, `Display`, errors or logs.
//!
//! Drivers are created from a metal3-style BMC address (see [`BmcAddress`]) by a [`Connector`],
//! which also enforces at most one request in flight per BMC endpoint.
#![forbid(unsafe_code)]

mod address;
#[cfg(feature = "io")]
mod config;
#[cfg(feature = "io")]
mod connector;
mod credentials;
mod error;
#[cfg(feature = "io")]
mod gate;
#[cfg(feature = "io")]
pub mod ipmi;
#[cfg(feature = "io")]
mod power;
mod probe;
#[cfg(feature = "io")]
pub mod redfish;
#[cfg(feature = "io")]
mod retry;
#[cfg(feature = "io")]
mod rotation;
mod state;
#[cfg(feature = "io")]
mod tls;
#[cfg(feature = "io")]
mod wait;

pub use address::{BmcAddress, DriverKind};
#[cfg(feature = "io")]
pub use config::DriverConfig;
#[cfg(feature = "io")]
pub use connector::Connector;
pub use credentials::{CredentialUsed, Credentials, Password};
pub use error::{DriverErrorCategory, Error, Result};
#[cfg(feature = "io")]
pub use power::PowerDriver;
pub use probe::{PowerOffMode, ProbeReport};
#[cfg(feature = "io")]
pub use retry::{RetryPolicy, retry, retry_observed};
pub use state::PowerState;
#[cfg(feature = "io")]
pub use tls::TlsOptions;
#[cfg(feature = "io")]
pub use wait::{PowerOffOutcome, WaitOptions, power_off_confirmed, wait_for_power_state};
