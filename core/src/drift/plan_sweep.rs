//! The planner swept over every phase, policy and observation: each property counts its
//! antecedent, so none holds vacuously.

use super::tests::{S, done_node, node, observed, policy, state};
use super::*;
use crate::drift::classify::NotDrift;

/// The nodes of the sweep: drifted, healed (same boot, new boot), healed but cordoned, the
/// same with an MCO drain pending, pods left to evict, not drift, NotReady, draining, gone.
fn sweep_nodes() -> Vec<Option<NodeObservation>> {
    let cordoned_done = NodeObservation {
        unschedulable: true,
        ..done_node("boot-1")
    };
    vec![
        Some(node()),
        Some(done_node("boot-1")),
        Some(done_node("boot-2")),
        Some(cordoned_done.clone()),
        Some(NodeObservation {
            desired_drain: Some("drain-rendered-worker-a".into()),
            ..cordoned_done
        }),
        Some(NodeObservation {
            unschedulable: true,
            pods_to_evict: 2,
            ..node()
        }),
        Some(NodeObservation {
            config: ConfigState::Degraded(NotDrift::OtherReason),
            same_drift: false,
            ..node()
        }),
        Some(NodeObservation {
            ready: false,
            ..node()
        }),
        Some(NodeObservation {
            desired_drain: Some("drain-rendered-worker-a".into()),
            unschedulable: true,
            ..node()
        }),
        None,
    ]
}

fn sweep_policies() -> [PlanPolicy; 4] {
    let restore = PlanPolicy {
        action: Action::Restore,
        ..policy()
    };
    [
        policy(),
        PlanPolicy {
            escalate: false,
            ..policy()
        },
        restore.clone(),
        PlanPolicy {
            drain_before_restore: true,
            ..restore
        },
    ]
}

/// How often each property's antecedent occurred in the sweep.
#[derive(Debug, Default)]
struct Seen {
    terminal: usize,
    node_gone: usize,
    abort_requested: usize,
    abort_healed: usize,
    force: usize,
    restore_after_gates: usize,
    restore_after_drain: usize,
    start_drain: usize,
    uncordon: usize,
    not_ours_to_uncordon: usize,
    mco_drain_pending_while_ours: usize,
    evict: usize,
    escalate: usize,
    held_by_mode: usize,
    mode_mid_cycle: usize,
}

/// How the sweep restricts acting: not at all, `Observe` mode, the annotation.
const RESTRICTIONS: [(Mode, Option<&str>); 3] = [
    (Mode::Remediate, None),
    (Mode::Observe, None),
    (Mode::Remediate, Some("Node n0")),
];

/// The `Observe` and annotation properties of one case: before the start, nothing acts and
/// drift that stays is held with the reason; past the start, the cycle goes on as it began.
fn sweep_restriction(s: &Persisted, o: &Observed, p: &PlanPolicy, seen: &mut Seen) {
    let step = next_step(s, o, p);
    let case = || format!("{s:?}\n{o:?}\n{p:?}\n-> {step:?}");
    let restricted = p.mode == Mode::Observe || o.disabled.is_some();
    if !restricted {
        return;
    }
    let acts = matches!(
        step,
        Step::RequestForce | Step::RequestRestore | Step::StartDrain | Step::Evict | Step::Escalate
    );
    match s.phase {
        Phase::Debouncing | Phase::Pending => {
            assert!(!acts, "{}", case());
            let waiting = s.phase == Phase::Pending && !s.abort;
            if waiting && o.node.as_ref().is_some_and(|n| n.same_drift) {
                seen.held_by_mode += 1;
                let reason = if p.mode == Mode::Observe {
                    DriftEventReason::ObserveOnly
                } else {
                    DriftEventReason::DriftRemediationDisabled
                };
                assert!(
                    matches!(&step, Step::Hold(_, r) if *r == reason),
                    "{}",
                    case()
                );
            }
        }
        _ => {
            seen.mode_mid_cycle += 1;
            let free = PlanPolicy {
                mode: Mode::Remediate,
                ..p.clone()
            };
            let unmarked = Observed {
                disabled: None,
                ..o.clone()
            };
            assert_eq!(next_step(s, &unmarked, &free), step, "{}", case());
        }
    }
}

