//! The fleet world of a share of the chaos seeds: a Cluster API management cluster and
//! [`FLEET_CLUSTERS`] workload clusters (one control-plane host and [`FLEET_WORKERS`] workers
//! each), Cluster API's MachineHealthCheck naming baremend's template, and one shard per
//! workload cluster — a controller under its own Lease whose `--machine-selector` is its
//! cluster's Machines — with the faults of that world: a shard's leader dies
//! ([`Fault::ShardLeaderDies`]) and a workload cluster's API goes away
//! ([`Fault::WorkloadApiDown`]), each mid-remediation when one comes in time.
//!
//! Expected flow: [`spec`] the cluster → [`checker_map`] for the checker and
//! [`watch_workloads`] to feed it each workload cluster's changes → [`start_shards`] → the
//! faults through [`kill_shard_leader`], [`api_down`], [`hostile`] and [`hang_again`] →
//! [`FleetRun::finish`] before the cluster settles (every outage over) → the counts in
//! [`FleetTally`].
//! Guarantees: a shard's leader is killed without releasing its Lease (its task aborted, as
//! a pod killed), and only that shard's; an outage is marked in the checker only while the
//! API server is surely unreachable (after it goes, before it comes back).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baremend_sim::cluster::local::{LEASES, Local, MACHINE_REMEDIATIONS, NODES, SECRETS};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::workload::kubeconfig_secret_name;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use baremend_sim::host::SimHost;
use baremend_sim::hostile::{HostileApiServer, Hostility};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::check::{Checker, Fleet};
use super::plan::{FLEET_CLUSTERS, FLEET_WORKERS, Hostile, MID_REMEDIATION_WAIT, shard_lease};
use super::{REMEDIATIONS, Replica, Shard, start_replica};
use crate::lab::setup::{DEPLOY_NAMESPACE, LabCluster};

/// The cluster of the fleet world.
pub(super) fn spec(seed: u64, timing: Timing) -> ClusterSpec {
    ClusterSpec {
        cluster_api: true,
        workload_clusters: FLEET_CLUSTERS,
        masters: 1,
        workers: FLEET_WORKERS,
        timing,
        seed,
        // The health check reports every unhealthy Machine; our storm gate is what is tested.
        max_unhealthy: "100%".into(),
        ..ClusterSpec::default()
    }
}

/// The Machine selector of the shard serving `cluster` (Cluster API labels each Machine with
/// its Cluster).
pub(super) fn selector(cluster: &str) -> String {
    format!("cluster.x-k8s.io/cluster-name={cluster}")
}

/// Where the checker finds each Node's host and each cluster's shard.
pub(super) fn checker_map(lab: &LabCluster) -> Fleet {
    let mut fleet = Fleet::default();
    for info in lab.cluster.hosts() {
        let Some(cluster) = &info.cluster else {
            continue;
        };
        fleet
            .hosts
            .insert((cluster.clone(), info.node_name.clone()), info.name.clone());
        fleet.cluster_of.insert(info.name.clone(), cluster.clone());
        fleet.shard_of.insert(cluster.clone(), shard_lease(cluster));
    }
    fleet
}

/// A reader of workload cluster `cluster`'s store, in process (its reachability to clients
/// does not apply).
pub(super) fn workload_reader(lab: &LabCluster, cluster: &str) -> Option<Local> {
    let server = lab.cluster.workload_cluster(cluster)?.api_server();
    Some(Local::new(server.store().clone(), "chaos"))
}

/// Shows the checker every workload cluster's Nodes as they are, then each change as it is
/// committed, against the hosts' power at that instant.
pub(super) fn watch_workloads(
    lab: &LabCluster,
    checker: &Arc<Mutex<Checker>>,
    hosts: &HashMap<String, Arc<SimHost>>,
) {
    for cluster in lab.cluster.workload_clusters() {
        let name = cluster.name().to_owned();
        let store = cluster.api_server().store();
        {
            let mut checker = checker.lock().unwrap_or_else(|e| e.into_inner());
            for node in Local::new(store.clone(), "chaos").list(NODES, None) {
                checker.seed_node(Some(&name), &node);
            }
        }
        let checker = checker.clone();
        let hosts = hosts.clone();
        store.on_commit(Arc::new(move |change| {
            checker
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .observe_workload(&name, change, &hosts)
        }));
    }
}

