//! What every reconcile of the remediation controller shares: the client, the watch caches,
//! the BMC connections, the clock, the recorder, the metrics and the leadership check. It
//! knows nothing of the stages that use it (no back-edges): the passes borrow it, the
//! controller builds it.

use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::Connector;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList;
use kube::Client;
use kube::api::ApiResource;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;

use crate::api::slim;
use crate::api::{
    Gate, HostBmc, MachineRemediation, NodeRemediation, Remediation, RemediationPhase,
    RemediationPolicy, RemediationPolicySpec,
};
use crate::drift::helper::HelperPods;
use crate::leader::Leadership;
use crate::metrics::{Metrics, PolicyKind};
use crate::remediation::decide::bmc_trust::{BmcLedger, DEFAULT_DISTRUST};
use crate::remediation::decide::gates::Launched;
use crate::remediation::decide::workload::ClusterRef;
use crate::remediation::world::bmc_cache::DriverCache;
use crate::remediation::world::machine_index::MachineIndex;
use crate::remediation::world::witnessed::Witness;
use crate::remediation::world::workload::{Lifetimes, WorkloadClusters};
use crate::runtime::clock::{Clock, since_epoch};
use crate::runtime::conditions::held_by;
use crate::runtime::informer::{is_ready, policy_object};
use crate::runtime::key_index::KeyIndex;
use crate::runtime::ready_index::ReadyIndex;
use crate::runtime::requeue::Backoff;

/// The Machine resource (machine.openshift.io/v1beta1), for writes.
pub fn machine_resource() -> ApiResource {
    ApiResource::erase::<slim::Machine>(&())
}

/// The BareMetalHost resource (metal3.io/v1alpha1), for writes.
pub fn host_resource() -> ApiResource {
    ApiResource::erase::<slim::BareMetalHost>(&())
}

/// Options of the controller (`run` in `controller.rs` takes them).
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// The Events' reporting instance (e.g. the pod name).
    pub instance: String,
    /// How soon to look again while waiting.
    pub poll: Duration,
    /// Told each step right after it is persisted, before it acts (tests and labs: see
    /// [`PersistHook`]). None in production.
    pub after_persist: Option<PersistHook>,
    /// Where the metrics go (the caller serves them, see [`crate::metrics::serve`]).
    pub metrics: Arc<Metrics>,
    /// Whether this replica may write (see [`crate::leader`]).
    pub leadership: Leadership,
    /// A label selector on Machines: this replica's shard (all Machines when None).
    pub machine_selector: Option<String>,
    /// A label selector on BareMetalHosts: the hosts this replica watches (all when None).
    pub host_selector: Option<String>,
    /// Read every known host's power this often into `baremend_host_power_state` (None: off).
    pub power_poll: Option<Duration>,
    /// Spreads the power reads over the interval (see the power monitor, `monitor.rs`), and
    /// the fencing readiness checks over theirs.
    pub power_poll_seed: u64,
    /// Check every fencing path this often into `baremend_fencing_ready` (None: off; see
    /// `fencing_check.rs`).
    pub fencing_check: Option<Duration>,
    /// Also run the config-drift coordinator (see [`crate::drift`]) where the API serves
    /// MachineConfigPools, with helper pods run this way. None: not at all.
    pub drift_helpers: Option<HelperPods>,
    /// Where this replica runs (see [`Placement`]).
    pub placement: Option<Placement>,
    /// Which Machine API the cluster's Machines come from.
    pub machine_api: slim::MachineApi,
    /// How long a BMC seen contradicting itself stays untrustworthy (see `bmc_trust`).
    pub bmc_distrust: Duration,
    /// How the connections to Cluster API workload clusters are kept (see `world::workload`).
    pub workload_clusters: Lifetimes,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            instance: "baremend".into(),
            poll: Duration::from_secs(1),
            after_persist: None,
            metrics: Arc::new(Metrics::new()),
            leadership: Leadership::unconditional(),
            machine_selector: None,
            host_selector: None,
            power_poll: None,
            power_poll_seed: 0,
            fencing_check: None,
            drift_helpers: None,
            placement: None,
            machine_api: slim::MachineApi::default(),
            bmc_distrust: DEFAULT_DISTRUST,
            workload_clusters: Lifetimes::default(),
        }
    }
}

