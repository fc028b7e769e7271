//! The LAN message format (IPMB-like): addresses, network function and LUN, sequence number,
//! command, data, and the two checksums.

use super::WireError;

/// The address of the BMC on IPMB.
pub const BMC_ADDRESS: u8 = 0x20;
/// The software id remote consoles use.
pub const CONSOLE_ADDRESS: u8 = 0x81;

fn checksum(bytes: &[u8]) -> u8 {
    0u8.wrapping_sub(bytes.iter().fold(0u8, |sum, b| sum.wrapping_add(*b)))
}

/// A request in the LAN message format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanRequest {
    /// Network function (even: a request).
    pub netfn: u8,
    /// The requester's 6-bit sequence number, echoed in the response.
    pub rq_seq: u8,
    /// Command.
    pub cmd: u8,
    /// Request data.
    pub data: Vec<u8>,
    /// The requester's address (0x81 for remote consoles).
    pub rq_addr: u8,
    /// The requester's LUN.
    pub rq_lun: u8,
}

/// A response in the LAN message format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanResponse {
    /// Network function (odd: a response).
    pub netfn: u8,
    /// The request's sequence number.
    pub rq_seq: u8,
    /// Command.
    pub cmd: u8,
    /// Completion code.
    pub completion_code: u8,
    /// Response data after the completion code.
    pub data: Vec<u8>,
}

/// Encodes a request to the BMC.
pub fn encode_request(netfn: u8, cmd: u8, rq_seq: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(7 + data.len());
    out.extend_from_slice(&[BMC_ADDRESS, netfn << 2]);
    out.push(checksum(&out[..2]));
    out.extend_from_slice(&[CONSOLE_ADDRESS, (rq_seq & 0x3F) << 2, cmd]);
    out.extend_from_slice(data);
    out.push(checksum(&out[3..]));
    out
}

fn split_lan(message: &[u8], what: &'static str) -> Result<(), WireError> {
    if message.len() < 7 {
        return Err(WireError::Truncated(what));
    }
    if checksum(&message[..2]) != message[2] {
        return Err(WireError::Checksum("header"));
    }
    let last = message.len() - 1;
    if checksum(&message[3..last]) != message[last] {
        return Err(WireError::Checksum("data"));
    }
    Ok(())
}

/// Decodes a request (BMC side).
pub fn decode_request(message: &[u8]) -> Result<LanRequest, WireError> {
    split_lan(message, "LAN request")?;
    let netfn = message[1] >> 2;
    if !netfn.is_multiple_of(2) {
        return Err(WireError::Invalid("request network function"));
    }
    Ok(LanRequest {
        netfn,
        rq_addr: message[3],
        rq_seq: message[4] >> 2,
        rq_lun: message[4] & 0x03,
        cmd: message[5],
        data: message[6..message.len() - 1].to_vec(),
    })
}

/// Encodes the response to `request` (BMC side).
pub fn encode_response(request: &LanRequest, completion_code: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + data.len());
    out.extend_from_slice(&[request.rq_addr, ((request.netfn | 1) << 2) | request.rq_lun]);
    out.push(checksum(&out[..2]));
    out.extend_from_slice(&[
        BMC_ADDRESS,
        (request.rq_seq << 2) & 0xFC,
        request.cmd,
        completion_code,
    ]);
    out.extend_from_slice(data);
    out.push(checksum(&out[3..]));
    out
}

/// Decodes a response (console side).
pub fn decode_response(message: &[u8]) -> Result<LanResponse, WireError> {
    split_lan(message, "LAN response")?;
    if message.len() < 8 {
        return Err(WireError::Truncated("LAN response"));
    }
    let netfn = message[1] >> 2;
    if netfn.is_multiple_of(2) {
        return Err(WireError::Invalid("response network function"));
    }
    Ok(LanResponse {
        netfn,
        rq_seq: message[4] >> 2,
        cmd: message[5],
        completion_code: message[6],
        data: message[7..message.len() - 1].to_vec(),
    })
}
