use super::*;

#[test]
fn every_strategy_and_failure_reason_has_a_counter_from_the_start() {
    // The metrics start their series from `FenceStrategyName::ALL` and `FailReason::labels()`;
    // the failure reasons' match below is exhaustive: a new variant stops the build there, to
    // be listed there and in `labels()`.
    let reasons = [
        FailReason::PowerOffNotConfirmed(String::new()),
        FailReason::FenceLost(String::new()),
        FailReason::NodeNeverReady,
        FailReason::RestoreTimedOut,
    ];
    for reason in &reasons {
        match reason {
            FailReason::PowerOffNotConfirmed(_)
            | FailReason::FenceLost(_)
            | FailReason::NodeNeverReady
            | FailReason::RestoreTimedOut => {}
        }
    }
    assert_eq!(
        reasons.each_ref().map(FailReason::label),
        FailReason::labels()
    );
}

/// Every phase of the enum, read from its schema: a new phase joins the sweeps by itself.
fn all_phases() -> Vec<Phase> {
    fn names(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, inner) in map {
                    match (key.as_str(), inner) {
                        ("enum", serde_json::Value::Array(items)) => {
                            out.extend(items.iter().filter_map(|i| i.as_str().map(String::from)))
                        }
                        ("const", serde_json::Value::String(name)) => out.push(name.clone()),
                        _ => names(inner, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|i| names(i, out)),
            _ => {}
        }
    }
    let schema = serde_json::to_value(schemars::schema_for!(Phase)).unwrap();
    let mut found = Vec::new();
    names(&schema, &mut found);
    let phases: Vec<Phase> = found
        .iter()
        .map(|name| serde_json::from_value(serde_json::json!(name)).unwrap())
        .collect();
    assert!(phases.len() >= 9, "{found:?}");
    phases
}

fn policy() -> PlanPolicy {
    PlanPolicy {
        strategies: 2,
        power_off_timeout: Duration::from_secs(60),
        node_timeout: Duration::from_secs(600),
        ready_grace: Duration::from_secs(30),
        max_attempts: 2,
        release: ReleaseMode::Delete,
        poll: Duration::from_secs(5),
        mode: Mode::Remediate,
    }
}

/// Every policy shape the planner branches on.
fn policies() -> Vec<PlanPolicy> {
    let mut all = Vec::new();
    for release in [ReleaseMode::Delete, ReleaseMode::OutOfService] {
        for strategies in [1, 2] {
            for max_attempts in [1, 2, 3] {
                for mode in [Mode::Remediate, Mode::DryRun] {
                    all.push(PlanPolicy {
                        strategies,
                        max_attempts,
                        release,
                        mode,
                        ..policy()
                    });
                }
            }
        }
    }
    all
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
        probes: Vec::new(),
    }
}

fn fences() -> Vec<Result<(), NotFenced>> {
    vec![
        Ok(()),
        Err(NotFenced::NotYet("x".into())),
        Err(NotFenced::RequestMissing("r".into())),
        Err(NotFenced::PoweredOn("o".into())),
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
        present(Some(0), Some("boot-a")),
        present(Some(0), Some("boot-b")),
        present(Some(2000), None),
    ]
}

/// Calls `visit` with every combination of policy, phase, strategy, attempt, persisted
/// flags, trigger, fence verdict, Node, gate and elapsed time.
fn sweep(mut visit: impl FnMut(&PlanPolicy, &Persisted, &Observed)) {
    for policy in policies() {
        for phase in all_phases() {
            for strategy in [Some(0), Some(1), None] {
                for attempt in 1..=3 {
                    for (backed_up, boot, remade) in [
                        (false, None, false),
                        (true, Some("boot-a"), false),
                        (true, Some("boot-a"), true),
                    ] {
                        let s = Persisted {
                            strategy,
                            attempt,
                            node_backed_up: backed_up,
                            boot_id_before: boot.map(String::from),
                            request_remade: remade,
                            ..state(phase)
                        };
                        for o in observations(&s) {
                            visit(&policy, &s, &o);
                        }
                    }
                }
            }
        }
    }
}

/// The dry run's probes: none taken, the first strategy answering, the first failing
/// and the second answering, both failing.
fn probe_sets() -> Vec<Vec<Probe>> {
    let probe = |strategy: usize, ok: bool| Probe {
        strategy,
        outcome: if ok {
            Ok("on".into())
        } else {
            Err("no".into())
        },
    };
    vec![
        Vec::new(),
        vec![probe(0, true)],
        vec![probe(0, false), probe(1, true)],
        vec![probe(0, false), probe(1, false)],
    ]
}

