//! IPMI over LAN on the wire, without I/O: RMCP and ASF framing, the IPMI v1.5 session-less
//! and IPMI v2.0 (RMCP+) session formats with integrity and confidentiality, the LAN message
//! format with its checksums, and the RMCP+ session set-up payloads (in [`rakp`]).
//!
//! Both the driver and the simulated BMC use this module; what crosses the network is decoded
//! here and every decoder returns an error, never panics, on any input.

pub mod crypto;
mod lan;
pub mod rakp;

pub use self::lan::{
    BMC_ADDRESS, CONSOLE_ADDRESS, LanRequest, LanResponse, decode_request, decode_response,
    encode_request, encode_response,
};

use self::crypto::SessionCrypto;

/// The IPMI-over-LAN UDP port.
pub const RMCP_PORT: u16 = 623;
const RMCP_VERSION: u8 = 0x06;
/// RMCP sequence number meaning "no RMCP ACK".
const RMCP_NO_ACK: u8 = 0xFF;
const CLASS_ASF: u8 = 0x06;
const CLASS_IPMI: u8 = 0x07;
const ASF_IANA: [u8; 4] = [0x00, 0x00, 0x11, 0xBE];
const ASF_PING: u8 = 0x80;
const ASF_PONG: u8 = 0x40;
/// Authentication type "none" (session-less IPMI v1.5 messages).
pub const AUTH_NONE: u8 = 0x00;
/// Authentication type "RMCP+" (IPMI v2.0 format).
pub const AUTH_RMCP_PLUS: u8 = 0x06;
/// Next Header value that closes the integrity trailer.
const NEXT_HEADER: u8 = 0x07;

/// The largest datagram handled.
pub const MAX_DATAGRAM: usize = 1024;

/// Why a datagram or payload could not be decoded. Every variant is an answer to bad input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the structure needs.
    #[error("the {0} is truncated")]
    Truncated(&'static str),
    /// Not RMCP version 1.0.
    #[error("not an RMCP datagram")]
    NotRmcp,
    /// An RMCP class other than ASF and IPMI.
    #[error("unsupported RMCP class {0:#04x}")]
    UnsupportedClass(u8),
    /// An authentication type other than none and RMCP+.
    #[error("unsupported authentication type {0:#04x}")]
    UnsupportedAuthType(u8),
    /// A declared length that does not fit the datagram.
    #[error("declared length {declared} does not fit the {available} bytes received")]
    LengthMismatch {
        /// Length in the header.
        declared: usize,
        /// Bytes actually there.
        available: usize,
    },
    /// A LAN message checksum is wrong.
    #[error("bad {0} checksum")]
    Checksum(&'static str),
    /// The integrity AuthCode does not match.
    #[error("the integrity check value does not match")]
    Integrity,
    /// The payload cannot be decrypted.
    #[error("the payload cannot be decrypted: {0}")]
    Decrypt(&'static str),
    /// A field holds a value the protocol does not allow here.
    #[error("invalid {0}")]
    Invalid(&'static str),
}

/// RMCP+ payload types (IPMI v2.0 table 13-16).
pub mod payload {
    /// An IPMI message.
    pub const IPMI: u8 = 0x00;
    /// RMCP+ Open Session Request.
    pub const OPEN_SESSION_REQUEST: u8 = 0x10;
    /// RMCP+ Open Session Response.
    pub const OPEN_SESSION_RESPONSE: u8 = 0x11;
    /// RAKP Message 1.
    pub const RAKP1: u8 = 0x12;
    /// RAKP Message 2.
    pub const RAKP2: u8 = 0x13;
    /// RAKP Message 3.
    pub const RAKP3: u8 = 0x14;
    /// RAKP Message 4.
    pub const RAKP4: u8 = 0x15;
}

/// A decoded datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// ASF Presence Ping.
    AsfPing {
        /// Echoed in the pong.
        message_tag: u8,
    },
    /// ASF Presence Pong.
    AsfPong {
        /// The ping's tag.
        message_tag: u8,
    },
    /// An IPMI v1.5 message outside a session (authentication type none).
    V15 {
        /// Session id (0 outside a session).
        session_id: u32,
        /// Session sequence number.
        sequence: u32,
        /// The LAN message.
        message: &'a [u8],
    },
    /// An IPMI v2.0 (RMCP+) packet.
    V20(V20Frame<'a>),
}

/// An IPMI v2.0 packet as received: the payload may still be encrypted and the integrity is
/// not yet checked (that needs the session keys, see [`V20Frame::open`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V20Frame<'a> {
    /// Payload type (bits 5:0).
    pub payload_type: u8,
    /// The payload is encrypted.
    pub encrypted: bool,
    /// The packet carries an integrity trailer.
    pub authenticated: bool,
    /// Session id (the receiver's id for the session).
    pub session_id: u32,
    /// Session sequence number.
    pub sequence: u32,
    /// The payload as on the wire.
    pub payload: &'a [u8],
    /// From AuthType to the end of the datagram.
    session_part: &'a [u8],
    /// Where the trailer starts within `session_part`.
    trailer_start: usize,
}

/// Reads a little-endian u32 from 4 bytes at `at`.
fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let slice = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes([slice[0], slice[1], slice[2], slice[3]]))
}

