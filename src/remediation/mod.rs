//! Machine remediation: fence the host, release its Node, power it on, wait for the Node,
//! restore it.
//!
//! The decisions live in [`plan`]: a pure function from (persisted state, observations,
//! policy) to the next step. Reconcilers only gather observations and carry steps out, and
//! every step is persisted before it acts, so that a restart resumes without repeating a
//! destructive step.

mod admission;
pub mod bmc_cache;
pub mod bmc_trust;
pub mod capi;
pub mod context;
pub mod controller;
mod dry_run;
pub mod execute;
pub mod fence;
pub mod fencing_check;
mod foreign;
pub mod gates;
mod housekeeping;
pub mod lease_budget;
mod machineless;
pub mod metered;
pub mod monitor;
pub mod node_health_checks;
pub mod observe;
mod pass;
pub mod plan;
mod power;
pub mod probe;
pub mod readiness;
mod reconcile;
pub mod requests;
pub mod start_gates;
pub mod state;
mod steps;
mod strategy;
pub mod subject;
pub mod trigger;
pub mod trust;
pub mod witnessed;
