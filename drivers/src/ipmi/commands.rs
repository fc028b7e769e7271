//! The IPMI commands the driver sends, as `ipmi-rs-core` commands: encoding into a
//! [`Message`] and parsing of the success response. `ipmi-rs-core` has the App commands
//! (Get Device ID, Get Channel Cipher Suites); the chassis and session commands are ours.

use ipmi_rs_core::app::auth::PrivilegeLevel;
use ipmi_rs_core::connection::{IpmiCommand, Message, NetFn, NotEnoughData};

/// Get Chassis Status (NetFn Chassis, 0x01).
#[derive(Debug, Clone, Copy)]
pub struct GetChassisStatus;

/// The fields of Get Chassis Status that matter for power control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChassisStatus {
    /// System power is on.
    pub power_on: bool,
    /// Power overload.
    pub power_overload: bool,
    /// Power fault (a main power subsystem fault).
    pub power_fault: bool,
    /// Power control fault: the controller tried to change the power and failed.
    pub power_control_fault: bool,
}

impl ChassisStatus {
    /// The fault bits that are set, named, for messages.
    pub fn faults(&self) -> Vec<&'static str> {
        let mut faults = Vec::new();
        if self.power_fault {
            faults.push("power fault");
        }
        if self.power_control_fault {
            faults.push("power control fault");
        }
        if self.power_overload {
            faults.push("power overload");
        }
        faults
    }
}

impl From<GetChassisStatus> for Message {
    fn from(_: GetChassisStatus) -> Message {
        Message::new_request(NetFn::Chassis, 0x01, Vec::new())
    }
}

impl IpmiCommand for GetChassisStatus {
    type Output = ChassisStatus;
    type Error = NotEnoughData;

    fn parse_success_response(data: &[u8]) -> Result<ChassisStatus, NotEnoughData> {
        // Current power state, last power event, misc. chassis state (front panel optional).
        if data.len() < 3 {
            return Err(NotEnoughData);
        }
        let power = data[0];
        Ok(ChassisStatus {
            power_on: power & 0x01 != 0,
            power_overload: power & 0x02 != 0,
            power_fault: power & 0x08 != 0,
            power_control_fault: power & 0x10 != 0,
        })
    }
}

/// Chassis Control (NetFn Chassis, 0x02).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChassisControl {
    /// Hard power off.
    PowerDown,
    /// Power on.
    PowerUp,
    /// Power cycle.
    PowerCycle,
    /// Hard reset.
    HardReset,
    /// ACPI soft shutdown: the OS decides whether to comply.
    SoftShutdown,
}

impl ChassisControl {
    /// The request data byte.
    pub fn code(self) -> u8 {
        match self {
            ChassisControl::PowerDown => 0x00,
            ChassisControl::PowerUp => 0x01,
            ChassisControl::PowerCycle => 0x02,
            ChassisControl::HardReset => 0x03,
            ChassisControl::SoftShutdown => 0x05,
        }
    }

    /// The control for a request data byte.
    pub fn from_code(code: u8) -> Option<Self> {
        match code & 0x0F {
            0x00 => Some(ChassisControl::PowerDown),
            0x01 => Some(ChassisControl::PowerUp),
            0x02 => Some(ChassisControl::PowerCycle),
            0x03 => Some(ChassisControl::HardReset),
            0x05 => Some(ChassisControl::SoftShutdown),
            _ => None,
        }
    }
}

impl From<ChassisControl> for Message {
    fn from(control: ChassisControl) -> Message {
        Message::new_request(NetFn::Chassis, 0x02, vec![control.code()])
    }
}

impl IpmiCommand for ChassisControl {
    type Output = ();
    type Error = NotEnoughData;

    fn parse_success_response(_: &[u8]) -> Result<(), NotEnoughData> {
        Ok(())
    }
}

/// Set Session Privilege Level (NetFn App, 0x3B).
#[derive(Debug, Clone, Copy)]
pub struct SetSessionPrivilegeLevel(pub PrivilegeLevel);

impl From<SetSessionPrivilegeLevel> for Message {
    fn from(request: SetSessionPrivilegeLevel) -> Message {
        Message::new_request(NetFn::App, 0x3B, vec![u8::from(request.0)])
    }
}

impl IpmiCommand for SetSessionPrivilegeLevel {
    type Output = Option<PrivilegeLevel>;
    type Error = NotEnoughData;

    fn parse_success_response(data: &[u8]) -> Result<Option<PrivilegeLevel>, NotEnoughData> {
        let level = data.first().ok_or(NotEnoughData)?;
        Ok(PrivilegeLevel::try_from(*level).ok())
    }
}

/// Close Session (NetFn App, 0x3C), naming the BMC's session id.
#[derive(Debug, Clone, Copy)]
pub struct CloseSession(pub u32);

impl From<CloseSession> for Message {
    fn from(request: CloseSession) -> Message {
        Message::new_request(NetFn::App, 0x3C, request.0.to_le_bytes().to_vec())
    }
}

impl IpmiCommand for CloseSession {
    type Output = ();
    type Error = NotEnoughData;

    fn parse_success_response(_: &[u8]) -> Result<(), NotEnoughData> {
        Ok(())
    }
}

/// Command numbers the simulated BMC dispatches on.
pub mod numbers {
    /// App: Get Device ID.
    pub const GET_DEVICE_ID: u8 = 0x01;
    /// App: Get Channel Authentication Capabilities.
    pub const GET_CHANNEL_AUTH_CAPABILITIES: u8 = 0x38;
    /// App: Set Session Privilege Level.
    pub const SET_SESSION_PRIVILEGE: u8 = 0x3B;
    /// App: Close Session.
    pub const CLOSE_SESSION: u8 = 0x3C;
    /// App: Get Channel Cipher Suites.
    pub const GET_CHANNEL_CIPHER_SUITES: u8 = 0x54;
    /// Chassis: Get Chassis Status.
    pub const GET_CHASSIS_STATUS: u8 = 0x01;
    /// Chassis: Chassis Control.
    pub const CHASSIS_CONTROL: u8 = 0x02;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chassis_status_bits_are_decoded_and_short_answers_refused() {
        let status = GetChassisStatus::parse_success_response(&[0x19, 0, 0]).unwrap();
        assert!(status.power_on && status.power_fault && status.power_control_fault);
        assert_eq!(status.faults(), ["power fault", "power control fault"]);
        let off = GetChassisStatus::parse_success_response(&[0x60, 0x10, 0x40, 0]).unwrap();
        assert!(!off.power_on && off.faults().is_empty());
        assert!(GetChassisStatus::parse_success_response(&[0x01, 0]).is_err());
    }

    #[test]
    fn commands_encode_their_network_function_command_and_data() {
        let control: Message = ChassisControl::SoftShutdown.into();
        assert_eq!(
            (control.netfn_raw(), control.cmd(), control.data()),
            (0x00, 0x02, &[0x05u8][..])
        );
        let close: Message = CloseSession(0x0403_0201).into();
        assert_eq!(
            (close.netfn_raw(), close.cmd(), close.data()),
            (0x06, 0x3C, &[1u8, 2, 3, 4][..])
        );
        let privilege: Message = SetSessionPrivilegeLevel(PrivilegeLevel::Operator).into();
        assert_eq!(privilege.data(), [0x03]);
        assert_eq!(
            ChassisControl::from_code(0x05),
            Some(ChassisControl::SoftShutdown)
        );
        assert_eq!(ChassisControl::from_code(0x04), None);
    }
}