/// The watch caches a controller's passes read.
pub struct Caches {
    /// Machines (the controller's own store).
    pub machines: Store<slim::Machine>,
    /// BareMetalHosts.
    pub hosts: Store<slim::BareMetalHost>,
    /// Those hosts by the Metal3Machine that consumes them (`host_consumer`), kept beside them.
    pub host_consumers: KeyIndex<slim::BareMetalHost>,
    /// Nodes (the shared watch's).
    pub nodes: Store<Node>,
    /// Each of those Nodes' readiness, kept beside them.
    pub node_ready: ReadyIndex,
    /// What the count of the fleet's health asks of each Machine, kept beside them.
    pub machine_facts: MachineIndex,
    /// Remediations.
    pub remediations: Store<Remediation>,
    /// Policies.
    pub policies: Store<RemediationPolicy>,
    /// BMC mappings.
    pub host_bmcs: Store<HostBmc>,
    /// Cluster API remediation requests (`MachineRemediation`).
    pub machine_requests: Store<MachineRemediation>,
    /// NodeHealthCheck remediation requests (`NodeRemediation`).
    pub node_requests: Store<NodeRemediation>,
}

/// Handles on the world a pass reads and writes through.
pub struct Clients {
    /// The API client.
    pub kube: Client,
    /// Events.
    pub recorder: Recorder,
    /// BMC drivers, one request gate per BMC.
    pub connector: Connector,
    /// The BMC drivers of remediations under way, one login each.
    pub bmc_drivers: DriverCache,
    /// The Cluster API workload clusters where Machines' Nodes live, connected on first need.
    pub workloads: WorkloadClusters,
}

/// How this controller was configured (fixed for its life).
pub struct Settings {
    /// How soon to look again while waiting for a BMC or a Node.
    pub poll: Duration,
    /// Told each step right after it is persisted (see [`PersistHook`]).
    pub after_persist: Option<PersistHook>,
    /// Whether the power monitor runs: then the remediations' own BMC reads feed the power
    /// state of the hosts they remediate (the monitor leaves those hosts to them).
    pub power_monitored: bool,
    /// The API server knows the out-of-service taint (Kubernetes ≥ 1.28).
    pub out_of_service_taint: bool,
    /// Where this replica runs, for the self-fence gate (None: not known, not checked).
    pub placement: Option<Placement>,
    /// Which Machine API the Machines come from.
    pub machine_api: slim::MachineApi,
    /// The label selector of the BareMetalHosts watched (None: every host): a host outside it
    /// is absent from `hosts` although it exists (the `HostNotWatched` gate).
    pub host_selector: Option<String>,
}

/// What every reconcile shares: the watch caches, the handles on the world, the settings,
/// and the state passes keep between them.
pub struct Context {
    /// The watch caches.
    pub caches: Caches,
    /// The API client, the Event recorder, the BMC drivers, the workload clusters.
    pub clients: Clients,
    /// How this controller was configured.
    pub settings: Settings,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Whether this replica may write: the only source of the [`crate::leader::Writes`] every
    /// writer takes.
    pub leadership: Leadership,
    /// Serializes start decisions and remembers the starts the cache may not show yet.
    pub starts: tokio::sync::Mutex<Launched>,
    /// Failures in a row per Machine, for the requeue of transient ones.
    pub backoff: Backoff,
    /// The NodeHealthChecks last read (None: not read yet), for the trust of requests (see
    /// `admission.rs`).
    pub health_checks:
        std::sync::RwLock<Option<Vec<crate::remediation::decide::trust::HealthCheck>>>,
    /// Every BMC reading of the process, and the clock they are stamped with: every reader
    /// (fencing, monitor, probes) reads through it.
    pub witness: Witness,
    /// The API groups the last discovery found served (None: none has been made yet): a start
    /// makes the reads it would make after its own discovery beside it instead, where the last
    /// one found their groups served — the other remediators' kinds (see
    /// `Foreign::foreign_objects`), OpenShift's ClusterVersion (see `StartGates::read_fresh`);
    /// never evidence by itself.
    pub discovered: std::sync::Mutex<Option<APIGroupList>>,
}

