use std::time::Duration;

use super::*;
use crate::drift::classify::{Drift, DriftKind};

pub(super) const S: fn(u64) -> Duration = Duration::from_secs;

pub(super) fn policy() -> PlanPolicy {
    PlanPolicy {
        mode: Mode::Remediate,
        action: Action::Force,
        debounce: S(30),
        pickup_timeout: S(120),
        drain_timeout: S(1800),
        reboot_timeout: S(900),
        restore_timeout: S(180),
        apply_timeout: S(3600),
        max_attempts: 3,
        escalate: true,
        drain_before_restore: false,
        poll: S(5),
    }
}

pub(super) fn drifted() -> ConfigState {
    ConfigState::Drifted(Drift {
        kind: DriftKind::Content,
        target: "/etc/foo".into(),
        against: None,
    })
}

/// A drifted node in steady state before anything happened.
pub(super) fn node() -> NodeObservation {
    NodeObservation {
        config: drifted(),
        same_drift: true,
        ready: true,
        unschedulable: false,
        desired_drain: Some("uncordon-rendered-worker-a".into()),
        last_applied_drain: Some("uncordon-rendered-worker-a".into()),
        rebooting: false,
        boot_id: Some("boot-1".into()),
        on_pool_target: true,
        mcn_degraded: Some(true),
        pods_to_evict: 0,
    }
}

pub(super) fn done_node(boot: &str) -> NodeObservation {
    NodeObservation {
        config: ConfigState::Done,
        same_drift: false,
        boot_id: Some(boot.into()),
        mcn_degraded: Some(false),
        ..node()
    }
}

pub(super) fn observed(now: u64, node: Option<NodeObservation>) -> Observed {
    Observed {
        now: S(now),
        node,
        gates: Ok(()),
        blocking: Vec::new(),
        recent_attempts: 0,
        disabled: None,
    }
}

pub(super) fn state(phase: Phase, since: u64) -> Persisted {
    Persisted {
        phase,
        phase_since: S(since),
        drain_before: Some("uncordon-rendered-worker-a".into()),
        boot_before: Some("boot-1".into()),
        ..Persisted::new(S(0))
    }
}

fn applying(milestones: &[Milestone]) -> Persisted {
    Persisted {
        milestones: milestones.to_vec(),
        ..state(Phase::Applying, 100)
    }
}

#[test]
fn drift_waits_out_the_debounce_then_starts_the_force_action() {
    let fresh = Persisted::new(S(0));
    assert_eq!(
        next_step(&fresh, &observed(10, Some(node())), &policy()),
        Step::Wait { after: S(20) }
    );
    assert_eq!(
        next_step(&fresh, &observed(30, Some(node())), &policy()),
        Step::EndDebounce
    );
    let pending = state(Phase::Pending, 30);
    assert_eq!(
        next_step(&pending, &observed(30, Some(node())), &policy()),
        Step::RequestForce
    );
    let restore = PlanPolicy {
        action: Action::Restore,
        ..policy()
    };
    assert_eq!(
        next_step(&pending, &observed(30, Some(node())), &restore),
        Step::RequestRestore
    );
}

#[test]
fn observe_mode_and_the_annotation_hold_the_start_and_nothing_under_way() {
    let pending = state(Phase::Pending, 0);
    let observe = PlanPolicy {
        mode: Mode::Observe,
        ..policy()
    };
    assert!(matches!(
        next_step(&pending, &observed(30, Some(node())), &observe),
        Step::Hold(_, DriftEventReason::ObserveOnly)
    ));
    let disabled = Observed {
        disabled: Some("on Node n0".into()),
        ..observed(30, Some(node()))
    };
    assert_eq!(
        next_step(&pending, &disabled, &policy()),
        Step::Hold(
            "on Node n0".into(),
            DriftEventReason::DriftRemediationDisabled
        )
    );
    // Healed while held: nothing was done, and it ends.
    assert_eq!(
        next_step(&pending, &observed(30, Some(done_node("boot-1"))), &observe),
        Step::SelfHealed
    );
    // Switched back: the start goes ahead.
    assert_eq!(
        next_step(&pending, &observed(30, Some(node())), &policy()),
        Step::RequestForce
    );
}

