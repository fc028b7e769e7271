//! The fencing readiness check against the simulated cluster: every Machine's fencing path is
//! checked without disruption, and what would make a fence hang — a wrong password, an
//! unreachable BMC, a host its operator would not act on or reports in error — shows up as
//! `baremend_fencing_ready` 0 and a `FencingNotReady` Event naming the reason, before any
//! host fails; fixing it brings a `FencingReady` Event. Nothing is ever powered.

use std::time::Duration;

use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::MACHINE_NAMESPACE;
use baremend_sim::cluster::local::{BMHS, EVENTS};
use serde_json::{Value, json};

use baremend_testkit as common;

use common::eventually;
use common::lab::{Lab, fast, metric, patch_policy};

const WRONG: &str = "not-the-bmc-password";

/// The value of the readiness series of `machine` on `path`, if shown.
fn ready(text: &str, machine: &str, path: &str) -> Option<f64> {
    let labels = format!(
        "baremend_fencing_ready{{machine=\"{MACHINE_NAMESPACE}/{machine}\",node=\"{machine}\",path=\"{path}\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&labels))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits until `machine`'s series on `path` shows `value`.
async fn until_ready(lab: &Lab, machine: &str, path: &str, value: f64) {
    eventually(
        &format!("{machine} fencing_ready on {path} = {value}"),
        Duration::from_secs(20),
        async || {
            let text = lab.metrics.encode();
            let shown: Vec<&str> = text.lines().filter(|l| l.contains("fencing")).collect();
            (ready(&text, machine, path) == Some(value))
                .then_some(())
                .ok_or(shown.join("\n"))
        },
    )
    .await;
}

fn merge_host(lab: &Lab, host: &str, patch: Value) {
    lab.api
        .merge(BMHS, MACHINE_NAMESPACE, host, &patch, false)
        .unwrap();
}

fn started(lab: &mut Lab) {
    let options = ControllerOptions {
        fencing_check: Some(Duration::from_millis(300)),
        power_poll_seed: 3,
        ..lab.options()
    };
    lab.start_controller(options);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_and_an_unreachable_bmc_show_before_any_host_fails() {
    let mut lab = Lab::builder(fast()).start().await;
    lab.detach("worker-1");
    started(&mut lab);
    // worker-0 through its operator, worker-1 (detached) through its Redfish BMC.
    until_ready(&lab, "worker-0", "reboot-api", 1.0).await;
    until_ready(&lab, "worker-1", "redfish", 1.0).await;
    until_ready(&lab, "master-0", "reboot-api", 1.0).await;
    let before = lab.cluster.redfish().service().stats();

    let wrong_since = std::time::Instant::now();
    lab.bmc_password("worker-1", WRONG, None);
    until_ready(&lab, "worker-1", "redfish", 0.0).await;
    let note = lab
        .machine_told("worker-1", "FencingNotReady", "CredentialsRefused")
        .await;
    assert!(note.contains("NOT READY"), "{note}");
    // The counts by reason are set at the end of a round, after each Machine's own series.
    metric(
        &lab,
        "baremend_fencing_not_ready{reason=\"CredentialsRefused\"} 1",
    )
    .await;

    lab.bmc_password("worker-1", lab.cluster.bmc_password(), None);
    let wrong_for = wrong_since.elapsed();
    until_ready(&lab, "worker-1", "redfish", 1.0).await;
    lab.machine_told("worker-1", "FencingReady", "READY").await;
    let after = lab.cluster.redfish().service().stats();
    assert_eq!(after.resets, before.resets, "a check never asks for power");
    // One login a check (every 300 ms here, every 10 minutes by default), never a retry on a
    // refusal: no lock-out storm. Nothing else logs in to worker-1's BMC in this test (no
    // power monitor, and its BareMetal Operator let go of it).
    let refused = after.authentication_failures - before.authentication_failures;
    let checks = wrong_for.as_millis() / 300 + 2;
    assert!(
        refused >= 1 && u128::from(refused) <= checks,
        "{refused} refused logins in {wrong_for:?} (at most {checks} checks)"
    );
    println!("{refused} refused logins while the password was wrong for {wrong_for:?}");

    // Unreachable: its address on a port nobody listens on.
    let original =
        lab.api.get(BMHS, MACHINE_NAMESPACE, "worker-1").unwrap()["spec"]["bmc"]["address"].clone();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let address = format!("redfish+http://127.0.0.1:{port}/redfish/v1/Systems/worker-1");
    merge_host(
        &lab,
        "worker-1",
        json!({"spec": {"bmc": {"address": address}}}),
    );
    until_ready(&lab, "worker-1", "redfish", 0.0).await;
    lab.machine_told("worker-1", "FencingNotReady", "Unreachable")
        .await;
    merge_host(
        &lab,
        "worker-1",
        json!({"spec": {"bmc": {"address": original}}}),
    );
    until_ready(&lab, "worker-1", "redfish", 1.0).await;

    let events = serde_json::to_string(&lab.api.list(EVENTS, Some(MACHINE_NAMESPACE))).unwrap();
    assert!(!events.contains(WRONG), "Events leak the password");
    assert!(!lab.metrics.encode().contains(WRONG));
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_its_operator_would_not_act_on_is_not_ready_naming_why() {
    let mut lab = Lab::builder(fast()).start().await;
    started(&mut lab);
    until_ready(&lab, "worker-2", "reboot-api", 1.0).await;

    // Paused: the operator would not act on a reboot request (and it manages the host, so
    // its BMC may not be used directly either).
    merge_host(
        &lab,
        "worker-2",
        json!({"metadata": {"annotations": {"baremetalhost.metal3.io/paused": ""}}}),
    );
    until_ready(&lab, "worker-2", "reboot-api", 0.0).await;
    lab.machine_told("worker-2", "FencingNotReady", "HostPaused")
        .await;
    merge_host(
        &lab,
        "worker-2",
        json!({"metadata": {"annotations": {"baremetalhost.metal3.io/paused": null}}}),
    );
    until_ready(&lab, "worker-2", "reboot-api", 1.0).await;
    lab.machine_told("worker-2", "FencingReady", "READY").await;

    // In error: its operator cannot register it (a Secret that does not exist).
    merge_host(
        &lab,
        "worker-2",
        json!({"spec": {"bmc": {"credentialsName": "no-such-secret"}}}),
    );
    until_ready(&lab, "worker-2", "reboot-api", 0.0).await;
    lab.machine_told("worker-2", "FencingNotReady", "registration error")
        .await;

    // Only the reboot API in the policy: a detached host has no path left.
    patch_policy(&lab, json!({"strategies": ["BareMetalHostRebootApi"]})).await;
    lab.detach("worker-1");
    until_ready(&lab, "worker-1", "reboot-api", 0.0).await;
    lab.machine_told("worker-1", "FencingNotReady", "HostDetached")
        .await;
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipmi_bmc_is_checked_with_a_session_that_is_closed_and_no_chassis_control() {
    let spec = baremend_sim::cluster::ClusterSpec {
        ipmi: true,
        bmh_uses_ipmi: true,
        ..fast()
    };
    let mut lab = Lab::builder(spec).start().await;
    lab.detach("worker-1");
    started(&mut lab);
    until_ready(&lab, "worker-1", "ipmi", 1.0).await;
    let controls = |lab: &Lab| -> Vec<Vec<u8>> {
        lab.cluster
            .ipmi()
            .iter()
            .map(|sim| sim.stats().chassis_controls)
            .collect()
    };
    let before = controls(&lab);

    lab.bmc_password("worker-1", WRONG, None);
    until_ready(&lab, "worker-1", "ipmi", 0.0).await;
    let note = lab
        .machine_told("worker-1", "FencingNotReady", "CredentialsRefused")
        .await;
    assert!(note.contains("ipmi://"), "{note}");
    lab.bmc_password("worker-1", lab.cluster.bmc_password(), None);
    until_ready(&lab, "worker-1", "ipmi", 1.0).await;
    lab.machine_told("worker-1", "FencingReady", "READY").await;
    lab.stop().await;

    assert_eq!(
        controls(&lab),
        before,
        "a check never sends a chassis control"
    );
    eventually(
        "every IPMI session closed",
        Duration::from_secs(10),
        async || {
            let open: usize = lab
                .cluster
                .ipmi()
                .iter()
                .map(|sim| sim.stats().open_sessions)
                .sum();
            (open == 0).then_some(()).ok_or(open)
        },
    )
    .await;
}

/// On Cluster API the controller's periodic check finds each host through the Machine's
/// Metal3Machine (as `baremend check --machine-api cluster-api` does): the reboot API is ready
/// for every Machine, and a Metal3Machine that is gone shows as its Machine's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_cluster_api_the_check_finds_each_host_through_its_metal3_machine() {
    let mut lab = Lab::builder(baremend_sim::cluster::ClusterSpec {
        cluster_api: true,
        ..fast()
    })
    .start()
    .await;
    let options = ControllerOptions {
        fencing_check: Some(Duration::from_millis(300)),
        power_poll_seed: 3,
        machine_api: baremend::api::slim::MachineApi::ClusterApi,
        ..lab.options()
    };
    lab.start_controller(options);
    for machine in ["worker-0", "worker-1", "master-0"] {
        until_ready(&lab, machine, "reboot-api", 1.0).await;
    }
    lab.api
        .delete(
            baremend_sim::cluster::local::METAL3_MACHINES,
            MACHINE_NAMESPACE,
            "worker-2",
            Some(0),
        )
        .unwrap();
    let note = lab
        .machine_told("worker-2", "FencingNotReady", "NoFencingPath")
        .await;
    assert!(
        note.contains("Metal3Machine openshift-machine-api/worker-2 not found"),
        "{note}"
    );
}
