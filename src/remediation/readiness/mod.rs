//! Fencing readiness and the power monitor: the background checks beside the controller.

pub mod fencing_check;
pub mod monitor;
