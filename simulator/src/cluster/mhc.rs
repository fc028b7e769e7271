//! The MachineHealthCheck controller of the OpenShift machine-api, as far as baremend meets
//! it: Machines selected by an MHC are unhealthy when their Node is gone, never came
//! (`nodeStartupTimeout`), or holds an unhealthy condition longer than its timeout; more
//! unhealthy Machines than `maxUnhealthy` short-circuit remediation; with the
//! `external-baremetal` strategy the Machine is annotated for external remediation (the
//! annotation is never removed by the MHC). With `spec.remediationTemplate` (the external
//! remediation of the OpenShift and Cluster API health checks) it instead creates a request
//! from the template's `spec.template.spec`, named after the Machine, in its namespace,
//! owned by it, and deletes the request once the Machine is healthy again. The simulated
//! cluster knows one template kind, baremend's `MachineRemediationTemplate` (a real health
//! check finds the request kind through the API's discovery: the template kind without
//! `Template`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::local::{
    CAPI_MACHINES, CAPI_MHCS, Gvr, Local, MACHINE_REMEDIATION_TEMPLATES, MACHINE_REMEDIATIONS,
    MACHINES, MHCS, NODES, namespace_and_name,
};
use super::timing::{Timing, parse_go_duration};
use crate::apiserver::time::parse_time;

/// The MHC annotation that selects external remediation.
pub const STRATEGY_ANNOTATION: &str = "machine.openshift.io/remediation-strategy";
/// The Machine annotation that asks for external remediation.
pub const EXTERNAL_REMEDIATION: &str = "host.metal3.io/external-remediation";

fn labels_match(selector: &Value, machine: &Value) -> bool {
    crate::apiserver::controllers_selector(selector, machine)
}

/// Why a Machine is unhealthy, if it is.
fn unhealthy(
    machine: &Value,
    mhc: &Value,
    now: Duration,
    nodes: &HashMap<String, Arc<Value>>,
) -> Option<String> {
    let node_name = machine
        .pointer("/status/nodeRef/name")
        .and_then(Value::as_str);
    let Some(node_name) = node_name else {
        let startup = mhc
            .pointer("/spec/nodeStartupTimeout")
            .and_then(Value::as_str)
            .and_then(parse_go_duration)
            .unwrap_or(Duration::from_secs(600));
        let created = machine
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(parse_time)?;
        return (now.saturating_sub(created) > startup)
            .then(|| "the node did not start within nodeStartupTimeout".to_owned());
    };
    let Some(node) = nodes.get(node_name) else {
        return Some(format!("node {node_name} not found"));
    };
    let conditions = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for rule in mhc
        .pointer("/spec/unhealthyConditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
    {
        let timeout = rule
            .get("timeout")
            .and_then(Value::as_str)
            .and_then(parse_go_duration)
            .unwrap_or(Duration::from_secs(300));
        for condition in conditions {
            if condition["type"] == rule["type"] && condition["status"] == rule["status"] {
                let since = condition["lastTransitionTime"]
                    .as_str()
                    .and_then(parse_time)
                    .unwrap_or(now);
                if now.saturating_sub(since) > timeout {
                    return Some(format!(
                        "condition {}={} for more than {timeout:?}",
                        rule["type"].as_str().unwrap_or_default(),
                        rule["status"].as_str().unwrap_or_default()
                    ));
                }
            }
        }
    }
    None
}

fn allowed_unhealthy(max: Option<&Value>, total: usize) -> usize {
    match max {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0) as usize,
        Some(Value::String(s)) => match s.strip_suffix('%').and_then(|p| p.parse::<usize>().ok()) {
            Some(percent) => percent * total / 100,
            None => s.parse().unwrap_or(total),
        },
        _ => total,
    }
}

/// Runs the controller until the task is aborted.
pub async fn run(api: Local, timing: Timing) {
    every(api, timing.mhc_period, pass).await;
}

