use super::*;

/// `(desiredDrain, lastAppliedDrain)` as the MCO leaves them along its flow.
const DRAINS: [(Option<&str>, Option<&str>); 5] = [
    (None, None),
    (Some("uncordon-rendered-a"), Some("uncordon-rendered-a")),
    (Some("drain-rendered-a"), Some("uncordon-rendered-a")),
    (Some("drain-rendered-a"), Some("drain-rendered-a")),
    (Some("uncordon-rendered-a"), Some("drain-rendered-a")),
];

const MCD_STATES: [Option<&str>; 5] = [
    None,
    Some("Done"),
    Some("Working"),
    Some("Degraded"),
    Some("Unreconcilable"),
];

fn annotations(
    drain: (Option<&str>, Option<&str>),
    state: Option<&str>,
    rebooting: bool,
    updating: bool,
) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut put = |key: &str, value: Option<&str>| {
        if let Some(value) = value {
            map.insert(key.to_owned(), value.to_owned());
        }
    };
    put(DESIRED_DRAIN, drain.0);
    put(LAST_APPLIED_DRAIN, drain.1);
    put(STATE, state);
    put(
        POST_CONFIG_ACTION,
        Some(if rebooting { "Rebooting" } else { "" }),
    );
    put(CURRENT_CONFIG, Some("rendered-a"));
    put(
        DESIRED_CONFIG,
        Some(if updating { "rendered-b" } else { "rendered-a" }),
    );
    map
}

/// Every annotation combination, with the progress read from it.
fn every_progress() -> Vec<(BTreeMap<String, String>, McoProgress)> {
    let mut all = Vec::new();
    for drain in DRAINS {
        for state in MCD_STATES {
            for rebooting in [false, true] {
                for updating in [false, true] {
                    let map = annotations(drain, state, rebooting, updating);
                    let progress = McoProgress::from_annotations(&map);
                    all.push((map, progress));
                }
            }
        }
    }
    all
}

#[test]
fn the_mco_is_idle_only_with_no_drain_no_work_and_no_reboot_in_sight() {
    for (map, progress) in every_progress() {
        let get = |k: &str| map.get(k).map(String::as_str);
        let expected = get(DESIRED_DRAIN) == get(LAST_APPLIED_DRAIN)
            && !get(DESIRED_DRAIN).is_some_and(|d| d.starts_with("drain-"))
            && get(STATE) != Some("Working")
            && get(POST_CONFIG_ACTION) != Some("Rebooting")
            && get(CURRENT_CONFIG) == get(DESIRED_CONFIG);
        assert_eq!(progress.idle(), expected, "{map:?}");
    }
}

/// What the sweep saw happen: each property's antecedent, counted.
#[derive(Debug, Default)]
struct Seen {
    in_flight: usize,
    forcefile_owed_after_end: usize,
    ended_and_busy: [usize; 3],
    busy_because: [usize; 4],
    owner_deleted_and_busy: usize,
    escalated_and_busy: usize,
    rollout_not_ours: usize,
    lifted: usize,
}