/// Decodes one datagram.
pub fn decode(datagram: &[u8]) -> Result<Frame<'_>, WireError> {
    let header = datagram
        .get(..4)
        .ok_or(WireError::Truncated("RMCP header"))?;
    if header[0] != RMCP_VERSION {
        return Err(WireError::NotRmcp);
    }
    let body = &datagram[4..];
    match header[3] & 0x1F {
        CLASS_ASF => decode_asf(body),
        CLASS_IPMI => decode_ipmi(body),
        class => Err(WireError::UnsupportedClass(class)),
    }
}

fn decode_asf(body: &[u8]) -> Result<Frame<'_>, WireError> {
    let asf = body.get(..8).ok_or(WireError::Truncated("ASF message"))?;
    if asf[..4] != ASF_IANA {
        return Err(WireError::Invalid("ASF IANA number"));
    }
    let message_tag = asf[5];
    match asf[4] {
        ASF_PING => Ok(Frame::AsfPing { message_tag }),
        ASF_PONG => Ok(Frame::AsfPong { message_tag }),
        _ => Err(WireError::Invalid("ASF message type")),
    }
}

fn decode_ipmi(body: &[u8]) -> Result<Frame<'_>, WireError> {
    let auth_type = *body.first().ok_or(WireError::Truncated("session header"))?;
    match auth_type & 0x0F {
        AUTH_NONE => {
            let header = body
                .get(..10)
                .ok_or(WireError::Truncated("v1.5 session header"))?;
            let sequence = le_u32(header, 1).ok_or(WireError::Truncated("v1.5 session header"))?;
            let session_id =
                le_u32(header, 5).ok_or(WireError::Truncated("v1.5 session header"))?;
            let length = usize::from(header[9]);
            let message = body.get(10..10 + length).ok_or(WireError::LengthMismatch {
                declared: length,
                available: body.len().saturating_sub(10),
            })?;
            Ok(Frame::V15 {
                session_id,
                sequence,
                message,
            })
        }
        AUTH_RMCP_PLUS => decode_v20(body),
        other => Err(WireError::UnsupportedAuthType(other)),
    }
}

fn decode_v20(body: &[u8]) -> Result<Frame<'_>, WireError> {
    let header = body
        .get(..12)
        .ok_or(WireError::Truncated("v2.0 session header"))?;
    let type_byte = header[1];
    let payload_type = type_byte & 0x3F;
    if payload_type == 0x02 {
        return Err(WireError::Invalid(
            "OEM explicit payloads are not supported",
        ));
    }
    let session_id = le_u32(header, 2).ok_or(WireError::Truncated("v2.0 session header"))?;
    let sequence = le_u32(header, 6).ok_or(WireError::Truncated("v2.0 session header"))?;
    let length = usize::from(u16::from_le_bytes([header[10], header[11]]));
    let payload = body.get(12..12 + length).ok_or(WireError::LengthMismatch {
        declared: length,
        available: body.len() - 12,
    })?;
    let authenticated = type_byte & 0x40 != 0;
    if !authenticated && body.len() != 12 + length {
        return Err(WireError::LengthMismatch {
            declared: length,
            available: body.len() - 12,
        });
    }
    Ok(Frame::V20(V20Frame {
        payload_type,
        encrypted: type_byte & 0x80 != 0,
        authenticated,
        session_id,
        sequence,
        payload,
        session_part: body,
        trailer_start: 12 + length,
    }))
}

