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
/// a list read fresh after a start was made, the starts it lacks: those were deleted. A cached
/// list, or a fresh one read before the start, that lacks one proves nothing, so it is kept.
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
    /// Remediations started and not ended (this one excluded).
    pub running: usize,
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
mod quiet_tests {
    use super::*;

    fn view(current: &str, desired: &str, state: &str) -> MachineConfigView {
        let some = |v: &str| (!v.is_empty()).then(|| v.to_string());
        MachineConfigView {
            current: some(current),
            desired: some(desired),
            state: some(state),
            ..Default::default()
        }
    }

    #[test]
    fn the_node_is_updating_by_nodehealthchecks_rule_and_the_daemons_signs() {
        // node-healthcheck-operator `internal/controller/cluster/upgrade_checker.go`,
        // `isNodeUpgrading`: desiredConfig set and different from currentConfig.
        let cases = [
            (view("rendered-a", "rendered-a", "Done"), None),
            (view("", "", ""), None),
            (view("rendered-a", "", "Done"), None),
            (
                view("rendered-a", "rendered-b", "Done"),
                Some("currentConfig rendered-a != desiredConfig rendered-b"),
            ),
            // Rebooting into it: still Working on the old config until Done after the boot.
            (
                view("rendered-a", "rendered-b", "Working"),
                Some("currentConfig rendered-a != desiredConfig rendered-b"),
            ),
            (
                view("", "rendered-b", ""),
                Some("currentConfig (none) != desiredConfig rendered-b"),
            ),
            (
                view("rendered-a", "rendered-a", "Working"),
                Some("state Working"),
            ),
            // Drift (and its re-apply's reboot) is the drift coordinator's.
            (view("rendered-a", "rendered-a", "Degraded"), None),
            (view("rendered-a", "rendered-a", "Unreconcilable"), None),
        ];
        for (view, want) in cases {
            assert_eq!(view.updating().as_deref(), want, "{view:?}");
        }
        let image = MachineConfigView {
            current_image: Some("quay.io/a".into()),
            desired_image: Some("quay.io/b".into()),
            ..view("rendered-a", "rendered-a", "Done")
        };
        assert_eq!(
            image.updating().as_deref(),
            Some("currentImage != desiredImage")
        );
    }

