//! The simulated Machine Config Controller's parts that drift touches:
//! - the drain controller: a node whose `desiredDrain` differs from `lastAppliedDrain` is
//!   cordoned and drained through the Eviction API (PodDisruptionBudgets respected; DaemonSet
//!   and mirror pods left alone), retried while refused — MachineConfigNode `Drained=Unknown`
//!   with the eviction error, `DrainThresholdExceeded` after the threshold — then
//!   `lastAppliedDrain` is written; an `uncordon-…` request uncordons. An external uncordon
//!   during a drain is undone (the node is cordoned again).
//! - the node controller: a pool whose target (`spec.configuration.name`) some nodes are not
//!   told yet gives it (`desiredConfig`) to as many Ready, schedulable, `Done` nodes as
//!   `maxUnavailable` leaves room for, counting every node NotReady, cordoned, not `Done` or
//!   told a config it is not on yet as unavailable (`node_controller.go`, `maxUnavailable`
//!   and `getAllCandidateMachines`; a paused pool, or a target that is no rendered
//!   MachineConfig, is left alone).
//! - the pool status: machine, updated, ready, unavailable and degraded counts, the
//!   conditions, and `status.configuration` once every node is on the target.

use std::collections::HashMap;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{DESIRED_DRAIN, LAST_APPLIED_DRAIN, MCO_NAMESPACE, STATE, set_mcn_condition};
use crate::cluster::local::{Local, MCNS, MCPS, MCS, NODES, PODS, annotation, namespace_and_name};
use crate::cluster::timing::Timing;

const COMPONENT: &str = "machineconfigcontroller-draincontroller";

fn evicted_by_drain(pod: &Value) -> bool {
    let daemon = pod
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|o| o.iter().any(|o| o["kind"] == "DaemonSet"));
    let mirror = pod
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some();
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    !(daemon || mirror || finished)
}

/// Runs the drain controller and the pool status until the task is aborted.
pub async fn run(api: Local, timing: Timing) {
    // Per node: when its current drain began, and whether the threshold was reported.
    let mut drains: HashMap<String, (Instant, bool, Instant)> = HashMap::new();
    loop {
        tokio::time::sleep(timing.mcd_period).await;
        for node in api.list_shared(NODES, None) {
            drain_pass(&api, &node, &timing, &mut drains);
        }
        node_controller(&api);
        pool_status(&api);
    }
}

