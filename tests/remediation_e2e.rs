//! The remediation controller end to end: the simulated cluster (API server over HTTPS,
//! kubelets, MachineHealthCheck, BareMetal Operator, simulated BMCs) and the controller on a
//! real kube client, in one process.

use std::sync::Arc;
use std::time::Duration;

use baremend::api::{Remediation, RemediationPhase};
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::local::{BMHS, EVENTS, MACHINES, NODES};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use serde_json::{Value, json};

mod common;

use common::events::told_on;
use common::eventually;
use common::lab::{Lab, fast, fast_policy, metric, patch_policy, steps};

/// The lab with the controller started.
async fn start(spec: ClusterSpec, policy: Value) -> Lab {
    start_prepared(spec, policy, |_| {}).await
}

/// The lab, changed by `prepare` before the controller starts.
async fn start_prepared(spec: ClusterSpec, policy: Value, prepare: impl FnOnce(&Lab)) -> Lab {
    let mut lab = Lab::builder(spec).policy(policy).start().await;
    prepare(&lab);
    lab.start_controller(options(&lab));
    lab
}

/// The controller's options in this file.
fn options(lab: &Lab) -> ControllerOptions {
    ControllerOptions {
        instance: "test".into(),
        ..lab.options()
    }
}

impl Lab {
    async fn succeeded(&self, name: &str) -> Remediation {
        let done = self.reach(name, RemediationPhase::Succeeded).await;
        self.assert_no_actor_refused();
        done
    }

    async fn failed(&self, name: &str) -> Remediation {
        self.reach(name, RemediationPhase::Failed).await
    }

    fn label(&self, node: &str) {
        self.api
            .merge(
                NODES,
                "",
                node,
                &json!({"metadata": {"labels": {"team": "db"}}}),
                false,
            )
            .unwrap();
    }

    /// `host` was powered off once and on once.
    fn assert_one_power_cycle(&self, host: &str) {
        assert_eq!(
            self.power_history(host),
            [
                baremend_sim::host::Power::Off,
                baremend_sim::host::Power::On
            ],
            "{host}"
        );
    }

    fn assert_label_restored(&self, node: &str, context: &str) {
        let node = self.api.get(NODES, "", node).unwrap();
        assert_eq!(node["metadata"]["labels"]["team"], "db", "{context}");
    }

    /// Merges `patch` into a Machine.
    fn merge_machine(&self, name: &str, patch: Value) {
        self.api
            .merge(MACHINES, MACHINE_NAMESPACE, name, &patch, false)
            .unwrap();
    }

    /// Merges `bmc` into a BareMetalHost's `spec.bmc`.
    fn set_bmc(&self, host: &str, bmc: Value) {
        self.api
            .merge(
                BMHS,
                MACHINE_NAMESPACE,
                host,
                &json!({"spec": {"bmc": bmc}}),
                false,
            )
            .unwrap();
    }

    /// One annotation of a Machine, if it has it.
    fn machine_annotation(&self, name: &str, key: &str) -> Option<Value> {
        let machine = self.api.get(MACHINES, MACHINE_NAMESPACE, name).unwrap();
        machine["metadata"]["annotations"].get(key).cloned()
    }

    /// Neither the trigger nor our power-off mark is left on the Machine.
    fn assert_machine_clean(&self, name: &str) {
        let machine = self.api.get(MACHINES, MACHINE_NAMESPACE, name).unwrap();
        let annotations = machine["metadata"]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for key in [
            "host.metal3.io/external-remediation",
            "remediation.metal3.io/powered-off-for-remediation",
        ] {
            assert!(!annotations.contains_key(key), "{name}: {annotations:?}");
        }
    }

    /// Every Event in the Machines' namespace, as JSON text.
    fn events_text(&self) -> String {
        let events = self.api.list(EVENTS, Some(MACHINE_NAMESPACE));
        serde_json::to_string(&events).unwrap()
    }

    /// The Events (as `events_text`) once they tell `what` (`told` holds); fails after 10 s.
    /// A step's Events are published after its status is persisted, so a test that saw the
    /// phase may be a moment ahead of them.
    async fn told(&self, what: &str, told: impl Fn(&str) -> bool) -> String {
        eventually(what, Duration::from_secs(10), async || {
            let text = self.events_text();
            if told(&text) { Ok(text) } else { Err(text) }
        })
        .await
    }
}

/// Every step of a deleting remediation happened exactly once.
fn assert_each_step_once(remediation: &Remediation) {
    common::lab::assert_each_step_once(&steps(remediation));
}

/// The condition of that type; the test fails without it.
fn condition<'a>(
    status: &'a baremend::api::RemediationStatus,
    type_: &str,
) -> &'a baremend::api::Condition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status:?}"))
}

