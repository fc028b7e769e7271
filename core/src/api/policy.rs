//! `RemediationPolicy`: the cluster-scoped knobs and safety gates. Every field is defaulted in
//! the schema, so an empty `spec: {}` is a complete, conservative policy; the controller uses
//! the object named `default` and the same defaults when there is none.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::annotations::DEFAULT_REBOOT_KEY;
use super::bounds::{DNS_LABEL, DNS_LABEL_MAX};
pub use super::names::FenceStrategyName;
use super::retention::Retention;

/// The policy. See the policy table in docs/reference/metrics.md for what each field does.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core", kube = "::kube_derive"),
    attr = "x_kube(crates(kube_core = \"::kube_core\"))"
)]
#[kube(
    group = "baremend.io",
    version = "v1alpha1",
    kind = "RemediationPolicy",
    status = "PolicyStatus",
    shortname = "brpol",
    category = "baremend",
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode"}"#,
    printcolumn = r#"{"name":"Paused","type":"boolean","jsonPath":".spec.paused"}"#,
    printcolumn = r#"{"name":"Max","type":"integer","jsonPath":".spec.maxConcurrent"}"#,
    printcolumn = r#"{"name":"Release","type":"string","jsonPath":".spec.nodeRelease"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    // A Node counts as back only once Ready for the grace period, within the node-ready
    // deadline: a grace as long as the deadline makes every remediation end NodeNeverReady.
    validation = Rule::new(
        "!has(self.spec.timeouts) || self.spec.timeouts.readyGraceSeconds < self.spec.timeouts.nodeReadySeconds"
    ).message("timeouts.readyGraceSeconds must be shorter than timeouts.nodeReadySeconds: a Node counts as back only once Ready that long, within that deadline")
)]
#[serde(rename_all = "camelCase")]
pub struct RemediationPolicySpec {
    /// `Remediate` (fence, release, power on) or `DryRun` (decide and record what would be
    /// done, change nothing; the default: only a policy that says `Remediate` acts). Read
    /// when a remediation would start: one already past its start finishes under the mode it
    /// started with.
    #[serde(default)]
    pub mode: RemediationMode,
    /// Start nothing new (a held start says `Paused`); remediations past their start
    /// finish their cycle, since a half-done cycle is the dangerous state.
    #[serde(default)]
    pub paused: bool,
    /// Remediations running at once: per Cluster API Cluster (a workload cluster's own
    /// network and power are its failure domain), else all machines together. The storm
    /// gate and the control-plane guard count per Cluster the same way.
    #[serde(default = "default_max_concurrent")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_concurrent: u32,
    /// A ceiling on the remediations one controller (one shard) runs at once over every
    /// Cluster it serves, whatever each Cluster's own count; unset: none beyond
    /// `maxConcurrent` per Cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_concurrent_per_shard: Option<u32>,
    /// The storm gate.
    #[serde(default)]
    pub storm: StormGate,
    /// The control-plane gate.
    #[serde(default)]
    pub control_plane: ControlPlaneGate,
    /// Fencing strategies, tried in this order when one cannot prove the host off.
    #[serde(default = "default_strategies")]
    #[schemars(length(min = 1, max = 3))]
    pub strategies: Vec<FenceStrategyName>,
    /// The key of our request in the BareMetalHost reboot API
    /// (`reboot.metal3.io/<key>`).
    #[serde(default = "default_reboot_key")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
    )]
    pub reboot_key: String,
    /// Delete the Node, or keep it tainted out-of-service (Kubernetes ≥ 1.28).
    #[serde(default)]
    pub node_release: NodeReleaseMode,
    /// Per-step deadlines and the grace period.
    #[serde(default)]
    pub timeouts: PolicyTimeouts,
    /// Whole power cycles before the remediation fails.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = 10))]
    pub max_attempts: u32,
    /// When a remediation fails with the host fenced, delete the Machine so that its
    /// MachineSet replaces it (only for Machines owned by a MachineSet).
    #[serde(default)]
    pub delete_machine_on_failure: bool,
    /// How many finished Remediations are kept per Machine.
    #[serde(default)]
    pub retention: Retention,
    /// Who may ask for a remediation, and name a host's BMC (docs/reference/contracts.md, "Trust").
    #[serde(default)]
    pub trust: TrustPolicy,
    /// Quiet through upgrades and MCO reboots (the `ClusterUpgrading` and
    /// `MachineConfigUpdating` gates).
    #[serde(default)]
    pub upgrade_hold: UpgradeHold,
    /// Let a BMC reached over plain HTTP (`redfish+http`) or without certificate
    /// verification (`insecureSkipVerify`) prove a host off. Off by default: whoever is on
    /// the path could answer Off for a running host. IPMI (RMCP+ only) is authenticated.
    #[serde(default)]
    pub allow_insecure_bmc: bool,
    /// Before a BareMetalHost's `status.poweredOn: false` proves its host off, read the host's
    /// BMC ourselves, read-only, with the Secret its `spec.bmc.credentialsName` names: the
    /// operator's reading is another process's, and a BMC that contradicts itself there is
    /// caught only by a reading of our own. A BMC that cannot be read from here leaves the
    /// operator's word alone (the Fenced Event says so). Turn it off where the BMC network is
    /// not routable from the controller, to spare each proof the connection timeout.
    #[serde(default = "default_true")]
    pub corroborate_reboot_api: bool,
}

