//! The invariants, checked over the recorded history of API writes (the API server's own
//! change stream) and of the hosts' physical power (the simulator's records):
//!
//! 1. no Node is deleted or tainted out-of-service unless its host is off (read Off after
//!    its last power-on);
//! 2. every remediation ends Succeeded, Failed or Cancelled: none stuck;
//! 3. no host stays powered off without a Failed remediation saying so;
//! 4. never more remediations under way than `maxConcurrent`, never two control-plane hosts
//!    at once, never a control-plane host fenced while fewer than a quorum of the others are
//!    Ready;
//! 5. no step applied twice;
//! 6. no power cycle on a trigger already consumed: a remediation starts (requests power-off)
//!    only if a trigger of its Machine appeared since the previous one started — the
//!    annotation set again, or a request with a new UID created for the Machine
//!    (`MachineRemediation`) or for its Node (`NodeRemediation`; the simulated cluster's Nodes
//!    have their Machine's name) — unless that one failed (an operator deletes a Failed
//!    remediation, or retries it with `baremend.io/retry`, to allow another: a retry is a
//!    legitimate start on the same trigger);
//! 7. no machine remediation requests power-off for a Node while it carries
//!    `baremend.io/planned-reboot`, or while the Machine Config Operator is in the middle of
//!    a re-apply on it (a drain request not carried out, the node held drained for an
//!    update, the MCD `Working`, `post-config-action=Rebooting`) unless the drift
//!    coordinator handed the node over (its latest DriftRemediation `Escalated`);
//! 8. no DriftRemediation records `ForceFileRemoved` while the forcefile is still on the
//!    node's disk at that instant, and no forcefile is left on any node at the end;
//! 9. a NodeHealthCheck's escalation timeout: once the remediation reported that it saw its
//!    request timed out (`RemediationTimedOutByNhc` or `CompletingAfterTimeout` on the
//!    request), it requests no power-off again (no new power cycle, no escalation to another
//!    strategy); one timed out before the proof leaves its host on at the
//!    end (unless a later remediation of the Machine failed); one proven off — before the
//!    timeout or after it (the proof comes first: a host already off when the timeout is
//!    seen completes its cycle) — completes the cycle: it is not cancelled, and it requests
//!    power-on unless it failed;
//! 10. nothing of a namespace the policy does not trust counts: no Remediation lives in the
//!     chaos tenant's namespace or names a request or host there, a request made there
//!     is no trigger for invariant 6, and the tenant's `HostBmc` — an administrator's BMC
//!     Secret of that namespace paired with an endpoint of the tenant's choosing — gets no
//!     connection to that endpoint;
//! 11. (the fleet world) a remediation is owned by its Machine's shard alone: each Remediation
//!     is labelled with the shard of its Machine's workload cluster, and no Event about a
//!     Machine, Remediation or request of a cluster is reported by a replica of another
//!     shard (the Events' `reportingInstance` is the replica's Lease identity);
//! 12. (the fleet world) while a workload cluster's API is down, no Node of it is taken for
//!     gone: a `NodeAbsent`, `NodeDeleted` or `NodeTainted` step recorded during the outage
//!     must be true of the workload cluster's store at that instant (the Node of the
//!     recorded UID absent, or tainted out-of-service);
//! 13. (the fleet world) a workload API server is held to its bounds: one that a Cluster's
//!     Secret names for a while and that answers with an endless body, a byte a second or a
//!     watch line that never ends gets the controller to read at most
//!     [`HOSTILE_READ_LIMIT`] of one answer (and breaks none of the invariants above).
//!
//! In the fleet world ([`Fleet`]) a Node is `(cluster, name)`: the workload clusters' changes
//! come through [`Checker::observe_workload`] and every Node is judged as its host (the
//! Machine's name, unique across clusters); invariant 4's counts are per workload cluster, as
//! the gates count.

use std::collections::{HashMap, HashSet};

use baremend_sim::apiserver::{EventType, WatchEvent};
use std::sync::Arc;

use baremend_sim::cluster::mco::FORCE_FILE;
use baremend_sim::cluster::mco::disk::NodeDisk;
use baremend_sim::host::{Power, SimHost};
use serde_json::Value;

use super::judged::Judged;
use crate::api::annotations::{EXTERNAL_REMEDIATION, NHC_TIMED_OUT, PLANNED_REBOOT};
use crate::api::mco::{DESIRED_DRAIN, LAST_APPLIED_DRAIN, POST_CONFIG_ACTION, STATE};
use crate::api::{Remediation, RemediationPhase};
use baremend_sim::cluster::{MACHINE_NAMESPACE, NHC_NAMESPACE};

use super::plan::TENANT_NAMESPACE;
use super::tenant::TenantBmc;
use crate::shard::SHARD_LABEL;

/// The most of one answer a hostile workload API server may get the controller to read
/// (invariant 13): the client stops at 8 MiB an answer and 2 MiB a watch event; what the
/// server wrote into the sockets' buffers before the client hung up comes on top.
pub const HOSTILE_READ_LIMIT: u64 = 20 << 20;

