//! The Machine Config Operator's objects and Node annotations, as the drift coordinator reads
//! them. It never writes any of them: the MCO owns every name here.
//!
//! The kinds are read into small types of our own (the fields the coordinator uses, lenient
//! where a malformed field must not break a watch), like the remediation's cached kinds.

use std::collections::BTreeMap;

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cached::{cached_kind, lenient};

/// The API group of the MCO's kinds.
pub const GROUP: &str = "machineconfiguration.openshift.io";

/// Node annotation: the rendered MachineConfig the node is on (written by the MCD).
pub const CURRENT_CONFIG: &str = "machineconfiguration.openshift.io/currentConfig";
/// Node annotation: the rendered MachineConfig the node should be on (written by the MCC).
pub const DESIRED_CONFIG: &str = "machineconfiguration.openshift.io/desiredConfig";
/// Node annotation: `Done`, `Working`, `Degraded` or `Unreconcilable` (written by the MCD).
pub const STATE: &str = "machineconfiguration.openshift.io/state";
/// Node annotation: why the node is Degraded (empty when Done).
pub const REASON: &str = "machineconfiguration.openshift.io/reason";
/// Node annotation: the MCD's drain or uncordon request (`drain-<rendered>`,
/// `uncordon-<rendered>`).
pub const DESIRED_DRAIN: &str = "machineconfiguration.openshift.io/desiredDrain";
/// Node annotation: the request the MCC carried out last; equal to `desiredDrain` when done.
pub const LAST_APPLIED_DRAIN: &str = "machineconfiguration.openshift.io/lastAppliedDrain";
/// Node annotation: `Rebooting` just before the MCD reboots the node.
pub const POST_CONFIG_ACTION: &str = "machineconfiguration.openshift.io/post-config-action";
/// Node annotation: the image the node is on (image mode).
pub const CURRENT_IMAGE: &str = "machineconfiguration.openshift.io/currentImage";
/// Node annotation: the image the node should be on (image mode).
pub const DESIRED_IMAGE: &str = "machineconfiguration.openshift.io/desiredImage";
/// Node annotation: `SingleReplica` on a single-node cluster (the MCD skips the drain).
pub const CONTROL_PLANE_TOPOLOGY: &str = "machineconfiguration.openshift.io/controlPlaneTopology";
/// The label that ties a MachineConfig to a pool role.
pub const ROLE_LABEL: &str = "machineconfiguration.openshift.io/role";

/// The file whose presence makes the MCD re-apply its whole config (it cordons, drains,
/// rewrites every file and unit, reboots and uncordons). On tmpfs: gone after a reboot.
pub const FORCE_FILE: &str = "/run/machine-config-daemon-force";

/// The namespace of the MCD's Events.
pub const MCO_NAMESPACE: &str = "openshift-machine-config-operator";

/// A MachineConfigPool: its budget, pause, membership and target config.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MachineConfigPool {
    /// Name, labels, annotations (the approval annotation).
    pub metadata: ObjectMeta,
    /// What is kept of the spec.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<PoolSpec>,
    /// What is kept of the status.
    #[serde(default, deserialize_with = "lenient")]
    pub status: Option<PoolStatus>,
}
cached_kind!(
    MachineConfigPool,
    GROUP,
    "v1",
    "MachineConfigPool",
    "machineconfigpools",
    ClusterResourceScope
);

/// What is kept of a pool's spec.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolSpec {
    /// Nodes of the pool.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub node_selector: Option<LabelSelector>,
    /// How many nodes may be unavailable at once (integer or percentage; default 1, 0 is 1).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_unavailable: Option<IntOrString>,
    /// New configs are not rolled out while paused.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub paused: Option<bool>,
    /// The target rendered config.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub configuration: Option<ConfigRef>,
}

/// What is kept of a pool's status.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    /// The config every node of the pool is on (copied from the spec when all are updated).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub configuration: Option<ConfigRef>,
    /// Nodes in the pool.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub machine_count: Option<i64>,
    /// Degraded or Unreconcilable nodes.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub degraded_machine_count: Option<i64>,
}

/// A reference to a rendered MachineConfig.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConfigRef {
    /// `rendered-<pool>-<hash>`.
    #[serde(default)]
    pub name: String,
}

/// A MachineConfig (the coordinator reads rendered ones only).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MachineConfig {
    /// Name.
    pub metadata: ObjectMeta,
    /// The spec; `config` is the Ignition document.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<MachineConfigSpec>,
}
cached_kind!(
    MachineConfig,
    GROUP,
    "v1",
    "MachineConfig",
    "machineconfigs",
    ClusterResourceScope
);

/// What is kept of a MachineConfig's spec.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MachineConfigSpec {
    /// The Ignition config (version 3.x; 2.2 is read too).
    #[serde(default)]
    pub config: Value,
}

