//! The chaos harness: seeded, reproducible runs of the controller against the simulated
//! cluster under BMC faults (latency, 5xx, dropped connections, stuck or flapping power,
//! credential changes), API server faults (409, 429, 5xx, dropped or slow watches, 410 Gone),
//! controller crashes and restarts, leader changes, node hangs, false alarms and triggers
//! removed mid-flow, our reboot requests removed by someone else, and (in a share of the
//! seeds, which run the simulated Machine Config Operator) config drift whose re-apply the
//! MCO finishes late or whose helper pod hangs — with the invariants of [`check`] checked
//! over the recorded history.
//!
//! Each seed also draws, from a stream of its own ([`plan::health_check`]), the health check
//! that asks for remediation, and so the trigger its faults act on (`trigger`): OpenShift's
//! MachineHealthCheck annotating the Machine, the same MachineHealthCheck naming baremend's
//! `MachineRemediationTemplate` (a `MachineRemediation` per Machine), or a medik8s
//! NodeHealthCheck (a `NodeRemediation` per Node) whose escalation timeout falls before or
//! after the proof.
//!
//! A share of the seeds ([`plan::fleet`]) runs the fleet world instead ([`fleet`]): Cluster
//! API with two workload clusters, a shard per cluster, and the faults of that world — a
//! shard's leader killed mid-remediation, a workload cluster's API gone mid-remediation.
//!
//! `baremend lab --scenario chaos --seeds N [--first-seed S] [--jobs J]` runs seeds S..S+N
//! (`--seed-list` exactly the seeds listed: CI's curated set, `tests/chaos.rs`) and prints a
//! summary; a failing seed prints the command that replays it alone; `--per-seed` prints what
//! each seed judged.

pub mod check;
mod drift;
pub mod fleet;
pub mod judged;
pub mod plan;
mod settle;
mod tenant;
mod trigger;

pub use self::drift::DriftOutcome;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baremend_sim::apiserver::FaultRule;
use baremend_sim::cluster::local::{BMHS, Gvr, LEASES, Local, SECRETS};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use baremend_sim::host::{Faults, SimHost};
use base64::Engine;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use self::check::{Checker, TimeoutTally};
use self::judged::Judged;
use self::plan::{Fault, HealthCheck, WORKERS};
use self::settle::{list_remediations, settle};
use super::setup::LabCluster;
use crate::api::Remediation;
use crate::drift::controller::HelperPods;
use crate::leader::LeaseConfig;
use crate::metrics::Metrics;
use crate::remediation::controller::ControllerOptions;
use crate::remediation::world::workload::Lifetimes;
use crate::run::run_elected;
use crate::runtime::clock::SystemClock;
use crate::{Error, Result};

/// The simulated physics of a chaos run: as fast as the actors keep their order.
fn timing() -> Timing {
    Timing {
        power_delay: Duration::from_millis(60),
        boot_delay: Duration::from_millis(120),
        heartbeat: Duration::from_millis(40),
        node_grace: Duration::from_millis(250),
        monitor_period: Duration::from_millis(40),
        mhc_period: Duration::from_millis(40),
        unhealthy_timeout: Duration::from_millis(200),
        bmo_period: Duration::from_millis(40),
        // The MCO's (only seeds with a drift scenario run it): its retries and drains well
        // within the drift policy's deadlines of a second or more.
        mcd_period: Duration::from_millis(50),
        mcd_max_backoff: Duration::from_millis(400),
        drain_retry: Duration::from_millis(100),
        drain_threshold: Duration::from_secs(1),
        ..Timing::fast()
    }
}

/// Faults happen in this window; then every BMC and API fault is cleared and the cluster
/// must settle.
const FAULT_WINDOW: Duration = Duration::from_millis(2500);

