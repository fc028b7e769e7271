//! The remediation cycle end to end, on the simulated cluster (API server over HTTPS, kubelets,
//! MachineHealthCheck, BareMetal Operator, simulated BMCs) with the controller on a real kube
//! client: each fencing path from trigger to restored Node, what a returning (or never
//! returning) Node means, and what is kept, pruned and retried afterwards.

use std::time::Duration;

use baremend::api::{Remediation, RemediationPhase};
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::local::{BMHS, EVENTS, MACHINES, NODES};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use serde_json::json;

use baremend_testkit as common;

use common::events::{told_on, told_on_times};
use common::eventually;
use common::lab::{Lab, direct_bmc_policy, fast, fast_policy, metric, steps};
use common::remediation::{
    NodeBefore, assert_each_step_once, assert_in_order, condition, options, start, start_prepared,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_is_fenced_through_the_reboot_api_deleted_powered_on_and_restored() {
    let lab = start(fast(), fast_policy()).await;
    // A label an operator added, which the new Node will not have.
    lab.label("worker-0");
    let node = lab.node_before("worker-0");
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
    lab.assert_main_path("worker-0", &node);
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

/// A remediation fenced over the host's BMC by `driver`: every step in order, and the main
/// path's outcome at the BMC, on the Node and on the Machine.
fn assert_direct_main_path(lab: &Lab, done: &Remediation, driver: &str, node: &NodeBefore) {
    assert_in_order(
        done,
        &[
            "PowerOffRequested",
            "Fenced",
            "NodeDeleted",
            "PowerOnRequested",
            "Succeeded",
        ],
    );
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.strategy.as_deref(), Some("DirectBmc"));
    assert_eq!(status.driver.as_deref(), Some(driver));
    let machine = done.spec.machine_name.as_deref().unwrap();
    lab.assert_main_path(machine, node);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_host_is_fenced_directly_over_redfish() {
    let policy = direct_bmc_policy();
    let lab = start_prepared(fast(), policy, |lab| lab.detach("worker-1")).await;
    lab.label("worker-1");
    let node = lab.node_before("worker-1");
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
    assert_direct_main_path(&lab, &done, "redfish+http", &node);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_host_is_fenced_directly_over_ipmi() {
    let policy = direct_bmc_policy();
    let spec = ClusterSpec {
        ipmi: true,
        bmh_uses_ipmi: true,
        ..fast()
    };
    let lab = start_prepared(spec, policy, |lab| lab.detach("worker-2")).await;
    lab.label("worker-2");
    let node = lab.node_before("worker-2");
    lab.cluster.hang("worker-2");
    let done = lab.succeeded("worker-2-1").await;
    assert_direct_main_path(&lab, &done, "ipmi", &node);
    // Every IPMI session the remediation opened was closed (none left to idle out).
    eventually(
        "every IPMI session closed",
        Duration::from_secs(5),
        async || {
            let open: Vec<_> = lab.cluster.ipmi().iter().map(|bmc| bmc.stats()).collect();
            let activated: u64 = open.iter().map(|s| s.sessions_activated).sum();
            let left: usize = open.iter().map(|s| s.open_sessions).sum();
            if activated > 0 && left == 0 {
                Ok(())
            } else {
                Err(format!("{activated} activated, {left} still open"))
            }
        },
    )
    .await;
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
    lab.hold(window).await;
    assert_eq!(
        lab.power_history("worker-0"),
        [Power::Off, Power::On, Power::Off, Power::On, Power::Off]
    );
    // The trigger stays (nothing was healed) and the Machine is kept (the policy's default).
    assert!(
        lab.machine_annotation("worker-0", "host.metal3.io/external-remediation")
            .is_some()
    );
    // The failure told once on the Machine.
    told_on_times(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Machine", "worker-0"),
        "Failed",
        "the Node did not come back in",
        1,
    )
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
    let machine_set = "deleting the Machine so that its MachineSet replaces it";
    told_on(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Machine", "worker-0"),
        "MachineDeleted",
        machine_set,
    )
    .await;
    let kept = "the Machine is kept: no MachineSet controls it";
    told_on(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Machine", "worker-1"),
        "MachineKept",
        kept,
    )
    .await;
    // The counter follows the deletion's persisted step: wait for it, do not race it.
    metric(&lab, "baremend_machines_deleted_total 1").await;
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
    // Saved, then put back: told on the Remediation and on the Machine.
    told_on(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Remediation", "worker-0-1"),
        "NodeBackedUp",
        "1 taint(s)",
    )
    .await;
    told_on(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Machine", "worker-0"),
        "NodeRestored",
        "1 taint(s) put back",
    )
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
    told_on(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Machine", "worker-0"),
        "Held",
        "this controller runs on Node worker-0",
    )
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

/// What these tests ask of the lab beyond the kit.
trait CycleChecks {
    fn remediations_of(&self, machine: &str) -> Vec<String>;
    async fn remediations_become(&self, machine: &str, expected: &[&str]);
    fn annotate_remediation(&self, name: &str, key: &str, value: &str);
}

impl CycleChecks for Lab {
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

/// The `baremend.io/outcome` label of a Remediation, if any.
fn outcome_label(lab: &Lab, name: &str) -> Option<String> {
    let remediation = lab.remediation(name)?;
    remediation
        .metadata
        .labels?
        .get(baremend::api::OUTCOME_LABEL)
        .cloned()
}

/// Waits until the Remediation `name` carries the outcome label `outcome`.
async fn outcome_becomes(lab: &Lab, name: &str, outcome: &str) {
    let what = format!("{name} labelled {outcome}");
    eventually(
        &what,
        Duration::from_secs(10),
        async || match outcome_label(lab, name) {
            Some(label) if label == outcome => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_remediations_carry_their_outcome_and_a_starts_fresh_read_leaves_the_succeeded_out() {
    let lab = start_prepared(fast(), fast_policy(), |lab| {
        // As a version without the label left it.
        lab.seed_remediation("worker-0", 1, "Succeeded", json!({}));
        lab.cluster.api_server().record_requests();
    })
    .await;
    // The Machine's first (idle) pass labels it.
    outcome_becomes(&lab, "worker-0-1", "Succeeded").await;
    // Under way, the new one is never labelled; ended, it is.
    assert!(lab.cluster.hang("worker-0"));
    let started = std::time::Instant::now();
    loop {
        let remediation = lab.remediation("worker-0-2");
        let phase = remediation
            .as_ref()
            .and_then(|r| r.status.as_ref())
            .map(|s| s.phase)
            .unwrap_or_default();
        let label = outcome_label(&lab, "worker-0-2");
        if phase.is_terminal() {
            assert_eq!(phase, RemediationPhase::Succeeded);
            break;
        }
        assert_eq!(label, None, "labelled while {phase:?}");
        assert!(started.elapsed() < Duration::from_secs(60), "never ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    outcome_becomes(&lab, "worker-0-2", "Succeeded").await;
    // The start read only the Remediations that may hold a host: the API server left the
    // Succeeded and Cancelled ones out, where every start used to read the whole history.
    let fresh: Vec<_> = lab
        .cluster
        .api_server()
        .recorded_requests()
        .into_iter()
        .filter(|r| {
            r.method == "GET" && !r.watch && r.path == "/apis/baremend.io/v1alpha1/remediations"
        })
        .map(|r| r.label_selector)
        .collect();
    assert!(
        fresh.contains(&Some(
            "baremend.io/outcome notin (Succeeded,Cancelled)".to_string()
        )),
        "{fresh:?}"
    );
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
    // Both prunings told on the Machine.
    for pruned in ["worker-0-1", "worker-0-3"] {
        let note = format!("deleted 1 finished Remediation(s): {pruned}");
        told_on(
            &lab.api,
            MACHINE_NAMESPACE,
            ("Machine", "worker-0"),
            "Pruned",
            &note,
        )
        .await;
    }
    // Acknowledged, the Failed one counts like the others: it is the oldest.
    lab.annotate_remediation("worker-0-2", "baremend.io/acknowledged", "true");
    lab.remediations_become("worker-0", &["worker-0-6", "worker-0-7"])
        .await;
    // The counter moves after the delete it counts, so it is awaited, not read once.
    eventually(
        "three Remediations counted as pruned",
        Duration::from_secs(10),
        async || {
            let metrics = lab.metrics.encode();
            let line = metrics
                .lines()
                .find(|l| l.starts_with("baremend_pruned_total{kind=\"Remediation\"}"))
                .map(str::to_string);
            match line {
                Some(line) if line.ends_with(" 3") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
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
    told_on(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Remediation", "worker-0-1"),
        "RetryIgnored",
        "baremend.io/retry is \"yes\"",
    )
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
    // Told once, on the new Remediation.
    told_on_times(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Remediation", "worker-0-2"),
        "Retried",
        "Remediation worker-0-1 failed; worker-0-2 starts in its place",
        1,
    )
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
    lab.hold(Duration::from_secs(3)).await;
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

/// A Node back and Ready waits out the policy's ready grace before it is restored, and the
/// Remediation says so: `ReadyGrace` True while `PoweringOn` with the Node Ready (naming the
/// grace and when it ends), False once the Node was restored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ready_grace_is_said_as_the_wait_it_is() {
    let mut policy = fast_policy();
    policy["timeouts"]["readyGraceSeconds"] = json!(4);
    let lab = start(fast(), policy).await;
    assert!(lab.cluster.hang("worker-0"));
    let waiting = eventually(
        "worker-0-1 waits out its ready grace",
        Duration::from_secs(60),
        async || {
            let status = lab.remediation("worker-0-1").and_then(|r| r.status)?;
            let grace = status
                .conditions
                .iter()
                .find(|c| c.type_ == "ReadyGrace" && c.status == "True")
                .cloned()?;
            (status.phase == RemediationPhase::PoweringOn).then_some(grace)
        },
    )
    .await;
    assert_eq!(waiting.reason, "Waiting");
    assert!(
        waiting
            .message
            .starts_with("Node worker-0 is back from a new boot and Ready; it is restored once Ready for 4s (readyGraceSeconds), at "),
        "{}",
        waiting.message
    );
    let done = lab.succeeded("worker-0-1").await;
    let grace = condition(done.status.as_ref().unwrap(), "ReadyGrace");
    assert_eq!(
        (
            grace.status.as_str(),
            grace.reason.as_str(),
            grace.message.as_str()
        ),
        ("False", "Held", "Ready for 4s")
    );
}
