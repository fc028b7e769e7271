//! The drift coordinator's own objects: `DriftRemediation` (one per node and attempt: the
//! audit trail and the state a restarted coordinator resumes from) and `DriftPolicy` (the
//! cluster-scoped knobs, all defaulted; the object named `default` is used).

use std::fmt;

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bounds::{
    DNS_LABEL, DNS_LABEL_MAX, DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX, DNS_SUBDOMAIN_OR_EMPTY,
    IMAGE_BY_DIGEST, IMAGE_MAX, PATH_MAX,
};
use super::names::DriftStep;
use super::policy::PolicyStatus;
use super::remediation::{Condition, StepTime};
use super::retention::Retention;

/// How a file or unit differs from its rendered MachineConfig.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum DriftKind {
    /// The bytes of a file differ.
    Content,
    /// The mode (or the file type) of a file differs.
    Mode,
    /// A file is gone.
    Missing,
    /// A unit is enabled or disabled against the config.
    UnitEnablement,
}

impl fmt::Display for DriftKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DriftKind::Content => "content",
            DriftKind::Mode => "mode",
            DriftKind::Missing => "missing file",
            DriftKind::UnitEnablement => "unit enablement",
        })
    }
}

/// On a MachineConfigPool or a Node: the admin approves drift remediation where it needs
/// approval (a paused pool, a single-node pool or cluster). Value `true`.
pub const APPROVE_ANNOTATION: &str = "baremend.io/approve-drift-remediation";

/// One drift remediation of one node. Written once at creation; the status carries the
/// progress.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "baremend.io",
    version = "v1alpha1",
    kind = "DriftRemediation",
    status = "DriftRemediationStatus",
    shortname = "bdrift",
    category = "baremend",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.nodeName"}"#,
    printcolumn = r#"{"name":"Pool","type":"string","jsonPath":".spec.pool"}"#,
    printcolumn = r#"{"name":"Drift","type":"string","jsonPath":".spec.kind"}"#,
    printcolumn = r#"{"name":"Target","type":"string","jsonPath":".spec.target"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DriftRemediationSpec {
    /// The drifted Node.
    #[schemars(length(min = 1, max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN))]
    pub node_name: String,
    /// Its MachineConfigPool.
    #[serde(default)]
    #[schemars(length(max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN_OR_EMPTY))]
    pub pool: String,
    /// What differs: `Content`, `Mode`, `Missing`, `UnitEnablement`.
    pub kind: DriftKind,
    /// The drifted file path or unit name.
    #[schemars(length(min = 1, max = PATH_MAX))]
    pub target: String,
    /// The rendered MachineConfig the node is on.
    #[serde(default)]
    #[schemars(length(max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN_OR_EMPTY))]
    pub rendered_config: String,
    /// The action taken: `Force` (the MCO re-applies and reboots) or `Restore`.
    pub action: DriftAction,
    /// Set to true to abort: a forcefile not yet picked up is removed.
    #[serde(default)]
    pub abort: bool,
}

impl DriftRemediation {
    /// Its phase: the status's, or the first one while it has no status yet.
    pub fn phase(&self) -> DriftPhase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }
}

pub use super::names::DriftAction;

/// Where a drift remediation is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
pub enum DriftPhase {
    /// Drift seen; waiting out the debounce.
    #[default]
    Debouncing,
    /// Waiting for the gates or a PodDisruptionBudget.
    Pending,
    /// The forcefile is requested; waiting for the MCD to pick it up.
    ForceRequested,
    /// The MCO is re-applying (cordon, drain, rewrite, reboot, uncordon).
    Applying,
    /// We cordon and drain the node before a restore (`drainBeforeRestore`).
    Draining,
    /// The expected files are being written back.
    Restoring,
    /// Verified Done.
    Succeeded,
    /// The node healed without us (e.g. the admin reverted the change).
    SelfHealed,
    /// Given up; the reason is in the conditions and `lastError`.
    Failed,
    /// Aborted on request; any forcefile not picked up was removed.
    Aborted,
    /// The node stayed NotReady and was handed to the machine remediation.
    Escalated,
}

impl DriftPhase {
    /// Whether nothing more will happen.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            DriftPhase::Succeeded
                | DriftPhase::SelfHealed
                | DriftPhase::Failed
                | DriftPhase::Aborted
                | DriftPhase::Escalated
        )
    }
}

