//! IPMI 2.0 over LAN (RMCP+, "lanplus").
//!
//! `ipmi-rs-core` provides the IPMI messages, network functions, completion codes and the App
//! commands; the RMCP+ session layer (framing, RAKP, keys, integrity, encryption, reply
//! matching, session lifetime) is ours, in [`wire`] (sans-IO) and `session` (tokio).

pub mod commands;
pub mod completion;
mod driver;
mod session;
pub mod wire;

pub use self::driver::{IpmiDriver, IpmiOptions};
pub use self::session::suite_ids;
pub use ipmi_rs_core::app::auth::PrivilegeLevel;
