//! The RMCP+ session set-up payloads (IPMI v2.0 §13.17–13.23): Open Session Request and
//! Response, and RAKP messages 1 to 4. Encoders and decoders for both sides.

use std::fmt;

use super::WireError;
use super::crypto::CipherSuite;

/// RMCP+ status codes (IPMI v2.0 table 13-15) that callers act on.
pub mod status {
    /// No errors.
    pub const OK: u8 = 0x00;
    /// Insufficient resources to create a session.
    pub const NO_RESOURCES: u8 = 0x01;
    /// Invalid session id.
    pub const INVALID_SESSION_ID: u8 = 0x02;
    /// Invalid or unsupported authentication algorithm.
    pub const INVALID_AUTH_ALGORITHM: u8 = 0x04;
    /// Invalid or unsupported integrity algorithm.
    pub const INVALID_INTEGRITY_ALGORITHM: u8 = 0x05;
    /// Inactive session id.
    pub const INACTIVE_SESSION_ID: u8 = 0x08;
    /// Invalid role.
    pub const INVALID_ROLE: u8 = 0x09;
    /// Unauthorized role or privilege level requested.
    pub const UNAUTHORIZED_ROLE: u8 = 0x0A;
    /// Insufficient resources to create a session at the requested role.
    pub const NO_RESOURCES_AT_ROLE: u8 = 0x0B;
    /// Invalid name length.
    pub const INVALID_NAME_LENGTH: u8 = 0x0C;
    /// Unauthorized name (unknown user).
    pub const UNAUTHORIZED_NAME: u8 = 0x0D;
    /// Unauthorized GUID.
    pub const UNAUTHORIZED_GUID: u8 = 0x0E;
    /// Invalid integrity check value.
    pub const INVALID_INTEGRITY_VALUE: u8 = 0x0F;
    /// Invalid confidentiality algorithm.
    pub const INVALID_CONFIDENTIALITY_ALGORITHM: u8 = 0x10;
    /// No cipher suite match with the proposed security algorithms.
    pub const NO_CIPHER_SUITE_MATCH: u8 = 0x11;
    /// Illegal or unrecognized parameter.
    pub const ILLEGAL_PARAMETER: u8 = 0x12;
}

/// Bit 4 of the requested role: look the user up by name only.
pub const NAME_ONLY_LOOKUP: u8 = 0x10;

fn take<const N: usize>(bytes: &[u8], at: usize, what: &'static str) -> Result<[u8; N], WireError> {
    let slice = bytes.get(at..at + N).ok_or(WireError::Truncated(what))?;
    let mut out = [0u8; N];
    out.copy_from_slice(slice);
    Ok(out)
}

fn u32_at(bytes: &[u8], at: usize, what: &'static str) -> Result<u32, WireError> {
    take::<4>(bytes, at, what).map(u32::from_le_bytes)
}

/// Open Session Request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenSessionRequest {
    /// Echoed by the BMC.
    pub message_tag: u8,
    /// Requested maximum privilege level (0: the highest the algorithms allow).
    pub max_privilege: u8,
    /// The console's id for the session.
    pub console_session_id: u32,
    /// Proposed (authentication, integrity, confidentiality) algorithms.
    pub algorithms: (u8, u8, u8),
}

fn algorithm_record(kind: u8, algorithm: u8) -> [u8; 8] {
    [kind, 0, 0, 0x08, algorithm, 0, 0, 0]
}

fn parse_algorithm(bytes: &[u8], at: usize, kind: u8) -> Result<u8, WireError> {
    let record = take::<8>(bytes, at, "algorithm payload")?;
    if record[0] != kind {
        return Err(WireError::Invalid("algorithm payload type"));
    }
    Ok(record[4] & 0x3F)
}

impl OpenSessionRequest {
    /// Encodes the payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.message_tag, self.max_privilege, 0, 0];
        out.extend_from_slice(&self.console_session_id.to_le_bytes());
        out.extend_from_slice(&algorithm_record(0x00, self.algorithms.0));
        out.extend_from_slice(&algorithm_record(0x01, self.algorithms.1));
        out.extend_from_slice(&algorithm_record(0x02, self.algorithms.2));
        out
    }

    /// Decodes the payload (BMC side).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        const WHAT: &str = "Open Session Request";
        let head = take::<4>(bytes, 0, WHAT)?;
        Ok(OpenSessionRequest {
            message_tag: head[0],
            max_privilege: head[1] & 0x0F,
            console_session_id: u32_at(bytes, 4, WHAT)?,
            algorithms: (
                parse_algorithm(bytes, 8, 0x00)?,
                parse_algorithm(bytes, 16, 0x01)?,
                parse_algorithm(bytes, 24, 0x02)?,
            ),
        })
    }

    /// The proposed suite, if it is one baremend knows.
    pub fn suite(&self) -> Option<CipherSuite> {
        let (a, i, c) = self.algorithms;
        CipherSuite::from_algorithms(a, i, c)
    }
}

