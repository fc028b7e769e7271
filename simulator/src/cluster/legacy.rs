//! The legacy bare-metal remediation of OpenShift's machine API: the machine actuator of
//! openshift/cluster-api-provider-baremetal (`pkg/cloud/baremetal/actuators/machine/actuator.go`,
//! `remediateIfNeeded`, as the project's notes on remediation anchors record its flow from a
//! 2026 snapshot). On IPI bare metal it runs in the `machine-api-controllers` pod on
//! every Machine update and has no off switch: any Machine carrying
//! `host.metal3.io/external-remediation` is power-cycled through its BareMetalHost.
//!
//! Expected flow, derived each pass from annotations only (level-triggered, as upstream):
//! 1. no power-off mark on the Machine and no request on the host: write the host's
//!    `reboot.metal3.io/capbm-requested-power-off` (`{"mode":"hard"}`);
//! 2. the request there and the host still on: wait;
//! 3. the host off and its Node there: back up the Node's labels and annotations on the Machine
//!    (JSON), delete the Node;
//! 4. the host off and the Node gone: mark the Machine
//!    `remediation.metal3.io/powered-off-for-remediation`;
//! 5. marked and the request still there: write `remediation.metal3.io/power-on-will-timeout-at`
//!    on the Machine, remove the request (the host powers on);
//! 6. the Node not back: wait;
//! 7. the Node back: add the backed-up labels and annotations it lacks, drop the backups, and
//!    remove the mark, the deadline and the trigger.
//!
//! Guarantees: it never steps back for another remediator (upstream does not look), so a
//! Machine it and baremend both act on is power-cycled by both; each action is recorded in
//! [`Actions`] for tests to read.
//!
//! Caveats: the host is found by the Machine's `metal3.io/BareMetalHost` annotation only (not
//! `spec.providerID`); the reprovision fallback once the deadline passes (deleting the Machine)
//! is not simulated, nor the legacy Node finalizer `metal3.io/capbm` of old versions.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::MACHINE_NAMESPACE;
use super::local::{BMHS, Local, MACHINES, MHCS, NODES, annotation, namespace_and_name};
use super::mhc::{EXTERNAL_REMEDIATION, every};
use super::timing::{Timing, parse_go_duration};
use crate::apiserver::errors::ApiResult;
use crate::apiserver::time::format_time;

/// The actuator's power-off request on a BareMetalHost (`capbm` is its reboot key).
pub const POWER_OFF_REQUEST: &str = "reboot.metal3.io/capbm-requested-power-off";
/// The Machine mark: its host was powered off for remediation.
pub const POWERED_OFF: &str = "remediation.metal3.io/powered-off-for-remediation";
/// The Machine's deadline for the Node to come back (RFC 3339).
pub const POWER_ON_TIMEOUT: &str = "remediation.metal3.io/power-on-will-timeout-at";
/// The Node's labels, backed up on the Machine (a JSON object of strings).
pub const LABELS_BACKUP: &str = "remediation.metal3.io/node-labels-backup";
/// The Node's annotations, backed up on the Machine (a JSON object of strings).
pub const ANNOTATIONS_BACKUP: &str = "remediation.metal3.io/node-annotations-backup";
/// The Machine annotation naming its BareMetalHost (`<namespace>/<name>`).
const HOST_ANNOTATION: &str = "metal3.io/BareMetalHost";
/// Upstream's deadline when no MachineHealthCheck matching the Machine sets
/// `nodeStartupTimeout`.
const DEFAULT_POWER_ON_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// One thing the actuator did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Wrote its power-off request on the Machine's host.
    RequestedPowerOff,
    /// Backed up the Node and deleted it.
    DeletedNode,
    /// Marked the Machine powered off.
    MarkedPoweredOff,
    /// Removed its request: the host powers on.
    RequestedPowerOn,
    /// Restored the Node's backup and removed its Machine annotations.
    Finished,
}

/// What the actuator did, Machine by Machine, in order (shared with the cluster's owner).
#[derive(Debug, Clone, Default)]
pub struct Actions(Arc<Mutex<Vec<(String, Action)>>>);

impl Actions {
    /// Every action so far, as (Machine name, action).
    pub fn all(&self) -> Vec<(String, Action)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn record(&self, machine: &str, action: Action) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.push((machine.to_owned(), action));
    }
}

/// Runs the actuator's remediation on every Machine of the machine API's namespace every
/// `timing.mhc_period` until the task is aborted.
pub async fn run(api: Local, timing: Timing, actions: Actions) {
    every(api, timing.mhc_period, move |api: &Local| {
        for machine in api.list(MACHINES, Some(MACHINE_NAMESPACE)) {
            remediate_if_needed(api, &machine, &actions);
        }
    })
    .await;
}