/// The Remediation's status once its Held condition is True and says `message`; fails
/// after 20 s.
async fn held_with(lab: &Lab, name: &str, message: &str) -> baremend::api::RemediationStatus {
    lab.held_with(name, message).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_is_fenced_through_the_reboot_api_deleted_powered_on_and_restored() {
    let lab = start(fast(), fast_policy()).await;
    // A label an operator added, which the new Node will not have.
    lab.label("worker-0");
    let old_uid = lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    assert!(lab.cluster.hang("worker-0"));
    let done = lab.succeeded("worker-0-1").await;
    let steps = steps(&done);
    let position = |s: &str| {
        steps
            .iter()
            .position(|x| x == s)
            .unwrap_or_else(|| panic!("{s} in {steps:?}"))
    };
    assert!(position("Fenced") < position("NodeDeleted"), "{steps:?}");
    assert!(
        position("NodeBackedUp") < position("NodeDeleted"),
        "{steps:?}"
    );
    assert!(
        position("NodeDeleted") < position("PowerOnRequested"),
        "{steps:?}"
    );
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert_ne!(node["metadata"]["uid"], old_uid, "a new Node registered");
    assert_eq!(
        node["metadata"]["labels"]["team"], "db",
        "the label was restored"
    );
    lab.assert_machine_clean("worker-0");
    let bmh = lab
        .api
        .get(
            baremend_sim::cluster::local::BMHS,
            MACHINE_NAMESPACE,
            "worker-0",
        )
        .unwrap();
    assert!(
        bmh["metadata"]["annotations"]
            .as_object()
            .is_none_or(|a| !a.keys().any(|k| k.starts_with("reboot.metal3.io/"))),
        "the power-off request is gone: {bmh}"
    );
    assert_eq!(
        done.status.unwrap().strategy.as_deref(),
        Some("BareMetalHostRebootApi")
    );
    // Every step is told on the Machine (where `kubectl describe machine` shows it) and on
    // the Remediation, each naming the other. The Succeeded Events follow the persisted
    // phase: wait for them, do not race them.
    eventually("every step's Events", Duration::from_secs(10), async || {
        let events = lab.api.list(EVENTS, Some(MACHINE_NAMESPACE));
        let mut missing = Vec::new();
        for reason in [
            "PowerOffRequested",
            "Fenced",
            "NodeBackedUp",
            "NodeDeleted",
            "PowerOnRequested",
            "Restoring",
            "Succeeded",
        ] {
            for (kind, name, related) in [
                ("Machine", "worker-0", "Remediation"),
                ("Remediation", "worker-0-1", "Machine"),
            ] {
                if !events.iter().any(|e| {
                    e["reason"] == reason
                        && e["involvedObject"]["kind"] == kind
                        && e["involvedObject"]["name"] == name
                        && e["related"]["kind"] == related
                }) {
                    missing.push(format!("no {reason} Event on the {kind}"));
                }
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{}: {}",
                missing.join(", "),
                serde_json::to_string(&events).unwrap()
            ))
        }
    })
    .await;
}

