//! Where a Cluster API Machine's Node lives: in the cluster baremend runs in (a self-hosted
//! management cluster, as after `clusterctl move`), or in the Machine's workload cluster,
//! reached through its Cluster's kubeconfig Secret.
//!
//! Expected flow: before a remediation's power-off request the pass asks [`cluster_nodes`]
//! over the Machines of the Cluster and the local Node cache; a Cluster whose Nodes are
//! elsewhere names a [`ClusterRef`], which the power-off request records and the proof
//! carries (`NodeIdentity` in the fence module).
//!
//! Guarantees: pure; decided over every Machine of the Cluster, so one deleted Node does not
//! move a self-hosted Cluster elsewhere, and a same-named Node of another host (another
//! providerID) does not bring a workload Cluster here.
//!
//! Caveats: a Cluster whose Machines name no Node yet is taken as here: there is no Node to
//! release either way.

use crate::api::slim;

/// A Cluster API Cluster whose Nodes live in its own (workload) API server: its namespace
/// (where its Machines and its kubeconfig Secret are) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterRef {
    /// The Cluster's namespace.
    pub namespace: String,
    /// The Cluster's name.
    pub name: String,
}

impl std::fmt::Display for ClusterRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl ClusterRef {
    /// The Secret Cluster API keeps the Cluster's admin kubeconfig in (key `value`).
    pub fn kubeconfig_secret(&self) -> String {
        format!("{}-kubeconfig", self.name)
    }
}

/// The label Cluster API puts on a Machine naming its Cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// The Cluster a Cluster API Machine belongs to: its `spec.clusterName`, else its
/// `cluster.x-k8s.io/cluster-name` label.
pub fn cluster_of(machine: &slim::Machine) -> Option<&str> {
    machine
        .spec
        .as_ref()
        .and_then(|s| s.cluster_name.as_deref())
        .or_else(|| {
            machine
                .metadata
                .labels
                .as_ref()?
                .get(CLUSTER_NAME_LABEL)
                .map(String::as_str)
        })
        .filter(|name| !name.is_empty())
}

/// Where the Nodes of a Cluster are, as this API server can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterNodes {
    /// A Machine of the Cluster names, in `status.nodeRef`, a Node this server has (the same
    /// name, and the same providerID where both carry one): the Cluster is self-hosted (a
    /// management cluster that manages itself, as after `clusterctl move`), so its Nodes are
    /// here.
    Here,
    /// Its Machines name Nodes, none of which this server has: they live in the workload
    /// cluster. Names one of them.
    Elsewhere(String),
    /// No Machine of it names a Node yet: there is no Node to release either way.
    Unnamed,
}

/// Where the Nodes of `machine`'s Cluster are: decided over every Machine of that Cluster in
/// its namespace, so one Node deleted (by a remediation, by hand) does not make a self-hosted
/// Cluster look like a workload cluster. `provider_id_of` says whether this server has a Node
/// of that name, and its providerID.
pub fn cluster_nodes(
    machine: &slim::Machine,
    machines: &[std::sync::Arc<slim::Machine>],
    provider_id_of: impl Fn(&str) -> Option<Option<String>>,
) -> ClusterNodes {
    let namespace = &machine.metadata.namespace;
    let cluster = cluster_of(machine);
    let siblings = machines.iter().map(|m| m.as_ref()).filter(|m| {
        &m.metadata.namespace == namespace && cluster.is_some() && cluster_of(m) == cluster
    });
    nodes_named(
        std::iter::once(machine)
            .chain(siblings)
            .filter_map(named_node),
        provider_id_of,
    )
}

/// A Machine's Node as [`nodes_named`] reads it: the Node's name, and the Machine's providerID.
pub type NamedNode<'m> = (&'m str, Option<&'m str>);

/// The Node `machine` names in `status.nodeRef`, with its providerID (None: it names none).
pub fn named_node(machine: &slim::Machine) -> Option<NamedNode<'_>> {
    let provider_id = machine.spec.as_ref().and_then(|s| s.provider_id.as_deref());
    Some((machine.node_name()?, provider_id))
}

/// Where the Nodes of one Cluster are, from the Node each of its Machines names (see
/// [`cluster_nodes`]; a caller that keeps the Machines' Nodes indexed by Cluster gives them
/// directly).
pub fn nodes_named<'m>(
    members: impl Iterator<Item = NamedNode<'m>>,
    provider_id_of: impl Fn(&str) -> Option<Option<String>>,
) -> ClusterNodes {
    let mut named = None;
    for (node, wanted) in members {
        match provider_id_of(node) {
            Some(found) if wanted.is_none() || found.is_none() || found.as_deref() == wanted => {
                return ClusterNodes::Here;
            }
            _ => named = named.or(Some(node.to_string())),
        }
    }
    named.map_or(ClusterNodes::Unnamed, ClusterNodes::Elsewhere)
}

/// The Cluster API Cluster of `machine`, in its namespace (None: it names none): the failure
/// domain the start gates count in.
pub fn machine_cluster(machine: &slim::Machine) -> Option<ClusterRef> {
    Some(ClusterRef {
        namespace: machine.metadata.namespace.clone().unwrap_or_default(),
        name: cluster_of(machine)?.to_string(),
    })
}

