//! Machine remediation: fence the host, release its Node, power it on, wait for the Node,
//! restore it.
//!
//! The decisions live in `baremend-core` ([`decide::plan`], re-exported here as [`decide`]): a pure function from (persisted state, observations,
//! policy) to the next step. Reconcilers only gather observations and carry steps out, and
//! every step is persisted before it acts, so that a restart resumes without repeating a
//! destructive step.

pub mod act;
pub mod controller;
pub mod evidence;
pub mod pass;
pub mod readiness;
pub mod requests;
pub mod world;

pub use baremend_core::decide;

#[cfg(test)]
mod layering_tests;
