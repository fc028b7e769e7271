//! The drift coordinator's pure decisions: the pool budget (`budget`), what a Node's state
//! says (`classify`), the expected content of a file or unit (`content`), the PodDisruptionBudget
//! pre-flight (`pdb`), the planned-reboot guard (`guard`) and the planner (`plan`). The
//! controller crate's `drift` observes, asks these and acts.

pub mod budget;
pub mod classify;
pub mod content;
pub mod guard;
pub mod pdb;
pub mod plan;
