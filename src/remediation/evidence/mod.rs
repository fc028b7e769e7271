//! The fresh evidence a start rests on: a Cluster API Machine's host, other remediators' traces, the start gates confirmed on fresh reads.

pub mod bmc;
pub mod capi;
pub(crate) mod foreign;
pub(super) mod fresh;
pub(super) mod health;
pub mod start_gates;
