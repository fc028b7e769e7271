//! Helpers shared by the drivers' tests: waiting on a condition (the root crate's one
//! `eventually`, included from its file) and the driver's own wait for a power state.

#![allow(dead_code)]

#[path = "../../../testkit/src/wait.rs"]
mod wait;

use std::time::Duration;

use baremend_drivers::{Error, PowerDriver, PowerState, WaitOptions, wait_for_power_state};

#[allow(unused_imports)] // redfish_sim waits only through the driver
pub use wait::eventually;

/// Short intervals for the driver's confirmation loop.
pub fn quick_wait(timeout_ms: u64) -> WaitOptions {
    WaitOptions {
        timeout: Duration::from_millis(timeout_ms),
        initial_interval: Duration::from_millis(50),
        max_interval: Duration::from_millis(200),
        consecutive_reads: 2,
    }
}

/// The driver's own wait for `target` (`wait_for_power_state`, the code under test: it
/// confirms a state by consecutive reads and reports what it last saw).
pub async fn wait_for(
    driver: &dyn PowerDriver,
    target: PowerState,
    timeout_ms: u64,
) -> Result<PowerState, Error> {
    wait_for_power_state(driver, &target, &quick_wait(timeout_ms), |_| {}).await
}
