//! The decisions of the simulated NodeHealthCheck, apart from its I/O: whether a
//! MachineHealthCheck conflicts with it, how healthy a Node is, what a request looks like and
//! when a Node's lease is overdue. Read from medik8s/node-healthcheck-operator (main, July 2026):
//! `internal/controller/mhc/checker.go` (`UpdateStatus`, `NeedIgnoreNode`),
//! `internal/controller/nodehealthcheck_controller.go` (`matchesUnhealthyConditions`,
//! `checkNodeConditions`), `internal/controller/resources/manager.go`
//! (`generateRemediationCR`, `isMatchNodeTemplate`, `IsOwner`) and
//! `internal/controller/resources/lease.go` (`calcLeaseExpiration`).
//!
//! Expected flow: [`mhc_conflict`] over the cluster's MachineHealthChecks → (not disabled)
//! [`node_health`] per selected Node → [`request_for`] when a Node needs a request, found
//! again later with [`matches_node_template`] and [`owned_by`] → [`lease_overdue`] while it
//! runs.
//! Guarantees: pure functions of their inputs (times are passed in).
//! Caveats: only OpenShift's MachineHealthChecks count for the conflict, as upstream (it lists
//! `machine.openshift.io` ones; Cluster API's are not looked at).

use std::time::Duration;

use serde_json::{Value, json};

use super::timing::parse_go_duration;
use crate::apiserver::time::parse_time;

/// The Node condition the default termination-handler MachineHealthCheck watches.
pub const TERMINATING: &str = "Terminating";
/// The annotation naming the Node a request is for.
pub const NODE_NAME: &str = "remediation.medik8s.io/node-name";
/// The annotation naming the template a request was made from.
pub const TEMPLATE_NAME: &str = "remediation.medik8s.io/template-name";
/// The template annotation that makes requests `generateName`d (its value is not read).
pub const MULTIPLE_TEMPLATES: &str = "remediation.medik8s.io/multiple-templates-support";
/// The label every request made by a NodeHealthCheck carries, with [`PART_OF_VALUE`].
pub const PART_OF: &str = "app.kubernetes.io/part-of";
/// The value of [`PART_OF`].
pub const PART_OF_VALUE: &str = "node-healthcheck-controller";
/// The label of requests for control-plane Nodes.
pub const CONTROL_PLANE_REQUEST: &str = "remediation.medik8s.io/isControlPlaneNode";
/// The Node annotation naming its OpenShift Machine (`namespace/name`).
pub const NODE_MACHINE: &str = "machine.openshift.io/machine";
/// How many times a lease's duration passes before it is overdue (upstream: acquired plus
/// `maxTimesToExtendLease + 1` times the current duration, plus the previous steps' timeouts).
pub const LEASE_PERIODS: u32 = 3;

/// What the cluster's MachineHealthChecks mean for a NodeHealthCheck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MhcConflict {
    /// None at all.
    None,
    /// Only the default termination handler (one MHC whose only unhealthy condition is
    /// `Terminating`): Nodes with a `Terminating` condition are left to it.
    TerminationHandlerOnly,
    /// Anything else: the NodeHealthCheck disables itself.
    Custom,
}

/// Classifies OpenShift's MachineHealthChecks as the medik8s checker does: none; exactly one
/// whose `unhealthyConditions` is the single type `Terminating`; or custom (more than one, or
/// one with any other conditions) — by shape, not by name.
pub fn mhc_conflict(mhcs: &[Value]) -> MhcConflict {
    match mhcs {
        [] => MhcConflict::None,
        [only] => {
            let conditions = only
                .pointer("/spec/unhealthyConditions")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            match conditions {
                [single] if single["type"] == TERMINATING => MhcConflict::TerminationHandlerOnly,
                _ => MhcConflict::Custom,
            }
        }
        _ => MhcConflict::Custom,
    }
}

