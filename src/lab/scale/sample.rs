//! One remediation, triggered and measured from the simulator's own records.

use std::time::{Duration, Instant, SystemTime};

use baremend_sim::cluster::MACHINE_NAMESPACE;
use baremend_sim::cluster::local::{CAPI_MACHINES, Gvr, Local, MACHINE_REMEDIATIONS, NODES};
use baremend_sim::host::{Power, PowerAction, SimHost};
use serde_json::{Value, json};

use super::invalid;
use super::requests::{ApiCounts, Traced};
use super::world::{ServerKind, World};
use crate::Result;
use crate::runtime::clock::{parse_rfc3339, since_epoch};

const REMEDIATIONS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "remediations",
};

/// Set (to anything): each remediation's API requests up to its power-off request are kept
/// and printed, with their times after the trigger; set to `all`, every one of them to its
/// end (what tells two servers' counts apart).
pub(super) const TRACE: &str = "BAREMEND_SCALE_TRACE";

/// A worker to remediate: its Machine (and host), and where its Node lives.
pub(super) struct Target {
    /// The Machine's and the host's name.
    pub machine: String,
    /// Its Node's name (in its workload cluster when it has one).
    pub node: String,
    /// The store holding its Node: the management cluster's, or its workload cluster's.
    pub nodes: Local,
    /// How the remediation is asked for.
    pub trigger: Trigger,
}

/// How a health check asks for a Machine's remediation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum Trigger {
    /// OpenShift's MachineHealthCheck: the external-remediation annotation on the Machine.
    Annotation,
    /// Cluster API's MachineHealthCheck: a `MachineRemediation` named after the Machine,
    /// owned by it (from baremend's empty template).
    Request,
}

/// With [`TRACE`] set, the API requests from `started` (the trigger stored) on: up to
/// `fence_latency`, or every one when it is `all`.
pub(super) fn traced(world: &World, started: Instant, fence_latency: Duration) -> Vec<Traced> {
    let Some(asked) = std::env::var_os(TRACE) else {
        return Vec::new();
    };
    let mut trace = world.timeline(started);
    if asked != "all" {
        trace.retain(|t| t.after <= fence_latency);
    }
    trace
}

/// What one remediation measured.
pub(super) struct Sample {
    /// How long the simulated API server took to store the trigger.
    pub write: Duration,
    pub fence_latency: Duration,
    pub overhead: Duration,
    pub total: Duration,
    pub bmc_requests: u64,
    /// The HTTP requests the controllers made during the remediation, on the management
    /// cluster's API server and on the workload clusters' (summed).
    pub api: ApiCounts,
    /// With `BAREMEND_SCALE_TRACE`: the API requests from the trigger to the power-off
    /// request (`all`: to the end), each with its time after the trigger.
    pub trace: Vec<Traced>,
}

/// Stores `target`'s trigger as its health check would.
pub(super) fn set_trigger(world: &World, target: &Target) -> Result<()> {
    match target.trigger {
        Trigger::Annotation => world.set_trigger(&target.machine, true),
        Trigger::Request => {
            let machine = world
                .api()
                .get(CAPI_MACHINES, MACHINE_NAMESPACE, &target.machine)
                .map_err(|e| invalid(&target.machine, e.message))?;
            let request = json!({
                "apiVersion": "baremend.io/v1alpha1",
                "kind": "MachineRemediation",
                "metadata": {
                    "name": target.machine,
                    "ownerReferences": [{
                        "apiVersion": "cluster.x-k8s.io/v1beta1",
                        "kind": "Machine",
                        "name": target.machine,
                        "uid": machine.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
                    }],
                },
                "spec": {},
            });
            world
                .api()
                .create(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, request)
                .map(|_| ())
                .map_err(|e| invalid(&format!("MachineRemediation {}", target.machine), e.message))
        }
    }
}

/// Withdraws `target`'s trigger as its health check would once it is answered.
pub(super) fn clear_trigger(world: &World, target: &Target) -> Result<()> {
    match target.trigger {
        Trigger::Annotation => world.set_trigger(&target.machine, false),
        Trigger::Request => {
            let _ = world.api().delete(
                MACHINE_REMEDIATIONS,
                MACHINE_NAMESPACE,
                &target.machine,
                None,
            );
            Ok(())
        }
    }
}

/// A span in the simulator's microseconds, as a duration.
pub(super) fn micros(us: u128) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(u64::MAX))
}

/// The simulated host of `worker`.
pub(super) fn host_of(world: &World, worker: &str) -> Result<std::sync::Arc<SimHost>> {
    world
        .host(worker)
        .map(|info| info.host.clone())
        .ok_or_else(|| invalid(worker, "no such host"))
}

