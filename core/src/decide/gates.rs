//! The safety gates a remediation must pass before it starts. Pure: counts in, verdict out.
//! They only hold new starts; a remediation already under way always finishes its cycle, so
//! that no host is left off by a gate closing behind it.

use std::collections::HashMap;
use std::time::Duration;

use crate::api::{Gate, NodeReleaseMode, RemediationPhase, RemediationPolicySpec};

/// Starts made by this process that the Remediation list may not show yet, by (namespace,
/// Remediation name), with their Machine and the order they were made in.
///
/// The order lets a list read *before* a start was made leave that start alone: such a list
/// lacks it because it predates it, not because it was deleted (the start's fresh reads run
/// outside the lock that serialises the decision, so one may overtake another's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launched {
    starts: HashMap<(String, String), (String, u64)>,
    made: u64,
}

/// How far a list of Remediations can be trusted to show this process's starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListFreshness {
    /// The watch cache: it may lag by any amount, so a start it lacks is kept.
    Cached,
    /// Read from the API server after [`Launched::mark`] returned this: a start made before
    /// the mark that the list lacks was deleted; one made after it may simply be newer.
    ReadAfter(u64),
}

impl Launched {
    /// No starts.
    pub fn new() -> Self {
        Launched::default()
    }

    /// Remembers a start this process just persisted.
    pub fn insert(&mut self, key: (String, String), machine: String) {
        self.made += 1;
        self.starts.insert(key, (machine, self.made));
    }

    /// The mark to take before reading a fresh list (see [`ListFreshness::ReadAfter`]).
    pub fn mark(&self) -> u64 {
        self.made
    }

    /// How many starts are remembered.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }
}

/// A Remediation as the start gates count it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its Machine.
    pub machine: String,
    /// Its phase.
    pub phase: RemediationPhase,
}

/// The Machines whose remediation is under way, besides the Remediation `this`: the listed
/// ones past `Pending` and not ended, and the starts this process made that the list does not
/// show past `Pending` yet (a lagging cache may not show them at all).
///
/// Forgets the starts the list shows past `Pending` (they count through the list now) and, on
/// a list read fresh after a start was made, the starts it lacks: those were deleted or have
/// ended (a start's fresh read leaves out the ones that hold nothing). A cached list, or a
/// fresh one read before the start, that lacks one proves nothing, so it is kept.
pub fn running_machines(
    listed: &[Listed],
    launched: &mut Launched,
    this: &str,
    freshness: ListFreshness,
) -> Vec<String> {
    launched.starts.retain(|(namespace, name), (_, made)| {
        let seen = listed
            .iter()
            .find(|r| r.namespace == *namespace && r.name == *name);
        match (seen, freshness) {
            (Some(r), _) => r.phase == RemediationPhase::Pending,
            (None, ListFreshness::Cached) => true,
            (None, ListFreshness::ReadAfter(mark)) => *made > mark,
        }
    });
    let mut running: Vec<String> = listed
        .iter()
        .filter(|r| r.phase != RemediationPhase::Pending && !r.phase.is_terminal())
        .filter(|r| r.name != this)
        .map(|r| r.machine.clone())
        .collect();
    running.extend(
        launched
            .starts
            .iter()
            .filter(|((_, name), _)| name != this)
            .map(|(_, (machine, _))| machine.clone()),
    );
    running
}

/// The fleet, as counted by the reconciler when a remediation wants to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fleet {
    /// Machines in scope.
    pub machines: usize,
    /// Unhealthy machines: carrying the external-remediation trigger or with a Node that is
    /// not Ready (this one included). A storm shows in Node readiness before health checks
    /// time out, so counting both keeps the first trigger of a storm from slipping through.
    pub unhealthy: usize,
    /// Remediations started and not ended (this one excluded), of the Machines in the
    /// candidate's failure domain (its Cluster API Cluster, else every Machine).
    pub running: usize,
    /// The same over every Machine this controller serves (the shard's ceiling).
    pub running_total: usize,
    /// Of those, on control-plane machines.
    pub running_control_plane: usize,
    /// Control-plane machines.
    pub control_plane: usize,
    /// Control-plane Nodes Ready now.
    pub control_plane_ready: usize,
    /// The API server knows the out-of-service taint (Kubernetes ≥ 1.28).
    pub out_of_service_taint: bool,
}

