//! The power-state monitor against the simulated cluster: a detached host is read over its
//! Redfish BMC, a host the BareMetal Operator manages from its BareMetalHost (no BMC
//! request), and a host switched off behind everyone's back shows off within an interval. A
//! host under remediation keeps its series all through, fed by the remediation's own BMC reads
//! (or its BareMetalHost's status); without the monitor those reads leave no series.

use std::time::{Duration, Instant};

use baremend::api::RemediationPhase;
use baremend::metrics::Metrics;
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::host::Power;
use serde_json::{Value, json};

use baremend_testkit as common;

use common::eventually;
use common::lab::{Lab, fast};

/// The value of the series whose line has every one of `parts`, if shown.
fn series(text: &str, parts: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| parts.iter().all(|p| l.contains(p)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Waits (up to 20 s) until the series shows `value`.
async fn until(metrics: &Metrics, parts: &[&str], value: f64) {
    eventually(
        &format!("{parts:?} = {value}"),
        Duration::from_secs(20),
        async || {
            let text = metrics.encode();
            (series(&text, parts) == Some(value))
                .then_some(())
                .ok_or(text)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_hosts_are_read_over_their_bmc_and_managed_ones_from_their_host_status() {
    const INTERVAL: Duration = Duration::from_millis(300);
    let mut lab = Lab::builder(fast()).start().await;
    lab.detach("worker-1");
    lab.start_controller(ControllerOptions {
        power_poll: Some(INTERVAL),
        power_poll_seed: 1,
        ..lab.options()
    });
    let metrics = lab.metrics.clone();
    let direct = [
        "baremend_host_power_state{",
        "machine=\"openshift-machine-api/worker-1\"",
        "node=\"worker-1\"",
        "driver=\"redfish\"",
    ];
    until(&metrics, &[&direct[..], &["state=\"on\""]].concat(), 1.0).await;
    until(&metrics, &[&direct[..], &["state=\"off\""]].concat(), 0.0).await;
    let managed = [
        "baremend_host_power_state{",
        "machine=\"openshift-machine-api/worker-0\"",
        "driver=\"baremetalhost\"",
        "state=\"on\"",
    ];
    until(&metrics, &managed, 1.0).await;

    // Off behind everyone's back (a PDU, a person at the console): the next read shows it.
    lab.cluster
        .host("worker-1")
        .unwrap()
        .host
        .set_power(Power::Off);
    until(&metrics, &[&direct[..], &["state=\"off\""]].concat(), 1.0).await;
    let reads = |text: &str| {
        series(
            text,
            &[
                "baremend_bmc_requests_total{",
                "driver=\"redfish\"",
                "operation=\"power_state\"",
                "outcome=\"ok\"",
            ],
        )
        .unwrap_or(0.0)
    };
    let text = metrics.encode();
    let before = reads(&text);
    assert!(before >= 2.0, "{text}");
    assert!(
        text.contains("baremend_bmc_request_duration_seconds_bucket{"),
        "{text}"
    );
    // Gentle: one read per interval for the one directly read host. Two more come (a busy
    // machine may delay them: ten intervals to come)...
    let started = Instant::now();
    eventually("two more reads", INTERVAL * 10, async || {
        let made = reads(&metrics.encode()) - before;
        (made >= 2.0).then_some(()).ok_or(made)
    })
    .await;
    // ...and never more than one per interval of the time that passed (and the one under
    // way): a negative, over four intervals at least, so the rest of them is slept out. A
    // busy machine only makes fewer.
    tokio::time::sleep_until((started + INTERVAL * 4).into()).await;
    let made = reads(&metrics.encode()) - before;
    let intervals = started.elapsed().as_secs_f64() / INTERVAL.as_secs_f64();
    assert!(
        made <= intervals.ceil() + 1.0,
        "{made} reads in {intervals:.1} intervals"
    );
    lab.kill().await;
}

/// A policy for quick remediations, fencing with `strategy`.
fn fast_policy(strategy: &str) -> Value {
    let mut policy = common::lab::fast_policy();
    policy["strategies"] = json!([strategy]);
    policy
}

/// The power-state series of a Machine (`state` → value), as the metrics show them now.
fn host_states(metrics: &Metrics, machine: &str) -> Vec<(String, f64)> {
    let text = metrics.encode();
    let machine = format!("machine=\"openshift-machine-api/{machine}\"");
    text.lines()
        .filter(|l| l.starts_with("baremend_host_power_state{") && l.contains(&machine))
        .filter_map(|l| {
            let state = l.split("state=\"").nth(1)?.split('"').next()?;
            let value = l.rsplit(' ').next()?.parse().ok()?;
            Some((state.to_string(), value))
        })
        .collect()
}

/// Hangs `host` and follows its remediation to Succeeded: at every look while it is under way,
/// the host's power-state series must be there (all three states); returns when the series
/// first showed the host off while its remediation was under way.
async fn follow_remediation(lab: &Lab, host: &str) -> Instant {
    assert!(lab.cluster.hang(host));
    let name = format!("{host}-1");
    let mut off_at = None;
    eventually(
        &format!("{name} Succeeded"),
        Duration::from_secs(60),
        async || {
            let phase = lab
                .remediation(&name)
                .and_then(|r| r.status)
                .map(|s| s.phase);
            let states = host_states(&lab.metrics, host);
            let under_way =
                phase.is_some_and(|p| p != RemediationPhase::Pending && !p.is_terminal());
            if under_way {
                assert_eq!(
                    states.len(),
                    3,
                    "{host}'s series missing while its remediation is {phase:?}: {states:?}"
                );
                if off_at.is_none() && states.contains(&("off".into(), 1.0)) {
                    off_at = Some(Instant::now());
                }
            }
            match phase {
                Some(RemediationPhase::Succeeded) => Ok(()),
                Some(p) if p.is_terminal() => panic!("{name} ended {p:?}"),
                other => Err(format!("{other:?}: {states:?}")),
            }
        },
    )
    .await;
    off_at.unwrap_or_else(|| panic!("{host} never showed off while its remediation was under way"))
}

/// A lab whose policy fences with `strategy` (worker-1 detached, for `DirectBmc`), with the
/// controller running and the power monitor reading every `power_poll` (None: off).
async fn remediating_lab(strategy: &str, power_poll: Option<Duration>, seed: u64) -> Lab {
    let mut lab = Lab::builder(fast())
        .policy(fast_policy(strategy))
        .start()
        .await;
    if strategy == "DirectBmc" {
        lab.detach("worker-1");
    }
    lab.start_controller(ControllerOptions {
        power_poll,
        power_poll_seed: seed,
        ..lab.options()
    });
    lab
}

/// When the series of `host` shows it on; fails after `deadline`.
async fn read_on(lab: &Lab, host: &str, deadline: Duration) -> Instant {
    eventually(&format!("{host} read on"), deadline, async || {
        host_states(&lab.metrics, host)
            .contains(&("on".into(), 1.0))
            .then(Instant::now)
    })
    .await
}

/// With the monitor reading `host` once in 8 s: follows its remediation, and fails unless the
/// series showed it off sooner after the monitor's first read than the monitor's next read,
/// i.e. from the remediation's own reads; then the monitor reads it on again.
async fn off_shown_by_the_remediation(strategy: &str, host: &str, seed: u64) {
    let interval = Duration::from_secs(8);
    let mut lab = remediating_lab(strategy, Some(interval), seed).await;
    // Up to an interval for the caches to fill, and another for the host's offset in it.
    let first_read = read_on(&lab, host, interval * 2 + Duration::from_secs(5)).await;
    let off_after_read = follow_remediation(&lab, host)
        .await
        .duration_since(first_read);
    println!("{host} shown off {off_after_read:?} after the monitor's first read");
    assert!(
        off_after_read < interval - Duration::from_secs(1),
        "off shown {off_after_read:?} after the monitor's read: it may be the monitor's next read"
    );
    // Once the remediation is over, the monitor reads the host again: on.
    read_on(&lab, host, interval + Duration::from_secs(5)).await;
    lab.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_fenced_directly_keeps_its_series_fed_by_the_remediation_reads() {
    off_shown_by_the_remediation("DirectBmc", "worker-1", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_fenced_directly_keeps_its_series_at_every_turn_of_a_busy_monitor() {
    // The monitor's turns come every 300 ms: none of them may drop the series of the host it
    // leaves to the remediation.
    let mut lab = remediating_lab("DirectBmc", Some(Duration::from_millis(300)), 4).await;
    read_on(&lab, "worker-1", Duration::from_secs(20)).await;
    follow_remediation(&lab, "worker-1").await;
    lab.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_fenced_through_its_bare_metal_host_keeps_its_series_fed_by_the_remediation_reads() {
    // The monitor reads a managed host's status from its cache; the remediation's fresh GETs
    // of the BareMetalHost feed the series too (CI once saw a busy machine's monitor miss the
    // host's short off entirely when only the monitor fed it).
    off_shown_by_the_remediation("BareMetalHostRebootApi", "worker-2", 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_a_bare_metal_operator_manages_is_shown_with_its_host_as_the_bmc() {
    let mut lab = remediating_lab(
        "BareMetalHostRebootApi",
        Some(Duration::from_millis(300)),
        6,
    )
    .await;
    read_on(&lab, "worker-2", Duration::from_secs(20)).await;
    let states = lab.metrics.encode();
    assert!(
        states.contains("machine=\"openshift-machine-api/worker-2\",node=\"worker-2\",bmc=\"BareMetalHost openshift-machine-api/worker-2\",driver=\"baremetalhost\""),
        "{states}"
    );
    follow_remediation(&lab, "worker-2").await;
    lab.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_monitor_a_remediation_reads_leave_no_power_series() {
    let mut lab = remediating_lab("DirectBmc", None, 0).await;
    assert!(lab.cluster.hang("worker-1"));
    let done = lab.ended("worker-1-1").await;
    let phase = done.status.map(|s| s.phase);
    assert_eq!(phase, Some(RemediationPhase::Succeeded));
    // The remediation read the BMC (its proof), and no series came of it: a series left by a
    // remediation and never read again would show the host off for ever.
    let text = lab.metrics.encode();
    assert!(
        text.contains("baremend_bmc_requests_total{driver=\"redfish\",operation=\"power_state\",outcome=\"ok\"}"),
        "{text}"
    );
    assert!(!text.contains("baremend_host_power_state{"), "{text}");
    lab.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_that_still_has_the_previous_password_shows_in_its_gauge_until_it_is_changed() {
    const NEW: &str = "the-new-password-Vb3";
    let mut lab = Lab::builder(fast()).start().await;
    lab.detach("worker-1");
    lab.rotate_bmc_password("worker-1", NEW);
    lab.start_controller(ControllerOptions {
        power_poll: Some(Duration::from_millis(300)),
        power_poll_seed: 1,
        ..lab.options()
    });
    let metrics = lab.metrics.clone();
    let gauge = [
        "baremend_bmc_previous_password_in_use{",
        "machine=\"openshift-machine-api/worker-1\"",
        "driver=\"redfish\"",
    ];
    until(&metrics, &gauge, 1.0).await;
    // The BMC gets the new password: the next login finds it, and the gauge drops.
    lab.cluster
        .redfish()
        .service()
        .set_credentials("admin", NEW);
    until(&metrics, &gauge, 0.0).await;
    let text = metrics.encode();
    assert!(!text.contains(NEW), "{text}");
    lab.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_of_nodes_without_machines_are_read_over_the_bmc_their_host_bmc_names() {
    let spec = baremend_sim::cluster::ClusterSpec {
        platform_none: true,
        ..fast()
    };
    let mut lab = Lab::builder(spec).start().await;
    lab.start_controller(ControllerOptions {
        power_poll: Some(Duration::from_millis(300)),
        power_poll_seed: 1,
        ..lab.options()
    });
    let metrics = lab.metrics.clone();
    // No Machine: the series names the Node, and no Machine.
    let worker = [
        "baremend_host_power_state{",
        "machine=\"\"",
        "node=\"worker-2\"",
        "driver=\"redfish\"",
    ];
    until(&metrics, &[&worker[..], &["state=\"on\""]].concat(), 1.0).await;
    lab.cluster
        .host("worker-2")
        .unwrap()
        .host
        .set_power(Power::Off);
    until(&metrics, &[&worker[..], &["state=\"off\""]].concat(), 1.0).await;
    until(&metrics, &[&worker[..], &["state=\"on\""]].concat(), 0.0).await;
}
