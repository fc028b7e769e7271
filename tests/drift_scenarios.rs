//! The drift coordinator's harder cases, end to end on the simulated cluster and its MCO:
//! drift classes, not-drift hand-off, rollouts, escalation, recurrence, restarts, forcefiles
//! not picked up, unmanaged files, a drain blocked mid-way, and the machine remediation
//! never taking a planned reboot for a hang.

use std::time::Duration;

use baremend::api::annotations::PLANNED_REBOOT;
use baremend::api::{DriftPhase, DriftRemediation, Remediation, RemediationPhase};
use baremend_sim::cluster::local::{MACHINES, MCPS, NAMESPACES, NODES, PDBS, PODS};
use baremend_sim::cluster::mco::disk::SimFile;
use baremend_sim::cluster::mco::{DESIRED_DRAIN, LAST_APPLIED_DRAIN, POST_CONFIG_ACTION};
use baremend_sim::cluster::{EXTERNAL_REMEDIATION, MACHINE_NAMESPACE};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use baremend_testkit as common;
use common::drift::DriftLab;

use common::drift::{self, steps};
use common::events::times_told;
use common::eventually;
use common::lab::{DRIFT_REMEDIATIONS, Lab, STATE, metrics_show};

fn once(remediation: &DriftRemediation) {
    let steps = steps(remediation);
    for step in [
        "DriftDetected",
        "ForceRequested",
        "PickedUp",
        "Rebooted",
        "Succeeded",
    ] {
        assert_eq!(
            steps.iter().filter(|s| *s == step).count(),
            1,
            "{step} in {steps:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_missing_file_and_unit_drift_are_classified_and_each_remediated() {
    let mut lab = drift::start(3, json!(3), json!({})).await;
    let disk = |n: &str| lab.cluster.disk(n).unwrap().clone();
    disk("worker-0").chmod("/etc/sysctl.d/90-demo.conf", 0o777);
    disk("worker-1").remove("/etc/demo/registry.key");
    disk("worker-2").set_unit_enabled("demo-agent.service", false);
    let expect = [
        ("worker-0", "Mode", "/etc/sysctl.d/90-demo.conf"),
        ("worker-1", "Missing", "/etc/demo/registry.key"),
        ("worker-2", "UnitEnablement", "demo-agent.service"),
    ];
    for (node, kind, target) in expect {
        let done = lab.reach(&format!("{node}-1"), DriftPhase::Succeeded).await;
        assert_eq!(format!("{:?}", done.spec.kind), kind, "{node}");
        assert_eq!(done.spec.target, target, "{node}");
        once(&done);
    }
    // The re-apply rewrote what was wrong.
    assert_eq!(
        disk("worker-0")
            .get("/etc/sysctl.d/90-demo.conf")
            .unwrap()
            .st_mode,
        0o100_644
    );
    assert!(disk("worker-1").get("/etc/demo/registry.key").is_some());
    assert_eq!(
        disk("worker-2").unit_enabled("demo-agent.service"),
        Some(true)
    );
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degraded_nodes_that_are_not_drift_are_reported_and_left_alone() {
    let mut lab = drift::start(2, json!(2), json!({})).await;
    let degrade = |node: &str, state: &str, reason: &str| {
        lab.api
            .merge(NODES, "", node, &json!({"metadata": {"annotations": {STATE: state, "machineconfiguration.openshift.io/reason": reason}}}), false)
            .unwrap();
    };
    degrade(
        "worker-0",
        "Degraded",
        "missing expected kernel arguments: [nosmt]",
    );
    degrade(
        "worker-1",
        "Unreconcilable",
        "can't reconcile config: ignition file changed",
    );
    // Counted as told, series included: the Recorder folds a repeat into the first Event.
    eventually("two NotDrift Events", Duration::from_secs(40), async || {
        times_told(&lab.api, "NotDrift") >= 2
    })
    .await;
    // A negative: for 2 s (two debounces) more, no DriftRemediation and no further NotDrift
    // Event; no condition to wait for proves that nothing comes.
    lab.hold(Duration::from_secs(2)).await;
    let api: Api<DriftRemediation> = Api::all(lab.client.clone());
    assert!(
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // One Event per change, not one per pass.
    assert_eq!(times_told(&lab.api, "NotDrift"), 2, "{}", lab.events());
    eventually("the not-drift gauge", Duration::from_secs(40), async || {
        lab.metrics
            .encode()
            .contains("mco_node_degraded_not_drift{pool=\"worker\"} 2")
    })
    .await;
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_rolling_out_a_config_defers_the_start() {
    let mut lab = drift::start(2, json!(1), json!({})).await;
    let current = lab.api.get(MCPS, "", "worker").unwrap()["spec"]["configuration"]["name"].clone();
    lab.api
        .merge(MCPS, "", "worker", &json!({"spec": {"configuration": {"name": "rendered-worker-0123456789abcdef0123456789abcdef"}}}), false)
        .unwrap();
    lab.drift("worker-0");
    eventually(
        "held for the rollout",
        Duration::from_secs(40),
        async || lab.events().contains("\"reason\":\"PoolRollingOut\""),
    )
    .await;
    assert!(!lab.forcefile("worker-0"));
    lab.api
        .merge(
            MCPS,
            "",
            "worker",
            &json!({"spec": {"configuration": {"name": current}}}),
            false,
        )
        .unwrap();
    lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stays_not_ready_after_pickup_is_handed_to_the_machine_remediation() {
    let mut lab = drift::start(2, json!(1), json!({"timeouts": {"rebootSeconds": 2}})).await;
    lab.drift("worker-0");
    let picked = lab.reach("worker-0-1", DriftPhase::Applying).await;
    assert!(steps(&picked).contains(&"PickedUp".to_string()));
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert_eq!(
        node["metadata"]["annotations"]["baremend.io/planned-reboot"], "worker-0-1",
        "the planned reboot is marked for the machine remediation"
    );
    // The OS dies for good during the re-apply.
    lab.cluster.break_host("worker-0");
    lab.reach("worker-0-1", DriftPhase::Escalated).await;
    // The Event follows the persisted phase.
    eventually("the hand-over Event", Duration::from_secs(40), async || {
        lab.events().contains("handed to the machine remediation")
    })
    .await;
    let machine = lab
        .api
        .get(MACHINES, MACHINE_NAMESPACE, "worker-0")
        .unwrap();
    assert!(
        machine["metadata"]["annotations"]
            .get(EXTERNAL_REMEDIATION)
            .is_some()
    );
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert!(
        node["metadata"]["annotations"]
            .get("baremend.io/planned-reboot")
            .is_none()
    );
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_that_keeps_coming_back_is_retried_up_to_the_cap_then_failed() {
    let mut lab = drift::start(2, json!(1), json!({"maxAttempts": 1})).await;
    lab.drift("worker-0");
    lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    let boots = lab.reboots("worker-0");
    lab.drift("worker-0");
    let capped = lab.reach("worker-0-2", DriftPhase::Failed).await;
    let steps = steps(&capped);
    let status = capped.status.unwrap();
    assert_eq!(
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "Failed")
            .unwrap()
            .reason,
        "DriftRecurring"
    );
    assert!(!steps.contains(&"ForceRequested".to_string()));
    assert_eq!(lab.reboots("worker-0"), boots, "no action past the cap");
    metrics_show(
        &lab,
        &["mco_remediations_total{action=\"Force\",outcome=\"Failed\",reason=\"DriftRecurring\"} 1"],
        Duration::from_secs(40),
    )
    .await;
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_drift_retried_with_the_annotation_is_remediated_again_and_old_attempts_pruned() {
    let policy = json!({"maxAttempts": 1, "retention": {"keepFinished": 1}});
    let mut lab = drift::start(2, json!(1), policy).await;
    lab.drift("worker-0");
    lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    lab.drift("worker-0");
    lab.reach("worker-0-2", DriftPhase::Failed).await;
    let boots = lab.reboots("worker-0");
    // Still counted by the recurrence cap: kept although beyond keepFinished.
    assert!(lab.drift_remediation("worker-0-1").is_some());
    // The operator asks for another attempt: the cap's count starts again after it.
    lab.api
        .merge(
            DRIFT_REMEDIATIONS,
            "",
            "worker-0-2",
            &json!({"metadata": {"annotations": {"baremend.io/retry": "true"}}}),
            false,
        )
        .unwrap();
    let done = lab.reach("worker-0-3", DriftPhase::Succeeded).await;
    assert!(steps(&done).contains(&"ForceRequested".to_string()));
    assert!(lab.reboots("worker-0") > boots, "the retry re-applied");
    let old = lab
        .drift_remediation("worker-0-2")
        .expect("the retried one is kept");
    assert_eq!(old.status.map(|s| s.phase), Some(DriftPhase::Failed));
    assert_eq!(
        common::lab::retried_by(&old.metadata).as_deref(),
        Some("worker-0-3")
    );
    // Attempts up to the retried one no longer count for the cap: the oldest finished one
    // goes; the retried one is the newest finished, worker-0-3 is counted by the cap.
    eventually("worker-0-1 pruned", Duration::from_secs(20), async || {
        lab.drift_remediation("worker-0-1").is_none()
    })
    .await;
    lab.wait_event("Pruned", "Node").await;
    assert!(
        lab.metrics
            .encode()
            .contains("baremend_pruned_total{kind=\"DriftRemediation\"} 1")
    );
    assert!(lab.drift_remediation("worker-0-2").is_some());
    assert!(lab.drift_remediation("worker-0-3").is_some());
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_restarted_at_every_phase_repeats_nothing() {
    let mut lab = drift::start(2, json!(1), json!({"debounceSeconds": 2})).await;
    let boots = lab.reboots("worker-0");
    lab.drift("worker-0");
    for phase in [
        DriftPhase::Debouncing,
        DriftPhase::ForceRequested,
        DriftPhase::Applying,
    ] {
        lab.reach("worker-0-1", phase).await;
        lab.stop().await;
        // Down for a moment, as a restarted pod is, while the MCO goes on; nothing is
        // asserted after it but the waits that follow.
        tokio::time::sleep(Duration::from_millis(300)).await;
        lab.start_coordinator();
    }
    let done = lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    once(&done);
    assert_eq!(lab.reboots("worker-0"), boots + 1, "one reboot");
    let api: Api<DriftRemediation> = Api::all(lab.client.clone());
    assert_eq!(api.list(&Default::default()).await.unwrap().items.len(), 1);
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forcefile_not_picked_up_is_removed_on_timeout_and_on_abort() {
    let mut lab = drift::start(2, json!(2), json!({"timeouts": {"pickupSeconds": 2}})).await;
    let mco = lab.cluster.mco().unwrap().clone();
    // Pickup timeout: the daemon of worker-0 goes down once it reported the drift.
    lab.drift("worker-0");
    lab.reach("worker-0-1", DriftPhase::Debouncing).await;
    mco.set_daemon_down("worker-0", true);
    lab.reach("worker-0-1", DriftPhase::ForceRequested).await;
    eventually(
        "the forcefile written",
        Duration::from_secs(40),
        async || lab.forcefile("worker-0"),
    )
    .await;
    let failed = lab.reach("worker-0-1", DriftPhase::Failed).await;
    assert_eq!(
        failed
            .status
            .as_ref()
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.type_ == "Failed")
            .unwrap()
            .reason,
        "PickupTimeout"
    );
    eventually(
        "the forcefile removed",
        Duration::from_secs(40),
        async || !lab.forcefile("worker-0"),
    )
    .await;
    eventually(
        "the removal recorded",
        Duration::from_secs(40),
        async || {
            lab.api
                .get(common::lab::DRIFT_REMEDIATIONS, "", "worker-0-1")
                .ok()
                .is_some_and(|r| {
                    r["status"]["forceFileWritten"] == false
                        && r["status"]["steps"]
                            .as_array()
                            .is_some_and(|s| s.iter().any(|s| s["step"] == "ForceFileRemoved"))
                })
        },
    )
    .await;
    // Abort: the admin sets spec.abort before the daemon took the file.
    lab.drift("worker-1");
    lab.reach("worker-1-1", DriftPhase::Debouncing).await;
    mco.set_daemon_down("worker-1", true);
    lab.reach("worker-1-1", DriftPhase::ForceRequested).await;
    eventually(
        "the forcefile written",
        Duration::from_secs(40),
        async || lab.forcefile("worker-1"),
    )
    .await;
    let api: Api<DriftRemediation> = Api::all(lab.client.clone());
    api.patch(
        "worker-1-1",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"abort": true}})),
    )
    .await
    .unwrap();
    lab.reach("worker-1-1", DriftPhase::Aborted).await;
    eventually(
        "the forcefile removed",
        Duration::from_secs(40),
        async || !lab.forcefile("worker-1"),
    )
    .await;
    // The node is left Degraded (the MCO's own state), and no new attempt starts for the
    // same drift after an abort. A negative: 2 s (two debounces) in which no attempt starts.
    lab.hold(Duration::from_secs(2)).await;
    assert!(api.get_opt("worker-1-2").await.unwrap().is_none());
    assert_eq!(
        lab.api.get(NODES, "", "worker-1").unwrap()["metadata"]["annotations"][STATE],
        "Degraded"
    );
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_the_mco_does_not_manage_is_never_claimed_as_drift() {
    let mut lab = drift::start(1, json!(1), json!({})).await;
    // authorized_keys is not in any MachineConfig the daemon validates (OCPBUGS-9178).
    lab.cluster.disk("worker-0").unwrap().put(
        "/home/core/.ssh/authorized_keys.d/ignition",
        SimFile::regular(b"ssh-ed25519 AAAA intruder", 0o600),
    );
    // A negative: 3 s (three debounces) in which the file is never claimed as drift and the
    // node stays Done.
    lab.hold(Duration::from_secs(3)).await;
    let api: Api<DriftRemediation> = Api::all(lab.client.clone());
    assert!(
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(
        lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["annotations"][STATE],
        "Done"
    );
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_blocked_mid_way_times_out_naming_the_budget_and_is_never_uncordoned_by_us() {
    let mut lab = drift::start(2, json!(1), json!({"timeouts": {"drainSeconds": 3}})).await;
    lab.drift("worker-0");
    lab.reach("worker-0-1", DriftPhase::ForceRequested).await;
    // After the pre-flight passed: a workload arrives with a budget allowing nothing.
    lab.api
        .create(NAMESPACES, "", json!({"metadata": {"name": "shop"}}))
        .unwrap();
    lab.api
        .create(
            PODS,
            "shop",
            json!({"metadata": {"name": "db-0", "labels": {"app": "db"}},
            "spec": {"nodeName": "worker-0", "containers": [{"name": "db", "image": "db"}]}}),
        )
        .unwrap();
    lab.api
        .create(PDBS, "shop", json!({"metadata": {"name": "db"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}))
        .unwrap();
    lab.reach("worker-0-1", DriftPhase::Applying).await;
    eventually("cordoned by the MCO", Duration::from_secs(40), async || {
        lab.api.get(NODES, "", "worker-0").unwrap()["spec"]["unschedulable"] == true
    })
    .await;
    // Someone uncordons by hand during the drain: the MCO cordons again; we stay out of it.
    lab.api
        .merge(
            NODES,
            "",
            "worker-0",
            &json!({"spec": {"unschedulable": false}}),
            false,
        )
        .unwrap();
    eventually("cordoned again", Duration::from_secs(40), async || {
        lab.api.get(NODES, "", "worker-0").unwrap()["spec"]["unschedulable"] == true
    })
    .await;
    let failed = lab.reach("worker-0-1", DriftPhase::Failed).await;
    let error = failed.status.unwrap().last_error.unwrap();
    assert!(error.contains("blocked by shop/db"), "{error}");
    assert!(lab.api.get(PODS, "shop", "db-0").is_ok(), "never bypassed");
    assert_eq!(
        lab.api.get(NODES, "", "worker-0").unwrap()["spec"]["unschedulable"],
        true,
        "never uncordoned by us"
    );
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_machine_remediation_never_takes_a_planned_reboot_for_a_hang() {
    // The whole controller (machines and drift) with the health check watching: the MCO's
    // reboot makes the Node NotReady longer than the health check's timeout.
    let mut whole = drift::whole(json!({"debounceSeconds": 1})).await;
    let (api, cluster) = (&whole.api, &whole.cluster);
    let uid = api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    let boots = cluster.host("worker-0").unwrap().host.power_offs();
    cluster
        .disk("worker-0")
        .unwrap()
        .put("/etc/demo/rules.json", SimFile::regular(b"[]", 0o644));
    let mut saw_trigger = false;
    let done = eventually("worker-0-1 to end", Duration::from_secs(60), async || {
        let machine = api.get(MACHINES, MACHINE_NAMESPACE, "worker-0").unwrap();
        saw_trigger |= machine["metadata"]["annotations"]
            .get(EXTERNAL_REMEDIATION)
            .is_some();
        whole
            .drift_remediation("worker-0-1")
            .filter(|d| d.status.as_ref().is_some_and(|s| s.phase.is_terminal()))
    })
    .await;
    assert_eq!(
        done.status.as_ref().unwrap().phase,
        DriftPhase::Succeeded,
        "{:#?}",
        done.status
    );
    assert!(
        saw_trigger,
        "the health check did take the reboot for a failure (the test needs it)"
    );
    no_machine_fencing(&whole, &uid, boots + 1).await;
    whole.stop().await;
}

/// The machine remediation let the node be: every Remediation of it ends Cancelled (held
/// for the planned reboot until then), nothing was powered off, the Node was never
/// deleted, and the host's power went off `offs` times in all.
async fn no_machine_fencing(whole: &Lab, uid: &serde_json::Value, offs: usize) {
    let (client, api, cluster) = (&whole.client, &whole.api, &whole.cluster);
    let remediations: Api<Remediation> = Api::namespaced(client.clone(), MACHINE_NAMESPACE);
    let all = eventually(
        "every Remediation Cancelled",
        Duration::from_secs(40),
        async || {
            let all = remediations.list(&Default::default()).await.unwrap().items;
            // The health check's trigger made one at least: none would prove nothing.
            let ended = !all.is_empty()
                && all.iter().all(|r| {
                    r.status
                        .as_ref()
                        .is_some_and(|s| s.phase == RemediationPhase::Cancelled)
                });
            if ended {
                Ok(all)
            } else {
                Err(format!(
                    "{:#?}",
                    all.iter().map(|r| &r.status).collect::<Vec<_>>()
                ))
            }
        },
    )
    .await;
    for r in all {
        let status = r.status.unwrap_or_default();
        assert!(!status.steps.iter().any(|s| s.step == "PowerOffRequested"));
        let held = status.conditions.iter().find(|c| c.type_ == "Held");
        assert!(
            held.is_none_or(|c| c.reason == "PlannedReboot"),
            "{:?}",
            status.conditions
        );
    }
    assert_eq!(
        api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"],
        *uid,
        "the Node was never deleted"
    );
    assert_eq!(
        cluster.host("worker-0").unwrap().host.power_offs(),
        offs,
        "the MCO's reboot only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_mco_reboot_after_a_drain_timeout_is_still_guarded_from_fencing() {
    let mut whole =
        drift::whole(json!({"debounceSeconds": 1, "timeouts": {"drainSeconds": 2}})).await;
    let (api, cluster) = (&whole.api, &whole.cluster);
    let uid = api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    let boots = cluster.host("worker-0").unwrap().host.power_offs();
    // A workload on worker-0 whose budget will arrive once the pre-flight has passed.
    api.create(NAMESPACES, "", json!({"metadata": {"name": "shop"}}))
        .unwrap();
    api.create(
        PODS,
        "shop",
        json!({"metadata": {"name": "db-0", "labels": {"app": "db"}},
        "spec": {"nodeName": "worker-0", "containers": [{"name": "db", "image": "db"}]}}),
    )
    .unwrap();
    eventually(
        "the workload running",
        Duration::from_secs(40),
        async || api.get(PODS, "shop", "db-0").unwrap()["status"]["phase"] == "Running",
    )
    .await;
    // The force helper waits (its image pull hangs) until the budget is in place.
    cluster.hold_pods("worker-0", true);
    cluster
        .disk("worker-0")
        .unwrap()
        .put("/etc/demo/rules.json", SimFile::regular(b"[]", 0o644));
    whole.reach("worker-0-1", DriftPhase::ForceRequested).await;
    api.create(PDBS, "shop", json!({"metadata": {"name": "db"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}))
        .unwrap();
    cluster.hold_pods("worker-0", false);
    let failed = whole.reach("worker-0-1", DriftPhase::Failed).await;
    let error = failed.status.unwrap().last_error.unwrap();
    assert!(error.contains("blocked by shop/db"), "{error}");
    let marked = |node: &serde_json::Value| node["metadata"]["annotations"][PLANNED_REBOOT].clone();
    let node = api.get(NODES, "", "worker-0").unwrap();
    assert_eq!(marked(&node), "worker-0-1", "kept after the drain timeout");
    // The budget goes: the MCO's own drain completes and it reboots the node, later.
    api.delete(PDBS, "shop", "db", None).unwrap();
    let mut saw_trigger = false;
    eventually("the mark removed", Duration::from_secs(40), async || {
        let node = api.get(NODES, "", "worker-0").unwrap();
        let annotations = &node["metadata"]["annotations"];
        let busy = annotations[DESIRED_DRAIN] != annotations[LAST_APPLIED_DRAIN]
            || annotations[DESIRED_DRAIN]
                .as_str()
                .is_some_and(|d| d.starts_with("drain-"))
            || annotations[POST_CONFIG_ACTION] == "Rebooting"
            || !ready(&node);
        assert!(!busy || marked(&node) == "worker-0-1", "{annotations}");
        let machine = api.get(MACHINES, MACHINE_NAMESPACE, "worker-0").unwrap();
        saw_trigger |= machine["metadata"]["annotations"]
            .get(EXTERNAL_REMEDIATION)
            .is_some();
        if marked(&node).is_null() {
            Ok(())
        } else {
            Err(annotations.clone())
        }
    })
    .await;
    assert!(
        cluster.host("worker-0").unwrap().host.power_offs() > boots,
        "the MCO rebooted the node"
    );
    assert!(
        saw_trigger,
        "the health check did take the late reboot for a failure (the test needs it)"
    );
    no_machine_fencing(&whole, &uid, boots + 1).await;
    let machine = api.get(MACHINES, MACHINE_NAMESPACE, "worker-0").unwrap();
    assert!(
        machine["metadata"]["annotations"]
            .get(EXTERNAL_REMEDIATION)
            .is_none(),
        "the trigger of the planned reboot was cleared"
    );
    // The re-apply healed the drift. The MCD says Done a moment after the uncordon: an
    // attempt opened in between heals by itself in its debounce and requests nothing.
    if whole.drift_remediation("worker-0-2").is_some() {
        let healed = whole.reach("worker-0-2", DriftPhase::SelfHealed).await;
        assert_eq!(steps(&healed), ["DriftDetected", "SelfHealed"]);
    }
    whole.stop().await;
}

fn ready(node: &serde_json::Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cordoned_by_hand_uses_budget_so_the_second_drifted_node_waits() {
    let mut lab = drift::start(3, json!(2), json!({})).await;
    lab.api
        .merge(
            NODES,
            "",
            "worker-2",
            &json!({"spec": {"unschedulable": true}}),
            false,
        )
        .unwrap();
    lab.drift("worker-0");
    lab.drift("worker-1");
    eventually(
        "one started, one held by the budget",
        Duration::from_secs(40),
        async || {
            let events = lab.events();
            events.contains("\"reason\":\"PoolBudget\"")
                && events.contains("\"reason\":\"ForceRequested\"")
        },
    )
    .await;
    assert!(
        lab.events().contains("worker-2"),
        "the cordoned node is named"
    );
    let a = lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    let b = lab.reach("worker-1-1", DriftPhase::Succeeded).await;
    let at = |r: &DriftRemediation, step: &str| {
        r.status
            .as_ref()
            .unwrap()
            .steps
            .iter()
            .find(|s| s.step == step)
            .unwrap()
            .time
            .clone()
    };
    let (first, second) = if at(&a, "ForceRequested") < at(&b, "ForceRequested") {
        (&a, &b)
    } else {
        (&b, &a)
    };
    assert!(at(first, "Succeeded") <= at(second, "ForceRequested"));
    // The admin's cordon is theirs: left as it was.
    assert_eq!(
        lab.api.get(NODES, "", "worker-2").unwrap()["spec"]["unschedulable"],
        true
    );
    lab.stop().await;
}