/// What the controller reports on a policy (a `RemediationPolicy` or a `DriftPolicy`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// The `metadata.generation` of the policy that the controller reads now: written once
    /// that generation is in its cache, so any decision made after it is seen here uses this
    /// spec or a newer one. Behind `metadata.generation` while a change is on its way (or no
    /// controller runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
}

impl RemediationPolicySpec {
    /// The policy in force when no RemediationPolicy `default` exists (an install step
    /// skipped, the policy deleted): the defaults in `DryRun`, so that nothing is fenced
    /// before an operator has said so.
    pub fn unconfigured() -> Self {
        RemediationPolicySpec {
            mode: RemediationMode::DryRun,
            ..RemediationPolicySpec::default()
        }
    }
}

impl Default for RemediationPolicySpec {
    fn default() -> Self {
        RemediationPolicySpec {
            mode: RemediationMode::default(),
            paused: false,
            max_concurrent: default_max_concurrent(),
            max_concurrent_per_shard: None,
            storm: StormGate::default(),
            control_plane: ControlPlaneGate::default(),
            strategies: default_strategies(),
            reboot_key: default_reboot_key(),
            node_release: NodeReleaseMode::default(),
            timeouts: PolicyTimeouts::default(),
            max_attempts: default_max_attempts(),
            delete_machine_on_failure: false,
            retention: Retention::default(),
            trust: TrustPolicy::default(),
            upgrade_hold: UpgradeHold::default(),
            allow_insecure_bmc: false,
            corroborate_reboot_api: true,
        }
    }
}

/// What the controller does with a triggered Machine. The default is the dry run: a policy
/// that leaves `mode` out, or misspells it (`mdoe`, which the API server prunes), changes
/// nothing; only one that says `Remediate` power-cycles hosts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
pub enum RemediationMode {
    /// Fence the host, release its Node, power it on and restore the Node.
    Remediate,
    /// Make every decision of a start — the gates, the strategy, the host or BMC — probe the
    /// fencing path without disrupting it, record it all in the Remediation (phase `DryRun`)
    /// and its Events, and change nothing.
    #[default]
    DryRun,
}

/// No new remediation while too many machines are unhealthy at once: a storm is more likely a
/// network or control-plane problem than many hung hosts, and fencing would make it worse.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StormGate {
    /// Share of machines (percent) that may be triggered before the gate holds.
    #[serde(default = "default_max_unhealthy_percent")]
    #[schemars(range(min = 0, max = 100))]
    pub max_unhealthy_percent: u32,
}