/// One pass over one Machine; an error (a conflict, a refusal) waits for the next pass.
fn remediate_if_needed(api: &Local, machine: &Value, actions: &Actions) {
    if annotation(machine, EXTERNAL_REMEDIATION).is_none() {
        return;
    }
    let (namespace, name) = namespace_and_name(machine);
    let Some((host_namespace, host_name)) =
        annotation(machine, HOST_ANNOTATION).and_then(|h| h.split_once('/'))
    else {
        return;
    };
    let Ok(host) = api.get(BMHS, host_namespace, host_name) else {
        return;
    };
    let node_name = machine
        .pointer("/status/nodeRef/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let node = api.get(NODES, "", node_name).ok();
    let requested = annotation(&host, POWER_OFF_REQUEST).is_some();
    let marked = annotation(machine, POWERED_OFF).is_some();
    let annotate_host = |value: Value| {
        let patch = json!({"metadata": {"annotations": {POWER_OFF_REQUEST: value}}});
        api.merge(BMHS, host_namespace, host_name, &patch, false)
    };
    let annotate_machine = |values: Value| {
        let patch = json!({"metadata": {"annotations": values}});
        api.merge(MACHINES, namespace, name, &patch, false)
    };
    let done = if !requested && !marked {
        annotate_host(json!("{\"mode\":\"hard\"}")).map(|_| Some(Action::RequestedPowerOff))
    } else if requested {
        let powered_on = host.pointer("/status/poweredOn").and_then(Value::as_bool);
        match (powered_on, &node, marked) {
            (Some(false), Some(node), false) => {
                let backup = backup(node);
                annotate_machine(backup)
                    .and_then(|_| api.delete(NODES, "", node_name, None))
                    .map(|_| Some(Action::DeletedNode))
            }
            (Some(false), None, false) => {
                annotate_machine(json!({POWERED_OFF: ""})).map(|_| Some(Action::MarkedPoweredOff))
            }
            (_, _, true) => {
                let deadline = api.wall_time() + power_on_timeout(api, machine);
                annotate_machine(json!({POWER_ON_TIMEOUT: format_time(deadline)}))
                    .and_then(|_| annotate_host(Value::Null))
                    .map(|_| Some(Action::RequestedPowerOn))
            }
            // The host still on (or its power unknown): the host's watch wakes it.
            _ => Ok(None),
        }
    } else if let Some(node) = node {
        restore(api, &node, machine)
            .and_then(|_| {
                annotate_machine(json!({
                    POWERED_OFF: null, POWER_ON_TIMEOUT: null, EXTERNAL_REMEDIATION: null,
                    LABELS_BACKUP: null, ANNOTATIONS_BACKUP: null,
                }))
            })
            .map(|_| Some(Action::Finished))
    } else {
        Ok(None)
    };
    if let Ok(Some(action)) = done {
        actions.record(name, action);
    }
}

/// The Machine annotations that back up `node`'s labels and annotations.
fn backup(node: &Value) -> Value {
    let strings = |field: &str| {
        let map: BTreeMap<String, String> = node["metadata"][field]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect();
        serde_json::to_string(&map).unwrap_or_default()
    };
    json!({LABELS_BACKUP: strings("labels"), ANNOTATIONS_BACKUP: strings("annotations")})
}

/// Adds to the Node the backed-up labels and annotations it lacks (upstream `mergeMaps`: the
/// new Node's own values win).
fn restore(api: &Local, node: &Value, machine: &Value) -> ApiResult<Value> {
    let missing = |field: &str, key: &str| -> Map<String, Value> {
        let saved: BTreeMap<String, String> = annotation(machine, key)
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default();
        saved
            .into_iter()
            .filter(|(k, _)| node["metadata"][field].get(k).is_none())
            .map(|(k, v)| (k, Value::String(v)))
            .collect()
    };
    let patch = json!({"metadata": {
        "labels": missing("labels", LABELS_BACKUP),
        "annotations": missing("annotations", ANNOTATIONS_BACKUP),
    }});
    let name = node["metadata"]["name"].as_str().unwrap_or_default();
    api.merge(NODES, "", name, &patch, false)
}

/// The `nodeStartupTimeout` of the first MachineHealthCheck selecting `machine`, else 20 min.
fn power_on_timeout(api: &Local, machine: &Value) -> Duration {
    api.list(MHCS, Some(MACHINE_NAMESPACE))
        .iter()
        .filter(|mhc| crate::apiserver::controllers_selector(&mhc["spec"]["selector"], machine))
        .find_map(|mhc| {
            mhc["spec"]["nodeStartupTimeout"]
                .as_str()
                .map(str::to_owned)
        })
        .and_then(|text| parse_go_duration(&text))
        .unwrap_or(DEFAULT_POWER_ON_TIMEOUT)
}