/// An observer of persisted steps that tests and labs pass in: told the name of each step
/// right after it is persisted and before it acts; an `Err` abandons the pass there, which is
/// what a crash at that point leaves behind.
#[derive(Clone)]
pub struct PersistHook(pub Arc<PersistFn>);

/// What a [`PersistHook`] calls: `Err` abandons the pass.
pub type PersistFn = dyn Fn(&str) -> std::result::Result<(), ()> + Send + Sync;

impl std::fmt::Debug for PersistHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PersistHook")
    }
}

/// Where this replica runs and how to find its peers: the self-fence gate holds the fencing
/// of this replica's own Node until a peer is Ready elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The Node this pod runs on (`spec.nodeName`, from the Downward API).
    pub node: String,
    /// This pod's namespace.
    pub namespace: String,
    /// This pod's name.
    pub pod: String,
    /// The label selector of the controller's pods (its replicas).
    pub peers: String,
}

impl Context {
    /// The Nodes of this cluster a Machine names (see [`super::subject::machine_nodes`]).
    pub fn local_machine_nodes(&self) -> std::collections::HashSet<String> {
        let provider_id_of = |name: &str| self.cached_provider_id(name);
        super::subject::machine_nodes(
            &self.caches.machines.state(),
            self.settings.machine_api,
            provider_id_of,
        )
    }

    /// Whether a Machine names `node`, a Node of this cluster (a workload cluster's Node of
    /// that name is another Node): only the Machines naming it are looked at.
    pub fn node_has_machine(&self, node: &str) -> bool {
        let machines = self.caches.machines.state();
        machines
            .iter()
            .filter(|m| m.node_name() == Some(node))
            .any(|m| {
                let provider_id_of = |name: &str| self.cached_provider_id(name);
                super::subject::names_node_here(
                    m,
                    &machines,
                    self.settings.machine_api,
                    provider_id_of,
                )
            })
    }

    /// The workload clusters the cached Machines' Nodes live in (see
    /// [`crate::remediation::decide::workload::workload_clusters`]).
    pub fn workload_clusters(&self) -> Vec<ClusterRef> {
        let machines = self.caches.machines.state();
        crate::remediation::decide::workload::workload_clusters(&machines, |name| {
            self.cached_provider_id(name)
        })
    }

    /// Whether the Node cache has `name` (None: no), and its providerID.
    pub(in crate::remediation) fn cached_provider_id(&self, name: &str) -> Option<Option<String>> {
        let node = self
            .caches
            .nodes
            .get(&kube::runtime::reflector::ObjectRef::new(name))?;
        Some(node.spec.as_ref().and_then(|s| s.provider_id.clone()))
    }

    /// The context of a controller over `caches`, configured by `options`.
    pub fn new(
        client: Client,
        clock: Arc<dyn Clock>,
        caches: Caches,
        options: ControllerOptions,
        out_of_service_taint: bool,
    ) -> Self {
        let reporter = Reporter {
            controller: "baremend".into(),
            instance: Some(options.instance.clone()),
        };
        let workloads =
            WorkloadClusters::new(client.clone(), clock.clone(), options.workload_clusters);
        Context {
            clients: Clients {
                recorder: Recorder::new(client.clone(), reporter),
                kube: client,
                connector: Connector::new(),
                bmc_drivers: DriverCache::default(),
                workloads,
            },
            caches,
            settings: Settings {
                poll: options.poll,
                after_persist: options.after_persist,
                power_monitored: options.power_poll.is_some(),
                out_of_service_taint,
                placement: options.placement,
                machine_api: options.machine_api,
                host_selector: options.host_selector,
            },
            metrics: options.metrics,
            starts: tokio::sync::Mutex::new(Launched::new()),
            leadership: options.leadership,
            backoff: Backoff::default(),
            health_checks: std::sync::RwLock::new(None),
            discovered: std::sync::Mutex::new(None),
            witness: Witness {
                ledger: Arc::new(BmcLedger::new(options.bmc_distrust)),
                clock: clock.clone(),
            },
            clock,
        }
    }