impl Default for StormGate {
    fn default() -> Self {
        StormGate {
            max_unhealthy_percent: default_max_unhealthy_percent(),
        }
    }
}

/// Control-plane machines: one at a time, and never below etcd quorum.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneGate {
    /// Remediate control-plane machines at all.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Refuse when fencing would leave fewer Ready control-plane Nodes than a quorum.
    #[serde(default = "default_true")]
    pub quorum_guard: bool,
}

impl Default for ControlPlaneGate {
    fn default() -> Self {
        ControlPlaneGate {
            enabled: true,
            quorum_guard: true,
        }
    }
}

/// While the cluster upgrades (the ClusterVersion is `Progressing`) or the Node's
/// machine-config daemon updates or reboots it, a Node slow to come back is most likely in
/// that reboot: its start is held, for at most `maxSeconds` after the request, then it goes
/// ahead with a Warning Event.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeHold {
    /// The longest a start is held after its request; 0: never held.
    #[serde(default = "default_upgrade_hold_seconds")]
    #[schemars(range(min = 0, max = 86400))]
    pub max_seconds: u32,
}

impl Default for UpgradeHold {
    fn default() -> Self {
        UpgradeHold {
            max_seconds: default_upgrade_hold_seconds(),
        }
    }
}

/// A bare-metal reboot into a new config (drain done, firmware POST, the kubelet back) fits
/// with room to spare; a Node unhealthy longer is not in one.
fn default_upgrade_hold_seconds() -> u32 {
    1800
}

/// How the Node of a fenced host is released.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
pub enum NodeReleaseMode {
    /// Back up labels and annotations, delete the Node.
    #[default]
    Delete,
    /// Keep the Node, taint it `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`.
    OutOfService,
}

/// Deadlines, in seconds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTimeouts {
    /// Waiting for power-off proof, per strategy.
    #[serde(default = "default_power_off_seconds")]
    #[schemars(range(min = 1, max = 86400))]
    pub power_off_seconds: u32,
    /// Waiting for the Node to be Ready after power-on, per attempt.
    #[serde(default = "default_node_ready_seconds")]
    #[schemars(range(min = 1, max = 86400))]
    pub node_ready_seconds: u32,
    /// How long the Node must stay Ready to count as back.
    #[serde(default = "default_ready_grace_seconds")]
    #[schemars(range(min = 0, max = 86400))]
    pub ready_grace_seconds: u32,
}

impl Default for PolicyTimeouts {
    fn default() -> Self {
        PolicyTimeouts {
            power_off_seconds: default_power_off_seconds(),
            node_ready_seconds: default_node_ready_seconds(),
            ready_grace_seconds: default_ready_grace_seconds(),
        }
    }
}

/// Where remediation requests and BMC mappings are honoured from, and how far a request may
/// choose for itself. A request or a `HostBmc` from anywhere else is refused (a condition and
/// a Warning Event on it, `baremend_requests_refused_total`) and changes nothing.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrustPolicy {
    /// Namespaces whose `NodeRemediation`s are honoured. Unset: the namespaces of the
    /// `NodeRemediationTemplate`s an existing NodeHealthCheck references (a cluster-scoped
    /// object a namespace tenant cannot make). `[]`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), inner(length(min = 1, max = DNS_LABEL_MAX), regex(pattern = DNS_LABEL)))]
    pub request_namespaces: Option<Vec<String>>,
    /// Namespaces whose `HostBmc`s may name a Node without a Machine (a `HostBmc` naming a
    /// Machine counts in that Machine's namespace only, whatever this says).
    #[serde(default = "default_host_bmc_namespaces")]
    #[schemars(length(max = 64), inner(length(min = 1, max = DNS_LABEL_MAX), regex(pattern = DNS_LABEL)))]
    pub host_bmc_namespaces: Vec<String>,
    /// Namespaces besides its own where an OpenShift Machine's BareMetalHost (named by its
    /// `spec.providerID` or `metal3.io/BareMetalHost` annotation) is honoured. Empty
    /// (default): the Machine's own namespace only — whoever writes a Machine names its host,
    /// and would otherwise choose any host of the cluster to power off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = DNS_LABEL_MAX), regex(pattern = DNS_LABEL)))]
    pub machine_host_namespaces: Vec<String>,
    /// Whether a request may set `nodeRelease` to the other mode than the policy's; otherwise
    /// a request naming another release is refused.
    #[serde(default)]
    pub request_may_choose_node_release: bool,
}