/// The properties of one case; `older` and `latest` are the node's attempts.
fn check(
    attempts: &[Attempt<'_>],
    progress: McoProgress,
    marked: Option<&str>,
    seen: &mut Seen,
) -> Option<String> {
    let decided = planned_reboot(attempts, progress, marked);
    let case = format!("{attempts:?} {progress:?} marked={marked:?} -> {decided:?}");
    // 1. An open attempt that asked for the re-apply always holds the mark.
    if let Some(open) = attempts
        .iter()
        .rev()
        .find(|a| matches!(a.phase, Phase::ForceRequested | Phase::Applying))
    {
        seen.in_flight += 1;
        assert_eq!(decided.as_deref(), Some(open.name), "{case}");
        return decided;
    }
    // 2. A forcefile not confirmed removed holds it, whatever the phase (bar a hand-over).
    let owed = attempts
        .iter()
        .any(|a| a.force_file_written && a.phase != Phase::Escalated);
    if owed {
        if attempts
            .iter()
            .any(|a| a.force_file_written && matches!(a.phase, Phase::Failed | Phase::Aborted))
        {
            seen.forcefile_owed_after_end += 1;
        }
        assert!(decided.is_some(), "{case}");
    }
    let owner = marked.map(|m| attempts.iter().find(|a| a.name == m));
    // 3. An ended attempt keeps its mark while the MCO is at work on the node.
    if !progress.idle() {
        for (at, busy) in [
            progress.drain_pending,
            progress.held_drained,
            progress.working,
            progress.rebooting,
        ]
        .into_iter()
        .enumerate()
        {
            seen.busy_because[at] += usize::from(busy);
        }
        match owner {
            Some(Some(a)) if a.phase == Phase::Escalated => seen.escalated_and_busy += 1,
            Some(Some(a)) => {
                if let Some(at) = [Phase::Failed, Phase::Aborted, Phase::Succeeded]
                    .iter()
                    .position(|p| *p == a.phase)
                {
                    seen.ended_and_busy[at] += 1;
                }
                assert_eq!(decided.as_deref(), marked, "{case}");
            }
            Some(None) => {
                seen.owner_deleted_and_busy += 1;
                assert_eq!(decided.as_deref(), marked, "{case}");
            }
            None if !owed => {
                // 4. A node that carries no mark is not marked for MCO work alone.
                seen.rollout_not_ours += 1;
                assert_eq!(decided, None, "{case}");
            }
            None => {}
        }
    }
    // 5. Lifted exactly when nothing holds it.
    let holds = owed
        || match owner {
            Some(Some(a)) => a.phase != Phase::Escalated && !progress.idle(),
            Some(None) => !progress.idle(),
            None => false,
        };
    assert_eq!(decided.is_some(), holds, "{case}");
    if marked.is_some() && decided.is_none() {
        seen.lifted += 1;
        // Never lifted while the MCO is at work, unless the node was handed over.
        assert!(
            progress.idle() || matches!(owner, Some(Some(a)) if a.phase == Phase::Escalated),
            "{case}"
        );
    }
    // 6. The mark names an attempt or the mark already there, never anything else.
    if let Some(name) = &decided {
        assert!(
            Some(name.as_str()) == marked || attempts.iter().any(|a| a.name == name),
            "{case}"
        );
    }
    decided
}

/// Every phase × forcefile written × drain state × MCD state × reboot × update, for the
/// node's latest attempt alone and after an older one (any phase, forcefile or not), with
/// the mark absent, on either attempt, or on a DriftRemediation deleted since.
#[test]
fn the_mark_holds_until_the_forcefile_is_removed_and_the_mco_is_idle() {
    let progresses = every_progress();
    let mut older_options: Vec<Option<(Phase, bool)>> = vec![None];
    older_options.extend(
        Phase::ALL
            .iter()
            .flat_map(|p| [false, true].map(|written| Some((*p, written)))),
    );
    let mut seen = Seen::default();
    let mut cases = 0;
    for latest_phase in Phase::ALL {
        for latest_written in [false, true] {
            for older in &older_options {
                let mut attempts = Vec::new();
                if let Some((phase, written)) = older {
                    attempts.push(Attempt {
                        name: "w0-1",
                        phase: *phase,
                        force_file_written: *written,
                    });
                }
                attempts.push(Attempt {
                    name: "w0-2",
                    phase: latest_phase,
                    force_file_written: latest_written,
                });
                for marked in [None, Some("w0-1"), Some("w0-2"), Some("w0-gone")] {
                    for (_, progress) in &progresses {
                        check(&attempts, *progress, marked, &mut seen);
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, 11 * 2 * 23 * 4 * 100);
    // No property held vacuously.
    assert!(seen.in_flight > 0, "{seen:?}");
    assert!(seen.forcefile_owed_after_end > 0, "{seen:?}");
    assert!(seen.ended_and_busy.iter().all(|n| *n > 0), "{seen:?}");
    assert!(seen.busy_because.iter().all(|n| *n > 0), "{seen:?}");
    assert!(seen.owner_deleted_and_busy > 0, "{seen:?}");
    assert!(seen.escalated_and_busy > 0, "{seen:?}");
    assert!(seen.rollout_not_ours > 0, "{seen:?}");
    assert!(seen.lifted > 0, "{seen:?}");
}

fn progress(desired: &str, applied: &str, state: &str, rebooting: bool) -> McoProgress {
    McoProgress::from_annotations(&annotations(
        (Some(desired), Some(applied)),
        Some(state),
        rebooting,
        false,
    ))
}

fn one(phase: Phase, written: bool) -> [Attempt<'static>; 1] {
    [Attempt {
        name: "w0-1",
        phase,
        force_file_written: written,
    }]
}

#[test]
fn after_a_drain_timeout_the_mark_follows_the_mco_to_the_end_of_its_reboot() {
    let failed = one(Phase::Failed, false);
    let marked = Some("w0-1");
    let d = "drain-rendered-a";
    let u = "uncordon-rendered-a";
    // The drain goes on, completes, the MCD writes and reboots, asks for the uncordon.
    for busy in [
        progress(d, u, "Degraded", false),
        progress(d, d, "Degraded", false),
        progress(d, d, "Degraded", true),
        progress(u, d, "Degraded", false),
    ] {
        assert_eq!(
            planned_reboot(&failed, busy, marked).as_deref(),
            marked,
            "{busy:?}"
        );
    }
    // Uncordoned: over.
    assert_eq!(
        planned_reboot(&failed, progress(u, u, "Done", false), marked),
        None
    );
}

#[test]
fn a_forcefile_not_yet_removed_holds_the_mark_even_with_the_mco_idle() {
    let idle = progress(
        "uncordon-rendered-a",
        "uncordon-rendered-a",
        "Degraded",
        false,
    );
    for phase in [Phase::Failed, Phase::Aborted] {
        assert_eq!(
            planned_reboot(&one(phase, true), idle, None).as_deref(),
            Some("w0-1")
        );
        assert_eq!(planned_reboot(&one(phase, false), idle, Some("w0-1")), None);
    }
}

#[test]
fn a_rollout_after_the_mark_was_lifted_is_not_taken_for_ours() {
    let rollout = progress("drain-rendered-b", "uncordon-rendered-a", "Working", false);
    assert_eq!(
        planned_reboot(&one(Phase::Failed, false), rollout, None),
        None
    );
    assert_eq!(
        planned_reboot(&one(Phase::Succeeded, false), rollout, None),
        None
    );
}

#[test]
fn an_escalated_node_is_handed_over_unmarked_even_mid_reboot() {
    let rebooting = progress("drain-rendered-a", "drain-rendered-a", "Degraded", true);
    assert_eq!(
        planned_reboot(&one(Phase::Escalated, false), rebooting, Some("w0-1")),
        None
    );
}