/// Remediates `target` once and measures it.
pub(super) async fn remediate(world: &World, target: &Target, timeout: Duration) -> Result<Sample> {
    let worker = target.machine.as_str();
    let host = host_of(world, worker)?;
    let redfish = world.redfish().service().clone();
    let requests_before = redfish.stats().requests;
    let api_before = world.api_counts();
    let requests_seen = host.requests().len();
    let history_seen = host.history().len();
    world.hang(worker)?;
    let before_write = host.clock_us();
    set_trigger(world, target)?;
    // "Written" is when the API server has stored it: the write itself may wait for the
    // simulator's store, which is the simulator's time, not the controller's.
    let wall0 = SystemTime::now();
    let host0 = host.clock_us();
    let write = host0.saturating_sub(before_write);
    let started = Instant::now();
    // The Node is back when one with another UID exists (a look may miss the gap between
    // the deletion and the new registration when the machine is busy).
    let uid_of = |node: Value| node.pointer("/metadata/uid").cloned();
    let old_uid = target
        .nodes
        .get(NODES, "", &target.node)
        .ok()
        .and_then(uid_of);
    let mut node_back_us = None;
    let name = format!("{worker}-1");
    // Every look is two reads: in the simulator's store, or over HTTPS to a real server,
    // where looking as often would load the server the controller waits on. The Node's return
    // is known to within one interval (it counts in the physical floor, so in the overhead).
    let poll = match world.kind() {
        ServerKind::Simulated => Duration::from_millis(5),
        ServerKind::Real => Duration::from_millis(20),
    };
    let succeeded_at = loop {
        let uid = target
            .nodes
            .get(NODES, "", &target.node)
            .ok()
            .and_then(uid_of);
        if uid.is_some() && uid != old_uid && node_back_us.is_none() {
            node_back_us = Some(host.clock_us());
        }
        let status = world
            .api()
            .get(REMEDIATIONS, MACHINE_NAMESPACE, &name)
            .ok()
            .and_then(|r| r.get("status").cloned())
            .unwrap_or(Value::Null);
        match status["phase"].as_str() {
            Some("Succeeded") => {
                let at = status["steps"]
                    .as_array()
                    .and_then(|s| s.iter().rev().find(|s| s["step"] == "Succeeded"))
                    .and_then(|s| s["time"].as_str())
                    .map(parse_rfc3339)
                    .unwrap_or_default();
                break at;
            }
            Some(phase @ ("Failed" | "Cancelled")) => {
                return Err(invalid(
                    &format!("Remediation {name}"),
                    format!("ended {phase}: {}", status["lastError"]),
                ));
            }
            _ => {}
        }
        if started.elapsed() > timeout {
            return Err(invalid(
                &format!("Remediation {name}"),
                format!("not done after {timeout:?}: {status}"),
            ));
        }
        tokio::time::sleep(poll).await;
    };
    if target.trigger == Trigger::Request {
        // Cluster API's health check deletes the request once the Machine is healthy again
        // (here paused, so the benchmark does it): the controller's answer to that counts.
        clear_trigger(world, target)?;
    }
    // The session is closed right after the end; let its DELETE arrive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let requests = host.requests();
    let new_requests = &requests[requests_seen.min(requests.len())..];
    let off_request = new_requests
        .iter()
        .find(|r| r.action == PowerAction::ForceOff)
        .map(|r| r.at_us)
        .ok_or_else(|| invalid(worker, "no power-off request reached the BMC"))?;
    let on_request = new_requests
        .iter()
        .find(|r| r.action == PowerAction::On && r.at_us >= off_request)
        .map(|r| r.at_us)
        .ok_or_else(|| invalid(worker, "no power-on request reached the BMC"))?;
    let history = host.history();
    let off_reached = history[history_seen.min(history.len())..]
        .iter()
        .find(|c| c.power == Power::Off)
        .map(|c| c.at_us)
        .ok_or_else(|| invalid(worker, "the host never went off"))?;
    let node_back = node_back_us.ok_or_else(|| invalid(worker, "the Node never came back"))?;
    let total = succeeded_at.saturating_sub(since_epoch(wall0));
    let floor = micros(off_reached.saturating_sub(off_request))
        + micros(node_back.saturating_sub(on_request));
    let fence_latency = micros(off_request.saturating_sub(host0));
    let trace = traced(world, started, fence_latency);
    Ok(Sample {
        write: micros(write),
        fence_latency,
        overhead: total.saturating_sub(floor),
        total,
        bmc_requests: redfish.stats().requests - requests_before,
        api: world.api_counts().since(api_before),
        trace,
    })
}