/// A Node as a NodeHealthCheck sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeHealth {
    /// No unhealthy condition holds.
    Healthy,
    /// An unhealthy condition holds, still within its duration: neither remediated nor
    /// withdrawn (a Node switching from `Ready=Unknown` to `Ready=False` keeps its request).
    Soon,
    /// An unhealthy condition held longer than its duration.
    Unhealthy,
}

/// The NodeHealthCheck's unhealthy conditions (its defaults when it names none).
pub fn unhealthy_rules(nhc: &Value) -> Vec<Value> {
    nhc.pointer("/spec/unhealthyConditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| {
            vec![
                json!({"type": "Ready", "status": "False", "duration": "300s"}),
                json!({"type": "Ready", "status": "Unknown", "duration": "300s"}),
            ]
        })
}

/// How healthy `node` is under `rules` at `now` (wall time since the epoch).
pub fn node_health(node: &Value, rules: &[Value], now: Duration) -> NodeHealth {
    let conditions = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut health = NodeHealth::Healthy;
    for rule in rules {
        // The last condition of a type counts, as upstream indexes them by type.
        let Some(condition) = conditions.iter().rev().find(|c| c["type"] == rule["type"]) else {
            continue;
        };
        if condition["status"] != rule["status"] {
            continue;
        }
        let duration = rule
            .get("duration")
            .and_then(Value::as_str)
            .and_then(parse_go_duration)
            .unwrap_or(Duration::from_secs(300));
        let since = condition["lastTransitionTime"]
            .as_str()
            .and_then(parse_time)
            .unwrap_or(now);
        if now.saturating_sub(since) > duration {
            return NodeHealth::Unhealthy;
        }
        health = NodeHealth::Soon;
    }
    health
}

/// Whether a Node has a condition of type `Terminating` (left to the termination handler).
pub fn terminating(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == TERMINATING))
}

/// An owner reference as the NodeHealthCheck writes them (never the controller).
pub fn owner_ref(api_version: &str, kind: &str, object: &Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": object.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
        "uid": object.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
        "controller": false,
    })
}

/// What a request is made of besides its template.
pub struct RequestFor<'a> {
    /// The Node.
    pub node: &'a Value,
    /// The NodeHealthCheck making it.
    pub nhc: &'a Value,
    /// The Node's Machine's owner reference, when the Machine lives in the template's
    /// namespace (owners must share their dependent's namespace).
    pub machine: Option<Value>,
}

/// The request `template` (the template object itself) makes for a Node: the template's kind
/// without `Template`, in its namespace, its `spec.template.spec`; named after the Node, or
/// `generateName: <node>-` when the template carries [`MULTIPLE_TEMPLATES`]; annotated with the
/// Node and template names, labelled part of the NodeHealthCheck, owned by it (and by the
/// Machine when given); labelled [`CONTROL_PLANE_REQUEST`] for a control-plane Node.
pub fn request_for(template: &Value, input: &RequestFor) -> Value {
    let node = input.node["metadata"]["name"].as_str().unwrap_or_default();
    let kind = template["kind"].as_str().unwrap_or_default();
    let mut metadata = json!({
        "namespace": template["metadata"]["namespace"],
        "annotations": {NODE_NAME: node, TEMPLATE_NAME: template["metadata"]["name"]},
        "labels": {PART_OF: PART_OF_VALUE},
        "ownerReferences": [owner_ref("remediation.medik8s.io/v1alpha1", "NodeHealthCheck", input.nhc)],
    });
    let multiple = template
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(MULTIPLE_TEMPLATES));
    if multiple {
        metadata["generateName"] = json!(format!("{node}-"));
    } else {
        metadata["name"] = json!(node);
    }
    if let Some(machine) = &input.machine
        && let Some(owners) = metadata["ownerReferences"].as_array_mut()
    {
        owners.push(machine.clone());
    }
    if is_control_plane(input.node) {
        metadata["labels"][CONTROL_PLANE_REQUEST] = json!("");
    }
    json!({
        "apiVersion": template["apiVersion"],
        "kind": kind.strip_suffix("Template").unwrap_or(kind),
        "metadata": metadata,
        "spec": template.pointer("/spec/template/spec").cloned().unwrap_or(json!({})),
    })
}

