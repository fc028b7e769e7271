//! What every pass of the drift coordinator shares: the client, the watch caches, the clock,
//! the recorder, the metrics and the leadership check. It knows nothing of the stages that
//! use it: the passes borrow it, the controller builds it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use super::classify::{ConfigState, classify};
use super::helper::HelperPods;
use super::observe::pool_of;
use crate::api::DriftStep;
use crate::api::mco::{MachineConfigNode, MachineConfigPool};
use crate::api::{DriftPolicy, DriftPolicySpec, DriftRemediation, Remediation};
use crate::leader::Leadership;
use crate::metrics::{Metrics, PolicyKind};
use crate::runtime::clock::Clock;
use crate::runtime::conditions::held_by;
use crate::runtime::informer::{is_ready, policy_object};
use crate::runtime::requeue::Backoff;

/// Options of the drift coordinator (`run` in `controller.rs` takes them).
#[derive(Debug, Clone)]
pub struct DriftOptions {
    /// The Events' reporting instance.
    pub instance: String,
    /// How soon to look again while waiting.
    pub poll: Duration,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Whether this replica may write.
    pub leadership: Leadership,
    /// How helper pods run; the image when the policy names none (the controller's own).
    pub helpers: HelperPods,
}

impl Default for DriftOptions {
    fn default() -> Self {
        DriftOptions {
            instance: "baremend".into(),
            poll: Duration::from_secs(2),
            metrics: Arc::new(Metrics::new()),
            leadership: Leadership::unconditional(),
            helpers: HelperPods::new("baremend:latest"),
        }
    }
}

/// The watch caches the drift passes read.
pub struct DriftCaches {
    /// Nodes (the shared watch's).
    pub nodes: Store<Node>,
    /// MachineConfigPools.
    pub pools: Store<MachineConfigPool>,
    /// MachineConfigNodes (empty where the API does not serve them).
    pub mcns: Store<MachineConfigNode>,
    /// Our drift remediations.
    pub remediations: Store<DriftRemediation>,
    /// Our machine remediations.
    pub machine_remediations: Store<Remediation>,
    /// Policies.
    pub policies: Store<DriftPolicy>,
}

/// What every pass shares.
pub struct DriftContext {
    /// The API client.
    pub client: Client,
    /// The watch caches: Nodes, pools, MachineConfigNodes, our drift and machine
    /// remediations, the policies.
    pub caches: DriftCaches,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Events.
    pub recorder: Recorder,
    /// How soon to look again while waiting.
    pub poll: Duration,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Whether this replica may write.
    pub leadership: Leadership,
    /// How helper pods run (the image when the policy names none).
    pub helpers: HelperPods,
    /// The not-drift reason last reported per node (one Event per change, not per pass).
    pub reported: Mutex<HashMap<String, String>>,
    /// Serializes start decisions: two nodes of a pool must not both pass the budget.
    pub starts: tokio::sync::Mutex<()>,
    /// Failures in a row per Node, for the requeue of transient ones.
    pub backoff: Backoff,
}

impl DriftContext {
    /// The context of a coordinator over `caches`, configured by `options`.
    pub fn new(
        client: Client,
        clock: Arc<dyn Clock>,
        caches: DriftCaches,
        options: DriftOptions,
    ) -> Self {
        let reporter = Reporter {
            controller: "baremend-drift".into(),
            instance: Some(options.instance.clone()),
        };
        DriftContext {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            caches,
            clock,
            poll: options.poll,
            metrics: options.metrics,
            leadership: options.leadership,
            helpers: options.helpers,
            reported: Mutex::new(HashMap::new()),
            starts: tokio::sync::Mutex::new(()),
            backoff: Backoff::default(),
        }
    }

    /// The policy in force: the object named `default`; without one, the defaults in
    /// `Observe` (see [`DriftPolicySpec::unconfigured`]).
    pub fn policy(&self) -> DriftPolicySpec {
        policy_object(&self.caches.policies, |p| &p.spec)
            .unwrap_or_else(DriftPolicySpec::unconfigured)
    }

    /// Whether every cache holds a full list.
    pub fn caches_ready(&self) -> bool {
        is_ready(&self.caches.nodes)
            && is_ready(&self.caches.pools)
            && is_ready(&self.caches.remediations)
            && is_ready(&self.caches.machine_remediations)
            && is_ready(&self.caches.policies)
    }

    /// Recounts the drift gauges per pool and the held starts from the caches.
    pub fn refresh_metrics(&self) {
        if !self.caches_ready() {
            return;
        }
        let missing = policy_object(&self.caches.policies, |p| &p.spec).is_none();
        self.metrics.set_policy_missing(PolicyKind::Drift, missing);
        let pools = self.caches.pools.state();
        let nodes = self.caches.nodes.state();
        let mut per_pool: HashMap<String, (usize, usize)> =
            pools.iter().map(|p| (p.name_any(), (0, 0))).collect();
        for node in &nodes {
            let Some(pool) = pool_of(node, &pools) else {
                continue;
            };
            let entry = per_pool.entry(pool.name_any()).or_default();
            match classify(node.annotations()) {
                ConfigState::Drifted(_) => entry.0 += 1,
                ConfigState::Degraded(_) => entry.1 += 1,
                _ => {}
            }
        }
        for (pool, (drifted, not_drift)) in per_pool {
            self.metrics.drift.set_pool(&pool, drifted, not_drift);
        }
        // Reboots our remediations caused in the last 24 hours, per node.
        let now = crate::runtime::clock::since_epoch(self.clock.now());
        let day = Duration::from_secs(86_400);
        let mut reboots: HashMap<(String, String), usize> = HashMap::new();
        for remediation in self.caches.remediations.state() {
            let key = (
                remediation.spec.node_name.clone(),
                remediation.spec.pool.clone(),
            );
            let count = remediation
                .status
                .iter()
                .flat_map(|s| &s.steps)
                .filter(|t| t.step == DriftStep::Rebooted)
                .filter(|t| {
                    now.saturating_sub(crate::runtime::clock::parse_rfc3339(&t.time)) <= day
                })
                .count();
            *reboots.entry(key).or_default() += count;
        }
        for ((node, pool), count) in reboots {
            self.metrics.drift.set_reboots(&node, &pool, count);
        }
        let mut held: Vec<(String, usize)> = Vec::new();
        for remediation in self.caches.remediations.state() {
            let Some(status) = &remediation.status else {
                continue;
            };
            if status.phase != crate::api::DriftPhase::Pending {
                continue;
            }
            if let Some(reason) = held_by(&status.conditions) {
                match held.iter_mut().find(|(r, _)| r == reason) {
                    Some(entry) => entry.1 += 1,
                    None => held.push((reason.to_string(), 1)),
                }
            }
        }
        let counts: Vec<(&str, usize)> = held.iter().map(|(r, n)| (r.as_str(), *n)).collect();
        self.metrics.drift.set_held(&counts);
    }
}