/// The Machines' health, as the gates need it (without the remediations under way).
#[derive(Debug, Clone, Default)]
pub struct FleetHealth {
    /// Machines in scope.
    pub machines: usize,
    /// Machines carrying the trigger or with a Node that is not Ready.
    pub unhealthy: usize,
    /// The control-plane Machines, by name.
    pub control_plane: std::collections::HashSet<String>,
    /// Of those, the ones whose Node is Ready now.
    pub control_plane_ready: usize,
    /// The Machines counted, by name, when they are one Cluster API Cluster's (the
    /// candidate's failure domain); None: every Machine in scope.
    pub members: Option<std::collections::HashSet<String>>,
    /// The Node of each control-plane member that has one: what a control-plane start reads
    /// again from the API server before the quorum guard judges (see
    /// [`FleetHealth::with_fresh_control_plane`]).
    pub control_plane_nodes: Vec<String>,
    /// The candidate's Node readiness read from the API server (None: not read, the cached
    /// Node's is used).
    pub candidate_ready: Option<bool>,
}

impl FleetHealth {
    /// The health with the control plane's readiness as read from the API server just now:
    /// `ready` holds each Node of [`FleetHealth::control_plane_nodes`] that was found, and
    /// whether it is Ready (one not found is not Ready); `candidate`: the candidate's Node.
    ///
    /// Why: the count is the caches', and a Node's watch may lag behind the request that
    /// names another member: the quorum guard must not let a control-plane start go on a
    /// member it still believes Ready.
    pub fn with_fresh_control_plane(
        mut self,
        ready: &HashMap<String, bool>,
        candidate: Option<&str>,
    ) -> FleetHealth {
        let is_ready = |node: &str| ready.get(node).copied().unwrap_or(false);
        self.control_plane_ready = self
            .control_plane_nodes
            .iter()
            .filter(|node| is_ready(node))
            .count();
        self.candidate_ready = Some(candidate.is_some_and(is_ready));
        self
    }
}

/// The machine that wants to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// A control-plane machine.
    pub control_plane: bool,
    /// Its Node is Ready now (fencing it removes one Ready member).
    pub node_ready: bool,
}

