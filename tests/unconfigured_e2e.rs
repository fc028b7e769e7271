//! A cluster where the policies were never created (an install step skipped, a policy
//! deleted): the controller runs safe — remediation in DryRun, drift in Observe — and says so
//! in a gauge and, for remediation, a Warning Event on each dry run.

use std::time::Duration;

use baremend::api::{DriftPhase, RemediationPhase};
use baremend_sim::cluster::ClusterSpec;
use baremend_sim::cluster::local::NODES;
use baremend_sim::cluster::timing::Timing;
use serde_json::json;

use baremend_testkit as common;
use common::drift::DriftLab;

use common::eventually;
use common::lab::{Lab, fast, metric, warning_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_remediation_policy_a_hung_worker_gets_a_dry_run_that_says_why() {
    let mut lab = Lab::builder(fast()).without_policy().start().await;
    lab.start_controller(lab.options());
    metric(
        &lab,
        "baremend_policy_missing{kind=\"RemediationPolicy\"} 1",
    )
    .await;
    lab.cluster.hang("worker-0");
    let dry = lab.reach("worker-0-1", RemediationPhase::DryRun).await;
    assert_eq!(dry.status.unwrap().phase, RemediationPhase::DryRun);
    warning_on(
        &lab,
        ("Machine", "worker-0"),
        "PolicyMissing",
        "no RemediationPolicy named default",
    )
    .await;
    // Nothing was done to the host or its Node.
    assert!(lab.power_history("worker-0").is_empty());
    assert!(lab.node_exists("worker-0"));
    // Once the policy exists the gauge says so.
    lab.install_policy(json!({"mode": "DryRun"})).await.unwrap();
    metric(
        &lab,
        "baremend_policy_missing{kind=\"RemediationPolicy\"} 0",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_drift_policy_drift_is_observed_and_nothing_is_done() {
    let spec = ClusterSpec {
        masters: 1,
        workers: 2,
        timing: Timing::fast(),
        mco: true,
        ..ClusterSpec::default()
    };
    let mut lab = Lab::builder(spec).start().await;
    lab.start_coordinator();
    metric(&lab, "baremend_policy_missing{kind=\"DriftPolicy\"} 1").await;
    let boots = lab.reboots("worker-0");
    lab.drift("worker-0");
    // The defaults debounce drift for 30 s before a start is judged.
    let held = eventually(
        "worker-0-1 held ObserveOnly",
        Duration::from_secs(60),
        async || {
            let held = lab.drift_remediation("worker-0-1").and_then(|r| {
                let status = r.status.clone()?;
                status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Held" && c.status == "True" && c.reason == "ObserveOnly")
                    .then_some(r)
            });
            held.ok_or("not held yet")
        },
    )
    .await;
    assert_eq!(held.status.unwrap().phase, DriftPhase::Pending);
    assert!(!lab.forcefile("worker-0"), "a forcefile was written");
    assert_eq!(lab.reboots("worker-0"), boots, "worker-0 rebooted");
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert_ne!(node["spec"]["unschedulable"], true, "worker-0 cordoned");
    lab.stop().await;
}
