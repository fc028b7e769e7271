//! The start of a remediation under load, end to end: one BMC that answers late holds only its
//! own host's start, every gate that holds a start is told in an Event of its own, and another
//! client's reboot-API key is named where it holds a start or keeps a host off.

use std::time::{Duration, Instant};

use baremend::api::{Remediation, RemediationPhase};
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::MACHINE_NAMESPACE;
use baremend_sim::cluster::local::{BMHS, EVENTS, MACHINES};
use baremend_sim::host::{Faults, PowerAction};
use serde_json::json;

mod common;

use common::eventually;
use common::lab::{Lab, fast, patch_policy, warning_on};

/// How late the slow BMC answers every request.
const SLOW_BMC: Duration = Duration::from_secs(20);

fn options(lab: &Lab) -> ControllerOptions {
    ControllerOptions {
        instance: "test".into(),
        ..lab.options()
    }
}

/// When the Machine first carries the health check's trigger, watched from now on.
async fn triggered_at(lab: &Lab, machine: &str) -> Instant {
    eventually(
        &format!("{machine} triggered"),
        Duration::from_secs(30),
        async || {
            let object = lab.api.get(MACHINES, MACHINE_NAMESPACE, machine).unwrap();
            let annotations = &object["metadata"]["annotations"];
            match annotations.get("host.metal3.io/external-remediation") {
                Some(_) => Ok(Instant::now()),
                None => Err(format!("{annotations}")),
            }
        },
    )
    .await
}