/// What one seed did.
#[derive(Debug)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// Broken invariants, in words (empty: the seed passed).
    pub violations: Vec<String>,
    /// Remediations it created, by final phase.
    pub phases: HashMap<String, usize>,
    /// Faults it injected.
    pub faults: usize,
    /// The most remediations under way at once.
    pub peak_concurrent: usize,
    /// Nodes released on a lying (flapping) BMC's reading while the host was on, fenced over
    /// the BMC (each a violation of invariant 1).
    pub released_on_lies: usize,
    /// The same, fenced through the BareMetal Operator, whose reading of the BMC our own reads
    /// failed to void (each a violation of invariant 1).
    pub released_on_operator_lies: usize,
    /// Hosts whose BMC flapped at power-off and told a reader Off while the host was on:
    /// fenced over their BMC, and fenced through their BareMetal Operator.
    pub lied_at_power_off: (usize, usize),
    /// Remediations whose reboot request someone removed after the proof, made again.
    pub requests_remade: usize,
    /// Remediations that failed `FenceLost` (the proof could not be taken again).
    pub fence_lost: usize,
    /// The seed's config-drift scenario, if it drew one.
    pub drift: Option<DriftOutcome>,
    /// The health check it ran (the trigger its faults acted on).
    pub health_check: HealthCheck,
    /// Its remediations by the trigger they recorded.
    pub by_trigger: HashMap<String, usize>,
    /// When its NodeHealthCheck timed out requests.
    pub timeouts: TimeoutTally,
    /// How many cases each invariant judged.
    pub judged: Judged,
    /// What the fleet world's faults did (None: the seed ran the single cluster).
    pub fleet: Option<fleet::FleetTally>,
    /// How long it took.
    pub took: Duration,
}

impl SeedOutcome {
    /// One seed's line: `seed 7: 3.5 s; judged 1: 1, 2: 1, …; ended Failed 1, Succeeded 2;
    /// lied 0/1; fleet killed 1 (1 mid), outages 0 (0 mid), hostile 1` (no fleet part for a single
    /// cluster).
    pub fn line(&self) -> String {
        let mut ended: Vec<String> = self
            .phases
            .iter()
            .map(|(phase, count)| format!("{phase} {count}"))
            .collect();
        ended.sort();
        let fleet = self.fleet.as_ref().map_or(String::new(), |f| {
            format!(
                "; fleet killed {} ({} mid), outages {} ({} mid), hostile {}",
                f.leaders_killed,
                f.killed_mid_remediation,
                f.outages,
                f.outages_mid_remediation,
                f.hostile
            )
        });
        format!(
            "seed {}: {:.1} s; judged {}; ended {}; lied {}/{}{fleet}",
            self.seed,
            self.took.as_secs_f64(),
            self.judged,
            ended.join(", "),
            self.lied_at_power_off.0,
            self.lied_at_power_off.1,
        )
    }
}

/// Undoes a fault at its time (a fault that lasts `for_ms`).
type Restore = (Instant, Box<dyn FnOnce(&LabCluster) + Send>);

/// A controller replica in a task.
struct Replica {
    identity: String,
    task: JoinHandle<Result<()>>,
}

/// A shard of the fleet world: its Lease (also its label) and its Machines.
struct Shard {
    lease: String,
    selector: String,
}

