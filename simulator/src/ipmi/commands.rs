//! The IPMI commands the simulated BMC answers, inside a session or before one.

use baremend_drivers::ipmi::commands::numbers;
use baremend_drivers::ipmi::wire::LanRequest;
use baremend_drivers::ipmi::wire::crypto::CipherSuite;

use super::sessions::{ActiveSession, privilege};
use crate::host::{ObservedPower, PowerAction, SimHost};

const NETFN_CHASSIS: u8 = 0x00;
const NETFN_APP: u8 = 0x06;

/// Completion codes the simulator sends.
pub(crate) mod cc {
    pub const OK: u8 = 0x00;
    pub const PRIVILEGE_NOT_AVAILABLE: u8 = 0x81;
    pub const NODE_BUSY: u8 = 0xC0;
    pub const INVALID_COMMAND: u8 = 0xC1;
    pub const REQUEST_DATA_LENGTH: u8 = 0xC7;
    pub const INVALID_DATA: u8 = 0xCC;
    pub const INSUFFICIENT_PRIVILEGE: u8 = 0xD4;
    pub const UNSPECIFIED: u8 = 0xFF;
}

/// A command answer: completion code and data.
pub(crate) type Answer = (u8, Vec<u8>);

/// What the server must do besides answering.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SideEffect {
    None,
    CloseSession(u32),
    ChassisControl(u8),
}

/// Commands allowed outside a session.
pub(crate) fn sessionless(request: &LanRequest, suites: &[CipherSuite]) -> Answer {
    match (request.netfn, request.cmd) {
        (NETFN_APP, numbers::GET_CHANNEL_AUTH_CAPABILITIES) => channel_auth_capabilities(request),
        (NETFN_APP, numbers::GET_CHANNEL_CIPHER_SUITES) => cipher_suites(request, suites),
        (NETFN_APP, numbers::GET_DEVICE_ID) => device_id(),
        _ => (cc::INSUFFICIENT_PRIVILEGE, Vec::new()),
    }
}

fn channel_auth_capabilities(request: &LanRequest) -> Answer {
    if request.data.len() < 2 {
        return (cc::REQUEST_DATA_LENGTH, Vec::new());
    }
    // Channel 1; auth types: IPMI v2.0 extended data available (bit 7) and "none" only for v1.5
    // (this BMC speaks RMCP+); non-null user names enabled, KG all zeros; IPMI 2.0 supported.
    (cc::OK, vec![0x01, 0x80, 0x04, 0x02, 0x00, 0x00, 0x00, 0x00])
}

fn cipher_suites(request: &LanRequest, suites: &[CipherSuite]) -> Answer {
    if request.data.len() < 3 {
        return (cc::REQUEST_DATA_LENGTH, Vec::new());
    }
    let mut records = Vec::new();
    for suite in suites {
        let (auth, integrity, confidentiality) = suite.algorithms();
        records.extend_from_slice(&[
            0xC0,
            suite.id(),
            auth,
            0x40 | integrity,
            0x80 | confidentiality,
        ]);
    }
    let index = usize::from(request.data[2] & 0x3F);
    let mut data = vec![0x01];
    data.extend(records.iter().skip(index * 16).take(16));
    (cc::OK, data)
}

fn device_id() -> Answer {
    // Device 0x20 rev 1, firmware 1.00, IPMI 2.0, chassis + SEL + SDR support, manufacturer
    // 0x00_1291 ("baremend"), product 0x0b4e.
    (
        cc::OK,
        vec![
            0x20, 0x01, 0x01, 0x00, 0x02, 0x87, 0x91, 0x12, 0x00, 0x4E, 0x0B,
        ],
    )
}

/// Commands inside an active session.
pub(crate) fn in_session(
    request: &LanRequest,
    session: &mut ActiveSession,
    bmc_session_id: u32,
    host: &SimHost,
    suites: &[CipherSuite],
) -> (Answer, SideEffect) {
    let answer = |code: u8, data: Vec<u8>| ((code, data), SideEffect::None);
    match (request.netfn, request.cmd) {
        (NETFN_APP, numbers::SET_SESSION_PRIVILEGE) => {
            let Some(&requested) = request.data.first() else {
                return answer(cc::REQUEST_DATA_LENGTH, Vec::new());
            };
            let requested = requested & 0x0F;
            if requested == 0 {
                return answer(cc::OK, vec![session.privilege]);
            }
            if !(privilege::USER..=privilege::ADMINISTRATOR).contains(&requested) {
                return answer(0x80, Vec::new());
            }
            if requested > session.max_privilege {
                return answer(cc::PRIVILEGE_NOT_AVAILABLE, Vec::new());
            }
            session.privilege = requested;
            answer(cc::OK, vec![requested])
        }
        (NETFN_APP, numbers::CLOSE_SESSION) => {
            let Some(bytes) = request.data.get(..4) else {
                return answer(cc::REQUEST_DATA_LENGTH, Vec::new());
            };
            let id = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            let id = if id == 0 { bmc_session_id } else { id };
            ((cc::OK, Vec::new()), SideEffect::CloseSession(id))
        }
        (NETFN_CHASSIS, numbers::GET_CHASSIS_STATUS) => {
            let on = matches!(
                host.observe(),
                ObservedPower::On | ObservedPower::PoweringOff
            );
            // Power state (bit 0 on; restore policy "always off" 00b), last power event, misc
            // chassis state, front panel button capabilities.
            answer(cc::OK, vec![u8::from(on), 0x00, 0x00, 0x00])
        }
        (NETFN_CHASSIS, numbers::CHASSIS_CONTROL) => {
            if session.privilege < privilege::OPERATOR {
                return answer(cc::INSUFFICIENT_PRIVILEGE, Vec::new());
            }
            let Some(&code) = request.data.first() else {
                return answer(cc::REQUEST_DATA_LENGTH, Vec::new());
            };
            let action = match code & 0x0F {
                0x00 => PowerAction::ForceOff,
                0x01 => PowerAction::On,
                0x02 | 0x03 => PowerAction::ForceRestart,
                0x05 => PowerAction::GracefulShutdown,
                _ => return answer(cc::INVALID_DATA, Vec::new()),
            };
            host.request(action);
            ((cc::OK, Vec::new()), SideEffect::ChassisControl(code))
        }
        (NETFN_APP, numbers::GET_CHANNEL_AUTH_CAPABILITIES)
        | (NETFN_APP, numbers::GET_CHANNEL_CIPHER_SUITES)
        | (NETFN_APP, numbers::GET_DEVICE_ID) => (sessionless(request, suites), SideEffect::None),
        _ => answer(cc::INVALID_COMMAND, Vec::new()),
    }
}