impl DriftPhase {
    /// Every phase, in declaration order: what the sweeps iterate.
    pub const ALL: [DriftPhase; 11] = [
        DriftPhase::Debouncing,
        DriftPhase::Pending,
        DriftPhase::ForceRequested,
        DriftPhase::Applying,
        DriftPhase::Draining,
        DriftPhase::Restoring,
        DriftPhase::Succeeded,
        DriftPhase::SelfHealed,
        DriftPhase::Failed,
        DriftPhase::Aborted,
        DriftPhase::Escalated,
    ];
}

/// Progress of a drift remediation, persisted before each step acts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftRemediationStatus {
    /// The phase.
    #[serde(default)]
    pub phase: DriftPhase,
    /// When the phase began (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_since: Option<String>,
    /// When the drift was first seen (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detected_at: Option<String>,
    /// The MCD's reason text when the drift was seen (it names paths, never contents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// SHA-256 of the expected content of the drifted file, when it is a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_sha256: Option<String>,
    /// The node's `desiredDrain` when the forcefile was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_before: Option<String>,
    /// The node's boot ID when the forcefile was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_before: Option<String>,
    /// When the node was first seen NotReady (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready_since: Option<String>,
    /// When a drain was first seen pending (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining_since: Option<String>,
    /// The helper pod that wrote (or removed) files on the node, while it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helper_pod: Option<String>,
    /// Whether a forcefile we wrote may still be on the node.
    #[serde(default)]
    pub force_file_written: bool,
    /// Whether we cordoned the node (our drain before a restore) and have not uncordoned it.
    #[serde(default)]
    pub cordoned_by_us: bool,
    /// The last error, one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Every persisted step, in order.
    #[serde(default)]
    pub steps: Vec<StepTime<DriftStep>>,
    /// Conditions (`Held`, `Succeeded`, `Failed`).
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// The drift coordinator's policy; an empty `spec: {}` is complete and conservative.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "baremend.io",
    version = "v1alpha1",
    kind = "DriftPolicy",
    status = "PolicyStatus",
    shortname = "bdpol",
    category = "baremend",
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode"}"#,
    printcolumn = r#"{"name":"Action","type":"string","jsonPath":".spec.action"}"#,
    printcolumn = r#"{"name":"Debounce","type":"integer","jsonPath":".spec.debounceSeconds"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DriftPolicySpec {
    /// `Remediate` (default: act on drift) or `Observe` (detect, classify, report; act on
    /// nothing). Read when a remediation would start: one already acting finishes.
    #[serde(default)]
    pub mode: DriftMode,
    /// `Force` (default) or `Restore` (opt-in: no reboot, files written back).
    #[serde(default)]
    pub action: DriftAction,
    /// How long drift must persist before anything is done (the MCD heals a node whose
    /// file an admin reverts).
    #[serde(default = "default_debounce")]
    #[schemars(range(min = 0, max = 3600))]
    pub debounce_seconds: u64,
    /// Deadlines.
    #[serde(default)]
    pub timeouts: DriftTimeouts,
    /// Attempts per node within the recurrence window; then drift is left Failed.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = 20))]
    pub max_attempts: u32,
    /// The recurrence window.
    #[serde(default = "default_recurrence_window")]
    #[schemars(range(min = 60, max = 2_592_000))]
    pub recurrence_window_seconds: u64,
    /// Hand a node that stays NotReady past the reboot timeout to the machine remediation
    /// (its Machine gets `host.metal3.io/external-remediation`).
    #[serde(default = "default_true")]
    pub escalate_to_machine_remediation: bool,
    /// With `Restore`: cordon and drain the node first (Eviction API, PodDisruptionBudgets
    /// checked before and respected throughout), uncordon once verified.
    #[serde(default)]
    pub drain_before_restore: bool,
    /// The image of the short-lived helper pod that writes files on the node, pinned by
    /// digest (`…@sha256:<64 hex>`: the pod runs privileged, its image must not move under a
    /// tag). Unset: the controller's own image (`--helper-image`, which deploy/ sets to the
    /// controller container's image), which carries the `baremend host-file` command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = IMAGE_MAX), pattern(IMAGE_BY_DIGEST))]
    pub helper_image: Option<String>,
    /// The namespace of the helper pods.
    #[serde(default = "default_helper_namespace")]
    #[schemars(length(min = 1, max = DNS_LABEL_MAX), pattern(DNS_LABEL))]
    pub helper_namespace: String,
    /// How many finished DriftRemediations are kept per Node.
    #[serde(default)]
    pub retention: Retention,
}

