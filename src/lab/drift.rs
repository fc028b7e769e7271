//! `baremend lab --scenario drift`: config drift on a worker, coordinated. The simulated
//! cluster runs a Machine Config Operator (a daemon per node on a simulated disk, the drain
//! controller, pools); the controller runs with its drift coordinator; a file of the worker's
//! rendered config is changed by hand, and the story is printed until the node is Done again,
//! with a per-step timing table and the time from the MCO's Degraded annotation to the action.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use baremend_sim::cluster::ClusterSpec;
use baremend_sim::cluster::local::NODES;
use baremend_sim::cluster::mco::disk::SimFile;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::Serving;
use super::setup::LabCluster;
use crate::api::{DriftPhase, DriftPolicy, DriftRemediation, DriftRemediationStatus};
use crate::drift::controller::HelperPods;
use crate::metrics::Metrics;
use crate::remediation::controller::ControllerOptions;
use crate::run::run_controllers as run_controller;
use crate::runtime::clock::{SystemClock, parse_rfc3339, since_epoch};
use crate::runtime::read::GetPresent;
use crate::{Error, Result};

const TARGET: &str = "worker-1";
const FILE: &str = "/etc/sysctl.d/90-demo.conf";
const DEBOUNCE_SECONDS: u64 = 3;

fn annotation(node: &Value, key: &str) -> String {
    node["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// What the story prints when it changes.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    state: String,
    reason: String,
    cordoned: bool,
    ready: bool,
    drain: String,
    phase: String,
}

fn look(node: &Value, status: Option<&DriftRemediationStatus>) -> Seen {
    let ready = node["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    Seen {
        state: annotation(node, crate::api::mco::STATE),
        reason: annotation(node, crate::api::mco::REASON),
        cordoned: node["spec"]["unschedulable"] == true,
        ready,
        drain: annotation(node, crate::api::mco::DESIRED_DRAIN),
        phase: status.map(|s| format!("{:?}", s.phase)).unwrap_or_default(),
    }
}

fn print_changes(at: f64, was: &Seen, now: &Seen) {
    let at = format!("{at:.2} s");
    if was.state != now.state || was.reason != now.reason {
        let reason = if now.reason.is_empty() {
            String::new()
        } else {
            format!(" ({})", now.reason)
        };
        println!("{at:>8}  Node {TARGET}: MCO state {}{reason}", now.state);
    }
    if was.drain != now.drain {
        println!("{at:>8}  Node {TARGET}: desiredDrain {}", now.drain);
    }
    if was.cordoned != now.cordoned {
        println!(
            "{at:>8}  Node {TARGET}: {}",
            if now.cordoned {
                "cordoned"
            } else {
                "uncordoned"
            }
        );
    }
    if was.ready != now.ready {
        println!(
            "{at:>8}  Node {TARGET}: {}",
            if now.ready { "Ready" } else { "not Ready" }
        );
    }
    if was.phase != now.phase {
        println!("{at:>8}  DriftRemediation {TARGET}-1: {}", now.phase);
    }
}

/// Runs the drift story.
pub async fn run(timeout: Duration, serving: Serving) -> Result<()> {
    let spec = ClusterSpec {
        masters: 3,
        workers: 3,
        mco: true,
        ..ClusterSpec::default()
    };
    println!(
        "starting the simulated cluster with a Machine Config Operator: 3 control-plane hosts, 3 workers ..."
    );
    let started = Instant::now();
    // The namespace of its helper pods is deploy/'s, which the lab applies.
    let lab = LabCluster::start(spec).await?;
    let policy: DriftPolicy = serde_json::from_value(json!({"metadata": {"name": "default"},
        "spec": {"debounceSeconds": DEBOUNCE_SECONDS}}))
    .map_err(|e| Error::Invalid {
        object: "lab drift policy".into(),
        reason: e.to_string(),
    })?;
    Api::<DriftPolicy>::all(lab.client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .map_err(Error::kube("CreateDriftPolicy"))?;
    lab.install_policy(json!({})).await?;
    // Every daemon reports its node Done on its config before the story starts.
    let done = || {
        lab.api
            .list(NODES, None)
            .iter()
            .all(|n| annotation(n, crate::api::mco::STATE) == "Done")
    };
    while !done() {
        if started.elapsed() > timeout {
            return Err(Error::Invalid {
                object: "the simulated MCO".into(),
                reason: "nodes never reported Done".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "  all Nodes Ready and Done after {:.1} s; API server {}",
        started.elapsed().as_secs_f64(),
        lab.cluster.api_server().url()
    );
    let metrics = Arc::new(Metrics::new());
    let metrics_at = serving.serve(metrics.clone()).await?;
    let (stop, stopped) = oneshot::channel::<()>();
    let controller = tokio::spawn(run_controller(
        lab.controller_client.clone(),
        Arc::new(SystemClock),
        ControllerOptions {
            instance: "lab".into(),
            poll: Duration::from_millis(250),
            metrics: metrics.clone(),
            drift_helpers: Some(HelperPods::new(crate::lab::setup::LAB_HELPER_IMAGE)),
            ..ControllerOptions::default()
        },
        async move {
            let _ = stopped.await;
        },
    ));
    println!(
        "controller running with its drift coordinator (debounce {DEBOUNCE_SECONDS} s), metrics at http://{metrics_at}/metrics\n"
    );

    let disk = lab
        .cluster
        .disk(TARGET)
        .cloned()
        .ok_or_else(|| Error::Invalid {
            object: TARGET.into(),
            reason: "no simulated disk".into(),
        })?;
    let drifted_at = SystemTime::now();
    let t0 = Instant::now();
    disk.put(FILE, SimFile::regular(b"vm.swappiness = 60\n", 0o644));
    println!("{:>8}  {TARGET}: {FILE} edited by hand", "0.00 s");
    let remediations: Api<DriftRemediation> = Api::all(lab.client.clone());
    let mut seen = Seen::default();
    let mut degraded_at: Option<f64> = None;
    let outcome = loop {
        let node = lab.api.get(NODES, "", TARGET).map_err(|e| Error::Invalid {
            object: format!("Node {TARGET}"),
            reason: e.message,
        })?;
        let remediation = remediations
            .get_present(&format!("{TARGET}-1"))
            .await
            .map_err(Error::kube("GetDriftRemediation"))?;
        let status = remediation.as_ref().and_then(|r| r.status.clone());
        let now = look(&node, status.as_ref());
        let at = t0.elapsed().as_secs_f64();
        print_changes(at, &seen, &now);
        if now.state == "Degraded" && degraded_at.is_none() {
            degraded_at = Some(at);
        }
        seen = now;
        match status {
            Some(status) if status.phase.is_terminal() => break status,
            status if t0.elapsed() > timeout => break status.unwrap_or_default(),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    serving.linger(metrics_at).await;
    let _ = stop.send(());
    let _ = controller.await;
    print_timing(&outcome, since_epoch(drifted_at), degraded_at);
    println!("\ndrift metrics:");
    // The outcome counters start at zero for every outcome and reason: the zeros are left out.
    for line in metrics.encode().lines().filter(|l| {
        (l.starts_with("mco_remediations_total") && !l.ends_with(" 0"))
            || l.starts_with("mco_remediation_duration_seconds_sum")
            || l.starts_with("mco_node_config_drift_count")
    }) {
        println!("  {line}");
    }
    if outcome.phase == DriftPhase::Succeeded {
        println!("\n{TARGET} is back on its rendered config, Done, Ready and schedulable.");
        Ok(())
    } else {
        Err(Error::Invalid {
            object: format!("DriftRemediation {TARGET}-1"),
            reason: format!(
                "ended {:?}: {}",
                outcome.phase,
                outcome.last_error.unwrap_or_default()
            ),
        })
    }
}

fn print_timing(status: &DriftRemediationStatus, base: Duration, degraded_at: Option<f64>) {
    println!("\nDriftRemediation {TARGET}-1:\n");
    println!("| step | at (since the edit) | took |");
    println!("|---|---|---|");
    let mut previous = 0.0;
    let mut action = None;
    for step in &status.steps {
        let at = parse_rfc3339(&step.time).saturating_sub(base).as_secs_f64();
        println!("| {} | {at:.2} s | {:.2} s |", step.step, at - previous);
        if matches!(step.step.as_str(), "ForceRequested" | "RestoreRequested") {
            action = Some(at);
        }
        previous = at;
    }
    if let (Some(degraded), Some(action)) = (degraded_at, action) {
        println!(
            "\naction started {:.2} s after the MCO's Degraded annotation (debounce {DEBOUNCE_SECONDS} s; target: debounce + 1 s)",
            action - degraded
        );
    }
}