/// Open Session Response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenSessionResponse {
    /// The request's tag.
    pub message_tag: u8,
    /// RMCP+ status code.
    pub status: u8,
    /// Maximum privilege level granted.
    pub max_privilege: u8,
    /// The console's id for the session.
    pub console_session_id: u32,
    /// The BMC's id for the session (0 on error).
    pub bmc_session_id: u32,
    /// Accepted algorithms (absent on error).
    pub algorithms: Option<(u8, u8, u8)>,
}

impl OpenSessionResponse {
    /// Encodes the payload (BMC side); errors carry only the first eight bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.message_tag, self.status, self.max_privilege, 0];
        out.extend_from_slice(&self.console_session_id.to_le_bytes());
        if let (status::OK, Some((a, i, c))) = (self.status, self.algorithms) {
            out.extend_from_slice(&self.bmc_session_id.to_le_bytes());
            out.extend_from_slice(&algorithm_record(0x00, a));
            out.extend_from_slice(&algorithm_record(0x01, i));
            out.extend_from_slice(&algorithm_record(0x02, c));
        }
        out
    }

    /// Decodes the payload.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        const WHAT: &str = "Open Session Response";
        let head = take::<4>(bytes, 0, WHAT)?;
        let console_session_id = u32_at(bytes, 4, WHAT)?;
        if head[1] != status::OK {
            return Ok(OpenSessionResponse {
                message_tag: head[0],
                status: head[1],
                max_privilege: head[2] & 0x0F,
                console_session_id,
                bmc_session_id: 0,
                algorithms: None,
            });
        }
        Ok(OpenSessionResponse {
            message_tag: head[0],
            status: head[1],
            max_privilege: head[2] & 0x0F,
            console_session_id,
            bmc_session_id: u32_at(bytes, 8, WHAT)?,
            algorithms: Some((
                parse_algorithm(bytes, 12, 0x00)?,
                parse_algorithm(bytes, 20, 0x01)?,
                parse_algorithm(bytes, 28, 0x02)?,
            )),
        })
    }
}

/// RAKP Message 1 (console → BMC).
#[derive(Clone, PartialEq, Eq)]
pub struct Rakp1 {
    /// Message tag.
    pub message_tag: u8,
    /// The BMC's id for the session.
    pub bmc_session_id: u32,
    /// R_M.
    pub console_random: [u8; 16],
    /// Requested role: privilege (bits 3:0) and the name-only lookup bit.
    pub role: u8,
    /// User name (at most 16 bytes).
    pub username: Vec<u8>,
}

impl fmt::Debug for Rakp1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rakp1")
            .field("bmc_session_id", &self.bmc_session_id)
            .field("role", &self.role)
            .field("username", &String::from_utf8_lossy(&self.username))
            .finish_non_exhaustive()
    }
}

impl Rakp1 {
    /// Encodes the payload.
    pub fn encode(&self) -> Vec<u8> {
        let name = &self.username[..self.username.len().min(16)];
        let mut out = vec![self.message_tag, 0, 0, 0];
        out.extend_from_slice(&self.bmc_session_id.to_le_bytes());
        out.extend_from_slice(&self.console_random);
        out.extend_from_slice(&[self.role, 0, 0, name.len() as u8]);
        out.extend_from_slice(name);
        out
    }

    /// Decodes the payload (BMC side).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        const WHAT: &str = "RAKP message 1";
        let tail = take::<4>(bytes, 24, WHAT)?;
        let name_len = usize::from(tail[3]);
        if name_len > 16 {
            return Err(WireError::Invalid("user name length"));
        }
        let username = bytes
            .get(28..28 + name_len)
            .ok_or(WireError::Truncated(WHAT))?
            .to_vec();
        Ok(Rakp1 {
            message_tag: bytes[0],
            bmc_session_id: u32_at(bytes, 4, WHAT)?,
            console_random: take::<16>(bytes, 8, WHAT)?,
            role: tail[0],
            username,
        })
    }
}

