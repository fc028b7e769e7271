//! The medik8s NodeHealthCheck controller, as far as baremend meets it (read from
//! medik8s/node-healthcheck-operator main, July 2026; the rules themselves are in
//! [`super::nhc_rules`]).
//!
//! - It disables itself (`Disabled=True`, reason `ConflictingMachineHealthCheckDetected`, a
//!   Warning Event) while any custom OpenShift MachineHealthCheck exists; the lone default
//!   termination handler is no conflict, but the Nodes it watches (`Terminating`) are left to
//!   it. Enabled again, it says so (`Disabled=False`, a Normal Event).
//! - Nodes selected by a NodeHealthCheck (cluster-scoped) are unhealthy once one of its
//!   `unhealthyConditions` has held for its `duration`; a condition still within its duration
//!   neither starts nor withdraws anything (an `Unknown → False` flip keeps the request).
//! - For an unhealthy Node it creates a request from the first of its
//!   `escalatingRemediations` (or its `remediationTemplate`) as `generateRemediationCR` does:
//!   named after the Node (or `generateName`d), annotated with the Node and template names,
//!   labelled part of the NodeHealthCheck, owned by it (and by the Node's Machine when that
//!   lives in the template's namespace). A request of that name it does not own is left alone.
//! - It holds the Node's Lease (`medik8s-leases/node-<node>`) while remediating; a lease
//!   overdue (acquired + 3 × the step's duration + the previous steps' timeouts; a single
//!   template's duration is [`Timing::nhc_remediation_duration`], 10 min upstream) times the
//!   request out. An escalation's `timeout`, or the remediator's `Succeeded=False`, times it
//!   out too. Timing out annotates the request `remediation.medik8s.io/nhc-timed-out` (unless
//!   it reports `Succeeded=True`) and moves to the next escalation.
//! - A running step's request deleted by someone else while the Node is unhealthy is made
//!   again. Once the Node is healthy it deletes its requests and releases the lease; a request
//!   for a Node that is gone is deleted too, unless it reports
//!   `PermanentNodeDeletionExpected=True` and not yet `Succeeded`. Progress is kept in the
//!   NodeHealthCheck's `status.unhealthyNodes`, as the real controller keeps it.
//!
//! Left out (baremend does not depend on them): `minHealthy`/`maxUnhealthy`, pause requests,
//! the cluster-upgrade and control-plane rules, `healthyDelay`, the storm recovery, template
//! validation (an unserved template kind only makes `NoTemplateLeft` when its turn comes). The
//! simulated cluster knows one template kind, baremend's `NodeRemediationTemplate`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::local::{Gvr, LEASES, Local, MACHINES, MHCS, NAMESPACES, NODES};
use super::nhc_rules::{
    MhcConflict, NODE_MACHINE, NodeHealth, RequestFor, lease_overdue, matches_node_template,
    mhc_conflict, node_health, owned_by, owner_ref, request_for, terminating, unhealthy_rules,
};
use super::timing::{Timing, parse_go_duration};
use crate::apiserver::time::{format_micro_time, format_time, parse_time};

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
/// The `Disabled` condition's reason while a custom MachineHealthCheck exists.
pub const DISABLED_BY_MHC: &str = "ConflictingMachineHealthCheckDetected";
/// Its message, also the Warning Event's.
pub const DISABLED_BY_MHC_MESSAGE: &str =
    "Custom MachineHealthCheck(s) detected, disabling NodeHealthCheck to avoid conflicts";
/// Where the Node leases live (medik8s/common `pkg/lease`).
pub const LEASE_NAMESPACE: &str = "medik8s-leases";
const ENABLED_MESSAGE: &str = "No issues found, NodeHealthCheck is enabled.";
const COMPONENT: &str = "NodeHealthCheck";

/// The durations of the leases a NodeHealthCheck holds.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTiming {
    /// A single template's expected duration (10 min upstream).
    pub remediation: Duration,
    /// Added to the lease's duration so that nobody takes it meanwhile (1 min upstream).
    pub buffer: Duration,
}

/// Runs the controller until the task is aborted.
pub async fn run(api: Local, timing: Timing) {
    let lease = LeaseTiming {
        remediation: timing.nhc_remediation_duration,
        buffer: timing.nhc_lease_buffer,
    };
    super::mhc::every(api, timing.mhc_period, move |api| pass(api, lease)).await;
}

/// One remediation step: its template reference and timeout.
struct Step {
    template: Value,
    timeout: Option<Duration>,
}

