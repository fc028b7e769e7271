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
//! ([`CapiHosts::host_owner_gate`], whatever the strategy: the BMC of a host is the host's too). Caveats: a BareMetalHost's `consumerRef` names
//! the Metal3Machine, not the Machine, so a host's changes do not wake the Machine's pass;
//! the pass looks again at its poll interval while it waits for the host.

use std::collections::HashMap;

use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::ObjectRef;

use crate::api::slim::{self, MachineApi};
use crate::remediation::decide::gates::Held;
use crate::remediation::decide::observe::{HostRef, Unusable, named_host};
use crate::remediation::decide::trust::{host_consumed_by, host_consuming, trusted_machine_host};
use crate::remediation::pass::Pass;
use crate::runtime::read::GetPresent;
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

/// The pass's reads of a Machine's host through Cluster API or OpenShift, and their gates. Made
/// by `CapiHosts::of(pass)` where needed, so that a call names the file it goes to.
#[derive(Clone, Copy)]
pub(crate) struct CapiHosts<'p> {
    pass: &'p Pass,
}

impl<'p> CapiHosts<'p> {
    /// The CapiHosts of `pass`: its methods read and act through it.
    pub(crate) fn of(pass: &'p Pass) -> Self {
        CapiHosts { pass }
    }

    /// The BareMetalHost of the Machine: from the Machine itself (OpenShift), or through its
    /// Metal3Machine (Cluster API): the one host of the cache that it consumes
    /// ([`host_consuming`]), else the host the Metal3Machine, read, names. `Ok(Ok(None))`: it
    /// names none.
    pub(in crate::remediation) async fn host_of_machine(
        self,
        machine: &slim::Machine,
    ) -> Result<std::result::Result<Option<HostRef>, Unusable>> {
        if self.pass.context.settings.machine_api == MachineApi::OpenShift {
            return Ok(self.openshift_machine_host(machine));
        }
        let Some((namespace, name)) = self
            .pass
            .subject
            .machine()
            .and_then(|m| metal3_machine_of(m, &self.pass.namespace))
        else {
            return Ok(Ok(None));
        };
        // The host that claims the Metal3Machine in the cache spares a read before the
        // creation; the fresh read of the host before any power request judges the claim.
        // The claiming hosts are found by the index kept beside the cache, not a walk.
        let caches = &self.pass.context.caches;
        let claiming: Vec<_> = caches
            .host_consumers
            .naming(&(namespace.clone(), name.clone()))
            .into_iter()
            .filter_map(|(ns, host)| caches.hosts.get(&ObjectRef::new(&host).within(&ns)))
            .collect();
        if let Some(host) = host_consuming(claiming.iter().map(|h| h.as_ref()), &namespace, &name) {
            return Ok(Ok(Some(host)));
        }
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.pass.context.clients.kube.clone(),
            &namespace,
            &metal3_machine_resource(),
        );
        let Some(object) = api
            .get_present(&name)
            .await
            .map_err(Error::kube("GetMetal3Machine"))?
        else {
            return Ok(Err(Unusable {
                field: "spec.infrastructureRef".into(),
                reason: format!("Metal3Machine {namespace}/{name} not found"),
            }));
        };
        Ok(metal3_machine_host(&name, &object))
    }

    /// The BareMetalHost an OpenShift Machine names, honoured only where the policy trusts it
    /// (see [`trusted_machine_host`]).
    pub(in crate::remediation) fn openshift_machine_host(
        self,
        machine: &slim::Machine,
    ) -> std::result::Result<Option<HostRef>, Unusable> {
        trusted_machine_host(
            machine,
            &self.pass.namespace,
            &self.pass.policy.trust.machine_host_namespaces,
        )
    }

    /// The `HostNotOwned` gate of a Cluster API Machine: its `spec.infrastructureRef` in its own
    /// namespace, and the host recorded at the start in that namespace with a
    /// `spec.consumerRef` naming that Metal3Machine, read from the API server now. Other
    /// Machine APIs and Machines naming no Metal3Machine pass.
    pub(in crate::remediation) fn host_owner_gate(
        self,
        remediation: &crate::api::Remediation,
        fresh_host: &Option<Option<slim::BareMetalHost>>,
    ) -> std::result::Result<(), Held> {
        if self.pass.context.settings.machine_api != MachineApi::ClusterApi {
            return Ok(());
        }
        let Some(reference) = self
            .pass
            .subject
            .machine()
            .and_then(|m| m.spec.as_ref())
            .and_then(|s| s.infrastructure_ref.as_ref())
            .filter(|r| r.kind.as_deref() == Some(METAL3_MACHINE))
        else {
            return Ok(());
        };
        let held = |why: String| Err(Held::HostNotOwned { why });
        if let Some(other) = reference
            .namespace
            .as_deref()
            .filter(|n| *n != self.pass.namespace)
        {
            return held(format!(
                "spec.infrastructureRef names Metal3Machine {other}/{}, outside the Machine's namespace {}",
                reference.name, self.pass.namespace
            ));
        }
        let Some((host_ref, _)) = self.pass.host(remediation) else {
            // No host: nothing of a BareMetalHost to power.
            return Ok(());
        };
        let (host_namespace, host) = (host_ref.namespace.as_str(), host_ref.name.as_str());
        let consumer = if host_namespace == self.pass.namespace {
            let Some(Some(fresh)) = fresh_host else {
                return held(format!("BareMetalHost {host_namespace}/{host} not found"));
            };
            fresh.spec.as_ref().and_then(|s| s.consumer_ref.clone())
        } else {
            // Not looked at: another namespace's host is refused whatever it says.
            None
        };
        match host_consumed_by(
            &self.pass.namespace,
            &reference.name,
            (host_namespace, host),
            consumer.as_ref(),
        ) {
            Ok(()) => Ok(()),
            Err(why) => held(why),
        }
    }

    /// The `WorkloadCluster` gate: a Cluster API Machine whose Node lives in a workload
    /// cluster starts only while that cluster answers (its kubeconfig Secret read, its API
    /// server probed, its Nodes listed): otherwise the Node could be neither released nor
    /// awaited, and powering the host off would only reboot it.
    pub(in crate::remediation) async fn workload_cluster_gate(
        self,
        remediation: &crate::api::Remediation,
    ) -> std::result::Result<(), Held> {
        let Some(cluster) = self.pass.node_cluster(remediation) else {
            return Ok(());
        };
        match self.pass.context.clients.workloads.connect(&cluster).await {
            Ok(_) => Ok(()),
            Err(error) => Err(Held::WorkloadCluster {
                cluster: cluster.to_string(),
                node: remediation.spec.node_name.clone().unwrap_or_default(),
                why: match error {
                    Error::WorkloadCluster { reason, .. } => reason,
                    other => other.to_string(),
                },
            }),
        }
    }
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

/// The BareMetalHost a Metal3Machine (`name`) names. It carries the annotation the OpenShift
/// Machine carries; its providerID (`metal3://…`) is not the BareMetalHost form and is passed
/// over. A Metal3Machine is read untyped (we keep no type of it): its providerID is the one
/// field read by path.
pub fn metal3_machine_host(
    name: &str,
    metal3_machine: &DynamicObject,
) -> std::result::Result<Option<HostRef>, Unusable> {
    let provider_id = metal3_machine
        .data
        .pointer("/spec/providerID")
        .and_then(serde_json::Value::as_str);
    named_host(provider_id, metal3_machine.metadata.annotations.as_ref()).map_err(|unusable| {
        Unusable {
            field: format!("Metal3Machine {name}: {}", unusable.field),
            reason: unusable.reason,
        }
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
                    .get_present(&name)
                    .await
                    .map_err(Error::kube("GetMetal3Machine"))?
                {
                    None => Err(format!("Metal3Machine {namespace}/{name} not found")),
                    Some(object) => metal3_machine_host(&name, &object)
                        .map_err(|e| format!("Machine {key}: {e}")),
                }
            }
        };
        resolved.insert(key, host);
    }
    Ok(resolved)
}
