//! Time, injected: the pure part (the [`Clock`] trait and the conversions) is
//! `baremend-core`'s; the system's clock, the one place that reads the wall clock, is here.

use std::time::SystemTime;

pub use baremend_core::clock::*;

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}
