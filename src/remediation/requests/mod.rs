//! What asked for a remediation: the health checks' requests as one view, whichever contract
//! made them (the pure part, [`baremend_core::decide::requests`], re-exported here), the
//! verdict on each (`admission`), the trigger of a pass (`trigger`) and the NodeHealthChecks
//! disabled while naming baremend (`node_health_checks`).

pub(super) mod admission;
pub mod node_health_checks;
pub mod trigger;

pub use baremend_core::decide::requests::*;
