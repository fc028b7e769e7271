//! What a pass does with its subject before any step: carry on the remediation under way,
//! leave it to the shard that made it, start one, retry a failed one, look again after a dry
//! run, or stay idle. The step itself is [`super::plan::next_step`]'s.
//!
//! # Expected flow
//! 1. The pass observes its subject's newest remediation ([`Newest`]: its phase, whether
//!    this replica's shard owns it, the retry annotation on it) and whether a trigger that no
//!    remediation answered is on the subject (the cached one).
//! 2. [`decide`] says what to do ([`Decision`]); [`connect_ahead`] whether a start may come,
//!    so that a BMC session can be opened beside the start's reads.
//! 3. The pass carries the decision out. A [`Decision::Start`] is confirmed on a fresh read
//!    of the trigger first (a cache may lag behind the last remediation's cleanup): the pass
//!    stays idle when the fresh read has none.
//!
//! # Guarantees (swept over every phase, shard, retry ask and trigger in the tests)
//! - A remediation under way is carried on only by its own shard, and nothing else starts
//!   beside it.
//! - A `Failed` remediation is followed by another only when an operator asked for a retry
//!   (`baremend.io/retry: "true"`); a malformed ask is refused and told, never guessed at.
//! - A start needs an unanswered trigger, or a dry run that ended (whose own look decides).
//!
//! # Caveats
//! - A remediation without a status reads as the default phase (`Pending`: under way), as the
//!   API server may hold one created a moment ago.

use super::plan::{Phase, Step};
use crate::retention::RetryAsk;

/// The subject's newest remediation, as the opening of a pass sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Newest {
    /// Its phase (the default one when it has no status yet).
    pub phase: Phase,
    /// Whether this replica's shard owns it (always, unsharded).
    pub ours: bool,
    /// What its retry annotation asks for.
    pub retry: RetryAsk,
}

/// What a pass does first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Carry on the remediation under way, step by step.
    CarryOn,
    /// The remediation under way is another shard's: leave it (its changes wake the pass).
    LeaveToAnotherShard,
    /// Start a new remediation once the trigger is confirmed on a fresh read.
    Start,
    /// The failed remediation was asked to be retried: start the next attempt.
    Retry,
    /// The retry annotation is malformed: tell so, and stay idle.
    RefuseRetry(String),
    /// A dry run ended: look whether it is to be recorded again or a real run may start.
    AfterDryRun,
    /// Nothing to do but the housekeeping of the finished remediations.
    Idle,
}

/// What to do with the subject, given its newest remediation (`None`: it has none) and
/// whether a trigger no remediation answered is on it.
pub fn decide(newest: Option<&Newest>, unanswered_trigger: bool) -> Decision {
    match newest {
        Some(newest) if !newest.phase.is_terminal() => {
            if newest.ours {
                Decision::CarryOn
            } else {
                Decision::LeaveToAnotherShard
            }
        }
        // A Failed remediation keeps the trigger: without an operator's ask it would loop on
        // a host that cannot be fenced.
        Some(newest) if newest.phase == Phase::Failed => match &newest.retry {
            RetryAsk::Retry => Decision::Retry,
            RetryAsk::Malformed(value) => Decision::RefuseRetry(value.clone()),
            RetryAsk::NotAsked => Decision::Idle,
        },
        // A dry run is recorded once per appearance of the trigger, not once per pass.
        Some(newest) if newest.phase == Phase::DryRun => Decision::AfterDryRun,
        // No trigger, or only a request a remediation already answered (the health check
        // keeps it until the Machine is healthy).
        _ if !unanswered_trigger => Decision::Idle,
        _ => Decision::Start,
    }
}

/// Whether a start may follow (none under way and a trigger unanswered): the BMC session is
/// then opened ahead, beside the start's reads. Never a write: a session asks nothing of the
/// host.
pub fn connect_ahead(newest: Option<&Newest>, unanswered_trigger: bool) -> bool {
    unanswered_trigger && newest.is_none_or(|newest| newest.phase.is_terminal())
}

