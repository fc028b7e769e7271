//! The remediation state machine: a pure function from (persisted state, observations,
//! policy) to the next step. Nothing here reads a clock or talks to anything.
//!
//! # Expected flow
//! 1. `Pending`: the trigger is present and the safety gates allow a start → request power-off
//!    with the first strategy of the policy (`PoweringOff`).
//! 2. `PoweringOff`: once the strategy's evidence proves the host off → `MarkFenced`. Evidence
//!    that can never prove it (a detached host, `disablePowerOff`) or the power-off deadline
//!    → the next strategy, or `Failed` when none is left. The trigger disappearing before the
//!    host is proven off cancels and withdraws the request.
//! 3. `Fenced`: back up the Node's labels and annotations (delete mode), then release the Node
//!    (delete it, or taint it out-of-service) → `NodeReleased`. From here on the cycle
//!    completes even if the trigger goes away: the host must not stay off.
//! 4. `NodeReleased` → request power-on (`PoweringOn`).
//! 5. `PoweringOn`: the Node registered and Ready for the grace period → `Restore`. No Node in
//!    time → a new power cycle, or `Failed` once the attempts are used up.
//!
//! # Guarantees
//! Only `Fenced` leads to releasing a Node, and `Fenced` is only reached through
//! `MarkFenced`, which the planner emits only when the evidence proved the host off.

use std::time::Duration;

use super::fence::NotFenced;
use super::gates::Held;

/// The earliest look at the power after a power-off request.
const FIRST_LOOK: Duration = Duration::from_millis(100);

/// Where a remediation is: the phase persisted in the `Remediation` object.
pub use crate::api::RemediationPhase as Phase;

/// How the Node of a fenced host is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReleaseMode {
    /// Delete the Node (its labels and annotations are backed up first).
    Delete,
    /// Keep the Node and add `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`.
    OutOfService,
}

/// The persisted state the planner reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persisted {
    /// The phase.
    pub phase: Phase,
    /// Index of the strategy in use, in the policy's order.
    pub strategy: usize,
    /// The power cycle under way, from 1.
    pub attempt: u32,
    /// When the phase began (time since an arbitrary epoch, the same as `Observed::now`).
    pub phase_since: Duration,
    /// The Node's labels and annotations are saved.
    pub node_backed_up: bool,
    /// The Node's boot ID when power-off was last requested, if it had one.
    pub boot_id_before: Option<String>,
}

impl Persisted {
    /// A new remediation at `now`.
    pub fn new(now: Duration) -> Self {
        Persisted {
            phase: Phase::Pending,
            strategy: 0,
            attempt: 1,
            phase_since: now,
            node_backed_up: false,
            boot_id_before: None,
        }
    }
}

/// The Node, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeView {
    /// No Node of that name.
    Missing,
    /// A Node exists.
    Present {
        /// Since when it is Ready (None: not Ready).
        ready_since: Option<Duration>,
        /// The boot ID its kubelet reported (`status.nodeInfo.bootID`), if any.
        boot_id: Option<String>,
    },
}

/// What the reconciler observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Now.
    pub now: Duration,
    /// The Machine carries the external-remediation annotation.
    pub triggered: bool,
    /// The current strategy's verdict: Ok when the host is proven off.
    pub fence: Result<(), NotFenced>,
    /// The Node.
    pub node: NodeView,
    /// The safety gates (concurrency, storm, control-plane quorum) for a start.
    pub may_start: Result<(), Held>,
}

/// The knobs of the policy the planner needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanPolicy {
    /// How many fencing strategies the policy allows, in order.
    pub strategies: usize,
    /// How long to wait for power-off proof per strategy.
    pub power_off_timeout: Duration,
    /// How long to wait for the Node after power-on.
    pub node_timeout: Duration,
    /// How long the Node must stay Ready to count as back.
    pub ready_grace: Duration,
    /// Power cycles before giving up.
    pub max_attempts: u32,
    /// Delete or taint.
    pub release: ReleaseMode,
    /// How soon to look again while waiting.
    pub poll: Duration,
}

/// Why a remediation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailReason {
    /// No strategy could prove the host off (the Node is left alone).
    PowerOffNotConfirmed(String),
    /// The Node did not come back in any attempt (the host stays on).
    NodeNeverReady,
}

