//! The handles on the world, without a decision: the idempotent API writes and the BMC drivers as the controller uses them (cached, metered, witnessed).

pub mod bmc_cache;
pub mod execute;
pub mod machine_index;
pub mod metered;
pub mod witnessed;
pub mod workload;