/// Whether a step that only waits must give way to the error of a workload cluster that
/// cannot be reached: after the start (the Node's cluster is then what every step needs),
/// a wait would hide it. Before, the start gate holds and says why; a deadline's step runs.
pub fn unreachable_cluster_fails(phase: Phase, step: &Step) -> bool {
    phase != Phase::Pending && matches!(step, Step::Wait { .. })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn asks() -> [RetryAsk; 3] {
        [
            RetryAsk::NotAsked,
            RetryAsk::Retry,
            RetryAsk::Malformed("yes".into()),
        ]
    }

    /// Every subject a pass can open on: no remediation, or a newest one in every phase, of
    /// either shard, with every retry ask; with and without an unanswered trigger.
    fn every_opening() -> Vec<(Option<Newest>, bool)> {
        let mut out = Vec::new();
        for trigger in [false, true] {
            out.push((None, trigger));
            for phase in Phase::ALL {
                for ours in [false, true] {
                    for retry in asks() {
                        out.push((Some(Newest { phase, ours, retry }), trigger));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn the_opening_sweep_covers_every_case() {
        // 2 triggers × (no remediation + 10 phases × 2 shards × 3 asks).
        assert_eq!(every_opening().len(), 2 * (1 + Phase::ALL.len() * 2 * 3));
        assert_eq!(Phase::ALL.len(), 10);
    }

    #[test]
    fn a_remediation_under_way_is_carried_on_by_its_shard_alone_and_nothing_starts_beside_it() {
        for (newest, trigger) in every_opening() {
            let decision = decide(newest.as_ref(), trigger);
            let Some(newest) = newest.filter(|n| !n.phase.is_terminal()) else {
                continue;
            };
            let expected = if newest.ours {
                Decision::CarryOn
            } else {
                Decision::LeaveToAnotherShard
            };
            assert_eq!(decision, expected, "{newest:?} trigger {trigger}");
            assert!(!connect_ahead(Some(&newest), trigger), "{newest:?}");
        }
    }

    #[test]
    fn nothing_but_a_remediation_of_its_own_shard_is_carried_on() {
        for (newest, trigger) in every_opening() {
            if decide(newest.as_ref(), trigger) == Decision::CarryOn {
                let newest = newest.expect("carried on: a remediation");
                assert!(newest.ours && !newest.phase.is_terminal(), "{newest:?}");
            }
        }
    }

    #[test]
    fn a_failed_remediation_is_followed_only_on_an_operators_retry() {
        for (newest, trigger) in every_opening() {
            let decision = decide(newest.as_ref(), trigger);
            let Some(newest) = newest.filter(|n| n.phase == Phase::Failed) else {
                continue;
            };
            let expected = match &newest.retry {
                RetryAsk::Retry => Decision::Retry,
                RetryAsk::Malformed(value) => Decision::RefuseRetry(value.clone()),
                RetryAsk::NotAsked => Decision::Idle,
            };
            assert_eq!(decision, expected, "{newest:?} trigger {trigger}");
        }
    }

    #[test]
    fn a_start_needs_an_unanswered_trigger_and_nothing_under_way() {
        for (newest, trigger) in every_opening() {
            let decision = decide(newest.as_ref(), trigger);
            if decision == Decision::Start {
                assert!(trigger, "{newest:?}");
                assert!(
                    newest.as_ref().is_none_or(|n| n.phase.is_terminal()
                        && n.phase != Phase::Failed
                        && n.phase != Phase::DryRun),
                    "{newest:?}"
                );
                assert!(connect_ahead(newest.as_ref(), trigger), "{newest:?}");
            }
            // Without a trigger, only a remediation already there moves anything.
            if !trigger && newest.is_none() {
                assert_eq!(decision, Decision::Idle);
            }
        }
    }

    #[test]
    fn a_dry_run_that_ended_is_looked_at_again_whatever_the_trigger() {
        for (newest, trigger) in every_opening() {
            if let Some(newest) = newest.filter(|n| n.phase == Phase::DryRun) {
                assert_eq!(
                    decide(Some(&newest), trigger),
                    Decision::AfterDryRun,
                    "{newest:?}"
                );
            }
        }
    }

    #[test]
    fn an_unreachable_cluster_fails_a_wait_only_after_the_start() {
        let wait = Step::Wait {
            after: Duration::from_secs(1),
        };
        for phase in Phase::ALL {
            assert_eq!(
                unreachable_cluster_fails(phase, &wait),
                phase != Phase::Pending,
                "{phase:?}"
            );
        }
        assert!(!unreachable_cluster_fails(Phase::PoweringOff, &Step::Done));
    }
}
