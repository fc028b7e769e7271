//! The config-drift scenarios of the chaos harness ([`Fault::LateMcoReboot`],
//! [`Fault::PendingForceHelper`]). A seed that draws one runs the simulated Machine Config
//! Operator and the controller's drift coordinator; the scenario is played by a task that
//! follows the worker's first DriftRemediation and acts at its moments — a budget that
//! appears once the pre-flight has passed, an image pull that hangs until the helper is
//! deleted, a health check that fires during the MCO's reboot — because a fault at a random
//! time would almost never meet those windows.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use baremend_sim::cluster::NodeFaults;
use baremend_sim::cluster::local::{Gvr, Local, NODES, PDBS, PODS};
use baremend_sim::cluster::mco::disk::SimFile;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::super::setup::LabCluster;
use super::check::mco_busy;
use super::plan::{Fault, HealthCheck};
use super::trigger;
use crate::api::DriftPolicy;
use crate::api::annotations::PLANNED_REBOOT;
use crate::api::mco::{POST_CONFIG_ACTION, STATE};
use crate::{Error, Result};

/// DriftRemediations, read straight from the store.
pub(super) const DRIFT_REMEDIATIONS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "driftremediations",
};

/// The image of the drift helpers (the simulated kubelet runs `baremend host-file` itself).
pub(super) const HELPER_IMAGE: &str = crate::lab::setup::LAB_HELPER_IMAGE;
/// Where the drift helpers run.
const HELPER_NAMESPACE: &str = "baremend";
/// The pods every worker runs (see the simulator's workloads), and the budget over them that
/// blocks the MCO's drain.
const WORKLOADS: &str = "workloads";
const BLOCKING_PDB: &str = "chaos-drain-block";
/// A file of the workers' rendered config, changed by hand.
const DRIFTED_FILE: &str = "/etc/demo/rules.json";
/// How long a scenario follows its remediation before it lets every fault go.
const SCENARIO_LIMIT: Duration = Duration::from_secs(30);

/// What a seed's drift scenario did, for the summary.
#[derive(Debug, Clone)]
pub struct DriftOutcome {
    /// `late MCO reboot` or `force helper pending`.
    pub scenario: &'static str,
    /// How the worker's first DriftRemediation ended: its phase, and the reason of a failure.
    pub first_attempt: String,
    /// DriftRemediations of the worker in all.
    pub attempts: usize,
    /// The harness set the health check's trigger during the MCO's late reboot.
    pub trigger_set: bool,
}

/// What the scenario's task saw.
#[derive(Debug, Default)]
pub(super) struct Played {
    /// The trigger was set during the MCO's late reboot.
    pub trigger_set: bool,
    /// What the task waited for in vain (then it let every fault go).
    pub stalled: Option<String>,
}

/// The drift policy of the scenario: deadlines of seconds, so that a scenario fits a seed.
/// The pickup timeout is short where it is meant to expire, long enough elsewhere for the
/// daemon's retry (under a second in chaos physics) to take the forcefile.
fn policy(fault: &Fault) -> Value {
    let pickup = match fault {
        Fault::PendingForceHelper { .. } => 1,
        _ => 3,
    };
    json!({
        "debounceSeconds": 1,
        "timeouts": {"pickupSeconds": pickup, "drainSeconds": 1, "rebootSeconds": 5,
            "restoreSeconds": 5, "applySeconds": 10},
    })
}

fn invalid(object: &str) -> impl Fn(String) -> Error + '_ {
    move |reason| Error::Invalid {
        object: object.into(),
        reason,
    }
}