/// A MachineConfigNode (served from OpenShift 4.15 as v1alpha1, later as v1): named like its
/// Node. Optional: everything it says is also in the Node's annotations.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MachineConfigNode {
    /// Name (the Node's).
    pub metadata: ObjectMeta,
    /// What is kept of the status.
    #[serde(default, deserialize_with = "lenient")]
    pub status: Option<MachineConfigNodeStatus>,
}
cached_kind!(
    MachineConfigNode,
    GROUP,
    "v1",
    "MachineConfigNode",
    "machineconfignodes",
    ClusterResourceScope
);

/// What is kept of a MachineConfigNode's status.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MachineConfigNodeStatus {
    /// Conditions (`NodeDegraded`, `Drained`, `Updated`, …).
    #[serde(default, deserialize_with = "lenient")]
    pub conditions: Option<Vec<McnCondition>>,
}

/// A MachineConfigNode condition.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct McnCondition {
    /// The type.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,
    /// The message.
    #[serde(default)]
    pub message: String,
}

impl MachineConfigPool {
    /// The pool's `maxUnavailable` for `nodes` members, with the MCO's rules: default 1,
    /// percentages of the pool rounded down, and never less than 1 (0 means 1).
    pub fn max_unavailable(&self, nodes: usize) -> usize {
        let value = self.spec.as_ref().and_then(|s| s.max_unavailable.clone());
        let allowed = match value {
            None => 1,
            Some(IntOrString::Int(n)) => usize::try_from(n).unwrap_or(0),
            Some(IntOrString::String(text)) => match text.strip_suffix('%') {
                Some(percent) => percent
                    .trim()
                    .parse::<usize>()
                    .map(|p| nodes.saturating_mul(p.min(100)) / 100)
                    .unwrap_or(1),
                None => text.trim().parse().unwrap_or(1),
            },
        };
        allowed.max(1)
    }

    /// Whether a Node with these labels belongs to the pool (an absent or empty selector
    /// selects nothing, as a pool without one has no nodes).
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        let Some(selector) = self.spec.as_ref().and_then(|s| s.node_selector.as_ref()) else {
            return false;
        };
        selector_matches(selector, labels)
    }

    /// The target rendered config (`spec.configuration.name`).
    pub fn target(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|s| s.configuration.as_ref())
            .map(|c| c.name.as_str())
            .filter(|n| !n.is_empty())
    }

    /// Whether a rollout is under way: the target is not yet what every node is on.
    pub fn rolling_out(&self) -> bool {
        let done = self
            .status
            .as_ref()
            .and_then(|s| s.configuration.as_ref())
            .map(|c| c.name.as_str());
        self.target().is_some() && self.target() != done
    }

    /// Whether the pool is paused.
    pub fn paused(&self) -> bool {
        self.spec.as_ref().and_then(|s| s.paused).unwrap_or(false)
    }
}

/// Whether a label selector matches labels (`matchLabels` and the four `matchExpressions`
/// operators; an empty selector matches everything, an unknown operator nothing).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_label = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expression = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    by_label && by_expression
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pool(spec: Value) -> MachineConfigPool {
        serde_json::from_value(json!({"metadata": {"name": "worker"}, "spec": spec})).unwrap()
    }

    #[test]
    fn max_unavailable_follows_the_mco_rules() {
        assert_eq!(pool(json!({})).max_unavailable(10), 1);
        assert_eq!(pool(json!({"maxUnavailable": 0})).max_unavailable(10), 1);
        assert_eq!(pool(json!({"maxUnavailable": 3})).max_unavailable(10), 3);
        assert_eq!(
            pool(json!({"maxUnavailable": "25%"})).max_unavailable(10),
            2
        );
        assert_eq!(pool(json!({"maxUnavailable": "10%"})).max_unavailable(5), 1);
        assert_eq!(
            pool(json!({"maxUnavailable": "100%"})).max_unavailable(4),
            4
        );
        assert_eq!(pool(json!({"maxUnavailable": "2"})).max_unavailable(4), 2);
        // Malformed values fall back to the default rather than to "everything at once".
        assert_eq!(
            pool(json!({"maxUnavailable": "lots"})).max_unavailable(4),
            1
        );
        assert_eq!(pool(json!({"maxUnavailable": -3})).max_unavailable(4), 1);
        assert_eq!(pool(json!({"maxUnavailable": [1]})).max_unavailable(4), 1);
    }

    #[test]
    fn a_pool_selects_its_nodes_and_knows_when_it_rolls_out() {
        let worker = pool(json!({
            "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}},
            "configuration": {"name": "rendered-worker-b"}
        }));
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert!(worker.selects(&labels(&[("node-role.kubernetes.io/worker", "")])));
        assert!(!worker.selects(&labels(&[("node-role.kubernetes.io/master", "")])));
        assert!(worker.rolling_out());
        let mut settled = worker.clone();
        settled.status = Some(PoolStatus {
            configuration: Some(ConfigRef {
                name: "rendered-worker-b".into(),
            }),
            ..PoolStatus::default()
        });
        assert!(!settled.rolling_out());
        assert!(!pool(json!({})).selects(&labels(&[("a", "b")])));
    }
}
