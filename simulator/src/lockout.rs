//! Account lock-out, as BMCs do it: after `threshold` failed logins an account is locked for
//! `duration`, and while locked even its right password is refused. Shared by the Redfish
//! simulator (served as the AccountService's `AccountLockoutThreshold`,
//! `AccountLockoutDuration` and `AccountLockoutCounterResetAfter`) and the IPMI simulator.
//!
//! # Expected flow
//! A login asks [`LockoutCounter::locked`] first (a locked account is refused without checking
//! the password), then reports [`LockoutCounter::failed`] or [`LockoutCounter::succeeded`].
//!
//! # Guarantees
//! - Off by default (`threshold` 0), as on the BMCs the simulators stand in for; tests turn it on.
//! - The failure count is reset `counter_reset_after` after the last failure, and by a good
//!   login when `success_resets_counter` (the Redfish rule; off models a BMC that counts every
//!   failure in its window, as iDRAC's IP blocking does).
//! - Every refused attempt is counted in `failed_logins`, so tests can prove a client never
//!   loops on a refusal.
//!
//! # Caveats
//! Attempts while locked do not extend the lock.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// When an account locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LockoutPolicy {
    /// Consecutive failed logins that lock the account; 0 turns lock-out off.
    pub threshold: u32,
    /// How long a locked account stays locked, in seconds.
    pub duration_secs: u64,
    /// Seconds after the last failure at which the failure count starts again from zero.
    pub counter_reset_after_secs: u64,
    /// Whether a good login resets the failure count.
    pub success_resets_counter: bool,
}

impl Default for LockoutPolicy {
    fn default() -> Self {
        LockoutPolicy {
            threshold: 0,
            duration_secs: 300,
            counter_reset_after_secs: 300,
            success_resets_counter: true,
        }
    }
}

impl LockoutPolicy {
    /// A policy that locks after `threshold` failures, for five minutes.
    pub fn after(threshold: u32) -> Self {
        LockoutPolicy {
            threshold,
            ..LockoutPolicy::default()
        }
    }
}

/// One account's failures, as tests read them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockoutStatus {
    /// Failures counted towards the threshold now.
    pub consecutive_failures: u32,
    /// Every refused login of the account, its lock-outs included.
    pub failed_logins: u64,
    /// Good logins.
    pub good_logins: u64,
    /// Whether the account is locked now.
    pub locked: bool,
    /// How many times it was locked.
    pub lockouts: u64,
}

/// The lock-out state of one account. Times are the simulator clock's.
#[derive(Debug, Clone, Default)]
pub struct LockoutCounter {
    consecutive: u32,
    last_failure: Option<Duration>,
    locked_until: Option<Duration>,
    failed_logins: u64,
    good_logins: u64,
    lockouts: u64,
}

impl LockoutCounter {
    /// Whether the account is locked at `now`, without changing anything.
    pub fn is_locked(&self, policy: &LockoutPolicy, now: Duration) -> bool {
        policy.threshold > 0 && self.locked_until.is_some_and(|until| now < until)
    }

    /// Whether the account is locked at `now`; a lock that ran out is lifted (and its count
    /// cleared).
    pub fn locked(&mut self, policy: &LockoutPolicy, now: Duration) -> bool {
        match self.locked_until {
            Some(_) if self.is_locked(policy, now) => true,
            Some(_) => {
                self.locked_until = None;
                self.consecutive = 0;
                false
            }
            None => false,
        }
    }

    /// A login of a locked account, refused without looking at the password.
    pub fn refused_while_locked(&mut self) {
        self.failed_logins += 1;
    }

    /// A wrong password.
    pub fn failed(&mut self, policy: &LockoutPolicy, now: Duration) {
        self.failed_logins += 1;
        let window = Duration::from_secs(policy.counter_reset_after_secs);
        if self.last_failure.is_some_and(|last| now >= last + window) {
            self.consecutive = 0;
        }
        self.last_failure = Some(now);
        self.consecutive = self.consecutive.saturating_add(1);
        if policy.threshold > 0 && self.consecutive >= policy.threshold {
            self.locked_until = Some(now + Duration::from_secs(policy.duration_secs));
            self.lockouts += 1;
        }
    }

    /// A good login.
    pub fn succeeded(&mut self, policy: &LockoutPolicy) {
        self.good_logins += 1;
        if policy.success_resets_counter {
            self.consecutive = 0;
        }
    }

    /// What tests see.
    pub fn status(&mut self, policy: &LockoutPolicy, now: Duration) -> LockoutStatus {
        LockoutStatus {
            locked: self.locked(policy, now),
            consecutive_failures: self.consecutive,
            failed_logins: self.failed_logins,
            good_logins: self.good_logins,
            lockouts: self.lockouts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn the_threshold_locks_even_the_right_password_out_for_the_duration() {
        let policy = LockoutPolicy {
            threshold: 3,
            duration_secs: 60,
            counter_reset_after_secs: 30,
            success_resets_counter: true,
        };
        let mut counter = LockoutCounter::default();
        for second in 0..3 {
            assert!(!counter.locked(&policy, at(second)));
            counter.failed(&policy, at(second));
        }
        assert!(counter.locked(&policy, at(3)));
        assert!(counter.locked(&policy, at(61)));
        assert!(
            !counter.locked(&policy, at(62)),
            "lifted after the duration"
        );
        let status = counter.status(&policy, at(62));
        assert_eq!((status.failed_logins, status.lockouts), (3, 1));
        assert_eq!(status.consecutive_failures, 0);
    }

    #[test]
    fn the_count_resets_after_its_window_and_on_a_good_login_when_the_policy_says_so() {
        let mut policy = LockoutPolicy {
            threshold: 2,
            duration_secs: 60,
            counter_reset_after_secs: 10,
            success_resets_counter: true,
        };
        let mut counter = LockoutCounter::default();
        counter.failed(&policy, at(0));
        counter.failed(&policy, at(10));
        assert!(
            !counter.locked(&policy, at(10)),
            "the first failure aged out"
        );
        counter.succeeded(&policy);
        counter.failed(&policy, at(11));
        assert!(
            !counter.locked(&policy, at(11)),
            "the good login reset the count"
        );
        policy.success_resets_counter = false;
        counter.succeeded(&policy);
        counter.failed(&policy, at(12));
        assert!(counter.locked(&policy, at(12)));
    }

    #[test]
    fn a_threshold_of_zero_never_locks() {
        let policy = LockoutPolicy::default();
        let mut counter = LockoutCounter::default();
        for second in 0..100 {
            counter.failed(&policy, at(second));
        }
        assert!(!counter.locked(&policy, at(100)));
        assert_eq!(counter.status(&policy, at(100)).failed_logins, 100);
    }
}