/// What one NodeHealthCheck's pass works with.
struct Check<'a> {
    nhc: &'a Value,
    name: String,
    steps: Vec<Step>,
    /// A single `remediationTemplate` (no escalation).
    single: bool,
    lease: LeaseTiming,
    nodes: &'a HashMap<String, Arc<Value>>,
    now: Duration,
}

impl Check<'_> {
    fn holder(&self) -> String {
        format!("NodeHealthCheck-{}", self.name)
    }

    /// The lease durations of step `index`: (its own, the previous steps' timeouts).
    fn durations(&self, index: usize) -> (Duration, Duration) {
        if self.single {
            return (self.lease.remediation, Duration::ZERO);
        }
        let timeout = |s: &Step| s.timeout.unwrap_or(self.lease.remediation);
        let current = self
            .steps
            .get(index)
            .map_or(self.lease.remediation, timeout);
        (current, self.steps.iter().take(index).map(timeout).sum())
    }
}

/// The remediation steps of a NodeHealthCheck, in order, and whether it has a single template.
fn steps(nhc: &Value) -> (Vec<Step>, bool) {
    if let Some(single) = nhc
        .pointer("/spec/remediationTemplate")
        .filter(|t| t.is_object())
    {
        let step = Step {
            template: single.clone(),
            timeout: None,
        };
        return (vec![step], true);
    }
    let mut steps: Vec<(i64, Step)> = nhc
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
            let template = step["remediationTemplate"].clone();
            (order, Step { template, timeout })
        })
        .collect();
    steps.sort_by_key(|(order, _)| *order);
    (steps.into_iter().map(|(_, s)| s).collect(), false)
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
pub fn pass(api: &Local, lease: LeaseTiming) {
    let now = api.wall_time();
    let conflict = mhc_conflict(&api.list(MHCS, None));
    let nodes: HashMap<String, Arc<Value>> = api
        .list_shared(NODES, None)
        .into_iter()
        .filter_map(|n| Some((n.pointer("/metadata/name")?.as_str()?.to_owned(), n.clone())))
        .collect();
    for nhc in api.list(NHCS, None) {
        if conflict == MhcConflict::Custom {
            disable(api, &nhc, now);
            continue;
        }
        let (steps, single) = steps(&nhc);
        let check = Check {
            nhc: &nhc,
            name: nhc["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            steps,
            single,
            lease,
            nodes: &nodes,
            now,
        };
        check_nodes(api, &check, conflict);
    }
}

/// The `Disabled` condition as it should read, keeping its transition time when unchanged.
fn disabled_condition(nhc: &Value, disabled: bool, now: Duration) -> Value {
    let (status, reason, message) = if disabled {
        ("True", DISABLED_BY_MHC, DISABLED_BY_MHC_MESSAGE)
    } else {
        ("False", "NodeHealthCheckEnabled", ENABLED_MESSAGE)
    };
    let old = nhc
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Disabled"));
    let since = old
        .filter(|c| c["status"] == status)
        .map(|c| c["lastTransitionTime"].clone())
        .unwrap_or_else(|| json!(format_time(now)));
    json!({"type": "Disabled", "status": status, "reason": reason, "message": message, "lastTransitionTime": since})
}

/// Disables a NodeHealthCheck for a custom MachineHealthCheck: the condition, the phase and,
/// when it was not disabled for that already, a Warning Event. Its requests stay as they are.
fn disable(api: &Local, nhc: &Value, now: Duration) {
    let condition = disabled_condition(nhc, true, now);
    let already = nhc
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.contains(&condition));
    if already {
        return;
    }
    let name = nhc["metadata"]["name"].as_str().unwrap_or_default();
    let reason = format!("NHC is disabled: {DISABLED_BY_MHC}: {DISABLED_BY_MHC_MESSAGE}");
    let status =
        json!({"status": {"conditions": [condition], "phase": "Disabled", "reason": reason}});
    let _ = api.merge(NHCS, "", name, &status, true);
    api.event(
        nhc,
        "Warning",
        "Disabled",
        DISABLED_BY_MHC_MESSAGE,
        COMPONENT,
    );
}