/// Which gate holds, and why; the reason becomes the `Held` condition and an Event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Held {
    /// The policy is paused (`spec.paused`).
    #[error(
        "the RemediationPolicy is paused (spec.paused): nothing new starts; remediations under way finish their cycle"
    )]
    Paused,
    /// `maxConcurrent` remediations are running.
    #[error("{running} remediation(s) running, the policy allows {max} at once")]
    Concurrency {
        /// Running now.
        running: usize,
        /// The policy's limit.
        max: u32,
    },
    /// Too many machines are unhealthy at once.
    #[error(
        "storm: {unhealthy} of {machines} machines are unhealthy, more than the policy's {max_percent}%"
    )]
    Storm {
        /// Unhealthy machines.
        unhealthy: usize,
        /// All machines.
        machines: usize,
        /// The policy's share.
        max_percent: u32,
    },
    /// The policy excludes control-plane machines.
    #[error("control-plane remediation is disabled by the policy")]
    ControlPlaneDisabled,
    /// Another control-plane machine is being remediated.
    #[error("another control-plane machine is being remediated")]
    ControlPlaneBusy,
    /// Fencing would leave fewer Ready control-plane Nodes than an etcd quorum.
    #[error(
        "etcd quorum: {ready_after} Ready control-plane node(s) would remain, a quorum of {members} is {quorum}"
    )]
    Quorum {
        /// Ready control-plane Nodes after fencing.
        ready_after: usize,
        /// Control-plane members.
        members: usize,
        /// Their quorum.
        quorum: usize,
    },
    /// The policy releases Nodes with the out-of-service taint, which this API server does
    /// not know: the Node would keep its pods after the host is off.
    #[error(
        "the policy's nodeRelease OutOfService needs Kubernetes 1.28 or later; this API server is older"
    )]
    OutOfServiceUnsupported,
    /// The Node is in a reboot the drift coordinator planned (the MCO re-applies its config).
    #[error(
        "the Node is in a planned reboot (DriftRemediation {by}); it is handed over if it does not come back"
    )]
    PlannedReboot {
        /// The DriftRemediation.
        by: String,
    },
    /// The host to fence runs the leading controller itself, and no other replica is Ready to
    /// take over once it is off: the remediation would stop halfway.
    #[error(
        "this controller runs on Node {node}: fencing it needs another baremend replica Ready on another Node to finish the remediation"
    )]
    SelfFence {
        /// The Node.
        node: String,
    },
    /// Another remediator is handling this host: two power cycles at once would fight over
    /// its power and its Node.
    #[error("another remediator is handling this host: {who}; the start waits until it is done")]
    ForeignRemediation {
        /// Who, and the evidence.
        who: Foreign,
    },
    /// The Machine's BareMetalHost is not its to power: outside the Machine's namespace, or
    /// consumed by another Metal3Machine (Cluster API; see `trust.rs`).
    #[error("{why}: no power request is made for this Machine")]
    HostNotOwned {
        /// Why, naming the host and its consumer.
        why: String,
    },
    /// The Machine's BareMetalHost exists but is outside this controller's `--host-selector`,
    /// so it is not watched: its power could be neither followed nor re-asked.
    #[error(
        "BareMetalHost {host} exists but is outside this controller's --host-selector {selector:?}, so it is not watched; label the host to match (Cluster API's Metal3 provider labels the hosts it consumes with cluster.x-k8s.io/cluster-name) or widen the selector; no power request is made until then"
    )]
    HostNotWatched {
        /// The host, `<namespace>/<name>`.
        host: String,
        /// The selector it is outside.
        selector: String,
    },
    /// Cluster API: the Machine's Node lives in its workload cluster, not in this one (the
    /// Cluster is not self-hosted), and this controller reaches no workload cluster, so the
    /// Node could be neither released nor awaited (see `evidence::capi`).
    #[error(
        "workload cluster {cluster}, where Node {node} lives, cannot be reached: {why}; no power request is made until it answers (its Node could be neither released nor awaited)"
    )]
    WorkloadCluster {
        /// The Machine's Cluster, `<namespace>/<name>`.
        cluster: String,
        /// The Node its `status.nodeRef` names.
        node: String,
        /// Why it cannot be reached.
        why: String,
    },
    /// The cluster is upgrading (the ClusterVersion is Progressing): its operators drain and
    /// reboot every Node in turn, and a Node slow to come back is not a hung one.
    #[error(
        "the cluster is upgrading (ClusterVersion version Progressing: {message}); the start waits up to {bound_seconds} s after the request (policy upgradeHold.maxSeconds)"
    )]
    ClusterUpgrading {
        /// The Progressing condition's message.
        message: String,
        /// The policy's bound.
        bound_seconds: u32,
    },
    /// The Node's machine-config daemon is updating it or rebooting it into a config.
    #[error(
        "the machine-config daemon is updating Node {node} ({why}); the start waits up to {bound_seconds} s after the request (policy upgradeHold.maxSeconds)"
    )]
    MachineConfigUpdating {
        /// The Node.
        node: String,
        /// What its annotations say.
        why: String,
        /// The policy's bound.
        bound_seconds: u32,
    },
    /// The host can be fenced only through a BMC whose answers anyone on the path could
    /// forge, and the policy does not allow it (`allowInsecureBmc`).
    #[error(
        "BMC {bmc}: {why}; its Off would prove nothing, and the RemediationPolicy does not allow insecure BMCs (allowInsecureBmc)"
    )]
    InsecureBmc {
        /// The BMC address.
        bmc: String,
        /// Why its transport is forgeable.
        why: String,
    },
    /// The host can be fenced only through a BMC seen contradicting itself lately.
    #[error("BMC {bmc} is {why}")]
    BmcUntrustworthy {
        /// The BMC address.
        bmc: String,
        /// The mark: until when, and the contradiction.
        why: String,
    },
}

impl Held {
    /// The gate that holds (exhaustive: a new verdict does not build until it names one).
    pub fn kind(&self) -> Gate {
        match self {
            Held::Paused => Gate::Paused,
            Held::Concurrency { .. } => Gate::Concurrency,
            Held::Storm { .. } => Gate::Storm,
            Held::ControlPlaneDisabled => Gate::ControlPlaneDisabled,
            Held::ControlPlaneBusy => Gate::ControlPlaneBusy,
            Held::Quorum { .. } => Gate::Quorum,
            Held::OutOfServiceUnsupported => Gate::OutOfServiceUnsupported,
            Held::PlannedReboot { .. } => Gate::PlannedReboot,
            Held::SelfFence { .. } => Gate::SelfFence,
            Held::ForeignRemediation { .. } => Gate::ForeignRemediation,
            Held::HostNotOwned { .. } => Gate::HostNotOwned,
            Held::HostNotWatched { .. } => Gate::HostNotWatched,
            Held::WorkloadCluster { .. } => Gate::WorkloadCluster,
            Held::ClusterUpgrading { .. } => Gate::ClusterUpgrading,
            Held::MachineConfigUpdating { .. } => Gate::MachineConfigUpdating,
            Held::InsecureBmc { .. } => Gate::InsecureBmc,
            Held::BmcUntrustworthy { .. } => Gate::BmcUntrustworthy,
        }
    }

