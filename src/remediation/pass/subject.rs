//! What a pass remediates: a Machine (the subject of the annotation and of the Machine health
//! checks' requests), or a Node no Machine stands for — a cluster without Machines (platform
//! none, UPI bare metal) whose NodeHealthCheck asks for the Node — known through the
//! `HostBmc` that names the Node and its BMC. Pure: names and references out of the objects.
//!
//! Expected flow: the Machine controller passes Machines; the controller of Machine-less
//! Nodes passes the `HostBmc`s that name a Node and no Machine ([`machineless_node`](crate::remediation::decide::trust::machineless_node)).
//! Guarantees: a Node that has a Machine is never a subject of its own (its Machine's pass
//! remediates it, also when a `HostBmc` names the Node); which `HostBmc` is a Machine-less
//! Node's subject is for `machineless_claims` in `trust.rs` to say (one trusted claim, never
//! two).
//! Caveats: a Node subject has no Machine to mark, delete or read annotations from: those
//! steps are skipped, and its Events go to the Node.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::api::{HostBmc, slim};
use crate::remediation::decide::workload::{cluster_of, workload_cluster_of};

/// The label of a control-plane Node (Kubernetes' current and former names).
const NODE_ROLE_CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";
const NODE_ROLE_MASTER: &str = "node-role.kubernetes.io/master";

/// What a pass remediates.
#[derive(Clone, Debug)]
pub enum Subject {
    /// A Machine: its Node and host are found through it.
    Machine(Arc<slim::Machine>),
    /// A Node without a Machine, through the `HostBmc` naming it.
    Node(Arc<HostBmc>),
}

impl Subject {
    /// Its name: the Machine's, or the Node's. Remediations are numbered after it.
    pub fn name(&self) -> String {
        match self {
            Subject::Machine(machine) => machine.name_any(),
            Subject::Node(mapping) => mapping.spec.node_name.clone().unwrap_or_default(),
        }
    }

    /// The namespace its Remediations live in: the Machine's, or the `HostBmc`'s (beside the
    /// BMC's credentials).
    pub fn namespace(&self) -> String {
        match self {
            Subject::Machine(machine) => machine.namespace(),
            Subject::Node(mapping) => mapping.namespace(),
        }
        .unwrap_or_default()
    }

    /// Its Node now: the Machine's `status.nodeRef`, or the Node its `HostBmc` names.
    pub fn node_name(&self) -> Option<String> {
        match self {
            Subject::Machine(machine) => machine.node_name().map(str::to_string),
            Subject::Node(mapping) => mapping.spec.node_name.clone(),
        }
    }

    /// The Machine, when it is one.
    pub fn machine(&self) -> Option<&slim::Machine> {
        match self {
            Subject::Machine(machine) => Some(machine),
            Subject::Node(_) => None,
        }
    }

    /// The `HostBmc` of a Node subject.
    pub fn host_bmc(&self) -> Option<&HostBmc> {
        match self {
            Subject::Machine(_) => None,
            Subject::Node(mapping) => Some(mapping),
        }
    }

    /// The kind, as messages name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Subject::Machine(_) => "Machine",
            Subject::Node(_) => "Node",
        }
    }

    /// The Machine's annotations (a Node subject has no Machine: none).
    pub fn machine_annotations(&self) -> Option<&BTreeMap<String, String>> {
        self.machine().map(|m| m.annotations())
    }

    /// The owner of its Remediations: the Machine, or the `HostBmc` of a Node subject (an
    /// object that stays while the Node is deleted and registers again).
    /// `machine_api_version`: the Machine API in use.
    pub fn owner_reference(&self, machine_api_version: &str) -> OwnerReference {
        let (api_version, kind, meta) = match self {
            Subject::Machine(machine) => (
                machine_api_version.to_string(),
                "Machine",
                &machine.metadata,
            ),
            Subject::Node(mapping) => (
                HostBmc::api_version(&()).into_owned(),
                "HostBmc",
                &mapping.metadata,
            ),
        };
        OwnerReference {
            api_version,
            kind: kind.into(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            ..OwnerReference::default()
        }
    }

    /// Where its Events go beside the Remediation's: the Machine (`kubectl describe machine`
    /// is where an operator looks first), or the Node (a cluster without Machines is looked
    /// at through its Nodes). `machine_api_version`: the Machine API in use.
    pub fn event_target(
        &self,
        machine_api_version: &str,
        node_uid: Option<String>,
    ) -> ObjectReference {
        match self {
            Subject::Machine(machine) => {
                let mut reference = machine.object_ref(&());
                reference.api_version = Some(machine_api_version.into());
                reference
            }
            Subject::Node(_) => node_reference(&self.name(), node_uid),
        }
    }
}

/// The strategies that can fence a Node without a Machine: those that drive its BMC (it has
/// no BareMetalHost, so the reboot API could only fail and escalate). None left: the
/// policy's own, so that the remediation fails saying why instead of doing nothing.
pub fn machineless_strategies(
    strategies: &[crate::api::FenceStrategyName],
) -> Vec<crate::api::FenceStrategyName> {
    let usable: Vec<crate::api::FenceStrategyName> = strategies
        .iter()
        .copied()
        .filter(|s| *s != crate::api::FenceStrategyName::BareMetalHostRebootApi)
        .collect();
    if usable.is_empty() {
        strategies.to_vec()
    } else {
        usable
    }
}

/// Whether Node `labels` say control plane.
pub fn node_is_control_plane(labels: &BTreeMap<String, String>) -> bool {
    labels.contains_key(NODE_ROLE_CONTROL_PLANE) || labels.contains_key(NODE_ROLE_MASTER)
}

