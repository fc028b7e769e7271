//! Cluster API Machines: the BareMetalHost of a Machine is found as metal3's provider finds
//! it, Machine → its `spec.infrastructureRef` (a Metal3Machine) → that object's
//! `metal3.io/BareMetalHost: <namespace>/<name>` annotation. The Node comes from the
//! Machine's `status.nodeRef`, as for OpenShift's Machines.
//!
//! Guarantees: read fresh when a remediation starts (the host is then recorded in the
//! Remediation); a missing or malformed reference is an `Unusable` (an Event, and the
//! strategies say the rest), never a guess; the Metal3Machine is read in the Machine's
//! namespace only, and no start passes the `HostNotOwned` gate unless the host is in the
//! Machine's namespace and its `spec.consumerRef` names that Metal3Machine, read fresh
//! ([`Pass::host_owner_gate`], whatever the strategy: the BMC of a host is the host's too). Caveats: a BareMetalHost's `consumerRef` names
//! the Metal3Machine, not the Machine, so a host's changes do not wake the Machine's pass;
//! the pass looks again at its poll interval while it waits for the host.

use std::collections::HashMap;

use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

use crate::api::slim::{self, MachineApi};
use crate::remediation::decide::gates::Held;
use crate::remediation::decide::observe::{HostRef, Unusable, machine_host};
use crate::remediation::decide::trust::host_consumed_by;
use crate::remediation::pass::Pass;
use crate::{Error, Result};

/// The kind a Cluster API Machine names for bare metal.
const METAL3_MACHINE: &str = "Metal3Machine";

/// metal3's Metal3Machine resource (`infrastructure.cluster.x-k8s.io/v1beta1`).
pub fn metal3_machine_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1beta1", METAL3_MACHINE),
        "metal3machines",
    )
}

impl Pass {
    /// The BareMetalHost of the Machine: from the Machine itself (OpenShift), or through its
    /// Metal3Machine (Cluster API). `Ok(Ok(None))`: it names none.
    pub(in crate::remediation) async fn host_of_machine(
        &self,
        machine_json: &serde_json::Value,
    ) -> Result<std::result::Result<Option<HostRef>, Unusable>> {
        if self.context.machine_api == MachineApi::OpenShift {
            return Ok(machine_host(machine_json));
        }
        let Some((namespace, name)) = self
            .subject
            .machine()
            .and_then(|m| metal3_machine_of(m, &self.namespace))
        else {
            return Ok(Ok(None));
        };
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.context.client.clone(),
            &namespace,
            &metal3_machine_resource(),
        );
        let Some(object) = api
            .get_opt(&name)
            .await
            .map_err(Error::kube("GetMetal3Machine"))?
        else {
            return Ok(Err(Unusable {
                field: "spec.infrastructureRef".into(),
                reason: format!("Metal3Machine {namespace}/{name} not found"),
            }));
        };
        let json = serde_json::to_value(&object).unwrap_or_default();
        Ok(metal3_machine_host(&name, &json))
    }

    /// The `HostNotOwned` gate of a Cluster API Machine: its `spec.infrastructureRef` in its own
    /// namespace, and the host recorded at the start in that namespace with a
    /// `spec.consumerRef` naming that Metal3Machine, read from the API server now. Other
    /// Machine APIs and Machines naming no Metal3Machine pass.
    pub(in crate::remediation) async fn host_owner_gate(
        &self,
        remediation: &crate::api::Remediation,
    ) -> Result<std::result::Result<(), Held>> {
        if self.context.machine_api != MachineApi::ClusterApi {
            return Ok(Ok(()));
        }
        let Some(reference) = self
            .subject
            .machine()
            .and_then(|m| m.spec.as_ref())
            .and_then(|s| s.infrastructure_ref.as_ref())
            .filter(|r| r.kind.as_deref() == Some(METAL3_MACHINE))
        else {
            return Ok(Ok(()));
        };
        let held = |why: String| Ok(Err(Held::HostNotOwned { why }));
        if let Some(other) = reference
            .namespace
            .as_deref()
            .filter(|n| *n != self.namespace)
        {
            return held(format!(
                "spec.infrastructureRef names Metal3Machine {other}/{}, outside the Machine's namespace {}",
                reference.name, self.namespace
            ));
        }
        let Some((host_ref, _)) = self.host(remediation) else {
            // No host: nothing of a BareMetalHost to power.
            return Ok(Ok(()));
        };
        let (host_namespace, host) = (host_ref.namespace.as_str(), host_ref.name.as_str());
        let consumer = if host_namespace == self.namespace {
            let hosts: Api<slim::BareMetalHost> =
                Api::namespaced(self.context.client.clone(), host_namespace);
            let Some(fresh) = hosts
                .get_opt(host)
                .await
                .map_err(Error::kube("GetBareMetalHost"))?
            else {
                return held(format!("BareMetalHost {host_namespace}/{host} not found"));
            };
            fresh.spec.and_then(|s| s.consumer_ref)
        } else {
            // Never read: another namespace's host is refused whatever it says.
            None
        };
        match host_consumed_by(
            &self.namespace,
            &reference.name,
            (host_namespace, host),
            consumer.as_ref(),
        ) {
            Ok(()) => Ok(Ok(())),
            Err(why) => held(why),
        }
    }

    /// Cluster API keeps a Machine's Node in its workload cluster; this controller reads
    /// Nodes in its own cluster only, so it starts a Cluster API remediation only where the
    /// Cluster is self-hosted ([`cluster_nodes`]). Elsewhere the start is held: the Node could
    /// be neither released nor awaited, and powering the host off would only reboot it.
    pub(in crate::remediation) fn workload_cluster_gate(&self) -> std::result::Result<(), Held> {
        if self.context.machine_api != MachineApi::ClusterApi {
            return Ok(());
        }
        let Some(machine) = self.subject.machine() else {
            return Ok(());
        };
        let machines = self.context.machines.state();
        let nodes = &self.context.nodes;
        let provider_id_of = |name: &str| {
            let node = nodes.get(&kube::runtime::reflector::ObjectRef::new(name))?;
            Some(node.spec.as_ref().and_then(|s| s.provider_id.clone()))
        };
        match cluster_nodes(machine, &machines, provider_id_of) {
            ClusterNodes::Here | ClusterNodes::Unnamed => Ok(()),
            ClusterNodes::Elsewhere(node) => Err(Held::WorkloadCluster {
                cluster: cluster_of(machine).unwrap_or("(unnamed)").to_string(),
                node,
            }),
        }
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
        .or_else(|| machine.labels().get(CLUSTER_NAME_LABEL).map(String::as_str))
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
    let namespace = machine.namespace();
    let cluster = cluster_of(machine);
    let siblings = machines
        .iter()
        .map(|m| m.as_ref())
        .filter(|m| m.namespace() == namespace && cluster.is_some() && cluster_of(m) == cluster);
    let mut named = None;
    for sibling in std::iter::once(machine).chain(siblings) {
        let Some(node) = sibling.node_name() else {
            continue;
        };
        let wanted = sibling.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        match provider_id_of(node) {
            Some(found) if wanted.is_none() || found.is_none() || found.as_deref() == wanted => {
                return ClusterNodes::Here;
            }
            _ => named = named.or(Some(node.to_string())),
        }
    }
    named.map_or(ClusterNodes::Unnamed, ClusterNodes::Elsewhere)
}