    /// The gate, as a bounded name: the `Held` condition's reason and a metric label.
    pub fn gate(&self) -> &'static str {
        self.kind().as_str()
    }
}

/// Whether a remediation may start now.
pub fn may_start(
    candidate: Candidate,
    fleet: Fleet,
    policy: &RemediationPolicySpec,
) -> Result<(), Held> {
    // First: a paused policy holds whatever else would.
    if policy.paused {
        return Err(Held::Paused);
    }
    if policy.node_release == NodeReleaseMode::OutOfService && !fleet.out_of_service_taint {
        return Err(Held::OutOfServiceUnsupported);
    }
    if fleet.running >= policy.max_concurrent as usize {
        return Err(Held::Concurrency {
            running: fleet.running,
            max: policy.max_concurrent,
        });
    }
    if let Some(ceiling) = policy.max_concurrent_per_shard
        && fleet.running_total >= ceiling as usize
    {
        return Err(Held::Concurrency {
            running: fleet.running_total,
            max: ceiling,
        });
    }
    // Integer arithmetic: unhealthy/machines > percent/100, without rounding surprises.
    let max_percent = policy.storm.max_unhealthy_percent;
    if fleet.machines > 0 && fleet.unhealthy * 100 > max_percent as usize * fleet.machines {
        return Err(Held::Storm {
            unhealthy: fleet.unhealthy,
            machines: fleet.machines,
            max_percent,
        });
    }
    if candidate.control_plane {
        if !policy.control_plane.enabled {
            return Err(Held::ControlPlaneDisabled);
        }
        if fleet.running_control_plane > 0 {
            return Err(Held::ControlPlaneBusy);
        }
        if policy.control_plane.quorum_guard {
            let quorum = fleet.control_plane / 2 + 1;
            let ready_after = fleet
                .control_plane_ready
                .saturating_sub(usize::from(candidate.node_ready));
            if ready_after < quorum {
                return Err(Held::Quorum {
                    ready_after,
                    members: fleet.control_plane,
                    quorum,
                });
            }
        }
    }
    Ok(())
}

/// Whether the quorum guard judges a start of a candidate that is (`control_plane`) or is not
/// a control-plane member: such a start reads its control plane's Nodes again from the API
/// server before its last judgment (see [`FleetHealth::with_fresh_control_plane`]).
pub fn quorum_guarded(control_plane: bool, policy: &RemediationPolicySpec) -> bool {
    control_plane && policy.control_plane.enabled && policy.control_plane.quorum_guard
}

/// The remediation APIs of other projects the `ForeignRemediation` gate reads, where the
/// API server serves them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForeignKind {
    /// metal3's `Metal3Remediation` (cluster-api-provider-metal3, also run by OpenShift):
    /// named after the Machine, in its namespace, owned by it.
    Metal3Remediation,
    /// medik8s `SelfNodeRemediation`: named after the Node (by NodeHealthCheck).
    SelfNodeRemediation,
    /// medik8s `FenceAgentsRemediation`: named after the Node, or naming it in
    /// `remediation.medik8s.io/node-name`.
    FenceAgentsRemediation,
    /// medik8s `MachineDeletionRemediation`: named after the Node.
    MachineDeletionRemediation,
}

impl ForeignKind {
    /// Every kind, in the order they are looked for.
    pub const ALL: [ForeignKind; 4] = [
        ForeignKind::Metal3Remediation,
        ForeignKind::SelfNodeRemediation,
        ForeignKind::FenceAgentsRemediation,
        ForeignKind::MachineDeletionRemediation,
    ];

