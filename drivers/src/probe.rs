//! What a BMC says about itself and how a host is to be powered off: values, no I/O.

use crate::state::PowerState;

/// How to power a host off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PowerOffMode {
    /// Ask the operating system to shut down (ACPI). It may ignore the request: a hung kernel
    /// will. Callers that need the host off escalate to [`PowerOffMode::Forced`].
    Graceful,
    /// Cut the power now.
    Forced,
}

/// What a BMC says about itself; the output of `baremend bmc probe`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProbeReport {
    /// The protocol spoken, e.g. `Redfish 1.15.0`.
    pub protocol: String,
    /// How the driver authenticated, e.g. `session` or `basic`.
    pub authentication: String,
    /// The service description, e.g. vendor, product or service name.
    pub service: String,
    /// The systems the BMC lists.
    pub systems: Vec<String>,
    /// The system this driver controls.
    pub selected_system: String,
    /// The power operations the BMC advertises (Redfish reset types).
    pub power_operations: Vec<String>,
    /// Whether a forced power-off is available: a Redfish reset type the driver would send
    /// for one (`ForceOff`, else `PushPowerButton`; the standard values when the BMC lists
    /// none), or IPMI chassis control (its power down is mandatory).
    pub forced_off: bool,
    /// The power state read while probing.
    pub power_state: Option<PowerState>,
}
