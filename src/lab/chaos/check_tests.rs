//! The checker's tests: each invariant judged on hand-made watch streams.

use std::time::Duration;

use baremend_sim::apiserver::ObjectKey;
use baremend_sim::clock::ManualClock;
use serde_json::json;

use super::*;

fn hosts(power: Power) -> HashMap<String, Arc<SimHost>> {
    let host = SimHost::new(
        "worker-0",
        power,
        Duration::from_millis(10),
        Arc::new(ManualClock::new()),
    );
    HashMap::from([("worker-0".to_string(), Arc::new(host))])
}

fn change(plural: &str, group: &str, name: &str, kind: EventType, object: Value) -> WatchEvent {
    WatchEvent {
        revision: 1,
        key: ObjectKey {
            group: group.into(),
            plural: plural.into(),
            // Requests where their health checks put them; the rest in `ns`.
            namespace: match plural {
                "nodes" => String::new(),
                "machineremediations" => MACHINE_NAMESPACE.into(),
                "noderemediations" => NHC_NAMESPACE.into(),
                _ => "ns".into(),
            },
            name: name.into(),
        },
        kind,
        object: Arc::new(object),
        previous: None,
    }
}

fn remediation(name: &str, machine: &str, phase: &str, steps: &[&str]) -> Value {
    let steps: Vec<Value> = steps
        .iter()
        .map(|s| json!({"step": s, "attempt": 1, "time": "2026-01-01T00:00:00Z"}))
        .collect();
    json!({"apiVersion": "baremend.io/v1alpha1", "kind": "Remediation",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"machineName": machine},
        "status": {"phase": phase, "steps": steps}})
}

/// Shows `checker` worker-0's Remediation `name` powering off (its first step recorded).
fn see_powering_off(checker: &mut Checker, name: &str) {
    see_remediation(
        checker,
        name,
        "worker-0",
        "PoweringOff",
        &["PowerOffRequested"],
    );
}

/// Shows `checker` a Remediation of `machine` modified to `phase`.
fn see_remediation(checker: &mut Checker, name: &str, machine: &str, phase: &str, steps: &[&str]) {
    let object = remediation(name, machine, phase, steps);
    let event = change(
        "remediations",
        "baremend.io",
        name,
        EventType::Modified,
        object,
    );
    checker.observe(&event, &HashMap::new());
}

#[test]
fn a_node_released_while_its_host_is_on_is_a_violation_and_off_is_not() {
    let node = json!({"metadata": {"name": "worker-0"}});
    let mut checker = Checker::new(1);
    checker.observe(
        &change("nodes", "", "worker-0", EventType::Deleted, node.clone()),
        &hosts(Power::On),
    );
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(checker.violations[0].starts_with("invariant 1"));

    let mut checker = Checker::new(1);
    checker.observe(
        &change("nodes", "", "worker-0", EventType::Deleted, node),
        &hosts(Power::Off),
    );
    let tainted = json!({"metadata": {"name": "worker-0"},
        "spec": {"taints": [{"key": OUT_OF_SERVICE, "effect": "NoExecute"}]}});
    checker.observe(
        &change("nodes", "", "worker-0", EventType::Modified, tainted),
        &hosts(Power::Off),
    );
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
    // Both releases were judged (the Modified one without the taint before it is a release).
    assert_eq!(checker.judged.of(1), 2);
}

#[test]
fn the_cases_judged_are_counted_and_an_unreadable_object_is_told_not_skipped() {
    let mut checker = Checker::new(2);
    see_powering_off(&mut checker, "worker-0-1");
    see_remediation(&mut checker, "worker-0-1", "worker-0", "Succeeded", &[]);
    see_remediation(&mut checker, "worker-0-2", "worker-0", "PoweringOff", &[]);
    // Two starts (4), the second one of a Machine that had one before (6).
    assert_eq!((checker.judged.of(4), checker.judged.of(6)), (2, 1));
    assert!(checker.unreadable.is_empty(), "{:?}", checker.unreadable);
    // A Remediation whose status does not parse.
    let mut broken = remediation("worker-1-1", "worker-1", "PoweringOff", &[]);
    broken["status"]["phase"] = json!("NoSuchPhase");
    let event = change(
        "remediations",
        "baremend.io",
        "worker-1-1",
        EventType::Modified,
        broken,
    );
    checker.observe(&event, &HashMap::new());
    assert_eq!(checker.unreadable.len(), 1, "{:?}", checker.unreadable);
    assert!(checker.unreadable[0].starts_with("Remediation ns/worker-1-1 does not parse"));
    assert_eq!(
        checker.judged.of(4),
        2,
        "nothing judged on what was not read"
    );
}

