//! The node lifecycle and pod garbage collection of the controller-manager: a Node whose
//! Lease is not renewed within the grace period becomes Unknown and gets the
//! `node.kubernetes.io/unreachable` taints; pods of deleted Nodes, and of out-of-service
//! Nodes, are removed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::local::{LEASES, Local, NODES, PODS, namespace_and_name};
use super::timing::Timing;
use crate::apiserver::time::{format_time, parse_time};

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

fn ready_status(node: &Value) -> Option<String> {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

fn taints(node: &Value) -> Vec<Value> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// kube-controller-manager's two identities: its shared informers list and watch as
/// `system:kube-controller-manager`; the node lifecycle controller writes as its own
/// ServiceAccount (`--use-service-account-credentials`).
#[derive(Debug, Clone)]
pub struct ControllerManager {
    /// The shared informers' client.
    pub informers: Local,
    /// The node lifecycle controller's client.
    pub writes: Local,
}

/// When the controller-manager of cluster `index` (of `clusters`) passes within each
/// `period`: evenly apart, the first cluster's at the period's start.
pub fn phase(period: Duration, index: usize, clusters: usize) -> Duration {
    period.mul_f64(index as f64 / clusters.max(1) as f64)
}

/// Runs the controller until the task is aborted, its passes `phase` after the period's
/// start: the controller-managers of a fleet's clusters are not in step, and their passes
/// all at once would take every core of the one machine simulating them.
pub async fn run(api: ControllerManager, timing: Timing, phase: Duration) {
    let mut missing = HashMap::new();
    tokio::time::sleep(phase).await;
    loop {
        tokio::time::sleep(timing.monitor_period).await;
        // A pass over thousands of Nodes takes up to a second of CPU: it runs off the async workers so the
        // API server keeps answering meanwhile.
        let api = api.clone();
        let grace = timing.node_grace;
        let carried = std::mem::take(&mut missing);
        match tokio::task::spawn_blocking(move || {
            let mut missing = carried;
            pass(&api, grace, &mut missing);
            missing
        })
        .await
        {
            Ok(kept) => missing = kept,
            Err(_) => return,
        }
    }
}

/// One pass over every Node and pod; `missing` remembers since when a pod's Node is gone.
pub fn pass(kcm: &ControllerManager, grace: Duration, missing: &mut HashMap<String, Duration>) {
    let api = &kcm.writes;
    let now = api.wall_time();
    let stamp = format_time(now);
    let leases = kcm.informers.list_shared(LEASES, Some("kube-node-lease"));
    let nodes = kcm.informers.list_shared(NODES, None);
    let renewals: HashMap<&str, Duration> = leases
        .iter()
        .filter_map(|lease| {
            let name = lease.pointer("/metadata/name").and_then(Value::as_str)?;
            let renewed = lease
                .pointer("/spec/renewTime")
                .and_then(Value::as_str)
                .and_then(parse_time)?;
            Some((name, renewed))
        })
        .collect();
    for node in &nodes {
        let name = node
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let renewed = renewals.get(name).copied();
        // A Node without a Lease yet is judged from its creation, as the real controller
        // starts its grace period when it first sees the Node.
        let created = node
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(parse_time);
        let silent = renewed
            .or(created)
            .is_none_or(|at| now.saturating_sub(at) > grace);
        let ready = ready_status(node);
        let mut current = taints(node);
        // Conditional on what was read, as the real controller patches: a write computed from
        // a stale copy (another writer added or removed a taint meanwhile) fails with 409 and
        // is redone from a fresh read at the next pass, instead of undoing the other write.
        let mut read = node
            .pointer("/metadata/resourceVersion")
            .cloned()
            .unwrap_or(Value::Null);
        if silent && ready.as_deref() != Some("Unknown") {
            let conditions: Vec<Value> = node
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|mut c| {
                    c["status"] = json!("Unknown");
                    c["reason"] = json!("NodeStatusUnknown");
                    c["message"] = json!("Kubelet stopped posting node status.");
                    c["lastTransitionTime"] = json!(stamp);
                    c
                })
                .collect();
            match api.merge(
                NODES,
                "",
                name,
                &json!({"metadata": {"resourceVersion": read}, "status": {"conditions": conditions}}),
                true,
            ) {
                // Our own write: the taints below go on the version it made.
                Ok(updated) => {
                    read = updated
                        .pointer("/metadata/resourceVersion")
                        .cloned()
                        .unwrap_or(Value::Null);
                }
                // Someone wrote first: judged again from a fresh read at the next pass.
                Err(_) => continue,
            }
        }
        let has_unreachable = current.iter().any(|t| t["key"] == UNREACHABLE);
        if silent && !has_unreachable {
            current.push(json!({"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": stamp}));
            current.push(json!({"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": stamp}));
            let _ = api.merge(
                NODES,
                "",
                name,
                &json!({"metadata": {"resourceVersion": read}, "spec": {"taints": current}}),
                false,
            );
        } else if !silent && ready.as_deref() == Some("True") && has_unreachable {
            current.retain(|t| t["key"] != UNREACHABLE);
            let _ = api.merge(
                NODES,
                "",
                name,
                &json!({"metadata": {"resourceVersion": read}, "spec": {"taints": current}}),
                false,
            );
        }
    }
    collect_pods(kcm, &nodes, now, grace, missing);
}

/// Pod GC: pods bound to a Node that has been gone for the quarantine time (the grace period
/// here, 40 s in Kubernetes), and pods on out-of-service Nodes that are not Ready, are deleted.
fn collect_pods(
    kcm: &ControllerManager,
    nodes: &[Arc<Value>],
    now: Duration,
    quarantine: Duration,
    missing: &mut HashMap<String, Duration>,
) {
    let out_of_service: HashSet<&str> = nodes
        .iter()
        .filter(|n| {
            taints(n)
                .iter()
                .any(|t| t["key"] == OUT_OF_SERVICE && t["effect"] == "NoExecute")
        })
        .filter(|n| ready_status(n).as_deref() != Some("True"))
        .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
        .collect();
    let existing: HashSet<&str> = nodes
        .iter()
        .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
        .collect();
    for pod in kcm.informers.list_shared(PODS, None) {
        let Some(node) = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            continue;
        };
        let orphaned = !existing.contains(&node) && {
            let since = *missing.entry(node.to_owned()).or_insert(now);
            now.saturating_sub(since) >= quarantine
        };
        if orphaned || out_of_service.contains(&node) {
            let (namespace, name) = namespace_and_name(&pod);
            let _ = kcm.writes.delete(PODS, namespace, name, Some(0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleets_controller_managers_pass_evenly_apart_within_the_period() {
        let period = Duration::from_secs(5);
        let phases: Vec<Duration> = (0..101).map(|i| phase(period, i, 101)).collect();
        assert_eq!(phases[0], Duration::ZERO);
        for pair in phases.windows(2) {
            let gap = pair[1] - pair[0];
            // 5 s / 101 clusters, give or take the float's rounding.
            assert!(gap.abs_diff(Duration::from_micros(49_505)) < Duration::from_micros(2));
        }
        assert!(phases[100] < period);
        // One cluster alone passes at the period's start, as before.
        assert_eq!(phase(period, 0, 1), Duration::ZERO);
        assert_eq!(phase(period, 0, 0), Duration::ZERO);
    }
}