fn drain_pass(
    api: &Local,
    node: &Value,
    timing: &Timing,
    drains: &mut HashMap<String, (Instant, bool, Instant)>,
) {
    let name = node
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let desired = annotation(node, DESIRED_DRAIN)
        .unwrap_or_default()
        .to_owned();
    let applied = annotation(node, LAST_APPLIED_DRAIN).unwrap_or_default();
    if desired.is_empty() || desired == applied {
        drains.remove(&name);
        return;
    }
    let cordoned = node
        .pointer("/spec/unschedulable")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let set_unschedulable = |value: bool| {
        let _ = api.merge(
            NODES,
            "",
            &name,
            &json!({"spec": {"unschedulable": value}}),
            false,
        );
    };
    let finish = |event: &str, message: &str| {
        let _ = api.merge(
            NODES,
            "",
            &name,
            &json!({"metadata": {"annotations": {LAST_APPLIED_DRAIN: desired}}}),
            false,
        );
        api.event_in(MCO_NAMESPACE, node, "Normal", event, message, COMPONENT);
    };
    if desired.starts_with("uncordon-") {
        if cordoned {
            set_unschedulable(false);
        }
        set_mcn_condition(api, &name, "Uncordoned", "True", "");
        finish("Uncordon", "Uncordoned node");
        drains.remove(&name);
        return;
    }
    let now = Instant::now();
    let (started, reported, next_try) = drains.entry(name.clone()).or_insert((now, false, now));
    if !cordoned {
        // First cordon, or an external uncordon during the drain: cordon (again).
        set_unschedulable(true);
        set_mcn_condition(api, &name, "Cordoned", "True", "");
        api.event_in(
            MCO_NAMESPACE,
            node,
            "Normal",
            "Cordon",
            "Cordoned node to apply update",
            COMPONENT,
        );
    }
    if now < *next_try {
        return;
    }
    let pods: Vec<Value> = api
        .list_selected(PODS, None, &format!("spec.nodeName={name}"))
        .into_iter()
        .filter(evicted_by_drain)
        .collect();
    let mut refused = None;
    for pod in &pods {
        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let (namespace, pod_name) = namespace_and_name(pod);
        if let Err(error) = api.evict(namespace, pod_name) {
            refused = Some(format!(
                "error when evicting pods/\"{pod_name}\" -n \"{namespace}\": {}",
                error.message
            ));
        }
    }
    match refused {
        Some(error) => {
            set_mcn_condition(
                api,
                &name,
                "Drained",
                "Unknown",
                &format!("Error: Node Drain has not succeeded. Error is: {error}"),
            );
            if !*reported && started.elapsed() >= timing.drain_threshold {
                *reported = true;
                api.event_in(
                    MCO_NAMESPACE,
                    node,
                    "Warning",
                    "DrainThresholdExceeded",
                    &format!(
                        "Drain failed for over {:?}: {error}",
                        timing.drain_threshold
                    ),
                    COMPONENT,
                );
            }
            *next_try = now + timing.drain_retry;
        }
        None if pods.is_empty() => {
            set_mcn_condition(api, &name, "Drained", "True", "");
            finish("Drain", "Drain complete");
            drains.remove(&name);
        }
        // Evicted; the kubelet finishes the pods, the next pass sees them gone.
        None => *next_try = now,
    }
}

/// The nodes `pool` selects (its `nodeSelector`'s labels).
fn members<'a>(pool: &Value, nodes: &'a [std::sync::Arc<Value>]) -> Vec<&'a Value> {
    let selector = pool.pointer("/spec/nodeSelector/matchLabels");
    nodes
        .iter()
        .map(|n| n.as_ref())
        .filter(|n| {
            selector.and_then(Value::as_object).is_some_and(|labels| {
                labels
                    .iter()
                    .all(|(k, v)| n.pointer("/metadata/labels").and_then(|l| l.get(k)) == Some(v))
            })
        })
        .collect()
}