#[test]
fn too_many_remediations_at_once_or_a_step_twice_or_a_stuck_one_are_violations() {
    let mut checker = Checker::new(1);
    for (name, machine) in [("worker-0-1", "worker-0"), ("worker-1-1", "worker-1")] {
        see_remediation(
            &mut checker,
            name,
            machine,
            "PoweringOff",
            &["PowerOffRequested"],
        );
    }
    assert!(
        checker
            .violations
            .iter()
            .any(|v| v.starts_with("invariant 4")),
        "{:?}",
        checker.violations
    );
    let twice: Remediation = serde_json::from_value(remediation(
        "worker-0-1",
        "worker-0",
        "Succeeded",
        &[
            "PowerOffRequested",
            "Fenced",
            "NodeDeleted",
            "NodeDeleted",
            "Succeeded",
        ],
    ))
    .unwrap();
    let stuck: Remediation = serde_json::from_value(remediation(
        "worker-1-1",
        "worker-1",
        "PoweringOn",
        &["PowerOffRequested"],
    ))
    .unwrap();
    let mut checker = Checker::new(1);
    checker.finish(&[twice, stuck], &hosts(Power::Off));
    let text = checker.violations.join("\n");
    assert!(
        text.contains("invariant 5: Remediation worker-0-1 did NodeDeleted 2 times"),
        "{text}"
    );
    assert!(
        text.contains("invariant 2: Remediation worker-1-1 stuck"),
        "{text}"
    );
    // worker-0's host is off and its latest remediation Succeeded: nobody says why.
    assert!(text.contains("invariant 3: host worker-0 is off"), "{text}");
}

