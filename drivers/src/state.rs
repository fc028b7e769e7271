//! The power state a BMC reports: its own module so that the error type and the driver API can
//! both name it without importing each other.

use std::fmt;

/// A power state as read from a BMC.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PowerState {
    /// The host is powered on.
    On,
    /// The host is powered off.
    Off,
    /// The host is between Off and On.
    PoweringOn,
    /// The host is between On and Off.
    PoweringOff,
    /// A value this driver does not know (vendor extension, `Paused`, missing field); kept raw so
    /// that it can be shown. Never treated as Off.
    Unknown(String),
}

impl PowerState {
    /// Maps a Redfish `PowerState` value. Unknown values are kept, never rejected.
    pub fn from_redfish(value: &str) -> Self {
        match value {
            "On" => PowerState::On,
            "Off" => PowerState::Off,
            "PoweringOn" => PowerState::PoweringOn,
            "PoweringOff" => PowerState::PoweringOff,
            other => PowerState::Unknown(other.to_owned()),
        }
    }

    /// Whether this state is the settled state `On` or `Off` (not a transition or unknown).
    pub fn is_settled(&self) -> bool {
        matches!(self, PowerState::On | PowerState::Off)
    }
}

impl fmt::Display for PowerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PowerState::On => f.write_str("On"),
            PowerState::Off => f.write_str("Off"),
            PowerState::PoweringOn => f.write_str("PoweringOn"),
            PowerState::PoweringOff => f.write_str("PoweringOff"),
            PowerState::Unknown(raw) if raw.is_empty() => f.write_str("Unknown"),
            PowerState::Unknown(raw) => write!(f, "Unknown({raw})"),
        }
    }
}