/// Whether the host's BMC has received a power-off request.
fn power_off_received(lab: &Lab, host: &str) -> bool {
    let requests = lab.cluster.host(host).unwrap().host.requests();
    requests.iter().any(|r| {
        matches!(
            r.action,
            PowerAction::ForceOff | PowerAction::GracefulShutdown
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bmc_answering_late_does_not_hold_another_machines_power_off() {
    let policy = json!({
        "strategies": ["DirectBmc"],
        "maxConcurrent": 2,
        "timeouts": {"powerOffSeconds": 120, "nodeReadySeconds": 60, "readyGraceSeconds": 1},
    });
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    lab.detach("worker-0");
    lab.detach("worker-1");
    lab.start_controller(options(&lab));
    let slow = lab.cluster.host("worker-0").unwrap().host.clone();
    slow.set_faults(Faults {
        latency_ms: SLOW_BMC.as_millis() as u64,
        ..Faults::default()
    });
    // Both hang; the trigger is set as soon as each hangs (the simulated MachineHealthCheck
    // would stop at its maxUnhealthy with two of three workers down).
    lab.cluster.hang("worker-0");
    lab.trigger("worker-0", true);
    let first = triggered_at(&lab, "worker-0").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    lab.cluster.hang("worker-1");
    lab.trigger("worker-1", true);
    let trigger = triggered_at(&lab, "worker-1").await;
    // The slow BMC holds worker-0's start for at least one late answer: worker-1's
    // power-off must reach its BMC well inside that, whatever worker-0's pass is doing.
    let requested = eventually("worker-1's power-off at its BMC", SLOW_BMC, async || {
        power_off_received(&lab, "worker-1")
            .then(Instant::now)
            .ok_or("not yet")
    })
    .await;
    let after_trigger = requested.duration_since(trigger);
    println!(
        "slow BMC ({} s late): worker-1's power-off reached its BMC {:.1} s after its trigger \
         ({:.1} s after worker-0's trigger); worker-0's BMC has received a power-off: {}",
        SLOW_BMC.as_secs(),
        after_trigger.as_secs_f64(),
        requested.duration_since(first).as_secs_f64(),
        power_off_received(&lab, "worker-0"),
    );
    assert!(
        after_trigger < SLOW_BMC / 2,
        "worker-1 waited {after_trigger:?} behind a BMC that answers {SLOW_BMC:?} late"
    );
    slow.set_faults(Faults::default());
}

/// The notes of the `Held` Events on the Machine, by action.
fn held_events(lab: &Lab, machine: &str) -> Vec<(String, String)> {
    lab.api
        .list(EVENTS, Some(MACHINE_NAMESPACE))
        .iter()
        .filter(|e| e["reason"] == "Held" && e["involvedObject"]["name"] == machine)
        .filter(|e| e["involvedObject"]["kind"] == "Machine")
        .map(|e| {
            let action = e["action"].as_str().unwrap_or_default().to_owned();
            let note = e["message"].as_str().unwrap_or_default().to_owned();
            (action, note)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_held_by_one_gate_then_another_tells_each_in_its_own_event() {
    let policy = json!({
        "maxConcurrent": 1,
        "timeouts": {"powerOffSeconds": 120, "nodeReadySeconds": 60, "readyGraceSeconds": 1},
    });
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    lab.start_controller(options(&lab));
    // worker-0's host never goes off: its remediation stays under way.
    lab.stuck_power("worker-0", true);
    lab.trigger("worker-0", true);
    lab.reach("worker-0-1", baremend::api::RemediationPhase::PoweringOff)
        .await;
    lab.trigger("worker-1", true);
    lab.held_with("worker-1-1", "allows 1 at once").await;
    patch_policy(&lab, json!({"paused": true})).await;
    lab.held_with("worker-1-1", "paused").await;
    let events = eventually("both Held Events", Duration::from_secs(10), async || {
        let events = held_events(&lab, "worker-1");
        let has = |action: &str, said: &str| {
            events
                .iter()
                .any(|(a, note)| a == action && note.to_lowercase().contains(said))
        };
        if has("HeldByConcurrency", "allows 1 at once") && has("HeldByPaused", "paused") {
            Ok(events)
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
    assert_eq!(events.len(), 2, "one Event per gate: {events:?}");
    lab.stuck_power("worker-0", false);
}

/// The phase of a Remediation.
fn phase(remediation: &Remediation) -> RemediationPhase {
    remediation
        .status
        .as_ref()
        .map(|s| s.phase)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_reboot_key_holds_a_start_and_is_named_where_it_keeps_a_host_off() {
    let policy = json!({
        "maxConcurrent": 2,
        "maxAttempts": 1,
        "timeouts": {"powerOffSeconds": 60, "nodeReadySeconds": 6, "readyGraceSeconds": 1},
    });
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    lab.start_controller(options(&lab));
    let annotate = |host: &str, key: &str| {
        lab.api
            .merge(
                BMHS,
                MACHINE_NAMESPACE,
                host,
                &json!({"metadata": {"annotations": {key: "{\"mode\":\"hard\"}"}}}),
                false,
            )
            .unwrap();
    };
    // Cluster API Provider Metal3's remediation has worker-0's host off
    // (cluster-api-provider-metal3 `baremetal/metal3remediation_manager.go`: its key is
    // `reboot.metal3.io/metal3-remediation-<uid>`); baremend's start waits, naming the key.
    let capm3 = "reboot.metal3.io/metal3-remediation-5e0f1a2b";
    annotate("worker-0", capm3);
    lab.trigger("worker-0", true);
    lab.held_with(
        "worker-0-1",
        &format!("carries {capm3} (Cluster API Provider Metal3's remediation)"),
    )
    .await;
    // (The BareMetal Operator powered the host off for the other key; baremend asked nothing.)
    let ours = |host: &str| {
        let bmh = lab.api.get(BMHS, MACHINE_NAMESPACE, host).unwrap();
        bmh["metadata"]["annotations"]
            .get(format!(
                "reboot.metal3.io/{}",
                baremend::api::annotations::DEFAULT_REBOOT_KEY
            ))
            .is_some()
    };
    assert!(!ours("worker-0"));
    // worker-1's remediation is powering its host on when an admin's key lands: the host
    // stays off, and the condition, an Event and the failure name the key.
    lab.cluster.slow_boot("worker-1", Duration::from_secs(3));
    lab.cluster.hang("worker-1");
    lab.trigger("worker-1", true);
    lab.reach("worker-1-1", RemediationPhase::PoweringOn).await;
    let admin = "reboot.metal3.io/admin-maintenance";
    annotate("worker-1", admin);
    warning_on(&lab, ("Machine", "worker-1"), "PowerOnBlocked", admin).await;
    let failed = lab.reach("worker-1-1", RemediationPhase::Failed).await;
    let status = failed.status.unwrap();
    let blocked = status
        .conditions
        .iter()
        .find(|c| c.type_ == "PowerOnBlocked")
        .unwrap_or_else(|| panic!("{status:?}"));
    assert_eq!(blocked.status, "True");
    assert!(
        blocked
            .message
            .contains(&format!("{admin} (not baremend's")),
        "{blocked:?}"
    );
    let succeeded = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Succeeded")
        .unwrap();
    assert_eq!(succeeded.reason, "NodeNeverReady");
    let error = status.last_error.unwrap_or_default();
    assert!(error.contains(admin), "{error}");
    println!("NodeNeverReady, naming what kept the host off: {error}");
    // worker-0 still waits for Cluster API Provider Metal3, and baremend asked nothing of it.
    let held = lab.remediation("worker-0-1").unwrap();
    assert_eq!(phase(&held), RemediationPhase::Pending);
    assert!(!ours("worker-0"));
}
