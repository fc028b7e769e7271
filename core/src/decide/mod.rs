//! The decisions, pure: objects and facts in, a view or a verdict out. No client, no clock, no I/O (a test over the module graph keeps it so).

pub mod bmc_trust;
pub mod fence;
pub mod gates;
pub mod lease_budget;
pub mod observe;
pub mod pass;
pub mod plan;
pub mod readiness;
pub mod requests;
pub mod state;
pub mod trust;
pub mod workload;
