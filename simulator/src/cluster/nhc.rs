//! The medik8s NodeHealthCheck controller, as far as baremend meets it: Nodes selected by a
//! NodeHealthCheck (cluster-scoped) are unhealthy once one of its `unhealthyConditions` has
//! held for its `duration`; for an unhealthy Node it creates a request from the first of its
//! `escalatingRemediations` (or its `remediationTemplate`), named after the Node, in the
//! template's namespace, with the template's `spec.template.spec`; when an escalation's
//! `timeout` passes, or the remediator reports `Succeeded=False`, it annotates the request
//! `remediation.medik8s.io/nhc-timed-out` and creates the next; a running step's request
//! deleted by someone else while the Node is unhealthy is made again (the real controller
//! ensures the current step's request on every pass). Once the Node is healthy it
//! deletes its requests; a request for a Node that is gone is deleted too, unless it reports
//! `PermanentNodeDeletionExpected=True` and not yet `Succeeded`. Progress is kept in the
//! NodeHealthCheck's `status.unhealthyNodes`, as the real controller keeps it.
//!
//! Left out (baremend does not depend on them): `minHealthy`/`maxUnhealthy`, pause requests,
//! the control-plane and lease rules, `healthyDelay`, the storm recovery. The simulated cluster
//! knows one template kind, baremend's `NodeRemediationTemplate`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::local::{Gvr, Local, NODES};
use super::timing::{Timing, parse_go_duration};
use crate::apiserver::time::{format_time, parse_time};

/// NodeHealthChecks (remediation.medik8s.io/v1alpha1, cluster-scoped).
pub const NHCS: Gvr = Gvr {
    group: "remediation.medik8s.io",
    version: "v1alpha1",
    plural: "nodehealthchecks",
};

/// baremend's NodeHealthCheck requests.
pub const NODE_REMEDIATIONS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "noderemediations",
};

/// baremend's NodeHealthCheck templates.
pub const NODE_REMEDIATION_TEMPLATES: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "noderemediationtemplates",
};

/// The annotation that tells a remediator its escalation timed out.
pub const TIMED_OUT: &str = "remediation.medik8s.io/nhc-timed-out";

/// Runs the controller until the task is aborted.
pub async fn run(api: Local, timing: Timing) {
    super::mhc::every(api, timing.mhc_period, pass).await;
}

/// The remediation steps of a NodeHealthCheck, in order: (template reference, timeout).
fn steps(nhc: &Value) -> Vec<(Value, Option<Duration>)> {
    if let Some(single) = nhc
        .pointer("/spec/remediationTemplate")
        .filter(|t| t.is_object())
    {
        return vec![(single.clone(), None)];
    }
    let mut steps: Vec<(i64, Value, Option<Duration>)> = nhc
        .pointer("/spec/escalatingRemediations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|step| {
            let order = step.get("order").and_then(Value::as_i64).unwrap_or(0);
            let timeout = step
                .get("timeout")
                .and_then(Value::as_str)
                .and_then(parse_go_duration);
            (order, step["remediationTemplate"].clone(), timeout)
        })
        .collect();
    steps.sort_by_key(|(order, _, _)| *order);
    steps.into_iter().map(|(_, t, d)| (t, d)).collect()
}

/// Why a Node is unhealthy, if it is.
fn unhealthy(node: &Value, nhc: &Value, now: Duration) -> bool {
    let conditions = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let rules = nhc
        .pointer("/spec/unhealthyConditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| {
            vec![
                json!({"type": "Ready", "status": "False", "duration": "300s"}),
                json!({"type": "Ready", "status": "Unknown", "duration": "300s"}),
            ]
        });
    rules.iter().any(|rule| {
        let duration = rule
            .get("duration")
            .and_then(Value::as_str)
            .and_then(parse_go_duration)
            .unwrap_or(Duration::from_secs(300));
        conditions.iter().any(|c| {
            c["type"] == rule["type"]
                && c["status"] == rule["status"]
                && c["lastTransitionTime"]
                    .as_str()
                    .and_then(parse_time)
                    .is_some_and(|since| now.saturating_sub(since) > duration)
        })
    })
}

/// The request a template makes for `node`: its namespace and the object.
fn request_for(api: &Local, template: &Value, node: &str) -> Option<(String, Value)> {
    let known = template["apiVersion"] == "baremend.io/v1alpha1"
        && template["kind"] == "NodeRemediationTemplate";
    if !known {
        return None;
    }
    let namespace = template["namespace"].as_str()?.to_owned();
    let name = template["name"].as_str()?;
    let found = api.get(NODE_REMEDIATION_TEMPLATES, &namespace, name).ok()?;
    let request = json!({
        "apiVersion": "baremend.io/v1alpha1",
        "kind": "NodeRemediation",
        "metadata": {"name": node, "namespace": namespace},
        "spec": found.pointer("/spec/template/spec").cloned().unwrap_or(json!({})),
    });
    Some((namespace, request))
}

/// Whether a request reports the condition `type_` with `status`.
fn reports(request: &Value, type_: &str, status: &str) -> bool {
    request
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == type_ && c["status"] == status)
        })
}