/// The out-of-service taint's key.
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// Watches the cluster's history and collects violations.
#[derive(Debug, Default)]
pub struct Checker {
    /// What went wrong, in words.
    pub violations: Vec<String>,
    /// The last seen phase of every Remediation (`namespace/name`).
    phases: HashMap<String, (String, RemediationPhase)>,
    /// Node readiness as last seen.
    ready: HashMap<String, bool>,
    /// The highest number of remediations under way at once.
    pub peak_concurrent: usize,
    max_concurrent: usize,
    /// Hosts whose BMC reports a power state it does not have (the flapping faults), and
    /// whether each is detached (fenced over its BMC rather than by its operator).
    pub lying_bmcs: HashMap<String, bool>,
    /// Nodes of hosts fenced over their BMC released while the host was on, on the BMC's
    /// false Off (each is also a violation of invariant 1).
    pub released_on_lies: usize,
    /// Nodes of hosts fenced through their BareMetal Operator released while the host was
    /// on, on the operator's reading of a flapping BMC (`status.poweredOn: false`) that our
    /// own reads of the BMC failed to void (each is also a violation of invariant 1).
    pub released_on_operator_lies: usize,
    /// Per Machine, how many times its trigger has appeared.
    trigger_epoch: HashMap<String, u64>,
    /// Remediations already reported under invariant 10.
    tenant_named: HashSet<String>,
    /// The endpoints of the tenant's `HostBmc`s (invariant 10): none may be connected to.
    pub tenant_bmcs: Vec<TenantBmc>,
    /// Per Machine, the trigger epoch its latest remediation started in, and that remediation.
    started_in: HashMap<String, (u64, String)>,
    /// Per Remediation deleted after it ended (retention, an operator), its last phase:
    /// invariant 6 still reads how the previous one ended once it is gone.
    ended_deleted: HashMap<String, RemediationPhase>,
    /// Per Remediation, how many `PowerOffRequested` steps it has recorded.
    power_off_steps: HashMap<String, usize>,
    /// Per Node, as last committed: its planned-reboot mark, and how the MCO is busy on it.
    mco_nodes: HashMap<String, (Option<String>, Option<String>)>,
    /// The Nodes that carried a planned-reboot mark or a re-apply under way at some time.
    mco_touched: HashSet<String>,
    /// The Remediations counted as cases of invariant 7 ([`Checker::mco_case`]).
    mco_cases: HashSet<String>,
    /// Per Node, its newest DriftRemediation: attempt number and phase.
    latest_drift: HashMap<String, (u64, String)>,
    /// DriftRemediations that have recorded `ForceFileRemoved`.
    force_file_removed: HashSet<String>,
    /// The nodes' simulated disks (seeds that run the MCO).
    pub disks: HashMap<String, Arc<NodeDisk>>,
    /// Per Remediation, the UID of the request it recorded as its trigger.
    recorded_uid: HashMap<String, String>,
    /// Remediations whose latest power cycle is proven off (a `Fenced` step after it).
    proven: HashSet<String>,
    /// Per Remediation, how many power-off requests ([`POWER_OFF_REQUESTS`]) it recorded.
    power_off_requests: HashMap<String, usize>,
    /// NodeRemediations (by UID) seen timed out, and those whose remediation reported that
    /// it saw the timeout before the proof.
    timed_out: HashSet<String>,
    saw_timeout: HashSet<String>,
    /// Remediations whose request timed out: their Machine.
    stopped_by_timeout: HashMap<String, String>,
    /// Remediations that saw their request timed out: their power-off requests at that
    /// moment.
    saw_timeout_at: HashMap<String, usize>,
    /// Remediations whose request timed out and that are proven off: they must complete.
    completing_after_timeout: HashSet<String>,
    /// When the NodeHealthCheck's timeouts came.
    pub timeouts: TimeoutTally,
    /// How many cases each invariant judged.
    pub judged: Judged,
    /// Objects the checker could not read (a Remediation that does not parse, a
    /// DriftRemediation without its Node): its judgement would be blind there, so each
    /// fails the seed as a harness error.
    pub unreadable: Vec<String>,
    /// The fleet world's clusters and shards (None: one cluster, one controller).
    pub fleet: Option<Fleet>,
    /// Workload clusters whose API is down now (invariant 12).
    outages: HashSet<String>,
    /// Per workload cluster in an outage, the Remediations whose Node step came due (phase
    /// `Fenced`) during it: each is one judgment of invariant 12 when the outage ends.
    due_in_outage: HashMap<String, HashSet<String>>,
    /// Per host, its Node in its workload cluster as last committed: UID, and tainted
    /// out-of-service (invariant 12).
    workload_nodes: HashMap<String, (String, bool)>,
    /// Per Remediation, how many steps it had recorded at its last change (invariant 12).
    steps_seen: HashMap<String, usize>,
}

/// The fleet world's map of Nodes and Machines to workload clusters and shards.
#[derive(Debug, Default, Clone)]
pub struct Fleet {
    /// Per workload cluster and Node name, the host (and Machine) the Node runs on.
    pub hosts: HashMap<(String, String), String>,
    /// Per host (and Machine), its workload cluster.
    pub cluster_of: HashMap<String, String>,
    /// Per workload cluster, the Lease of the shard that serves it (also its shard label).
    pub shard_of: HashMap<String, String>,
}

impl Fleet {
    /// The workload cluster of an object named after a Machine (`wc-0-worker-1`, its
    /// Remediation `wc-0-worker-1-2`, its request).
    fn cluster_named(&self, name: &str) -> Option<&String> {
        self.shard_of
            .keys()
            .find(|cluster| name.starts_with(&format!("{cluster}-")))
    }
}

/// When a NodeHealthCheck timed out its requests, as the API server committed the timeout.
#[derive(Debug, Default, Clone, Copy)]
pub struct TimeoutTally {
    /// No remediation had recorded the request yet.
    pub before_start: usize,
    /// Its remediation had not proven the host off.
    pub before_proof: usize,
    /// Its remediation had.
    pub after_proof: usize,
}

/// The reason baremend reports on a NodeRemediation it saw timed out before the proof.
const CANCELLED_FOR_TIMEOUT: &str = "RemediationTimedOutByNhc";

/// The reasons baremend reports on a NodeRemediation once it saw it timed out.
const SAW_TIMEOUT: [&str; 2] = [CANCELLED_FOR_TIMEOUT, "CompletingAfterTimeout"];

