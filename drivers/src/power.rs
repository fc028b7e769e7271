//! The power-driver API: what every BMC protocol implements.

use std::fmt;

use async_trait::async_trait;

use crate::credentials::CredentialUsed;
use crate::error::Result;
pub use crate::probe::{PowerOffMode, ProbeReport};
use crate::state::PowerState;

/// Reads and changes the power state of one host through its BMC.
///
/// # Guarantees
/// - [`PowerDriver::power_state`] always asks the BMC; it never answers from a cache.
/// - [`PowerDriver::power_off`] and [`PowerDriver::power_on`] return once the BMC accepted the
///   request (and, for asynchronous BMCs, once its task completed). They do **not** mean the
///   state was reached: use [`crate::wait_for_power_state`] to read it back.
/// - Every method may be called again after any outcome, including a timeout; commands are
///   idempotent (a host already in the requested state gets no command).
///
/// # Errors
/// Every failure is an [`crate::Error`]; [`crate::Error::is_retryable`] tells whether a retry can
/// help.
#[async_trait]
pub trait PowerDriver: Send + Sync + fmt::Debug {
    /// The BMC address this driver talks to, without credentials; for logs and messages.
    fn bmc(&self) -> &str;

    /// Reads the current power state from the BMC.
    async fn power_state(&self) -> Result<PowerState>;

    /// Opens what a command needs and asks nothing of the host: a Redfish service root and
    /// session. A command that follows then sends fewer requests on its way (a start's
    /// power-off: its read and the reset, not also the root and the login). The default opens
    /// nothing; a failure is the command's to meet again and tell.
    async fn connect(&self) -> Result<()> {
        Ok(())
    }

    /// [`PowerDriver::connect`], and what a power change decides on read ahead, still asking
    /// nothing of the host (a Redfish system's state and the reset types it advertises): a
    /// change that follows within a second sends its request only. A change uses what was
    /// read ahead only to send a request; "no change needed" is decided on a fresh read. The
    /// default connects.
    async fn ready_to_change_power(&self) -> Result<()> {
        self.connect().await
    }

    /// Requests power off.
    async fn power_off(&self, mode: PowerOffMode) -> Result<()>;

    /// Requests power on.
    async fn power_on(&self) -> Result<()>;

    /// Describes the BMC and what it advertises.
    async fn probe(&self) -> Result<ProbeReport>;

    /// Which password the BMC accepted at the last successful login (`None` before one, and
    /// for drivers that do not log in). [`CredentialUsed::Previous`] means the BMC still has
    /// the password the Secret's `previousPassword` holds.
    fn credential_used(&self) -> Option<CredentialUsed> {
        None
    }

    /// Releases what the driver holds on the BMC (a Redfish session, an IPMI session). The
    /// driver stays usable: the next call logs in again.
    async fn close(&self) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redfish_values_map_to_states_and_unknown_values_are_kept() {
        assert_eq!(PowerState::from_redfish("On"), PowerState::On);
        assert_eq!(PowerState::from_redfish("Off"), PowerState::Off);
        assert_eq!(
            PowerState::from_redfish("PoweringOff"),
            PowerState::PoweringOff
        );
        let paused = PowerState::from_redfish("Paused");
        assert_eq!(paused, PowerState::Unknown("Paused".into()));
        assert_eq!(paused.to_string(), "Unknown(Paused)");
        assert!(!paused.is_settled());
        assert_eq!(
            PowerState::from_redfish("off"),
            PowerState::Unknown("off".into())
        );
    }
}