/// `replicas` replicas of each cluster's shard, numbered from `next`.
pub(super) fn start_shards(lab: &LabCluster, replicas: usize, next: &mut usize) -> Vec<Replica> {
    let mut started = Vec::new();
    for cluster in lab.cluster.workload_clusters() {
        for _ in 0..replicas {
            started.push(start_shard_replica(lab, cluster.name(), next));
        }
    }
    started
}

/// A new replica of the shard of `cluster`.
pub(super) fn start_shard_replica(lab: &LabCluster, cluster: &str, next: &mut usize) -> Replica {
    let lease = shard_lease(cluster);
    let shard = Shard {
        lease: lease.clone(),
        selector: selector(cluster),
    };
    let replica = start_replica(lab, format!("{lease}.r{next}"), Some(shard));
    *next += 1;
    replica
}

/// What the fleet's faults did in a seed.
#[derive(Debug, Default, Clone, Copy)]
pub struct FleetTally {
    /// Shard leaders killed.
    pub leaders_killed: usize,
    /// Of those, killed while a remediation of their cluster was under way.
    pub killed_mid_remediation: usize,
    /// Workload API outages.
    pub outages: usize,
    /// Of those, begun while a remediation of their cluster was under way.
    pub outages_mid_remediation: usize,
    /// Workload clusters whose Secret named a hostile API server for a while.
    pub hostile: usize,
}

impl FleetTally {
    /// Adds another seed's counts.
    pub fn add(&mut self, other: &FleetTally) {
        self.leaders_killed += other.leaders_killed;
        self.killed_mid_remediation += other.killed_mid_remediation;
        self.outages += other.outages;
        self.outages_mid_remediation += other.outages_mid_remediation;
        self.hostile += other.hostile;
    }
}

/// The fleet's faults under way in a seed.
pub(super) struct FleetRun {
    /// The checker, told of each outage.
    pub checker: Arc<Mutex<Checker>>,
    /// What the faults did.
    pub tally: Arc<Mutex<FleetTally>>,
    /// The outages and hangs again, each ending by itself.
    pub tasks: Vec<JoinHandle<()>>,
}

