//! The Machine Config Operator's config-drift remediation, coordinated: detect a node whose
//! on-disk configuration drifted from its rendered MachineConfig, wait out a debounce,
//! respect the pool's budget, rollouts, approvals and PodDisruptionBudgets, trigger the
//! MCO's own re-apply (or restore the files), verify, and audit every step.
//!
//! It observes and never impersonates: the MCO's annotations and objects are read, never
//! written ([`crate::api::mco`]).
//!
//! - [`classify`]: is a Node drifted, and how (from its MCO annotations);
//! - [`content`]: what a file or unit should be, from the rendered MachineConfig;
//! - [`budget`]: may a remediation start in the pool now;
//! - [`pdb`]: the PodDisruptionBudget pre-flight;
//! - [`plan`]: the pure state machine;
//! - [`guard`]: whether the node carries the planned-reboot mark (pure).

pub mod context;
pub mod controller;
pub mod helper;
mod housekeeping;
mod in_play;
mod mark;
mod node_ops;
pub mod observe;
mod pass;
mod reconcile;
pub mod retention;
mod steps;

// The pure decisions (the budget, classification, expected content, PDB pre-flight, the
// planned-reboot guard and the planner) live in `baremend-core`.
pub use baremend_core::drift::{budget, classify, content, guard, pdb, plan};