/// Readies an MCO seed before its faults: the DriftPolicy, and every
/// daemon reporting its node Done (the drift must be seen as drift, not as a first start).
pub(super) async fn prepare(lab: &LabCluster, fault: &Fault) -> Result<()> {
    // The helpers' namespace is deploy/'s, which every lab applies.
    let policy: DriftPolicy =
        serde_json::from_value(json!({"metadata": {"name": "default"}, "spec": policy(fault)}))
            .map_err(|e| invalid("the chaos drift policy")(e.to_string()))?;
    Api::<DriftPolicy>::all(lab.client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .map_err(Error::kube("CreateDriftPolicy"))?;
    let started = Instant::now();
    while !lab
        .api
        .list(NODES, None)
        .iter()
        .all(|n| annotation(n, STATE) == Some("Done"))
    {
        if started.elapsed() > Duration::from_secs(10) {
            return Err(invalid("the simulated MCO")(
                "nodes never reported Done".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// Starts the scenario now: the worker's kubelet holds pod starts, a file of its rendered
/// config is changed by hand, and a task plays the rest. None when `fault` is no drift
/// scenario.
pub(super) fn play(
    lab: &LabCluster,
    fault: &Fault,
    check: HealthCheck,
) -> Option<JoinHandle<Played>> {
    let node = fault.drift_node()?.to_owned();
    let faults = lab.cluster.host(&node)?.faults.clone();
    let disk = lab.cluster.disk(&node)?.clone();
    // The hold first: the force helper the drift brings must find the kubelet stuck.
    faults.pods_held.store(true, Ordering::Relaxed);
    disk.put(
        DRIFTED_FILE,
        SimFile::regular(b"{\"edited\": \"by hand\"}", 0o644),
    );
    let scenario = Scenario {
        api: lab.api.clone(),
        node,
        faults,
        check,
        deadline: Instant::now() + SCENARIO_LIMIT,
    };
    let fault = fault.clone();
    Some(tokio::spawn(async move {
        let played = match fault {
            Fault::PendingForceHelper { until_deleted, .. } => {
                scenario.pending_helper(until_deleted).await
            }
            _ => scenario.late_reboot().await,
        };
        scenario.let_go();
        played
    }))
}

/// One scenario's task.
struct Scenario {
    api: Local,
    node: String,
    faults: Arc<NodeFaults>,
    /// The seed's health check: the trigger a late reboot sets.
    check: HealthCheck,
    deadline: Instant,
}

/// Whether a DriftRemediation phase is terminal (the API's names).
fn terminal(phase: &str) -> bool {
    matches!(
        phase,
        "Succeeded" | "SelfHealed" | "Failed" | "Aborted" | "Escalated"
    )
}

impl Scenario {
    /// The worker's first DriftRemediation (the scenario's).
    fn first(&self) -> Option<Value> {
        self.api
            .get(DRIFT_REMEDIATIONS, "", &format!("{}-1", self.node))
            .ok()
    }

    fn first_phase(&self) -> String {
        self.first()
            .and_then(|r| {
                r.pointer("/status/phase")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_default()
    }

    /// Waits until `check` holds; the reason when the scenario's time is up.
    async fn until(
        &self,
        what: &str,
        mut check: impl FnMut(&Self) -> bool,
    ) -> std::result::Result<(), String> {
        while !check(self) {
            if Instant::now() > self.deadline {
                return Err(format!("{}: {what}", self.node));
            }
            // Often: the moments it waits for (a phase, a reboot) last a few hundred ms.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// Lets every fault of the scenario go.
    fn let_go(&self) {
        self.faults.pods_held.store(false, Ordering::Relaxed);
        let _ = self.api.delete(PDBS, WORKLOADS, BLOCKING_PDB, None);
    }

    /// Late MCO reboot after a drain timeout.
    async fn late_reboot(&self) -> Played {
        let mut played = Played::default();
        let requested = self
            .until("the forcefile requested", |s| {
                let phase = s.first_phase();
                phase == "ForceRequested" || terminal(&phase)
            })
            .await;
        if let Err(stalled) = requested {
            played.stalled = Some(stalled);
            return played;
        }
        if self.first_phase() == "ForceRequested" {
            // After the pre-flight: a budget over the worker's pods that allows no eviction.
            let budget = json!({"metadata": {"name": BLOCKING_PDB}, "spec": {"maxUnavailable": 0,
                "selector": {"matchLabels": {"app": "app"}}}});
            let _ = self.api.create(PDBS, WORKLOADS, budget);
        }
        self.faults.pods_held.store(false, Ordering::Relaxed);
        if let Err(stalled) = self
            .until("the first attempt over", |s| terminal(&s.first_phase()))
            .await
        {
            played.stalled = Some(stalled);
            return played;
        }
        let _ = self.api.delete(PDBS, WORKLOADS, BLOCKING_PDB, None);
        if first_attempt(self.first().as_ref()) != "Failed/DrainTimeout" {
            // No drain was left pending: no late reboot comes.
            return played;
        }
        // The MCO's own drain completes now, and it reboots the node, late.
        let rebooting = self
            .until("the MCO's late reboot", |s| {
                s.api
                    .get(NODES, "", &s.node)
                    .is_ok_and(|n| annotation(&n, POST_CONFIG_ACTION) == Some("Rebooting"))
            })
            .await;
        if let Err(stalled) = rebooting {
            played.stalled = Some(stalled);
            return played;
        }
        // A health check takes the reboot for a failure (chaos physics reboot faster than
        // its timeout, so the harness plays it): the annotation, or a request it withdraws
        // once it sees the Node Ready again.
        let made = trigger::set(&self.api, self.check, &self.node);
        played.trigger_set = match made {
            Some(uid) => {
                let withdraw = (uid, trigger::WITHDRAW_AFTER);
                let node = self.node.clone();
                trigger::withdraw_when_ready(self.api.clone(), self.check, node, withdraw);
                true
            }
            None => trigger::left(&self.api, self.check, &self.node).is_some(),
        };
        played
    }

    /// A force helper still pending at the pickup timeout.
    async fn pending_helper(&self, until_deleted: bool) -> Played {
        let helper = format!("{}-1-force", self.node);
        let over = self
            .until("the first attempt over", |s| terminal(&s.first_phase()))
            .await;
        let deleting = if until_deleted && over.is_ok() {
            // The coordinator deletes its helper; the kubelet lets go, and the helper it
            // was starting still writes the forcefile once before it is gone.
            self.until("the force helper deleted", |s| {
                s.api
                    .get(PODS, HELPER_NAMESPACE, &helper)
                    .map_or(true, |p| p.pointer("/metadata/deletionTimestamp").is_some())
            })
            .await
        } else {
            over
        };
        Played {
            trigger_set: false,
            stalled: deleting.err(),
        }
    }
}

/// How a DriftRemediation (as JSON) ended: `Failed/<reason>`, or its phase.
fn first_attempt(remediation: Option<&Value>) -> String {
    let Some(status) = remediation.and_then(|r| r.get("status")) else {
        return "never opened".into();
    };
    let phase = status["phase"].as_str().unwrap_or("Debouncing");
    let failed = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Failed"))
        .and_then(|c| c["reason"].as_str());
    match failed {
        Some(reason) if phase == "Failed" => format!("Failed/{reason}"),
        _ => phase.to_owned(),
    }
}

/// The summary of a seed's drift scenario, from the final state.
pub(super) fn outcome(api: &Local, fault: &Fault, played: &Played) -> Option<DriftOutcome> {
    let node = fault.drift_node()?;
    let scenario = match fault {
        Fault::LateMcoReboot(_) => "late MCO reboot",
        _ => "force helper pending",
    };
    let mine: Vec<Value> = api
        .list(DRIFT_REMEDIATIONS, None)
        .into_iter()
        .filter(|r| r.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node))
        .collect();
    let first = mine.iter().find(|r| {
        r.pointer("/metadata/name").and_then(Value::as_str) == Some(&format!("{node}-1"))
    });
    Some(DriftOutcome {
        scenario,
        first_attempt: first_attempt(first),
        attempts: mine.len(),
        trigger_set: played.trigger_set,
    })
}

/// Why the MCO side of an MCO seed has not settled: a DriftRemediation still open, a
/// planned-reboot mark still on a Node, the MCO at work on one, or a node still drifted
/// without a remediation that gave up on it (`DriftRecurring`). Nodes for which `skip` holds
/// (their host is off for good) are not looked at.
pub(super) fn unsettled(api: &Local, skip: &dyn Fn(&str) -> bool) -> Option<String> {
    let drifts = api.list(DRIFT_REMEDIATIONS, None);
    let name = |r: &Value| {
        r.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let phase = |r: &Value| {
        r.pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Debouncing")
            .to_owned()
    };
    if let Some(open) = drifts.iter().find(|r| !terminal(&phase(r))) {
        return Some(format!(
            "DriftRemediation {} is {}",
            name(open),
            phase(open)
        ));
    }
    for node in api.list(NODES, None) {
        let node_name = name(&node);
        if skip(&node_name) {
            continue;
        }
        if let Some(mark) = annotation(&node, PLANNED_REBOOT) {
            return Some(format!(
                "Node {node_name} still carries {PLANNED_REBOOT}={mark}"
            ));
        }
        if let Some(busy) = mco_busy(&node) {
            return Some(format!("the MCO is at work on {node_name}: {busy}"));
        }
        let state = annotation(&node, STATE).unwrap_or_default();
        if state == "Done" {
            continue;
        }
        let latest = drifts
            .iter()
            .filter(|r| r.pointer("/spec/nodeName").and_then(Value::as_str) == Some(&node_name))
            .max_by_key(|r| {
                name(r)
                    .rsplit('-')
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            });
        let ended = first_attempt(latest);
        if ended != "Failed/DriftRecurring" {
            return Some(format!(
                "Node {node_name} is {state:?} for the MCO (its latest drift remediation: {ended})"
            ));
        }
    }
    None
}

/// The drift scenarios of a run, for the summary line.
#[derive(Debug, Default)]
pub(super) struct DriftTally {
    scenarios: std::collections::BTreeMap<&'static str, usize>,
    first_attempts: std::collections::BTreeMap<String, usize>,
    attempts: usize,
    triggers: usize,
}

impl DriftTally {
    /// Counts one seed's scenario.
    pub(super) fn add(&mut self, outcome: &DriftOutcome) {
        *self.scenarios.entry(outcome.scenario).or_default() += 1;
        *self
            .first_attempts
            .entry(outcome.first_attempt.clone())
            .or_default() += 1;
        self.attempts += outcome.attempts;
        self.triggers += usize::from(outcome.trigger_set);
    }

    /// The summary line's part: how many scenarios ran, of each kind, and how their first
    /// attempts ended.
    pub(super) fn summary(&self) -> String {
        let list = |counts: Vec<(String, usize)>| {
            counts
                .iter()
                .map(|(what, n)| format!("{what} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let total: usize = self.scenarios.values().sum();
        format!(
            "; drift scenarios {total} ({}): first attempts {}, {} attempts in all; {} health-check trigger(s) set during a late MCO reboot",
            list(
                self.scenarios
                    .iter()
                    .map(|(k, v)| (k.to_string(), *v))
                    .collect()
            ),
            list(
                self.first_attempts
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect()
            ),
            self.attempts,
            self.triggers
        )
    }
}