/// Runs `pass` every `period` until the task is aborted (a health check's loop), off the async
/// workers, like the Node lifecycle controller's pass.
pub(super) async fn every(api: Local, period: Duration, pass: fn(&Local)) {
    loop {
        tokio::time::sleep(period).await;
        let api = api.clone();
        if tokio::task::spawn_blocking(move || pass(&api))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// One pass over every MachineHealthCheck.
pub fn pass(api: &Local) {
    let now = api.store().wall_time();
    // Read, not copied: thousands of Machines and Nodes every period.
    let nodes: HashMap<String, Arc<Value>> = api
        .list_shared(NODES, None)
        .into_iter()
        .filter_map(|node| {
            let name = node.pointer("/metadata/name").and_then(Value::as_str)?;
            Some((name.to_owned(), node.clone()))
        })
        .collect();
    // OpenShift's health checks over OpenShift's Machines, Cluster API's over Cluster API's
    // (a cluster serves one pair: listing a kind it does not serve finds nothing).
    let checks = [(MHCS, MACHINES), (CAPI_MHCS, CAPI_MACHINES)];
    for (mhc, machines_gvr) in checks
        .into_iter()
        .flat_map(|(mhcs, machines)| api.list(mhcs, None).into_iter().map(move |m| (m, machines)))
    {
        let namespace = mhc
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let name = mhc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let selector = mhc.pointer("/spec/selector").cloned().unwrap_or(json!({}));
        let machines: Vec<Arc<Value>> = api
            .list_shared(machines_gvr, Some(&namespace))
            .into_iter()
            .filter(|m| labels_match(&selector, m))
            .collect();
        let sick: Vec<(Arc<Value>, String)> = machines
            .iter()
            .filter_map(|m| unhealthy(m, &mhc, now, &nodes).map(|why| (m.clone(), why)))
            .collect();
        let allowed = allowed_unhealthy(mhc.pointer("/spec/maxUnhealthy"), machines.len());
        let remediation_allowed = sick.len() <= allowed;
        let status = json!({"status": {
            "expectedMachines": machines.len(),
            "currentHealthy": machines.len() - sick.len(),
            "remediationsAllowed": allowed.saturating_sub(sick.len()),
            "conditions": [{"type": "RemediationAllowed", "status": if remediation_allowed { "True" } else { "False" }, "reason": if remediation_allowed { "" } else { "TooManyUnhealthy" }}],
        }});
        if mhc.get("status") != status.get("status") {
            let mhcs = if machines_gvr == MACHINES {
                MHCS
            } else {
                CAPI_MHCS
            };
            let _ = api.merge(mhcs, &namespace, &name, &status, true);
        }
        if !remediation_allowed {
            if !sick.is_empty() {
                api.event(
                    &mhc,
                    "Warning",
                    "RemediationRestricted",
                    &format!(
                        "Remediation restricted: {} unhealthy machines exceed maxUnhealthy",
                        sick.len()
                    ),
                    "machinehealthcheck-controller",
                );
            }
            continue;
        }
        if let Some(template) = mhc
            .pointer("/spec/remediationTemplate")
            .filter(|t| t.is_object())
        {
            for machine in &machines {
                let why = sick
                    .iter()
                    .find(|(m, _)| m.pointer("/metadata/name") == machine.pointer("/metadata/name"))
                    .map(|(_, why)| why.as_str());
                match why {
                    Some(why) => {
                        let owner = format!("{}/{}", machines_gvr.group, machines_gvr.version);
                        request_remediation(api, &mhc, template, (machine, &owner), why);
                    }
                    None => withdraw_request(api, template, machine),
                }
            }
            continue;
        }
        let external = mhc
            .pointer(&format!(
                "/metadata/annotations/{}",
                STRATEGY_ANNOTATION.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            == Some("external-baremetal");
        for (machine, why) in sick {
            let machine_name = machine
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let annotated = machine
                .pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .is_some_and(|a| a.contains_key(EXTERNAL_REMEDIATION));
            let failed = machine.pointer("/status/phase").and_then(Value::as_str) == Some("Failed");
            if external && !annotated && !failed {
                let patch = json!({"metadata": {"annotations": {EXTERNAL_REMEDIATION: ""}}});
                if api
                    .merge(MACHINES, &namespace, machine_name, &patch, false)
                    .is_ok()
                {
                    api.event(
                        &machine,
                        "Normal",
                        "ExternalAnnotationAdded",
                        &format!("Requesting external remediation of {machine_name}: {why}"),
                        "machinehealthcheck-controller",
                    );
                }
            }
        }
    }
}

/// The request kind of a template the simulated cluster knows.
fn request_kind(template: &Value) -> Option<(Gvr, &'static str)> {
    let api_version = template.get("apiVersion").and_then(Value::as_str)?;
    let kind = template.get("kind").and_then(Value::as_str)?;
    (api_version == "baremend.io/v1alpha1" && kind == "MachineRemediationTemplate")
        .then_some((MACHINE_REMEDIATIONS, "MachineRemediation"))
}

/// Creates the Machine's request from the template, unless it has one.
/// `machine`: the Machine and its `apiVersion` (a shared list holds none).
fn request_remediation(
    api: &Local,
    mhc: &Value,
    template: &Value,
    (machine, api_version): (&Value, &str),
    why: &str,
) {
    let (namespace, name) = namespace_and_name(machine);
    let Some((requests, kind)) = request_kind(template) else {
        return;
    };
    if api.get(requests, namespace, name).is_ok() {
        return;
    }
    let template_name = template
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // The template lives in the health check's namespace.
    let Ok(found) = api.get(MACHINE_REMEDIATION_TEMPLATES, namespace, template_name) else {
        api.event(
            mhc,
            "Warning",
            "ExternalRemediationTemplateNotFound",
            &format!("remediation template {template_name} not found"),
            "machinehealthcheck-controller",
        );
        return;
    };
    let request = json!({
        "apiVersion": "baremend.io/v1alpha1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [{
                "apiVersion": api_version,
                "kind": "Machine",
                "name": name,
                "uid": machine.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
            }],
        },
        "spec": found.pointer("/spec/template/spec").cloned().unwrap_or(json!({})),
    });
    if api.create(requests, namespace, request).is_ok() {
        api.event(
            machine,
            "Normal",
            "ExternalRemediationRequestCreated",
            &format!("Requesting external remediation of {name}: {why}"),
            "machinehealthcheck-controller",
        );
    }
}

/// Deletes the request of a Machine that is healthy again, if it has one.
fn withdraw_request(api: &Local, template: &Value, machine: &Value) {
    let (namespace, name) = namespace_and_name(machine);
    if let Some((requests, _)) = request_kind(template)
        && api.get(requests, namespace, name).is_ok()
    {
        let _ = api.delete(requests, namespace, name, None);
    }
}