/// Starts a replica (of `shard`, else of the single controller) that, like a pod, is
/// restarted (with a new identity) whenever its controller exits — as `baremend run` does
/// when it loses the Lease.
fn start_replica(lab: &LabCluster, identity: String, shard: Option<Shard>) -> Replica {
    let client = lab.controller_client.clone();
    let name = identity.clone();
    let (lease_name, machine_selector, machine_api) = match shard {
        Some(shard) => (
            shard.lease,
            Some(shard.selector),
            crate::api::slim::MachineApi::ClusterApi,
        ),
        None => ("baremend".to_owned(), None, Default::default()),
    };
    // The drift coordinator runs where the MCO does.
    let drift_helpers = lab
        .cluster
        .mco()
        .map(|_| HelperPods::new(drift::HELPER_IMAGE));
    let task = tokio::spawn(async move {
        for restart in 0u32.. {
            let identity = format!("{name}.{restart}");
            let options = ControllerOptions {
                instance: identity.clone(),
                poll: Duration::from_millis(50),
                metrics: Arc::new(Metrics::new()),
                drift_helpers: drift_helpers.clone(),
                // The power monitor reads the hosts fenced over their BMC too, as in
                // production (at chaos speed): its readings are evidence for the proof's.
                power_poll: Some(Duration::from_millis(150)),
                // A BMC seen contradicting itself is untrusted for a while at chaos speed,
                // well within the time the cluster has to settle.
                bmc_distrust: Duration::from_secs(3),
                machine_selector: machine_selector.clone(),
                machine_api,
                // A rewritten kubeconfig Secret is read within half a second of a pass
                // asking for its cluster (`Fault::HostileWorkload`), at chaos speed.
                workload_clusters: Lifetimes {
                    recheck: Duration::from_millis(500),
                    ..Lifetimes::default()
                },
                ..ControllerOptions::default()
            };
            let lease = LeaseConfig {
                // Where deploy/base/rbac.yaml grants the controller its Lease.
                namespace: crate::lab::setup::DEPLOY_NAMESPACE.into(),
                name: lease_name.clone(),
                identity,
                lease_duration: Duration::from_millis(1000),
                renew_deadline: Duration::from_millis(600),
                retry_period: Duration::from_millis(100),
            };
            let _ = run_elected(
                client.clone(),
                Arc::new(SystemClock),
                options,
                lease,
                std::future::pending(),
            )
            .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    });
    Replica { identity, task }
}

fn set_faults(host: &SimHost, change: impl FnOnce(&mut Faults)) {
    let mut faults = host.faults();
    change(&mut faults);
    host.set_faults(faults);
}

fn secret_password(lab: &LabCluster, host: &str, password: &str) {
    let encoded = base64::engine::general_purpose::STANDARD.encode(password);
    let _ = lab.api.merge(
        SECRETS,
        MACHINE_NAMESPACE,
        &format!("{host}-bmc-secret"),
        &json!({"data": {"password": encoded}}),
        false,
    );
}

/// Runs one seed.
pub async fn run_seed(seed: u64) -> Result<SeedOutcome> {
    let started = Instant::now();
    let plan = plan::plan(seed);
    let drift = plan.drift().cloned();
    let check = plan.health_check;
    let mut spec = if plan.fleet {
        fleet::spec(seed, timing())
    } else {
        ClusterSpec {
            masters: 3,
            workers: WORKERS,
            timing: timing(),
            seed,
            // The health check reports every unhealthy Machine; our storm gate is what is tested.
            max_unhealthy: "100%".into(),
            mco: drift.is_some(),
            // Three of the four workers: a drift start is held by the pool's budget only while
            // the others are all disrupted, never for good by one host a failed remediation
            // keeps off.
            mco_max_unavailable: json!(3),
            ..ClusterSpec::default()
        }
    };
    trigger::configure(check, &mut spec);
    let lab = LabCluster::start(spec).await?;
    trigger::prepare(&lab, check)?;
    lab.install_policy(plan.policy.clone()).await?;
    for host in &plan.detached {
        lab.detach(host)?;
    }
    if let Some(fault) = &drift {
        drift::prepare(&lab, fault).await?;
    }
    let hosts: HashMap<String, Arc<SimHost>> = lab
        .cluster
        .hosts()
        .iter()
        .map(|h| (h.name.clone(), h.host.clone()))
        .collect();
    let mut checker = Checker::new(plan.max_concurrent);
    checker.lying_bmcs = plan
        .events
        .iter()
        .filter_map(|(_, f)| match f {
            Fault::Flapping { host, .. } | Fault::FlappingBmc { host, .. } => {
                Some((host.clone(), plan.detached.contains(host)))
            }
            _ => None,
        })
        .collect();
    if plan.fleet {
        checker.fleet = Some(fleet::checker_map(&lab));
    }
    for node in lab.api.list(baremend_sim::cluster::local::NODES, None) {
        checker.seed_node(None, &node);
    }
    if let Some(mco) = lab.cluster.mco() {
        checker.disks = mco.disks.clone();
    }
    let checker = Arc::new(Mutex::new(checker));
    // Every change is judged as it is committed, against the hosts' power at that instant.
    {
        let checker = checker.clone();
        let hosts = hosts.clone();
        lab.cluster
            .api_server()
            .store()
            .on_commit(Arc::new(move |change| {
                checker
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .observe(change, &hosts)
            }));
    }
    fleet::watch_workloads(&lab, &checker, &hosts);
    let mut next_replica = 0;
    let mut replicas: Vec<Replica> = if plan.fleet {
        fleet::start_shards(&lab, plan.replicas, &mut next_replica)
    } else {
        next_replica = plan.replicas;
        (0..plan.replicas)
            .map(|i| start_replica(&lab, format!("replica-{i}"), None))
            .collect()
    };
    let mut fleet_run = fleet::FleetRun {
        checker: checker.clone(),
        tally: Arc::default(),
        tasks: Vec::new(),
    };
    let mut restores: Vec<Restore> = Vec::new();
    let mut scenario = None;
    let window_start = Instant::now();
    for (at, fault) in &plan.events {
        let due = window_start + *at;
        tokio::time::sleep_until(due.into()).await;
        if let Some(task) = drift::play(&lab, fault, check) {
            scenario = Some(task);
            continue;
        }
        apply(
            &lab,
            (fault, check),
            &hosts,
            (&mut replicas, &mut next_replica),
            &mut restores,
            &mut fleet_run,
        )
        .await;
        restores.sort_by_key(|(at, _)| *at);
        while restores
            .first()
            .is_some_and(|(at, _)| *at <= Instant::now())
        {
            let (_, restore) = restores.remove(0);
            restore(&lab);
        }
    }
    tokio::time::sleep_until((window_start + FAULT_WINDOW).into()).await;
    // The window is over: every fault is cleared, every restart made.
    for (_, restore) in restores.drain(..) {
        restore(&lab);
    }
    for host in hosts.values() {
        host.set_faults(Faults::default());
    }
    lab.cluster.api_server().clear_faults();
    if plan.fleet {
        // Every shard has a replica again (a death's restart is made at once in the window).
        for cluster in lab.cluster.workload_clusters() {
            let prefix = format!("{}.", plan::shard_lease(cluster.name()));
            if !replicas.iter().any(|r| r.identity.starts_with(&prefix)) {
                replicas.push(fleet::start_shard_replica(
                    &lab,
                    cluster.name(),
                    &mut next_replica,
                ));
            }
        }
    } else if replicas.is_empty() {
        replicas.push(start_replica(&lab, format!("replica-{next_replica}"), None));
    }
    // Every outage is over before the cluster must settle.
    let fleet_tally = fleet_run.finish().await;

    // The drift scenario follows its remediation beyond the window; it ends by itself.
    let played = match scenario {
        Some(task) => task.await.unwrap_or_else(|error| drift::Played {
            stalled: Some(format!("its task failed: {error}")),
            ..drift::Played::default()
        }),
        None => drift::Played::default(),
    };
    let settled = settle(&lab, check).await;
    let remediations = list_remediations(&lab).await?;
    for replica in &replicas {
        replica.task.abort();
    }
    let mut checker = std::mem::take(&mut *checker.lock().unwrap_or_else(|e| e.into_inner()));
    if let Err(why) = settled {
        checker.violations.push(format!("invariant 2: {why}"));
    }
    if let Some(what) = &played.stalled {
        checker.violations.push(format!(
            "invariant 2: the drift scenario waited in vain for {what}"
        ));
    }
    checker.finish(&remediations, &hosts);
    if !checker.unreadable.is_empty() {
        return Err(Error::Invalid {
            object: format!("the checker of seed {seed}"),
            reason: format!(
                "it could not read what it must judge: {}",
                checker.unreadable.join("; ")
            ),
        });
    }
    let (phases, requests_remade, fence_lost) = tally(&remediations);
    let drift = drift
        .as_ref()
        .and_then(|fault| drift::outcome(&lab.api, fault, &played));
    Ok(SeedOutcome {
        seed,
        health_check: check,
        by_trigger: by_trigger(&remediations),
        timeouts: checker.timeouts,
        judged: checker.judged,
        fleet: plan.fleet.then_some(fleet_tally),
        requests_remade,
        fence_lost,
        drift,
        violations: checker.violations,
        phases,
        faults: plan.events.len(),
        peak_concurrent: checker.peak_concurrent,
        released_on_lies: checker.released_on_lies,
        released_on_operator_lies: checker.released_on_operator_lies,
        lied_at_power_off: lied_at_power_off(&plan, &hosts),
        took: started.elapsed(),
    })
}

/// The hosts whose BMC flapped at power-off (`Fault::FlappingBmc`) and told someone Off
/// while the host was on: those fenced over their BMC, and those fenced through their
/// BareMetal Operator.
fn lied_at_power_off(plan: &plan::Plan, hosts: &HashMap<String, Arc<SimHost>>) -> (usize, usize) {
    let mut lied = (0, 0);
    for (_, fault) in &plan.events {
        let Fault::FlappingBmc { host, .. } = fault else {
            continue;
        };
        if hosts.get(host).is_none_or(|h| h.false_offs() == 0) {
            continue;
        }
        if plan.detached.contains(host) {
            lied.0 += 1;
        } else {
            lied.1 += 1;
        }
    }
    lied
}

/// The remediations of a seed by final phase, and how many had their reboot request made
/// again, or failed `FenceLost`.
fn tally(remediations: &[Remediation]) -> (HashMap<String, usize>, usize, usize) {
    let mut phases = HashMap::new();
    for remediation in remediations {
        let phase = remediation
            .status
            .as_ref()
            .map(|s| format!("{:?}", s.phase))
            .unwrap_or_else(|| "Pending".into());
        *phases.entry(phase).or_default() += 1;
    }
    let requests_remade = remediations
        .iter()
        .filter(|r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.power_off_request_remade)
        })
        .count();
    let fence_lost = remediations
        .iter()
        .filter(|r| {
            r.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Succeeded" && c.reason == "FenceLost")
            })
        })
        .count();
    (phases, requests_remade, fence_lost)
}