/// One NodeHealthCheck's pass over its Nodes (it is enabled).
fn check_nodes(api: &Local, check: &Check, conflict: MhcConflict) {
    let selector = check
        .nhc
        .pointer("/spec/selector")
        .cloned()
        .unwrap_or(json!({}));
    let rules = unhealthy_rules(check.nhc);
    let mut tracked: Vec<Value> = check
        .nhc
        .pointer("/status/unhealthyNodes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (node_name, node) in check.nodes {
        if !crate::apiserver::controllers_selector(&selector, node) {
            continue;
        }
        let mut health = node_health(node, &rules, check.now);
        // Left to the termination handler, which the NodeHealthCheck tolerates beside it.
        if conflict == MhcConflict::TerminationHandlerOnly && terminating(node) {
            health = NodeHealth::Healthy;
        }
        let at = tracked.iter().position(|u| u["name"] == node_name.as_str());
        match (health, at) {
            (NodeHealth::Unhealthy, None) => {
                tracked.push(json!({"name": node_name, "remediations": []}))
            }
            (NodeHealth::Healthy, Some(index)) => {
                withdraw(api, check, &tracked[index]);
                tracked.remove(index);
            }
            _ => {}
        }
    }
    tracked.retain(|entry| {
        let node = entry["name"].as_str().unwrap_or_default();
        check.nodes.contains_key(node) || keep_for_gone_node(api, check, entry)
    });
    for entry in &mut tracked {
        escalate(api, check, entry);
    }
    write_status(api, check, tracked);
}

/// Writes the NodeHealthCheck's status when it changed (and says it is enabled when it was
/// not).
fn write_status(api: &Local, check: &Check, tracked: Vec<Value>) {
    let condition = disabled_condition(check.nhc, false, check.now);
    let was_enabled = check
        .nhc
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Disabled" && c["status"] == "False")
        });
    let remediating = tracked
        .iter()
        .any(|e| e["remediations"].as_array().is_some_and(|r| !r.is_empty()));
    let (phase, reason) = if remediating {
        (
            "Remediating",
            format!("NHC is remediating {} nodes", tracked.len()),
        )
    } else {
        (
            "Enabled",
            "NHC is enabled, no ongoing remediation".to_owned(),
        )
    };
    let status = json!({"status": {"unhealthyNodes": tracked, "phase": phase, "reason": reason, "conditions": [condition]}});
    if check.nhc.get("status") != status.get("status") {
        let _ = api.merge(NHCS, "", &check.name, &status, true);
    }
    if !was_enabled {
        api.event(check.nhc, "Normal", "Enabled", ENABLED_MESSAGE, COMPONENT);
    }
}

/// The request an entry's running step recorded, if it is still there.
fn recorded_request(api: &Local, started: &Value) -> Option<Value> {
    let resource = &started["resource"];
    let namespace = resource["namespace"].as_str().unwrap_or_default();
    let name = resource["name"].as_str().unwrap_or_default();
    api.get(NODE_REMEDIATIONS, namespace, name).ok()
}

/// Moves a Node's remediation on: times out the running step (its lease overdue, its timeout
/// passed, or it failed), makes its request again if someone else deleted it, or starts the
/// next step when none runs.
fn escalate(api: &Local, check: &Check, entry: &mut Value) {
    let node = entry["name"].as_str().unwrap_or_default().to_owned();
    let present = check.nodes.contains_key(&node);
    let started: Vec<Value> = entry["remediations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(last) = started.last().filter(|r| r.get("timedOut").is_none()) {
        let index = started.len() - 1;
        let request = recorded_request(api, last);
        let overdue = lease_is_overdue(api, check, &node, check.durations(index));
        let since = last["started"]
            .as_str()
            .and_then(parse_time)
            .unwrap_or(check.now);
        let expired = check
            .steps
            .get(index)
            .and_then(|s| s.timeout)
            .is_some_and(|t| check.now.saturating_sub(since) > t);
        let failed = request
            .as_ref()
            .is_some_and(|r| reports(r, "Succeeded", "False"));
        if !overdue && !expired && !failed {
            // Deleted by someone else while the Node is still unhealthy: made again, as the
            // real controller ensures the current step's request on every pass (its timeout
            // still runs from the first).
            if request.is_none() && present {
                remake(api, check, entry, index, &node);
            }
            return;
        }
        time_out(api, check, entry, request.as_ref());
        if overdue {
            // Upstream returns here; the next step starts on its next reconcile.
            return;
        }
    }
    if present {
        start_next(api, check, entry, &node);
    }
}