/// The Metal3Machine of a Cluster API Machine in `namespace`, if it names one there:
/// `(namespace, name)` of its `spec.infrastructureRef` when that is a Metal3Machine. Same
/// namespace only (cluster-api-provider-metal3 enforces it too): a reference into another
/// namespace names nothing here, and the `HostNotOwned` gate tells why.
pub fn metal3_machine_of(machine: &slim::Machine, namespace: &str) -> Option<(String, String)> {
    let reference = machine.spec.as_ref()?.infrastructure_ref.as_ref()?;
    if reference.kind.as_deref() != Some(METAL3_MACHINE)
        || reference
            .namespace
            .as_deref()
            .is_some_and(|n| n != namespace)
    {
        return None;
    }
    Some((namespace.to_string(), reference.name.clone()))
}

/// The BareMetalHost a Metal3Machine (`name`, read as JSON) names. It carries the annotation
/// the OpenShift Machine carries; its providerID (`metal3://…`) is not the BareMetalHost form
/// and is passed over.
pub fn metal3_machine_host(
    name: &str,
    metal3_machine: &serde_json::Value,
) -> std::result::Result<Option<HostRef>, Unusable> {
    machine_host(metal3_machine).map_err(|unusable| Unusable {
        field: format!("Metal3Machine {name}: {}", unusable.field),
        reason: unusable.reason,
    })
}

/// Each Cluster API Machine's BareMetalHost (by `namespace/name`), through its Metal3Machine,
/// read with a GET as when a remediation starts (the controller's grant on metal3machines is
/// `get`): for `baremend check` and the periodic fencing readiness check, whose Machines carry
/// no host of their own. A Metal3Machine that is gone or names no usable host is the Machine's
/// answer (an error text), not the whole call's.
pub async fn hosts_of_machines(
    client: &kube::Client,
    machines: &[std::sync::Arc<slim::Machine>],
) -> Result<HashMap<String, std::result::Result<Option<HostRef>, String>>> {
    let mut resolved = HashMap::new();
    for machine in machines {
        let namespace = machine.namespace().unwrap_or_default();
        let key = format!("{namespace}/{}", machine.name_any());
        let host = match metal3_machine_of(machine, &namespace) {
            None => Ok(None),
            Some((namespace, name)) => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &namespace, &metal3_machine_resource());
                match api
                    .get_opt(&name)
                    .await
                    .map_err(Error::kube("GetMetal3Machine"))?
                {
                    None => Err(format!("Metal3Machine {namespace}/{name} not found")),
                    Some(object) => {
                        let json = serde_json::to_value(&object).unwrap_or_default();
                        metal3_machine_host(&name, &json).map_err(|e| format!("Machine {key}: {e}"))
                    }
                }
            }
        };
        resolved.insert(key, host);
    }
    Ok(resolved)
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
    fn a_cluster_whose_machines_name_no_node_yet_is_undecided() {
        let new = machine("n0", "edge-2", None, "metal3://capi/n0");
        assert_eq!(
            cluster_nodes(&new, std::slice::from_ref(&new), server(&[])),
            ClusterNodes::Unnamed
        );
    }
}