/// A seed's remediations by the kind of trigger they recorded.
fn by_trigger(remediations: &[Remediation]) -> HashMap<String, usize> {
    let mut kinds = HashMap::new();
    for remediation in remediations {
        let kind = remediation
            .spec
            .trigger
            .as_ref()
            .map(|t| format!("{:?}", t.kind))
            .unwrap_or_else(|| "none recorded".into());
        *kinds.entry(kind).or_default() += 1;
    }
    kinds
}

async fn apply(
    lab: &LabCluster,
    (fault, check): (&Fault, HealthCheck),
    hosts: &HashMap<String, Arc<SimHost>>,
    (replicas, next_replica): (&mut Vec<Replica>, &mut usize),
    restores: &mut Vec<Restore>,
    fleet_run: &mut fleet::FleetRun,
) {
    let later = |ms: u64| Instant::now() + Duration::from_millis(ms);
    let host_of = |name: &str| hosts.get(name).cloned();
    match fault {
        Fault::Hang(host) => {
            lab.cluster.hang(host);
        }
        Fault::BmcLatency { host, ms } => {
            if let Some(h) = host_of(host) {
                set_faults(&h, |f| f.latency_ms = *ms);
            }
        }
        Fault::BmcErrors {
            host,
            status,
            count,
        } => {
            if let Some(h) = host_of(host) {
                set_faults(&h, |f| {
                    f.error_status = Some(*status);
                    f.error_count = Some(*count);
                });
            }
        }
        Fault::BmcDrops { host, for_ms }
        | Fault::StuckPower { host, for_ms }
        | Fault::Flapping { host, for_ms } => {
            if let Some(h) = host_of(host) {
                let kind = fault.clone();
                set_faults(&h, |f| match kind {
                    Fault::BmcDrops { .. } => f.drop_connections = true,
                    Fault::StuckPower { .. } => f.stuck_power = true,
                    _ => f.flapping = true,
                });
                restores.push((
                    later(*for_ms),
                    Box::new(move |_| {
                        set_faults(&h, |f| {
                            f.drop_connections = false;
                            f.stuck_power = false;
                            f.flapping = false;
                        })
                    }),
                ));
            }
        }
        Fault::WrongCredentials { host, for_ms } => {
            secret_password(lab, host, "not-the-password");
            let host = host.clone();
            let password = lab.cluster.bmc_password().to_string();
            restores.push((
                later(*for_ms),
                Box::new(move |lab| secret_password(lab, &host, &password)),
            ));
        }
        Fault::Api {
            method,
            path,
            status,
            count,
        } => lab.cluster.api_server().inject(FaultRule {
            method: Some(method.clone()),
            path_contains: Some(path.clone()),
            status: *status,
            count: Some(*count),
            retry_after: None,
            delay_ms: 0,
        }),
        Fault::DropWatches => lab.cluster.api_server().drop_watches(),
        Fault::SlowWatch { path, ms } => lab.cluster.api_server().slow_watch(path, *ms),
        Fault::Compact => lab.cluster.api_server().compact(),
        Fault::Crash { restart_ms } => {
            // The leader dies if there is one (a standby's death changes little).
            let leader = lab
                .api
                .get(LEASES, crate::lab::setup::DEPLOY_NAMESPACE, "baremend")
                .ok()
                .and_then(|l| {
                    l.pointer("/spec/holderIdentity")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                });
            let index = replicas
                .iter()
                .position(|r| {
                    leader
                        .as_deref()
                        .is_some_and(|l| l.starts_with(&format!("{}.", r.identity)))
                })
                .unwrap_or(0);
            if index < replicas.len() {
                let dead = replicas.remove(index);
                dead.task.abort();
                let _ = dead.task.await;
            }
            tokio::time::sleep(Duration::from_millis(*restart_ms)).await;
            replicas.push(start_replica(lab, format!("replica-{next_replica}"), None));
            *next_replica += 1;
        }
        Fault::ShardLeaderDies { shard, restart_ms } => {
            fleet::kill_shard_leader(lab, (shard, *restart_ms), replicas, next_replica, fleet_run)
                .await;
        }
        Fault::HangAgain(host) => fleet::hang_again(lab, host, fleet_run),
        Fault::WorkloadApiDown { cluster, for_ms } => {
            fleet::api_down(lab, (cluster, *for_ms), FAULT_WINDOW, fleet_run);
        }
        Fault::HostileWorkload {
            cluster,
            hostility,
            for_ms,
        } => fleet::hostile(lab, (cluster, *hostility, *for_ms), FAULT_WINDOW, fleet_run),
        Fault::RemoveTrigger(machine) => trigger::remove(&lab.api, check, machine),
        Fault::FalseAlarm(machine) => {
            if let Some(uid) = trigger::set(&lab.api, check, machine) {
                let withdraw = (uid, trigger::WITHDRAW_AFTER);
                trigger::withdraw_when_ready(lab.api.clone(), check, machine.clone(), withdraw);
            }
        }
        Fault::RemoveRebootRequest(host) => {
            strike_at_fence(lab.api.clone(), host.clone(), FAULT_WINDOW);
        }
        Fault::FlappingBmc { host, for_ms } => {
            if let Some(h) = host_of(host) {
                flap_at_power_off(lab.api.clone(), h, host.clone(), *for_ms);
            }
        }
        // Played by `drift::play` (see `run_seed`), never applied here.
        Fault::LateMcoReboot(_) | Fault::PendingForceHelper { .. } => {}
        Fault::TenantRequest(node) => tenant::request(&lab.api, node),
        Fault::TenantHostBmc(node) => {
            let claimed = tenant::claim(&lab.api, node, lab.cluster.bmc_password()).await;
            let mut checker = fleet_run.checker.lock().unwrap_or_else(|e| e.into_inner());
            match claimed {
                Ok(endpoint) => checker.tenant_bmcs.push(endpoint),
                Err(error) => checker.unreadable.push(error),
            }
        }
        Fault::LaggingHostCache { host, ms } => {
            lab.cluster
                .api_server()
                .slow_watch("v1alpha1/baremetalhosts", *ms);
            strike_at_fence(lab.api.clone(), host.clone(), Duration::from_millis(*ms));
        }
    }
}