fn observations(s: &Persisted) -> Vec<Observed> {
    // Only a start reads the probes: other phases get none, which keeps the sweep small.
    let probes = if s.phase == Phase::Pending {
        probe_sets()
    } else {
        vec![Vec::new()]
    };
    let mut all = Vec::new();
    for triggered in [true, false] {
        for fence in fences() {
            for node in nodes() {
                for may_start in [Ok(()), Err(Held::ControlPlaneBusy), Err(Held::Paused)] {
                    for elapsed in [0u64, 59, 60, 600, 5000] {
                        for probes in &probes {
                            all.push(Observed {
                                now: s.phase_since + Duration::from_secs(elapsed),
                                triggered,
                                fence: fence.clone(),
                                node: node.clone(),
                                may_start: may_start.clone(),
                                probes: probes.clone(),
                            });
                        }
                    }
                }
            }
        }
    }
    all
}

/// How often each property's antecedent occurred: a property that never met its
/// antecedent proved nothing.
#[derive(Debug, Default)]
struct Seen {
    cases: usize,
    released: usize,
    marked_fenced: usize,
    untriggered_after_fencing: usize,
    held: usize,
    terminal: usize,
    fenced_without_proof: usize,
    escalated: usize,
    retried: usize,
    failed: usize,
    dry_run_starts: usize,
    dry_runs_recorded: usize,
    paused_starts: usize,
    mode_switched_mid_cycle: usize,
}

/// Whether a step changes anything outside the Remediation's own status: power, the
/// Machine, the Node (a backup is a read, but it belongs to a release).
fn acts(step: &Step) -> bool {
    match step {
        Step::Wait { .. } | Step::Hold(_) | Step::Cancel | Step::RecordDryRun(_) | Step::Done => {
            false
        }
        Step::RequestPowerOff { .. }
        | Step::WithdrawPowerOff
        | Step::MarkFenced
        | Step::RemakePowerOffRequest
        | Step::BackUpNode
        | Step::ReleaseNode(_)
        | Step::RequestPowerOn
        | Step::Restore
        | Step::Escalate { .. }
        | Step::Retry { .. }
        | Step::Fail(_) => true,
    }
}

/// The dry-run and pause properties of one case.
fn check_modes(seen: &mut Seen, policy: &PlanPolicy, s: &Persisted, o: &Observed, step: &Step) {
    let why = || format!("{policy:?} {s:?} {o:?} → {step:?}");
    if s.phase == Phase::Pending && policy.mode == Mode::DryRun {
        seen.dry_run_starts += 1;
        assert!(!acts(step), "a dry run acted: {}", why());
    }
    if let Step::RecordDryRun(dry) = step {
        seen.dry_runs_recorded += 1;
        assert_eq!(policy.mode, Mode::DryRun, "{}", why());
        assert_eq!(s.phase, Phase::Pending, "{}", why());
        assert!(o.triggered, "{}", why());
        let first_answer = o.probes.iter().find(|p| p.outcome.is_ok());
        assert_eq!(dry.strategy, first_answer.map(|p| p.strategy), "{}", why());
        assert_eq!(dry.held, o.may_start.clone().err(), "{}", why());
        assert_eq!(dry.probes, o.probes, "{}", why());
    }
    if s.phase == Phase::Pending && o.triggered && o.may_start == Err(Held::Paused) {
        seen.paused_starts += 1;
        assert_eq!(*step, Step::Hold(Held::Paused), "{}", why());
    }
    // The mode is read only at the start: a cycle under way goes on as it began.
    if s.phase != Phase::Pending {
        seen.mode_switched_mid_cycle += 1;
        let other = PlanPolicy {
            mode: match policy.mode {
                Mode::Remediate => Mode::DryRun,
                Mode::DryRun => Mode::Remediate,
            },
            ..policy.clone()
        };
        assert_eq!(next_step(s, o, &other), *step, "{}", why());
    }
}