fn schedulable(node: &Value) -> bool {
    !node
        .pointer("/spec/unschedulable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn ready_and_schedulable(node: &Value) -> bool {
    super::mcd::ready(node) && schedulable(node)
}

/// `maxUnavailable` of a pool of `machines`: an integer or a percentage (rounded down), 0
/// counting as 1.
fn max_unavailable(value: Option<&Value>, machines: usize) -> usize {
    let n = match value {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(1) as usize,
        Some(Value::String(text)) => match text.strip_suffix('%') {
            Some(percent) => percent.parse::<usize>().unwrap_or(0) * machines / 100,
            None => text.parse().unwrap_or(1),
        },
        _ => 1,
    };
    n.max(1)
}

/// Gives each pool's target to as many nodes as `maxUnavailable` leaves room for.
fn node_controller(api: &Local) {
    let nodes = api.list_shared(NODES, None);
    for pool in api.list_shared(MCPS, None) {
        let target = pool
            .pointer("/spec/configuration/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let paused = pool
            .pointer("/spec/paused")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        // A target that is not a rendered MachineConfig (yet) is given to no node: a daemon
        // could not apply it.
        if target.is_empty() || paused || api.get(MCS, "", target).is_err() {
            continue;
        }
        let members = members(&pool, &nodes);
        let config = |node: &Value, key: &str| annotation(node, key).unwrap_or_default().to_owned();
        let settled = |node: &Value| {
            annotation(node, STATE) == Some("Done")
                && config(node, super::CURRENT_CONFIG) == config(node, super::DESIRED_CONFIG)
        };
        let unavailable = members
            .iter()
            .filter(|n| !(ready_and_schedulable(n) && settled(n)))
            .count();
        let room = max_unavailable(pool.pointer("/spec/maxUnavailable"), members.len())
            .saturating_sub(unavailable);
        let mut candidates: Vec<&Value> = members
            .into_iter()
            .filter(|n| {
                ready_and_schedulable(n) && settled(n) && config(n, super::DESIRED_CONFIG) != target
            })
            .collect();
        candidates.sort_by_key(|n| n.pointer("/metadata/name").and_then(Value::as_str));
        for node in candidates.into_iter().take(room) {
            let Some(name) = node.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            let _ = api.merge(
                NODES,
                "",
                name,
                &json!({"metadata": {"annotations": {super::DESIRED_CONFIG: target}}}),
                false,
            );
            let _ = api.merge(
                MCNS,
                "",
                name,
                &json!({"spec": {"configVersion": {"desired": target}}}),
                false,
            );
        }
    }
}

fn pool_status(api: &Local) {
    let nodes = api.list_shared(NODES, None);
    for pool in api.list_shared(MCPS, None) {
        let Some(name) = pool.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let target = pool
            .pointer("/spec/configuration/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let members = members(&pool, &nodes);
        let mut updated = 0;
        let mut ready = 0;
        let mut unavailable = 0;
        let mut degraded = 0;
        let mut degraded_node = None;
        for node in &members {
            let state = annotation(node, STATE).unwrap_or_default();
            let current = annotation(node, super::CURRENT_CONFIG).unwrap_or_default();
            let is_ready = super::mcd::ready(node);
            let schedulable = schedulable(node);
            let is_updated = state == "Done" && current == target;
            updated += usize::from(is_updated);
            ready += usize::from(is_updated && is_ready && schedulable);
            if state == "Degraded" || state == "Unreconcilable" {
                degraded += 1;
                degraded_node.get_or_insert_with(|| {
                    (
                        node.pointer("/metadata/name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        annotation(node, super::REASON)
                            .unwrap_or_default()
                            .to_owned(),
                    )
                });
            }
            unavailable += usize::from(!is_ready || !schedulable || state != "Done");
        }
        let all_updated = updated == members.len();
        let condition = |kind: &str, on: bool, reason: &str, message: &str| json!({"type": kind, "status": if on { "True" } else { "False" }, "reason": reason, "message": message});
        let (node_degraded_reason, node_degraded_message) = match &degraded_node {
            Some((node, reason)) => (
                format!("{degraded} nodes are reporting degraded status on sync"),
                format!("Node {node} is reporting: {reason:?}"),
            ),
            None => (String::new(), String::new()),
        };
        let mut status = json!({
            "machineCount": members.len(),
            "updatedMachineCount": updated,
            "readyMachineCount": ready,
            "unavailableMachineCount": unavailable,
            "degradedMachineCount": degraded,
            "conditions": [
                condition("Updated", all_updated, "", ""),
                condition("Updating", !all_updated, "", ""),
                condition("NodeDegraded", degraded > 0, &node_degraded_reason, &node_degraded_message),
                condition("Degraded", degraded > 0, "", ""),
            ],
        });
        if all_updated && !target.is_empty() {
            status["configuration"] = json!({"name": target});
        }
        let unchanged = [
            "machineCount",
            "updatedMachineCount",
            "readyMachineCount",
            "unavailableMachineCount",
            "degradedMachineCount",
            "conditions",
            "configuration",
        ]
        .iter()
        .all(|k| {
            status.get(*k).is_none() || pool.pointer(&format!("/status/{k}")) == status.get(*k)
        });
        if !unchanged {
            let _ = api.merge(MCPS, "", name, &json!({"status": status}), true);
        }
    }
}