/// Whether a Node is a control-plane Node (either role label).
fn is_control_plane(node: &Value) -> bool {
    node.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|l| {
            l.contains_key("node-role.kubernetes.io/control-plane")
                || l.contains_key("node-role.kubernetes.io/master")
        })
}

/// Whether `request` is the one for `node` from `template`: with a template-name annotation,
/// by both annotations; without, by its name.
pub fn matches_node_template(request: &Value, node: &str, template: &str) -> bool {
    let annotations = request.pointer("/metadata/annotations");
    match annotations.and_then(|a| a.get(TEMPLATE_NAME)) {
        Some(name) => {
            name == template && annotations.and_then(|a| a.get(NODE_NAME)) == Some(&json!(node))
        }
        None => request["metadata"]["name"] == node,
    }
}

/// The Node a request is for: its [`NODE_NAME`] annotation, else its name.
pub fn node_of(request: &Value) -> &str {
    request
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(NODE_NAME))
        .or_else(|| request.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Whether `request` is owned by the NodeHealthCheck `nhc` (by apiVersion, kind and name).
pub fn owned_by(request: &Value, nhc: &str) -> bool {
    request
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|owners| {
            owners.iter().any(|o| {
                o["apiVersion"] == "remediation.medik8s.io/v1alpha1"
                    && o["kind"] == "NodeHealthCheck"
                    && o["name"] == nhc
            })
        })
}