/// RAKP Message 2 (BMC → console).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rakp2 {
    /// Message tag.
    pub message_tag: u8,
    /// RMCP+ status code.
    pub status: u8,
    /// The console's id for the session.
    pub console_session_id: u32,
    /// R_C.
    pub bmc_random: [u8; 16],
    /// GUID_C.
    pub bmc_guid: [u8; 16],
    /// Key exchange authentication code.
    pub auth_code: Vec<u8>,
}

impl Rakp2 {
    /// Encodes the payload (BMC side); errors carry only the first eight bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.message_tag, self.status, 0, 0];
        out.extend_from_slice(&self.console_session_id.to_le_bytes());
        if self.status == status::OK {
            out.extend_from_slice(&self.bmc_random);
            out.extend_from_slice(&self.bmc_guid);
            out.extend_from_slice(&self.auth_code);
        }
        out
    }

    /// Decodes the payload.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        const WHAT: &str = "RAKP message 2";
        let head = take::<4>(bytes, 0, WHAT)?;
        let console_session_id = u32_at(bytes, 4, WHAT)?;
        if head[1] != status::OK {
            return Ok(Rakp2 {
                message_tag: head[0],
                status: head[1],
                console_session_id,
                bmc_random: [0; 16],
                bmc_guid: [0; 16],
                auth_code: Vec::new(),
            });
        }
        Ok(Rakp2 {
            message_tag: head[0],
            status: head[1],
            console_session_id,
            bmc_random: take::<16>(bytes, 8, WHAT)?,
            bmc_guid: take::<16>(bytes, 24, WHAT)?,
            auth_code: bytes.get(40..).unwrap_or_default().to_vec(),
        })
    }
}

/// RAKP Message 3 (console → BMC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rakp3 {
    /// Message tag.
    pub message_tag: u8,
    /// RMCP+ status code (the console reports its own failures here).
    pub status: u8,
    /// The BMC's id for the session.
    pub bmc_session_id: u32,
    /// Key exchange authentication code.
    pub auth_code: Vec<u8>,
}

impl Rakp3 {
    /// Encodes the payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.message_tag, self.status, 0, 0];
        out.extend_from_slice(&self.bmc_session_id.to_le_bytes());
        out.extend_from_slice(&self.auth_code);
        out
    }

    /// Decodes the payload (BMC side).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        const WHAT: &str = "RAKP message 3";
        let head = take::<4>(bytes, 0, WHAT)?;
        Ok(Rakp3 {
            message_tag: head[0],
            status: head[1],
            bmc_session_id: u32_at(bytes, 4, WHAT)?,
            auth_code: bytes.get(8..).unwrap_or_default().to_vec(),
        })
    }
}

/// RAKP Message 4 (BMC → console).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rakp4 {
    /// Message tag.
    pub message_tag: u8,
    /// RMCP+ status code.
    pub status: u8,
    /// The console's id for the session.
    pub console_session_id: u32,
    /// Integrity check value.
    pub icv: Vec<u8>,
}

impl Rakp4 {
    /// Encodes the payload (BMC side).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.message_tag, self.status, 0, 0];
        out.extend_from_slice(&self.console_session_id.to_le_bytes());
        if self.status == status::OK {
            out.extend_from_slice(&self.icv);
        }
        out
    }

    /// Decodes the payload.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        const WHAT: &str = "RAKP message 4";
        let head = take::<4>(bytes, 0, WHAT)?;
        Ok(Rakp4 {
            message_tag: head[0],
            status: head[1],
            console_session_id: u32_at(bytes, 4, WHAT)?,
            icv: bytes.get(8..).unwrap_or_default().to_vec(),
        })
    }
}