/// The next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do until something changes or `after` passes.
    Wait {
        /// When to look again.
        after: Duration,
    },
    /// A safety gate holds the start.
    Hold(Held),
    /// The trigger went away before anything happened.
    Cancel,
    /// Persist `PoweringOff` with this strategy, then request power-off with it.
    RequestPowerOff {
        /// The strategy.
        strategy: usize,
    },
    /// The trigger went away before the host was proven off: withdraw the request (the host
    /// comes back on) and persist `Cancelled`.
    WithdrawPowerOff,
    /// Persist `Fenced` (and tag the Machine); the host is proven off.
    MarkFenced,
    /// Save the Node's labels and annotations.
    BackUpNode,
    /// Release the Node (needs the power-off proof), then persist `NodeReleased`.
    ReleaseNode(ReleaseMode),
    /// Persist `PoweringOn`, then request power-on.
    RequestPowerOn,
    /// Restore the Node, remove our marks and the trigger, persist `Succeeded`.
    Restore,
    /// Try the next strategy (the earlier request stays in place).
    Escalate {
        /// The strategy.
        to: usize,
        /// Why the current one could not prove the host off.
        why: String,
    },
    /// Start power cycle `attempt` from the beginning.
    Retry {
        /// The new attempt number.
        attempt: u32,
    },
    /// Persist `Failed` with a reason.
    Fail(FailReason),
    /// Terminal: nothing to do.
    Done,
}

fn escalate_or_fail(state: &Persisted, policy: &PlanPolicy, why: String) -> Step {
    if state.strategy + 1 < policy.strategies {
        Step::Escalate {
            to: state.strategy + 1,
            why,
        }
    } else {
        Step::Fail(FailReason::PowerOffNotConfirmed(why))
    }
}

/// The next step of a remediation.
/// Whether the host booted since the power-off request, as its Node tells: a boot ID other
/// than the one recorded at the request or, with none to compare, a Ready condition that
/// turned True at or after the power-on request (to the second: transition times have no
/// fraction). Ready alone proves nothing: a Node kept out-of-service can still read Ready
/// from before a power cycle shorter than the node monitor's grace period.
fn rebooted(state: &Persisted, ready_since: Duration, boot_id: Option<&str>) -> bool {
    match (state.boot_id_before.as_deref(), boot_id) {
        (Some(before), Some(now)) => before != now,
        _ => ready_since.as_secs() >= state.phase_since.as_secs(),
    }
}

