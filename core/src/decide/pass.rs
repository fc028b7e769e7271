//! What a pass does with its subject before any step: carry on the remediation under way,
//! leave it to the shard that made it, start one (new, a retry, or again after a dry run),
//! record that a dry run's trigger went away, wait, or stay idle. The step itself is
//! [`super::plan::next_step`]'s.
//!
//! # Expected flow
//! 1. The pass observes its subject's newest remediation ([`Newest`]: its phase, whether
//!    this replica's shard owns it, the retry annotation on it, whether a dry run's trigger
//!    was recorded cleared), the subject's trigger in the cache ([`Trigger`]) and the
//!    policy's mode.
//! 2. [`decide`] says what to do ([`Decision`]); [`connect_ahead`] whether a start may come,
//!    so that a BMC session can be opened beside the start's reads.
//! 3. The pass carries the decision out. A [`Decision::Start`] that may follow a
//!    remediation's cleanup is confirmed on a fresh read of the trigger first (a cache may lag
//!    behind that cleanup: [`confirm_before_record`]); without one it becomes
//!    [`Start::unconfirmed`]. A first start is confirmed by the start's own fresh reads, after
//!    its record, and cancelled without them. At the start of a remediation, whether it is a
//!    dry run's is [`dry_run_starts`].
//!
//! # Guarantees (swept over every phase, shard, retry ask, trigger, record and mode in the
//! tests)
//! - A remediation under way is carried on only by its own shard, and nothing else starts
//!   beside it.
//! - A `Failed` remediation is followed by another only when an operator asked for a retry
//!   (`baremend.io/retry: "true"`) and a trigger is still there; a malformed ask is refused
//!   and told, never guessed at.
//! - A new start needs a trigger no remediation answered; a dry run is looked at again only
//!   when its trigger went away and came back, or the policy now remediates.
//! - Every start is confirmed on a fresh read; an unconfirmed one requests no power change.
//!   One that may follow a cleanup is confirmed before its record is created.
//!
//! # Caveats
//! - A remediation without a status reads as the default phase (`Pending`: under way), as the
//!   API server may hold one created a moment ago.

use std::time::Duration;

use super::gates::Held;
use super::plan::{Mode, Phase, Step};
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
    /// Whether its status records its trigger cleared (`TriggerCleared`: a dry run saw its
    /// trigger go away).
    pub trigger_cleared: bool,
}

/// The subject's trigger in the cache: the annotation or a health check's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// None is on it.
    Absent,
    /// One is on it, and a remediation already answered it (a health check keeps its request
    /// until the Machine is healthy).
    Answered,
    /// One is on it that no remediation answered.
    Unanswered,
}

impl Trigger {
    /// Every value, for the sweeps.
    pub const ALL: [Trigger; 3] = [Trigger::Absent, Trigger::Answered, Trigger::Unanswered];

    /// Whether one is on the subject, answered or not.
    pub fn present(self) -> bool {
        self != Trigger::Absent
    }
}

/// Which start a [`Decision::Start`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A first remediation for an unanswered trigger.
    New,
    /// The next attempt after a failed one, on an operator's ask.
    Retry,
    /// A real run (or a new record) after a dry run.
    AfterDryRun,
}

impl Start {
    /// What the pass does instead when the fresh read finds no trigger.
    pub fn unconfirmed(self) -> Decision {
        match self {
            Start::New => Decision::Idle,
            Start::Retry => Decision::RetryWaiting,
            Start::AfterDryRun => Decision::AwaitChange,
        }
    }
}