/// The workload clusters the Nodes of `machines` live in, each once, in order: what a
/// controller keeps connected so that a start does not wait for a connection (the Machines
/// grouped by Cluster once, then each group decided as [`cluster_nodes`] decides).
pub fn workload_clusters(
    machines: &[std::sync::Arc<slim::Machine>],
    provider_id_of: impl Fn(&str) -> Option<Option<String>>,
) -> Vec<ClusterRef> {
    let mut by_cluster: std::collections::BTreeMap<ClusterRef, Vec<&slim::Machine>> =
        std::collections::BTreeMap::new();
    for machine in machines {
        if let Some(cluster) = machine_cluster(machine) {
            by_cluster.entry(cluster).or_default().push(machine);
        }
    }
    by_cluster
        .into_iter()
        .filter(|(_, members)| {
            matches!(
                nodes_named(
                    members.iter().copied().filter_map(named_node),
                    &provider_id_of
                ),
                ClusterNodes::Elsewhere(_)
            )
        })
        .map(|(cluster, _)| cluster)
        .collect()
}

/// The workload cluster of `machine`'s Node: None when its Nodes are here (or named by
/// none of its Cluster's Machines yet), else its Cluster.
pub fn workload_cluster_of(
    machine: &slim::Machine,
    machines: &[std::sync::Arc<slim::Machine>],
    provider_id_of: impl Fn(&str) -> Option<Option<String>>,
) -> Option<ClusterRef> {
    match cluster_nodes(machine, machines, provider_id_of) {
        ClusterNodes::Here | ClusterNodes::Unnamed => None,
        ClusterNodes::Elsewhere(_) => machine_cluster(machine),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn machine(
        name: &str,
        cluster: &str,
        node: Option<&str>,
        provider: &str,
    ) -> Arc<slim::Machine> {
        let mut status = json!({});
        if let Some(node) = node {
            status = json!({"nodeRef": {"name": node}});
        }
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {
                    "name": name,
                    "namespace": "capi",
                    "labels": {CLUSTER_NAME_LABEL: cluster},
                },
                "spec": {"providerID": provider},
                "status": status,
            }))
            .unwrap(),
        )
    }

    /// The Nodes this server has, by name, with their providerIDs.
    fn server(nodes: &[(&str, Option<&str>)]) -> impl Fn(&str) -> Option<Option<String>> {
        let nodes: Vec<(String, Option<String>)> = nodes
            .iter()
            .map(|(n, p)| (n.to_string(), p.map(str::to_string)))
            .collect();
        move |name| {
            nodes
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, p)| p.clone())
        }
    }

    #[test]
    fn a_cluster_is_self_hosted_when_a_machine_of_it_names_a_node_this_server_has() {
        let w0 = machine("w0", "mgmt", Some("worker-0"), "metal3://capi/h0");
        let w1 = machine("w1", "mgmt", Some("worker-1"), "metal3://capi/h1");
        let fleet = vec![w0.clone(), w1.clone()];
        let here = server(&[("worker-0", Some("metal3://capi/h0"))]);
        assert_eq!(cluster_nodes(&w0, &fleet, &here), ClusterNodes::Here);
        // worker-1's Node is gone (deleted by a remediation, or by hand): its sibling's is
        // here, so the Cluster is still self-hosted.
        assert_eq!(cluster_nodes(&w1, &fleet, &here), ClusterNodes::Here);
        // A Node of the same name here without a providerID is taken as its own.
        let unlabelled = server(&[("worker-0", None)]);
        assert_eq!(cluster_nodes(&w0, &fleet, &unlabelled), ClusterNodes::Here);
    }

    #[test]
    fn a_cluster_whose_machines_name_only_nodes_this_server_lacks_lives_elsewhere() {
        let e0 = machine("e0", "edge-1", Some("worker-0"), "metal3://capi/e0");
        let e1 = machine("e1", "edge-1", Some("worker-1"), "metal3://capi/e1");
        // This cluster's own worker-0 is another host: same name, another providerID.
        let mgmt = machine("m0", "mgmt", Some("worker-0"), "metal3://capi/h0");
        let fleet = vec![e0.clone(), e1.clone(), mgmt.clone()];
        let here = server(&[("worker-0", Some("metal3://capi/h0"))]);
        assert_eq!(
            cluster_nodes(&e0, &fleet, &here),
            ClusterNodes::Elsewhere("worker-0".into())
        );
        assert_eq!(
            cluster_nodes(&e1, &fleet, &here),
            ClusterNodes::Elsewhere("worker-1".into())
        );
        assert_eq!(cluster_nodes(&mgmt, &fleet, &here), ClusterNodes::Here);
    }

    #[test]
    fn the_workload_clusters_of_a_fleet_are_those_whose_nodes_live_elsewhere_each_once() {
        let fleet = vec![
            machine("e1-0", "edge-1", Some("worker-0"), "metal3://capi/e1-0"),
            machine("e1-1", "edge-1", Some("worker-1"), "metal3://capi/e1-1"),
            machine("m0", "mgmt", Some("worker-0"), "metal3://capi/h0"),
            machine("e0-0", "edge-0", Some("worker-0"), "metal3://capi/e0-0"),
            machine("new", "edge-2", None, "metal3://capi/n0"),
        ];
        let here = server(&[("worker-0", Some("metal3://capi/h0"))]);
        let names: Vec<String> = workload_clusters(&fleet, &here)
            .into_iter()
            .map(|c| c.to_string())
            .collect();
        // The self-hosted one and the one naming no Node yet are not connected to.
        assert_eq!(names, ["capi/edge-0", "capi/edge-1"]);
        // The same Clusters as each Machine's own decision names.
        for m in &fleet {
            let own = workload_cluster_of(m, &fleet, &here).map(|c| c.to_string());
            assert_eq!(
                own.is_some(),
                names.contains(&own.clone().unwrap_or_default())
            );
        }
    }

    #[test]
    fn a_cluster_whose_machines_name_no_node_yet_is_undecided() {
        let new = machine("n0", "edge-2", None, "metal3://capi/n0");
        assert_eq!(
            cluster_nodes(&new, std::slice::from_ref(&new), server(&[])),
            ClusterNodes::Unnamed
        );
    }
}
