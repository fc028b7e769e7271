//! Helpers shared by the simulator's tests: waiting on a condition (the root crate's one
//! `eventually`, included from its file).

#[path = "../../../tests/common/wait.rs"]
mod wait;

pub use wait::eventually;
