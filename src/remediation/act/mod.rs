//! Acting on the world: one function per planned step, the fencing strategies, the host's power, the non-disruptive probes and the dry run.

pub(super) mod dry_run;
pub(super) mod power;
pub mod probe;
pub(super) mod steps;
pub(super) mod strategy;