/// Marks the running step timed out, and its request (unless it reports `Succeeded=True`).
fn time_out(api: &Local, check: &Check, entry: &mut Value, request: Option<&Value>) {
    if let Some(request) = request.filter(|r| !reports(r, "Succeeded", "True")) {
        let namespace = request["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let name = request["metadata"]["name"].as_str().unwrap_or_default();
        let patch = json!({"metadata": {"annotations": {TIMED_OUT: format_time(check.now)}}});
        let _ = api.merge(NODE_REMEDIATIONS, namespace, name, &patch, false);
    }
    if let Some(last) = entry["remediations"]
        .as_array_mut()
        .and_then(|l| l.last_mut())
    {
        last["timedOut"] = json!(format_time(check.now));
    }
}

/// Starts the Node's next step, if there is one.
fn start_next(api: &Local, check: &Check, entry: &mut Value, node: &str) {
    let index = entry["remediations"].as_array().map_or(0, Vec::len);
    if check.single && index > 0 {
        // A single template timed out: its request stays, nothing follows.
        return;
    }
    let Some(step) = check.steps.get(index) else {
        return;
    };
    let Some(template) = template_object(api, &step.template) else {
        let message = format!("Remediation timed out, and no template left to try for node {node}");
        api.event(check.nhc, "Warning", "NoTemplateLeft", &message, COMPONENT);
        return;
    };
    if let Some(found) = existing_request(api, &template, node) {
        // Not ours (someone else's of that name): nothing to do, as upstream.
        if owned_by(&found, &check.name) {
            record_started(entry, &found, &template);
        }
        return;
    }
    if !obtain_lease(api, check, node, check.durations(index).0) {
        let message =
            format!("Skipped remediation of node: {node}, because node lease is already taken");
        api.event(
            check.nhc,
            "Warning",
            "RemediationSkipped",
            &message,
            COMPONENT,
        );
        return;
    }
    if let Some(created) = create_request(api, check, &template, node) {
        record_started(entry, &created, &template);
        let message = format!("Created remediation object for node {node}");
        api.event(
            check.nhc,
            "Normal",
            "RemediationCreated",
            &message,
            COMPONENT,
        );
    }
}

/// Records a started step in the Node's entry.
fn record_started(entry: &mut Value, request: &Value, template: &Value) {
    let metadata = &request["metadata"];
    let resource = json!({"apiVersion": request["apiVersion"], "kind": request["kind"],
        "namespace": metadata["namespace"], "name": metadata["name"], "uid": metadata["uid"]});
    let started = metadata["creationTimestamp"].clone();
    if let Some(list) = entry["remediations"].as_array_mut() {
        list.push(json!({"resource": resource, "started": started,
            "templateName": template["metadata"]["name"]}));
    }
}

/// The template object a step names, when the simulated cluster knows its kind and it exists.
fn template_object(api: &Local, reference: &Value) -> Option<Value> {
    let known = reference["apiVersion"] == "baremend.io/v1alpha1"
        && reference["kind"] == "NodeRemediationTemplate";
    if !known {
        return None;
    }
    let namespace = reference["namespace"].as_str()?;
    let name = reference["name"].as_str()?;
    api.get(NODE_REMEDIATION_TEMPLATES, namespace, name).ok()
}

/// The request for `node` from `template` in the template's namespace, if there is one.
fn existing_request(api: &Local, template: &Value, node: &str) -> Option<Value> {
    let namespace = template["metadata"]["namespace"].as_str()?;
    let template_name = template["metadata"]["name"].as_str()?;
    api.list(NODE_REMEDIATIONS, Some(namespace))
        .into_iter()
        .find(|r| matches_node_template(r, node, template_name))
}

/// Creates the request for `node` from `template` (the object); the created object.
fn create_request(api: &Local, check: &Check, template: &Value, node: &str) -> Option<Value> {
    let node_object = check.nodes.get(node)?;
    let input = RequestFor {
        node: node_object,
        nhc: check.nhc,
        machine: machine_owner(api, node_object, template),
    };
    let request = request_for(template, &input);
    let namespace = template["metadata"]["namespace"].as_str()?;
    api.create(NODE_REMEDIATIONS, namespace, request).ok()
}

/// The owner reference of the Node's OpenShift Machine, when it lives in the template's
/// namespace.
fn machine_owner(api: &Local, node: &Value, template: &Value) -> Option<Value> {
    let annotation = node
        .pointer("/metadata/annotations")?
        .get(NODE_MACHINE)?
        .as_str()?;
    let (namespace, name) = annotation.split_once('/')?;
    if template["metadata"]["namespace"] != namespace {
        return None;
    }
    let machine = api.get(MACHINES, namespace, name).ok()?;
    Some(owner_ref(
        "machine.openshift.io/v1beta1",
        "Machine",
        &machine,
    ))
}

/// Makes the running step's request of `node` again (a new UID), recorded in its entry.
fn remake(api: &Local, check: &Check, entry: &mut Value, index: usize, node: &str) {
    let Some(template) = check
        .steps
        .get(index)
        .and_then(|s| template_object(api, &s.template))
    else {
        return;
    };
    if let Some(created) = create_request(api, check, &template, node)
        && let Some(last) = entry["remediations"]
            .as_array_mut()
            .and_then(|list| list.last_mut())
    {
        last["resource"]["name"] = created["metadata"]["name"].clone();
        last["resource"]["uid"] = created["metadata"]["uid"].clone();
    }
}

/// Deletes every request made for a Node (healthy again, or gone for good) that the
/// NodeHealthCheck owns, and releases its lease.
fn withdraw(api: &Local, check: &Check, entry: &Value) {
    for started in entry["remediations"].as_array().into_iter().flatten() {
        if let Some(request) = recorded_request(api, started).filter(|r| owned_by(r, &check.name)) {
            let namespace = request["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default();
            let name = request["metadata"]["name"].as_str().unwrap_or_default();
            let _ = api.delete(NODE_REMEDIATIONS, namespace, name, None);
        }
    }
    release_lease(api, check, entry["name"].as_str().unwrap_or_default());
}

/// Whether a gone Node's requests stay: one expects the Node's deletion and has not yet
/// succeeded. Otherwise they are deleted (the Node was deleted for good).
fn keep_for_gone_node(api: &Local, check: &Check, entry: &Value) -> bool {
    let keep = entry["remediations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|started| recorded_request(api, started))
        .any(|r| {
            reports(&r, "PermanentNodeDeletionExpected", "True")
                && !reports(&r, "Succeeded", "True")
        });
    if !keep {
        withdraw(api, check, entry);
    }
    keep
}

fn lease_name(node: &str) -> String {
    format!("node-{node}")
}

/// Takes (or renews) the Node's lease for `duration` plus the buffer; false when another
/// holder has it and it has not expired.
fn obtain_lease(api: &Local, check: &Check, node: &str, duration: Duration) -> bool {
    let seconds = (duration + check.lease.buffer)
        .as_secs_f64()
        .ceil()
        .max(1.0) as i64;
    let now = json!(format_micro_time(check.now));
    let Ok(lease) = api.get(LEASES, LEASE_NAMESPACE, &lease_name(node)) else {
        let _ = api.create(
            NAMESPACES,
            "",
            json!({"metadata": {"name": LEASE_NAMESPACE}}),
        );
        let owner = check.nodes.get(node).map(|n| owner_ref("v1", "Node", n));
        let lease = json!({
            "metadata": {"name": lease_name(node), "ownerReferences": owner.into_iter().collect::<Vec<_>>()},
            "spec": {"holderIdentity": check.holder(), "leaseDurationSeconds": seconds,
                "acquireTime": now, "renewTime": now, "leaseTransitions": 0},
        });
        return api.create(LEASES, LEASE_NAMESPACE, lease).is_ok();
    };
    let spec = &lease["spec"];
    let mut patch = json!({"spec": {"leaseDurationSeconds": seconds, "renewTime": now}});
    if spec["holderIdentity"] != check.holder().as_str() {
        let renewed = spec["renewTime"].as_str().and_then(parse_time);
        let lasts = Duration::from_secs(spec["leaseDurationSeconds"].as_u64().unwrap_or(0));
        if renewed.is_some_and(|r| r + lasts > check.now) {
            return false;
        }
        // Taken over once expired: acquired now. A lease already ours keeps its acquire time.
        patch["spec"]["holderIdentity"] = json!(check.holder());
        patch["spec"]["acquireTime"] = now;
    }
    api.merge(LEASES, LEASE_NAMESPACE, &lease_name(node), &patch, false)
        .is_ok()
}

/// Whether the Node's lease, held by this NodeHealthCheck, is overdue (then it is deleted, as
/// `ManageLease` invalidates it). A lease that is gone or someone else's is not.
fn lease_is_overdue(
    api: &Local,
    check: &Check,
    node: &str,
    durations: (Duration, Duration),
) -> bool {
    let Ok(lease) = api.get(LEASES, LEASE_NAMESPACE, &lease_name(node)) else {
        return false;
    };
    if lease["spec"]["holderIdentity"] != check.holder().as_str() {
        return false;
    }
    let Some(acquired) = lease["spec"]["acquireTime"].as_str().and_then(parse_time) else {
        return false;
    };
    if !lease_overdue(acquired, durations, check.now) {
        return false;
    }
    let _ = api.delete(LEASES, LEASE_NAMESPACE, &lease_name(node), None);
    true
}

/// Deletes the Node's lease when this NodeHealthCheck holds it.
fn release_lease(api: &Local, check: &Check, node: &str) {
    let ours = api
        .get(LEASES, LEASE_NAMESPACE, &lease_name(node))
        .is_ok_and(|l| l["spec"]["holderIdentity"] == check.holder().as_str());
    if ours {
        let _ = api.delete(LEASES, LEASE_NAMESPACE, &lease_name(node), None);
    }
}
