//! The power-state monitor against the simulated cluster: a detached host is read over its
//! Redfish BMC, a host the BareMetal Operator manages from its BareMetalHost (no BMC
//! request), and a host switched off behind everyone's back shows off within an interval.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend::metrics::Metrics;
use baremend::remediation::controller::{ControllerOptions, run};
use baremend::runtime::SystemClock;
use baremend_sim::cluster::ClusterSpec;
use baremend_sim::cluster::timing::Timing;
use baremend_sim::host::Power;
use serde_json::json;

mod common;

/// The value of the series whose line has every one of `parts`, if shown.
fn series(text: &str, parts: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| parts.iter().all(|p| l.contains(p)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn until(metrics: &Metrics, parts: &[&str], value: f64) {
    let started = Instant::now();
    loop {
        let text = metrics.encode();
        if series(&text, parts) == Some(value) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no {parts:?} = {value} in:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_hosts_are_read_over_their_bmc_and_managed_ones_from_their_host_status() {
    let spec = ClusterSpec {
        timing: Timing::fast(),
        ..ClusterSpec::default()
    };
    let prepared = common::cluster::prepare(spec, json!({})).await;
    common::cluster::detach(&prepared.api, "worker-1");
    let metrics = Arc::new(Metrics::new());
    let controller = tokio::spawn(run(
        prepared.client.clone(),
        Arc::new(SystemClock),
        ControllerOptions {
            poll: Duration::from_millis(100),
            metrics: metrics.clone(),
            power_poll: Some(Duration::from_millis(300)),
            power_poll_seed: 1,
            ..ControllerOptions::default()
        },
        std::future::pending(),
    ));
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
    prepared
        .cluster
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
    // Gentle: one read per interval for the one directly read host.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let made = reads(&metrics.encode()) - before;
    assert!(
        (2.0..=6.0).contains(&made),
        "{made} reads in four intervals"
    );
    controller.abort();
}