#[test]
fn a_control_plane_host_fenced_without_a_quorum_of_others_is_a_violation() {
    let mut checker = Checker::new(2);
    let ready = |name: &str, ready: bool| {
        json!({"metadata": {"name": name}, "status": {"conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    };
    checker.seed_node(None, &ready("master-1", true));
    checker.seed_node(None, &ready("master-2", false));
    see_remediation(
        &mut checker,
        "master-0-1",
        "master-0",
        "PoweringOff",
        &["PowerOffRequested"],
    );
    assert!(
        checker
            .violations
            .iter()
            .any(|v| v.contains("1 other control-plane Nodes Ready")),
        "{:?}",
        checker.violations
    );
}

#[test]
fn a_start_on_a_trigger_the_previous_remediation_consumed_is_a_violation() {
    let none = HashMap::new();
    let mut checker = Checker::new(1);
    let machine = |triggered: bool| {
        let annotations = if triggered {
            json!({EXTERNAL_REMEDIATION: ""})
        } else {
            json!({})
        };
        json!({"metadata": {"name": "worker-0", "annotations": annotations}})
    };
    let set_trigger = |checker: &mut Checker, on: bool| {
        let mut event = change(
            "machines",
            "machine.openshift.io",
            "worker-0",
            EventType::Modified,
            machine(on),
        );
        event.previous = Some(Arc::new(machine(!on)));
        checker.observe(&event, &none);
    };
    let step = |checker: &mut Checker, name: &str, phase: &str| {
        see_remediation(checker, name, "worker-0", phase, &[]);
    };
    set_trigger(&mut checker, true);
    step(&mut checker, "worker-0-1", "PoweringOff");
    step(&mut checker, "worker-0-1", "PoweringOn");
    step(&mut checker, "worker-0-1", "Succeeded");
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
    // The same trigger, seen again by a lagging cache.
    step(&mut checker, "worker-0-2", "PoweringOff");
    step(&mut checker, "worker-0-2", "Cancelled");
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(checker.violations[0].starts_with("invariant 6: ns/worker-0-2"));
    // A trigger that appears again allows a new start; after a Failed one, the same
    // trigger does too (an operator deleted the Failed remediation).
    set_trigger(&mut checker, false);
    set_trigger(&mut checker, true);
    step(&mut checker, "worker-0-3", "PoweringOff");
    step(&mut checker, "worker-0-3", "Failed");
    step(&mut checker, "worker-0-4", "PoweringOff");
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    // A previous one that succeeded and was then deleted (retention) still consumed
    // the trigger.
    step(&mut checker, "worker-0-4", "Succeeded");
    let gone = remediation("worker-0-4", "worker-0", "Succeeded", &[]);
    let deleted = change(
        "remediations",
        "baremend.io",
        "worker-0-4",
        EventType::Deleted,
        gone,
    );
    checker.observe(&deleted, &none);
    step(&mut checker, "worker-0-5", "PoweringOff");
    assert_eq!(checker.violations.len(), 2, "{:?}", checker.violations);
    assert!(checker.violations[1].starts_with("invariant 6: ns/worker-0-5"));
}

/// Shows `checker` a health check's request for worker-0: `kind` is `Added` for a new
/// one; `timed_out` annotates it; `reason` is a condition reason baremend reported.
fn see_request(
    checker: &mut Checker,
    (plural, uid): (&str, &str),
    kind: EventType,
    timed_out: bool,
    reason: Option<&str>,
) {
    let annotations = if timed_out {
        json!({NHC_TIMED_OUT: "2026-11-24T10:00:00Z"})
    } else {
        json!({})
    };
    let conditions: Vec<Value> = reason
        .map(|r| json!({"type": "Processing", "status": "True", "reason": r}))
        .into_iter()
        .collect();
    let object = json!({"metadata": {"name": "worker-0", "uid": uid, "annotations": annotations},
        "status": {"remediation": "worker-0-1", "conditions": conditions}});
    let event = change(plural, "baremend.io", "worker-0", kind, object);
    checker.observe(&event, &HashMap::new());
}

/// Shows `checker` the Remediation worker-0-1, recording the NodeRemediation `u1`.
fn see_recording(checker: &mut Checker, phase: &str, steps: &[&str]) {
    let mut object = remediation("worker-0-1", "worker-0", phase, steps);
    object["spec"]["trigger"] = json!({"kind": "NodeRemediation", "name": "worker-0", "uid": "u1"});
    let event = change(
        "remediations",
        "baremend.io",
        "worker-0-1",
        EventType::Modified,
        object,
    );
    checker.observe(&event, &HashMap::new());
}

/// Invariant 10's endpoint check: a connection to the tenant's BMC endpoint is a violation
/// (in the seeds three layers keep the controller away from it: the namespace a `HostBmc`
/// must share with its Machine, the policy's `hostBmcNamespaces`, and RBAC on Secrets, so
/// only this test shows that the check can fail).
#[tokio::test]
async fn a_connection_to_the_tenants_bmc_endpoint_is_a_violation_and_none_is_not() {
    use super::super::tenant::TenantBmc;
    let (quiet, _) = TenantBmc::listen("worker-0").await.unwrap();
    let (reached, port) = TenantBmc::listen("worker-1").await.unwrap();
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    drop(stream);
    for _ in 0..200 {
        if reached.connections() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut checker = Checker::new(1);
    checker.tenant_bmcs = vec![quiet, reached];
    checker.finish(&[], &HashMap::new());
    assert_eq!(checker.judged.of(10), 2);
    assert_eq!(
        checker.violations,
        ["invariant 10: the tenant's HostBmc endpoint for worker-1 was connected to 1 time(s)"]
    );
}

/// Invariant 13: a hostile server that was let send more than the bound is a violation; one
/// never asked judges nothing.
#[test]
fn a_hostile_server_let_send_past_the_bound_is_a_violation() {
    let mut checker = Checker::new(1);
    checker.hostile_served("wc-0", 0, 0);
    assert_eq!(checker.judged.of(13), 0, "never asked: nothing judged");
    checker.hostile_served("wc-0", 3, HOSTILE_READ_LIMIT);
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
    checker.hostile_served("wc-1", 1, HOSTILE_READ_LIMIT + 1);
    assert_eq!(checker.judged.of(13), 2);
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(
        checker.violations[0]
            .starts_with("invariant 13: a hostile API server named by wc-1's Secret")
    );
}

#[test]
fn a_tenants_request_is_no_trigger_and_a_remediation_naming_it_is_a_violation() {
    let mut checker = Checker::new(1);
    let mut event = change(
        "noderemediations",
        "baremend.io",
        "worker-0",
        EventType::Added,
        json!({"metadata": {"name": "worker-0", "uid": "t1"}}),
    );
    event.key.namespace = TENANT_NAMESPACE.into();
    checker.observe(&event, &HashMap::new());
    let mut object = remediation("worker-0-1", "worker-0", "PoweringOff", &[]);
    object["spec"]["trigger"] = json!({"kind": "NodeRemediation", "name": "worker-0",
        "namespace": TENANT_NAMESPACE, "uid": "t1"});
    let started = change(
        "remediations",
        "baremend.io",
        "worker-0-1",
        EventType::Modified,
        object,
    );
    checker.observe(&started, &HashMap::new());
    checker.observe(&started, &HashMap::new());
    let said: Vec<&str> = checker
        .violations
        .iter()
        .map(|v| v.split(':').next().unwrap_or_default())
        .collect();
    assert_eq!(said, ["invariant 10"], "{:?}", checker.violations);
}

#[test]
fn a_start_on_a_request_the_previous_remediation_consumed_is_a_violation() {
    let mut checker = Checker::new(1);
    let step = |checker: &mut Checker, name: &str, phase: &str| {
        see_remediation(checker, name, "worker-0", phase, &[]);
    };
    let machine_request = ("machineremediations", "u1");
    see_request(&mut checker, machine_request, EventType::Added, false, None);
    step(&mut checker, "worker-0-1", "PoweringOff");
    step(&mut checker, "worker-0-1", "Succeeded");
    // The request's status written by baremend is no new request.
    see_request(
        &mut checker,
        machine_request,
        EventType::Modified,
        false,
        None,
    );
    step(&mut checker, "worker-0-2", "PoweringOff");
    step(&mut checker, "worker-0-2", "Succeeded");
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(checker.violations[0].starts_with("invariant 6: ns/worker-0-2"));
    // A NodeHealthCheck's request for its Node allows a new start.
    see_request(
        &mut checker,
        ("noderemediations", "u2"),
        EventType::Added,
        false,
        None,
    );
    step(&mut checker, "worker-0-3", "PoweringOff");
    step(&mut checker, "worker-0-3", "Succeeded");
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    // ... once: the next start is on a consumed trigger again.
    step(&mut checker, "worker-0-4", "PoweringOff");
    assert_eq!(checker.violations.len(), 2, "{:?}", checker.violations);
    assert!(checker.violations[1].starts_with("invariant 6: ns/worker-0-4"));
}

fn invariant_9(checker: &Checker) -> Vec<&String> {
    checker
        .violations
        .iter()
        .filter(|v| v.starts_with("invariant 9"))
        .collect()
}

#[test]
fn a_power_off_request_after_a_timeout_seen_before_the_proof_or_a_host_left_off_is_a_violation() {
    let node_request = ("noderemediations", "u1");
    let stopped = |checker: &mut Checker| {
        see_request(checker, node_request, EventType::Added, false, None);
        see_recording(checker, "PoweringOff", &["PowerOffRequested"]);
        see_request(checker, node_request, EventType::Modified, true, None);
        see_request(
            checker,
            node_request,
            EventType::Modified,
            true,
            Some("RemediationTimedOutByNhc"),
        );
    };
    // Power-off requested again after it saw the timeout.
    let mut checker = Checker::new(1);
    stopped(&mut checker);
    assert_eq!(checker.timeouts.before_proof, 1);
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
    let again = ["PowerOffRequested", "PowerOffRequested"];
    see_recording(&mut checker, "PoweringOff", &again);
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(
        checker.violations[0].starts_with("invariant 9: ns/worker-0-1 requested power-off again"),
        "{:?}",
        checker.violations
    );
    // Cancelled as it should, but the host is left off; then on: no violation.
    for (power, violations) in [(Power::Off, 1), (Power::On, 0)] {
        let mut checker = Checker::new(1);
        stopped(&mut checker);
        see_recording(
            &mut checker,
            "Cancelled",
            &["PowerOffRequested", "PowerOffWithdrawn"],
        );
        checker.finish(&[], &hosts(power));
        let ours = invariant_9(&checker);
        assert_eq!(ours.len(), violations, "{power:?}: {ours:?}");
        if let Some(v) = ours.first() {
            assert!(v.contains("host worker-0 left off"), "{v}");
        }
    }
}

#[test]
fn a_new_power_cycle_after_a_timeout_seen_after_the_proof_is_a_violation() {
    let node_request = ("noderemediations", "u1");
    let mut checker = Checker::new(1);
    see_request(&mut checker, node_request, EventType::Added, false, None);
    let powering_on = [
        "PowerOffRequested",
        "Fenced",
        "NodeDeleted",
        "PowerOnRequested",
    ];
    see_recording(&mut checker, "PoweringOn", &powering_on);
    let completing = Some("CompletingAfterTimeout");
    see_request(
        &mut checker,
        node_request,
        EventType::Modified,
        true,
        completing,
    );
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
    // The Node is not back: a new power cycle on the request the health check gave up.
    let mut retried = powering_on.to_vec();
    retried.push("Retry");
    see_recording(&mut checker, "PoweringOff", &retried);
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(
        checker.violations[0].starts_with("invariant 9: ns/worker-0-1 requested power-off again"),
        "{:?}",
        checker.violations
    );
    // Its withdrawal then says "cancelled for the timeout" without a proof in this cycle:
    // no second violation, but the cycle that released the Node did not complete.
    retried.push("PowerOffWithdrawn");
    see_recording(&mut checker, "Cancelled", &retried);
    let cancelled = Some("RemediationTimedOutByNhc");
    see_request(
        &mut checker,
        node_request,
        EventType::Modified,
        true,
        cancelled,
    );
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    let mut last = remediation("worker-0-1", "worker-0", "Cancelled", &retried);
    last["spec"]["trigger"] = json!({"kind": "NodeRemediation", "uid": "u1"});
    checker.finish(&[serde_json::from_value(last).unwrap()], &hosts(Power::On));
    let ours = invariant_9(&checker);
    assert_eq!(ours.len(), 2, "{ours:?}");
    assert!(
        ours[1].contains("ended Cancelled without completing"),
        "{ours:?}"
    );
}

#[test]
fn a_remediation_proven_off_whose_request_timed_out_must_complete_the_cycle() {
    let node_request = ("noderemediations", "u1");
    let fenced = ["PowerOffRequested", "Fenced"];
    // Proven off, then timed out; or timed out, then proven off (the proof comes first).
    let proven_then_timed_out = |checker: &mut Checker| {
        see_request(checker, node_request, EventType::Added, false, None);
        see_recording(checker, "Fenced", &fenced);
        see_request(checker, node_request, EventType::Modified, true, None);
    };
    let timed_out_then_proven = |checker: &mut Checker| {
        see_request(checker, node_request, EventType::Added, false, None);
        see_recording(checker, "PoweringOff", &["PowerOffRequested"]);
        see_request(checker, node_request, EventType::Modified, true, None);
        see_recording(checker, "Fenced", &fenced);
    };
    // Reported cancelled for the timeout after the proof: at once.
    let mut checker = Checker::new(1);
    proven_then_timed_out(&mut checker);
    assert_eq!(checker.timeouts.after_proof, 1);
    let reason = Some("RemediationTimedOutByNhc");
    see_request(
        &mut checker,
        node_request,
        EventType::Modified,
        true,
        reason,
    );
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(checker.violations[0].contains("cancelled for the NodeHealthCheck's timeout"));
    // It must power on (or fail).
    let ended = |phase: &str, steps: &[&str]| -> Remediation {
        let mut object = remediation("worker-0-1", "worker-0", phase, steps);
        object["spec"]["trigger"] = json!({"kind": "NodeRemediation", "uid": "u1"});
        serde_json::from_value(object).unwrap()
    };
    let completed = ["PowerOffRequested", "Fenced", "PowerOnRequested"];
    let cases = [
        (ended("Cancelled", &fenced), 1),
        (ended("Succeeded", &fenced), 1),
        (ended("Succeeded", &completed), 0),
        (ended("Failed", &fenced), 0),
    ];
    for (last, violations) in cases {
        let phase = last.status.as_ref().map(|s| s.phase);
        let plays: [&dyn Fn(&mut Checker); 2] = [&proven_then_timed_out, &timed_out_then_proven];
        for play in plays {
            let mut checker = Checker::new(1);
            play(&mut checker);
            checker.finish(std::slice::from_ref(&last), &hosts(Power::On));
            let ours = invariant_9(&checker);
            assert_eq!(ours.len(), violations, "{phase:?}: {ours:?}");
        }
    }
}

/// Shows `checker` the health check setting the trigger on Machine worker-0.
fn see_trigger(checker: &mut Checker) {
    let machine = json!({"metadata": {"name": "worker-0",
        "annotations": {EXTERNAL_REMEDIATION: ""}}});
    let event = change(
        "machines",
        "machine.openshift.io",
        "worker-0",
        EventType::Modified,
        machine,
    );
    checker.observe(&event, &HashMap::new());
}

/// Shows `checker` Node worker-0 with these annotations.
fn see_node(checker: &mut Checker, annotations: Value) {
    let node = json!({"metadata": {"name": "worker-0", "annotations": annotations}});
    let event = change("nodes", "", "worker-0", EventType::Modified, node);
    checker.observe(&event, &hosts(Power::On));
}

/// Shows `checker` the DriftRemediation `name` of worker-0 in `phase`, with `steps`.
fn see_drift(checker: &mut Checker, name: &str, phase: &str, steps: &[&str]) {
    let steps: Vec<Value> = steps.iter().map(|s| json!({"step": s})).collect();
    let object = json!({"metadata": {"name": name}, "spec": {"nodeName": "worker-0"},
        "status": {"phase": phase, "steps": steps}});
    let event = change(
        "driftremediations",
        "baremend.io",
        name,
        EventType::Modified,
        object,
    );
    checker.observe(&event, &HashMap::new());
}

#[test]
fn a_power_off_request_on_a_marked_node_or_during_an_mco_re_apply_is_a_violation() {
    let drain =
        |desired: &str, applied: &str| json!({DESIRED_DRAIN: desired, LAST_APPLIED_DRAIN: applied});
    let power_off = |checker: &mut Checker, name: &str| {
        see_trigger(checker);
        see_powering_off(checker, name);
    };
    // Marked: whatever the MCO shows.
    let mut checker = Checker::new(2);
    see_node(&mut checker, json!({PLANNED_REBOOT: "worker-0-1"}));
    power_off(&mut checker, "worker-0-1");
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(checker.violations[0].starts_with("invariant 7: ns/worker-0-1"));
    // Not marked, but a drain pending, then the reboot: a second request in each.
    let mut checker = Checker::new(2);
    see_node(
        &mut checker,
        drain("drain-rendered-a", "uncordon-rendered-a"),
    );
    power_off(&mut checker, "worker-0-1");
    let mut rebooting = drain("drain-rendered-a", "drain-rendered-a");
    rebooting[POST_CONFIG_ACTION] = json!("Rebooting");
    see_node(&mut checker, rebooting);
    see_remediation(
        &mut checker,
        "worker-0-1",
        "worker-0",
        "PoweringOff",
        &["PowerOffRequested", "Failed", "PowerOffRequested"],
    );
    assert_eq!(checker.violations.len(), 2, "{:?}", checker.violations);
    assert!(checker.violations[1].contains("middle of a re-apply"));
    // Handed over by the drift coordinator, or the MCO idle: allowed.
    let mut checker = Checker::new(2);
    see_node(
        &mut checker,
        drain("drain-rendered-a", "uncordon-rendered-a"),
    );
    see_drift(&mut checker, "worker-0-1", "Escalated", &[]);
    power_off(&mut checker, "worker-0-1");
    see_node(
        &mut checker,
        drain("uncordon-rendered-a", "uncordon-rendered-a"),
    );
    power_off(&mut checker, "worker-0-2");
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
}

#[test]
fn force_file_removed_with_the_forcefile_there_or_one_left_at_the_end_is_a_violation() {
    let disk = Arc::new(NodeDisk::default());
    let mut checker = Checker::new(1);
    checker.disks.insert("worker-0".into(), disk.clone());
    disk.put(
        FORCE_FILE,
        baremend_sim::cluster::mco::disk::SimFile::regular(b"", 0o644),
    );
    see_drift(&mut checker, "worker-0-1", "Failed", &["Failed"]);
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
    see_drift(
        &mut checker,
        "worker-0-1",
        "Failed",
        &["Failed", "ForceFileRemoved"],
    );
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(checker.violations[0].starts_with("invariant 8: DriftRemediation worker-0-1"));
    checker.finish(&[], &hosts(Power::On));
    assert_eq!(checker.violations.len(), 2, "{:?}", checker.violations);
    assert!(checker.violations[1].contains("left on worker-0 at the end"));
    // Gone before the step is recorded, and nothing left: no violation.
    disk.remove(FORCE_FILE);
    let mut checker = Checker::new(1);
    checker.disks.insert("worker-0".into(), disk);
    see_drift(&mut checker, "worker-0-2", "Failed", &["ForceFileRemoved"]);
    checker.finish(&[], &hosts(Power::On));
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
}

#[test]
fn invariants_7_and_8_count_judgments_not_exposure() {
    // A Node's disk, then what `before` shows the checker, then worker-0's remediation
    // powering off, and the run's end: the counts of invariants 7 and 8, and the violations.
    let judged = |before: &dyn Fn(&mut Checker)| {
        let mut checker = Checker::new(1);
        checker
            .disks
            .insert("worker-0".into(), Arc::new(NodeDisk::default()));
        before(&mut checker);
        see_trigger(&mut checker);
        see_powering_off(&mut checker, "worker-0-1");
        checker.finish(&[], &hosts(Power::On));
        (
            checker.judged.of(7),
            checker.judged.of(8),
            checker.violations,
        )
    };
    // A power-off of a Node the MCO never had in hand, and a disk no drift attempt touched:
    // nothing judged, though both were seen.
    let never = judged(&|checker| see_node(checker, json!({})));
    assert_eq!(never, (0, 0, Vec::new()));
    // The MCO once had the Node in hand (a re-apply, over by the power-off), and a drift
    // attempt ran on it: each judged once, and both pass.
    let once = judged(&|checker| {
        let drain = |desired: &str| json!({DESIRED_DRAIN: desired, LAST_APPLIED_DRAIN: "uncordon-rendered-a"});
        see_node(checker, drain("drain-rendered-a"));
        see_node(checker, drain("uncordon-rendered-a"));
        see_drift(checker, "worker-0-1", "Succeeded", &[]);
    });
    assert_eq!(once, (1, 1, Vec::new()));
}

/// A checker of the fleet world of `wc-0` and `wc-1`, each with a `worker-0` and
/// `worker-1`, served by shards `baremend-wc-0` and `baremend-wc-1`.
fn fleet_checker(max_concurrent: usize) -> Checker {
    let mut fleet = Fleet::default();
    for cluster in ["wc-0", "wc-1"] {
        for node in ["worker-0", "worker-1"] {
            let host = format!("{cluster}-{node}");
            fleet
                .hosts
                .insert((cluster.into(), node.into()), host.clone());
            fleet.cluster_of.insert(host, cluster.into());
        }
        fleet
            .shard_of
            .insert(cluster.into(), format!("baremend-{cluster}"));
    }
    let mut checker = Checker::new(max_concurrent);
    checker.fleet = Some(fleet);
    checker
}

/// The fleet's hosts: `wc-0-worker-1` in `wc0`'s power, every other one in `others`'.
fn fleet_hosts(wc0: Power, others: Power) -> HashMap<String, Arc<SimHost>> {
    [
        "wc-0-worker-0",
        "wc-0-worker-1",
        "wc-1-worker-0",
        "wc-1-worker-1",
    ]
    .iter()
    .map(|name| {
        let power = if *name == "wc-0-worker-1" {
            wc0
        } else {
            others
        };
        let host = SimHost::new(
            name,
            power,
            Duration::from_millis(10),
            Arc::new(ManualClock::new()),
        );
        (name.to_string(), Arc::new(host))
    })
    .collect()
}

/// A Remediation of the fleet `machine`, labelled with `shard`, recording Node `uid`.
fn fleet_remediation(name: &str, machine: &str, shard: &str, steps: &[&str]) -> WatchEvent {
    let mut object = remediation(name, machine, "Fenced", steps);
    object["metadata"]["labels"] = json!({SHARD_LABEL: shard});
    object["status"]["nodeUid"] = json!("uid-1");
    change(
        "remediations",
        "baremend.io",
        name,
        EventType::Modified,
        object,
    )
}

#[test]
fn a_release_in_the_fleet_is_judged_against_the_host_of_its_own_cluster_only() {
    let node = json!({"metadata": {"name": "worker-1"}});
    // wc-0's worker-1 is off, every other host (wc-1's worker-1 among them) is on.
    let hosts = fleet_hosts(Power::Off, Power::On);
    let mut checker = fleet_checker(1);
    let deleted = change("nodes", "", "worker-1", EventType::Deleted, node.clone());
    checker.observe_workload("wc-0", &deleted, &hosts);
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
    // The same name in wc-1: its host is on.
    checker.observe_workload("wc-1", &deleted, &hosts);
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(
        checker.violations[0].starts_with("invariant 1: Node wc-1-worker-1 deleted"),
        "{:?}",
        checker.violations
    );
    assert_eq!(checker.judged.of(1), 2);
    // A Node of no known host is not judged blind.
    let stray = change("nodes", "", "worker-9", EventType::Deleted, node);
    checker.observe_workload("wc-0", &stray, &hosts);
    assert_eq!(checker.unreadable.len(), 1, "{:?}", checker.unreadable);
}

#[test]
fn in_the_fleet_remediations_under_way_are_counted_per_workload_cluster() {
    let mut checker = fleet_checker(1);
    let under_way = |name: &str, machine: &str, shard: &str| {
        let mut event = fleet_remediation(name, machine, shard, &["PowerOffRequested"]);
        Arc::make_mut(&mut event.object)["status"]["phase"] = json!("PoweringOff");
        event
    };
    checker.observe(
        &under_way("wc-0-worker-0-1", "wc-0-worker-0", "baremend-wc-0"),
        &HashMap::new(),
    );
    checker.observe(
        &under_way("wc-1-worker-0-1", "wc-1-worker-0", "baremend-wc-1"),
        &HashMap::new(),
    );
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
    checker.observe(
        &under_way("wc-0-worker-1-1", "wc-0-worker-1", "baremend-wc-0"),
        &HashMap::new(),
    );
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(checker.violations[0].starts_with("invariant 4: 2 remediations"));
}

/// An Event baremend's replica `instance` reported about `about`.
fn reported(instance: &str, about: &str) -> WatchEvent {
    let object = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": format!("{about}.1"), "namespace": "ns"},
        "reportingController": "baremend", "reportingInstance": instance,
        "reason": "PowerOffRequested",
        "regarding": {"kind": "Machine", "name": about, "namespace": "ns"}});
    change(
        "events",
        "",
        &format!("{about}.1"),
        EventType::Added,
        object,
    )
}

#[test]
fn a_remediation_labelled_or_reported_on_by_another_shard_is_a_violation() {
    let mut checker = fleet_checker(2);
    // Its own shard's label, and Events by its own shard's replicas: judged, fine.
    checker.observe(
        &fleet_remediation("wc-0-worker-0-1", "wc-0-worker-0", "baremend-wc-0", &[]),
        &HashMap::new(),
    );
    checker.observe(
        &reported("baremend-wc-0.r0.1", "wc-0-worker-0"),
        &HashMap::new(),
    );
    checker.observe(
        &reported("baremend-wc-1.r3.0", "wc-1-worker-1-2"),
        &HashMap::new(),
    );
    // Another controller's Event, or one about no Machine of a cluster: not judged.
    let mut other = reported("someone", "wc-0-worker-0");
    Arc::make_mut(&mut other.object)["reportingController"] = json!("kubelet");
    checker.observe(&other, &HashMap::new());
    checker.observe(
        &reported("baremend-wc-0.r0.1", "shard-lease"),
        &HashMap::new(),
    );
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
    assert_eq!(checker.judged.of(11), 3);
    // wc-1's shard reports about wc-0's Machine; a Remediation of wc-1 labelled wc-0's.
    checker.observe(
        &reported("baremend-wc-1.r3.0", "wc-0-worker-0"),
        &HashMap::new(),
    );
    checker.observe(
        &fleet_remediation("wc-1-worker-0-1", "wc-1-worker-0", "baremend-wc-0", &[]),
        &HashMap::new(),
    );
    assert_eq!(checker.violations.len(), 2, "{:?}", checker.violations);
    assert!(
        checker.violations[0].contains("\"baremend-wc-1.r3.0\" reported")
            && checker.violations[0].starts_with("invariant 11"),
        "{:?}",
        checker.violations
    );
    assert!(
        checker.violations[1].starts_with("invariant 11: ns/wc-1-worker-0-1"),
        "{:?}",
        checker.violations
    );
}

#[test]
fn a_node_taken_for_gone_while_its_workload_api_is_down_is_a_violation() {
    let hosts = fleet_hosts(Power::Off, Power::Off);
    let mut checker = fleet_checker(2);
    let node = json!({"metadata": {"name": "worker-1", "uid": "uid-1"}});
    checker.seed_node(Some("wc-0"), &node);
    let fenced = fleet_remediation(
        "wc-0-worker-1-1",
        "wc-0-worker-1",
        "baremend-wc-0",
        &["PowerOffRequested", "Fenced"],
    );
    checker.observe(&fenced, &HashMap::new());
    // wc-0 goes away with its remediation under way; wc-1's outage judges nothing of wc-0.
    assert_eq!(checker.workload_api_down("wc-0", true), 1);
    assert_eq!(checker.workload_api_down("wc-1", true), 0);
    // Being under way is exposure: nothing judged yet.
    assert_eq!(checker.judged.of(12), 0);
    // It records its Node gone while the Node of that UID is still in wc-0's store.
    let absent = fleet_remediation(
        "wc-0-worker-1-1",
        "wc-0-worker-1",
        "baremend-wc-0",
        &["PowerOffRequested", "Fenced", "NodeAbsent"],
    );
    checker.observe(&absent, &hosts);
    assert_eq!(checker.violations.len(), 1, "{:?}", checker.violations);
    assert!(
        checker.violations[0].starts_with("invariant 12: ns/wc-0-worker-1-1 recorded NodeAbsent"),
        "{:?}",
        checker.violations
    );
    assert_eq!(checker.judged.of(12), 1);

    // The same step when its Node was gone before the outage: true, no violation; and the
    // step after the outage is not judged by invariant 12.
    let mut checker = fleet_checker(2);
    checker.seed_node(Some("wc-0"), &node);
    checker.observe_workload(
        "wc-0",
        &change("nodes", "", "worker-1", EventType::Deleted, node.clone()),
        &hosts,
    );
    checker.observe(&fenced, &HashMap::new());
    checker.workload_api_down("wc-0", true);
    checker.observe(&absent, &hosts);
    assert!(checker.violations.is_empty(), "{:?}", checker.violations);
    assert_eq!(checker.judged.of(12), 1);
    // The outage's end judges the remediation whose Node step came due during it (it was
    // Fenced as the API went), watched through the outage.
    checker.workload_api_down("wc-0", false);
    assert_eq!(checker.judged.of(12), 2);
    let deleted = fleet_remediation(
        "wc-0-worker-1-1",
        "wc-0-worker-1",
        "baremend-wc-0",
        &["PowerOffRequested", "Fenced", "NodeAbsent", "NodeDeleted"],
    );
    checker.observe(&deleted, &hosts);
    assert_eq!(checker.judged.of(12), 2);
}
