//! `baremend lab`, the README's main command, as a user runs it: the default story and the
//! scenario that must end Failed without touching the Node.

use baremend_testkit as common;

use common::{baremend, texts};

/// Asserts that `out` holds every one of `lines`, naming the first it misses.
fn says_all(out: &str, lines: &[&str]) {
    for line in lines {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
}

/// `baremend lab --scenario scale` with `args`, as a user runs it.
async fn scale_lab(args: &[&str]) -> std::process::Output {
    let args: Vec<&str> = ["lab", "--scenario", "scale"]
        .iter()
        .chain(args)
        .copied()
        .collect();
    baremend(&args, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_lab_tells_the_whole_story_and_exits_zero() {
    let output = baremend(&["lab"], None).await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    says_all(
        &out,
        &[
            "external-remediation annotation set by the MachineHealthCheck",
            "Remediation worker-0-1: PoweringOff",
            "host worker-0: power Off",
            "Node worker-0: absent",
            "host worker-0: power On",
            "external-remediation annotation removed",
            "Remediation worker-0-1: Succeeded",
            "| Fenced |",
            "| NodeDeleted |",
            "baremend_remediations_succeeded_total{strategy=\"BareMetalHostRebootApi\"} 1",
        ],
    );
    // The story is in order: off before the Node goes, the Node goes before power-on.
    let at = |needle: &str| out.find(needle).unwrap();
    assert!(at("host worker-0: power Off") < at("Node worker-0: absent"));
    assert!(at("Node worker-0: absent") < at("host worker-0: power PoweringOn"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_api_lab_remediates_a_cluster_api_machine_through_its_request() {
    let output = baremend(&["lab", "--scenario", "capi"], None).await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    says_all(
        &out,
        &[
            "cluster.x-k8s.io Machine of Cluster wc-0 with a Metal3Machine",
            "its Node worker-0 lives in wc-0's own API server, reached through Secret wc-0-kubeconfig",
            "MachineRemediation request created by the MachineHealthCheck",
            "Remediation wc-0-worker-0-1: PoweringOff",
            "host wc-0-worker-0: power Off",
            "Node worker-0 of wc-0: absent",
            "MachineRemediation request removed",
            "Remediation wc-0-worker-0-1: Succeeded",
            "| Fenced |",
            "| NodeDeleted |",
        ],
    );
    let at = |needle: &str| out.find(needle).unwrap();
    assert!(at("request created") < at("Remediation wc-0-worker-0-1: PoweringOff"));
    assert!(at("host wc-0-worker-0: power Off") < at("Node worker-0 of wc-0: absent"));
}

/// Three workload clusters: one hang in each of two remediated at once, and a storm in the third
/// held by its own storm gate without holding the others (issue 27's `capi-fleet`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_api_fleet_lab_remediates_two_clusters_at_once_and_holds_a_storm_in_the_third()
{
    let output = baremend(&["lab", "--scenario", "capi-fleet"], None).await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    says_all(
        &out,
        &[
            "3 workload cluster(s)",
            "Remediation wc-2-worker-1-1: held: storm: 3 of 5 machines are unhealthy",
            "Node worker-1 of wc-0: absent",
            "Node worker-1 of wc-1: absent",
            "Remediation wc-0-worker-1-1: Succeeded",
            "Remediation wc-1-worker-1-1: Succeeded",
            "wc-2-worker-1-1 held (Storm), wc-2-worker-2-1 held (Storm), wc-2-worker-3-1 held (Storm)",
        ],
    );
    // At once: the second cluster's power-off is requested before the first's remediation ends.
    let at = |needle: &str| out.find(needle).unwrap();
    assert!(
        at("Remediation wc-1-worker-1-1: PoweringOff")
            < at("Remediation wc-0-worker-1-1: Succeeded")
    );
    assert!(!out.contains("Node worker-1 of wc-2: absent"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_health_check_lab_remediates_a_node_through_its_request() {
    let output = baremend(&["lab", "--scenario", "nhc"], None).await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    says_all(
        &out,
        &[
            "medik8s NodeHealthCheck: escalating remediations",
            "NodeRemediation request created by the NodeHealthCheck",
            "Remediation worker-0-1: PoweringOff",
            "Node worker-0: absent",
            "NodeRemediation request removed",
            "Remediation worker-0-1: Succeeded",
            "| Fenced |",
        ],
    );
    let at = |needle: &str| out.find(needle).unwrap();
    assert!(at("request created") < at("Remediation worker-0-1: PoweringOff"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_platform_none_lab_remediates_a_node_without_a_machine_through_its_host_bmc() {
    let output = baremend(&["lab", "--scenario", "nhc-upi"], None).await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    says_all(
        &out,
        &[
            "platform none: no Machines, no BareMetalHosts; HostBmc worker-0",
            "Node worker-0: NodeRemediation request created by the NodeHealthCheck",
            "Remediation worker-0-1: PoweringOff",
            "Node worker-0: absent",
            "Remediation worker-0-1: Succeeded",
            "baremend_remediations_succeeded_total{strategy=\"DirectBmc\"} 1",
            "| Fenced |",
            "| NodeDeleted |",
        ],
    );
    // The story looks at the host every so often and may miss the short Off: the table's
    // order is the remediation's own record.
    assert!(!out.contains("BareMetalHostRebootApi"), "{out}");
    let at = |needle: &str| out.find(needle).unwrap();
    assert!(at("| Fenced |") < at("| NodeDeleted |"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stuck_bmc_lab_fails_the_remediation_and_keeps_the_node_with_json_logs() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_baremend"))
        .args(["--log-format", "json", "lab", "--scenario", "stuck-bmc"])
        .env("RUST_LOG", "baremend=info")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    assert!(out.contains("Remediation worker-0-1: Failed"), "{out}");
    assert!(!out.contains("Node worker-0: absent"), "{out}");
    // Every log line is one JSON object; the remediation's carry the Machine from the span.
    let lines: Vec<serde_json::Value> = err
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["fields"].is_object())
    );
    assert!(
        lines
            .iter()
            .any(|l| l["span"]["machine"] == "worker-0" && l["span"]["name"] == "remediate"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_scenario_is_refused_with_the_choices() {
    let output = baremend(&["lab", "--scenario", "volcano"], None).await;
    let (_, err) = texts(&output);
    assert!(!output.status.success());
    assert!(err.contains("bmh") && err.contains("stuck-bmc"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storm_lab_holds_every_start_until_an_operator_acts_then_goes_one_at_a_time() {
    let output = baremend(&["lab", "--scenario", "storm"], None).await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    // The time printed on the first line that has `needle` (lines of one look share it).
    let at = |needle: &str| -> f64 {
        let line = out
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("missing {needle:?} in:\n{out}"));
        line.split_whitespace()
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no time on {line:?}"))
    };
    let held = at("worker-0-1: held: storm: 3 of 6 machines are unhealthy");
    let operator = at("operator: worker-2 fixed by hand");
    let untriggered = at("operator: worker-2 is Ready, its trigger removed");
    let cancelled = at("Remediation worker-2-1: Cancelled");
    // Either worker may go first; the other waits for it.
    let (one, two) =
        if at("Remediation worker-0-1: PoweringOff") <= at("Remediation worker-1-1: PoweringOff") {
            ("worker-0-1", "worker-1-1")
        } else {
            ("worker-1-1", "worker-0-1")
        };
    let first = at(&format!("Remediation {one}: PoweringOff"));
    let waiting = at(&format!("{two}: held: 1 remediation(s) running"));
    // The live lines are the lab's looks (one look may print a later change first); the
    // order of the two remediations is judged on their persisted step times, in the tables.
    let step_at = |remediation: &str, step: &str| -> f64 {
        let table = out
            .split(&format!("\n{remediation}:\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no table of {remediation} in:\n{out}"));
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {step} |")))
            .unwrap_or_else(|| panic!("no {step} row for {remediation} in:\n{out}"));
        row.split('|')
            .nth(2)
            .and_then(|cell| cell.trim().trim_end_matches(" s").parse().ok())
            .unwrap_or_else(|| panic!("no time in {row:?}"))
    };
    let first_done = step_at(one, "Succeeded");
    let second = step_at(two, "PowerOffRequested");
    // Nothing starts while the storm holds: not before the operator took a trigger away.
    assert!(held < operator && operator <= untriggered, "{out}");
    assert!(untriggered <= cancelled && untriggered <= first, "{out}");
    // One at a time: the second starts once the first is done, and waits meanwhile. The
    // held line's own words say the first was running when it was written; the lab's looks
    // may print it a look before the first's PoweringOff line, so only its end is judged.
    assert!(untriggered <= waiting && waiting < first_done, "{out}");
    assert!(first_done <= second, "{out}");
    assert!(out.contains("worker-1-1 Succeeded"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drift_lab_reapplies_the_config_through_the_mco_and_exits_zero() {
    let output = baremend(&["lab", "--scenario", "drift"], None).await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    says_all(
        &out,
        &[
            "Node worker-1: MCO state Degraded (content mismatch for file \"/etc/sysctl.d/90-demo.conf\")",
            "DriftRemediation worker-1-1: Debouncing",
            "DriftRemediation worker-1-1: ForceRequested",
            "Node worker-1: cordoned",
            "Node worker-1: not Ready",
            "Node worker-1: uncordoned",
            "DriftRemediation worker-1-1: Succeeded",
            "| Rebooted |",
            "action started",
            "mco_remediations_total{action=\"Force\",outcome=\"Succeeded\",reason=\"\"} 1",
        ],
    );
    let at = |needle: &str| out.find(needle).unwrap();
    assert!(at("ForceRequested") < at("Node worker-1: cordoned"));
    assert!(at("Node worker-1: not Ready") < at("Node worker-1: uncordoned"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chaos_run_prints_its_verdict_and_nothing_else() {
    // Seeds 0..12 inject API errors and crash controllers: their retries and the watchers of
    // torn-down seeds must not interleave with the verdict.
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(300),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_baremend"))
            .args(["lab", "--scenario", "chaos", "--seeds", "12", "--jobs", "3"])
            .env_remove("RUST_LOG")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("12 seeds within 5 minutes")
    .expect("baremend runs");
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    assert!(err.is_empty(), "stderr is not empty:\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(lines[0].starts_with("chaos: 12 seeds from 0"), "{out}");
}

/// The benchmark's lab, small: the controller runs as its own `baremend run` process (its
/// probes, its metrics port, its flags) and each remediation is measured. The figures are the
/// benchmark's (docs/engineering/benchmarks.md), not this test's: it checks the lab still runs end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_lab_runs_the_controller_as_its_own_process_and_measures_each_remediation() {
    let output = scale_lab(&[
        "--machines",
        "12",
        "--samples",
        "2",
        "--timeout",
        "60s",
        "--runs",
        "2",
    ])
    .await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    says_all(
        &out,
        &[
            "## run 1 of 2",
            "## run 2 of 2",
            "| measure | one cluster: 12 machines, 1 controller, 2 remediations, simulated API server, median of 2 runs | goal |",
            "caches filled",
            "controllers idle (first passes done)",
            "1. worker-0: trigger stored in",
            "| fence latency p50 / p99 |",
            "bare floor: fence latency p50",
            "safe floor: fence latency p50",
            "| the bare floor's fence latency p50 / p99 |",
            "| the safe floor's fence latency p50 / p99 |",
            "| fence latency × the safe floor, p50 / p99 |",
            "| the safe floor's samples triggered apart (--floor-pace) |",
            "| Redfish requests per remediation (mean / max) |",
            "| controller resident memory",
            "Each p99 is the slowest of a run's 2 remediations (nearest rank).",
        ],
    );
    // By default the safe floor is triggered at ours' cadence in the same world, and waits
    // for it: its two samples span at least one interval. The bare floor runs back to back.
    let ours: Vec<f64> = out
        .lines()
        .filter_map(|l| l.split_once("one triggered every ").map(|(_, s)| s))
        .map(|s| s.trim_end_matches(" s").parse().unwrap())
        .collect();
    let safe: Vec<(f64, f64)> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("safe floor: fence latency"))
        .map(|l| floor_spacing_and_span(l).unwrap_or_else(|| panic!("{l}")))
        .collect();
    assert_eq!(ours.len(), 2, "{out}");
    assert_eq!(safe.len(), 2, "{out}");
    for (cadence, (spacing, span)) in ours.iter().zip(&safe) {
        assert!(*cadence >= 0.1, "a whole remediation takes time: {cadence}");
        assert_eq!(cadence, spacing, "{out}");
        assert!(*span >= *spacing, "{out}");
    }
    for line in out
        .lines()
        .filter(|l| l.contains("bare floor: fence latency"))
    {
        assert_eq!(
            floor_spacing_and_span(line).map(|s| s.0),
            Some(0.0),
            "{line}"
        );
    }
    // Each figure is a median with the runs' spread beside it.
    let fence = out
        .lines()
        .find(|l| l.starts_with("| fence latency p50 / p99 |"))
        .unwrap();
    assert_eq!(fence.matches(" ms ±").count(), 2, "{fence}");
}

/// A floor's line's spacing and span, in seconds: "…, triggered 5.3 s apart (10.6 s in all)".
fn floor_spacing_and_span(line: &str) -> Option<(f64, f64)> {
    let (_, rest) = line.split_once("triggered ")?;
    let (spacing, rest) = rest.split_once(" s apart (")?;
    let (span, _) = rest.split_once(" s in all)")?;
    Some((spacing.parse().ok()?, span.parse().ok()?))
}

/// A floor pace that is neither `ours` nor a duration is refused before anything starts,
/// saying what it takes.
#[tokio::test]
async fn the_scale_lab_refuses_a_floor_pace_it_cannot_read_with_why() {
    let output = scale_lab(&["--machines", "12", "--floor-pace", "soon"]).await;
    let (out, err) = texts(&output);
    assert!(!output.status.success(), "{out}\n{err}");
    assert!(
        err.contains("--floor-pace") && err.contains("`ours`") && err.contains("not a duration"),
        "{err}"
    );
    assert!(
        !out.contains("scale benchmark"),
        "nothing was started: {out}"
    );
}

/// The benchmark on a real control plane beside the simulated API server, small: the same
/// world on both in one run, the real one an etcd, kube-apiserver and kube-controller-manager
/// (`scripts/kubernetes.sh`'s) that the simulated world drives over HTTPS; the controller's
/// requests there are counted from the server's audit log. The figures are the benchmark's
/// (docs/engineering/benchmarks.md), not this test's: it checks that both columns are
/// measured, and that the real server's counts are counts (a remediation makes requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_lab_measures_the_same_cluster_on_a_real_control_plane_beside_the_simulated_one()
{
    let output = scale_lab(&[
        "--machines",
        "9",
        "--samples",
        "2",
        "--timeout",
        "60s",
        "--real-plane",
        "--runs",
        "1",
    ])
    .await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    says_all(
        &out,
        &[
            "on the real kube-apiserver v1.36.3: 3 control-plane and 6 workers",
            "real control plane (etcd, kube-apiserver, kube-controller-manager v1.36.3) up in",
            "| measure | one cluster: 9 machines, 1 controller, 2 remediations, simulated API server | one cluster: 9 machines, 1 controller, 2 remediations, real kube-apiserver v1.36.3 | goal |",
            "| fence latency p99, the real server ÷ the simulated | — |",
        ],
    );
    let cells = |measure: &str| -> Vec<String> {
        let row = out
            .lines()
            .find(|l| l.starts_with(&format!("| {measure} |")))
            .unwrap_or_else(|| panic!("no row {measure:?} in:\n{out}"));
        row.split(" | ")
            .skip(1)
            .take(2)
            .map(str::to_owned)
            .collect()
    };
    for cell in cells("management-cluster API requests per remediation (mean / max)") {
        let mean: f64 = cell.split(" / ").next().unwrap().parse().unwrap();
        assert!(
            mean >= 10.0,
            "a remediation makes requests on both servers: {cell}"
        );
    }
    let start =
        cells("API requests at start, all controllers (management / workload / their watches)");
    for cell in &start {
        let requests: u64 = cell.split(" / ").next().unwrap().parse().unwrap();
        assert!(
            requests >= 10,
            "the start's lists and watches are counted: {cell}"
        );
    }
}

/// A fleet on a real control plane is refused before anything starts: one plane holds one
/// cluster (a workload cluster would need a plane each).
#[tokio::test]
async fn the_scale_lab_refuses_a_fleet_on_a_real_control_plane_with_why() {
    let output = scale_lab(&[
        "--machines",
        "40",
        "--workload-clusters",
        "4",
        "--real-plane",
    ])
    .await;
    let (out, err) = texts(&output);
    assert!(!output.status.success(), "{out}\n{err}");
    assert!(
        err.contains("--real-plane") && err.contains("a real control plane holds one cluster"),
        "{err}"
    );
    assert!(
        !out.contains("scale benchmark"),
        "nothing was started: {out}"
    );
}

/// Ours and each floor remediate hosts of their own: more remediations than a third of the
/// workers is refused before anything starts, for either world of a fleet run (a floor on
/// hosts ours remediated, or fewer samples than asked, would be a figure of another world).
#[tokio::test]
async fn the_scale_lab_refuses_more_samples_than_hosts_of_their_own_with_why() {
    for (args, world) in [
        (
            &["--machines", "10", "--samples", "3"][..],
            "one cluster: 10 machines",
        ),
        (
            &[
                "--machines",
                "40",
                "--workload-clusters",
                "4",
                "--compare-machines",
                "40",
                "--samples",
                "10",
            ][..],
            "fleet: 40 machines",
        ),
        (
            &[
                "--machines",
                "40",
                "--workload-clusters",
                "4",
                "--compare-machines",
                "14",
                "--samples",
                "4",
            ][..],
            "one cluster: 14 machines",
        ),
    ] {
        let output = scale_lab(args).await;
        let (out, err) = texts(&output);
        assert!(!output.status.success(), "{args:?}: {out}\n{err}");
        assert!(
            err.contains("--samples") && err.contains(world) && err.contains("hosts of their own"),
            "{args:?}: {err}"
        );
        assert!(
            !out.contains("scale benchmark"),
            "nothing was started: {out}"
        );
    }
}

/// The API requests traced (`BAREMEND_SCALE_TRACE`) for the first safe-floor sample of a
/// world's section of the benchmark's output: each request's path.
fn safe_floor_reads(section: &str) -> Vec<&str> {
    section
        .lines()
        .skip_while(|l| !l.contains("safe floor, "))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with('+'))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')))
        .collect()
}

/// The benchmark's fleet mode, small: a Cluster API management cluster of 4 workload clusters
/// sharded over 2 controller processes (each its own `baremend run` with its own selector and
/// Lease), printed beside one cluster measured first in the same run; each remediation reads
/// its Node in its own workload cluster (so makes workload-cluster API requests). The figures
/// are the benchmark's (docs/engineering/benchmarks.md), not this test's. Traced
/// (`BAREMEND_SCALE_TRACE`): the safe floor makes the fresh reads ours makes at a start, the
/// Cluster API request's among them in the fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_lab_fleet_mode_shards_the_machines_and_prints_beside_one_cluster() {
    let args = [
        "--machines",
        "40",
        "--workload-clusters",
        "4",
        "--shards",
        "2",
        "--compare-machines",
        "15",
        "--samples",
        "4",
        "--timeout",
        "60s",
        "--runs",
        "1",
        // Back to back: the pace is the first test's; here what is read and sharded.
        "--floor-pace",
        "0s",
    ];
    // Eight remediations and sixteen floor samples: about a minute beside CI's other tests, so
    // twice the helper's limit, inside nextest's four minutes.
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(200),
        tokio::process::Command::new(common::baremend_bin())
            .args(["lab", "--scenario", "scale"])
            .args(args)
            .env("BAREMEND_SCALE_TRACE", "1")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the lab finishes within 200 s")
    .expect("baremend runs");
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    let (one, fleet) = out
        .split_once("scale benchmark, fleet")
        .unwrap_or_else(|| panic!("no fleet section in:\n{out}"));
    for (world, section) in [("one cluster", one), ("fleet", fleet)] {
        let reads = safe_floor_reads(section);
        assert!(
            reads.contains(&"/apis"),
            "{world}: the safe floor discovers: {reads:?}"
        );
        for read in ["/machines/", "/baremetalhosts/", "/remediations"] {
            assert!(
                reads.iter().any(|r| r.contains(read)),
                "{world}: the safe floor reads {read}: {reads:?}"
            );
        }
    }
    let reads = safe_floor_reads(fleet);
    for read in ["/machineremediations/", "/metal3remediations"] {
        assert!(
            reads.iter().any(|r| r.contains(read)),
            "fleet: the safe floor reads {read}: {reads:?}"
        );
    }
    says_all(
        &out,
        &[
            "controller 0 (pid",
            "controller 1 (pid",
            "over 4 hosts, triggered 0.0 s apart (",
            "| measure | one cluster: 15 machines, 1 controller, 4 remediations, simulated API server | fleet: 40 machines, 4 workload clusters, 2 shards, 4 remediations, simulated API server | goal |",
            "| fence latency p50 / p99 |",
            "| overhead over the physical floor p50 / p99 |",
            "| fence latency × the safe floor, p50 / p99 |",
            "| fence latency p99, the fleet ÷ one cluster | — |",
            "| management-cluster API requests per remediation (mean / max) |",
            "| workload-cluster API requests per remediation (mean / max) | — (Nodes in the one API server) |",
            "| resident memory of each controller (now) |",
        ],
    );
    // The fleet's remediations: one in each workload cluster (so in both shards), each one
    // reading its Node through its workload cluster.
    for (index, cluster) in ["wc-0", "wc-1", "wc-2", "wc-3"].iter().enumerate() {
        let prefix = format!("{}. {cluster}-worker-0: trigger stored in", index + 1);
        let line = out
            .lines()
            .find(|l| l.contains(&prefix))
            .unwrap_or_else(|| panic!("missing {prefix:?} in:\n{out}"));
        assert!(!line.ends_with(" / 0 workload API requests"), "{line}");
    }
    let table = out
        .lines()
        .find(|l| l.starts_with("| resident memory of each controller"))
        .unwrap();
    // The one cluster's controller, then the fleet's two shards.
    assert_eq!(table.matches(" MB").count(), 3, "{table}");
    assert_eq!(table.matches(" MB / ").count(), 1, "{table}");
}
