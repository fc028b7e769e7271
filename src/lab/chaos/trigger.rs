//! The trigger of a seed's health check ([`HealthCheck`]), as the harness sets it up and acts
//! on it: the cluster's health check, its template, and the faults that act on "the trigger"
//! — removed mid-flow (the annotation removed, or the request deleted), a false alarm or a
//! reboot taken for a failure (the annotation set, or a request made for a healthy Machine).
//!
//! Expected flow: [`configure`] the cluster's spec → [`prepare`] the template → the health
//! check sets triggers by itself, the faults [`set`] and [`remove`] them → requests the
//! harness made are withdrawn once their Node is Ready ([`withdraw_when_ready`]), as their
//! health check would → settling asks what is [`left`].
//! Guarantees: a request is made the way the simulated health check makes it (named after
//! the Machine or Node, in the template's namespace, a Machine's owned by it, a Node's
//! annotated with its Node and template and labelled part of the NodeHealthCheck), so the
//! controller cannot tell the harness's from the health check's. A Node's is not owned by the
//! NodeHealthCheck, which therefore leaves it to the harness, as medik8s leaves requests it
//! does not own. A seed whose NodeHealthCheck would be disabled by a custom
//! MachineHealthCheck is refused ([`prepare`]): nothing would ask for remediation.
//! Caveats: the Machine API's MachineHealthCheck asks by request here (not the Cluster API
//! flavour): the seeds that run the MCO need OpenShift's Machines, and the drift
//! coordinator's escalation sets the annotation on them.

use std::time::{Duration, Instant};

use baremend_sim::cluster::local::{
    Gvr, Local, MACHINE_REMEDIATION_TEMPLATES, MACHINE_REMEDIATIONS, MACHINES, MHCS, NODES,
};
use baremend_sim::cluster::nhc::{NHCS, NODE_REMEDIATION_TEMPLATES, NODE_REMEDIATIONS, TIMED_OUT};
use baremend_sim::cluster::nhc_rules::{
    MhcConflict, NODE_NAME, PART_OF, PART_OF_VALUE, TEMPLATE_NAME, mhc_conflict,
};
use baremend_sim::cluster::{ClusterSpec, EXTERNAL_REMEDIATION, MACHINE_NAMESPACE, NHC_NAMESPACE};
use serde_json::{Value, json};

use super::check::node_ready;
use super::plan::HealthCheck;
use crate::Result;
use crate::lab::setup::LabCluster;

/// How long a health check takes to see a Node Ready again before it withdraws a request
/// the harness made (it looks less often than the controller).
pub(super) const WITHDRAW_AFTER: Duration = Duration::from_millis(300);

/// How long a withdrawal waits for the Node at most.
const WITHDRAW_LIMIT: Duration = Duration::from_secs(60);

/// The requests of a health check and their namespace; None for the annotation.
fn requests(check: HealthCheck) -> Option<(Gvr, &'static str)> {
    match check {
        HealthCheck::Annotation => None,
        HealthCheck::MachineRequest => Some((MACHINE_REMEDIATIONS, MACHINE_NAMESPACE)),
        HealthCheck::NodeRequest { .. } => Some((NODE_REMEDIATIONS, NHC_NAMESPACE)),
    }
}

/// The cluster's health check for `check`: the MachineHealthCheck with the annotation
/// strategy, the same naming baremend's template, or a NodeHealthCheck with its timeout.
pub(super) fn configure(check: HealthCheck, spec: &mut ClusterSpec) {
    match check {
        HealthCheck::Annotation => {}
        HealthCheck::MachineRequest => spec.remediation_template = Some("baremend".into()),
        HealthCheck::NodeRequest { escalation } => {
            spec.node_health_check = true;
            spec.escalation_timeout = escalation;
        }
    }
}

/// The template the health check names.
pub(super) fn prepare(lab: &LabCluster, check: HealthCheck) -> Result<()> {
    match check {
        HealthCheck::Annotation => Ok(()),
        HealthCheck::MachineRequest => {
            lab.empty_template(MACHINE_REMEDIATION_TEMPLATES, MACHINE_NAMESPACE)
        }
        HealthCheck::NodeRequest { .. } => {
            // medik8s disables a NodeHealthCheck while a custom MachineHealthCheck exists:
            // such a seed would test nothing, so it is a harness error, not a pass.
            let mhcs = lab.api.list(MHCS, None);
            if mhc_conflict(&mhcs) == MhcConflict::Custom {
                return Err(crate::Error::Invalid {
                    object: "chaos seed".into(),
                    reason: format!(
                        "a NodeHealthCheck seed runs beside {} MachineHealthCheck(s); the NodeHealthCheck would be disabled",
                        mhcs.len()
                    ),
                });
            }
            lab.empty_template(NODE_REMEDIATION_TEMPLATES, NHC_NAMESPACE)
        }
    }
}

