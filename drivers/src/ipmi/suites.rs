//! Which cipher suites a BMC offers (Get Channel Cipher Suites, outside a session).

use tokio::net::UdpSocket;

use super::commands::numbers;
use super::session::{SessionParams, exchange};
use super::wire::{self, Frame};

/// Asks the BMC which cipher suites it offers; `None` when it does not say.
pub(crate) async fn offered_suites(socket: &UdpSocket, params: &SessionParams) -> Option<Vec<u8>> {
    let mut records = Vec::new();
    for index in 0..8u8 {
        let request = wire::encode_request(
            0x06,
            numbers::GET_CHANNEL_CIPHER_SUITES,
            index,
            &[0x0E, 0x00, 0x80 | index],
        );
        let datagram = wire::encode_v15(&request);
        let reply = exchange(
            socket,
            params,
            "Get Channel Cipher Suites",
            &datagram,
            |bytes| {
                let Ok(Frame::V15 { message, .. }) = wire::decode(bytes) else {
                    return None;
                };
                let response = wire::decode_response(message).ok()?;
                (response.cmd == numbers::GET_CHANNEL_CIPHER_SUITES && response.rq_seq == index)
                    .then_some(Ok(response))
            },
        )
        .await
        .ok()?;
        if reply.completion_code != 0 || reply.data.is_empty() {
            return None;
        }
        // Byte 0 is the channel; up to 16 bytes of record data follow.
        let data = &reply.data[1..];
        records.extend_from_slice(data);
        if data.len() < 16 {
            break;
        }
    }
    Some(suite_ids(&records))
}

/// The standard cipher suite ids in Get Channel Cipher Suites record data (OEM records and
/// algorithm bytes are skipped).
pub fn suite_ids(records: &[u8]) -> Vec<u8> {
    let mut ids = Vec::new();
    let mut index = 0;
    while index < records.len() {
        match records[index] {
            0xC0 => {
                if let Some(id) = records.get(index + 1) {
                    ids.push(*id);
                }
                index += 2;
            }
            // OEM record: id, 3-byte IANA.
            0xC1 => index += 5,
            // Algorithm numbers (tagged 00b, 01b, 10b in the top bits).
            _ => index += 1,
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suite_ids_are_read_from_records_with_algorithms_and_oem_entries() {
        let records = [
            0xC0, 0x03, 0x01, 0x41, 0x81, // suite 3
            0xC1, 0x80, 0x11, 0x22, 0x33, 0x01, 0x41, 0x81, // OEM suite
            0xC0, 0x11, 0x03, 0x44, 0x81, // suite 17
        ];
        assert_eq!(suite_ids(&records), [3, 17]);
        assert_eq!(suite_ids(&[0xC0]), Vec::<u8>::new());
        assert_eq!(suite_ids(&[]), Vec::<u8>::new());
    }
}