/// The steps that request power-off: a power cycle's first, another strategy's, a new
/// power cycle's.
const POWER_OFF_REQUESTS: [&str; 3] = ["PowerOffRequested", "Escalated", "Retry"];

/// How the Machine Config Operator is in the middle of a re-apply on a Node (as JSON), or
/// None when it is not.
pub(super) fn mco_busy(node: &Value) -> Option<String> {
    let get = |key: &str| {
        node.pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    };
    let desired = get(DESIRED_DRAIN);
    if desired.is_some() && desired != get(LAST_APPLIED_DRAIN) {
        return Some(format!("drain request {desired:?} not carried out"));
    }
    if desired.is_some_and(|d| d.starts_with("drain-")) {
        return Some("held drained for an update".into());
    }
    if get(STATE) == Some("Working") {
        return Some("the MCD is Working".into());
    }
    if get(POST_CONFIG_ACTION) == Some("Rebooting") {
        return Some("rebooting for the MCO".into());
    }
    None
}

/// How many times `step` is recorded in an object's status.
fn step_count(object: &Value, step: &str) -> usize {
    object
        .pointer("/status/steps")
        .and_then(Value::as_array)
        .map_or(0, |steps| {
            steps.iter().filter(|s| s["step"] == step).count()
        })
}

/// Whether a Remediation's latest power cycle is proven off: a `Fenced` step after its
/// power-off request (a `Retry` begins a new one).
fn proven(object: &Value) -> bool {
    let steps: Vec<&Value> = object
        .pointer("/status/steps")
        .and_then(Value::as_array)
        .map(|s| s.iter().map(|s| &s["step"]).collect())
        .unwrap_or_default();
    let last = |name: &str| steps.iter().rposition(|s| *s == name);
    let request = last("PowerOffRequested").max(last("Retry"));
    last("Fenced").is_some_and(|fenced| request.is_none_or(|off| off < fenced))
}

fn under_way(phase: RemediationPhase) -> bool {
    phase != RemediationPhase::Pending && !phase.is_terminal()
}

fn taints_out_of_service(node: Option<&Value>) -> bool {
    node.and_then(|n| n.pointer("/spec/taints"))
        .and_then(Value::as_array)
        .is_some_and(|t| t.iter().any(|t| t["key"] == OUT_OF_SERVICE))
}

