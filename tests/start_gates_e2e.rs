//! The start of a remediation under load, end to end: one BMC that answers late holds only its
//! own host's start, every gate that holds a start is told in an Event of its own, the quiet
//! gates keep a MachineConfig roll's slow reboots from being power-cycled, and another
//! client's reboot-API key is named where it holds a start or keeps a host off.

use std::time::{Duration, Instant};

use baremend::api::{Remediation, RemediationPhase};
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::local::{BMHS, CRDS, EVENTS, MACHINE_REMEDIATIONS, MACHINES, NODES};
use baremend_sim::cluster::scenario::ClusterSpec;
use baremend_sim::cluster::{MACHINE_NAMESPACE, cvo, fixtures, mco};
use baremend_sim::host::{Faults, PowerAction};
use serde_json::json;

use baremend_testkit as common;

use common::eventually;
use common::lab::{Lab, REMEDIATIONS, fast, patch_policy, warning_on};

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

/// The workers of the default cluster.
const WORKERS: [&str; 3] = ["worker-0", "worker-1", "worker-2"];

/// Every Remediation of `machine`, from the store.
fn remediations_of(lab: &Lab, machine: &str) -> Vec<Remediation> {
    lab.api
        .list(REMEDIATIONS, Some(MACHINE_NAMESPACE))
        .into_iter()
        .filter(|r| r["spec"]["machineName"] == machine)
        .filter_map(|r| serde_json::from_value(r).ok())
        .collect()
}

/// The phase of a Remediation.
fn phase(remediation: &Remediation) -> RemediationPhase {
    remediation
        .status
        .as_ref()
        .map(|s| s.phase)
        .unwrap_or_default()
}

/// Whether a Node is on `config` and its daemon Done (annotations as the MCD writes them).
fn on_config(lab: &Lab, node: &str, config: &str) -> bool {
    lab.api.get(NODES, "", node).is_ok_and(|n| {
        let annotations = &n["metadata"]["annotations"];
        annotations[mco::CURRENT_CONFIG] == config && annotations[mco::STATE] == "Done"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_config_roll_with_slow_reboots_is_not_power_cycled_and_a_hang_after_it_is() {
    // The workers' MachineHealthCheck asks by request (it withdraws one once the Machine is
    // healthy again) with the simulator's short timeouts: NotReady for 0.5 s past the node
    // grace makes it ask. Each reboot into the new config takes 4 s more than the timing's,
    // so every Node the roll reboots looks hung to it.
    let spec = ClusterSpec {
        mco: true,
        remediation_template: Some("baremend".into()),
        ..fast()
    };
    let policy = json!({
        "upgradeHold": {"maxSeconds": 600},
        "timeouts": {"powerOffSeconds": 60, "nodeReadySeconds": 60, "readyGraceSeconds": 1},
    });
    let mut lab = Lab::builder(spec).policy(policy).start().await;
    lab.machine_template(json!({}));
    lab.start_controller(options(&lab));
    for worker in WORKERS {
        lab.cluster.slow_boot(worker, Duration::from_secs(4));
    }
    let target = lab
        .cluster
        .roll_pool(
            "worker",
            "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:4173",
        )
        .unwrap();
    let started = Instant::now();
    // While the roll goes on: which workers' health check asked, and which of their starts
    // the gate held.
    let mut asked = std::collections::BTreeSet::new();
    let mut held = std::collections::BTreeSet::new();
    eventually(
        "every worker rolled",
        Duration::from_secs(120),
        async || {
            for worker in WORKERS {
                if lab
                    .api
                    .get(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, worker)
                    .is_ok()
                {
                    asked.insert(worker);
                }
                let gate = remediations_of(&lab, worker).iter().any(|r| {
                    r.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.type_ == "Held" && c.reason == "MachineConfigUpdating")
                    })
                });
                if gate {
                    held.insert(worker);
                }
                assert!(
                    !power_off_received(&lab, worker),
                    "{worker} was powered off during the roll"
                );
            }
            let rolled = WORKERS
                .iter()
                .filter(|w| on_config(&lab, w, &target))
                .count();
            (rolled == WORKERS.len())
                .then_some(())
                .ok_or(format!("{rolled} of 3 on {target}"))
        },
    )
    .await;
    let roll = started.elapsed();
    // The health check withdraws each request once its Node is Ready again; the held start
    // is then cancelled.
    eventually(
        "every request withdrawn",
        Duration::from_secs(30),
        async || {
            WORKERS.iter().all(|w| {
                lab.api
                    .get(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, w)
                    .is_err()
            })
        },
    )
    .await;
    for worker in &held {
        let ended = eventually(
            "the held ones cancelled",
            Duration::from_secs(30),
            async || {
                let all = remediations_of(&lab, worker);
                all.iter()
                    .all(|r| phase(r) == RemediationPhase::Cancelled)
                    .then_some(all.len())
                    .ok_or(format!("{:?}", all.iter().map(phase).collect::<Vec<_>>()))
            },
        )
        .await;
        assert!(ended > 0);
        let events = held_events(&lab, worker);
        assert!(
            events
                .iter()
                .any(|(action, note)| action == "HeldByMachineConfigUpdating"
                    && note.contains(&format!("desiredConfig {target}"))),
            "{worker}: {events:?}"
        );
    }
    println!(
        "MachineConfig roll of 3 workers (4 s slow reboots) in {:.1} s: the health check asked for {asked:?}, \
         the MachineConfigUpdating gate held {held:?}; no power-off reached any worker's BMC",
        roll.as_secs_f64()
    );
    // The test means something only if the health check did ask during the roll.
    assert!(
        !held.is_empty(),
        "the health check asked for {asked:?}, none was held"
    );
    assert_eq!(
        held, asked,
        "every start asked for during the roll was held"
    );
    for worker in WORKERS {
        assert!(!power_off_received(&lab, worker), "{worker}");
        lab.cluster.slow_boot(worker, Duration::ZERO);
    }
    // After the roll a real hang is remediated.
    lab.cluster.hang("worker-1");
    let succeeded = eventually("worker-1 remediated", Duration::from_secs(60), async || {
        remediations_of(&lab, "worker-1")
            .into_iter()
            .find(|r| phase(r) == RemediationPhase::Succeeded)
            .ok_or("not yet")
    })
    .await;
    assert!(power_off_received(&lab, "worker-1"));
    println!(
        "after the roll, worker-1's hang was remediated ({})",
        succeeded.metadata.name.unwrap_or_default()
    );
}