/// The properties of one case; the counters record which antecedents held.
fn sweep_case(s: &Persisted, o: &Observed, p: &PlanPolicy, seen: &mut Seen) {
    let step = next_step(s, o, p);
    let case = || format!("{s:?}\n{o:?}\n{p:?}\n-> {step:?}");
    let node = o.node.as_ref();
    let same_drift = node.is_some_and(|n| n.same_drift);
    let open_gate = o.gates.is_ok() && o.recent_attempts < p.max_attempts;
    if s.phase.is_terminal() {
        seen.terminal += 1;
        assert_eq!(step, Step::Done, "{}", case());
        return;
    }
    let Some(node) = node else {
        seen.node_gone += 1;
        assert_eq!(step, Step::Fail(FailReason::NodeGone), "{}", case());
        return;
    };
    if s.abort {
        seen.abort_requested += 1;
        assert!(matches!(step, Step::Abort(_)), "{}", case());
        return;
    }
    let verified_but_cordoned = node.verified_but_cordoned();
    match &step {
        Step::RequestForce => {
            seen.force += 1;
            assert_eq!(s.phase, Phase::Pending, "{}", case());
            assert!(p.action == Action::Force && open_gate, "{}", case());
            assert!(o.blocking.is_empty() && same_drift, "{}", case());
        }
        Step::RequestRestore if s.phase == Phase::Draining => {
            // Our drain is over (the persisted phase says we drained, whatever the policy
            // says since).
            seen.restore_after_drain += 1;
            assert_eq!(node.pods_to_evict, 0, "{}", case());
        }
        Step::RequestRestore => {
            seen.restore_after_gates += 1;
            assert_eq!(s.phase, Phase::Pending, "{}", case());
            assert!(
                p.action == Action::Restore && !p.drain_before_restore,
                "{}",
                case()
            );
            assert!(open_gate && same_drift, "{}", case());
        }
        Step::StartDrain => {
            seen.start_drain += 1;
            assert_eq!(s.phase, Phase::Pending, "{}", case());
            assert!(
                p.action == Action::Restore && p.drain_before_restore,
                "{}",
                case()
            );
            assert!(
                open_gate && o.blocking.is_empty() && same_drift,
                "{}",
                case()
            );
        }
        Step::Uncordon => {
            seen.uncordon += 1;
            assert_eq!(s.phase, Phase::Restoring, "{}", case());
            assert!(s.cordoned_by_us && verified_but_cordoned, "{}", case());
            assert_eq!(node.desired_drain, node.last_applied_drain, "{}", case());
        }
        Step::Abort(_) => {
            // Not asked for: only a forcefile made moot by a node healed meanwhile.
            seen.abort_healed += 1;
            assert_eq!(s.phase, Phase::ForceRequested, "{}", case());
            assert!(node.verified(), "{}", case());
        }
        Step::Evict => {
            seen.evict += 1;
            assert_eq!(s.phase, Phase::Draining, "{}", case());
            assert!(node.pods_to_evict > 0, "{}", case());
        }
        Step::Escalate => {
            seen.escalate += 1;
            assert_eq!(s.phase, Phase::Applying, "{}", case());
            assert!(p.escalate && !node.ready, "{}", case());
        }
        _ => {}
    }
    // Our own cordon is ours to lift, and only ours; never during an MCO drain.
    if s.phase == Phase::Restoring {
        if !s.cordoned_by_us && node.unschedulable {
            seen.not_ours_to_uncordon += 1;
            assert_ne!(step, Step::Uncordon, "{}", case());
        }
        if s.cordoned_by_us && node.drain_pending() {
            seen.mco_drain_pending_while_ours += 1;
            assert_ne!(step, Step::Uncordon, "{}", case());
        }
        if s.cordoned_by_us && verified_but_cordoned {
            assert_eq!(step, Step::Uncordon, "{}", case());
        }
    }
}

/// Every phase × policy (force, with or without escalation; restore, with or without our
/// own drain) × node × our cordon × abort × gate × PDB × recurrence × milestones × wait
/// starts × time × restriction (none, `Observe`, the annotation); each property counts its antecedent, so none holds vacuously.
#[test]
fn every_phase_policy_and_observation_keeps_the_planner_properties() {
    let gates = [
        Ok(()),
        Err(Deferred::PausedPool),
        Err(Deferred::Budget {
            disrupted: vec!["x".into()],
            max: 1,
        }),
    ];
    let all_milestones = [
        Milestone::PickedUp,
        Milestone::Drained,
        Milestone::Rebooting,
        Milestone::Rebooted,
    ];
    let mut seen = Seen::default();
    let mut cases = 0;
    for phase in Phase::ALL {
        for p in &sweep_policies() {
            for n in sweep_nodes() {
                for (cordoned_by_us, abort) in [(false, false), (true, false), (false, true)] {
                    for gate in &gates {
                        for (blocked, recent) in [(false, 0), (true, 0), (false, 3)] {
                            for milestones in [&all_milestones[..0], &all_milestones[..]] {
                                for since in [None, Some(S(0))] {
                                    for (now, (mode, disabled)) in [0, 29, 30, 500, 10_000]
                                        .into_iter()
                                        .flat_map(|now| RESTRICTIONS.map(|r| (now, r)))
                                    {
                                        let p = &PlanPolicy { mode, ..p.clone() };
                                        let s = Persisted {
                                            cordoned_by_us,
                                            abort,
                                            milestones: milestones.to_vec(),
                                            not_ready_since: since,
                                            draining_since: since,
                                            ..state(phase, 0)
                                        };
                                        let mut o = observed(now, n.clone());
                                        o.gates = gate.clone();
                                        o.recent_attempts = recent;
                                        o.disabled = disabled.map(String::from);
                                        if blocked {
                                            o.blocking = vec![Blocking {
                                                budget: "a/b".into(),
                                                pods: vec![],
                                            }];
                                        }
                                        sweep_case(&s, &o, p, &mut seen);
                                        sweep_restriction(&s, &o, p, &mut seen);
                                        cases += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(cases, 11 * 4 * 10 * 3 * 3 * 3 * 2 * 2 * 5 * 3);
    let counts = [
        seen.terminal,
        seen.node_gone,
        seen.abort_requested,
        seen.abort_healed,
        seen.force,
        seen.restore_after_gates,
        seen.restore_after_drain,
        seen.start_drain,
        seen.uncordon,
        seen.not_ours_to_uncordon,
        seen.mco_drain_pending_while_ours,
        seen.evict,
        seen.escalate,
        seen.held_by_mode,
        seen.mode_mid_cycle,
    ];
    assert!(counts.iter().all(|n| *n > 0), "{seen:#?}");
    println!("{cases} cases: {seen:#?}");
}