pub fn next_step(state: &Persisted, observed: &Observed, policy: &PlanPolicy) -> Step {
    let waited = observed.now.saturating_sub(state.phase_since);
    match state.phase {
        Phase::Succeeded | Phase::Failed | Phase::Cancelled => Step::Done,
        Phase::Pending => match (observed.triggered, &observed.may_start) {
            (false, _) => Step::Cancel,
            (true, Err(held)) => Step::Hold(held.clone()),
            (true, Ok(())) => Step::RequestPowerOff { strategy: 0 },
        },
        Phase::PoweringOff => match &observed.fence {
            // Proof first: once the host is off, the cycle completes whatever the trigger does.
            Ok(()) => Step::MarkFenced,
            Err(_) if !observed.triggered => Step::WithdrawPowerOff,
            Err(NotFenced::Untrustworthy(why)) => escalate_or_fail(state, policy, why.clone()),
            Err(NotFenced::NotYet(why)) if waited >= policy.power_off_timeout => escalate_or_fail(
                state,
                policy,
                format!("not proven off after {waited:?}: {why}"),
            ),
            // Look soon after the request (a quick BMC is off in a fraction of a second),
            // then less and less often, up to the policy's poll interval.
            Err(NotFenced::NotYet(_)) => Step::Wait {
                after: (waited / 2).max(FIRST_LOOK).min(policy.poll),
            },
        },
        Phase::Fenced => match (policy.release, &observed.node, state.node_backed_up) {
            (ReleaseMode::Delete, NodeView::Present { .. }, false) => Step::BackUpNode,
            (mode, _, _) => Step::ReleaseNode(mode),
        },
        Phase::NodeReleased => Step::RequestPowerOn,
        Phase::PoweringOn => {
            let back = match &observed.node {
                NodeView::Present {
                    ready_since: Some(since),
                    boot_id,
                } => {
                    rebooted(state, *since, boot_id.as_deref())
                        // Readiness counts only from the power-on request on.
                        && observed.now.saturating_sub((*since).max(state.phase_since))
                            >= policy.ready_grace
                }
                _ => false,
            };
            if back {
                Step::Restore
            } else if waited >= policy.node_timeout {
                if state.attempt < policy.max_attempts {
                    Step::Retry {
                        attempt: state.attempt + 1,
                    }
                } else {
                    Step::Fail(FailReason::NodeNeverReady)
                }
            } else {
                Step::Wait { after: policy.poll }
            }
        }
        Phase::Restoring => Step::Restore,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PHASES: [Phase; 9] = [
        Phase::Pending,
        Phase::PoweringOff,
        Phase::Fenced,
        Phase::NodeReleased,
        Phase::PoweringOn,
        Phase::Restoring,
        Phase::Succeeded,
        Phase::Failed,
        Phase::Cancelled,
    ];

    fn policy() -> PlanPolicy {
        PlanPolicy {
            strategies: 2,
            power_off_timeout: Duration::from_secs(60),
            node_timeout: Duration::from_secs(600),
            ready_grace: Duration::from_secs(30),
            max_attempts: 2,
            release: ReleaseMode::Delete,
            poll: Duration::from_secs(5),
        }
    }

    fn state(phase: Phase) -> Persisted {
        Persisted {
            phase,
            ..Persisted::new(Duration::from_secs(1000))
        }
    }

    fn observed() -> Observed {
        Observed {
            now: Duration::from_secs(1001),
            triggered: true,
            fence: Err(NotFenced::NotYet("on".into())),
            node: NodeView::Present {
                ready_since: None,
                boot_id: None,
            },
            may_start: Ok(()),
        }
    }

    fn fences() -> Vec<Result<(), NotFenced>> {
        vec![
            Ok(()),
            Err(NotFenced::NotYet("x".into())),
            Err(NotFenced::Untrustworthy("y".into())),
        ]
    }

    fn nodes() -> Vec<NodeView> {
        let present = |ready: Option<u64>, boot: Option<&str>| NodeView::Present {
            ready_since: ready.map(Duration::from_secs),
            boot_id: boot.map(String::from),
        };
        vec![
            NodeView::Missing,
            present(None, None),
            present(Some(0), None),
            present(Some(0), Some("boot-a")),
            present(Some(0), Some("boot-b")),
            present(Some(2000), None),
            present(Some(2000), Some("boot-a")),
        ]
    }

    /// Every combination of phase, trigger, fence verdict, Node, gate and elapsed time.
    fn every_case() -> Vec<(Persisted, Observed)> {
        let mut cases = Vec::new();
        for phase in PHASES {
            for triggered in [true, false] {
                for fence in fences() {
                    for node in nodes() {
                        for may_start in [Ok(()), Err(Held::ControlPlaneBusy)] {
                            for elapsed in [0u64, 59, 60, 599, 600, 5000] {
                                for (backed_up, boot) in [(false, None), (true, Some("boot-a"))] {
                                    for (strategy, attempt) in [(0, 1), (1, 1), (0, 2), (1, 2)] {
                                        let mut s = state(phase);
                                        s.node_backed_up = backed_up;
                                        s.boot_id_before = boot.map(String::from);
                                        s.strategy = strategy;
                                        s.attempt = attempt;
                                        let o = Observed {
                                            now: s.phase_since + Duration::from_secs(elapsed),
                                            triggered,
                                            fence: fence.clone(),
                                            node: node.clone(),
                                            may_start: may_start.clone(),
                                        };
                                        cases.push((s, o));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        cases
    }

    #[test]
    fn a_node_is_released_only_in_the_fenced_phase() {
        for (s, o) in every_case() {
            if let Step::ReleaseNode(_) | Step::BackUpNode = next_step(&s, &o, &policy()) {
                assert_eq!(s.phase, Phase::Fenced, "{s:?} {o:?}");
            }
        }
    }

    #[test]
    fn fenced_is_marked_only_when_the_evidence_proves_the_host_off() {
        for (s, o) in every_case() {
            if next_step(&s, &o, &policy()) == Step::MarkFenced {
                assert_eq!(o.fence, Ok(()), "{s:?} {o:?}");
                assert_eq!(s.phase, Phase::PoweringOff);
            }
        }
    }

    #[test]
    fn once_the_host_is_off_the_cycle_completes_even_without_the_trigger() {
        for (s, o) in every_case() {
            let step = next_step(&s, &o, &policy());
            let after_fencing = matches!(
                s.phase,
                Phase::Fenced | Phase::NodeReleased | Phase::PoweringOn | Phase::Restoring
            );
            if after_fencing {
                assert!(
                    !matches!(step, Step::Cancel | Step::WithdrawPowerOff),
                    "{s:?} {o:?} → {step:?}"
                );
            }
        }
    }

    #[test]
    fn without_the_trigger_an_unfenced_remediation_cancels_and_withdraws() {
        let o = Observed {
            triggered: false,
            ..observed()
        };
        assert_eq!(
            next_step(&state(Phase::Pending), &o, &policy()),
            Step::Cancel
        );
        assert_eq!(
            next_step(&state(Phase::PoweringOff), &o, &policy()),
            Step::WithdrawPowerOff
        );
        let off = Observed { fence: Ok(()), ..o };
        assert_eq!(
            next_step(&state(Phase::PoweringOff), &off, &policy()),
            Step::MarkFenced,
            "off already: complete the cycle"
        );
    }

    #[test]
    fn gates_hold_only_the_start() {
        let closed = Observed {
            may_start: Err(Held::Storm {
                unhealthy: 3,
                machines: 6,
                max_percent: 40,
            }),
            ..observed()
        };
        assert!(matches!(
            next_step(&state(Phase::Pending), &closed, &policy()),
            Step::Hold(_)
        ));
        for phase in PHASES.into_iter().filter(|p| *p != Phase::Pending) {
            assert!(
                !matches!(next_step(&state(phase), &closed, &policy()), Step::Hold(_)),
                "{phase:?}"
            );
        }
        assert_eq!(
            next_step(&state(Phase::Pending), &observed(), &policy()),
            Step::RequestPowerOff { strategy: 0 }
        );
    }

    #[test]
    fn unprovable_or_late_power_off_escalates_then_fails() {
        let untrustworthy = Observed {
            fence: Err(NotFenced::Untrustworthy("detached".into())),
            ..observed()
        };
        assert!(matches!(
            next_step(&state(Phase::PoweringOff), &untrustworthy, &policy()),
            Step::Escalate { to: 1, .. }
        ));
        let mut last = state(Phase::PoweringOff);
        last.strategy = 1;
        assert!(matches!(
            next_step(&last, &untrustworthy, &policy()),
            Step::Fail(FailReason::PowerOffNotConfirmed(_))
        ));
        let early = Observed {
            now: Duration::from_secs(1059),
            ..observed()
        };
        assert_eq!(
            next_step(&state(Phase::PoweringOff), &early, &policy()),
            Step::Wait {
                after: Duration::from_secs(5)
            }
        );
        let late = Observed {
            now: Duration::from_secs(1060),
            ..observed()
        };
        assert!(matches!(
            next_step(&state(Phase::PoweringOff), &late, &policy()),
            Step::Escalate { to: 1, .. }
        ));
    }

    #[test]
    fn power_off_is_looked_at_soon_then_less_often_up_to_the_poll_interval() {
        let at = |millis: u64| Observed {
            now: Duration::from_secs(1000) + Duration::from_millis(millis),
            ..observed()
        };
        let wait = |millis: u64| match next_step(&state(Phase::PoweringOff), &at(millis), &policy())
        {
            Step::Wait { after } => after,
            other => panic!("{other:?}"),
        };
        assert_eq!(wait(0), Duration::from_millis(100));
        assert_eq!(wait(150), Duration::from_millis(100));
        assert_eq!(wait(1000), Duration::from_millis(500));
        assert_eq!(wait(9000), Duration::from_millis(4500));
        assert_eq!(wait(30_000), Duration::from_secs(5));
    }

    #[test]
    fn the_node_is_backed_up_before_deletion_but_not_for_the_taint() {
        assert_eq!(
            next_step(&state(Phase::Fenced), &observed(), &policy()),
            Step::BackUpNode
        );
        let backed_up = Persisted {
            node_backed_up: true,
            ..state(Phase::Fenced)
        };
        assert_eq!(
            next_step(&backed_up, &observed(), &policy()),
            Step::ReleaseNode(ReleaseMode::Delete)
        );
        let gone = Observed {
            node: NodeView::Missing,
            ..observed()
        };
        assert_eq!(
            next_step(&state(Phase::Fenced), &gone, &policy()),
            Step::ReleaseNode(ReleaseMode::Delete)
        );
        let taint = PlanPolicy {
            release: ReleaseMode::OutOfService,
            ..policy()
        };
        assert_eq!(
            next_step(&state(Phase::Fenced), &observed(), &taint),
            Step::ReleaseNode(ReleaseMode::OutOfService)
        );
    }

    #[test]
    fn the_node_is_back_only_after_the_ready_grace_counted_from_power_on() {
        let powering_on = state(Phase::PoweringOn);
        let at = |secs: u64, ready_since: Option<u64>| Observed {
            now: Duration::from_secs(secs),
            node: NodeView::Present {
                ready_since: ready_since.map(Duration::from_secs),
                boot_id: None,
            },
            ..observed()
        };
        let wait = Step::Wait {
            after: Duration::from_secs(5),
        };
        assert_eq!(
            next_step(&powering_on, &at(1010, Some(1005)), &policy()),
            wait
        );
        assert_eq!(
            next_step(&powering_on, &at(1035, Some(1005)), &policy()),
            Step::Restore
        );
        // Ready in the second of the request: transition times have no fraction.
        assert_eq!(
            next_step(&powering_on, &at(1030, Some(1000)), &policy()),
            Step::Restore
        );
        assert_eq!(next_step(&powering_on, &at(1599, None), &policy()), wait);
        assert_eq!(
            next_step(&powering_on, &at(1600, None), &policy()),
            Step::Retry { attempt: 2 }
        );
        let last = Persisted {
            attempt: 2,
            ..powering_on
        };
        assert_eq!(
            next_step(&last, &at(1600, None), &policy()),
            Step::Fail(FailReason::NodeNeverReady)
        );
    }

    #[test]
    fn a_node_still_ready_from_before_the_power_cycle_is_not_back() {
        let mut powering_on = state(Phase::PoweringOn);
        let at = |secs: u64, boot: Option<&str>| Observed {
            now: Duration::from_secs(secs),
            node: NodeView::Present {
                ready_since: Some(Duration::from_secs(10)),
                boot_id: boot.map(String::from),
            },
            ..observed()
        };
        let wait = Step::Wait {
            after: Duration::from_secs(5),
        };
        // Without a boot ID to compare, Ready since before the request proves nothing...
        assert_eq!(next_step(&powering_on, &at(1100, None), &policy()), wait);
        assert_eq!(
            next_step(&powering_on, &at(1600, None), &policy()),
            Step::Retry { attempt: 2 }
        );
        // ...nor does the same boot ID: the host never rebooted (a lying BMC's Off).
        powering_on.boot_id_before = Some("boot-a".into());
        assert_eq!(
            next_step(&powering_on, &at(1100, Some("boot-a")), &policy()),
            wait
        );
        assert_eq!(
            next_step(&powering_on, &at(1600, Some("boot-a")), &policy()),
            Step::Retry { attempt: 2 }
        );
        // A new boot ID is a reboot; the grace counts from the power-on request.
        assert_eq!(
            next_step(&powering_on, &at(1029, Some("boot-b")), &policy()),
            wait
        );
        assert_eq!(
            next_step(&powering_on, &at(1030, Some("boot-b")), &policy()),
            Step::Restore
        );
        // A Node without a boot ID now falls back to the Ready transition.
        assert_eq!(next_step(&powering_on, &at(1100, None), &policy()), wait);
    }

    #[test]
    fn every_case_has_a_step_and_terminal_phases_do_nothing() {
        for (s, o) in every_case() {
            let step = next_step(&s, &o, &policy());
            assert_eq!(
                s.phase.is_terminal(),
                step == Step::Done,
                "{s:?} {o:?} → {step:?}"
            );
        }
    }
}
