//! The drift coordinator on a simulated cluster with its Machine Config Operator: the lab for
//! the coordinator alone or for the whole controller, drifting files and reading Events.

use std::time::Duration;

use baremend::api::DriftRemediation;
use baremend::drift::controller::HelperPods;
use baremend_sim::cluster::ClusterSpec;
use baremend_sim::cluster::local::{EVENTS, Local};
use baremend_sim::cluster::mco::FORCE_FILE;
use baremend_sim::cluster::mco::disk::SimFile;
use baremend_sim::cluster::timing::Timing;
use serde_json::{Value, json};

use super::eventually;
use super::lab::Lab;

/// The coordinator alone on a cluster of one master and `workers` workers whose pool allows
/// `max_unavailable`, with fast drift timeouts and `policy` merged over them.
pub async fn start(workers: usize, max_unavailable: Value, policy: Value) -> Lab {
    start_with(workers, max_unavailable, policy, |_| {}).await
}

/// As `start`, with `prepare` run on the cluster before the coordinator starts.
pub async fn start_with(
    workers: usize,
    max_unavailable: Value,
    policy: Value,
    prepare: impl FnOnce(&Local),
) -> Lab {
    let spec = ClusterSpec {
        masters: 1,
        workers,
        timing: Timing::fast(),
        mco: true,
        mco_max_unavailable: max_unavailable,
        ..ClusterSpec::default()
    };
    let mut drift = json!({"debounceSeconds": 1, "timeouts": {"pickupSeconds": 10, "drainSeconds": 4, "rebootSeconds": 10, "restoreSeconds": 10, "applySeconds": 30}});
    if let (Some(base), Some(extra)) = (drift.as_object_mut(), policy.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    let mut lab = Lab::builder(spec).drift_policy(drift).start().await;
    prepare(&lab.api);
    lab.start_coordinator();
    lab
}

/// The whole controller (machines and drift) with the drift policy `drift` (spec), on a
/// cluster whose MachineHealthCheck watches the workers: a host takes 1.5 s to boot, longer
/// than the health check's timeout, so the MCO's reboot looks like a failure to it.
pub async fn whole(drift: Value) -> Lab {
    let spec = ClusterSpec {
        masters: 1,
        workers: 2,
        timing: Timing {
            boot_delay: Duration::from_millis(1500),
            ..Timing::fast()
        },
        mco: true,
        max_unhealthy: "100%".into(),
        ..ClusterSpec::default()
    };
    let mut lab = Lab::builder(spec)
        .policy(json!({"timeouts": {"powerOffSeconds": 10, "nodeReadySeconds": 30, "readyGraceSeconds": 2}}))
        .drift_policy(drift)
        .start()
        .await;
    let options = baremend::remediation::controller::ControllerOptions {
        drift_helpers: Some(HelperPods::new(baremend::lab::setup::LAB_HELPER_IMAGE)),
        ..lab.options()
    };
    lab.start_controller(options);
    lab
}

/// The drift tests' questions to the lab: the node's disk, the MCO's forcefile and reboots,
/// the Events (a test imports it: `use common::drift::DriftLab;`).
#[allow(async_fn_in_trait)]
pub trait DriftLab {
    /// Tampers with a file the MCO manages on the node.
    fn drift(&self, node: &str);

    /// Whether the node's disk has the MCO's forcefile.
    fn forcefile(&self, node: &str) -> bool;

    /// How often the node's host went off.
    fn reboots(&self, node: &str) -> usize;

    /// Every Event, as JSON text.
    fn events(&self) -> String;

    /// Waits (up to 10 s) for an Event with `reason` about an object of `kind`: a step's
    /// Events are published after its status is persisted, so a test that saw the phase
    /// may be a moment ahead of them.
    async fn wait_event(&self, reason: &str, kind: &str);
}

impl DriftLab for Lab {
    fn drift(&self, node: &str) {
        self.cluster.disk(node).unwrap().put(
            "/etc/demo/rules.json",
            SimFile::regular(b"{\"tampered\": true}", 0o644),
        );
    }

    fn forcefile(&self, node: &str) -> bool {
        self.cluster.disk(node).unwrap().get(FORCE_FILE).is_some()
    }

    fn reboots(&self, node: &str) -> usize {
        self.cluster.host(node).unwrap().host.power_offs()
    }

    fn events(&self) -> String {
        serde_json::to_string(&self.api.list(EVENTS, None)).unwrap()
    }

    async fn wait_event(&self, reason: &str, kind: &str) {
        eventually(
            &format!("a {reason} Event on a {kind}"),
            Duration::from_secs(10),
            async || {
                self.api.list(EVENTS, None).iter().any(|e| {
                    e["reason"] == reason
                        && (e["regarding"]["kind"] == kind || e["involvedObject"]["kind"] == kind)
                })
            },
        )
        .await
    }
}

/// The steps of a DriftRemediation, in order.
pub fn steps(remediation: &DriftRemediation) -> Vec<String> {
    remediation
        .status
        .as_ref()
        .map(|s| s.steps.iter().map(|t| t.step.to_string()).collect())
        .unwrap_or_default()
}