impl FleetRun {
    /// Waits until every outage is over (each brings its API back) and every hang again
    /// made or given up.
    pub async fn finish(&mut self) -> FleetTally {
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        *self.tally.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether a remediation of a Machine of `cluster` is under way (past Pending, not ended).
fn under_way_in(api: &Local, cluster: &str) -> bool {
    api.list(REMEDIATIONS, Some(MACHINE_NAMESPACE))
        .iter()
        .any(|r| {
            let of_cluster = r
                .pointer("/spec/machineName")
                .and_then(Value::as_str)
                .is_some_and(|m| m.starts_with(&format!("{cluster}-")));
            let phase = r.pointer("/status/phase").and_then(Value::as_str);
            of_cluster
                && !matches!(
                    phase,
                    None | Some("Pending" | "Succeeded" | "Failed" | "Cancelled")
                )
        })
}

/// Kills the leader of the shard of `cluster` (no release) once a remediation of its
/// cluster is under way or [`MID_REMEDIATION_WAIT`] is over, and starts a new replica of
/// the shard after `restart_ms`.
pub(super) async fn kill_shard_leader(
    lab: &LabCluster,
    (cluster, restart_ms): (&str, u64),
    replicas: &mut Vec<Replica>,
    next: &mut usize,
    run: &FleetRun,
) {
    let deadline = Instant::now() + MID_REMEDIATION_WAIT;
    while !under_way_in(&lab.api, cluster) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let lease = shard_lease(cluster);
    let mid = under_way_in(&lab.api, cluster);
    let leader = lab
        .api
        .get(LEASES, DEPLOY_NAMESPACE, &lease)
        .ok()
        .and_then(|l| {
            l.pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
    // Its leader, else (none elected yet) one of its replicas.
    let index = replicas
        .iter()
        .position(|r| {
            leader
                .as_deref()
                .is_some_and(|l| l.starts_with(&format!("{}.", r.identity)))
        })
        .or_else(|| {
            replicas
                .iter()
                .position(|r| r.identity.starts_with(&format!("{lease}.")))
        });
    if let Some(index) = index {
        let dead = replicas.remove(index);
        dead.task.abort();
        let _ = dead.task.await;
        let mut tally = run.tally.lock().unwrap_or_else(|e| e.into_inner());
        tally.leaders_killed += 1;
        if mid {
            tally.killed_mid_remediation += 1;
        }
    }
    tokio::time::sleep(Duration::from_millis(restart_ms)).await;
    replicas.push(start_shard_replica(lab, cluster, next));
}

/// Takes workload cluster `cluster`'s API away for `for_ms` the moment a remediation of
/// that cluster requests power-off (or when `within` is over), in a task of its own.
pub(super) fn api_down(
    lab: &LabCluster,
    (cluster, for_ms): (&str, u64),
    within: Duration,
    run: &mut FleetRun,
) {
    let Some(server) = lab
        .cluster
        .workload_cluster(cluster)
        .map(|c| c.api_server().reachability().clone())
    else {
        return;
    };
    let api = lab.api.clone();
    let cluster = cluster.to_owned();
    let checker = run.checker.clone();
    let tally = run.tally.clone();
    run.tasks.push(tokio::spawn(async move {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline && !powering_off_in(&api, &cluster) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        server.set(false);
        let under_way = checker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .workload_api_down(&cluster, true);
        {
            let mut tally = tally.lock().unwrap_or_else(|e| e.into_inner());
            tally.outages += 1;
            if under_way > 0 {
                tally.outages_mid_remediation += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(for_ms)).await;
        checker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .workload_api_down(&cluster, false);
        server.set(true);
    }));
}

/// Points workload cluster `cluster`'s kubeconfig Secret at a hostile API server for
/// `for_ms` — the moment its health check asks for a Machine's remediation (before the start
/// connects to the cluster), or when `within` is over — then back at its own, in a task of
/// its own; invariant 13 then judges what the server managed to send (when it was asked
/// anything).
pub(super) fn hostile(
    lab: &LabCluster,
    (cluster, hostility, for_ms): (&str, Hostile, u64),
    within: Duration,
    run: &mut FleetRun,
) {
    let hostility = match hostility {
        Hostile::HugeBody => Hostility::HugeBody(1 << 30),
        Hostile::Drip => Hostility::Drip,
        Hostile::EndlessLine => Hostility::EndlessLine(
            workload_reader(lab, cluster)
                .map(|nodes| nodes.list(NODES, None))
                .unwrap_or_default(),
        ),
    };
    let (api, cluster) = (lab.api.clone(), cluster.to_owned());
    let (checker, tally) = (run.checker.clone(), run.tally.clone());
    run.tasks.push(tokio::spawn(async move {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline && !requested_in(&api, &cluster) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let secret = kubeconfig_secret_name(&cluster);
        let point = |value: &Value| {
            let patch = json!({"data": {"value": value}});
            api.merge(SECRETS, MACHINE_NAMESPACE, &secret, &patch, false)
        };
        let own = api
            .get(SECRETS, MACHINE_NAMESPACE, &secret)
            .map(|s| s["data"]["value"].clone());
        let server = HostileApiServer::start(hostility).await;
        let (own, server) = match (own, server) {
            (Ok(own), Ok(server)) => (own, server),
            (own, server) => {
                let why = format!("{:?} {:?}", own.err(), server.err());
                let mut checker = checker.lock().unwrap_or_else(|e| e.into_inner());
                checker.unreadable.push(format!(
                    "the hostile server of {cluster} cannot start: {why}"
                ));
                return;
            }
        };
        use base64::Engine;
        let hostile = base64::engine::general_purpose::STANDARD.encode(server.kubeconfig());
        let pointed = point(&Value::String(hostile)).is_ok();
        tokio::time::sleep(Duration::from_millis(for_ms)).await;
        let restored = point(&own);
        let mut checker = checker.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(error) = restored {
            checker
                .unreadable
                .push(format!("{cluster}'s Secret cannot be put back: {error:?}"));
        }
        checker.hostile_served(&cluster, server.requests(), server.most_sent());
        if pointed {
            tally.lock().unwrap_or_else(|e| e.into_inner()).hostile += 1;
        }
    }));
}

/// How long [`hang_again`] waits for the host's first remediation to succeed and its Node
/// to be Ready again.
const REHANG_WAIT: Duration = Duration::from_secs(10);

/// Hangs `host` again once a remediation of its Machine Succeeded, its Node is Ready in its
/// workload cluster and its health check withdrew its request (not at all if that does not
/// come within [`REHANG_WAIT`]), in a task the seed awaits before it settles.
///
/// The withdrawn request is what makes the second hang a new failure to the health check:
/// Cluster API's MachineHealthCheck deletes its request only once it sees the Machine
/// healthy, and keeps it while it does not. A host hung again before that (the check blind
/// for a moment, as when its cluster's Secret names another server) is still the old,
/// answered request, which starts nothing (invariant 6) — a stall the health check would
/// end only by seeing the Machine healthy.
pub(super) fn hang_again(lab: &LabCluster, host: &str, run: &mut FleetRun) {
    let Some(info) = lab.cluster.host(host) else {
        return;
    };
    let Some(workload) = info
        .cluster
        .as_deref()
        .and_then(|c| workload_reader(lab, c))
    else {
        return;
    };
    let (api, host, node) = (lab.api.clone(), host.to_owned(), info.node_name.clone());
    // What `SimCluster::hang` does, from the task: the host's kernel hangs.
    let faults = info.faults.clone();
    let hang = move || {
        faults
            .hung
            .store(true, std::sync::atomic::Ordering::Relaxed)
    };
    run.tasks.push(tokio::spawn(async move {
        let deadline = Instant::now() + REHANG_WAIT;
        while Instant::now() < deadline {
            let succeeded = api
                .list(REMEDIATIONS, Some(MACHINE_NAMESPACE))
                .iter()
                .any(|r| {
                    r.pointer("/spec/machineName").and_then(Value::as_str) == Some(host.as_str())
                        && r.pointer("/status/phase").and_then(Value::as_str) == Some("Succeeded")
                });
            let ready = workload
                .get(NODES, "", &node)
                .is_ok_and(|n| super::check::node_ready(&n));
            let withdrawn = api
                .get(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, &host)
                .is_err();
            if succeeded && ready && withdrawn {
                hang();
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }));
}

/// Whether a Machine of `cluster` has a remediation request (its health check's
/// `MachineRemediation`).
fn requested_in(api: &Local, cluster: &str) -> bool {
    api.list(MACHINE_REMEDIATIONS, Some(MACHINE_NAMESPACE))
        .iter()
        .any(|r| {
            r.pointer("/metadata/name")
                .and_then(Value::as_str)
                .is_some_and(|m| m.starts_with(&format!("{cluster}-")))
        })
}

/// Whether a remediation of a Machine of `cluster` is `PoweringOff` (has requested it).
fn powering_off_in(api: &Local, cluster: &str) -> bool {
    api.list(REMEDIATIONS, Some(MACHINE_NAMESPACE))
        .iter()
        .any(|r| {
            r.pointer("/spec/machineName")
                .and_then(Value::as_str)
                .is_some_and(|m| m.starts_with(&format!("{cluster}-")))
                && r.pointer("/status/phase").and_then(Value::as_str) == Some("PoweringOff")
        })
}
