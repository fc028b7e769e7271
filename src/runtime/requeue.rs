//! What a failed reconcile leads to, the same way in both controllers: a transient failure
//! is tried again with a per-object exponential backoff (reset by the next success); a
//! terminal one is not retried soon — something has to change first (the object, the
//! policy, a Secret), and those changes wake the object on their own — but it is looked at
//! again after [`TERMINAL_RECHECK`], so that no phase outlives its deadline unnoticed.
//!
//! Guarantees: the delay grows 1×, 2×, 4×… the base up to [`BACKOFF_MAX`]; a success
//! forgets the object's failures. Caveats: the counts live in memory, a restart starts
//! them afresh (and so retries at once, which is what a restart is for).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tracing::warn;

use crate::Error;
use crate::runtime::runner::Action;

/// The longest wait between two tries of a transient failure: short, because the phases'
/// deadlines are seconds to minutes and a pass that waits longer sees them late.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// When a terminal failure is looked at again if nothing changes before.
pub const TERMINAL_RECHECK: Duration = Duration::from_secs(300);

/// Failures in a row per object, for the backoff.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// The object reconciled cleanly: its backoff starts over.
    pub fn succeeded(&self, key: &str) {
        self.lock().remove(key);
    }

    /// The object's reconcile failed with `error`: when to try again. `base` is the first
    /// delay of a transient failure.
    pub fn failed(&self, key: &str, error: &Error, base: Duration) -> Action {
        let category = error.category();
        if !error.is_transient() {
            self.lock().remove(key);
            warn!(object = %key, %error, reason = %category.event_reason(), "failed; waiting for a change");
            return Action::requeue(TERMINAL_RECHECK);
        }
        if category == crate::ErrorCategory::WorkloadCluster {
            // Not backed off: the workload clusters' registry paces its own connection
            // attempts (one a second per cluster), and a remediation past its power-off has a
            // release deadline to meet the moment the cluster answers again.
            warn!(object = %key, %error, reason = %category.event_reason(), retry_in = ?base, "failed; retrying");
            return Action::requeue(base);
        }
        let mut failures = self.lock();
        let count = failures.entry(key.to_string()).or_insert(0);
        let delay = backoff_delay(base, *count);
        *count = count.saturating_add(1);
        warn!(object = %key, %error, reason = %category.event_reason(), retry_in = ?delay, "failed; retrying");
        Action::requeue(delay)
    }

    /// [`Backoff::failed`] for an object whose remediation is under way: it has deadlines
    /// (power-off, Node ready) that a pass must see in time, so a failure no retry mends soon
    /// is still looked at again within [`BACKOFF_MAX`], not after [`TERMINAL_RECHECK`]. (A
    /// power request that a BMC's certificate refuses must fail the remediation at its
    /// power-off deadline, not minutes later.)
    pub fn failed_under_way(&self, key: &str, error: &Error, base: Duration) -> Action {
        if error.is_transient() {
            return self.failed(key, error, base);
        }
        self.lock().remove(key);
        let category = error.category();
        warn!(object = %key, %error, reason = %category.event_reason(), retry_in = ?BACKOFF_MAX, "failed; looked at again before the remediation's deadlines");
        Action::requeue(BACKOFF_MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The delay after `failures` failures in a row: `base` doubled that many times, at most
/// [`BACKOFF_MAX`].
pub fn backoff_delay(base: Duration, failures: u32) -> Duration {
    let factor = 1u32.checked_shl(failures.min(16)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_up_to_the_cap() {
        let base = Duration::from_secs(1);
        let delays: Vec<u64> = (0..10).map(|n| backoff_delay(base, n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10, 10, 10, 10, 10]);
        assert_eq!(backoff_delay(base, u32::MAX), BACKOFF_MAX);
    }

    fn transient() -> Error {
        Error::Driver(baremend_drivers::Error::Timeout {
            bmc: "bmc".into(),
            operation: "GET system".into(),
            timeout: Duration::from_secs(5),
        })
    }

    #[test]
    fn transient_failures_back_off_and_a_success_starts_over() {
        let backoff = Backoff::default();
        let base = Duration::from_secs(1);
        let delays: Vec<Action> = (0..3)
            .map(|_| backoff.failed("m", &transient(), base))
            .collect();
        assert_eq!(
            delays,
            [1, 2, 4].map(|s| Action::requeue(Duration::from_secs(s)))
        );
        // Another object has its own count.
        assert_eq!(
            backoff.failed("n", &transient(), base),
            Action::requeue(base)
        );
        backoff.succeeded("m");
        assert_eq!(
            backoff.failed("m", &transient(), base),
            Action::requeue(base)
        );
    }

    #[test]
    fn a_terminal_failure_waits_for_a_change_not_a_retry() {
        let backoff = Backoff::default();
        let invalid = Error::Invalid {
            object: "Machine a/b".into(),
            reason: "no host".into(),
        };
        assert!(!invalid.is_transient());
        assert_eq!(
            backoff.failed("m", &invalid, Duration::from_secs(1)),
            Action::requeue(TERMINAL_RECHECK)
        );
        // Unless its remediation is under way: its deadlines must be seen in time.
        assert_eq!(
            backoff.failed_under_way("m", &invalid, Duration::from_secs(1)),
            Action::requeue(BACKOFF_MAX)
        );
        // A transient one backs off there as anywhere.
        assert_eq!(
            backoff.failed_under_way("t", &transient(), Duration::from_secs(1)),
            Action::requeue(Duration::from_secs(1))
        );
        let refused = Error::Driver(baremend_drivers::Error::Authentication {
            bmc: "bmc".into(),
            detail: "401".into(),
        });
        assert!(!refused.is_transient());
        assert_eq!(
            refused.category().event_reason().as_str(),
            "BmcCredentialsRefused"
        );
    }

    #[test]
    fn a_missing_grant_is_forbidden_and_tried_again_on_the_backoff() {
        let status = kube::core::Status {
            code: 403,
            message: "nodes \"w\" is forbidden: User \"u\" cannot delete resource \"nodes\"".into(),
            reason: "Forbidden".into(),
            ..kube::core::Status::default()
        };
        let forbidden = Error::Kube {
            op: "DeleteNode",
            source: kube::Error::Api(Box::new(status)),
        };
        assert_eq!(forbidden.category().event_reason().as_str(), "Forbidden");
        assert!(forbidden.category().operator_should_see());
        // The grant is fixed where no watch sees it: retried, not left for five minutes.
        let base = Duration::from_secs(1);
        assert_eq!(
            Backoff::default().failed("m", &forbidden, base),
            Action::requeue(base)
        );
        // Told as the server said it, once.
        assert_eq!(
            forbidden.to_string(),
            "DeleteNode: nodes \"w\" is forbidden: User \"u\" cannot delete resource \"nodes\" (Forbidden, 403)"
        );
    }
}