    /// The API group.
    pub fn group(self) -> &'static str {
        match self {
            ForeignKind::Metal3Remediation => "infrastructure.cluster.x-k8s.io",
            ForeignKind::SelfNodeRemediation => "self-node-remediation.medik8s.io",
            ForeignKind::FenceAgentsRemediation => "fence-agents-remediation.medik8s.io",
            ForeignKind::MachineDeletionRemediation => "machine-deletion-remediation.medik8s.io",
        }
    }

    /// The kind.
    pub fn kind(self) -> &'static str {
        match self {
            ForeignKind::Metal3Remediation => "Metal3Remediation",
            ForeignKind::SelfNodeRemediation => "SelfNodeRemediation",
            ForeignKind::FenceAgentsRemediation => "FenceAgentsRemediation",
            ForeignKind::MachineDeletionRemediation => "MachineDeletionRemediation",
        }
    }

    /// The resource (plural) name.
    pub fn plural(self) -> &'static str {
        match self {
            ForeignKind::Metal3Remediation => "metal3remediations",
            ForeignKind::SelfNodeRemediation => "selfnoderemediations",
            ForeignKind::FenceAgentsRemediation => "fenceagentsremediations",
            ForeignKind::MachineDeletionRemediation => "machinedeletionremediations",
        }
    }
}

/// Who else is handling a host, as the `Held` condition, the Event and the docs name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Foreign {
    /// The legacy actuator (cluster-api-provider-baremetal) is mid-way through its own
    /// remediation of this Machine.
    LegacyActuator {
        /// The annotations that show it.
        evidence: Vec<String>,
    },
    /// The BareMetalHost carries our reboot-API key, and no Remediation of ours asked for it.
    RebootRequestByOthers {
        /// The key (`reboot.metal3.io/<key>`).
        key: String,
    },
    /// The BareMetalHost carries a reboot-API key that is not ours (Cluster API Provider
    /// Metal3's remediation, an admin's own): the BareMetal Operator keeps the host off while
    /// it is there, so our power-on could not bring it back.
    RebootKey {
        /// The key (`reboot.metal3.io/<key>`).
        key: String,
    },
    /// A remediation object of another project names the Machine or its Node.
    Object {
        /// Its kind.
        kind: ForeignKind,
        /// Its `namespace/name`.
        name: String,
    },
}

impl std::fmt::Display for Foreign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Foreign::LegacyActuator { evidence } => write!(
                f,
                "the legacy actuator (cluster-api-provider-baremetal) has a remediation in flight ({})",
                evidence.join(", ")
            ),
            Foreign::RebootRequestByOthers { key } => write!(
                f,
                "the BareMetalHost carries reboot.metal3.io/{key}, which no Remediation of ours requested"
            ),
            Foreign::RebootKey { key } => write!(
                f,
                "the BareMetalHost carries reboot.metal3.io/{key} ({}), which keeps it powered off while it is there",
                reboot_key_owner(key)
            ),
            Foreign::Object { kind, name } => write!(f, "{} {name}", kind.kind()),
        }
    }
}

/// Who sets a reboot-API key that is not ours, as far as its name tells.
pub fn reboot_key_owner(key: &str) -> &'static str {
    // cluster-api-provider-metal3 `baremetal/metal3remediation_manager.go`: its key is
    // `metal3-remediation-<Metal3Remediation UID>`.
    if key.starts_with("metal3-remediation-") {
        "Cluster API Provider Metal3's remediation"
    } else {
        "not baremend's: another client or an admin"
    }
}

/// A remediation object of another project, as the gate matches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignObject {
    /// Its kind.
    pub kind: ForeignKind,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The Node it names in `remediation.medik8s.io/node-name`, if it does.
    pub node_annotation: Option<String>,
    /// The Machines among its owners.
    pub owner_machines: Vec<String>,
}

/// The Machine whose start is decided, as the foreign gate sees it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub machine: &'a str,
    /// Its Node.
    pub node: Option<&'a str>,
    /// Our reboot-API key.
    pub reboot_key: &'a str,
}

/// What other remediators leave behind, read fresh when a start is decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForeignEvidence {
    /// The Machine's annotations among the legacy actuator's.
    pub machine_marks: Vec<String>,
    /// The keys of the BareMetalHost's `reboot.metal3.io/<key>` annotations.
    pub reboot_keys: Vec<String>,
    /// A Remediation of ours has asked this host off and not withdrawn it (one under way, or
    /// one that failed leaving the host off).
    pub ours_requested: bool,
    /// The other projects' remediation objects (of the kinds served; all of them).
    pub objects: Vec<ForeignObject>,
}

