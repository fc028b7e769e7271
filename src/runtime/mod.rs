//! What both controllers run on: the injected clock and time conversions, status
//! conditions, Events, the watch caches (one helper for every kind, the one Node watch they
//! share, the index of its Nodes' readiness, and the indexes an object's facts or keys are kept in beside its cache), the policy's observed generation, the Machine controller's runner, and background tasks that end with their
//! owner.
//!
//! Nothing here knows about remediation or drift: both controllers import it, it imports
//! neither.

pub mod bounded;
pub mod clock;
pub mod delete;
pub mod events;
pub mod fact_index;
pub mod informer;
pub mod key_index;
pub mod node_watch;
pub mod observed;
pub mod overlap;
pub mod read;
pub mod ready_index;
pub mod requeue;
pub mod runner;

pub mod tasks;

// The conditions and the retention decision live in `baremend-core`, beside the decisions
// that use them.
pub use baremend_core::{conditions, retention};

pub use clock::{Clock, SystemClock};

/// `mutex` locked; one whose holder panicked is still good: every writer of the controllers'
/// shared state leaves whole values behind.
pub fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