/// Whether a Node (as JSON) reports Ready=True.
pub(super) fn node_ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// The newest Remediation of each Machine (by the attempt number its name ends with).
pub(super) fn latest_per_machine(remediations: &[Remediation]) -> HashMap<String, &Remediation> {
    let attempt = |r: &Remediation| {
        r.metadata
            .name
            .as_deref()
            .and_then(|n| n.strip_prefix(r.spec.subject_name()))
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut latest: HashMap<String, &Remediation> = HashMap::new();
    for remediation in remediations {
        let newer = latest
            .get(remediation.spec.subject_name())
            .is_some_and(|r| attempt(r) > attempt(remediation));
        if !newer {
            latest.insert(remediation.spec.subject_name().to_string(), remediation);
        }
    }
    latest
}

/// Whether the Machine's newest Remediation failed.
pub(super) fn latest_failed(latest: &HashMap<String, &Remediation>, machine: &str) -> bool {
    latest
        .get(machine)
        .is_some_and(|r| r.phase() == RemediationPhase::Failed)
}

impl Checker {
    /// A checker for a policy with this `maxConcurrent`.
    pub fn new(max_concurrent: usize) -> Self {
        Checker {
            max_concurrent,
            ..Checker::default()
        }
    }

    /// Takes a Node as it is before the first change is seen (of workload cluster
    /// `cluster` in the fleet world).
    pub fn seed_node(&mut self, cluster: Option<&str>, node: &Value) {
        let Some(name) = node.pointer("/metadata/name").and_then(Value::as_str) else {
            return;
        };
        let Some(host) = self.host_of_node(cluster, name) else {
            return;
        };
        self.ready.insert(host.clone(), node_ready(node));
        if cluster.is_some() {
            let uid = node.pointer("/metadata/uid").and_then(Value::as_str);
            let tainted = taints_out_of_service(Some(node));
            self.workload_nodes
                .insert(host, (uid.unwrap_or_default().to_owned(), tainted));
        }
    }

    /// The host of Node `name` (of workload cluster `cluster` in the fleet world): the Node's
    /// own name in a single cluster; None, told as unreadable, for a Node of no known host.
    fn host_of_node(&mut self, cluster: Option<&str>, name: &str) -> Option<String> {
        let (Some(fleet), Some(cluster)) = (&self.fleet, cluster) else {
            return Some(name.to_owned());
        };
        let host = fleet
            .hosts
            .get(&(cluster.to_owned(), name.to_owned()))
            .cloned();
        if host.is_none() {
            self.unreadable.push(format!(
                "Node {name} of workload cluster {cluster} runs on no known host"
            ));
        }
        host
    }

    /// Looks at one change of workload cluster `cluster`'s API server as it happens (the
    /// fleet world).
    pub fn observe_workload(
        &mut self,
        cluster: &str,
        event: &WatchEvent,
        hosts: &HashMap<String, Arc<SimHost>>,
    ) {
        if (event.key.group.as_str(), event.key.plural.as_str()) != ("", "nodes") {
            return;
        }
        let Some(host) = self.host_of_node(Some(cluster), &event.key.name) else {
            return;
        };
        if matches!(event.kind, EventType::Deleted) {
            self.workload_nodes.remove(&host);
        } else {
            let uid = event
                .object
                .pointer("/metadata/uid")
                .and_then(Value::as_str);
            let tainted = taints_out_of_service(Some(&event.object));
            self.workload_nodes
                .insert(host.clone(), (uid.unwrap_or_default().to_owned(), tainted));
        }
        self.node_change(&host, event, hosts);
    }

    /// What a hostile workload API server named by `cluster`'s Secret was asked
    /// (`requests`) and the most of one answer it managed to send: invariant 13 judges each
    /// one that was asked anything.
    pub fn hostile_served(&mut self, cluster: &str, requests: u64, most_sent: u64) {
        if requests == 0 {
            return;
        }
        self.judged.add(13);
        if most_sent > HOSTILE_READ_LIMIT {
            self.violations.push(format!(
                "invariant 13: a hostile API server named by {cluster}'s Secret was let send {most_sent} bytes of one answer (bound {HOSTILE_READ_LIMIT})"
            ));
        }
    }

    /// Workload cluster `cluster`'s API went away (`down`), or came back: invariant 12 judges
    /// the steps recorded meanwhile. Returns how many remediations of the cluster were under
    /// way when it went (the fleet's summary counts them: exposure, not judgments).
    pub fn workload_api_down(&mut self, cluster: &str, down: bool) -> usize {
        if !down {
            self.outages.remove(cluster);
            self.judge_outage(cluster);
            return 0;
        }
        self.outages.insert(cluster.to_owned());
        let due: Vec<String> = self
            .phases
            .iter()
            .filter(|(_, (machine, phase))| {
                *phase == RemediationPhase::Fenced
                    && self.cluster_of(machine).as_deref() == Some(cluster)
            })
            .map(|(key, _)| key.clone())
            .collect();
        self.due_in_outage
            .entry(cluster.to_owned())
            .or_default()
            .extend(due);
        // Being under way during an outage is exposure, not a judgment: invariant 12 judges
        // each Node step recorded meanwhile (`check_outage_steps`).
        self.under_way_in(cluster)
    }

    /// Invariant 12's judgments of an outage that ended (or of one still on at the end of
    /// the run): each Remediation whose Node step came due during it was watched through it,
    /// every step it recorded meanwhile checked against the cluster's store.
    fn judge_outage(&mut self, cluster: &str) {
        for _ in self.due_in_outage.remove(cluster).unwrap_or_default() {
            self.judged.add(12);
        }
    }

    /// How many remediations of workload cluster `cluster`'s Machines are under way.
    pub fn under_way_in(&self, cluster: &str) -> usize {
        let Some(fleet) = &self.fleet else {
            return 0;
        };
        self.phases
            .values()
            .filter(|(machine, phase)| {
                under_way(*phase)
                    && fleet.cluster_of.get(machine).map(String::as_str) == Some(cluster)
            })
            .count()
    }

    /// Looks at one change as it happens.
    pub fn observe(&mut self, event: &WatchEvent, hosts: &HashMap<String, Arc<SimHost>>) {
        match (event.key.group.as_str(), event.key.plural.as_str()) {
            ("", "nodes") => self.node_change(&event.key.name.clone(), event, hosts),
            ("", "events") if self.fleet.is_some() => self.event_reported(event),
            ("baremend.io", "remediations") => self.remediation_change(event),
            ("machine.openshift.io", "machines") => self.machine_change(event),
            ("baremend.io", "driftremediations") => self.drift_change(event),
            ("baremend.io", "machineremediations" | "noderemediations") => {
                self.request_change(event)
            }
            // A tenant's HostBmc: invariant 10 judges what the controller makes of it.
            ("baremend.io", "hostbmcs")
                if event.key.namespace == TENANT_NAMESPACE
                    && matches!(event.kind, EventType::Added) =>
            {
                self.judged.add(10)
            }
            _ => {}
        }
    }

    /// Invariant 8 at the commit: `ForceFileRemoved` recorded with the forcefile still there.
    fn drift_change(&mut self, event: &WatchEvent) {
        let name = event.key.name.clone();
        if matches!(event.kind, EventType::Deleted) {
            return;
        }
        let object = &event.object;
        let Some(node) = object.pointer("/spec/nodeName").and_then(Value::as_str) else {
            self.unreadable
                .push(format!("DriftRemediation {name} without spec.nodeName"));
            return;
        };
        let attempt = name
            .rsplit('-')
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        let phase = object
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Debouncing")
            .to_owned();
        let latest = self.latest_drift.entry(node.to_owned()).or_default();
        if attempt >= latest.0 {
            *latest = (attempt, phase);
        }
        if step_count(object, "ForceFileRemoved") > 0
            && self.force_file_removed.insert(name.clone())
        {
            self.judged.add(8);
            let left = self
                .disks
                .get(node)
                .is_some_and(|d| d.get(FORCE_FILE).is_some());
            if left {
                self.violations.push(format!(
                    "invariant 8: DriftRemediation {name} recorded ForceFileRemoved while \
                     {FORCE_FILE} was still on {node}"
                ));
            }
        }
    }

    /// Invariant 10: the Remediation `key` neither lives in the tenant's namespace nor names
    /// a request or a host there.
    fn check_not_tenants(&mut self, key: &str, namespace: &str, remediation: &Remediation) {
        let spec = &remediation.spec;
        let trigger = spec.trigger.as_ref().and_then(|t| t.namespace.as_deref());
        let host = spec.host.as_deref().and_then(|h| h.split_once('/'));
        let named = namespace == TENANT_NAMESPACE
            || trigger == Some(TENANT_NAMESPACE)
            || host.is_some_and(|(ns, _)| ns == TENANT_NAMESPACE);
        if named && self.tenant_named.insert(key.to_owned()) {
            self.violations.push(format!(
                "invariant 10: {key} acts on the untrusted namespace {TENANT_NAMESPACE} \
                 (trigger {trigger:?}, host {:?})",
                spec.host
            ));
        }
    }

    /// Whether the MCO has `node` in hand now, as last committed: a planned-reboot mark, or a
    /// re-apply under way.
    fn mco_holds(&self, node: &str) -> bool {
        self.mco_nodes
            .get(node)
            .is_some_and(|(mark, busy)| mark.is_some() || busy.is_some())
    }

    /// One case of invariant 7: the Remediation `key` was open while the MCO had its Node in
    /// hand (a planned-reboot mark, a re-apply under way), or requested power-off of a Node
    /// the MCO had had in hand; counted once per Remediation.
    fn mco_case(&mut self, key: &str) {
        if self.mco_cases.insert(key.to_owned()) {
            self.judged.add(7);
        }
    }

    /// Invariant 7, when the Remediation `key` of `machine` requests power-off.
    fn check_no_planned_reboot(&mut self, machine: &str, key: &str) {
        let Some((mark, busy)) = self.mco_nodes.get(machine).cloned() else {
            return;
        };
        // A judgment only where the MCO had this Node in hand at some time of the run (a
        // planned-reboot mark, a re-apply under way): on a Node it never touched the rule
        // could not have been broken, and counting it would be exposure.
        if self.mco_touched.contains(machine) {
            self.mco_case(key);
        }
        let handed_over = self
            .latest_drift
            .get(machine)
            .is_some_and(|(_, phase)| phase == "Escalated");
        if let Some(mark) = mark {
            self.violations.push(format!(
                "invariant 7: {key} requested power-off of {machine} while the Node carried \
                 {PLANNED_REBOOT}={mark}"
            ));
        } else if let Some(busy) = busy.as_ref().filter(|_| !handed_over) {
            self.violations.push(format!(
                "invariant 7: {key} requested power-off of {machine} while the MCO was in \
                 the middle of a re-apply ({busy})"
            ));
        }
    }

    fn machine_change(&mut self, event: &WatchEvent) {
        let triggered = |machine: Option<&Value>| {
            machine
                .and_then(|m| m.pointer("/metadata/annotations"))
                .and_then(Value::as_object)
                .is_some_and(|a| a.contains_key(EXTERNAL_REMEDIATION))
        };
        if !matches!(event.kind, EventType::Deleted)
            && triggered(Some(&event.object))
            && !triggered(event.previous.as_deref())
        {
            *self
                .trigger_epoch
                .entry(event.key.name.clone())
                .or_default() += 1;
        }
    }

    /// A health check's request: a new one is a trigger of its Machine (invariant 6; a
    /// Node has its Machine's name here); a NodeRemediation timed out, and the remediation
    /// seeing it (invariant 9).
    fn request_change(&mut self, event: &WatchEvent) {
        if matches!(event.kind, EventType::Deleted) {
            return;
        }
        // A request counts where its health check puts it: a Machine's in the Machine's
        // namespace, a NodeHealthCheck's in its template's (invariant 10).
        let trusted = match event.key.plural.as_str() {
            "machineremediations" => event.key.namespace == MACHINE_NAMESPACE,
            _ => event.key.namespace == NHC_NAMESPACE,
        };
        if matches!(event.kind, EventType::Added) && !trusted {
            self.judged.add(10);
        }
        if matches!(event.kind, EventType::Added) && trusted {
            *self
                .trigger_epoch
                .entry(event.key.name.clone())
                .or_default() += 1;
        }
        let object = &event.object;
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let timed_out = object
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .is_some_and(|a| a.contains_key(NHC_TIMED_OUT));
        if timed_out && self.timed_out.insert(uid.clone()) {
            self.timeout_committed(&uid);
        }
        let saw = object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find_map(|c| c["reason"].as_str().filter(|r| SAW_TIMEOUT.contains(r)));
        if let Some(reason) = saw
            && self.saw_timeout.insert(uid.clone())
        {
            self.timeout_seen(&uid, reason);
        }
    }

    /// The Remediation that recorded the request `uid`.
    fn recorder(&self, uid: &str) -> Option<String> {
        self.recorded_uid
            .iter()
            .find(|(_, recorded)| recorded.as_str() == uid)
            .map(|(key, _)| key.clone())
    }

    /// Invariant 9, when the NodeHealthCheck's timeout of the request `uid` is committed.
    fn timeout_committed(&mut self, uid: &str) {
        let Some(key) = self.recorder(uid) else {
            self.timeouts.before_start += 1;
            return;
        };
        self.judged.add(9);
        if self.proven.contains(&key) {
            self.timeouts.after_proof += 1;
            self.completing_after_timeout.insert(key.clone());
        } else {
            self.timeouts.before_proof += 1;
        }
        if let Some((machine, _)) = self.phases.get(&key) {
            self.stopped_by_timeout.insert(key, machine.clone());
        }
    }

    /// Invariant 9, when the remediation of the request `uid` reports (`reason`) that it saw
    /// it timed out.
    fn timeout_seen(&mut self, uid: &str, reason: &str) {
        let Some(key) = self.recorder(uid) else {
            return;
        };
        self.judged.add(9);
        if self.proven.contains(&key) && reason == CANCELLED_FOR_TIMEOUT {
            self.violations.push(format!(
                "invariant 9: {key} was cancelled for the NodeHealthCheck's timeout after the \
                 proof: the host is left off"
            ));
        } else {
            let done = self.power_off_requests.get(&key).copied().unwrap_or(0);
            self.saw_timeout_at.insert(key, done);
        }
    }

    /// A change of the Node of host `name` (its own name in a single cluster).
    fn node_change(
        &mut self,
        name: &str,
        event: &WatchEvent,
        hosts: &HashMap<String, Arc<SimHost>>,
    ) {
        let released = match event.kind {
            EventType::Deleted => Some("deleted"),
            EventType::Modified
                if taints_out_of_service(Some(&event.object))
                    && !taints_out_of_service(event.previous.as_deref()) =>
            {
                Some("tainted out-of-service")
            }
            _ => None,
        };
        if let Some(how) = released
            && let Some(host) = hosts.get(name)
        {
            self.judged.add(1);
            // Judged at the commit itself: the host must be off at this instant. A flapping
            // BMC contradicts itself, which the controller must see, whether it reads the BMC
            // for its proof or corroborates its operator's reading with reads of its own: a
            // release on its false Off breaks the invariant like any other (counted apart).
            if host.power() != Power::Off {
                let fenced_by = match self.lying_bmcs.get(name) {
                    Some(true) => {
                        self.released_on_lies += 1;
                        ", on its flapping BMC's false Off (fenced over its BMC)"
                    }
                    Some(false) => {
                        self.released_on_operator_lies += 1;
                        ", on its operator's reading of its flapping BMC (fenced through its BareMetal Operator)"
                    }
                    None => "",
                };
                self.violations.push(format!(
                    "invariant 1: Node {name} {how} while its host was on{fenced_by} (power history {:?})",
                    host.history()
                ));
            }
        }
        match event.kind {
            EventType::Deleted => {
                self.ready.remove(name);
                self.mco_nodes.remove(name);
            }
            _ => {
                self.ready
                    .insert(name.to_string(), node_ready(&event.object));
                let mark = event
                    .object
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(PLANNED_REBOOT))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.mco_nodes
                    .insert(name.to_string(), (mark, mco_busy(&event.object)));
                if self.mco_holds(name) {
                    self.mco_touched.insert(name.to_string());
                    // Every remediation of this Node not yet ended is a case: from now on
                    // a power-off it requests is judged against the MCO's state.
                    let open: Vec<String> = self
                        .phases
                        .iter()
                        .filter(|(_, (machine, phase))| machine == name && !phase.is_terminal())
                        .map(|(key, _)| key.clone())
                        .collect();
                    for key in open {
                        self.mco_case(&key);
                    }
                }
            }
        }
    }

    fn remediation_change(&mut self, event: &WatchEvent) {
        let key = format!("{}/{}", event.key.namespace, event.key.name);
        let remediation = match serde_json::from_value::<Remediation>(Value::clone(&event.object)) {
            Ok(remediation) => remediation,
            Err(error) => {
                self.unreadable
                    .push(format!("Remediation {key} does not parse: {error}"));
                return;
            }
        };
        let phase = remediation.phase();
        let machine = remediation.spec.subject_name().to_string();
        let before = self.phases.get(&key).map(|(_, p)| *p);
        if matches!(event.kind, EventType::Deleted) {
            if let Some((_, ended)) = self.phases.remove(&key)
                && ended.is_terminal()
            {
                self.ended_deleted.insert(key.clone(), ended);
            }
            self.power_off_steps.remove(&key);
            return;
        }
        self.phases.insert(key.clone(), (machine.clone(), phase));
        if self.mco_holds(&machine) && !phase.is_terminal() {
            self.mco_case(&key);
        }
        self.check_not_tenants(&key, &event.key.namespace, &remediation);
        let started = under_way(phase) && !before.is_some_and(under_way);
        if started {
            self.judged.add(4);
            self.check_trigger_fresh(&machine, &key);
        }
        let power_offs = step_count(&event.object, "PowerOffRequested");
        let before_offs = self.power_off_steps.insert(key.clone(), power_offs);
        if power_offs > before_offs.unwrap_or(0) {
            self.check_no_planned_reboot(&machine, &key);
        }
        self.timeout_steps(&key, &remediation, &event.object);
        self.check_shard(&key, &machine, &remediation);
        self.check_outage_steps(&key, &machine, &remediation);
        // Counted per workload cluster in the fleet world, as the gates count.
        let cluster = self.cluster_of(&machine);
        let running: Vec<&String> = self
            .phases
            .values()
            .filter(|(_, p)| under_way(*p))
            .map(|(m, _)| m)
            .filter(|m| self.cluster_of(m) == cluster)
            .collect();
        self.peak_concurrent = self.peak_concurrent.max(running.len());
        if running.len() > self.max_concurrent {
            self.violations.push(format!(
                "invariant 4: {} remediations under way at once ({running:?}), maxConcurrent {}",
                running.len(),
                self.max_concurrent
            ));
        }
        let control_plane: Vec<&&String> = running
            .iter()
            .filter(|m| m.starts_with("master-") || m.contains("-master-"))
            .collect();
        if control_plane.len() > 1 {
            self.violations.push(format!(
                "invariant 4: control-plane hosts {control_plane:?} fenced at once"
            ));
        }
        // The quorum of three members: the single cluster's (a fleet cluster has one).
        if started && machine.starts_with("master-") {
            let others_ready = (0..3)
                .map(|i| format!("master-{i}"))
                .filter(|m| *m != machine)
                .filter(|m| self.ready.get(m).copied().unwrap_or(false))
                .count();
            // Three members: fencing one needs both others up to keep a quorum of two.
            if others_ready < 2 {
                self.violations.push(format!(
                    "invariant 4: {machine} fenced with {others_ready} other control-plane Nodes Ready"
                ));
            }
        }
    }

    /// What invariant 9 needs of a Remediation's change: the request it recorded, whether
    /// its power cycle is proven off (then it must complete if its request timed out), and
    /// no power-off requested again after it saw its request timed out.
    fn timeout_steps(&mut self, key: &str, remediation: &Remediation, object: &Value) {
        if let Some(uid) = remediation
            .spec
            .trigger
            .as_ref()
            .and_then(|t| t.uid.clone())
        {
            self.recorded_uid.insert(key.to_owned(), uid);
        }
        if proven(object) {
            self.proven.insert(key.to_owned());
        } else {
            self.proven.remove(key);
        }
        if self.proven.contains(key) && self.stopped_by_timeout.contains_key(key) {
            self.completing_after_timeout.insert(key.to_owned());
        }
        let offs: usize = POWER_OFF_REQUESTS
            .iter()
            .map(|s| step_count(object, s))
            .sum();
        self.power_off_requests.insert(key.to_owned(), offs);
        if let Some(then) = self.saw_timeout_at.get(key)
            && offs > *then
        {
            let steps: Vec<&str> = remediation
                .status
                .iter()
                .flat_map(|s| s.steps.iter().map(|t| t.step.as_str()))
                .collect();
            self.violations.push(format!(
                "invariant 9: {key} requested power-off again after it saw its NodeRemediation \
                 timed out (steps {steps:?})"
            ));
            self.saw_timeout_at.remove(key);
        }
    }

    /// Invariant 6, at the start of the remediation `key` of `machine`.
    fn check_trigger_fresh(&mut self, machine: &str, key: &str) {
        let epoch = self.trigger_epoch.get(machine).copied().unwrap_or(0);
        // A first start is judged too: a tenant's request is no trigger (invariant 10), so a
        // start it caused on a Machine started before is caught here. (A first start on no
        // trigger the checker saw is not judged: under load the checker may subscribe after
        // the first annotation; see docs/engineering/chaos.md.)
        if self.started_in.contains_key(machine) {
            self.judged.add(6);
        }
        if let Some((previous_epoch, previous)) = self.started_in.get(machine)
            && *previous_epoch == epoch
            && let Some(phase) = self
                .phases
                .get(previous)
                .map(|(_, p)| p)
                .or_else(|| self.ended_deleted.get(previous))
            && matches!(
                phase,
                RemediationPhase::Succeeded | RemediationPhase::Cancelled
            )
        {
            self.violations.push(format!(
                "invariant 6: {key} requested power-off on the trigger {previous} had already \
                 consumed ({phase:?}); the Machine's trigger did not appear again since"
            ));
        }
        self.started_in
            .insert(machine.to_string(), (epoch, key.to_string()));
    }

    /// The checks on the final state, after the cluster settled.
    pub fn finish(&mut self, remediations: &[Remediation], hosts: &HashMap<String, Arc<SimHost>>) {
        let still_out: Vec<String> = self.due_in_outage.keys().cloned().collect();
        for cluster in still_out {
            self.judge_outage(&cluster);
        }
        for bmc in std::mem::take(&mut self.tenant_bmcs) {
            self.judged.add(10);
            let connections = bmc.connections();
            if connections > 0 {
                self.violations.push(format!(
                    "invariant 10: the tenant's HostBmc endpoint for {} was connected to {connections} time(s)",
                    bmc.node
                ));
            }
        }
        for remediation in remediations {
            let name = remediation.metadata.name.clone().unwrap_or_default();
            let status = remediation.status.clone().unwrap_or_default();
            self.judged.add(2);
            if !status.steps.is_empty() {
                self.judged.add(5);
            }
            if !status.phase.is_terminal() {
                self.violations.push(format!(
                    "invariant 2: Remediation {name} stuck in {:?} (steps {:?}, last error {:?})",
                    status.phase,
                    status.steps.iter().map(|s| &s.step).collect::<Vec<_>>(),
                    status.last_error
                ));
            }
            let mut seen: HashMap<(String, u32), usize> = HashMap::new();
            for step in &status.steps {
                *seen
                    .entry((step.step.to_string(), step.attempt))
                    .or_default() += 1;
            }
            for ((step, attempt), count) in seen {
                let once = [
                    "PowerOffRequested",
                    "Fenced",
                    "NodeBackedUp",
                    "NodeDeleted",
                    "NodeTainted",
                    "PowerOnRequested",
                    "Succeeded",
                    "Failed",
                ];
                if count > 1 && once.contains(&step.as_str()) {
                    self.violations.push(format!(
                        "invariant 5: Remediation {name} did {step} {count} times in attempt {attempt}"
                    ));
                }
            }
        }
        let mut disks: Vec<(&String, &Arc<NodeDisk>)> = self.disks.iter().collect();
        disks.sort_by_key(|(node, _)| *node);
        for (node, disk) in disks {
            // Judged where a drift remediation ran: only there could the forcefile have been
            // written and left; a disk no attempt touched is exposure.
            if self.latest_drift.contains_key(node.as_str()) {
                self.judged.add(8);
            }
            if disk.get(FORCE_FILE).is_some() {
                self.violations.push(format!(
                    "invariant 8: {FORCE_FILE} left on {node} at the end"
                ));
            }
        }
        let latest = latest_per_machine(remediations);
        self.finish_timeouts(remediations, hosts, &latest);
        let mut names: Vec<&String> = hosts.keys().collect();
        names.sort();
        for name in names {
            if hosts[name].power() != Power::Off {
                continue;
            }
            self.judged.add(3);
            if !latest_failed(&latest, name) {
                let said = latest.get(name).and_then(|r| r.status.as_ref()).map(|s| {
                    let steps: Vec<&str> = s.steps.iter().map(|t| t.step.as_str()).collect();
                    format!("{:?} after {steps:?}", s.phase)
                });
                let power: Vec<String> = hosts[name]
                    .history()
                    .iter()
                    .map(|c| format!("{:?}@{}ms", c.power, c.at_ms))
                    .collect();
                self.violations.push(format!(
                    "invariant 3: host {name} is off and no Failed remediation says so \
                     (latest remediation: {said:?}; power changes: {power:?})"
                ));
            }
        }
    }
}