impl V20Frame<'_> {
    /// Checks the integrity trailer and decrypts the payload with the session keys.
    ///
    /// A packet inside a session must be authenticated and encrypted: both suites baremend
    /// speaks require it, and accepting less would let anyone on the path forge replies.
    pub fn open(&self, crypto: &SessionCrypto) -> Result<Vec<u8>, WireError> {
        if !self.authenticated || !self.encrypted {
            return Err(WireError::Invalid(
                "session packet without integrity or confidentiality",
            ));
        }
        let code_len = crypto.suite().integrity_len();
        let trailer = &self.session_part[self.trailer_start..];
        if trailer.len() < code_len + 2 {
            return Err(WireError::Truncated("integrity trailer"));
        }
        let signed_len = self.session_part.len() - code_len;
        let (signed, code) = self.session_part.split_at(signed_len);
        if signed[signed_len - 1] != NEXT_HEADER {
            return Err(WireError::Invalid("next header"));
        }
        let pad_len = usize::from(signed[signed_len - 2]);
        if pad_len != trailer.len() - code_len - 2 || pad_len > 3 {
            return Err(WireError::Invalid("integrity pad length"));
        }
        if !crypto.verify_auth_code(signed, code) {
            return Err(WireError::Integrity);
        }
        crypto.decrypt(self.payload)
    }
}

/// The RMCP header for IPMI messages.
fn rmcp_header(out: &mut Vec<u8>, class: u8) {
    out.extend_from_slice(&[RMCP_VERSION, 0x00, RMCP_NO_ACK, class]);
}

/// An ASF Presence Pong answering a ping.
pub fn encode_asf_pong(message_tag: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(28);
    rmcp_header(&mut out, CLASS_ASF);
    out.extend_from_slice(&ASF_IANA);
    out.extend_from_slice(&[ASF_PONG, message_tag, 0x00, 0x10]);
    out.extend_from_slice(&ASF_IANA);
    // OEM-defined (4), supported entities: IPMI supported (0x81), supported interactions (0),
    // reserved (6).
    out.extend_from_slice(&[0, 0, 0, 0, 0x81, 0x00, 0, 0, 0, 0, 0, 0]);
    out
}

/// An ASF Presence Ping.
pub fn encode_asf_ping(message_tag: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    rmcp_header(&mut out, CLASS_ASF);
    out.extend_from_slice(&ASF_IANA);
    out.extend_from_slice(&[ASF_PING, message_tag, 0x00, 0x00]);
    out
}

/// An IPMI v1.5 message outside a session.
pub fn encode_v15(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(14 + message.len());
    rmcp_header(&mut out, CLASS_IPMI);
    out.push(AUTH_NONE);
    out.extend_from_slice(&[0; 8]);
    // A LAN message is at most a few dozen bytes; longer ones are not ours to send.
    out.push(message.len().min(255) as u8);
    out.extend_from_slice(&message[..message.len().min(255)]);
    out
}

/// An IPMI v2.0 packet outside a session (session set-up, or session-less IPMI messages).
pub fn encode_v20_plain(payload_type: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + payload.len());
    rmcp_header(&mut out, CLASS_IPMI);
    out.push(AUTH_RMCP_PLUS);
    out.push(payload_type & 0x3F);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// An encrypted and authenticated IPMI v2.0 packet of an active session.
///
/// `session_id` is the receiver's id for the session, `iv` a fresh random AES IV.
pub fn encode_v20_sealed(
    crypto: &SessionCrypto,
    payload_type: u8,
    session_id: u32,
    sequence: u32,
    payload: &[u8],
    iv: [u8; crypto::AES_BLOCK],
) -> Vec<u8> {
    let sealed = crypto.encrypt(payload, iv);
    let mut out = Vec::with_capacity(40 + sealed.len());
    rmcp_header(&mut out, CLASS_IPMI);
    out.push(AUTH_RMCP_PLUS);
    out.push(0xC0 | (payload_type & 0x3F));
    out.extend_from_slice(&session_id.to_le_bytes());
    out.extend_from_slice(&sequence.to_le_bytes());
    out.extend_from_slice(&(sealed.len() as u16).to_le_bytes());
    out.extend_from_slice(&sealed);
    // Pad so that AuthType..Next Header is a whole number of 4-byte words.
    let covered = 12 + sealed.len() + 2;
    let pad = (4 - covered % 4) % 4;
    out.extend(std::iter::repeat_n(0xFF, pad));
    out.push(pad as u8);
    out.push(NEXT_HEADER);
    let code = crypto.auth_code(&out[4..]);
    out.extend_from_slice(&code);
    out
}

#[cfg(test)]
mod tests {
    use super::crypto::CipherSuite;
    use super::*;