/// Sets the trigger on `machine` as its health check would: the annotation, or a request
/// named after it (its Node has its name). The request's UID when one was made.
pub(super) fn set(api: &Local, check: HealthCheck, machine: &str) -> Option<String> {
    let Some((kind, namespace)) = requests(check) else {
        let patch = json!({"metadata": {"annotations": {EXTERNAL_REMEDIATION: ""}}});
        let _ = api.merge(MACHINES, MACHINE_NAMESPACE, machine, &patch, false);
        return None;
    };
    let mut request = json!({
        "apiVersion": "baremend.io/v1alpha1",
        "kind": if kind == MACHINE_REMEDIATIONS { "MachineRemediation" } else { "NodeRemediation" },
        "metadata": {"name": machine, "namespace": namespace},
        "spec": {},
    });
    if kind == NODE_REMEDIATIONS {
        request["metadata"]["annotations"] = json!({NODE_NAME: machine, TEMPLATE_NAME: "baremend"});
        request["metadata"]["labels"] = json!({PART_OF: PART_OF_VALUE});
    }
    if kind == MACHINE_REMEDIATIONS {
        let uid = api
            .get(MACHINES, MACHINE_NAMESPACE, machine)
            .ok()
            .and_then(|m| m.pointer("/metadata/uid").cloned())?;
        request["metadata"]["ownerReferences"] = json!([{"apiVersion": "machine.openshift.io/v1beta1",
            "kind": "Machine", "name": machine, "uid": uid}]);
    }
    let created = api.create(kind, namespace, request).ok()?;
    created
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Removes the trigger from `machine`: the annotation, or its request is deleted.
pub(super) fn remove(api: &Local, check: HealthCheck, machine: &str) {
    match requests(check) {
        None => {
            let patch = json!({"metadata": {"annotations": {EXTERNAL_REMEDIATION: null}}});
            let _ = api.merge(MACHINES, MACHINE_NAMESPACE, machine, &patch, false);
        }
        Some((kind, namespace)) => {
            let _ = api.delete(kind, namespace, machine, None);
        }
    }
}

/// Withdraws the request `uid` the harness made for `machine`, as its health check would:
/// the first time its Node is Ready from `after` on (the annotation needs nothing: the
/// remediation removes it).
pub(super) fn withdraw_when_ready(
    api: Local,
    check: HealthCheck,
    machine: String,
    (uid, after): (String, Duration),
) {
    let Some((kind, namespace)) = requests(check) else {
        return;
    };
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let deadline = Instant::now() + WITHDRAW_LIMIT;
        while Instant::now() < deadline {
            let ready = api.get(NODES, "", &machine).is_ok_and(|n| node_ready(&n));
            if ready {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let same = api.get(kind, namespace, &machine).is_ok_and(|r| {
            r.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid.as_str())
        });
        if same {
            let _ = api.delete(kind, namespace, &machine, None);
        }
    });
}

/// The request of `machine`, if it has one.
fn request(api: &Local, check: HealthCheck, machine: &str) -> Option<Value> {
    let (kind, namespace) = requests(check)?;
    api.get(kind, namespace, machine).ok()
}

/// Whether the NodeHealthCheck timed out the request of `machine`'s Node (the request may
/// be gone since: its status keeps the timeout).
pub(super) fn timed_out(api: &Local, check: HealthCheck, machine: &str) -> bool {
    if !matches!(check, HealthCheck::NodeRequest { .. }) {
        return false;
    }
    request_timed_out(api, check, machine)
        || api.list(NHCS, None).iter().any(|nhc| {
            nhc.pointer("/status/unhealthyNodes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|entry| entry["name"] == machine)
                .filter_map(|entry| entry["remediations"].as_array())
                .flatten()
                .any(|started| started.get("timedOut").is_some())
        })
}

/// Whether the request of `machine`'s Node is there, annotated timed out.
fn request_timed_out(api: &Local, check: HealthCheck, machine: &str) -> bool {
    request(api, check, machine).is_some_and(|r| {
        r.pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .is_some_and(|a| a.contains_key(TIMED_OUT))
    })
}

/// The trigger `machine` still carries, in words: the annotation, or a request not timed out.
pub(super) fn left(api: &Local, check: HealthCheck, machine: &str) -> Option<String> {
    let annotated = api
        .get(MACHINES, MACHINE_NAMESPACE, machine)
        .is_ok_and(|m| {
            m.pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .is_some_and(|a| a.contains_key(EXTERNAL_REMEDIATION))
        });
    if annotated {
        return Some(format!("Machine {machine} is still annotated"));
    }
    let request = request(api, check, machine)?;
    (!request_timed_out(api, check, machine)).then(|| {
        format!(
            "{} {machine} is still there (status {:?})",
            check.label(),
            request.get("status")
        )
    })
}