/// Whether `object` is about `target`'s Machine or Node.
fn names_target(object: &ForeignObject, target: &Target<'_>) -> bool {
    let same_namespace = object.namespace == target.namespace;
    let node = |name: &str| target.node == Some(name);
    let owned = same_namespace && object.owner_machines.iter().any(|m| m == target.machine);
    match object.kind {
        // A CAPI MachineHealthCheck names it after the Machine; NodeHealthCheck may use it
        // too, and names what it creates after the Node.
        ForeignKind::Metal3Remediation => {
            owned || (same_namespace && object.name == target.machine) || node(&object.name)
        }
        ForeignKind::SelfNodeRemediation
        | ForeignKind::FenceAgentsRemediation
        | ForeignKind::MachineDeletionRemediation => {
            owned || node(&object.name) || object.node_annotation.as_deref().is_some_and(node)
        }
    }
}

/// The reboot-API keys among `keys` that are neither ours (`ours`) nor the legacy actuator's
/// (told apart as [`Foreign::LegacyActuator`]).
pub fn other_reboot_keys<'a>(
    ours: &'a str,
    keys: &'a [String],
) -> impl Iterator<Item = &'a String> {
    keys.iter()
        .filter(move |k| *k != ours && *k != crate::api::annotations::LEGACY_REBOOT_KEY)
}

/// The `ForeignRemediation` gate: no start on a Machine whose host another remediator is
/// handling. Pure; the evidence is read fresh by the caller.
///
/// Expected flow: the legacy actuator's in-flight marks first (its power-on deadline on the
/// Machine; its Node backup together with its power-off request on the host; or that request
/// alone when our key is another), then our reboot key asked by someone else, then any other
/// reboot-API key on the host, then the other projects' objects naming the Machine or its
/// Node. The first found is named.
///
/// Guarantees: nothing is held for what we did ourselves (`ours_requested`); the legacy
/// backup alone (the actuator stopped after saving the Node) holds nothing: baremend restores
/// it (see `execute::legacy_backup`).
///
/// Caveats: an object's presence is the evidence, whatever its status says: the medik8s
/// objects stay until NodeHealthCheck deletes them once the Node is healthy, and a
/// Metal3Remediation until its health check does.
pub fn foreign_remediation(target: &Target<'_>, evidence: &ForeignEvidence) -> Result<(), Held> {
    let hold = |who| Err(Held::ForeignRemediation { who });
    // A key on the host that no one of ours asked for: ours excuse our key only.
    let ours = |key: &str| evidence.ours_requested && key == target.reboot_key;
    let asked = |key: &str| !ours(key) && evidence.reboot_keys.iter().any(|k| k == key);
    let legacy_key = crate::api::annotations::LEGACY_REBOOT_KEY;
    let legacy_request = asked(legacy_key);
    let timeout = crate::api::annotations::LEGACY_POWER_ON_TIMEOUT;
    let mut legacy: Vec<String> = evidence
        .machine_marks
        .iter()
        .filter(|m| *m == timeout || legacy_request)
        .map(|m| format!("Machine annotation {m}"))
        .collect();
    // Its request alone is its own only when our key differs; the same key is told below.
    if legacy_request && (!legacy.is_empty() || target.reboot_key != legacy_key) {
        legacy.push(format!(
            "BareMetalHost annotation reboot.metal3.io/{legacy_key}"
        ));
    }
    if !legacy.is_empty() {
        return hold(Foreign::LegacyActuator { evidence: legacy });
    }
    if asked(target.reboot_key) {
        return hold(Foreign::RebootRequestByOthers {
            key: target.reboot_key.to_string(),
        });
    }
    // Any other key keeps the host off (the BareMetal Operator powers it on only once every
    // `reboot.metal3.io/<key>` is gone): started now, the remediation could never bring the
    // host back and would end `NodeNeverReady`.
    if let Some(key) = other_reboot_keys(target.reboot_key, &evidence.reboot_keys).next() {
        return hold(Foreign::RebootKey { key: key.clone() });
    }
    match evidence.objects.iter().find(|o| names_target(o, target)) {
        Some(object) => hold(Foreign::Object {
            kind: object.kind,
            name: format!("{}/{}", object.namespace, object.name),
        }),
        None => Ok(()),
    }
}

