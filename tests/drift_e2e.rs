//! The drift coordinator end to end: the simulated cluster with its Machine Config Operator
//! (a daemon per node validating a simulated disk, the drain controller, pools) and the
//! coordinator on a real kube client.

use std::time::{Duration, Instant};

use baremend::api::annotations::PLANNED_REBOOT;
use baremend::api::{DriftPhase, DriftRemediation};
use baremend::drift::controller::HelperPods;
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::ClusterSpec;
use baremend_sim::cluster::local::{MCPS, NAMESPACES, NODES, PDBS, PODS};
use baremend_sim::cluster::mco::FORCE_FILE;
use baremend_sim::cluster::timing::Timing;
use serde_json::json;

use baremend_testkit as common;
use common::drift::DriftLab;

use common::drift::{self, steps};
use common::eventually;
use common::lab::{DRIFT_REMEDIATIONS, Lab, STATE, metrics_show, patch_drift_policy, warning_in};
use common::rbac;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_force_reapplied_by_the_mco_and_verified() {
    let mut lab = drift::start(2, json!(1), json!({})).await;
    let boots = lab.reboots("worker-0");
    let drifted_at = Instant::now();
    lab.drift("worker-0");
    let first = lab.reach("worker-0-1", DriftPhase::Debouncing).await;
    assert_eq!(first.spec.target, "/etc/demo/rules.json");
    assert_eq!(first.spec.pool, "worker");
    let done = lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    let took = drifted_at.elapsed();
    assert_eq!(
        steps(&done),
        [
            "DriftDetected",
            "Debounced",
            "ForceRequested",
            "PickedUp",
            "Drained",
            "Rebooting",
            "Rebooted",
            "Succeeded"
        ],
        "{:#?}",
        done.status
    );
    // On the Node, the pool and the DriftRemediation alike; the last of the step's work
    // (the helper pod removed and the metrics counted before).
    for kind in ["Node", "MachineConfigPool", "DriftRemediation"] {
        lab.wait_event("Succeeded", kind).await;
    }
    let status = done.status.clone().unwrap();
    // The expected content is recorded as a hash, never as bytes.
    assert_eq!(status.expected_sha256.as_ref().map(String::len), Some(64));
    assert!(lab.reboots("worker-0") > boots);
    assert!(!lab.forcefile("worker-0"));
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert_eq!(node["metadata"]["annotations"][STATE], "Done");
    assert_ne!(node["spec"]["unschedulable"], true);
    // The helper pod is gone once the MCD took the forcefile.
    assert!(lab.api.list(PODS, Some("baremend")).is_empty());
    let events = lab.events();
    for reason in ["DriftDetected", "ForceRequested", "PickedUp", "Succeeded"] {
        assert!(
            events.contains(&format!("\"reason\":\"{reason}\"")),
            "{reason}"
        );
    }
    let metrics = lab.metrics.encode();
    assert!(
        metrics.contains(
            "mco_remediations_total{action=\"Force\",outcome=\"Succeeded\",reason=\"\"} 1"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("mco_remediation_duration_seconds_count{action=\"Force\",outcome=\"Succeeded\",reason=\"\"} 1"));
    eventually(
        "the reboot counted for the day",
        Duration::from_secs(40),
        async || {
            lab.metrics
                .encode()
                .contains("mco_node_reboot_frequency{node=\"worker-0\",pool=\"worker\"} 1")
        },
    )
    .await;
    println!("drift to verified Done: {took:?}");
    // The MCO's controller and daemons, and the kubelet running the helper, were never refused.
    lab.assert_no_actor_refused();
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_reverted_within_the_debounce_self_heals_with_no_action() {
    let mut lab = drift::start(1, json!(1), json!({"debounceSeconds": 5})).await;
    let disk = lab.cluster.disk("worker-0").unwrap().clone();
    let original = disk.get("/etc/demo/rules.json").unwrap();
    let boots = lab.reboots("worker-0");
    lab.drift("worker-0");
    lab.reach("worker-0-1", DriftPhase::Debouncing).await;
    disk.put("/etc/demo/rules.json", original);
    let healed = lab.reach("worker-0-1", DriftPhase::SelfHealed).await;
    assert_eq!(steps(&healed), ["DriftDetected", "SelfHealed"]);
    assert_eq!(lab.reboots("worker-0"), boots);
    assert!(
        lab.api.list(PODS, Some("baremend")).is_empty(),
        "no helper was started"
    );
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_drifted_nodes_of_a_pool_with_max_unavailable_one_go_one_at_a_time() {
    let mut lab = drift::start(2, json!(1), json!({})).await;
    lab.drift("worker-0");
    lab.drift("worker-1");
    let a = lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    let b = lab.reach("worker-1-1", DriftPhase::Succeeded).await;
    let time = |r: &DriftRemediation, step: &str| {
        r.status
            .as_ref()
            .unwrap()
            .steps
            .iter()
            .find(|s| s.step == step)
            .map(|s| s.time.clone())
            .unwrap()
    };
    // One finished before the other started.
    let (first, second) = if time(&a, "ForceRequested") < time(&b, "ForceRequested") {
        (&a, &b)
    } else {
        (&b, &a)
    };
    assert!(
        time(first, "Succeeded") <= time(second, "ForceRequested"),
        "{:#?} {:#?}",
        first.status,
        second.status
    );
    let held = second
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Held")
        .cloned()
        .unwrap();
    assert_eq!(held.status, "False", "the hold was lifted");
    assert!(lab.events().contains("\"reason\":\"PoolBudget\""));
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_blocked_by_a_pdb_is_refused_up_front_naming_the_budget() {
    let mut lab = drift::start(1, json!(1), json!({})).await;
    // Seed 001: the router's PDB on a single worker allows no disruption.
    lab.api
        .create(
            NAMESPACES,
            "",
            json!({"metadata": {"name": "openshift-ingress"}}),
        )
        .unwrap();
    lab.api
        .create(PODS, "openshift-ingress", json!({"metadata": {"name": "router-default-1", "labels": {"ingresscontroller.operator.openshift.io/deployment-ingresscontroller": "default"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "router-default", "uid": "8c1d2e3f-0000-4000-8000-000000000001", "controller": true}]},
            "spec": {"nodeName": "worker-0", "containers": [{"name": "router", "image": "router"}]}}))
        .unwrap();
    lab.api
        .create(PDBS, "openshift-ingress", json!({"metadata": {"name": "router-default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"ingresscontroller.operator.openshift.io/deployment-ingresscontroller": "default"}}}}))
        .unwrap();
    // A single-worker pool needs the admin's approval first (here on the node).
    lab.drift("worker-0");
    eventually("held for approval", Duration::from_secs(40), async || {
        lab.events()
            .contains("\"reason\":\"SingleNodeNeedsApproval\"")
    })
    .await;
    lab.api
        .merge(NODES, "", "worker-0", &json!({"metadata": {"annotations": {"baremend.io/approve-drift-remediation": "true"}}}), false)
        .unwrap();
    eventually("held by the PDB", Duration::from_secs(40), async || {
        lab.events()
            .contains("PodDisruptionBudget openshift-ingress/router-default allows no disruption")
    })
    .await;
    let held = lab.drift_remediation("worker-0-1").unwrap();
    let status = held.status.unwrap();
    assert_eq!(status.phase, DriftPhase::Pending);
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Held")
        .unwrap();
    assert_eq!(condition.reason, "BlockedByPodDisruptionBudget");
    // Nothing was evicted, nothing cordoned, no forcefile.
    assert!(
        lab.api
            .get(PODS, "openshift-ingress", "router-default-1")
            .is_ok()
    );
    assert_ne!(
        lab.api.get(NODES, "", "worker-0").unwrap()["spec"]["unschedulable"],
        true
    );
    assert!(!lab.forcefile("worker-0"));
    // The gauges are recounted from the caches every second.
    metrics_show(
        &lab,
        &[
            "mco_node_config_drift_count{pool=\"worker\"} 1",
            "mco_node_config_drift_detected{pool=\"worker\"} 1",
            "mco_remediations_held{reason=\"BlockedByPodDisruptionBudget\"} 1",
        ],
        Duration::from_secs(40),
    )
    .await;
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_restore_action_writes_the_file_back_without_a_reboot() {
    let mut lab = drift::start(2, json!(1), json!({"action": "Restore"})).await;
    let boots = lab.reboots("worker-0");
    lab.drift("worker-0");
    let done = lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    assert_eq!(
        steps(&done),
        [
            "DriftDetected",
            "Debounced",
            "RestoreRequested",
            "Succeeded"
        ]
    );
    assert_eq!(lab.reboots("worker-0"), boots, "no reboot");
    // Restored from the rendered config's gzip+base64 data URL, byte for byte.
    let config =
        lab.cluster.mco().unwrap().rendered["worker"].files["/etc/demo/rules.json"].clone();
    assert_eq!(
        lab.cluster
            .disk("worker-0")
            .unwrap()
            .get("/etc/demo/rules.json")
            .unwrap(),
        config
    );
    // The kubelet read the helper's Secret through the Node authorizer's graph (its pod mounts
    // it) and was refused nothing.
    lab.assert_no_actor_refused();
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_pool_holds_until_the_admin_approves() {
    let mut lab = drift::start(2, json!(1), json!({})).await;
    lab.api
        .merge(
            MCPS,
            "",
            "worker",
            &json!({"spec": {"paused": true}}),
            false,
        )
        .unwrap();
    lab.drift("worker-0");
    eventually("held for approval", Duration::from_secs(40), async || {
        lab.events()
            .contains("\"reason\":\"PausedPoolNeedsApproval\"")
    })
    .await;
    assert!(!lab.forcefile("worker-0"));
    lab.api
        .merge(MCPS, "", "worker", &json!({"metadata": {"annotations": {"baremend.io/approve-drift-remediation": "true"}}}), false)
        .unwrap();
    lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_with_our_own_drain_cordons_evicts_restores_and_uncordons() {
    let mut lab = drift::start(
        2,
        json!(1),
        json!({"action": "Restore", "drainBeforeRestore": true}),
    )
    .await;
    lab.api
        .create(NAMESPACES, "", json!({"metadata": {"name": "shop"}}))
        .unwrap();
    lab.api
        .create(PODS, "shop", json!({"metadata": {"name": "web-0", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "2b0c7a52-0000-4000-8000-000000000002", "controller": true}]},
            "spec": {"nodeName": "worker-0", "containers": [{"name": "web", "image": "web"}]}}))
        .unwrap();
    lab.api
        .create(PDBS, "shop", json!({"metadata": {"name": "web"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}))
        .unwrap();
    let boots = lab.reboots("worker-0");
    lab.drift("worker-0");
    let done = lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    assert_eq!(
        steps(&done),
        [
            "DriftDetected",
            "Debounced",
            "CordonRequested",
            "RestoreRequested",
            "Uncordoned",
            "Succeeded"
        ]
    );
    assert!(lab.api.get(PODS, "shop", "web-0").is_err(), "evicted");
    assert_ne!(
        lab.api.get(NODES, "", "worker-0").unwrap()["spec"]["unschedulable"],
        true
    );
    assert_eq!(lab.reboots("worker-0"), boots, "no reboot");
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_machine_config_nodes_the_annotations_decide() {
    // An older OpenShift serves no MachineConfigNode: the coordinator does without.
    let mut lab = drift::start_with(2, json!(1), json!({}), |api| {
        api.delete(
            baremend_sim::cluster::local::CRDS,
            "",
            "machineconfignodes.machineconfiguration.openshift.io",
            None,
        )
        .unwrap();
    })
    .await;
    lab.drift("worker-0");
    let done = lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    assert!(steps(&done).contains(&"Rebooted".to_string()));
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_helper_still_pending_at_the_pickup_timeout_is_over_before_the_forcefile_goes() {
    let mut lab = drift::start(2, json!(1), json!({"timeouts": {"pickupSeconds": 2}})).await;
    let disk = lab.cluster.disk("worker-0").unwrap().clone();
    // The kubelet's image pull hangs: the force helper stays Pending past the pickup timeout.
    lab.cluster.hold_pods("worker-0", true);
    lab.drift("worker-0");
    lab.reach("worker-0-1", DriftPhase::ForceRequested).await;
    let pod = |name: &str| lab.api.get(PODS, "baremend", name).ok();
    eventually(
        "the force helper, Pending",
        Duration::from_secs(40),
        async || pod("worker-0-1-force").is_some_and(|p| p["status"]["phase"] == "Pending"),
    )
    .await;
    let mut released = false;
    let status = eventually("ForceFileRemoved", Duration::from_secs(40), async || {
        // Read in the order the coordinator writes, so that a later read sees the earlier
        // write: the mark before the status, the unforce helper before the force helper.
        let mark = lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["annotations"]
            [PLANNED_REBOOT]
            .clone();
        let status = lab
            .api
            .get(common::lab::DRIFT_REMEDIATIONS, "", "worker-0-1")
            .unwrap()["status"]
            .clone();
        let unforce = pod("worker-0-1-unforce");
        let force = pod("worker-0-1-force");
        let on_disk = disk.get(FORCE_FILE).is_some();
        if unforce.is_some() {
            assert!(
                force.as_ref().is_none_or(|p| matches!(
                    p["status"]["phase"].as_str(),
                    Some("Succeeded" | "Failed")
                )),
                "the unforce helper started beside a force helper not over: {force:?}"
            );
        }
        let removed = status["steps"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["step"] == "ForceFileRemoved"));
        if removed {
            assert!(!on_disk, "ForceFileRemoved with the forcefile still there");
            return Ok(status);
        }
        if status["forceFileWritten"] == true {
            assert_eq!(
                mark, "worker-0-1",
                "the mark stays while a forcefile is owed"
            );
        }
        if !released
            && status["phase"] == "Failed"
            && force.is_some_and(|p| p["metadata"]["deletionTimestamp"].is_string())
        {
            // The coordinator stopped the helper; the kubelet lets go, and the helper it was
            // starting still writes the forcefile once before it is gone.
            lab.cluster.hold_pods("worker-0", false);
            released = true;
        }
        Err(status)
    })
    .await;
    assert!(released, "the force helper was deleted while Pending");
    assert_eq!(status["phase"], "Failed");
    assert_eq!(status["forceFileWritten"], false);
    let failed = lab.drift_remediation("worker-0-1").unwrap();
    let order = steps(&failed);
    let at = |step: &str| order.iter().position(|s| s == step).unwrap();
    assert!(at("Failed") < at("ForceFileRemoved"), "{order:?}");
    assert_eq!(
        failed
            .status
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.type_ == "Failed")
            .unwrap()
            .reason,
        "PickupTimeout"
    );
    lab.stop().await;
}

/// The DriftRemediation once its Held condition is True with `reason`; fails after 20 s.
async fn held_by(lab: &common::lab::Lab, name: &str, reason: &str) -> DriftRemediation {
    eventually(
        &format!("{name} held: {reason}"),
        Duration::from_secs(20),
        async || {
            let remediation = lab.drift_remediation(name);
            let held = remediation
                .as_ref()
                .and_then(|r| r.status.as_ref())
                .is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Held" && c.status == "True" && c.reason == reason)
                });
            match remediation {
                Some(r) if held => Ok(r),
                other => Err(format!("{other:#?}")),
            }
        },
    )
    .await
}

/// The Held condition's message.
fn held_message(remediation: &DriftRemediation) -> String {
    let status = remediation.status.as_ref().unwrap();
    let held = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Held")
        .unwrap();
    held.message.clone()
}

/// Nothing was done on the node: no forcefile, no helper, no reboot, no cordon.
fn assert_nothing_done(lab: &common::lab::Lab, node: &str, boots: usize) {
    assert!(!lab.forcefile(node), "{node}: a forcefile");
    assert!(
        lab.api.list(PODS, Some("baremend")).is_empty(),
        "a helper pod"
    );
    assert_eq!(lab.reboots(node), boots, "{node} rebooted");
    let object = lab.api.get(NODES, "", node).unwrap();
    assert_ne!(object["spec"]["unschedulable"], true, "{node} cordoned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_mode_records_drift_and_does_nothing_until_switched_to_remediate() {
    let mut lab = drift::start(2, json!(1), json!({"mode": "Observe"})).await;
    let boots = lab.reboots("worker-0");
    lab.drift("worker-0");
    let held = held_by(&lab, "worker-0-1", "ObserveOnly").await;
    assert_eq!(held.status.as_ref().unwrap().phase, DriftPhase::Pending);
    assert_eq!(steps(&held), ["DriftDetected", "Debounced"]);
    assert!(held_message(&held).contains("mode is Observe"), "{held:?}");
    // Detected, classified, told and counted as without Observe.
    lab.wait_event("ObserveOnly", "Node").await;
    metrics_show(
        &lab,
        &[
            "mco_node_config_drift_detected{pool=\"worker\"} 1",
            "mco_remediations_held{reason=\"ObserveOnly\"} 1",
        ],
        Duration::from_secs(10),
    )
    .await;
    assert_nothing_done(&lab, "worker-0", boots);
    // Mode changes take effect on the next pass.
    patch_drift_policy(&lab, json!({"mode": "Remediate"})).await;
    let done = lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    assert!(steps(&done).contains(&"ForceRequested".to_string()));
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drift_remediation_annotation_on_a_node_holds_it_with_a_condition_naming_the_node() {
    let mut lab = drift::start(2, json!(2), json!({})).await;
    let annotation =
        json!({"metadata": {"annotations": {"baremend.io/drift-remediation": "disabled"}}});
    lab.api
        .merge(NODES, "", "worker-0", &annotation, false)
        .unwrap();
    let boots = lab.reboots("worker-0");
    lab.drift("worker-0");
    lab.drift("worker-1");
    let held = held_by(&lab, "worker-0-1", "DriftRemediationDisabled").await;
    let message = held_message(&held);
    assert!(
        message.contains("baremend.io/drift-remediation: disabled on Node worker-0"),
        "{message}"
    );
    // The other node of the pool is not held.
    lab.reach("worker-1-1", DriftPhase::Succeeded).await;
    assert_nothing_done(&lab, "worker-0", boots);
    assert_eq!(
        lab.drift_remediation("worker-0-1")
            .unwrap()
            .status
            .unwrap()
            .phase,
        DriftPhase::Pending
    );
    lab.wait_event("DriftRemediationDisabled", "DriftRemediation")
        .await;
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drift_remediation_annotation_on_a_pool_holds_its_nodes_until_it_is_removed() {
    let mut lab = drift::start(2, json!(1), json!({})).await;
    let disable = |value: serde_json::Value| json!({"metadata": {"annotations": {"baremend.io/drift-remediation": value}}});
    lab.api
        .merge(MCPS, "", "worker", &disable(json!("disabled")), false)
        .unwrap();
    let boots = lab.reboots("worker-0");
    lab.drift("worker-0");
    let held = held_by(&lab, "worker-0-1", "DriftRemediationDisabled").await;
    let message = held_message(&held);
    assert!(message.contains("on MachineConfigPool worker"), "{message}");
    assert_nothing_done(&lab, "worker-0", boots);
    lab.api
        .merge(MCPS, "", "worker", &disable(json!(null)), false)
        .unwrap();
    let done = lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    assert!(steps(&done).contains(&"ForceRequested".to_string()));
    lab.stop().await;
}

/// A helper image not pinned by digest (a `--helper-image` tag the controller could not pin
/// to the digest its own Pod runs) is never asked for: deploy/'s admission policy would refuse
/// the pod, so the remediation fails first with `HelperImageNotPinned`, saying why, before
/// any forcefile is requested or any pod created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_image_not_pinned_by_digest_fails_the_remediation_before_any_helper() {
    let spec = ClusterSpec {
        masters: 1,
        // Two workers: a single-node pool would wait for an approval first.
        workers: 2,
        timing: Timing::fast(),
        mco: true,
        mco_max_unavailable: json!(1),
        ..ClusterSpec::default()
    };
    let mut lab = Lab::builder(spec)
        .drift_policy(json!({"debounceSeconds": 1}))
        .start()
        .await;
    let options = ControllerOptions {
        drift_helpers: Some(HelperPods::new("baremend:latest")),
        ..lab.options()
    };
    lab.start_controller(options);
    lab.drift("worker-0");
    let failed = lab.reach("worker-0-1", DriftPhase::Failed).await;
    let status = serde_json::to_string(&failed.status).unwrap();
    assert!(status.contains("\"HelperImageNotPinned\""), "{status}");
    assert!(
        status.contains("the helper image baremend:latest is not pinned by digest"),
        "{status}"
    );
    assert!(
        !steps(&failed).iter().any(|s| s == "ForceRequested"),
        "{status}"
    );
    assert!(lab.api.list(PODS, Some("baremend")).is_empty());
    assert!(!lab.forcefile("worker-0"));
    lab.stop().await;
}

/// A pass that fails is told where an operator looks, from the one place every controller's
/// failed passes reach (`runtime::events::report_failed_pass`): a Warning on the Node whose
/// reason is the error's category and whose note names the refused call. Here the
/// coordinator may not create its DriftRemediations; given the grant back, the drift is
/// taken up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pass_is_a_warning_on_the_node_under_its_category() {
    let mut applied = serde_json::Value::Null;
    let mut lab = drift::start_with(2, json!(1), json!({}), |api| {
        applied = rbac::rules(api);
        let refused = rbac::without_verb(&applied, "driftremediations", "create");
        rbac::set_rules(api, &refused);
    })
    .await;
    lab.drift("worker-0");
    // Events about a cluster-scoped object go to the namespace `default`.
    warning_in(
        &lab,
        "default",
        ("Node", "worker-0"),
        "Forbidden",
        "CreateDriftRemediation",
    )
    .await;
    let told = common::events::told_on(
        &lab.api,
        "default",
        ("Node", "worker-0"),
        "Forbidden",
        "cannot create",
    )
    .await;
    assert!(
        told["message"]
            .as_str()
            .is_some_and(|m| m.contains("driftremediations")),
        "{told:#}"
    );
    assert!(lab.api.list(DRIFT_REMEDIATIONS, None).is_empty());
    rbac::set_rules(&lab.api, &applied);
    // Retried on the backoff (a grant is fixed where no watch sees it): the attempt opens.
    let opened = lab.reach("worker-0-1", DriftPhase::Succeeded).await;
    assert_eq!(steps(&opened)[0], "DriftDetected");
    lab.stop().await;
}