impl Default for TrustPolicy {
    fn default() -> Self {
        TrustPolicy {
            request_namespaces: None,
            host_bmc_namespaces: default_host_bmc_namespaces(),
            machine_host_namespaces: Vec::new(),
            request_may_choose_node_release: false,
        }
    }
}

/// The namespaces an install keeps to administrators: `deploy/`'s and OpenShift's Machine API's.
fn default_host_bmc_namespaces() -> Vec<String> {
    vec!["baremend".into(), "openshift-machine-api".into()]
}

fn default_max_concurrent() -> u32 {
    1
}
fn default_max_unhealthy_percent() -> u32 {
    40
}
fn default_true() -> bool {
    true
}
fn default_strategies() -> Vec<FenceStrategyName> {
    vec![
        FenceStrategyName::BareMetalHostRebootApi,
        FenceStrategyName::DirectBmc,
    ]
}
fn default_reboot_key() -> String {
    DEFAULT_REBOOT_KEY.to_string()
}
/// Two: with the default timeouts the second power cycle starts inside a NodeHealthCheck's
/// single-template lease (see `remediation::decide::lease_budget`); a third would be cut off.
fn default_max_attempts() -> u32 {
    2
}
fn default_power_off_seconds() -> u32 {
    180
}
fn default_node_ready_seconds() -> u32 {
    900
}
fn default_ready_grace_seconds() -> u32 {
    30
}

#[cfg(test)]
mod tests {
    use kube_core::CustomResourceExt;
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn an_empty_spec_is_the_default_policy() {
        let spec: RemediationPolicySpec = serde_json::from_value(json!({})).unwrap();
        assert_eq!(spec, RemediationPolicySpec::default());
        assert_eq!(spec.max_concurrent, 1);
        assert_eq!(spec.reboot_key, "capbm-requested-power-off");
        assert_eq!(spec.node_release, NodeReleaseMode::Delete);
        // Leaving `mode` out (or misspelling it) is a dry run: only `Remediate` acts.
        assert_eq!(spec.mode, RemediationMode::DryRun);
        assert!(!spec.paused);
        assert_eq!(spec.retention.keep_finished, 5);
    }

    #[test]
    fn the_schema_defaults_are_the_rust_defaults() {
        // The API server fills defaults from the schema, the controller from serde: both
        // must give the same policy, or a policy applied with kubectl would differ from the
        // built-in one.
        let crd = serde_json::to_value(RemediationPolicy::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let defaults = fill_defaults(spec);
        let from_schema: RemediationPolicySpec = serde_json::from_value(defaults).unwrap();
        assert_eq!(from_schema, RemediationPolicySpec::default());
    }

    fn fill_defaults(schema: &Value) -> Value {
        let mut object = serde_json::Map::new();
        if let Some(properties) = schema["properties"].as_object() {
            for (name, property) in properties {
                let value = if property["type"] == "object" {
                    fill_defaults(property)
                } else {
                    property["default"].clone()
                };
                if !value.is_null() {
                    object.insert(name.clone(), value);
                }
            }
        }
        Value::Object(object)
    }

    #[test]
    fn unknown_strategies_and_modes_are_refused() {
        for bad in [
            json!({"strategies": ["Telepathy"]}),
            json!({"nodeRelease": "Evaporate"}),
            json!({"mode": "Pretend"}),
            json!({"paused": "yes"}),
            json!({"maxConcurrent": -1}),
            json!({"retention": {"keepFinished": -1}}),
        ] {
            assert!(
                serde_json::from_value::<RemediationPolicySpec>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }
}