/// A cluster that serves no ClusterVersion (not OpenShift) spares each start its read, as the
/// last start's discovery said; a ClusterVersion served since is still read by the next start
/// once its own discovery finds it, and an upgrade under way holds that start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_version_served_after_the_last_start_holds_the_next_one_while_upgrading() {
    let policy = json!({
        "maxConcurrent": 5,
        "storm": {"maxUnhealthyPercent": 100},
        "timeouts": {"powerOffSeconds": 60, "nodeReadySeconds": 60, "readyGraceSeconds": 1},
    });
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    lab.start_controller(options(&lab));
    // A first start: its discovery finds no config.openshift.io.
    lab.cluster.hang("worker-0");
    lab.trigger("worker-0", true);
    eventually(
        "worker-0's power-off",
        Duration::from_secs(20),
        async || power_off_received(&lab, "worker-0"),
    )
    .await;
    // OpenShift's ClusterVersion served from now on, an upgrade under way.
    lab.api
        .create(CRDS, "", fixtures::cluster_version_crd())
        .unwrap();
    cvo::install(&lab.api).unwrap();
    lab.cluster.set_upgrading(Some("4.17.3")).unwrap();
    lab.cluster.hang("worker-1");
    lab.trigger("worker-1", true);
    lab.held_with(
        "worker-1-1",
        "the cluster is upgrading (ClusterVersion version Progressing: Working towards 4.17.3",
    )
    .await;
    assert!(!power_off_received(&lab, "worker-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_held_by_an_upgrade_goes_ahead_with_a_warning_once_the_bound_passes() {
    // NodeHealthCheck's rule (node-healthcheck-operator
    // `internal/controller/cluster/upgrade_checker.go`, `Check`: the ClusterVersion's
    // Progressing condition True) holds the start; baremend's bound ends the hold.
    const BOUND: Duration = Duration::from_secs(4);
    let spec = ClusterSpec {
        mco: true,
        ..fast()
    };
    let policy = json!({
        "upgradeHold": {"maxSeconds": BOUND.as_secs()},
        "timeouts": {"powerOffSeconds": 60, "nodeReadySeconds": 60, "readyGraceSeconds": 1},
    });
    let mut lab = Lab::builder(spec).policy(policy).start().await;
    lab.start_controller(options(&lab));
    lab.cluster.set_upgrading(Some("4.17.3")).unwrap();
    lab.cluster.hang("worker-0");
    lab.trigger("worker-0", true);
    let triggered = triggered_at(&lab, "worker-0").await;
    lab.held_with(
        "worker-0-1",
        "the cluster is upgrading (ClusterVersion version Progressing: Working towards 4.17.3",
    )
    .await;
    assert!(!power_off_received(&lab, "worker-0"));
    warning_on(
        &lab,
        ("Machine", "worker-0"),
        "HoldEnded",
        "upgradeHold.maxSeconds (4 s) has passed",
    )
    .await;
    let off = eventually(
        "worker-0's power-off at its BMC",
        Duration::from_secs(20),
        async || {
            power_off_received(&lab, "worker-0")
                .then(Instant::now)
                .ok_or("not yet")
        },
    )
    .await;
    let waited = off.duration_since(triggered);
    println!(
        "held by ClusterUpgrading, then powered off {:.1} s after the trigger",
        waited.as_secs_f64()
    );
    // The bound counts from the Remediation's creationTimestamp, which has whole seconds: it
    // may end up to a second before BOUND after the trigger, never sooner.
    assert!(waited >= BOUND - Duration::from_secs(1), "{waited:?}");
    lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    // The upgrade ends: nothing holds a start any more.
    lab.cluster.set_upgrading(None).unwrap();
    lab.cluster.hang("worker-1");
    lab.trigger("worker-1", true);
    lab.reach("worker-1-1", RemediationPhase::Succeeded).await;
    let events = held_events(&lab, "worker-1");
    assert!(events.is_empty(), "{events:?}");
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
