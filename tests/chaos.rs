//! The chaos suite as CI runs it: a curated set of seeded runs of BMC faults, API faults,
//! controller crashes, leader changes, hangs, false alarms and triggers removed mid-flow — each
//! seed's health check asking by the annotation, MachineRemediation or NodeRemediation
//! requests — and, in a share of the seeds, the fleet world (two workload clusters, a shard
//! each, a shard's leader killed and a workload cluster's API gone mid-remediation), each
//! checked against the safety invariants (src/lab/chaos), every invariant judging something.
//! The wide runs are their own command (docs/engineering/chaos.md):
//! `baremend lab --scenario chaos --seeds 1000 --jobs 3`; `--per-seed` prints what each seed
//! judged, which is how the set below was picked.

use std::time::Duration;

/// The seeds CI runs. Picked (2026-11-29, `--per-seed` over seeds 0–99) to cover every
/// invariant several times over, every invariant's rarest case in more than one seed (7: a
/// remediation of a Node the MCO has in hand, in 19, 27, 32, 35, 40, 42, 48, 89, 95, 96; 12: a
/// Node step due while its workload cluster's API is down, in 12, 18, 61, 66, 80, 90: both
/// hang on timing, so one seed may miss its case in a given run), flapping BMCs lying both
/// ways and the fleet's faults mid-remediation. Three runs of the set judged every invariant
/// at least 4 times, in 32 s each. 106, 112 and 128 (from seeds 100–159) added 2026-11-29: a
/// CI run on a machine busy with a build saw none of 11, 12, 18 and 90 make invariant 6's
/// second start (a hung worker hanging again once remediated), which also hangs on timing.
/// 67 added 2026-11-30 with invariant 13: its hostile workload server sends an endless body
/// (12 and 106 drip, 61 never ends a watch line); 19 and 37 have the tenant's `HostBmc`.
const CURATED: &str = "11,12,18,19,27,32,35,37,40,42,47,48,61,66,67,80,89,90,95,96,106,112,128";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_curated_chaos_seeds_break_no_safety_invariant_and_judge_every_one() {
    let out = seeds_pass(CURATED).await;
    // A flapping BMC's false Off released no Node, whether baremend read it or the BareMetal
    // Operator did (each would also be a violation of invariant 1).
    assert!(
        out.contains(
            "0 Node(s) released on a flapping BMC's false Off read by baremend, 0 on one relayed by the BareMetal Operator"
        ),
        "{out}"
    );
    // The seeds did something: remediations ended both ways, and faults were injected.
    let verdict = Verdict::read(&out);
    println!("{}", verdict.line);
    for phase in ["Succeeded", "Failed"] {
        assert!(
            verdict.ended(phase) > 0,
            "no remediation ended {phase}: {out}"
        );
    }
    assert!(verdict.faults > 0, "no fault injected: {out}");
    // Flapping BMCs lied at power-off on hosts fenced both ways: the case each reader's
    // rule exists for came up.
    let (direct, operator) = verdict.lied;
    assert!(direct > 0 && operator > 0, "{direct} and {operator}: {out}");
    // Each invariant judged something: none passed for want of a case.
    assert_eq!(verdict.judged.len(), 13, "{out}");
    for (invariant, count) in verdict.judged.iter().enumerate() {
        assert!(
            *count > 0,
            "invariant {} judged nothing: {out}",
            invariant + 1
        );
    }
    // The fleet world ran, and its faults struck while a remediation of their cluster was
    // under way.
    let [worlds, killed, killed_mid, outages, outages_mid, hostile] = verdict.fleet;
    assert!(
        worlds > 0 && killed > 0 && outages > 0 && hostile > 0,
        "{out}"
    );
    assert!(killed_mid > 0 && outages_mid > 0, "{out}");
}

/// What the test reads of the chaos run's summary line.
struct Verdict {
    /// The line itself (printed: `--nocapture` shows it).
    line: String,
    /// Remediations by final phase (`Succeeded 499`).
    phases: Vec<(String, usize)>,
    /// Faults injected.
    faults: usize,
    /// Cases judged, per invariant in order.
    judged: Vec<usize>,
    /// Hosts whose BMC flapped at power-off and told a false Off: fenced over their BMC, and
    /// through their BareMetal Operator.
    lied: (usize, usize),
    /// Fleet worlds, shard leaders killed (of them mid-remediation), workload API outages
    /// (of them mid-remediation), hostile workload API servers.
    fleet: [usize; 6],
}