fn assert_in_order(remediation: &Remediation, order: &[&str]) {
    let steps = steps(remediation);
    let mut last = 0;
    for step in order {
        let at = steps
            .iter()
            .position(|s| s == step)
            .unwrap_or_else(|| panic!("{step} missing in {steps:?}"));
        assert!(at >= last, "{step} out of order in {steps:?}");
        last = at;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_host_is_fenced_directly_over_redfish() {
    let mut policy = fast_policy();
    policy["strategies"] = json!(["DirectBmc"]);
    let lab = start_prepared(fast(), policy, |lab| lab.detach("worker-1")).await;
    let before = lab.cluster.redfish().service().stats();
    lab.cluster.hang("worker-1");
    let done = lab.succeeded("worker-1-1").await;
    // One login for the whole remediation, and its session closed at the end.
    eventually(
        "one session created and closed",
        Duration::from_secs(5),
        async || {
            let after = lab.cluster.redfish().service().stats();
            let created = after.sessions_created - before.sessions_created;
            if created == 1 && after.open_sessions == before.open_sessions {
                Ok(())
            } else {
                Err(format!(
                    "{created} session(s) created, {} open (before: {})",
                    after.open_sessions, before.open_sessions
                ))
            }
        },
    )
    .await;
    assert_in_order(
        &done,
        &[
            "PowerOffRequested",
            "Fenced",
            "NodeDeleted",
            "PowerOnRequested",
            "Succeeded",
        ],
    );
    let status = done.status.unwrap();
    assert_eq!(status.strategy.as_deref(), Some("DirectBmc"));
    // The host really went off and on through its BMC.
    let history = lab.cluster.host("worker-1").unwrap().host.history();
    assert!(history.len() >= 2, "{history:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_host_is_fenced_directly_over_ipmi() {
    let mut policy = fast_policy();
    policy["strategies"] = json!(["DirectBmc"]);
    let spec = ClusterSpec {
        ipmi: true,
        bmh_uses_ipmi: true,
        ..fast()
    };
    let lab = start_prepared(spec, policy, |lab| lab.detach("worker-2")).await;
    lab.cluster.hang("worker-2");
    let done = lab.succeeded("worker-2-1").await;
    assert_in_order(&done, &["Fenced", "NodeDeleted", "Succeeded"]);
    assert_eq!(done.status.unwrap().driver.as_deref(), Some("ipmi"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_service_mode_taints_instead_of_deleting_and_removes_the_taint_after() {
    let mut policy = fast_policy();
    policy["nodeRelease"] = json!("OutOfService");
    let lab = start(fast(), policy).await;
    let uid = lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    lab.cluster.hang("worker-0");
    let done = lab.succeeded("worker-0-1").await;
    assert_in_order(
        &done,
        &["Fenced", "NodeTainted", "PowerOnRequested", "Succeeded"],
    );
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert_eq!(node["metadata"]["uid"], uid, "the Node was kept");
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        !taints
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/out-of-service"),
        "{taints:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_node_still_ready_from_before_the_power_cycle_is_not_taken_as_back() {
    // A false alarm on a healthy host, and a node monitor slower than the power cycle (40 s
    // in Kubernetes): the kept Node reads Ready all along. Only a new boot ID is a reboot.
    let mut policy = fast_policy();
    policy["nodeRelease"] = json!("OutOfService");
    policy["timeouts"]["readyGraceSeconds"] = json!(0);
    let spec = ClusterSpec {
        timing: Timing {
            boot_delay: Duration::from_millis(2000),
            node_grace: Duration::from_secs(60),
            ..Timing::fast()
        },
        ..ClusterSpec::default()
    };
    let lab = start(spec, policy).await;
    let boot_id = |lab: &Lab| {
        lab.api.get(NODES, "", "worker-1").unwrap()["status"]["nodeInfo"]["bootID"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let before = boot_id(&lab);
    lab.trigger("worker-1", true);
    let done = lab.succeeded("worker-1-1").await;
    let status = done.status.clone().unwrap();
    assert_eq!(status.node_boot_id.as_deref(), Some(before.as_str()));
    assert_ne!(boot_id(&lab), before, "succeeded before the host rebooted");
    let powered_on = lab.cluster.host("worker-1").unwrap().host.history();
    assert_eq!(
        powered_on.iter().map(|c| c.power).collect::<Vec<_>>(),
        vec![
            baremend_sim::host::Power::Off,
            baremend_sim::host::Power::On
        ]
    );
    assert_in_order(
        &done,
        &["Fenced", "NodeTainted", "PowerOnRequested", "Succeeded"],
    );
}

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
async fn the_trigger_removed_before_the_proof_cancels_and_withdraws_the_request() {
    let lab = start_prepared(fast(), fast_policy(), |lab| {
        lab.stuck_power("worker-0", true)
    })
    .await;
    lab.trigger("worker-0", true);
    lab.reach("worker-0-1", RemediationPhase::PoweringOff).await;
    lab.trigger("worker-0", false);
    let cancelled = lab.reach("worker-0-1", RemediationPhase::Cancelled).await;
    assert!(steps(&cancelled).contains(&"PowerOffWithdrawn".to_string()));
    let bmh = lab.api.get(BMHS, MACHINE_NAMESPACE, "worker-0").unwrap();
    assert!(
        bmh["metadata"]["annotations"]
            .as_object()
            .is_none_or(|a| !a.keys().any(|k| k.starts_with("reboot.metal3.io/"))),
        "{bmh}"
    );
    assert!(lab.node_exists("worker-0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trigger_removed_after_the_proof_still_completes_the_cycle() {
    let lab = start(fast(), fast_policy()).await;
    lab.cluster.hang("worker-0");
    lab.reach("worker-0-1", RemediationPhase::PoweringOn).await;
    lab.trigger("worker-0", false);
    lab.succeeded("worker-0-1").await;
    let host = &lab.cluster.host("worker-0").unwrap().host;
    assert_eq!(
        host.power(),
        baremend_sim::host::Power::On,
        "the host was not left off"
    );
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
    let status = held_with(&lab, "worker-0-1", "storm: 2 of 6").await;
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
    let status = held_with(&lab, "master-0-1", "etcd quorum").await;
    assert_eq!(status.phase, RemediationPhase::Pending);
    let condition = condition(&status, "Held");
    assert!(condition.message.contains("etcd quorum"), "{condition:?}");
    assert!(lab.node_exists("master-0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_bmc_address_is_reported_and_nothing_is_deleted() {
    let mut policy = fast_policy();
    policy["strategies"] = json!(["DirectBmc"]);
    policy["timeouts"]["powerOffSeconds"] = json!(2);
    let lab = start_prepared(fast(), policy, |lab| {
        lab.detach("worker-0");
        lab.set_bmc("worker-0", json!({"address": "redfish://:99999/x"}));
    })
    .await;
    lab.cluster.hang("worker-0");
    let failed = lab.failed("worker-0-1").await;
    let status = failed.status.unwrap();
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("redfish://:99999/x"),
        "the error names the address: {status:?}"
    );
    assert!(lab.node_exists("worker-0"));
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
async fn wrong_bmc_credentials_and_an_unreachable_bmc_fail_without_touching_the_node_or_leaking() {
    const WRONG: &str = "not-the-password-Xq9";
    let mut policy = fast_policy();
    policy["strategies"] = json!(["DirectBmc"]);
    policy["timeouts"]["powerOffSeconds"] = json!(2);
    policy["maxConcurrent"] = json!(2);
    let lab = start_prepared(fast(), policy, |lab| {
        lab.detach("worker-0");
        lab.detach("worker-1");
        lab.bmc_password("worker-0", WRONG, None);
        lab.set_bmc(
            "worker-1",
            json!({"address": "redfish+http://127.0.0.1:1/redfish/v1/Systems/1"}),
        );
    })
    .await;
    lab.trigger("worker-0", true);
    lab.trigger("worker-1", true);
    for name in ["worker-0-1", "worker-1-1"] {
        let failed = lab.failed(name).await;
        let status = failed.status.clone().unwrap();
        assert!(
            !steps(&failed).iter().any(|s| s.starts_with("Node")),
            "{name}: {status:?}"
        );
        let text = serde_json::to_string(&status).unwrap();
        assert!(!text.contains(WRONG), "{name} leaks the password: {text}");
    }
    let status = lab.remediation("worker-0-1").unwrap().status.unwrap();
    let error = status.last_error.unwrap_or_default();
    assert!(error.contains("BMC read failed"), "{error}");
    assert!(lab.node_exists("worker-0") && lab.node_exists("worker-1"));
    // The hosts were never powered off.
    for host in ["worker-0", "worker-1"] {
        assert!(
            lab.cluster.host(host).unwrap().host.history().is_empty(),
            "{host}"
        );
    }
    // Only once the Event that tells worker-0's refused login exists is its absence of the
    // password worth checking.
    let told = told_on(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Remediation", "worker-0-1"),
        "Failed",
        "BMC read failed",
    )
    .await;
    assert!(!told.to_string().contains(WRONG), "{told}");
    let text = lab.events_text();
    assert!(!text.contains(WRONG), "Events leak the password");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_returns_is_power_cycled_again_then_failed_with_the_host_left_off() {
    use baremend_sim::host::Power;
    let mut policy = fast_policy();
    policy["maxAttempts"] = json!(2);
    policy["timeouts"]["nodeReadySeconds"] = json!(3);
    let lab = start(fast(), policy).await;
    lab.label("worker-0");
    // Broken hardware: no power cycle brings the OS back.
    lab.cluster.break_host("worker-0");
    let failed = lab.failed("worker-0-1").await;
    let steps = steps(&failed);
    assert_eq!(
        steps.iter().filter(|s| *s == "Retry").count(),
        1,
        "one more power cycle: {steps:?}"
    );
    assert_eq!(
        steps.last().map(String::as_str),
        Some("Failed"),
        "{steps:?}"
    );
    let status = failed.status.unwrap();
    assert_eq!(status.attempt, Some(2));
    let condition = condition(&status, "Succeeded");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "NodeNeverReady")
    );
    // Off, on, off (the retry), on, and off again: left off after the failure.
    eventually("five power changes", Duration::from_secs(10), async || {
        let history = lab.power_history("worker-0");
        if history.len() >= 5 {
            Ok(())
        } else {
            Err(format!("{history:?}"))
        }
    })
    .await;
    // A negative: ten of the controller's polls and two of the host's power delays more, in
    // which the host is not powered on again (left off): a pass that asked for power-on
    // would have shown in them. No condition to wait for proves that nothing happens.
    let window = options(&lab).poll * 10 + lab.cluster.spec().timing.power_delay * 2;
    tokio::time::sleep(window).await;
    assert_eq!(
        lab.power_history("worker-0"),
        [Power::Off, Power::On, Power::Off, Power::On, Power::Off]
    );
    // The trigger stays (nothing was healed) and the Machine is kept (the policy's default).
    assert!(
        lab.machine_annotation("worker-0", "host.metal3.io/external-remediation")
            .is_some()
    );
    lab.told("the NodeNeverReady Event", |t| {
        t.contains("NodeNeverReady") || t.contains("did not come back")
    })
    .await;
    let metrics = lab.metrics.encode();
    assert!(
        metrics.contains(
            "baremend_remediations_failed_total{strategy=\"BareMetalHostRebootApi\",reason=\"NodeNeverReady\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("baremend_remediations_started_total{strategy=\"BareMetalHostRebootApi\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_machine_on_failure_deletes_only_a_machine_set_worker() {
    let mut policy = fast_policy();
    policy["maxAttempts"] = json!(1);
    policy["maxConcurrent"] = json!(2);
    policy["storm"] = json!({"maxUnhealthyPercent": 100});
    policy["deleteMachineOnFailure"] = json!(true);
    policy["timeouts"]["nodeReadySeconds"] = json!(2);
    let lab = start_prepared(fast(), policy, |lab| {
        lab.merge_machine(
            "worker-0",
            json!({"metadata": {"ownerReferences": [{
                    "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
                    "name": "workers", "uid": "set-uid", "controller": true}]}}),
        );
    })
    .await;
    for worker in ["worker-0", "worker-1"] {
        lab.cluster.break_host(worker);
        lab.trigger(worker, true);
    }
    let kept = lab.failed("worker-1-1").await;
    assert!(!steps(&kept).contains(&"MachineDeleting".to_string()));
    eventually(
        "the MachineSet's Machine deleted",
        Duration::from_secs(60),
        async || {
            if lab
                .api
                .get(MACHINES, MACHINE_NAMESPACE, "worker-0")
                .is_err()
            {
                Ok(())
            } else {
                Err(format!(
                    "{:#?}",
                    lab.remediation("worker-0-1").and_then(|r| r.status)
                ))
            }
        },
    )
    .await;
    assert!(lab.api.get(MACHINES, MACHINE_NAMESPACE, "worker-1").is_ok());
    // The Events follow the persisted Failed phase: wait for them, do not race them.
    eventually(
        "MachineDeleted and MachineKept Events",
        Duration::from_secs(30),
        async || {
            let events = lab.events_text();
            events.contains("MachineDeleted") && events.contains("no MachineSet controls it")
        },
    )
    .await;
    // The counter follows the deletion's persisted step: wait for it, do not race it.
    metric(&lab, "baremend_machines_deleted_total 1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_machines_and_secrets_get_an_error_and_an_event_and_nothing_is_deleted() {
    use baremend_sim::cluster::local::SECRETS;
    let mut policy = fast_policy();
    policy["maxConcurrent"] = json!(3);
    policy["storm"] = json!({"maxUnhealthyPercent": 100});
    policy["timeouts"]["powerOffSeconds"] = json!(2);
    let lab = start_prepared(fast(), policy, |lab| {
        // worker-0: a providerID that names no host.
        lab.merge_machine(
            "worker-0",
            json!({"spec": {"providerID": "baremetalhost:///just-a-name"}}),
        );
        // worker-1: direct BMC whose Secret does not exist.
        lab.detach("worker-1");
        lab.set_bmc("worker-1", json!({"credentialsName": "no-such-secret"}));
        // worker-2: direct BMC whose Secret lacks the password.
        lab.detach("worker-2");
        lab.api
            .create(
                SECRETS,
                MACHINE_NAMESPACE,
                json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "half-secret", "namespace": MACHINE_NAMESPACE},
                    "data": {"username": "YWRtaW4="}}),
            )
            .unwrap();
        lab.set_bmc("worker-2", json!({"credentialsName": "half-secret"}));
    })
    .await;
    for worker in ["worker-0", "worker-1", "worker-2"] {
        lab.trigger(worker, true);
    }
    for (worker, expected) in [
        ("worker-0", "no HostBmc and no BareMetalHost names its BMC"),
        ("worker-1", "Secret no-such-secret"),
        ("worker-2", "Secret half-secret: data.password: is missing"),
    ] {
        lab.failed_untouched(worker, expected).await;
    }
    lab.told("the malformed providerID named in an Event", |t| {
        t.contains("InvalidMachine") && t.contains("spec.providerID")
    })
    .await;
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
    tokio::time::sleep(Duration::from_secs(7)).await;
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
    let status = held_with(&lab, "worker-0-1", "").await;
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

/// A fault on every DELETE of the Node: the remediation stays `Fenced` until it is cleared.
fn block_node_deletion(lab: &Lab, node: &str) {
    lab.cluster
        .api_server()
        .inject(baremend_sim::apiserver::FaultRule {
            method: Some("DELETE".into()),
            path_contains: Some(format!("/nodes/{node}")),
            status: 500,
            count: None,
            retry_after: None,
            delay_ms: 0,
        });
}

/// worker-0 hung and its remediation `Fenced`, held there by a Node that cannot be deleted;
/// with the Node's UID from before.
async fn held_at_fenced() -> (Lab, Value) {
    let lab = start(fast(), fast_policy()).await;
    let old_uid = lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    block_node_deletion(&lab, "worker-0");
    lab.cluster.hang("worker-0");
    lab.reach("worker-0-1", RemediationPhase::Fenced).await;
    (lab, old_uid)
}

fn has_step(remediation: &Option<Remediation>, step: &str) -> bool {
    remediation
        .as_ref()
        .is_some_and(|r| steps(r).iter().any(|s| s == step))
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
    // The release takes the proof from a fresh read: it sees the host on and fences again.
    eventually(
        "a new power cycle on the fresh read",
        Duration::from_secs(30),
        async || has_step(&lab.remediation("worker-0-1"), "Retry"),
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
    lab.told("a Warning Event that names what happened", |t| {
        t.contains("PowerOffRequestRemoved")
    })
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_taint_on_the_hung_worker_comes_back_on_the_new_node() {
    let lab = start(fast(), fast_policy()).await;
    lab.api
        .merge(
            NODES,
            "",
            "worker-0",
            &json!({"spec": {"taints": [
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
            ]}}),
            false,
        )
        .unwrap();
    let old_uid = lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    lab.cluster.hang("worker-0");
    let done = lab.succeeded("worker-0-1").await;
    let backup = done.status.unwrap().node_backup.unwrap();
    let saved: Vec<&str> = backup.taints.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(saved, ["dedicated"], "only the user's taint is saved");
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert_ne!(node["metadata"]["uid"], old_uid, "a new Node registered");
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t["key"] == "dedicated" && t["value"] == "gpu" && t["effect"] == "NoSchedule"),
        "the taint was restored: {taints:?}"
    );
    lab.told("the Events saying so", |t| t.contains("1 taint(s)"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_fences_its_own_node_only_once_another_replica_is_ready_elsewhere() {
    use baremend::remediation::controller::Placement;
    use baremend_sim::cluster::local::PODS;
    let mut lab = Lab::builder(fast()).policy(fast_policy()).start().await;
    let peers = "app.kubernetes.io/name=baremend";
    lab.start_controller(ControllerOptions {
        placement: Some(Placement {
            node: "worker-0".into(),
            namespace: MACHINE_NAMESPACE.into(),
            pod: "baremend-a".into(),
            peers: peers.into(),
        }),
        ..options(&lab)
    });
    lab.cluster.hang("worker-0");
    eventually("the SelfFence hold", Duration::from_secs(30), async || {
        lab.remediation("worker-0-1")
            .and_then(|r| r.status)
            .is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Held" && c.status == "True" && c.reason == "SelfFence")
            })
    })
    .await;
    lab.told("the SelfFence Event", |t| {
        t.contains("this controller runs on Node worker-0")
    })
    .await;
    assert!(
        lab.power_history("worker-0").is_empty(),
        "the leader's own host was powered off"
    );
    // A second replica on another Node: the kubelet there starts it and it turns Ready.
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "baremend-b",
            "namespace": MACHINE_NAMESPACE,
            "labels": {"app.kubernetes.io/name": "baremend"},
        },
        "spec": {"nodeName": "worker-1", "containers": [{"name": "baremend", "image": "baremend:test"}]},
        "status": {"phase": "Pending"},
    });
    lab.api.create(PODS, MACHINE_NAMESPACE, pod).unwrap();
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
    lab.told("the StrategyNotInPolicy Event", |t| {
        t.contains("StrategyNotInPolicy")
    })
    .await;
    assert!(lab.node_exists("worker-0"), "the Node was left alone");
}

/// Which simulated BMC a test fences through.
#[derive(Debug, Clone, Copy)]
enum Protocol {
    Redfish,
    Ipmi,
}

impl Lab {
    /// Turns account lock-out on for `host`'s BMC.
    fn lock_out_after(&self, protocol: Protocol, host: &str, threshold: u32) {
        let policy = baremend_sim::lockout::LockoutPolicy::after(threshold);
        match protocol {
            Protocol::Redfish => self.cluster.redfish().service().set_lockout_policy(policy),
            Protocol::Ipmi => self.ipmi_bmc(host).set_lockout_policy(policy),
        }
    }

    /// The failed logins and lock of `host`'s BMC account.
    fn bmc_lockout(&self, protocol: Protocol, host: &str) -> baremend_sim::lockout::LockoutStatus {
        let user = baremend_sim::cluster::BMC_USERNAME;
        match protocol {
            Protocol::Redfish => self
                .cluster
                .redfish()
                .service()
                .lockout_status(user)
                .unwrap(),
            Protocol::Ipmi => self.ipmi_bmc(host).lockout_status(user),
        }
    }

    fn ipmi_bmc(&self, host: &str) -> &baremend_sim::ipmi::IpmiSim {
        self.cluster
            .ipmi()
            .iter()
            .find(|sim| sim.host().id() == host)
            .unwrap()
    }
}

/// The Secret of `host` gets a new password, the old one as `previousPassword`, while the BMC
/// (lock-out at 3 failures) keeps the old one; the host is then fenced directly.
async fn fence_after_secret_rotation(protocol: Protocol, host: &str) {
    const NEW: &str = "the-new-password-Vb3";
    let mut policy = fast_policy();
    policy["strategies"] = json!(["DirectBmc"]);
    let spec = match protocol {
        Protocol::Redfish => fast(),
        Protocol::Ipmi => ClusterSpec {
            ipmi: true,
            bmh_uses_ipmi: true,
            ..fast()
        },
    };
    let secret = format!("{host}-bmc-secret");
    let mut old = String::new();
    let lab = start_prepared(spec, policy, |lab| {
        lab.detach(host);
        lab.lock_out_after(protocol, host, 3);
        old = lab.rotate_bmc_password(host, NEW);
    })
    .await;
    lab.cluster.hang(host);
    let done = lab.succeeded(&format!("{host}-1")).await;
    assert_in_order(&done, &["PowerOffRequested", "Fenced", "Succeeded"]);
    let text = lab
        .told("the previous password Event", |t| {
            t.contains("BmcPreviousPasswordUsed")
        })
        .await;
    assert!(text.contains(&secret), "the Event names the Secret: {text}");
    assert!(
        !text.contains(NEW) && !text.contains(&old),
        "Events leak a password"
    );
    let status = serde_json::to_string(&done.status).unwrap();
    assert!(!status.contains(NEW) && !status.contains(&old));
    // The new password refused once, then the old one first for every later login.
    let lockout = lab.bmc_lockout(protocol, host);
    assert!(
        !lockout.locked && lockout.lockouts == 0,
        "{protocol:?}: {lockout:?}"
    );
    assert_eq!(lockout.failed_logins, 1, "{protocol:?}: {lockout:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_before_its_redfish_bmc_fences_with_the_previous_password_and_says_so() {
    fence_after_secret_rotation(Protocol::Redfish, "worker-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_before_its_ipmi_bmc_fences_with_the_previous_password_and_says_so() {
    fence_after_secret_rotation(Protocol::Ipmi, "worker-2").await;
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
    lab.told("a DryRun Event on the Machine", |t| {
        t.contains("\"DryRun\"")
    })
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
    let mut policy = fast_policy();
    policy["mode"] = json!("DryRun");
    policy["strategies"] = json!(["DirectBmc"]);
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
    let events = lab
        .told("a DryRunProbeFailed Warning", |t| {
            t.contains("DryRunProbeFailed")
        })
        .await;
    assert!(!events.contains(WRONG), "Events leak the password");
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
    tokio::time::sleep(options(&lab).poll * 10).await;
    let after = lab.cluster.redfish().service().stats();
    let logins = after.logins - before.logins;
    let refused = after.authentication_failures - before.authentication_failures;
    assert_eq!((logins, refused), (2, 1), "{after:?} (before: {before:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_policy_holds_a_new_start_and_lets_a_fenced_remediation_finish() {
    let (lab, _) = held_at_fenced().await;
    patch_policy(&lab, json!({"paused": true, "maxConcurrent": 2})).await;
    lab.trigger("worker-1", true);
    let status = held_with(&lab, "worker-1-1", "paused").await;
    let held = condition(&status, "Held");
    assert_eq!(held.reason, "Paused");
    assert!(held.message.contains("spec.paused"), "{held:?}");
    lab.told("a Held Event", |t| {
        t.contains("RemediationPolicy is paused")
    })
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

impl Lab {
    /// The names of the Remediations of `machine` in the store, sorted.
    fn remediations_of(&self, machine: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .api
            .list(common::lab::REMEDIATIONS, Some(MACHINE_NAMESPACE))
            .iter()
            .filter(|r| r["spec"]["machineName"] == machine)
            .filter_map(|r| r["metadata"]["name"].as_str().map(String::from))
            .collect();
        names.sort();
        names
    }

    /// Waits (20 s) until the Remediations of `machine` are exactly `expected`.
    async fn remediations_become(&self, machine: &str, expected: &[&str]) {
        eventually(
            &format!("the Remediations of {machine} are {expected:?}"),
            Duration::from_secs(20),
            async || {
                let names = self.remediations_of(machine);
                if names == expected {
                    Ok(())
                } else {
                    Err(format!("{names:?}"))
                }
            },
        )
        .await
    }

    /// Sets one annotation on a Remediation.
    fn annotate_remediation(&self, name: &str, key: &str, value: &str) {
        self.api
            .merge(
                common::lab::REMEDIATIONS,
                MACHINE_NAMESPACE,
                name,
                &json!({"metadata": {"annotations": {key: value}}}),
                false,
            )
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_remediations_beyond_keep_finished_are_pruned_and_failed_ones_kept_until_acknowledged()
 {
    let mut policy = fast_policy();
    policy["retention"] = json!({"keepFinished": 2});
    let lab = start_prepared(fast(), policy, |lab| {
        let ack = json!({"baremend.io/acknowledged": "true"});
        lab.seed_remediation("worker-0", 1, "Succeeded", json!({}));
        lab.seed_remediation("worker-0", 2, "Failed", json!({}));
        lab.seed_remediation("worker-0", 3, "Failed", ack);
        lab.seed_remediation("worker-0", 6, "Cancelled", json!({}));
    })
    .await;
    // The regular pass: of the three finished ones that count (the Failed worker-0-2 is not
    // acknowledged), the oldest goes.
    lab.remediations_become("worker-0", &["worker-0-2", "worker-0-3", "worker-0-6"])
        .await;
    // A remediation that finishes prunes again; it is numbered past the highest left.
    assert!(lab.cluster.hang("worker-0"));
    lab.succeeded("worker-0-7").await;
    lab.remediations_become("worker-0", &["worker-0-2", "worker-0-6", "worker-0-7"])
        .await;
    let events = lab
        .told("both prunings", |t| {
            t.contains("deleted 1 finished Remediation(s): worker-0-1")
                && t.contains("deleted 1 finished Remediation(s): worker-0-3")
        })
        .await;
    assert!(events.contains("\"reason\":\"Pruned\""), "{events}");
    // Acknowledged, the Failed one counts like the others: it is the oldest.
    lab.annotate_remediation("worker-0-2", "baremend.io/acknowledged", "true");
    lab.remediations_become("worker-0", &["worker-0-6", "worker-0-7"])
        .await;
    let metrics = lab.metrics.encode();
    assert!(
        metrics.contains("baremend_pruned_total{kind=\"Remediation\"} 3"),
        "{metrics}"
    );
    // Another Machine's Remediations are its own: worker-1 has none and lost none.
    assert!(lab.remediations_of("worker-1").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_remediation_retried_with_the_annotation_runs_again_and_is_kept_marked() {
    let mut policy = fast_policy();
    policy["timeouts"]["powerOffSeconds"] = json!(2);
    let lab = start_prepared(fast(), policy, |lab| lab.stuck_power("worker-0", true)).await;
    lab.cluster.hang("worker-0");
    lab.failed("worker-0-1").await;
    // A Failed remediation holds the trigger: no new one without the operator.
    assert_eq!(lab.remediations_of("worker-0"), ["worker-0-1"]);
    // A value that is not "true" is refused with a Warning, never guessed at.
    lab.annotate_remediation("worker-0-1", "baremend.io/retry", "yes");
    lab.told("the RetryIgnored Warning", |t| {
        t.contains("\"reason\":\"RetryIgnored\"")
    })
    .await;
    assert_eq!(lab.remediations_of("worker-0"), ["worker-0-1"]);
    // The operator repairs the BMC and asks for a retry.
    lab.stuck_power("worker-0", false);
    lab.annotate_remediation("worker-0-1", "baremend.io/retry", "true");
    let done = lab.succeeded("worker-0-2").await;
    assert_each_step_once(&done);
    lab.assert_machine_clean("worker-0");
    let old = lab
        .remediation("worker-0-1")
        .expect("the failed one is kept");
    assert_eq!(
        old.status.map(|s| s.phase),
        Some(RemediationPhase::Failed),
        "its audit stays as it was"
    );
    assert_eq!(
        common::lab::retried_by(&old.metadata).as_deref(),
        Some("worker-0-2")
    );
    lab.told("the Retried Event", |t| {
        t.contains("\"reason\":\"Retried\"") && t.contains("worker-0-2 starts in its place")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_node_never_returned_restores_the_node_from_the_failed_ones_backup() {
    let mut policy = fast_policy();
    policy["maxAttempts"] = json!(1);
    policy["timeouts"]["nodeReadySeconds"] = json!(3);
    let lab = start(fast(), policy).await;
    lab.label("worker-0");
    lab.cluster.break_host("worker-0");
    let failed = lab.failed("worker-0-1").await;
    assert!(steps(&failed).contains(&"NodeDeleted".to_string()));
    // The hardware is repaired; the Node that had the label is gone.
    assert!(lab.cluster.recover("worker-0"));
    lab.annotate_remediation("worker-0-1", "baremend.io/retry", "true");
    let done = lab.succeeded("worker-0-2").await;
    let steps = steps(&done);
    assert!(
        !steps.contains(&"NodeBackedUp".to_string()),
        "the backup of the failed one is used: {steps:?}"
    );
    lab.assert_label_restored("worker-0", "restored from worker-0-1's backup");
    lab.assert_machine_clean("worker-0");
}

/// A Node held by someone's finalizer lingers after the release, being deleted; the host boots
/// again and its kubelet reports the lingering Node Ready on the new boot. That Node is going
/// away with whatever is restored onto it: the remediation waits until it is gone and the
/// host has registered anew, then restores the labels there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_held_by_a_finalizer_is_not_taken_as_back_until_it_has_gone() {
    let lab = start(fast(), fast_policy()).await;
    lab.label("worker-0");
    lab.api
        .merge(
            NODES,
            "",
            "worker-0",
            &json!({"metadata": {"finalizers": ["example.com/hold"]}}),
            false,
        )
        .unwrap();
    let old = lab.api.get(NODES, "", "worker-0").unwrap();
    let old_boot = old["status"]["nodeInfo"]["bootID"].clone();
    lab.cluster.hang("worker-0");
    eventually(
        "the lingering Node Ready on the new boot",
        Duration::from_secs(30),
        async || {
            let node = lab.api.get(NODES, "", "worker-0").ok()?;
            let lingering = node["metadata"]["uid"] == old["metadata"]["uid"]
                && !node["metadata"]["deletionTimestamp"].is_null();
            let rebooted = node["status"]["nodeInfo"]["bootID"] != old_boot
                && node["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
            (lingering && rebooted).then_some(())
        },
    )
    .await;
    // A negative: for 3 s (three ready graces), the lingering Node is not taken as back.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = lab.remediation("worker-0-1").unwrap();
    let phase = waiting.status.as_ref().map(|s| s.phase);
    assert_ne!(
        phase,
        Some(RemediationPhase::Succeeded),
        "{:?}",
        waiting.status
    );
    assert_ne!(
        phase,
        Some(RemediationPhase::Restoring),
        "{:?}",
        waiting.status
    );
    // The finalizer's owner lets go: the Node goes, the host registers anew, labels return.
    lab.api
        .merge(
            NODES,
            "",
            "worker-0",
            &json!({"metadata": {"finalizers": null}}),
            false,
        )
        .unwrap();
    lab.succeeded("worker-0-1").await;
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert_ne!(
        node["metadata"]["uid"], old["metadata"]["uid"],
        "a new Node"
    );
    lab.assert_label_restored("worker-0", "restored on the new Node");
}
