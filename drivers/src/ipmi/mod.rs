//! IPMI 2.0 over LAN (RMCP+, "lanplus").
//!
//! `ipmi-rs-core` provides the IPMI messages, network functions, completion codes and the App
//! commands; the RMCP+ session layer (framing, RAKP, keys, integrity, encryption, reply
//! matching, session lifetime) is ours, in [`wire`] (sans-IO) and `session` (tokio).

pub mod commands;
pub mod completion;
mod driver;
mod session;
mod suites;
pub mod wire;

pub use self::driver::{IpmiDriver, IpmiOptions};
pub use self::suites::suite_ids;
pub use ipmi_rs_core::app::auth::PrivilegeLevel;

/// Feeds `bytes` to every decoder that sees network input, for the fuzz target and the
/// property tests: one list, so that a new decoder cannot be left out of one of them. The
/// session keys opening sealed packets are derived from `key_seed`.
#[doc(hidden)]
pub fn exercise_decoders(bytes: &[u8], suite: wire::crypto::CipherSuite, key_seed: u8) {
    use ipmi_rs_core::connection::IpmiCommand;
    use wire::rakp::{OpenSessionRequest, OpenSessionResponse, Rakp1, Rakp2, Rakp3, Rakp4};

    let crypto = wire::crypto::SessionCrypto::derive(suite, &[key_seed; 20]);
    if let Ok(wire::Frame::V20(frame)) = wire::decode(bytes) {
        let _ = frame.open(&crypto);
    }
    let _ = wire::decode_request(bytes);
    let _ = wire::decode_response(bytes);
    let _ = OpenSessionRequest::decode(bytes);
    let _ = OpenSessionResponse::decode(bytes);
    let _ = Rakp1::decode(bytes);
    let _ = Rakp2::decode(bytes);
    let _ = Rakp3::decode(bytes);
    let _ = Rakp4::decode(bytes);
    let _ = crypto.decrypt(bytes);
    let _ = commands::GetChassisStatus::parse_success_response(bytes);
    let _ = ipmi_rs_core::app::GetDeviceId::parse_success_response(bytes);
    let _ = suite_ids(bytes);
}
