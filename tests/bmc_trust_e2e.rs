//! Whose word counts, end to end (docs/engineering/safety.md, "Whose word counts"): a BMC reached over
//! plain HTTP proves nothing without the policy's `allowInsecureBmc` — the readiness check
//! says why and the start is held — and a BMC that contradicts itself proves nothing, fails
//! the remediation under way without releasing the Node, is shown untrustworthy, and holds
//! the next start until its mark expires.

use std::time::Duration;

use baremend::api::RemediationPhase;
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::MACHINE_NAMESPACE;
use baremend_sim::host::Faults;
use serde_json::json;

use baremend_testkit as common;

use common::lab::{Lab, REMEDIATIONS, fast, metric, patch_policy, warning_on};

fn policy(allow_insecure: bool) -> serde_json::Value {
    json!({
        "strategies": ["DirectBmc"],
        "allowInsecureBmc": allow_insecure,
        "timeouts": {"powerOffSeconds": 10, "nodeReadySeconds": 60, "readyGraceSeconds": 1},
    })
}

/// Asks for a retry of the failed remediation `name`, as an operator does.
fn retry(lab: &Lab, name: &str) {
    let retry = json!({"metadata": {"annotations": {"baremend.io/retry": "true"}}});
    lab.api
        .merge(REMEDIATIONS, MACHINE_NAMESPACE, name, &retry, false)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_bmc_holds_the_start_and_fails_the_check_until_the_policy_allows_it() {
    let mut lab = Lab::builder(fast()).policy(policy(false)).start().await;
    // Fenced over its Redfish BMC, which the simulated cluster serves over plain HTTP.
    lab.detach("worker-1");
    lab.start_controller(ControllerOptions {
        fencing_check: Some(Duration::from_millis(300)),
        power_poll_seed: 3,
        ..lab.options()
    });
    // Before anything hangs, the readiness check names the reason.
    warning_on(
        &lab,
        ("Machine", "worker-1"),
        "FencingNotReady",
        "InsecureTransport",
    )
    .await;
    metric(
        &lab,
        "baremend_fencing_not_ready{reason=\"InsecureTransport\"} 1",
    )
    .await;

    lab.cluster.hang("worker-1");
    lab.trigger("worker-1", true);
    lab.held_with("worker-1-1", "allowInsecureBmc").await;
    metric(&lab, "baremend_remediations_held{gate=\"InsecureBmc\"} 1").await;
    warning_on(&lab, ("Remediation", "worker-1-1"), "Held", "plain HTTP").await;
    assert!(
        lab.power_history("worker-1").is_empty(),
        "a held start asks for no power change"
    );

    // The operator consents: the start goes on, fenced over the same BMC.
    patch_policy(&lab, json!({"allowInsecureBmc": true})).await;
    let done = lab.ended("worker-1-1").await;
    let status = done.status.unwrap();
    assert_eq!(status.phase, RemediationPhase::Succeeded, "{status:?}");
    assert_eq!(status.strategy.as_deref(), Some("DirectBmc"));
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_that_contradicts_itself_releases_nothing_and_holds_the_next_start_for_a_while() {
    let mut lab = Lab::builder(fast()).policy(policy(true)).start().await;
    lab.detach("worker-1");
    lab.start_controller(ControllerOptions {
        // The monitor reads the BMC too: its readings are evidence as well.
        power_poll: Some(Duration::from_millis(100)),
        power_poll_seed: 5,
        bmc_distrust: Duration::from_secs(4),
        ..lab.options()
    });
    let info = lab.cluster.host("worker-1").unwrap();
    let host = info.host.clone();
    let address = info.bmc_address(false);
    // The BMC answers On and Off in turn, whatever the host does.
    host.set_faults(Faults {
        flapping: true,
        ..Faults::default()
    });
    lab.cluster.hang("worker-1");
    lab.trigger("worker-1", true);
    let failed = lab.reach("worker-1-1", RemediationPhase::Failed).await;
    let status = failed.status.unwrap();
    let error = status.last_error.clone().unwrap_or_default();
    assert!(error.contains("contradicted itself"), "{error}");
    assert!(
        lab.node_exists("worker-1"),
        "the Node was released on a false Off"
    );
    metric(
        &lab,
        &format!("baremend_bmc_untrustworthy{{bmc=\"{address}\"}} 1"),
    )
    .await;

    // Retried while the BMC is untrustworthy (it still flaps): held, the host untouched.
    let requests = host.requests().len();
    retry(&lab, "worker-1-1");
    lab.held_with("worker-1-2", "contradicted itself").await;
    metric(
        &lab,
        "baremend_remediations_held{gate=\"BmcUntrustworthy\"} 1",
    )
    .await;
    assert_eq!(
        host.requests().len(),
        requests,
        "no power request while held"
    );

    // The BMC tells the truth again: once the mark expires the start goes on.
    host.set_faults(Faults::default());
    let done = lab.ended("worker-1-2").await;
    let status = done.status.unwrap();
    assert_eq!(status.phase, RemediationPhase::Succeeded, "{status:?}");
    let shown = lab.metrics.encode();
    assert!(
        !shown.contains("baremend_bmc_untrustworthy{"),
        "the mark expired: {shown}"
    );
    lab.stop().await;
}

/// The BareMetal Operator reads a flapping BMC for us (docs/engineering/safety.md, "The
/// operator's word, corroborated by the BMC"): its `status.poweredOn: false` is voided by our
/// own read-only reads of the host's BMC, the Node is kept; a truthful BMC corroborates the
/// operator's Off and the Fenced Event says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_bmc_voids_its_operator_s_off_and_a_truthful_one_corroborates_it() {
    let policy = json!({
        "strategies": ["BareMetalHostRebootApi"],
        "timeouts": {"powerOffSeconds": 10, "nodeReadySeconds": 60, "readyGraceSeconds": 1},
    });
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    lab.start_controller(ControllerOptions {
        bmc_distrust: Duration::from_secs(30),
        ..lab.options()
    });
    let info = lab.cluster.host("worker-1").unwrap();
    let (host, address) = (info.host.clone(), info.bmc_address(false));
    host.set_faults(Faults {
        flapping: true,
        ..Faults::default()
    });
    lab.cluster.hang("worker-1");
    lab.trigger("worker-1", true);
    let failed = lab.reach("worker-1-1", RemediationPhase::Failed).await;
    let status = failed.status.unwrap();
    let error = status.last_error.clone().unwrap_or_default();
    assert!(
        error.contains(&format!("its BMC {address}")) && error.contains("contradicted itself"),
        "{error}"
    );
    assert!(
        lab.node_exists("worker-1"),
        "the Node was released on the operator's reading of a flapping BMC"
    );
    metric(
        &lab,
        &format!("baremend_bmc_untrustworthy{{bmc=\"{address}\"}} 1"),
    )
    .await;
    // Retried while its BMC is untrustworthy: held, as its reads would void any proof.
    retry(&lab, "worker-1-1");
    lab.held_with("worker-1-2", "contradicted itself").await;

    // A BMC that tells the truth corroborates its operator's Off.
    let other = lab.cluster.host("worker-2").unwrap().bmc_address(false);
    lab.cluster.hang("worker-2");
    lab.trigger("worker-2", true);
    let done = lab.ended("worker-2-1").await;
    let status = done.status.unwrap();
    assert_eq!(status.phase, RemediationPhase::Succeeded, "{status:?}");
    common::events::told_on(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Remediation", "worker-2-1"),
        "Fenced",
        &format!("(its BMC {other} read Off 2 times)"),
    )
    .await;
    lab.stop().await;
}