/// Our Remediations, read straight from the store.
const REMEDIATIONS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "remediations",
};

/// Returns once a remediation of Machine `host` is in `phase`, or once `within` is over.
async fn until_phase(api: &Local, host: &str, phase: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let reached = api
            .list(REMEDIATIONS, Some(MACHINE_NAMESPACE))
            .iter()
            .any(|r| {
                r.pointer("/spec/machineName").and_then(Value::as_str) == Some(host)
                    && r.pointer("/status/phase").and_then(Value::as_str) == Some(phase)
            });
        if reached {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Removes the host's reboot requests the moment its Machine's remediation is `Fenced` — the
/// window between the proof and the release lasts milliseconds, which a fault at a random
/// time would almost never hit — or when `within` is over, whichever comes first.
fn strike_at_fence(api: Local, host: String, within: Duration) {
    tokio::spawn(async move {
        until_phase(&api, &host, "Fenced", within).await;
        remove_reboot_requests(&api, &host);
    });
}

/// Makes the host's BMC flap the moment its Machine's remediation requests power-off (or
/// when the fault window is over), for `for_ms`: the proof's reads then meet a BMC that
/// answers On and Off in turn, to every reader.
fn flap_at_power_off(api: Local, host: Arc<SimHost>, name: String, for_ms: u64) {
    tokio::spawn(async move {
        until_phase(&api, &name, "PoweringOff", FAULT_WINDOW).await;
        set_faults(&host, |f| f.flapping = true);
        tokio::time::sleep(Duration::from_millis(for_ms)).await;
        set_faults(&host, |f| f.flapping = false);
    });
}

/// Removes every `reboot.metal3.io/…` annotation from the host's BareMetalHost, as someone
/// else would.
fn remove_reboot_requests(api: &Local, host: &str) {
    let Ok(bmh) = api.get(BMHS, MACHINE_NAMESPACE, host) else {
        return;
    };
    let removed: serde_json::Map<String, Value> = bmh
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(key, _)| key.starts_with("reboot.metal3.io/"))
        .map(|(key, _)| (key.clone(), Value::Null))
        .collect();
    if removed.is_empty() {
        return;
    }
    let patch = serde_json::json!({"metadata": {"annotations": removed}});
    let _ = api.merge(BMHS, MACHINE_NAMESPACE, host, &patch, false);
}

/// The seeds and remediations of each trigger, for the summary.
#[derive(Default)]
struct TriggerTally {
    seeds: HashMap<&'static str, usize>,
    remediations: HashMap<String, usize>,
    timeouts: TimeoutTally,
}

impl TriggerTally {
    fn add(&mut self, outcome: &SeedOutcome) {
        *self.seeds.entry(outcome.health_check.label()).or_default() += 1;
        for (kind, count) in &outcome.by_trigger {
            *self.remediations.entry(kind.clone()).or_default() += count;
        }
        self.timeouts.before_start += outcome.timeouts.before_start;
        self.timeouts.before_proof += outcome.timeouts.before_proof;
        self.timeouts.after_proof += outcome.timeouts.after_proof;
    }

    fn summary(&self) -> String {
        let list = |counts: Vec<(String, usize)>| {
            let mut counts = counts;
            counts.sort();
            counts
                .iter()
                .map(|(k, c)| format!("{k} {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let seeds = self.seeds.iter().map(|(k, c)| ((*k).to_owned(), *c));
        let remediations = self.remediations.iter().map(|(k, c)| (k.clone(), *c));
        let t = &self.timeouts;
        format!(
            "seeds by health check's trigger: {}; remediations by recorded trigger: {}; NodeHealthCheck timeouts before a start {}, before the proof {}, after it {}",
            list(seeds.collect()),
            list(remediations.collect()),
            t.before_start,
            t.before_proof,
            t.after_proof
        )
    }
}

/// Which seeds a chaos run runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seeds {
    /// `count` seeds from `first`.
    Range {
        /// The first seed.
        first: u64,
        /// How many.
        count: u64,
    },
    /// Exactly these (a curated set: see `tests/chaos.rs`).
    List(Vec<u64>),
}

impl Seeds {
    /// The seeds, in order.
    pub fn all(&self) -> Vec<u64> {
        match self {
            Seeds::Range { first, count } => (*first..first.saturating_add(*count)).collect(),
            Seeds::List(list) => list.clone(),
        }
    }

    /// How the summary names them: `200 seeds from 0`, or `12 listed seeds`.
    fn describe(&self) -> String {
        match self {
            Seeds::Range { first, count } => format!("{count} seeds from {first}"),
            Seeds::List(list) => format!("{} listed seeds", list.len()),
        }
    }
}

/// Runs the seeds, `jobs` at a time; prints failures as they come and a summary. An error
/// when any seed broke an invariant.
/// With `per_seed`, each seed's own line ([`SeedOutcome::line`]) is printed as it ends: what
/// one picks a curated set by.
pub async fn run(which: Seeds, jobs: usize, per_seed: bool) -> Result<()> {
    let started = Instant::now();
    let outcomes: Vec<Result<SeedOutcome>> = futures_util::stream::iter(which.all())
        .map(|seed| async move {
            let outcome = run_seed(seed).await;
            match &outcome {
                Ok(o) if !o.violations.is_empty() => {
                    println!("seed {seed}: {} violation(s):", o.violations.len());
                    for v in &o.violations {
                        println!("  - {v}");
                    }
                    println!(
                        "  replay: baremend lab --scenario chaos --first-seed {seed} --seeds 1"
                    );
                }
                Err(error) => println!("seed {seed}: harness error: {error}"),
                Ok(o) if per_seed => println!("{}", o.line()),
                Ok(_) => {}
            }
            outcome
        })
        .buffer_unordered(jobs.max(1))
        .collect()
        .await;
    let mut failed = Vec::new();
    let mut errors = 0;
    let mut phases: HashMap<String, usize> = HashMap::new();
    let mut faults = 0;
    let mut slowest = Duration::ZERO;
    let mut peak = 0;
    let (mut lies, mut relayed) = (0, 0);
    let mut lied = (0, 0);
    let (mut remade, mut lost) = (0, 0);
    let mut drift = drift::DriftTally::default();
    let mut triggers = TriggerTally::default();
    let mut judged = Judged::default();
    let mut fleet_worlds = 0;
    let mut fleet_tally = fleet::FleetTally::default();
    for outcome in &outcomes {
        match outcome {
            Ok(o) => {
                if !o.violations.is_empty() {
                    failed.push(o.seed);
                }
                for (phase, count) in &o.phases {
                    *phases.entry(phase.clone()).or_default() += count;
                }
                faults += o.faults;
                slowest = slowest.max(o.took);
                peak = peak.max(o.peak_concurrent);
                lies += o.released_on_lies;
                relayed += o.released_on_operator_lies;
                lied.0 += o.lied_at_power_off.0;
                lied.1 += o.lied_at_power_off.1;
                remade += o.requests_remade;
                lost += o.fence_lost;
                if let Some(scenario) = &o.drift {
                    drift.add(scenario);
                }
                triggers.add(o);
                judged.merge(&o.judged);
                if let Some(tally) = &o.fleet {
                    fleet_worlds += 1;
                    fleet_tally.add(tally);
                }
            }
            Err(_) => errors += 1,
        }
    }
    failed.sort();
    let mut phase_list: Vec<(String, usize)> = phases.into_iter().collect();
    phase_list.sort();
    println!(
        "chaos: {} in {:.1} s ({jobs} at a time, slowest {:.1} s): {} with violations, {errors} harness errors; {faults} faults injected; remediations {}; at most {peak} under way at once; flapping BMCs told a false Off at power-off on {} host(s) fenced over their BMC and {} through their BareMetal Operator; {lies} Node(s) released on a flapping BMC's false Off read by baremend, {relayed} on one relayed by the BareMetal Operator; {remade} reboot request(s) made again after someone removed them, {lost} FenceLost; cases judged per invariant: {judged} (none for {:?}); {}{}; fleet worlds {fleet_worlds}: shard leaders killed {} ({} mid-remediation), workload API outages {} ({} mid-remediation), hostile workload API servers {}",
        which.describe(),
        started.elapsed().as_secs_f64(),
        slowest.as_secs_f64(),
        failed.len(),
        phase_list
            .iter()
            .map(|(p, c)| format!("{p} {c}"))
            .collect::<Vec<_>>()
            .join(", "),
        lied.0,
        lied.1,
        judged.idle(),
        triggers.summary(),
        drift.summary(),
        fleet_tally.leaders_killed,
        fleet_tally.killed_mid_remediation,
        fleet_tally.outages,
        fleet_tally.outages_mid_remediation,
        fleet_tally.hostile,
    );
    if failed.is_empty() && errors == 0 {
        Ok(())
    } else {
        Err(Error::Invalid {
            object: "the chaos run".into(),
            reason: format!(
                "seeds with violations: {failed:?}; {errors} harness errors (replay one with --first-seed N --seeds 1)"
            ),
        })
    }
}
