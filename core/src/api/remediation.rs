//! `Remediation`: one object per Machine and trigger. It is the audit trail an operator reads
//! with `kubectl get remediations`, and the only state the controller resumes from.

use std::collections::BTreeMap;

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bounds::{
    DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX, NAMESPACED_NAME, NAMESPACED_NAME_MAX, UID_MAX,
};
use super::names::{FenceStrategyName, RemediationStep, Stored, StoredName};

/// The label of an ended Remediation: its terminal phase (`Succeeded`, `Failed`, `Cancelled`,
/// `DryRun`), none while under way; kept in step with the phase by the controller. A start's
/// fresh read of the Remediations that may still hold a host asks the API server for the ones
/// not labelled `Succeeded` or `Cancelled` ([`HOLDS_NOTHING`]), so that read does not grow
/// with the history retention keeps. A Remediation without the label, or with another value,
/// is always listed (one written by an older version, one whose label write failed, one
/// labelled by hand); one under way labelled `Succeeded` by hand is left out of that read
/// until the controller's next pass of its Machine sets the label right, and the gates judge
/// the cached phases first, which still count it.
pub const OUTCOME_LABEL: &str = "baremend.io/outcome";

/// The outcomes after which a Remediation holds nothing: the host is back on (or was never
/// touched) and no request of ours is left on it. A `Failed` one keeps its host off with our
/// request, and stays in a start's fresh read.
pub const HOLDS_NOTHING: [RemediationPhase; 2] =
    [RemediationPhase::Succeeded, RemediationPhase::Cancelled];

/// What is being remediated. Written once at creation; the status carries the progress.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core", kube = "::kube_derive"),
    attr = "x_kube(crates(kube_core = \"::kube_core\"))"
)]
#[kube(
    group = "baremend.io",
    version = "v1alpha1",
    kind = "Remediation",
    namespaced,
    status = "RemediationStatus",
    shortname = "brem",
    category = "baremend",
    validation = "has(self.spec.machineName) || (has(self.spec.nodeName) && has(self.spec.hostBmc))",
    // Written once, at the start: a Remediation edited under way (another host, another
    // Node) would be carried out past every start gate. The API server keeps it as written.
    validation = kube_core::Rule::new("self.spec == oldSelf.spec").message("spec is written once, when the remediation starts, and cannot change"),
    printcolumn = r#"{"name":"Machine","type":"string","jsonPath":".spec.machineName"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.nodeName"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Since","type":"date","description":"When the phase began","jsonPath":".status.phaseSince"}"#,
    printcolumn = r#"{"name":"Strategy","type":"string","jsonPath":".status.strategy"}"#,
    printcolumn = r#"{"name":"Attempt","type":"integer","jsonPath":".status.attempt","priority":1}"#,
    printcolumn = r#"{"name":"Error","type":"string","description":"The last error","jsonPath":".status.lastError","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RemediationSpec {
    /// The Machine (same namespace) a health check asked to remediate (`spec.trigger` says how).
    /// None: a Node no Machine stands for (a cluster without Machines: platform none, UPI
    /// bare metal), named by `nodeName`, its BMC by the `HostBmc` `hostBmc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN))]
    pub machine_name: Option<String>,
    /// The `HostBmc` (same namespace) that maps a Node without a Machine to its BMC, when the
    /// remediation is of such a Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN))]
    pub host_bmc: Option<String>,
    /// The Machine's UID when the remediation began; a recreated Machine is another one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = UID_MAX))]
    pub machine_uid: Option<String>,
    /// The Node of the Machine (`status.nodeRef`) when the remediation began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN))]
    pub node_name: Option<String>,
    /// The BareMetalHost as `namespace/name`, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 3, max = NAMESPACED_NAME_MAX), pattern(NAMESPACED_NAME))]
    pub host: Option<String>,
    /// What asked for the remediation (none: the Machine annotation, as before triggers were
    /// recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<super::TriggerRef>,
}

impl Remediation {
    /// Its phase: the status's, or the first one while it has no status yet (one created a
    /// moment ago).
    pub fn phase(&self) -> RemediationPhase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }
}

impl RemediationSpec {
    /// What the remediation is for, by name: its Machine's, else (a Node without a Machine)
    /// its Node's. Remediations are numbered after it (`<name>-<n>`).
    pub fn subject_name(&self) -> &str {
        self.machine_name
            .as_deref()
            .or(self.node_name.as_deref())
            .unwrap_or_default()
    }

    /// Whether it is of a Node no Machine stands for.
    pub fn of_machineless_node(&self) -> bool {
        self.machine_name.is_none()
    }
}

/// A BareMetalHost, by namespace and name: what `spec.host` holds as `namespace/name`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct HostRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for HostRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl std::str::FromStr for HostRef {
    type Err = String;

    /// `namespace/name`, both parts present (the CRD's pattern checks the rest on write).
    fn from_str(text: &str) -> Result<Self, String> {
        match text.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(HostRef {
                    namespace: namespace.into(),
                    name: name.into(),
                })
            }
            _ => Err(format!("{text:?} is not <namespace>/<name>")),
        }
    }
}