impl Verdict {
    /// Reads the line that starts with `chaos:`; fails the test if a part is missing.
    fn read(out: &str) -> Verdict {
        let line = out
            .lines()
            .find(|l| l.starts_with("chaos: "))
            .unwrap_or_else(|| panic!("no summary line: {out}"));
        // `…; remediations Cancelled 100, Failed 40, Succeeded 499; …`
        let phases = part(line, "; remediations ")
            .split(", ")
            .map(|entry| {
                let (phase, count) = entry.rsplit_once(' ').unwrap_or((entry, ""));
                (phase.to_owned(), number(count, line))
            })
            .collect();
        // `…; 1887 faults injected; …`
        let before = line
            .split(" faults injected")
            .next()
            .and_then(|head| head.rsplit(' ').next())
            .unwrap_or_default();
        let faults = number(before, line);
        // `…; cases judged per invariant: 1: 812, 2: 640, … (none for []); …`
        let judged = part(line, "; cases judged per invariant: ")
            .split(" (")
            .next()
            .unwrap_or_default()
            .split(", ")
            .map(|entry| number(entry.split(": ").nth(1).unwrap_or_default(), line))
            .collect();
        // `…; flapping BMCs told a false Off at power-off on 9 host(s) fenced over their BMC
        // and 7 through their BareMetal Operator; …`
        let lied = part(line, "; flapping BMCs told a false Off at power-off on ");
        let direct = lied.split(" host(s)").next().unwrap_or_default();
        let operator = lied
            .split(" and ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_default();
        // `…; fleet worlds 50: shard leaders killed 30 (20 mid-remediation), workload API
        // outages 31 (25 mid-remediation), hostile workload API servers 12`
        let fleet_part = part(line, "; fleet worlds ");
        let numbers: Vec<usize> = fleet_part
            .split([' ', '(', ':', ','])
            .filter(|word| word.chars().next().is_some_and(|c| c.is_ascii_digit()))
            .map(|word| number(word, line))
            .collect();
        let fleet = numbers
            .try_into()
            .unwrap_or_else(|n| panic!("fleet counts {n:?} in {line}"));
        Verdict {
            fleet,
            line: line.to_owned(),
            phases,
            faults,
            judged,
            lied: (number(direct, line), number(operator, line)),
        }
    }

    /// How many remediations ended in `phase`.
    fn ended(&self, phase: &str) -> usize {
        self.phases
            .iter()
            .find(|(p, _)| p == phase)
            .map_or(0, |(_, count)| *count)
    }
}

/// The text after `start` in `line`, up to the next `;`.
fn part<'a>(line: &'a str, start: &str) -> &'a str {
    let (_, rest) = line
        .split_once(start)
        .unwrap_or_else(|| panic!("no {start:?} in {line}"));
    rest.split(';').next().unwrap_or_default()
}

fn number(text: &str, line: &str) -> usize {
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{text:?} is not a number in {line}"))
}

/// Seeds that once broke an invariant (each fixed), replayed several times: their faults
/// hit a timing window, so one replay may miss it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_that_once_failed_pass_replay_after_replay() {
    // 186: a kept Node still Ready from before a short power cycle was taken as back.
    // 1708: a start decided on a Remediation cache lagging behind a broken watch.
    // 86, 348, 470: a second power cycle started on a Machine cache that still showed the
    // trigger the first remediation had removed (a slow Machine watch).
    // 914: a NodeHealthCheck's timeout before the proof, on a BMC that then refused the
    // credentials: the withdrawal of the power-off failed on every pass, and the remediation
    // stayed PoweringOff for ever; it now ends Failed, saying the host may be left off.
    // Three times each, three at a time: a seed's three replays run beside other seeds, as
    // in a wide run.
    let seeds = ["186", "1708", "86", "348", "470", "914"];
    let list: Vec<&str> = seeds.iter().flat_map(|seed| [*seed; 3]).collect();
    seeds_pass(&list.join(",")).await;
}

/// Runs the listed seeds (comma-separated), three at a time, and returns the run's output
/// once it has passed: every seed listed run, none broke an invariant, no harness error.
async fn seeds_pass(list: &str) -> String {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_baremend"))
        .args([
            "lab",
            "--scenario",
            "chaos",
            "--seed-list",
            list,
            "--jobs",
            "3",
        ])
        .env("RUST_LOG", "off")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the seeds within 5 minutes")
        .expect("baremend runs");
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{out}\n{err}");
    let listed = list.split(',').count();
    assert!(
        out.contains(&format!("chaos: {listed} listed seeds")),
        "{out}"
    );
    assert!(
        out.contains(": 0 with violations, 0 harness errors"),
        "{out}"
    );
    out
}