impl Checker {
    /// Invariant 9 on the final state: a host not left off by a remediation the timeout
    /// stopped before the proof (unless a later one of its Machine failed), and a cycle
    /// completed by one proven off whose request timed out.
    fn finish_timeouts(
        &mut self,
        remediations: &[Remediation],
        hosts: &HashMap<String, Arc<SimHost>>,
        latest: &HashMap<String, &Remediation>,
    ) {
        let mut stopped: Vec<(&String, &String)> = self
            .stopped_by_timeout
            .iter()
            .filter(|(key, _)| !self.completing_after_timeout.contains(*key))
            .collect();
        stopped.sort();
        let mut found = Vec::new();
        for (key, machine) in stopped {
            self.judged.add(9);
            let off = hosts.get(machine).is_some_and(|h| h.power() == Power::Off);
            if off && !latest_failed(latest, machine) {
                found.push(format!(
                    "invariant 9: host {machine} left off after the NodeHealthCheck timed out \
                     the request of {key} before the proof"
                ));
            }
        }
        for remediation in remediations {
            let name = remediation.metadata.name.clone().unwrap_or_default();
            let key = format!(
                "{}/{name}",
                remediation
                    .metadata
                    .namespace
                    .as_deref()
                    .unwrap_or_default()
            );
            if !self.completing_after_timeout.contains(&key) {
                continue;
            }
            self.judged.add(9);
            let status = remediation.status.clone().unwrap_or_default();
            let powered_on = status.steps.iter().any(|s| s.step == "PowerOnRequested");
            let completed = match status.phase {
                RemediationPhase::Cancelled => false,
                RemediationPhase::Failed => true,
                _ => powered_on,
            };
            if !completed {
                found.push(format!(
                    "invariant 9: {key} was proven off and its NodeRemediation timed out, and it \
                     ended {:?} without completing the cycle (power-on requested: {powered_on})",
                    status.phase
                ));
            }
        }
        self.violations.extend(found);
    }
}