impl RemediationSpec {
    /// The BareMetalHost `host` names, parsed here and nowhere else; an unusable value says
    /// why (`spec.host …`).
    pub fn host_ref(&self) -> Result<Option<HostRef>, String> {
        self.host
            .as_deref()
            .map(|text| text.parse().map_err(|why| format!("spec.host {why}")))
            .transpose()
    }

    /// The spec of a Machine's remediation, nothing else known yet.
    pub fn of_machine(machine: &str) -> Self {
        RemediationSpec {
            machine_name: Some(machine.into()),
            host_bmc: None,
            machine_uid: None,
            node_name: None,
            host: None,
            trigger: None,
        }
    }
}

/// Where a remediation is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
pub enum RemediationPhase {
    /// Triggered; nothing done yet (a safety gate may hold it).
    #[default]
    Pending,
    /// Power-off requested; waiting for proof.
    PoweringOff,
    /// The host is proven off.
    Fenced,
    /// The Node is deleted or tainted out-of-service.
    NodeReleased,
    /// Power-on requested; waiting for the Node to be Ready for the grace period.
    PoweringOn,
    /// Restoring the Node and removing our marks and the trigger.
    Restoring,
    /// The Node is back.
    Succeeded,
    /// Given up; the reason is in the conditions and `lastError`. A fenced host stays off.
    Failed,
    /// The trigger went away before the host was fenced; nothing destructive happened.
    Cancelled,
    /// The policy's mode is `DryRun`: what would have been done (strategy, host or BMC, the
    /// gates that would hold, the probe of the fencing path) is in the `DryRun` condition
    /// and the Events; nothing was changed.
    DryRun,
}

impl RemediationPhase {
    /// Every phase, in the order a remediation goes through them (the ends last).
    pub const ALL: [RemediationPhase; 10] = [
        RemediationPhase::Pending,
        RemediationPhase::PoweringOff,
        RemediationPhase::Fenced,
        RemediationPhase::NodeReleased,
        RemediationPhase::PoweringOn,
        RemediationPhase::Restoring,
        RemediationPhase::Succeeded,
        RemediationPhase::Failed,
        RemediationPhase::Cancelled,
        RemediationPhase::DryRun,
    ];

    /// The phase as written in `status.phase` (and in [`OUTCOME_LABEL`]).
    pub fn as_str(self) -> &'static str {
        match self {
            RemediationPhase::Pending => "Pending",
            RemediationPhase::PoweringOff => "PoweringOff",
            RemediationPhase::Fenced => "Fenced",
            RemediationPhase::NodeReleased => "NodeReleased",
            RemediationPhase::PoweringOn => "PoweringOn",
            RemediationPhase::Restoring => "Restoring",
            RemediationPhase::Succeeded => "Succeeded",
            RemediationPhase::Failed => "Failed",
            RemediationPhase::Cancelled => "Cancelled",
            RemediationPhase::DryRun => "DryRun",
        }
    }

    /// Whether nothing more will happen.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RemediationPhase::Succeeded
                | RemediationPhase::Failed
                | RemediationPhase::Cancelled
                | RemediationPhase::DryRun
        )
    }
}

/// A condition in the usual Kubernetes shape.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition type, e.g. `Fenced`, `Succeeded`, `Held`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[schemars(regex(pattern = r"^(True|False|Unknown)$"))]
    pub status: String,
    /// A CamelCase reason.
    pub reason: String,
    /// A human-readable message.
    #[serde(default)]
    pub message: String,
    /// When the status last changed (RFC 3339).
    pub last_transition_time: String,
}

impl Condition {
    /// Whether this is a condition of type `type_` with status `True`.
    pub fn is_true(&self, type_: super::ConditionType) -> bool {
        self.type_ == type_.as_str() && self.status == "True"
    }

    /// Whether this is a condition of type `type_` with status `False`.
    pub fn is_false(&self, type_: super::ConditionType) -> bool {
        self.type_ == type_.as_str() && self.status == "False"
    }
}

/// When a step was persisted.
// `S` names the steps: a Remediation's `RemediationStep`, a DriftRemediation's `DriftStep`
// (a plain comment: the doc comment is the CRD's description).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", bound = "S: StoredName")]
#[schemars(bound = "")]
pub struct StepTime<S> {
    /// The step, e.g. `PowerOffRequested`, `Fenced`, `NodeDeleted`.
    pub step: Stored<S>,
    /// The power cycle it belongs to, from 1.
    pub attempt: u32,
    /// When it was persisted (RFC 3339).
    pub time: String,
}

/// The labels, annotations and taints of the Node before it was released; restored where the
/// new Node lacks them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeBackup {
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Taints an admin or another controller set (not the ones the node lifecycle controller
    /// or the remediation manage: `node.kubernetes.io/*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<SavedTaint>,
}