    /// Whether every cache holds a full list. Acting on a half-filled cache would be acting
    /// on a wrong picture: without the policy, on built-in defaults the operator replaced;
    /// without all Machines, on wrong storm and quorum counts. Checked without waiting, so the
    /// controller keeps polling the watches that fill the caches.
    pub fn caches_ready(&self) -> bool {
        is_ready(&self.caches.machines)
            && is_ready(&self.caches.hosts)
            && is_ready(&self.caches.nodes)
            && is_ready(&self.caches.remediations)
            && is_ready(&self.caches.policies)
            && is_ready(&self.caches.host_bmcs)
            && is_ready(&self.caches.machine_requests)
            && is_ready(&self.caches.node_requests)
            // The requests' trust rests on the NodeHealthChecks: a request judged before they
            // were read would be passed over, and nothing would wake it again.
            && self
                .health_checks
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .is_some()
    }

    /// Recounts the gauges from the caches: remediations in progress, starts held per gate.
    pub fn refresh_metrics(&self) {
        let ready = self.caches_ready();
        self.metrics.set_ready(ready);
        if !ready {
            return;
        }
        let mut in_progress = 0;
        let mut held: Vec<(&str, usize)> = Gate::ALL.iter().map(|g| (g.as_str(), 0)).collect();
        for remediation in self.caches.remediations.state() {
            let Some(status) = &remediation.status else {
                continue;
            };
            if status.phase.is_terminal() {
                continue;
            }
            if status.phase != RemediationPhase::Pending {
                in_progress += 1;
                continue;
            }
            if let Some(gate) = held_by(&status.conditions)
                && let Some(entry) = held.iter_mut().find(|(g, _)| *g == gate)
            {
                entry.1 += 1;
            }
        }
        self.metrics.set_counts(in_progress, &held);
        // The HostBmcs refused now, of Nodes and of Machines (the ContestedNode alert reads it).
        let mappings = self.caches.host_bmcs.state();
        // Every Machine's Node, gathered each second only when a HostBmc may claim one: a
        // walk of every Machine that competes with the starts for the CPU.
        let machine_nodes = if mappings.is_empty() {
            std::collections::HashSet::new()
        } else {
            self.local_machine_nodes()
        };
        let trusted = self.policy().trust.host_bmc_namespaces;
        let claims = crate::remediation::decide::trust::machineless_claims(
            &mappings,
            &trusted,
            &machine_nodes,
        );
        let of_machines = crate::remediation::decide::trust::machine_claims(&mappings, &trusted);
        let reasons: Vec<(&str, usize)> = claims
            .refused
            .iter()
            .map(|(_, r)| r)
            .chain(of_machines.iter().filter_map(|(_, r)| r.as_ref()))
            .map(|r| (r.reason().as_str(), 1))
            .collect();
        self.metrics.set_host_bmcs_refused(&reasons);
        self.metrics
            .set_policy_missing(PolicyKind::Remediation, !self.policy_configured());
        let now = since_epoch(self.clock.now());
        self.metrics
            .power
            .set_untrustworthy(&self.witness.ledger.untrustworthy(now));
    }

    /// The policy in force: the object named `default`; without one, the defaults in
    /// `DryRun` (see [`RemediationPolicySpec::unconfigured`]).
    pub fn policy(&self) -> RemediationPolicySpec {
        policy_object(&self.caches.policies, |p| &p.spec)
            .unwrap_or_else(RemediationPolicySpec::unconfigured)
    }

    /// Whether the policy object `default` exists.
    pub fn policy_configured(&self) -> bool {
        policy_object(&self.caches.policies, |p| &p.spec).is_some()
    }
}