impl Checker {
    /// The workload cluster of Machine (or host) `machine` in the fleet world.
    fn cluster_of(&self, machine: &str) -> Option<String> {
        self.fleet
            .as_ref()
            .and_then(|f| f.cluster_of.get(machine).cloned())
    }

    /// Invariant 11 on a Remediation's change: labelled with its Machine's shard.
    fn check_shard(&mut self, key: &str, machine: &str, remediation: &Remediation) {
        let Some(fleet) = &self.fleet else {
            return;
        };
        let Some(shard) = fleet
            .cluster_of
            .get(machine)
            .and_then(|c| fleet.shard_of.get(c))
            .cloned()
        else {
            self.unreadable.push(format!(
                "Remediation {key} is of {machine}, a Machine of no shard"
            ));
            return;
        };
        self.judged.add(11);
        let label = remediation
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SHARD_LABEL))
            .cloned();
        if label.as_deref() != Some(shard.as_str()) {
            self.violations.push(format!(
                "invariant 11: {key} of {machine} is labelled {SHARD_LABEL}={label:?}, not its \
                 cluster's shard {shard}"
            ));
        }
    }

    /// Invariant 11 on an Event: reported by a replica of the shard of the cluster whose
    /// Machine, Remediation or request it is about.
    fn event_reported(&mut self, event: &WatchEvent) {
        if !matches!(event.kind, EventType::Added) {
            return;
        }
        let object = &event.object;
        let controller = object
            .get("reportingController")
            .or_else(|| object.get("reportingComponent"))
            .and_then(Value::as_str);
        if controller != Some("baremend") {
            return;
        }
        let about = object
            .get("regarding")
            .or_else(|| object.get("involvedObject"))
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(fleet) = &self.fleet else {
            return;
        };
        let Some(shard) = fleet
            .cluster_named(about)
            .and_then(|c| fleet.shard_of.get(c))
            .cloned()
        else {
            return;
        };
        self.judged.add(11);
        let instance = object
            .get("reportingInstance")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !instance.starts_with(&format!("{shard}.")) {
            let reason = object.get("reason").and_then(Value::as_str);
            self.violations.push(format!(
                "invariant 11: {instance:?} reported {reason:?} about {about}, which only a \
                 replica of shard {shard} may act on"
            ));
        }
    }

    /// Invariant 12 on a Remediation's change: the Node steps it recorded while its
    /// workload cluster's API was down are true of that cluster's store.
    fn check_outage_steps(&mut self, key: &str, machine: &str, remediation: &Remediation) {
        let steps: Vec<&str> = remediation
            .status
            .iter()
            .flat_map(|s| s.steps.iter().map(|t| t.step.as_str()))
            .collect();
        let seen = self
            .steps_seen
            .insert(key.to_owned(), steps.len())
            .unwrap_or(0);
        let Some(cluster) = self.cluster_of(machine) else {
            return;
        };
        if !self.outages.contains(&cluster) {
            return;
        }
        if remediation.phase() == RemediationPhase::Fenced {
            self.due_in_outage
                .entry(cluster.clone())
                .or_default()
                .insert(key.to_owned());
        }
        let recorded_uid = remediation.status.as_ref().and_then(|s| s.node_uid.clone());
        let node = self.workload_nodes.get(machine).cloned();
        for step in steps.iter().skip(seen) {
            let untrue = match *step {
                "NodeAbsent" | "NodeDeleted" => node.as_ref().is_some_and(|(uid, _)| {
                    recorded_uid
                        .as_deref()
                        .is_none_or(|recorded| recorded == uid)
                }),
                "NodeTainted" => node.as_ref().is_none_or(|(_, tainted)| !tainted),
                _ => continue,
            };
            self.judged.add(12);
            if untrue {
                self.violations.push(format!(
                    "invariant 12: {key} recorded {step} while the API of workload cluster \
                     {cluster} was down, and its Node there is {node:?} (recorded UID \
                     {recorded_uid:?})"
                ));
            }
        }
    }
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