/// A Node taint as saved in a backup (`timeAdded` is the taint manager's and is not kept).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct SavedTaint {
    /// The key.
    pub key: String,
    /// The value, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// Progress of a remediation, persisted before each step acts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationStatus {
    /// The phase.
    #[serde(default)]
    pub phase: RemediationPhase,
    /// When the phase began (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_since: Option<String>,
    /// The power cycle under way, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The fencing strategy in use, as named in the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Stored<FenceStrategyName>>,
    /// The power driver in use (`bmh-reboot-api`, `redfish`, `ipmi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The last power state read, with the time of the read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_power_state: Option<String>,
    /// The last error, one line, never with credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The Node's labels and annotations, saved before it was released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_backup: Option<NodeBackup>,
    /// The boot ID the Node reported (`status.nodeInfo.bootID`) when power-off was requested:
    /// the Node counts as back only once it reports another one. A Node kept out-of-service
    /// can still read Ready from before the power cycle; a new boot ID proves a reboot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_boot_id: Option<String>,
    /// The Node's UID when power-off was requested: the proof of power-off releases this Node
    /// object only, never one registered again under the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_uid: Option<String>,
    /// The Cluster API Cluster (in this namespace) whose workload API server holds the Node,
    /// recorded with `nodeUid` when power-off was requested: the proof releases the Node in
    /// that cluster only. Absent: the Node is in the cluster baremend runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN))]
    pub node_cluster: Option<String>,
    /// Our power-off request was found removed after the host was fenced, and made again
    /// (once: a second removal fails the remediation `FenceLost`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub power_off_request_remade: bool,
    /// Every persisted step, in order.
    #[serde(default)]
    pub steps: Vec<StepTime<RemediationStep>>,
    /// Conditions.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_status_written_when_strategy_and_steps_were_strings_reads_as_enums_and_writes_back_unchanged()
     {
        // As the controller wrote it while `strategy` and `steps[].step` were `String`s (and a
        // DriftRemediation's steps the same way).
        let old = json!({
            "phase": "Fenced",
            "phaseSince": "2026-01-02T03:04:05Z",
            "attempt": 2,
            "strategy": "DirectBmc",
            "driver": "redfish",
            "nodeUid": "u-1",
            "steps": [
                {"step": "PowerOffRequested", "attempt": 1, "time": "2026-01-02T03:00:00Z"},
                {"step": "Escalated", "attempt": 1, "time": "2026-01-02T03:02:00Z"},
                {"step": "Fenced", "attempt": 2, "time": "2026-01-02T03:04:05Z"},
            ],
            "conditions": [],
        });
        let status: RemediationStatus = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(
            status.strategy,
            Some(Stored::Known(FenceStrategyName::DirectBmc))
        );
        let steps: Vec<Option<RemediationStep>> =
            status.steps.iter().map(|t| t.step.known()).collect();
        assert_eq!(
            steps,
            [
                Some(RemediationStep::PowerOffRequested),
                Some(RemediationStep::Escalated),
                Some(RemediationStep::Fenced),
            ]
        );
        assert_eq!(serde_json::to_value(&status).unwrap(), old);
        for (typed, text) in [
            (
                FenceStrategyName::BareMetalHostRebootApi,
                "BareMetalHostRebootApi",
            ),
            (FenceStrategyName::DirectBmc, "DirectBmc"),
        ] {
            assert_eq!(serde_json::to_value(Stored::from(typed)).unwrap(), text);
        }
    }

    #[test]
    fn a_name_this_version_does_not_know_keeps_the_object_readable_and_is_written_back_as_read() {
        // A newer version may add a strategy or a step; an older one reading its object must
        // neither fail the whole object (the watch would stall every Remediation) nor take
        // the name for one it knows.
        let newer = json!({
            "phase": "PoweringOff",
            "strategy": "SomeNewerStrategy",
            "steps": [{"step": "SomeNewerStep", "attempt": 1, "time": "2026-01-02T03:00:00Z"}],
        });
        let status: RemediationStatus = serde_json::from_value(newer.clone()).unwrap();
        let strategy = status.strategy.as_ref().unwrap();
        assert_eq!(strategy.known(), None);
        assert_eq!(strategy.as_str(), "SomeNewerStrategy");
        assert_eq!(status.steps[0].step.known(), None);
        let mut written = serde_json::to_value(&status).unwrap();
        written.as_object_mut().unwrap().remove("conditions");
        assert_eq!(written, newer);
    }

    #[test]
    fn spec_host_is_parsed_in_one_place_and_an_unusable_value_names_the_field() {
        let spec = |host: &str| RemediationSpec {
            host: Some(host.into()),
            ..serde_json::from_value(json!({"machineName": "w0"})).unwrap()
        };
        let host = spec("m/h0").host_ref().unwrap().unwrap();
        assert_eq!((host.namespace.as_str(), host.name.as_str()), ("m", "h0"));
        assert_eq!(host.to_string(), "m/h0");
        let none: RemediationSpec = serde_json::from_value(json!({"machineName": "w0"})).unwrap();
        assert_eq!(none.host_ref(), Ok(None));
        for bad in ["h0", "/h0", "m/", "m/h0/extra"] {
            let why = spec(bad).host_ref().unwrap_err();
            assert_eq!(why, format!("spec.host {bad:?} is not <namespace>/<name>"));
        }
    }
}