    #[test]
    fn every_combination_holds_within_the_bound_and_proceeds_after_it() {
        let updating = Some(("worker-0".to_string(), view("a", "b", "Working")));
        let done = Some(("worker-0".to_string(), view("a", "a", "Done")));
        let progressing = Some("Working towards 4.17.3: 512 of 890 done".to_string());
        let bound = 600;
        for node in [None, done.clone(), updating.clone()] {
            for cluster in [None, progressing.clone()] {
                for waited in [0, 599, 600, 601] {
                    for bound in [0, bound] {
                        let evidence = QuietEvidence {
                            cluster_progressing: cluster.clone(),
                            node: node.clone(),
                        };
                        let verdict = quiet_gate(&evidence, Duration::from_secs(waited), bound);
                        let node_updating = node == updating;
                        let gate = match &verdict {
                            Quiet::Open => None,
                            Quiet::Hold(held) | Quiet::BoundReached(held) => Some(held.gate()),
                        };
                        let expected_gate = match (bound, node_updating, cluster.is_some()) {
                            (0, _, _) => None,
                            (_, true, _) => Some("MachineConfigUpdating"),
                            (_, false, true) => Some("ClusterUpgrading"),
                            (_, false, false) => None,
                        };
                        let case = format!("{evidence:?} waited {waited} bound {bound}");
                        assert_eq!(gate, expected_gate, "{case}");
                        if gate.is_some() {
                            assert_eq!(
                                matches!(verdict, Quiet::BoundReached(_)),
                                waited >= u64::from(bound),
                                "{case}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_held_message_names_what_holds_and_the_bound() {
        let evidence = QuietEvidence {
            cluster_progressing: Some("Working towards 4.17.3".into()),
            node: Some(("worker-0".into(), view("a", "b", "Done"))),
        };
        let Quiet::Hold(held) = quiet_gate(&evidence, Duration::ZERO, 1800) else {
            panic!("not held")
        };
        assert_eq!(
            held.to_string(),
            "the machine-config daemon is updating Node worker-0 (currentConfig a != desiredConfig b); \
             the start waits up to 1800 s after the request (policy upgradeHold.maxSeconds)"
        );
        let cluster = QuietEvidence {
            node: None,
            ..evidence
        };
        let Quiet::Hold(held) = quiet_gate(&cluster, Duration::ZERO, 1800) else {
            panic!("not held")
        };
        assert!(
            held.to_string().contains("Working towards 4.17.3"),
            "{held}"
        );
    }

    #[test]
    fn every_gate_is_in_the_metrics_gate_table() {
        // Exhaustive: a new verdict stops the build here (and in `Held::kind`), to be given a
        // `Gate` (whose series start at zero) and a row in docs/reference/metrics.md.
        let all = [
            Held::Paused,
            Held::Concurrency { running: 0, max: 0 },
            Held::Storm {
                unhealthy: 0,
                machines: 0,
                max_percent: 0,
            },
            Held::ControlPlaneDisabled,
            Held::ControlPlaneBusy,
            Held::Quorum {
                ready_after: 0,
                members: 0,
                quorum: 0,
            },
            Held::OutOfServiceUnsupported,
            Held::PlannedReboot { by: String::new() },
            Held::SelfFence {
                node: String::new(),
            },
            Held::ForeignRemediation {
                who: Foreign::RebootKey { key: String::new() },
            },
            Held::ClusterUpgrading {
                message: String::new(),
                bound_seconds: 0,
            },
            Held::MachineConfigUpdating {
                node: String::new(),
                why: String::new(),
                bound_seconds: 0,
            },
            Held::HostNotOwned { why: String::new() },
            Held::InsecureBmc {
                bmc: String::new(),
                why: String::new(),
            },
            Held::BmcUntrustworthy {
                bmc: String::new(),
                why: String::new(),
            },
        ];
        for held in &all {
            match held {
                Held::Paused
                | Held::Concurrency { .. }
                | Held::Storm { .. }
                | Held::ControlPlaneDisabled
                | Held::ControlPlaneBusy
                | Held::Quorum { .. }
                | Held::OutOfServiceUnsupported
                | Held::PlannedReboot { .. }
                | Held::SelfFence { .. }
                | Held::ForeignRemediation { .. }
                | Held::ClusterUpgrading { .. }
                | Held::MachineConfigUpdating { .. }
                | Held::HostNotOwned { .. }
                | Held::InsecureBmc { .. }
                | Held::BmcUntrustworthy { .. } => {}
            }
        }
        assert_eq!(all.each_ref().map(Held::kind).as_slice(), Gate::ALL);
    }
}

#[cfg(test)]
mod foreign_tests {
    use super::*;

    const TARGET: Target<'static> = Target {
        namespace: "openshift-machine-api",
        machine: "worker-0",
        node: Some("worker-0.example"),
        reboot_key: "capbm-requested-power-off",
    };

    fn object(kind: ForeignKind, namespace: &str, name: &str) -> ForeignObject {
        ForeignObject {
            kind,
            namespace: namespace.into(),
            name: name.into(),
            node_annotation: None,
            owner_machines: Vec::new(),
        }
    }

    fn held_by(evidence: &ForeignEvidence) -> Option<Foreign> {
        match foreign_remediation(&TARGET, evidence) {
            Ok(()) => None,
            Err(Held::ForeignRemediation { who }) => Some(who),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn nothing_foreign_lets_the_start_go() {
        assert_eq!(held_by(&ForeignEvidence::default()), None);
    }

    #[test]
    fn our_key_is_foreign_only_when_no_remediation_of_ours_asked_for_it() {
        let mut evidence = ForeignEvidence {
            reboot_keys: vec!["capbm-requested-power-off".into()],
            ..Default::default()
        };
        let who = held_by(&evidence).unwrap();
        assert_eq!(
            who,
            Foreign::RebootRequestByOthers {
                key: "capbm-requested-power-off".into()
            }
        );
        let held = foreign_remediation(&TARGET, &evidence).unwrap_err();
        assert_eq!(held.gate(), "ForeignRemediation");
        assert!(
            held.to_string()
                .contains("reboot.metal3.io/capbm-requested-power-off")
        );
        evidence.ours_requested = true;
        assert_eq!(held_by(&evidence), None);
    }

    #[test]
    fn any_other_reboot_key_holds_the_start_and_is_named() {
        // The BareMetal Operator keeps the host off while any `reboot.metal3.io/<key>` is
        // there (baremetal-operator `internal/controller/metal3.io/baremetalhost_controller.go`,
        // `hasRebootAnnotation`): our power-on could never bring it back.
        for (key, owner) in [
            (
                "metal3-remediation-6f1c0d3e-uid",
                "Cluster API Provider Metal3's remediation",
            ),
            ("admin-maintenance", "not baremend's"),
        ] {
            let evidence = ForeignEvidence {
                reboot_keys: vec![key.into()],
                ..Default::default()
            };
            let who = held_by(&evidence).unwrap();
            assert_eq!(who, Foreign::RebootKey { key: key.into() });
            let said = foreign_remediation(&TARGET, &evidence)
                .unwrap_err()
                .to_string();
            assert!(said.contains(&format!("reboot.metal3.io/{key}")), "{said}");
            assert!(said.contains(owner), "{said}");
            assert!(said.contains("keeps it powered off"), "{said}");
            // Ours beside it, asked by us, excuses only ours.
            let beside_ours = ForeignEvidence {
                reboot_keys: vec![TARGET.reboot_key.into(), key.into()],
                ours_requested: true,
                ..Default::default()
            };
            assert_eq!(held_by(&beside_ours), Some(who.clone()));
            // Named before another project's object: the key is what keeps the host off.
            let with_object = ForeignEvidence {
                objects: vec![object(
                    ForeignKind::Metal3Remediation,
                    TARGET.namespace,
                    TARGET.machine,
                )],
                ..evidence
            };
            assert_eq!(held_by(&with_object), Some(who));
        }
        // Our own key alone, asked by us: nothing foreign.
        let ours = ForeignEvidence {
            reboot_keys: vec![TARGET.reboot_key.into()],
            ours_requested: true,
            ..Default::default()
        };
        assert_eq!(held_by(&ours), None);
        assert_eq!(
            other_reboot_keys("baremend", &["baremend".into(), "x".into()]).collect::<Vec<_>>(),
            ["x"]
        );
    }

    #[test]
    fn the_legacy_actuator_in_flight_holds_but_its_backup_alone_does_not() {
        let timeout = ForeignEvidence {
            machine_marks: vec![crate::api::annotations::LEGACY_POWER_ON_TIMEOUT.into()],
            ..Default::default()
        };
        assert!(matches!(
            held_by(&timeout),
            Some(Foreign::LegacyActuator { .. })
        ));
        let backup = ForeignEvidence {
            machine_marks: vec![crate::api::annotations::LEGACY_NODE_LABELS_BACKUP.into()],
            ..Default::default()
        };
        assert_eq!(held_by(&backup), None, "adopted by the restore instead");
        // Saved and holding the host off: its remediation is under way.
        let saved_and_off = ForeignEvidence {
            reboot_keys: vec![crate::api::annotations::LEGACY_REBOOT_KEY.into()],
            ..backup
        };
        let Some(Foreign::LegacyActuator { evidence }) = held_by(&saved_and_off) else {
            panic!("not the legacy actuator")
        };
        assert_eq!(evidence.len(), 2, "{evidence:?}");
    }

    #[test]
    fn the_legacy_key_is_recognised_when_ours_differs() {
        let target = Target {
            reboot_key: "baremend",
            ..TARGET
        };
        // Its power-off request alone (before it saved the Node).
        let evidence = ForeignEvidence {
            reboot_keys: vec![crate::api::annotations::LEGACY_REBOOT_KEY.into()],
            ..Default::default()
        };
        assert!(matches!(
            foreign_remediation(&target, &evidence),
            Err(Held::ForeignRemediation {
                who: Foreign::LegacyActuator { .. }
            })
        ));
        // Our own key on the host is ours to judge: not foreign while we asked for it.
        let ours = ForeignEvidence {
            reboot_keys: vec!["baremend".into()],
            ours_requested: true,
            ..Default::default()
        };
        assert_eq!(foreign_remediation(&target, &ours), Ok(()));
        // ...and excuses only our key, never the legacy one beside it.
        let both = ForeignEvidence {
            reboot_keys: vec![
                "baremend".into(),
                crate::api::annotations::LEGACY_REBOOT_KEY.into(),
            ],
            ..ours
        };
        assert!(matches!(
            foreign_remediation(&target, &both),
            Err(Held::ForeignRemediation {
                who: Foreign::LegacyActuator { .. }
            })
        ));
    }

    #[test]
    fn objects_are_matched_by_machine_or_node_as_their_projects_name_them() {
        let node = "worker-0.example";
        let ns = "openshift-machine-api";
        let cases = [
            (object(ForeignKind::Metal3Remediation, ns, "worker-0"), true),
            (
                object(ForeignKind::Metal3Remediation, "other", "worker-0"),
                false,
            ),
            (object(ForeignKind::Metal3Remediation, ns, node), true),
            (
                object(ForeignKind::SelfNodeRemediation, "medik8s", node),
                true,
            ),
            (
                object(ForeignKind::SelfNodeRemediation, "medik8s", "worker-0"),
                false,
            ),
            (
                object(ForeignKind::FenceAgentsRemediation, "medik8s", node),
                true,
            ),
            (
                object(ForeignKind::MachineDeletionRemediation, "medik8s", node),
                true,
            ),
            (
                object(
                    ForeignKind::MachineDeletionRemediation,
                    "medik8s",
                    "worker-1",
                ),
                false,
            ),
        ];
        for (object, held) in cases {
            let evidence = ForeignEvidence {
                objects: vec![object.clone()],
                ..Default::default()
            };
            let who = held_by(&evidence);
            assert_eq!(who.is_some(), held, "{object:?}");
            if let Some(who) = who {
                assert_eq!(
                    who.to_string(),
                    format!(
                        "{} {}/{}",
                        object.kind.kind(),
                        object.namespace,
                        object.name
                    )
                );
            }
        }
        let mut annotated = object(ForeignKind::FenceAgentsRemediation, "medik8s", "far-1");
        annotated.node_annotation = Some(node.into());
        let mut owned = object(ForeignKind::Metal3Remediation, ns, "m3r-1");
        owned.owner_machines = vec!["worker-0".into()];
        for object in [annotated, owned] {
            let evidence = ForeignEvidence {
                objects: vec![object],
                ..Default::default()
            };
            assert!(held_by(&evidence).is_some(), "{evidence:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(name: &str, machine: &str, phase: RemediationPhase) -> Listed {
        Listed {
            namespace: "m".into(),
            name: name.into(),
            machine: machine.into(),
            phase,
        }
    }

    /// A list read after every start so far (all of them tests make before reading).
    const FRESH: ListFreshness = ListFreshness::ReadAfter(u64::MAX);
    const CACHED: ListFreshness = ListFreshness::Cached;

    fn launched(entries: &[(&str, &str)]) -> Launched {
        let mut launched = Launched::new();
        for (name, machine) in entries {
            launched.insert(("m".to_string(), name.to_string()), machine.to_string());
        }
        launched
    }

    #[test]
    fn running_counts_listed_remediations_under_way_but_not_pending_ended_or_this_one() {
        let list = [
            listed("a-1", "a", RemediationPhase::PoweringOff),
            listed("b-1", "b", RemediationPhase::Pending),
            listed("c-1", "c", RemediationPhase::Succeeded),
            listed("d-1", "d", RemediationPhase::Fenced),
        ];
        let mut none = Launched::new();
        assert_eq!(running_machines(&list, &mut none, "d-1", FRESH), ["a"]);
        assert_eq!(
            running_machines(&list, &mut none, "x-1", CACHED),
            ["a", "d"]
        );
    }

    #[test]
    fn a_start_a_lagging_cache_does_not_show_still_counts_until_a_fresh_list_settles_it() {
        // The chaos case (seed 1708): this process started e-1; the cache, behind a broken
        // watch, shows nothing of it.
        let cache = [listed("a-1", "a", RemediationPhase::Succeeded)];
        let mut starts = launched(&[("e-1", "e")]);
        assert_eq!(running_machines(&cache, &mut starts, "f-1", CACHED), ["e"]);
        assert_eq!(starts.len(), 1, "a cache that lacks it may only lag");
        // A fresh list that shows it Pending still counts it through the reminder...
        let fresh = [listed("e-1", "e", RemediationPhase::Pending)];
        assert_eq!(running_machines(&fresh, &mut starts, "f-1", FRESH), ["e"]);
        // ...one that shows it under way counts it through the list and forgets the reminder...
        let fresh = [listed("e-1", "e", RemediationPhase::PoweringOff)];
        assert_eq!(running_machines(&fresh, &mut starts, "f-1", FRESH), ["e"]);
        assert!(starts.is_empty());
        // ...and a fresh list that lacks it means it was deleted.
        let mut starts = launched(&[("e-1", "e")]);
        assert!(running_machines(&[], &mut starts, "f-1", FRESH).is_empty());
        assert!(starts.is_empty());
    }

    #[test]
    fn a_fresh_list_read_before_a_start_does_not_forget_it() {
        // Two starts decided at once: f's fresh list was read before e's start was made (the
        // reads run outside the lock), so it lacks e-1 without proving it deleted.
        let mut starts = Launched::new();
        let mark = starts.mark();
        starts.insert(("m".into(), "e-1".into()), "e".into());
        let read_before = ListFreshness::ReadAfter(mark);
        assert_eq!(
            running_machines(&[], &mut starts, "f-1", read_before),
            ["e"]
        );
        assert_eq!(starts.len(), 1);
        // A list read after the start that still lacks it: deleted.
        let read_after = ListFreshness::ReadAfter(starts.mark());
        assert!(running_machines(&[], &mut starts, "f-1", read_after).is_empty());
        assert!(starts.is_empty());
    }

    #[test]
    fn a_remediation_never_counts_against_itself() {
        let mut starts = launched(&[("e-1", "e")]);
        assert!(running_machines(&[], &mut starts, "e-1", CACHED).is_empty());
        let list = [listed("e-1", "e", RemediationPhase::PoweringOff)];
        assert!(running_machines(&list, &mut Launched::new(), "e-1", FRESH).is_empty());
    }

    const WORKER: Candidate = Candidate {
        control_plane: false,
        node_ready: false,
    };
    const HUNG_MASTER: Candidate = Candidate {
        control_plane: true,
        node_ready: false,
    };

    fn fleet() -> Fleet {
        Fleet {
            machines: 6,
            unhealthy: 1,
            running: 0,
            running_control_plane: 0,
            control_plane: 3,
            control_plane_ready: 3,
            out_of_service_taint: true,
        }
    }

    #[test]
    fn one_hung_worker_in_a_healthy_fleet_may_start() {
        assert_eq!(
            may_start(WORKER, fleet(), &RemediationPolicySpec::default()),
            Ok(())
        );
    }

    #[test]
    fn the_concurrency_limit_holds_further_starts() {
        let policy = RemediationPolicySpec::default();
        let busy = Fleet {
            running: 1,
            unhealthy: 2,
            ..fleet()
        };
        assert!(matches!(
            may_start(WORKER, busy, &policy),
            Err(Held::Concurrency { .. })
        ));
        let wider = RemediationPolicySpec {
            max_concurrent: 2,
            ..policy
        };
        assert_eq!(may_start(WORKER, busy, &wider), Ok(()));
    }

    #[test]
    fn the_storm_gate_holds_above_the_share_and_not_at_it() {
        let mut policy = RemediationPolicySpec {
            max_concurrent: 10,
            ..Default::default()
        };
        policy.storm.max_unhealthy_percent = 40;
        // 2 of 5 is exactly 40 %: allowed. 3 of 5 is 60 %: held.
        let at = Fleet {
            machines: 5,
            unhealthy: 2,
            ..fleet()
        };
        assert_eq!(may_start(WORKER, at, &policy), Ok(()));
        let above = Fleet {
            machines: 5,
            unhealthy: 3,
            ..fleet()
        };
        let held = may_start(WORKER, above, &policy).unwrap_err();
        assert_eq!(
            held.to_string(),
            "storm: 3 of 5 machines are unhealthy, more than the policy's 40%"
        );
    }

    #[test]
    fn control_plane_machines_go_one_at_a_time_and_never_below_quorum() {
        let policy = RemediationPolicySpec {
            max_concurrent: 5,
            ..Default::default()
        };
        // One hung master of three: two Ready remain, the quorum of three.
        let one_hung = Fleet {
            control_plane_ready: 2,
            ..fleet()
        };
        assert_eq!(may_start(HUNG_MASTER, one_hung, &policy), Ok(()));
        // A second master while one is being remediated: held.
        let busy = Fleet {
            running: 1,
            running_control_plane: 1,
            ..one_hung
        };
        assert_eq!(
            may_start(HUNG_MASTER, busy, &policy),
            Err(Held::ControlPlaneBusy)
        );
        // Two of three hung: one Ready remains, below quorum.
        let two_hung = Fleet {
            control_plane_ready: 1,
            unhealthy: 2,
            ..fleet()
        };
        assert!(matches!(
            may_start(HUNG_MASTER, two_hung, &policy),
            Err(Held::Quorum {
                ready_after: 1,
                members: 3,
                quorum: 2
            })
        ));
        // A Ready master whose fencing would break quorum: held.
        let ready_master = Candidate {
            control_plane: true,
            node_ready: true,
        };
        assert!(matches!(
            may_start(ready_master, one_hung, &policy),
            Err(Held::Quorum { ready_after: 1, .. })
        ));
        // Workers are not subject to the quorum guard.
        assert_eq!(may_start(WORKER, two_hung, &policy), Ok(()));
    }

    #[test]
    fn the_policy_can_disable_the_guard_or_control_plane_remediation() {
        let mut policy = RemediationPolicySpec {
            max_concurrent: 5,
            ..Default::default()
        };
        let two_hung = Fleet {
            control_plane_ready: 1,
            unhealthy: 2,
            ..fleet()
        };
        policy.control_plane.quorum_guard = false;
        assert_eq!(may_start(HUNG_MASTER, two_hung, &policy), Ok(()));
        policy.control_plane.enabled = false;
        assert_eq!(
            may_start(HUNG_MASTER, fleet(), &policy),
            Err(Held::ControlPlaneDisabled)
        );
    }

    #[test]
    fn a_paused_policy_holds_every_start_first() {
        let paused = RemediationPolicySpec {
            paused: true,
            ..Default::default()
        };
        assert_eq!(may_start(WORKER, fleet(), &paused), Err(Held::Paused));
        let busy = Fleet {
            running: 1,
            ..fleet()
        };
        assert_eq!(may_start(WORKER, busy, &paused), Err(Held::Paused));
        assert_eq!(Held::Paused.gate(), "Paused");
        assert_eq!(Held::Paused.kind(), Gate::Paused);
    }

    #[test]
    fn out_of_service_mode_is_held_on_an_api_server_older_than_1_28() {
        let policy = RemediationPolicySpec {
            node_release: NodeReleaseMode::OutOfService,
            ..Default::default()
        };
        assert_eq!(may_start(WORKER, fleet(), &policy), Ok(()));
        let old = Fleet {
            out_of_service_taint: false,
            ..fleet()
        };
        let held = may_start(WORKER, old, &policy).unwrap_err();
        assert_eq!(held, Held::OutOfServiceUnsupported);
        assert_eq!(held.gate(), "OutOfServiceUnsupported");
        // Deleting Nodes works on any version.
        assert_eq!(
            may_start(WORKER, old, &RemediationPolicySpec::default()),
            Ok(())
        );
    }
}