    #[test]
    fn lan_requests_and_responses_round_trip_with_checksums() {
        let request_bytes = encode_request(0x00, 0x02, 0x2A, &[0x01]);
        let request = decode_request(&request_bytes).unwrap();
        assert_eq!(
            (request.netfn, request.cmd, request.rq_seq),
            (0x00, 0x02, 0x2A)
        );
        assert_eq!(request.data, [0x01]);
        let response_bytes = encode_response(&request, 0x00, &[0x21, 0x10]);
        let response = decode_response(&response_bytes).unwrap();
        assert_eq!(response.netfn, 0x01);
        assert_eq!(response.rq_seq, 0x2A);
        assert_eq!(response.data, [0x21, 0x10]);
        let mut corrupt = response_bytes.clone();
        corrupt[6] ^= 1;
        assert_eq!(decode_response(&corrupt), Err(WireError::Checksum("data")));
        corrupt = response_bytes;
        corrupt[1] ^= 4;
        assert_eq!(
            decode_response(&corrupt),
            Err(WireError::Checksum("header"))
        );
    }

    #[test]
    fn sealed_packets_open_with_the_right_keys_only() {
        for suite in CipherSuite::ALL {
            let crypto = SessionCrypto::derive(suite, &[1; 32]);
            let other = SessionCrypto::derive(suite, &[2; 32]);
            for len in [0usize, 1, 7, 8, 15, 16, 40] {
                let payload: Vec<u8> = (0..len as u8).collect();
                let packet =
                    encode_v20_sealed(&crypto, payload::IPMI, 0xAABB, 9, &payload, [4; 16]);
                let Frame::V20(frame) = decode(&packet).unwrap() else {
                    panic!("not a v2.0 frame");
                };
                assert_eq!((frame.session_id, frame.sequence), (0xAABB, 9));
                assert_eq!(frame.open(&crypto).unwrap(), payload);
                assert_eq!(frame.open(&other), Err(WireError::Integrity));
                assert_eq!((packet.len() - 4 - suite.integrity_len()) % 4, 0);
            }
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_in_a_sealed_packet_is_rejected() {
        let crypto = SessionCrypto::derive(CipherSuite::Suite3, &[5; 20]);
        let packet = encode_v20_sealed(&crypto, payload::IPMI, 1, 2, b"hello", [9; 16]);
        for index in 4..packet.len() {
            for bit in 0..8 {
                let mut bad = packet.clone();
                bad[index] ^= 1 << bit;
                let opened = match decode(&bad) {
                    Ok(Frame::V20(frame)) => frame.open(&crypto).ok(),
                    _ => None,
                };
                assert!(opened.is_none(), "byte {index} bit {bit} accepted");
            }
        }
    }

    #[test]
    fn session_less_messages_and_asf_frames_decode() {
        let message = encode_request(0x06, 0x38, 1, &[0x8E, 0x04]);
        let packet = encode_v15(&message);
        assert_eq!(
            decode(&packet).unwrap(),
            Frame::V15 {
                session_id: 0,
                sequence: 0,
                message: &message
            }
        );
        assert_eq!(
            decode(&encode_asf_ping(7)).unwrap(),
            Frame::AsfPing { message_tag: 7 }
        );
        assert_eq!(
            decode(&encode_asf_pong(7)).unwrap(),
            Frame::AsfPong { message_tag: 7 }
        );
        let plain = encode_v20_plain(payload::OPEN_SESSION_REQUEST, &[1, 2, 3]);
        let Frame::V20(frame) = decode(&plain).unwrap() else {
            panic!("not v2.0");
        };
        assert_eq!(
            (frame.payload_type, frame.payload),
            (payload::OPEN_SESSION_REQUEST, &[1u8, 2, 3][..])
        );
        assert!(!frame.authenticated && !frame.encrypted);
    }

    #[test]
    fn truncated_and_foreign_datagrams_are_errors() {
        assert_eq!(decode(&[]), Err(WireError::Truncated("RMCP header")));
        assert_eq!(decode(&[0x07, 0, 0xFF, 0x07]), Err(WireError::NotRmcp));
        assert_eq!(
            decode(&[0x06, 0, 0xFF, 0x08, 0]),
            Err(WireError::UnsupportedClass(0x08))
        );
        assert_eq!(
            decode(&[0x06, 0, 0xFF, 0x07, 0x02]),
            Err(WireError::UnsupportedAuthType(0x02))
        );
        let mut long = encode_v20_plain(payload::RAKP2, &[0; 40]);
        long.truncate(30);
        assert!(matches!(
            decode(&long),
            Err(WireError::LengthMismatch { .. })
        ));
    }
}