/// Whether a lease acquired at `acquired` is overdue at `now`: after [`LEASE_PERIODS`] times
/// the current step's duration plus the previous steps' timeouts.
pub fn lease_overdue(
    acquired: Duration,
    (current, previous): (Duration, Duration),
    now: Duration,
) -> bool {
    now > acquired + current * LEASE_PERIODS + previous
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mhc(conditions: Value) -> Value {
        json!({"spec": {"unhealthyConditions": conditions}})
    }

    /// medik8s node-healthcheck-operator `internal/controller/mhc/checker.go`, `UpdateStatus`.
    #[test]
    fn only_a_lone_termination_handler_is_no_conflict() {
        let handler = mhc(json!([{"type": "Terminating", "status": "True", "timeout": "0s"}]));
        let custom = mhc(json!([{"type": "Ready", "status": "Unknown", "timeout": "300s"}]));
        assert_eq!(mhc_conflict(&[]), MhcConflict::None);
        assert_eq!(
            mhc_conflict(std::slice::from_ref(&handler)),
            MhcConflict::TerminationHandlerOnly
        );
        assert_eq!(
            mhc_conflict(std::slice::from_ref(&custom)),
            MhcConflict::Custom
        );
        assert_eq!(
            mhc_conflict(&[handler.clone(), handler]),
            MhcConflict::Custom
        );
        let both = mhc(
            json!([{"type": "Terminating", "status": "True"}, {"type": "Ready", "status": "False"}]),
        );
        assert_eq!(mhc_conflict(&[both]), MhcConflict::Custom);
    }

    /// medik8s `internal/controller/resources/manager.go`, `generateRemediationCR`.
    #[test]
    fn a_request_names_its_node_and_template_and_its_owners() {
        let template = json!({"apiVersion": "baremend.io/v1alpha1", "kind": "NodeRemediationTemplate",
            "metadata": {"name": "baremend", "namespace": "wa"}, "spec": {"template": {"spec": {"a": 1}}}});
        let node = json!({"metadata": {"name": "worker-0", "labels": {}}});
        let nhc = json!({"metadata": {"name": "workers", "uid": "u1"}});
        let input = RequestFor {
            node: &node,
            nhc: &nhc,
            machine: None,
        };
        let request = request_for(&template, &input);
        assert_eq!(request["kind"], "NodeRemediation");
        assert_eq!(request["metadata"]["name"], "worker-0");
        assert_eq!(request["metadata"]["namespace"], "wa");
        assert_eq!(request["metadata"]["annotations"][NODE_NAME], "worker-0");
        assert_eq!(
            request["metadata"]["annotations"][TEMPLATE_NAME],
            "baremend"
        );
        assert_eq!(request["metadata"]["labels"][PART_OF], PART_OF_VALUE);
        assert_eq!(
            request["metadata"]["ownerReferences"][0]["kind"],
            "NodeHealthCheck"
        );
        assert_eq!(request["spec"], json!({"a": 1}));
        assert!(owned_by(&request, "workers") && !owned_by(&request, "other"));
        assert!(matches_node_template(&request, "worker-0", "baremend"));
        assert!(!matches_node_template(&request, "worker-0", "another"));
        let mut multiple = template.clone();
        multiple["metadata"]["annotations"] = json!({MULTIPLE_TEMPLATES: "true"});
        let master = json!({"metadata": {"name": "master-0", "labels": {"node-role.kubernetes.io/master": ""}}});
        let machine = owner_ref(
            "machine.openshift.io/v1beta1",
            "Machine",
            &json!({"metadata": {"name": "m", "uid": "u2"}}),
        );
        let input = RequestFor {
            node: &master,
            nhc: &nhc,
            machine: Some(machine),
        };
        let request = request_for(&multiple, &input);
        assert_eq!(request["metadata"]["generateName"], "master-0-");
        assert!(request["metadata"].get("name").is_none());
        assert_eq!(request["metadata"]["ownerReferences"][1]["kind"], "Machine");
        assert_eq!(request["metadata"]["labels"][CONTROL_PLANE_REQUEST], "");
        assert_eq!(
            node_of(
                &json!({"metadata": {"name": "master-0-x7", "annotations": {NODE_NAME: "master-0"}}})
            ),
            "master-0"
        );
        assert_eq!(
            node_of(&json!({"metadata": {"name": "worker-1"}})),
            "worker-1"
        );
    }

    /// medik8s `internal/controller/nodehealthcheck_controller.go`, `matchesUnhealthyConditions`.
    #[test]
    fn a_condition_within_its_duration_is_soon_not_healthy() {
        let rules = vec![
            json!({"type": "Ready", "status": "False", "duration": "10s"}),
            json!({"type": "Ready", "status": "Unknown", "duration": "10s"}),
        ];
        let now = Duration::from_secs(1_800_000_000);
        let at = |status: &str, ago: u64| {
            let since = crate::apiserver::time::format_time(now - Duration::from_secs(ago));
            json!({"status": {"conditions": [{"type": "Ready", "status": status, "lastTransitionTime": since}]}})
        };
        assert_eq!(
            node_health(&at("True", 100), &rules, now),
            NodeHealth::Healthy
        );
        assert_eq!(node_health(&at("False", 5), &rules, now), NodeHealth::Soon);
        assert_eq!(
            node_health(&at("Unknown", 20), &rules, now),
            NodeHealth::Unhealthy
        );
    }

    /// medik8s `internal/controller/resources/lease.go`, `calcLeaseExpiration`.
    #[test]
    fn a_lease_is_overdue_after_three_durations_and_the_previous_steps() {
        let minute = Duration::from_secs(60);
        let acquired = Duration::from_secs(1000);
        let single = (minute * 10, Duration::ZERO);
        assert!(!lease_overdue(acquired, single, acquired + minute * 30));
        assert!(lease_overdue(
            acquired,
            single,
            acquired + minute * 30 + Duration::from_secs(1)
        ));
        let second = (minute, minute * 5);
        assert!(!lease_overdue(acquired, second, acquired + minute * 8));
        assert!(lease_overdue(acquired, second, acquired + minute * 9));
    }
}