#[test]
fn every_safety_property_holds_over_the_whole_sweep() {
    let mut seen = Seen::default();
    sweep(|policy, s, o| {
        seen.cases += 1;
        let step = next_step(s, o, policy);
        let why = || format!("{policy:?} {s:?} {o:?} → {step:?}");
        if let Step::ReleaseNode(mode) = &step {
            seen.released += 1;
            assert_eq!(s.phase, Phase::Fenced, "{}", why());
            assert_eq!(o.fence, Ok(()), "{}", why());
            assert_eq!(*mode, policy.release, "{}", why());
        }
        if step == Step::BackUpNode {
            assert_eq!(s.phase, Phase::Fenced, "{}", why());
            assert_eq!(policy.release, ReleaseMode::Delete, "{}", why());
        }
        if step == Step::MarkFenced {
            seen.marked_fenced += 1;
            assert_eq!(o.fence, Ok(()), "{}", why());
            assert_eq!(s.phase, Phase::PoweringOff, "{}", why());
        }
        let after_fencing = matches!(
            s.phase,
            Phase::Fenced | Phase::NodeReleased | Phase::PoweringOn | Phase::Restoring
        );
        // A Pending remediation is always in its first power cycle.
        let later_cycle = s.attempt > 1 && s.phase != Phase::Pending;
        if (after_fencing || later_cycle) && !o.triggered {
            seen.untriggered_after_fencing += 1;
            // Nothing to cancel once a power cycle released the Node, and no new power
            // cycle without a trigger.
            assert!(
                !matches!(
                    step,
                    Step::Cancel | Step::WithdrawPowerOff | Step::Retry { .. }
                ),
                "{}",
                why()
            );
        }
        if let Step::Hold(_) = step {
            seen.held += 1;
            assert_eq!(s.phase, Phase::Pending, "{}", why());
            assert!(o.may_start.is_err(), "{}", why());
        }
        if s.phase == Phase::Fenced && o.fence.is_err() {
            seen.fenced_without_proof += 1;
            assert!(
                !matches!(step, Step::ReleaseNode(_) | Step::BackUpNode),
                "{}",
                why()
            );
        }
        if let Step::Escalate { to, .. } = step {
            seen.escalated += 1;
            assert!(to < policy.strategies, "{}", why());
            assert_eq!(s.strategy, Some(to - 1), "{}", why());
        }
        if let Step::Retry { attempt, .. } = step {
            seen.retried += 1;
            assert!(attempt <= policy.max_attempts, "{}", why());
            assert_eq!(attempt, s.attempt + 1, "{}", why());
        }
        if let Step::Fail(_) = step {
            seen.failed += 1;
        }
        check_modes(&mut seen, policy, s, o, &step);
        if s.phase.is_terminal() {
            seen.terminal += 1;
        }
        assert_eq!(s.phase.is_terminal(), step == Step::Done, "{}", why());
    });
    let counts = [
        seen.released,
        seen.marked_fenced,
        seen.untriggered_after_fencing,
        seen.held,
        seen.terminal,
        seen.fenced_without_proof,
        seen.escalated,
        seen.retried,
        seen.failed,
        seen.dry_run_starts,
        seen.dry_runs_recorded,
        seen.paused_starts,
        seen.mode_switched_mid_cycle,
    ];
    assert!(counts.iter().all(|c| *c > 0), "{seen:?}");
    eprintln!("planner sweep: {seen:?}");
}

/// What the executor persists for a step (mirrors `act`); `failing`: every write after the
/// persist fails, so only the persisted part happens.
fn apply(s: &mut Persisted, step: &Step, now: Duration, failing: bool) {
    let enter = |s: &mut Persisted, phase: Phase| {
        s.phase = phase;
        s.phase_since = now;
    };
    match step {
        Step::Wait { .. } | Step::Hold(_) | Step::Done => {}
        Step::Cancel | Step::WithdrawPowerOff => enter(s, Phase::Cancelled),
        Step::RecordDryRun(_) => enter(s, Phase::DryRun),
        Step::RequestPowerOff { strategy } => {
            s.strategy = Some(*strategy);
            enter(s, Phase::PoweringOff);
        }
        Step::MarkFenced => enter(s, Phase::Fenced),
        Step::RemakePowerOffRequest => {
            s.request_remade = true;
            s.phase_since = now;
        }
        Step::BackUpNode => s.node_backed_up = true,
        Step::ReleaseNode(_) if failing => {}
        Step::ReleaseNode(_) => enter(s, Phase::NodeReleased),
        Step::RequestPowerOn => enter(s, Phase::PoweringOn),
        Step::Restore if failing => {
            if s.phase != Phase::Restoring {
                enter(s, Phase::Restoring);
            }
        }
        Step::Restore => enter(s, Phase::Succeeded),
        Step::Escalate { to, .. } => {
            s.strategy = Some(*to);
            s.phase_since = now;
        }
        Step::Retry { attempt, .. } => {
            s.attempt = *attempt;
            s.strategy = Some(0);
            enter(s, Phase::PoweringOff);
        }
        Step::Fail(_) => enter(s, Phase::Failed),
    }
}

