//! The remediation controller end to end under faults: a controller stopped or crashing after
//! each persisted step, caches lagging behind the API server, injected API errors, fencing
//! requests removed behind its back and BMCs that never power off. Nothing destructive may
//! repeat and no Node may be released without a proof.

use std::sync::Arc;
use std::time::Duration;

use baremend::api::{Remediation, RemediationPhase};
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::local::{BMHS, NODES};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use serde_json::json;

use baremend_testkit as common;

use common::events::told_on_times;
use common::eventually;
use common::lab::{Lab, fast, fast_policy, steps};
use common::remediation::{
    assert_each_step_once, condition, held_at_fenced, options, start, start_prepared,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_that_never_powers_off_fails_the_remediation_and_the_node_is_never_deleted() {
    let mut policy = fast_policy();
    policy["timeouts"]["powerOffSeconds"] = json!(2);
    let lab = start_prepared(fast(), policy, |lab| lab.stuck_power("worker-0", true)).await;
    lab.cluster.hang("worker-0");
    let failed = lab.failed("worker-0-1").await;
    assert!(lab.node_exists("worker-0"));
    let steps = steps(&failed);
    // Both strategies were tried: the reboot API, then the BMC directly (refused: the host is
    // managed by the BareMetal Operator).
    assert!(steps.contains(&"Escalated".to_string()), "{steps:?}");
    assert!(!steps.iter().any(|s| s.starts_with("Node")), "{steps:?}");
    let status = failed.status.unwrap();
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("never confirmed"),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_or_detached_host_is_never_taken_as_fenced() {
    let mut policy = fast_policy();
    policy["strategies"] = json!(["BareMetalHostRebootApi"]);
    policy["timeouts"]["powerOffSeconds"] = json!(2);
    policy["maxConcurrent"] = json!(2);
    let lab = start_prepared(fast(), policy, |lab| {
        lab.api
            .merge(
                BMHS,
                MACHINE_NAMESPACE,
                "worker-0",
                &json!({"metadata": {"annotations": {"baremetalhost.metal3.io/paused": ""}}}),
                false,
            )
            .unwrap();
        lab.detach("worker-1");
    })
    .await;
    // The MachineHealthCheck would short-circuit with two of three workers down
    // (maxUnhealthy): trigger both directly.
    lab.trigger("worker-0", true);
    lab.trigger("worker-1", true);
    for name in ["worker-0-1", "worker-1-1"] {
        let failed = lab.failed(name).await;
        assert!(
            !steps(&failed).iter().any(|s| s.starts_with("Node")),
            "{name}: {:?}",
            steps(&failed)
        );
    }
    assert!(lab.node_exists("worker-0") && lab.node_exists("worker-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_stopped_while_fencing_and_while_powering_on_resumes_without_repeats() {
    let spec = ClusterSpec {
        timing: Timing {
            power_delay: Duration::from_millis(1500),
            boot_delay: Duration::from_millis(1500),
            ..Timing::fast()
        },
        ..fast()
    };
    let mut lab = start(spec, fast_policy()).await;
    lab.label("worker-0");
    lab.cluster.hang("worker-0");
    // Stopped with the power-off requested and not yet proven: the host goes off meanwhile.
    lab.reach("worker-0-1", RemediationPhase::PoweringOff).await;
    lab.kill().await;
    // A negative: for 2 s, longer than the host's power delay, nothing is released while the
    // controller is down; no condition to wait for proves that nothing happens.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(
        lab.node_exists("worker-0"),
        "nothing is released while the controller is down"
    );
    lab.start_controller(options(&lab));
    // Stopped again while waiting for the Node.
    lab.reach("worker-0-1", RemediationPhase::PoweringOn).await;
    lab.kill().await;
    // Down for a moment, as a restarted pod is; nothing is asserted after it but the wait
    // that follows.
    tokio::time::sleep(Duration::from_millis(500)).await;
    lab.start_controller(options(&lab));
    let done = lab.succeeded("worker-0-1").await;
    assert_each_step_once(&done);
    lab.assert_label_restored("worker-0", "the backup survived the restarts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_right_after_each_persisted_step_repeats_no_destructive_action() {
    // Each run crashes once, after the step is persisted and before it acts; the pass that
    // follows starts from what the server holds.
    for (crash, mode) in [
        ("PowerOffRequested", "Delete"),
        ("Fenced", "Delete"),
        ("NodeBackedUp", "Delete"),
        ("NodeDeleting", "Delete"),
        ("NodeDeleted", "Delete"),
        ("NodeTainting", "OutOfService"),
        ("PowerOnRequested", "Delete"),
        ("Restoring", "Delete"),
    ] {
        let mut policy = fast_policy();
        policy["nodeRelease"] = json!(mode);
        let mut lab = Lab::builder(fast()).policy(policy).start().await;
        lab.start_controller(ControllerOptions {
            after_persist: Some(crash_once_after(crash.to_string())),
            ..options(&lab)
        });
        lab.label("worker-0");
        lab.cluster.hang("worker-0");
        let done = lab.succeeded("worker-0-1").await;
        let steps = steps(&done);
        for once in [
            "PowerOffRequested",
            "Fenced",
            "PowerOnRequested",
            "Succeeded",
        ] {
            assert_eq!(
                steps.iter().filter(|s| *s == once).count(),
                1,
                "crash after {crash}: {once} in {steps:?}"
            );
        }
        let released = if mode == "Delete" {
            "NodeDeleted"
        } else {
            "NodeTainted"
        };
        assert_eq!(
            steps.iter().filter(|s| *s == released).count(),
            1,
            "crash after {crash}: {steps:?}"
        );
        // The host went off once and on once.
        let history = lab.cluster.host("worker-0").unwrap().host.history();
        assert_eq!(history.len(), 2, "crash after {crash}: {history:?}");
        lab.assert_label_restored("worker-0", &format!("crash after {crash}"));
        lab.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_cache_lagging_behind_the_trigger_removal_starts_no_second_power_cycle() {
    let lab = start(fast(), fast_policy()).await;
    lab.cluster.hang("worker-0");
    lab.reach("worker-0-1", RemediationPhase::PoweringOn).await;
    // From now on the controller's Machine watch is seconds late (a slow or broken watch):
    // it still shows the trigger when the Remediation's Succeeded arrives. Only the
    // cluster-wide watch is slowed, not reads of one Machine.
    let server = lab.cluster.api_server();
    server.slow_watch("v1beta1/machines", 6_000);
    lab.succeeded("worker-0-1").await;
    // Until the slowed watch has answered (the delay runs from when it was taken) and the
    // controller has seen the Machine as it is.
    assert!(
        server.pending_faults().is_empty(),
        "the watch was not slowed"
    );
    // A negative: 7 s, longer than the watch's 6 s delay, in which no second remediation
    // starts and the host is not powered off again; no condition to wait for proves that
    // nothing happens.
    lab.hold(Duration::from_secs(7)).await;
    assert!(
        lab.remediation("worker-0-2").is_none(),
        "a second remediation started on a stale trigger: {:#?}",
        lab.remediation("worker-0-2").and_then(|r| r.status)
    );
    assert_eq!(
        lab.power_history("worker-0"),
        [
            baremend_sim::host::Power::Off,
            baremend_sim::host::Power::On
        ],
        "the healthy host was powered off again"
    );
    lab.assert_machine_clean("worker-0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_and_conflicts_injected_by_the_server_lose_no_update_and_repeat_nothing() {
    use baremend_sim::apiserver::FaultRule;
    // Injected before the controller starts, so that its start meets them too.
    let lab = start_prepared(fast(), fast_policy(), |lab| {
        lab.label("worker-0");
        for (method, path, status) in [
            ("GET", "/version", 500),
            ("PUT", "/remediations/worker-0-1/status", 409),
            ("PATCH", "/baremetalhosts/worker-0", 429),
            ("DELETE", "/nodes/worker-0", 500),
            ("PATCH", "/machines/worker-0", 503),
            ("PATCH", "/nodes/worker-0", 409),
        ] {
            lab.cluster.api_server().inject(FaultRule {
                method: Some(method.into()),
                path_contains: Some(path.into()),
                status,
                count: Some(2),
                retry_after: Some(1),
                delay_ms: 0,
            });
        }
    })
    .await;
    let server = lab.cluster.api_server();
    lab.cluster.hang("worker-0");
    let done = lab.succeeded("worker-0-1").await;
    assert_each_step_once(&done);
    assert!(
        server.pending_faults().is_empty(),
        "every injected failure was met: {:?}",
        server.pending_faults()
    );
    lab.assert_label_restored("worker-0", "after injected failures");
    lab.assert_one_power_cycle("worker-0");
    lab.assert_machine_clean("worker-0");
}

/// A hook that abandons the pass once, right after `step` is persisted: what a crash there
/// leaves behind.
fn crash_once_after(step: String) -> baremend::remediation::controller::PersistHook {
    let crashed = std::sync::atomic::AtomicBool::new(false);
    baremend::remediation::controller::PersistHook(Arc::new(move |persisted: &str| {
        if persisted == step && !crashed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            Err(())
        } else {
            Ok(())
        }
    }))
}

fn has_step(remediation: &Option<Remediation>, step: &str) -> bool {
    remediation
        .as_ref()
        .is_some_and(|r| steps(r).iter().any(|s| s == step))
}

/// The quorum guard's count is the caches': a Node watch lagging behind a second member going
/// NotReady must not let a control-plane start go. The start reads its control plane's Nodes
/// again before the guard judges (docs/engineering/safety.md, "Safety gates").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cache_lagging_behind_the_control_plane_cannot_break_etcd_quorum() {
    let mut policy = fast_policy();
    policy["maxConcurrent"] = json!(5);
    policy["storm"] = json!({"maxUnhealthyPercent": 100});
    let lab = start(fast(), policy).await;
    // Its caches filled first (their first list is not the one to slow).
    eventually(
        "the controller ready",
        Duration::from_secs(10),
        async || lab.metrics.is_ready(),
    )
    .await;
    // From now on the controller's Node watch is a minute late: its cache shows every master
    // Ready throughout. Only the watch's next request is slowed, not the reads after it.
    let slowed = std::time::Instant::now();
    lab.cluster.api_server().slow_watch("v1/nodes", 60_000);
    lab.cluster.hang("master-0");
    lab.cluster.hang("master-1");
    lab.node_ready_is("master-1", "Unknown").await;
    lab.trigger("master-0", true);
    let status = lab.held_with("master-0-1", "etcd quorum").await;
    assert!(
        slowed.elapsed() < Duration::from_secs(60),
        "held only after the watch caught up"
    );
    assert_eq!(status.phase, RemediationPhase::Pending);
    assert!(lab.power_history("master-0").is_empty());
    assert!(lab.node_exists("master-0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_bare_metal_host_cache_cannot_release_a_node() {
    let (lab, old_uid) = held_at_fenced().await;
    // The controller's BareMetalHost watch freezes on `poweredOn: false` (only the
    // cluster-wide watch is slowed, not a read of one host)...
    let server = lab.cluster.api_server();
    server.slow_watch("v1alpha1/baremetalhosts", 60_000);
    // ...while the host comes back on and stays on whatever its operator asks.
    lab.stuck_power("worker-0", true);
    let host = &lab.cluster.host("worker-0").unwrap().host;
    host.set_power(baremend_sim::host::Power::On);
    // The release takes the proof from fresh reads, and whichever sees the host on first
    // decides how it ends; neither releases the Node. The operator's fresh status: the host
    // is fenced again in a new power cycle. Our own read of its BMC, corroborating a status
    // still Off: an On after its Off with our power-off the latest request is what no reader
    // can tell from a lie, so the BMC is untrustworthy and the fence is lost
    // (docs/engineering/safety.md, "The operator's word, corroborated by the BMC").
    eventually(
        "a new power cycle, or the fence lost on the BMC's own read",
        Duration::from_secs(30),
        async || {
            let remediation = lab.remediation("worker-0-1");
            let lost_on_the_bmc = remediation
                .as_ref()
                .and_then(|r| r.status.as_ref())
                .is_some_and(|s| {
                    s.conditions.iter().any(|c| {
                        c.reason == "FenceLost"
                            && c.message
                                .contains("the BareMetalHost reports off, but its BMC")
                    })
                });
            has_step(&remediation, "Retry") || lost_on_the_bmc
        },
    )
    .await;
    server.clear_faults();
    let failed = lab.failed("worker-0-1").await;
    let steps = steps(&failed);
    assert!(
        !steps.iter().any(|s| s == "NodeDeleted"),
        "a Node was released on a stale cache: {steps:?}"
    );
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert_eq!(node["metadata"]["uid"], old_uid, "the Node was kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reboot_request_removed_between_the_proof_and_the_release_is_made_again_with_a_warning()
{
    let (lab, _) = held_at_fenced().await;
    // Someone else removes our request (an admin, another controller, a restore).
    let key = "reboot.metal3.io/capbm-requested-power-off";
    lab.api
        .merge(
            BMHS,
            MACHINE_NAMESPACE,
            "worker-0",
            &json!({"metadata": {"annotations": {key: null}}}),
            false,
        )
        .unwrap();
    eventually(
        "the request made again",
        Duration::from_secs(30),
        async || {
            let remade = lab
                .remediation("worker-0-1")
                .and_then(|r| r.status)
                .is_some_and(|s| s.power_off_request_remade);
            let bmh = lab.api.get(BMHS, MACHINE_NAMESPACE, "worker-0").unwrap();
            remade && bmh["metadata"]["annotations"].get(key).is_some()
        },
    )
    .await;
    // A Warning on the Machine that names what happened, told once as the request is.
    told_on_times(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Machine", "worker-0"),
        "PowerOffRequestRemoved",
        "was removed from the host after it was fenced",
        1,
    )
    .await;
    lab.cluster.api_server().clear_faults();
    let done = lab.succeeded("worker-0-1").await;
    let steps = steps(&done);
    assert_eq!(
        steps
            .iter()
            .filter(|s| *s == "PowerOffRequestRemade")
            .count(),
        1,
        "{steps:?}"
    );
    assert_eq!(
        lab.power_history("worker-0").last(),
        Some(&baremend_sim::host::Power::On)
    );
    lab.assert_machine_clean("worker-0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_removed_twice_fails_fence_lost_and_keeps_the_node() {
    let (lab, old_uid) = held_at_fenced().await;
    // A second controller that keeps removing our request (the legacy actuator, say).
    let key = "reboot.metal3.io/capbm-requested-power-off";
    let remover = {
        let api = lab.api.clone();
        tokio::spawn(async move {
            loop {
                let _ = api.merge(
                    BMHS,
                    MACHINE_NAMESPACE,
                    "worker-0",
                    &json!({"metadata": {"annotations": {key: null}}}),
                    false,
                );
                // The remover's own pace (it acts every 50 ms), not a wait for a condition.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let failed = lab.failed("worker-0-1").await;
    remover.abort();
    let status = failed.status.clone().unwrap();
    assert_eq!(condition(&status, "Succeeded").reason, "FenceLost");
    assert_eq!(condition(&status, "Fenced").status, "False");
    assert!(
        status
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("the Node is kept")),
        "{status:?}"
    );
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert_eq!(node["metadata"]["uid"], old_uid, "the Node was kept");
    assert!(
        lab.machine_annotation(
            "worker-0",
            "remediation.metal3.io/powered-off-for-remediation"
        )
        .is_none(),
        "the Machine no longer claims a power-off nobody can prove"
    );
}

/// Issue 38, "failures that keep their cause". Before: a BareMetalHost whose BMC Secret has no
/// password (the BareMetal Operator reports a registration error) started its remediation,
/// sat in PoweringOff until the power-off deadline with no word of the error, then failed
/// with the next strategy's unrelated refusal ("managed by the BareMetal Operator … needs it
/// detached"). Now the operator's error is the cause, in its own words, within seconds: the
/// reboot API escalates at once, and the failure names the error it escalated for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_its_operator_reports_in_error_fails_fast_with_the_operators_words() {
    let mut policy = fast_policy();
    policy["timeouts"]["powerOffSeconds"] = json!(60);
    let lab = start_prepared(fast(), policy, |lab| {
        lab.api
            .merge(
                baremend_sim::cluster::local::SECRETS,
                MACHINE_NAMESPACE,
                "worker-1-bmc-secret",
                &json!({"data": {"password": null}}),
                false,
            )
            .unwrap();
    })
    .await;
    eventually(
        "the BareMetal Operator reports worker-1 in error",
        Duration::from_secs(20),
        async || {
            let host = lab.api.get(BMHS, MACHINE_NAMESPACE, "worker-1").unwrap();
            match host.pointer("/status/errorType").and_then(|t| t.as_str()) {
                Some("registration error") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    lab.cluster.hang("worker-1");
    // Timed from the start: the Remediation made.
    eventually("worker-1-1 made", Duration::from_secs(30), async || {
        lab.remediation("worker-1-1").is_some()
    })
    .await;
    let began = std::time::Instant::now();
    let failed = lab.failed("worker-1-1").await;
    let took = began.elapsed();
    let status = failed.status.unwrap();
    let error = status.last_error.unwrap_or_default();
    assert!(
        error.contains("registration error") && error.contains("no password"),
        "{error}"
    );
    assert!(
        took < Duration::from_secs(10),
        "failed {took:?} after its start: {error}"
    );
    assert!(lab.node_exists("worker-1"));
}