/// What the quiet gates read: the cluster's upgrade and the Node's machine-config daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuietEvidence {
    /// The ClusterVersion `version`'s `Progressing` condition, when it is True: its message.
    /// None: not progressing, or no ClusterVersion served (not OpenShift).
    pub cluster_progressing: Option<String>,
    /// The Node's name and its machine-config annotations, when it has a Node.
    pub node: Option<(String, MachineConfigView)>,
}

/// A Node's `machineconfiguration.openshift.io/*` annotations, as the daemon writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineConfigView {
    /// `currentConfig`.
    pub current: Option<String>,
    /// `desiredConfig`.
    pub desired: Option<String>,
    /// `currentImage` (image mode).
    pub current_image: Option<String>,
    /// `desiredImage` (image mode).
    pub desired_image: Option<String>,
    /// `state`: `Done`, `Working`, `Degraded`, `Unreconcilable`.
    pub state: Option<String>,
}

impl MachineConfigView {
    /// Why the daemon is updating or rebooting the Node, if it is.
    ///
    /// The config rule is NodeHealthCheck's (`internal/controller/cluster/upgrade_checker.go`,
    /// `isNodeUpgrading`: a non-empty `desiredConfig` that differs from `currentConfig`, as it
    /// does until the daemon is Done after the reboot); the image-mode pair and
    /// `state=Working` are the daemon's own signs of the same work (machine-config-operator
    /// `pkg/daemon/constants/constants.go`). A drift re-apply's reboot (`state=Degraded`,
    /// the same config, `post-config-action=Rebooting`) is not an update: the drift
    /// coordinator's `PlannedReboot` gate covers its own, and hands a Node that does not come
    /// back to the machine remediation, which must not wait again.
    pub fn updating(&self) -> Option<String> {
        let differ = |current: &Option<String>, desired: &Option<String>| match desired {
            Some(desired) if !desired.is_empty() => current.as_deref() != Some(desired.as_str()),
            _ => false,
        };
        if differ(&self.current, &self.desired) {
            return Some(format!(
                "currentConfig {} != desiredConfig {}",
                self.current.as_deref().unwrap_or("(none)"),
                self.desired.as_deref().unwrap_or_default()
            ));
        }
        if differ(&self.current_image, &self.desired_image) {
            return Some("currentImage != desiredImage".into());
        }
        if self.state.as_deref() == Some("Working") {
            return Some("state Working".into());
        }
        None
    }
}

/// The quiet gates' verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quiet {
    /// Nothing is upgrading or updating the Node.
    Open,
    /// Held, within the bound.
    Hold(Held),
    /// Would be held, but the bound has passed: the start proceeds, and a Warning says so.
    BoundReached(Held),
}

/// The `ClusterUpgrading` and `MachineConfigUpdating` gates: while the cluster upgrades, or
/// the Node's machine-config daemon updates or reboots it, a Node that is slow to come back
/// is most likely in that reboot, so the start waits; for at most `bound_seconds` after the
/// request (`waited`: since the Remediation was created), since a Node unhealthy that long is
/// not a slow reboot. A bound of 0 disables both. Pure.
///
/// NodeHealthCheck's rule is the model: it postpones remediation while the ClusterVersion is
/// `Progressing` or a Node's config is being updated (`upgrade_checker.go`, `Check`), with no
/// bound; the bound is ours, because a health check that reports a Node keeps asking.
pub fn quiet_gate(evidence: &QuietEvidence, waited: Duration, bound_seconds: u32) -> Quiet {
    if bound_seconds == 0 {
        return Quiet::Open;
    }
    // The Node's own update first: it is the more precise reason.
    let held = match (&evidence.node, &evidence.cluster_progressing) {
        (Some((node, view)), _) if view.updating().is_some() => Held::MachineConfigUpdating {
            node: node.clone(),
            why: view.updating().unwrap_or_default(),
            bound_seconds,
        },
        (_, Some(message)) => Held::ClusterUpgrading {
            message: message.clone(),
            bound_seconds,
        },
        _ => return Quiet::Open,
    };
    if waited >= Duration::from_secs(u64::from(bound_seconds)) {
        Quiet::BoundReached(held)
    } else {
        Quiet::Hold(held)
    }
}

#[cfg(test)]
#[path = "gates_tests.rs"]
mod tests;
