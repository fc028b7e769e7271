//! The remediation controller end to end under its gates and policy: the storm gate, etcd
//! quorum, out-of-service mode on old servers, strategy edits, a paused policy and the dry
//! run (what it records, probes and names, and that it changes nothing).

use std::time::Duration;

use baremend::api::RemediationPhase;
use baremend_sim::cluster::local::{BMHS, NODES};
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use serde_json::{Value, json};

use baremend_testkit as common;

use common::events::told_on_times;
use common::eventually;
use common::lab::{
    Lab, REMEDIATIONS, direct_bmc_policy, fast, fast_policy, metric, patch_policy, steps,
};
use common::remediation::{
    assert_in_order, condition, held_at_fenced, options, start, start_prepared,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storm_gate_holds_new_remediations_with_a_condition() {
    let mut policy = fast_policy();
    policy["maxConcurrent"] = json!(5);
    policy["storm"] = json!({"maxUnhealthyPercent": 10});
    let lab = start(fast(), policy).await;
    // One or two of six machines (17 %, 33 %) triggered: above 10 %.
    lab.trigger("worker-0", true);
    lab.trigger("worker-1", true);
    lab.reach("worker-0-1", RemediationPhase::Pending).await;
    // The gate counts both triggers in a pass after the first.
    let status = lab.held_with("worker-0-1", "storm: 2 of 6").await;
    assert_eq!(status.phase, RemediationPhase::Pending);
    let condition = condition(&status, "Held");
    assert_eq!(condition.status, "True");
    assert!(
        condition.message.starts_with("storm: 2 of 6"),
        "{condition:?}"
    );
    assert!(lab.node_exists("worker-0") && lab.node_exists("worker-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_machine_is_held_when_fencing_would_break_etcd_quorum() {
    let mut policy = fast_policy();
    policy["maxConcurrent"] = json!(5);
    policy["storm"] = json!({"maxUnhealthyPercent": 100});
    let lab = start(fast(), policy).await;
    // Two of three control-plane hosts hang: one Ready remains, below a quorum of two.
    lab.cluster.hang("master-0");
    lab.cluster.hang("master-1");
    lab.node_ready_is("master-1", "Unknown").await;
    lab.trigger("master-0", true);
    let status = lab.held_with("master-0-1", "etcd quorum").await;
    assert_eq!(status.phase, RemediationPhase::Pending);
    let condition = condition(&status, "Held");
    assert!(condition.message.contains("etcd quorum"), "{condition:?}");
    assert!(lab.node_exists("master-0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_service_mode_is_held_on_a_server_older_than_1_28_until_the_policy_changes() {
    let spec = ClusterSpec {
        kubernetes_version: (1, 27),
        ..fast()
    };
    let mut policy = fast_policy();
    policy["nodeRelease"] = json!("OutOfService");
    let lab = start(spec, policy).await;
    lab.trigger("worker-0", true);
    let status = lab.held_with("worker-0-1", "").await;
    let condition = condition(&status, "Held");
    assert_eq!(condition.reason, "OutOfServiceUnsupported");
    assert!(condition.message.contains("1.28"), "{condition:?}");
    assert!(lab.power_history("worker-0").is_empty());
    eventually("the held gauge", Duration::from_secs(5), async || {
        let metrics = lab.metrics.encode();
        if metrics.contains("baremend_remediations_held{gate=\"OutOfServiceUnsupported\"} 1") {
            Ok(())
        } else {
            Err(metrics)
        }
    })
    .await;
    // Deleting Nodes works on any version: the operator switches and the start goes ahead.
    patch_policy(&lab, json!({"nodeRelease": "Delete"})).await;
    lab.succeeded("worker-0-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_edit_that_drops_the_strategy_in_use_is_reported_and_never_switches_it() {
    let lab = start(fast(), fast_policy()).await;
    lab.stuck_power("worker-0", true);
    lab.cluster.hang("worker-0");
    lab.reach("worker-0-1", RemediationPhase::PoweringOff).await;
    patch_policy(&lab, json!({"strategies": ["DirectBmc"]})).await;
    let failed = lab.failed("worker-0-1").await;
    let status = failed.status.clone().unwrap();
    let told = condition(&status, "StrategyInPolicy");
    assert_eq!(told.status, "False");
    assert_eq!(told.reason, "StrategyRemoved");
    assert_eq!(
        status.strategy.as_deref(),
        Some("BareMetalHostRebootApi"),
        "the strategy in use was kept"
    );
    assert_eq!(
        condition(&status, "Succeeded").reason,
        "PowerOffNotConfirmed"
    );
    assert!(
        status
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("no longer in the policy")),
        "{status:?}"
    );
    // Told once, on the Machine.
    told_on_times(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Machine", "worker-0"),
        "StrategyNotInPolicy",
        "no longer names strategy BareMetalHostRebootApi",
        1,
    )
    .await;
    assert!(lab.node_exists("worker-0"), "the Node was left alone");
}

/// Nothing of a dry run may show on the host, its BareMetalHost, its Node or its Machine.
fn assert_untouched(lab: &Lab, machine: &str, node_uid: &Value) {
    assert!(
        lab.power_history(machine).is_empty(),
        "{machine} power changed"
    );
    let bmh = lab.api.get(BMHS, MACHINE_NAMESPACE, machine).unwrap();
    assert!(
        bmh["metadata"]["annotations"]
            .as_object()
            .is_none_or(|a| !a.keys().any(|k| k.starts_with("reboot.metal3.io/"))),
        "no power request on the BareMetalHost: {bmh}"
    );
    let node = lab.api.get(NODES, "", machine).unwrap();
    assert_eq!(
        &node["metadata"]["uid"], node_uid,
        "the Node was not deleted"
    );
    assert!(
        node["spec"]["unschedulable"].as_bool() != Some(true),
        "not cordoned: {node}"
    );
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        !taints
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/out-of-service"),
        "not tainted: {taints:?}"
    );
    assert_eq!(
        lab.machine_annotation(machine, "remediation.metal3.io/powered-off-for-remediation"),
        None,
        "the Machine is not marked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_records_the_decision_and_the_probe_and_changes_nothing() {
    let mut policy = fast_policy();
    policy["mode"] = json!("DryRun");
    let lab = start(fast(), policy).await;
    let uid = lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    lab.cluster.hang("worker-0");
    let done = lab.reach("worker-0-1", RemediationPhase::DryRun).await;
    let status = done.status.unwrap();
    let dry = condition(&status, "DryRun");
    assert_eq!(
        (dry.status.as_str(), dry.reason.as_str()),
        ("True", "WouldFence")
    );
    for told in [
        "would fence with BareMetalHostRebootApi, then delete Node worker-0",
        "the start gates are open",
        "BareMetalHost openshift-machine-api/worker-0: managed, not detached, poweredOn true",
        "nothing was changed",
    ] {
        assert!(dry.message.contains(told), "{told:?} in {:?}", dry.message);
    }
    assert_eq!(status.strategy.as_deref(), Some("BareMetalHostRebootApi"));
    assert_eq!(steps(&lab.remediation("worker-0-1").unwrap()), ["DryRun"]);
    told_on_times(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Machine", "worker-0"),
        "DryRun",
        "would fence with BareMetalHostRebootApi, then delete Node worker-0",
        1,
    )
    .await;
    metric(
        &lab,
        "baremend_remediation_dry_runs_total{outcome=\"WouldFence\"} 1",
    )
    .await;
    assert_untouched(&lab, "worker-0", &uid);
    // The trigger stays: the health check owns it, and switching to Remediate acts on it.
    assert!(
        lab.machine_annotation("worker-0", "host.metal3.io/external-remediation")
            .is_some()
    );
    // A change of any other field wakes every Machine: still no second record while the
    // trigger stays (a record per pass would follow each wake-up).
    patch_policy(&lab, json!({"maxConcurrent": 2})).await;
    patch_policy(&lab, json!({"mode": "Remediate"})).await;
    let real = lab.succeeded("worker-0-2").await;
    assert_eq!(
        steps(&real).first().map(String::as_str),
        Some("PowerOffRequested")
    );
    assert_eq!(
        lab.remediation("worker-0-1").unwrap().status.unwrap().phase,
        RemediationPhase::DryRun
    );
    assert!(lab.remediation("worker-0-3").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_is_recorded_once_per_appearance_of_the_trigger() {
    let mut policy = fast_policy();
    policy["mode"] = json!("DryRun");
    let lab = start(fast(), policy).await;
    let uid = lab.api.get(NODES, "", "worker-1").unwrap()["metadata"]["uid"].clone();
    lab.trigger("worker-1", true);
    lab.reach("worker-1-1", RemediationPhase::DryRun).await;
    lab.trigger("worker-1", false);
    eventually(
        "TriggerCleared recorded",
        Duration::from_secs(10),
        async || {
            lab.remediation("worker-1-1")
                .is_some_and(|r| steps(&r).contains(&"TriggerCleared".to_string()))
        },
    )
    .await;
    assert!(lab.remediation("worker-1-2").is_none());
    lab.trigger("worker-1", true);
    lab.reach("worker-1-2", RemediationPhase::DryRun).await;
    // Another Machine's dry run and a policy change later, still two.
    patch_policy(&lab, json!({"maxConcurrent": 3})).await;
    lab.trigger("worker-2", true);
    lab.reach("worker-2-1", RemediationPhase::DryRun).await;
    metric(
        &lab,
        "baremend_remediation_dry_runs_total{outcome=\"WouldFence\"} 3",
    )
    .await;
    assert!(lab.remediation("worker-1-3").is_none());
    assert_untouched(&lab, "worker-1", &uid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_probes_the_bmc_and_records_a_failed_probe_without_leaking_or_retrying() {
    const WRONG: &str = "not-the-password-Zr4";
    let mut policy = direct_bmc_policy();
    policy["mode"] = json!("DryRun");
    policy["maxConcurrent"] = json!(2);
    let lab = start_prepared(fast(), policy, |lab| {
        lab.detach("worker-0");
        lab.detach("worker-1");
        lab.bmc_password("worker-0", WRONG, None);
    })
    .await;
    let uids: Vec<Value> = ["worker-0", "worker-1"]
        .iter()
        .map(|n| lab.api.get(NODES, "", n).unwrap()["metadata"]["uid"].clone())
        .collect();
    let before = lab.cluster.redfish().service().stats();
    lab.trigger("worker-0", true);
    lab.trigger("worker-1", true);
    // worker-0: the wrong password; its probe fails, and that is a record, not an error.
    let failed = lab.reach("worker-0-1", RemediationPhase::DryRun).await;
    let status = failed.status.unwrap();
    let dry = condition(&status, "DryRun");
    assert_eq!(dry.reason, "ProbeFailed");
    assert!(
        dry.message.contains("no fencing path answered its probe")
            && dry.message.contains("DirectBmc did not answer"),
        "{:?}",
        dry.message
    );
    assert_eq!(status.strategy, None);
    assert_eq!(status.last_error, None, "a failed probe is no error");
    let text = serde_json::to_string(&status).unwrap();
    assert!(
        !text.contains(WRONG),
        "the status leaks the password: {text}"
    );
    // worker-1: logged in and read its power.
    let answered = lab.reach("worker-1-1", RemediationPhase::DryRun).await;
    let dry = condition(answered.status.as_ref().unwrap(), "DryRun").clone();
    assert_eq!(dry.reason, "WouldFence");
    assert!(
        dry.message.contains("DirectBmc answered (BMC ")
            && dry.message.contains("logged in, system power On"),
        "{:?}",
        dry.message
    );
    // Once the Warning exists, no Event may carry the password.
    let probe_failed = ("DryRunProbeFailed", "no fencing path answered its probe");
    let worker_0 = ("Machine", "worker-0");
    let (reason, says) = probe_failed;
    told_on_times(&lab.api, MACHINE_NAMESPACE, worker_0, reason, says, 1).await;
    assert!(
        !lab.events_text().contains(WRONG),
        "Events leak the password"
    );
    metric(
        &lab,
        "baremend_remediation_dry_runs_total{outcome=\"ProbeFailed\"} 1",
    )
    .await;
    metric(
        &lab,
        "baremend_remediation_dry_runs_total{outcome=\"WouldFence\"} 1",
    )
    .await;
    // The probe's session is closed once the dry run is recorded; nothing was powered.
    eventually(
        "the probe's session closed",
        Duration::from_secs(5),
        async || {
            let after = lab.cluster.redfish().service().stats();
            if after.open_sessions == before.open_sessions {
                Ok(())
            } else {
                Err(format!("{after:?}"))
            }
        },
    )
    .await;
    for (machine, uid) in ["worker-0", "worker-1"].iter().zip(&uids) {
        assert_untouched(&lab, machine, uid);
    }
    // One login per probe, the refused one not tried again: a policy change wakes every
    // Machine (the triggers stay), and ten of the controller's polls later nothing more.
    patch_policy(&lab, json!({"maxConcurrent": 3})).await;
    lab.hold(options(&lab).poll * 10).await;
    let after = lab.cluster.redfish().service().stats();
    let logins = after.logins - before.logins;
    let refused = after.authentication_failures - before.authentication_failures;
    assert_eq!((logins, refused), (2, 1), "{after:?} (before: {before:?})");
    // Nor told again.
    told_on_times(&lab.api, MACHINE_NAMESPACE, worker_0, reason, says, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_policy_holds_a_new_start_and_lets_a_fenced_remediation_finish() {
    let (lab, _) = held_at_fenced().await;
    patch_policy(&lab, json!({"paused": true, "maxConcurrent": 2})).await;
    lab.trigger("worker-1", true);
    let status = lab.held_with("worker-1-1", "paused").await;
    let held = condition(&status, "Held");
    assert_eq!(held.reason, "Paused");
    assert!(held.message.contains("spec.paused"), "{held:?}");
    // Told once, on the held Remediation.
    told_on_times(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Remediation", "worker-1-1"),
        "Held",
        "RemediationPolicy is paused",
        1,
    )
    .await;
    metric(&lab, "baremend_remediations_held{gate=\"Paused\"} 1").await;
    // The cycle under way finishes while paused: a half-done cycle is the dangerous state.
    lab.cluster.api_server().clear_faults();
    let done = lab.succeeded("worker-0-1").await;
    assert_in_order(
        &done,
        &["Fenced", "NodeDeleted", "PowerOnRequested", "Succeeded"],
    );
    let still = lab.remediation("worker-1-1").unwrap().status.unwrap();
    assert_eq!(still.phase, RemediationPhase::Pending);
    assert!(lab.power_history("worker-1").is_empty());
    // Unpaused, the held start goes ahead.
    patch_policy(&lab, json!({"paused": false})).await;
    lab.succeeded("worker-1-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_label_put_on_a_remediation_under_way_opens_no_gate_and_is_taken_off() {
    let (lab, _) = held_at_fenced().await;
    // A hand (or a restore from a backup) marks the one under way Succeeded, which leaves it
    // out of a start's fresh read of the Remediations that may hold a host.
    let outcome = baremend::api::OUTCOME_LABEL;
    let label = json!({"metadata": {"labels": {outcome: "Succeeded"}}});
    lab.api
        .merge(REMEDIATIONS, MACHINE_NAMESPACE, "worker-0-1", &label, false)
        .unwrap();
    // The gates judge the cached phases first: maxConcurrent (1) still counts it.
    lab.trigger("worker-1", true);
    lab.held_with("worker-1-1", "allows 1 at once").await;
    assert!(lab.power_history("worker-1").is_empty());
    // And the next pass of its Machine takes the label off.
    eventually("the label taken off", Duration::from_secs(10), async || {
        let labels = lab.remediation("worker-0-1").unwrap().metadata.labels;
        match labels.unwrap_or_default().get(outcome) {
            None => Ok(()),
            Some(value) => Err(format!("still {value:?}")),
        }
    })
    .await;
    let status = lab.remediation("worker-0-1").unwrap().status.unwrap();
    assert_eq!(status.phase, RemediationPhase::Fenced);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_to_dry_run_mid_cycle_lets_the_fenced_remediation_finish_under_remediate() {
    let (lab, _) = held_at_fenced().await;
    patch_policy(&lab, json!({"mode": "DryRun"})).await;
    lab.cluster.api_server().clear_faults();
    let done = lab.succeeded("worker-0-1").await;
    assert_in_order(
        &done,
        &["Fenced", "NodeDeleted", "PowerOnRequested", "Succeeded"],
    );
    lab.assert_one_power_cycle("worker-0");
    lab.assert_machine_clean("worker-0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_names_the_gate_that_would_hold_the_start() {
    let mut policy = fast_policy();
    policy["mode"] = json!("DryRun");
    policy["maxConcurrent"] = json!(5);
    policy["storm"] = json!({"maxUnhealthyPercent": 10});
    let lab = start(fast(), policy).await;
    // Two of six machines triggered (33 %), above 10 %: a real start would be held.
    lab.trigger("worker-0", true);
    lab.trigger("worker-1", true);
    let recorded = lab.reach("worker-1-1", RemediationPhase::DryRun).await;
    let dry = condition(recorded.status.as_ref().unwrap(), "DryRun").clone();
    assert_eq!(dry.reason, "WouldHold");
    assert!(
        dry.message
            .contains("gate Storm would hold the start: storm: 2 of 6"),
        "{:?}",
        dry.message
    );
    assert!(
        dry.message
            .contains("would fence with BareMetalHostRebootApi"),
        "{:?}",
        dry.message
    );
    metric(
        &lab,
        "baremend_remediation_dry_runs_total{outcome=\"WouldHold\"}",
    )
    .await;
    for machine in ["worker-0", "worker-1"] {
        assert!(lab.power_history(machine).is_empty(), "{machine}");
        assert!(lab.node_exists(machine));
    }
}