/// Describes an RMCP+ status code for messages.
pub fn describe_status(code: u8) -> &'static str {
    match code {
        status::OK => "no error",
        status::NO_RESOURCES => "insufficient resources to create a session",
        status::INVALID_SESSION_ID => "invalid session id",
        0x03 => "invalid payload type",
        status::INVALID_AUTH_ALGORITHM => "unsupported authentication algorithm",
        status::INVALID_INTEGRITY_ALGORITHM => "unsupported integrity algorithm",
        0x06 => "no matching authentication payload",
        0x07 => "no matching integrity payload",
        status::INACTIVE_SESSION_ID => "inactive session id",
        status::INVALID_ROLE => "invalid role",
        status::UNAUTHORIZED_ROLE => "unauthorized role or privilege level",
        status::NO_RESOURCES_AT_ROLE => "insufficient resources to create a session at that role",
        status::INVALID_NAME_LENGTH => "invalid user name length",
        status::UNAUTHORIZED_NAME => "unknown user name",
        status::UNAUTHORIZED_GUID => "unauthorized GUID",
        status::INVALID_INTEGRITY_VALUE => "invalid integrity check value (wrong password?)",
        status::INVALID_CONFIDENTIALITY_ALGORITHM => "unsupported confidentiality algorithm",
        status::NO_CIPHER_SUITE_MATCH => "no cipher suite matches the proposed algorithms",
        status::ILLEGAL_PARAMETER => "illegal or unrecognized parameter",
        _ => "unknown RMCP+ status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_set_up_payload_round_trips() {
        let open = OpenSessionRequest {
            message_tag: 3,
            max_privilege: 4,
            console_session_id: 0xDEAD_BEEF,
            algorithms: CipherSuite::Suite17.algorithms(),
        };
        assert_eq!(OpenSessionRequest::decode(&open.encode()).unwrap(), open);
        assert_eq!(open.suite(), Some(CipherSuite::Suite17));
        let response = OpenSessionResponse {
            message_tag: 3,
            status: status::OK,
            max_privilege: 4,
            console_session_id: 0xDEAD_BEEF,
            bmc_session_id: 0x0102_0304,
            algorithms: Some(CipherSuite::Suite3.algorithms()),
        };
        assert_eq!(
            OpenSessionResponse::decode(&response.encode()).unwrap(),
            response
        );
        let refused = OpenSessionResponse {
            status: status::NO_CIPHER_SUITE_MATCH,
            bmc_session_id: 0,
            algorithms: None,
            ..response
        };
        assert_eq!(refused.encode().len(), 8);
        assert_eq!(
            OpenSessionResponse::decode(&refused.encode()).unwrap(),
            refused
        );
        let rakp1 = Rakp1 {
            message_tag: 4,
            bmc_session_id: 9,
            console_random: [1; 16],
            role: 0x14,
            username: b"operator".to_vec(),
        };
        assert_eq!(Rakp1::decode(&rakp1.encode()).unwrap(), rakp1);
        let rakp2 = Rakp2 {
            message_tag: 4,
            status: 0,
            console_session_id: 8,
            bmc_random: [2; 16],
            bmc_guid: [3; 16],
            auth_code: vec![4; 32],
        };
        assert_eq!(Rakp2::decode(&rakp2.encode()).unwrap(), rakp2);
        let rakp3 = Rakp3 {
            message_tag: 5,
            status: 0,
            bmc_session_id: 9,
            auth_code: vec![5; 20],
        };
        assert_eq!(Rakp3::decode(&rakp3.encode()).unwrap(), rakp3);
        let rakp4 = Rakp4 {
            message_tag: 5,
            status: 0,
            console_session_id: 8,
            icv: vec![6; 12],
        };
        assert_eq!(Rakp4::decode(&rakp4.encode()).unwrap(), rakp4);
    }

    #[test]
    fn short_or_inconsistent_payloads_are_errors() {
        assert!(OpenSessionRequest::decode(&[0; 31]).is_err());
        assert!(OpenSessionResponse::decode(&[0; 35]).is_err());
        let mut rakp1 = vec![0; 28];
        rakp1[27] = 17;
        assert_eq!(
            Rakp1::decode(&rakp1),
            Err(WireError::Invalid("user name length"))
        );
        rakp1[27] = 5;
        assert!(Rakp1::decode(&rakp1).is_err());
        assert!(Rakp2::decode(&[0; 7]).is_err());
        assert!(Rakp2::decode(&[0; 39]).is_err());
        let mut wrong_kind = OpenSessionRequest {
            message_tag: 0,
            max_privilege: 0,
            console_session_id: 0,
            algorithms: (1, 1, 1),
        }
        .encode();
        wrong_kind[16] = 0x02;
        assert!(OpenSessionRequest::decode(&wrong_kind).is_err());
    }
}
