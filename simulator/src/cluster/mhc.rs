//! The MachineHealthCheck controllers of the OpenShift machine-api and of Cluster API, as far
//! as baremend meets them (read from openshift/machine-api-operator main, August 2026,
//! `pkg/controller/machinehealthcheck/machinehealthcheck_controller.go`, and
//! kubernetes-sigs/cluster-api main, August 2026, `core/reconcilers/machinehealthcheck/`):
//! Machines selected by an MHC need remediation when their Node is gone, never came
//! (`nodeStartupTimeout`), or holds an unhealthy condition longer than its timeout, and
//! (OpenShift) when their phase is `Failed`. A condition within its timeout, or a Node yet to
//! start, is neither healthy nor remediated. Only Machines that pass — not being deleted, with
//! their Node, and (OpenShift) not annotated for external remediation — count as healthy; more
//! unhealthy Machines than `maxUnhealthy` short-circuit remediation (and withdrawal).
//! With the `external-baremetal` strategy a Machine not `Failed` is annotated for external
//! remediation (never removed by the MHC); a `Failed` one, or any without the strategy, is
//! deleted when a controller owns it. With `spec.remediationTemplate` (both health checks) it
//! instead creates a request from the template's `spec.template.spec`, named after the
//! Machine, in its namespace, owned by it, and deletes the request only once the Machine is
//! healthy again. The simulated cluster knows one template kind, baremend's
//! `MachineRemediationTemplate` (a real health check finds the request kind through the API's
//! discovery: the template kind without `Template`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::MACHINE_NAMESPACE;
use super::local::{
    CAPI_MACHINES, CAPI_MHCS, Gvr, Local, MACHINE_REMEDIATION_TEMPLATES, MACHINE_REMEDIATIONS,
    MACHINES, MHCS, NODES, namespace_and_name,
};
use super::timing::{Timing, parse_go_duration};
use super::workload::ClusterCache;
use crate::apiserver::time::parse_time;

/// The component its Events name.
const COMPONENT: &str = "machinehealthcheck-controller";

/// The MHC annotation that selects external remediation.
pub const STRATEGY_ANNOTATION: &str = "machine.openshift.io/remediation-strategy";
/// Cluster API's annotation that pauses an object's reconciliation (`cluster.x-k8s.io/paused`).
pub const CAPI_PAUSED: &str = "cluster.x-k8s.io/paused";
/// The Machine annotation that asks for external remediation.
pub const EXTERNAL_REMEDIATION: &str = "host.metal3.io/external-remediation";

fn labels_match(selector: &Value, machine: &Value) -> bool {
    crate::apiserver::controllers_selector(selector, machine)
}

/// A target as the health check sees it (OpenShift `target.needsRemediation` and
/// `healthCheckTargets`; Cluster API `healthCheckTargets`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// Needs remediation, and why.
    Remediate(String),
    /// An unhealthy condition holds within its timeout, or the Node has yet to start: not
    /// remediated, not healthy either.
    Pending,
    /// Passed the health check.
    Passed,
}

/// How a Machine fares under the health check. `openshift`: OpenShift's, which also takes a
/// Machine in phase `Failed` for one that needs remediation.
fn verdict(
    machine: &Value,
    mhc: &Value,
    (now, openshift): (Duration, bool),
    nodes: &HashMap<String, Arc<Value>>,
) -> Verdict {
    if openshift && machine.pointer("/status/phase").and_then(Value::as_str) == Some("Failed") {
        return Verdict::Remediate("the machine phase is Failed".to_owned());
    }
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
            .and_then(parse_time);
        return match created {
            Some(created) if now.saturating_sub(created) > startup => {
                Verdict::Remediate("the node did not start within nodeStartupTimeout".to_owned())
            }
            _ => Verdict::Pending,
        };
    };
    let Some(node) = nodes.get(node_name) else {
        return Verdict::Remediate(format!("node {node_name} not found"));
    };
    condition_verdict(node, mhc, now)
}