/// What a pass does first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Carry on the remediation under way, step by step.
    CarryOn,
    /// The remediation under way is another shard's: leave it (its changes wake the pass).
    LeaveToAnotherShard,
    /// Start a remediation once the trigger is confirmed on a fresh read.
    Start(Start),
    /// A retry was asked but no trigger is on the subject: tell so, and stay idle.
    RetryWaiting,
    /// The retry annotation is malformed: tell so, and stay idle.
    RefuseRetry(String),
    /// A dry run's trigger went away: record it once (`TriggerCleared`), then wait for a
    /// change.
    RecordTriggerCleared,
    /// A dry run ended and nothing starts: the housekeeping, then wait for a change.
    AwaitChange,
    /// Nothing to do but the housekeeping of the finished remediations.
    Idle,
}

/// What to do with the subject, given its newest remediation (`None`: it has none), its
/// trigger in the cache and the policy's mode.
pub fn decide(newest: Option<&Newest>, trigger: Trigger, mode: Mode) -> Decision {
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
            RetryAsk::Retry if trigger.present() => Decision::Start(Start::Retry),
            RetryAsk::Retry => Decision::RetryWaiting,
            RetryAsk::Malformed(value) => Decision::RefuseRetry(value.clone()),
            RetryAsk::NotAsked => Decision::Idle,
        },
        // A dry run is recorded once per appearance of the trigger, not once per pass.
        Some(newest) if newest.phase == Phase::DryRun => {
            match (trigger.present(), newest.trigger_cleared) {
                (false, false) => Decision::RecordTriggerCleared,
                (false, true) => Decision::AwaitChange,
                (true, cleared) if cleared || mode == Mode::Remediate => {
                    Decision::Start(Start::AfterDryRun)
                }
                (true, _) => Decision::AwaitChange,
            }
        }
        // No trigger, or only a request a remediation already answered.
        _ if trigger != Trigger::Unanswered => Decision::Idle,
        _ => Decision::Start(Start::New),
    }
}

/// Whether the remediation at `phase` records a dry run rather than fencing: it is starting
/// (`Pending`), triggered, the policy is in `DryRun`, and the policy is not paused (a paused
/// policy starts nothing, not even a probe). `may_start` is the start gates' verdict.
pub fn dry_run_starts(
    phase: Phase,
    triggered: bool,
    mode: Mode,
    may_start: Result<(), &Held>,
) -> bool {
    phase == Phase::Pending
        && triggered
        && mode == Mode::DryRun
        && !matches!(may_start, Err(Held::Paused))
}

/// How long after a remediation ended its subject's cache may still show the trigger its
/// cleanup removed (a Machine watch behind the Remediation watch; seconds when a watch broke):
/// a start within it is confirmed before its record is created.
pub const CLEANUP_LAG: Duration = Duration::from_secs(300);

/// Whether a start reads the trigger fresh before its record is created, rather than with
/// the start's own fresh reads after it. `since_newest`: how long ago the subject's newest
/// remediation ended (None: it has none).
///
/// Before, for every start that may follow a remediation's cleanup — a retry, a start after
/// a dry run, a new one within [`CLEANUP_LAG`] of the last end — whose cached trigger may be
/// the one that cleanup removed: otherwise every remediation would be followed by a record
/// cancelled at once. A subject's first start spares the round trip: should its trigger be
/// gone already, the start's fresh reads see it and cancel the record before any power
/// request (the power-off always rests on a fresh read).
pub fn confirm_before_record(start: Start, since_newest: Option<Duration>) -> bool {
    match start {
        Start::New => since_newest.is_some_and(|since| since < CLEANUP_LAG),
        Start::Retry | Start::AfterDryRun => true,
    }
}

/// Whether a start may follow (none under way and a trigger unanswered): the BMC session is
/// then opened ahead, beside the start's reads. Never a write: a session asks nothing of the
/// host.
pub fn connect_ahead(newest: Option<&Newest>, trigger: Trigger) -> bool {
    trigger == Trigger::Unanswered && newest.is_none_or(|newest| newest.phase.is_terminal())
}

