//! The power-state monitor against the simulated cluster: a detached host is read over its
//! Redfish BMC, a host the BareMetal Operator manages from its BareMetalHost (no BMC
//! request), and a host switched off behind everyone's back shows off within an interval.

use std::time::{Duration, Instant};

use baremend::metrics::Metrics;
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::host::Power;

mod common;

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
    let mut lab = Lab::builder(fast()).start().await;
    lab.detach("worker-1");
    lab.start_controller(ControllerOptions {
        power_poll: Some(Duration::from_millis(300)),
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
    // Gentle: one read per interval for the one directly read host, measured over four
    // intervals (1.2 s). At least two come within them...
    let window = Instant::now() + Duration::from_millis(1200);
    eventually(
        "two reads within four intervals",
        Duration::from_millis(1200),
        async || {
            let made = reads(&metrics.encode()) - before;
            (made >= 2.0).then_some(()).ok_or(made)
        },
    )
    .await;
    // ...and no more than six: a negative, so the rest of the window is slept out.
    tokio::time::sleep_until(window.into()).await;
    let made = reads(&metrics.encode()) - before;
    assert!(
        (2.0..=6.0).contains(&made),
        "{made} reads in four intervals"
    );
    lab.kill().await;
}