/// One pass over every NodeHealthCheck.
pub fn pass(api: &Local) {
    let now = api.store().wall_time();
    let nodes: HashMap<String, Arc<Value>> = api
        .list_shared(NODES, None)
        .into_iter()
        .filter_map(|n| Some((n.pointer("/metadata/name")?.as_str()?.to_owned(), n.clone())))
        .collect();
    for nhc in api.list(NHCS, None) {
        let name = nhc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let selector = nhc.pointer("/spec/selector").cloned().unwrap_or(json!({}));
        let steps = steps(&nhc);
        let mut tracked: Vec<Value> = nhc
            .pointer("/status/unhealthyNodes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (node_name, node) in &nodes {
            if !crate::apiserver::controllers_selector(&selector, node) {
                continue;
            }
            let at = tracked.iter().position(|u| u["name"] == node_name.as_str());
            match (unhealthy(node, &nhc, now), at) {
                (true, None) => tracked.push(json!({"name": node_name, "remediations": []})),
                (false, Some(index)) => {
                    withdraw(api, &tracked[index]);
                    tracked.remove(index);
                }
                _ => {}
            }
        }
        tracked.retain(|entry| {
            let node = entry["name"].as_str().unwrap_or_default();
            nodes.contains_key(node) || keep_for_gone_node(api, entry)
        });
        for entry in &mut tracked {
            let present = entry["name"]
                .as_str()
                .is_some_and(|node| nodes.contains_key(node));
            escalate(api, &nhc, (entry, present), &steps, now);
        }
        let status = json!({"status": {"unhealthyNodes": tracked, "phase": if tracked.is_empty() { "Enabled" } else { "Remediating" }}});
        if nhc.get("status") != status.get("status") {
            let _ = api.merge(NHCS, "", &name, &status, true);
        }
    }
}

/// Creates the Node's next request when none runs, or when the running one timed out or
/// failed (after marking it timed out); makes the running one again if it was deleted while
/// the Node (`present`) is still unhealthy.
fn escalate(
    api: &Local,
    nhc: &Value,
    (entry, present): (&mut Value, bool),
    steps: &[(Value, Option<Duration>)],
    now: Duration,
) {
    let node = entry["name"].as_str().unwrap_or_default().to_owned();
    let started: Vec<Value> = entry["remediations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(last) = started.last().filter(|r| r.get("timedOut").is_none()) {
        let step = steps.get(started.len() - 1);
        let since = last["started"].as_str().and_then(parse_time).unwrap_or(now);
        let expired = step
            .and_then(|(_, timeout)| *timeout)
            .is_some_and(|t| now.saturating_sub(since) > t);
        let resource = &last["resource"];
        let namespace = resource["namespace"].as_str().unwrap_or_default();
        let request = api.get(NODE_REMEDIATIONS, namespace, &node).ok();
        let failed = request
            .as_ref()
            .is_some_and(|r| reports(r, "Succeeded", "False"));
        if !expired && !failed {
            // Deleted by someone else while the Node is still unhealthy: made again, as the
            // real controller ensures the current step's request on every pass (its timeout
            // still runs from the first).
            if request.is_none()
                && present
                && let Some((template, _)) = step
            {
                remake(api, entry, template, &node);
            }
            return;
        }
        let patch = json!({"metadata": {"annotations": {TIMED_OUT: format_time(now)}}});
        let _ = api.merge(NODE_REMEDIATIONS, namespace, &node, &patch, false);
        if let Some(list) = entry["remediations"].as_array_mut()
            && let Some(last) = list.last_mut()
        {
            last["timedOut"] = json!(format_time(now));
        }
    }
    let Some((template, _)) = steps.get(started.len()) else {
        return;
    };
    let Some((namespace, request)) = request_for(api, template, &node) else {
        api.event(
            nhc,
            "Warning",
            "NoTemplateLeft",
            &format!("no remediation template left for {node}"),
            "NodeHealthCheck",
        );
        return;
    };
    if let Ok(created) = api.create(NODE_REMEDIATIONS, &namespace, request) {
        let resource = json!({"apiVersion": "baremend.io/v1alpha1", "kind": "NodeRemediation", "namespace": namespace, "name": node, "uid": created["metadata"]["uid"]});
        if let Some(list) = entry["remediations"].as_array_mut() {
            list.push(json!({"resource": resource, "started": format_time(now)}));
        }
        api.event(
            nhc,
            "Normal",
            "RemediationCreated",
            &format!("Created remediation object for node {node}"),
            "NodeHealthCheck",
        );
    }
}

/// Makes the running step's request of `node` again (a new UID), recorded in its entry.
fn remake(api: &Local, entry: &mut Value, template: &Value, node: &str) {
    let Some((namespace, request)) = request_for(api, template, node) else {
        return;
    };
    if let Ok(created) = api.create(NODE_REMEDIATIONS, &namespace, request)
        && let Some(last) = entry["remediations"]
            .as_array_mut()
            .and_then(|list| list.last_mut())
    {
        last["resource"]["uid"] = created["metadata"]["uid"].clone();
    }
}

/// Deletes every request made for a Node that is healthy again.
fn withdraw(api: &Local, entry: &Value) {
    let node = entry["name"].as_str().unwrap_or_default();
    for remediation in entry["remediations"].as_array().into_iter().flatten() {
        let namespace = remediation["resource"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let _ = api.delete(NODE_REMEDIATIONS, namespace, node, None);
    }
}

/// Whether a gone Node's requests stay: one expects the Node's deletion and has not yet
/// succeeded. Otherwise they are deleted (the Node was deleted for good).
fn keep_for_gone_node(api: &Local, entry: &Value) -> bool {
    let node = entry["name"].as_str().unwrap_or_default();
    let requests: Vec<Value> = entry["remediations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let namespace = r["resource"]["namespace"].as_str()?;
            api.get(NODE_REMEDIATIONS, namespace, node).ok()
        })
        .collect();
    let keep = requests.iter().any(|r| {
        reports(r, "PermanentNodeDeletionExpected", "True") && !reports(r, "Succeeded", "True")
    });
    if !keep {
        withdraw(api, entry);
    }
    keep
}