/// Whether a step that only waits must give way to the error of a workload cluster that
/// cannot be reached: after the start (the Node's cluster is then what every step needs),
/// a wait would hide it. Before, the start gate holds and says why; a deadline's step runs.
pub fn unreachable_cluster_fails(phase: Phase, step: &Step) -> bool {
    phase != Phase::Pending && matches!(step, Step::Wait { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_start_that_may_follow_a_cleanup_is_confirmed_before_its_record() {
        let recent = Some(CLEANUP_LAG - Duration::from_secs(1));
        let long_ago = Some(CLEANUP_LAG);
        for since in [None, recent, long_ago, Some(Duration::ZERO)] {
            assert!(confirm_before_record(Start::Retry, since));
            assert!(confirm_before_record(Start::AfterDryRun, since));
        }
        assert!(!confirm_before_record(Start::New, None), "a first start");
        assert!(confirm_before_record(Start::New, recent));
        assert!(confirm_before_record(Start::New, Some(Duration::ZERO)));
        assert!(!confirm_before_record(Start::New, long_ago));
    }

    fn asks() -> [RetryAsk; 3] {
        [
            RetryAsk::NotAsked,
            RetryAsk::Retry,
            RetryAsk::Malformed("yes".into()),
        ]
    }

    /// Every subject a pass can open on: no remediation, or a newest one in every phase, of
    /// either shard, with every retry ask and with or without its trigger recorded cleared;
    /// under every trigger and both modes.
    fn every_opening() -> Vec<(Option<Newest>, Trigger, Mode)> {
        let mut out = Vec::new();
        for mode in [Mode::Remediate, Mode::DryRun] {
            for trigger in Trigger::ALL {
                out.push((None, trigger, mode));
                for phase in Phase::ALL {
                    for ours in [false, true] {
                        for retry in asks() {
                            for trigger_cleared in [false, true] {
                                let newest = Newest {
                                    phase,
                                    ours,
                                    retry: retry.clone(),
                                    trigger_cleared,
                                };
                                out.push((Some(newest), trigger, mode));
                            }
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn the_opening_sweep_covers_every_case() {
        // 2 modes × 3 triggers × (no remediation + 10 phases × 2 shards × 3 asks × 2 records).
        assert_eq!(
            every_opening().len(),
            2 * 3 * (1 + Phase::ALL.len() * 2 * 3 * 2)
        );
        assert_eq!(every_opening().len(), 726);
        assert_eq!(Phase::ALL.len(), 10);
    }

    #[test]
    fn a_remediation_under_way_is_carried_on_by_its_shard_alone_and_nothing_starts_beside_it() {
        for (newest, trigger, mode) in every_opening() {
            let decision = decide(newest.as_ref(), trigger, mode);
            let Some(newest) = newest.filter(|n| !n.phase.is_terminal()) else {
                continue;
            };
            let expected = if newest.ours {
                Decision::CarryOn
            } else {
                Decision::LeaveToAnotherShard
            };
            assert_eq!(decision, expected, "{newest:?} {trigger:?}");
            assert!(!connect_ahead(Some(&newest), trigger), "{newest:?}");
        }
    }

    #[test]
    fn nothing_but_a_remediation_of_its_own_shard_is_carried_on() {
        for (newest, trigger, mode) in every_opening() {
            if decide(newest.as_ref(), trigger, mode) == Decision::CarryOn {
                let newest = newest.expect("carried on: a remediation");
                assert!(newest.ours && !newest.phase.is_terminal(), "{newest:?}");
            }
        }
    }

    #[test]
    fn a_failed_remediation_is_followed_only_on_an_operators_retry_with_a_trigger() {
        for (newest, trigger, mode) in every_opening() {
            let decision = decide(newest.as_ref(), trigger, mode);
            let Some(newest) = newest.filter(|n| n.phase == Phase::Failed) else {
                continue;
            };
            let expected = match &newest.retry {
                RetryAsk::Retry if trigger.present() => Decision::Start(Start::Retry),
                RetryAsk::Retry => Decision::RetryWaiting,
                RetryAsk::Malformed(value) => Decision::RefuseRetry(value.clone()),
                RetryAsk::NotAsked => Decision::Idle,
            };
            assert_eq!(decision, expected, "{newest:?} {trigger:?}");
        }
    }

    #[test]
    fn every_start_has_a_trigger_and_nothing_under_way_and_a_new_one_an_unanswered_trigger() {
        let mut starts = [0; 3];
        for (newest, trigger, mode) in every_opening() {
            let Decision::Start(start) = decide(newest.as_ref(), trigger, mode) else {
                // Without a trigger, only a remediation already there moves anything.
                if !trigger.present() && newest.is_none() {
                    assert_eq!(decide(None, trigger, mode), Decision::Idle);
                }
                continue;
            };
            assert!(trigger.present(), "{newest:?}");
            let phase = newest.as_ref().map(|n| n.phase);
            assert!(phase.is_none_or(Phase::is_terminal), "{newest:?}");
            match start {
                Start::New => {
                    starts[0] += 1;
                    assert_eq!(trigger, Trigger::Unanswered, "{newest:?}");
                    assert!(
                        phase.is_none_or(|p| p != Phase::Failed && p != Phase::DryRun),
                        "{newest:?}"
                    );
                    assert!(connect_ahead(newest.as_ref(), trigger), "{newest:?}");
                }
                Start::Retry => {
                    starts[1] += 1;
                    assert_eq!(phase, Some(Phase::Failed));
                }
                Start::AfterDryRun => {
                    starts[2] += 1;
                    assert_eq!(phase, Some(Phase::DryRun));
                }
            }
        }
        // Each kind of start is reached by the sweep.
        assert!(starts.iter().all(|n| *n > 0), "{starts:?}");
    }

    #[test]
    fn an_unconfirmed_start_starts_nothing() {
        for start in [Start::New, Start::Retry, Start::AfterDryRun] {
            assert!(
                !matches!(start.unconfirmed(), Decision::Start(_) | Decision::CarryOn),
                "{start:?}"
            );
        }
        assert_eq!(Start::Retry.unconfirmed(), Decision::RetryWaiting);
    }

    #[test]
    fn a_dry_run_is_looked_at_again_only_when_its_trigger_came_back_or_the_policy_remediates() {
        for (newest, trigger, mode) in every_opening() {
            let decision = decide(newest.as_ref(), trigger, mode);
            let Some(newest) = newest.filter(|n| n.phase == Phase::DryRun) else {
                continue;
            };
            let expected = if !trigger.present() {
                // Recorded once per disappearance, not once per pass.
                if newest.trigger_cleared {
                    Decision::AwaitChange
                } else {
                    Decision::RecordTriggerCleared
                }
            } else if newest.trigger_cleared || mode == Mode::Remediate {
                Decision::Start(Start::AfterDryRun)
            } else {
                Decision::AwaitChange
            };
            assert_eq!(decision, expected, "{newest:?} {trigger:?} {mode:?}");
        }
    }

    #[test]
    fn a_dry_run_is_recorded_only_at_a_triggered_start_in_dry_run_mode_unless_paused() {
        let held = [Ok(()), Err(Held::Paused), Err(Held::ControlPlaneDisabled)];
        let mut recorded = 0;
        for phase in Phase::ALL {
            for triggered in [false, true] {
                for mode in [Mode::Remediate, Mode::DryRun] {
                    for may in &held {
                        let may = may.as_ref().map(|_| ());
                        if dry_run_starts(phase, triggered, mode, may) {
                            recorded += 1;
                            assert_eq!(phase, Phase::Pending);
                            assert!(triggered && mode == Mode::DryRun, "{mode:?}");
                            assert!(!matches!(may, Err(Held::Paused)), "{may:?}");
                        }
                    }
                }
            }
        }
        // A start held by another gate is still recorded as a dry run: it says what would be
        // held.
        assert_eq!(recorded, 2);
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