impl DriftPolicySpec {
    /// The policy in force when no DriftPolicy `default` exists: the defaults in `Observe`,
    /// so that no Node is drained or rebooted before an operator has said so.
    pub fn unconfigured() -> Self {
        DriftPolicySpec {
            mode: DriftMode::Observe,
            ..DriftPolicySpec::default()
        }
    }
}

impl Default for DriftPolicySpec {
    fn default() -> Self {
        DriftPolicySpec {
            mode: DriftMode::default(),
            action: DriftAction::default(),
            debounce_seconds: default_debounce(),
            timeouts: DriftTimeouts::default(),
            max_attempts: default_max_attempts(),
            recurrence_window_seconds: default_recurrence_window(),
            escalate_to_machine_remediation: true,
            drain_before_restore: false,
            helper_image: None,
            helper_namespace: default_helper_namespace(),
            retention: Retention::default(),
        }
    }
}

/// Whether the drift coordinator acts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
pub enum DriftMode {
    /// Act on drift with the policy's action.
    #[default]
    Remediate,
    /// Detect, classify, count and tell as usual, and act on nothing: each drift's
    /// DriftRemediation stays `Pending`, held with reason `ObserveOnly`.
    Observe,
}

/// The drift coordinator's deadlines.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftTimeouts {
    /// For the MCD to pick the forcefile up (it retries a Degraded node within 60 s).
    #[serde(default = "default_pickup")]
    #[schemars(range(min = 1, max = 3600))]
    pub pickup_seconds: u64,
    /// For a drain to finish (the MCO retries for an hour before it reports).
    #[serde(default = "default_drain")]
    #[schemars(range(min = 1, max = 86_400))]
    pub drain_seconds: u64,
    /// For a node to be Ready again.
    #[serde(default = "default_reboot")]
    #[schemars(range(min = 1, max = 86_400))]
    pub reboot_seconds: u64,
    /// For the MCD to heal a node whose files were restored.
    #[serde(default = "default_restore")]
    #[schemars(range(min = 1, max = 3600))]
    pub restore_seconds: u64,
    /// For the whole re-apply once picked up (drains excepted).
    #[serde(default = "default_apply")]
    #[schemars(range(min = 1, max = 86_400))]
    pub apply_seconds: u64,
}

impl Default for DriftTimeouts {
    fn default() -> Self {
        DriftTimeouts {
            pickup_seconds: default_pickup(),
            drain_seconds: default_drain(),
            reboot_seconds: default_reboot(),
            restore_seconds: default_restore(),
            apply_seconds: default_apply(),
        }
    }
}

fn default_debounce() -> u64 {
    30
}
fn default_max_attempts() -> u32 {
    3
}
fn default_recurrence_window() -> u64 {
    86_400
}
fn default_true() -> bool {
    true
}
fn default_helper_namespace() -> String {
    "baremend".into()
}
fn default_pickup() -> u64 {
    120
}
fn default_drain() -> u64 {
    3600
}
fn default_reboot() -> u64 {
    900
}
fn default_restore() -> u64 {
    180
}
fn default_apply() -> u64 {
    5400
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A phase added to the enum does not compile here until it is placed in
    /// [`DriftPhase::ALL`], so no sweep can miss it.
    fn position(phase: DriftPhase) -> usize {
        match phase {
            DriftPhase::Debouncing => 0,
            DriftPhase::Pending => 1,
            DriftPhase::ForceRequested => 2,
            DriftPhase::Applying => 3,
            DriftPhase::Draining => 4,
            DriftPhase::Restoring => 5,
            DriftPhase::Succeeded => 6,
            DriftPhase::SelfHealed => 7,
            DriftPhase::Failed => 8,
            DriftPhase::Aborted => 9,
            DriftPhase::Escalated => 10,
        }
    }

    #[test]
    fn the_list_of_phases_holds_every_phase_once() {
        for (at, phase) in DriftPhase::ALL.iter().enumerate() {
            assert_eq!(position(*phase), at, "{phase:?}");
        }
    }

    #[test]
    fn an_empty_policy_is_complete() {
        let spec: DriftPolicySpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec, DriftPolicySpec::default());
        assert_eq!(spec.action, DriftAction::Force);
        assert_eq!(spec.mode, DriftMode::Remediate);
        assert!(serde_json::from_str::<DriftPolicySpec>(r#"{"mode": "Watch"}"#).is_err());
        assert_eq!(spec.timeouts.pickup_seconds, 120);
        assert_eq!(spec.retention.keep_finished, 5);
    }
}