/// Whether the Node `machine` names (its `status.nodeRef`) is one of this cluster's. On
/// Cluster API, a Machine whose Cluster's Nodes live in a workload cluster names a Node
/// *there*: a Node here of the same name is not its (see [`workload_cluster_of`];
/// `provider_id_of` says whether this cluster has a Node of that name, and its providerID).
pub fn names_node_here(
    machine: &slim::Machine,
    machines: &[Arc<slim::Machine>],
    machine_api: slim::MachineApi,
    provider_id_of: impl Fn(&str) -> Option<Option<String>>,
) -> bool {
    machine_api != slim::MachineApi::ClusterApi
        || cluster_of(machine).is_none()
        || workload_cluster_of(machine, machines, provider_id_of).is_none()
}

/// The Nodes of this cluster that `machines` name (see [`names_node_here`]): a Node among them
/// is its Machine's to remediate, never a subject of its own. Decided once per Cluster.
pub fn machine_nodes(
    machines: &[Arc<slim::Machine>],
    machine_api: slim::MachineApi,
    provider_id_of: impl Fn(&str) -> Option<Option<String>>,
) -> HashSet<String> {
    let mut here: HashMap<(Option<String>, Option<&str>), bool> = HashMap::new();
    machines
        .iter()
        .filter(|m| {
            let key = (m.metadata.namespace.clone(), cluster_of(m));
            *here
                .entry(key)
                .or_insert_with(|| names_node_here(m, machines, machine_api, &provider_id_of))
        })
        .filter_map(|m| m.node_name().map(str::to_string))
        .collect()
}

/// The key the start gates count a remediation's subject by: its Machine's name, or
/// `Node/<name>` for a Node without a Machine (a Machine and a Node may share a name).
pub fn subject_key(spec: &crate::api::RemediationSpec) -> String {
    match &spec.machine_name {
        Some(machine) => machine.clone(),
        None => node_key(spec.subject_name()),
    }
}

/// The start gates' key of Machine-less Node `node` (see [`subject_key`]).
pub fn node_key(node: &str) -> String {
    format!("Node/{node}")
}

/// A reference to Node `name` (`uid` when known), for its Events.
pub fn node_reference(name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.into()),
        uid,
        ..ObjectReference::default()
    }
}

#[cfg(test)]
pub(in crate::remediation) mod tests {
    use super::*;
    use crate::remediation::decide::trust::machineless_node;
    use baremend_core::testing::mapping_at as mapping;

    /// A Cluster API Machine of Cluster `cluster` naming Node `node`, its host `provider`.
    fn capi_machine(name: &str, cluster: &str, node: &str, provider: &str) -> Arc<slim::Machine> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "capi"},
                "spec": {"clusterName": cluster, "providerID": provider},
                "status": {"nodeRef": {"name": node}},
            }))
            .unwrap(),
        )
    }

    /// Issue 39: a workload cluster's Node named like a Node here hid the Node here from the
    /// Machine-less controller (a Node with a Machine is never a subject of its own). The
    /// providerID tells them apart, as Cluster API and its Metal3 provider set it on both.
    #[test]
    fn a_workload_clusters_node_name_is_no_machine_of_the_node_here() {
        let machines = [
            capi_machine(
                "wc-0-worker-0",
                "wc-0",
                "worker-0",
                "metal3://capi/wc-0-host-0",
            ),
            capi_machine(
                "self-master-0",
                "self",
                "master-0",
                "metal3://capi/master-0",
            ),
        ];
        // This cluster has the self-hosted Cluster's master-0, and a worker-0 of its own (a
        // Machine-less Node, another host).
        let here = |name: &str| match name {
            "master-0" => Some(Some("metal3://capi/master-0".to_string())),
            "worker-0" => Some(Some("metal3://hosts/upi-worker-0".to_string())),
            _ => None,
        };
        let cluster_api = machine_nodes(&machines, slim::MachineApi::ClusterApi, here);
        assert_eq!(cluster_api, HashSet::from(["master-0".to_string()]));
        // OpenShift's Machines are all this cluster's.
        let openshift = machine_nodes(&machines, slim::MachineApi::OpenShift, |_| None);
        assert_eq!(openshift.len(), 2);
    }

    #[test]
    fn only_a_mapping_that_names_a_node_and_no_machine_makes_a_node_subject() {
        assert_eq!(
            machineless_node(&mapping("a", "m", None, Some("n1"), 0)),
            Some("n1")
        );
        assert_eq!(
            machineless_node(&mapping("a", "m", Some("w"), Some("n1"), 0)),
            None
        );
        assert_eq!(
            machineless_node(&mapping("a", "m", Some("w"), None, 0)),
            None
        );
        assert_eq!(
            machineless_node(&mapping("a", "m", None, Some(""), 0)),
            None
        );
    }

    #[test]
    fn a_node_subject_is_named_after_its_node_and_lives_beside_its_mapping() {
        let subject = Subject::Node(mapping("hosts", "bmc-7", None, Some("n7"), 0));
        assert_eq!(
            (subject.name(), subject.namespace()),
            ("n7".into(), "hosts".into())
        );
        assert!(subject.machine().is_none() && subject.machine_annotations().is_none());
        let target = subject.event_target("machine.openshift.io/v1beta1", Some("u".into()));
        assert_eq!(target.kind.as_deref(), Some("Node"));
        assert_eq!(target.name.as_deref(), Some("n7"));
    }

    #[test]
    fn control_plane_nodes_are_known_by_either_role_label() {
        let labels = |key: &str| BTreeMap::from([(key.to_string(), String::new())]);
        assert!(node_is_control_plane(&labels(NODE_ROLE_CONTROL_PLANE)));
        assert!(node_is_control_plane(&labels(NODE_ROLE_MASTER)));
        assert!(!node_is_control_plane(&labels(
            "node-role.kubernetes.io/worker"
        )));
    }
}