#[test]
fn a_node_the_admin_repairs_during_the_debounce_is_self_healed_with_no_action() {
    let fresh = Persisted::new(S(0));
    assert_eq!(
        next_step(&fresh, &observed(10, Some(done_node("boot-1"))), &policy()),
        Step::SelfHealed
    );
    // Drift of another file is another remediation; this one is over.
    let other = NodeObservation {
        same_drift: false,
        ..node()
    };
    assert_eq!(
        next_step(
            &state(Phase::Pending, 30),
            &observed(40, Some(other)),
            &policy()
        ),
        Step::SelfHealed
    );
}

#[test]
fn gates_budgets_and_the_recurrence_cap_hold_or_end_the_start() {
    let pending = state(Phase::Pending, 30);
    let mut held = observed(40, Some(node()));
    held.gates = Err(Deferred::RollingOut);
    assert_eq!(
        next_step(&pending, &held, &policy()),
        Step::Hold(
            "the pool is rolling out a config".into(),
            DriftEventReason::PoolRollingOut
        )
    );
    let mut blocked = observed(40, Some(node()));
    blocked.blocking = vec![Blocking {
        budget: "openshift-ingress/router-default".into(),
        pods: vec!["openshift-ingress/router-1".into()],
    }];
    match next_step(&pending, &blocked, &policy()) {
        Step::Hold(text, reason) => {
            assert_eq!(reason, DriftEventReason::BlockedByPodDisruptionBudget);
            assert!(text.contains("openshift-ingress/router-default"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // The restore action drains nothing: budgets do not hold it.
    let restore = PlanPolicy {
        action: Action::Restore,
        ..policy()
    };
    assert_eq!(
        next_step(&pending, &blocked, &restore),
        Step::RequestRestore
    );
    let mut recurring = observed(40, Some(node()));
    recurring.recent_attempts = 3;
    assert_eq!(
        next_step(&pending, &recurring, &policy()),
        Step::Fail(FailReason::Recurring(3))
    );
}

#[test]
fn the_forcefile_is_picked_up_by_a_drain_request_a_reboot_or_a_new_boot() {
    let requested = state(Phase::ForceRequested, 100);
    assert_eq!(
        next_step(&requested, &observed(110, Some(node())), &policy()),
        Step::Wait { after: S(5) }
    );
    let draining = NodeObservation {
        desired_drain: Some("drain-rendered-worker-a".into()),
        ..node()
    };
    let rebooting = NodeObservation {
        rebooting: true,
        ..node()
    };
    let new_boot = NodeObservation {
        boot_id: Some("boot-2".into()),
        ..node()
    };
    for seen in [draining, rebooting, new_boot] {
        assert_eq!(
            next_step(&requested, &observed(110, Some(seen)), &policy()),
            Step::Record(Milestone::PickedUp)
        );
    }
}

#[test]
fn a_forcefile_not_picked_up_in_time_fails_and_one_made_moot_aborts() {
    let requested = state(Phase::ForceRequested, 100);
    assert_eq!(
        next_step(&requested, &observed(220, Some(node())), &policy()),
        Step::Fail(FailReason::PickupTimeout)
    );
    assert!(matches!(
        next_step(
            &requested,
            &observed(110, Some(done_node("boot-1"))),
            &policy()
        ),
        Step::Abort(_)
    ));
    let mut aborted = requested.clone();
    aborted.abort = true;
    assert!(matches!(
        next_step(&aborted, &observed(110, Some(node())), &policy()),
        Step::Abort(_)
    ));
}

#[test]
fn the_mco_flow_is_recorded_milestone_by_milestone_then_verified() {
    let drain_pending = NodeObservation {
        desired_drain: Some("drain-rendered-worker-a".into()),
        unschedulable: true,
        ..node()
    };
    let p = applying(&[Milestone::PickedUp]);
    assert_eq!(
        next_step(&p, &observed(110, Some(drain_pending)), &policy()),
        Step::Note(Noted::Draining)
    );
    let drained = NodeObservation {
        desired_drain: Some("drain-rendered-worker-a".into()),
        last_applied_drain: Some("drain-rendered-worker-a".into()),
        unschedulable: true,
        ..node()
    };
    assert_eq!(
        next_step(&p, &observed(120, Some(drained.clone())), &policy()),
        Step::Record(Milestone::Drained)
    );
    let down = NodeObservation {
        ready: false,
        rebooting: true,
        ..drained.clone()
    };
    let p = applying(&[Milestone::PickedUp, Milestone::Drained]);
    assert_eq!(
        next_step(&p, &observed(130, Some(down)), &policy()),
        Step::Record(Milestone::Rebooting)
    );
    let up = NodeObservation {
        boot_id: Some("boot-2".into()),
        ..drained
    };
    let p = applying(&[
        Milestone::PickedUp,
        Milestone::Drained,
        Milestone::Rebooting,
    ]);
    assert_eq!(
        next_step(&p, &observed(140, Some(up.clone())), &policy()),
        Step::Record(Milestone::Rebooted)
    );
    // Rebooted but still cordoned: the MCO has not uncordoned yet.
    let all = applying(&[
        Milestone::PickedUp,
        Milestone::Drained,
        Milestone::Rebooting,
        Milestone::Rebooted,
    ]);
    assert_eq!(
        next_step(&all, &observed(150, Some(up)), &policy()),
        Step::Wait { after: S(5) }
    );
    assert_eq!(
        next_step(&all, &observed(160, Some(done_node("boot-2"))), &policy()),
        Step::Succeed
    );
}

#[test]
fn verification_demands_every_sign_of_done() {
    let all = applying(&[
        Milestone::PickedUp,
        Milestone::Drained,
        Milestone::Rebooting,
        Milestone::Rebooted,
    ]);
    let spoilers: [fn(&mut NodeObservation); 5] = [
        |n| n.on_pool_target = false,
        |n| n.unschedulable = true,
        |n| n.mcn_degraded = Some(true),
        |n| n.desired_drain = Some("uncordon-rendered-worker-b".into()),
        |n| n.config = ConfigState::Updating,
    ];
    for spoil in spoilers {
        let mut n = done_node("boot-2");
        spoil(&mut n);
        assert_ne!(
            next_step(&all, &observed(160, Some(n.clone())), &policy()),
            Step::Succeed,
            "{n:?}"
        );
    }
    // No MachineConfigNode served: the annotations decide.
    let mut n = done_node("boot-2");
    n.mcn_degraded = None;
    assert_eq!(
        next_step(&all, &observed(160, Some(n)), &policy()),
        Step::Succeed
    );
}

#[test]
fn a_blocked_drain_times_out_naming_the_budget_and_is_never_forced() {
    let pending = NodeObservation {
        desired_drain: Some("drain-rendered-worker-a".into()),
        unschedulable: true,
        ..node()
    };
    let mut p = applying(&[Milestone::PickedUp]);
    p.draining_since = Some(S(110));
    let mut seen = observed(1000, Some(pending.clone()));
    assert_eq!(next_step(&p, &seen, &policy()), Step::Wait { after: S(5) });
    seen.now = S(110 + 1800);
    seen.blocking = vec![Blocking {
        budget: "openshift-ingress/router-default".into(),
        pods: vec![],
    }];
    assert_eq!(
        next_step(&p, &seen, &policy()),
        Step::Fail(FailReason::DrainTimeout(vec![
            "openshift-ingress/router-default".into()
        ]))
    );
    // Long drains are the drain timeout's business, not the overall one's.
    seen.now = S(100 + 3600);
    p.draining_since = Some(S(3000));
    assert_eq!(next_step(&p, &seen, &policy()), Step::Wait { after: S(5) });
}

#[test]
fn a_node_that_stays_not_ready_is_escalated_or_failed() {
    let down = NodeObservation {
        ready: false,
        ..node()
    };
    let mut p = applying(&[
        Milestone::PickedUp,
        Milestone::Drained,
        Milestone::Rebooting,
    ]);
    assert_eq!(
        next_step(&p, &observed(200, Some(down.clone())), &policy()),
        Step::Note(Noted::NotReady)
    );
    p.not_ready_since = Some(S(200));
    assert_eq!(
        next_step(&p, &observed(1099, Some(down.clone())), &policy()),
        Step::Wait { after: S(5) }
    );
    assert_eq!(
        next_step(&p, &observed(1100, Some(down.clone())), &policy()),
        Step::Escalate
    );
    let no_escalation = PlanPolicy {
        escalate: false,
        ..policy()
    };
    assert_eq!(
        next_step(&p, &observed(1100, Some(down)), &no_escalation),
        Step::Fail(FailReason::NodeNotReady)
    );
}

#[test]
fn drift_still_there_after_the_reboot_fails_the_attempt() {
    let all = applying(&[
        Milestone::PickedUp,
        Milestone::Drained,
        Milestone::Rebooting,
        Milestone::Rebooted,
    ]);
    let again = NodeObservation {
        boot_id: Some("boot-2".into()),
        ..node()
    };
    // Still Degraded right after the reboot is normal: the MCD says Done only at the end.
    assert_eq!(
        next_step(&all, &observed(200, Some(again.clone())), &policy()),
        Step::Wait { after: S(5) }
    );
    assert_eq!(
        next_step(&all, &observed(100 + 3600, Some(again)), &policy()),
        Step::Fail(FailReason::DriftPersists)
    );
    let stuck = applying(&[Milestone::PickedUp]);
    assert_eq!(
        next_step(&stuck, &observed(100 + 3600, Some(node())), &policy()),
        Step::Fail(FailReason::ApplyTimeout)
    );
}

#[test]
fn a_restore_succeeds_when_the_mcd_heals_and_fails_after_its_timeout() {
    let restoring = state(Phase::Restoring, 100);
    assert_eq!(
        next_step(&restoring, &observed(150, Some(node())), &policy()),
        Step::Wait { after: S(5) }
    );
    assert_eq!(
        next_step(
            &restoring,
            &observed(150, Some(done_node("boot-1"))),
            &policy()
        ),
        Step::Succeed
    );
    assert_eq!(
        next_step(&restoring, &observed(280, Some(node())), &policy()),
        Step::Fail(FailReason::RestoreTimeout)
    );
}

#[test]
fn our_own_drain_before_a_restore_cordons_evicts_restores_then_uncordons() {
    let policy = PlanPolicy {
        action: Action::Restore,
        drain_before_restore: true,
        ..policy()
    };
    let pending = state(Phase::Pending, 30);
    assert_eq!(
        next_step(&pending, &observed(40, Some(node())), &policy),
        Step::StartDrain
    );
    // Budgets are checked first, as for the MCO's drain.
    let mut blocked = observed(40, Some(node()));
    blocked.blocking = vec![Blocking {
        budget: "a/b".into(),
        pods: vec![],
    }];
    assert!(matches!(
        next_step(&pending, &blocked, &policy),
        Step::Hold(_, DriftEventReason::BlockedByPodDisruptionBudget)
    ));
    let draining = Persisted {
        cordoned_by_us: true,
        ..state(Phase::Draining, 100)
    };
    let with_pods = NodeObservation {
        unschedulable: true,
        pods_to_evict: 2,
        ..node()
    };
    assert_eq!(
        next_step(&draining, &observed(110, Some(with_pods.clone())), &policy),
        Step::Evict
    );
    assert!(matches!(
        next_step(&draining, &observed(100 + 1800, Some(with_pods)), &policy),
        Step::Fail(FailReason::DrainTimeout(_))
    ));
    let empty = NodeObservation {
        unschedulable: true,
        ..node()
    };
    assert_eq!(
        next_step(&draining, &observed(120, Some(empty)), &policy),
        Step::RequestRestore
    );
    let restoring = Persisted {
        cordoned_by_us: true,
        ..state(Phase::Restoring, 130)
    };
    let healed_cordoned = NodeObservation {
        unschedulable: true,
        ..done_node("boot-1")
    };
    assert_eq!(
        next_step(
            &restoring,
            &observed(140, Some(healed_cordoned.clone())),
            &policy
        ),
        Step::Uncordon
    );
    // Never while an MCO drain is pending.
    let mco_draining = NodeObservation {
        desired_drain: Some("drain-rendered-worker-a".into()),
        ..healed_cordoned
    };
    assert_ne!(
        next_step(&restoring, &observed(140, Some(mco_draining)), &policy),
        Step::Uncordon
    );
    let uncordoned = Persisted {
        cordoned_by_us: false,
        ..restoring
    };
    assert_eq!(
        next_step(
            &uncordoned,
            &observed(150, Some(done_node("boot-1"))),
            &policy
        ),
        Step::Succeed
    );
}

#[test]
fn a_drift_the_recurrence_cap_failed_waits_out_the_window_before_another_attempt() {
    let window = Duration::from_secs(3600);
    let capped = Some(Duration::from_secs(1000));
    assert_eq!(
        recurrence_hold(capped, Duration::from_secs(1000), window),
        Some(window)
    );
    assert_eq!(
        recurrence_hold(capped, Duration::from_secs(4000), window),
        Some(Duration::from_secs(600))
    );
    assert_eq!(
        recurrence_hold(capped, Duration::from_secs(4600), window),
        None
    );
    assert_eq!(
        recurrence_hold(None, Duration::from_secs(1000), window),
        None
    );
}

#[test]
fn every_action_and_failure_reason_has_an_outcome_counter_from_the_start() {
    use crate::api::DriftAction;
    // The matches are exhaustive: a new variant stops the build here, to be listed here and
    // in the metrics' lists (whose series start at zero).
    let actions = [Action::Force, Action::Restore];
    for action in actions {
        match action {
            Action::Force | Action::Restore => {}
        }
    }
    let labels: Vec<&str> = DriftAction::ALL.iter().map(|a| a.as_str()).collect();
    assert_eq!(actions.map(|a| format!("{a:?}")), labels.as_slice());
    let reasons = [
        FailReason::Recurring(0),
        FailReason::PickupTimeout,
        FailReason::DrainTimeout(Vec::new()),
        FailReason::NodeNotReady,
        FailReason::RestoreTimeout,
        FailReason::DriftPersists,
        FailReason::NodeGone,
        FailReason::ApplyTimeout,
    ];
    for reason in &reasons {
        match reason {
            FailReason::Recurring(_)
            | FailReason::PickupTimeout
            | FailReason::DrainTimeout(_)
            | FailReason::NodeNotReady
            | FailReason::RestoreTimeout
            | FailReason::DriftPersists
            | FailReason::NodeGone
            | FailReason::ApplyTimeout => {}
        }
    }
    let mut expected: Vec<&str> = reasons.iter().map(|r| r.reason().as_str()).collect();
    // The failures the steps name themselves: a restore the node's config cannot take, and a
    // helper image not pinned by digest. The metrics start a series for each of these.
    expected.push("RestoreUnsupported");
    expected.push("HelperImageNotPinned");
    assert_eq!(expected, FailReason::every_failure());
}