/// The verdict of a present Node's conditions under the health check's unhealthy conditions.
fn condition_verdict(node: &Value, mhc: &Value, now: Duration) -> Verdict {
    let conditions = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut verdict = Verdict::Passed;
    for rule in mhc
        .pointer("/spec/unhealthyConditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let timeout = rule
            .get("timeout")
            .and_then(Value::as_str)
            .and_then(parse_go_duration)
            .unwrap_or(Duration::from_secs(300));
        let Some(condition) = conditions.iter().find(|c| c["type"] == rule["type"]) else {
            continue;
        };
        if condition["status"] != rule["status"] {
            continue;
        }
        let since = condition["lastTransitionTime"]
            .as_str()
            .and_then(parse_time)
            .unwrap_or(now);
        if now.saturating_sub(since) > timeout {
            return Verdict::Remediate(format!(
                "condition {}={} for more than {timeout:?}",
                rule["type"].as_str().unwrap_or_default(),
                rule["status"].as_str().unwrap_or_default()
            ));
        }
        verdict = Verdict::Pending;
    }
    verdict
}

/// Whether a Machine that passed counts as healthy: not being deleted, its Node there, and
/// (OpenShift) not annotated for external remediation — an annotated Machine counts as
/// unhealthy for `maxUnhealthy` until its remediator removes the annotation.
fn counts_healthy(machine: &Value, openshift: bool) -> bool {
    let deleting = machine.pointer("/metadata/deletionTimestamp").is_some();
    let has_node = machine.pointer("/status/nodeRef/name").is_some();
    !deleting && has_node && !(openshift && annotated(machine))
}

/// Whether a Machine carries the external-remediation annotation.
fn annotated(machine: &Value) -> bool {
    machine
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(EXTERNAL_REMEDIATION))
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

/// Where a health check reads Nodes.
#[derive(Debug, Clone)]
pub enum NodeReader {
    /// One client for every health check: OpenShift's own account, or the admin of a
    /// self-hosted Cluster API cluster (its own API server).
    Direct(Local),
    /// Cluster API's cluster cache: each health check reads the Nodes of its
    /// `spec.clusterName` through that Cluster's kubeconfig Secret.
    Workload(ClusterCache),
}

/// Runs the controller until the task is aborted: `api` is the health check's account,
/// `nodes` how it reads Nodes (the same account for OpenShift's; for Cluster API's, the
/// workload cluster's kubeconfig).
pub async fn run(api: Local, nodes: NodeReader, flavour: Flavour, timing: Timing) {
    every(api, timing.mhc_period, move |api: &Local| {
        pass(api, &nodes, flavour);
    })
    .await;
}

/// Which MachineHealthCheck controller runs: a cluster runs OpenShift's or Cluster API's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// OpenShift's machine-api-operator.
    MachineApi,
    /// Cluster API's manager.
    ClusterApi,
}