/// The longest a remediation may take once started: every attempt through every
/// strategy's power-off deadline, the release deadline (twice: a remake restarts it) and
/// the Node deadline, then the restore deadline.
fn bound(policy: &PlanPolicy) -> Duration {
    let strategies = u32::try_from(policy.strategies).unwrap();
    let cycle = policy.power_off_timeout * (strategies + 2) + policy.node_timeout;
    cycle * policy.max_attempts + policy.node_timeout + policy.poll * 4
}

#[test]
fn from_every_phase_and_observation_a_terminal_phase_is_reached_within_the_timeouts() {
    let (mut runs, mut held, mut by_deadline) = (0usize, 0usize, 0usize);
    for policy in policies() {
        for phase in all_phases() {
            for remade in [false, true] {
                let start = Persisted {
                    request_remade: remade,
                    ..state(phase)
                };
                for o in observations(&start) {
                    for failing in [false, true] {
                        runs += 1;
                        let mut s = start.clone();
                        let mut now = o.now;
                        let deadline = o.now + bound(&policy);
                        loop {
                            let at = Observed { now, ..o.clone() };
                            let step = next_step(&s, &at, &policy);
                            if step == Step::Done {
                                break;
                            }
                            if let Step::Hold(_) = step {
                                held += 1;
                                break;
                            }
                            now += match step {
                                Step::Wait { after } => after.max(Duration::from_millis(1)),
                                _ => Duration::from_secs(1),
                            };
                            apply(&mut s, &step, now, failing);
                            assert!(
                                now <= deadline,
                                "stalled: {policy:?} from {start:?} {o:?} failing={failing}: {s:?} → {step:?}"
                            );
                        }
                        if now > o.now + policy.node_timeout {
                            by_deadline += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(held > 0 && by_deadline > 0, "{runs} {held} {by_deadline}");
    eprintln!(
        "termination sweep: {runs} runs, {held} held by a gate, {by_deadline} ended by a deadline"
    );
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
fn a_later_power_cycle_is_never_cancelled_and_none_starts_without_the_trigger() {
    // Found by the chaos harness (seeds 135 and 182, a NodeHealthCheck timing out after
    // the proof): the Node did not come back, a second power cycle started without a
    // trigger, and the next pass cancelled it as if nothing had happened.
    let gone = Observed {
        triggered: false,
        now: Duration::from_secs(1000 + 600),
        ..observed()
    };
    assert_eq!(
        next_step(&state(Phase::PoweringOn), &gone, &policy()),
        Step::Fail(FailReason::NodeNeverReady),
        "no Node in time and no trigger: no new power cycle"
    );
    let there = Observed {
        triggered: true,
        ..gone.clone()
    };
    assert!(matches!(
        next_step(&state(Phase::PoweringOn), &there, &policy()),
        Step::Retry { attempt: 2, .. }
    ));
    let second = Persisted {
        attempt: 2,
        ..state(Phase::PoweringOff)
    };
    let soon = Observed {
        triggered: false,
        ..observed()
    };
    assert_eq!(
        next_step(&second, &soon, &policy()),
        Step::Fail(FailReason::NodeNeverReady),
        "the first cycle released the Node: nothing to cancel"
    );
    let fenced_then_on = Observed {
        triggered: false,
        fence: Err(NotFenced::PoweredOn("read On".into())),
        ..observed()
    };
    assert!(matches!(
        next_step(&state(Phase::Fenced), &fenced_then_on, &policy()),
        Step::Fail(FailReason::FenceLost(_))
    ));
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
    for phase in all_phases().into_iter().filter(|p| *p != Phase::Pending) {
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
fn a_dry_run_records_the_first_strategy_that_answered_and_the_gate_that_would_hold() {
    let dry_run = PlanPolicy {
        mode: Mode::DryRun,
        ..policy()
    };
    let probes = probe_sets()[2].clone();
    let o = Observed {
        may_start: Err(Held::ControlPlaneBusy),
        probes: probes.clone(),
        ..observed()
    };
    assert_eq!(
        next_step(&state(Phase::Pending), &o, &dry_run),
        Step::RecordDryRun(DryRun {
            strategy: Some(1),
            held: Some(Held::ControlPlaneBusy),
            release: ReleaseMode::Delete,
            probes,
        })
    );
    // The same start under Remediate is held; open, it requests power-off.
    assert_eq!(
        next_step(&state(Phase::Pending), &o, &policy()),
        Step::Hold(Held::ControlPlaneBusy)
    );
    let none_answered = Observed {
        probes: probe_sets()[3].clone(),
        ..observed()
    };
    assert!(matches!(
        next_step(&state(Phase::Pending), &none_answered, &dry_run),
        Step::RecordDryRun(DryRun {
            strategy: None,
            held: None,
            ..
        })
    ));
    assert_eq!(
        next_step(&state(Phase::DryRun), &observed(), &dry_run),
        Step::Done
    );
}

#[test]
fn a_paused_policy_holds_a_start_in_either_mode_and_nothing_under_way() {
    let paused = Observed {
        may_start: Err(Held::Paused),
        ..observed()
    };
    for mode in [Mode::Remediate, Mode::DryRun] {
        let policy = PlanPolicy { mode, ..policy() };
        assert_eq!(
            next_step(&state(Phase::Pending), &paused, &policy),
            Step::Hold(Held::Paused)
        );
    }
    let proven = Observed {
        fence: Ok(()),
        ..paused
    };
    assert_eq!(
        next_step(&state(Phase::PoweringOff), &proven, &policy()),
        Step::MarkFenced
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
    last.strategy = Some(1);
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
fn a_strategy_dropped_from_the_policy_is_never_switched_for_another() {
    let dropped = Persisted {
        strategy: None,
        ..state(Phase::PoweringOff)
    };
    let untrustworthy = Observed {
        fence: Err(NotFenced::Untrustworthy("detached".into())),
        ..observed()
    };
    match next_step(&dropped, &untrustworthy, &policy()) {
        Step::Fail(FailReason::PowerOffNotConfirmed(why)) => {
            assert!(why.contains("no longer in the policy"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn power_off_is_looked_at_soon_then_less_often_up_to_the_poll_interval() {
    let at = |millis: u64| Observed {
        now: Duration::from_secs(1000) + Duration::from_millis(millis),
        ..observed()
    };
    let wait = |millis: u64| match next_step(&state(Phase::PoweringOff), &at(millis), &policy()) {
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
    let proven = Observed {
        fence: Ok(()),
        ..observed()
    };
    assert_eq!(
        next_step(&state(Phase::Fenced), &proven, &policy()),
        Step::BackUpNode
    );
    let backed_up = Persisted {
        node_backed_up: true,
        ..state(Phase::Fenced)
    };
    assert_eq!(
        next_step(&backed_up, &proven, &policy()),
        Step::ReleaseNode(ReleaseMode::Delete)
    );
    let gone = Observed {
        node: NodeView::Missing,
        ..proven.clone()
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
        next_step(&state(Phase::Fenced), &proven, &taint),
        Step::ReleaseNode(ReleaseMode::OutOfService)
    );
}

#[test]
fn a_fenced_host_that_loses_its_proof_is_never_released() {
    let fenced = Persisted {
        node_backed_up: true,
        ..state(Phase::Fenced)
    };
    let with = |fence: Result<(), NotFenced>| Observed {
        fence,
        ..observed()
    };
    // Our request removed by someone else: made again once, then the remediation fails.
    let missing = with(Err(NotFenced::RequestMissing("gone".into())));
    assert_eq!(
        next_step(&fenced, &missing, &policy()),
        Step::RemakePowerOffRequest
    );
    let remade = Persisted {
        request_remade: true,
        ..fenced.clone()
    };
    assert!(matches!(
        next_step(&remade, &missing, &policy()),
        Step::Fail(FailReason::FenceLost(_))
    ));
    // After the remake, the proof must hold for half the power-off deadline.
    let proven_at = |secs: u64| Observed {
        now: Duration::from_secs(secs),
        fence: Ok(()),
        ..observed()
    };
    assert!(matches!(
        next_step(&remade, &proven_at(1029), &policy()),
        Step::Wait { .. }
    ));
    assert_eq!(
        next_step(&remade, &proven_at(1030), &policy()),
        Step::ReleaseNode(ReleaseMode::Delete)
    );
    // On again: a new power cycle while attempts remain, else FenceLost.
    let on = with(Err(NotFenced::PoweredOn("on".into())));
    assert!(matches!(
        next_step(&fenced, &on, &policy()),
        Step::Retry { attempt: 2, .. }
    ));
    let last = Persisted {
        attempt: 2,
        ..fenced.clone()
    };
    assert!(matches!(
        next_step(&last, &on, &policy()),
        Step::Fail(FailReason::FenceLost(_))
    ));
    // Unreadable: wait, but not past the power-off deadline.
    let unread = with(Err(NotFenced::NotYet("BMC read failed".into())));
    assert!(matches!(
        next_step(&fenced, &unread, &policy()),
        Step::Wait { .. }
    ));
    let late = Observed {
        now: Duration::from_secs(1060),
        ..unread
    };
    assert!(matches!(
        next_step(&fenced, &late, &policy()),
        Step::Fail(FailReason::FenceLost(_))
    ));
}

/// At `secs`, the Node present (no boot ID) and Ready since `ready_since` (None: not Ready).
fn ready_at(secs: u64, ready_since: Option<u64>) -> Observed {
    Observed {
        now: Duration::from_secs(secs),
        node: NodeView::Present {
            ready_since: ready_since.map(Duration::from_secs),
            boot_id: None,
        },
        ..observed()
    }
}

#[test]
fn the_node_is_back_only_after_the_ready_grace_counted_from_power_on() {
    let powering_on = state(Phase::PoweringOn);
    let at = ready_at;
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
    assert!(matches!(
        next_step(&powering_on, &at(1600, None), &policy()),
        Step::Retry { attempt: 2, .. }
    ));
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
fn the_ready_grace_left_is_told_only_while_powering_on_with_the_node_back_and_ready() {
    let powering_on = state(Phase::PoweringOn);
    let at = ready_at;
    let left = |s: &Persisted, o: &Observed| ready_grace_left(s, o, &policy());
    // Ready at 1005, 30 s of grace: 25 s left at 1010, none left from 1035 on.
    assert_eq!(
        left(&powering_on, &at(1010, Some(1005))),
        Some(Duration::from_secs(25))
    );
    assert_eq!(
        left(&powering_on, &at(1035, Some(1005))),
        Some(Duration::ZERO)
    );
    assert_eq!(
        left(&powering_on, &at(1099, Some(1005))),
        Some(Duration::ZERO)
    );
    // Not Ready, or not powering on: no grace running.
    assert_eq!(left(&powering_on, &at(1010, None)), None);
    for phase in [Phase::PoweringOff, Phase::Fenced, Phase::Restoring] {
        assert_eq!(
            left(&state(phase), &at(1010, Some(1005))),
            None,
            "{phase:?}"
        );
    }
    // The same instant the planner restores at.
    for now in 1005..1040 {
        let observed = at(now, Some(1005));
        let restores = next_step(&powering_on, &observed, &policy()) == Step::Restore;
        assert_eq!(
            restores,
            left(&powering_on, &observed) == Some(Duration::ZERO),
            "{now}"
        );
    }
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
    let retry = |step: Step| matches!(step, Step::Retry { attempt: 2, .. });
    // Without a boot ID to compare, Ready since before the request proves nothing...
    assert_eq!(next_step(&powering_on, &at(1100, None), &policy()), wait);
    assert!(retry(next_step(&powering_on, &at(1600, None), &policy())));
    // ...nor does the same boot ID: the host never rebooted (a lying BMC's Off).
    powering_on.boot_id_before = Some("boot-a".into());
    assert_eq!(
        next_step(&powering_on, &at(1100, Some("boot-a")), &policy()),
        wait
    );
    assert!(retry(next_step(
        &powering_on,
        &at(1600, Some("boot-a")),
        &policy()
    )));
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
fn a_restore_that_cannot_finish_fails_at_the_node_deadline() {
    let restoring = state(Phase::Restoring);
    let at = |secs: u64| Observed {
        now: Duration::from_secs(secs),
        ..observed()
    };
    assert_eq!(next_step(&restoring, &at(1599), &policy()), Step::Restore);
    assert_eq!(
        next_step(&restoring, &at(1600), &policy()),
        Step::Fail(FailReason::RestoreTimedOut)
    );
}