/// Runs `pass` every `period` until the task is aborted (a health check's loop), off the async
/// workers, like the Node lifecycle controller's pass.
pub(super) async fn every<F>(api: Local, period: Duration, pass: F)
where
    F: Fn(&Local) + Clone + Send + 'static,
{
    loop {
        tokio::time::sleep(period).await;
        let api = api.clone();
        let pass = pass.clone();
        if tokio::task::spawn_blocking(move || pass(&api))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Nodes by name.
fn by_name(nodes: Vec<Arc<Value>>) -> HashMap<String, Arc<Value>> {
    nodes
        .into_iter()
        .filter_map(|node| {
            let name = node.pointer("/metadata/name").and_then(Value::as_str)?;
            Some((name.to_owned(), node.clone()))
        })
        .collect()
}

/// One pass over every MachineHealthCheck of `flavour`, reading Nodes through `node_reader`.
/// A health check whose workload cluster cannot be read skips its pass — nothing remediated,
/// nothing withdrawn, its status kept — as Cluster API's requeues when its cluster cache has
/// no connection (a Node it cannot read is not a Node gone).
pub fn pass(api: &Local, node_reader: &NodeReader, flavour: Flavour) {
    let now = api.wall_time();
    // Read, not copied: thousands of Machines and Nodes every period.
    let direct = match node_reader {
        NodeReader::Direct(reader) => by_name(reader.list_shared(NODES, None)),
        NodeReader::Workload(_) => HashMap::new(),
    };
    // OpenShift's controllers watch only their namespace (machine-api-operator runs them with
    // `--namespace openshift-machine-api`); Cluster API's manager watches every namespace.
    let (mhcs, machines_gvr, scope) = match flavour {
        Flavour::MachineApi => (MHCS, MACHINES, Some(MACHINE_NAMESPACE)),
        Flavour::ClusterApi => (CAPI_MHCS, CAPI_MACHINES, None),
    };
    for mhc in api.list(mhcs, scope) {
        // Cluster API's health check returns early for a paused object (`Reconcile`:
        // `annotations.IsPaused`): no check, no request created or withdrawn, status kept.
        if flavour == Flavour::ClusterApi && is_paused(&mhc) {
            continue;
        }
        let workload;
        let nodes = match node_reader {
            NodeReader::Direct(_) => &direct,
            NodeReader::Workload(cache) => {
                let (namespace, name) = namespace_and_name(&mhc);
                let cluster = mhc
                    .pointer("/spec/clusterName")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match cache.nodes(api, namespace, cluster) {
                    Ok(nodes) => {
                        workload = by_name(nodes);
                        &workload
                    }
                    Err(why) => {
                        tracing::debug!(mhc = %name, %cluster, %why, "workload cluster unreachable: health check requeued");
                        continue;
                    }
                }
            }
        };
        check(api, &mhc, machines_gvr, (now, nodes));
    }
}

/// Whether a Cluster API object carries the paused annotation (any value, as upstream's
/// `annotations.HasPaused`).
fn is_paused(object: &Value) -> bool {
    object
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(CAPI_PAUSED))
}

/// One MachineHealthCheck's pass over its Machines.
fn check(
    api: &Local,
    mhc: &Value,
    machines_gvr: Gvr,
    (now, nodes): (Duration, &HashMap<String, Arc<Value>>),
) {
    let (namespace, name) = namespace_and_name(mhc);
    let openshift = machines_gvr == MACHINES;
    let selector = mhc.pointer("/spec/selector").cloned().unwrap_or(json!({}));
    // Cluster API's health check looks only at its cluster's Machines (it adds the cluster
    // name label to the selector).
    let cluster = (!openshift)
        .then(|| mhc.pointer("/spec/clusterName").and_then(Value::as_str))
        .flatten();
    let machines: Vec<Arc<Value>> = api
        .list_shared(machines_gvr, Some(namespace))
        .into_iter()
        .filter(|m| labels_match(&selector, m))
        .filter(|m| {
            cluster.is_none_or(|c| {
                m.pointer("/metadata/labels/cluster.x-k8s.io~1cluster-name")
                    .and_then(Value::as_str)
                    == Some(c)
            })
        })
        .collect();
    let verdicts: Vec<(Arc<Value>, Verdict)> = machines
        .iter()
        .map(|m| (m.clone(), verdict(m, mhc, (now, openshift), nodes)))
        .collect();
    let healthy = verdicts
        .iter()
        .filter(|(m, v)| *v == Verdict::Passed && counts_healthy(m, openshift))
        .count();
    let unhealthy = machines.len() - healthy;
    let allowed = allowed_unhealthy(mhc.pointer("/spec/maxUnhealthy"), machines.len());
    let remediation_allowed = unhealthy <= allowed;
    let status = json!({"status": {
        "expectedMachines": machines.len(),
        "currentHealthy": healthy,
        "remediationsAllowed": allowed.saturating_sub(unhealthy),
        "conditions": [{"type": "RemediationAllowed", "status": if remediation_allowed { "True" } else { "False" }, "reason": if remediation_allowed { "" } else { "TooManyUnhealthy" }}],
    }});
    if mhc.get("status") != status.get("status") {
        let mhcs = if openshift { MHCS } else { CAPI_MHCS };
        let _ = api.merge(mhcs, namespace, name, &status, true);
    }
    if !remediation_allowed {
        // Short-circuited: nothing is remediated, and no request is withdrawn either.
        let message =
            format!("Remediation restricted: {unhealthy} unhealthy machines exceed maxUnhealthy");
        api.event(mhc, "Warning", "RemediationRestricted", &message, COMPONENT);
        return;
    }
    let owner = format!("{}/{}", machines_gvr.group, machines_gvr.version);
    for (machine, verdict) in &verdicts {
        remediate_or_withdraw(api, mhc, (machine, &owner, openshift), verdict);
    }
}

/// Acts on one Machine's verdict: a Machine that needs remediation gets a request (a template)
/// or the Machine API's own remediation; a healthy one's request is withdrawn — only a
/// healthy one's: a condition within its timeout keeps it.
fn remediate_or_withdraw(
    api: &Local,
    mhc: &Value,
    (machine, owner, openshift): (&Value, &str, bool),
    verdict: &Verdict,
) {
    let template = mhc
        .pointer("/spec/remediationTemplate")
        .filter(|t| t.is_object());
    match (verdict, template) {
        (Verdict::Remediate(why), Some(template)) => {
            request_remediation(api, mhc, template, (machine, owner), why)
        }
        (Verdict::Remediate(why), None) if openshift => {
            internal_remediation(api, mhc, machine, why)
        }
        (Verdict::Passed, Some(template)) if counts_healthy(machine, openshift) => {
            withdraw_request(api, template, machine)
        }
        _ => {}
    }
}

/// OpenShift's remediation without a template (`internalRemediation`): a Machine not `Failed`
/// under the `external-baremetal` strategy is annotated for external remediation; any other
/// (a `Failed` one, or without the strategy) is deleted when a controller (its MachineSet) owns
/// it, else skipped with an Event.
fn internal_remediation(api: &Local, mhc: &Value, machine: &Value, why: &str) {
    let (namespace, name) = namespace_and_name(machine);
    let failed = machine.pointer("/status/phase").and_then(Value::as_str) == Some("Failed");
    let external = mhc
        .pointer(&format!(
            "/metadata/annotations/{}",
            STRATEGY_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        == Some("external-baremetal");
    if external && !failed {
        if annotated(machine) {
            return;
        }
        let patch = json!({"metadata": {"annotations": {EXTERNAL_REMEDIATION: ""}}});
        if api.merge(MACHINES, namespace, name, &patch, false).is_ok() {
            let message = format!("Requesting external remediation of {name}: {why}");
            api.event(
                machine,
                "Normal",
                "ExternalAnnotationAdded",
                &message,
                COMPONENT,
            );
        }
        return;
    }
    let controlled = machine
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|o| o.iter().any(|o| o["controller"] == true));
    if !controlled {
        let message = format!("Machine {name} has no controller owner, skipping remediation");
        api.event(
            machine,
            "Normal",
            "SkippedNoController",
            &message,
            COMPONENT,
        );
        return;
    }
    if machine.pointer("/metadata/deletionTimestamp").is_some() {
        return;
    }
    if api.delete(MACHINES, namespace, name, None).is_ok() {
        let message =
            format!("Machine {name} has been remediated by requesting to delete Machine object");
        api.event(machine, "Normal", "MachineDeleted", &message, COMPONENT);
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
            COMPONENT,
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
            COMPONENT,
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
